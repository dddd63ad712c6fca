// tiderun's own messages, and the line-prefixing relay of a rank's output
// stream (--prefix-output).
#pragma once

#include <cstddef>
#include <string>
#include <utility>

namespace tiderun {

// Writes "tiderun: <printf-formatted message>\n" to stderr in one write
// (messages longer than about 1000 bytes are cut).
void Log(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Writes all of data to fd, retrying on EINTR and waiting (poll) when fd is
// non-blocking. Returns false on any other error (EPIPE included; the caller
// ignores SIGPIPE). Blocking.
bool WriteAll(int fd, const char* data, size_t size);

// Collects bytes of one stream and writes them to out_fd one whole line at a
// time, each line preceded by the prefix, so that lines of different ranks
// never mix. A line longer than kMaxLine is written in pieces (only the first
// piece carries the prefix). Not thread-safe; one instance per stream.
class LinePrefixer {
 public:
  static constexpr size_t kMaxLine = 64 * 1024;

  LinePrefixer(int out_fd, std::string prefix) : out_fd_(out_fd), prefix_(std::move(prefix)) {}

  // Writes every complete line in data (and keeps the rest). Blocking.
  void Feed(const char* data, size_t size);
  // Writes the pending partial line, if any, terminated by a newline.
  void Finish();

 private:
  void Emit(const char* data, size_t size, bool newline_needed);

  int out_fd_;
  std::string prefix_;
  std::string pending_;    // bytes after the last newline
  bool mid_line_ = false;  // a piece of the current line was already written
  bool broken_ = false;    // out_fd_ failed; drop further output
};

}  // namespace tiderun
