// tide-train: a GPT trained over Tide (docs/trainer.md). Errors print
// "tide-train: error: ..." on every rank and exit non-zero.
#include <cblas.h>

#include <cstdio>
#include <exception>

#include "io/error.h"
#include "pipeline/simulate_cli.h"
#include "plan/plan_cli.h"
#include "train/comm.h"
#include "train/options.h"
#include "train/trainer.h"

int main(int argc, char** argv) {
  tide_train::Options o;
  try {
    bool exit_now = false;
    const int rc = tide_train::parse_options(argc, argv, &o, &exit_now);
    if (exit_now || rc != 0) return rc;
    if (o.simulate) return tide_train::pipeline::run_simulation(o);
    openblas_set_num_threads(o.blas_threads);
    if (o.plan) return tide_train::plan::run_plan(o);
    tide_train::Trainer trainer(o);
    return trainer.run();
  } catch (const tide_train::ReportedError&) {
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "tide-train: error: %s\n", e.what());
    return 1;
  }
}
