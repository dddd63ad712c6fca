#include "core/comm/affinity.h"

#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "core/config.h"
#include "core/log.h"

namespace tide {

namespace {
std::atomic<int> gCpusBeforePin{0};
}  // namespace

int allowedCpus() {
  const int before = gCpusBeforePin.load();
  if (before > 0) return before;
  cpu_set_t cpus;
  return sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
}

void pinToLocalCpu(const std::vector<PeerInfo>& peers, int rank) {
  static std::atomic<bool> pinned{false};
  if (knobInt(Knob::Pin) == 0 || pinned.load() || rank < 0 ||
      rank >= static_cast<int>(peers.size())) {
    return;
  }
  const PeerInfo& me = peers[static_cast<size_t>(rank)];
  int local = 0, index = 0;
  for (const PeerInfo& p : peers) {
    if (p.hostHash != me.hostHash) continue;
    if (p.rank != me.rank && p.pid == me.pid) return;  // ranks as threads of one process
    if (p.rank < me.rank) ++index;
    ++local;
  }
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return;
  const int n = CPU_COUNT(&allowed);
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  if (n < online || local > n || local < 2) return;
  const int want = static_cast<int>(static_cast<long long>(index) * n / local);
  int cpu = -1;
  for (int c = 0, seen = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &allowed)) continue;
    if (seen++ == want) {
      cpu = c;
      break;
    }
  }
  if (cpu < 0 || pinned.exchange(true)) return;
  gCpusBeforePin.store(n);
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  if (sched_setaffinity(0, sizeof(one), &one) != 0) {
    TIDE_INFO("TIDE_PIN: could not pin rank %d to CPU %d: %s", rank, cpu, strerror(errno));
    return;
  }
  TIDE_INFO("TIDE_PIN: rank %d (local %d of %d) pinned to CPU %d", rank, index, local, cpu);
}

}  // namespace tide
