// Blocking-with-deadline and non-blocking TCP socket helpers used by the
// bootstrap and by socket-based transports.
//
// Every blocking helper takes a Deadline and an abort flag and polls in
// slices of at most 100 ms, so no wait is unbounded and tideCommAbort can
// interrupt it. Sockets are IPv4 or IPv6; file descriptors are close-on-exec.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"

namespace tide {

struct SockAddr {
  sockaddr_storage ss{};
  socklen_t len = 0;
  int family() const { return ss.ss_family; }
  int port() const;
  void setPort(int port);
  std::string str() const;      // "1.2.3.4:5" or "[::1]:5"
  std::string hostStr() const;  // "1.2.3.4" or "::1"
  bool valid() const { return len > 0; }
};

// Resolves host (name or literal; "" means the wildcard) and port.
// Prefers IPv4 results.
Status resolveAddress(const std::string& host, int port, SockAddr* out);
// Parses "host:port", "[v6addr]:port" or "v6addr" + ":port" forms.
Status parseHostPort(const std::string& text, SockAddr* out);

// A point in time after which waits fail with tideTimeout. Default: never.
class Deadline {
 public:
  Deadline() = default;
  static Deadline after(double seconds);  // seconds <= 0: never
  static Deadline never() { return {}; }
  bool expired() const;
  // Milliseconds left, capped at capMs; capMs when there is no deadline.
  int remainingMs(int capMs) const;

 private:
  bool infinite_ = true;
  std::chrono::steady_clock::time_point at_{};
};

// RAII file descriptor of a TCP socket.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket();
  Socket(Socket&& o) noexcept : fd_(o.release()) {}
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release();
  void close();

  // Creates a listening socket bound to addr (port 0 picks a free port).
  static Status listen(const SockAddr& addr, int backlog, Socket* out);
  // Connects, retrying refused/unreachable attempts until the deadline.
  static Status connect(const SockAddr& addr, Deadline deadline, const std::atomic<bool>* abortFlag,
                        Socket* out);
  // Accepts one connection (listening socket).
  Status accept(Socket* out, Deadline deadline, const std::atomic<bool>* abortFlag) const;

  Status sendAll(const void* buf, size_t n, Deadline deadline,
                 const std::atomic<bool>* abortFlag) const;
  Status recvAll(void* buf, size_t n, Deadline deadline, const std::atomic<bool>* abortFlag) const;

  // Non-blocking partial I/O. *done gets the bytes moved (0 when it would
  // block). A closed peer is a tideRemoteError.
  Status sendSome(const void* buf, size_t n, size_t* done) const;
  Status recvSome(void* buf, size_t n, size_t* done) const;

  Status setNonBlocking(bool on) const;
  Status setNoDelay() const;
  Status setBufferSizes(int bytes) const;  // SO_SNDBUF and SO_RCVBUF; 0: leave
  Status localAddr(SockAddr* out) const;
  Status peerAddr(SockAddr* out) const;

 private:
  int fd_ = -1;
};

}  // namespace tide
