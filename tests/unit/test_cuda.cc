// Lazy CUDA driver loading (src/cuda/cuda_loader): on a machine without a
// usable GPU every entry point answers "no GPU" cleanly; TIDE_CUDA_DISABLE
// forces that answer without opening the driver. With a GPU, the device
// kernel table is registered.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "core/registry.h"
#include "cuda/cuda_loader.h"

extern char** environ;

namespace tide::cuda {
namespace {

TEST(CudaLoader, ProbeIsStableAndExplained) {
  const GpuProbe& a = probeGpu();
  const GpuProbe& b = probeGpu();
  EXPECT_EQ(&a, &b);
  EXPECT_FALSE(a.detail.empty());
  EXPECT_STRNE(gpuStateName(a.state), "?");
  if (a.state == GpuState::kUsable) {
    EXPECT_GT(a.deviceCount, 0);
    EXPECT_NE(driver(), nullptr);
  } else {
    EXPECT_EQ(driver(), nullptr);
    EXPECT_EQ(kernelsFor(MemType::Device), nullptr) << "device kernels registered without a GPU";
  }
}

TEST(CudaLoader, NoGpuAnswersCleanly) {
  if (gpuUsable()) GTEST_SKIP() << "a GPU is usable here: " << probeGpu().detail;
  int host = 0;
  EXPECT_FALSE(isDevicePointer(&host));
  EXPECT_FALSE(isDevicePointer(nullptr));
  std::string why;
  EXPECT_EQ(ensureContext(&why), -1);
  EXPECT_FALSE(why.empty());
  EXPECT_NE(waitStream(nullptr, 1.0), kCudaSuccess);  // returns, does not hang
  EXPECT_NE(driverErrorString(35).find("35"), std::string::npos);
}

TEST(CudaLoader, GpuMachineRegistersDeviceKernels) {
  if (!gpuUsable()) GTEST_SKIP() << "no GPU: " << probeGpu().detail;
  EXPECT_NE(kernelsFor(MemType::Device), nullptr);
  std::string why;
  EXPECT_GE(ensureContext(&why), 0) << why;
}

// Runs in a fresh process (below): the probe happens once per process.
TEST(CudaLoader, DisabledChild) {
  if (getenv("TIDE_CUDA_TEST_CHILD") == nullptr) GTEST_SKIP() << "run by DisableKnob";
  EXPECT_EQ(probeGpu().state, GpuState::kDisabled);
  EXPECT_EQ(driver(), nullptr);
  EXPECT_EQ(kernelsFor(MemType::Device), nullptr);
}

TEST(CudaLoader, DisableKnob) {
  setenv("TIDE_CUDA_DISABLE", "1", 1);
  setenv("TIDE_CUDA_TEST_CHILD", "1", 1);
  char exe[] = "/proc/self/exe";
  char filter[] = "--gtest_filter=CudaLoader.DisabledChild";
  char* argv[] = {exe, filter, nullptr};
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, exe, nullptr, nullptr, argv, environ), 0);
  unsetenv("TIDE_CUDA_DISABLE");
  unsetenv("TIDE_CUDA_TEST_CHILD");
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
}

}  // namespace
}  // namespace tide::cuda
