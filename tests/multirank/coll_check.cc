// RunCase: one collective on this rank, checked against a serial reference.
// See coll_check.h for the input design that keeps every reference exact.
#include "coll_check.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "minifloat.h"

namespace tide_test {
namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
constexpr uint8_t kPoison = 0xCD;
constexpr uint8_t kGuard = 0xA5;
constexpr size_t kGuardBytes = 64;

uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Maps a uniform 64-bit value onto [0, m) without a division.
inline uint64_t Below(uint64_t h, uint64_t m) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(h) * m) >> 64);
}

enum Kind { kSigned, kUnsigned, kFloat };

// ---- Element traits: storage <-> calculation type ---------------------------
template <typename S, typename CT, Kind K>
struct IntT {
  using C = CT;
  static constexpr Kind kind = K;
  static constexpr size_t size = sizeof(S);
  static C Load(const uint8_t* p, size_t i) {
    S s;
    memcpy(&s, p + i * sizeof(S), sizeof(S));
    return static_cast<C>(s);
  }
  static void Store(uint8_t* p, size_t i, C v) {
    S s = static_cast<S>(v);
    memcpy(p + i * sizeof(S), &s, sizeof(S));
  }
  static C FromRaw(uint64_t h) { return static_cast<C>(static_cast<S>(h)); }
};

template <typename S>
struct NativeFloatT {
  using C = double;
  static constexpr Kind kind = kFloat;
  static constexpr size_t size = sizeof(S);
  static C Load(const uint8_t* p, size_t i) {
    S s;
    memcpy(&s, p + i * sizeof(S), sizeof(S));
    return static_cast<C>(s);
  }
  static void Store(uint8_t* p, size_t i, C v) {
    S s = static_cast<S>(v);
    memcpy(p + i * sizeof(S), &s, sizeof(S));
  }
};

// Lookup tables that make the narrow formats cheap: every code decoded, and
// the encoding of every integer in [-kIntRange, kIntRange] (all generated
// inputs are such integers).
constexpr int kIntRange = 4096;
struct MiniTables {
  MiniTables(MiniFormat f, int bits) : decode(size_t{1} << bits), enc_int(2 * kIntRange + 1) {
    for (size_t c = 0; c < decode.size(); ++c) decode[c] = DecodeMini(static_cast<uint32_t>(c), f);
    for (int v = -kIntRange; v <= kIntRange; ++v) enc_int[v + kIntRange] = EncodeMini(v, f);
  }
  std::vector<double> decode;
  std::vector<uint32_t> enc_int;
};

template <typename S, int E, int M, bool Inf>
struct MiniT {
  using C = double;
  static constexpr Kind kind = kFloat;
  static constexpr size_t size = sizeof(S);
  static constexpr MiniFormat kFmt{E, M, Inf};
  static const MiniTables& Tables() {
    static const MiniTables t(kFmt, 8 * sizeof(S));  // thread-safe initialisation
    return t;
  }
  static C Load(const uint8_t* p, size_t i) {
    S s;
    memcpy(&s, p + i * sizeof(S), sizeof(S));
    return Tables().decode[s];
  }
  static void Store(uint8_t* p, size_t i, C v) {
    const int64_t iv = static_cast<int64_t>(v);
    S s;
    if (static_cast<C>(iv) == v && iv >= -kIntRange && iv <= kIntRange) {
      s = static_cast<S>(Tables().enc_int[iv + kIntRange]);
    } else {
      s = static_cast<S>(EncodeMini(v, kFmt));
    }
    memcpy(p + i * sizeof(S), &s, sizeof(S));
  }
};

template <typename F>
void Dispatch(tideDataType_t t, F&& f) {
  switch (t) {
    case tideInt8:
      return f(IntT<int8_t, int64_t, kSigned>{});
    case tideUint8:
      return f(IntT<uint8_t, uint64_t, kUnsigned>{});
    case tideInt32:
      return f(IntT<int32_t, int64_t, kSigned>{});
    case tideUint32:
      return f(IntT<uint32_t, uint64_t, kUnsigned>{});
    case tideInt64:
      return f(IntT<int64_t, int64_t, kSigned>{});
    case tideUint64:
      return f(IntT<uint64_t, uint64_t, kUnsigned>{});
    case tideFloat16:
      return f(MiniT<uint16_t, 5, 10, true>{});
    case tideFloat32:
      return f(NativeFloatT<float>{});
    case tideFloat64:
      return f(NativeFloatT<double>{});
    case tideBfloat16:
      return f(MiniT<uint16_t, 8, 7, true>{});
    case tideFloat8e4m3:
      return f(MiniT<uint8_t, 4, 3, false>{});
    case tideFloat8e5m2:
      return f(MiniT<uint8_t, 5, 2, true>{});
    default:
      return;
  }
}

// Per type: largest exact sum, largest power-of-two exponent of a product,
// range of float max/min inputs, and machine epsilon.
struct TypeParams {
  int64_t sum_limit;
  int prod_kmax;
  int64_t float_range;
  double eps;
};

TypeParams ParamsOf(tideDataType_t t) {
  switch (t) {
    case tideInt8:
      return {127, 6, 0, 0};
    case tideUint8:
      return {255, 7, 0, 0};
    case tideFloat16:
      return {2048, 15, 2048, std::ldexp(1.0, -10)};
    case tideFloat32:
      return {1 << 24, 30, 1 << 20, std::ldexp(1.0, -23)};
    case tideFloat64:
      return {1 << 30, 30, int64_t{1} << 40, std::ldexp(1.0, -52)};
    case tideBfloat16:
      return {256, 30, 256, std::ldexp(1.0, -7)};
    case tideFloat8e4m3:
      return {16, 8, 16, std::ldexp(1.0, -3)};
    case tideFloat8e5m2:
      return {8, 15, 8, std::ldexp(1.0, -2)};
    default:
      return {1 << 30, 30, 0, 0};
  }
}

// Inputs as a function of (rank, element index) for one case.
class Gen {
 public:
  Gen(const CaseSpec& s, const CaseEnv& e) : op_(s.op), n_(e.nranks) {
    const uint64_t case_base = Mix(e.seed * kGolden + e.case_id + 1);
    for (int r = 0; r < n_; ++r) rank_base_.push_back(Mix(case_base ^ (r + 1) * kGolden));
    idx_base_ = Mix(case_base ^ 0xA11CE);
    const TypeParams p = ParamsOf(s.dtype);
    sum_v_ = std::min<int64_t>(2, p.sum_limit / n_);
    prod_k_ = std::min(std::min(p.prod_kmax, n_), 8);
    range_ = p.float_range;
    eps_ = p.eps;
  }

  uint64_t Hash(int rank, size_t idx) const { return Mix(rank_base_[rank] + (idx + 1) * kGolden); }

  template <class T>
  typename T::C Value(int rank, size_t idx) const {
    using C = typename T::C;
    const uint64_t h = Hash(rank, idx);
    switch (op_) {
      case tideSum:
      case tideAvg:
        if (T::kind == kSigned) return static_cast<C>(static_cast<int64_t>(Below(h, 5)) - 2);
        if (sum_v_ >= 1) return static_cast<C>(Below(h, static_cast<uint64_t>(sum_v_ + 1)));
        return static_cast<C>(idx % n_ == static_cast<size_t>(rank) ? 1 : 0);
      case tideProd: {
        const uint64_t hi = Mix(idx_base_ + (idx + 1) * kGolden);
        // The ranks at cyclic positions [0, twos) from a per-index offset
        // contribute a 2: exactly `twos` factors of 2 per element.
        const uint64_t twos = Below(hi, static_cast<uint64_t>(prod_k_ + 1));
        uint64_t pos = Below(hi * kGolden, static_cast<uint64_t>(n_)) + static_cast<uint64_t>(rank);
        if (pos >= static_cast<uint64_t>(n_)) pos -= static_cast<uint64_t>(n_);
        C mag = static_cast<C>(pos < twos ? 2 : 1);
        if constexpr (T::kind != kUnsigned) {
          if ((h & 3) == 0) return -mag;
        }
        return mag;
      }
      default:
        if constexpr (T::kind == kFloat) {
          const uint64_t span = static_cast<uint64_t>(2 * range_ + 1);
          return static_cast<C>(static_cast<int64_t>(Below(h, span)) - range_);
        } else {
          return T::FromRaw(h);
        }
    }
  }

  // Serial reference of the reduction of element `idx` over all ranks.
  template <class T>
  typename T::C Reduce(size_t idx) const {
    using C = typename T::C;
    C acc = Value<T>(0, idx);
    for (int r = 1; r < n_; ++r) {
      const C v = Value<T>(r, idx);
      switch (op_) {
        case tideProd:
          acc = acc * v;
          break;
        case tideMax:
          acc = v > acc ? v : acc;
          break;
        case tideMin:
          acc = v < acc ? v : acc;
          break;
        default:
          acc = acc + v;
          break;
      }
    }
    if (op_ == tideAvg) acc = acc / static_cast<C>(n_);  // C division for integers
    return acc;
  }

  bool Inexact(Kind k) const { return op_ == tideAvg && k == kFloat; }
  double Tolerance(double expected) const { return eps_ * (n_ + 1) * std::fabs(expected); }

 private:
  tideRedOp_t op_;
  int n_;
  std::vector<uint64_t> rank_base_;
  uint64_t idx_base_;
  int64_t sum_v_;
  int prod_k_;
  int64_t range_;
  double eps_;
};

// ---- Buffers with guards --------------------------------------------------
// Layout: [offset bytes][guard][data][guard]; data sits `offset` bytes past
// a 64-byte boundary.
class Buf {
 public:
  Buf(size_t bytes, size_t offset) : bytes_(bytes), start_(offset) {
    const size_t total = (offset + bytes + 2 * kGuardBytes + 63) / 64 * 64;
    mem_.reset(static_cast<uint8_t*>(aligned_alloc(64, total)));
    memset(mem_.get() + start_, kGuard, kGuardBytes);
    memset(data() + bytes, kGuard, kGuardBytes);
    memset(data(), kPoison, bytes);
  }
  uint8_t* data() { return mem_.get() + start_ + kGuardBytes; }
  size_t bytes() const { return bytes_; }
  bool GuardsOk() const {
    const uint8_t* before = mem_.get() + start_;
    const uint8_t* after = before + kGuardBytes + bytes_;
    for (size_t i = 0; i < kGuardBytes; ++i) {
      if (before[i] != kGuard || after[i] != kGuard) return false;
    }
    return true;
  }

 private:
  struct Free {
    void operator()(uint8_t* p) const { free(p); }
  };
  size_t bytes_, start_;
  std::unique_ptr<uint8_t, Free> mem_;
};

std::string Hex(const uint8_t* p, size_t n) {
  std::string s = "0x";
  char b[4];
  for (size_t i = n; i-- > 0;) {  // little endian: most significant byte first
    snprintf(b, sizeof(b), "%02x", p[i]);
    s += b;
  }
  return s;
}

template <typename C>
std::string Fmt(C v) {
  char b[64];
  if constexpr (std::is_floating_point_v<C>) {
    snprintf(b, sizeof(b), "%.17g", static_cast<double>(v));
  } else if constexpr (std::is_signed_v<C>) {
    snprintf(b, sizeof(b), "%" PRId64, static_cast<int64_t>(v));
  } else {
    snprintf(b, sizeof(b), "%" PRIu64, static_cast<uint64_t>(v));
  }
  return b;
}

// Collects the problems found in one case; reported as a single line.
class Problems {
 public:
  void Add(const std::string& what, size_t index, const std::string& got,
           const std::string& expected, size_t count) {
    char b[512];
    snprintf(b, sizeof(b), "%s: first mismatch index=%zu got=%s expected=%s (%zu mismatches)",
             what.c_str(), index, got.c_str(), expected.c_str(), count);
    Add(b);
  }
  void Add(const std::string& s) {
    if (!text_.empty()) text_ += "; ";
    text_ += s;
  }
  bool empty() const { return text_.empty(); }
  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

// Checks `nelem` reduced elements at `got` against the reference for input
// indices idx0 + j.
void CheckReduced(const Gen& g, tideDataType_t dt, const uint8_t* got, size_t nelem, size_t idx0,
                  const char* what, Problems* pr) {
  Dispatch(dt, [&](auto t) {
    using T = decltype(t);
    size_t bad = 0, first = 0;
    typename T::C g0{}, e0{};
    for (size_t j = 0; j < nelem; ++j) {
      const auto e = g.Reduce<T>(idx0 + j);
      const auto v = T::Load(got, j);
      bool ok;
      if constexpr (T::kind == kFloat) {
        ok = g.Inexact(T::kind) ? std::fabs(v - e) <= g.Tolerance(e) : v == e;
      } else {
        ok = v == e;
      }
      if (!ok && bad++ == 0) {
        first = j;
        g0 = v;
        e0 = e;
      }
    }
    if (bad) {
      pr->Add(what, first, Fmt(g0) + "(" + Hex(got + first * T::size, T::size) + ")", Fmt(e0), bad);
    }
  });
}

template <class T>
void FillTyped(const Gen& g, int rank, uint8_t* p, size_t nelem, size_t idx0) {
  for (size_t j = 0; j < nelem; ++j) T::Store(p, j, g.Value<T>(rank, idx0 + j));
}

void FillReduceInput(const Gen& g, tideDataType_t dt, int rank, uint8_t* p, size_t nelem,
                     size_t idx0) {
  Dispatch(dt, [&](auto t) { FillTyped<decltype(t)>(g, rank, p, nelem, idx0); });
}

// Raw bit patterns for data-movement collectives.
void FillRaw(const Gen& g, size_t esz, int rank, uint8_t* p, size_t nelem, size_t idx0) {
  for (size_t j = 0; j < nelem; ++j) {
    const uint64_t h = g.Hash(rank, idx0 + j);
    memcpy(p + j * esz, &h, esz);
  }
}

void CheckRaw(const Gen& g, size_t esz, int src_rank, const uint8_t* got, size_t nelem, size_t idx0,
              const char* what, Problems* pr) {
  size_t bad = 0, first = 0;
  uint64_t want = 0;
  for (size_t j = 0; j < nelem; ++j) {
    const uint64_t h = g.Hash(src_rank, idx0 + j);
    if (memcmp(got + j * esz, &h, esz) != 0 && bad++ == 0) {
      first = j;
      want = h;
    }
  }
  if (bad) {
    pr->Add(what, first, Hex(got + first * esz, esz),
            Hex(reinterpret_cast<const uint8_t*>(&want), esz), bad);
  }
}

void CheckPoisoned(const uint8_t* p, size_t bytes, const char* what, Problems* pr) {
  for (size_t i = 0; i < bytes; ++i) {
    if (p[i] != kPoison) {
      char b[160];
      snprintf(b, sizeof(b), "%s: byte %zu written (0x%02x), expected untouched", what, i, p[i]);
      pr->Add(b);
      return;
    }
  }
}

void CheckSame(const uint8_t* p, const std::vector<uint8_t>& before, const char* what,
               Problems* pr) {
  if (before.empty() || memcmp(p, before.data(), before.size()) == 0) return;
  size_t i = 0;
  while (p[i] == before[i]) ++i;
  char b[160];
  snprintf(b, sizeof(b), "%s: byte %zu changed 0x%02x -> 0x%02x", what, i, before[i], p[i]);
  pr->Add(b);
}

}  // namespace

CaseResult RunCase(const CaseSpec& s, const CaseEnv& e, std::string* log) {
  const int n = e.nranks, r = e.rank;
  const size_t esz = DtypeSize(s.dtype), cnt = s.count;
  const Gen g(s, e);
  const bool nulls = cnt == 0 && !s.inplace;
  const int prev = (r - 1 + n) % n;
  Problems pr;

  // Buffer sizes in elements: total (in place) or send and receive.
  size_t send_elems = cnt, recv_elems = cnt;
  if (s.coll == Coll::kAllGather) recv_elems = cnt * n;
  if (s.coll == Coll::kReduceScatter) send_elems = cnt * n;
  if (s.coll == Coll::kAlltoAll) send_elems = recv_elems = cnt * n;
  const size_t ip_elems = std::max(send_elems, recv_elems);

  const size_t off = s.offset_elems * esz;
  Buf sendb(s.inplace ? 0 : send_elems * esz, off);
  Buf recvb(s.inplace ? ip_elems * esz : recv_elems * esz, off);
  uint8_t* send = s.inplace ? recvb.data() : sendb.data();
  uint8_t* recv = recvb.data();
  if (s.inplace && s.coll == Coll::kAllGather) send = recv + r * cnt * esz;
  if (s.inplace && s.coll == Coll::kReduceScatter) recv = send + r * cnt * esz;
  const bool root = r == s.root;
  // Optional null buffers on the ranks where the API ignores them.
  const bool alt_null = ((s.root + r) % 2) == 0;
  const void* send_arg = send;
  void* recv_arg = recv;

  switch (s.coll) {
    case Coll::kAllReduce:
      FillReduceInput(g, s.dtype, r, send, cnt, 0);
      break;
    case Coll::kReduce:
      FillReduceInput(g, s.dtype, r, send, cnt, 0);
      if (!root && !s.inplace && alt_null) recv_arg = nullptr;
      break;
    case Coll::kReduceScatter:
      FillReduceInput(g, s.dtype, r, send, send_elems, 0);
      break;
    case Coll::kBroadcast:
      if (root) {
        FillRaw(g, esz, r, send, cnt, 0);
      } else if (!s.inplace) {
        if (alt_null) {
          send_arg = nullptr;
        } else {
          FillRaw(g, esz, r, send, cnt, 0);  // must be ignored
        }
      }
      break;
    case Coll::kAllGather:
    case Coll::kAlltoAll:
    case Coll::kSendRecv:
      FillRaw(g, esz, r, send, send_elems, 0);
      break;
  }
  if (nulls) {
    send_arg = nullptr;
    recv_arg = nullptr;
  }
  std::vector<uint8_t> send_before;
  if (!s.inplace) send_before.assign(send, send + send_elems * esz);
  std::vector<uint8_t> inplace_before;
  if (s.inplace && s.coll == Coll::kReduce && !root) {
    inplace_before.assign(send, send + cnt * esz);
  }

  const char* api = "?";
  tideResult_t rc = IssueCollective(s, e, send_arg, recv_arg, &api);
  if (rc == tideSuccess && s.use_stream) {
    api = "tideStreamSynchronize";
    rc = tideStreamSynchronize(e.stream);
  }
  if (rc != tideSuccess) {
    char b[256];
    snprintf(b, sizeof(b), "ERROR rank=%d %s: %s returned %d (%s): ", r, DescribeCase(s).c_str(),
             api, rc, tideGetErrorString(rc));
    *log += b;
    *log += tideGetLastError(e.comm);
    *log += "\n";
    return kCaseError;
  }

  switch (s.coll) {
    case Coll::kAllReduce:
      CheckReduced(g, s.dtype, recv, cnt, 0, "result", &pr);
      break;
    case Coll::kReduce:
      if (root) {
        CheckReduced(g, s.dtype, recv, cnt, 0, "result at root", &pr);
      } else if (s.inplace) {
        CheckSame(recv, inplace_before, "non-root in-place buffer", &pr);
      } else if (recv_arg) {
        CheckPoisoned(recv, cnt * esz, "non-root recvbuff", &pr);
      }
      break;
    case Coll::kReduceScatter:
      CheckReduced(g, s.dtype, recv, cnt, r * cnt, "result", &pr);
      break;
    case Coll::kBroadcast:
      CheckRaw(g, esz, s.root, recv, cnt, 0, "result", &pr);
      break;
    case Coll::kAllGather:
      for (int q = 0; q < n; ++q) {
        std::string what = "block from rank " + std::to_string(q);
        CheckRaw(g, esz, q, recv + q * cnt * esz, cnt, 0, what.c_str(), &pr);
      }
      break;
    case Coll::kAlltoAll:
      for (int q = 0; q < n; ++q) {
        std::string what = "block from rank " + std::to_string(q);
        CheckRaw(g, esz, q, recv + q * cnt * esz, cnt, r * cnt, what.c_str(), &pr);
      }
      break;
    case Coll::kSendRecv:
      CheckRaw(g, esz, prev, recv, cnt, 0, "received from previous rank", &pr);
      break;
  }
  if (!s.inplace) CheckSame(send, send_before, "sendbuff modified", &pr);
  if (!sendb.GuardsOk()) pr.Add("guard bytes around sendbuff overwritten");
  if (!recvb.GuardsOk()) pr.Add("guard bytes around recvbuff overwritten");
  if (pr.empty()) return kCasePass;
  char b[256];
  snprintf(b, sizeof(b), "FAIL rank=%d %s: ", r, DescribeCase(s).c_str());
  *log += b + pr.text() + "\n";
  return kCaseMismatch;
}

}  // namespace tide_test
