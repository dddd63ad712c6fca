// The net transport's device-memory path (GPUDirect RDMA plumbing) and its
// failure handling, on the CPU: real nets (the example plugin opted into
// TIDE_NET_PTR_DEVICE, which treats "device" memory as host-addressable, and
// the socket net with a helper thread), real sockets, two NetConnections in
// one process wired to each other.
//
// Usage: net_gdr --plugin=<path of libtide-net-example.so> [gtest flags]
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/algorithm.h"
#include "core/comm.h"
#include "core/device/device_stream_state.h"
#include "core/kernels.h"
#include "core/registry.h"
#include "tide/net.h"
#include "transports/net/net_connection.h"
#include "transports/net/net_registry.h"

namespace tide {
namespace {

using Clock = std::chrono::steady_clock;
std::string gPlugin;

// Two NetConnections a <-> b over `net` (a's sendComm reaches b's recvComm
// and the other way round), each pair through its own listener.
struct Wired {
  std::unique_ptr<NetConnection> a, b;
};

// One sendComm -> recvComm pair; false on error or after 10 s.
bool pairComms(const tideNet_v1_t* net, void** send, void** recv) {
  uint8_t handle[TIDE_NET_HANDLE_MAXSIZE] = {};
  void* lc = nullptr;
  if (net->listen(0, handle, &lc) != tideSuccess) return false;
  *send = *recv = nullptr;
  const auto end = Clock::now() + std::chrono::seconds(10);
  bool ok = true;
  while (ok && (*send == nullptr || *recv == nullptr)) {
    if (*send == nullptr) ok = net->connect(0, handle, send) == tideSuccess;
    if (ok && *recv == nullptr) ok = net->accept(lc, recv) == tideSuccess;
    ok = ok && Clock::now() < end;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  (void)net->closeListen(lc);
  return ok;
}

bool wire(const tideNet_v1_t* net, size_t chunk, Wired* w) {
  void *s1, *r1, *s2, *r2;
  if (!pairComms(net, &s1, &r1)) return false;
  if (!pairComms(net, &s2, &r2)) return false;
  w->a = std::make_unique<NetConnection>(net, s1, r2, 1, kP2pChannel, chunk, 4);
  w->b = std::make_unique<NetConnection>(net, s2, r1, 0, kP2pChannel, chunk, 4);
  tideNetProperties_v1_t props{};
  if (net->getProperties(0, &props) != tideSuccess) return false;
  w->a->setDevicePtrSupport(props.ptrSupport);
  w->b->setDevicePtrSupport(props.ptrSupport);
  return true;
}

// Progresses both until `done` or an error or 20 s; returns the first error.
template <class Done>
Status drive(Wired& w, Done done) {
  const auto end = Clock::now() + std::chrono::seconds(20);
  while (!done()) {
    bool moved = false;
    TIDE_TRY(w.a->progress(&moved));
    TIDE_TRY(w.b->progress(&moved));
    if (Clock::now() > end) return timeoutError("test: no completion within 20 s");
    if (!moved) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return Status::Ok();
}

using CountFn = int (*)(int);
struct Counters {
  CountFn reg = nullptr, dereg = nullptr, post = nullptr;
};

// The example plugin's counters (it is loaded RTLD_LOCAL by the registry).
Counters counters() {
  Counters c;
  void* h = dlopen(gPlugin.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) return c;
  c.reg = reinterpret_cast<CountFn>(dlsym(h, "tideExampleNetRegCount"));
  c.dereg = reinterpret_cast<CountFn>(dlsym(h, "tideExampleNetDeregCount"));
  c.post = reinterpret_cast<CountFn>(dlsym(h, "tideExampleNetPostCount"));
  return c;
}

const tideNet_v1_t* exampleNet() {
  setenv("TIDE_EXAMPLE_NET_PTR_DEVICE", "1", 1);
  const tideNet_v1_t* net = nullptr;
  if (!selectNet(gPlugin, &net).ok()) return nullptr;
  return net;
}

TEST(NetGdr, DeviceTransfersRegisterPassAndDeregister) {
  const tideNet_v1_t* net = exampleNet();
  ASSERT_NE(net, nullptr) << gPlugin;
  Counters c = counters();
  ASSERT_TRUE(c.reg && c.dereg && c.post);
  Wired w;
  ASSERT_TRUE(wire(net, 64 * 1024, &w));
  EXPECT_EQ(w.a->devicePtrSupport(), TIDE_NET_PTR_DEVICE);

  const int reg0 = c.reg(TIDE_NET_PTR_DEVICE), dereg0 = c.dereg(TIDE_NET_PTR_DEVICE);
  const int post0 = c.post(TIDE_NET_PTR_DEVICE), hostReg0 = c.reg(TIDE_NET_PTR_HOST);
  const size_t n = 3 * 64 * 1024 + 100;  // 4 chunks
  std::vector<uint8_t> src(n), dst(n, 0), hsrc(5000, 7), hdst(5000, 0);
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<uint8_t>(i * 13 + 5);
  uint64_t ts = 0, tr = 0, hs = 0, hr = 0;
  ASSERT_TRUE(w.a->postSendMem(src.data(), n, MemType::Device, &ts).ok());
  ASSERT_TRUE(w.b->postRecvMem(dst.data(), n, nullptr, MemType::Device, &tr).ok());
  // A host transfer behind it: no registration, no mhandle.
  ASSERT_TRUE(w.a->postSendMem(hsrc.data(), hsrc.size(), MemType::Host, &hs).ok());
  ASSERT_TRUE(w.b->postRecv(hdst.data(), hdst.size(), nullptr, &hr).ok());
  Status s = drive(w, [&] { return w.a->sendsDone() >= hs && w.b->recvsDone() >= hr; });
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(src, dst);
  EXPECT_EQ(hsrc, hdst);
  EXPECT_EQ(c.reg(TIDE_NET_PTR_DEVICE) - reg0, 2);      // one per transfer and side
  EXPECT_EQ(c.dereg(TIDE_NET_PTR_DEVICE) - dereg0, 2);  // released on completion
  EXPECT_EQ(c.post(TIDE_NET_PTR_DEVICE) - post0, 8);    // 4 chunks each way, with the mhandle
  EXPECT_EQ(c.reg(TIDE_NET_PTR_HOST), hostReg0);
  EXPECT_FALSE(w.a->busy());
  EXPECT_FALSE(w.b->busy());
}

// One device transfer a -> b of `n` bytes; the bytes must arrive intact.
void deviceTransfer(Wired& w, size_t n) {
  std::vector<uint8_t> src(n), dst(n, 0);
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<uint8_t>(i * 7 + 1);
  uint64_t ts = 0, tr = 0;
  ASSERT_TRUE(w.a->postSendMem(src.data(), n, MemType::Device, &ts).ok());
  ASSERT_TRUE(w.b->postRecvMem(dst.data(), n, nullptr, MemType::Device, &tr).ok());
  Status s = drive(w, [&] { return w.a->sendsDone() >= ts && w.b->recvsDone() >= tr; });
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(src, dst);
}

// A net offering dma-buf and peer memory: dma-buf is registered first; when
// its registration fails, the transfer falls back to peer memory.
TEST(NetGdr, DmaBufFirstThenPeerMemory) {
  setenv("TIDE_EXAMPLE_NET_PTR_DMABUF", "ok", 1);
  const tideNet_v1_t* net = exampleNet();
  ASSERT_NE(net, nullptr);
  Counters c = counters();
  ASSERT_TRUE(c.reg && c.dereg);
  const int dma0 = c.reg(TIDE_NET_PTR_DMABUF), dev0 = c.reg(TIDE_NET_PTR_DEVICE);
  const int dmaDereg0 = c.dereg(TIDE_NET_PTR_DMABUF);
  {
    Wired w;
    ASSERT_TRUE(wire(net, 64 * 1024, &w));
    EXPECT_EQ(w.a->devicePtrSupport(), TIDE_NET_PTR_DEVICE | TIDE_NET_PTR_DMABUF);
    deviceTransfer(w, 100 * 1024);
    EXPECT_EQ(c.reg(TIDE_NET_PTR_DMABUF) - dma0, 2);
    EXPECT_EQ(c.dereg(TIDE_NET_PTR_DMABUF) - dmaDereg0, 2);
    EXPECT_EQ(c.reg(TIDE_NET_PTR_DEVICE), dev0);
  }
  setenv("TIDE_EXAMPLE_NET_PTR_DMABUF", "fail", 1);
  {
    Wired w;
    ASSERT_TRUE(wire(net, 64 * 1024, &w));
    deviceTransfer(w, 100 * 1024);
    EXPECT_EQ(c.reg(TIDE_NET_PTR_DMABUF) - dma0, 2);  // the failed ones count nothing
    EXPECT_EQ(c.reg(TIDE_NET_PTR_DEVICE) - dev0, 2);
  }
  unsetenv("TIDE_EXAMPLE_NET_PTR_DMABUF");
}

// A registration the net advertised but refuses at transfer time fails the
// connection with the net's error (sticky), without touching the buffers.
TEST(NetGdr, RefusedRegistrationFailsTheConnection) {
  const tideNet_v1_t* net = exampleNet();
  ASSERT_NE(net, nullptr);
  Wired w;
  ASSERT_TRUE(wire(net, 64 * 1024, &w));
  setenv("TIDE_EXAMPLE_NET_REG_FAIL", "1", 1);
  std::vector<uint8_t> src(8192, 3);
  uint64_t ts = 0;
  ASSERT_TRUE(w.a->postSendMem(src.data(), src.size(), MemType::Device, &ts).ok());
  bool moved = false;
  Status s = w.a->progress(&moved);
  unsetenv("TIDE_EXAMPLE_NET_REG_FAIL");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), tideSystemError);
  EXPECT_NE(s.message().find("regMr of a device buffer"), std::string::npos) << s.message();
  uint64_t t2 = 0;
  EXPECT_FALSE(w.a->postSendMem(src.data(), src.size(), MemType::Host, &t2).ok());  // sticky
}

// The executor posts the buffers of an operation whose memory type is
// Device (what core/device/device_stream.cc plans for GPUDirect RDMA) through the
// memory-typed posts, and refuses a reducing receive into device memory.
TEST(NetGdr, ExecutorPostsDeviceMemoryTyped) {
  const tideNet_v1_t* net = exampleNet();
  ASSERT_NE(net, nullptr);
  Counters c = counters();
  ASSERT_TRUE(c.reg && c.post);
  Wired w;
  ASSERT_TRUE(wire(net, 4096, &w));
  // Rank 0 owns w.a (peer 1), rank 1 owns w.b (peer 0).
  Connection* conns0[2 * kNumChannels] = {};
  Connection* conns1[2 * kNumChannels] = {};
  conns0[1 * kNumChannels + kP2pChannel] = w.a.get();
  conns1[0 * kNumChannels + kP2pChannel] = w.b.get();
  CollArgs args;
  args.type = CollType::Send;
  args.mem = MemType::Device;
  args.elemSize = 4;
  args.reduce = [](void*, const void*, const void*, size_t) {};
  const KernelTable* k = kernelsFor(MemType::Host);
  ExecCtx r0(args, 0, 2, conns0, kP2pChannel, k, 1 << 20);
  args.type = CollType::Recv;
  ExecCtx r1(args, 1, 2, conns1, kP2pChannel, k, 1 << 20);
  const int reg0 = c.reg(TIDE_NET_PTR_DEVICE), post0 = c.post(TIDE_NET_PTR_DEVICE);
  std::vector<uint8_t> src(10000), dst(10000, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + 1);
  Pending ps = r0.send(1, src.data(), src.size());
  Pending pr = r1.recv(0, dst.data(), dst.size());
  ASSERT_TRUE(r0.error().ok()) << r0.error().message();
  ASSERT_TRUE(r1.error().ok()) << r1.error().message();
  Status s = drive(w, [&] { return ps.done() && pr.done(); });
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(src, dst);
  EXPECT_EQ(c.reg(TIDE_NET_PTR_DEVICE) - reg0, 2);
  EXPECT_EQ(c.post(TIDE_NET_PTR_DEVICE) - post0, 6);  // 3 chunks of 4096 each way
  std::vector<float> acc(1024);
  (void)r1.recvReduce(0, acc.data(), acc.data(), 4096);
  EXPECT_EQ(r1.error().code(), tideInternalError) << r1.error().message();
}

// The planner (core/device/device_stream_gdr.cc) asks the point-to-point connection
// of each op's peer; a group's batch on one communicator is direct only as a
// whole. (isDev is what cuda::isDevicePointer said; here it is given.)
TEST(NetGdr, PlannerAsksEachPeersConnection) {
  const tideNet_v1_t* net = exampleNet();
  ASSERT_NE(net, nullptr);
  Wired w;
  ASSERT_TRUE(wire(net, 4096, &w));
  w.b->setDevicePtrSupport(TIDE_NET_PTR_HOST);  // stands for a peer without GPUDirect
  tideComm comm;
  comm.rank = 0;
  comm.nranks = 3;
  comm.conns.assign(3 * kNumChannels, nullptr);
  comm.conns[1 * kNumChannels + kP2pChannel] = w.a.get();
  comm.conns[2 * kNumChannels + kP2pChannel] = w.b.get();
  auto opOf = [&](CollType t, int peer, uintptr_t buf) {
    OpDesc d;
    d.comm = &comm;
    d.args.type = t;
    d.args.root = peer;
    d.args.count = 256;
    d.args.elemSize = 4;
    d.args.sendbuff = reinterpret_cast<const void*>(buf);
    d.args.recvbuff = reinterpret_cast<void*>(buf);
    return d;
  };
  std::vector<bool> direct;
  std::vector<OpDesc> one{opOf(CollType::Send, 1, 0x10000)};
  devstream::planGdr(one, {true}, true, &direct);
  EXPECT_EQ(direct, std::vector<bool>({true}));
  devstream::planGdr(one, {false}, true, &direct);  // host buffer
  EXPECT_EQ(direct, std::vector<bool>({false}));
  std::vector<OpDesc> toTwo{opOf(CollType::Recv, 2, 0x10000)};
  devstream::planGdr(toTwo, {true}, true, &direct);
  EXPECT_EQ(direct, std::vector<bool>({false}));
  std::vector<OpDesc> self{opOf(CollType::Send, 0, 0x10000)};
  devstream::planGdr(self, {true}, true, &direct);
  EXPECT_EQ(direct, std::vector<bool>({false}));
  // Batch: both to peer 1 -> direct; one to peer 2 -> the whole batch stages.
  std::vector<OpDesc> pair{opOf(CollType::Send, 1, 0x10000), opOf(CollType::Recv, 1, 0x20000)};
  devstream::planGdr(pair, {true, true}, true, &direct);
  EXPECT_EQ(direct, std::vector<bool>({true, true}));
  // A driver that cannot flush the NIC's writes: the receive, so the batch, stages.
  devstream::planGdr(pair, {true, true}, false, &direct);
  EXPECT_EQ(direct, std::vector<bool>({false, false}));
  devstream::planGdr(one, {true}, false, &direct);  // a lone send needs no flush
  EXPECT_EQ(direct, std::vector<bool>({true}));
  std::vector<OpDesc> mixed{opOf(CollType::Send, 1, 0x10000), opOf(CollType::Recv, 2, 0x20000)};
  devstream::planGdr(mixed, {true, true}, true, &direct);
  EXPECT_EQ(direct, std::vector<bool>({false, false}));
  // A receive overlapping a send of the batch stages it.
  std::vector<OpDesc> overlap{opOf(CollType::Send, 1, 0x10000), opOf(CollType::Recv, 1, 0x10200)};
  devstream::planGdr(overlap, {true, true}, true, &direct);
  EXPECT_EQ(direct, std::vector<bool>({false, false}));
  // A collective in the group stays staged and does not affect the batch.
  std::vector<OpDesc> withColl{opOf(CollType::AllReduce, 0, 0x90000),
                               opOf(CollType::Send, 1, 0x10000)};
  devstream::planGdr(withColl, {true, true}, true, &direct);
  EXPECT_EQ(direct, std::vector<bool>({false, true}));
}

TEST(NetGdr, OutstandingRegistrationsReleasedOnDestruction) {
  const tideNet_v1_t* net = exampleNet();
  ASSERT_NE(net, nullptr);
  Counters c = counters();
  ASSERT_TRUE(c.reg && c.dereg);
  const int reg0 = c.reg(TIDE_NET_PTR_DEVICE), dereg0 = c.dereg(TIDE_NET_PTR_DEVICE);
  std::vector<uint8_t> buf(8192);
  {
    Wired w;
    ASSERT_TRUE(wire(net, 4096, &w));
    uint64_t t = 0;
    ASSERT_TRUE(w.b->postRecvMem(buf.data(), buf.size(), nullptr, MemType::Device, &t).ok());
    bool moved = false;
    ASSERT_TRUE(w.b->progress(&moved).ok());  // registers, posts; nothing arrives
    EXPECT_EQ(c.reg(TIDE_NET_PTR_DEVICE) - reg0, 1);
  }
  EXPECT_EQ(c.dereg(TIDE_NET_PTR_DEVICE) - dereg0, 1);
}

TEST(NetGdr, RefusesWhatWasNeverPlanned) {
  const tideNet_v1_t* net = exampleNet();
  ASSERT_NE(net, nullptr);
  Wired w;
  ASSERT_TRUE(wire(net, 4096, &w));
  std::vector<float> buf(1024), src(1024);
  RecvReduce rr;
  rr.fn = [](void*, const void*, const void*, size_t) {};
  rr.src = src.data();
  rr.elemSize = sizeof(float);
  uint64_t t = 0;
  Status s = w.b->postRecvMem(buf.data(), 4096, &rr, MemType::Device, &t);
  EXPECT_EQ(s.code(), tideInternalError) << s.message();
  // A connection whose net registers no device memory refuses device posts.
  w.a->setDevicePtrSupport(TIDE_NET_PTR_HOST);
  EXPECT_EQ(w.a->devicePtrSupport(), 0);
  EXPECT_EQ(w.a->postSendMem(buf.data(), 4096, MemType::Device, &t).code(), tideInternalError);
  EXPECT_EQ(w.a->postRecvMem(buf.data(), 4096, nullptr, MemType::Device, &t).code(),
            tideInternalError);
}

// After a receive fails, no other receive of the connection may still write
// its buffer: fail() stops the net (closes the comms). Before, the second
// receive stayed posted and the socket net's helper thread filled it later.
TEST(NetGdr, FailedConnectionWritesNoMoreUserBuffers) {
  setenv("TIDE_SOCKET_NTHREADS", "1", 1);
  const tideNet_v1_t* net = nullptr;
  Status sel = selectNet("socket", &net);
  ASSERT_TRUE(sel.ok()) << sel.message();
  Wired w;
  ASSERT_TRUE(wire(net, 4096, &w));
  std::vector<uint8_t> small(2048, 1), second(4096, 2), a(4096, 0), b(4096, 0);
  uint64_t t1 = 0, t2 = 0, r1 = 0, r2 = 0;
  // b expects two 4096-byte messages; a first sends only 2048 bytes.
  ASSERT_TRUE(w.b->postRecv(a.data(), a.size(), nullptr, &r1).ok());
  ASSERT_TRUE(w.b->postRecv(b.data(), b.size(), nullptr, &r2).ok());
  ASSERT_TRUE(w.a->postSend(small.data(), small.size(), &t1).ok());
  Status s = drive(w, [&] { return false; });
  ASSERT_EQ(s.code(), tideInvalidUsage) << s.message();
  EXPECT_NE(s.message().find("mismatched operation"), std::string::npos) << s.message();
  bool moved = false;
  EXPECT_EQ(w.b->progress(&moved).code(), tideInvalidUsage);  // sticky
  // The peer, unaware, sends the next message; b's second buffer must stay
  // untouched.
  ASSERT_TRUE(w.a->postSend(second.data(), second.size(), &t2).ok());
  const auto end = Clock::now() + std::chrono::milliseconds(500);
  while (Clock::now() < end) {
    if (!w.a->progress(&moved).ok()) break;  // may see the closed peer
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(b, std::vector<uint8_t>(4096, 0));
}

// A reducing receive whose chunk arrives short fails the call; its bounce
// buffer goes back to the pool (it was dropped before), as do those of
// receives cancelled by the failure.
TEST(NetGdr, BounceBuffersReturnAfterASizeMismatch) {
  const tideNet_v1_t* net = exampleNet();
  ASSERT_NE(net, nullptr);
  Wired w;
  ASSERT_TRUE(wire(net, 4096, &w));
  std::vector<float> dst(2048, 0), src(2048, 1), small(512, 2);
  RecvReduce rr;
  rr.fn = [](void* d, const void* a, const void* b, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      static_cast<float*>(d)[i] = static_cast<const float*>(a)[i] + static_cast<const float*>(b)[i];
    }
  };
  rr.src = src.data();
  rr.elemSize = sizeof(float);
  uint64_t t = 0;
  ASSERT_TRUE(w.b->postRecv(dst.data(), 8192, &rr, &t).ok());  // 2 chunks, 2 bounces
  ASSERT_TRUE(w.a->postSend(small.data(), 2048, &t).ok());     // the first chunk, short
  Status s = drive(w, [] { return false; });
  ASSERT_EQ(s.code(), tideInvalidUsage) << s.message();
  EXPECT_EQ(w.b->bouncesAllocated(), 2u);
  EXPECT_EQ(w.b->bouncesFree(), w.b->bouncesAllocated());
}

}  // namespace
}  // namespace tide

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i) {
    if (strncmp(argv[i], "--plugin=", 9) == 0) tide::gPlugin = argv[i] + 9;
  }
  if (tide::gPlugin.empty()) {
    fprintf(stderr, "usage: net_gdr --plugin=<libtide-net-example.so>\n");
    return 2;
  }
  return RUN_ALL_TESTS();
}
