// The GPT's parameter tensors, their tensor-parallel shards and nanoGPT's
// initialisation (model/params.h).
#include "model/params.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "data/dataset.h"
#include "io/error.h"

namespace tide_train {

int TensorParallel::valid_vocab(const ModelConfig& m) const {
  const int begin = vocab_begin(m);
  const int end = std::min(begin + local_vocab(m), m.vocab_size);
  return std::max(0, end - begin);
}

void validate(const ModelConfig& m, int tp) {
  auto bad = [](const std::string& what) { throw Error(what); };
  if (m.n_layer < 1 || m.n_head < 1 || m.n_embd < 1 || m.block_size < 1 || m.vocab_size < 2)
    bad("--layers, --heads, --embd and --ctx must be at least 1 and --vocab at least 2");
  if (m.n_embd % m.n_head != 0)
    bad("--embd " + std::to_string(m.n_embd) + " is not divisible by --heads " +
        std::to_string(m.n_head));
  if (tp < 1) bad("--tp must be at least 1");
  if (m.n_head % tp != 0)
    bad("--heads " + std::to_string(m.n_head) + " is not divisible by --tp " + std::to_string(tp) +
        " (tensor parallelism splits whole heads)");
  if (m.n_embd % tp != 0)
    bad("--embd " + std::to_string(m.n_embd) + " is not divisible by --tp " + std::to_string(tp));
}

namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

int64_t product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Normal(0, std) values from a counter-based stream keyed by (seed, name):
// Box-Muller over splitmix64 uniforms, so the draw is the same on every rank.
void fill_normal(float* out, int64_t n, uint64_t seed, const std::string& name, double std) {
  const uint64_t key = splitmix64(seed ^ fnv1a(name));
  for (int64_t i = 0; i < n; i += 2) {
    const uint64_t a = splitmix64(key + 2 * static_cast<uint64_t>(i));
    const uint64_t b = splitmix64(key + 2 * static_cast<uint64_t>(i) + 1);
    const double u1 = (static_cast<double>(a >> 11) + 0.5) * 0x1.0p-53;
    const double u2 = static_cast<double>(b >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1));
    out[i] = static_cast<float>(std * r * std::cos(2.0 * std::numbers::pi * u2));
    if (i + 1 < n) out[i + 1] = static_cast<float>(std * r * std::sin(2.0 * std::numbers::pi * u2));
  }
}

}  // namespace

bool Ownership::owns(const Param& p) const {
  if (p.layer >= 0)
    return layers.empty() || (static_cast<size_t>(p.layer) < layers.size() &&
                              layers[static_cast<size_t>(p.layer)] != 0);
  if (p.name == "transformer.wte.weight") return embed || head;
  if (p.name == "transformer.wpe.weight") return embed;
  return head;  // ln_f
}

ParamSet::ParamSet(const ModelConfig& m, const TensorParallel& tp, const Ownership& own,
                   GradStorage grads, bool param_ring, const HalfStorage* half)
    : m_(m), tp_(tp), storage_(grads), param_ring_(param_ring || half != nullptr) {
  if (half != nullptr) {
    half_ = true;
    half_storage_ = *half;
  }
  validate(m, tp.size);
  const int64_t C = m.n_embd, V = m.vocab_size, T = m.block_size;
  wte = add("transformer.wte.weight", {V, C}, Split::kRows, 1, true);
  wpe = add("transformer.wpe.weight", {T, C}, Split::kReplicated, 1, true);
  for (int l = 0; l < m.n_layer; ++l) {
    const std::string p = "transformer.h." + std::to_string(l) + ".";
    BlockParams b{};
    b.ln1_w = add(p + "ln_1.weight", {C}, Split::kReplicated, 1, false);
    b.ln1_b = add(p + "ln_1.bias", {C}, Split::kReplicated, 1, false);
    b.qkv_w = add(p + "attn.c_attn.weight", {3 * C, C}, Split::kRows, 3, true);
    b.qkv_b = add(p + "attn.c_attn.bias", {3 * C}, Split::kRows, 3, false);
    b.attn_proj_w = add(p + "attn.c_proj.weight", {C, C}, Split::kCols, 1, true);
    b.attn_proj_b = add(p + "attn.c_proj.bias", {C}, Split::kReplicated, 1, false);
    b.ln2_w = add(p + "ln_2.weight", {C}, Split::kReplicated, 1, false);
    b.ln2_b = add(p + "ln_2.bias", {C}, Split::kReplicated, 1, false);
    b.fc_w = add(p + "mlp.c_fc.weight", {4 * C, C}, Split::kRows, 1, true);
    b.fc_b = add(p + "mlp.c_fc.bias", {4 * C}, Split::kRows, 1, false);
    b.mlp_proj_w = add(p + "mlp.c_proj.weight", {C, 4 * C}, Split::kCols, 1, true);
    b.mlp_proj_b = add(p + "mlp.c_proj.bias", {C}, Split::kReplicated, 1, false);
    for (int i = b.ln1_w; i <= b.mlp_proj_b; ++i) params[static_cast<size_t>(i)].layer = l;
    blocks.push_back(b);
  }
  lnf_w = add("transformer.ln_f.weight", {C}, Split::kReplicated, 1, false);
  lnf_b = add("transformer.ln_f.bias", {C}, Split::kReplicated, 1, false);
  for (Param& p : params) p.owned = own.owns(p);
  allocate();
  if (half_) allocate16();
}

// The largest block's held elements.
size_t ParamSet::block_floats() const {
  size_t block = 0;
  for (const BlockParams& b : blocks) {
    size_t n = 0;
    for (int i = b.ln1_w; i <= b.mlp_proj_b; ++i)
      if (params[static_cast<size_t>(i)].owned) n += params[static_cast<size_t>(i)].size_local();
    block = std::max(block, n);
  }
  return block;
}

namespace {

// Places every held tensor of `params` in one flat buffer (`flat` != null),
// or in a ring: block l's tensors in ring[l % 2], each other tensor in a
// buffer of its own appended to ring (`label` + its name: what names it in
// --mem-cap errors). set(param, where, n) records the place.
template <class T, class Set>
void lay_out(std::vector<Param>& params, T* flat, std::vector<mem::BasicBuffer<T>>* ring,
             const char* label, Set set) {
  size_t in_block[2] = {0, 0};
  int last_layer = -1;
  for (Param& p : params) {
    if (!p.owned) continue;
    const size_t n = p.size_local();
    if (flat != nullptr) {
      set(p, flat + p.flat, n);
    } else if (p.layer >= 0) {
      const size_t r = static_cast<size_t>(p.layer % 2);
      if (p.layer != last_layer) in_block[r] = 0;
      last_layer = p.layer;
      set(p, (*ring)[r].data() + in_block[r], n);
      in_block[r] += n;
    } else {
      mem::Label l(label + p.name);
      ring->emplace_back(mem::Kind::kComm, n);
      set(p, ring->back().data(), n);
    }
  }
}

}  // namespace

void ParamSet::place(bool grads, float* flat, std::vector<mem::Buffer>* ring) {
  lay_out(params, flat, ring, grads ? "the gradient buffer of " : "the gathered ",
          [grads](Param& p, float* at, size_t n) {
            (grads ? p.grad : p.data) = FloatSpan{at, n};
          });
}

void ParamSet::place16(bool grads, uint16_t* flat, std::vector<mem::HalfBuffer>* ring) {
  lay_out(params, flat, ring, grads ? "the 16-bit gradient copy of " : "the gathered 16-bit ",
          [grads](Param& p, uint16_t* at, size_t) { (grads ? p.grad16 : p.data16) = at; });
}

void ParamSet::allocate() {
  size_t total = 0;
  for (Param& p : params) {
    p.flat = total;
    if (p.owned) total += static_cast<size_t>(p.rows * p.cols);
  }
  if (!param_ring_) {
    mem::Label l("the parameters (" + std::to_string(total) + " floats)");
    data_buf_ = mem::Buffer(mem::Kind::kParams, total);
  } else {
    // ZeRO-3: the shard is the trainer's; here only the gathered tensors.
    const size_t block = block_floats();
    mem::Label l("the gathered parameters of two blocks (" + std::to_string(2 * block) +
                 " floats)");
    pring_.emplace_back(mem::Kind::kComm, block);
    pring_.emplace_back(mem::Kind::kComm, block);
  }
  if (storage_ == GradStorage::kFull) {
    mem::Label l("the gradients (" + std::to_string(total) + " floats)");
    grad_buf_ = mem::Buffer(mem::Kind::kGrads, total);
  } else {
    const size_t block = block_floats();
    mem::Label l("the gradient buffers of two blocks (" + std::to_string(2 * block) + " floats)");
    ring_.emplace_back(mem::Kind::kComm, block);
    ring_.emplace_back(mem::Kind::kComm, block);
  }
  place(false, param_ring_ ? nullptr : data_buf_.data(), &pring_);
  place(true, storage_ == GradStorage::kFull ? grad_buf_.data() : nullptr, &ring_);
}

void ParamSet::allocate16() {
  const HalfStorage& h = half_storage_;
  size_t total = 0;
  for (const Param& p : params)
    if (p.owned) total += p.size_local();
  const size_t block = block_floats();
  const std::string fmt = ops::name(h.format);
  if (h.weights_ring) {
    mem::Label l("the gathered " + fmt + " parameters of two blocks");
    data16_ring_.emplace_back(mem::Kind::kComm, block);
    data16_ring_.emplace_back(mem::Kind::kComm, block);
  } else {
    mem::Label l("the " + fmt + " parameters (" + std::to_string(total) + " values)");
    data16_buf_ = mem::HalfBuffer(mem::Kind::kParams, total);
  }
  if (h.grads_ring) {
    mem::Label l("the " + fmt + " gradient copies of two blocks");
    grad16_ring_.emplace_back(mem::Kind::kComm, block);
    grad16_ring_.emplace_back(mem::Kind::kComm, block);
  } else {
    mem::Label l("the " + fmt + " gradients (" + std::to_string(total) + " values)");
    grad16_buf_ = mem::HalfBuffer(h.grads_kind, total);
  }
  place16(false, h.weights_ring ? nullptr : data16_buf_.data(), &data16_ring_);
  place16(true, h.grads_ring ? nullptr : grad16_buf_.data(), &grad16_ring_);
}

int ParamSet::add(const std::string& name, std::vector<int64_t> shape, Split split, int blocks,
                  bool decay) {
  Param p;
  p.name = name;
  p.full_shape = std::move(shape);
  p.split = split;
  p.blocks = blocks;
  p.decay = decay;
  const int64_t R = p.full_shape[0];
  const int64_t cols = p.full_shape.size() > 1 ? product(p.full_shape) / R : 1;
  const int P = tp_.size;
  p.padded_rows = name == "transformer.wte.weight" ? tp_.padded_vocab(m_) : R;
  switch (split) {
    case Split::kReplicated:
      p.rows = R;
      p.cols = cols;
      break;
    case Split::kRows:
      p.rows = p.padded_rows / P;
      p.cols = cols;
      break;
    case Split::kCols:
      p.rows = R;
      p.cols = cols / P;
      break;
  }
  params.push_back(std::move(p));
  return static_cast<int>(params.size()) - 1;
}

int64_t ParamSet::full_offset(int index, int rank, int64_t row, int64_t col) const {
  const Param& p = params[static_cast<size_t>(index)];
  switch (p.split) {
    case Split::kReplicated:
      return row * p.cols + col;
    case Split::kRows: {
      const int64_t block_rows = p.padded_rows / p.blocks;
      const int64_t chunk = block_rows / tp_.size;
      const int64_t full_row = (row / chunk) * block_rows + rank * chunk + row % chunk;
      if (full_row >= p.full_shape[0]) return -1;
      return full_row * p.cols + col;
    }
    case Split::kCols:
      return row * (p.cols * tp_.size) + rank * p.cols + col;
  }
  return -1;
}

void ParamSet::shard_into(int index, const float* full, float* out) const {
  const Param& p = params[static_cast<size_t>(index)];
  if (!p.owned) return;
  for (int64_t r = 0; r < p.rows; ++r)
    for (int64_t c = 0; c < p.cols; ++c) {
      const int64_t off = full_offset(index, tp_.rank, r, c);
      out[static_cast<size_t>(r * p.cols + c)] = off < 0 ? 0.0f : full[off];
    }
}

void ParamSet::shard_from_full(int index, const float* full) {
  shard_into(index, full, params[static_cast<size_t>(index)].data.data());
}

void ParamSet::full_from_shard(int index, const float* all, float* full) const {
  const Param& p = params[static_cast<size_t>(index)];
  if (!p.owned) return;
  const int ranks = p.sharded() ? tp_.size : 1;
  for (int k = 0; k < ranks; ++k)
    for (int64_t r = 0; r < p.rows; ++r)
      for (int64_t c = 0; c < p.cols; ++c) {
        const int64_t off = full_offset(index, k, r, c);
        if (off >= 0) full[off] = all[static_cast<size_t>((k * p.rows + r) * p.cols + c)];
      }
}

void ParamSet::init(uint64_t seed) {
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i].owned) init_tensor(static_cast<int>(i), seed, params[i].data.data());
}

void ParamSet::init_tensor(int index, uint64_t seed, float* out) const {
  const double resid_std = 0.02 / std::sqrt(2.0 * m_.n_layer);
  {
    const Param& p = params[static_cast<size_t>(index)];
    if (!p.owned) return;
    std::vector<float> full(static_cast<size_t>(product(p.full_shape)), 0.0f);
    const bool is_bias = p.name.ends_with(".bias");
    const bool is_ln = p.name.find(".ln_") != std::string::npos;
    if (is_ln && !is_bias) {
      std::fill(full.begin(), full.end(), 1.0f);
    } else if (!is_bias && !is_ln) {
      const bool resid = p.name.ends_with("c_proj.weight");
      fill_normal(full.data(), static_cast<int64_t>(full.size()), seed, p.name,
                  resid ? resid_std : 0.02);
    }
    shard_into(index, full.data(), out);
  }
}

void ParamSet::zero_grads() {
  for (Param& p : params) std::fill(p.grad.begin(), p.grad.end(), 0.0f);
  if (half_ && !half_storage_.grads_ring)
    for (Param& p : params)
      if (p.grad16 != nullptr) std::fill(p.grad16, p.grad16 + p.size(), uint16_t{0});
}

int64_t ParamSet::count_full(bool with_wpe) const {
  int64_t n = 0;
  for (const Param& p : params) n += product(p.full_shape);
  if (!with_wpe) n -= product(params[static_cast<size_t>(wpe)].full_shape);
  return n;
}

size_t ParamSet::count_local() const {
  size_t n = 0;
  for (const Param& p : params) n += p.size();
  return n;
}

}  // namespace tide_train
