// Host side of the device collective engine: the launches of its calls
// (All-Reduce, AllGather, ReduceScatter, Broadcast) in area-sized chunks on
// the caller's stream, and the per-stream events that close() waits for.
// Creation and teardown: device_coll.cc. See device_coll.h.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "core/log.h"
#include "cuda/device_coll.h"
#include "cuda/device_coll_logic.h"
#include "cuda/device_coll_module.h"

namespace tide::cuda {

int DeviceAllReduce::blocksFor(size_t bytes) const {
  constexpr size_t kPerBlock = 32 << 10;
  const size_t nb = (bytes + kPerBlock - 1) / kPerBlock;
  return static_cast<int>(std::clamp<size_t>(nb, 1, static_cast<size_t>(maxBlocks_)));
}

DeviceAlgo DeviceAllReduce::pick(size_t bytes, DeviceAlgo algo) const {
  const DeviceAlgo a =
      algo != DeviceAlgo::kAuto ? algo : pickDeviceAllReduce(forced_, bytes, nranks_, facts_);
  // No ring region (ring kernels not built, or TIDE_DEVICE_ALGO forced
  // another kernel at creation; equal on every rank): two-shot instead.
  if (nranks_ <= 1) return DeviceAlgo::kOneShot;  // a copy, whatever was asked
  if (a == DeviceAlgo::kRing && (!deviceRingKernelsBuilt() || ring_ == 0))
    return DeviceAlgo::kTwoShot;
  return a;
}

Status DeviceAllReduce::begin(CuStream stream) {
  if (closed_) return invalidUsage("device collective engine: engine is closed");
  TIDE_TRY(check());
  (void)stream;
  return Status::Ok();
}

void DeviceAllReduce::noteLaunch(CuStream stream) {
  const DriverApi* api = driver();
  if (api->cuEventCreate == nullptr || api->cuEventRecord == nullptr ||
      api->cuEventQuery == nullptr || api->cuEventDestroy == nullptr) {
    return;
  }
  // Under capture the launch runs at each replay, wherever the graph is
  // launched: the application orders those before destroying the
  // communicator, as with NCCL.
  int status = kCaptureStatusNone;
  if (api->cuStreamIsCapturing != nullptr && api->cuStreamIsCapturing(stream, &status) == 0 &&
      status != kCaptureStatusNone) {
    return;
  }
  auto it = std::find_if(streamEvents_.begin(), streamEvents_.end(),
                         [stream](const auto& se) { return se.first == stream; });
  if (it == streamEvents_.end()) {
    CuEvent ev = nullptr;
    if (api->cuEventCreate(&ev, kEventDisableTiming) != kCudaSuccess) return;
    streamEvents_.emplace_back(stream, ev);
    it = streamEvents_.end() - 1;
  }
  api->cuEventRecord(it->second, stream);
}

void DeviceAllReduce::fillCommon(void* args) const {
  auto& a = *static_cast<dc::Args*>(args);
  a.rank = rank_;
  a.nranks = nranks_;
  a.timeoutNs = timeoutNs_;
  a.areaBytes = areaBytes_;
  for (int q = 0; q < nranks_; ++q) a.base[q] = reinterpret_cast<char*>(peerBase_[q]);
  a.abortWord = reinterpret_cast<const volatile uint32_t*>(devWords_);
  a.errorWord = reinterpret_cast<uint32_t*>(devWords_ + sizeof(uint32_t));
}

Status DeviceAllReduce::launch(void* fn, void* args, int nblocks, CuStream stream) {
  void* params[] = {args};
  const int rc = driver()->cuLaunchKernel(fn, static_cast<unsigned>(nblocks), 1, 1, blockThreads_,
                                          1, 1, 0, stream, params, nullptr);
  if (rc != kCudaSuccess) {
    // The ranks' call counters no longer agree: the engine is unusable.
    sticky_ = cuCheck(rc, "enqueueing the kernel");
    abort();
    return sticky_;
  }
  noteLaunch(stream);
  return Status::Ok();
}

Status DeviceAllReduce::allReduce(const void* send, void* recv, size_t count, tideDataType_t dtype,
                                  RedOp op, DeviceAlgo algo, CuStream stream, bool avg) {
  const size_t es = dtypeSize(dtype);
  const int o = static_cast<int>(op);
  if (es == 0 || o < 0 || o >= 4 || (avg && op != RedOp::Sum)) {
    return invalidArgument("device all-reduce: bad dtype %d or op %d%s", static_cast<int>(dtype), o,
                           avg ? " (avg)" : "");
  }
  TIDE_TRY(begin(stream));
  if (count == 0) return Status::Ok();
  const DriverApi* api = driver();
  const auto src = reinterpret_cast<CuDevPtr>(send);
  const auto dst = reinterpret_cast<CuDevPtr>(recv);
  if (nranks_ == 1) {
    // Avg over one rank is the input itself.
    if (send != recv) TIDE_TRY(cuCheck(api->cuMemcpyAsync(dst, src, count * es, stream), "copy"));
    return Status::Ok();
  }
  const DeviceAlgo chosen = pick(count * es, algo);
  if (const unsigned bit = 1u << static_cast<unsigned>(chosen); (loggedAlgos_ & bit) == 0) {
    loggedAlgos_ |= bit;
    TIDE_INFO("device all-reduce: rank %d/%d: all-reduce algorithm %s from %zu bytes per rank",
              rank_, nranks_, deviceAlgoName(chosen), count * es);
  }
  if (chosen == DeviceAlgo::kRing) {
    return ringAllReduce(static_cast<const char*>(send), static_cast<char*>(recv), count, dtype,
                         avg ? 4 : o, stream);
  }
  const auto* mod = static_cast<const DcModule*>(module_);
  CuFunction fn = mod->fn[chosen == DeviceAlgo::kTwoShot ? 1 : 0][dtype][avg ? 4 : o];
  // Direct mode reads the user's input, except one-shot in place (peers
  // would read it while this rank overwrites it): then the kernel copies it
  // into scratch first, as in scratch mode. Nothing here depends on the
  // call's sequence number (the kernel reads it on the device), so a
  // captured graph replays correctly.
  const bool copyIn = !direct_ || (chosen == DeviceAlgo::kOneShot && send == recv);
  const size_t chunkElems =
      dc::chunkElems(dc::kAllReduce, areaBytes_, static_cast<int>(es), nranks_);
  for (size_t off = 0; off < count; off += chunkElems) {
    const size_t n = std::min(chunkElems, count - off);
    dc::Args a{};
    fillCommon(&a);
    a.kind = dc::kAllReduce;
    a.nblocks = blocksFor(n * es);
    a.elemSize = static_cast<int>(es);
    a.count = n;
    a.direct = direct_ ? 1 : 0;
    a.copyIn = copyIn ? 1 : 0;
    a.input = reinterpret_cast<const char*>(src + off * es);
    a.out = reinterpret_cast<char*>(dst + off * es);
    TIDE_TRY(launch(fn, &a, a.nblocks, stream));
  }
  return Status::Ok();
}

Status DeviceAllReduce::launchColl(void* fn, int kind, const char* in, char* out, size_t count,
                                   int es, int root, CuStream stream) {
  const size_t per = dc::chunkElems(kind, areaBytes_, es, nranks_);
  // Parts by the bytes each rank moves (equal on every rank).
  const size_t fan = kind == dc::kBroadcast ? 1 : static_cast<size_t>(nranks_);
  for (size_t off = 0; off < count; off += per) {
    const size_t n = std::min(per, count - off);
    dc::Args a{};
    fillCommon(&a);
    a.kind = kind;
    a.root = root;
    a.stride = count;
    a.nblocks = blocksFor(n * static_cast<size_t>(es) * fan);
    a.elemSize = es;
    a.count = n;
    a.direct = 0;  // scratch mode for every rank layout
    a.copyIn = 1;
    a.input = in == nullptr ? nullptr : in + off * es;
    a.out = out + off * es;
    TIDE_TRY(launch(fn, &a, a.nblocks, stream));
  }
  return Status::Ok();
}

namespace {

// A lone rank's collective: its input is its output (stream-ordered copy).
Status copyAlone(const void* send, void* recv, size_t bytes, CuStream stream) {
  if (send == recv) return Status::Ok();
  return cuCheck(driver()->cuMemcpyAsync(reinterpret_cast<CuDevPtr>(recv),
                                         reinterpret_cast<CuDevPtr>(send), bytes, stream),
                 "copy");
}

}  // namespace

Status DeviceAllReduce::allGather(const void* send, void* recv, size_t count, tideDataType_t dtype,
                                  CuStream stream) {
  const size_t es = dtypeSize(dtype);
  if (es == 0) return invalidArgument("device allgather: bad dtype %d", static_cast<int>(dtype));
  TIDE_TRY(begin(stream));
  if (count == 0) return Status::Ok();
  const size_t bytes = count * es;
  if (nranks_ == 1) return copyAlone(send, recv, bytes, stream);
  const auto* mod = static_cast<const DcModule*>(module_);
  return launchColl(mod->ag, dc::kAllGather, static_cast<const char*>(send),
                    static_cast<char*>(recv), bytes, 1, 0, stream);
}

Status DeviceAllReduce::reduceScatter(const void* send, void* recv, size_t count,
                                      tideDataType_t dtype, RedOp op, CuStream stream, bool avg) {
  const size_t es = dtypeSize(dtype);
  const int o = static_cast<int>(op);
  if (es == 0 || o < 0 || o >= 4 || (avg && op != RedOp::Sum)) {
    return invalidArgument("device reducescatter: bad dtype %d or op %d%s", static_cast<int>(dtype),
                           o, avg ? " (avg)" : "");
  }
  TIDE_TRY(begin(stream));
  if (count == 0) return Status::Ok();
  if (nranks_ == 1) return copyAlone(send, recv, count * es, stream);
  const auto* mod = static_cast<const DcModule*>(module_);
  return launchColl(mod->rs[dtype][avg ? 4 : o], dc::kReduceScatter, static_cast<const char*>(send),
                    static_cast<char*>(recv), count, static_cast<int>(es), 0, stream);
}

Status DeviceAllReduce::broadcast(const void* send, void* recv, size_t count, tideDataType_t dtype,
                                  int root, CuStream stream) {
  const size_t es = dtypeSize(dtype);
  if (es == 0 || root < 0 || root >= nranks_) {
    return invalidArgument("device broadcast: bad dtype %d or root %d of %d ranks",
                           static_cast<int>(dtype), root, nranks_);
  }
  if (rank_ == root && send == nullptr && count > 0) {
    return invalidArgument("device broadcast: the root's send buffer is null");
  }
  TIDE_TRY(begin(stream));
  if (count == 0) return Status::Ok();
  const size_t bytes = count * es;
  if (nranks_ == 1) return copyAlone(send, recv, bytes, stream);
  const auto* mod = static_cast<const DcModule*>(module_);
  const char* in = rank_ == root ? static_cast<const char*>(send) : nullptr;
  return launchColl(mod->bc, dc::kBroadcast, in, static_cast<char*>(recv), bytes, 1, root, stream);
}

}  // namespace tide::cuda
