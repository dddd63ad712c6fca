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
#include "model/gpt.h"
#include "model/params.h"
#include "optim/optimizer.h"
#include "tide/compress.h"
#include "tide/reducer.h"
#include "train/comm.h"
#include "train/options.h"
#include "train/pipeline_run.h"

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
  double bubble = -1;  // pipeline parallelism: mean idle share of the stages (-1: none)
  int peak_slots = 0;  // pipeline: most micro-batches holding activations on a rank
};

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
  std::vector<float> gather_full(int index, const std::vector<float>& local);
  void check_all(bool ok, const std::string& detail, const std::string& what);
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
  double peak_flops_ = 0.0, flops_per_token_ = 0.0;
  std::vector<int> inputs_, targets_;
  bool tty_ = false;
  std::chrono::steady_clock::time_point started_;
  std::vector<std::pair<int64_t, double>> train_curve_, val_curve_;
};

}  // namespace tide_train
