// Training text as bytes, split into training and validation parts, and the
// deterministic window sampler every layout shares.
//
// Source: a file (its bytes) or a folder (the bytes of every regular file in
// it, not following symbolic links and skipping fortune's "*.dat" index files,
// concatenated in name order). Default: Debian's fortunes text,
// /usr/share/games/fortunes. The last ⌊n/10⌋ bytes are validation.
//
// Windows (docs/trainer.md, "Data"): sequence b ∈ [0, B) of global step s
// starts at  splitmix64(seed·0x9E3779B97F4A7C15 + s·0xD1B54A32D192ED03 + b)
// mod (n_train − T)  (arithmetic mod 2⁶⁴; splitmix64 as Vigna's reference:
// z += 0x9E3779B97F4A7C15; z = (z ^ z>>30)·0xBF58476D1CE4E5B9;
// z = (z ^ z>>27)·0x94D049BB133111EB; z ^ z>>31); inputs are the T bytes from
// there, targets the T bytes one further. Evaluation batch k draws from the
// validation bytes with s = 2⁶³ + k. The window depends on seed, step and b
// only, never on the rank count: every layout sees the same global batch,
// and tests/trainer/nanogpt_ref.py draws the same windows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tide_train {

uint64_t splitmix64(uint64_t x);

class Dataset {
 public:
  // Throws Error (io/error.h) when the source is missing, unreadable, or too
  // short (each part must be longer than ctx + 1 bytes).
  Dataset(const std::string& source, int ctx);
  static std::string default_source();  // "/usr/share/games/fortunes"

  const std::vector<uint8_t>& train() const { return train_; }
  const std::vector<uint8_t>& val() const { return val_; }
  size_t bytes() const { return train_.size() + val_.size(); }

  // Fills inputs[count·T] and targets[count·T] with global sequences
  // [first, first + count) of training step `step`.
  void train_batch(uint64_t seed, uint64_t step, int first, int count, int* inputs,
                   int* targets) const;
  // The same over the validation bytes for evaluation batch k.
  void val_batch(uint64_t seed, uint64_t k, int first, int count, int* inputs, int* targets) const;

 private:
  static void windows(const std::vector<uint8_t>& bytes, int ctx, uint64_t seed, uint64_t step,
                      int first, int count, int* inputs, int* targets);
  int ctx_;
  std::vector<uint8_t> train_, val_;
};

// Reads a file or folder as described above (Error when missing or empty).
std::vector<uint8_t> read_text_source(const std::string& source);

}  // namespace tide_train
