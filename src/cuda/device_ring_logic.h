// Ring All-Reduce of one node through FIFOs in the receiver's peer-mapped
// memory, written once for nvcc (device_ring.cuh) and g++ (the CPU unit test
// tests/unit/test_device_ring_logic.cc runs the same step function with one
// std::thread per rank and part). Shares the platform interface style, the
// error encoding and the range arithmetic of device_coll_logic.h.
//
// Algorithm: ranks at ring positions 0..n-1 (RingArgs.order). Each part
// (CUDA block) owns the range pieceOf([0, count), nblocks, part) and cuts it
// into n chunks, chunk c = pieceOf(range, n, c). The part of the rank at
// position `pos` sends 2n-2 messages to the next position and receives 2n-2
// from the previous one; message m (0 <= m <= 2n-3) carries chunk
// (pos - m) mod n, which is exactly the chunk the previous position sent as
// its message m-1. Step m = 0..2n-2 of the part, chunk c = (pos - m) mod n:
//   m = 0          send input[c]
//   1 <= m < n-1   send (received op input[c])           (reduce-scatter)
//   m = n-1        out[c] = received op input[c], also sent (last reduction)
//   n-1 < m < 2n-2 out[c] = received, also sent           (all-gather)
//   m = 2n-2       out[c] = received
// Reduction order: every element of chunk c is folded left to right in ring
// order starting at position c: in[order[c]] op in[order[c+1]] op ... op
// in[order[c+n-1]] (positions mod n), and the reduced bits are then copied,
// so every rank stores the same bits. Only chunk 0 with order = 0..n-1 has
// the serial rank-order fold; the unit test checks every chunk against the
// fold in its own order. Avg: the platform finishes the value at m = n-1.
//
// FIFOs: every rank's ring region (zeroed at creation, mapped by its ring
// neighbours) holds, per part, a control area and one FIFO of K slots of S
// bytes that the PREVIOUS position writes into. Messages stream through it
// in pieces of at most S bytes (slot i % K holds the part's i-th piece,
// counting across calls), so any size moves with K * S bytes per part.
//   head (receiver's region, written by the sender): pieces published. The
//        sender writes the slot, then (block barrier, fence) stores i + 1
//        with release semantics; the receiver polls it with acquire.
//   tail (sender's region, written by the receiver): pieces consumed. The
//        receiver stores i + 1 (release) once the whole block finished
//        reading slot i; the sender waits for tail >= i + 1 - K (acquire)
//        before it overwrites slot i % K.
// Rounds: round j runs steps 0..2n-2 on piece j of each step's chunk (empty
// when the chunk is shorter, but still handed over: head/tail advance with
// no data), for as many rounds as the longest chunk has pieces. So every
// part's sequence is strictly send, receive, send, receive, ... A step
// reads its incoming slot while it writes the outgoing one, so it frees the
// incoming slot (tail) only after it got room at the next rank: K >= 2 is
// required. No deadlock then: let d(r) be the steps rank r completed; a rank
// waiting for data needs d(prev) < d(r), a rank waiting for room (K >= 2)
// needs d(next) < d(r); a cycle of waits would need d to decrease strictly
// all around the ring. (K = 1 deadlocks: every rank holds its full incoming
// slot while waiting for room; streaming whole messages instead of rounds
// deadlocks once a chunk exceeds K slots.)
// One block step per piece: the leader waits for the incoming piece and for
// a free outgoing slot, the block reduces/copies (16-byte aligned pieces),
// then the leader publishes both counters. Parts never talk to other parts:
// part b of a rank only talks to part b of its ring neighbours (no grid
// barrier; all blocks of every rank must be co-resident, as for dc).
// Every wait is bounded by timeoutNs and checks the abort word; a failed wait
// stores encodeError(kind, kRingPhaseData/Space, peer, part) into the error
// word and the part returns (the error is sticky: later calls give up).
//
// Graph-replay safety (self-continuing FIFO state, no call number at all):
// kernel parameters hold nothing per call. Each part keeps its running
// "pieces sent" and "pieces received" totals in its own rank's control area;
// the part's leader reads them at entry and the same block stores them at
// exit, so the next kernel on the stream (a fresh launch or a replay of a
// captured graph) continues the sequence. Because calls are collective and
// count, nblocks, nranks, K and S are the same on every rank, the part sends
// exactly as many pieces to its next neighbour as that neighbour's part
// receives in the same call, so at every call boundary sender and receiver
// totals agree; 64-bit counters never wrap. Replaying N times therefore
// behaves like N fresh calls.
//
// In place (out == input) is safe: input[c] is read at the step m <= n-1
// with c = pos - m, and out[c] is written at that step (same index) or later.
//
// Wiring into the engine (done in device_coll.cc and device_ring_engine.cc):
// DeviceAllReduce::create allocates ringRegionBytes(K, S) per rank next to
// its scratch (zeroed, exchanged like the scratch: same pointer for threads,
// cuIpcGetMemHandle for processes; only the ring neighbours' regions are
// needed; e.g. K = 4, S = 64 KiB: 16 MiB + 32 KiB), fills RingArgs once per
// call shape (order = the node's ranks in CommTopo::rings[0] order, the
// abort and error words of the dc engine) and, when chooseDeviceAllReduce()
// (device_algo_choice.h) returns Ring, launches tide_ring_<dtype>_<op> from
// the device_ring fat binary (tide_ring_fatbin, like tide_dc_fatbin) with
// exactly nblocks blocks of up to 512 threads, no dynamic shared memory,
// nblocks small enough that every rank's blocks are resident together.
// check() decodes phases 3, 4 (timeout/abort) and kind kErrBadArgs. After a
// failure the regions are out of step: the engine is torn down and recreated
// (zeroed regions) rather than reused.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device_coll_logic.h"

namespace tide::cuda::ring {

using dc::encodeError;
using dc::kErrAborted;
using dc::kErrTimeout;
using dc::kMaxBlocks;
using dc::kMaxRanks;
using dc::pieceOf;
using dc::Range;
using dc::unitOf;

// Error phases of the ring (after dc's 0..2, so one decoder serves both).
inline constexpr int kRingPhaseData = 3;   // waiting for the previous rank's piece
inline constexpr int kRingPhaseSpace = 4;  // waiting for a free slot at the next rank
inline constexpr int kRingPhaseArgs = 5;   // RingArgs rejected (kind kErrBadArgs)
inline constexpr uint32_t kErrBadArgs = 3;

// Control area: per part, three 128-byte lines so that the words written by
// different ranks never share a line.
inline constexpr size_t kLineWords = 16;
inline constexpr size_t kPartCtrlWords = 3 * kLineWords;
inline constexpr size_t kRingCtrlBytes = 32 << 10;  // 16-byte multiple
static_assert(kMaxBlocks * kPartCtrlWords * sizeof(uint64_t) <= kRingCtrlBytes,
              "ring control area too small");
TIDE_DC_FN size_t headWord(int part) { return static_cast<size_t>(part) * kPartCtrlWords; }
TIDE_DC_FN size_t tailWord(int part) { return headWord(part) + kLineWords; }
TIDE_DC_FN size_t sentWord(int part) { return headWord(part) + 2 * kLineWords; }
TIDE_DC_FN size_t recvdWord(int part) { return sentWord(part) + 1; }

// Bytes of one rank's ring region for K slots of S bytes per part (every
// part up to kMaxBlocks has its FIFO).
TIDE_DC_FN size_t ringRegionBytes(uint32_t slots, uint32_t slotBytes) {
  return kRingCtrlBytes + static_cast<size_t>(kMaxBlocks) * slots * slotBytes;
}
TIDE_DC_FN size_t fifoOffset(int part, uint32_t slots, uint32_t slotBytes) {
  return kRingCtrlBytes + static_cast<size_t>(part) * slots * slotBytes;
}

// Kernel arguments: the same for every call of one shape (nothing per call).
struct RingArgs {
  int rank;
  int nranks;
  int nblocks;                         // parts; the grid has exactly this many blocks
  int elemSize;                        // 1, 2, 4 or 8
  uint64_t count;                      // elements
  uint64_t timeoutNs;                  // bound of each wait
  uint32_t slots;                      // K >= 2 (see "No deadlock")
  uint32_t slotBytes;                  // S: a positive multiple of 16
  int order[kMaxRanks];                // ring: position -> rank, a permutation of 0..n-1
  char* base[kMaxRanks];               // each rank's ring region (only neighbours used)
  const char* input;                   // this rank's input (user buffer)
  char* out;                           // this rank's output (may equal input)
  const volatile uint32_t* abortWord;  // nonzero: stop waiting
  uint32_t* errorWord;                 // first error code of this rank
};

// Platform interface P (one instance per part; on the GPU per block), the
// synchronisation calls of device_coll_logic.h (leader, share, barrier,
// signal, poll, nowNs, aborted, pause, setError) plus the element work over
// `len` elements at already offset pointers (16-byte aligned when the user
// buffers are):
//   void combine(char* out, char* out2, const char* acc, const char* own,
//                uint64_t len, bool last)
//       out[i] (and out2[i] unless null) = acc[i] op own[i]; `last`: the
//       value is final (Avg divides it); out may alias own at the same index
//   void copy(char* out, char* out2, const char* src, uint64_t len)

// Position of this rank in the ring, or -1.
TIDE_DC_FN int ringPos(const RingArgs& a) {
  for (int q = 0; q < a.nranks; ++q) {
    if (a.order[q] == a.rank) return q;
  }
  return -1;
}

// True when the arguments are usable (order is a permutation, sizes sane).
TIDE_DC_FN bool ringArgsValid(const RingArgs& a) {
  if (a.nranks < 1 || a.nranks > kMaxRanks || a.nblocks < 1 || a.nblocks > kMaxBlocks) {
    return false;
  }
  if (a.elemSize != 1 && a.elemSize != 2 && a.elemSize != 4 && a.elemSize != 8) return false;
  if (a.slots < 2 || a.slotBytes < 16 || a.slotBytes % 16 != 0) return false;
  if (a.rank < 0 || a.rank >= a.nranks) return false;
  unsigned seen = 0;
  for (int q = 0; q < a.nranks; ++q) {
    const int r = a.order[q];
    if (r < 0 || r >= a.nranks || (seen & (1u << r)) != 0) return false;
    seen |= 1u << r;
  }
  return true;
}

// Chunk c of part `part`.
TIDE_DC_FN Range ringChunk(const RingArgs& a, int part, int c) {
  const uint64_t unit = unitOf(a.elemSize);
  return pieceOf(pieceOf(Range{0, a.count}, a.nblocks, part, unit), a.nranks, c, unit);
}

// Waits until *word >= target. Leader only. Returns 0, or the error code
// (also stored).
TIDE_DC_TEMPLATE
template <class P>
TIDE_DC_FN uint32_t waitAtLeast(P& p, const RingArgs& a, const uint64_t* word, uint64_t target,
                                int phase, int peer, int part) {
  return dc::waitWordAtLeast(p, word, target, p.nowNs(), a.timeoutNs, a.abortWord, a.errorWord,
                             phase, peer, part);
}

// One part of one ring All-Reduce call. Returns 0 or the error code. Every
// part 0..nblocks-1 of every rank must run it once per call; parts of one
// rank may run in any order or concurrently.
TIDE_DC_TEMPLATE
template <class P>
TIDE_DC_FN uint32_t ringPart(P& p, const RingArgs& a, int part) {
  const int pos = ringPos(a);
  if (!ringArgsValid(a) || pos < 0) {
    const uint32_t code = encodeError(kErrBadArgs, kRingPhaseArgs, a.rank & 0xff, part);
    if (p.leader()) p.setError(a.errorWord, code);
    return code;
  }
  const int n = a.nranks;
  const uint64_t es = static_cast<uint64_t>(a.elemSize);
  if (n == 1) {
    const Range r = pieceOf(Range{0, a.count}, a.nblocks, part, unitOf(a.elemSize));
    if (r.hi > r.lo && a.out != a.input) {
      p.copy(a.out + r.lo * es, nullptr, a.input + r.lo * es, r.hi - r.lo);
    }
    return 0;
  }
  const int next = a.order[(pos + 1) % n];
  const int prev = a.order[(pos + n - 1) % n];
  uint64_t* own = reinterpret_cast<uint64_t*>(a.base[a.rank]);
  const uint64_t* headIn = own + headWord(part);  // written by prev
  const uint64_t* tailIn = own + tailWord(part);  // written by next
  uint64_t* headOut = reinterpret_cast<uint64_t*>(a.base[next]) + headWord(part);
  uint64_t* tailOut = reinterpret_cast<uint64_t*>(a.base[prev]) + tailWord(part);
  const char* inFifo = a.base[a.rank] + fifoOffset(part, a.slots, a.slotBytes);
  char* outFifo = a.base[next] + fifoOffset(part, a.slots, a.slotBytes);
  const uint64_t slotElems = a.slotBytes / es;
  const uint64_t k = a.slots;

  uint64_t sent = 0;
  uint64_t recvd = 0;
  if (p.leader()) {
    sent = p.poll(own + sentWord(part));
    recvd = p.poll(own + recvdWord(part));
  }
  sent = p.share(sent);
  recvd = p.share(recvd);

  // Rounds: round j moves piece j (slot-sized) of every message. Every step
  // of a round hands over one piece, empty where the chunk is shorter, so the
  // sequence is strictly send, receive, send, receive, ... (see above).
  uint64_t rounds = 0;
  for (int c = 0; c < n; ++c) {
    const Range ch = ringChunk(a, part, c);
    const uint64_t pieces = (ch.hi - ch.lo + slotElems - 1) / slotElems;
    if (pieces > rounds) rounds = pieces;
  }
  for (uint64_t j = 0; j < rounds; ++j) {
    for (int m = 0; m <= 2 * n - 2; ++m) {
      const Range ch = ringChunk(a, part, ((pos - m) % n + n) % n);
      const uint64_t off = j * slotElems;
      const uint64_t lo = ch.hi - ch.lo > off ? ch.lo + off : ch.hi;
      const uint64_t len = ch.hi - lo < slotElems ? ch.hi - lo : slotElems;
      const bool recv = m >= 1;
      const bool send = m <= 2 * n - 3;
      uint32_t code = 0;
      if (p.leader()) {
        if (recv) code = waitAtLeast(p, a, headIn, recvd + 1, kRingPhaseData, prev, part);
        if (code == 0 && send && sent >= k) {
          code = waitAtLeast(p, a, tailIn, sent - k + 1, kRingPhaseSpace, next, part);
        }
      }
      code = static_cast<uint32_t>(p.share(code));
      if (code != 0) return code;
      const char* src = inFifo + (recvd % k) * a.slotBytes;
      char* dst = outFifo + (sent % k) * a.slotBytes;
      const char* mine = a.input + lo * es;
      char* out = a.out + lo * es;
      if (m == 0) {
        p.copy(dst, nullptr, mine, len);
      } else if (m < n - 1) {
        p.combine(dst, nullptr, src, mine, len, false);
      } else if (m == n - 1) {
        p.combine(out, dst, src, mine, len, true);
      } else if (m < 2 * n - 2) {
        p.copy(out, dst, src, len);
      } else {
        p.copy(out, nullptr, src, len);
      }
      p.barrier();  // the whole block is done with both slots
      if (p.leader()) {
        if (recv) p.signal(tailOut, recvd + 1);
        if (send) p.signal(headOut, sent + 1);
      }
      if (recv) ++recvd;
      if (send) ++sent;
    }
  }
  if (p.leader()) {
    p.signal(own + sentWord(part), sent);
    p.signal(own + recvdWord(part), recvd);
  }
  return 0;
}

}  // namespace tide::cuda::ring
