#include "common/data.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace tide_perf {
namespace {

constexpr double kP2_53 = 9007199254740992.0;

const DType kTypes[] = {
    {tideInt8, "int8", 1, false, true, 0, 0, false, 1, 127, 6},
    {tideUint8, "uint8", 1, false, false, 0, 0, false, 1, 255, 7},
    {tideInt32, "int32", 4, false, true, 0, 0, false, 1, 2147483647.0, 30},
    {tideUint32, "uint32", 4, false, false, 0, 0, false, 1, 4294967295.0, 31},
    {tideInt64, "int64", 8, false, true, 0, 0, false, 1, kP2_53, 62},
    {tideUint64, "uint64", 8, false, false, 0, 0, false, 1, kP2_53, 63},
    {tideFloat16, "half", 2, true, true, 5, 10, false, 0x1p-10, 2048, 15},
    {tideFloat32, "float", 4, true, true, 0, 23, false, 0x1p-23, 16777216.0, 127},
    {tideFloat64, "double", 8, true, true, 0, 52, false, 0x1p-52, kP2_53, 1023},
    {tideBfloat16, "bfloat16", 2, true, true, 8, 7, false, 0x1p-7, 256, 127},
    {tideFloat8e4m3, "f8e4m3", 1, true, true, 4, 3, true, 0x1p-3, 16, 8},
    {tideFloat8e5m2, "f8e5m2", 1, true, true, 5, 2, false, 0x1p-2, 8, 15},
};

struct Alias {
  const char* name;
  tideDataType_t id;
};
const Alias kAliases[] = {
    {"char", tideInt8},           {"int", tideInt32},       {"float16", tideFloat16},
    {"fp16", tideFloat16},        {"float32", tideFloat32}, {"fp32", tideFloat32},
    {"float64", tideFloat64},     {"fp64", tideFloat64},    {"bf16", tideBfloat16},
    {"fp8_e4m3", tideFloat8e4m3}, {"e4m3", tideFloat8e4m3}, {"float8e4m3", tideFloat8e4m3},
    {"fp8_e5m2", tideFloat8e5m2}, {"e5m2", tideFloat8e5m2}, {"float8e5m2", tideFloat8e5m2},
};

const char* const kOpNames[] = {"sum", "prod", "max", "min", "avg"};

}  // namespace

uint64_t Mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

const std::vector<const DType*>& AllDTypes() {
  static const std::vector<const DType*> all = [] {
    std::vector<const DType*> v;
    for (const DType& t : kTypes) v.push_back(&t);
    return v;
  }();
  return all;
}

const DType* FindDType(const std::string& name) {
  for (const DType& t : kTypes) {
    if (name == t.name) return &t;
  }
  for (const Alias& a : kAliases) {
    if (name == a.name) return &kTypes[a.id];  // kTypes is indexed by id
  }
  return nullptr;
}

const char* OpName(int op) {
  if (op >= 0 && op < tideNumOps) return kOpNames[op];
  return "none";
}

int FindOp(const std::string& name) {
  for (int i = 0; i < tideNumOps; ++i) {
    if (name == kOpNames[i]) return i;
  }
  return -2;
}

const std::vector<int>& AllOps() {
  static const std::vector<int> all = {tideSum, tideProd, tideMax, tideMin, tideAvg};
  return all;
}

uint32_t EncodeMinifloat(double v, int exp_bits, int man_bits, bool finite_only) {
  const uint32_t sign = std::signbit(v) ? 1u << (exp_bits + man_bits) : 0u;
  const int bias = (1 << (exp_bits - 1)) - 1;
  const uint32_t exp_all = (1u << exp_bits) - 1;
  const uint32_t man_all = (1u << man_bits) - 1;
  const uint32_t nan = finite_only ? ((exp_all << man_bits) | man_all)
                                   : ((exp_all << man_bits) | (1u << (man_bits - 1)));
  if (std::isnan(v)) return sign | nan;
  const uint32_t overflow = finite_only ? nan : (exp_all << man_bits);
  double a = std::fabs(v);
  if (std::isinf(a)) return sign | overflow;
  if (a == 0) return sign;
  // Largest finite exponent field and mantissa.
  const uint32_t max_exp = finite_only ? exp_all : exp_all - 1;
  const uint32_t max_man = finite_only ? man_all - 1 : man_all;
  int e = 0;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  int unbiased = e - 1;
  uint32_t bits;
  if (unbiased < 1 - bias) {
    // Subnormal: multiples of 2^(1 - bias - man_bits). Rounding up to 2^man_bits
    // lands exactly on the smallest normal's encoding.
    double q = std::nearbyint(std::ldexp(a, man_bits + bias - 1));
    bits = static_cast<uint32_t>(q);
  } else {
    double q = std::nearbyint(std::ldexp(a, man_bits - unbiased));
    if (q >= std::ldexp(1.0, man_bits + 1)) {
      q = std::ldexp(q, -1);
      ++unbiased;
    }
    const int64_t exp_field = unbiased + bias;
    const uint32_t man = static_cast<uint32_t>(q) - (1u << man_bits);
    if (exp_field > static_cast<int64_t>(max_exp) ||
        (exp_field == static_cast<int64_t>(max_exp) && man > max_man)) {
      return sign | overflow;
    }
    bits = (static_cast<uint32_t>(exp_field) << man_bits) | man;
  }
  return sign | bits;
}

double DecodeMinifloat(uint32_t bits, int exp_bits, int man_bits, bool finite_only) {
  const int bias = (1 << (exp_bits - 1)) - 1;
  const uint32_t exp_all = (1u << exp_bits) - 1;
  const uint32_t man_all = (1u << man_bits) - 1;
  const bool neg = (bits >> (exp_bits + man_bits)) & 1u;
  const uint32_t exp_field = (bits >> man_bits) & exp_all;
  const uint32_t man = bits & man_all;
  double r;
  if (exp_field == exp_all && (!finite_only || man == man_all)) {
    r = (finite_only || man != 0) ? std::nan("") : INFINITY;
  } else if (exp_field == 0) {
    r = std::ldexp(static_cast<double>(man), 1 - bias - man_bits);
  } else {
    r = std::ldexp(static_cast<double>(man | (1u << man_bits)),
                   static_cast<int>(exp_field) - bias - man_bits);
  }
  return neg ? -r : r;
}

void Encode(const DType& dt, double v, void* dst) {
  if (!dt.is_float) {
    // Two's complement truncation gives the unsigned encoding of wrapped values.
    uint64_t u = v < 0 ? static_cast<uint64_t>(static_cast<int64_t>(v)) : static_cast<uint64_t>(v);
    std::memcpy(dst, &u, dt.size);  // little-endian: the low bytes come first
    return;
  }
  switch (dt.id) {
    case tideFloat32: {
      float f = static_cast<float>(v);
      std::memcpy(dst, &f, 4);
      return;
    }
    case tideFloat64:
      std::memcpy(dst, &v, 8);
      return;
    default: {
      uint32_t bits = EncodeMinifloat(v, dt.exp_bits, dt.man_bits, dt.finite_only);
      std::memcpy(dst, &bits, dt.size);
      return;
    }
  }
}

double Decode(const DType& dt, const void* src) {
  switch (dt.id) {
    case tideInt8:
      return *static_cast<const int8_t*>(src);
    case tideUint8:
      return *static_cast<const uint8_t*>(src);
    case tideInt32: {
      int32_t x;
      std::memcpy(&x, src, 4);
      return x;
    }
    case tideUint32: {
      uint32_t x;
      std::memcpy(&x, src, 4);
      return x;
    }
    case tideInt64: {
      int64_t x;
      std::memcpy(&x, src, 8);
      return static_cast<double>(x);
    }
    case tideUint64: {
      uint64_t x;
      std::memcpy(&x, src, 8);
      return static_cast<double>(x);
    }
    case tideFloat32: {
      float x;
      std::memcpy(&x, src, 4);
      return x;
    }
    case tideFloat64: {
      double x;
      std::memcpy(&x, src, 8);
      return x;
    }
    default: {
      uint32_t bits = 0;
      std::memcpy(&bits, src, dt.size);
      return DecodeMinifloat(bits, dt.exp_bits, dt.man_bits, dt.finite_only);
    }
  }
}

Pattern::Pattern(const DType& dt, int op, int nranks, uint64_t seed)
    : dt_(dt), op_(op), nranks_(nranks), seed_(seed) {
  // Limit how many ranks contribute at each index so that every partial and
  // final result stays exactly representable.
  double limit = static_cast<double>(nranks);
  if (op == tideSum || op == tideAvg) limit = std::floor(dt.max_exact / 2);
  if (op == tideProd) limit = dt.max_pow2;
  window_ = static_cast<int>(std::min(limit, static_cast<double>(nranks)));
}

double Pattern::Value(int rank, size_t index, uint64_t* raw) const {
  const uint64_t h = Mix64(seed_ ^ Mix64((static_cast<uint64_t>(rank) << 40) ^ index));
  *raw = h;
  const bool active = static_cast<int>((static_cast<size_t>(rank) + index) %
                                       static_cast<size_t>(nranks_)) < window_;
  const bool sg = dt_.is_signed;
  switch (op_) {
    case tideSum:
      if (!active) return 0;
      return sg ? static_cast<double>(h % 5) - 2 : static_cast<double>(h % 3);
    case tideAvg:
      return active ? static_cast<double>(h % 3) : 0;
    case tideProd: {
      double v = (active && (h & 1)) ? 2 : 1;
      return (sg && ((h >> 17) & 3) == 0) ? -v : v;
    }
    case tideMax:
    case tideMin:
      return sg ? static_cast<double>(h % 17) - 8 : static_cast<double>(h % 16);
    default:
      return 0;  // kOpNone: the raw bits are used
  }
}

Table Pattern::Input(int rank, size_t span) const {
  Table t;
  t.dt = &dt_;
  t.len = std::min(span, kPeriod);
  t.bytes.resize(t.len * dt_.size);
  for (size_t j = 0; j < t.len; ++j) {
    uint64_t raw;
    double v = Value(rank, j, &raw);
    if (op_ == kOpNone) {
      std::memcpy(&t.bytes[j * dt_.size], &raw, dt_.size);
    } else {
      Encode(dt_, v, &t.bytes[j * dt_.size]);
    }
  }
  return t;
}

Table Pattern::Reduced(size_t span) const {
  Table t;
  t.dt = &dt_;
  t.len = std::min(span, kPeriod);
  t.bytes.resize(t.len * dt_.size);
  const bool float_avg = op_ == tideAvg && dt_.is_float;
  if (float_avg) {
    t.values.resize(t.len);
    // Premultiplying and summing in the type rounds at most once per rank and
    // once per partial sum; all terms are >= 0, so each error is bounded by
    // epsilon/2 times the final magnitude.
    t.tolerance = (nranks_ + 2) * dt_.epsilon;
  }
  for (size_t j = 0; j < t.len; ++j) {
    double acc = 0;
    for (int r = 0; r < nranks_; ++r) {
      uint64_t raw;
      double v = Value(r, j, &raw);
      if (r == 0) {
        acc = v;
        continue;
      }
      switch (op_) {
        case tideSum:
        case tideAvg:
          acc += v;
          break;
        case tideProd:
          acc *= v;
          break;
        case tideMax:
          acc = std::max(acc, v);
          break;
        case tideMin:
          acc = std::min(acc, v);
          break;
        default:
          break;
      }
    }
    if (op_ == tideAvg) {
      acc = dt_.is_float ? acc / nranks_ : std::trunc(acc / nranks_);
    }
    Encode(dt_, acc, &t.bytes[j * dt_.size]);
    if (float_avg) t.values[j] = acc;
  }
  return t;
}

void FillTiled(void* dst, size_t count, size_t start, const Table& t) {
  const size_t es = t.dt->size;
  uint8_t* out = static_cast<uint8_t*>(dst);
  size_t pos = t.len ? start % t.len : 0;
  while (count > 0) {
    size_t n = std::min(count, t.len - pos);
    std::memcpy(out, t.bytes.data() + pos * es, n * es);
    out += n * es;
    count -= n;
    pos = 0;
  }
}

uint64_t CountWrong(const void* got, size_t count, size_t start, const Table& t) {
  const DType& dt = *t.dt;
  const size_t es = dt.size;
  const uint8_t* in = static_cast<const uint8_t*>(got);
  size_t pos = t.len ? start % t.len : 0;
  uint64_t wrong = 0;
  while (count > 0) {
    const size_t n = std::min(count, t.len - pos);
    if (t.tolerance > 0) {
      for (size_t i = 0; i < n; ++i) {
        const double want = t.values[pos + i];
        const double have = Decode(dt, in + i * es);
        if (!(std::fabs(have - want) <= t.tolerance * std::fabs(want))) ++wrong;
      }
    } else if (std::memcmp(in, t.bytes.data() + pos * es, n * es) != 0) {
      for (size_t i = 0; i < n; ++i) {
        if (std::memcmp(in + i * es, t.bytes.data() + (pos + i) * es, es) != 0) ++wrong;
      }
    }
    in += n * es;
    count -= n;
    pos = 0;
  }
  return wrong;
}

void FillGarbage(void* dst, size_t bytes, uint64_t seed) {
  uint8_t* out = static_cast<uint8_t*>(dst);
  // Bytes 0x80/0x81: out of range of every reduction result the patterns produce.
  uint64_t word = 0x8080808080808080ull | (Mix64(seed) & 0x0101010101010101ull);
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) std::memcpy(out + i, &word, 8);
  for (; i < bytes; ++i) out[i] = static_cast<uint8_t>(word >> (8 * (i % 8)));
}

}  // namespace tide_perf
