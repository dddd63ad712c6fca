// The compressed collectives' workers beyond the bound matrix
// (compress_test.cc runs them as processes): error feedback over many steps,
// state save and restore, and bad input.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "rank_harness.h"
#include "tide/compress.h"

namespace tide_test {

namespace {

std::vector<float> Gradient(int r, int step, size_t n) {
  std::mt19937_64 g(0xfeedull + static_cast<uint64_t>(step) * 131 + static_cast<uint64_t>(r));
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = d(g);
  return v;
}

tideCompressor_t Make(tideComm_t comm, tideCodec_t codec, int feedback, int stochastic,
                      double ratio = 0.01) {
  tideCompressConfig_t c = TIDE_COMPRESS_CONFIG_INITIALIZER;
  c.codec = codec;
  c.errorFeedback = feedback;
  c.stochasticRounding = stochastic;
  c.topkRatio = ratio;
  c.seed = 1234;
  tideCompressor_t k = nullptr;
  return tideCompressorCreate(comm, &c, &k) == tideSuccess ? k : nullptr;
}

// The residual norms in a saved state: the 32-byte compressor header, then
// the codec state's 32-byte header (magic, version, counter, sender size,
// owner size) and the sender's and owner's floats (docs/compression.md).
bool ResidualNorms(tideCompressor_t k, double* sender2, double* owner2) {
  size_t bytes = 0;
  if (tideCompressorGetState(k, nullptr, &bytes) != tideSuccess) return false;
  std::vector<uint8_t> buf(bytes);
  if (tideCompressorGetState(k, buf.data(), &bytes) != tideSuccess || bytes < 64) return false;
  uint64_t ns = 0, no = 0;
  std::memcpy(&ns, buf.data() + 32 + 16, 8);
  std::memcpy(&no, buf.data() + 32 + 24, 8);
  if (64 + 4 * (ns + no) != bytes) return false;
  const auto* f = reinterpret_cast<const float*>(buf.data() + 64);
  *sender2 = *owner2 = 0;
  for (uint64_t i = 0; i < ns; ++i) *sender2 += static_cast<double>(f[i]) * f[i];
  for (uint64_t i = 0; i < no; ++i) *owner2 += static_cast<double>(f[ns + i]) * f[ns + i];
  return true;
}

}  // namespace

// Over 200 steps the accumulated error of the compressed sums stays within
// the current residuals' norm with error feedback, and grows without it.
int FeedbackSteps(ThreadRank& ctx) {
  const int n = ctx.nranks, me = ctx.rank;
  const size_t N = 4096;
  const tideCodec_t codecs[] = {tideCodecInt8, tideCodecInt4, tideCodecTopK};
  for (tideCodec_t codec : codecs) {
    double grown[2] = {0, 0};
    for (int feedback : {1, 0}) {
      tideCompressor_t k = Make(ctx.comm, codec, feedback, 0);
      if (k == nullptr) return 1;
      std::vector<double> sumOut(N, 0), sumExact(N, 0);
      std::vector<float> out(N);
      double err20 = 0;
      for (int t = 1; t <= 200; ++t) {
        std::vector<float> g = Gradient(me, t, N);
        CHECK_RC(tideAllReduceCompressed(g.data(), out.data(), N, tideFloat32, tideSum, k, ctx.comm,
                                         nullptr));
        for (int r = 0; r < n; ++r) {
          const std::vector<float> gr = Gradient(r, t, N);
          for (size_t i = 0; i < N; ++i) sumExact[i] += gr[i];
        }
        for (size_t i = 0; i < N; ++i) sumOut[i] += out[i];
        if (t % 20 != 0) continue;
        double e2 = 0;
        for (size_t i = 0; i < N; ++i) e2 += (sumOut[i] - sumExact[i]) * (sumOut[i] - sumExact[i]);
        const double err = std::sqrt(e2);
        if (t == 20) err20 = err;
        if (feedback == 1) {
          double norms[2];
          if (!ResidualNorms(k, &norms[0], &norms[1])) {
            ctx.Logf("rank %d: could not read the residuals\n", me);
            return 1;
          }
          // E = -(sum of the senders' residuals + the owners' residuals):
          // its norm is at most the sum of the senders' norms plus the norm
          // of all owners' residuals together.
          double all[2 * 16] = {};
          all[2 * me] = std::sqrt(norms[0]);
          all[2 * me + 1] = norms[1];
          CHECK_RC(tideAllReduce(all, all, 2 * n, tideFloat64, tideSum, ctx.comm, nullptr));
          double bound = 0, owners = 0;
          for (int r = 0; r < n; ++r) {
            bound += all[2 * r];
            owners += all[2 * r + 1];
          }
          bound += std::sqrt(owners);
          if (err > 1.02 * bound + 1e-3) {
            ctx.Logf(
                "rank %d: codec %d step %d: accumulated error %.4g above the residuals' "
                "norm %.4g\n",
                me, codec, t, err, bound);
            return 1;
          }
        }
        if (t == 200) grown[feedback] = err / std::max(err20, 1e-30);
      }
      CHECK_RC(tideCompressorDestroy(k));
    }
    ctx.Logf(
        "rank %d: codec %d: error growth from step 20 to 200: %.2fx with feedback, %.2fx "
        "without\n",
        me, codec, grown[1], grown[0]);
    if (!(grown[0] > 2.0) || !(grown[1] < grown[0])) {
      ctx.Logf("rank %d: codec %d: the error without feedback does not grow (%.2fx)\n", me, codec,
               grown[0]);
      return 1;
    }
  }
  return 0;
}

// 100 steps equal, byte for byte, 50 steps + save + new compressor + restore
// + 50 steps (stochastic rounding on: the generator position is state too).
int StateRestore(ThreadRank& ctx) {
  const int me = ctx.rank;
  const size_t N = 3001;
  for (tideCodec_t codec : {tideCodecInt8, tideCodecInt4, tideCodecTopK, tideCodecBf16}) {
    std::vector<uint64_t> hashes[2];
    for (int run = 0; run < 2; ++run) {
      tideCompressor_t k = Make(ctx.comm, codec, 1, codec == tideCodecBf16 ? 0 : 1, 0.05);
      if (k == nullptr) return 1;
      std::vector<float> out(N);
      for (int t = 1; t <= 100; ++t) {
        if (run == 1 && t == 51) {
          size_t bytes = 0;
          CHECK_RC(tideCompressorGetState(k, nullptr, &bytes));
          std::vector<uint8_t> saved(bytes);
          CHECK_RC(tideCompressorGetState(k, saved.data(), &bytes));
          CHECK_RC(tideCompressorDestroy(k));
          k = Make(ctx.comm, codec, 1, codec == tideCodecBf16 ? 0 : 1, 0.05);
          if (k == nullptr) return 1;
          // A corrupt copy is refused and changes nothing.
          std::vector<uint8_t> bad = saved;
          bad[0] ^= 0xff;
          if (tideCompressorSetState(k, bad.data(), bad.size()) != tideInvalidArgument) {
            ctx.Logf("rank %d: a corrupt state was accepted\n", me);
            return 1;
          }
          if (tideCompressorSetState(k, saved.data(), saved.size() - 4) != tideInvalidArgument) {
            ctx.Logf("rank %d: a truncated state was accepted\n", me);
            return 1;
          }
          CHECK_RC(tideCompressorSetState(k, saved.data(), saved.size()));
        }
        std::vector<float> g = Gradient(me, t, N);
        CHECK_RC(tideAllReduceCompressed(g.data(), out.data(), N, tideFloat32, tideAvg, k, ctx.comm,
                                         nullptr));
        uint64_t h = 1469598103934665603ull;
        const auto* p = reinterpret_cast<const uint8_t*>(out.data());
        for (size_t i = 0; i < N * 4; ++i) h = (h ^ p[i]) * 1099511628211ull;
        hashes[run].push_back(h);
      }
      CHECK_RC(tideCompressorDestroy(k));
    }
    for (size_t t = 0; t < hashes[0].size(); ++t) {
      if (hashes[0][t] != hashes[1][t]) {
        ctx.Logf("rank %d: codec %d: step %zu differs after save and restore\n", me, codec, t + 1);
        return 1;
      }
    }
  }
  ctx.Logf("rank %d: restored compressors continue exactly\n", me);
  return 0;
}

#define EXPECT_RESULT(call, want)                                                    \
  do {                                                                               \
    const tideResult_t got_ = (call);                                                \
    if (got_ != (want)) {                                                            \
      ctx.Logf("rank %d: line %d: %s gave %s, want %s\n", ctx.rank, __LINE__, #call, \
               tideGetErrorString(got_), tideGetErrorString(want));                  \
      return 1;                                                                      \
    }                                                                                \
  } while (0)

// Bad arguments fail with tideInvalidArgument and a message; the
// communicator stays usable. NaN and Inf never crash or hang.
int BadInput(ThreadRank& ctx) {
  const int n = ctx.nranks, me = ctx.rank;
  tideCompressConfig_t c = TIDE_COMPRESS_CONFIG_INITIALIZER;
  tideCompressor_t k = nullptr;
  c.codec = tideCodecInt8;
  EXPECT_RESULT(tideCompressorCreate(ctx.comm, nullptr, &k), tideInvalidArgument);
  EXPECT_RESULT(tideCompressorCreate(ctx.comm, &c, nullptr), tideInvalidArgument);
  EXPECT_RESULT(tideCompressorCreate(nullptr, &c, &k), tideInvalidArgument);
  c.codec = static_cast<tideCodec_t>(99);
  EXPECT_RESULT(tideCompressorCreate(ctx.comm, &c, &k), tideInvalidArgument);
  c.codec = tideCodecInt8;
  for (int block : {0, -3, (1 << 20) + 1}) {
    c.blockSize = block;
    EXPECT_RESULT(tideCompressorCreate(ctx.comm, &c, &k), tideInvalidArgument);
  }
  c.blockSize = TIDE_CONFIG_UNDEF_INT;
  c.topkRatio = 1.5;
  EXPECT_RESULT(tideCompressorCreate(ctx.comm, &c, &k), tideInvalidArgument);
  c.topkRatio = 0;
  c.errorFeedback = 2;
  EXPECT_RESULT(tideCompressorCreate(ctx.comm, &c, &k), tideInvalidArgument);
  c.errorFeedback = TIDE_CONFIG_UNDEF_INT;
  CHECK_RC(tideCompressorCreate(ctx.comm, &c, &k));

  std::vector<float> in(100, 1.0f), out(400, 0.0f);
  EXPECT_RESULT(
      tideAllReduceCompressed(in.data(), out.data(), 100, tideInt32, tideSum, k, ctx.comm, nullptr),
      tideInvalidArgument);
  EXPECT_RESULT(tideAllReduceCompressed(in.data(), out.data(), 100, tideFloat32, tideMax, k,
                                        ctx.comm, nullptr),
                tideInvalidArgument);
  EXPECT_RESULT(tideAllReduceCompressed(in.data(), out.data(), 100, tideFloat32, tideSum, nullptr,
                                        ctx.comm, nullptr),
                tideInvalidArgument);
  EXPECT_RESULT(
      tideAllReduceCompressed(nullptr, out.data(), 100, tideFloat32, tideSum, k, ctx.comm, nullptr),
      tideInvalidArgument);
  // A compressor of another communicator.
  tideComm_t other = nullptr;
  CHECK_RC(tideCommSplit(ctx.comm, 0, me, &other, nullptr));
  tideCompressor_t foreign = nullptr;
  CHECK_RC(tideCompressorCreate(other, &c, &foreign));
  EXPECT_RESULT(tideAllReduceCompressed(in.data(), out.data(), 100, tideFloat32, tideSum, foreign,
                                        ctx.comm, nullptr),
                tideInvalidArgument);
  CHECK_RC(tideCompressorDestroy(foreign));
  CHECK_RC(tideCommDestroy(other));
  // The first call fixes the count.
  CHECK_RC(tideAllReduceCompressed(in.data(), out.data(), 100, tideFloat32, tideSum, k, ctx.comm,
                                   nullptr));
  EXPECT_RESULT(tideAllReduceCompressed(in.data(), out.data(), 50, tideFloat32, tideSum, k,
                                        ctx.comm, nullptr),
                tideInvalidArgument);
  const std::string why = tideGetLastError(ctx.comm);
  if (why.find("100") == std::string::npos || why.find("50") == std::string::npos) {
    ctx.Logf("rank %d: the count error does not name both counts: %s\n", me, why.c_str());
    return 1;
  }
  CHECK_RC(tideCompressorDestroy(k));

  // NaN and Inf: NaN/Inf where an uncompressed sum has them.
  for (tideCodec_t codec : {tideCodecFp16, tideCodecBf16, tideCodecInt8, tideCodecInt4}) {
    c.codec = codec;
    CHECK_RC(tideCompressorCreate(ctx.comm, &c, &k));
    std::vector<float> v(1000, 0.5f);
    if (me == 0) {
      v[5] = NAN;
      v[700] = INFINITY;
    }
    std::vector<float> r(1000);
    CHECK_RC(tideAllReduceCompressed(v.data(), r.data(), 1000, tideFloat32, tideSum, k, ctx.comm,
                                     nullptr));
    if (!std::isnan(r[5]) || std::isfinite(r[700])) {
      ctx.Logf("rank %d: codec %d: NaN/Inf input gave %g and %g\n", me, codec, r[5], r[700]);
      return 1;
    }
    CHECK_RC(tideCompressorDestroy(k));
  }
  // Still usable: a plain and a compressed call.
  std::vector<float> ones(64, 1.0f), sum(64);
  CHECK_RC(tideAllReduce(ones.data(), sum.data(), 64, tideFloat32, tideSum, ctx.comm, nullptr));
  if (sum[0] != static_cast<float>(n)) return 1;
  c.codec = tideCodecBf16;
  CHECK_RC(tideCompressorCreate(ctx.comm, &c, &k));
  CHECK_RC(tideAllReduceCompressed(ones.data(), sum.data(), 64, tideFloat32, tideSum, k, ctx.comm,
                                   nullptr));
  CHECK_RC(tideCompressorDestroy(k));
  if (sum[0] != static_cast<float>(n)) return 1;
  ctx.Logf("rank %d: bad input refused by name; communicator usable\n", me);
  return 0;
}

}  // namespace tide_test
