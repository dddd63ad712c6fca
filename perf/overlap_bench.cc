// overlap_bench: how much of the gradient All-Reduce the reducer
// (include/tide/reducer.h) hides behind a backward pass. A client of the
// public API only; run it under any launcher Tide understands:
//
//   tiderun -n 2 build/perf/overlap_bench [--layers L] [--layer-mib M]
//       [--compute-ms C] [--bucket-mb B] [--steps S] [--compress CODEC]
//       [--trace FILE]
//
// A synthetic backward pass of L layers (default 16) in reverse order: each
// layer is a compute phase of C ms (real fp32 arithmetic on one core, timed
// by the clock, not a sleep) that then writes its gradient of M MiB
// (default 4, float32). Without --compute-ms, C is calibrated at start so
// that the whole backward (arithmetic and gradient writes) takes as long as
// one reduction of all gradients measured just before (rank 0's
// measurement, broadcast). Buckets: B MiB, or
// (default) the cost model's choice (bucketBytes = SIZE_MAX). Every step
// (default 10, after one warm-up) runs four phases, each timed as the
// slowest rank's time:
//   compute     the backward alone, no communication
//   comm        the reduction alone (every gradient marked at once)
//   serialized  the backward, then the reduction
//   overlapped  the backward, each layer marked ready as it finishes
// and the ideal is max(compute, comm) of the step. A per-step table, then
// the medians over the steps as `serialized_ms: X`, `overlapped_ms: Y`,
// `ideal_ms: Z`. --compress CODEC (none, fp16, bf16, int8, int4, topk[:R])
// compresses every bucket. --trace FILE (rank 0) writes a Chrome trace
// (chrome://tracing, Perfetto) of the overlapped steps: compute per layer
// (tid 0) and each bucket's All-Reduce (tid 1, from TIDE_REDUCER_TRACE).
// Exits 0 on success, 1 on bad arguments or a failed call.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/compress.h"
#include "tide/reducer.h"

namespace {

struct Options {
  int layers = 16;
  double layerMib = 4;
  double computeMs = -1;  // per layer; < 0: calibrated
  double bucketMb = -1;   // < 0: the cost model
  int steps = 10;
  tide_perf::CompressOptions compress;
  std::string trace;
};

int g_rank = 0;
tideComm_t g_comm = nullptr;

#define CHECK(call)                                                                           \
  do {                                                                                        \
    const tideResult_t rc_ = (call);                                                          \
    if (rc_ != tideSuccess) {                                                                 \
      std::fprintf(stderr, "overlap_bench rank %d: %s failed: %s (%s | %s)\n", g_rank, #call, \
                   tideGetErrorString(rc_), tideGetLastError(g_comm),                         \
                   tideReducerGetLastError(nullptr));                                         \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

double nowMs() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void usage() {
  std::fprintf(stderr,
               "usage: overlap_bench [--layers L] [--layer-mib M] [--compute-ms C] "
               "[--bucket-mb B] [--steps S] [--compress CODEC] [--trace FILE]\n");
}

bool parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") return false;
    if (i + 1 >= argc) return false;
    const char* v = argv[++i];
    char* end = nullptr;
    if (a == "--layers") {
      o->layers = static_cast<int>(std::strtol(v, &end, 10));
      if (*end != '\0' || o->layers < 1) return false;
    } else if (a == "--layer-mib") {
      o->layerMib = std::strtod(v, &end);
      if (*end != '\0' || !(o->layerMib > 0)) return false;
    } else if (a == "--compute-ms") {
      o->computeMs = std::strtod(v, &end);
      if (*end != '\0' || !(o->computeMs >= 0)) return false;
    } else if (a == "--bucket-mb") {
      o->bucketMb = std::strtod(v, &end);
      if (*end != '\0' || !(o->bucketMb > 0)) return false;
    } else if (a == "--steps") {
      o->steps = static_cast<int>(std::strtol(v, &end, 10));
      if (*end != '\0' || o->steps < 1) return false;
    } else if (a == "--compress") {
      if (!tide_perf::ParseCodec(v, &o->compress)) return false;
      o->compress.spec = v;
    } else if (a == "--trace") {
      o->trace = v;
    } else {
      return false;
    }
  }
  return true;
}

// The compute of one layer: fp32 multiply-adds over an L1-resident array
// until `ms` have passed, then the layer's gradient is written from it.
float g_work[4096];
void compute(double ms, float* grad, size_t n, int layer) {
  const double until = nowMs() + ms;
  const float a = 0.9999999f, b = 1e-7f;
  do {
    for (int rep = 0; rep < 16; ++rep) {
      for (float& w : g_work) w = w * a + b;
    }
  } while (nowMs() < until);
  const float scale = 1e-3f * static_cast<float>(layer + 1);
  for (size_t i = 0; i < n; ++i) grad[i] = g_work[i & 4095] * scale;
}

void barrier() {
  int x = 0;
  CHECK(tideAllReduce(&x, &x, 1, tideInt32, tideSum, g_comm, nullptr));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

struct TraceOut {
  std::vector<std::string> events;
  void add(const char* name, double startMs, double endMs, int tid) {
    if (g_rank != 0) return;
    char buf[256];
    std::snprintf(buf, sizeof(buf),
                  "{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"ts\": %.3f, \"dur\": "
                  "%.3f, \"pid\": 0, \"tid\": %d}",
                  name, tid == 0 ? "compute" : "comm", startMs * 1e3, (endMs - startMs) * 1e3, tid);
    events.emplace_back(buf);
  }
};

// The reducer's bucket events (TIDE_REDUCER_TRACE's JSON array, one event a
// line) and ours, into one Chrome trace.
void writeTrace(const std::string& path, const std::string& commPath, const TraceOut& t) {
  FILE* out = std::fopen(path.c_str(), "w");
  if (out == nullptr) {
    std::fprintf(stderr, "overlap_bench: cannot write %s\n", path.c_str());
    return;
  }
  std::fprintf(out, "{\"traceEvents\": [\n");
  bool first = true;
  for (const std::string& e : t.events) {
    std::fprintf(out, "%s%s", first ? "" : ",\n", e.c_str());
    first = false;
  }
  if (FILE* in = std::fopen(commPath.c_str(), "r")) {
    char line[512];
    while (std::fgets(line, sizeof(line), in) != nullptr) {
      std::string s = line;
      while (!s.empty() && (s.back() == '\n' || s.back() == ',')) s.pop_back();
      if (s.empty() || s[0] != '{') continue;
      std::fprintf(out, "%s%s", first ? "" : ",\n", s.c_str());
      first = false;
    }
    std::fclose(in);
    std::remove(commPath.c_str());
  }
  std::fprintf(out, "\n], \"displayTimeUnit\": \"ms\"}\n");
  std::fclose(out);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, &o)) {
    usage();
    return 1;
  }
  CHECK(tideCommInitFromEnv(&g_comm));
  int nranks = 1;
  CHECK(tideCommUserRank(g_comm, &g_rank));
  CHECK(tideCommCount(g_comm, &nranks));
  const int L = o.layers;
  const size_t n = static_cast<size_t>(o.layerMib * (1 << 20)) / sizeof(float);
  std::vector<std::vector<float>> grads(static_cast<size_t>(L), std::vector<float>(n, 0.5f));
  std::vector<void*> ptrs;
  std::vector<size_t> counts(static_cast<size_t>(L), n);
  ptrs.reserve(grads.size());
  for (auto& g : grads) ptrs.push_back(g.data());

  tideCompressConfig_t cc = TIDE_COMPRESS_CONFIG_INITIALIZER;
  tideReducerConfig_t config = TIDE_REDUCER_CONFIG_INITIALIZER;
  config.bucketBytes = o.bucketMb > 0 ? static_cast<size_t>(o.bucketMb * (1 << 20)) : SIZE_MAX;
  if (o.compress.enabled && o.compress.codec != tideCodecNone) {
    cc.codec = o.compress.codec;
    cc.topkRatio = o.compress.topk_ratio;
    config.compress = &cc;
  }
  const std::string commTrace = o.trace + ".comm.tmp";
  if (!o.trace.empty()) setenv("TIDE_REDUCER_TRACE", commTrace.c_str(), 1);
  tideReducer_t red = nullptr;
  CHECK(tideReducerCreate(g_comm, L, ptrs.data(), counts.data(), tideFloat32, &config, &red));
  size_t stateBytes = 0;
  CHECK(tideReducerGetState(red, nullptr, &stateBytes));
  std::vector<unsigned char> state(stateBytes);
  CHECK(tideReducerGetState(red, state.data(), &stateBytes));
  int32_t nbuckets = 0;  // docs/overlap.md, "Checkpoints": the header's bucket count
  std::memcpy(&nbuckets, state.data() + 28, sizeof(nbuckets));

  auto commStep = [&] {
    for (int l = L - 1; l >= 0; --l) CHECK(tideReducerMarkReady(red, l));
    CHECK(tideReducerWait(red));
  };
  commStep();  // warm-up (and the rebuild after the first step)
  std::vector<double> comm0;
  for (int k = 0; k < 3; ++k) {
    barrier();
    const double t0 = nowMs();
    commStep();
    comm0.push_back(nowMs() - t0);
  }
  // The gradient writes are part of the backward: the arithmetic gets the rest.
  std::vector<double> fill;
  for (int k = 0; k < 3; ++k) {
    const double t0 = nowMs();
    compute(0, grads[0].data(), n, 0);
    fill.push_back(nowMs() - t0);
  }
  double perLayer =
      o.computeMs >= 0 ? o.computeMs : std::max(0.0, median(comm0) / L - median(fill));
  CHECK(tideBroadcast(&perLayer, &perLayer, 1, tideFloat64, 0, g_comm, nullptr));
  if (g_rank == 0) {
    std::printf(
        "# overlap_bench: %d ranks, %d layers x %.2f MiB float32, %d buckets (%s), "
        "compress %s, compute %.3f ms per layer (%s)\n",
        nranks, L, o.layerMib, nbuckets, o.bucketMb > 0 ? "--bucket-mb" : "cost model",
        o.compress.enabled ? o.compress.spec.c_str() : "none", perLayer,
        o.computeMs >= 0 ? "--compute-ms" : "calibrated: backward = one reduction");
    std::printf("# %5s %12s %12s %14s %14s %12s\n", "step", "compute_ms", "comm_ms",
                "serialized_ms", "overlapped_ms", "ideal_ms");
  }
  TraceOut trace;
  std::vector<double> serialized, overlapped, ideal;
  auto backward = [&](bool mark, bool traced) {
    for (int l = L - 1; l >= 0; --l) {
      const double t0 = nowMs();
      compute(perLayer, grads[static_cast<size_t>(l)].data(), n, l);
      if (traced) {
        char name[32];
        std::snprintf(name, sizeof(name), "layer %d", l);
        trace.add(name, t0, nowMs(), 0);
      }
      if (mark) CHECK(tideReducerMarkReady(red, l));
    }
  };
  for (int s = 1; s <= o.steps; ++s) {
    double t[4];
    barrier();
    double t0 = nowMs();
    backward(false, false);
    t[0] = nowMs() - t0;
    barrier();
    t0 = nowMs();
    commStep();
    t[1] = nowMs() - t0;
    barrier();
    t0 = nowMs();
    backward(false, false);
    commStep();
    t[2] = nowMs() - t0;
    barrier();
    t0 = nowMs();
    backward(true, !o.trace.empty());
    CHECK(tideReducerWait(red));
    t[3] = nowMs() - t0;
    CHECK(tideAllReduce(t, t, 4, tideFloat64, tideMax, g_comm, nullptr));
    const double id = std::max(t[0], t[1]);
    serialized.push_back(t[2]);
    overlapped.push_back(t[3]);
    ideal.push_back(id);
    if (g_rank == 0)
      std::printf("  %5d %12.3f %12.3f %14.3f %14.3f %12.3f\n", s, t[0], t[1], t[2], t[3], id);
  }
  CHECK(tideReducerDestroy(red));
  if (g_rank == 0) {
    std::printf("serialized_ms: %.3f\n", median(serialized));
    std::printf("overlapped_ms: %.3f\n", median(overlapped));
    std::printf("ideal_ms: %.3f\n", median(ideal));
    if (!o.trace.empty()) writeTrace(o.trace, commTrace, trace);
  }
  CHECK(tideCommDestroy(g_comm));
  return 0;
}
