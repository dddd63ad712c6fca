// The layout planner's measured costs (docs/trainer.md, "Layout planner"):
// for a tensor-parallel size T and a micro-batch of b sequences, the time of
// one block's forward and backward (whole, and zb's input and weight
// passes), of the rest of the model (embeddings, final LayerNorm, head and
// loss), of the optimizer per parameter, and the activation memory of a
// block and of the rest. Measured on the calling thread with the real
// kernels (trainer/ops) on a one-block model of the same width, its
// tensor-parallel collectives left out (the planner prices communication
// with Tide's cost model); medians of a few repetitions.
//
// Threads: one thread (wake_latency forks helper processes and reaps them).
// Errors: a --profile file that cannot be read or
// parsed throws Error.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <utility>

#include "model/config.h"

namespace tide_train::plan {

struct Costs {
  double f = 0, b = 0, bi = 0, bw = 0;  // seconds per micro-batch
};

struct ProfileEntry {
  Costs block;                         // one transformer block
  Costs ends;                          // embeddings + final LayerNorm + head + loss
  double optim_per_param = 0;          // seconds per parameter of one optimizer step
  double act_block = 0, act_ends = 0;  // activation bytes of one micro-batch
};

class Profile {
 public:
  // `optimizer`: "adamw" or "lamb" (what the step is timed with).
  Profile(const ModelConfig& model, std::string optimizer);
  // The costs at (tp, micro), measured on first use.
  const ProfileEntry& at(int tp, int micro);
  // JSON: {"model": {...}, "entries": [{"tp", "micro", ...}, ...]}; load
  // keeps only entries of this model's shape.
  void load(const std::string& path);
  void save(const std::string& path) const;
  size_t measured() const { return measured_; }
  // Seconds a process sleeping on a message waits, once it is sent, for a
  // CPU that a computing process holds (ranks sharing cores): measured once
  // with real processes (a pipe, a CPU-bound neighbour on the sleeper's CPU;
  // the largest median of 40 wake-ups over 3 rounds), or read from the
  // profile file. 0 on a
  // machine with one CPU.
  double wake_latency();

 private:
  ProfileEntry measure(int tp, int micro) const;
  ModelConfig m_;
  std::string optimizer_;
  std::map<std::pair<int, int>, ProfileEntry> entries_;
  size_t measured_ = 0;
  double wake_ = -1;  // < 0: not measured yet
};

}  // namespace tide_train::plan
