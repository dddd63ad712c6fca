// A core Connection (core/transport.h) over one pair of net comms
// (include/tide/net.h): sendComm to the peer, recvComm from it.
//
// Each posted transfer of n > 0 bytes is cut into chunks of `chunk` bytes
// (both sides cut identically: the knob is job-wide and sizes agree), each
// chunk one net message with tag (message seq << 16 | chunk index), so a
// mismatched call shows as a tag or size error instead of corruption. Up to
// `inflight` chunks per direction are outstanding at once. A reducing
// receive lands in a bounce buffer and is combined into place when its
// chunk completes (chunk is a multiple of 4096, hence of any element size).
//
// Threading: one thread at a time (transport.h). Owns the two comms and
// closes them on destruction (closing is bounded; see net.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "core/transport.h"
#include "tide/net.h"

namespace tide {

class NetConnection final : public Connection {
 public:
  NetConnection(const tideNet_v1_t* net, void* sendComm, void* recvComm, int peer, int channel,
                size_t chunk, int inflight);
  ~NetConnection() override;

  Status postSend(const void* buf, size_t bytes, uint64_t* ticket) override;
  Status postRecv(void* buf, size_t bytes, const RecvReduce* rr, uint64_t* ticket) override;
  Status progress(bool* moved) override;
  uint64_t sendsDone() const override { return sendsDone_; }
  uint64_t recvsDone() const override { return recvsDone_; }
  int pollFd() const override;
  bool busy() const override { return !sends_.empty() || !recvs_.empty(); }

  // Tag of chunk `idx` of message `seq` (exposed for tests).
  static int chunkTag(uint32_t seq, size_t idx) {
    return static_cast<int>(((seq & 0x7fffu) << 16) | (idx & 0xffffu));
  }

 private:
  struct Op {
    uint8_t* buf;
    size_t bytes;
    uint32_t seq;
    size_t posted = 0;    // bytes handed to the net
    int outstanding = 0;  // chunks handed over and not complete
    bool reduce = false;
    RecvReduce rr{};
  };
  struct InFlight {
    void* req;
    Op* op;  // stable: ops live in deques and are popped only when complete
    size_t offset;
    size_t len;
    int bounce;  // index into bounce_ (reducing receive) or -1
  };

  Status progressSends(bool* moved);
  Status progressRecvs(bool* moved);
  Status fail(Status s);

  const tideNet_v1_t* net_;
  void* sendComm_;
  void* recvComm_;
  int peer_;
  int channel_;
  size_t chunk_;
  size_t inflight_;
  int sendFd_ = -1, recvFd_ = -1;
  Status error_;

  std::deque<Op> sends_, recvs_;
  std::deque<InFlight> sendReqs_, recvReqs_;
  size_t sendCursor_ = 0, recvCursor_ = 0;  // first op in the deque with bytes left to post
  uint64_t sendsPosted_ = 0, sendsDone_ = 0, recvsPosted_ = 0, recvsDone_ = 0;
  uint32_t sendSeq_ = 0, recvSeq_ = 0;
  std::vector<std::unique_ptr<uint8_t[]>> bounce_;
  std::vector<int> freeBounce_;
};

}  // namespace tide
