#include "core/types.h"

namespace tide {

size_t dtypeSize(tideDataType_t t) {
  switch (t) {
    case tideInt8:
    case tideUint8:
    case tideFloat8e4m3:
    case tideFloat8e5m2:
      return 1;
    case tideFloat16:
    case tideBfloat16:
      return 2;
    case tideInt32:
    case tideUint32:
    case tideFloat32:
      return 4;
    case tideInt64:
    case tideUint64:
    case tideFloat64:
      return 8;
    default:
      return 0;
  }
}

const char* dtypeName(tideDataType_t t) {
  static const char* const kNames[] = {"int8",    "uint8",    "int32",   "uint32",
                                       "int64",   "uint64",   "float16", "float32",
                                       "float64", "bfloat16", "f8e4m3",  "f8e5m2"};
  return dtypeValid(t) ? kNames[t] : "invalid";
}

bool dtypeIsFloat(tideDataType_t t) {
  return t == tideFloat16 || t == tideFloat32 || t == tideFloat64 || t == tideBfloat16 ||
         t == tideFloat8e4m3 || t == tideFloat8e5m2;
}

bool dtypeValid(int t) { return t >= 0 && t < tideNumTypes; }

const char* opName(tideRedOp_t op) {
  static const char* const kNames[] = {"sum", "prod", "max", "min", "avg"};
  return opValid(op) ? kNames[op] : "invalid";
}

bool opValid(int op) { return op >= 0 && op < tideNumOps; }

}  // namespace tide
