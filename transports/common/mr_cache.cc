#include "transports/common/mr_cache.h"

#include <algorithm>
#include <vector>

namespace tide {

MrCache::MrCache(RegisterFn reg, DeregisterFn dereg, size_t maxEntries, size_t maxBytes,
                 size_t pageSize)
    : reg_(std::move(reg)),
      dereg_(std::move(dereg)),
      maxEntries_(std::max<size_t>(maxEntries, 1)),
      maxBytes_(maxBytes),
      page_(pageSize ? pageSize : 4096) {}

MrCache::~MrCache() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& kv : map_) dereg_(kv.second.e.handle);
  map_.clear();
  lru_.clear();
}

MrCache::Map::iterator MrCache::findCovering(uintptr_t a, size_t n) {
  // Entries that can cover a start at or below a, and no further below than
  // the longest entry.
  auto it = map_.upper_bound(a);
  while (it != map_.begin()) {
    --it;
    if (a - it->first > maxLen_) break;
    if (!it->second.stale && it->second.e.contains(a, n)) return it;
  }
  return map_.end();
}

void MrCache::drop(Map::iterator it) {
  Node& node = it->second;
  if (node.e.refs == 0) lru_.erase(node.lru);
  dereg_(node.e.handle);
  bytes_ -= node.e.len;
  map_.erase(it);
}

void MrCache::evictLocked() {
  while ((map_.size() > maxEntries_ || (maxBytes_ && bytes_ > maxBytes_)) && !lru_.empty()) {
    Node* victim = lru_.front();
    auto it = locate(&victim->e);
    drop(it);
    ++stats_.evictions;
  }
}

MrCache::Map::iterator MrCache::locate(const Entry* e) {
  auto range = map_.equal_range(e->base);
  for (auto it = range.first; it != range.second; ++it) {
    if (&it->second.e == e) return it;
  }
  return map_.end();
}

void MrCache::touchUnreferenced(Node* n) { n->lru = lru_.insert(lru_.end(), n); }

Status MrCache::acquire(const void* addr, size_t len, const Entry** out) {
  *out = nullptr;
  uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  size_t n = len ? len : 1;
  if (a + n < a) return invalidArgument("mr cache: range %p + %zu wraps around", addr, len);
  std::lock_guard<std::mutex> lock(mu_);
  auto hit = findCovering(a, n);
  if (hit != map_.end()) {
    Node& node = hit->second;
    if (node.e.refs++ == 0) lru_.erase(node.lru);
    ++stats_.hits;
    *out = &node.e;
    return Status::Ok();
  }
  ++stats_.misses;
  uintptr_t lo = a & ~static_cast<uintptr_t>(page_ - 1);
  uintptr_t hi = (a + n + page_ - 1) & ~static_cast<uintptr_t>(page_ - 1);
  // Merge unreferenced overlapping entries into the new range.
  std::vector<Map::iterator> merged;
  for (auto it = map_.begin(); it != map_.end() && it->first < hi; ++it) {
    const Entry& e = it->second.e;
    if (e.base + e.len > lo && e.refs == 0 && !it->second.stale) {
      lo = std::min(lo, e.base);
      hi = std::max(hi, e.base + e.len);
      merged.push_back(it);
    }
  }
  void* handle = nullptr;
  Status st = reg_(lo, hi - lo, &handle);
  if (!st.ok()) {
    // Registration may have failed for lack of pinnable memory: free what we
    // can and try once more with the exact range.
    for (auto it : merged) drop(it);
    merged.clear();
    while (!lru_.empty()) {
      drop(locate(&lru_.front()->e));
      ++stats_.evictions;
    }
    lo = a & ~static_cast<uintptr_t>(page_ - 1);
    hi = (a + n + page_ - 1) & ~static_cast<uintptr_t>(page_ - 1);
    TIDE_TRY(reg_(lo, hi - lo, &handle));
  }
  for (auto it : merged) {
    drop(it);
    ++stats_.merges;
  }
  Node node;
  node.e.base = lo;
  node.e.len = hi - lo;
  node.e.handle = handle;
  node.e.refs = 1;
  auto it = map_.emplace(lo, node);
  bytes_ += node.e.len;
  maxLen_ = std::max(maxLen_, node.e.len);
  *out = &it->second.e;
  evictLocked();
  return Status::Ok();
}

void MrCache::release(const Entry* e) {
  if (!e) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = locate(e);
  if (it == map_.end()) return;
  Node& node = it->second;
  if (node.e.refs <= 0) return;
  if (--node.e.refs > 0) return;
  if (node.stale) {
    dereg_(node.e.handle);
    bytes_ -= node.e.len;
    map_.erase(it);
    return;
  }
  touchUnreferenced(&node);
  evictLocked();
}

void MrCache::invalidate(const void* addr, size_t len) {
  uintptr_t lo = reinterpret_cast<uintptr_t>(addr);
  uintptr_t hi = lo + (len ? len : 1);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = map_.begin(); it != map_.end() && it->first < hi;) {
    auto next = std::next(it);
    Entry& e = it->second.e;
    if (e.base + e.len > lo) {
      if (e.refs == 0) {
        drop(it);
      } else {
        it->second.stale = true;
      }
    }
    it = next;
  }
}

void MrCache::flush() {
  std::lock_guard<std::mutex> lock(mu_);
  while (!lru_.empty()) drop(locate(&lru_.front()->e));
}

size_t MrCache::entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return map_.size();
}

size_t MrCache::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

MrCache::Stats MrCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace tide
