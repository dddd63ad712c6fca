// The two phases every compressed collective of the casting and quantizing
// codecs is made of, over a group of ranks (all ranks, or a node, or the
// same local rank of every node: algorithms/hier.h's groups):
//   scatterReduce: piece p of the input goes, encoded once, to member p;
//     each member sums its piece (its own values exact, the others decoded)
//     in member order, so the sum is the same on every run.
//   encodeGather: each member's piece is encoded once and every member
//     decodes every piece, its own included (byte-identical results).
// And the small helpers of the rows (compressed_a2a.cc, compressed_hier.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "algorithms/compression/compressed_wire.h"
#include "algorithms/hier.h"

namespace tide::cmp {

// Offsets and lengths of the pieces of a buffer, one per group member.
struct Pieces {
  std::vector<size_t> off, len;
};
// n elements in `parts` shards of ceil(n / parts) (the last ones short).
Pieces shardPieces(size_t n, int parts);
// `parts` consecutive blocks of `block` elements.
Pieces blockPieces(size_t block, int parts);

// Ranks 0..n-1 in rank order, this rank at its own index.
hier::Group allRanks(const ExecCtx& ctx);

// The transfers of one phase between its post and its finish (split-phase
// use lets a row start the next segment's work while this one is on the
// wire; the wrappers below post and finish at once). Members are filled by
// the post functions.
struct Exchange {
  std::vector<char*> in;
  std::vector<Pending> recvs, sends;
  char* own = nullptr;  // gather: this member's encoded piece
};

// Posts the receives, then encodes and sends each peer's piece (no wait).
// False (error set on ctx) when scratch or encoding failed.
bool postScatter(ExecCtx& ctx, const hier::Group* g, Wire wire, const float* x, float* resid,
                 uint64_t pos, const Pieces* pieces, Exchange* ex);
// Waits for the pieces in member order and sums them with this member's own
// (x must still hold it) into acc; then waits for the sends.
Task finishScatter(ExecCtx& ctx, const hier::Group* g, Wire wire, const float* x,
                   const Pieces* pieces, Exchange* ex, float* acc);
bool postGather(ExecCtx& ctx, const hier::Group* g, Wire wire, const float* mine, float* resid,
                uint64_t pos, const Pieces* pieces, Exchange* ex);
Task finishGather(ExecCtx& ctx, const hier::Group* g, Wire wire, const Pieces* pieces, Exchange* ex,
                  float* result);

// resid: a residual over x (indexed like x) added before encoding, or null.
// pos: the stochastic-rounding position of x[0]. acc: the member's piece
// (len[g.idx] floats). Errors are set on ctx.
Task scatterReduce(ExecCtx& ctx, const hier::Group* g, Wire wire, const float* x, float* resid,
                   uint64_t pos, const Pieces* pieces, float* acc);
// mine: this member's piece (len[g.idx] floats); resid: a residual over it,
// or null; result: the whole buffer (fp32, indexed by the pieces).
Task encodeGather(ExecCtx& ctx, const hier::Group* g, Wire wire, const float* mine, float* resid,
                  uint64_t pos, const Pieces* pieces, float* result);

// The call's input as fp32: the buffer itself (float32) or a converted copy.
const float* floatInput(ExecCtx& ctx, const CollArgs& a, size_t n);
// fp32 result space: the receive buffer itself (float32) or scratch.
float* floatOutput(ExecCtx& ctx, const CollArgs& a, size_t n);

codec::FeedbackState* stateOf(const CollArgs& a);
// Sizes a residual to n elements (the compressor fixed the count); null when
// error feedback is off (or n is 0).
float* residual(ExecCtx& ctx, const CollArgs& a, codec::Residual& r, size_t n);
// Multiplies v by 1/n when the call is an Avg.
void scaleAvg(const CollArgs& a, int n, float* v, size_t count);
void fail(ExecCtx& ctx, const char* what);

}  // namespace tide::cmp
