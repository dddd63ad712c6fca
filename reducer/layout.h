// Bucket layouts of the gradient reducer: packing gradients into buckets in
// a readiness order, the layout's fingerprint, and the cost model's bucket
// size (docs/overlap.md, "Buckets"). Pure functions but chooseBucketBytes,
// which asks the communicator's cost model (tideCommPredictTime).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tide/tide.h"

namespace tide_reducer {

constexpr size_t kDefaultBucketBytes = size_t{25} << 20;
constexpr size_t kDefaultFirstBucketBytes = size_t{1} << 20;

// Bucket capacities in bytes: the first bucket (the first to launch) is
// small so communication starts early; the others hold bucketBytes.
struct Sizes {
  size_t bucketBytes = kDefaultBucketBytes;
  size_t firstBucketBytes = kDefaultFirstBucketBytes;
};

// Buckets in launch order, each the gradient indices in staging order.
using Layout = std::vector<std::vector<int>>;

// Packs the gradients in `order` (a permutation of 0..n-1, first ready
// first): a bucket takes the next gradient while its bytes stay within the
// capacity (a gradient larger than it gets a bucket of its own).
// groups (empty: none): a bucket never holds two groups' gradients.
Layout pack(const std::vector<int>& order, const std::vector<size_t>& counts, size_t elemSize,
            const Sizes& sizes, const std::vector<int>& groups = {});
// The initial order: reverse index order (a backward pass produces the last
// layer's gradients first).
std::vector<int> reverseOrder(int n);
// Whether `order` is a permutation of 0..n-1.
bool isPermutation(const std::vector<int>& order, int n);
// Whether `layout` holds every gradient of 0..n-1 exactly once.
bool isLayoutOf(const Layout& layout, int n);
// FNV-1a 64-bit over bytes (continuing from `h`), and over a layout.
uint64_t fnv(const void* data, size_t n, uint64_t h = 0xcbf29ce484222325ull);
uint64_t layoutHash(const Layout& layout);

// bucketBytes = SIZE_MAX: the smallest power of two from 1 MiB to 256 MiB
// whose predicted All-Reduce time per byte is within 10 % of a 256 MiB
// call's (latency is then under ~10 % of a bucket's time and the tail after
// the backward pass stays short); 25 MiB where the model has nothing to say
// (one rank, or the query fails). The same on every rank (the cost model is
// a function of the shared topology).
size_t chooseBucketBytes(tideComm_t comm);

}  // namespace tide_reducer
