// Command-line size parsing shared by the perf tools and stream_probe.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdlib>

namespace tide_perf {

// Parses "123", "64K", "2M", "1G" (powers of 1024, optional trailing B).
// Returns false on junk, negatives or overflow.
inline bool ParseSize(const char* s, size_t* out) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (end == s || errno != 0 || *s == '-') return false;
  unsigned long long mult = 1;
  switch (*end) {
    case 'K':
    case 'k':
      mult = 1ull << 10;
      ++end;
      break;
    case 'M':
    case 'm':
      mult = 1ull << 20;
      ++end;
      break;
    case 'G':
    case 'g':
      mult = 1ull << 30;
      ++end;
      break;
    default:
      break;
  }
  if (*end == 'B' || *end == 'b') ++end;
  if (*end != '\0') return false;
  *out = static_cast<size_t>(v * mult);
  return true;
}

}  // namespace tide_perf
