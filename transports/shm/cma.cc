// process_vm_readv wrapper and setup probe (see cma.h).
#include "transports/shm/cma.h"

#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <unordered_set>

#include "core/log.h"

namespace tide::shm {

namespace {

// Written once at first use; its value mixes the pid so a probe that reads
// another process's copy of the library by mistake does not pass. Ranks that
// are threads of one process initialise it concurrently: call_once orders the
// write before every reader in this process.
volatile uint64_t gProbeWord = 0;
std::once_flag gProbeOnce;

void initProbe() {
  std::call_once(gProbeOnce,
                 [] { gProbeWord = 0x74696465636d6100ULL ^ static_cast<uint64_t>(getpid()); });
}

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

constexpr uintptr_t kHugePage = 2u << 20;
// Huge pages tried so far (bounded: past it, new ranges are left alone).
constexpr size_t kMaxTracked = 1u << 16;

std::mutex gHugeMu;
std::unordered_set<uintptr_t>* gHugeTried = nullptr;  // leaked on purpose: used at exit

}  // namespace

void cmaPrepareSource(const void* buf, size_t bytes, CmaHuge mode) {
  if (mode == CmaHuge::kOff || bytes == 0) return;
  const uintptr_t first = reinterpret_cast<uintptr_t>(buf);
  const uintptr_t last = first + bytes;
  const bool enclosing = mode == CmaHuge::kEnclosing;
  const uintptr_t begin =
      enclosing ? first & ~(kHugePage - 1) : (first + kHugePage - 1) & ~(kHugePage - 1);
  const uintptr_t end =
      enclosing ? (last + kHugePage - 1) & ~(kHugePage - 1) : last & ~(kHugePage - 1);
  if (end <= begin) return;
  std::lock_guard<std::mutex> lock(gHugeMu);
  if (gHugeTried == nullptr) gHugeTried = new std::unordered_set<uintptr_t>();
  for (uintptr_t p = begin; p < end; p += kHugePage) {
    if (gHugeTried->count(p) != 0) continue;
    if (gHugeTried->size() >= kMaxTracked) return;
    gHugeTried->insert(p);
    // Collapse runs of untried pages with one call.
    uintptr_t q = p + kHugePage;
    while (q < end && gHugeTried->size() < kMaxTracked && gHugeTried->count(q) == 0) {
      gHugeTried->insert(q);
      q += kHugePage;
    }
    if (madvise(reinterpret_cast<void*>(p), q - p, MADV_COLLAPSE) != 0 && errno == EINVAL) {
      // Kernels before 6.1, THP "never", or memory that cannot be collapsed.
      TIDE_TRACE("shm: MADV_COLLAPSE of %zu bytes failed: %s", static_cast<size_t>(q - p),
                 strerror(errno));
    }
    p = q - kHugePage;
  }
}

Status cmaRead(int pid, uint64_t remote, void* local, size_t bytes, int peerRank) {
  char* dst = static_cast<char*>(local);
  size_t done = 0;
  while (done < bytes) {
    iovec l{dst + done, bytes - done};
    iovec r{reinterpret_cast<void*>(remote + done), bytes - done};
    ssize_t n = process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    const int err = n == 0 ? EFAULT : errno;
    if (err == EINTR) continue;
    if (err == ESRCH || err == EFAULT) {
      return remoteError(
          "shm: cannot read rank %d's buffer (pid %d, %zu bytes at offset %zu): %s (the peer "
          "exited or released its buffer early)",
          peerRank, pid, bytes, done, strerror(err));
    }
    return errnoError(err,
                      "shm: process_vm_readv from rank %d (pid %d) failed (TIDE_SHM_CMA=0 "
                      "turns single copy off)",
                      peerRank, pid);
  }
  return Status::Ok();
}

uint64_t cmaProbeAddress() {
  initProbe();
  return reinterpret_cast<uint64_t>(&gProbeWord);
}

uint64_t cmaProbeValue() {
  initProbe();
  return gProbeWord;
}

bool cmaProbe(int pid, uint64_t addr, uint64_t expect) {
  uint64_t got = 0;
  iovec l{&got, sizeof(got)};
  iovec r{reinterpret_cast<void*>(addr), sizeof(got)};
  ssize_t n = process_vm_readv(pid, &l, 1, &r, 1, 0);
  if (n != static_cast<ssize_t>(sizeof(got))) {
    TIDE_INFO("shm: single copy (process_vm_readv) to pid %d unavailable: %s", pid,
              n < 0 ? strerror(errno) : "short read");
    return false;
  }
  if (got != expect) {
    TIDE_INFO("shm: single copy probe of pid %d read a wrong value", pid);
    return false;
  }
  return true;
}

}  // namespace tide::shm
