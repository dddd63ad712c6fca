// The verbs net against the real libibverbs. Without an RDMA device (this
// development machine: no HCA, no Soft-RoCE) only the fail-fast path runs:
// TIDE_NET=ib must fail at once with a message naming what is missing. With
// a device, an in-process loopback drives listen/connect/accept and the data
// path (sizes 0 B to 64 MiB, several QPs, many outstanding requests, an
// oversized message, registered buffers) through the net's table; those
// tests skip here and say so.
#include <dirent.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tide_build_config.h"
#include "transports/net/net_registry.h"

#if TIDE_HAVE_IBVERBS
#include "transports/ib/ib_verbs.h"
#endif

namespace tide {
#if TIDE_HAVE_IBVERBS
extern const tideNet_v1_t kIbNet;
#endif
namespace {

using Clock = std::chrono::steady_clock;

#if TIDE_HAVE_IBVERBS

bool haveRdmaDevice() {
  DIR* d = opendir("/sys/class/infiniband");
  if (d == nullptr) return false;
  bool any = false;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') any = true;
  }
  closedir(d);
  return any;
}

TEST(IbVerbs, NoDeviceFailsFast) {
  if (haveRdmaDevice()) GTEST_SKIP() << "this machine has an RDMA device";
  auto t0 = Clock::now();
  std::vector<IbPortInfo> ports;
  Status s = ibFindPorts(&ports);
  EXPECT_EQ(s.code(), tideSystemError);
  EXPECT_NE(s.message().find("no RDMA device found"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("TIDE_NET=socket"), std::string::npos) << "says what to use";
  const tideNet_v1_t* net = nullptr;
  Status sel = selectNet("ib", &net);
  EXPECT_FALSE(sel.ok());
  EXPECT_NE(sel.message().find("no RDMA device"), std::string::npos) << sel.message();
  EXPECT_EQ(tideNetGet("ib", &net), tideSystemError);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2));
  // The table is still safe to call: no devices, arguments checked.
  int n = -1;
  EXPECT_EQ(kIbNet.devices(&n), tideSuccess);
  EXPECT_EQ(n, 0);
  uint8_t handle[TIDE_NET_HANDLE_MAXSIZE] = {};
  void* lc = nullptr;
  EXPECT_EQ(kIbNet.listen(0, handle, &lc), tideInvalidArgument);
  void* sc = reinterpret_cast<void*>(1);
  EXPECT_EQ(kIbNet.connect(0, handle, &sc), tideInvalidArgument);
  EXPECT_EQ(sc, nullptr);
}

// ---- With a device ------------------------------------------------------------------

struct Loop {
  const tideNet_v1_t* net = &kIbNet;
  void* send = nullptr;
  void* recv = nullptr;
};

void connectLoop(Loop* l) {
  ASSERT_EQ(l->net->init(netLogger), tideSuccess);
  uint8_t handle[TIDE_NET_HANDLE_MAXSIZE];
  void* lc = nullptr;
  ASSERT_EQ(l->net->listen(0, handle, &lc), tideSuccess);
  auto end = Clock::now() + std::chrono::seconds(20);
  while (l->send == nullptr || l->recv == nullptr) {
    if (l->send == nullptr) {
      ASSERT_EQ(l->net->connect(0, handle, &l->send), tideSuccess);
    }
    if (l->recv == nullptr) {
      ASSERT_EQ(l->net->accept(lc, &l->recv), tideSuccess);
    }
    ASSERT_LT(Clock::now(), end) << "connection set-up timed out";
  }
  ASSERT_EQ(l->net->closeListen(lc), tideSuccess);
}

tideResult_t waitReq(const tideNet_v1_t* net, void* req, size_t* size) {
  auto end = Clock::now() + std::chrono::seconds(30);
  for (;;) {
    int done = 0;
    tideResult_t r = net->test(req, &done, size);
    if (r != tideSuccess || done) return r;
    if (Clock::now() > end) return tideTimeout;
  }
}

class IbVerbsDevice : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    if (!haveRdmaDevice()) GTEST_SKIP() << "no RDMA device here: the verbs data path is untested";
    setenv("TIDE_IB_QPS_PER_CONNECTION", std::to_string(GetParam()).c_str(), 1);
  }
};

TEST_P(IbVerbsDevice, LoopbackSizesAndOutstanding) {
  Loop l;
  connectLoop(&l);
  std::vector<size_t> sizes = {0, 1, 7, 4096, 65537, 1 << 20, (16 << 20) + 3, 64 << 20, 0, 5};
  for (int i = 0; i < 100; ++i) sizes.push_back(1 + (i * 97) % 5000);
  size_t n = sizes.size();
  std::vector<std::vector<uint8_t>> out(n), in(n);
  for (size_t m = 0; m < n; ++m) {
    out[m].resize(sizes[m]);
    for (size_t i = 0; i < sizes[m]; ++i) out[m][i] = static_cast<uint8_t>(i * 7 + m);
    in[m].assign(sizes[m] + 1, 0xee);
  }
  std::vector<void*> sreq(n, nullptr), rreq(n, nullptr);
  size_t sp = 0, rp = 0, sd = 0, rd = 0;
  auto end = Clock::now() + std::chrono::seconds(60);
  while (sd < n || rd < n) {
    ASSERT_LT(Clock::now(), end);
    while (rp < n) {
      void* buf = in[rp].data();
      size_t cap = in[rp].size();
      int tag = static_cast<int>(rp);
      void* r = nullptr;
      ASSERT_EQ(l.net->irecv(l.recv, 1, &buf, &cap, &tag, nullptr, &r), tideSuccess);
      if (r == nullptr) break;
      rreq[rp++] = r;
    }
    while (sp < n) {
      void* r = nullptr;
      ASSERT_EQ(l.net->isend(l.send, out[sp].data(), sizes[sp], static_cast<int>(sp), nullptr, &r),
                tideSuccess);
      if (r == nullptr) break;
      sreq[sp++] = r;
    }
    for (; sd < sp; ++sd) {
      int done = 0;
      ASSERT_EQ(l.net->test(sreq[sd], &done, nullptr), tideSuccess);
      if (!done) break;
    }
    for (; rd < rp; ++rd) {
      int done = 0;
      size_t got = 0;
      ASSERT_EQ(l.net->test(rreq[rd], &done, &got), tideSuccess);
      if (!done) break;
      ASSERT_EQ(got, sizes[rd]);
      ASSERT_EQ(memcmp(in[rd].data(), out[rd].data(), got), 0) << "message " << rd;
      ASSERT_EQ(in[rd][got], 0xee);
    }
  }
  EXPECT_EQ(l.net->closeSend(l.send), tideSuccess);
  EXPECT_EQ(l.net->closeRecv(l.recv), tideSuccess);
}

TEST_P(IbVerbsDevice, RegisteredBuffersAndOversizedMessage) {
  Loop l;
  connectLoop(&l);
  std::vector<uint8_t> a(1 << 20, 3), b(1 << 20, 0);
  void *ma = nullptr, *mb = nullptr;
  ASSERT_EQ(l.net->regMr(l.send, a.data(), a.size(), TIDE_NET_PTR_HOST, &ma), tideSuccess);
  ASSERT_EQ(l.net->regMr(l.recv, b.data(), b.size(), TIDE_NET_PTR_HOST, &mb), tideSuccess);
  void* buf = b.data();
  size_t cap = b.size();
  int tag = 1;
  void *rr = nullptr, *sr = nullptr;
  ASSERT_EQ(l.net->irecv(l.recv, 1, &buf, &cap, &tag, &mb, &rr), tideSuccess);
  ASSERT_NE(rr, nullptr);
  ASSERT_EQ(l.net->isend(l.send, a.data(), a.size(), 1, ma, &sr), tideSuccess);
  ASSERT_NE(sr, nullptr);
  size_t got = 0;
  ASSERT_EQ(waitReq(l.net, sr, nullptr), tideSuccess);
  ASSERT_EQ(waitReq(l.net, rr, &got), tideSuccess);
  EXPECT_EQ(got, a.size());
  EXPECT_EQ(b, a);
  // 4 KiB into a 100-byte receive: the receive fails (tideInvalidUsage).
  cap = 100;
  tag = 2;
  ASSERT_EQ(l.net->irecv(l.recv, 1, &buf, &cap, &tag, &mb, &rr), tideSuccess);
  ASSERT_EQ(l.net->isend(l.send, a.data(), 4096, 2, ma, &sr), tideSuccess);
  EXPECT_EQ(waitReq(l.net, sr, nullptr), tideSuccess);
  EXPECT_EQ(waitReq(l.net, rr, nullptr), tideInvalidUsage);
  EXPECT_EQ(l.net->deregMr(l.send, ma), tideSuccess);
  EXPECT_EQ(l.net->deregMr(l.recv, mb), tideSuccess);
  EXPECT_EQ(l.net->closeSend(l.send), tideSuccess);
  EXPECT_EQ(l.net->closeRecv(l.recv), tideSuccess);
}

INSTANTIATE_TEST_SUITE_P(Qps, IbVerbsDevice, ::testing::Values(1, 3));

#else

TEST(IbVerbs, NotBuilt) { GTEST_SKIP() << "Tide was built without libibverbs"; }

#endif

}  // namespace
}  // namespace tide
