#include "job.h"

#include <dirent.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

extern char** environ;

namespace tiderun {
namespace {

bool FillRandom(unsigned char* buf, size_t size) {
  size_t got = 0;
  while (got < size) {
    ssize_t n = getrandom(buf + got, size - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      break;
    }
  }
  if (got == size) return true;
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  while (got < size) {
    ssize_t n = read(fd, buf + got, size - got);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (!(n < 0 && errno == EINTR)) {
      break;
    }
  }
  close(fd);
  return got == size;
}

// Binds a fresh TCP socket of the family of `sa` to it and returns the port
// the kernel chose, or 0.
int BindAndReadPort(const sockaddr* sa, socklen_t len) {
  int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  int port = 0;
  sockaddr_storage got{};
  socklen_t got_len = sizeof(got);
  if (bind(fd, sa, len) == 0 && getsockname(fd, reinterpret_cast<sockaddr*>(&got), &got_len) == 0) {
    if (got.ss_family == AF_INET) {
      port = ntohs(reinterpret_cast<sockaddr_in*>(&got)->sin_port);
    } else if (got.ss_family == AF_INET6) {
      port = ntohs(reinterpret_cast<sockaddr_in6*>(&got)->sin6_port);
    }
  }
  close(fd);
  return port;
}

}  // namespace

std::string RandomHex(size_t bytes) {
  std::vector<unsigned char> buf(bytes);
  if (!FillRandom(buf.data(), bytes)) return "";
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes);
  for (unsigned char b : buf) {
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

int PickFreePort(const std::string& addr, std::string* error) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(addr.c_str(), "0", &hints, &res);
  if (rc == 0) {
    for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
      int port = BindAndReadPort(ai->ai_addr, ai->ai_addrlen);
      if (port > 0) {
        freeaddrinfo(res);
        return port;
      }
    }
    freeaddrinfo(res);
  }
  // Not an address of this host (or not resolvable): any free port here.
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_addr.s_addr = htonl(INADDR_ANY);
  int port = BindAndReadPort(reinterpret_cast<sockaddr*>(&any), sizeof(any));
  if (port == 0) {
    *error = std::string("cannot find a free port: ") +
             (rc != 0 ? gai_strerror(rc) : std::strerror(errno));
  }
  return port;
}

int RemoveShmLeftovers(const std::string& job_id) {
  if (job_id.empty()) return 0;
  const std::string prefix = "tide-" + job_id;
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return 0;
  std::vector<std::string> names;
  while (dirent* e = readdir(dir)) {
    if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) names.emplace_back(e->d_name);
  }
  closedir(dir);
  int removed = 0;
  for (const std::string& name : names) {
    if (unlink(("/dev/shm/" + name).c_str()) == 0) ++removed;
  }
  return removed;
}

EnvBlock::EnvBlock(const std::vector<std::pair<std::string, std::string>>& set) {
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    size_t name_len = eq != nullptr ? static_cast<size_t>(eq - *e) : std::strlen(*e);
    bool replaced = false;
    for (const auto& [name, value] : set) {
      if (name.size() == name_len && std::strncmp(name.c_str(), *e, name_len) == 0) {
        replaced = true;
        break;
      }
    }
    if (!replaced) strings_.emplace_back(*e);
  }
  for (const auto& [name, value] : set)
    strings_.push_back(std::string(name).append("=").append(value));
  for (std::string& s : strings_) ptrs_.push_back(s.data());
  ptrs_.push_back(nullptr);
}

}  // namespace tiderun
