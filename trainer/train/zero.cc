// ZeRO stages 1 and 2 of tide-train over the data-parallel group, and the
// memory report (docs/zero.md).
//
// The shard: the reducer in reduce-scatter mode owns the layout (buckets of
// whole tensors, each padded to a multiple of D and split in D chunks; rank
// q owns chunk q of every bucket). Its gradients of the step are added into
// shard_grads_; the optimizer updates only the shard's elements (and holds
// only their moments); the updated parameters are all-gathered back into
// every rank's tensors, bucket by bucket, through the same layout.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "io/error.h"
#include "train/trainer.h"

namespace tide_train {

namespace {

std::string mib(double bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f MiB", bytes / 1048576.0);
  return b;
}

}  // namespace

size_t parse_bytes(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  double mult = 1.0;
  if (end != nullptr && *end != '\0') {
    const std::string suf(end);
    if (suf == "K" || suf == "k" || suf == "KiB")
      mult = 1024.0;
    else if (suf == "M" || suf == "MiB")
      mult = 1048576.0;
    else if (suf == "G" || suf == "GiB")
      mult = 1073741824.0;
    else
      throw Error("--mem-cap " + s + ": expected BYTES with an optional K, M or G suffix");
  }
  if (end == s.c_str() || !(v >= 0.0)) throw Error("--mem-cap " + s + ": expected BYTES >= 0");
  return static_cast<size_t>(v * mult);
}

// After the reducer exists (reduce-scatter mode): the shard's segments as
// the optimizer's, and the buffers the parameters' all-gather uses.
void Trainer::setup_zero(const std::vector<int>& param_of) {
  int nseg = 0;
  size_t count = 0;
  auto check = [&](tideResult_t r) {
    if (r != tideSuccess)
      throw Error(std::string("tideReducerGetShard: ") + tideGetErrorString(r) + " (" +
                  tideReducerGetLastError(reducer_) + ")");
  };
  check(tideReducerGetShard(reducer_, nullptr, &nseg, &count));
  std::vector<tideReducerSegment_t> raw(static_cast<size_t>(nseg));
  check(tideReducerGetShard(reducer_, raw.data(), &nseg, &count));
  const size_t have = std::max(shard_grads_.size(), shard_grads16_.size());
  const bool own_grads = have > 0;
  if (own_grads && count > have)
    throw Error("the reducer's shard (" + std::to_string(count) + " elements) is larger than " +
                std::to_string(have));
  std::vector<Segment> segs;
  for (const tideReducerSegment_t& s : raw) {
    segs.push_back(
        Segment{param_of[static_cast<size_t>(s.grad)], s.offset, s.count, s.shardOffset});
  }
  shard_count_ = count;
  // Padding over the whole group: D chunks of every bucket, less the
  // gradients (at most D - 1 elements per bucket).
  size_t total = 0;
  for (const Param& p : params_->params) total += p.owned ? p.size() : 0;
  shard_padding_ = static_cast<size_t>(groups_->dp_size) * count - total;
  optim_->set_shard(std::move(segs), count, own_grads && !mixed() ? shard_grads_.data() : nullptr,
                    dp_coll_.get());
  param_outs_.clear();
  for (Param& p : params_->params)
    if (p.owned) param_outs_.push_back(mixed() ? static_cast<void*>(p.data16) : p.data.data());
  if (mixed()) {  // 16-bit shards of the gradients and (ZeRO-3) of the weights
    if (zero_ == 3) {
      mem::Label l("the 16-bit weights' shard (" + std::to_string(count) + " values)");
      pshard16_ = mem::HalfBuffer(mem::Kind::kParams, count);
    }
    optim_->set_mixed(half_->format, own_grads ? shard_grads16_.data() : nullptr,
                      zero_ == 3 ? pshard16_.data() : nullptr);
    if (zero_ == 3) return;
  }
  if (zero_ == 3) {
    mem::Label l("the weights' shard (" + std::to_string(count) + " floats)");
    pshard_.assign(count, 0.0f);
    optim_->set_weight_shard(pshard_.data());
    return;
  }
  std::vector<std::vector<int>> layer_buckets;
  std::vector<int> others;
  block_buckets(&layer_buckets, &others);
  update_ = std::make_unique<UpdateGather>(reducer_, param_outs_, std::move(layer_buckets),
                                           std::move(others));
  for (auto& c : chunks_) c->set_gate(update_.get());
}

void Trainer::block_buckets(std::vector<std::vector<int>>* layers, std::vector<int>* others) {
  int nb = 0;
  std::vector<int> bucket_of(param_outs_.size(), 0);
  if (tideReducerGetLayout(reducer_, bucket_of.data(), &nb) != tideSuccess)
    throw Error(std::string("tideReducerGetLayout: ") + tideReducerGetLastError(reducer_));
  layers->assign(static_cast<size_t>(model_.n_layer), {});
  others->clear();
  std::vector<char> seen(static_cast<size_t>(nb), 0);
  size_t g = 0;
  for (const Param& p : params_->params) {
    if (!p.owned) continue;
    const int b = bucket_of[g++];
    if (seen[static_cast<size_t>(b)]) continue;
    seen[static_cast<size_t>(b)] = 1;
    (p.layer >= 0 ? (*layers)[static_cast<size_t>(p.layer)] : *others).push_back(b);
  }
}

// The initial weights (each tensor drawn whole, as at every layout), or
// --init-from's, through set_local_tensor (ZeRO-3: into the shard; mixed
// precision: into the master and the 16-bit weights).
void Trainer::init_weights() {
  for (size_t i = 0; i < params_->params.size(); ++i) {
    const Param& p = params_->params[i];
    if (!p.owned) continue;
    std::vector<float> local(p.size(), 0.0f);
    params_->init_tensor(static_cast<int>(i), static_cast<uint64_t>(o_.seed), local.data());
    set_local_tensor(static_cast<int>(i), local.data(), false);
  }
  if (!o_.init_from.empty()) load_weights(read_safetensors(o_.init_from), o_.init_from);
}

void Trainer::setup_zero3() {
  init_weights();
  std::vector<std::vector<int>> layer_buckets;
  std::vector<int> others;
  block_buckets(&layer_buckets, &others);
  gate_ = std::make_unique<LayerGather>(reducer_,
                                        mixed() ? static_cast<const void*>(pshard16_.data())
                                                : static_cast<const void*>(pshard_.data()),
                                        param_outs_, std::move(layer_buckets), std::move(others),
                                        has_param_compress_ ? &param_compress_ : nullptr);
  for (auto& c : chunks_) c->set_gate(gate_.get());
  gate_->refresh();
}

// ZeRO 1-2, after the optimizer step: every rank's updated shard of the
// parameters into every rank's tensors (collective over the data-parallel
// group, on the reducer's gather communicator).
void Trainer::gather_params() {
  // Started block by block; each block's forward waits for its own
  // (train/layer_gather.h, UpdateGather).
  update_->start_all();
}

// Model-state bytes per rank of ZeRO stage `zero` in fp32 (Rajbhandari et
// al.: 4 bytes of parameters, 4 of gradients, 8 of Adam's moments per
// parameter), psi this rank's parameters, nd the data-parallel ranks.
double Trainer::formula_bytes() const {
  const double psi = static_cast<double>(params_->count_local());
  const double nd = groups_->dp_size;
  if (mixed()) {
    // 2 bytes of 16-bit weights, 2 of 16-bit gradients, 12 of fp32 master
    // weights and moments; a pipeline's fp32 gradients are whole (4 bytes).
    const double grads = groups_->pp_size > 1 ? 4.0 * psi : zero_ >= 2 ? 2.0 * psi / nd : 2.0 * psi;
    const double optim = zero_ >= 1 ? 12.0 * psi / nd : 12.0 * psi;
    const double weights = zero_ == 3 ? 2.0 * psi / nd : 2.0 * psi;
    return weights + grads + optim;
  }
  const bool whole_grads = zero_ < 2 || params_->grad_storage() == GradStorage::kFull;
  const double grads = whole_grads ? 4.0 * psi : 4.0 * psi / nd;
  const double optim = zero_ >= 1 ? 8.0 * psi / nd : 8.0 * psi;
  const double weights = zero_ == 3 ? 4.0 * psi / nd : 4.0 * psi;
  return weights + grads + optim;
}

// The process's peak resident memory (VmHWM of /proc/self/status) in
// bytes, 0 when unknown.
static size_t peak_resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  size_t kib = 0;
  while (std::fgets(line, sizeof line, f) != nullptr)
    if (std::sscanf(line, "VmHWM: %zu kB", &kib) == 1) break;
  std::fclose(f);
  return kib * 1024;
}

void Trainer::print_memory(const char* when) {
  if (!leader()) return;
  const mem::Usage u = mem::usage();
  const size_t* c = std::string(when) == "peak" ? u.peak : u.current;
  const double states = static_cast<double>(c[0] + c[1] + c[2]);
  std::printf(
      "memory (%s, rank 0): params %s, grads %s, optim %s = model states %s; act %s, comm %s; "
      "peak %s\n",
      when, mib(static_cast<double>(c[0])).c_str(), mib(static_cast<double>(c[1])).c_str(),
      mib(static_cast<double>(c[2])).c_str(), mib(states).c_str(),
      mib(static_cast<double>(c[3])).c_str(), mib(static_cast<double>(c[4])).c_str(),
      mib(static_cast<double>(u.peak_total)).c_str());
  if (std::string(when) == "peak")
    std::printf("memory (process, rank 0): VmHWM %s\n",
                mib(static_cast<double>(peak_resident_bytes())).c_str());
  if (std::string(when) == "start") {
    const bool whole = zero_ < 2 || params_->grad_storage() == GradStorage::kFull;
    const bool pipe = groups_->pp_size > 1;
    const char* text = zero_ == 0   ? "16 psi"
                       : zero_ == 3 ? (whole ? "4 psi + 12 psi/Nd" : "16 psi/Nd")
                       : whole      ? "8 psi + 8 psi/Nd"
                                    : "4 psi + 12 psi/Nd";
    if (mixed())
      text = pipe         ? (zero_ == 0   ? "18 psi"
                             : zero_ == 3 ? "4 psi + 14 psi/Nd"
                                          : "6 psi + 12 psi/Nd")
             : zero_ == 0 ? "16 psi"
             : zero_ == 1 ? "4 psi + 12 psi/Nd"
             : zero_ == 2 ? "2 psi + 14 psi/Nd"
                          : "16 psi/Nd";
    std::printf(
        "memory formula: ZeRO-%d %s, psi %zu parameters on this rank, Nd %d: %s%s = %s "
        "(measured/formula %.4f; shard padding %zu elements over the group)\n",
        zero_, o_.precision.c_str(), params_->count_local(), groups_->dp_size, text,
        mixed() && pipe       ? " (pipeline: fp32 gradients held whole through the phase)"
        : zero_ >= 2 && whole ? " (pipeline: gradients held whole through the phase)"
                              : "",
        mib(formula_bytes()).c_str(), states / formula_bytes(), shard_padding_);
  }
  std::fflush(stdout);
}

std::string Trainer::memory_json() const {
  const mem::Usage u = mem::usage();
  char b[256];
  std::snprintf(b, sizeof b,
                ", \"mem_params\": %zu, \"mem_grads\": %zu, \"mem_optim\": %zu, \"mem_act\": %zu, "
                "\"mem_comm\": %zu, \"mem_peak\": %zu",
                u.current[0], u.current[1], u.current[2], u.current[3], u.current[4], u.peak_total);
  return b;
}

}  // namespace tide_train
