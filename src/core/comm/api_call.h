// The C API's call wrappers (core/comm/api.cc and the other entry-point
// files): guarded() turns Status into tideResult_t, records the last error
// (per thread and per communicator) and never lets an exception cross the C
// boundary; commCall() also counts the call as a user of the communicator,
// so a concurrent tideCommAbort frees nothing under it.
#pragma once

#include <exception>
#include <new>

#include "core/comm.h"
#include "core/status.h"
#include "tide/tide.h"

#define TIDE_API extern "C" __attribute__((visibility("default")))

namespace tide {

// Records `s` as the last error of the calling thread and of `comm` (when
// not null), and logs it. Never throws (core/comm/api.cc).
void recordApiError(const char* fn, tideComm* comm, const Status& s) noexcept;

template <class F>
tideResult_t guarded(const char* fn, tideComm* comm, F&& body) {
  Status s;
  try {
    s = body();
  } catch (const std::bad_alloc&) {
    s = systemError("out of memory");
  } catch (const std::exception& e) {
    s = internalError("unexpected exception: %s", e.what());
  } catch (...) {
    s = internalError("unexpected exception");
  }
  if (!s.ok() && s.code() != tideInProgress) recordApiError(fn, comm, s);
  return s.code();
}

template <class F>
tideResult_t commCall(const char* fn, tideComm* comm, F&& body) {
  if (comm == nullptr) {
    return guarded(fn, nullptr, [&] { return invalidArgument("comm is NULL"); });
  }
  comm->users.fetch_add(1);
  tideResult_t r = guarded(fn, comm, body);
  comm->users.fetch_sub(1);
  return r;
}

}  // namespace tide
