// Data types, value encoding and the deterministic test patterns of the perf tools.
//
// Every rank's input is a function of (seed, rank, index) only, so any rank can
// rebuild any other rank's input and compute the expected result serially.
// Values are small integers chosen so that every reduction (sum, prod, max,
// min and integer avg) is exact in every data type and independent of the order
// the library combines them in; float avg is compared with a tolerance.
//
// Patterns repeat with period kPeriod (a prime), so the expected result is
// computed for at most kPeriod elements and checking costs O(count) per rank.
//
// Nothing here is thread-safe unless stated; every function is pure or works
// on caller-owned memory.
#ifndef TIDE_PERF_COMMON_DATA_H_
#define TIDE_PERF_COMMON_DATA_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tide/tide.h"

namespace tide_perf {

// Description of one element type. `max_exact` is the largest M such that every
// integer in [-M, M] (or [0, M] when unsigned) is representable; `max_pow2` the
// largest k such that 2^k is representable.
struct DType {
  tideDataType_t id;
  const char* name;  // as nccl-tests prints it
  size_t size;
  bool is_float;
  bool is_signed;  // true for signed integers and every float type
  int exp_bits;    // minifloats only (half, bfloat16, fp8); 0 for native types
  int man_bits;
  bool finite_only;  // fp8 e4m3: no infinities, only S.1111.111 is NaN
  double epsilon;    // distance from 1.0 to the next representable value
  double max_exact;
  int max_pow2;
};

// Every supported type, in nccl-tests' order.
const std::vector<const DType*>& AllDTypes();
// Looks a type up by any of its accepted spellings; nullptr when unknown.
const DType* FindDType(const std::string& name);

// Reduction selector of a test: a tideRedOp_t value, or kOpNone for data
// movement collectives (which then get random bit patterns).
constexpr int kOpNone = -1;
const char* OpName(int op);           // "sum", ..., "none"
int FindOp(const std::string& name);  // tideRedOp_t, or -2 when unknown
const std::vector<int>& AllOps();

// Writes `v` as one element of `dt` to dst (round to nearest even for floats;
// integers are truncated toward zero and stored modulo 2^bits).
void Encode(const DType& dt, double v, void* dst);
// Reads one element of `dt` from src.
double Decode(const DType& dt, const void* src);

// Minifloat helpers exposed for testing: IEEE-style format with `exp_bits`
// exponent bits and `man_bits` mantissa bits; `finite_only` selects the
// e4m3 "fn" variant.
uint32_t EncodeMinifloat(double v, int exp_bits, int man_bits, bool finite_only);
double DecodeMinifloat(uint32_t bits, int exp_bits, int man_bits, bool finite_only);

constexpr size_t kPeriod = 65521;

// `len` encoded elements; element i of a buffer holding this table tiled from
// `start` is element (start + i) % kPeriod. When `tolerance` > 0 comparisons are
// |got - value| <= tolerance * |value| on decoded values, else bitwise.
struct Table {
  const DType* dt = nullptr;
  size_t len = 0;
  std::vector<uint8_t> bytes;
  std::vector<double> values;  // filled only when tolerance > 0
  double tolerance = 0;
};

class Pattern {
 public:
  // `op` is a tideRedOp_t or kOpNone.
  Pattern(const DType& dt, int op, int nranks, uint64_t seed);

  // What `rank` holds in elements [0, span) of its input.
  Table Input(int rank, size_t span) const;
  // Expected reduction over every rank's Input, elements [0, span). Not for kOpNone.
  Table Reduced(size_t span) const;

 private:
  double Value(int rank, size_t index, uint64_t* raw) const;

  const DType& dt_;
  int op_;
  int nranks_;
  uint64_t seed_;
  int window_;  // ranks contributing a non-neutral value at each index
};

// Writes `count` elements of `t` to dst, starting at pattern index `start`.
// Requires start + count <= the span `t` was built for.
void FillTiled(void* dst, size_t count, size_t start, const Table& t);
// Number of the `count` elements at `got` that differ from `t` tiled from `start`.
uint64_t CountWrong(const void* got, size_t count, size_t start, const Table& t);
// Fills `bytes` bytes with a pattern no correct result is made of on purpose.
void FillGarbage(void* dst, size_t bytes, uint64_t seed);

uint64_t Mix64(uint64_t x);

}  // namespace tide_perf

#endif  // TIDE_PERF_COMMON_DATA_H_
