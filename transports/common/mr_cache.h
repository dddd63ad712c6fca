// Memory-registration cache shared by the verbs and UCX nets: an
// interval map of registered address ranges with reference counts and
// least-recently-used eviction of unreferenced entries.
//
// The cache does not know what a registration is: the owner passes a
// `register` and a `deregister` callback (ibv_reg_mr / ucp_mem_map in the
// transports, plain bookkeeping in the unit tests). Registrations cover whole
// pages (the range is widened to `pageSize`).
//
// Contract:
//  - acquire() returns an entry that covers [addr, addr + len): a cached one
//    (a hit) or a new registration (a miss). Unreferenced cached entries that
//    overlap the new range are merged into it (deregistered, their union
//    registered once), so a growing buffer does not pile up registrations.
//  - Every acquire() is paired with one release(). An entry is never
//    deregistered while referenced; unreferenced entries stay cached until
//    evicted (over maxEntries or maxBytes, oldest release first), invalidated
//    (the memory is being freed) or the cache is destroyed.
//  - Bounded: after every acquire() the cache holds at most maxEntries
//    entries and maxBytes bytes, unless referenced entries alone exceed that.
//  - Thread-safe (one internal mutex; callbacks run under it and must not
//    call back into the cache).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <mutex>

#include "core/status.h"

namespace tide {

class MrCache {
 public:
  struct Entry {
    uintptr_t base = 0;      // page-aligned start
    size_t len = 0;          // multiple of the page size
    void* handle = nullptr;  // what `register` returned
    int refs = 0;
    bool contains(uintptr_t a, size_t n) const { return a >= base && a + n <= base + len; }
  };
  using RegisterFn = std::function<Status(uintptr_t base, size_t len, void** handle)>;
  using DeregisterFn = std::function<void(void* handle)>;

  struct Stats {
    uint64_t hits = 0, misses = 0, evictions = 0, merges = 0;
  };

  MrCache(RegisterFn reg, DeregisterFn dereg, size_t maxEntries, size_t maxBytes,
          size_t pageSize = 4096);
  // Deregisters every entry (referenced ones too: the owner is shutting down).
  ~MrCache();
  MrCache(const MrCache&) = delete;
  MrCache& operator=(const MrCache&) = delete;

  // len == 0 is treated as 1 byte. *out stays valid until its release().
  Status acquire(const void* addr, size_t len, const Entry** out);
  void release(const Entry* e);
  // Deregisters every unreferenced entry overlapping [addr, addr + len) and
  // marks referenced ones so they are deregistered on their last release.
  void invalidate(const void* addr, size_t len);
  // Deregisters every unreferenced entry.
  void flush();

  size_t entries() const;
  size_t bytes() const;
  Stats stats() const;

 private:
  struct Node {
    Entry e;
    bool stale = false;              // invalidated while referenced
    std::list<Node*>::iterator lru;  // valid while e.refs == 0
  };
  using Map = std::multimap<uintptr_t, Node>;

  Map::iterator findCovering(uintptr_t a, size_t n);
  void drop(Map::iterator it);  // deregisters and erases; caller holds mu_
  void evictLocked();
  Map::iterator locate(const Entry* e);
  void touchUnreferenced(Node* n);

  RegisterFn reg_;
  DeregisterFn dereg_;
  size_t maxEntries_, maxBytes_, page_;
  mutable std::mutex mu_;
  Map map_;               // by base; overlaps only with referenced entries
  std::list<Node*> lru_;  // unreferenced entries, oldest first
  size_t bytes_ = 0;
  size_t maxLen_ = 0;  // longest entry ever inserted: bounds the backward scan
  Stats stats_;
};

}  // namespace tide
