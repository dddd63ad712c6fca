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
  StepRecord train_step(int64_t step);
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
  std::unique_ptr<GPT> gpt_;
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
