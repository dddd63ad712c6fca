// Whole tensors in and out of the sharded model: export, --init-from,
// gradient dumps and checkpoints (train/trainer.h).
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "io/checkpoint.h"
#include "io/error.h"
#include "train/trainer.h"

namespace tide_train {

namespace {

int64_t product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::map<std::string, std::string> model_metadata(const ModelConfig& m) {
  return {{"n_layer", std::to_string(m.n_layer)},
          {"n_head", std::to_string(m.n_head)},
          {"n_embd", std::to_string(m.n_embd)},
          {"block_size", std::to_string(m.block_size)},
          {"vocab_size", std::to_string(m.vocab_size)}};
}

}  // namespace

// Every rank learns whether every rank succeeded (so a failure on one rank is
// an error on all, never a hang); throws on all when one failed.
void Trainer::check_all(bool ok, const std::string& detail, const std::string& what) {
  double bad = ok ? 0.0 : 1.0;
  allreduce(groups_->world, &bad, 1, tideSum);
  if (bad == 0.0) return;
  // Every rank prints its line before any exits (the launcher stops the
  // others once one exits), then all throw.
  const std::string msg = ok ? what + " failed on another rank (see its message)" : detail;
  std::fflush(stdout);
  std::fprintf(stderr, "tide-train: error: %s\n", msg.c_str());
  std::fflush(stderr);
  barrier(groups_->world);
  throw ReportedError(msg);
}

std::vector<float> Trainer::gather_full(int index, const float* local, size_t n) {
  const Param& p = params_->params[static_cast<size_t>(index)];
  std::vector<float> full(static_cast<size_t>(product(p.full_shape)), 0.0f);
  if (!p.owned) {
    // Another pipeline stage holds it: its rank sends the whole tensor.
  } else if (p.sharded() && groups_->tp != nullptr) {
    std::vector<float> all(n * static_cast<size_t>(groups_->tp_size));
    check_tide(tideAllGather(local, all.data(), n, tideFloat32, groups_->tp, nullptr), groups_->tp,
               "gathering " + p.name);
    params_->full_from_shard(index, all.data(), full.data());
  } else {
    params_->full_from_shard(index, local, full.data());
  }
  broadcast(groups_->pp, full.data(), full.size() * sizeof(float),
            owner_pp_[static_cast<size_t>(index)]);
  return full;
}

std::vector<std::vector<float>> Trainer::local_moments(bool second) {
  auto& state = second ? optim_->exp_avg_sq() : optim_->exp_avg();
  return local_tensors(state.data());
}

// The optimizer's shard-laid-out `state` (moments, or ZeRO-3's weights) as
// whole local tensors.
std::vector<std::vector<float>> Trainer::local_tensors(const float* state) {
  std::vector<std::vector<float>> local(params_->params.size());
  for (size_t i = 0; i < local.size(); ++i) local[i].assign(params_->params[i].size(), 0.0f);
  if (optim_->sharded() && mixed()) {
    // The reducer moves 16-bit values: the fp32 shards are summed instead
    // (each element is one rank's, the others add zeros) over the group.
    std::vector<float> flat(params_->count_local(), 0.0f);
    for (const Segment& s : optim_->segments()) {
      const Param& p = params_->params[static_cast<size_t>(s.param)];
      std::copy(state + s.at, state + s.at + s.n,
                flat.begin() + static_cast<std::ptrdiff_t>(p.flat + s.offset));
    }
    dp_coll_->allreduce_sum(flat.data(), flat.size());
    for (size_t i = 0; i < local.size(); ++i) {
      const Param& p = params_->params[i];
      if (p.owned)
        std::copy(flat.begin() + static_cast<std::ptrdiff_t>(p.flat),
                  flat.begin() + static_cast<std::ptrdiff_t>(p.flat + p.size()), local[i].begin());
    }
    return local;
  }
  if (!optim_->sharded()) {
    for (const Segment& s : optim_->segments())
      std::copy(
          state + s.at, state + s.at + s.n,
          local[static_cast<size_t>(s.param)].begin() + static_cast<std::ptrdiff_t>(s.offset));
    return local;
  }
  // ZeRO: every rank's shard of the moments gathered into whole local tensors.
  std::vector<void*> outs;
  for (size_t i = 0; i < local.size(); ++i)
    if (reducer_id_[i] >= 0) outs.push_back(local[i].data());
  const tideResult_t r = tideReducerAllGather(reducer_, state, outs.data(), -1, nullptr);
  if (r != tideSuccess)
    throw Error(std::string("gathering the optimizer's moments: ") + tideGetErrorString(r) + " (" +
                tideReducerGetLastError(reducer_) + ")");
  return local;
}

void Trainer::set_local_tensor(int index, const float* values, bool full) {
  Param& p = params_->params[static_cast<size_t>(index)];
  if (!p.owned) return;
  if (mixed()) {  // the master weights' segments, and the 16-bit weights
    std::vector<float> local;
    if (full) {
      local.assign(p.size(), 0.0f);
      params_->shard_into(index, values, local.data());
      values = local.data();
    }
    if (zero_ < 3) ops::to_half(half_->format, values, p.data16, p.size());
    for (const Segment& s : optim_->segments())
      if (s.param == index) {
        std::copy(values + s.offset, values + s.offset + s.n, optim_->master().data() + s.at);
        if (zero_ == 3)
          ops::to_half(half_->format, values + s.offset, pshard16_.data() + s.at, s.n);
      }
    return;
  }
  if (zero_ < 3) {
    if (full)
      params_->shard_from_full(index, values);
    else
      std::copy(values, values + p.size(), p.data.data());
    return;
  }
  // ZeRO-3: this rank's segments of it into the weight shard.
  std::vector<float> local;
  if (full) {
    local.assign(p.size(), 0.0f);
    params_->shard_into(index, values, local.data());
    values = local.data();
  }
  for (const Segment& s : optim_->segments())
    if (s.param == index)
      std::copy(values + s.offset, values + s.offset + s.n, pshard_.data() + s.at);
}

TensorFile Trainer::gather_weights() {
  TensorFile f;
  f.metadata = model_metadata(model_);
  // ZeRO-3: the data-parallel group's shards of every tensor first.
  // Mixed precision: the optimizer's fp32 master weights.
  std::vector<std::vector<float>> local;
  if (mixed())
    local = local_tensors(optim_->master().data());
  else if (zero_ == 3)
    local = local_tensors(pshard_.data());
  if (update_) update_->wait_all();  // ZeRO 1-2: the last update's gathers
  for (size_t i = 0; i < params_->params.size(); ++i) {
    const Param& p = params_->params[i];
    const float* mine = zero_ == 3 || mixed() ? local[i].data() : p.data.data();
    f.tensors[p.name] = Tensor{p.full_shape, gather_full(static_cast<int>(i), mine, p.size())};
  }
  return f;
}

void Trainer::load_weights(const TensorFile& file, const std::string& what) {
  for (const auto& [key, value] : model_metadata(model_)) {
    auto it = file.metadata.find(key);
    if (it != file.metadata.end() && it->second != value) {
      std::string msg = what;
      msg += ": the file's " + key + " is " + it->second;
      msg += ", the flags give " + value;
      throw Error(msg);
    }
  }
  size_t used = 0;
  for (size_t i = 0; i < params_->params.size(); ++i) {
    const Param& p = params_->params[i];
    auto it = file.tensors.find(p.name);
    if (it == file.tensors.end()) throw Error(what + ": no tensor " + p.name);
    if (it->second.shape != p.full_shape)
      throw Error(what + ": " + p.name + " has shape " + shape_text(it->second.shape) +
                  ", the model needs " + shape_text(p.full_shape));
    set_local_tensor(static_cast<int>(i), it->second.data.data(), true);
    ++used;
  }
  auto head = file.tensors.find("lm_head.weight");
  if (head != file.tensors.end()) {
    const Tensor& wte = file.tensors.at("transformer.wte.weight");
    if (head->second.shape != wte.shape || head->second.data != wte.data)
      throw Error(what +
                  ": lm_head.weight differs from transformer.wte.weight (the head is "
                  "tied to the embedding)");
    ++used;
  }
  if (used != file.tensors.size())
    for (const auto& entry : file.tensors) {
      const std::string& name = entry.first;
      if (name != "lm_head.weight" &&
          std::none_of(params_->params.begin(), params_->params.end(),
                       [&](const Param& p) { return p.name == name; })) {
        std::string msg = what;
        msg += ": unexpected tensor " + name;
        msg += " (not part of this model)";
        throw Error(msg);
      }
    }
}

void Trainer::dump_grads(const std::string& path) {
  TensorFile f;
  f.metadata = model_metadata(model_);
  for (size_t i = 0; i < params_->params.size(); ++i) {
    const Param& p = params_->params[i];
    f.tensors[p.name] =
        Tensor{p.full_shape, gather_full(static_cast<int>(i), p.grad.data(), p.size())};
  }
  bool ok = true;
  std::string err;
  if (leader()) try {
      write_safetensors(path, f);
    } catch (const Error& e) {
      ok = false;
      err = e.what();
    }
  check_all(ok, err, "--dump-grads");
}

void Trainer::save_checkpoint_now(int64_t next_step) {
  Checkpoint c;
  c.step = next_step;
  c.model = gather_weights();
  c.optim.metadata = c.model.metadata;
  for (int second = 0; second < 2; ++second) {
    const std::vector<std::vector<float>> local = local_moments(second == 1);
    for (size_t i = 0; i < params_->params.size(); ++i) {
      const Param& p = params_->params[i];
      c.optim.tensors[p.name + (second ? ".exp_avg_sq" : ".exp_avg")] =
          Tensor{p.full_shape, gather_full(static_cast<int>(i), local[i].data(), local[i].size())};
    }
  }
  // Every rank's reducer state (bucket layout, compression residuals), to
  // the writer: sizes first, then the padded blobs.
  std::vector<uint8_t> mine;
  if (reducer_ != nullptr) {
    size_t bytes = 0;
    tideReducerGetState(reducer_, nullptr, &bytes);
    mine.resize(bytes);
    if (tideReducerGetState(reducer_, mine.data(), &bytes) != tideSuccess)
      throw Error(std::string("tideReducerGetState: ") + tideReducerGetLastError(reducer_));
  }
  const int W = groups_->world_size;
  std::vector<double> sizes(static_cast<size_t>(W), 0.0);
  sizes[static_cast<size_t>(groups_->world_rank)] = static_cast<double>(mine.size());
  allreduce(groups_->world, sizes.data(), sizes.size(), tideSum);
  size_t most = 0;
  for (double s : sizes) most = std::max(most, static_cast<size_t>(s));
  std::vector<uint8_t> all(most * static_cast<size_t>(W));
  if (most > 0) {
    mine.resize(most);
    if (groups_->world != nullptr)
      check_tide(tideAllGather(mine.data(), all.data(), most, tideUint8, groups_->world, nullptr),
                 groups_->world, "gathering the reducers' states");
    else
      all = mine;
  }
  for (int r = 0; r < W && most > 0; ++r) {
    const size_t n = static_cast<size_t>(sizes[static_cast<size_t>(r)]);
    if (n == 0) continue;
    const auto* b = all.data() + static_cast<size_t>(r) * most;
    const int T = groups_->tp_size, D = groups_->dp_size;
    std::string key = "reducer_tp" + std::to_string(r % T) + "_dp" + std::to_string(r / T % D);
    if (groups_->pp_size > 1) key += "_pp" + std::to_string(r / (T * D));
    c.extra[key] = std::vector<uint8_t>(b, b + n);
  }
  nlohmann::json st;
  st["step"] = next_step;
  st["optimizer_steps"] = optim_->steps();
  st["layout"] = {{"dp", groups_->dp_size},
                  {"tp", groups_->tp_size},
                  {"pp", groups_->pp_size},
                  {"zero", zero_},
                  {"precision", o_.precision}};
  if (scaler_) st["loss_scale"] = {{"scale", scaler_->scale()}, {"clean_steps", scaler_->clean()}};
  st["model"] = {{"n_layer", model_.n_layer},
                 {"n_head", model_.n_head},
                 {"n_embd", model_.n_embd},
                 {"block_size", model_.block_size},
                 {"vocab_size", model_.vocab_size}};
  st["data"] = {{"seed", o_.seed}, {"next_step", next_step}, {"batch", o_.batch}};
  st["rng"] = {{"kind", "counter-based splitmix64 (seed, step, sequence)"}, {"seed", o_.seed}};
  st["config"] = {{"optimizer", o_.optimizer},
                  {"lr", o_.lr},
                  {"min_lr", o_.min_lr},
                  {"warmup", o_.warmup},
                  {"decay_steps", schedule_.decay_steps},
                  {"weight_decay", o_.weight_decay},
                  {"clip", o_.clip},
                  {"compress", o_.compress},
                  {"micro_batches", o_.micro_batches}};
  c.state_json = st.dump(1);
  bool ok = true;
  std::string err;
  if (leader()) try {
      save_checkpoint(o_.checkpoint_dir, c, o_.keep_checkpoints);
    } catch (const Error& e) {
      ok = false;
      err = e.what();
    }
  check_all(ok, err, "saving the checkpoint");
  if (leader()) {
    std::printf("checkpoint: step %lld saved in %s\n", static_cast<long long>(next_step),
                o_.checkpoint_dir.c_str());
    std::fflush(stdout);
  }
}

int64_t Trainer::resume_if_asked() {
  if (!o_.resume) return 0;
  if (o_.checkpoint_dir.empty()) throw Error("--resume needs --checkpoint-dir");
  bool ok = true;
  std::string err;
  std::optional<int64_t> step;
  Checkpoint c;
  nlohmann::json st;
  try {
    step = newest_checkpoint(o_.checkpoint_dir);
    if (step) {
      c = load_checkpoint(o_.checkpoint_dir, *step);
      st = nlohmann::json::parse(c.state_json);
      const std::string where = o_.checkpoint_dir + "/step_" + std::to_string(*step);
      const nlohmann::json& m = st.at("model");
      const int got[5] = {m.at("n_layer").get<int>(), m.at("n_head").get<int>(),
                          m.at("n_embd").get<int>(), m.at("block_size").get<int>(),
                          m.at("vocab_size").get<int>()};
      const int want[5] = {model_.n_layer, model_.n_head, model_.n_embd, model_.block_size,
                           model_.vocab_size};
      for (int i = 0; i < 5; ++i)
        if (got[i] != want[i])
          throw Error("checkpoint " + where + " is of another model shape (layers " +
                      std::to_string(got[0]) + ", heads " + std::to_string(got[1]) + ", embd " +
                      std::to_string(got[2]) + ", ctx " + std::to_string(got[3]) + ", vocab " +
                      std::to_string(got[4]) + ") than the flags give");
    } else if (leader()) {
      std::filesystem::create_directories(o_.checkpoint_dir);
    }
  } catch (const std::exception& e) {
    ok = false;
    err = e.what();
  }
  check_all(ok, err, "loading the checkpoint");
  if (!step) {
    if (leader())
      std::printf("resume: no checkpoint in %s, starting at step 0\n", o_.checkpoint_dir.c_str());
    return 0;
  }
  try {
    load_weights(c.model, o_.checkpoint_dir + " (model.safetensors)");
    std::vector<float> local;
    for (const Segment& s : optim_->segments()) {
      const Param& p = params_->params[static_cast<size_t>(s.param)];
      for (const char* kind : {".exp_avg", ".exp_avg_sq"}) {
        auto it = c.optim.tensors.find(p.name + kind);
        if (it == c.optim.tensors.end() || it->second.shape != p.full_shape)
          throw Error("checkpoint optim.safetensors: missing or misshapen " + p.name + kind);
        local.assign(p.size(), 0.0f);
        params_->shard_into(s.param, it->second.data.data(), local.data());
        float* dst =
            (std::string(kind) == ".exp_avg" ? optim_->exp_avg() : optim_->exp_avg_sq()).data() +
            s.at;
        std::copy(local.begin() + static_cast<std::ptrdiff_t>(s.offset),
                  local.begin() + static_cast<std::ptrdiff_t>(s.offset + s.n), dst);
      }
    }
    optim_->set_steps(st.at("optimizer_steps").get<int64_t>());
    if (gate_) gate_->refresh();  // ZeRO-3: the loaded shard, gathered afresh
    if (cast_) cast_->refresh();  // mixed precision: the fp32 working copies
    if (scaler_ && st.contains("loss_scale"))
      scaler_->restore(st.at("loss_scale").at("scale").get<double>(),
                       st.at("loss_scale").at("clean_steps").get<int64_t>());
  } catch (const std::exception& e) {
    ok = false;
    err = e.what();
  }
  check_all(ok, err, "loading the checkpoint");
  // The reducer's state when the layout is the same (else its residuals and
  // layout start afresh, as 1-bit Adam's do after a load).
  const bool same = st.at("layout").at("dp").get<int>() == groups_->dp_size &&
                    st.at("layout").at("tp").get<int>() == groups_->tp_size &&
                    st.at("layout").value("pp", 1) == groups_->pp_size &&
                    st.at("layout").value("zero", 0) == zero_ &&
                    st.at("layout").value("precision", std::string("fp32")) == o_.precision;
  std::string key =
      "reducer_tp" + std::to_string(groups_->tp_rank) + "_dp" + std::to_string(groups_->dp_rank);
  if (groups_->pp_size > 1) key += "_pp" + std::to_string(groups_->pp_rank);
  if (reducer_ != nullptr && same && c.extra.count(key) != 0) {
    const std::vector<uint8_t>& blob = c.extra.at(key);
    const tideResult_t r = tideReducerSetState(reducer_, blob.data(), blob.size());
    if (r != tideSuccess)
      throw Error(std::string("restoring the reducer's state: ") +
                  tideReducerGetLastError(reducer_));
  }
  if (leader())
    std::printf("resume: step %lld from %s%s\n", static_cast<long long>(*step),
                o_.checkpoint_dir.c_str(),
                reducer_ != nullptr && !same ? " (another layout: the reducer starts afresh)" : "");
  return *step;
}

}  // namespace tide_train
