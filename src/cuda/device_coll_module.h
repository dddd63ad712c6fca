// The device collective engine's kernel module and its driver-call check,
// shared by the engine's host-side files (see device_coll.h): device_coll.cc
// (creation and teardown) loads the module, device_coll_launch.cc launches
// its kernels. Internal to the engine.
#pragma once

#include "core/status.h"
#include "cuda/cuda_loader.h"
#include "tide/tide.h"

namespace tide::cuda {

// The engine's kernels in one context.
struct DcModule {
  CuCtx ctx = nullptr;
  CuModule mod = nullptr;
  CuFunction fn[2][tideNumTypes][5] = {};  // [algo][dtype][op], op 4 = Avg
  CuFunction rs[tideNumTypes][5] = {};     // ReduceScatter [dtype][op]
  CuFunction ag = nullptr;                 // AllGather (bytes)
  CuFunction bc = nullptr;                 // Broadcast (bytes)
};

// The kernels' module for the current context, loaded once per context.
Status loadDcModule(DcModule** out);

// A driver call's result: Ok, or tideSystemError naming `what`.
Status cuCheck(int rc, const char* what);

}  // namespace tide::cuda
