// Socket net pieces: TIDE_SOCKET_IFNAME syntax, device discovery, stripe
// arithmetic, and real IPv4 / IPv6 transfers with the liveness options set.
#include <gtest/gtest.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "transports/socket/socket_net.h"

namespace tide {
namespace {

TEST(SocketIfname, NcclSyntax) {
  EXPECT_TRUE(socketIfnameMatches("eth", "eth0"));
  EXPECT_TRUE(socketIfnameMatches("ib,eth", "eth1"));
  EXPECT_FALSE(socketIfnameMatches("ib,eth", "lo"));
  EXPECT_FALSE(socketIfnameMatches("^eth", "eth0"));
  EXPECT_TRUE(socketIfnameMatches("^eth", "lo"));
  EXPECT_TRUE(socketIfnameMatches("=eth0", "eth0"));
  EXPECT_FALSE(socketIfnameMatches("=eth0", "eth00"));
  EXPECT_FALSE(socketIfnameMatches("^=eth0", "eth0"));
  EXPECT_TRUE(socketIfnameMatches("^=eth0", "eth00"));
  EXPECT_TRUE(socketIfnameMatches("^docker,virbr", "veth1"));
  EXPECT_FALSE(socketIfnameMatches("", "eth0"));
}

TEST(SocketDevices, LoopbackByName) {
  auto v4 = findSocketDevices("lo", AF_INET);
  ASSERT_EQ(v4.size(), 1u);
  EXPECT_EQ(v4[0].ifname, "lo");
  EXPECT_EQ(v4[0].addr.hostStr(), "127.0.0.1");
  EXPECT_TRUE(findSocketDevices("=no-such-if", AF_UNSPEC).empty());
  // Without a filter loopback is used only when nothing else exists.
  auto any = findSocketDevices("", AF_UNSPEC);
  ASSERT_FALSE(any.empty());
  if (any.size() > 1) {
    for (auto& d : any) EXPECT_NE(d.ifname, "lo");
  }
}

TEST(SocketStripes, Split) {
  int n;
  uint64_t per;
  socketStripes(0, 4, &n, &per);
  EXPECT_EQ(n, 1);
  socketStripes(100 << 10, 4, &n, &per);  // < 2 x 64 KiB: one stripe
  EXPECT_EQ(n, 1);
  socketStripes(1 << 20, 4, &n, &per);
  EXPECT_EQ(n, 4);
  EXPECT_EQ(per, 256u << 10);
  socketStripes((1 << 20) + 1, 4, &n, &per);
  EXPECT_EQ(per % 4096, 0u);
  EXPECT_GE(per * n, (1u << 20) + 1);
  EXPECT_LT(per * (n - 1), (1u << 20) + 1);
  socketStripes(64 << 20, 1, &n, &per);
  EXPECT_EQ(n, 1);
}

// In a child (the net reads its knobs once): init on `ifname`/`family`,
// connect to itself, move 3 MiB both ways and check TCP_USER_TIMEOUT and
// SO_KEEPALIVE on the data socket. Returns the child's exit code.
int loopbackTransfer(const char* ifname, const char* family) {
  pid_t pid = fork();
  if (pid != 0) {
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 100;
  }
  setenv("TIDE_SOCKET_IFNAME", ifname, 1);
  setenv("TIDE_SOCKET_FAMILY", family, 1);
  setenv("TIDE_SOCKET_NTHREADS", "0", 1);  // one socket; getPollFd returns it
  setenv("TIDE_NSOCKS_PERTHREAD", "1", 1);
  setenv("TIDE_TIMEOUT", "42", 1);
  const tideNet_v1_t& n = kSocketNet;
  if (n.init(nullptr) != tideSuccess) _exit(77);
  uint8_t handle[TIDE_NET_HANDLE_MAXSIZE];
  void *lc = nullptr, *s = nullptr, *r = nullptr;
  if (n.listen(0, handle, &lc) != tideSuccess) _exit(2);
  for (int i = 0; i < 100000 && (s == nullptr || r == nullptr); ++i) {
    if (s == nullptr && n.connect(0, handle, &s) != tideSuccess) _exit(3);
    if (r == nullptr && n.accept(lc, &r) != tideSuccess) _exit(4);
    usleep(10);
  }
  if (s == nullptr || r == nullptr) _exit(5);
  int fd = -1, v = 0;
  socklen_t len = sizeof(v);
  n.getPollFd(s, &fd);
  if (fd < 0 || getsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &v, &len) != 0 || v != 42000)
    _exit(6);
  if (getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &v, &len) != 0 || v != 1) _exit(7);
  std::vector<uint8_t> out(3 << 20), in(3 << 20);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(i * 7);
  void *sr = nullptr, *rr = nullptr;
  void* dst = in.data();
  size_t cap = in.size();
  int tag = 9;
  if (n.isend(s, out.data(), out.size(), 9, nullptr, &sr) != tideSuccess || sr == nullptr) _exit(8);
  if (n.irecv(r, 1, &dst, &cap, &tag, nullptr, &rr) != tideSuccess || rr == nullptr) _exit(9);
  int sd = 0, rd = 0;
  size_t got = 0;
  for (int i = 0; i < 10000000 && !(sd && rd); ++i) {
    if (!sd && n.test(sr, &sd, nullptr) != tideSuccess) _exit(10);
    if (!rd && n.test(rr, &rd, &got) != tideSuccess) _exit(11);
  }
  if (!sd || !rd || got != out.size() || in != out) _exit(12);
  n.closeSend(s);
  n.closeRecv(r);
  n.closeListen(lc);
  _exit(0);
}

TEST(SocketNet, Ipv4Loopback) { EXPECT_EQ(loopbackTransfer("lo", "AF_INET"), 0); }

TEST(SocketNet, Ipv6Loopback) {
  if (findSocketDevices("lo", AF_INET6).empty()) GTEST_SKIP() << "no IPv6 on lo";
  EXPECT_EQ(loopbackTransfer("lo", "AF_INET6"), 0);
}

TEST(SocketNet, NoMatchingInterfaceFailsInit) {
  pid_t pid = fork();
  if (pid == 0) {
    setenv("TIDE_SOCKET_IFNAME", "=no-such-if0", 1);
    _exit(kSocketNet.init(nullptr) == tideSystemError ? 0 : 1);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

}  // namespace
}  // namespace tide
