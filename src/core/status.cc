#include "core/status.h"

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace tide {

namespace {

std::string vformat(const char* fmt, va_list ap) {
  char buf[1024];
  vsnprintf(buf, sizeof(buf), fmt, ap);
  return buf;
}

}  // namespace

Status& Status::addFrame(const char* file, int line) {
  const char* base = strrchr(file, '/');
  char frame[256];
  snprintf(frame, sizeof(frame), "\n  at %s:%d", base ? base + 1 : file, line);
  // Bound the trace so a deep retry loop cannot grow it without limit.
  if (msg_.size() < 4096) msg_ += frame;
  return *this;
}

#define TIDE_DEFINE_STATUS_CTOR(fn, code) \
  Status fn(const char* fmt, ...) {       \
    va_list ap;                           \
    va_start(ap, fmt);                    \
    std::string m = vformat(fmt, ap);     \
    va_end(ap);                           \
    return Status(code, std::move(m));    \
  }

TIDE_DEFINE_STATUS_CTOR(invalidArgument, tideInvalidArgument)
TIDE_DEFINE_STATUS_CTOR(invalidUsage, tideInvalidUsage)
TIDE_DEFINE_STATUS_CTOR(systemError, tideSystemError)
TIDE_DEFINE_STATUS_CTOR(internalError, tideInternalError)
TIDE_DEFINE_STATUS_CTOR(remoteError, tideRemoteError)
TIDE_DEFINE_STATUS_CTOR(timeoutError, tideTimeout)
#undef TIDE_DEFINE_STATUS_CTOR

Status makeStatus(tideResult_t code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string m = vformat(fmt, ap);
  va_end(ap);
  return Status(code, std::move(m));
}

Status errnoError(int err, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string m = vformat(fmt, ap);
  va_end(ap);
  char ebuf[128];
  const char* e = strerror_r(err, ebuf, sizeof(ebuf));
  m += ": ";
  m += e;
  return Status(tideSystemError, std::move(m));
}

}  // namespace tide
