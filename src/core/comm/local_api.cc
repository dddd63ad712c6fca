// tideReduceLocal (include/tide/tide.h): one element-wise combine of host
// memory with the collectives' own kernels (core/kernels.h), so a caller
// that adds partial results outside a collective (the gradient reducer's
// shard, a framework's accumulation) rounds exactly as the collectives do.
#include <cstring>

#include "core/comm/api_call.h"
#include "core/kernels.h"
#include "core/registry.h"
#include "core/types.h"
#include "tide/tide.h"

using tide::Status;

TIDE_API tideResult_t tideReduceLocal(const void* inbuf, void* inoutbuf, size_t count,
                                      tideDataType_t datatype, tideRedOp_t op) {
  return tide::guarded("tideReduceLocal", nullptr, [&]() -> Status {
    // A C caller may pass any int: read them as ints (an out-of-range
    // enumerator value is undefined behaviour in C++).
    int dt = 0, o = 0;
    std::memcpy(&dt, &datatype, sizeof(dt));
    std::memcpy(&o, &op, sizeof(o));
    if (!tide::dtypeValid(dt))
      return tide::invalidArgument("tideReduceLocal: invalid datatype %d", dt);
    if (o == tideAvg)
      return tide::invalidArgument(
          "tideReduceLocal: tideAvg has no local meaning (sum, then scale)");
    if (!tide::opValid(o)) return tide::invalidArgument("tideReduceLocal: invalid op %d", o);
    if (count == 0) return Status::Ok();
    if (inbuf == nullptr || inoutbuf == nullptr)
      return tide::invalidArgument("tideReduceLocal: %s is NULL with count %zu",
                                   inbuf == nullptr ? "inbuf" : "inoutbuf", count);
    const tide::KernelTable* k = tide::kernelsFor(tide::MemType::Host);
    if (k == nullptr) return tide::internalError("no kernels registered for host memory");
    const tide::ReduceFn fn = k->reduceFn(datatype, static_cast<tide::RedOp>(o));
    if (fn == nullptr)
      return tide::invalidArgument("tideReduceLocal: no %s kernel for %s", tide::opName(op),
                                   tide::dtypeName(datatype));
    fn(inoutbuf, inbuf, inoutbuf, count);
    return Status::Ok();
  });
}
