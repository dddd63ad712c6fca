// Command line of the perf tools (nccl-tests' flags, --traffic and the
// compression flags of common/compress.h), parsed for the harness.
#ifndef TIDE_PERF_COMMON_OPTIONS_H_
#define TIDE_PERF_COMMON_OPTIONS_H_

#include <cstddef>
#include <string>
#include <vector>

#include "common/backend.h"
#include "common/compress.h"
#include "common/data.h"

namespace tide_perf {

struct Options {
  size_t min_bytes = 32u << 20;
  size_t max_bytes = 32u << 20;
  size_t step_bytes = 1u << 20;
  size_t step_factor = 1;
  bool step_by_factor = false;
  int iters = 20;
  int warmup = 1;
  int check = 1;
  int blocking = 0;
  int average = 1;
  std::vector<const DType*> types;
  std::vector<int> ops;
  int root = 0;  // -1: every root
  bool traffic = false;
  CompressOptions cz;  // --compress and its companions (common/compress.h)
  // --compare A,B,...: per size, these variants ("none": the plain
  // collective; else a codec of --compress) alternate in one process,
  // --rounds times in an order rotating by one each round (out-of-place).
  std::vector<std::string> compare;
  int rounds = 5;
  std::vector<std::string> notes;
};

// Rank 0 of the job prints; before the communicator exists the launcher's
// environment tells which process that is. Returns -1 when unknown (then
// every process prints).
int GuessRank();

// Parses argv into o; `printer`: this process prints usage and errors; `be`
// and `kind` (the tool's compressed form) decide what types, ops and
// --compress it can run. Returns -1 to continue, else an exit status.
int ParseOptions(int argc, char** argv, bool printer, const Backend& be, CompressKind kind,
                 Options* o);

}  // namespace tide_perf

#endif  // TIDE_PERF_COMMON_OPTIONS_H_
