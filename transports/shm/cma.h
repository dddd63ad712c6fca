// Cross-memory attach (process_vm_readv): the single-copy path of the shm
// transport. The receiver copies a message straight out of the sender's
// address space into its own buffer.
//
// Thread-safety: stateless; safe from any thread.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "core/status.h"

namespace tide::shm {

// Copies `bytes` from address `remote` of process `pid` to `local`. Blocks
// only for the copy itself (no waiting on the peer). Errors: remoteError when
// the process is gone or the range is not mapped (ESRCH, EFAULT: the peer
// exited or freed the buffer early), systemError otherwise (EPERM, ENOSYS...).
// `peerRank` is for messages.
Status cmaRead(int pid, uint64_t remote, void* local, size_t bytes, int peerRank);

// How cmaPrepareSource backs a source range with huge pages.
enum class CmaHuge {
  kOff,        // leave the pages alone
  kInterior,   // only the 2 MiB pages that lie wholly inside the range
  kEnclosing,  // every 2 MiB page the range touches, its edges included
};

// Makes reads of [buf, buf + bytes) by peers fast: process_vm_readv pins
// the source pages one by one, which costs 3-4x the copy itself on 4 KiB
// pages and little on huge pages, so the range's 2 MiB pages (see CmaHuge)
// are collapsed into transparent huge pages (madvise MADV_COLLAPSE; contents
// and addresses unchanged, failures ignored). kEnclosing also collapses the
// parts of the edge pages outside the range (memory of this process the
// caller did not name; its contents do not change, its resident size may
// grow by up to 2 MiB per edge): a 1 MiB buffer has no 2 MiB page inside
// it. Each 2 MiB page is tried once per process (remembered in a bounded
// table), so reusing a buffer costs a lookup. Thread-safe. Blocks for the
// collapse (about one copy of 2 MiB per page) the first time.
void cmaPrepareSource(const void* buf, size_t bytes, CmaHuge mode);

// Address and value of a word of this process that peers read at setup to
// check that cross-memory attach works between them.
uint64_t cmaProbeAddress();
uint64_t cmaProbeValue();

// True when this process can read `expect` at `addr` in process `pid`.
// Never blocks; logs why not at INFO level.
bool cmaProbe(int pid, uint64_t addr, uint64_t expect);

}  // namespace tide::shm
