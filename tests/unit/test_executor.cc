// ExecCtx pieces that need no connections: scratch memory limits.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>

#include "core/algorithm.h"

namespace tide {
namespace {

// Runs `body` in a child with a 20 s alarm (a hang ends as SIGALRM); returns
// its exit code, or 100 + the signal that ended it.
template <typename F>
int inChild(F body) {
  pid_t pid = fork();
  if (pid == 0) {
    alarm(20);
    _exit(body());
  }
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 100 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

TEST(ExecScratch, OrdinarySizes) {
  CollArgs args;
  ExecCtx ctx(args, 0, 1, nullptr, 0, nullptr, 1 << 20);
  for (size_t n : {size_t{0}, size_t{1}, size_t{100}, size_t{5000}, size_t{3} << 20}) {
    auto* p = static_cast<unsigned char*>(ctx.scratch(n));
    ASSERT_NE(p, nullptr) << n;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
    if (n > 0) p[n - 1] = 1;
  }
  EXPECT_TRUE(ctx.error().ok());
}

// Sizes no allocation can satisfy fail with a Status (no endless doubling
// past 2^63, no rounding that wraps to a tiny block).
TEST(ExecScratch, AbsurdSizesFailCleanly) {
  for (size_t n :
       {SIZE_MAX, SIZE_MAX - 10, (size_t{1} << 63) + 1, size_t{1} << 63, (size_t{1} << 62) + 1}) {
    int rc = inChild([n] {
      CollArgs args;
      ExecCtx ctx(args, 0, 1, nullptr, 0, nullptr, 1 << 20);
      if (ctx.scratch(n) != nullptr) return 2;
      if (ctx.error().ok()) return 3;
      return 0;
    });
    EXPECT_EQ(rc, 0) << n << " bytes";
  }
}

}  // namespace
}  // namespace tide
