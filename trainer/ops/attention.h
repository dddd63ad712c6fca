// Causal multi-head self-attention core (after the fused qkv projection,
// before the output projection), forward and backward side by side; the ref::
// versions are plain loops with double accumulation.
//
// Layouts (row major): qkv[B, T, 3·NH·HS] holds, per token, q of every head,
// then k of every head, then v (nanoGPT's c_attn output split in three, then
// into heads: head h's q is qkv[.., h·HS .. h·HS+HS)). out[B, T, NH·HS] is the
// heads side by side (before c_proj). att[B, NH, T, T] holds the softmax
// probabilities (row t: keys 0..t, zeros above the diagonal), saved for the
// backward. Scores are scaled by 1/sqrt(HS).
#pragma once

#include <cstddef>

namespace tide_train::ops {

// out and att are overwritten.
void attention_forward(float* out, float* att, const float* qkv, int B, int T, int NH, int HS);
// dqkv[B, T, 3·NH·HS] += ∂L/∂qkv. scratch: attention_scratch_floats(T, HS)
// floats of the caller's (any contents).
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int B,
                        int T, int NH, int HS, float* scratch);
size_t attention_scratch_floats(int T, int HS);

namespace ref {
void attention_forward(float* out, float* att, const float* qkv, int B, int T, int NH, int HS);
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int B,
                        int T, int NH, int HS);
}  // namespace ref

}  // namespace tide_train::ops
