// Verbs net wiring without a device: the set-up wire formats (listen handle,
// QP/connection info), immediates, work-request ids and their mapping back
// to messages, WR sizing against the send-queue budget, the sender's grant
// check (size, tag) and the receiver's view of a rejected message, GID
// selection from a table, and completion-error mapping. A loopback run
// drives the whole protocol through these functions, with memcpy standing in
// for RDMA writes and per-QP queues for the wire.
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <random>
#include <vector>

#include "tide/net.h"
#include "transports/ib/ib_engine.h"
#include "transports/ib/ib_logic.h"
#include "transports/ib/ib_wire.h"

namespace tide {
namespace {

TEST(IbWire, HandleRoundTripAndRejects) {
  static_assert(kIbHandleBytes <= kIbHandleStateOffset);
  static_assert(kIbHandleStateOffset + sizeof(void*) <= TIDE_NET_HANDLE_MAXSIZE);
  IbHandle h;
  h.nonce = 0x0123456789abcdefull;
  h.addrLen = 16;
  for (int i = 0; i < 16; ++i) h.addr[i] = static_cast<uint8_t>(i + 1);
  uint8_t buf[TIDE_NET_HANDLE_MAXSIZE];
  memset(buf, 0xAA, sizeof(buf));
  ibHandleEncode(h, buf);
  EXPECT_EQ(buf[0], 'T');  // little-endian magic "TIBH"
  EXPECT_EQ(buf[3], 'H');
  EXPECT_EQ(buf[kIbHandleBytes], 0xAA) << "writes only kIbHandleBytes";
  IbHandle back;
  ASSERT_TRUE(ibHandleDecode(buf, &back).ok());
  EXPECT_EQ(back.nonce, h.nonce);
  EXPECT_EQ(back.addrLen, 16);
  EXPECT_EQ(memcmp(back.addr, h.addr, 16), 0);

  uint8_t bad[kIbHandleBytes];
  memcpy(bad, buf, sizeof(bad));
  bad[0] ^= 1;
  EXPECT_EQ(ibHandleDecode(bad, &back).code(), tideInvalidArgument);
  memcpy(bad, buf, sizeof(bad));
  bad[4] = 9;  // version
  Status s = ibHandleDecode(bad, &back);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("version"), std::string::npos) << s.message();
  memcpy(bad, buf, sizeof(bad));
  bad[6] = 200;  // address length
  EXPECT_FALSE(ibHandleDecode(bad, &back).ok());
  uint8_t zeros[kIbHandleBytes] = {};
  EXPECT_FALSE(ibHandleDecode(zeros, &back).ok()) << "a socket-net or empty handle";
}

IbConnInfo sampleInfo(int nqps) {
  IbConnInfo c;
  c.role = IbRole::Sender;
  c.nonce = 77;
  c.nqps = nqps;
  c.linkLayer = 2;
  c.mtu = 5;
  c.lid = 0x1234;
  for (int i = 0; i < 16; ++i) c.gid[i] = static_cast<uint8_t>(0xf0 + i);
  c.ctsAddr = 0x7fff00001000ull;
  c.ctsRkey = 0xdeadbeef;
  for (int q = 0; q < nqps; ++q) {
    c.qpn[q] = 0x100 + q;
    c.psn[q] = 0xfffff0 + q;
  }
  return c;
}

TEST(IbWire, ConnInfoRoundTrip) {
  for (int nqps : {1, 3, kIbMaxQps}) {
    IbConnInfo c = sampleInfo(nqps);
    uint8_t buf[kIbConnInfoBytes];
    ibConnInfoEncode(c, buf);
    IbConnInfo d;
    ASSERT_TRUE(ibConnInfoDecode(buf, sizeof(buf), &d).ok());
    EXPECT_EQ(d.role, IbRole::Sender);
    EXPECT_EQ(d.nonce, 77u);
    EXPECT_EQ(d.nqps, nqps);
    EXPECT_EQ(d.linkLayer, 2);
    EXPECT_EQ(d.mtu, 5);
    EXPECT_EQ(d.lid, 0x1234);
    EXPECT_EQ(memcmp(d.gid, c.gid, 16), 0);
    EXPECT_EQ(d.ctsAddr, c.ctsAddr);
    EXPECT_EQ(d.ctsRkey, c.ctsRkey);
    for (int q = 0; q < nqps; ++q) {
      EXPECT_EQ(d.qpn[q], c.qpn[q]);
      EXPECT_EQ(d.psn[q], c.psn[q]);
    }
  }
  // Byte layout is fixed (little-endian), independent of the struct.
  uint8_t buf[kIbConnInfoBytes];
  ibConnInfoEncode(sampleInfo(1), buf);
  EXPECT_EQ(memcmp(buf, "TIBC", 4), 0);
  EXPECT_EQ(buf[6], 1) << "role";
  EXPECT_EQ(buf[7], 1) << "QPs";
  EXPECT_EQ(buf[18], 0x34) << "LID low byte";
  EXPECT_EQ(buf[19], 0x12);
}

TEST(IbWire, ConnInfoRejectsMalformed) {
  uint8_t good[kIbConnInfoBytes];
  ibConnInfoEncode(sampleInfo(2), good);
  IbConnInfo d;
  EXPECT_FALSE(ibConnInfoDecode(good, kIbConnInfoBytes - 1, &d).ok()) << "short";
  auto mutate = [&](size_t off, uint8_t v) {
    uint8_t b[kIbConnInfoBytes];
    memcpy(b, good, sizeof(b));
    b[off] = v;
    return ibConnInfoDecode(b, sizeof(b), &d);
  };
  EXPECT_FALSE(mutate(0, 'X').ok()) << "magic";
  EXPECT_FALSE(mutate(4, 2).ok()) << "version";
  EXPECT_FALSE(mutate(6, 3).ok()) << "role";
  EXPECT_FALSE(mutate(7, 0).ok()) << "0 QPs";
  EXPECT_FALSE(mutate(7, kIbMaxQps + 1).ok()) << "17 QPs";
  EXPECT_FALSE(mutate(17, 0).ok()) << "MTU code 0";
  EXPECT_FALSE(mutate(17, 6).ok()) << "MTU code 6";
  EXPECT_FALSE(mutate(48 + 3, 1).ok()) << "QPN beyond 24 bits";
  IbConnInfo zeroQpn = sampleInfo(2);
  zeroQpn.qpn[1] = 0;
  uint8_t b[kIbConnInfoBytes];
  ibConnInfoEncode(zeroQpn, b);
  EXPECT_FALSE(ibConnInfoDecode(b, sizeof(b), &d).ok()) << "QPN 0";
  IbConnInfo bigPsn = sampleInfo(2);
  bigPsn.psn[0] = 0x1000000;
  ibConnInfoEncode(bigPsn, b);
  EXPECT_FALSE(ibConnInfoDecode(b, sizeof(b), &d).ok()) << "PSN beyond 24 bits";
  IbConnInfo noFifo = sampleInfo(1);
  noFifo.ctsAddr = 0;
  noFifo.ctsRkey = 0;
  ibConnInfoEncode(noFifo, b);
  EXPECT_FALSE(ibConnInfoDecode(b, sizeof(b), &d).ok()) << "sender without CTS FIFO";
  noFifo.role = IbRole::Receiver;
  ibConnInfoEncode(noFifo, b);
  EXPECT_TRUE(ibConnInfoDecode(b, sizeof(b), &d).ok()) << "receivers have no FIFO";
  EXPECT_EQ(ibPathMtu(5, 3), 3);
  EXPECT_EQ(ibPathMtu(2, 4), 2);
}

TEST(IbImmData, EncodeDecode) {
  uint64_t bytes;
  bool rej;
  for (uint64_t b : {uint64_t{0}, uint64_t{1}, uint64_t{4096}, uint64_t{kIbImmBytesMask}}) {
    ibImmDecode(ibImmEncode(b, false), &bytes, &rej);
    EXPECT_EQ(bytes, b);
    EXPECT_FALSE(rej);
    ibImmDecode(ibImmEncode(b, true), &bytes, &rej);
    EXPECT_EQ(bytes, b);
    EXPECT_TRUE(rej);
  }
  ibImmDecode(ibImmEncode(uint64_t{1} << 33, true), &bytes, &rej);
  EXPECT_EQ(bytes, kIbImmBytesMask) << "saturates";
  EXPECT_TRUE(rej);
  // planStripes never produces a share that would collide with the flag.
  std::vector<IbWr> wrs;
  EXPECT_TRUE(planStripes(size_t{1} << 30, 1, size_t{64} << 20, &wrs).ok());
  EXPECT_FALSE(planStripes(size_t{1} << 31, 1, size_t{64} << 20, &wrs).ok());
}

TEST(IbWrIds, RoundTripAndUnknown) {
  for (IbWrKind k : {IbWrKind::Data, IbWrKind::Cts, IbWrKind::RecvData, IbWrKind::RecvCts}) {
    for (int qp : {0, 1, kIbMaxQps - 1}) {
      for (uint64_t seq : {uint64_t{0}, uint64_t{31}, (uint64_t{1} << 48) - 1}) {
        IbWrId id{};
        ASSERT_TRUE(ibWrIdDecode(ibWrIdEncode(k, qp, seq), &id));
        EXPECT_EQ(id.kind, k);
        EXPECT_EQ(id.qp, qp);
        EXPECT_EQ(id.seq, seq);
      }
    }
  }
  IbWrId id{};
  EXPECT_EQ((ibWrIdDecode(ibWrIdEncode(IbWrKind::Data, 2, uint64_t{1} << 48), &id), id.seq), 0u)
      << "sequence numbers wrap at 48 bits";
  EXPECT_FALSE(ibWrIdDecode(0, &id)) << "kind 0";
  EXPECT_FALSE(ibWrIdDecode(uint64_t{5} << 56, &id)) << "kind 5";
  EXPECT_FALSE(ibWrIdDecode((uint64_t{1} << 56) | (uint64_t{kIbMaxQps} << 48), &id)) << "QP 16";
}

TEST(IbWrSizing, FitsTheSendQueueBudget) {
  for (int nqps : {1, 2, 3, 16}) {
    for (int budget : {1, 4, 16}) {
      for (size_t bytes :
           {size_t{0}, size_t{1}, size_t{4095}, size_t{1} << 20, (size_t{16} << 20) + 3,
            size_t{64} << 20, (size_t{1} << 30) - 1, size_t{1} << 30}) {
        size_t w = ibWrBytes(bytes, nqps, kIbDefaultMaxWr, budget);
        EXPECT_EQ(w % 4096, 0u);
        EXPECT_GE(w, kIbDefaultMaxWr);
        std::vector<IbWr> wrs;
        ASSERT_TRUE(planStripes(bytes, nqps, w, &wrs).ok());
        std::vector<int> perQp(nqps, 0);
        for (const IbWr& x : wrs) ++perQp[x.qp];
        for (int q = 0; q < nqps; ++q)
          EXPECT_LE(perQp[q], budget) << bytes << " B, " << nqps << " QPs";
      }
    }
  }
  EXPECT_EQ(ibWrBytes(1000, 1, 1 << 20, 16), size_t{1} << 20) << "small: one chunk";
}

TEST(IbGrant, SenderChecksSizeAndTag) {
  CtsEntry cts{};
  cts.size = 100;
  cts.tag = 7;
  EXPECT_EQ(ibCtsMismatch(cts, 3, 100, 7), "");
  EXPECT_EQ(ibCtsMismatch(cts, 3, 0, 7), "");
  std::string big = ibCtsMismatch(cts, 3, 101, 7);
  EXPECT_NE(big.find("101-byte"), std::string::npos) << big;
  EXPECT_NE(big.find("100-byte"), std::string::npos) << big;
  std::string tag = ibCtsMismatch(cts, 3, 10, 8);
  EXPECT_NE(tag.find("tag 8"), std::string::npos) << tag;
  EXPECT_NE(tag.find("expects 7"), std::string::npos) << tag;
}

TEST(IbGrant, ReceiverSeesRejectedMessageOnce) {
  ImmTracker t(3);
  // Message 0 normal, message 1 rejected (every QP carries the sender's size).
  for (int q = 0; q < 3; ++q) ASSERT_TRUE(t.onImm(q, ibImmEncode(10 * (q + 1), false)).ok());
  for (int q = 2; q >= 0; --q) ASSERT_TRUE(t.onImm(q, ibImmEncode(5000, true)).ok());
  uint64_t bytes;
  bool rej = true;
  ASSERT_TRUE(t.popComplete(&bytes, &rej));
  EXPECT_EQ(bytes, 60u);
  EXPECT_FALSE(rej);
  ASSERT_TRUE(t.popComplete(&bytes, &rej));
  EXPECT_EQ(bytes, 5000u) << "the sender's size, not 3x it";
  EXPECT_TRUE(rej);
}

IbGidEntry gid(int index, IbGidType type, std::initializer_list<uint8_t> head,
               std::initializer_list<uint8_t> tail) {
  IbGidEntry g;
  g.index = index;
  g.type = type;
  int i = 0;
  for (uint8_t b : head) g.raw[i++] = b;
  i = 16 - static_cast<int>(tail.size());
  for (uint8_t b : tail) g.raw[i++] = b;
  return g;
}

TEST(IbGid, SelectionFromTable) {
  using T = IbGidType;
  IbGidEntry v1ll = gid(0, T::RoceV1, {0xfe, 0x80}, {1});
  IbGidEntry v2ll = gid(1, T::RoceV2, {0xfe, 0x80}, {1});
  IbGidEntry v1v4 = gid(2, T::RoceV1, {}, {0xff, 0xff, 10, 0, 0, 1});
  IbGidEntry v2v4 = gid(3, T::RoceV2, {}, {0xff, 0xff, 10, 0, 0, 1});
  IbGidEntry v2v6 = gid(4, T::RoceV2, {0x20, 0x01, 0x0d, 0xb8}, {5});
  std::vector<IbGidEntry> full = {v1ll, v2ll, v1v4, v2v4, v2v6};
  EXPECT_EQ(ibSelectGid(full, -1, true), 3) << "RoCE v2 IPv4-mapped first";
  EXPECT_EQ(ibSelectGid({v1ll, v2ll, v1v4, v2v6}, -1, true), 3) << "then v2 global (index 4)";
  EXPECT_EQ(ibSelectGid({v1ll, v2ll, v1v4}, -1, true), 2) << "then any IPv4-mapped";
  EXPECT_EQ(ibSelectGid({v1ll, v2ll}, -1, true), 0) << "else the first";
  EXPECT_EQ(ibSelectGid(full, 1, true), 1) << "TIDE_IB_GID_INDEX wins";
  EXPECT_EQ(ibSelectGid(full, 9, true), -1) << "an index not in the table";
  // Tables may have holes: positions are not indices.
  std::vector<IbGidEntry> holes = {v1ll, v2v6};
  EXPECT_EQ(ibSelectGid(holes, 4, true), 1);
  EXPECT_EQ(ibSelectGid({}, -1, true), -1);
  IbGidEntry ib0 = gid(0, T::Ib, {0xfe, 0x80}, {7});
  IbGidEntry ib1 = gid(1, T::Ib, {0x20, 0x01}, {7});
  EXPECT_EQ(ibSelectGid({ib0, ib1}, -1, false), 0) << "InfiniBand: index 0";
  EXPECT_EQ(ibSelectGid({ib0, ib1}, 1, false), 1);
}

TEST(IbErrors, CompletionStatusMapping) {
  Status s = ibCompletionError(kIbWcRetryExcErr, "transport retry counter exceeded", 0x81,
                               "10.0.0.2:4000 (mlx5_0:1, local QPN 77)", "RDMA write of data");
  EXPECT_EQ(s.code(), tideRemoteError);
  EXPECT_NE(s.message().find("10.0.0.2:4000"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("transport retry counter exceeded"), std::string::npos);
  EXPECT_NE(s.message().find("status 12"), std::string::npos);
  EXPECT_NE(s.message().find("0x81"), std::string::npos);
  EXPECT_NE(s.message().find("stopped answering"), std::string::npos) << "a hint";
  EXPECT_EQ(ibCompletionError(kIbWcWrFlushErr, "flush", 0, "p", "x").code(), tideRemoteError);
  EXPECT_EQ(ibCompletionError(kIbWcRnrRetryExcErr, "rnr", 0, "p", "x").code(), tideRemoteError);
  EXPECT_EQ(ibCompletionError(10, "remote access error", 0, "p", "x").code(), tideRemoteError);
  EXPECT_EQ(ibCompletionError(kIbWcLocProtErr, "local protection error", 0, "p", "x").code(),
            tideSystemError);
  EXPECT_EQ(ibCompletionError(kIbWcLocLenErr, "len", 0, "p", "x").code(), tideSystemError);
  EXPECT_NE(ibCompletionError(3, nullptr, 0, "p", "x").message().find("unknown"),
            std::string::npos);
}

// ---- The engines the net runs, over an in-memory wire --------------------------------

// Plays an HCA pair: writes travel per QP in order (delivered at random
// times, interleaved across QPs), data lands by memcpy at delivery, a write
// with immediate consumes the peer's oldest receive WR on that QP (none
// posted = RNR, a test failure) and completes it there; signaled writes
// complete on the sender after delivery (the acknowledgement). Send and
// receive queue occupancy is checked against the depths the net creates.
struct Wire;

struct WireSide : IbPoster {
  struct Op {
    uint64_t wrId;
    const void* local;
    size_t len;
    uint64_t remote;
    bool withImm, signaled;
    uint32_t imm;
  };
  struct Qp {
    std::deque<uint64_t> rq;                   // posted receive WRs
    std::deque<Op> flight;                     // writes not yet delivered
    std::deque<std::pair<uint64_t, bool>> sq;  // posted, not retired (wrId, signaled)
  };
  Wire* wire = nullptr;
  WireSide* peer = nullptr;
  std::vector<Qp> qps;
  std::deque<IbCompletion> cq;
  size_t sqDepth = 0, rqDepth = kIbSlots;
  std::string failure;

  Status write(int qp, uint64_t wrId, const void* local, uint32_t, size_t len, uint64_t remote,
               uint32_t, bool withImm, uint32_t imm, bool signaled) override {
    Qp& q = qps.at(qp);
    if (q.sq.size() >= sqDepth) failure = "send queue overflow";
    q.sq.push_back({wrId, signaled});
    q.flight.push_back(Op{wrId, local, len, remote, withImm, signaled, imm});
    return Status::Ok();
  }
  Status recv(int qp, uint64_t wrId) override {
    Qp& q = qps.at(qp);
    if (q.rq.size() >= rqDepth) failure = "receive queue overflow";
    q.rq.push_back(wrId);
    return Status::Ok();
  }
  // Delivers the oldest write in flight on `qp`.
  bool deliver(int qp) {
    Qp& q = qps[qp];
    if (q.flight.empty()) return false;
    Op op = q.flight.front();
    q.flight.pop_front();
    if (op.len) memcpy(reinterpret_cast<void*>(op.remote), op.local, op.len);
    if (op.withImm) {
      Qp& pq = peer->qps[qp];
      if (pq.rq.empty()) {
        failure = "RNR: no receive WR posted";
        return false;
      }
      IbCompletion c;
      c.wrId = pq.rq.front();
      c.hasImm = true;
      c.imm = op.imm;
      pq.rq.pop_front();
      peer->cq.push_back(c);
    }
    if (op.signaled) {
      IbCompletion c;
      c.wrId = op.wrId;
      cq.push_back(c);
    }
    return true;
  }
  // Takes one completion off the CQ; a send completion retires its QP's
  // WRs up to it.
  bool poll(IbCompletion* out) {
    if (cq.empty()) return false;
    *out = cq.front();
    cq.pop_front();
    IbWrId id{};
    if (ibWrIdDecode(out->wrId, &id) && (id.kind == IbWrKind::Data || id.kind == IbWrKind::Cts)) {
      Qp& q = qps[id.qp];
      while (!q.sq.empty()) {
        auto f = q.sq.front();
        q.sq.pop_front();
        if (f.first == out->wrId && f.second) break;
      }
    }
    return true;
  }
};

struct Wire {
  WireSide s, r;  // sender's and receiver's HCA
  explicit Wire(int nqps, size_t senderSq, size_t receiverSq) {
    s.wire = r.wire = this;
    s.peer = &r;
    r.peer = &s;
    s.qps.resize(nqps);
    r.qps.resize(nqps);
    s.sqDepth = senderSq;
    r.sqDepth = receiverSq;
  }
};

struct EngineRun {
  int rejectAt = -1;    // message sent with a wrong tag
  int oversizeAt = -1;  // message larger than its receive
  int delivered = 0, failedAt = -1;
  Status receiverError;
};

// Runs `n` messages from an IbSender to an IbReceiver over the wire.
void runEngines(int nqps, int wrsPerMsg, int n, EngineRun* run, uint32_t seed) {
  std::mt19937 rng(seed);
  Wire w(nqps, size_t(kIbSlots) * wrsPerMsg, 2 * kIbSlots);
  std::vector<CtsEntry> fifo(kIbSlots), staging(kIbSlots);
  memset(static_cast<void*>(fifo.data()), 0, fifo.size() * sizeof(CtsEntry));
  IbSender snd(nqps, wrsPerMsg, fifo.data(), &w.s, "peer-r");
  IbReceiver rcv(nqps, staging.data(), 1, reinterpret_cast<uintptr_t>(fifo.data()), 2, 2 * kIbSlots,
                 &w.r, "peer-s");
  ASSERT_TRUE(snd.start().ok());
  ASSERT_TRUE(rcv.start().ok());
  std::vector<std::vector<uint8_t>> src(n), dst(n);
  std::vector<IbMsg> smsg(n), rmsg(n);
  for (int m = 0; m < n; ++m) {
    // Mostly small; a few of 5 MiB need several WRs per QP (chunking).
    size_t sz = (m % 9 == 0) ? 0 : (m % 97 == 1) ? (size_t{5} << 20) + 3 : rng() % (200 << 10);
    src[m].resize(sz);
    for (size_t i = 0; i < sz; ++i) src[m][i] = static_cast<uint8_t>(i * 31 + m);
    size_t cap = m == run->oversizeAt ? sz / 2 : sz + rng() % 100;
    dst[m].assign(cap + 1, 0xEE);
    smsg[m].buf = src[m].data();
    smsg[m].size = sz;
    smsg[m].tag = m == run->rejectAt ? -5 : m;
    rmsg[m].buf = dst[m].data();
    rmsg[m].size = cap;
    rmsg[m].tag = m;
  }
  int sq = 0, rp = 0, sdone = 0, rdone = 0;
  for (long iter = 0; iter < 20000000 && rdone < n; ++iter) {
    ASSERT_EQ(w.s.failure, "");
    ASSERT_EQ(w.r.failure, "");
    switch (rng() % 6) {
      case 0:
        for (int k = rng() % 4; k >= 0 && rp < n && rcv.canPost(); --k)
          ASSERT_TRUE(rcv.post(&rmsg[rp++]).ok());
        break;
      case 1:
        for (int k = rng() % 4; k >= 0 && sq < n; --k) snd.queue(&smsg[sq++]);
        ASSERT_TRUE(snd.progress().ok());
        break;
      case 2: {
        int q = static_cast<int>(rng() % nqps);
        for (int k = rng() % 8; k >= 0; --k)
          if (!((rng() & 1) ? w.s : w.r).deliver(q)) break;
        break;
      }
      case 3: {
        IbCompletion c;
        for (int k = rng() % 8; k >= 0 && w.s.poll(&c); --k) ASSERT_TRUE(snd.onCompletion(c).ok());
        ASSERT_TRUE(snd.progress().ok());
        while (sdone < sq && smsg[sdone].done) ++sdone;
        break;
      }
      default: {
        IbCompletion c;
        for (int k = rng() % 8; k >= 0 && w.r.poll(&c); --k) ASSERT_TRUE(rcv.onCompletion(c).ok());
        Status s = rcv.progress();
        while (rdone < rp && rmsg[rdone].done) {
          ASSERT_EQ(rmsg[rdone].bytes, src[rdone].size()) << "message " << rdone;
          if (!src[rdone].empty()) {  // an empty vector's data() is null: no memcmp
            ASSERT_EQ(memcmp(dst[rdone].data(), src[rdone].data(), src[rdone].size()), 0);
          }
          ASSERT_EQ(dst[rdone][src[rdone].size()], 0xEE) << "nothing past the message";
          ++rdone;
        }
        if (!s.ok()) {
          run->receiverError = s;
          run->failedAt = rdone;
          run->delivered = rdone;
          return;
        }
      }
    }
  }
  run->delivered = rdone;
  ASSERT_EQ(rdone, n) << "stalled";
  // Every send completes once its acknowledgement is polled.
  for (int k = 0; k < 100000 && sdone < n; ++k) {
    for (int q = 0; q < nqps; ++q) w.s.deliver(q);
    IbCompletion c;
    while (w.s.poll(&c)) ASSERT_TRUE(snd.onCompletion(c).ok());
    ASSERT_TRUE(snd.progress().ok());
    while (sdone < n && smsg[sdone].done) ++sdone;
  }
  EXPECT_EQ(sdone, n);
  EXPECT_EQ(snd.queued(), 0u);
}

TEST(IbEngine, ManyMessagesOverSeveralQps) {
  for (int nqps : {1, 3}) {
    EngineRun run;
    runEngines(nqps, 4, 400, &run, 11 + nqps);
    EXPECT_TRUE(run.receiverError.ok()) << run.receiverError.message();
    EXPECT_EQ(run.delivered, 400);
  }
}

TEST(IbEngine, WrongTagAndOversizedFailExactlyThatReceive) {
  EngineRun tag;
  tag.rejectAt = 77;
  runEngines(2, 4, 120, &tag, 5);
  EXPECT_EQ(tag.failedAt, 77);
  EXPECT_EQ(tag.receiverError.code(), tideInvalidUsage);
  EXPECT_NE(tag.receiverError.message().find("tag"), std::string::npos)
      << tag.receiverError.message();
  EXPECT_NE(tag.receiverError.message().find("peer-s"), std::string::npos);
  EngineRun big;
  big.oversizeAt = 40;
  runEngines(3, 4, 120, &big, 6);
  EXPECT_EQ(big.failedAt, 40);
  EXPECT_EQ(big.receiverError.code(), tideInvalidUsage);
  EXPECT_NE(big.receiverError.message().find("byte receive"), std::string::npos)
      << big.receiverError.message();
}

TEST(IbEngine, FailedAndUnknownCompletions) {
  Wire w(1, 64, 64);
  std::vector<CtsEntry> fifo(kIbSlots), staging(kIbSlots);
  IbSender snd(1, 2, fifo.data(), &w.s, "10.1.1.1:999 (mlx5_0:1, local QPN 5)");
  IbReceiver rcv(1, staging.data(), 1, 0x1000, 2, 64, &w.r, "peer");
  IbCompletion bad;
  bad.wrId = ibWrIdEncode(IbWrKind::Data, 0, 0);
  bad.status = kIbWcRetryExcErr;
  bad.statusStr = "transport retry counter exceeded";
  Status s = snd.onCompletion(bad);
  EXPECT_EQ(s.code(), tideRemoteError);
  EXPECT_NE(s.message().find("10.1.1.1:999"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("RDMA write of data"), std::string::npos) << s.message();
  IbCompletion stray;
  stray.wrId = 0x42;
  EXPECT_EQ(rcv.onCompletion(stray).code(), tideInternalError);
  IbCompletion noImm;
  noImm.wrId = ibWrIdEncode(IbWrKind::RecvData, 0, 0);
  EXPECT_EQ(rcv.onCompletion(noImm).code(), tideInternalError) << "data without immediate";
  IbCompletion wrongSide;
  wrongSide.wrId = ibWrIdEncode(IbWrKind::Cts, 0, 0);
  EXPECT_FALSE(snd.onCompletion(wrongSide).ok()) << "a grant-write completion on a sender";
}

}  // namespace
}  // namespace tide
