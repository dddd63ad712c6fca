// Atomic checkpoints (io/checkpoint.h).
//
// save_checkpoint writes everything into DIR/.tmp_step_<step>_<pid>/,
// fsyncs each file, extra/ and the folder, writes COMPLETE last (fsynced,
// then the folder again), and only then renames the folder to step_<step>
// and fsyncs DIR. Names that are not step_<step> with the canonical 8-or-more
// digit step are never checkpoints, so a crash before the rename leaves only
// an ignored temporary folder, which the next save removes.
//
// Replacing an existing step_<step>: renameat2(RENAME_EXCHANGE) swaps the
// new folder in atomically (the old one is left under the temporary name and
// removed). Where the file system lacks RENAME_EXCHANGE the old folder is
// renamed to .old_step_<step>_<pid>, the new one renamed in, then the old one
// removed. In that fallback a crash between the two renames leaves no
// step_<step>: newest_checkpoint then returns an older step (or nullopt),
// never a folder without COMPLETE, and the next save renames the old folder
// back when step_<step> is still missing.
//
// Pruning (keep_last) first renames a checkpoint to a temporary name (an
// atomic disappearance) and then deletes it, so a crash midway never leaves
// a step_ folder with COMPLETE but missing files. One process saves into a
// DIR at a time: a save removes every temporary folder it finds there.
// keep_last counts complete checkpoints by step, newest first, but never
// removes the one just saved (even when an older step is saved into a DIR
// holding newer ones).
//
// Both save and load require state.json to parse as a JSON object (it is
// stored byte for byte); extra/ may hold only regular files <key>.bin with
// keys [A-Za-z0-9_.-]+, anything else there fails the load.
#include "io/checkpoint.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <utility>

#include "io/error.h"

namespace tide_train {
namespace {

namespace fs = std::filesystem;

constexpr const char* kTmpPrefix = ".tmp_step_";
constexpr const char* kOldPrefix = ".old_step_";
constexpr const char* kStepPrefix = "step_";
constexpr const char* kComplete = "COMPLETE";

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw Error("checkpoint " + path + ": " + what);
}

[[noreturn]] void fail_errno(const std::string& path, const std::string& what) {
  fail(path, what + ": " + std::strerror(errno));
}

std::string step_name(int64_t step) {
  std::string digits = std::to_string(step);
  if (digits.size() < 8) digits.insert(0, 8 - digits.size(), '0');
  return kStepPrefix + digits;
}

// A non-negative decimal number; nullopt for anything else.
std::optional<int64_t> parse_digits(const std::string& digits) {
  if (digits.empty() ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  int64_t step = 0;
  const char* end = digits.data() + digits.size();
  auto [ptr, ec] = std::from_chars(digits.data(), end, step);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return step;
}

// "step_<step>" with the canonical digits (8, more only when needed).
std::optional<int64_t> parse_step_name(const std::string& name) {
  if (name.rfind(kStepPrefix, 0) != 0) return std::nullopt;
  auto step = parse_digits(name.substr(std::strlen(kStepPrefix)));
  if (!step || step_name(*step) != name) return std::nullopt;
  return step;
}

// ".old_step_<step>_<pid>" → step.
std::optional<int64_t> parse_old_name(const std::string& name) {
  if (name.rfind(kOldPrefix, 0) != 0) return std::nullopt;
  std::string rest = name.substr(std::strlen(kOldPrefix));
  return parse_digits(rest.substr(0, rest.find('_')));
}

bool is_complete(const fs::path& folder) {
  struct stat st {};
  return ::lstat((folder / kComplete).c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool is_dir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

void fsync_path(const std::string& path, bool dir) {
  int fd = ::open(path.c_str(), (dir ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) fail_errno(path, "cannot open for fsync");
  if (::fsync(fd) != 0) {
    int e = errno;
    ::close(fd);
    errno = e;
    fail_errno(path, "fsync failed");
  }
  ::close(fd);
}

void write_file_synced(const std::string& path, const void* data, size_t size) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail_errno(path, "cannot create");
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      ::close(fd);
      errno = e;
      fail_errno(path, "write error");
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    int e = errno;
    ::close(fd);
    errno = e;
    fail_errno(path, "fsync failed");
  }
  if (::close(fd) != 0) fail_errno(path, "close failed");
}

std::vector<uint8_t> read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_errno(path, "cannot open");
  std::vector<uint8_t> out;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) out.reserve(static_cast<size_t>(st.st_size));
  uint8_t chunk[65536];
  for (;;) {
    ssize_t n = ::read(fd, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      ::close(fd);
      errno = e;
      fail_errno(path, "read error");
    }
    if (n == 0) break;
    out.insert(out.end(), chunk, chunk + n);
  }
  ::close(fd);
  return out;
}

void remove_tree(const fs::path& p) {
  std::error_code ec;
  fs::remove_all(p, ec);
  if (ec) fail(p.string(), "cannot remove: " + ec.message());
}

void rename_path(const fs::path& from, const fs::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    fail_errno(from.string(), "cannot rename to " + to.string());
}

bool valid_key(const std::string& key) {
  return !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-';
  });
}

void check_state_json(const std::string& path, const std::string& text) {
  nlohmann::json state;
  try {
    state = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(path, std::string("state.json is not valid JSON: ") + e.what());
  }
  if (!state.is_object()) fail(path, "state.json is not a JSON object");
}

// Every entry of `dir` (names only); an Error when it cannot be listed.
std::vector<std::string> list_names(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) names.push_back(it->path().filename().string());
  if (ec) fail(dir.string(), "cannot list: " + ec.message());
  return names;
}

// Removes stale temporary folders and undoes an interrupted replacement.
void clean_up(const fs::path& dir) {
  bool renamed = false;
  for (const std::string& name : list_names(dir)) {
    if (name.rfind(kTmpPrefix, 0) == 0) {
      remove_tree(dir / name);
    } else if (auto step = parse_old_name(name)) {
      const fs::path old = dir / name, current = dir / step_name(*step);
      std::error_code ec;
      if (!fs::exists(fs::symlink_status(current, ec)) && is_complete(old)) {
        rename_path(old, current);
        renamed = true;
      } else {
        remove_tree(old);
      }
    }
  }
  if (renamed) fsync_path(dir.string(), true);
}

// Complete checkpoints of `dir`, newest first.
std::vector<int64_t> complete_steps(const fs::path& dir) {
  std::vector<int64_t> steps;
  for (const std::string& name : list_names(dir)) {
    auto step = parse_step_name(name);
    if (step && is_dir(dir / name) && is_complete(dir / name)) steps.push_back(*step);
  }
  std::sort(steps.begin(), steps.end(), std::greater<>());
  return steps;
}

// FNV-1a (64-bit) of a file's bytes: COMPLETE lists one per file, so a
// checkpoint whose contents changed after it was written (a flipped bit, a
// partial copy) fails to load instead of loading wrong weights.
uint64_t content_hash(const std::vector<uint8_t>& bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint8_t b : bytes) h = (h ^ b) * 0x100000001b3ull;
  return h;
}

std::string hash_line(const fs::path& folder, const std::string& rel) {
  const std::vector<uint8_t> bytes = read_file((folder / rel).string());
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(content_hash(bytes)));
  return std::string(hex) + " " + std::to_string(bytes.size()) + " " + rel + "\n";
}

// Checks every "<hash> <size> <file>" line of COMPLETE against the file.
void verify_hashes(const fs::path& folder) {
  const std::string where = (folder / kComplete).string();
  const std::vector<uint8_t> raw = read_file(where);
  const std::string text(raw.begin(), raw.end());
  size_t pos = text.find('\n');
  if (pos == std::string::npos || text.compare(0, 5, "step ") != 0)
    fail(where, "not a COMPLETE marker");
  int listed = 0;
  while (++pos < text.size()) {
    const size_t end = text.find('\n', pos);
    if (end == std::string::npos) fail(where, "truncated");
    const std::string line = text.substr(pos, end - pos);
    const size_t a = line.find(' '), b = line.find(' ', a + 1);
    if (a == std::string::npos || b == std::string::npos) fail(where, "bad line: " + line);
    const std::string rel = line.substr(b + 1);
    if (rel.empty() || rel.find("..") != std::string::npos) fail(where, "bad file name: " + rel);
    if (hash_line(folder, rel) != line + "\n")
      fail((folder / rel).string(), "contents differ from the checksum in COMPLETE (corrupt)");
    ++listed;
    pos = end;
  }
  if (listed == 0) fail(where, "lists no files");
}

void write_folder(const fs::path& tmp, const Checkpoint& ckpt) {
  if (::mkdir(tmp.c_str(), 0755) != 0) fail_errno(tmp.string(), "cannot create");
  write_safetensors((tmp / "model.safetensors").string(), ckpt.model);
  write_safetensors((tmp / "optim.safetensors").string(), ckpt.optim);
  write_file_synced((tmp / "state.json").string(), ckpt.state_json.data(), ckpt.state_json.size());
  const fs::path extra = tmp / "extra";
  if (::mkdir(extra.c_str(), 0755) != 0) fail_errno(extra.string(), "cannot create");
  for (const auto& [key, blob] : ckpt.extra)
    write_file_synced((extra / (key + ".bin")).string(), blob.data(), blob.size());
  fsync_path(extra.string(), true);
  fsync_path(tmp.string(), true);
  std::string marker = "step " + std::to_string(ckpt.step) + "\n";
  for (const char* f : {"model.safetensors", "optim.safetensors", "state.json"})
    marker += hash_line(tmp, f);
  for (const auto& entry : ckpt.extra) marker += hash_line(tmp, "extra/" + entry.first + ".bin");
  write_file_synced((tmp / kComplete).string(), marker.data(), marker.size());
  fsync_path(tmp.string(), true);
}

// Puts the finished `tmp` in place of `final`, which exists.
void replace(const fs::path& dir, const fs::path& tmp, const fs::path& final, int64_t step) {
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final.c_str(), RENAME_EXCHANGE) == 0) {
    fsync_path(dir.string(), true);
    remove_tree(tmp);  // now the old checkpoint
    return;
  }
  if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP && errno != ENOTSUP)
    fail_errno(tmp.string(), "cannot exchange with " + final.string());
  const fs::path old = dir / (kOldPrefix + std::to_string(step) + "_" + std::to_string(::getpid()));
  rename_path(final, old);
  fsync_path(dir.string(), true);
  rename_path(tmp, final);
  fsync_path(dir.string(), true);
  remove_tree(old);
}

}  // namespace

void save_checkpoint(const std::string& dir, const Checkpoint& ckpt, int keep_last) {
  if (ckpt.step < 0) fail(dir, "negative step " + std::to_string(ckpt.step));
  for (const auto& [key, blob] : ckpt.extra)
    if (!valid_key(key)) fail(dir, "extra key \"" + key + "\" is not [A-Za-z0-9_.-]+");
  check_state_json(dir, ckpt.state_json);

  const fs::path root(dir);
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) fail(dir, "cannot create the folder: " + ec.message());
  if (!is_dir(root)) fail(dir, "not a folder");
  clean_up(root);

  const fs::path tmp =
      root / (kTmpPrefix + std::to_string(ckpt.step) + "_" + std::to_string(::getpid()));
  const fs::path final = root / step_name(ckpt.step);
  try {
    write_folder(tmp, ckpt);
  } catch (const Error&) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);  // else the next save removes it
    throw;
  }
  if (fs::exists(fs::symlink_status(final, ec))) {
    replace(root, tmp, final, ckpt.step);
  } else {
    rename_path(tmp, final);
    fsync_path(dir, true);
  }

  if (keep_last <= 0) return;
  std::vector<fs::path> doomed;
  int kept = 0;
  for (int64_t step : complete_steps(root)) {
    if (kept < keep_last || step == ckpt.step) {  // never the one just saved
      ++kept;
      continue;
    }
    const fs::path away =
        root / (kTmpPrefix + std::to_string(step) + "_" + std::to_string(::getpid()) + "_pruned");
    rename_path(root / step_name(step), away);
    doomed.push_back(away);
  }
  if (doomed.empty()) return;
  fsync_path(dir, true);
  for (const fs::path& p : doomed) remove_tree(p);
}

std::optional<int64_t> newest_checkpoint(const std::string& dir) {
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (st.type() == fs::file_type::not_found) return std::nullopt;
  if (ec) fail(dir, "cannot look at the folder: " + ec.message());
  if (!fs::is_directory(st)) fail(dir, "not a folder");
  std::vector<int64_t> steps = complete_steps(dir);
  if (steps.empty()) return std::nullopt;
  return steps.front();
}

Checkpoint load_checkpoint(const std::string& dir, int64_t step) {
  if (step < 0) fail(dir, "negative step " + std::to_string(step));
  const fs::path folder = fs::path(dir) / step_name(step);
  const std::string where = folder.string();
  if (!is_dir(folder)) fail(where, "no such checkpoint folder");
  if (!is_complete(folder)) fail(where, "incomplete (no COMPLETE marker)");

  Checkpoint ckpt;
  ckpt.step = step;
  ckpt.model = read_safetensors((folder / "model.safetensors").string());
  ckpt.optim = read_safetensors((folder / "optim.safetensors").string());
  const std::string state_path = (folder / "state.json").string();
  std::vector<uint8_t> state = read_file(state_path);
  ckpt.state_json.assign(state.begin(), state.end());
  check_state_json(state_path, ckpt.state_json);

  const fs::path extra = folder / "extra";
  std::error_code ec;
  // Structure first (the messages name what is wrong), then the checksums.
  if (!fs::exists(fs::symlink_status(extra, ec))) {
    verify_hashes(folder);
    return ckpt;
  }
  if (!is_dir(extra)) fail(extra.string(), "not a folder");
  for (const std::string& name : list_names(extra)) {
    const fs::path file = extra / name;
    struct stat st {};
    const std::string suffix = ".bin";
    const bool named = name.size() > suffix.size() &&
                       name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    const std::string key = named ? name.substr(0, name.size() - suffix.size()) : "";
    if (!named || !valid_key(key)) fail(file.string(), "unexpected entry (not <key>.bin)");
    if (::lstat(file.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
      fail(file.string(), "not a regular file");
    ckpt.extra.emplace(key, read_file(file.string()));
  }
  verify_hashes(folder);
  return ckpt;
}

}  // namespace tide_train
