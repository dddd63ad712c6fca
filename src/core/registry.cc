#include "core/registry.h"

#include <algorithm>
#include <array>

namespace tide {

namespace {

// Function-local statics: registration runs from other translation units'
// static initializers, in an order the linker chooses.
std::vector<Transport*>& transportList() {
  static std::vector<Transport*> list;
  return list;
}

std::array<const KernelTable*, 2>& kernelTables() {
  static std::array<const KernelTable*, 2> tables{};
  return tables;
}

std::vector<const AlgorithmInfo*>& algorithmList() {
  static std::vector<const AlgorithmInfo*> list;
  return list;
}

}  // namespace

void registerTransport(Transport* transport) {
  auto& list = transportList();
  list.push_back(transport);
  std::stable_sort(list.begin(), list.end(),
                   [](Transport* a, Transport* b) { return a->priority() > b->priority(); });
}

const std::vector<Transport*>& registeredTransports() { return transportList(); }

void registerKernels(const KernelTable* table) {
  kernelTables()[static_cast<size_t>(table->mem)] = table;
}

const KernelTable* kernelsFor(MemType mem) { return kernelTables()[static_cast<size_t>(mem)]; }

void registerAlgorithm(const AlgorithmInfo* algo) { algorithmList().push_back(algo); }

const std::vector<const AlgorithmInfo*>& registeredAlgorithms() { return algorithmList(); }

namespace {
LaneFactory& laneSlot() {
  static LaneFactory f = nullptr;
  return f;
}
}  // namespace

void registerLane(LaneFactory factory) { laneSlot() = factory; }
LaneFactory laneFactory() { return laneSlot(); }

}  // namespace tide

// ---- Topology ---------------------------------------------------------------------

#include "core/topology.h"

namespace tide {

namespace {
const TopologyProvider*& topoSlot() {
  static const TopologyProvider* p = nullptr;
  return p;
}
}  // namespace

void registerTopologyProvider(const TopologyProvider* provider) { topoSlot() = provider; }
const TopologyProvider* topologyProvider() { return topoSlot(); }

}  // namespace tide

// ---- Codecs ------------------------------------------------------------------------

#include "core/algorithm.h"
#include "core/codec.h"

namespace tide {

namespace {
const CodecProvider*& codecSlot() {
  static const CodecProvider* p = nullptr;
  return p;
}
}  // namespace

void registerCodecProvider(const CodecProvider* provider) { codecSlot() = provider; }
const CodecProvider* codecProvider() { return codecSlot(); }

const char* codecName(int id) {
  switch (id) {
    case kCodecNone:
      return "none";
    case kCodecFp16:
      return "fp16";
    case kCodecBf16:
      return "bf16";
    case kCodecInt8:
      return "int8";
    case kCodecInt4:
      return "int4";
    case kCodecTopK:
      return "topk";
    case kCodecAuto:
      return "auto";
    default:
      return "invalid";
  }
}

uint64_t codecWireBytes(const Codec& c, uint64_t count) {
  const CodecProvider* p = codecProvider();
  if (p == nullptr || c.params == nullptr) return count * 4;
  return p->wireBytes(c.id, *c.params, count);
}

}  // namespace tide
