#include "common/compress.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/harness.h"

namespace tide_perf {

bool ParseCodec(const char* s, CompressOptions* o) {
  static const struct {
    const char* name;
    tideCodec_t codec;
  } kNames[] = {{"none", tideCodecNone}, {"fp16", tideCodecFp16}, {"bf16", tideCodecBf16},
                {"int8", tideCodecInt8}, {"int4", tideCodecInt4}, {"topk", tideCodecTopK},
                {"auto", tideCodecAuto}};
  for (const auto& n : kNames) {
    if (std::strcmp(s, n.name) == 0) {
      o->codec = n.codec;
      o->topk_ratio = 0.01;
      o->spec = s;
      o->enabled = true;
      return true;
    }
  }
  if (std::strncmp(s, "topk:", 5) != 0) return false;
  char* end = nullptr;
  errno = 0;
  const double ratio = std::strtod(s + 5, &end);
  if (end == s + 5 || *end != '\0' || errno != 0 || !(ratio > 0 && ratio <= 1)) return false;
  o->codec = tideCodecTopK;
  o->topk_ratio = ratio;
  o->spec = s;
  o->enabled = true;
  return true;
}

const char* CompressUnsupported(CompressKind kind, const Backend& be, const DType& dt, int op) {
  if (!be.CanCompress()) {
    return "the MPI tools (*_perf_mpi) have no compressed collectives (MPI compresses "
           "nothing); run the Tide tool (all_reduce_perf, ...) for --compress";
  }
  if (kind == CompressKind::kNone) {
    return "only all_reduce_perf, reduce_scatter_perf and all_gather_perf have a compressed "
           "form";
  }
  if (dt.id != tideFloat32 && dt.id != tideBfloat16 && dt.id != tideFloat16) {
    return "compressed collectives take float, bfloat16 and half only";
  }
  if (op != kOpNone && op != tideSum && op != tideAvg) {
    return "compressed collectives take the ops sum and avg only";
  }
  return nullptr;
}

std::string CompressDescribe(const CompressOptions& o) {
  char buf[200];
  std::snprintf(buf, sizeof(buf), "%s block %d feedback %d stochastic %d seed 0x%llx",
                o.spec.c_str(), o.block, o.feedback, o.stochastic, kCompressSeed);
  return buf;
}

tideCompressConfig_t CompressConfig(const CompressOptions& o) {
  tideCompressConfig_t c = TIDE_COMPRESS_CONFIG_INITIALIZER;
  c.codec = o.codec;
  c.blockSize = o.block;
  c.topkRatio = o.codec == tideCodecTopK ? o.topk_ratio : 0.0;
  c.errorFeedback = o.feedback;
  c.stochasticRounding = o.stochastic;
  c.seed = kCompressSeed;
  return c;
}

tideResult_t CompressIssue(CompressKind kind, const Bench& b) {
  const tideRedOp_t op = static_cast<tideRedOp_t>(b.op);
  switch (kind) {
    case CompressKind::kAllReduce:
      return b.be->AllReduceCompressed(b.send, b.recv, b.count, b.dt->id, op, b.compressor);
    case CompressKind::kReduceScatter:
      return b.be->ReduceScatterCompressed(b.send, b.recv, b.count, b.dt->id, op, b.compressor);
    case CompressKind::kAllGather:
      return b.be->AllGatherCompressed(b.send, b.recv, b.count, b.dt->id, b.compressor);
    case CompressKind::kNone:
      break;
  }
  return tideInvalidUsage;
}

double CompressValue(const DType& dt, uint64_t seed, int rank, size_t index) {
  // The region's scale is common to every rank (gradients of one layer have
  // one magnitude on every replica); the value itself is the rank's own.
  const uint64_t region = Mix64(seed ^ 0x726567696f6eull ^ Mix64(index >> 10));
  if ((region & 63) == 0) return 0;
  const int scale = static_cast<int>((region >> 8) % 9) - 6;
  const uint64_t h = Mix64(seed ^ Mix64((static_cast<uint64_t>(rank) << 40) ^ index));
  // Sum of four 16-bit uniforms, centered: roughly normal, |g| < 2.
  const double g =
      (static_cast<double>(h & 0xffff) + static_cast<double>((h >> 16) & 0xffff) +
       static_cast<double>((h >> 32) & 0xffff) + static_cast<double>(h >> 48) - 2 * 65535.0) /
      65536.0;
  double v = std::ldexp(g, scale);
  if ((Mix64(h) & 2047) == 0) v *= 32;
  switch (dt.id) {
    case tideFloat32:
      return static_cast<double>(static_cast<float>(v));
    default: {
      unsigned char bytes[8] = {};
      Encode(dt, v, bytes);
      return Decode(dt, bytes);
    }
  }
}

uint64_t CompressNodeKey() {
  std::string id;
  for (const char* var : {"TIDE_HOSTID", "NCCL_HOSTID"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && *v != '\0') {
      id = v;
      break;
    }
  }
  if (id.empty()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    id = host;
    struct stat st {};
    if (stat("/proc/self/ns/net", &st) == 0) {
      id += "/netns:" + std::to_string(static_cast<unsigned long>(st.st_ino));
    }
  }
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (unsigned char ch : id) h = (h ^ ch) * 0x100000001b3ull;
  return h;
}

CompressNodes CompressNodesOf(const std::vector<uint64_t>& keys) {
  CompressNodes l;
  std::vector<uint64_t> seen;
  std::vector<int> size;
  for (uint64_t k : keys) {
    size_t i = 0;
    while (i < seen.size() && seen[i] != k) ++i;
    if (i == seen.size()) {
      seen.push_back(k);
      size.push_back(0);
    }
    ++size[i];
    l.node_of.push_back(static_cast<int>(i));
  }
  l.nodes = std::max<int>(1, static_cast<int>(seen.size()));
  for (int s : size) l.equal = l.equal && s == size.front();
  return l;
}

void CompressPrepare(CompressKind kind, const Bench& b, uint64_t seed) {
  GarbageRecv(b);
  const size_t n = kind == CompressKind::kReduceScatter ? b.send_count : b.count;
  const DType& dt = *b.dt;
  char* dst = static_cast<char*>(b.send);
  for (size_t i = 0; i < n; ++i) {
    const double v = CompressValue(dt, seed, b.rank, i);
    if (dt.id == tideFloat32) {
      const float f = static_cast<float>(v);
      std::memcpy(dst + i * 4, &f, 4);
    } else {
      Encode(dt, v, dst + i * dt.size);
    }
  }
}

}  // namespace tide_perf
