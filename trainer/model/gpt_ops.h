// The kernels the GPT runs (model/gpt.cc, model/gpt_block.cc): the fast
// ones or their plain references, chosen once per model. Internal to the
// model.
#pragma once

#include "ops/attention.h"
#include "ops/cross_entropy.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/layernorm.h"
#include "ops/linear.h"

namespace tide_train::gpt_internal {

// The fast kernels or their plain references, chosen once per model.
struct Ops {
  decltype(&ops::linear_forward) linear_fwd;
  decltype(&ops::linear_backward) linear_bwd;
  decltype(&ops::layernorm_forward) ln_fwd;
  decltype(&ops::layernorm_backward) ln_bwd;
  decltype(&ops::gelu_forward) gelu_fwd;
  decltype(&ops::gelu_backward) gelu_bwd;
  decltype(&ops::embedding_forward) emb_fwd;
  decltype(&ops::embedding_backward) emb_bwd;
  decltype(&ops::xent_local_max) xent_max;
  decltype(&ops::xent_local_sums) xent_sums;
  decltype(&ops::xent_backward) xent_bwd;
  decltype(&ops::attention_forward) attn_fwd;
  bool ref;
};

inline const Ops kFast{ops::linear_forward,
                       ops::linear_backward,
                       ops::layernorm_forward,
                       ops::layernorm_backward,
                       ops::gelu_forward,
                       ops::gelu_backward,
                       ops::embedding_forward,
                       ops::embedding_backward,
                       ops::xent_local_max,
                       ops::xent_local_sums,
                       ops::xent_backward,
                       ops::attention_forward,
                       false};
inline const Ops kRef{ops::ref::linear_forward,
                      ops::ref::linear_backward,
                      ops::ref::layernorm_forward,
                      ops::ref::layernorm_backward,
                      ops::ref::gelu_forward,
                      ops::ref::gelu_backward,
                      ops::ref::embedding_forward,
                      ops::ref::embedding_backward,
                      ops::ref::xent_local_max,
                      ops::ref::xent_local_sums,
                      ops::ref::xent_backward,
                      ops::ref::attention_forward,
                      true};

inline const Ops& ops_for(bool reference) { return reference ? kRef : kFast; }

}  // namespace tide_train::gpt_internal
