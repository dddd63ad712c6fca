// Rank harness implementation: see rank_harness.h for the contracts. This
// file: run results and the helpers both modes use; process mode:
// rank_harness_process.cc; thread mode: rank_harness_threads.cc.

#include "rank_harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "rank_harness_internal.h"

namespace tide_test {

using harness::Clock;
using harness::Tail;

bool RunResult::AllOk() const {
  if (!error.empty() || timed_out || ranks.empty()) return false;
  for (const auto& r : ranks) {
    if (!r.ok()) return false;
  }
  return true;
}

std::string RunResult::Describe(size_t max_chars) const {
  std::string s;
  char line[256];
  snprintf(line, sizeof(line), "run: %zu ranks, %.2f s%s%s%s\n", ranks.size(), elapsed_s,
           timed_out ? ", TIMED OUT" : "", error.empty() ? "" : ", harness error: ", error.c_str());
  s += line;
  for (const auto& r : ranks) {
    if (r.exited) {
      snprintf(line, sizeof(line), "  rank %d: exit %d\n", r.rank, r.exit_code);
    } else if (r.term_signal) {
      snprintf(line, sizeof(line), "  rank %d: signal %d%s%s%s\n", r.rank, r.term_signal,
               r.hooked ? " (fault hook)" : "", r.timed_out ? " (killed at timeout)" : "",
               r.reaped ? " (killed after another rank failed)" : "");
    } else {
      snprintf(line, sizeof(line), "  rank %d: did not finish%s\n", r.rank,
               r.timed_out ? " (timeout)" : "");
    }
    s += line;
  }
  for (const auto& r : ranks) {
    if (r.ok()) continue;
    s += "----- output of rank " + std::to_string(r.rank) + " -----\n";
    s += Tail(r.output, max_chars);
    if (!s.empty() && s.back() != '\n') s += '\n';
  }
  return s;
}

int PickFreePort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  int port = -1;
  socklen_t len = sizeof(a);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  close(fd);
  return port;
}

std::string RandomHex(size_t nbytes) {
  std::vector<unsigned char> buf(nbytes);
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  size_t got = 0;
  while (fd >= 0 && got < nbytes) {
    ssize_t n = read(fd, buf.data() + got, nbytes - got);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  if (fd >= 0) close(fd);
  if (got < nbytes) {  // fall back to a clock-seeded generator
    uint64_t x = static_cast<uint64_t>(Clock::now().time_since_epoch().count()) ^ getpid();
    for (size_t i = got; i < nbytes; ++i) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      buf[i] = static_cast<unsigned char>(x >> 56);
    }
  }
  static const char kHex[] = "0123456789abcdef";
  std::string s;
  for (unsigned char c : buf) {
    s += kHex[c >> 4];
    s += kHex[c & 15];
  }
  return s;
}

std::string SelfExe() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return {};
  return std::string(buf, static_cast<size_t>(n));
}

std::string SelfDir() {
  std::string e = SelfExe();
  size_t slash = e.rfind('/');
  return slash == std::string::npos ? std::string("./") : e.substr(0, slash + 1);
}

}  // namespace tide_test
