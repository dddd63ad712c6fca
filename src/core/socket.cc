#include "core/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tide {

namespace {

constexpr int kSliceMs = 100;  // longest single poll(), so aborts are seen quickly

bool aborted(const std::atomic<bool>* flag) {
  return flag != nullptr && flag->load(std::memory_order_relaxed);
}

// Waits until fd is ready for `events`; tideTimeout / tideRemoteError (abort).
Status waitFd(int fd, short events, Deadline deadline, const std::atomic<bool>* abortFlag,
              const char* what) {
  for (;;) {
    if (aborted(abortFlag)) return remoteError("%s interrupted by abort", what);
    if (deadline.expired()) return timeoutError("%s timed out", what);
    pollfd p{fd, events, 0};
    int rc = poll(&p, 1, deadline.remainingMs(kSliceMs));
    if (rc > 0) return Status::Ok();
    if (rc < 0 && errno != EINTR) return errnoError(errno, "poll during %s", what);
  }
}

}  // namespace

// ---- SockAddr -------------------------------------------------------------------

int SockAddr::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&ss)->sin_port);
  if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port);
  return -1;
}

void SockAddr::setPort(int port) {
  if (family() == AF_INET) reinterpret_cast<sockaddr_in*>(&ss)->sin_port = htons(port);
  if (family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port = htons(port);
}

std::string SockAddr::hostStr() const {
  char buf[INET6_ADDRSTRLEN] = "?";
  if (family() == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr, buf, sizeof(buf));
  } else if (family() == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr, buf, sizeof(buf));
  }
  return buf;
}

std::string SockAddr::str() const {
  if (family() == AF_INET6) return "[" + hostStr() + "]:" + std::to_string(port());
  return hostStr() + ":" + std::to_string(port());
}

Status resolveAddress(const std::string& host, int port, SockAddr* out) {
  if (port < 0 || port > 65535) return invalidArgument("port %d out of range", port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (host.empty()) hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), nullptr, &hints, &res);
  if (rc != 0) return systemError("cannot resolve \"%s\": %s", host.c_str(), gai_strerror(rc));
  const addrinfo* pick = res;
  for (const addrinfo* a = res; a; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      pick = a;
      break;
    }
  }
  memcpy(&out->ss, pick->ai_addr, pick->ai_addrlen);
  out->len = pick->ai_addrlen;
  out->setPort(port);
  freeaddrinfo(res);
  return Status::Ok();
}

Status parseHostPort(const std::string& text, SockAddr* out) {
  std::string host;
  std::string port;
  if (!text.empty() && text[0] == '[') {
    size_t close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':')
      return invalidArgument("malformed address \"%s\" (want [v6]:port)", text.c_str());
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string::npos)
      return invalidArgument("malformed address \"%s\" (want host:port)", text.c_str());
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  char* end = nullptr;
  long p = strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || p < 0 || p > 65535)
    return invalidArgument("bad port in \"%s\"", text.c_str());
  return resolveAddress(host, static_cast<int>(p), out);
}

// ---- Deadline -------------------------------------------------------------------

Deadline Deadline::after(double seconds) {
  Deadline d;
  if (seconds > 0) {
    d.infinite_ = false;
    d.at_ = std::chrono::steady_clock::now() +
            std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6));
  }
  return d;
}

bool Deadline::expired() const { return !infinite_ && std::chrono::steady_clock::now() >= at_; }

int Deadline::remainingMs(int capMs) const {
  if (infinite_) return capMs;
  auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(at_ - std::chrono::steady_clock::now())
          .count();
  if (left < 0) return 0;
  return left < capMs ? static_cast<int>(left) : capMs;
}

// ---- Socket ---------------------------------------------------------------------

Socket::~Socket() { close(); }

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.release();
  }
  return *this;
}

int Socket::release() {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Status Socket::listen(const SockAddr& addr, int backlog, Socket* out) {
  int fd = ::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errnoError(errno, "socket()");
  Socket s(fd);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr.ss), addr.len) != 0)
    return errnoError(errno, "bind(%s)", addr.str().c_str());
  if (::listen(fd, backlog) != 0) return errnoError(errno, "listen(%s)", addr.str().c_str());
  *out = std::move(s);
  return Status::Ok();
}

Status Socket::connect(const SockAddr& addr, Deadline deadline, const std::atomic<bool>* abortFlag,
                       Socket* out) {
  int backoffMs = 1;
  for (;;) {
    if (aborted(abortFlag)) return remoteError("connect to %s aborted", addr.str().c_str());
    int fd = ::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return errnoError(errno, "socket()");
    Socket s(fd);
    int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr.ss), addr.len);
    int err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      TIDE_TRY(waitFd(fd, POLLOUT, deadline, abortFlag, "connect"));
      socklen_t len = sizeof(err);
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    }
    if (err == 0) {
      TIDE_TRY(s.setNonBlocking(false));
      *out = std::move(s);
      return Status::Ok();
    }
    bool retry = err == ECONNREFUSED || err == ETIMEDOUT || err == ENETUNREACH ||
                 err == EHOSTUNREACH || err == ECONNRESET || err == EAGAIN;
    if (!retry) return errnoError(err, "connect(%s)", addr.str().c_str());
    if (deadline.expired())
      return timeoutError("connect to %s timed out (last error: %s)", addr.str().c_str(),
                          strerror(err));
    usleep(backoffMs * 1000);
    backoffMs = backoffMs < 100 ? backoffMs * 2 : 100;
  }
}

Status Socket::accept(Socket* out, Deadline deadline, const std::atomic<bool>* abortFlag) const {
  for (;;) {
    TIDE_TRY(waitFd(fd_, POLLIN, deadline, abortFlag, "accept"));
    int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) {
      *out = Socket(fd);
      return Status::Ok();
    }
    if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED)
      return errnoError(errno, "accept()");
  }
}

Status Socket::sendAll(const void* buf, size_t n, Deadline deadline,
                       const std::atomic<bool>* abortFlag) const {
  const char* p = static_cast<const char*>(buf);
  while (n > 0) {
    ssize_t rc = ::send(fd_, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (rc > 0) {
      p += rc;
      n -= static_cast<size_t>(rc);
      continue;
    }
    if (rc < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      TIDE_TRY(waitFd(fd_, POLLOUT, deadline, abortFlag, "send"));
      continue;
    }
    if (rc < 0 && (errno == EPIPE || errno == ECONNRESET))
      return remoteError("peer closed the connection (send)");
    return errnoError(errno, "send()");
  }
  return Status::Ok();
}

Status Socket::recvAll(void* buf, size_t n, Deadline deadline,
                       const std::atomic<bool>* abortFlag) const {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t rc = ::recv(fd_, p, n, MSG_DONTWAIT);
    if (rc > 0) {
      p += rc;
      n -= static_cast<size_t>(rc);
      continue;
    }
    if (rc == 0) return remoteError("peer closed the connection");
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      TIDE_TRY(waitFd(fd_, POLLIN, deadline, abortFlag, "recv"));
      continue;
    }
    if (errno == ECONNRESET) return remoteError("peer reset the connection");
    return errnoError(errno, "recv()");
  }
  return Status::Ok();
}

Status Socket::sendSome(const void* buf, size_t n, size_t* done) const {
  *done = 0;
  if (n == 0) return Status::Ok();
  ssize_t rc = ::send(fd_, buf, n, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (rc >= 0) {
    *done = static_cast<size_t>(rc);
    return Status::Ok();
  }
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return Status::Ok();
  if (errno == EPIPE || errno == ECONNRESET) return remoteError("peer closed the connection");
  return errnoError(errno, "send()");
}

Status Socket::recvSome(void* buf, size_t n, size_t* done) const {
  *done = 0;
  if (n == 0) return Status::Ok();
  ssize_t rc = ::recv(fd_, buf, n, MSG_DONTWAIT);
  if (rc > 0) {
    *done = static_cast<size_t>(rc);
    return Status::Ok();
  }
  if (rc == 0) return remoteError("peer closed the connection");
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return Status::Ok();
  if (errno == ECONNRESET) return remoteError("peer reset the connection");
  return errnoError(errno, "recv()");
}

Status Socket::setNonBlocking(bool on) const {
  int flags = fcntl(fd_, F_GETFL);
  if (flags < 0) return errnoError(errno, "fcntl(F_GETFL)");
  flags = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  if (fcntl(fd_, F_SETFL, flags) != 0) return errnoError(errno, "fcntl(F_SETFL)");
  return Status::Ok();
}

Status Socket::setNoDelay() const {
  int one = 1;
  if (setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0)
    return errnoError(errno, "setsockopt(TCP_NODELAY)");
  return Status::Ok();
}

Status Socket::setBufferSizes(int bytes) const {
  if (bytes <= 0) return Status::Ok();
  setsockopt(fd_, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
  setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
  return Status::Ok();
}

Status Socket::localAddr(SockAddr* out) const {
  out->len = sizeof(out->ss);
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&out->ss), &out->len) != 0)
    return errnoError(errno, "getsockname()");
  return Status::Ok();
}

Status Socket::peerAddr(SockAddr* out) const {
  out->len = sizeof(out->ss);
  if (getpeername(fd_, reinterpret_cast<sockaddr*>(&out->ss), &out->len) != 0)
    return errnoError(errno, "getpeername()");
  return Status::Ok();
}

}  // namespace tide
