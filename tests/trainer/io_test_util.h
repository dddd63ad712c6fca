// Helpers shared by the trainer file-layer tests (test_io.cc, test_checkpoint.cc).
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <utility>

#include "data/dataset.h"
#include "io/checkpoint.h"
#include "io/error.h"
#include "io/safetensors.h"

namespace tide_train::test {

namespace fs = std::filesystem;

// A fresh folder, removed with everything in it at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "tide_io_XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

inline std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The message of the Error that `f` throws ("" when it throws none).
template <typename F>
std::string ErrorOf(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_ERROR_HAS(stmt, needle)                       \
  do {                                                       \
    const std::string msg_ = ErrorOf([&] { (void)(stmt); }); \
    EXPECT_NE(msg_, "") << "no Error from " #stmt;           \
    EXPECT_NE(msg_.find(needle), std::string::npos) << msg_; \
  } while (0)

inline void ExpectSameFile(const TensorFile& a, const TensorFile& b) {
  EXPECT_EQ(a.metadata, b.metadata);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (const auto& [name, t] : a.tensors) {
    auto it = b.tensors.find(name);
    ASSERT_NE(it, b.tensors.end()) << name;
    EXPECT_EQ(t.shape, it->second.shape) << name;
    ASSERT_EQ(t.data.size(), it->second.data.size()) << name;
    if (t.data.empty()) continue;  // memcmp wants real pointers
    EXPECT_EQ(0, std::memcmp(t.data.data(), it->second.data.data(), t.data.size() * 4)) << name;
  }
}

inline Tensor Filled(std::vector<int64_t> shape, float base) {
  Tensor t;
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  t.shape = std::move(shape);
  for (size_t i = 0; i < n; ++i) t.data.push_back(base + 0.25f * static_cast<float>(i));
  return t;
}

inline TensorFile SampleFile() {
  TensorFile f;
  f.tensors["transformer.wte.weight"] = Filled({4, 3}, 1.0f);
  f.tensors["scalar"] = Filled({}, -2.5f);
  f.tensors["empty"] = Filled({0, 5}, 0.0f);
  f.tensors["lm_head.bias"] = Filled({7}, 100.0f);
  f.tensors["lm_head.bias"].data[2] = std::nanf("");
  f.tensors["lm_head.bias"].data[3] = -INFINITY;
  f.metadata = {{"format", "pt"}, {"tide", "1"}};
  return f;
}

// A safetensors file: the header length, `header` as given, then `data`.
inline std::string Raw(const std::string& header, const std::string& data) {
  const uint64_t n = header.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

inline std::string Floats(std::initializer_list<float> v) {
  std::string out(v.size() * 4, '\0');
  std::memcpy(out.data(), std::data(v), out.size());
  return out;
}

}  // namespace tide_train::test
