// How the model's blocks are split into pipeline stages. Pure.
#pragma once

#include <string>
#include <vector>

namespace tide_train::pipeline {

// The number of blocks of each of `stages` stages, in stage order: from
// `spec` ("a,b,...", as --stage-layers gives it: one positive count per
// stage, summing to `layers`), or balanced when `spec` is empty (equal
// counts; the remainder goes to the middle stages first, as the first stage
// also holds the embeddings and the last the head and the loss). Throws
// std::invalid_argument naming the problem (fewer blocks than stages, a
// count that is not positive, a sum other than `layers`).
std::vector<int> stage_layers(int layers, int stages, const std::string& spec = "");

// The first block of each stage (prefix sums of stage_layers), plus `layers`.
std::vector<int> stage_bounds(const std::vector<int>& counts);

}  // namespace tide_train::pipeline
