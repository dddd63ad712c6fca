// net_bw: point-to-point bandwidth and latency of one net (include/tide/net.h)
// between two ranks, below Tide's collectives: what the fabric gives Tide.
//
//   tiderun -n 2 net_bw [-N socket|ucx|ib|<plugin>] [-b 8] [-e 64M] [-f 2]
//                       [-n iters] [-w warmup] [-W window]
//
// Ranks meet with tideCommInitFromEnv (any launcher Tide understands) and
// swap net listen handles with tideAllGather; the data then moves through
// the net alone. Rank 0 streams `iters` messages of each size to rank 1 with
// `window` in flight (like iperf3's single stream) and rank 1 answers with a
// 1-byte ack once all have arrived: bandwidth = size x iters / time. Latency
// is half the round trip of a same-size ping-pong (sizes <= 1 MiB).
// Output: one line per size (bytes, GB/s, Gbit/s, latency us), rank 0 only.
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/parse.h"
#include "tide/net.h"
#include "tide/tide.h"

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const char* what, tideResult_t r) {
  std::fprintf(stderr, "net_bw: %s failed: %s (%s)\n", what, tideGetErrorString(r),
               tideGetLastError(nullptr));
  std::exit(1);
}

#define CHECK(call)                        \
  do {                                     \
    tideResult_t r_ = (call);              \
    if (r_ != tideSuccess) die(#call, r_); \
  } while (0)

struct Link {
  const tideNet_v1_t* net;
  void* send = nullptr;
  void* recv = nullptr;
};

void* post(const Link& l, bool send, void* buf, size_t n, int tag) {
  for (;;) {
    void* req = nullptr;
    if (send) {
      CHECK(l.net->isend(l.send, buf, n, tag, nullptr, &req));
    } else {
      CHECK(l.net->irecv(l.recv, 1, &buf, &n, &tag, nullptr, &req));
    }
    if (req != nullptr) return req;
    std::this_thread::yield();
  }
}

bool test(const Link& l, void* req) {
  int done = 0;
  CHECK(l.net->test(req, &done, nullptr));
  return done != 0;
}

// Waits like Tide's progress engine: a short spin, then poll() on the net's
// fd (when it has one) so that helper threads get the CPU.
void idle(const Link& l, bool sending, int* misses) {
  if (++*misses < 64) return;
  int fd = -1;
  if (l.net->getPollFd != nullptr) l.net->getPollFd(sending ? l.send : l.recv, &fd);
  if (fd < 0) {
    std::this_thread::yield();
    return;
  }
  pollfd p{fd, POLLIN, 0};
  ::poll(&p, 1, 1);
}

void wait(const Link& l, void* req, bool sending) {
  auto end = Clock::now() + std::chrono::seconds(120);
  int misses = 0;
  while (!test(l, req)) {
    if (Clock::now() > end) die("waiting for a transfer (120 s)", tideTimeout);
    idle(l, sending, &misses);
  }
}

// Streams `iters` messages of `size` with `window` outstanding; the receiver
// acks at the end. Returns seconds on rank 0.
double stream(const Link& l, int rank, std::vector<char>& buf, size_t size, int iters, int window) {
  char ack = 0;
  std::vector<void*> reqs;
  auto t0 = Clock::now();
  int posted = 0, done = 0, misses = 0;
  bool sender = rank == 0;
  while (done < iters) {
    while (posted < iters && posted - done < window) {
      reqs.push_back(post(l, sender, buf.data(), size, 1));
      ++posted;
    }
    if (test(l, reqs[done])) {
      ++done;
      misses = 0;
    } else {
      idle(l, sender, &misses);
    }
  }
  wait(l, post(l, !sender, &ack, 1, 2), !sender);
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double pingPong(const Link& l, int rank, std::vector<char>& buf, size_t size, int iters) {
  auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) {
    if (rank == 0) {
      wait(l, post(l, true, buf.data(), size, 3), true);
      wait(l, post(l, false, buf.data(), size, 3), false);
    } else {
      wait(l, post(l, false, buf.data(), size, 3), false);
      wait(l, post(l, true, buf.data(), size, 3), true);
    }
  }
  return std::chrono::duration<double>(Clock::now() - t0).count() / iters / 2;
}

void usage() {
  std::fprintf(stderr,
               "usage: net_bw [-N net] [-b minbytes] [-e maxbytes] [-f factor] [-n iters] "
               "[-w warmup] [-W window]\n");
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  std::string netName;
  size_t minB = 8, maxB = 64 << 20;
  int factor = 2, iters = 20, warmup = 2, window = 4;
  int opt;
  while ((opt = getopt(argc, argv, "N:b:e:f:n:w:W:h")) != -1) {
    switch (opt) {
      case 'N':
        netName = optarg;
        break;
      case 'b':
        if (!tide_perf::ParseSize(optarg, &minB)) usage();
        break;
      case 'e':
        if (!tide_perf::ParseSize(optarg, &maxB)) usage();
        break;
      case 'f':
        factor = std::atoi(optarg);
        break;
      case 'n':
        iters = std::atoi(optarg);
        break;
      case 'w':
        warmup = std::atoi(optarg);
        break;
      case 'W':
        window = std::atoi(optarg);
        break;
      default:
        usage();
    }
  }
  if (factor < 2 || iters < 1 || window < 1 || minB > maxB) usage();

  tideComm_t comm;
  CHECK(tideCommInitFromEnv(&comm));
  int rank = 0, nranks = 0;
  CHECK(tideCommUserRank(comm, &rank));
  CHECK(tideCommCount(comm, &nranks));
  if (nranks != 2) {
    if (rank == 0) std::fprintf(stderr, "net_bw: needs exactly 2 ranks (got %d)\n", nranks);
    return 2;
  }
  Link l;
  CHECK(tideNetGet(netName.empty() ? nullptr : netName.c_str(), &l.net));
  tideNetProperties_v1_t props{};
  CHECK(l.net->getProperties(0, &props));

  // Swap listen handles through the communicator, then connect both ways.
  std::vector<char> handles(2 * TIDE_NET_HANDLE_MAXSIZE);
  void* lc = nullptr;
  CHECK(l.net->listen(0, handles.data() + rank * TIDE_NET_HANDLE_MAXSIZE, &lc));
  CHECK(tideAllGather(handles.data() + rank * TIDE_NET_HANDLE_MAXSIZE, handles.data(),
                      TIDE_NET_HANDLE_MAXSIZE, tideUint8, comm, nullptr));
  char* peer = handles.data() + (1 - rank) * TIDE_NET_HANDLE_MAXSIZE;
  auto end = Clock::now() + std::chrono::seconds(60);
  while (l.send == nullptr || l.recv == nullptr) {
    if (l.send == nullptr) CHECK(l.net->connect(0, peer, &l.send));
    if (l.recv == nullptr) CHECK(l.net->accept(lc, &l.recv));
    if (Clock::now() > end) die("connecting (60 s)", tideTimeout);
  }
  CHECK(l.net->closeListen(lc));

  if (rank == 0) {
    std::printf("# net_bw: net %s, device %s (%d Mbit/s), window %d, %d iterations\n", l.net->name,
                props.name, props.speed, window, iters);
    std::printf("# %12s %10s %10s %12s\n", "bytes", "GB/s", "Gbit/s", "latency_us");
  }
  std::vector<char> buf(maxB);
  std::memset(buf.data(), 1, buf.size());
  for (size_t size = minB; size <= maxB; size *= factor) {
    // Fewer repetitions for big sizes keep a run short.
    int n = size >= (16u << 20) ? std::max(4, iters / 4) : iters;
    if (warmup > 0) stream(l, rank, buf, size, warmup, window);
    double sec = stream(l, rank, buf, size, n, window);
    double lat = size <= (1u << 20) ? pingPong(l, rank, buf, size, n) : 0;
    if (rank == 0) {
      double gbs = static_cast<double>(size) * n / sec / 1e9;
      std::printf("  %12zu %10.3f %10.3f %12.2f\n", size, gbs, gbs * 8, lat * 1e6);
      std::fflush(stdout);
    }
    if (size > maxB / factor) break;
  }
  CHECK(l.net->closeSend(l.send));
  CHECK(l.net->closeRecv(l.recv));
  CHECK(tideCommDestroy(comm));
  return 0;
}
