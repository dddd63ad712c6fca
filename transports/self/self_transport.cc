// The self transport: a rank sending to itself. Sends and receives are
// matched in posting order and copied (or combined) directly.
#include <cstring>
#include <deque>
#include <memory>
#include <vector>

#include "core/registry.h"
#include "core/transport.h"

namespace tide {

namespace {

class SelfConnection final : public Connection {
 public:
  Status postSend(const void* buf, size_t bytes, uint64_t* ticket) override {
    *ticket = ++sendsPosted_;
    if (bytes == 0) {
      zeroSends_.push_back(*ticket);
    } else {
      sends_.push_back({buf, bytes, *ticket});
    }
    return Status::Ok();
  }

  Status postRecv(void* buf, size_t bytes, const RecvReduce* rr, uint64_t* ticket) override {
    *ticket = ++recvsPosted_;
    Recv r{buf, bytes, *ticket, rr ? *rr : RecvReduce{}};
    if (bytes == 0) {
      zeroRecvs_.push_back(*ticket);
    } else {
      recvs_.push_back(r);
    }
    return Status::Ok();
  }

  Status progress(bool* moved) override {
    // 0-byte posts complete in order with no data.
    while (!zeroSends_.empty() && zeroSends_.front() == sendsDone_ + 1) {
      zeroSends_.pop_front();
      ++sendsDone_;
      *moved = true;
    }
    while (!zeroRecvs_.empty() && zeroRecvs_.front() == recvsDone_ + 1) {
      zeroRecvs_.pop_front();
      ++recvsDone_;
      *moved = true;
    }
    while (!sends_.empty() && !recvs_.empty() && sends_.front().ticket == sendsDone_ + 1 &&
           recvs_.front().ticket == recvsDone_ + 1) {
      Send s = sends_.front();
      Recv r = recvs_.front();
      if (s.bytes != r.bytes)
        return invalidUsage("send to self of %zu bytes matched a receive of %zu bytes", s.bytes,
                            r.bytes);
      if (r.rr.fn != nullptr) {
        r.rr.fn(r.buf, r.rr.src, s.buf, s.bytes / r.rr.elemSize);
      } else if (r.buf != s.buf) {
        memmove(r.buf, s.buf, s.bytes);
      }
      sends_.pop_front();
      recvs_.pop_front();
      ++sendsDone_;
      ++recvsDone_;
      *moved = true;
      while (!zeroSends_.empty() && zeroSends_.front() == sendsDone_ + 1) {
        zeroSends_.pop_front();
        ++sendsDone_;
      }
      while (!zeroRecvs_.empty() && zeroRecvs_.front() == recvsDone_ + 1) {
        zeroRecvs_.pop_front();
        ++recvsDone_;
      }
    }
    return Status::Ok();
  }

  uint64_t sendsDone() const override { return sendsDone_; }
  uint64_t recvsDone() const override { return recvsDone_; }
  bool busy() const override { return sendsDone_ < sendsPosted_ || recvsDone_ < recvsPosted_; }

 private:
  struct Send {
    const void* buf;
    size_t bytes;
    uint64_t ticket;
  };
  struct Recv {
    void* buf;
    size_t bytes;
    uint64_t ticket;
    RecvReduce rr;
  };
  std::deque<Send> sends_;
  std::deque<Recv> recvs_;
  std::deque<uint64_t> zeroSends_, zeroRecvs_;
  uint64_t sendsPosted_ = 0, recvsPosted_ = 0, sendsDone_ = 0, recvsDone_ = 0;
};

class SelfTransport final : public Transport {
 public:
  const char* name() const override { return "self"; }
  int priority() const override { return 100; }
  bool canConnect(const PeerInfo& me, const PeerInfo& peer) const override {
    return me.rank == peer.rank;
  }
  Status connect(SetupContext& /*ctx*/, const std::vector<int>& peers,
                 std::vector<std::unique_ptr<Connection>>* out) override {
    for (size_t i = 0; i < peers.size() * kNumChannels; ++i) {
      out->push_back(std::make_unique<SelfConnection>());
    }
    return Status::Ok();
  }
};

}  // namespace

TIDE_ON_LOAD(static SelfTransport transport; ::tide::registerTransport(&transport));

}  // namespace tide
