// The trainer's file layer: safetensors (io/safetensors.h), checkpoints
// (io/checkpoint.h) and the training text with its window sampler
// (data/dataset.h). Expected sampler values were computed independently with
// python3 (64-bit masked arithmetic) and are hardcoded here.
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

namespace tide_train {
namespace {

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

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::string ReadBytes(const std::string& path) {
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

void ExpectSameFile(const TensorFile& a, const TensorFile& b) {
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

Tensor Filled(std::vector<int64_t> shape, float base) {
  Tensor t;
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  t.shape = std::move(shape);
  for (size_t i = 0; i < n; ++i) t.data.push_back(base + 0.25f * static_cast<float>(i));
  return t;
}

TensorFile SampleFile() {
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
std::string Raw(const std::string& header, const std::string& data) {
  const uint64_t n = header.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

std::string Floats(std::initializer_list<float> v) {
  std::string out(v.size() * 4, '\0');
  std::memcpy(out.data(), std::data(v), out.size());
  return out;
}

// ---- safetensors ------------------------------------------------------------

TEST(Safetensors, RoundTrip) {
  TempDir tmp;
  const std::string path = tmp / "a.safetensors";
  const TensorFile f = SampleFile();
  write_safetensors(path, f);
  ExpectSameFile(f, read_safetensors(path));
  // The reference layout: the data section starts at a multiple of 8.
  const std::string raw = ReadBytes(path);
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  EXPECT_EQ(n % 8, 0U);
  EXPECT_EQ(raw.size(), 8 + n + (12 + 1 + 0 + 7) * 4);
  EXPECT_EQ(raw.substr(8, 16), "{\"__metadata__\":");
}

TEST(Safetensors, EmptyFileRoundTrip) {
  TempDir tmp;
  write_safetensors(tmp / "e", TensorFile{});
  EXPECT_EQ(ReadBytes(tmp / "e"), Raw("{}      ", ""));
  TensorFile back = read_safetensors(tmp / "e");
  EXPECT_TRUE(back.tensors.empty());
  EXPECT_TRUE(back.metadata.empty());
}

TEST(Safetensors, ReadsPythonLayout) {
  // As Python's safetensors writes it: metadata first, keys in its order,
  // tensor data not in name order, space padding after the JSON.
  TempDir tmp;
  const std::string header =
      "{\"__metadata__\":{\"format\":\"pt\"},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"a\":{\"data_offsets\":[8,32],\"shape\":[2,3],\"dtype\":\"F32\"}}    ";
  WriteBytes(tmp / "py", Raw(header, Floats({7, 8, 1, 2, 3, 4, 5, 6})));
  TensorFile f = read_safetensors(tmp / "py");
  EXPECT_EQ(f.metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
  ASSERT_EQ(f.tensors.size(), 2U);
  EXPECT_EQ(f.tensors["a"].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(f.tensors["a"].data, (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(f.tensors["b"].shape, (std::vector<int64_t>{2}));
  EXPECT_EQ(f.tensors["b"].data, (std::vector<float>{7, 8}));
}

TEST(Safetensors, RejectsCorruptHeaders) {
  TempDir tmp;
  const std::string path = tmp / "bad.safetensors";
  // {header, what the message must say}; the data section is 8 bytes.
  auto t = [](const std::string& fields) { return "{\"t\":{" + fields + "}}"; };
  const std::string f32 = R"("dtype":"F32",)";
  const std::pair<std::string, std::string> cases[] = {
      {R"({"t":)", "invalid JSON"},
      {"{} x", "invalid JSON"},
      {"{\"t\xff\":{}}", "invalid JSON"},
      {"[]", "header is not a JSON object"},
      {R"({"t":[]})", "entry is not a JSON object"},
      {t(R"("shape":[2],"data_offsets":[0,8])"), "missing \"dtype\""},
      {t(R"("dtype":1,"shape":[2],"data_offsets":[0,8])"), "\"dtype\" is not a string"},
      {t(R"("dtype":"F16","shape":[4],"data_offsets":[0,8])"), "dtype F16 is not supported"},
      {t(f32 + R"("data_offsets":[0,8])"), "missing \"shape\""},
      {t(f32 + R"("shape":2,"data_offsets":[0,8])"), "\"shape\" is not an array"},
      {t(f32 + R"("shape":["2"],"data_offsets":[0,8])"), "not a non-negative integer"},
      {t(f32 + R"("shape":[-2],"data_offsets":[0,8])"), "not a non-negative integer"},
      {t(f32 + R"("shape":[2.0],"data_offsets":[0,8])"), "not a non-negative integer"},
      {t(f32 + R"("shape":[2])"), "missing \"data_offsets\""},
      {t(f32 + R"("shape":[2],"data_offsets":[0,8,8])"), "two non-negative integers"},
      {t(f32 + R"("shape":[2],"data_offsets":[-1,8])"), "two non-negative integers"},
      {t(f32 + R"("shape":[0],"data_offsets":[8,0])"), "end before they begin"},
      {t(f32 + R"("shape":[3],"data_offsets":[0,8])"), "needs 12 bytes"},
      {t(f32 + R"("shape":[4611686018427387904,4],"data_offsets":[0,8])"), "more than 2^64"},
      {t(f32 + R"("shape":[4],"data_offsets":[0,16])"), "out of range"},
      {t(f32 + R"("shape":[1],"data_offsets":[4,8])"), "belong to no tensor"},
      {t(f32 + R"("shape":[1],"data_offsets":[0,4])"), "tensors cover 4 bytes"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
       R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
       "overlaps"},
      {R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
       R"("t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
       "duplicate key \"t\""},
      {t(f32 + R"("shape":[2],"shape":[2],"data_offsets":[0,8])"), "duplicate key \"shape\""},
      {R"({"__metadata__":{"k":"a","k":"b"}})", "duplicate key \"k\""},
      {R"({"__metadata__":[]})", "\"__metadata__\" is not a JSON object"},
      {R"({"__metadata__":{"k":1}})", "value of \"k\" is not a string"},
  };
  auto expect_error = [&](const std::string& raw, const std::string& needle) {
    WriteBytes(path, raw);
    const std::string msg = ErrorOf([&] { read_safetensors(path); });
    EXPECT_NE(msg.find(path), std::string::npos) << needle << ": " << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << needle << ": " << msg;
  };
  for (const auto& [header, needle] : cases) expect_error(Raw(header, Floats({1, 2})), needle);
  expect_error("", "truncated");
  expect_error("abc", "truncated");
  expect_error(Raw("{}", "").substr(0, 7), "truncated");
  expect_error(Raw(R"({"t":1})", "").substr(0, 12), "header length 7 beyond");
  EXPECT_ERROR_HAS(read_safetensors(tmp / "missing"), "cannot open");
  EXPECT_ERROR_HAS(read_safetensors(tmp.path()), "not a regular file");
}

TEST(Safetensors, EveryTruncationThrows) {
  TempDir tmp;
  write_safetensors(tmp / "full", SampleFile());
  const std::string raw = ReadBytes(tmp / "full");
  for (size_t len = 0; len < raw.size(); ++len) {
    WriteBytes(tmp / "cut", raw.substr(0, len));
    EXPECT_THROW(read_safetensors(tmp / "cut"), Error) << "length " << len;
  }
}

TEST(Safetensors, ByteFlipsNeverCrash) {
  // Any single changed header byte either still reads or throws Error.
  TempDir tmp;
  write_safetensors(tmp / "full", SampleFile());
  const std::string raw = ReadBytes(tmp / "full");
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  for (size_t i = 0; i < 8 + n; ++i) {
    for (char v : {'\0', '9', '"', ']', '\xff'}) {
      std::string bad = raw;
      bad[i] = v;
      WriteBytes(tmp / "flip", bad);
      try {
        read_safetensors(tmp / "flip");
      } catch (const Error&) {
      }
    }
  }
}

TEST(Safetensors, WriteRejectsInconsistentTensors) {
  TempDir tmp;
  TensorFile f;
  f.tensors["x"] = Filled({2, 2}, 0);
  f.tensors["x"].data.pop_back();
  EXPECT_ERROR_HAS(write_safetensors(tmp / "w", f), "needs 4");
  f.tensors["x"] = Filled({}, 0);
  f.tensors["x"].shape = {-1};
  EXPECT_ERROR_HAS(write_safetensors(tmp / "w", f), "negative");
  f.tensors.clear();
  f.tensors["__metadata__"] = Filled({1}, 0);
  EXPECT_ERROR_HAS(write_safetensors(tmp / "w", f), "__metadata__");
  EXPECT_ERROR_HAS(write_safetensors(tmp / "no/such/dir/w", SampleFile()), "no/such/dir/w");
}

TEST(Safetensors, ReadsTenMegabytesFast) {
  TempDir tmp;
  TensorFile f;
  f.tensors["big"] = Filled({1024, 2560}, 3.0f);
  write_safetensors(tmp / "big", f);
  const auto t0 = std::chrono::steady_clock::now();
  TensorFile back = read_safetensors(tmp / "big");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ExpectSameFile(f, back);
  EXPECT_LT(s, 2.0) << "reading 10 MB took " << s << " s";
}

// ---- checkpoints ------------------------------------------------------------

// A checkpoint whose every part depends on `step`.
Checkpoint MakeCkpt(int64_t step) {
  Checkpoint c;
  c.step = step;
  const float s = static_cast<float>(step);
  c.model.tensors["transformer.wte.weight"] = Filled({64, 32}, s);
  c.model.tensors["transformer.ln_f.bias"] = Filled({32}, -s);
  c.model.metadata["format"] = "pt";
  c.optim.tensors["transformer.wte.weight.exp_avg"] = Filled({64, 32}, 2 * s);
  c.optim.tensors["transformer.wte.weight.exp_avg_sq"] = Filled({64, 32}, 3 * s);
  c.state_json = "{\"step\": " + std::to_string(step) + ", \"rng\": [1, 2, 3]}\n";
  c.extra["rank0.reducer"] = std::vector<uint8_t>(100, static_cast<uint8_t>(step));
  c.extra["rank-1_x"] = {};
  return c;
}

void ExpectSameCkpt(const Checkpoint& a, const Checkpoint& b) {
  EXPECT_EQ(a.step, b.step);
  ExpectSameFile(a.model, b.model);
  ExpectSameFile(a.optim, b.optim);
  EXPECT_EQ(a.state_json, b.state_json);
  EXPECT_EQ(a.extra, b.extra);
}

std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(Checkpoint, SaveLoadRoundTrip) {
  TempDir tmp;
  const std::string dir = tmp / "ck/nested";  // created when missing
  save_checkpoint(dir, MakeCkpt(5));
  EXPECT_EQ(Names(dir), (std::vector<std::string>{"step_00000005"}));
  EXPECT_EQ(Names(dir + "/step_00000005"),
            (std::vector<std::string>{"COMPLETE", "extra", "model.safetensors", "optim.safetensors",
                                      "state.json"}));
  EXPECT_EQ(Names(dir + "/step_00000005/extra"),
            (std::vector<std::string>{"rank-1_x.bin", "rank0.reducer.bin"}));
  EXPECT_EQ(newest_checkpoint(dir), 5);
  ExpectSameCkpt(MakeCkpt(5), load_checkpoint(dir, 5));
  save_checkpoint(dir, MakeCkpt(123456789));  // more than 8 digits
  EXPECT_EQ(newest_checkpoint(dir), 123456789);
  ExpectSameCkpt(MakeCkpt(123456789), load_checkpoint(dir, 123456789));
}

TEST(Checkpoint, NewestIgnoresIncompleteAndForeignFolders) {
  TempDir tmp;
  const std::string& dir = tmp.path();
  EXPECT_EQ(newest_checkpoint(tmp / "missing"), std::nullopt);
  EXPECT_EQ(newest_checkpoint(dir), std::nullopt);
  for (int64_t s : {3, 10, 7}) save_checkpoint(dir, MakeCkpt(s));
  EXPECT_EQ(newest_checkpoint(dir), 10);
  fs::create_directory(dir + "/step_00000020");  // no COMPLETE
  for (const char* name : {".tmp_step_30_123", "step_40", "step_0000000050", "step_abc"}) {
    fs::create_directory(dir + "/" + name);
    WriteBytes(dir + "/" + name + "/COMPLETE", "");
  }
  WriteBytes(dir + "/step_00000060", "a file");
  EXPECT_EQ(newest_checkpoint(dir), 10);
  EXPECT_ERROR_HAS(load_checkpoint(dir, 20), "incomplete");
  EXPECT_ERROR_HAS(load_checkpoint(dir, 11), "no such checkpoint");
  save_checkpoint(dir, MakeCkpt(11));  // removes the stale temporary folder
  EXPECT_FALSE(fs::exists(dir + "/.tmp_step_30_123"));
  EXPECT_TRUE(fs::exists(dir + "/step_00000020"));
  EXPECT_EQ(newest_checkpoint(dir), 11);
  EXPECT_ERROR_HAS(newest_checkpoint(dir + "/step_00000060"), "not a folder");
}

TEST(Checkpoint, KeepLastPrunesOlderOnes) {
  TempDir tmp;
  const std::string& dir = tmp.path();
  for (int64_t s = 1; s <= 5; ++s) save_checkpoint(dir, MakeCkpt(s), 2);
  EXPECT_EQ(Names(dir), (std::vector<std::string>{"step_00000004", "step_00000005"}));
  save_checkpoint(dir, MakeCkpt(3), 2);  // the one just saved is never pruned
  EXPECT_EQ(Names(dir),
            (std::vector<std::string>{"step_00000003", "step_00000004", "step_00000005"}));
  save_checkpoint(dir, MakeCkpt(6), 1);
  EXPECT_EQ(Names(dir), (std::vector<std::string>{"step_00000006"}));
  ExpectSameCkpt(MakeCkpt(6), load_checkpoint(dir, 6));
}

TEST(Checkpoint, ReplacesTheSameStep) {
  TempDir tmp;
  const std::string& dir = tmp.path();
  save_checkpoint(dir, MakeCkpt(5));
  Checkpoint b = MakeCkpt(5);
  b.state_json = "{\"second\": true}";
  b.extra.clear();
  save_checkpoint(dir, b);
  EXPECT_EQ(Names(dir), (std::vector<std::string>{"step_00000005"}));
  ExpectSameCkpt(b, load_checkpoint(dir, 5));
}

TEST(Checkpoint, RestoresAnInterruptedReplacement) {
  // The fallback replacement (no RENAME_EXCHANGE) crashed between its two
  // renames: the old checkpoint is .old_step_9_<pid>, step_9 is missing.
  TempDir tmp;
  const std::string& dir = tmp.path();
  save_checkpoint(dir, MakeCkpt(9));
  fs::rename(dir + "/step_00000009", dir + "/.old_step_9_4242");
  EXPECT_EQ(newest_checkpoint(dir), std::nullopt);
  save_checkpoint(dir, MakeCkpt(10));
  EXPECT_EQ(Names(dir), (std::vector<std::string>{"step_00000009", "step_00000010"}));
  ExpectSameCkpt(MakeCkpt(9), load_checkpoint(dir, 9));
}

TEST(Checkpoint, LoadRejectsCorruptFiles) {
  TempDir tmp;
  const std::string& dir = tmp.path();
  const std::string f = dir + "/step_00000004/";
  auto fresh = [&] {
    fs::remove_all(f);
    save_checkpoint(dir, MakeCkpt(4));
  };
  fresh();
  const std::string model = ReadBytes(f + "model.safetensors");
  WriteBytes(f + "model.safetensors", model.substr(0, model.size() - 1));
  EXPECT_ERROR_HAS(load_checkpoint(dir, 4), f + "model.safetensors");
  fresh();
  WriteBytes(f + "optim.safetensors", "garbage!garbage!");
  EXPECT_ERROR_HAS(load_checkpoint(dir, 4), f + "optim.safetensors");
  fresh();
  fs::remove(f + "optim.safetensors");
  EXPECT_ERROR_HAS(load_checkpoint(dir, 4), f + "optim.safetensors");
  fresh();
  WriteBytes(f + "state.json", "{\"step\": ");
  EXPECT_ERROR_HAS(load_checkpoint(dir, 4), "state.json is not valid JSON");
  WriteBytes(f + "state.json", "[1, 2]");
  EXPECT_ERROR_HAS(load_checkpoint(dir, 4), "state.json is not a JSON object");
  fresh();
  WriteBytes(f + "extra/bad name.bin", "x");
  EXPECT_ERROR_HAS(load_checkpoint(dir, 4), "bad name.bin");
  fresh();
  fs::remove(f + "COMPLETE");
  EXPECT_ERROR_HAS(load_checkpoint(dir, 4), "incomplete");
  EXPECT_EQ(newest_checkpoint(dir), std::nullopt);
}

TEST(Checkpoint, SaveRejectsBadInput) {
  TempDir tmp;
  for (const char* key : {"a/b", "", "..x/y", "\xc3\xa4", "a b"}) {
    Checkpoint c = MakeCkpt(1);
    c.extra[key] = {1};
    EXPECT_ERROR_HAS(save_checkpoint(tmp.path(), c), "extra key");
  }
  Checkpoint c = MakeCkpt(1);
  c.state_json = "not json";
  EXPECT_ERROR_HAS(save_checkpoint(tmp.path(), c), "state.json");
  c.state_json = "\"a string\"";
  EXPECT_ERROR_HAS(save_checkpoint(tmp.path(), c), "not a JSON object");
  EXPECT_ERROR_HAS(save_checkpoint(tmp.path(), MakeCkpt(-1)), "negative step");
  c = MakeCkpt(1);
  c.optim.tensors["x"] = Filled({2}, 0);
  c.optim.tensors["x"].data.pop_back();
  EXPECT_ERROR_HAS(save_checkpoint(tmp.path(), c), "optim.safetensors");  // leaves nothing
  EXPECT_TRUE(Names(tmp.path()).empty());
}

TEST(Checkpoint, SurvivesKillMidSave) {
  // A child saves checkpoints in a loop (each step twice: a replacement,
  // keep_last 2: pruning) and is SIGKILLed after a random 0-100 ms (in odd
  // rounds only once it has finished a save of the round). Whatever it
  // leaves, the newest checkpoint is none or a whole one.
  TempDir tmp;
  const std::string& dir = tmp.path();
  std::mt19937 rng(20240601);
  int found = 0;
  for (int round = 0; round < 20; ++round) {
    const int64_t base = 1000 * (round + 1);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      try {
        for (int64_t i = 0;; ++i) save_checkpoint(dir, MakeCkpt(base + i / 2), 2);
      } catch (...) {
      }
      ::_exit(1);
    }
    if (round % 2 == 1) {  // let it finish a save of this round first
      for (int i = 0; i < 2000 && newest_checkpoint(dir).value_or(0) < base; ++i) ::usleep(5000);
    }
    ::usleep(rng() % 100000);
    ::kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the saving child failed (status " << status << ")";
    const std::optional<int64_t> step = newest_checkpoint(dir);
    if (!step) continue;
    ++found;
    EXPECT_GE(*step, 1000);
    ExpectSameCkpt(MakeCkpt(*step), load_checkpoint(dir, *step));
  }
  EXPECT_GT(found, 0) << "no child finished a single save";
}

// ---- dataset ----------------------------------------------------------------

std::string Text(size_t n) {  // std::mt19937's output is fixed by the standard
  std::mt19937 rng(5489);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xFF);
  return s;
}

TEST(Dataset, ReadsFoldersInByteOrderSkippingLinksAndIndexes) {
  TempDir tmp;
  const std::string d = tmp / "fortunes";
  fs::create_directory(d);
  WriteBytes(d + "/b", "BBB");
  WriteBytes(d + "/a", "AA");
  WriteBytes(d + "/Z", "zz");        // upper case sorts first
  WriteBytes(d + "/\xc3\xa9", "E");  // non-ASCII last (unsigned bytes)
  WriteBytes(d + "/a.dat", "index");
  fs::create_directory(d + "/sub");
  WriteBytes(d + "/sub/x", "nested");
  fs::create_symlink(d + "/a", d + "/link");
  EXPECT_EQ(read_text_source(d), (std::vector<uint8_t>{'z', 'z', 'A', 'A', 'B', 'B', 'B', 'E'}));
  EXPECT_EQ(read_text_source(d + "/b"), (std::vector<uint8_t>{'B', 'B', 'B'}));
  EXPECT_EQ(read_text_source(d + "/link"), (std::vector<uint8_t>{'A', 'A'}));  // given: followed
  fs::create_symlink(d, tmp / "dirlink");
  EXPECT_EQ(read_text_source(tmp / "dirlink").size(), 8U);
}

TEST(Dataset, MissingOrEmptySources) {
  TempDir tmp;
  EXPECT_ERROR_HAS(read_text_source(tmp / "nope"), tmp / "nope");
  EXPECT_ERROR_HAS(read_text_source(tmp / "nope"), "does not exist");
  WriteBytes(tmp / "empty", "");
  EXPECT_ERROR_HAS(read_text_source(tmp / "empty"), "no training data: " + (tmp / "empty"));
  EXPECT_ERROR_HAS(read_text_source(tmp.path()), "is empty");  // holds only "empty"
  fs::create_directory(tmp / "d");
  WriteBytes(tmp / "d/x.dat", "only an index");
  EXPECT_ERROR_HAS(read_text_source(tmp / "d"), "is empty");
  EXPECT_ERROR_HAS(Dataset(tmp / "nope", 8), "does not exist");
  EXPECT_EQ(Dataset::default_source(), "/usr/share/games/fortunes");
}

TEST(Dataset, SplitsTheLastTenthForValidation) {
  TempDir tmp;
  const std::string text = Text(1009);
  WriteBytes(tmp / "t", text);
  Dataset ds(tmp / "t", 16);
  EXPECT_EQ(ds.bytes(), 1009U);
  EXPECT_EQ(ds.val().size(), 100U);
  EXPECT_EQ(std::string(ds.train().begin(), ds.train().end()), text.substr(0, 909));
  EXPECT_EQ(std::string(ds.val().begin(), ds.val().end()), text.substr(909));
}

TEST(Dataset, RejectsTooShortParts) {
  TempDir tmp;
  WriteBytes(tmp / "t", Text(100));  // 90 training bytes, 10 validation bytes
  EXPECT_NO_THROW(Dataset(tmp / "t", 8));
  EXPECT_ERROR_HAS(Dataset(tmp / "t", 9), "validation part has 10 bytes");
  WriteBytes(tmp / "t", Text(15));  // 14 + 1
  EXPECT_ERROR_HAS(Dataset(tmp / "t", 13), "training part has 14 bytes");
  WriteBytes(tmp / "t", Text(5));  // 5 + 0
  EXPECT_ERROR_HAS(Dataset(tmp / "t", 1), "validation part has 0 bytes");
  EXPECT_ERROR_HAS(Dataset(tmp / "t", 0), "context length");
}

TEST(Dataset, Splitmix64KnownValues) {
  EXPECT_EQ(splitmix64(0), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(splitmix64(1), 0x910a2dec89025cc1ULL);
  EXPECT_EQ(splitmix64(0xffffffffffffffffULL), 0xe4d971771b652c20ULL);
  EXPECT_EQ(splitmix64(1234567), 0x599ed017fb08fc85ULL);
}

TEST(Dataset, WindowsFollowTheFormula) {
  // 1000 bytes, T = 16: windows start mod 900 - 16 = 884 (training) and
  // mod 100 - 16 = 84 (validation); starts from python3.
  TempDir tmp;
  WriteBytes(tmp / "t", Text(1000));
  const int T = 16;
  Dataset ds(tmp / "t", T);
  auto expect_window = [&](const std::vector<uint8_t>& part, const std::vector<int>& in,
                           const std::vector<int>& tg, size_t row, size_t start) {
    for (size_t t = 0; t < T; ++t) {
      EXPECT_EQ(in[row * T + t], part[start + t]) << "row " << row << " t " << t;
      EXPECT_EQ(tg[row * T + t], part[start + t + 1]) << "row " << row << " t " << t;
    }
  };
  const struct {
    uint64_t seed, step;
    int b;
    size_t start;
  } train_cases[] = {
      {0, 0, 0, 607}, {1337, 0, 3, 312}, {1337, 42, 5, 427}, {~0ULL, 123456789, 7, 720}};
  std::vector<int> in(4 * T), tg(4 * T);
  for (const auto& c : train_cases) {
    ds.train_batch(c.seed, c.step, c.b, 1, in.data(), tg.data());
    expect_window(ds.train(), in, tg, 0, c.start);
  }
  ds.train_batch(1337, 0, 2, 2, in.data(), tg.data());  // rows are b = 2, 3
  expect_window(ds.train(), in, tg, 1, 312);
  ds.val_batch(1337, 0, 0, 1, in.data(), tg.data());
  expect_window(ds.val(), in, tg, 0, 72);
  ds.val_batch(1337, 3, 1, 2, in.data(), tg.data());  // rows are b = 1, 2
  expect_window(ds.val(), in, tg, 1, 82);

  // A sequence depends on (seed, step, b) only, not on how the batch is cut.
  std::vector<int> all_in(8 * T), all_tg(8 * T), one_in(T), one_tg(T);
  ds.train_batch(99, 7, 0, 8, all_in.data(), all_tg.data());
  for (int b = 0; b < 8; ++b) {
    ds.train_batch(99, 7, b, 1, one_in.data(), one_tg.data());
    EXPECT_TRUE(std::equal(one_in.begin(), one_in.end(), all_in.begin() + b * T)) << b;
    EXPECT_TRUE(std::equal(one_tg.begin(), one_tg.end(), all_tg.begin() + b * T)) << b;
  }
}

}  // namespace
}  // namespace tide_train

// A byte flipped inside a tensor's data (structure intact) fails the load:
// COMPLETE holds every file's checksum.
TEST(CheckpointChecksum, FlippedDataByteFailsTheLoad) {
  const std::string dir = ::testing::TempDir() + "/tide_ckpt_flip_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  tide_train::Checkpoint c;
  c.step = 3;
  c.model.tensors["w"] = tide_train::Tensor{{4, 4}, std::vector<float>(16, 1.5f)};
  c.optim.tensors["w.exp_avg"] = tide_train::Tensor{{4, 4}, std::vector<float>(16, 0.5f)};
  c.state_json = "{\"step\": 3}";
  c.extra["reducer_tp0_dp0"] = {1, 2, 3};
  tide_train::save_checkpoint(dir, c);
  EXPECT_NO_THROW(tide_train::load_checkpoint(dir, 3));
  const std::string path = dir + "/step_00000003/model.safetensors";
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-5, std::ios::end);
  char b = 0;
  f.read(&b, 1);
  b = static_cast<char>(b ^ 0x10);
  f.seekp(-5, std::ios::end);
  f.write(&b, 1);
  f.close();
  try {
    tide_train::load_checkpoint(dir, 3);
    ADD_FAILURE() << "a flipped byte loaded";
  } catch (const tide_train::Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.safetensors"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}
