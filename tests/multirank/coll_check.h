// Collective correctness cases checked against a serial reference that is
// independent of the library.
//
// Inputs come from (seed, case id, rank, element index) and are chosen so that
// every reduction is exact in any order and with any intermediate rounding to
// the buffer type: sums of small non-negative integers (of {-2..2} for signed
// integers) bounded by the type's exact-integer range, products of +-1 and a
// bounded number of 2s, max/min over arbitrary values (full range for
// integers). Data-movement collectives move random bit patterns (NaN payloads
// included) and are compared bit for bit. Float Avg is compared with a
// tolerance of (nranks + 1) epsilons of the buffer type, scaled.
//
// Buffers carry guard bytes on both sides and are poisoned before each op;
// after the op the guards, the untouched regions and (out of place) the send
// buffer are checked as well.
//
// Thread safety: RunCase may run concurrently on different communicators.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "tide/tide.h"

namespace tide_test {

enum class Coll {
  kAllReduce,
  kBroadcast,
  kReduce,
  kAllGather,
  kReduceScatter,
  kAlltoAll,
  kSendRecv
};
inline constexpr int kNumColls = 7;

// Count that stands for "1 MiB / element size + 3 elements" in a spec.
inline constexpr size_t kLargeCount = ~static_cast<size_t>(0);
// Counts up to this are "small": every root is tested for rooted collectives.
inline constexpr size_t kSmallLimit = 4097;
// Bytes per rank of a "large" case in reduced mode (1 MiB otherwise).
inline constexpr size_t kReducedLargeBytes = size_t{256} << 10;

// TIDE_TEST_REDUCED: 1 for a reduced matrix (fewer large sizes and
// repetitions; see ExpandSpec), for slow sanitized builds; 2 for the reduced
// matrix with types and ops thinned as well (ThreadSanitizer, whose cost is
// per memory access and whose findings do not depend on type or op); 0
// (unset or anything else) for the full matrix.
inline int ReducedLevel() {
  const char* v = getenv("TIDE_TEST_REDUCED");
  if (v == nullptr || v[0] == '\0' || v[1] != '\0') return 0;
  return v[0] == '1' ? 1 : v[0] == '2' ? 2 : 0;
}
inline bool ReducedMode() { return ReducedLevel() >= 1; }

struct CaseSpec {
  Coll coll = Coll::kAllReduce;
  tideDataType_t dtype = tideFloat32;
  tideRedOp_t op = tideSum;  // reducing collectives only
  size_t count = 0;          // per rank, as the API's count argument
  bool inplace = false;
  int root = -1;            // rooted collectives only
  bool use_stream = false;  // enqueue on a host stream, then synchronize
  size_t offset_elems = 0;  // buffers start this many elements past a 64-byte boundary
};

struct CaseEnv {
  tideComm_t comm = nullptr;
  int rank = 0;
  int nranks = 1;
  uint64_t seed = 1;
  uint64_t case_id = 0;           // must be the same on every rank for one case
  tideStream_t stream = nullptr;  // used when CaseSpec::use_stream
};

enum CaseResult { kCasePass = 0, kCaseMismatch = 1, kCaseError = 2 };

// Runs one case on this rank (collective: every rank must run the same cases
// in the same order) and checks this rank's part. Appends one line to *log
// for a mismatch or a library error; kCaseError means the communicator may no
// longer be usable.
CaseResult RunCase(const CaseSpec& spec, const CaseEnv& env, std::string* log);

// Issues the library call(s) of `s` with the given buffers (Send/Recv: a ring
// inside one group) on e.stream when s.use_stream; *api names the call whose
// result is returned. Does not wait for a stream.
tideResult_t IssueCollective(const CaseSpec& s, const CaseEnv& e, const void* send, void* recv,
                             const char** api);

// Expands a spec string such as
//   "colls=allreduce,reduce;dtypes=all;ops=all;counts=small,large;inplace=both;roots=all"
// into cases for `nranks` ranks. Keys (all optional, default in brackets):
//   colls [all]: allreduce broadcast reduce allgather reducescatter alltoall sendrecv
//   dtypes [all]: int8 uint8 int32 uint32 int64 uint64 float16 float32 float64
//                 bfloat16 fp8e4m3 fp8e5m2
//   ops [all]: sum prod max min avg
//   counts [small]: numbers, "small" (0,1,7,4097), "large" (1 MiB / size + 3)
//   inplace [both]: 0, 1 or both (ignored for sendrecv)
//   roots [all]: all (every root up to kSmallLimit elements, 0 and n-1 above),
//                ends (0 and n-1), or numbers
//   stream [0]: 1 runs the cases on a host stream
//   offset [0]: buffers start this many elements past a 64-byte boundary
// Returns false and sets *err on a malformed spec.
//
// Reduced mode (ReducedMode(), for the sanitizer stages of CI): counts are
// expanded as above, so every collective x dtype x op x in/out of place at
// counts 0, 1, 7 and 4097 still runs; roots=all becomes roots=ends (first and
// last rank); "large" becomes kReducedLargeBytes / element size + 3 elements
// (still more than one pipeline chunk and FIFO slot) for every second dtype
// of the spec's list. Level 2 also thins the dtype x op product of reducing
// collectives: with m = min(#dtypes, #ops), the i-th dtype of the spec runs
// the ops whose index j has j % m == i % m, so every dtype and every op still
// runs (all 12 dtypes x 5 ops: one op per dtype, each op on 2-3 dtypes).
bool ExpandSpec(const std::string& spec, int nranks, std::vector<CaseSpec>* out, std::string* err);

const char* CollName(Coll c);
const char* DtypeName(tideDataType_t t);
const char* OpName(tideRedOp_t op);
size_t DtypeSize(tideDataType_t t);
std::string DescribeCase(const CaseSpec& s);

}  // namespace tide_test
