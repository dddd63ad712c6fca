// Bucket layouts (reducer/layout.h).
#include "reducer/layout.h"

#include <cstring>

namespace tide_reducer {

Layout pack(const std::vector<int>& order, const std::vector<size_t>& counts, size_t elemSize,
            const Sizes& sizes, const std::vector<int>& groups) {
  Layout out;
  size_t bytes = 0;
  auto group = [&](int g) { return groups.empty() ? 0 : groups[static_cast<size_t>(g)]; };
  for (int g : order) {
    const size_t b = counts[static_cast<size_t>(g)] * elemSize;
    // The bucket being filled is out.back(); the first one has its own cap.
    const size_t capNow = out.size() == 1 ? sizes.firstBucketBytes : sizes.bucketBytes;
    if (out.empty() || (bytes > 0 && bytes + b > capNow) || group(out.back().front()) != group(g)) {
      out.emplace_back();
      bytes = 0;
    }
    out.back().push_back(g);
    bytes += b;
  }
  return out;
}

std::vector<int> reverseOrder(int n) {
  std::vector<int> o(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) o[static_cast<size_t>(i)] = n - 1 - i;
  return o;
}

bool isPermutation(const std::vector<int>& order, int n) {
  if (static_cast<int>(order.size()) != n) return false;
  std::vector<unsigned char> seen(static_cast<size_t>(n), 0);
  for (int g : order) {
    if (g < 0 || g >= n || seen[static_cast<size_t>(g)]) return false;
    seen[static_cast<size_t>(g)] = 1;
  }
  return true;
}

bool isLayoutOf(const Layout& layout, int n) {
  std::vector<int> all;
  for (const auto& b : layout) {
    if (b.empty()) return false;
    all.insert(all.end(), b.begin(), b.end());
  }
  return isPermutation(all, n);
}

uint64_t fnv(const void* data, size_t n, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

uint64_t layoutHash(const Layout& layout) {
  uint64_t h = fnv("layout", 6);
  for (const auto& b : layout) {
    const uint64_t n = b.size();
    h = fnv(&n, sizeof(n), h);
    h = fnv(b.data(), b.size() * sizeof(int), h);
  }
  return h;
}

size_t chooseBucketBytes(tideComm_t comm) {
  constexpr size_t kMin = size_t{1} << 20, kMax = size_t{256} << 20;
  double refUs = 0;
  if (tideCommPredictTime(comm, tideCollAllReduce, kMax, &refUs) != tideSuccess || refUs <= 0)
    return kDefaultBucketBytes;
  const double refPerByte = refUs / static_cast<double>(kMax);
  for (size_t b = kMin; b < kMax; b <<= 1) {
    double us = 0;
    if (tideCommPredictTime(comm, tideCollAllReduce, b, &us) != tideSuccess) break;
    if (us / static_cast<double>(b) <= 1.1 * refPerByte) return b;
  }
  return kMax;
}

}  // namespace tide_reducer
