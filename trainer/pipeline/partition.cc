// Splitting the blocks into pipeline stages (pipeline/partition.h).
#include "pipeline/partition.h"

#include <stdexcept>

namespace tide_train::pipeline {

std::vector<int> stage_layers(int layers, int stages, const std::string& spec) {
  if (stages < 1) throw std::invalid_argument("a pipeline needs at least one stage");
  std::vector<int> out;
  if (!spec.empty()) {
    size_t at = 0;
    while (at <= spec.size()) {
      const size_t comma = spec.find(',', at);
      const std::string item = spec.substr(at, comma == std::string::npos ? comma : comma - at);
      size_t used = 0;
      int n = 0;
      try {
        n = std::stoi(item, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == 0 || used != item.size() || n < 1)
        throw std::invalid_argument("--stage-layers " + spec + ": '" + item +
                                    "' is not a positive layer count");
      out.push_back(n);
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
    int sum = 0;
    for (int n : out) sum += n;
    if (static_cast<int>(out.size()) != stages || sum != layers)
      throw std::invalid_argument("--stage-layers " + spec + ": " + std::to_string(out.size()) +
                                  " stages of " + std::to_string(sum) +
                                  " layers, but the model has " + std::to_string(stages) +
                                  " stages (P x V) of " + std::to_string(layers) + " layers");
    return out;
  }
  if (layers < stages)
    throw std::invalid_argument(std::to_string(layers) + " layers cannot fill " +
                                std::to_string(stages) +
                                " pipeline stages (P x V): every stage needs a layer");
  out.assign(static_cast<size_t>(stages), layers / stages);
  std::vector<int> order;
  for (int s = 1; s + 1 < stages; ++s) order.push_back(s);
  order.push_back(0);
  if (stages > 1) order.push_back(stages - 1);
  for (int k = 0; k < layers % stages; ++k)
    ++out[static_cast<size_t>(order[static_cast<size_t>(k)])];
  return out;
}

std::vector<int> stage_bounds(const std::vector<int>& counts) {
  std::vector<int> b{0};
  for (int n : counts) b.push_back(b.back() + n);
  return b;
}

}  // namespace tide_train::pipeline
