// NaN test for one element of a Tide datatype, shared by the GPU tests
// (results with NaN on both sides compare equal).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "tide/tide.h"

namespace tide_test {

// True when the element at `p` (of type `t`) is a NaN; false for integers.
inline bool isNan(const uint8_t* p, tideDataType_t t) {
  switch (t) {
    case tideFloat16: {
      uint16_t h;
      memcpy(&h, p, 2);
      return (h & 0x7fff) > 0x7c00;
    }
    case tideBfloat16: {
      uint16_t b;
      memcpy(&b, p, 2);
      return (b & 0x7fff) > 0x7f80;
    }
    case tideFloat32: {
      float f;
      memcpy(&f, p, 4);
      return std::isnan(f);
    }
    case tideFloat64: {
      double d;
      memcpy(&d, p, 8);
      return std::isnan(d);
    }
    case tideFloat8e4m3:
      return (*p & 0x7f) == 0x7f;
    case tideFloat8e5m2:
      return (*p & 0x7f) > 0x7c;
    default:
      return false;
  }
}

}  // namespace tide_test
