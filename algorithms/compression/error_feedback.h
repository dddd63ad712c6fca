// Error feedback: what a lossy codec did not send, kept per logical buffer and
// added to that buffer's next input, so that nothing is lost for good.
//
// One compression point (a Residual r of the n elements it compresses):
//   encodeFeedback(codec, x, r.data(), n, ...)  or  topkFeedback(x, r.data(), ...)
// sends C(x + r) and keeps r = (x + r) - D(C(x + r)). Over steps t the sum of
// what was sent equals the sum of the inputs minus the current residual:
//   sum_t D(C_t) = sum_t x_t - r_T   (up to fp32 rounding),
// so the accumulated error stays the size of one residual instead of growing
// with t.
//
// Two points (FeedbackState), for an algorithm that compresses twice, as an
// all-to-all / reduce / all-gather All-Reduce does (1-bit Adam's "worker" and
// "server" errors). Rank q of R ranks, buffer of n elements cut into R shards
// (shard j: offset o_j, length n_j), in one step:
//   1. sender: for each shard j, encodeFeedback(codec, x + o_j,
//      sender.data() + o_j, n_j, ...) into wire_j; the sender residual covers
//      all n elements. Send wire_j to rank j.
//   2. owner (rank q, shard q): acc = 0; decodeAcc of the R wires received, in
//      rank order (the same sum on every rank and every run).
//   3. owner: encodeFeedback(codec, acc, owner.data(), n_q, ...) into out_q;
//      the owner residual covers its shard only (n_q elements). The owner,
//      like every other rank, takes decode(out_q) as the result (byte-identical
//      results everywhere).
//   4. all-gather the out_j; every rank decodes each into its result.
// The sender's error re-enters through its next input (step 1), the owner's
// through the next reduced shard (step 3). With stochastic rounding the two
// points use distinct position ranges, e.g. counter + o_j for step 1 and
// counter + n + o_q for step 3, and the caller advances counter by 2 n after
// the step. State (both residuals and the counter) is what a checkpoint saves.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tide::codec {

// The residual of one compression point: n floats, zero when created.
class Residual {
 public:
  // Sets the size to n: kept elements keep their values, new ones are zero.
  // False (size unchanged) when memory runs out.
  bool resize(size_t n) noexcept;
  // Every element zero; the size stays.
  void reset() noexcept;
  float* data() noexcept { return r_.data(); }
  const float* data() const noexcept { return r_.data(); }
  size_t size() const noexcept { return r_.size(); }
  // Euclidean norm, accumulated in double.
  double norm() const noexcept;

 private:
  std::vector<float> r_;
};

// The state of a compressor that compresses twice (see the top of this file).
struct FeedbackState {
  Residual sender;       // worker error: over the whole input buffer
  Residual owner;        // server error: over this rank's shard
  uint64_t counter = 0;  // stochastic-rounding position; the caller advances it

  // Both residuals zero and the counter 0 (sizes kept).
  void reset() noexcept;

  // Serialized state: a 32-byte header (uint32 magic 0x46454454 "TDEF",
  // uint32 version 1, uint64 counter, uint64 sender size, uint64 owner size;
  // little-endian) and then the sender's and the owner's floats.
  size_t stateBytes() const noexcept;
  // False when `bytes` < stateBytes() (nothing written).
  bool save(void* buf, size_t bytes) const noexcept;
  // False, state unchanged, when buf is not a state of exactly `bytes` bytes
  // (bad magic or version, sizes that do not add up) or memory runs out.
  bool load(const void* buf, size_t bytes) noexcept;
};

}  // namespace tide::codec
