// Device algorithms as rows of the algorithm table: the device engine's
// All-Reduce kernels (one-shot, two-shot, FIFO ring) and its single-kernel
// AllGather / ReduceScatter / Broadcast, for device buffers on a CUDA stream
// of a one-node communicator (route Route::kDevice, core/issue/planner.h). Their
// cost model is the engine's alpha-beta model (cuda/device_algo_choice.h)
// over the communicator's topology, so one chooser and one TIDE_ALGO serve
// host and device rows alike ("allreduce:dev_ring", or TIDE_DEVICE_ALGO).
#include <algorithm>
#include <vector>

#include "core/algorithm.h"
#include "core/registry.h"
#include "cuda/device_algo_choice.h"

namespace tide {

namespace {

// The facts every rank shares: the slowest path between the node's ranks and
// the most ranks on one GPU (deviceTopoFacts), from the common CommTopo.
void factsOf(const CommTopo& t, PathType* slowest, int* perGpu) {
  std::vector<int> ranks(static_cast<size_t>(std::max(t.nranks, 1)));
  for (size_t r = 0; r < ranks.size(); ++r) ranks[r] = static_cast<int>(r);
  if (t.path.size() < ranks.size() * ranks.size()) {
    *slowest = PathType::SameGpu;
    *perGpu = 1;
    return;
  }
  cuda::deviceTopoFacts(t, ranks, slowest, perGpu);
}

// A prediction no modelled row beats: the row does not serve this size.
constexpr double kNotThisRow = 1e30;

template <cuda::DeviceAlgo A>
double predictAllReduce(const CollArgs& a, const CommTopo& t, size_t /*chunkBytes*/) {
  PathType slowest;
  int perGpu;
  factsOf(t, &slowest, &perGpu);
  const uint64_t bytes = a.count * a.elemSize;
  if (t.nranks <= 1 && A != cuda::DeviceAlgo::kOneShot) return kNotThisRow;  // one rank: a copy
  // TIDE_P2P_ONESHOT_MAX (the smallest of the ranks'): one-shot up to it,
  // two-shot above; the ring still wins where the model says it is cheaper.
  if (t.deviceOneShotMax != ~uint64_t{0}) {
    const bool small = bytes <= t.deviceOneShotMax;
    if ((A == cuda::DeviceAlgo::kOneShot && !small) || (A == cuda::DeviceAlgo::kTwoShot && small)) {
      return kNotThisRow;
    }
  }
  // Ranks as threads of one process read each other's buffers directly
  // (direct mode); in separate processes the input is copied into scratch.
  return cuda::predictDeviceAllReduceUs(A, bytes, std::max(t.nranks, 1), slowest, perGpu,
                                        /*copyIn=*/!t.sameProcess);
}

// One step: every rank copies its input into scratch and reads every peer's
// once (AllGather, ReduceScatter) or the root's (Broadcast).
double predictDirect(const CollArgs& a, const CommTopo& t, size_t /*chunkBytes*/) {
  PathType slowest;
  int perGpu;
  factsOf(t, &slowest, &perGpu);
  const cuda::DeviceLinkClass lc = cuda::deviceLinkClass(slowest);
  const double n = std::max(t.nranks, 1);
  const double w = lc.bandwidthGBs * 1e3 / std::max(perGpu, 1);
  const double block = static_cast<double>(a.count) * static_cast<double>(a.elemSize);
  const double moved = a.type == CollType::Broadcast ? block : (n - 1) * block;
  return lc.latencyUs + block / (cuda::kLocalCopyGBs * 1e3) + moved / (lc.allToAllEff * w);
}

constexpr MemType kDev = MemType::Device;

const AlgorithmInfo kDevOneShot = {
    "dev_oneshot",
    "Device All-Reduce, one kernel: every rank reads every peer's input over the peer-mapped "
    "scratch and reduces in rank order. One link latency; (n-1)x the data per rank.",
    collBit(CollType::AllReduce),
    nullptr,
    nullptr,
    &predictAllReduce<cuda::DeviceAlgo::kOneShot>,
    kDev,
    static_cast<int>(cuda::DeviceAlgo::kOneShot)};

const AlgorithmInfo kDevTwoShot = {
    "dev_twoshot",
    "Device All-Reduce: reduce-scatter of 1/n slices read from the peers, then all-gather of "
    "the reduced slices. Two latencies; 2(n-1)/n of the data per rank.",
    collBit(CollType::AllReduce),
    nullptr,
    nullptr,
    &predictAllReduce<cuda::DeviceAlgo::kTwoShot>,
    kDev,
    static_cast<int>(cuda::DeviceAlgo::kTwoShot)};

const AlgorithmInfo kDevRing = {
    "dev_ring",
    "Device All-Reduce over bounded FIFOs between ring neighbours (ring kernels). 2(n-1) "
    "latencies; bandwidth-optimal across links that do not all-to-all well.",
    collBit(CollType::AllReduce),
    nullptr,
    nullptr,
    &predictAllReduce<cuda::DeviceAlgo::kRing>,
    kDev,
    static_cast<int>(cuda::DeviceAlgo::kRing)};

const AlgorithmInfo kDevDirect = {
    "dev_direct",
    "Device AllGather, ReduceScatter and Broadcast in one kernel: inputs copied into the "
    "peer-mapped scratch, then every rank reads what it needs from every peer.",
    collBit(CollType::AllGather) | collBit(CollType::ReduceScatter) | collBit(CollType::Broadcast),
    nullptr,
    nullptr,
    &predictDirect,
    kDev,
    0};

}  // namespace

TIDE_ON_LOAD(registerAlgorithm(&kDevOneShot); registerAlgorithm(&kDevTwoShot);
             registerAlgorithm(&kDevRing); registerAlgorithm(&kDevDirect));

}  // namespace tide
