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
// One registered value of type T (the last registration wins), constructed on
// first use so registrations from other files' static initializers find it.
template <class T>
T& slot() {
  static T value{};
  return value;
}
}  // namespace

void registerLane(LaneFactory factory) { slot<LaneFactory>() = factory; }
LaneFactory laneFactory() { return slot<LaneFactory>(); }

}  // namespace tide

// ---- Topology ---------------------------------------------------------------------

#include "core/topology.h"

namespace tide {

void registerTopologyProvider(const TopologyProvider* provider) {
  slot<const TopologyProvider*>() = provider;
}
const TopologyProvider* topologyProvider() { return slot<const TopologyProvider*>(); }

}  // namespace tide

// ---- Codecs ------------------------------------------------------------------------

#include "core/algorithm.h"
#include "core/codec.h"

namespace tide {

void registerCodecProvider(const CodecProvider* provider) {
  slot<const CodecProvider*>() = provider;
}
const CodecProvider* codecProvider() { return slot<const CodecProvider*>(); }

const char* codecName(int id) {
  // Indexed by tideCodec_t (core/codec.h CodecId).
  static const char* const kNames[] = {"none", "fp16", "bf16", "int8", "int4", "topk", "auto"};
  return id >= 0 && id <= kCodecAuto ? kNames[id] : "invalid";
}

uint64_t codecWireBytes(const Codec& c, uint64_t count) {
  const CodecProvider* p = codecProvider();
  if (p == nullptr || c.params == nullptr) return count * 4;
  return p->wireBytes(c.id, *c.params, count);
}

}  // namespace tide
