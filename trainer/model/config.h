// The model's shape and this rank's place in the tensor-parallel group.
#pragma once

#include <cstdint>
#include <string>

namespace tide_train {

struct ModelConfig {
  int n_layer = 4;
  int n_head = 4;
  int n_embd = 128;
  int block_size = 64;  // context length T
  int vocab_size = 256;

  int head_size() const { return n_embd / n_head; }
};

// Tensor parallelism (Megatron): `size` ranks split every block's heads and
// MLP columns and the vocabulary; `rank` is this rank's index among them.
struct TensorParallel {
  int size = 1;
  int rank = 0;

  int heads(const ModelConfig& m) const { return m.n_head / size; }
  int padded_vocab(const ModelConfig& m) const { return (m.vocab_size + size - 1) / size * size; }
  int local_vocab(const ModelConfig& m) const { return padded_vocab(m) / size; }
  int vocab_begin(const ModelConfig& m) const { return rank * local_vocab(m); }
  // Real (non-padding) rows of this rank's vocabulary slice.
  int valid_vocab(const ModelConfig& m) const;
};

// Throws Error when the model cannot be split over `tp` ranks (heads or
// width not divisible) or a dimension is out of range.
void validate(const ModelConfig& m, int tp);

}  // namespace tide_train
