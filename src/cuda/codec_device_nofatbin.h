// Stands in for the generated codec_device_fatbin.h in builds without CUDA
// kernels (no nvcc or no bin2c): codec_device.cc then compiles, and every
// device codec call fails with "built without device kernels".
#pragma once

#define TIDE_CC_NO_KERNELS 1
static const unsigned char tide_cc_fatbin[] = {0};
