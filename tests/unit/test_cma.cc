// Single-copy (rendezvous) path of the shm transport: the FIFO descriptor
// protocol and process_vm_readv pulls, in one process (reading its own
// memory, which the kernel allows like any other same-user process) and
// from a child that has exited.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "tests/unit/shm_pair.h"
#include "transports/shm/cma.h"
#include "transports/shm/fifo.h"

namespace tide {
namespace {

using shm::RecvOp;
using shm::SendOp;
using shmtest::FifoMem;
using shmtest::sumInt32;

SendOp rendezvousSend(const void* buf, size_t bytes, uint32_t seq, uint64_t msgNum) {
  SendOp op{static_cast<const char*>(buf), bytes, 0, seq};
  op.rendezvous = true;
  op.pid = static_cast<int32_t>(getpid());
  op.msgNum = msgNum;
  op.tag = 99;
  return op;
}

TEST(Cma, ProbeReadsOwnWord) {
  EXPECT_TRUE(shm::cmaProbe(getpid(), shm::cmaProbeAddress(), shm::cmaProbeValue()));
  EXPECT_FALSE(shm::cmaProbe(getpid(), shm::cmaProbeAddress(), shm::cmaProbeValue() + 1));
}

// A descriptor takes one slot; the receiver pulls in several calls (maxPull)
// and acks the message number only when every byte is in.
TEST(Cma, RendezvousCopyPullsInPiecesThenAcks) {
  FifoMem f(2, 128);
  const size_t n = (3u << 20) + 5;
  std::vector<unsigned char> in(n), out(n + 1, 0xee);
  for (size_t i = 0; i < n; ++i) in[i] = static_cast<unsigned char>(i * 13 + (i >> 11));
  SendOp sop = rendezvousSend(in.data(), n, 4, 1004);
  EXPECT_EQ(shm::pushMessage(f.view, sop), 1u);
  EXPECT_TRUE(sop.done());
  RecvOp rop;
  rop.buf = reinterpret_cast<char*>(out.data());
  rop.bytes = n;
  rop.seq = 4;
  rop.tag = 99;
  int calls = 0;
  while (!rop.done()) {
    EXPECT_EQ(f.view.rendezvousAcked(), 0u);
    size_t slots = 0;
    bool acked = false;
    ASSERT_TRUE(shm::pullMessage(f.view, rop, &slots, &acked, 1u << 20).ok());
    EXPECT_EQ(acked, rop.done());
    ASSERT_LT(++calls, 10);
  }
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(f.view.rendezvousAcked(), 1004u);
  EXPECT_EQ(std::memcmp(in.data(), out.data(), n), 0);
  EXPECT_EQ(out[n], 0xee);
  size_t b = 0;
  EXPECT_EQ(f.view.readSlot(&b), nullptr);
}

// Reducing receives go through the bounce buffer, in place and out of place,
// with a bounce size that does not divide the message.
TEST(Cma, RendezvousReduce) {
  for (bool inPlace : {false, true}) {
    FifoMem f(2, 64);
    const size_t ints = 100003;
    std::vector<int32_t> incoming(ints), src(ints), dst(ints, -1);
    for (size_t i = 0; i < ints; ++i) {
      incoming[i] = static_cast<int32_t>(i * 3 + 1);
      src[i] = static_cast<int32_t>(1000 - i);
    }
    if (inPlace) dst = src;
    SendOp sop = rendezvousSend(incoming.data(), ints * 4, 1, 1);
    shm::pushMessage(f.view, sop);
    std::vector<unsigned char> bounce(4 * 1000);
    RecvOp rop;
    rop.buf = reinterpret_cast<char*>(dst.data());
    rop.bytes = ints * 4;
    rop.seq = 1;
    rop.reduce = true;
    rop.rr = RecvReduce{sumInt32, inPlace ? dst.data() : src.data(), 4};
    rop.bounce = bounce.data();
    rop.bounceBytes = bounce.size();
    while (!rop.done()) {
      size_t slots = 0;
      ASSERT_TRUE(shm::pullMessage(f.view, rop, &slots).ok());
    }
    for (size_t i = 0; i < ints; ++i) {
      ASSERT_EQ(dst[i], static_cast<int32_t>(1000 - i + i * 3 + 1)) << "at " << i;
    }
  }
}

// The descriptor's length must match the receive, and the tag is checked.
TEST(Cma, RendezvousMismatchesFailWithoutWriting) {
  std::vector<char> in(1 << 20, 1), out(1 << 20, 0);
  {
    FifoMem f(2, 64);
    SendOp sop = rendezvousSend(in.data(), in.size(), 1, 1);
    shm::pushMessage(f.view, sop);
    RecvOp rop;
    rop.buf = out.data();
    rop.bytes = in.size() - 4;
    rop.seq = 1;
    size_t slots = 0;
    EXPECT_EQ(shm::pullMessage(f.view, rop, &slots).code(), tideInternalError);
  }
  {
    FifoMem f(2, 64);
    SendOp sop = rendezvousSend(in.data(), in.size(), 1, 1);
    shm::pushMessage(f.view, sop);
    RecvOp rop;
    rop.buf = out.data();
    rop.bytes = in.size();
    rop.seq = 1;
    rop.tag = 98;
    rop.peer = 2;
    size_t slots = 0;
    Status st = shm::pullMessage(f.view, rop, &slots);
    EXPECT_EQ(st.code(), tideInvalidUsage);
    EXPECT_NE(st.message().find("from rank 2"), std::string::npos) << st.message();
  }
  for (char c : out) ASSERT_EQ(c, 0);
}

// Reading a process that has exited is a remote error naming the rank.
TEST(Cma, ReadFromExitedPeerIsRemoteError) {
  std::vector<char> buf(4096, 3);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) _exit(0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  Status st = shm::cmaRead(pid, reinterpret_cast<uint64_t>(buf.data()), buf.data(), buf.size(), 5);
  EXPECT_EQ(st.code(), tideRemoteError) << st.message();
  EXPECT_NE(st.message().find("rank 5"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace tide
