// The GPT's parameters (nanoGPT names and shapes) as this rank holds them
// under tensor parallelism, with their gradients, how each is split, and the
// mapping between the local shard and the whole tensor (for initialisation,
// export, checkpoints and norms, which are all layout independent).
//
// Splits (TensorParallel of size P, rank r):
//   replicated  every rank holds the whole tensor (embeddings of positions,
//               LayerNorms, the row-parallel layers' biases);
//   rows        the tensor's rows are `blocks` equal blocks (3 for c_attn:
//               q, k, v), each split in P chunks; rank r holds chunk r of
//               every block, blocks in order (column-parallel weights and
//               biases, the vocabulary rows of wte, padded to P·⌈V/P⌉ rows);
//   cols        the columns split in P chunks (row-parallel weights).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mem/memory.h"
#include "model/config.h"
#include "ops/half.h"

namespace tide_train {

enum class Split { kReplicated, kRows, kCols };

// A tensor's storage: a view of floats owned by the ParamSet's buffers
// (mem/memory.h), so every tensor of the model is accounted for.
struct FloatSpan {
  float* ptr = nullptr;
  size_t n = 0;
  float* data() { return ptr; }
  const float* data() const { return ptr; }
  size_t size() const { return n; }
  bool empty() const { return n == 0; }
  float& operator[](size_t i) { return ptr[i]; }
  const float& operator[](size_t i) const { return ptr[i]; }
  float* begin() { return ptr; }
  float* end() { return ptr + n; }
  const float* begin() const { return ptr; }
  const float* end() const { return ptr + n; }
};

// Where the gradients live. kFull: one buffer of every held tensor's
// gradient for the run (counted as grads). kLayerRing (ZeRO-2: the reduced
// gradients live in the optimizer's shard): the blocks' gradients in two
// block-sized buffers that alternate (block l in buffer l % 2; the caller
// zeroes each gradient once the reducer has copied it), the embeddings' and
// the final LayerNorm's in buffers of their own, all counted as
// communication buffers.
enum class GradStorage { kFull, kLayerRing };

// Mixed precision (--precision bf16|fp16; docs/zero.md, "Mixed
// precision"): the parameters and gradients as the run keeps them are 16-bit
// (Param::data16, grad16); the fp32 data and grad the kernels compute with
// are working copies (the data always two block buffers and one per other
// tensor, filled by the trainer's gate). weights_ring (ZeRO-3): the 16-bit
// weights are gathered into two block buffers too (communication buffers);
// else whole (params). grads_ring (ZeRO 2-3 without a pipeline): the 16-bit
// gradients are copies in two block buffers, handed to the reducer as each
// block's backward ends (communication buffers); else whole, of kind
// grads_kind.
struct HalfStorage {
  ops::Half format = ops::Half::kBf16;
  bool weights_ring = false, grads_ring = false;
  mem::Kind grads_kind = mem::Kind::kGrads;
};

struct Param {
  std::string name;                 // nanoGPT's state_dict name
  std::vector<int64_t> full_shape;  // the whole tensor (wte: [V, C], unpadded)
  Split split = Split::kReplicated;
  int blocks = 1;              // kRows: row blocks each split across ranks
  int64_t padded_rows = 0;     // kRows: rows after padding (wte: P·⌈V/P⌉), else full rows
  bool decay = false;          // weight decay applies (2-D weights)
  int layer = -1;              // the block it belongs to (-1: embeddings and final LayerNorm)
  bool owned = true;           // held by this rank (pipeline parallelism: its stages' tensors)
  int64_t rows = 0, cols = 0;  // local shape (1-D tensors: rows = n, cols = 1)
  size_t flat = 0;             // offset in the rank's flat order (held tensors, index order)
  FloatSpan data, grad;        // empty when not owned
  uint16_t* data16 = nullptr;  // mixed precision: the 16-bit weights and
  uint16_t* grad16 = nullptr;  // gradients (size() elements; null otherwise)

  size_t size() const { return data.size(); }
  size_t size_local() const { return static_cast<size_t>(rows * cols); }  // held or not
  bool sharded() const { return split != Split::kReplicated; }
};

// Indices of one block's parameters inside ParamSet::params.
struct BlockParams {
  int ln1_w, ln1_b, qkv_w, qkv_b, attn_proj_w, attn_proj_b;
  int ln2_w, ln2_b, fc_w, fc_b, mlp_proj_w, mlp_proj_b;
};

// Which tensors a pipeline rank holds: its stages' blocks, the embeddings
// with the first stage, the final LayerNorm and the (tied) head with the
// last. Default: everything (no pipeline parallelism).
struct Ownership {
  std::vector<char> layers;  // per block (empty: every block)
  bool embed = true, head = true;
  bool owns(const Param& p) const;
};

class ParamSet {
 public:
  // Every tensor of the model is listed (the same indices on every rank);
  // those `own` excludes hold no data (size() 0).
  // param_ring (ZeRO-3): the parameters' data are only two block-sized
  // buffers of gathered weights (block l in buffer l % 2) and one per other
  // tensor, all communication buffers; the trainer holds the shard.
  // half (mixed precision; implies param_ring's fp32 layout): the 16-bit
  // storage.
  ParamSet(const ModelConfig& m, const TensorParallel& tp, const Ownership& own = Ownership(),
           GradStorage grads = GradStorage::kFull, bool param_ring = false,
           const HalfStorage* half = nullptr);
  GradStorage grad_storage() const { return storage_; }
  bool param_ring() const { return param_ring_; }
  const HalfStorage* half() const { return half_ ? &half_storage_ : nullptr; }

  std::vector<Param> params;
  int wte = 0, wpe = 0, lnf_w = 0, lnf_b = 0;
  std::vector<BlockParams> blocks;

  // nanoGPT's initialisation from `seed`: each whole tensor is drawn from its
  // own counter-based stream (seed, name), then this rank takes its shard, so
  // every layout starts from the same weights.
  void init(uint64_t seed);
  // The same initial values of tensor `index` (this rank's shard of it,
  // size_local() elements) into `out`.
  void init_tensor(int index, uint64_t seed, float* out) const;
  void zero_grads();  // the fp32 ones, and the 16-bit ones when whole
  // Whole tensor ↔ this rank's shard (full: product(full_shape) elements).
  void shard_from_full(int index, const float* full);
  // The same shard of a whole tensor into `out` (this rank's size of
  // `index`): the optimizer's moments, loaded from a checkpoint.
  void shard_into(int index, const float* full, float* out) const;
  void full_from_shard(int index, const float* local_shards_of_all_ranks, float* full) const;
  // Where local element (row, col) of `index` lives in the whole tensor of
  // rank `rank`'s shard (-1: padding, not part of the whole tensor).
  int64_t full_offset(int index, int rank, int64_t row, int64_t col) const;
  // Number of parameters of the whole model (each tensor once, wte once;
  // with and without the position embedding, as nanoGPT reports).
  int64_t count_full(bool with_wpe = true) const;
  size_t count_local() const;

  const ModelConfig& model() const { return m_; }
  const TensorParallel& tp() const { return tp_; }

 private:
  int add(const std::string& name, std::vector<int64_t> shape, Split split, int blocks, bool decay);
  void allocate();
  size_t block_floats() const;
  // Spans of every held tensor in one flat buffer (`flat` != null), or in
  // a ring: block l's tensors in ring[l % 2], each other tensor in a buffer
  // of its own appended to ring.
  void place(bool grads, float* flat, std::vector<mem::Buffer>* ring);
  // The same for the 16-bit storage.
  void place16(bool grads, uint16_t* flat, std::vector<mem::HalfBuffer>* ring);
  void allocate16();
  ModelConfig m_;
  TensorParallel tp_;
  GradStorage storage_;
  bool param_ring_ = false;
  mem::Buffer data_buf_, grad_buf_;  // every held tensor, flat order (kLayerRing: no grad_buf_)
  std::vector<mem::Buffer> ring_;    // kLayerRing: two block buffers, then the others' own
  std::vector<mem::Buffer> pring_;   // param_ring: the same for the gathered parameters
  bool half_ = false;
  HalfStorage half_storage_;
  mem::HalfBuffer data16_buf_, grad16_buf_;  // whole 16-bit storage
  std::vector<mem::HalfBuffer> data16_ring_, grad16_ring_;
};

}  // namespace tide_train
