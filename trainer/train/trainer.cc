// Set-up and the training loop of tide-train (train/trainer.h).
#include "train/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "io/error.h"
#include "pipeline/partition.h"
#include "plan/plan_cli.h"

namespace tide_train {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// "--compress" → the library's compression config (false: none).
bool parse_compress(const std::string& s, tideCompressConfig_t* c, uint64_t seed) {
  *c = tideCompressConfig_t TIDE_COMPRESS_CONFIG_INITIALIZER;
  c->seed = seed;
  if (s == "none") return false;
  if (s == "fp16")
    c->codec = tideCodecFp16;
  else if (s == "bf16")
    c->codec = tideCodecBf16;
  else if (s == "int8")
    c->codec = tideCodecInt8;
  else if (s == "int4")
    c->codec = tideCodecInt4;
  else if (s == "auto")
    c->codec = tideCodecAuto;
  else if (s == "topk" || s.starts_with("topk:")) {
    c->codec = tideCodecTopK;
    if (s.size() > 5) {
      char* end = nullptr;
      const double r = std::strtod(s.c_str() + 5, &end);
      if (end == nullptr || *end != '\0' || !(r > 0.0 && r <= 1.0))
        throw Error("--compress " + s + ": topk:R needs 0 < R <= 1");
      c->topkRatio = r;
    }
  } else {
    throw Error("--compress " + s + ": expected none|fp16|bf16|int8|int4|topk:R|auto");
  }
  return true;
}

// "a,b,..." of steps (none: no step).
std::vector<int64_t> parse_steps(const std::string& s, const char* flag) {
  std::vector<int64_t> out;
  if (s == "none" || s.empty()) return out;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t end = std::min(s.find(',', at), s.size());
    const std::string item = s.substr(at, end - at);
    char* stop = nullptr;
    const long long v = std::strtoll(item.c_str(), &stop, 10);
    if (item.empty() || stop == nullptr || *stop != '\0' || v < 0)
      throw Error(std::string(flag) + " " + s + ": expected none or steps a,b,... (each >= 0)");
    out.push_back(v);
    at = end + 1;
  }
  return out;
}

}  // namespace

void TimedCollectives::allreduce_sum(float* buf, size_t n) {
  const auto t = Clock::now();
  TideCollectives::allreduce_sum(buf, n);
  seconds += seconds_since(t);
}
void TimedCollectives::allreduce_max(float* buf, size_t n) {
  const auto t = Clock::now();
  TideCollectives::allreduce_max(buf, n);
  seconds += seconds_since(t);
}
void TimedCollectives::allreduce_sum(double* buf, size_t n) {
  const auto t = Clock::now();
  TideCollectives::allreduce_sum(buf, n);
  seconds += seconds_since(t);
}

Trainer::Trainer(const Options& options) : o_(options) {
  started_ = Clock::now();
  model_.n_layer = o_.layers;
  model_.n_head = o_.heads;
  model_.n_embd = o_.embd;
  model_.block_size = o_.ctx;
  model_.vocab_size = o_.vocab;
  groups_ = std::make_unique<Groups>();
  // Every rank reports a bad --layout before any exits (the launcher stops
  // the others once one exits).
  check_all(o_.layout == "auto" || o_.layout == "manual",
            "--layout " + o_.layout + ": expected manual or auto", "checking --layout");
  if (o_.layout == "auto")
    plan::choose_layout(&o_, groups_->world, groups_->world_size, groups_->world_rank);
  groups_->split(o_.dp, o_.tp, o_.pp);
  tp_coll_ = std::make_unique<TimedCollectives>(groups_->tp);
  if (groups_->dp != nullptr) dp_coll_ = std::make_unique<TimedCollectives>(groups_->dp);
  // What may fail on one rank only (files) is agreed on by all (check_all).
  bool ok = true;
  std::string err;
  try {
    validate(model_, groups_->tp_size);
    const int D = groups_->dp_size;
    if (o_.batch < 1 || o_.micro_batches < 1 || o_.batch % (D * o_.micro_batches) != 0)
      throw Error("--batch " + std::to_string(o_.batch) + " is not divisible by --dp " +
                  std::to_string(D) + " x --micro-batches " + std::to_string(o_.micro_batches));
    micro_ = o_.batch / (D * o_.micro_batches);
    if (o_.zero < 0 || o_.zero > 3)
      throw Error("--zero " + std::to_string(o_.zero) + ": expected 0, 1, 2 or 3");
    zero_ = D > 1 ? o_.zero : 0;  // one data-parallel rank: nothing to partition
    has_param_compress_ =
        parse_compress(o_.compress_params, &param_compress_, static_cast<uint64_t>(o_.seed) + 1);
    if (has_param_compress_ && o_.zero != 3)
      throw Error("--compress-params " + o_.compress_params + " needs --zero 3");
    if (has_param_compress_ &&
        (param_compress_.codec == tideCodecTopK || param_compress_.codec == tideCodecAuto))
      throw Error("--compress-params " + o_.compress_params +
                  ": expected none|fp16|bf16|int8|int4");
    param_compress_.errorFeedback = 0;  // weights are sent whole each time: nothing to carry
    if (o_.precision != "fp32" && o_.precision != "bf16" && o_.precision != "fp16")
      throw Error("--precision " + o_.precision + ": expected fp32, bf16 or fp16");
    if (o_.precision != "fp32") {
      half_ = std::make_unique<HalfStorage>();
      half_->format = o_.precision == "bf16" ? ops::Half::kBf16 : ops::Half::kFp16;
      if (!o_.dump_grads.empty())
        throw Error("--dump-grads needs --precision fp32 (the gradients are kept in 16 bits)");
    }
    if (o_.precision == "fp16") {
      if (!(o_.loss_scale >= 1.0) || !(o_.min_loss_scale > 0.0) ||
          o_.min_loss_scale > o_.loss_scale || o_.loss_scale_window < 1)
        throw Error(
            "--loss-scale, --min-loss-scale, --loss-scale-window: expected 0 < min <= scale "
            "(scale >= 1) and a window of at least 1 step");
      scaler_ =
          std::make_unique<LossScaler>(o_.loss_scale, o_.loss_scale_window, o_.min_loss_scale);
    }
    force_overflow_ = parse_steps(o_.force_overflow, "--force-overflow");
    if (!force_overflow_.empty() && !scaler_)
      throw Error("--force-overflow needs --precision fp16 (the loss scale handles it)");
    if (zero_ >= 1 && !o_.dump_grads.empty())
      throw Error("--dump-grads needs --zero 0 (ZeRO holds only a shard of the gradients)");
    mem::set_cap(parse_bytes(o_.mem_cap));
    if (o_.vocab < 256)
      throw Error("--vocab " + std::to_string(o_.vocab) + ": byte-level data needs at least 256");
    setup_model();
    // ZeRO-3 has no whole weights until its shard exists (setup_zero3).
    if (!o_.init_from.empty() && zero_ < 3 && !mixed())
      load_weights(read_safetensors(o_.init_from), o_.init_from);
    OptimConfig oc;
    oc.kind = o_.optimizer;
    oc.beta1 = o_.beta1;
    oc.beta2 = o_.beta2;
    oc.eps = o_.eps;
    oc.weight_decay = o_.weight_decay;
    optim_ = std::make_unique<Optimizer>(params_.get(), oc, tp_coll_.get(), zero_ == 0);
    if (mixed() && zero_ == 0) optim_->set_mixed(half_->format, nullptr, nullptr);
    has_compress_ = parse_compress(o_.compress, &compress_, static_cast<uint64_t>(o_.seed));
    if (o_.score.empty() && (o_.steps > 0 || o_.eval_every > 0))
      data_ =
          std::make_unique<Dataset>(o_.data.empty() ? Dataset::default_source() : o_.data, o_.ctx);
  } catch (const std::exception& e) {
    ok = false;
    err = e.what();
  }
  check_all(ok, err, "setting up");
  schedule_.lr = o_.lr;
  schedule_.min_lr = o_.min_lr;
  schedule_.warmup = o_.warmup;
  schedule_.decay_steps = o_.decay_steps < 0 ? o_.steps : o_.decay_steps;
  inputs_.resize(static_cast<size_t>(micro_) * o_.ctx);
  targets_.resize(inputs_.size());
  tty_ = isatty(STDOUT_FILENO) != 0;
  const ModelConfig& m = model_;
  flops_per_token_ = 6.0 * static_cast<double>(params_->count_full(false)) +
                     12.0 * m.n_layer * m.n_head * m.head_size() * m.block_size;
  // Every rank makes the same allocations and calls: a failure (--mem-cap)
  // happens on all of them at the same point.
  try {
    setup_reducer();
    if (zero_ == 3) setup_zero3();
    if (mixed()) init_mixed();
  } catch (const std::exception& e) {
    ok = false;
    err = e.what();
  }
  check_all(ok, err, "setting up the gradient reducer");
}

Ownership Trainer::ownership_of(int pp_rank) const {
  Ownership own;
  const int P = groups_->pp_size, S = static_cast<int>(stage_first_.size()) - 1;
  if (P == 1) return own;
  own.layers.assign(static_cast<size_t>(model_.n_layer), 0);
  for (int s = pp_rank; s < S; s += P)
    for (int l = stage_first_[static_cast<size_t>(s)]; l < stage_first_[static_cast<size_t>(s) + 1];
         ++l)
      own.layers[static_cast<size_t>(l)] = 1;
  own.embed = pp_rank == 0;
  own.head = (S - 1) % P == pp_rank;
  return own;
}

// The parameters this rank holds and the GPT of each of its stages (P = 1:
// one GPT of the whole model); with P > 1 the schedule and its runner.
void Trainer::setup_model() {
  const int P = groups_->pp_size, V = P > 1 ? o_.virtual_stages : 1, S = P * V;
  pipeline::ScheduleKind kind = pipeline::ScheduleKind::k1f1b;
  if (!pipeline::parse_schedule(o_.schedule, &kind))
    throw Error("--schedule " + o_.schedule + ": expected gpipe, 1f1b, interleaved or zb");
  if (P == 1 && o_.virtual_stages != 1)
    throw Error("--virtual-stages " + std::to_string(o_.virtual_stages) + " needs --pp > 1");
  try {
    stage_first_ =
        pipeline::stage_bounds(pipeline::stage_layers(model_.n_layer, S, o_.stage_layers));
  } catch (const std::invalid_argument& e) {
    throw Error(e.what());
  }
  TensorParallel tp{groups_->tp_size, groups_->tp_rank};
  // sqrt: of the layers each GPT (stage) holds.
  const Recompute recompute =
      parse_recompute(o_.checkpoint_activations, std::max(1, model_.n_layer / S));
  if (recompute.kind == Recompute::kEvery && P > 1 && kind == pipeline::ScheduleKind::kZeroBubble)
    throw Error("--checkpoint-activations " + o_.checkpoint_activations +
                " with --schedule zb: zb's weight pass needs every block's activations (use "
                "selective)");
  // Mixed precision keeps the gradients in 16 bits: the fp32 ones are
  // per-block working buffers (no pipeline) as ZeRO-2's.
  const GradStorage storage =
      (zero_ >= 2 || mixed()) && P == 1 ? GradStorage::kLayerRing : GradStorage::kFull;
  if (mixed()) {
    half_->weights_ring = zero_ == 3;
    half_->grads_ring = zero_ >= 2 && P == 1;
    // A pipeline's fp32 gradients are the whole ones of the phase; the
    // 16-bit ones are their copies for the reduction.
    half_->grads_kind = P > 1 ? mem::Kind::kComm : mem::Kind::kGrads;
  }
  params_ = std::make_unique<ParamSet>(model_, tp, ownership_of(groups_->pp_rank), storage,
                                       zero_ == 3, half_.get());
  // ZeRO-3: setup_zero3; mixed precision: init_mixed.
  if (zero_ < 3 && !mixed()) params_->init(static_cast<uint64_t>(o_.seed));
  // Each tensor's writer: the lowest pipeline rank holding it.
  owner_pp_.assign(params_->params.size(), 0);
  for (int r = P - 1; r >= 0; --r) {
    const Ownership own = ownership_of(r);
    for (size_t i = 0; i < params_->params.size(); ++i)
      if (own.owns(params_->params[i])) owner_pp_[i] = r;
  }
  for (int s = groups_->pp_rank; s < S; s += P) {
    StageSpec st{stage_first_[static_cast<size_t>(s)], stage_first_[static_cast<size_t>(s) + 1],
                 s == 0, s == S - 1};
    chunks_.push_back(std::make_unique<GPT>(params_.get(), micro_, tp_coll_.get(), o_.reference_ops,
                                            st, recompute));
  }
  if (P == 1) {
    gpt_ = chunks_.front().get();
    return;
  }
  pipeline::Schedule sched;
  try {
    sched = pipeline::make_schedule(kind, P, o_.micro_batches, V);
  } catch (const std::invalid_argument& e) {
    throw Error(std::string("pipeline schedule: ") + e.what());
  }
  std::vector<GPT*> raw;
  for (auto& c : chunks_) raw.push_back(c.get());
  std::vector<int> world(static_cast<size_t>(P));
  for (int q = 0; q < P; ++q)
    world[static_cast<size_t>(q)] =
        (q * groups_->dp_size + groups_->dp_rank) * groups_->tp_size + groups_->tp_rank;
  pipe_ = std::make_unique<PipelineRunner>(std::move(sched), groups_->pp_rank, groups_->pp, raw,
                                           std::move(world));
}

GPT* Trainer::head_chunk() const { return pipe_ ? pipe_->head_chunk() : gpt_; }

double Trainer::forward_all(const int* inputs, const int* targets) {
  return pipe_ ? pipe_->forward_only(inputs, targets) : gpt_->forward(inputs, targets);
}

void Trainer::mark_all_ready() {
  for (int id : reducer_id_)
    if (id >= 0) {
      const tideResult_t r = tideReducerMarkReady(reducer_, id);
      if (r != tideSuccess)
        throw Error(std::string("MarkReady: ") + tideGetErrorString(r) + " (" +
                    tideReducerGetLastError(reducer_) + ")");
    }
}

Trainer::~Trainer() {
  if (reducer_ != nullptr) tideReducerDestroy(reducer_);
}

void Trainer::setup_reducer() {
  if (groups_->dp == nullptr) return;
  std::vector<void*> grads;
  std::vector<size_t> counts;
  std::vector<int> param_of;
  size_t total = 0;
  reducer_id_.assign(params_->params.size(), -1);
  for (size_t i = 0; i < params_->params.size(); ++i) {
    Param& p = params_->params[i];
    if (!p.owned) continue;
    reducer_id_[i] = static_cast<int>(grads.size());
    param_of.push_back(static_cast<int>(i));
    grads.push_back(mixed() ? static_cast<void*>(p.grad16) : p.grad.data());
    counts.push_back(p.grad.size());
    total += p.grad.size();
  }
  tideReducerConfig_t rc = TIDE_REDUCER_CONFIG_INITIALIZER;
  rc.bucketBytes =
      o_.bucket_mb <= 0.0 ? SIZE_MAX : static_cast<size_t>(o_.bucket_mb * 1024.0 * 1024.0);
  rc.firstBucketBytes = std::min<size_t>(rc.bucketBytes, size_t{1} << 20);
  rc.average = 1;
  rc.compress = has_compress_ ? &compress_ : nullptr;
  // Mixed precision: 16 bits on the wire, every sum in fp32 (the cast
  // codec of the gradients' own format, lossless on them: the compressed
  // collectives add the decoded inputs in fp32 and round once).
  tideCompressConfig_t cast = TIDE_COMPRESS_CONFIG_INITIALIZER;
  const tideDataType_t dtype = !mixed()                            ? tideFloat32
                               : half_->format == ops::Half::kBf16 ? tideBfloat16
                                                                   : tideFloat16;
  if (mixed() && !has_compress_) {
    cast.codec = half_->format == ops::Half::kBf16 ? tideCodecBf16 : tideCodecFp16;
    cast.errorFeedback = 0;
    rc.compress = &cast;
  }
  const size_t D = static_cast<size_t>(groups_->dp_size);
  // ZeRO-3: each block's tensors in buckets of their own (one gather per
  // block), gathered on the reducer's own thread and communicator.
  std::vector<int> groups;
  for (int i : param_of) {
    const int layer = params_->params[static_cast<size_t>(i)].layer;
    groups.push_back(layer >= 0 ? layer : model_.n_layer);
  }
  if (zero_ >= 1) {  // ZeRO 1-2: the updated weights' gathers overlap the next forward
    rc.groups = groups.data();
    rc.gatherAsync = 1;
  }
  if (zero_ >= 1) {
    rc.reduceScatter = 1;
    rc.rebuildBuckets = 0;
    // ZeRO 2 without a pipeline: the reduced gradients live only in the
    // shard. Otherwise (ZeRO 1, a pipeline's whole gradients) each rank's
    // reduced chunk is written back into its whole gradients.
    if (params_->grad_storage() == GradStorage::kLayerRing && zero_ >= 2) {
      // Each bucket pads to a multiple of D: at most D - 1 elements per
      // gradient more than total / D.
      mem::Label l("the reduced gradients' shard");
      const size_t n = (total + D - 1) / D + grads.size();
      if (mixed()) {
        shard_grads16_ = mem::HalfBuffer(mem::Kind::kGrads, n);
        rc.shard = shard_grads16_.data();
      } else {
        shard_grads_.assign(n, 0.0f);
        rc.shard = shard_grads_.data();
      }
    }
  }
  const tideResult_t r = tideReducerCreate(groups_->dp, static_cast<int>(grads.size()),
                                           grads.data(), counts.data(), dtype, &rc, &reducer_);
  if (r != tideSuccess)
    throw Error(std::string("creating the gradient reducer: ") + tideGetErrorString(r) + " (" +
                tideReducerGetLastError(nullptr) + ")");
  if (zero_ >= 1) setup_zero(param_of);
  // The reducer's staging buffers (reduce-scatter mode: two buckets'
  // worth, lent to the buckets in flight; else every bucket of several
  // gradients), the same on every rank at creation.
  mem::Label l("the gradient reducer's buckets");
  track_reducer_memory(true);
}

void Trainer::track_reducer_memory(bool capped) {
  size_t now = 0, peak = 0;
  if (reducer_ == nullptr || tideReducerGetBufferBytes(reducer_, &now, &peak) != tideSuccess)
    return;
  mem::account(mem::Kind::kComm,
               static_cast<long long>(now) - static_cast<long long>(reducer_bytes_), capped);
  reducer_bytes_ = now;
}

// One optimizer step: M micro-batches forward and backward (the last one's
// gradients reduced over the data-parallel group while its backward runs),
// the global gradient norm, clipping, the update.
StepRecord Trainer::train_step(int64_t step) {
  const auto t0 = Clock::now();
  tp_coll_->seconds = 0.0;
  double wait_s = 0.0;
  const int M = o_.micro_batches, T = o_.ctx;
  const int share = o_.batch / groups_->dp_size;
  if (!grads_zero_) params_->zero_grads();  // ZeRO 0: the optimizer step leaves them zero
  grads_zero_ = false;
  double loss_sum = 0.0;
  // fp16: the loss (so every gradient) multiplied by the loss scale.
  const double loss_scale = scaler_ ? scaler_->scale() : 1.0;
  const float scale =
      static_cast<float>(loss_scale) / static_cast<float>(static_cast<int64_t>(share) * T);
  force_now_ =
      std::find(force_overflow_.begin(), force_overflow_.end(), step) != force_overflow_.end() &&
      groups_->world_rank == 0;
  auto check_reducer = [&](tideResult_t r, const char* what) {
    if (r != tideSuccess)
      throw Error(std::string(what) + ": " + tideGetErrorString(r) + " (" +
                  tideReducerGetLastError(reducer_) + ")");
  };
  StepRecord r;
  if (pipe_) {
    loss_sum = pipeline_phase(step, scale, &r);
    if (mixed())  // the phase's fp32 gradients into the 16-bit ones
      for (size_t i = 0; i < params_->params.size(); ++i)
        if (params_->params[i].owned) grad_to_half(static_cast<int>(i));
    if (reducer_ != nullptr) {
      check_reducer(tideReducerSetSync(reducer_, 1), "SetSync");
      mark_all_ready();
      const auto tw = Clock::now();
      check_reducer(tideReducerWait(reducer_), "reducing the gradients (tideReducerWait)");
      wait_s += seconds_since(tw);
    }
  } else {
    for (int j = 0; j < M; ++j) {
      const bool last = j == M - 1;
      data_->train_batch(static_cast<uint64_t>(o_.seed), static_cast<uint64_t>(step),
                         groups_->dp_rank * share + j * micro_, micro_, inputs_.data(),
                         targets_.data());
      loss_sum += gpt_->forward(inputs_.data(), targets_.data());
      // ZeRO 2: every micro-batch's gradients are reduce-scattered into
      // the shard (which accumulates them), none kept whole.
      const bool sync = last || zero_ >= 2;  // ZeRO 2 and 3
      const bool ring = params_->grad_storage() == GradStorage::kLayerRing;
      if (reducer_ != nullptr) check_reducer(tideReducerSetSync(reducer_, sync ? 1 : 0), "SetSync");
      std::function<void(int)> ready = [](int) {};
      if ((reducer_ != nullptr && sync) || mixed())
        ready = [&, sync, ring](int i) {
          if (mixed()) grad_to_half(i);  // what the reducer and the optimizer read
          if (reducer_ != nullptr && sync)
            check_reducer(tideReducerMarkReady(reducer_, reducer_id_[static_cast<size_t>(i)]),
                          "MarkReady");
          if (ring) {  // copied (into the bucket, or 16 bits): the buffer is free again
            FloatSpan g = params_->params[static_cast<size_t>(i)].grad;
            std::fill(g.begin(), g.end(), 0.0f);
          }
        };
      gpt_->backward(scale, ready);
      if (reducer_ != nullptr) {
        if (!sync) mark_all_ready();
        const auto tw = Clock::now();
        check_reducer(tideReducerWait(reducer_), "reducing the gradients (tideReducerWait)");
        wait_s += seconds_since(tw);
      }
    }
  }
  // The mean loss over the global batch.
  double loss = loss_sum;
  allreduce(groups_->pp, &loss, 1, tideSum);
  allreduce(groups_->dp, &loss, 1, tideSum);
  loss /= static_cast<double>(o_.batch) * T;
  // The tied embedding is held by the first and the last stage: count it once.
  const Param& wte = params_->params[static_cast<size_t>(params_->wte)];
  const bool wte_twice = pipe_ && wte.owned && groups_->pp_rank != 0;
  const int skip = wte_twice ? params_->wte : -1;
  double norm2 = zero_ >= 1 ? optim_->grad_norm_squared(skip)
                            : grad_norm_squared(*params_, tp_coll_.get(), skip);
  allreduce(groups_->pp, &norm2, 1, tideSum);
  const double norm = std::sqrt(norm2) / loss_scale;
  if (step == 0 && !o_.dump_grads.empty()) dump_grads(o_.dump_grads);
  const double lr = schedule_.at(step);
  // fp16: an overflow on any rank made every rank's norm inf or NaN (it is
  // summed over every group): every rank skips the same step.
  bool apply = true;
  if (scaler_) {
    r.loss_scale = loss_scale;
    apply = scaler_->update(!std::isfinite(norm2), step);
    r.skipped = !apply;
    if (!apply && leader()) {
      std::printf("step %lld: fp16 gradients overflowed: step skipped, loss scale %.0f -> %.0f\n",
                  static_cast<long long>(step), loss_scale, scaler_->scale());
      std::fflush(stdout);
    }
  }
  if (apply)
    optim_->step(lr, clip_scale(norm, o_.clip) / static_cast<float>(loss_scale));
  else
    optim_->zero_grads();
  // ZeRO 1-2 read the shard's gradients (zeroed by the step): the whole
  // ones (stage 1, or a pipeline's) are zeroed at the next step's start.
  // Mixed precision: the fp32 ring is zeroed block by block; the 16-bit
  // ones are read whole (stage 0) or are copies (a ring).
  if (mixed())
    grads_zero_ = groups_->pp_size == 1 && (zero_ == 0 || half_->grads_ring);
  else
    grads_zero_ = zero_ == 0 || params_->grad_storage() == GradStorage::kLayerRing;
  if (apply) {
    if (zero_ == 3)
      gate_->refresh();  // blocks are gathered again as they are needed
    else if (zero_ >= 1)
      gather_params();
    if (cast_) cast_->refresh();
  }
  // More staging only when a bucket waited for marks with every buffer lent
  // (timing, so not held to --mem-cap here; counted).
  track_reducer_memory(false);

  r.step = step;
  r.loss = loss;
  r.grad_norm = norm;
  r.lr = lr;
  const double secs = seconds_since(t0);
  r.step_ms = secs * 1e3;
  r.tokens_per_s = static_cast<double>(o_.batch) * T / secs;
  r.flops = flops_per_token_ * r.tokens_per_s / groups_->world_size;  // per rank
  r.mfu = peak_flops_ > 0 ? r.flops / peak_flops_ : 0.0;
  r.comm_share = (wait_s + tp_coll_->seconds) / secs;
  return r;
}

int Trainer::run() {
  if (!o_.score.empty()) {
    const double s = score_file(o_.score);
    if (leader()) std::printf("score: %.12g\n", s);
    return 0;
  }
  peak_flops_ = measure_gemm_peak();
  const int64_t first = resume_if_asked();
  if (leader()) {
    std::printf(
        "tide-train: %lld parameters (%lld without positions), layout dp %d x tp %d x pp %d, "
        "%d sequences of %d per step, %d micro-batches of %d per rank\n",
        static_cast<long long>(params_->count_full(true)),
        static_cast<long long>(params_->count_full(false)), groups_->dp_size, groups_->tp_size,
        groups_->pp_size, o_.batch, o_.ctx, o_.micro_batches, micro_);
    if (pipe_) {
      std::string layers;
      for (size_t s = 0; s + 1 < stage_first_.size(); ++s)
        layers += (s ? "," : "") + std::to_string(stage_first_[s + 1] - stage_first_[s]);
      std::printf("pipeline: schedule %s, %d stages (P %d x V %d) of %s layers\n",
                  o_.schedule.c_str(), static_cast<int>(stage_first_.size()) - 1, groups_->pp_size,
                  o_.virtual_stages, layers.c_str());
    }
    std::printf("gemm peak: %.2f GFLOP/s per rank (single-thread sgemm, measured)\n",
                peak_flops_ / 1e9);
    if (data_)
      std::printf("data: %zu bytes (%zu training, %zu validation)\n", data_->bytes(),
                  data_->train().size(), data_->val().size());
    std::fflush(stdout);
  }
  print_memory("start");
  for (int64_t s = first; s < o_.steps; ++s) {
    double val = 0.0;
    const bool eval = o_.eval_every > 0 && s % o_.eval_every == 0;
    if (eval) val = evaluate();
    const StepRecord r = train_step(s);
    report(r, val, eval);
    if (o_.checkpoint_every > 0 && !o_.checkpoint_dir.empty() && (s + 1) % o_.checkpoint_every == 0)
      save_checkpoint_now(s + 1);
  }
  if (o_.eval_every > 0 && o_.steps > first) {
    const double val = evaluate();
    if (leader()) {
      std::printf("step %lld | val_loss %.6f\n", static_cast<long long>(o_.steps), val);
      char line[128];
      std::snprintf(line, sizeof line, "{\"step\": %lld, \"val_loss\": %.12g}",
                    static_cast<long long>(o_.steps), val);
      write_metrics_line(line);
      val_curve_.emplace_back(o_.steps, val);
    }
  }
  if (o_.checkpoint_every > 0 && !o_.checkpoint_dir.empty() && o_.steps > first &&
      o_.steps % o_.checkpoint_every != 0)
    save_checkpoint_now(o_.steps);
  print_memory("peak");  // the training's (the text of --sample stays the last line)
  if (!o_.export_path.empty()) {
    TensorFile f = gather_weights();
    if (leader()) write_safetensors(o_.export_path, f);
    barrier(groups_->world);
  }
  if (o_.sample > 0) {
    const std::string text = sample(o_.sample);
    if (leader()) std::printf("%s\n", text.c_str());
  }
  if (leader() && !o_.plot.empty()) plot_curves();
  return 0;
}

}  // namespace tide_train
