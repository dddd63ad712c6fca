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
                      int stochastic, unsigned long long seed) {
  tideCompressConfig_t c = TIDE_COMPRESS_CONFIG_INITIALIZER;
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
  tideCompressor_t k = Make(ctx.comm, s.codec, s.block, s.ratio, 1, s.stochastic ? 1 : 0, 42);
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
    if (!(std::fabs(got - ref) <= bound[j] * (1 + 1e-9) + 1e-300)) {
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
  const tideCodec_t codecs[] = {tideCodecFp16, tideCodecBf16, tideCodecInt8, tideCodecInt4,
                                tideCodecTopK};
  const CColl colls[] = {CColl::kAllReduce, CColl::kReduceScatter, CColl::kAllGather};
  const size_t sizes[] = {1, 7, 1001, 4099};
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
          s.block = count == 4099 ? 100 : 256;
          s.ratio = 0.05;
          s.avg = variant == 1 && coll != CColl::kAllGather;
          s.dtype = variant == 2 ? tideBfloat16 : tideFloat32;
          s.stochastic = variant == 1 && (codec == tideCodecInt8 || codec == tideCodecInt4);
          if (CheckOne(ctx, s, call++, /*inPlace=*/variant == 2) != 0) return 1;
        }
      }
    }
  }
  ctx.Logf("rank %d: %d compressed calls within their bounds\n", ctx.rank, call);
  return 0;
}

void RunRanks(int nranks, const char* worker, bool tcp, const char* hostIds = nullptr) {
  ProcessRunOptions o;
  o.exe = SelfExe();
  o.args = {std::string("--worker=") + worker};
  o.nranks = nranks;
  o.timeout_ms = 240000;
  o.env.emplace_back("TIDE_TIMEOUT", "60");
  if (tcp) o.env.emplace_back("TIDE_SHM_DISABLE", "1");
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
TEST(CompressNodes, TwoByTwo) { RunRanks(4, "matrix", false, "aabb"); }
TEST(CompressNodes, ThreeByTwo) { RunRanks(6, "matrix", false, "abcabc"); }
TEST(CompressFeedback, Steps200) { RunRanks(2, "feedback", false); }
TEST(CompressState, SaveRestore) { RunRanks(3, "state", false); }
TEST(CompressBadInput, NamedErrors) { RunRanks(2, "bad", false); }

}  // namespace tide_test

int main(int argc, char** argv) {
  if (argc > 1 && strncmp(argv[1], "--worker=", 9) == 0) {
    const std::string w = argv[1] + 9;
    if (w == "matrix") return tide_test::RunEnvRank(tide_test::Matrix);
    if (w == "feedback") return tide_test::RunEnvRank(tide_test::FeedbackSteps);
    if (w == "state") return tide_test::RunEnvRank(tide_test::StateRestore);
    if (w == "bad") return tide_test::RunEnvRank(tide_test::BadInput);
    fprintf(stderr, "unknown worker %s\n", w.c_str());
    return 2;
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
