// POSIX shared-memory segments of the shm transport.
//
// Each rank that has shm peers owns one segment holding a header (its
// Doorbell, identity and a table of its receive FIFOs) followed by one FIFO
// per (peer, channel) carrying data peer -> owner. Senders find their FIFO by
// looking up (their rank, channel) in the receiver's table, so the two sides
// never have to agree on each other's peer lists.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "core/transport.h"
#include "transports/shm/fifo.h"

namespace tide::shm {

constexpr uint64_t kSegMagic = 0x316d687365646974ULL;  // "tideshm1"
constexpr uint32_t kSegVersion = 3;  // 3: tags in slot headers, rendezvous ack line (fifo.h)

struct SegHeader {
  uint64_t magic;
  uint32_t version;
  int32_t rank;
  int32_t pid;  // getpid() of the owner, in its pid namespace
  uint32_t nfifos;
  uint32_t slots;
  // Set (never cleared) by the owner when one of its connections failed: its
  // peers stop waiting for it instead of running into the timeout.
  std::atomic<uint32_t> failed;
  uint64_t slotSize;
  uint64_t totalBytes;
  uint64_t pidNsInode;  // inode of the owner's /proc/self/ns/pid (0: unknown)
  alignas(kCacheLine) Doorbell doorbell;
};

struct FifoEntry {
  int32_t peer;  // rank that writes into this FIFO
  int32_t channel;
  uint64_t offset;  // from the segment start
};

// An mmap'ed segment; unmapped when the last reference goes away.
class Mapping {
 public:
  Mapping(void* base, size_t size) : base_(base), size_(size) {}
  ~Mapping();
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  char* base() const { return static_cast<char*>(base_); }
  size_t size() const { return size_; }
  SegHeader* header() const { return static_cast<SegHeader*>(base_); }
  FifoEntry* entries() const;

 private:
  void* base_;
  size_t size_;
};

// Bytes of a segment with `nfifos` FIFOs of this geometry.
size_t segmentBytes(uint32_t nfifos, uint32_t slots, size_t slotSize);

// Creates (O_EXCL), sizes, reserves and maps the segment `name` ("/..."), and
// lays out the header, an empty FIFO table and the doorbell. The caller fills
// the table with layoutFifo(). On failure nothing is left behind.
Status createSegment(const std::string& name, int rank, uint32_t nfifos, uint32_t slots,
                     size_t slotSize, std::shared_ptr<Mapping>* out);
// Initializes FIFO number `index` of a segment made by createSegment.
FifoView layoutFifo(Mapping& seg, uint32_t index, int peer, int channel);

// Maps an existing segment and checks its header (magic, version, owner rank,
// size). Does not unlink it.
Status openSegment(const std::string& name, int expectRank, std::shared_ptr<Mapping>* out);

// The FIFO that `writer` feeds on `channel` in a segment owned by someone else.
Status findFifo(Mapping& seg, int writer, int channel, FifoView* out);

// Removes the name (mappings stay valid). Errors are ignored (logged).
// Removes a name that may or may not exist (no warning either way).
void unlinkSegmentQuietly(const std::string& name);
void unlinkSegment(const std::string& name);

// Inode of /proc/self/ns/pid, or 0 when unavailable.
uint64_t pidNamespaceInode();

}  // namespace tide::shm
