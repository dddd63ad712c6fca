// The training text and its window sampler (data/dataset.h).
//
// A source folder is read one level deep: its regular files (lstat, so
// symbolic links are skipped, as are sub-folders and fortune's "*.dat"
// indexes) in byte-wise name order. The source path itself may be a link.
// Window starts are a pure function of (seed, step, b): every layout and
// tests/trainer/nanogpt_ref.py draw the same global batch.
#include "data/dataset.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <utility>

#include "io/error.h"

namespace tide_train {
namespace {

constexpr uint64_t kSeedMul = 0x9E3779B97F4A7C15ULL;
constexpr uint64_t kStepMul = 0xD1B54A32D192ED03ULL;
constexpr uint64_t kValStep = 1ULL << 63;

[[noreturn]] void fail_errno(const std::string& path, const std::string& what) {
  throw Error("training data " + path + ": " + what + ": " + std::strerror(errno));
}

// Appends the bytes of the file at `path` to `out`.
void append_file(const std::string& path, std::vector<uint8_t>* out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_errno(path, "cannot open");
  struct stat st {};
  if (::fstat(fd, &st) == 0) out->reserve(out->size() + static_cast<size_t>(st.st_size));
  size_t got = out->size();
  for (;;) {
    if (out->size() - got < 65536) out->resize(got + 65536);
    ssize_t n = ::read(fd, out->data() + got, out->size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      ::close(fd);
      out->resize(got);
      errno = e;
      fail_errno(path, "read error");
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  out->resize(got);
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::vector<std::string> folder_names(const std::string& path) {
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) fail_errno(path, "cannot open the folder");
  std::vector<std::string> names;
  for (;;) {
    errno = 0;
    const dirent* e = ::readdir(d);
    if (e == nullptr) {
      if (errno != 0) {
        int err = errno;
        ::closedir(d);
        errno = err;
        fail_errno(path, "cannot list the folder");
      }
      break;
    }
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());  // char_traits<char>: byte-wise (unsigned) order
  return names;
}

}  // namespace

uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

std::vector<uint8_t> read_text_source(const std::string& source) {
  struct stat st {};
  if (::stat(source.c_str(), &st) != 0) {
    if (errno == ENOENT) throw Error("no training data: " + source + " does not exist");
    fail_errno(source, "cannot stat");
  }
  std::vector<uint8_t> bytes;
  if (S_ISREG(st.st_mode)) {
    append_file(source, &bytes);
  } else if (S_ISDIR(st.st_mode)) {
    for (const std::string& name : folder_names(source)) {
      if (ends_with(name, ".dat")) continue;
      std::string path = source;
      path.append("/").append(name);
      struct stat entry {};
      if (::lstat(path.c_str(), &entry) != 0) fail_errno(path, "cannot stat");
      if (S_ISREG(entry.st_mode)) append_file(path, &bytes);
    }
  } else {
    throw Error("training data " + source + ": neither a regular file nor a folder");
  }
  if (bytes.empty()) throw Error("no training data: " + source + " is empty");
  return bytes;
}

Dataset::Dataset(const std::string& source, int ctx) : ctx_(ctx) {
  if (ctx <= 0)
    throw Error("dataset: the context length must be positive, not " + std::to_string(ctx));
  std::vector<uint8_t> bytes = read_text_source(source);
  const size_t n = bytes.size();
  const size_t n_val = n / 10;
  const size_t need = static_cast<size_t>(ctx) + 1;
  auto check = [&](const char* part, size_t size) {
    if (size <= need)
      throw Error("training data " + source + " too short: its " + part + " part has " +
                  std::to_string(size) + " bytes (of " + std::to_string(n) +
                  " in all, the last tenth for validation) but must be longer than ctx + 1 = " +
                  std::to_string(need) + " bytes");
  };
  check("training", n - n_val);
  check("validation", n_val);
  val_.assign(bytes.end() - static_cast<std::ptrdiff_t>(n_val), bytes.end());
  bytes.resize(n - n_val);
  train_ = std::move(bytes);
}

std::string Dataset::default_source() { return "/usr/share/games/fortunes"; }

void Dataset::train_batch(uint64_t seed, uint64_t step, int first, int count, int* inputs,
                          int* targets) const {
  windows(train_, ctx_, seed, step, first, count, inputs, targets);
}

void Dataset::val_batch(uint64_t seed, uint64_t k, int first, int count, int* inputs,
                        int* targets) const {
  windows(val_, ctx_, seed, kValStep + k, first, count, inputs, targets);
}

void Dataset::windows(const std::vector<uint8_t>& bytes, int ctx, uint64_t seed, uint64_t step,
                      int first, int count, int* inputs, int* targets) {
  if (first < 0 || count < 0)
    throw Error("dataset: bad sequence range first=" + std::to_string(first) +
                " count=" + std::to_string(count));
  const size_t t_len = static_cast<size_t>(ctx);
  const uint64_t span = bytes.size() - t_len;  // > 1: the constructor checked
  const uint64_t base = seed * kSeedMul + step * kStepMul;
  for (int i = 0; i < count; ++i) {
    const uint64_t b = static_cast<uint64_t>(first) + static_cast<uint64_t>(i);
    const size_t start = splitmix64(base + b) % span;
    const uint8_t* src = bytes.data() + start;
    int* in = inputs + static_cast<size_t>(i) * t_len;
    int* tg = targets + static_cast<size_t>(i) * t_len;
    for (size_t t = 0; t < t_len; ++t) {
      in[t] = src[t];
      tg[t] = src[t + 1];
    }
  }
}

}  // namespace tide_train
