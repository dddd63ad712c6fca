#include "core/config.h"

#include <strings.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

#include "core/log.h"

namespace tide {

namespace {

const KnobInfo kKnobs[] = {
#define TIDE_KNOB(id, name, alias, type, def, doc) \
  {Knob::id, name, alias, KnobType::type, def, doc},
#include "core/knobs.def"
#undef TIDE_KNOB
};

const char* rawValue(Knob k) {
  const KnobInfo& info = knobInfo(k);
  if (const char* v = getenv(info.name)) return v;
  if (info.ncclAlias[0] != '\0') {
    if (const char* v = getenv(info.ncclAlias)) return v;
  }
  return nullptr;
}

// Warns once per knob about a malformed value.
void warnMalformed(Knob k, const char* value) {
  static std::mutex mu;
  static std::set<int> warned;
  std::lock_guard<std::mutex> lock(mu);
  if (warned.insert(static_cast<int>(k)).second) {
    TIDE_WARN("ignoring malformed %s=\"%s\", using the default %s", knobInfo(k).name, value,
              knobInfo(k).defaultValue);
  }
}

bool parseInt(const char* s, int64_t* out) {
  char* end = nullptr;
  long long v = strtoll(s, &end, 0);
  if (end == s || *end != '\0') return false;
  *out = v;
  return true;
}

}  // namespace

const KnobInfo* knobTable(int* count) {
  *count = static_cast<int>(sizeof(kKnobs) / sizeof(kKnobs[0]));
  return kKnobs;
}

const KnobInfo& knobInfo(Knob k) { return kKnobs[static_cast<int>(k)]; }

bool knobIsSet(Knob k) { return rawValue(k) != nullptr; }

std::string knobString(Knob k) {
  const char* v = rawValue(k);
  return v ? v : knobInfo(k).defaultValue;
}

namespace {

// The knob's value read by parse(text, &value); when unset or malformed
// (warned about once), its default from the table.
template <typename T, typename Parse>
T parsedKnob(Knob k, Parse parse) {
  T v = 0;
  const char* raw = rawValue(k);
  if (raw && parse(raw, &v)) return v;
  if (raw) warnMalformed(k, raw);
  parse(knobInfo(k).defaultValue, &v);
  return v;
}

}  // namespace

int64_t knobInt(Knob k) { return parsedKnob<int64_t>(k, parseInt); }

bool knobBool(Knob k) {
  const char* raw = rawValue(k);
  if (raw) {
    if (strcasecmp(raw, "1") == 0 || strcasecmp(raw, "true") == 0 || strcasecmp(raw, "yes") == 0 ||
        strcasecmp(raw, "on") == 0)
      return true;
    if (strcasecmp(raw, "0") == 0 || strcasecmp(raw, "false") == 0 || strcasecmp(raw, "no") == 0 ||
        strcasecmp(raw, "off") == 0 || raw[0] == '\0')
      return false;
    warnMalformed(k, raw);
  }
  return strcmp(knobInfo(k).defaultValue, "1") == 0;
}

bool parseSize(const std::string& text, uint64_t* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  unsigned long long v = strtoull(text.c_str(), &end, 0);
  if (end == text.c_str()) return false;
  uint64_t mult = 1;
  switch (*end) {
    case '\0':
      break;
    case 'k':
    case 'K':
      mult = 1ull << 10;
      ++end;
      break;
    case 'm':
    case 'M':
      mult = 1ull << 20;
      ++end;
      break;
    case 'g':
    case 'G':
      mult = 1ull << 30;
      ++end;
      break;
    default:
      return false;
  }
  if (*end == 'B' || *end == 'b') ++end;
  if (*end != '\0') return false;
  *out = v * mult;
  return true;
}

uint64_t knobSize(Knob k) {
  return parsedKnob<uint64_t>(k, [](const char* text, uint64_t* v) { return parseSize(text, v); });
}

}  // namespace tide
