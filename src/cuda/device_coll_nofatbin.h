// Stands in for the generated device_coll_fatbin.h in builds without CUDA
// kernels (no nvcc or no bin2c): the engine then compiles, and create()
// fails with "built without device kernels".
#pragma once

#define TIDE_DC_NO_KERNELS 1
static const unsigned char tide_dc_fatbin[] = {0};
