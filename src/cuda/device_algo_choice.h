// Which device All-Reduce kernel a node's ranks run: one-shot, two-shot
// (device_coll_logic.h) or the FIFO ring (device_ring_logic.h), from a small
// alpha-beta model. Pure and deterministic: every rank passes the same facts
// (taken from the CommTopo all ranks share), so every rank picks the same
// algorithm. Header-only, g++ (host code).
//
// Model, for B bytes per rank, n ranks, per-rank link bandwidth W (GB/s,
// the link class's bandwidth divided by the ranks sharing one GPU), link
// latency L (us), all-to-all efficiency E and local copy bandwidth C:
//   one-shot  L          + (n-1) B / (E W)           [+ B / C  copy-in]
//   two-shot  2 L        + 2 (n-1)/n B / (E W)       [+ B / C  copy-in]
//   ring      2 (n-1) L  + F 2 (n-1)/n B / W
// One- and two-shot read from every peer at once (all-to-all: PCIe trees
// share their up-links, hence E < 1); in scratch mode (ranks in separate
// processes) they copy the input into scratch first, in direct mode (ranks
// as threads of one process) they read the peers' buffers as they are. The
// ring only talks to its neighbours and streams through bounded FIFOs, but
// pays one link latency per pipeline hop. F = 2 when all ranks share one GPU
// (every byte is written into the neighbour's FIFO and read back out of the
// same memory, where two-shot reads it once), else 1: on one GPU the ring
// never wins. Intercepts grow and slopes shrink from one-shot to ring, so the
// choice only moves towards the ring as B grows; ties go to the earlier
// algorithm in that order.
#pragma once

#include <cctype>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/topology.h"

namespace tide::cuda {

// kAuto: let the engine choose (pickDeviceAllReduce); the others force one
// kernel. Numbered in the order the choice moves through as sizes grow.
enum class DeviceAlgo : uint8_t { kAuto = 0, kOneShot = 1, kTwoShot = 2, kRing = 3 };

inline const char* deviceAlgoName(DeviceAlgo a) {
  switch (a) {
    case DeviceAlgo::kAuto:
      return "auto";
    case DeviceAlgo::kOneShot:
      return "one-shot";
    case DeviceAlgo::kTwoShot:
      return "two-shot";
    case DeviceAlgo::kRing:
      return "ring";
  }
  return "?";
}

// TIDE_DEVICE_ALGO text: auto, oneshot, twoshot or ring (case-insensitive;
// "one-shot", "two-shot" and "" (auto) too). False for anything else.
inline bool parseDeviceAlgo(std::string_view text, DeviceAlgo* out) {
  std::string t;
  for (char c : text) {
    if (c != '-' && c != '_' && c != ' ') t += static_cast<char>(std::tolower(c));
  }
  if (t.empty() || t == "auto") {
    *out = DeviceAlgo::kAuto;
  } else if (t == "oneshot") {
    *out = DeviceAlgo::kOneShot;
  } else if (t == "twoshot") {
    *out = DeviceAlgo::kTwoShot;
  } else if (t == "ring") {
    *out = DeviceAlgo::kRing;
  } else {
    return false;
  }
  return true;
}

// Cost class of the slowest intra-node path among the ranks.
struct DeviceLinkClass {
  double latencyUs;     // one flag or piece hand-over across the link
  double bandwidthGBs;  // one direction, one GPU's share of the link
  double allToAllEff;   // fraction of bandwidthGBs left when every rank reads every peer
};

// Classes (order-of-magnitude figures of current parts; the choice only
// needs their ratios right):
// NVLink (direct or NVSwitch, H100/H200 class): ~300 GB/s per direction per
// GPU, about 2 us per flag round, switch non-blocking but many-peer reads
// lose a little.
inline constexpr DeviceLinkClass kNvlinkClass{2.0, 300.0, 0.9};
// Several ranks on one GPU: traffic is HBM copies (~1000 GB/s usable for a
// read+write stream), hand-over is a flag in the same memory.
inline constexpr DeviceLinkClass kSameGpuClass{1.5, 1000.0, 1.0};
// PCIe Gen4/5 x16 under one switch: ~22 GB/s P2P; all-to-all shares the
// switch's ports and up-link.
inline constexpr DeviceLinkClass kPciSwitchClass{3.0, 22.0, 0.5};
// PCIe P2P through the CPU's root complex: slower and more contended.
inline constexpr DeviceLinkClass kPciHostBridgeClass{5.0, 12.0, 0.35};
// Anything slower (peers only reachable through host memory).
inline constexpr DeviceLinkClass kHostPathClass{10.0, 6.0, 0.25};
// Local device-to-device copy bandwidth (the scratch copy-in), per GPU.
inline constexpr double kLocalCopyGBs = 1500.0;

inline DeviceLinkClass deviceLinkClass(PathType slowest) {
  switch (slowest) {
    case PathType::Self:
    case PathType::SameGpu:
      return kSameGpuClass;
    case PathType::NVLink:
      return kNvlinkClass;
    case PathType::PciSwitch:
      return kPciSwitchClass;
    case PathType::PciHostBridge:
      return kPciHostBridgeClass;
    default:
      return kHostPathClass;
  }
}

// Predicted microseconds of `algo` (see the model above). ranksPerGpu >= 1:
// the most ranks sharing one GPU (they share its links and its memory).
// copyIn: one- and two-shot copy the input into scratch first (scratch mode).
inline double predictDeviceAllReduceUs(DeviceAlgo algo, uint64_t bytes, int nranks,
                                       PathType slowest, int ranksPerGpu, bool copyIn = true) {
  const DeviceLinkClass lc = deviceLinkClass(slowest);
  const double share = ranksPerGpu > 1 ? ranksPerGpu : 1;
  const double w = lc.bandwidthGBs * 1e3 / share;  // bytes per us
  const double copy = kLocalCopyGBs * 1e3 / share;
  const double b = static_cast<double>(bytes);
  const double n = nranks > 1 ? nranks : 1;
  const double in = copyIn ? b / copy : 0;
  const double fifo = slowest == PathType::SameGpu || slowest == PathType::Self ? 2 : 1;
  switch (algo) {
    case DeviceAlgo::kOneShot:
      return lc.latencyUs + (n - 1) * b / (lc.allToAllEff * w) + in;
    case DeviceAlgo::kTwoShot:
      return 2 * lc.latencyUs + 2 * (n - 1) / n * b / (lc.allToAllEff * w) + in;
    case DeviceAlgo::kRing:
      return 2 * (n - 1) * lc.latencyUs + fifo * 2 * (n - 1) / n * b / w;
    case DeviceAlgo::kAuto:
      break;
  }
  return 0;
}

// The algorithm with the smallest prediction; ties and a single rank give
// the earlier of one-shot, two-shot, ring.
inline DeviceAlgo chooseDeviceAllReduce(uint64_t bytes, int nranks, PathType slowest,
                                        int ranksPerGpu, bool copyIn = true) {
  if (nranks <= 1) return DeviceAlgo::kOneShot;
  DeviceAlgo best = DeviceAlgo::kOneShot;
  double bestUs = predictDeviceAllReduceUs(best, bytes, nranks, slowest, ranksPerGpu, copyIn);
  for (DeviceAlgo a : {DeviceAlgo::kTwoShot, DeviceAlgo::kRing}) {
    const double us = predictDeviceAllReduceUs(a, bytes, nranks, slowest, ranksPerGpu, copyIn);
    if (us < bestUs) {
      best = a;
      bestUs = us;
    }
  }
  return best;
}

// The slowest intra-node path among `ranks` of `topo` (SameGpu when they all
// share one GPU), and the most ranks on one GPU (pairs with path SameGpu
// form groups). Pure; the same on every rank.
inline void deviceTopoFacts(const CommTopo& topo, const std::vector<int>& ranks, PathType* slowest,
                            int* ranksPerGpu) {
  PathType worst = PathType::Self;
  int most = 1;
  for (int a : ranks) {
    int same = 1;
    for (int b : ranks) {
      if (a == b) continue;
      const PathType p = topo.path[static_cast<size_t>(a) * topo.nranks + b];
      if (p == PathType::SameGpu) ++same;
      if (p > worst) worst = p;
    }
    if (same > most) most = same;
  }
  *slowest = worst == PathType::Self ? PathType::SameGpu : worst;
  *ranksPerGpu = most;
}

// What every rank agrees on at engine creation (equal on every rank).
struct DeviceChoiceFacts {
  PathType slowest = PathType::SameGpu;  // slowest path between the node's ranks
  int ranksPerGpu = 1;                   // most ranks sharing one GPU
  bool direct = false;                   // direct mode: no copy-in before one-/two-shot
  // Explicit one-shot/two-shot boundary (TIDE_P2P_ONESHOT_MAX set by the
  // user): when the model does not pick the ring, bytes <= this run one-shot,
  // larger two-shot. ~0: no override, the model decides.
  uint64_t oneShotMax = ~uint64_t{0};
};

// The kernel an All-Reduce of `bytes` per rank runs: `forced` unless kAuto,
// else the model's choice (with the oneShotMax override). Never kAuto.
inline DeviceAlgo pickDeviceAllReduce(DeviceAlgo forced, uint64_t bytes, int nranks,
                                      const DeviceChoiceFacts& f) {
  if (forced != DeviceAlgo::kAuto) return forced;
  const DeviceAlgo c = chooseDeviceAllReduce(bytes, nranks, f.slowest, f.ranksPerGpu, !f.direct);
  if (c == DeviceAlgo::kRing || f.oneShotMax == ~uint64_t{0}) return c;
  return bytes <= f.oneShotMax ? DeviceAlgo::kOneShot : DeviceAlgo::kTwoShot;
}

}  // namespace tide::cuda
