// Algorithm logic of the device collective engine of one node (peer-mapped
// scratch; All-Reduce, AllGather, ReduceScatter, Broadcast), written once for
// nvcc (device_coll.cu) and g++ (the CPU unit tests
// tests/unit/test_device_coll_logic.cc and test_device_coll_kinds.cc run the
// same step functions with one std::thread per rank).
//
// Memory: every rank owns a scratch region that all ranks of the node map
// (same pointer for threads of one process, CUDA IPC for processes). It holds
// a flag area (kFlagWords 64-bit words, zero at creation) and two input
// areas used alternately by call parity. One kernel per call (or chunk) first
// copies the rank's input into the area of the call's parity, then runs the
// algorithm:
//   one-shot: signal "input ready" to every peer, wait for every peer's
//             signal, reduce all ranks' inputs (rank order 0..n-1) into out.
//   two-shot: same start; then reduce slice `rank` of every input into out
//             and into the own input area, signal "slice reduced", wait for
//             every peer's, copy every other slice from its owner's area.
// Direct mode (every rank a thread of one process, so user pointers are valid
// everywhere): no copy-in; each rank posts its send and recv pointers in its
// peers' mailboxes before the "input ready" signal and peers read the user
// buffers themselves; the two-shot reduced slice goes to the recv buffer
// only, and a final "done" phase keeps every rank in the kernel until its
// peers stopped reading its buffers. A one-shot rank working in place still
// copies its input to scratch (peers read it while it writes its output).
// Work is split into `nblocks` parts that run independently (CUDA blocks; the
// CPU test runs them one after another per rank): part b of one rank only
// talks to part b of the others, so no grid-wide barrier is needed. Slices
// and parts are cut at 16-byte multiples so vector accesses stay aligned.
//
// Flag protocol: rank q writes the call's sequence number (1, 2, ...; the same
// on every rank since calls are collective) with release semantics into slot
// [phase][part][q] of each peer's flag area; the peer polls its own slot with
// acquire semantics until it is >= seq. Why two areas suffice without a
// "done reading" flag: a rank overwrites area (s % 2) only at call s + 2,
// after its call s + 1 kernel passed the "input ready" wait of call s + 1,
// which every peer signals only once its call-s kernel finished (stream
// order). Every wait is bounded by timeoutNs and checks an abort word; a
// failed wait stores an error code (encodeError) into the error word and the
// part returns at once.
//
// Graph-replay safety: the sequence number is not a kernel parameter. Each
// rank keeps a call counter in its own flag area (kSeqWord: calls completed).
// Every part's leader reads it at entry (seq = counter + 1), so all parts of
// a call see the same value; the last part to finish (counted in kExitWord
// with an acquire-release add) resets the exit count and stores seq, after
// every part has read it. The next kernel on the stream (stream order) sees
// the new value, so a replayed CUDA graph advances it like a fresh call. The
// input area's parity and the copy-in (done by the kernel itself, each part
// copying exactly the ranges its peers' same part reads) follow from it.
//
// AllGather, ReduceScatter, Broadcast (Args::kind): always scratch mode (the
// kernel copies in, peers read only scratch areas; no mailboxes, no "done"
// phase), for threads and processes alike. Each is one phase-0 exchange
// among all ranks, then local reads of the peers' areas:
//   AllGather: the rank's `count` elements go to its area; part b copies
//              piece b of every rank's area into out block q (out + q *
//              stride elements). AG and Broadcast run on bytes (elemSize 1).
//   ReduceScatter: the rank's n input blocks (stride elements apart) go to
//              its area, block q at q * blockBytes (16-byte multiples); part
//              b reduces piece b of block `rank` of every area (rank order,
//              the All-Reduce's fold) into out.
//   Broadcast: the root copies its input into its area; every rank copies
//              the root's area into out (the root only when out != input).
// A mix of kinds on one engine shares the call counter, the flag slots and
// the two areas. The two-area argument above holds per call whatever the
// kinds: every kind starts with a phase-0 exchange in which every rank
// signals every peer (Broadcast too, although only the root's area is
// read), and reads peers' areas (or, direct All-Reduce, the buffers posted in
// the mailboxes, guarded by its "done" phase) only inside its kernel. So a
// rank overwriting area (s % 2) at call s + 2, whatever kind s + 2 is, has
// passed the phase-0 wait of call s + 1, which each peer signals only after
// its call-s kernel (of any kind) ended. Slot values only grow (seq), and
// waits test >= seq, so parts left unused by a call with fewer parts never
// satisfy a later wait early. In-place calls stay correct because the
// copy-in of a range precedes, in the same part, the write of that range.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define TIDE_DC_FN __host__ __device__ inline
// Step functions are templates over the platform; nvcc must not check the
// host instantiation of device-only platform calls.
#define TIDE_DC_TEMPLATE _Pragma("nv_exec_check_disable")
#else
#define TIDE_DC_FN inline
#define TIDE_DC_TEMPLATE
#endif

namespace tide::cuda::dc {

inline constexpr int kMaxRanks = 8;    // ranks of one node the engine serves
inline constexpr int kMaxBlocks = 64;  // parts (CUDA blocks) per call
inline constexpr int kPhases = 3;      // 0: input ready, 1: slice reduced, 2: done
inline constexpr size_t kFlagWords = size_t{kPhases} * kMaxBlocks * kMaxRanks;
// Mailbox words after the flags: [part][src][0 = send, 1 = recv] pointers.
inline constexpr size_t kMailWords = size_t{kMaxBlocks} * kMaxRanks * 2;
// Call counter words after the mailboxes (own flag area only).
inline constexpr size_t kSeqWord = kFlagWords + kMailWords;  // calls completed
inline constexpr size_t kExitWord = kSeqWord + 1;            // parts of this call done

// Error word contents: kind | phase << 4 | peer << 8 | part << 16; 0 = none.
inline constexpr uint32_t kErrTimeout = 1;
inline constexpr uint32_t kErrAborted = 2;

// Collective kinds (Args::kind).
inline constexpr int kAllReduce = 0;
inline constexpr int kAllGather = 1;
inline constexpr int kReduceScatter = 2;
inline constexpr int kBroadcast = 3;

TIDE_DC_FN uint32_t encodeError(uint32_t kind, int phase, int peer, int part) {
  return kind | static_cast<uint32_t>(phase) << 4 | static_cast<uint32_t>(peer) << 8 |
         static_cast<uint32_t>(part) << 16;
}
TIDE_DC_FN uint32_t errorKind(uint32_t code) { return code & 0xfu; }
TIDE_DC_FN int errorPhase(uint32_t code) { return static_cast<int>((code >> 4) & 0xfu); }
TIDE_DC_FN int errorPeer(uint32_t code) { return static_cast<int>((code >> 8) & 0xffu); }
TIDE_DC_FN int errorPart(uint32_t code) { return static_cast<int>(code >> 16); }

TIDE_DC_FN size_t flagIndex(int phase, int part, int src) {
  return (static_cast<size_t>(phase) * kMaxBlocks + part) * kMaxRanks + src;
}
TIDE_DC_FN size_t mailIndex(int part, int src, int which) {
  return kFlagWords + (static_cast<size_t>(part) * kMaxRanks + src) * 2 + which;
}

// Half-open element range.
struct Range {
  uint64_t lo;
  uint64_t hi;
};

// Elements per 16-byte vector (1 for elements of 16 bytes or more).
TIDE_DC_FN uint64_t unitOf(int elemSize) {
  return elemSize >= 16 ? 1 : static_cast<uint64_t>(16 / elemSize);
}

// Piece `i` of `pieces` of `r`: pieces of equal length in units (the last
// non-empty ones may be shorter, trailing ones empty); bounds are r.lo plus a
// multiple of `unit`, clamped to r.hi.
TIDE_DC_FN Range pieceOf(Range r, int pieces, int i, uint64_t unit) {
  const uint64_t len = r.hi > r.lo ? r.hi - r.lo : 0;
  const uint64_t units = (len + unit - 1) / unit;
  const uint64_t per = (units + pieces - 1) / pieces;
  uint64_t lo = r.lo + per * unit * static_cast<uint64_t>(i);
  uint64_t hi = lo + per * unit;
  if (lo > r.hi) lo = r.hi;
  if (hi > r.hi) hi = r.hi;
  return {lo, hi};
}

// Two-shot: the slice of `count` elements that rank `p` of `n` reduces.
TIDE_DC_FN Range sliceOf(uint64_t count, int n, int p, uint64_t unit) {
  return pieceOf(Range{0, count}, n, p, unit);
}

// Kernel arguments (passed by value to the kernel; the CPU test fills the
// same struct with host pointers). The host fills everything but the fields
// marked "bound": those depend on the call's sequence number, which only the
// device knows (bindCall fills them from the counter).
struct Args {
  int rank;
  int nranks;
  int nblocks;
  int elemSize;
  uint64_t count;                      // elements of this call (chunk); AG/RS: per rank
  int kind;                            // kAllReduce (0), kAllGather, kReduceScatter, kBroadcast
  int root;                            // Broadcast: the root rank
  uint64_t stride;                     // AG: elements between out's rank blocks; RS: input's
  uint64_t seq;                        // bound: call sequence number, >= 1
  uint64_t timeoutNs;                  // bound of each wait
  int direct;                          // 1: direct mode (see above)
  int copyIn;                          // 1: the kernel copies `input` into the own area first
  uint64_t areaBytes;                  // bytes of each input area
  const char* input;                   // this rank's input of this call (the user's buffer)
  char* base[kMaxRanks];               // each rank's scratch region (flag area first)
  char* send;                          // bound: direct mode: this rank's input (input or own area)
  char* data[kMaxRanks];               // bound: each rank's input area of this call's parity
  uint64_t* flags[kMaxRanks];          // bound: each rank's flag area
  char* out;                           // this rank's output (the user's buffer)
  const volatile uint32_t* abortWord;  // nonzero: stop waiting
  uint32_t* errorWord;                 // first error code of this rank
};

// Platform interface P (one instance per part; on the GPU per block):
//   bool leader()                   the thread that signals and waits
//   uint64_t share(uint64_t)        block barrier; returns the leader's value
//   void barrier()                  block barrier
//   void signal(uint64_t*, uint64_t)        fence + release store (system scope)
//   uint64_t poll(const uint64_t*)          acquire load (system scope)
//   uint64_t exitAdd(uint64_t*)     fetch-add 1, acquire-release (device scope)
//   uint64_t nowNs()                monotonic clock
//   bool aborted(const volatile uint32_t*)
//   void pause(uint64_t iteration)  back-off while waiting
//   void setError(uint32_t*, uint32_t)      keeps the first nonzero code
//   void reduce(char* out, char* out2, char* const* ins, int n, Range r)
//       out[i] (and out2[i] when out2 is not null) = ins[0][i] op ... op
//       ins[n-1][i] for i in r, folded in that order; out may alias ins[k] at
//       the same index
//   void copy(char* dst, const char* src, Range r)

// Writes `seq` into slot [phase][part][rank] of every peer. Leader only.
TIDE_DC_TEMPLATE
template <class P>
TIDE_DC_FN void signalPeers(P& p, const Args& a, int phase, int part) {
  for (int k = 1; k < a.nranks; ++k) {
    const int q = (a.rank + k) % a.nranks;
    p.signal(a.flags[q] + flagIndex(phase, part, a.rank), a.seq);
  }
}

// Waits until *word >= target, bounded by timeoutNs from `start` and the
// abort word. Returns 0, or the error code (also stored in errorWord).
// Shared by every engine's waits (also device_ring_logic.h).
TIDE_DC_TEMPLATE
template <class P>
TIDE_DC_FN uint32_t waitWordAtLeast(P& p, const uint64_t* word, uint64_t target, uint64_t start,
                                    uint64_t timeoutNs, const volatile uint32_t* abortWord,
                                    uint32_t* errorWord, int phase, int peer, int part) {
  for (uint64_t it = 0; p.poll(word) < target; ++it) {
    if ((it & 63) == 63) {
      uint32_t code = 0;
      if (p.aborted(abortWord)) {
        code = encodeError(kErrAborted, phase, peer, part);
      } else if (p.nowNs() - start > timeoutNs) {
        code = encodeError(kErrTimeout, phase, peer, part);
      }
      if (code != 0) {
        p.setError(errorWord, code);
        return code;
      }
    }
    p.pause(it);
  }
  return 0;
}

// Waits until every peer's slot [phase][part][peer] in this rank's flag area
// holds >= seq. Leader only. Returns 0, or the error code (also stored).
TIDE_DC_TEMPLATE
template <class P>
TIDE_DC_FN uint32_t waitPeers(P& p, const Args& a, int phase, int part) {
  const uint64_t start = p.nowNs();
  for (int k = 1; k < a.nranks; ++k) {
    const int q = (a.rank + a.nranks - k) % a.nranks;
    const uint64_t* slot = a.flags[a.rank] + flagIndex(phase, part, q);
    const uint32_t code = waitWordAtLeast(p, slot, a.seq, start, a.timeoutNs, a.abortWord,
                                          a.errorWord, phase, q, part);
    if (code != 0) return code;
  }
  return 0;
}

// Direct mode: posts this rank's send and recv pointers to every peer.
// Leader only, before the phase-0 signal (which releases them).
TIDE_DC_TEMPLATE
template <class P>
TIDE_DC_FN void postMail(P& p, const Args& a, int part) {
  for (int q = 0; q < a.nranks; ++q) {
    if (q == a.rank) continue;
    p.signal(a.flags[q] + mailIndex(part, a.rank, 0), reinterpret_cast<uintptr_t>(a.send));
    p.signal(a.flags[q] + mailIndex(part, a.rank, 1), reinterpret_cast<uintptr_t>(a.out));
  }
}

// Every rank's buffer for this part: direct mode: send (which 0) or recv
// (which 1) pointers from the mailbox (valid after the phase-0 wait);
// otherwise the scratch input areas.
TIDE_DC_TEMPLATE
template <class P>
TIDE_DC_FN void buffers(P& p, const Args& a, int part, int which, char** ptrs) {
  for (int q = 0; q < a.nranks; ++q) {
    if (a.direct == 0) {
      ptrs[q] = a.data[q];
    } else if (q == a.rank) {
      ptrs[q] = which == 0 ? a.send : a.out;
    } else {
      ptrs[q] = reinterpret_cast<char*>(
          static_cast<uintptr_t>(p.poll(a.flags[a.rank] + mailIndex(part, q, which))));
    }
  }
}

// Signal + wait by the leader, result shared with the whole part.
TIDE_DC_TEMPLATE
template <class P>
TIDE_DC_FN uint32_t exchangePhase(P& p, const Args& a, int phase, int part) {
  uint32_t code = 0;
  if (p.leader()) {
    signalPeers(p, a, phase, part);
    code = waitPeers(p, a, phase, part);
  }
  return static_cast<uint32_t>(p.share(code));
}

// One-shot All-Reduce, part `part`. Returns 0 or the error code.
TIDE_DC_TEMPLATE
template <class P>
TIDE_DC_FN uint32_t oneShotPart(P& p, const Args& a, int part) {
  if (a.direct != 0 && p.leader()) postMail(p, a, part);
  const uint32_t code = exchangePhase(p, a, 0, part);
  if (code != 0) return code;
  char* ins[kMaxRanks];
  buffers(p, a, part, 0, ins);
  const Range r = pieceOf(Range{0, a.count}, a.nblocks, part, unitOf(a.elemSize));
  if (r.hi > r.lo) p.reduce(a.out, nullptr, ins, a.nranks, r);
  if (a.direct == 0) return 0;
  p.barrier();
  return exchangePhase(p, a, 2, part);
}

// Two-shot All-Reduce, part `part`. Returns 0 or the error code.
TIDE_DC_TEMPLATE
template <class P>
TIDE_DC_FN uint32_t twoShotPart(P& p, const Args& a, int part) {
  if (a.direct != 0 && p.leader()) postMail(p, a, part);
  uint32_t code = exchangePhase(p, a, 0, part);
  if (code != 0) return code;
  const uint64_t unit = unitOf(a.elemSize);
  const Range mine = pieceOf(sliceOf(a.count, a.nranks, a.rank, unit), a.nblocks, part, unit);
  char* bufs[kMaxRanks];
  buffers(p, a, part, 0, bufs);
  // Reduce-scatter. Scratch mode: the own input area's slice becomes the
  // reduced slice (only this rank reads it before the phase-1 signal).
  // Direct mode: peers take it from the recv buffer.
  char* keep = a.direct != 0 ? nullptr : a.data[a.rank];
  if (mine.hi > mine.lo) p.reduce(a.out, keep, bufs, a.nranks, mine);
  p.barrier();
  code = exchangePhase(p, a, 1, part);
  if (code != 0) return code;
  // All-gather: every other slice from its owner, starting with the next rank.
  buffers(p, a, part, 1, bufs);
  for (int k = 1; k < a.nranks; ++k) {
    const int q = (a.rank + k) % a.nranks;
    const Range r = pieceOf(sliceOf(a.count, a.nranks, q, unit), a.nblocks, part, unit);
    if (r.hi > r.lo) p.copy(a.out, bufs[q], r);
  }
  if (a.direct == 0) return 0;
  p.barrier();
  return exchangePhase(p, a, 2, part);
}

// Scratch layout of one rank: flag area, padding, input area 0, input area 1.
inline constexpr size_t kFlagAreaBytes = 64 << 10;  // >= kFlagWords * 8, 64 KiB aligned
static_assert((kFlagWords + kMailWords + 2) * sizeof(uint64_t) <= kFlagAreaBytes,
              "flag area too small");
TIDE_DC_FN size_t scratchBytes(size_t areaBytes) { return kFlagAreaBytes + 2 * areaBytes; }
TIDE_DC_FN size_t areaOffset(size_t areaBytes, uint64_t seq) {
  return kFlagAreaBytes + static_cast<size_t>(seq & 1) * areaBytes;
}

// The call's Args with the fields that depend on `seq` filled in.
TIDE_DC_FN Args bindCall(const Args& in, uint64_t seq) {
  Args a = in;
  a.seq = seq;
  for (int q = 0; q < a.nranks; ++q) {
    a.flags[q] = reinterpret_cast<uint64_t*>(a.base[q]);
    a.data[q] = a.base[q] + areaOffset(a.areaBytes, seq);
  }
  a.send = a.copyIn != 0 ? a.data[a.rank] : const_cast<char*>(a.input);
  return a;
}

// Copy-in of part `part`: exactly the ranges that part `part` of every rank
// reads from this rank's area (one-shot: the part's piece of the whole
// input; two-shot: the part's piece of every rank's slice).
TIDE_DC_TEMPLATE
template <class P>
TIDE_DC_FN void copyInPart(P& p, const Args& a, int part, bool twoShot) {
  if (a.copyIn == 0) return;
  const uint64_t unit = unitOf(a.elemSize);
  char* own = a.data[a.rank];
  if (!twoShot) {
    const Range r = pieceOf(Range{0, a.count}, a.nblocks, part, unit);
    if (r.hi > r.lo) p.copy(own, a.input, r);
    return;
  }
  for (int q = 0; q < a.nranks; ++q) {
    const Range r = pieceOf(sliceOf(a.count, a.nranks, q, unit), a.nblocks, part, unit);
    if (r.hi > r.lo) p.copy(own, a.input, r);
  }
}

// ReduceScatter: bytes of one rank block in a scratch area (16-byte multiple).
TIDE_DC_FN uint64_t rsBlockBytes(uint64_t count, int elemSize) {
  return (count * static_cast<uint64_t>(elemSize) + 15) / 16 * 16;
}
// Scratch bytes one call of kind `kind` with `count` elements (per rank)
// needs in its area; the host cuts calls into chunks that fit areaBytes.
TIDE_DC_FN uint64_t areaNeed(int kind, uint64_t count, int elemSize, int nranks) {
  return kind == kReduceScatter ? rsBlockBytes(count, elemSize) * static_cast<uint64_t>(nranks)
                                : count * static_cast<uint64_t>(elemSize);
}

// Elements (per rank) of one chunk of a call of kind `kind`: the largest
// count whose areaNeed fits `areaBytes` (AG and Broadcast count bytes).
TIDE_DC_FN uint64_t chunkElems(int kind, uint64_t areaBytes, int elemSize, int nranks) {
  const uint64_t es = static_cast<uint64_t>(elemSize);
  if (kind != kReduceScatter) return areaBytes / es;
  return (areaBytes / static_cast<uint64_t>(nranks)) / 16 * 16 / es;
}

// Copy-in of AG / RS / Broadcast, part `part`: piece `part` of each block
// this rank provides (the ranges that part `part` of every rank reads).
TIDE_DC_TEMPLATE
template <int kKind, class P>
TIDE_DC_FN void copyInColl(P& p, const Args& a, int part) {
  const Range r = pieceOf(Range{0, a.count}, a.nblocks, part, unitOf(a.elemSize));
  if (r.hi <= r.lo) return;
  char* own = a.data[a.rank];
  if constexpr (kKind == kReduceScatter) {
    const uint64_t bb = rsBlockBytes(a.count, a.elemSize);
    const uint64_t sb = a.stride * static_cast<uint64_t>(a.elemSize);
    for (int q = 0; q < a.nranks; ++q) p.copy(own + q * bb, a.input + q * sb, r);
  } else if constexpr (kKind == kAllGather) {
    p.copy(own, a.input, r);
  } else {
    if (a.rank == a.root) p.copy(own, a.input, r);
  }
}

// AllGather / ReduceScatter / Broadcast after the copy-in, part `part`.
// Returns 0 or the error code.
TIDE_DC_TEMPLATE
template <int kKind, class P>
TIDE_DC_FN uint32_t collPart(P& p, const Args& a, int part) {
  const uint32_t code = exchangePhase(p, a, 0, part);
  if (code != 0) return code;
  const Range r = pieceOf(Range{0, a.count}, a.nblocks, part, unitOf(a.elemSize));
  if (r.hi <= r.lo) return 0;
  if constexpr (kKind == kReduceScatter) {
    char* ins[kMaxRanks];
    const uint64_t off = static_cast<uint64_t>(a.rank) * rsBlockBytes(a.count, a.elemSize);
    for (int q = 0; q < a.nranks; ++q) ins[q] = a.data[q] + off;
    p.reduce(a.out, nullptr, ins, a.nranks, r);
  } else if constexpr (kKind == kAllGather) {
    // Own block first, then the following ranks (peers start on different
    // areas).
    const uint64_t sb = a.stride * static_cast<uint64_t>(a.elemSize);
    for (int k = 0; k < a.nranks; ++k) {
      const int q = (a.rank + k) % a.nranks;
      p.copy(a.out + q * sb, a.data[q], r);
    }
  } else {
    if (a.rank != a.root || a.input != a.out) p.copy(a.out, a.data[a.root], r);
  }
  return 0;
}

// One part of one call of kind kKind, from the counter read to the counter
// advance. Returns 0 or the error code. Every part of the call must run it
// once. `twoShot`: All-Reduce only.
TIDE_DC_TEMPLATE
template <int kKind, class P>
TIDE_DC_FN uint32_t runKindPart(P& p, const Args& in, int part, bool twoShot) {
  uint64_t* own = reinterpret_cast<uint64_t*>(in.base[in.rank]);
  uint64_t seq = 0;
  if (p.leader()) seq = p.poll(own + kSeqWord) + 1;
  seq = p.share(seq);
  const Args a = bindCall(in, seq);
  if constexpr (kKind == kAllReduce) {
    copyInPart(p, a, part, twoShot);
  } else {
    copyInColl<kKind>(p, a, part);
  }
  p.barrier();  // the whole part's copy-in precedes the "input ready" signal
  uint32_t code = 0;
  if constexpr (kKind == kAllReduce) {
    code = twoShot ? twoShotPart(p, a, part) : oneShotPart(p, a, part);
  } else {
    code = collPart<kKind>(p, a, part);
  }
  p.barrier();
  if (p.leader() && p.exitAdd(own + kExitWord) + 1 == static_cast<uint64_t>(a.nblocks)) {
    // Last part of the call: every part has read the counter before its add.
    p.signal(own + kExitWord, 0);
    p.signal(own + kSeqWord, seq);
  }
  return code;
}

// runKindPart for the kind in `in.kind` (the CPU test; kernels instantiate
// only their own kind).
TIDE_DC_TEMPLATE
template <class P>
TIDE_DC_FN uint32_t runPart(P& p, const Args& in, int part, bool twoShot) {
  switch (in.kind) {
    case kAllGather:
      return runKindPart<kAllGather>(p, in, part, false);
    case kReduceScatter:
      return runKindPart<kReduceScatter>(p, in, part, false);
    case kBroadcast:
      return runKindPart<kBroadcast>(p, in, part, false);
    default:
      return runKindPart<kAllReduce>(p, in, part, twoShot);
  }
}

}  // namespace tide::cuda::dc
