// Validation loss, --score and --sample (train/trainer.h).
#include <algorithm>
#include <cmath>

#include "data/dataset.h"
#include "io/error.h"
#include "train/trainer.h"

namespace tide_train {

// The mean loss over --eval-batches validation batches of --batch sequences
// (each data-parallel rank takes its share of every batch).
double Trainer::evaluate() {
  const int T = o_.ctx, share = o_.batch / groups_->dp_size;
  double sum = 0.0;
  for (int k = 0; k < o_.eval_batches; ++k)
    for (int j = 0; j < o_.micro_batches; ++j) {
      data_->val_batch(static_cast<uint64_t>(o_.seed), static_cast<uint64_t>(k),
                       groups_->dp_rank * share + j * micro_, micro_, inputs_.data(),
                       targets_.data());
      sum += forward_all(inputs_.data(), targets_.data());
    }
  allreduce(groups_->pp, &sum, 1, tideSum);
  allreduce(groups_->dp, &sum, 1, tideSum);
  return sum / (static_cast<double>(o_.eval_batches) * o_.batch * T);
}

// Mean cross-entropy in nats per byte over the ⌊(len − 1)/T⌋ consecutive
// non-overlapping windows of the file, accumulated in double; windows are
// dealt round-robin to the data-parallel ranks.
double Trainer::score_file(const std::string& path) {
  const std::vector<uint8_t> bytes = read_text_source(path);
  const int T = o_.ctx;
  const int64_t K = (static_cast<int64_t>(bytes.size()) - 1) / T;
  if (K < 1)
    throw Error("--score " + path + ": " + std::to_string(bytes.size()) +
                " bytes hold no window of --ctx " + std::to_string(T) + " plus one");
  const int64_t D = groups_->dp_size;
  double sum = 0.0;
  std::vector<int64_t> mine;
  for (int64_t k = groups_->dp_rank; k < K; k += D) mine.push_back(k);
  // Every rank of the tensor-parallel group runs the same windows; the
  // number of forwards is the same on every data-parallel rank too (padding
  // windows are scored and dropped), so the collectives match.
  const int64_t per_rank = (K + D - 1) / D;
  for (int64_t first = 0; first < per_rank; first += micro_) {
    int real = 0;
    for (int i = 0; i < micro_; ++i) {
      const int64_t idx = first + i;
      const int64_t k =
          idx < static_cast<int64_t>(mine.size()) ? mine[static_cast<size_t>(idx)] : -1;
      for (int t = 0; t < T; ++t) {
        const size_t at = static_cast<size_t>(i) * T + t;
        inputs_[at] = k < 0 ? 0 : bytes[static_cast<size_t>(k * T + t)];
        targets_[at] = k < 0 ? 0 : bytes[static_cast<size_t>(k * T + t + 1)];
      }
      if (k >= 0) ++real;
    }
    forward_all(inputs_.data(), targets_.data());
    if (const GPT* head = head_chunk(); head != nullptr) {
      const auto& losses = head->token_losses();
      for (size_t n = 0; n < static_cast<size_t>(real) * T; ++n) sum += losses[n];
    }
  }
  allreduce(groups_->pp, &sum, 1, tideSum);
  allreduce(groups_->dp, &sum, 1, tideSum);
  return sum / (static_cast<double>(K) * T);
}

// N bytes after --prompt, drawn with --temperature and --top-k from a
// counter-based generator (seed, position): the same text on every rank.
std::string Trainer::sample(int64_t n) {
  const int T = o_.ctx, V = model_.vocab_size;
  const TensorParallel& tp = params_->tp();
  const int Vl = tp.local_vocab(model_);
  std::vector<int> seq;
  for (unsigned char c : o_.prompt) seq.push_back(c);
  if (seq.empty()) seq.push_back('\n');
  std::string out;
  std::vector<float> slice(static_cast<size_t>(Vl)), all(static_cast<size_t>(Vl) * tp.size);
  // The next byte from the head's logits of position ctx - 1 (on the rank
  // holding the head).
  auto draw = [&](const GPT* head, size_t ctx, int64_t i) {
    const float* row = head->logits() + (ctx - 1) * static_cast<size_t>(Vl);
    std::copy(row, row + Vl, slice.begin());
    if (groups_->tp != nullptr)
      check_tide(
          tideAllGather(slice.data(), all.data(), slice.size(), tideFloat32, groups_->tp, nullptr),
          groups_->tp, "gathering logits");
    else
      all = slice;
    // Softmax over the real vocabulary at the temperature, top-k cut.
    std::vector<std::pair<float, int>> cand;
    cand.reserve(static_cast<size_t>(V));
    for (int v = 0; v < V; ++v) cand.emplace_back(all[static_cast<size_t>(v)], v);
    std::sort(cand.begin(), cand.end(), [](auto& a, auto& b) { return a.first > b.first; });
    if (o_.top_k > 0 && o_.top_k < V) cand.resize(static_cast<size_t>(o_.top_k));
    const double temp = std::max(o_.temperature, 1e-6);
    std::vector<double> p;
    double z = 0.0;
    for (auto& [logit, v] : cand) {
      p.push_back(std::exp((logit - cand[0].first) / temp));
      z += p.back();
    }
    const uint64_t r = splitmix64(static_cast<uint64_t>(o_.seed) * 0x9E3779B97F4A7C15ull +
                                  0x5851F42D4C957F2Dull + static_cast<uint64_t>(i));
    double u = static_cast<double>(r >> 11) * 0x1.0p-53 * z;
    for (size_t k = 0; k < cand.size(); ++k) {
      u -= p[k];
      if (u < 0.0) return cand[k].second;
    }
    return cand.back().second;
  };
  for (int64_t i = 0; i < n; ++i) {
    const size_t ctx = std::min<size_t>(seq.size(), static_cast<size_t>(T));
    std::fill(inputs_.begin(), inputs_.end(), 0);
    std::copy(seq.end() - static_cast<std::ptrdiff_t>(ctx), seq.end(), inputs_.begin());
    forward_all(inputs_.data(), nullptr);
    const GPT* head = head_chunk();
    int pick = head != nullptr ? draw(head, ctx, i) : 0;
    // With a pipeline, the head's rank picks for the others.
    if (pipe_) broadcast(groups_->pp, &pick, sizeof pick, pipe_->head_rank());
    seq.push_back(pick);
    out.push_back(static_cast<char>(pick));
  }
  return out;
}

}  // namespace tide_train
