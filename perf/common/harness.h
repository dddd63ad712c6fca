// Shared driver of the nccl-tests-style perf tools (all_reduce_perf, ...).
//
// Each process is one rank of the job, joined through a Backend (backend.h):
// Tide's tideCommInitFromEnv, or MPI when the harness is built with
// TIDE_PERF_MPI (the *_perf_mpi tools). A tool describes its collective with a
// Collective table and calls PerfMain, which
// parses the command line (options.h), loops over data types, ops, roots and
// sizes, times out-of-place and in-place runs, checks results and prints
// nccl-tests-shaped output on rank 0. With --compress (compress.h) the tools
// that pass a CompressKind call the compressed collectives instead and print
// three more columns. Single-threaded; uses only the public API (or MPI).
#ifndef TIDE_PERF_COMMON_HARNESS_H_
#define TIDE_PERF_COMMON_HARNESS_H_

#include <cstddef>
#include <cstdint>

#include "common/backend.h"
#include "common/compress.h"
#include "common/data.h"
#include "tide/tide.h"

namespace tide_perf {

// State of one measurement, filled by the harness before each callback.
struct Bench {
  Backend* be = nullptr;  // the calls to measure go through it
  int rank = 0;
  int nranks = 1;
  const DType* dt = nullptr;
  int op = kOpNone;  // tideRedOp_t, or kOpNone when the collective has no op
  int root = -1;     // -1 when the collective has no root
  bool in_place = false;
  size_t send_count = 0;      // elements in this rank's send buffer
  size_t recv_count = 0;      // elements in this rank's receive buffer
  size_t count = 0;           // the count argument of the call
  char* send_base = nullptr;  // separate send allocation (out-of-place)
  char* recv_base = nullptr;  // receive allocation; in-place buffers live here
  void* send = nullptr;       // pointers passed to the call (set by SetPointers)
  void* recv = nullptr;
  uint64_t seed = 0;  // fresh per check; used for garbage fills
  // --compress: this variant's compressor (the Compressed call is issued);
  // nullptr: the plain collective.
  tideCompressor_t compressor = nullptr;
};

struct Collective {
  const char* name;  // e.g. "AllReduce", used in messages
  bool uses_op;
  bool uses_root;
  bool in_place_ok;  // false: in-place columns print N/A
  // From a requested size in bytes, sets send_count, recv_count and count
  // (rounding down as the collective requires); returns the bytes shown in the
  // size column, which is also the numerator of algbw.
  size_t (*sizes)(size_t bytes, size_t elem_size, int nranks, Bench* b);
  double (*bus_factor)(int nranks);
  // Sets b->send and b->recv from the bases according to b->in_place.
  void (*set_pointers)(Bench* b);
  // Issues one operation through b.be (asynchronous until b.be->Sync()).
  tideResult_t (*issue)(const Bench& b);
  // Fills the buffers with fresh data derived from `p`.
  void (*prepare)(const Bench& b, const Pattern& p);
  // Counts wrong elements of this rank's result after one issue().
  uint64_t (*check)(const Bench& b, const Pattern& p);
};

// set_pointers for collectives whose in-place form is sendbuff == recvbuff.
void SamePointerInPlace(Bench* b);
// Element size of the current type, and `bytes` of b->recv_base with garbage.
size_t ElemSize(const Bench& b);
void GarbageRecv(const Bench& b);

// Runs the tool; returns the process exit status (0 only if every call
// succeeded and every check passed). May exit the process on a failed call.
// `compress`: the tool's compressed form (--compress), kNone when it has none.
int PerfMain(int argc, char** argv, const Collective& coll,
             CompressKind compress = CompressKind::kNone);

}  // namespace tide_perf

#endif  // TIDE_PERF_COMMON_HARNESS_H_
