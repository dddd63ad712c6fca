#include "output.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace tiderun {

void Log(const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  std::string line = std::string("tiderun: ") + buf + "\n";
  WriteAll(STDERR_FILENO, line.data(), line.size());
}

bool WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = write(fd, data, size);
    if (n > 0) {
      data += n;
      size -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      if (poll(&p, 1, -1) < 0 && errno != EINTR) return false;
      continue;
    }
    return false;
  }
  return true;
}

void LinePrefixer::Emit(const char* data, size_t size, bool newline_needed) {
  if (broken_) return;
  std::string line;
  line.reserve(prefix_.size() + size + 1);
  if (!mid_line_) line += prefix_;
  line.append(data, size);
  if (newline_needed) line += '\n';
  if (!WriteAll(out_fd_, line.data(), line.size())) broken_ = true;
}

void LinePrefixer::Feed(const char* data, size_t size) {
  while (size > 0) {
    const char* nl = static_cast<const char*>(std::memchr(data, '\n', size));
    if (nl == nullptr) {
      pending_.append(data, size);
      if (pending_.size() >= kMaxLine) {
        Emit(pending_.data(), pending_.size(), false);
        pending_.clear();
        mid_line_ = true;
      }
      return;
    }
    size_t len = static_cast<size_t>(nl - data) + 1;  // through the newline
    if (pending_.empty()) {
      Emit(data, len, false);
    } else {
      pending_.append(data, len);
      Emit(pending_.data(), pending_.size(), false);
      pending_.clear();
    }
    mid_line_ = false;
    data += len;
    size -= len;
  }
}

void LinePrefixer::Finish() {
  if (!pending_.empty() || mid_line_) {
    Emit(pending_.data(), pending_.size(), true);
    pending_.clear();
    mid_line_ = false;
  }
}

}  // namespace tiderun
