// POSIX shared-memory segments (see segment.h).
#include "transports/shm/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "core/log.h"

namespace tide::shm {

namespace {

constexpr size_t kPage = 4096;

size_t tableOffset() { return alignUp(sizeof(SegHeader), kCacheLine); }

size_t fifoStart(uint32_t nfifos) {
  return alignUp(tableOffset() + nfifos * sizeof(FifoEntry), kPage);
}

size_t fifoStride(uint32_t slots, size_t slotSize) {
  return alignUp(FifoView::footprint(slots, slotSize), kPage);
}

}  // namespace

Mapping::~Mapping() {
  if (base_ != nullptr) munmap(base_, size_);
}

FifoEntry* Mapping::entries() const { return reinterpret_cast<FifoEntry*>(base() + tableOffset()); }

size_t segmentBytes(uint32_t nfifos, uint32_t slots, size_t slotSize) {
  return fifoStart(nfifos) + nfifos * fifoStride(slots, slotSize);
}

uint64_t pidNamespaceInode() {
  struct stat st;
  if (stat("/proc/self/ns/pid", &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

Status createSegment(const std::string& name, int rank, uint32_t nfifos, uint32_t slots,
                     size_t slotSize, std::shared_ptr<Mapping>* out) {
  const size_t size = segmentBytes(nfifos, slots, slotSize);
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return errnoError(errno, "shm: cannot create segment %s", name.c_str());
  auto fail = [&](Status st) {
    close(fd);
    shm_unlink(name.c_str());
    return st;
  };
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    return fail(errnoError(errno, "shm: cannot size segment %s to %zu bytes", name.c_str(), size));
  }
  // Reserve the pages now: on a full /dev/shm a later first touch would
  // raise SIGBUS instead of returning an error.
  int rc = posix_fallocate(fd, 0, static_cast<off_t>(size));
  if (rc != 0 && rc != EOPNOTSUPP && rc != ENOSYS && rc != EINVAL) {
    return fail(errnoError(rc,
                           "shm: cannot reserve %zu bytes for %s (is /dev/shm large enough? "
                           "TIDE_SHM_SLOTS/TIDE_SHM_SLOT_SIZE shrink it, TIDE_SHM_DISABLE=1 "
                           "avoids it)",
                           size, name.c_str()));
  }
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    return fail(errnoError(errno, "shm: cannot map segment %s (%zu bytes)", name.c_str(), size));
  }
  close(fd);
  auto map = std::make_shared<Mapping>(base, size);
  auto* hdr = new (base) SegHeader();
  hdr->version = kSegVersion;
  hdr->rank = rank;
  hdr->pid = static_cast<int32_t>(getpid());
  hdr->nfifos = nfifos;
  hdr->slots = slots;
  hdr->slotSize = slotSize;
  hdr->totalBytes = size;
  hdr->pidNsInode = pidNamespaceInode();
  hdr->magic = kSegMagic;
  FifoEntry* table = map->entries();
  for (uint32_t i = 0; i < nfifos; ++i) table[i] = FifoEntry{-1, -1, 0};
  *out = std::move(map);
  return Status::Ok();
}

FifoView layoutFifo(Mapping& seg, uint32_t index, int peer, int channel) {
  SegHeader* hdr = seg.header();
  size_t offset = fifoStart(hdr->nfifos) + index * fifoStride(hdr->slots, hdr->slotSize);
  seg.entries()[index] = FifoEntry{peer, channel, offset};
  FifoView::initialize(seg.base() + offset, hdr->slots, hdr->slotSize);
  return FifoView(seg.base() + offset, hdr->slots, hdr->slotSize);
}

Status openSegment(const std::string& name, int expectRank, std::shared_ptr<Mapping>* out) {
  int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) {
    return errnoError(errno, "shm: cannot open rank %d's segment %s", expectRank, name.c_str());
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    return errnoError(err, "shm: cannot stat segment %s", name.c_str());
  }
  size_t size = static_cast<size_t>(st.st_size);
  if (size < sizeof(SegHeader)) {
    close(fd);
    return internalError("shm: segment %s is too small (%zu bytes)", name.c_str(), size);
  }
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);
  if (base == MAP_FAILED) return errnoError(err, "shm: cannot map segment %s", name.c_str());
  auto map = std::make_shared<Mapping>(base, size);
  const SegHeader* hdr = map->header();
  if (hdr->magic != kSegMagic || hdr->version != kSegVersion || hdr->rank != expectRank ||
      hdr->totalBytes != size || tableOffset() + hdr->nfifos * sizeof(FifoEntry) > size) {
    return internalError("shm: segment %s is not rank %d's (bad header)", name.c_str(), expectRank);
  }
  *out = std::move(map);
  return Status::Ok();
}

Status findFifo(Mapping& seg, int writer, int channel, FifoView* out) {
  const SegHeader* hdr = seg.header();
  if (hdr->slots == 0 || hdr->slotSize == 0 || hdr->slotSize % kCacheLine != 0) {
    return internalError("shm: rank %d's segment has a bad FIFO geometry", hdr->rank);
  }
  const size_t foot = FifoView::footprint(hdr->slots, hdr->slotSize);
  const FifoEntry* table = seg.entries();
  for (uint32_t i = 0; i < hdr->nfifos; ++i) {
    if (table[i].peer != writer || table[i].channel != channel) continue;
    if (table[i].offset % kCacheLine != 0 || table[i].offset + foot > seg.size()) {
      return internalError("shm: rank %d's FIFO table is corrupt", hdr->rank);
    }
    *out = FifoView(seg.base() + table[i].offset, hdr->slots, hdr->slotSize);
    return Status::Ok();
  }
  return internalError(
      "shm: rank %d has no FIFO for rank %d channel %d (do both sides agree "
      "that they share a node?)",
      hdr->rank, writer, channel);
}

void unlinkSegmentQuietly(const std::string& name) { shm_unlink(name.c_str()); }

void unlinkSegment(const std::string& name) {
  if (shm_unlink(name.c_str()) != 0 && errno != ENOENT) {
    TIDE_WARN("shm: cannot unlink %s: %s", name.c_str(), strerror(errno));
  }
}

}  // namespace tide::shm
