// tide-train's one table of flags and config keys (train/options.h).
#include "train/options.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <variant>

#include "io/error.h"

namespace tide_train {

namespace {

using Target = std::variant<int*, int64_t*, double*, std::string*, bool*>;

struct Entry {
  const char* flag;
  const char* value;
  const char* help;
  Target target;
};

// The table. Order: as docs/trainer.md lists them.
std::vector<Entry> entries(Options* o) {
  return {
      // Model
      {"--layers", "N", "transformer blocks (L)", &o->layers},
      {"--heads", "N", "attention heads (H); divisible by --tp", &o->heads},
      {"--embd", "N", "model width (C); divisible by --heads and --tp", &o->embd},
      {"--ctx", "N", "context length (T), also the position table's size", &o->ctx},
      {"--vocab", "N", "vocabulary size (byte level: 256)", &o->vocab},
      // Layout
      {"--dp", "N", "data-parallel ranks (D); 0: world / (T·P)", &o->dp},
      {"--tp", "N", "tensor-parallel ranks (Megatron-style splits)", &o->tp},
      {"--pp", "N", "pipeline ranks (P): the layers split into P x V stages", &o->pp},
      {"--stage-layers", "a,b,...",
       "layers of each of the P x V stages, in stage order (default: balanced)", &o->stage_layers},
      {"--schedule", "gpipe|1f1b|interleaved|zb", "pipeline schedule", &o->schedule},
      {"--virtual-stages", "V", "model chunks per pipeline rank (interleaved: V > 1)",
       &o->virtual_stages},
      {"--simulate", "",
       "replay the schedule of --pp, --micro-batches, --schedule, --virtual-stages in one "
       "process: check it is deadlock-free, print `bubble: <fraction>` last, and exit",
       &o->simulate},
      {"--timeline", "FILE.png", "--simulate: draw the per-rank timeline (python3-matplotlib)",
       &o->timeline},
      {"--profile", "FILE",
       "--simulate: per-action costs, JSON {\"forward\", \"backward\", \"backward_input\", "
       "\"backward_weight\", \"stage_scale\": [..]}; default 1, 2, 1, 1, balanced. --plan, "
       "--layout auto: the per-layer profile, read when FILE exists, else measured and written",
       &o->profile},
      {"--plan", "",
       "rank every layout of --world ranks by predicted step time (one process) and exit",
       &o->plan},
      {"--world", "N", "--plan: the ranks to plan for", &o->world},
      {"--nodes", "K", "--plan: nodes the ranks are spread over (equally)", &o->nodes},
      {"--topo-file", "FILE",
       "--plan, --layout auto: each node's topology (Tide, NCCL or hwloc XML); default: this node",
       &o->topo_file},
      {"--cores", "N", "--plan, --layout auto: CPUs per node the ranks share; 0: this node's",
       &o->cores},
      {"--layout", "manual|auto",
       "auto: world rank 0 plans (--plan's first choice) and every rank trains that layout",
       &o->layout},
      // Training
      {"--batch", "B", "sequences per step (global, over every layout)", &o->batch},
      {"--micro-batches", "M", "micro-batches per rank and step (gradients accumulate)",
       &o->micro_batches},
      {"--steps", "N", "optimizer steps", &o->steps},
      {"--seed", "N", "seed of the initial weights and of the data windows", &o->seed},
      {"--lr", "X", "peak learning rate", &o->lr},
      {"--min-lr", "X", "final learning rate of the cosine decay", &o->min_lr},
      {"--warmup", "N", "linear warm-up steps", &o->warmup},
      {"--decay-steps", "N", "step where the cosine decay ends; -1: --steps", &o->decay_steps},
      {"--weight-decay", "X", "decoupled weight decay of 2-D weights (not biases, LayerNorms)",
       &o->weight_decay},
      {"--clip", "X", "global gradient-norm clipping; 0: off", &o->clip},
      {"--optimizer", "adamw|lamb", "AdamW (PyTorch's) or LAMB (You et al. 2020)", &o->optimizer},
      {"--beta1", "X", "first-moment decay", &o->beta1},
      {"--beta2", "X", "second-moment decay", &o->beta2},
      {"--eps", "X", "the optimizer's epsilon", &o->eps},
      // Data-parallel reduction
      {"--compress", "CODEC",
       "data-parallel gradient compression: none|fp16|bf16|int8|int4|topk:R|auto", &o->compress},
      {"--bucket-mb", "X", "gradient bucket size of the reducer (MiB); 0: the cost model's",
       &o->bucket_mb},
      // Memory (docs/zero.md)
      {"--zero", "N",
       "ZeRO stage over the data-parallel group: 0 none, 1 optimizer states, 2 also gradients, 3 "
       "also parameters (gathered per block, the next one prefetched)",
       &o->zero},
      {"--checkpoint-activations", "MODE",
       "activation checkpointing: none|every:K (keep every K-th block's input, recompute the "
       "rest)|sqrt (K = ceil(sqrt(layers)))|selective (recompute the attention core)",
       &o->checkpoint_activations},
      {"--compress-params", "CODEC",
       "ZeRO-3: the parameters' all-gather codec: none|fp16|bf16|int8|int4 (the shard stays fp32)",
       &o->compress_params},
      {"--mem-cap", "BYTES",
       "per-rank cap on the trainer's accounted memory (suffix K, M, G: powers of 1024); an "
       "allocation past it is an error naming what did not fit; 0: none",
       &o->mem_cap},
      // Mixed precision (docs/zero.md)
      {"--precision", "P",
       "fp32|bf16|fp16: the parameters and gradients kept and reduced in 16 bits (fp32 "
       "accumulation), fp32 master weights in the optimizer (sharded with it); compute stays fp32",
       &o->precision},
      {"--loss-scale", "X", "fp16: the initial dynamic loss scale", &o->loss_scale},
      {"--loss-scale-window", "N", "fp16: clean steps in a row after which the loss scale doubles",
       &o->loss_scale_window},
      {"--min-loss-scale", "X",
       "fp16: an overflow at this scale is an error (the run cannot go on)", &o->min_loss_scale},
      {"--force-overflow", "STEPS",
       "fp16 test hook: steps (a,b,...) whose gradients rank 0 overwrites with inf before the "
       "reduction (the step must be skipped and the scale halved); none: never",
       &o->force_overflow},
      // Data
      {"--data", "FILE|DIR",
       "training text (a file, or every regular file of a folder); "
       "default: /usr/share/games/fortunes",
       &o->data},
      {"--eval-every", "N", "evaluate every N steps (and after the last); 0: never",
       &o->eval_every},
      {"--eval-batches", "K", "validation batches per evaluation", &o->eval_batches},
      // Files
      {"--init-from", "FILE", "start from these weights (safetensors, nanoGPT names)",
       &o->init_from},
      {"--export", "FILE", "write the final weights (safetensors)", &o->export_path},
      {"--score", "FILE", "print `score: <nats per byte>` of FILE and exit", &o->score},
      {"--metrics", "FILE", "append one JSON object per step (global rank 0)", &o->metrics},
      {"--plot", "FILE", "draw the loss curves at the end (needs python3-matplotlib)", &o->plot},
      {"--dump-grads", "FILE", "write the first step's gradients (safetensors; tests)",
       &o->dump_grads},
      {"--checkpoint-dir", "DIR", "where checkpoints go", &o->checkpoint_dir},
      {"--checkpoint-every", "N", "save a checkpoint every N steps; 0: never",
       &o->checkpoint_every},
      {"--keep-checkpoints", "N", "complete checkpoints kept; 0: all", &o->keep_checkpoints},
      {"--resume", "", "continue from the newest complete checkpoint in --checkpoint-dir",
       &o->resume},
      {"--sample", "N", "print N generated bytes (after training, or of --init-from)", &o->sample},
      {"--temperature", "X", "sampling temperature", &o->temperature},
      {"--top-k", "N", "sample from the k most likely bytes; 0: all", &o->top_k},
      {"--prompt", "TEXT", "the sample's first bytes", &o->prompt},
      // Runtime
      {"--blas-threads", "N", "OpenBLAS threads per rank", &o->blas_threads},
      {"--log-every", "N", "print every N-th step", &o->log_every},
      {"--reference-ops", "", "use the plain reference kernels (slow; tests)", &o->reference_ops},
      {"--config", "FILE", "read these keys from a JSON file (flags override it)", &o->config},
  };
}

std::string to_text(const Target& t) {
  std::ostringstream s;
  std::visit(
      [&](auto* p) {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, bool>)
          s << (*p ? "on" : "off");
        else
          s << *p;
      },
      t);
  return s.str();
}

std::string key_of(const char* flag) {
  std::string k = flag + 2;
  for (char& c : k)
    if (c == '-') c = '_';
  return k;
}

// Applies the JSON object of --config FILE (keys: the flags without "--",
// dashes or underscores).
void apply_config(const std::string& path, std::vector<Entry>& table) {
  std::ifstream in(path);
  if (!in) throw Error("--config " + path + ": cannot open");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error("--config " + path + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw Error("--config " + path + ": expected a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    std::string key = it.key();
    for (char& c : key)
      if (c == '-') c = '_';
    Entry* e = nullptr;
    for (Entry& x : table)
      if (key_of(x.flag) == key) e = &x;
    if (e == nullptr || key == "config")
      throw Error("--config " + path + ": unknown key \"" + it.key() + "\"");
    const nlohmann::json& v = it.value();
    try {
      std::visit(
          [&](auto* p) {
            using T = std::remove_pointer_t<decltype(p)>;
            if constexpr (std::is_same_v<T, std::string>)
              *p = v.is_string() ? v.get<std::string>() : v.dump();
            else
              *p = v.get<T>();
          },
          e->target);
    } catch (const nlohmann::json::exception& ex) {
      throw Error("--config " + path + ": key \"" + it.key() + "\": " + ex.what());
    }
  }
}

}  // namespace

const std::vector<OptionInfo>& option_table() {
  static const std::vector<OptionInfo> table = [] {
    Options defaults;
    std::vector<OptionInfo> out;
    for (const Entry& e : entries(&defaults)) {
      std::string d = to_text(e.target);
      if (std::string(e.flag) == "--decay-steps") d = "--steps";
      if (std::string(e.flag) == "--data") d = "fortunes";
      if (std::string(e.flag) == "--prompt") d = "\"\\n\"";
      out.push_back({e.flag, key_of(e.flag), e.value, d, e.help});
    }
    return out;
  }();
  return table;
}

std::string options_markdown() {
  std::ostringstream s;
  s << "| flag | config key | default | meaning |\n|---|---|---|---|\n";
  for (const OptionInfo& o : option_table()) {
    s << "| `" << o.flag << (o.value.empty() ? "" : " " + o.value) << "` | `" << o.key << "` | "
      << (o.deflt.empty() ? "" : "`" + o.deflt + "`") << " | " << o.help << " |\n";
  }
  return s.str();
}

int parse_options(int argc, char** argv, Options* out, bool* exit_now) {
  *exit_now = false;
  std::vector<Entry> table = entries(out);
  // --config first (its last occurrence), so the command line overrides it.
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--config" && i + 1 < argc) out->config = argv[i + 1];
    if (a.starts_with("--config=")) out->config = a.substr(9);
  }
  if (!out->config.empty()) apply_config(out->config, table);

  CLI::App app{"tide-train: a GPT trained over Tide (docs/trainer.md)", "tide-train"};
  bool markdown = false;
  app.add_flag("--help-markdown", markdown, "print the flag table as Markdown");
  for (Entry& e : table) {
    std::visit(
        [&](auto* p) {
          using T = std::remove_pointer_t<decltype(p)>;
          if constexpr (std::is_same_v<T, bool>)
            app.add_flag(e.flag, *p, e.help)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
          else
            app.add_option(e.flag, *p, e.help)
                ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
                ->type_name(e.value);
        },
        e.target);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    *exit_now = true;
    return rc == 0 ? 0 : 2;
  }
  if (markdown) {
    std::fputs(options_markdown().c_str(), stdout);
    *exit_now = true;
  }
  return 0;
}

}  // namespace tide_train
