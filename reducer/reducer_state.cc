// The reducer's checkpoint (tideReducerGetState / SetState): the bucket
// layout, whether the rebuild is still to come, and every bucket
// compressor's state (tideCompressorGetState), in a versioned blob closed by
// a checksum (docs/overlap.md, "Checkpoints"). All integers are the host's
// byte order (a blob is read back by the same build on the same machine).
//
//   header (Header below)
//   per bucket: int32 n, n x int32 gradient, uint64 s, s bytes of compressor state (s = 0: none)
//   uint64 FNV-1a 64 of every byte before it
#include <cstring>

#include "reducer/reducer_impl.h"

namespace tide_reducer {

namespace {

struct Header {
  uint32_t magic = 0x53524454u;  // "TDRS"
  uint32_t version = 1;
  uint64_t bytes = 0;        // the whole blob
  uint64_t fingerprint = 0;  // of the creation arguments
  int32_t ngrads = 0;
  int32_t nbuckets = 0;
  int32_t rank = 0;
  int32_t nranks = 0;
  uint32_t flags = 0;  // 1: the rebuild is still to come
  uint32_t reserved = 0;
};

// Appends to (or, with out NULL, only counts) the blob.
struct Writer {
  unsigned char* out;
  size_t at = 0;
  void put(const void* p, size_t n) {
    if (out != nullptr && n > 0) std::memcpy(out + at, p, n);
    at += n;
  }
};

struct Reader {
  const unsigned char* in;
  size_t size;
  size_t at = 0;
  bool get(void* p, size_t n) {
    if (n > size - at) return false;
    std::memcpy(p, in + at, n);
    at += n;
    return true;
  }
};

// Serializes r into out (NULL: only the size); false when a compressor's
// state cannot be read.
bool serialize(tideReducer* r, unsigned char* out, size_t* size) {
  Writer w{out};
  Header h;
  h.fingerprint = r->fingerprint;
  h.ngrads = r->ngrads;
  h.nbuckets = static_cast<int32_t>(r->buckets.size());
  h.rank = r->rank;
  h.nranks = r->nranks;
  h.flags = r->rebuildPending ? 1u : 0u;
  h.bytes = *size;
  w.put(&h, sizeof(h));
  for (Bucket& b : r->buckets) {
    const int32_t n = static_cast<int32_t>(b.grads.size());
    w.put(&n, sizeof(n));
    w.put(b.grads.data(), b.grads.size() * sizeof(int32_t));
    uint64_t s = 0;
    size_t cs = 0;
    if (b.compressor != nullptr) {
      if (tideCompressorGetState(b.compressor, nullptr, &cs) != tideSuccess) return false;
      s = cs;
    }
    w.put(&s, sizeof(s));
    if (b.compressor != nullptr && out != nullptr) {
      if (tideCompressorGetState(b.compressor, out + w.at, &cs) != tideSuccess) return false;
    }
    w.at += cs;
  }
  const uint64_t sum = out != nullptr ? fnv(out, w.at) : 0;
  w.put(&sum, sizeof(sum));
  *size = w.at;
  return true;
}

// Parses and checks a blob against r; on success *layout holds its layout
// and states[b] the offset and size of bucket b's compressor state.
Err parse(const tideReducer* r, const void* buf, size_t bytes, Layout* layout,
          std::vector<std::pair<size_t, size_t>>* states, bool* rebuildPending) {
  if (buf == nullptr) return fail(tideInvalidArgument, "state buffer is NULL");
  Header h;
  const Header want;
  if (bytes < sizeof(h) + sizeof(uint64_t))
    return fail(tideInvalidArgument, "state of %zu bytes is too short", bytes);
  std::memcpy(&h, buf, sizeof(h));
  if (h.magic != want.magic) return fail(tideInvalidArgument, "not a reducer state (bad magic)");
  if (h.version != want.version)
    return fail(tideInvalidArgument, "reducer state version %u, this library reads version %u",
                h.version, want.version);
  if (h.bytes != bytes)
    return fail(tideInvalidArgument, "reducer state of %llu bytes given as %zu bytes",
                static_cast<unsigned long long>(h.bytes), bytes);
  uint64_t sum;
  std::memcpy(&sum, static_cast<const unsigned char*>(buf) + bytes - sizeof(sum), sizeof(sum));
  if (sum != fnv(buf, bytes - sizeof(sum)))
    return fail(tideInvalidArgument, "corrupt reducer state (checksum mismatch)");
  if (h.ngrads != r->ngrads || h.fingerprint != r->fingerprint)
    return fail(tideInvalidArgument,
                "state of a reducer with other arguments (%d gradients; this one has %d, or its "
                "counts, datatype or config differ)",
                h.ngrads, r->ngrads);
  if (h.rank != r->rank || h.nranks != r->nranks)
    return fail(tideInvalidArgument, "state of rank %d of %d loaded on rank %d of %d", h.rank,
                h.nranks, r->rank, r->nranks);
  if (h.nbuckets < 0 || h.nbuckets > r->ngrads)
    return fail(tideInvalidArgument, "corrupt reducer state (%d buckets)", h.nbuckets);
  Reader rd{static_cast<const unsigned char*>(buf), bytes - sizeof(sum), sizeof(h)};
  for (int32_t b = 0; b < h.nbuckets; ++b) {
    int32_t n = 0;
    uint64_t s = 0;
    if (!rd.get(&n, sizeof(n)) || n <= 0 || n > r->ngrads)
      return fail(tideInvalidArgument, "corrupt reducer state (bucket %d)", b);
    std::vector<int> grads(static_cast<size_t>(n));
    if (!rd.get(grads.data(), grads.size() * sizeof(int32_t)) || !rd.get(&s, sizeof(s)) ||
        s > rd.size - rd.at)
      return fail(tideInvalidArgument, "corrupt reducer state (bucket %d)", b);
    states->emplace_back(rd.at, static_cast<size_t>(s));
    rd.at += static_cast<size_t>(s);
    layout->push_back(std::move(grads));
  }
  if (rd.at != rd.size || !isLayoutOf(*layout, r->ngrads))
    return fail(tideInvalidArgument, "corrupt reducer state (not a layout of %d gradients)",
                r->ngrads);
  *rebuildPending = (h.flags & 1u) != 0;
  return okay();
}

}  // namespace

Err getState(tideReducer* r, void* buf, size_t* bytes) {
  if (bytes == nullptr) return fail(tideInvalidArgument, "bytes is NULL");
  if (r->inStep)
    return fail(tideInvalidUsage, "tideReducerGetState inside step %llu (call it after Wait)",
                currentStep(r));
  // Compressor states are read once the reducer's calls are complete.
  Err d = drainAll(r);
  if (!d.ok()) return d;
  size_t need = 0;
  if (!serialize(r, nullptr, &need))
    return fail(tideInternalError, "reading a bucket compressor's state failed");
  if (buf == nullptr) {
    *bytes = need;
    return okay();
  }
  if (*bytes < need)
    return fail(tideInvalidArgument, "state needs %zu bytes, buffer has %zu", need, *bytes);
  size_t size = need;
  if (!serialize(r, static_cast<unsigned char*>(buf), &size) || size != need)
    return fail(tideInternalError, "reading a bucket compressor's state failed");
  *bytes = need;
  return okay();
}

Err setState(tideReducer* r, const void* buf, size_t bytes) {
  if (r->inStep)
    return fail(tideInvalidUsage, "tideReducerSetState inside step %llu (call it after Wait)",
                currentStep(r));
  Layout layout;
  std::vector<std::pair<size_t, size_t>> states;
  bool rebuildPending = false;
  Err local = parse(r, buf, bytes, &layout, &states, &rebuildPending);
  std::vector<Bucket> fresh;
  if (local.ok()) local = applyLayout(r, layout, &fresh);
  for (size_t b = 0; local.ok() && b < fresh.size(); ++b) {
    const auto [at, size] = states[b];
    if ((fresh[b].compressor != nullptr) != (size > 0)) {
      local = fail(tideInvalidArgument, "reducer state: bucket %zu %s compressor state", b,
                   size > 0 ? "has a" : "lacks its");
    } else if (size > 0 && tideCompressorSetState(fresh[b].compressor,
                                                  static_cast<const unsigned char*>(buf) + at,
                                                  size) != tideSuccess) {
      local =
          fail(tideInvalidArgument, "reducer state: bucket %zu: %s", b, tideGetLastError(nullptr));
    }
  }
  // Every rank loads its blob or none does: a rank whose blob is bad takes
  // part with key 0, and the layouts must be the same everywhere.
  const uint64_t key = local.ok() ? (layoutHash(layout) ^ (rebuildPending ? 2 : 0)) | 1 : 0;
  bool same = false;
  Err e = agree(r, key, &same);
  if (e.ok() && !local.ok()) e = local;
  if (e.ok() && !same)
    e = fail(tideInvalidArgument,
             "reducer state: another rank's state was rejected or holds another bucket layout");
  if (!e.ok()) {
    freeBuckets(&fresh);
    return e;
  }
  // Compressor calls finished before the swap (the old ones are freed).
  Err d = drainAll(r);
  if (!d.ok()) {
    freeBuckets(&fresh);
    return d;
  }
  installBuckets(r, &fresh);
  r->rebuildPending = rebuildPending;
  return okay();
}

}  // namespace tide_reducer
