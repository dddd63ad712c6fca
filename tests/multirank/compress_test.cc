// Compressed collectives (include/tide/compress.h) over real processes:
//  * Matrix: every codec x All-Reduce / ReduceScatter / AllGather x sum/avg x
//    float32/bfloat16 input x odd sizes (and in place), each element within
//    the documented bound (compress_bound.h) of an fp64 reference, and the
//    outputs of All-Reduce and AllGather byte-identical on every rank.
//  * Error feedback: over 200 steps the accumulated error stays within the
//    residuals' norm; without feedback it grows.
//  * State: 100 steps equal, byte for byte, 50 steps + save + a new
//    compressor + restore + 50 steps.
//  * Bad input: named errors, and the communicator stays usable.
// Ranks run as processes (this executable re-runs itself with --worker=...).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "compress_bound.h"
#include "gtest/gtest.h"
#include "minifloat.h"
#include "rank_harness.h"

namespace tide_test {
namespace {

uint64_t Fnv(const void* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const uint8_t*>(p)[i]) * 1099511628211ull;
  return h;
}

// Rank r's input of call `call`: uniform in [-1, 1], a few outliers, and an
// all-zero stretch (a zero block).
std::vector<double> Input(int r, int call, size_t n) {
  std::mt19937_64 g(0x5eedull * (call + 1) + static_cast<uint64_t>(r) * 7919u);
  std::uniform_real_distribution<double> d(-1, 1);
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = d(g);
  for (size_t i = 0; i < n; i += 997) v[i] *= 300;                     // outliers
  for (size_t i = n / 2; i < std::min(n, n / 2 + 300); ++i) v[i] = 0;  // a zero block
  return v;
}

// Rounds to the datatype and stores it; returns the values as stored.
std::vector<double> Store(const std::vector<double>& v, tideDataType_t dt,
                          std::vector<uint8_t>* buf) {
  std::vector<double> got(v.size());
  if (dt == tideFloat32) {
    buf->resize(v.size() * 4);
    for (size_t i = 0; i < v.size(); ++i) {
      const float f = static_cast<float>(v[i]);
      std::memcpy(buf->data() + 4 * i, &f, 4);
      got[i] = f;
    }
  } else {
    const MiniFormat f = dt == tideBfloat16 ? kBf16 : kFp16;
    buf->resize(v.size() * 2);
    for (size_t i = 0; i < v.size(); ++i) {
      const auto bits = static_cast<uint16_t>(EncodeMini(static_cast<float>(v[i]), f));
      std::memcpy(buf->data() + 2 * i, &bits, 2);
      got[i] = DecodeMini(bits, f);
    }
  }
  return got;
}

double Load(const std::vector<uint8_t>& buf, tideDataType_t dt, size_t i) {
  if (dt == tideFloat32) {
    float f;
    std::memcpy(&f, buf.data() + 4 * i, 4);
    return f;
  }
  uint16_t bits;
  std::memcpy(&bits, buf.data() + 2 * i, 2);
  return DecodeMini(bits, dt == tideBfloat16 ? kBf16 : kFp16);
}

tideCompressor_t Make(tideComm_t comm, tideCodec_t codec, int block, double ratio, int feedback,
                      int stochastic, unsigned long long seed, int interNodeOnly = 0) {
  tideCompressConfig_t c = TIDE_COMPRESS_CONFIG_INITIALIZER;
  c.interNodeOnly = interNodeOnly;
  c.codec = codec;
  c.blockSize = block;
  c.topkRatio = ratio;
  c.errorFeedback = feedback;
  c.stochasticRounding = stochastic;
  c.seed = seed;
  tideCompressor_t k = nullptr;
  return tideCompressorCreate(comm, &c, &k) == tideSuccess ? k : nullptr;
}

tideResult_t Call(const CSpec& s, const void* in, void* out, tideCompressor_t k, tideComm_t comm) {
  const tideRedOp_t op = s.avg ? tideAvg : tideSum;
  switch (s.coll) {
    case CColl::kReduceScatter:
      return tideReduceScatterCompressed(in, out, s.count, s.dtype, op, k, comm, nullptr);
    case CColl::kAllGather:
      return tideAllGatherCompressed(in, out, s.count, s.dtype, k, comm, nullptr);
    default:
      return tideAllReduceCompressed(in, out, s.count, s.dtype, op, k, comm, nullptr);
  }
}

// One checked call; returns 0 or logs and returns 1.
int CheckOne(ThreadRank& ctx, const CSpec& s, int call, bool inPlace) {
  const int n = ctx.nranks, me = ctx.rank;
  const size_t inLen = s.coll == CColl::kReduceScatter ? s.count * n : s.count;
  const size_t outLen = s.coll == CColl::kAllGather ? s.count * n : s.count;
  const size_t esize = s.dtype == tideFloat32 ? 4 : 2;
  std::vector<std::vector<double>> x(n);
  std::vector<uint8_t> in, out(outLen * esize, 0xee), scratch;
  for (int r = 0; r < n; ++r)
    x[r] = Store(Input(r, call, inLen), s.dtype, r == me ? &in : &scratch);
  tideCompressor_t k =
      Make(ctx.comm, s.codec, s.block, s.ratio, 1, s.stochastic ? 1 : 0, 42, s.interNodeOnly);
  if (k == nullptr) {
    ctx.Logf("rank %d: tideCompressorCreate failed: %s\n", me, tideGetLastError(ctx.comm));
    return 1;
  }
  const void* sb = in.data();
  void* rb = out.data();
  if (inPlace) {
    // NCCL's in-place layouts: AllGather sends from its block of recvbuff,
    // ReduceScatter receives into its block of sendbuff.
    if (s.coll == CColl::kAllGather) {
      std::memcpy(out.data() + me * s.count * esize, in.data(), s.count * esize);
      sb = out.data() + me * s.count * esize;
    } else if (s.coll == CColl::kReduceScatter) {
      rb = in.data() + me * s.count * esize;
    } else {
      rb = in.data();
      sb = in.data();
    }
  }
  CHECK_RC(Call(s, sb, rb, k, ctx.comm));
  CHECK_RC(tideCompressorDestroy(k));
  std::vector<uint8_t> res(outLen * esize);
  std::memcpy(res.data(), rb, res.size());
  const std::vector<double> bound = CBound(s, x, me);
  for (size_t j = 0; j < outLen; ++j) {
    double ref = 0;
    if (s.coll == CColl::kAllGather) {
      ref = x[j / s.count][j % s.count];
    } else {
      const size_t i = (s.coll == CColl::kReduceScatter ? me * s.count : 0) + j;
      for (int r = 0; r < n; ++r) ref += x[r][i];
      if (s.avg) ref /= n;
    }
    const double got = Load(res, s.dtype, j);
    if (!(std::fabs(got - ref) <= s.loosen * bound[j] * (1 + 1e-9) + 1e-300)) {
      ctx.Logf(
          "rank %d: call %d codec %d coll %d count %zu avg %d dtype %d inplace %d: element "
          "%zu is %.9g, want %.9g (error %.3g > bound %.3g)\n",
          me, call, s.codec, static_cast<int>(s.coll), s.count, s.avg, s.dtype, inPlace, j, got,
          ref, std::fabs(got - ref), bound[j]);
      return 1;
    }
  }
  if (s.coll != CColl::kReduceScatter) {
    // Byte-identical outputs on every rank.
    uint64_t h = Fnv(res.data(), res.size());
    std::vector<uint64_t> all(n);
    CHECK_RC(tideAllGather(&h, all.data(), 1, tideUint64, ctx.comm, nullptr));
    for (int r = 0; r < n; ++r) {
      if (all[r] != h) {
        ctx.Logf("rank %d: call %d: output differs from rank %d's\n", me, call, r);
        return 1;
      }
    }
  }
  return 0;
}

int Matrix(ThreadRank& ctx) {
  // TIDE_TEST_NODES: each rank's node as a letter (the TIDE_HOSTID layout of
  // the run): All-Reduce runs the hierarchical row (TIDE_ALGO), with its bound.
  const char* layout = getenv("TIDE_TEST_NODES");
  const bool hier = layout != nullptr && layout[0] != 0;
  std::vector<int> nodes;
  for (const char* c = hier ? layout : ""; *c != 0; ++c) nodes.push_back(*c - 'a');
  const tideCodec_t codecs[] = {tideCodecFp16, tideCodecBf16, tideCodecInt8, tideCodecInt4,
                                tideCodecTopK};
  const CColl colls[] = {CColl::kAllReduce, CColl::kReduceScatter, CColl::kAllGather};
  // The sanitizer stages (TIDE_TEST_REDUCED) run the odd sizes only: the
  // same code paths at a third of the cost.
  const bool reduced = getenv("TIDE_TEST_REDUCED") != nullptr;
  const std::vector<size_t> sizes =
      reduced ? std::vector<size_t>{7, 1001} : std::vector<size_t>{1, 7, 1001, 4099};
  int call = 0;
  for (tideCodec_t codec : codecs) {
    for (CColl coll : colls) {
      for (size_t count : sizes) {
        for (int variant = 0; variant < 3; ++variant) {
          CSpec s;
          s.codec = codec;
          s.coll = coll;
          s.count = count;
          s.nranks = ctx.nranks;
          s.block = count >= 1001 ? 100 : 256;
          s.ratio = 0.05;
          s.avg = variant == 1 && coll != CColl::kAllGather;
          s.dtype = variant == 2 ? tideBfloat16 : tideFloat32;
          s.stochastic = variant == 1 && (codec == tideCodecInt8 || codec == tideCodecInt4);
          if (hier) {
            s.nodeOf = nodes;
            s.interNodeOnly = variant == 2;
          }
          if (CheckOne(ctx, s, call++, /*inPlace=*/variant == 2) != 0) return 1;
        }
      }
    }
  }
  ctx.Logf("rank %d: %d compressed calls within their bounds\n", ctx.rank, call);
  return 0;
}

// TIDE_ALGO=allreduce:cmp_ring: the hop-by-hop ring, for comparison. Its
// error grows with the hops: each element within n times the phase-wise
// bound, and the outputs still byte-identical.
int Ring(ThreadRank& ctx) {
  int call = 1000;
  for (tideCodec_t codec : {tideCodecBf16, tideCodecInt8, tideCodecInt4}) {
    for (size_t count : {size_t{1}, size_t{7}, size_t{4099}}) {
      CSpec s;
      s.codec = codec;
      s.count = count;
      s.nranks = ctx.nranks;
      s.loosen = ctx.nranks;
      if (CheckOne(ctx, s, call++, false) != 0) return 1;
    }
  }
  ctx.Logf("rank %d: ring within %d x the bound\n", ctx.rank, ctx.nranks);
  return 0;
}

// Buffers of several pipeline segments (cmp_hier cuts above 2^20 elements,
// cmp_a2a too): every element within a coarse bound (every compression
// point's step at the largest magnitude) and the outputs byte-identical.
int Big(ThreadRank& ctx) {
  const int n = ctx.nranks, me = ctx.rank;
  const size_t N = (size_t{5} << 19) + 3;  // 2.5 segments
  for (tideCodec_t codec : {tideCodecInt8, tideCodecBf16}) {
    std::vector<float> in(N), out(N);
    for (size_t i = 0; i < N; ++i)
      in[i] = static_cast<float>(static_cast<long long>((i * 31 + me * 7) % 201) - 100) / 64;
    tideCompressor_t k = Make(ctx.comm, codec, 256, 0.01, 1, 0, 9);
    if (k == nullptr) return 1;
    CHECK_RC(tideAllReduceCompressed(in.data(), out.data(), N, tideFloat32, tideSum, k, ctx.comm,
                                     nullptr));
    CHECK_RC(tideCompressorDestroy(k));
    const double big = 100.0 / 64 * n;  // the largest possible |sum|
    const double step = codec == tideCodecInt8 ? big / 127 : big * std::ldexp(1.0, -8);
    for (size_t i = 0; i < N; ++i) {
      double want = 0;
      for (int r = 0; r < n; ++r)
        want += static_cast<double>(static_cast<long long>((i * 31 + r * 7) % 201) - 100) / 64;
      if (!(std::fabs(out[i] - want) <= 4 * n * step)) {
        ctx.Logf("rank %d: codec %d: element %zu is %g, want %g\n", me, codec, i, out[i], want);
        return 1;
      }
    }
    uint64_t h = Fnv(out.data(), N * sizeof(float));
    std::vector<uint64_t> all(n);
    CHECK_RC(tideAllGather(&h, all.data(), 1, tideUint64, ctx.comm, nullptr));
    for (int r = 0; r < n; ++r) {
      if (all[r] != h) {
        ctx.Logf("rank %d: codec %d: output differs from rank %d's\n", me, codec, r);
        return 1;
      }
    }
  }
  ctx.Logf("rank %d: multi-segment buffers within the coarse bound\n", me);
  return 0;
}

void RunRanks(int nranks, const char* worker, bool tcp, const char* hostIds = nullptr,
              const char* algo = nullptr) {
  ProcessRunOptions o;
  o.exe = SelfExe();
  o.args = {std::string("--worker=") + worker};
  o.nranks = nranks;
  o.timeout_ms = 240000;
  o.env.emplace_back("TIDE_TIMEOUT", "60");
  if (tcp) o.env.emplace_back("TIDE_SHM_DISABLE", "1");
  if (algo != nullptr) {
    o.env.emplace_back("TIDE_ALGO", std::string("allreduce:") + algo);
    if (std::string(algo) == "cmp_hier") o.env.emplace_back("TIDE_TEST_NODES", hostIds);
  }
  if (hostIds != nullptr) {
    const std::string ids = hostIds;  // one letter per rank: its node
    o.rank_env = [ids](int r) {
      return EnvList{{"TIDE_HOSTID", std::string("node-") + ids[static_cast<size_t>(r)]}};
    };
  }
  RunResult r = RunProcesses(o);
  EXPECT_TRUE(r.AllOk()) << r.Describe();
  for (const auto& rr : r.ranks) printf("%s", rr.output.c_str());
}

}  // namespace

int FeedbackSteps(ThreadRank& ctx);
int StateRestore(ThreadRank& ctx);
int BadInput(ThreadRank& ctx);

TEST(CompressShm, Ranks1) { RunRanks(1, "matrix", false); }
TEST(CompressShm, Ranks2) { RunRanks(2, "matrix", false); }
TEST(CompressShm, Ranks3) { RunRanks(3, "matrix", false); }
TEST(CompressShm, Ranks5) { RunRanks(5, "matrix", false); }
TEST(CompressShm, Ranks8) { RunRanks(8, "matrix", false); }
TEST(CompressTcp, Ranks2) { RunRanks(2, "matrix", true); }
TEST(CompressTcp, Ranks4) { RunRanks(4, "matrix", true); }
TEST(CompressNodes, TwoByTwo) { RunRanks(4, "matrix", false, "aabb", "cmp_a2a"); }
TEST(CompressNodes, ThreeByTwo) { RunRanks(6, "matrix", false, "abcabc", "cmp_a2a"); }
TEST(CompressNodes, TwoByTwoHier) { RunRanks(4, "matrix", false, "aabb", "cmp_hier"); }
TEST(CompressNodes, ThreeByTwoHier) { RunRanks(6, "matrix", false, "abcabc", "cmp_hier"); }
TEST(CompressFeedback, Steps200) { RunRanks(2, "feedback", false); }
TEST(CompressState, SaveRestore) { RunRanks(3, "state", false); }
TEST(CompressBig, Hier2x2) { RunRanks(4, "big", false, "aabb", "cmp_hier"); }
TEST(CompressBig, A2a3) { RunRanks(3, "big", false, nullptr, "cmp_a2a"); }
TEST(CompressRing, Ranks4) { RunRanks(4, "ring", false, nullptr, "cmp_ring"); }
TEST(CompressBadInput, NamedErrors) { RunRanks(2, "bad", false); }

}  // namespace tide_test

int main(int argc, char** argv) {
  if (argc > 1 && strncmp(argv[1], "--worker=", 9) == 0) {
    const std::string w = argv[1] + 9;
    if (w == "matrix") return tide_test::RunEnvRank(tide_test::Matrix);
    if (w == "feedback") return tide_test::RunEnvRank(tide_test::FeedbackSteps);
    if (w == "state") return tide_test::RunEnvRank(tide_test::StateRestore);
    if (w == "bad") return tide_test::RunEnvRank(tide_test::BadInput);
    if (w == "ring") return tide_test::RunEnvRank(tide_test::Ring);
    if (w == "big") return tide_test::RunEnvRank(tide_test::Big);
    fprintf(stderr, "unknown worker %s\n", w.c_str());
    return 2;
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
