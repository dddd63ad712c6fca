// The safetensors format (Hugging Face): an 8-byte little-endian header
// length, a JSON header {name: {"dtype", "shape", "data_offsets": [b, e]},
// "__metadata__": {string: string}}, then the raw little-endian tensor data.
// Tide's trainer writes and reads F32 tensors only (nanoGPT names; see
// docs/trainer.md). JSON through nlohmann-json.
//
// Errors are thrown as tide_train::Error (io/error.h) with a message naming
// the file and what is wrong (truncated, bad header, overlapping or
// out-of-range offsets, a dtype other than F32, ...); nothing here exits.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tide_train {

struct Tensor {
  std::vector<int64_t> shape;
  std::vector<float> data;  // row major, product(shape) elements
};

struct TensorFile {
  std::map<std::string, Tensor> tensors;        // by name
  std::map<std::string, std::string> metadata;  // "__metadata__"
};

// Reads and validates the whole file.
TensorFile read_safetensors(const std::string& path);
// Writes `file` to `path` (not atomic by itself: checkpoint.h makes it so),
// then fsyncs it. Tensors are stored in name order.
void write_safetensors(const std::string& path, const TensorFile& file);

}  // namespace tide_train
