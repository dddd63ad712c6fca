// Compressed collectives in the perf tools (issue 17): the --compress,
// --block, --feedback and --stochastic options, the compressed calls, the
// gradient-like input pattern and the check of one call against an fp64
// reference and the per-element bound of docs/compression.md.
//
// all_reduce_perf, reduce_scatter_perf and all_gather_perf pass their
// CompressKind to PerfMain; with --compress the harness makes one compressor
// per size and per variant (out-of-place, in-place), calls the Compressed
// form of the collective, adds the columns wire(B), maxabs and maxrel after
// the 13 standard ones, and with -c 1 counts as #wrong every element whose
// error exceeds the bound (docs/compression.md, "Error bounds").
//
// Input of a checked call: element i of rank r is CompressValue(dt, seed, r, i)
// (i within the rank's send buffer), so any rank rebuilds every rank's input
// and computes the reference in fp64 itself (O(ranks x elements) per rank,
// only in the check run). Single-threaded; public API only.
#ifndef TIDE_PERF_COMMON_COMPRESS_H_
#define TIDE_PERF_COMMON_COMPRESS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/backend.h"
#include "common/data.h"
#include "tide/compress.h"
#include "tide/tide.h"

namespace tide_perf {

struct Bench;

// The collectives with a compressed form; a tool passes its own to PerfMain.
enum class CompressKind { kNone, kAllReduce, kReduceScatter, kAllGather };

struct CompressOptions {
  bool enabled = false;  // --compress given (even "none")
  std::string spec;      // its argument as given, for the header
  tideCodec_t codec = tideCodecNone;
  double topk_ratio = 0.01;   // topk:RATIO
  int block = 256;            // --block: int8/int4 elements per scale
  int feedback = 0;           // --feedback: error feedback in the compressors
  int stochastic = 0;         // --stochastic: stochastic rounding (int8/int4)
  bool extras_given = false;  // --block, --feedback or --stochastic seen
};

// Every compressor of a run is made with this seed.
constexpr unsigned long long kCompressSeed = 0x7469646563707266ull;

// Parses --compress's value: none, fp16, bf16, int8, int4, topk (ratio 0.01),
// topk:RATIO with 0 < RATIO <= 1, or auto. False (o unchanged) on junk.
bool ParseCodec(const char* s, CompressOptions* o);

// nullptr when the tool (kind), backend, type and op (kOpNone: any) can run
// compressed; else a static sentence saying why not.
const char* CompressUnsupported(CompressKind kind, const Backend& be, const DType& dt, int op);

// The header's description, e.g. "int8 block 256 feedback 0 stochastic 0 seed ...".
std::string CompressDescribe(const CompressOptions& o);

// The config every compressor of the run is made with.
tideCompressConfig_t CompressConfig(const CompressOptions& o);

// Issues b's call as the compressed collective of `kind` with b.compressor.
tideResult_t CompressIssue(CompressKind kind, const Bench& b);

// Element `index` of `rank`'s input: a gradient-like value (roughly normal,
// scaled per region of 1024 elements by 2^-6..2^2 alike on every rank, an
// outlier x32 about once in 2048, an all-zero region about once in 64),
// rounded to dt (float, bfloat16 or half). Pure.
double CompressValue(const DType& dt, uint64_t seed, int rank, size_t index);

// Garbage in this rank's receive buffer, then its input (CompressValue) in
// b.send: count elements (AllReduce, AllGather) or send_count (ReduceScatter).
void CompressPrepare(CompressKind kind, const Bench& b, uint64_t seed);

// Which node each rank is on, for the hierarchical All-Reduce's bound. Node
// identity as the library defines it (docs/env.md, TIDE_HOSTID): TIDE_HOSTID
// (or NCCL_HOSTID) when set, else host name plus network namespace.
struct CompressNodes {
  std::vector<int> node_of;  // per rank; nodes numbered by first appearance
  int nodes = 1;
  bool equal = true;  // every node has the same number of ranks
};
// A 64-bit hash of this process's node identity.
uint64_t CompressNodeKey();
// The layout from every rank's CompressNodeKey (rank order).
CompressNodes CompressNodesOf(const std::vector<uint64_t>& keys);

// The result of one checked call on this rank.
struct CompressCheck {
  uint64_t wrong = 0;  // elements whose error exceeds the bound (or is NaN)
  double maxabs = 0;   // max |got - exact| (+inf for a NaN result)
  double maxrel = 0;   // max |got - exact| / |exact| over elements with exact != 0
};

// Compares this rank's result of a call prepared by CompressPrepare(seed)
// with the fp64 reference and the documented bound (compress_check.cc).
CompressCheck CompressVerify(CompressKind kind, const Bench& b, const CompressOptions& o,
                             const CompressNodes& nodes, uint64_t seed);

}  // namespace tide_perf

#endif  // TIDE_PERF_COMMON_COMPRESS_H_
