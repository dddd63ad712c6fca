// Stands in for the generated device_ring_fatbin.h in builds without CUDA
// kernels (no nvcc or no bin2c): the engine then compiles, never picks the
// ring, and refuses TIDE_DEVICE_ALGO=ring at creation.
#pragma once

#define TIDE_RING_NO_KERNELS 1
static const unsigned char tide_ring_fatbin[] = {0};
