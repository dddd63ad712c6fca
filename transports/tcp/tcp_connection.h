// One TCP data connection (core/transport.h Connection) over a connected,
// non-blocking stream socket.
//
// Wire format, per direction: each message of n > 0 bytes is a FrameHeader
// followed by the n payload bytes. 0-byte messages send nothing. Byte order
// is the host's (a mismatched peer fails the handshake's magic check).
//
// Threading: used by one thread at a time (transport.h); no locking.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>

#include "core/socket.h"
#include "core/transport.h"

namespace tide {

struct TcpFrameHeader {
  uint32_t magic;
  uint32_t seq;    // per direction, 0, 1, 2, ... over messages with bytes > 0
  uint64_t bytes;  // payload size; must equal the size the receiver posted
};
static_assert(sizeof(TcpFrameHeader) == 16);

constexpr uint32_t kTcpFrameMagic = 0x54644672;  // "rFdT"
// Staging buffer of a receive that reduces (RecvReduce).
constexpr size_t kTcpBounceBytes = 256 << 10;
// Most bytes one progress() call moves per direction, so one busy connection
// does not starve the others.
constexpr size_t kTcpProgressBudget = 8 << 20;

class TcpConnection final : public Connection {
 public:
  // Takes ownership of `sock` (connected; any stream socket works, e.g. a
  // socketpair in tests). Sets it non-blocking. `peerRank` and `channel`
  // only name the connection in error messages.
  TcpConnection(Socket sock, int peerRank, int channel, size_t bounceBytes = kTcpBounceBytes);
  ~TcpConnection() override = default;

  Status postSend(const void* buf, size_t bytes, uint64_t* ticket) override;
  Status postRecv(void* buf, size_t bytes, const RecvReduce* rr, uint64_t* ticket) override;
  Status progress(bool* moved) override;
  uint64_t sendsDone() const override { return sendsDone_; }
  uint64_t recvsDone() const override { return recvsDone_; }
  // Readable when a posted receive can move, writable when a send can.
  int pollFd() const override { return sock_.fd(); }
  bool pollForWrite() const override { return !sends_.empty(); }
  bool busy() const override { return !sends_.empty() || !recvs_.empty(); }

  int peerRank() const { return peer_; }

 private:
  struct SendOp {
    const uint8_t* buf;
    size_t bytes;
    size_t sent;  // header and payload bytes written so far
    TcpFrameHeader hdr;
  };
  struct RecvOp {
    uint8_t* buf;
    size_t bytes;
    bool reduce;
    RecvReduce rr;
    size_t done;  // payload bytes in their final place in buf
  };

  Status progressSends(bool* moved);
  Status progressRecvs(bool* moved);
  // Consumes n payload/header bytes just received for recvs_.front().
  Status absorb(size_t n);
  Status checkHeader(const RecvOp& op);
  Status fail(Status s);
  void completeSends(size_t n);

  Socket sock_;
  int peer_;
  int channel_;
  Status error_;  // sticky

  std::deque<SendOp> sends_;
  uint64_t sendsPosted_ = 0;
  uint64_t sendsDone_ = 0;
  uint32_t sendSeq_ = 0;

  std::deque<RecvOp> recvs_;
  uint64_t recvsPosted_ = 0;
  uint64_t recvsDone_ = 0;
  uint32_t recvSeq_ = 0;
  TcpFrameHeader rxHdr_{};  // header of recvs_.front()'s message
  size_t rxHdrGot_ = 0;
  size_t bounceBytes_;
  std::unique_ptr<uint8_t[]> bounce_;  // allocated by the first reducing receive
  size_t carry_ = 0;                   // bytes in bounce_ not yet reduced (< elemSize after absorb)
};

}  // namespace tide
