// Names of collectives, types and ops, and expansion of case spec strings.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "coll_check.h"

namespace tide_test {
namespace {

const char* const kCollNames[kNumColls] = {"allreduce",     "broadcast", "reduce",  "allgather",
                                           "reducescatter", "alltoall",  "sendrecv"};
const char* const kDtypeNames[tideNumTypes] = {"int8",    "uint8",    "int32",   "uint32",
                                               "int64",   "uint64",   "float16", "float32",
                                               "float64", "bfloat16", "fp8e4m3", "fp8e5m2"};
const char* const kOpNames[tideNumOps] = {"sum", "prod", "max", "min", "avg"};

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) {
    if (!cur.empty()) out.push_back(cur);
  }
  return out;
}

bool IsReducing(Coll c) {
  return c == Coll::kAllReduce || c == Coll::kReduce || c == Coll::kReduceScatter;
}
bool IsRooted(Coll c) { return c == Coll::kBroadcast || c == Coll::kReduce; }
bool HasInplace(Coll c) { return c != Coll::kSendRecv; }

bool ParseInt(const std::string& s, long long* v) {
  char* end = nullptr;
  *v = strtoll(s.c_str(), &end, 10);
  return !s.empty() && end && *end == '\0';
}

// Looks `name` up in `names`; "all" selects every entry.
bool ParseNames(const std::string& value, const char* const* names, int n, std::vector<int>* out,
                std::string* err) {
  for (const auto& tok : Split(value, ',')) {
    if (tok == "all") {
      for (int i = 0; i < n; ++i) out->push_back(i);
      continue;
    }
    int found = -1;
    for (int i = 0; i < n; ++i) {
      if (tok == names[i]) found = i;
    }
    if (found < 0) {
      *err = "unknown name '" + tok + "'";
      return false;
    }
    out->push_back(found);
  }
  return true;
}

}  // namespace

const char* CollName(Coll c) { return kCollNames[static_cast<int>(c)]; }
const char* DtypeName(tideDataType_t t) {
  return t >= 0 && t < tideNumTypes ? kDtypeNames[t] : "?";
}
const char* OpName(tideRedOp_t op) { return op >= 0 && op < tideNumOps ? kOpNames[op] : "?"; }

size_t DtypeSize(tideDataType_t t) {
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
    default:
      return 8;
  }
}

std::string DescribeCase(const CaseSpec& s) {
  char buf[256];
  snprintf(buf, sizeof(buf), "coll=%s dtype=%s op=%s count=%zu inplace=%d root=%d stream=%d",
           CollName(s.coll), DtypeName(s.dtype), IsReducing(s.coll) ? OpName(s.op) : "-", s.count,
           s.inplace ? 1 : 0, s.root, s.use_stream ? 1 : 0);
  return buf;
}

bool ExpandSpec(const std::string& spec, int nranks, std::vector<CaseSpec>* out, std::string* err) {
  std::vector<int> colls, dtypes, ops, inplace = {0, 1};
  std::vector<size_t> counts;
  std::string roots = "all";
  bool stream = false;
  size_t offset = 0;
  for (const auto& kv : Split(spec, ';')) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos) {
      *err = "expected key=value, got '" + kv + "'";
      return false;
    }
    std::string key = kv.substr(0, eq), value = kv.substr(eq + 1);
    if (key == "colls") {
      if (!ParseNames(value, kCollNames, kNumColls, &colls, err)) return false;
    } else if (key == "dtypes") {
      if (!ParseNames(value, kDtypeNames, tideNumTypes, &dtypes, err)) return false;
    } else if (key == "ops") {
      if (!ParseNames(value, kOpNames, tideNumOps, &ops, err)) return false;
    } else if (key == "counts") {
      for (const auto& tok : Split(value, ',')) {
        long long v;
        if (tok == "small") {
          for (size_t c : {0, 1, 7, 4097}) counts.push_back(c);
        } else if (tok == "large") {
          counts.push_back(kLargeCount);
        } else if (ParseInt(tok, &v) && v >= 0) {
          counts.push_back(static_cast<size_t>(v));
        } else {
          *err = "bad count '" + tok + "'";
          return false;
        }
      }
    } else if (key == "inplace") {
      if (value == "both") {
        inplace = {0, 1};
      } else if (value == "0" || value == "1") {
        inplace = {value == "1" ? 1 : 0};
      } else {
        *err = "bad inplace '" + value + "'";
        return false;
      }
    } else if (key == "roots") {
      roots = value;
    } else if (key == "stream") {
      stream = value == "1";
    } else if (key == "offset") {
      long long v;
      if (!ParseInt(value, &v) || v < 0 || v > 64) {
        *err = "bad offset '" + value + "'";
        return false;
      }
      offset = static_cast<size_t>(v);
    } else {
      *err = "unknown key '" + key + "'";
      return false;
    }
  }
  if (colls.empty()) ParseNames("all", kCollNames, kNumColls, &colls, err);
  if (dtypes.empty()) ParseNames("all", kDtypeNames, tideNumTypes, &dtypes, err);
  if (ops.empty()) ParseNames("all", kOpNames, tideNumOps, &ops, err);
  if (counts.empty()) counts = {0, 1, 7, 4097};

  const bool reduced = ReducedMode();
  const bool thin = ReducedLevel() >= 2;
  if (reduced && roots == "all") roots = "ends";
  const size_t large_bytes = reduced ? kReducedLargeBytes : size_t{1} << 20;
  for (int ci : colls) {
    const Coll coll = static_cast<Coll>(ci);
    for (size_t di = 0; di < dtypes.size(); ++di) {
      const auto dtype = static_cast<tideDataType_t>(dtypes[di]);
      std::vector<int> op_list = IsReducing(coll) ? ops : std::vector<int>{tideSum};
      if (thin && op_list.size() > 1) {
        const size_t m = std::min(dtypes.size(), op_list.size());
        std::vector<int> kept;
        for (size_t oi = 0; oi < op_list.size(); ++oi) {
          if (oi % m == di % m) kept.push_back(op_list[oi]);
        }
        op_list = kept;
      }
      for (int op : op_list) {
        for (size_t count_spec : counts) {
          if (count_spec == kLargeCount && reduced && di % 2 != 0) continue;
          const size_t count =
              count_spec == kLargeCount ? large_bytes / DtypeSize(dtype) + 3 : count_spec;
          std::vector<int> root_list = {-1};
          if (IsRooted(coll)) {
            root_list.clear();
            if (roots == "all" && count <= kSmallLimit) {
              for (int r = 0; r < nranks; ++r) root_list.push_back(r);
            } else if (roots == "all" || roots == "ends") {
              root_list.push_back(0);
              if (nranks > 1) root_list.push_back(nranks - 1);
            } else {
              for (const auto& tok : Split(roots, ',')) {
                long long v;
                if (!ParseInt(tok, &v)) {
                  *err = "bad root '" + tok + "'";
                  return false;
                }
                if (v >= 0 && v < nranks) root_list.push_back(static_cast<int>(v));
              }
            }
          }
          std::vector<int> ip_list = HasInplace(coll) ? inplace : std::vector<int>{0};
          for (int ip : ip_list) {
            for (int root : root_list) {
              CaseSpec c;
              c.coll = coll;
              c.dtype = dtype;
              c.op = static_cast<tideRedOp_t>(op);
              c.count = count;
              c.inplace = ip != 0;
              c.root = root;
              c.use_stream = stream;
              c.offset_elems = offset;
              out->push_back(c);
            }
          }
        }
      }
    }
  }
  return true;
}

}  // namespace tide_test
