// Checkpoints of tide-train: layout independent (whole tensors by nanoGPT
// name), atomic, found by step.
//
// A checkpoint is a folder DIR/step_<8-digit step>/ holding
//   model.safetensors   every parameter, whole (unsharded), nanoGPT names
//   optim.safetensors   the optimizer's moments: <name>.exp_avg, <name>.exp_avg_sq
//   state.json          step, RNG and data positions, configuration, ...
//                       (the caller's JSON object, stored as given)
//   extra/<key>.bin     opaque per-rank blobs (the reducer's state of each
//                       data-parallel rank, compression residuals), by key
//   COMPLETE            written last: its presence marks a whole checkpoint;
//                       it lists "<fnv1a-64 hex> <bytes> <file>" of every file,
//                       checked by load (a changed byte fails the load)
// Writing goes to DIR/.tmp_step_<step>_<pid>/, fsyncs every file and the
// folder, renames it to step_<step>, then fsyncs DIR: a crash at any point
// leaves either no checkpoint of that step or a complete one. A stale
// temporary folder is ignored (and removed by the next save).
//
// Errors: tide_train::Error (io/error.h) naming the file.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace tide_train {

struct Checkpoint {
  int64_t step = 0;
  TensorFile model;
  TensorFile optim;
  std::string state_json;                             // a JSON object (text)
  std::map<std::string, std::vector<uint8_t>> extra;  // key → blob
};

// Saves atomically as DIR/step_<step> (DIR is created when missing). An
// existing complete checkpoint of the same step is replaced only after the
// new one is complete. keep_last > 0: older complete checkpoints beyond the
// newest keep_last are removed afterwards.
void save_checkpoint(const std::string& dir, const Checkpoint& ckpt, int keep_last = 0);
// The step of the newest complete checkpoint in DIR, or nullopt when DIR is
// missing or holds none.
std::optional<int64_t> newest_checkpoint(const std::string& dir);
// Loads DIR/step_<step>, validating every file (a truncated or corrupt file
// is an Error naming it).
Checkpoint load_checkpoint(const std::string& dir, int64_t step);

}  // namespace tide_train
