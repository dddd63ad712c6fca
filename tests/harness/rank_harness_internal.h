// What the rank harness's files (rank_harness.cc: results and helpers;
// rank_harness_process.cc: process mode; rank_harness_threads.cc: thread
// mode) share. Internal to the harness: tests include rank_harness.h.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace tide_test::harness {

using Clock = std::chrono::steady_clock;

inline int64_t MsSince(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
}

inline std::string Tail(const std::string& s, size_t max_chars) {
  if (s.size() <= max_chars) return s;
  return "[... " + std::to_string(s.size() - max_chars) + " bytes cut ...]\n" +
         s.substr(s.size() - max_chars);
}

}  // namespace tide_test::harness
