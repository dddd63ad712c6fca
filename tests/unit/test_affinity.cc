// TIDE_PIN (core/comm/affinity.h): which CPU a rank's process is pinned to, and
// every case where it must be left alone. Each case runs in a forked child:
// pinning changes the process and happens at most once per process.
#include <gtest/gtest.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <vector>

#include "core/comm/affinity.h"

namespace tide {
namespace {

std::vector<PeerInfo> Peers(int n, bool samePid, uint64_t host = 7) {
  std::vector<PeerInfo> v(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    v[r].rank = r;
    v[r].pid = samePid ? getpid() : 1000 + r;
    v[r].hostHash = host;
  }
  return v;
}

std::vector<int> Allowed() {
  cpu_set_t s;
  CPU_ZERO(&s);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(s), &s) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &s)) cpus.push_back(c);
  return cpus;
}

// Runs `body` in a child; the child's exit code is what body returns.
int InChild(const std::function<int()>& body) {
  pid_t pid = fork();
  if (pid == 0) _exit(body());
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
}

bool Unrestricted() { return static_cast<long>(Allowed().size()) == sysconf(_SC_NPROCESSORS_ONLN); }

TEST(Affinity, SpreadsTheNodesRanksOverTheAllowedCpus) {
  if (!Unrestricted()) GTEST_SKIP() << "this process is already bound to a CPU subset";
  const std::vector<int> all = Allowed();
  const int n = static_cast<int>(all.size());
  for (int local = 2; local <= n; ++local) {
    for (int me = 0; me < local; ++me) {
      // Ranks of another node interleave: only this node's ranks count.
      std::vector<PeerInfo> peers;
      for (int r = 0; r < 2 * local; ++r) {
        PeerInfo p;
        p.rank = r;
        p.pid = 1000 + r;
        p.hostHash = (r % 2 == 0) ? 7 : 9;
        peers.push_back(p);
      }
      const int rank = 2 * me;
      const int want = all[static_cast<size_t>(me * n / local)];
      EXPECT_EQ(InChild([&] {
                  unsetenv("TIDE_PIN");
                  pinToLocalCpu(peers, rank);
                  std::vector<int> now = Allowed();
                  if (now.size() != 1) return 1;
                  if (now[0] != want) return 2;
                  return allowedCpus() == n ? 0 : 3;  // counted before pinning
                }),
                0)
          << "local rank " << me << " of " << local;
    }
  }
}

TEST(Affinity, LeavesPlacementAloneWhenItShould) {
  if (!Unrestricted()) GTEST_SKIP() << "this process is already bound to a CPU subset";
  const int n = static_cast<int>(Allowed().size());
  auto unchanged = [&](const std::function<void()>& act) {
    return InChild([&] {
      act();
      return static_cast<int>(Allowed().size()) == n ? 0 : 1;
    });
  };
  EXPECT_EQ(unchanged([] {
              setenv("TIDE_PIN", "0", 1);
              pinToLocalCpu(Peers(1, false), 0);
            }),
            0)
      << "TIDE_PIN=0";
  EXPECT_EQ(unchanged([] {
              unsetenv("TIDE_PIN");
              pinToLocalCpu(Peers(1, false), 0);
            }),
            0)
      << "alone on its node";
  EXPECT_EQ(unchanged([] {
              unsetenv("TIDE_PIN");
              pinToLocalCpu(Peers(2, true), 1);
            }),
            0)
      << "ranks as threads of one process";
  EXPECT_EQ(unchanged([&] {
              unsetenv("TIDE_PIN");
              pinToLocalCpu(Peers(n + 1, false), 0);
            }),
            0)
      << "more ranks than CPUs";
  EXPECT_EQ(unchanged([] {
              unsetenv("TIDE_PIN");
              pinToLocalCpu(Peers(2, false), 5);
            }),
            0)
      << "rank out of range";
}

TEST(Affinity, RespectsABindingMadeBeforeAndPinsOncePerProcess) {
  const std::vector<int> all = Allowed();
  if (all.size() < 2) GTEST_SKIP() << "needs 2 CPUs";
  EXPECT_EQ(InChild([&] {
              unsetenv("TIDE_PIN");
              cpu_set_t one;
              CPU_ZERO(&one);
              CPU_SET(all[1], &one);
              if (sched_setaffinity(0, sizeof(one), &one) != 0) return 4;
              pinToLocalCpu(Peers(2, false), 0);  // the launcher bound us: keep it
              std::vector<int> now = Allowed();
              return now.size() == 1 && now[0] == all[1] ? 0 : 1;
            }),
            0);
  if (!Unrestricted()) return;
  EXPECT_EQ(InChild([&] {
              unsetenv("TIDE_PIN");
              pinToLocalCpu(Peers(2, false), 1);  // pinned to the second CPU
              const int first = Allowed()[0];
              pinToLocalCpu(Peers(2, false), 0);  // a later communicator: no change
              return Allowed()[0] == first ? 0 : 1;
            }),
            0);
}

}  // namespace
}  // namespace tide
