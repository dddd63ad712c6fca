// Token + position embedding, vocabulary-parallel (Megatron): this rank holds
// the token rows [v0, v0 + Vl) of the (padded) vocabulary. A token outside the
// range contributes zeros here, so the sum over the tensor-parallel ranks
// (an All-Reduce of out, made by the caller) is the full embedding. With one
// rank v0 = 0 and Vl = V. Forward and backward side by side; ref:: in double.
#pragma once

namespace tide_train::ops {

// out[B·T, C] = wte[tok − v0] (when v0 ≤ tok < v0 + Vl, else 0) + wpe[t]
// (wpe may be null: no position term, e.g. on all but one tensor-parallel rank
// so the All-Reduce adds it once). out is overwritten.
void embedding_forward(float* out, const int* tokens, const float* wte, int v0, int Vl,
                       const float* wpe, int B, int T, int C);
// dwte[Vl, C] += rows of dout for the tokens in range; dwpe[T, C] += Σ_b dout
// (dwte or dwpe may be null).
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int v0,
                        int Vl, int B, int T, int C);

namespace ref {
void embedding_forward(float* out, const int* tokens, const float* wte, int v0, int Vl,
                       const float* wpe, int B, int T, int C);
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int v0,
                        int Vl, int B, int T, int C);
}  // namespace ref

}  // namespace tide_train::ops
