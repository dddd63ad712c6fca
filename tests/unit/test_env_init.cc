// tideCommInitFromEnv's parsing: launcher precedence, meeting point, errors,
// the rendezvous file and the authentication policy. The environment is a
// map handed to the parser, so nothing here calls setenv.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <string>
#include <thread>

#include "core/boot/env_init.h"
#include "core/unique_id.h"

namespace tide {
namespace {

using Env = std::map<std::string, std::string>;

EnvLookup lookupIn(const Env& env) {
  return [&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
}

LaunchInfo parseOk(const Env& env, bool pmix = false) {
  LaunchInfo info;
  Status s = parseLaunchEnvironment(lookupIn(env), pmix, &info);
  EXPECT_TRUE(s.ok()) << s.message();
  return info;
}

Status parseErr(const Env& env, bool pmix = false) {
  LaunchInfo info;
  return parseLaunchEnvironment(lookupIn(env), pmix, &info);
}

const Env kTorch = {{"RANK", "1"},
                    {"WORLD_SIZE", "4"},
                    {"LOCAL_RANK", "1"},
                    {"LOCAL_WORLD_SIZE", "2"},
                    {"MASTER_ADDR", "10.0.0.1"},
                    {"MASTER_PORT", "29500"}};

const Env kOmpi = {{"OMPI_COMM_WORLD_RANK", "2"},
                   {"OMPI_COMM_WORLD_SIZE", "4"},
                   {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                   {"OMPI_MCA_ess_base_jobid", "1234"},
                   {"PMIX_NAMESPACE", "1234"},
                   {"PMIX_RANK", "2"}};

TEST(EnvInitTest, NoLauncherIsOneRank) {
  LaunchInfo info = parseOk({{"HOME", "/root"}, {"MASTER_PORT", "1"}});
  EXPECT_EQ(info.launcher, Launcher::None);
  EXPECT_EQ(info.rank, 0);
  EXPECT_EQ(info.size, 1);
  EXPECT_EQ(info.meet, MeetingPoint::Private);
  EXPECT_FALSE(info.multiNode());
}

TEST(EnvInitTest, TorchrunMeetsOnMasterPortPlusOne) {
  LaunchInfo info = parseOk(kTorch);
  EXPECT_EQ(info.launcher, Launcher::Torchrun);
  EXPECT_EQ(info.rank, 1);
  EXPECT_EQ(info.size, 4);
  EXPECT_EQ(info.localRank, 1);
  EXPECT_EQ(info.localSize, 2);
  EXPECT_TRUE(info.multiNode());
  EXPECT_EQ(info.meet, MeetingPoint::Master);
  EXPECT_EQ(info.masterAddr, "10.0.0.1");
  EXPECT_EQ(info.masterPort, 29501);
}

TEST(EnvInitTest, TideMasterPortOverridesMasterPort) {
  Env env = kTorch;
  env["TIDE_MASTER_PORT"] = "40000";
  EXPECT_EQ(parseOk(env).masterPort, 40000);
  env["TIDE_MASTER_ADDR"] = "node7";
  LaunchInfo info = parseOk(env);
  EXPECT_EQ(info.masterAddr, "node7");
  EXPECT_EQ(info.masterPort, 40000);
}

TEST(EnvInitTest, TiderunTakesPrecedence) {
  Env env = kTorch;
  for (const auto& [k, v] : kOmpi) env[k] = v;
  env.insert({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "8"}});
  env.insert({{"TIDE_RANK", "0"},
              {"TIDE_WORLD_SIZE", "2"},
              {"TIDE_LOCAL_RANK", "0"},
              {"TIDE_LOCAL_WORLD_SIZE", "2"},
              {"TIDE_MASTER_ADDR", "127.0.0.1"},
              {"TIDE_MASTER_PORT", "5555"}});
  LaunchInfo info = parseOk(env, true);
  EXPECT_EQ(info.launcher, Launcher::Tiderun);
  EXPECT_EQ(info.rank, 0);
  EXPECT_EQ(info.size, 2);
  EXPECT_FALSE(info.multiNode());
  EXPECT_EQ(info.meet, MeetingPoint::Master);
  EXPECT_EQ(info.masterPort, 5555);

  // Without tiderun's variables, torchrun's come next, then Open MPI's, then Slurm's.
  for (const char* k : {"TIDE_RANK", "TIDE_WORLD_SIZE", "TIDE_LOCAL_RANK", "TIDE_LOCAL_WORLD_SIZE",
                        "TIDE_MASTER_ADDR", "TIDE_MASTER_PORT"}) {
    env.erase(k);
  }
  EXPECT_EQ(parseOk(env, true).launcher, Launcher::Torchrun);
  for (const char* k : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}) env.erase(k);
  EXPECT_EQ(parseOk(env, true).launcher, Launcher::OpenMpi);
  for (const auto& kv : kOmpi) env.erase(kv.first);
  LaunchInfo slurm = parseOk(env, true);
  EXPECT_EQ(slurm.launcher, Launcher::Slurm);
  EXPECT_EQ(slurm.rank, 3);
  EXPECT_EQ(slurm.size, 8);
}

TEST(EnvInitTest, OpenMpiPrefersPmix) {
  LaunchInfo info = parseOk(kOmpi, true);
  EXPECT_EQ(info.launcher, Launcher::OpenMpi);
  EXPECT_EQ(info.rank, 2);
  EXPECT_EQ(info.size, 4);
  EXPECT_EQ(info.meet, MeetingPoint::Pmix);
}

TEST(EnvInitTest, OpenMpiWithoutPmixUsesRdzvFile) {
  Env env = kOmpi;
  env["TIDE_RDZV_FILE"] = "/shared/job.id";
  LaunchInfo info = parseOk(env, false);
  EXPECT_EQ(info.meet, MeetingPoint::File);
  EXPECT_EQ(info.rdzvFile, "/shared/job.id");
  // PMIx wins when it is there.
  EXPECT_EQ(parseOk(env, true).meet, MeetingPoint::Pmix);
}

TEST(EnvInitTest, SingleNodeOpenMpiFallsBackToTmpFile) {
  LaunchInfo info = parseOk(kOmpi, false);
  EXPECT_EQ(info.meet, MeetingPoint::File);
  EXPECT_TRUE(info.removeRdzvFile);
  EXPECT_EQ(info.rdzvFile, "/tmp/tide-rdzv-" + std::to_string(geteuid()) + "-1234");
  // Without a PMIx namespace the Open MPI job id names it.
  Env env = kOmpi;
  env.erase("PMIX_NAMESPACE");
  env["OMPI_MCA_ess_base_jobid"] = "99@1/x";
  EXPECT_EQ(parseOk(env, true).rdzvFile, "/tmp/tide-rdzv-" + std::to_string(geteuid()) + "-99_1_x");
}

TEST(EnvInitTest, MultiNodeOpenMpiWithoutPmixOrFileFails) {
  Env env = kOmpi;
  env["OMPI_COMM_WORLD_LOCAL_SIZE"] = "2";
  env["OMPI_COMM_WORLD_LOCAL_RANK"] = "0";
  Status s = parseErr(env, false);
  EXPECT_EQ(s.code(), tideInvalidUsage);
  EXPECT_NE(s.message().find("TIDE_RDZV_FILE"), std::string::npos) << s.message();
  // MASTER_ADDR is a meeting point for any launcher.
  env["MASTER_ADDR"] = "10.1.1.1";
  env["MASTER_PORT"] = "1000";
  LaunchInfo info = parseOk(env, false);
  EXPECT_EQ(info.meet, MeetingPoint::Master);
  EXPECT_EQ(info.masterPort, 1001);
}

TEST(EnvInitTest, PmiVariables) {
  LaunchInfo info = parseOk({{"PMI_RANK", "1"}, {"PMI_SIZE", "3"}, {"TIDE_RDZV_FILE", "/f"}});
  EXPECT_EQ(info.launcher, Launcher::OpenMpi);
  EXPECT_EQ(info.rank, 1);
  EXPECT_EQ(info.size, 3);
  EXPECT_EQ(info.meet, MeetingPoint::File);
}

TEST(EnvInitTest, PmixRankAloneNeedsPmix) {
  Env env = {{"PMIX_RANK", "1"}, {"PMIX_NAMESPACE", "ns"}};
  LaunchInfo info = parseOk(env, true);
  EXPECT_EQ(info.launcher, Launcher::OpenMpi);
  EXPECT_EQ(info.rank, 1);
  EXPECT_EQ(info.size, -1);  // asked from PMIx
  EXPECT_EQ(info.meet, MeetingPoint::Pmix);
  // Only PMIx knows the size, so PMIx is the meeting point even with MASTER_ADDR.
  Env withMaster = env;
  withMaster.insert({{"MASTER_ADDR", "h"}, {"MASTER_PORT", "5"}});
  EXPECT_EQ(parseOk(withMaster, true).meet, MeetingPoint::Pmix);
  // Without PMIx support it is not a launcher at all.
  EXPECT_EQ(parseOk(env, false).launcher, Launcher::None);
}

TEST(EnvInitTest, Slurm) {
  Env env = {{"SLURM_PROCID", "5"},  {"SLURM_NTASKS", "8"},
             {"SLURM_LOCALID", "1"}, {"SLURM_STEP_TASKS_PER_NODE", "4(x2)"},
             {"SLURM_JOB_ID", "77"}, {"SLURM_STEP_ID", "0"}};
  Status s = parseErr(env);
  EXPECT_EQ(s.code(), tideInvalidUsage) << s.message();
  env["TIDE_RDZV_FILE"] = "/nfs/rdzv";
  LaunchInfo info = parseOk(env);
  EXPECT_EQ(info.launcher, Launcher::Slurm);
  EXPECT_EQ(info.localRank, 1);
  EXPECT_EQ(info.localSize, 4);
  EXPECT_EQ(info.meet, MeetingPoint::File);
  EXPECT_EQ(info.rdzvFile, "/nfs/rdzv");
  // Layouts that do not give one local size.
  env["SLURM_STEP_TASKS_PER_NODE"] = "5,3";
  EXPECT_EQ(parseOk(env).localSize, -1);
  env["SLURM_STEP_TASKS_PER_NODE"] = "16";
  EXPECT_EQ(parseOk(env).localSize, -1);
  // One node: the per-job file in /tmp.
  env.erase("TIDE_RDZV_FILE");
  env["SLURM_STEP_NUM_NODES"] = "1";
  info = parseOk(env);
  EXPECT_EQ(info.localSize, 8);
  EXPECT_EQ(info.rdzvFile, "/tmp/tide-rdzv-" + std::to_string(geteuid()) + "-77.0");
  // SLURM_NPROCS stands in for SLURM_NTASKS.
  env.erase("SLURM_NTASKS");
  env["SLURM_NPROCS"] = "8";
  EXPECT_EQ(parseOk(env).size, 8);
}

TEST(EnvInitTest, SizeOneNeedsNoMeetingPoint) {
  LaunchInfo info = parseOk({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "1"}});
  EXPECT_EQ(info.meet, MeetingPoint::Private);
}

TEST(EnvInitTest, MalformedValues) {
  struct Case {
    Env env;
    const char* mention;
  };
  const Case cases[] = {
      {{{"RANK", "one"}, {"WORLD_SIZE", "2"}}, "RANK"},
      {{{"RANK", "1x"}, {"WORLD_SIZE", "2"}}, "RANK"},
      {{{"RANK", "-1"}, {"WORLD_SIZE", "2"}}, "RANK"},
      {{{"RANK", "2"}, {"WORLD_SIZE", "2"}}, "WORLD_SIZE"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "0"}}, "WORLD_SIZE"},
      {{{"RANK", "0"}}, "WORLD_SIZE"},
      {{{"TIDE_RANK", "0"},
        {"TIDE_WORLD_SIZE", "2"},
        {"TIDE_LOCAL_RANK", "2"},
        {"TIDE_LOCAL_WORLD_SIZE", "2"}},
       "TIDE_LOCAL_RANK"},
      {{{"TIDE_RANK", "0"}, {"TIDE_WORLD_SIZE", "2"}, {"TIDE_LOCAL_WORLD_SIZE", "3"}},
       "TIDE_LOCAL_WORLD_SIZE"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}, "MASTER_PORT"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "x"}},
       "MASTER_PORT"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "65535"}},
       "MASTER_PORT"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"TIDE_MASTER_ADDR", "h"}}, "TIDE_MASTER_PORT"},
      {{{"RANK", "0"},
        {"WORLD_SIZE", "2"},
        {"TIDE_MASTER_ADDR", "h"},
        {"TIDE_MASTER_PORT", "70000"}},
       "TIDE_MASTER_PORT"},
  };
  for (const Case& c : cases) {
    Status s = parseErr(c.env);
    EXPECT_EQ(s.code(), tideInvalidArgument) << c.mention << ": " << s.message();
    EXPECT_NE(s.message().find(c.mention), std::string::npos) << s.message();
  }
}

TEST(EnvInitTest, TorchrunWithoutMasterFails) {
  Status s = parseErr({{"RANK", "0"}, {"WORLD_SIZE", "2"}});
  EXPECT_EQ(s.code(), tideInvalidUsage);
  EXPECT_NE(s.message().find("MASTER_ADDR"), std::string::npos) << s.message();
}

TEST(EnvInitTest, Timeout) {
  EXPECT_EQ(parseOk({}).timeoutSeconds, 600);
  EXPECT_EQ(parseOk({{"TIDE_TIMEOUT", "30"}}).timeoutSeconds, 30);
  EXPECT_EQ(parseOk({{"TIDE_TIMEOUT", "junk"}}).timeoutSeconds, 600);
}

TEST(EnvInitTest, AuthPolicy) {
  EXPECT_TRUE(checkAuthPolicy(true, true, true).ok());
  EXPECT_TRUE(checkAuthPolicy(false, false, true).ok());
  EXPECT_TRUE(checkAuthPolicy(false, true, false).ok());  // warns once
  EXPECT_TRUE(checkAuthPolicy(false, true, false).ok());
  Status s = checkAuthPolicy(false, true, true);
  EXPECT_EQ(s.code(), tideInvalidUsage);
  EXPECT_NE(s.message().find("TIDE_SECRET"), std::string::npos);
}

class RdzvFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tide-envinit-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/rdzv";
    UniqueIdData d;
    ASSERT_TRUE(resolveAddress("127.0.0.1", 4242, &d.root).ok());
    d.authenticated = true;
    d.secret[0] = 7;
    encodeUniqueId(d, &id_);
  }
  void TearDown() override {
    ::unlink(path_.c_str());
    ::rmdir(dir_.c_str());
  }
  std::string dir_, path_;
  tideUniqueId id_{};
};

TEST_F(RdzvFileTest, WriteThenRead) {
  ASSERT_TRUE(writeRendezvousFile(path_, id_).ok());
  struct stat st {};
  ASSERT_EQ(stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  tideUniqueId got{};
  Status s = readRendezvousFile(path_, Deadline::after(5), &got);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(std::string(got.internal, sizeof(got.internal)),
            std::string(id_.internal, sizeof(id_.internal)));
}

TEST_F(RdzvFileTest, ReaderWaitsForWriter) {
  tideUniqueId got{};
  Status s;
  std::thread reader([&] { s = readRendezvousFile(path_, Deadline::after(10), &got); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(writeRendezvousFile(path_, id_).ok());
  reader.join();
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(std::string(got.internal, sizeof(got.internal)),
            std::string(id_.internal, sizeof(id_.internal)));
}

TEST_F(RdzvFileTest, ReaderTimesOut) {
  tideUniqueId got{};
  Status s = readRendezvousFile(path_, Deadline::after(0.2), &got);
  EXPECT_EQ(s.code(), tideTimeout) << s.message();
}

TEST_F(RdzvFileTest, RefusesOtherModesAndGarbage) {
  FILE* f = fopen(path_.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::string junk(sizeof(tideUniqueId), 'x');
  fwrite(junk.data(), 1, junk.size(), f);
  fclose(f);
  chmod(path_.c_str(), 0666);
  tideUniqueId got{};
  EXPECT_EQ(readRendezvousFile(path_, Deadline::after(1), &got).code(), tideInvalidUsage);
  chmod(path_.c_str(), 0600);
  EXPECT_EQ(readRendezvousFile(path_, Deadline::after(1), &got).code(), tideInvalidArgument);
}

// With no launcher in the environment, init makes a communicator of one rank.
TEST(EnvInitEndToEnd, OneRankWithoutLauncher) {
  for (const char* v :
       {"TIDE_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", "PMIX_RANK"}) {
    if (std::getenv(v) != nullptr) GTEST_SKIP() << v << " is set";
  }
  tideComm_t comm = nullptr;
  Status s = initFromEnvironment(&comm);
  ASSERT_TRUE(s.ok()) << s.message();
  int n = 0, r = -1;
  EXPECT_EQ(tideCommCount(comm, &n), tideSuccess);
  EXPECT_EQ(tideCommUserRank(comm, &r), tideSuccess);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(r, 0);
  EXPECT_EQ(tideCommDestroy(comm), tideSuccess);
}

}  // namespace
}  // namespace tide
