// safetensors reading and writing (io/safetensors.h): F32 tensors only.
//
// Reading takes the whole file in one read, parses the JSON header with
// nlohmann-json (a parser callback catches duplicate keys, which nlohmann
// would otherwise silently resolve to the last one) and validates it against
// the file before any tensor data is copied: every tensor is F32 with
// non-negative integer dimensions, its byte size equals product(shape) · 4,
// and the tensors' data_offsets tile the data section exactly (sorted, no
// gaps, no overlaps, ending at the end of the file). Keys of a tensor entry
// other than dtype, shape and data_offsets are ignored, as the reference
// implementation does for forward compatibility.
//
// Writing follows the reference layout: the header is compact JSON padded
// with spaces so that the data section starts at a multiple of 8 bytes;
// "__metadata__" comes first (omitted when empty), then tensors in name
// order, their data stored in the same order.
#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>
#include <utility>

#include "io/error.h"

namespace tide_train {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; tide-train copies it as is");
static_assert(sizeof(float) == 4, "F32 tensors need a 4-byte float");

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

constexpr const char* kMetadataKey = "__metadata__";

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw Error("safetensors file " + path + ": " + what);
}

[[noreturn]] void fail_errno(const std::string& path, const std::string& what) {
  fail(path, what + ": " + std::strerror(errno));
}

// The whole file in one buffer.
std::vector<char> read_whole_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_errno(path, "cannot open");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    errno = e;
    fail_errno(path, "cannot stat");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, "not a regular file");
  }
  std::vector<char> buf(static_cast<size_t>(st.st_size));
  size_t got = 0;
  for (;;) {
    if (got == buf.size()) buf.resize(buf.size() + 65536);  // the file grew
    ssize_t n = ::read(fd, buf.data() + got, buf.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      errno = e;
      fail_errno(path, "read error");
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  buf.resize(got);
  return buf;
}

uint64_t load_u64_le(const char* p) {
  uint64_t v = 0;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Parses the header, rejecting duplicate keys at any depth.
Json parse_header(const std::string& path, const char* begin, const char* end) {
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  auto callback = [&](int /*depth*/, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
        open_objects.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case Json::parse_event_t::key:
        if (!open_objects.empty() && parsed.is_string() &&
            !open_objects.back().insert(parsed.get<std::string>()).second && duplicate.empty())
          duplicate = parsed.get<std::string>();
        break;
      default:
        break;
    }
    return true;
  };
  Json header;
  try {
    header = Json::parse(begin, end, callback);
  } catch (const Json::exception& e) {
    fail(path, std::string("invalid JSON header: ") + e.what());
  }
  if (!duplicate.empty()) fail(path, "duplicate key \"" + duplicate + "\" in the header");
  if (!header.is_object()) fail(path, "the header is not a JSON object");
  return header;
}

// A non-negative JSON integer (nlohmann stores those as unsigned or, when
// written with a sign, as integer); false for anything else.
bool get_nonneg_integer(const Json& v, uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer()) {
    int64_t i = v.get<int64_t>();
    if (i < 0) return false;
    *out = static_cast<uint64_t>(i);
    return true;
  }
  return false;
}

struct Entry {
  std::string name;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};

Entry parse_entry(const std::string& path, const std::string& name, const Json& info,
                  uint64_t data_size) {
  const std::string where = "tensor \"" + name + "\": ";
  if (!info.is_object()) fail(path, where + "entry is not a JSON object");
  Entry e;
  e.name = name;

  auto dtype = info.find("dtype");
  if (dtype == info.end()) fail(path, where + "missing \"dtype\"");
  if (!dtype->is_string()) fail(path, where + "\"dtype\" is not a string");
  if (dtype->get<std::string>() != "F32")
    fail(path, where + "dtype " + dtype->get<std::string>() + " is not supported (only F32)");

  auto shape = info.find("shape");
  if (shape == info.end()) fail(path, where + "missing \"shape\"");
  if (!shape->is_array()) fail(path, where + "\"shape\" is not an array");
  // Bytes of the tensor; too_big when the product overflows 64 bits.
  uint64_t bytes = 4;
  bool too_big = false;
  for (const Json& d : *shape) {
    uint64_t dim = 0;
    if (!get_nonneg_integer(d, &dim))
      fail(path, where + "shape entry " + d.dump() + " is not a non-negative integer");
    if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(path, where + "shape entry " + d.dump() + " is too large");
    e.shape.push_back(static_cast<int64_t>(dim));
    if (__builtin_mul_overflow(bytes, dim, &bytes)) too_big = true;
  }
  if (std::find(e.shape.begin(), e.shape.end(), 0) != e.shape.end()) {
    bytes = 0;
    too_big = false;
  }

  auto offsets = info.find("data_offsets");
  if (offsets == info.end()) fail(path, where + "missing \"data_offsets\"");
  if (!offsets->is_array() || offsets->size() != 2 ||
      !get_nonneg_integer((*offsets)[0], &e.begin) || !get_nonneg_integer((*offsets)[1], &e.end))
    fail(path, where + "\"data_offsets\" is not an array of two non-negative integers");
  if (e.begin > e.end)
    fail(path, where + "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                   "] end before they begin");
  if (e.end > data_size)
    fail(path, where + "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                   "] out of range (the data section has " + std::to_string(data_size) + " bytes)");
  if (too_big || bytes != e.end - e.begin)
    fail(path,
         where + "shape " + shape->dump() + " needs " +
             (too_big ? std::string("more than 2^64 bytes") : std::to_string(bytes) + " bytes") +
             " but data_offsets span " + std::to_string(e.end - e.begin));
  return e;
}

// The offsets must tile [0, data_size) exactly, in some order.
void check_coverage(const std::string& path, std::vector<Entry>* entries, uint64_t data_size) {
  std::sort(entries->begin(), entries->end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  uint64_t pos = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : *entries) {
    if (e.begin < pos)
      fail(path, "tensor \"" + e.name + "\" overlaps tensor \"" + prev->name + "\" (bytes " +
                     std::to_string(e.begin) + " < " + std::to_string(pos) + ")");
    if (e.begin > pos)
      fail(path, "bytes [" + std::to_string(pos) + ", " + std::to_string(e.begin) +
                     ") of the data section belong to no tensor");
    pos = e.end;
    prev = &e;
  }
  if (pos != data_size)
    fail(path, "the tensors cover " + std::to_string(pos) + " bytes but the data section has " +
                   std::to_string(data_size));
}

void write_all(int fd, const std::string& path, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail_errno(path, "write error");
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
}

}  // namespace

TensorFile read_safetensors(const std::string& path) {
  const std::vector<char> buf = read_whole_file(path);
  if (buf.size() < 8)
    fail(path, "truncated: " + std::to_string(buf.size()) +
                   " bytes, shorter than the 8-byte header length");
  const uint64_t header_size = load_u64_le(buf.data());
  if (header_size > buf.size() - 8)
    fail(path, "header length " + std::to_string(header_size) + " beyond the file's " +
                   std::to_string(buf.size()) + " bytes (truncated?)");
  const char* header_begin = buf.data() + 8;
  const char* data = header_begin + header_size;
  const uint64_t data_size = buf.size() - 8 - header_size;
  Json header = parse_header(path, header_begin, data);

  TensorFile out;
  std::vector<Entry> entries;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == kMetadataKey) {
      if (!it->is_object()) fail(path, "\"__metadata__\" is not a JSON object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) fail(path, "metadata value of \"" + m.key() + "\" is not a string");
        out.metadata.emplace(m.key(), m->get<std::string>());
      }
      continue;
    }
    entries.push_back(parse_entry(path, it.key(), *it, data_size));
  }
  check_coverage(path, &entries, data_size);

  for (Entry& e : entries) {
    Tensor t;
    const size_t bytes = e.end - e.begin;
    t.data.resize(bytes / sizeof(float));
    if (bytes > 0) std::memcpy(t.data.data(), data + e.begin, bytes);
    t.shape = std::move(e.shape);
    out.tensors.emplace(std::move(e.name), std::move(t));
  }
  return out;
}

void write_safetensors(const std::string& path, const TensorFile& file) {
  OrderedJson header = OrderedJson::object();
  if (!file.metadata.empty()) {
    OrderedJson meta = OrderedJson::object();
    for (const auto& [k, v] : file.metadata) meta[k] = v;
    header[kMetadataKey] = std::move(meta);
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : file.tensors) {
    if (name == kMetadataKey) fail(path, "a tensor cannot be named \"__metadata__\"");
    uint64_t elements = 1;
    for (int64_t d : t.shape) {
      if (d < 0) fail(path, "tensor \"" + name + "\" has negative dimension " + std::to_string(d));
      elements *= static_cast<uint64_t>(d);
    }
    if (elements != t.data.size())
      fail(path, "tensor \"" + name + "\" has " + std::to_string(t.data.size()) +
                     " elements but its shape needs " + std::to_string(elements));
    const uint64_t bytes = elements * sizeof(float);
    header[name] = {
        {"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const OrderedJson::exception& e) {  // e.g. a name that is not UTF-8
    fail(path, std::string("cannot encode the header: ") + e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  char size_le[8];
  const uint64_t n = text.size();
  std::memcpy(size_le, &n, sizeof(n));

  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail_errno(path, "cannot create");
  try {
    write_all(fd, path, size_le, sizeof(size_le));
    write_all(fd, path, text.data(), text.size());
    for (const auto& [name, t] : file.tensors)
      write_all(fd, path, t.data.data(), t.data.size() * sizeof(float));
    if (::fsync(fd) != 0) fail_errno(path, "fsync failed");
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) fail_errno(path, "close failed");
}

}  // namespace tide_train
