// The trainer's file layer: safetensors (io/safetensors.h) and the training
// text with its window sampler (data/dataset.h). Expected sampler values were
// computed independently with python3 (64-bit masked arithmetic).
#include "io_test_util.h"

namespace tide_train {
namespace {

using namespace test;  // NOLINT(google-build-using-namespace)

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
