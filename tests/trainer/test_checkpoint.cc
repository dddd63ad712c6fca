// Atomic, checksummed checkpoints (io/checkpoint.h): round trips, the newest
// complete one, pruning, replacement, corruption, and SIGKILL mid-save.
#include "io_test_util.h"

namespace tide_train {
namespace {

using namespace test;  // NOLINT(google-build-using-namespace)

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

// A byte flipped inside a tensor's data (structure intact) fails the load:
// COMPLETE holds every file's checksum.
TEST(CheckpointChecksum, FlippedDataByteFailsTheLoad) {
  const std::string dir = ::testing::TempDir() + "/tide_ckpt_flip_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  Checkpoint c;
  c.step = 3;
  c.model.tensors["w"] = Tensor{{4, 4}, std::vector<float>(16, 1.5f)};
  c.optim.tensors["w.exp_avg"] = Tensor{{4, 4}, std::vector<float>(16, 0.5f)};
  c.state_json = "{\"step\": 3}";
  c.extra["reducer_tp0_dp0"] = {1, 2, 3};
  save_checkpoint(dir, c);
  EXPECT_NO_THROW(load_checkpoint(dir, 3));
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
    load_checkpoint(dir, 3);
    ADD_FAILURE() << "a flipped byte loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.safetensors"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tide_train
