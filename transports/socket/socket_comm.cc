// The socket net's comms: the data sockets' options, the helper threads that
// drive them, and a comm's construction and teardown.
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <memory>
#include <system_error>

#include "core/config.h"
#include "core/log.h"
#include "transports/net/net_registry.h"
#include "transports/socket/socket_internal.h"

namespace tide {
namespace socknet {

tideResult_t fail(tideResult_t code, const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  TIDE_INFO("socket net: %s", buf);
  setNetErrorDetail(buf);
  return code;
}

void closeFd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// Options of every data socket: no Nagle, buffer sizes, liveness.
void configureSocket(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  int64_t t = knobInt(Knob::Timeout);
  if (t > 0) {
    int idle = static_cast<int>(std::clamp<int64_t>(t / 3, 1, 60));
    int intvl = static_cast<int>(std::clamp<int64_t>(t / 10, 1, 10));
    int cnt = static_cast<int>(std::clamp<int64_t>(t / intvl, 1, 127));
    unsigned int userMs = static_cast<unsigned int>(std::min<int64_t>(t * 1000, INT_MAX));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &userMs, sizeof(userMs));
  }
}

void setBuffers(int fd) {
  uint64_t b = knobSize(Knob::SocketBufSize);
  if (b == 0) return;
  int v = static_cast<int>(std::min<uint64_t>(b, INT_MAX));
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
}

void notify(int fd) {
  if (fd < 0) return;
  uint64_t one = 1;
  ssize_t r = ::write(fd, &one, sizeof(one));
  (void)r;
}

void drain(int fd) {
  uint64_t v;
  ssize_t r = ::read(fd, &v, sizeof(v));
  (void)r;
}

int socketThreads() {
  const int64_t t = knobInt(Knob::SocketNthreads);
  if (t >= 0) return static_cast<int>(std::min<int64_t>(t, kMaxThreads));
  return sysconf(_SC_NPROCESSORS_ONLN) >= 4 ? 1 : 0;
}

void Comm::setError(tideResult_t code, const std::string& msg) {
  {
    std::lock_guard<std::mutex> g(mu);
    if (err.load() != 0) return;
    errMsg = msg;
    err.store(code, std::memory_order_release);
  }
  TIDE_INFO("socket net: %s", msg.c_str());
  notify(doneFd);
}

void helperMain(Comm* c, int t) {
  std::vector<DataSock*> mine;
  for (size_t i = t; i < c->socks.size(); i += c->nthreads) mine.push_back(&c->socks[i]);
  std::vector<pollfd> fds;
  bool broken = false;
  while (!c->stop.load(std::memory_order_acquire)) {
    bool moved = false;
    for (DataSock* s : mine) {
      if (broken) break;
      if (!stepSock(*c, *s, &moved)) broken = true;
    }
    if (moved && !broken) continue;
    fds.clear();
    fds.push_back(pollfd{c->wakeFds[t], POLLIN, 0});
    if (!broken) {
      for (DataSock* s : mine) {
        short ev = 0;
        if (c->send) {
          std::lock_guard<std::mutex> g(c->mu);
          if (s->active || !s->queue.empty()) ev = POLLOUT;
        } else if (!s->stalled && !s->eof) {
          ev = POLLIN;
        }
        if (ev) fds.push_back(pollfd{s->fd, ev, 0});
      }
    }
    int rc = ::poll(fds.data(), fds.size(), 1000);
    if (rc > 0 && (fds[0].revents & POLLIN)) drain(c->wakeFds[t]);
  }
}

void wakeHelpers(Comm& c) {
  for (int fd : c.wakeFds) notify(fd);
}

void stopHelpers(Comm& c) {
  c.stop.store(true, std::memory_order_release);
  wakeHelpers(c);
  for (std::thread& t : c.threads) {
    if (t.joinable()) t.join();
  }
}

void destroyComm(Comm* c) {
  stopHelpers(*c);
  for (DataSock& s : c->socks) closeFd(s.fd);
  for (int& fd : c->wakeFds) closeFd(fd);
  closeFd(c->doneFd);
  closeFd(c->roomFd);
  for (Request* r : c->live) delete r;
  delete c;
}

// Builds a comm from connected sockets and starts its helper threads.
tideResult_t makeComm(bool send, std::vector<int>& fds, Comm** out) {
  auto c = std::make_unique<Comm>();
  c->send = send;
  for (int fd : fds) {
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    configureSocket(fd);
    DataSock s;
    s.fd = fd;
    c->socks.push_back(std::move(s));
  }
  fds.clear();
  c->nthreads = std::min(socketThreads(), static_cast<int>(c->socks.size()));
  if (c->nthreads > 0) {
    // On failure the comm closes the sockets it took and the fds it made.
    c->doneFd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (c->doneFd < 0) {
      int e = errno;
      destroyComm(c.release());
      return fail(tideSystemError, "eventfd: %s", strerror(e));
    }
    for (int t = 0; t < c->nthreads; ++t) {
      int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
      if (fd < 0) {
        int e = errno;
        destroyComm(c.release());
        return fail(tideSystemError, "eventfd: %s", strerror(e));
      }
      c->wakeFds.push_back(fd);
    }
    try {
      for (int t = 0; t < c->nthreads; ++t) c->threads.emplace_back(helperMain, c.get(), t);
    } catch (const std::system_error& e) {
      destroyComm(c.release());
      return fail(tideSystemError, "cannot start a helper thread: %s", e.what());
    }
  } else if (send && c->socks.size() == 1) {
    // A sending socket never turns readable; the poll fd must when there is
    // room to send (net.h), so it is an epoll fd watching for writability.
    c->roomFd = epoll_create1(EPOLL_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLOUT;
    ev.data.fd = c->socks[0].fd;
    if (c->roomFd < 0 || epoll_ctl(c->roomFd, EPOLL_CTL_ADD, c->socks[0].fd, &ev) != 0) {
      int e = errno;
      destroyComm(c.release());
      return fail(tideSystemError, "epoll: %s", strerror(e));
    }
  }
  *out = c.release();
  return tideSuccess;
}

}  // namespace socknet
}  // namespace tide
