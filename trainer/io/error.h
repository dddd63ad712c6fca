// The trainer's error: thrown inside tide-train (never across the C API of
// the library, which returns tideResult_t), caught in main, printed on every
// rank as "tide-train: error: <what>" with a non-zero exit.
#pragma once

#include <stdexcept>
#include <string>

namespace tide_train {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace tide_train
