// Collective correctness worker: one rank of a job started by the rank
// harness (or tiderun). Joins with tideCommInitFromEnv, runs the cases of
// every spec given on the command line (see ExpandSpec in coll_check.h) in
// order, checks each against the serial reference and prints one line per
// failing case.
//
// Usage: coll_worker [--seed=N] [--quiet] [--slow-ms=N] SPEC...
// Exit status: 0 all cases passed on this rank, 1 a mismatch, 2 bad usage or
// init failure, 3 a library call failed (the remaining cases are skipped
// because the communicator may be unusable).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "coll_check.h"

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int Usage(const char* msg) {
  fprintf(stderr,
          "coll_worker: %s\nusage: coll_worker [--seed=N] [--quiet] [--slow-ms=N] SPEC...\n", msg);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tide_test;
  setvbuf(stdout, nullptr, _IOLBF, 0);
  uint64_t seed = 12345;
  bool quiet = false;
  double slow_s = -1;  // report cases slower than this
  std::vector<std::string> specs;
  for (int i = 1; i < argc; ++i) {
    if (strncmp(argv[i], "--seed=", 7) == 0) {
      seed = strtoull(argv[i] + 7, nullptr, 10);
    } else if (strncmp(argv[i], "--slow-ms=", 10) == 0) {
      slow_s = atof(argv[i] + 10) / 1000.0;
    } else if (strcmp(argv[i], "--quiet") == 0) {
      quiet = true;
    } else if (argv[i][0] == '-') {
      return Usage("unknown flag");
    } else {
      specs.push_back(argv[i]);
    }
  }
  if (specs.empty()) return Usage("no spec");

  const double t0 = Now();
  tideComm_t comm = nullptr;
  tideResult_t rc = tideCommInitFromEnv(&comm);
  if (rc != tideSuccess) {
    fprintf(stderr, "tideCommInitFromEnv failed: %s: %s\n", tideGetErrorString(rc),
            tideGetLastError(nullptr));
    return 2;
  }
  int rank = -1, nranks = -1;
  if (tideCommUserRank(comm, &rank) != tideSuccess || tideCommCount(comm, &nranks) != tideSuccess) {
    fprintf(stderr, "tideCommUserRank/tideCommCount failed\n");
    return 2;
  }
  const char* env_rank = getenv("TIDE_RANK");
  const char* env_size = getenv("TIDE_WORLD_SIZE");
  if (env_rank && env_size && (atoi(env_rank) != rank || atoi(env_size) != nranks)) {
    fprintf(stderr, "rank %d of %d does not match TIDE_RANK=%s TIDE_WORLD_SIZE=%s\n", rank, nranks,
            env_rank, env_size);
    return 2;
  }
  const double t_init = Now();

  std::vector<CaseSpec> cases;
  std::vector<size_t> spec_end;  // index one past each spec's last case
  for (const auto& spec : specs) {
    std::string err;
    if (!ExpandSpec(spec, nranks, &cases, &err)) {
      return Usage(("bad spec '" + spec + "': " + err).c_str());
    }
    spec_end.push_back(cases.size());
  }
  if (rank == 0 && !quiet && ReducedMode())
    printf("rank 0: reduced matrix (TIDE_TEST_REDUCED=%d)\n", ReducedLevel());
  bool need_stream = false;
  for (const auto& c : cases) need_stream = need_stream || c.use_stream;
  tideStream_t stream = nullptr;
  if (need_stream && (rc = tideStreamCreate(&stream)) != tideSuccess) {
    fprintf(stderr, "tideStreamCreate failed: %s\n", tideGetErrorString(rc));
    return 2;
  }

  int failures = 0;
  size_t done = 0;
  bool broken = false;
  size_t spec = 0;
  double t_spec = Now();
  for (size_t i = 0; i < cases.size(); ++i) {
    while (i == spec_end[spec]) {
      if (rank == 0 && !quiet) {
        printf("rank 0: spec '%s': %zu cases in %.2f s\n", specs[spec].c_str(),
               spec_end[spec] - (spec ? spec_end[spec - 1] : 0), Now() - t_spec);
      }
      ++spec;
      t_spec = Now();
    }
    CaseEnv env;
    env.comm = comm;
    env.rank = rank;
    env.nranks = nranks;
    env.seed = seed;
    env.case_id = i;
    env.stream = stream;
    std::string log;
    const double t_case = Now();
    CaseResult res = RunCase(cases[i], env, &log);
    if (slow_s >= 0 && Now() - t_case > slow_s) {
      printf("rank %d: slow case %zu (%.3f s): %s\n", rank, i, Now() - t_case,
             DescribeCase(cases[i]).c_str());
    }
    if (!log.empty()) fputs(log.c_str(), stdout);
    ++done;
    if (res == kCaseMismatch) ++failures;
    if (res == kCaseError) {
      ++failures;
      broken = true;
      break;
    }
  }
  if (!broken && rank == 0 && !quiet && spec < specs.size()) {
    printf("rank 0: spec '%s': %zu cases in %.2f s\n", specs[spec].c_str(),
           spec_end[spec] - (spec ? spec_end[spec - 1] : 0), Now() - t_spec);
  }
  if (broken) {
    printf("rank %d: stopping after a library error (%zu of %zu cases run)\n", rank, done,
           cases.size());
    fflush(stdout);
    tideCommAbort(comm);
    return 3;
  }
  // Every rank learns whether any rank failed (also a final consistency check).
  int32_t local = failures, total = -1;
  rc = tideAllReduce(&local, &total, 1, tideInt32, tideSum, comm, nullptr);
  if (stream) tideStreamDestroy(stream);
  if (rc != tideSuccess) {
    printf("rank %d: final tideAllReduce failed: %s\n", rank, tideGetErrorString(rc));
    tideCommAbort(comm);
    return 3;
  }
  rc = tideCommDestroy(comm);
  if (rc != tideSuccess) {
    printf("rank %d: tideCommDestroy failed: %s\n", rank, tideGetErrorString(rc));
    return 3;
  }
  if (!quiet || failures) {
    printf(
        "rank %d/%d: %zu cases, %d failed on this rank, %d on all ranks; init %.2f s, "
        "cases %.2f s\n",
        rank, nranks, done, failures, total, t_init - t0, Now() - t_init);
  }
  return failures ? 1 : 0;
}
