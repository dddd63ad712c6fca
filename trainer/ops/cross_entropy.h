// Softmax cross-entropy over a vocabulary-parallel logit slice (Megatron):
// this rank holds the logit columns [v0, v0 + Vl) of the padded vocabulary, of
// which the first `nvalid` are real tokens (the rest is padding and never
// predicted: excluded from the max, the sum and the gradient). The caller
// combines the per-row partial results across the tensor-parallel ranks:
//   1. xent_local_max          → All-Reduce MAX of rowmax[N]
//   2. xent_local_sums         → All-Reduce SUM of sumexp[N] and target[N]
//   3. loss_n = log(sumexp_n) + rowmax_n − target_n
//   4. xent_backward           (needs the reduced rowmax and sumexp)
// With one rank the reductions are identities. ref:: versions in double.
#pragma once

namespace tide_train::ops {

// rowmax[n] = max over this rank's valid columns (−inf when nvalid == 0).
void xent_local_max(float* rowmax, const float* logits, int N, int Vl, int nvalid);
// sumexp[n] = Σ_valid exp(logit − rowmax[n]);  target[n] = logit of targets[n]
// when it lies in [v0, v0 + nvalid), else 0. Both overwritten.
void xent_local_sums(float* sumexp, float* target, const float* logits, const float* rowmax,
                     const int* targets, int v0, int N, int Vl, int nvalid);
// dlogits[n, v] = scale · (exp(logit − rowmax)/sumexp − 1[v == target]) for
// valid columns, 0 for padding. Overwritten (not accumulated): the logits'
// gradient is born here. scale is typically 1/(global token count).
void xent_backward(float* dlogits, const float* logits, const float* rowmax, const float* sumexp,
                   const int* targets, int v0, int N, int Vl, int nvalid, float scale);

namespace ref {
void xent_local_max(float* rowmax, const float* logits, int N, int Vl, int nvalid);
void xent_local_sums(float* sumexp, float* target, const float* logits, const float* rowmax,
                     const int* targets, int v0, int N, int Vl, int nvalid);
void xent_backward(float* dlogits, const float* logits, const float* rowmax, const float* sumexp,
                   const int* targets, int v0, int N, int Vl, int nvalid, float scale);
}  // namespace ref

}  // namespace tide_train::ops
