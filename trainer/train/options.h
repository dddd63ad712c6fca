// tide-train's flags and config-file keys: one declared table (options.cc)
// from which the command line (CLI11), the --config file (JSON, nlohmann-json)
// and the flag reference of docs/trainer.md (`tide-train --help-markdown`)
// are all made. A flag given twice takes its last value; flags on the
// command line override the config file's keys.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tide_train {

struct Options {
  // Model
  int layers = 4, heads = 4, embd = 128, ctx = 64, vocab = 256;
  // Layout
  int dp = 0, tp = 1, pp = 1;
  // Pipeline schedule (pipeline/schedule.h) and its simulator
  std::string schedule = "1f1b";
  std::string stage_layers;  // empty: balanced
  int virtual_stages = 1;
  bool simulate = false;
  std::string timeline, profile;
  // Layout planner (plan/planner.h)
  bool plan = false;
  int world = 0, nodes = 1, cores = 0;  // cores 0: this node's CPUs
  std::string topo_file, layout = "manual";
  // Training
  int batch = 12, micro_batches = 1;
  int64_t steps = 2000, seed = 1;
  double lr = 1e-3, min_lr = 1e-4;
  int64_t warmup = 100, decay_steps = -1;  // -1: --steps
  double weight_decay = 0.1, clip = 1.0;
  std::string optimizer = "adamw";
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  // Data-parallel reduction
  std::string compress = "none";
  double bucket_mb = 25.0;
  // Memory (docs/zero.md)
  int zero = 0;
  std::string mem_cap = "0";
  std::string compress_params = "none";
  std::string checkpoint_activations = "none";
  // Mixed precision (docs/zero.md)
  std::string precision = "fp32";
  double loss_scale = 65536.0, min_loss_scale = 1.0;
  int64_t loss_scale_window = 1000;
  std::string force_overflow = "none";
  // Data and evaluation
  std::string data;  // empty: Debian's fortunes
  int64_t eval_every = 250;
  int eval_batches = 20;
  // Files
  std::string init_from, export_path, score, metrics, plot, dump_grads, checkpoint_dir, config;
  int64_t checkpoint_every = 0;
  int keep_checkpoints = 3;
  bool resume = false;
  int64_t sample = 0;
  double temperature = 1.0;
  int top_k = 0;
  std::string prompt = "\n";
  // Runtime
  int blas_threads = 1;
  int64_t log_every = 1;
  bool reference_ops = false;
};

// One entry of the table.
struct OptionInfo {
  std::string flag;   // "--layers"
  std::string key;    // config-file key: "layers"
  std::string value;  // the value's form: "N", "X", "FILE", ...
  std::string deflt;  // default as shown
  std::string help;
};
const std::vector<OptionInfo>& option_table();

// Parses argv (and --config FILE). Returns 0 to go on; otherwise the exit
// status (help printed: 0 → *exit_now; a bad flag: message on stderr, 2).
int parse_options(int argc, char** argv, Options* out, bool* exit_now);
// The table as Markdown (docs/trainer.md, "Flags").
std::string options_markdown();

}  // namespace tide_train
