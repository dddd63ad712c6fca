// Registry through which the core reaches transports, kernels and
// algorithms without naming them. Implementations register from a static
// initializer in their own translation unit (TIDE_REGISTER_* below), which
// runs when libtide.so is loaded. Lookups are thread-safe after load.
#pragma once

#include <vector>

#include "core/kernels.h"
#include "core/lane.h"
#include "core/transport.h"

namespace tide {

struct AlgorithmInfo;  // core/algorithm.h

// Does not take ownership: `transport` must live as long as the library (a
// function-local static). Kept sorted by priority, highest first.
void registerTransport(Transport* transport);
const std::vector<Transport*>& registeredTransports();

void registerKernels(const KernelTable* table);
// Null when no table is registered for that memory type.
const KernelTable* kernelsFor(MemType mem);

void registerAlgorithm(const AlgorithmInfo* algo);
const std::vector<const AlgorithmInfo*>& registeredAlgorithms();

// Small-collective lane factory (core/lane.h); at most one (the last
// registered wins). Null when none is registered.
void registerLane(LaneFactory factory);
LaneFactory laneFactory();

struct Registrar {
  explicit Registrar(void (*fn)()) { fn(); }
};

}  // namespace tide

#define TIDE_REGISTRAR_CAT2(a, b) a##b
#define TIDE_REGISTRAR_CAT(a, b) TIDE_REGISTRAR_CAT2(a, b)
// Runs `body` (a statement) when the library loads.
#define TIDE_ON_LOAD(body) \
  static ::tide::Registrar TIDE_REGISTRAR_CAT(tide_registrar_, __LINE__)([] { body; })
