// One tide-train job on one rank: the groups, the model shard, the
// optimizer, the data, the data-parallel reducer, and the loop that trains,
// evaluates, checkpoints and reports (docs/trainer.md).
//
// Every rank runs the same calls in the same order; a misuse found on one
// rank is found on every rank (each check is made from values all ranks
// share), so every rank reports it and exits non-zero, never a hang.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "io/safetensors.h"
#include "mem/memory.h"
#include "model/gpt.h"
#include "model/params.h"
#include "optim/optimizer.h"
#include "tide/compress.h"
#include "tide/reducer.h"
#include "train/comm.h"
#include "train/layer_gather.h"
#include "train/options.h"
#include "train/pipeline_run.h"
#include "train/precision.h"

namespace tide_train {

// Tensor-parallel collectives that also time how long the caller waits.
class TimedCollectives : public TideCollectives {
 public:
  explicit TimedCollectives(tideComm_t comm) : TideCollectives(comm) {}
  void allreduce_sum(float* buf, size_t n) override;
  void allreduce_max(float* buf, size_t n) override;
  void allreduce_sum(double* buf, size_t n) override;
  double seconds = 0.0;  // accumulated
};

struct StepRecord {
  int64_t step = 0;
  double loss = 0, grad_norm = 0, lr = 0, step_ms = 0, tokens_per_s = 0, flops = 0, mfu = 0,
         comm_share = 0;
  double bubble = -1;     // pipeline parallelism: mean idle share of the stages (-1: none)
  int peak_slots = 0;     // pipeline: most micro-batches holding activations on a rank
  double loss_scale = 0;  // fp16: the scale the step ran with (0: none)
  bool skipped = false;   // fp16: the gradients overflowed, no update
};

// "--mem-cap" bytes (K, M, G suffixes: powers of 1024; Error otherwise).
size_t parse_bytes(const std::string& s);

class Trainer {
 public:
  explicit Trainer(const Options& options);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // The whole job per the options (train, then export / sample / plot; or
  // score). Returns the process exit status.
  int run();

  // Whole tensors ↔ this rank's shards (collective over the tensor-parallel
  // group). The file's shapes must match the model (Error otherwise).
  TensorFile gather_weights();
  void load_weights(const TensorFile& file, const std::string& what);

 private:
  void setup_reducer();
  void setup_model();
  Ownership ownership_of(int pp_rank) const;
  StepRecord train_step(int64_t step);
  // The pipeline phase of a step (P > 1): every micro-batch through the
  // stages, the tied embedding's gradient summed between the first and last
  // stage. Returns this rank's loss sum; *r gets the bubble.
  double pipeline_phase(int64_t step, float scale, StepRecord* r);
  // The whole model forward on one micro-batch (P > 1: through every
  // stage); the loss sum on the rank holding the head, 0 elsewhere.
  double forward_all(const int* inputs, const int* targets);
  GPT* head_chunk() const;  // the GPT holding the head on this rank, or null
  void mark_all_ready();
  double evaluate();
  double score_file(const std::string& path);
  std::string sample(int64_t n);
  void save_checkpoint_now(int64_t next_step);
  int64_t resume_if_asked();
  void dump_grads(const std::string& path);
  void report(const StepRecord& r, double val_loss, bool has_val);
  void write_metrics_line(const std::string& json);
  double measure_gemm_peak();
  void plot_curves();
  std::vector<float> gather_full(int index, const float* local, size_t n);
  // The optimizer's first (second: second) moments as whole local tensors,
  // per parameter (ZeRO: gathered over the data-parallel group; collective).
  std::vector<std::vector<float>> local_moments(bool second);
  std::vector<std::vector<float>> local_tensors(const float* shard_laid_out);
  // Tensor `index`'s values (full: the whole tensor, else this rank's TP
  // shard of it) into the parameters, or with ZeRO-3 into the weight shard.
  void set_local_tensor(int index, const float* values, bool full);
  void check_all(bool ok, const std::string& detail, const std::string& what);
  // ZeRO (train/zero.cc): the optimizer's shard from the reducer's layout
  // (param_of: reducer index -> parameter), the updated parameters'
  // all-gather, the formula's model-state bytes, the memory report.
  void setup_zero(const std::vector<int>& param_of);
  void gather_params();
  // ZeRO-3: the weight shard from the initial (or loaded) values, the
  // per-block gathers, the other tensors gathered.
  void setup_zero3();
  // The initial (or --init-from) weights through set_local_tensor.
  void init_weights();
  // The reducer's buckets of each block's tensors and of the others.
  void block_buckets(std::vector<std::vector<int>>* layers, std::vector<int>* others);
  // Counts the reducer's staging bytes (tideReducerGetBufferBytes) as comm.
  void track_reducer_memory(bool capped);
  double formula_bytes() const;
  // Mixed precision (train/precision.cc): the initial (or --init-from)
  // weights into the master weights and the 16-bit ones; the gradients of
  // tensor i from the fp32 working copy into the 16-bit ones (at the end of
  // its backward, or of a pipeline phase); the 16-bit weights changed.
  void init_mixed();
  void grad_to_half(int i);
  void weights_changed();
  bool mixed() const { return half_ != nullptr; }
  void print_memory(const char* when);
  std::string memory_json() const;
  bool leader() const { return groups_->world_rank == 0; }

  Options o_;
  ModelConfig model_;
  std::unique_ptr<Groups> groups_;
  std::unique_ptr<TimedCollectives> tp_coll_;
  std::unique_ptr<ParamSet> params_;
  std::vector<std::unique_ptr<GPT>> chunks_;  // per virtual stage (P = 1: the whole model)
  GPT* gpt_ = nullptr;                        // P = 1: chunks_[0]
  std::unique_ptr<PipelineRunner> pipe_;      // P > 1
  std::vector<int> reducer_id_;               // parameter → reducer index (-1: not held)
  std::vector<int> owner_pp_;                 // parameter → pipeline rank that writes it out
  std::vector<int> stage_first_;              // first block of each stage, then n_layer
  std::unique_ptr<Optimizer> optim_;
  std::unique_ptr<Dataset> data_;
  Schedule schedule_;
  tideReducer_t reducer_ = nullptr;
  tideCompressConfig_t compress_{};
  bool has_compress_ = false;
  int micro_ = 1;  // sequences per micro-batch
  bool grads_zero_ = false;
  int zero_ = 0;  // the ZeRO stage in effect (0 without data parallelism)
  std::unique_ptr<TimedCollectives> dp_coll_;
  mem::Floats<mem::Kind::kGrads> shard_grads_;  // ZeRO: this rank's reduced gradients
  std::vector<void*> param_outs_;               // ZeRO: the all-gather's destinations
  size_t shard_count_ = 0, shard_padding_ = 0;
  size_t reducer_bytes_ = 0;                // the reducer's staging, as counted
  mem::Floats<mem::Kind::kParams> pshard_;  // ZeRO-3: this rank's shard of the weights
  std::unique_ptr<LayerGather> gate_;       // ZeRO-3
  std::unique_ptr<UpdateGather> update_;    // ZeRO 1-2
  tideCompressConfig_t param_compress_{};   // ZeRO-3: --compress-params
  bool has_param_compress_ = false;
  // Mixed precision (--precision bf16|fp16): null in fp32.
  std::unique_ptr<HalfStorage> half_;
  mem::HalfBuffer shard_grads16_;  // ZeRO 2-3: the reduced 16-bit gradients' shard
  mem::HalfBuffer pshard16_;       // ZeRO-3: this rank's shard of the 16-bit weights
  std::unique_ptr<CastGate> cast_;
  std::unique_ptr<LossScaler> scaler_;  // fp16
  std::vector<int64_t> force_overflow_;
  bool force_now_ = false;  // --force-overflow: this step's inf not yet written
  double peak_flops_ = 0.0, flops_per_token_ = 0.0;
  std::vector<int> inputs_, targets_;
  bool tty_ = false;
  std::chrono::steady_clock::time_point started_;
  std::vector<std::pair<int64_t, double>> train_curve_, val_curve_;
};

}  // namespace tide_train
