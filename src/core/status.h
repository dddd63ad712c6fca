// Internal status values and the propagating check macro.
//
// Status is what every internal function returns; the C API wrapper turns it
// into a tideResult_t plus the "last error" string. A success Status holds no
// allocation. TIDE_TRY returns early on error and appends a frame
// (file:line) to the message, so a failing call logs the path it took.
#pragma once

#include <string>
#include <utility>

#include "tide/tide.h"

namespace tide {

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(tideResult_t code, std::string msg) : code_(code), msg_(std::move(msg)) {}

  static Status Ok() { return {}; }
  bool ok() const { return code_ == tideSuccess; }
  tideResult_t code() const { return code_; }
  const std::string& message() const { return msg_; }

  // Adds "\n  at file:line" to the message (used by TIDE_TRY).
  Status& addFrame(const char* file, int line);

 private:
  tideResult_t code_ = tideSuccess;
  std::string msg_;
};

// printf-style constructors for each error class.
Status invalidArgument(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
Status invalidUsage(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
Status systemError(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
Status internalError(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
Status remoteError(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
Status timeoutError(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
Status makeStatus(tideResult_t code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
// systemError with strerror(err) appended.
Status errnoError(int err, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace tide

#define TIDE_TRY(expr)                               \
  do {                                               \
    ::tide::Status tide_try_status_ = (expr);        \
    if (!tide_try_status_.ok()) {                    \
      tide_try_status_.addFrame(__FILE__, __LINE__); \
      return tide_try_status_;                       \
    }                                                \
  } while (0)
