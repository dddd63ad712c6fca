// Environment knobs, declared once in knobs.def.
//
// Values are read from the environment on each call (TIDE_ name first, then
// the NCCL alias); hot paths copy what they need at communicator creation.
// Thread-safe as long as nobody calls setenv concurrently.
#pragma once

#include <cstdint>
#include <string>

namespace tide {

enum class KnobType { Int, Bool, Size, String };

enum class Knob {
#define TIDE_KNOB(id, name, alias, type, def, doc) id,
#include "core/knobs.def"
#undef TIDE_KNOB
  kCount
};

struct KnobInfo {
  Knob id;
  const char* name;
  const char* ncclAlias;  // "" when there is none
  KnobType type;
  const char* defaultValue;
  const char* doc;
};

// The whole table, in declaration order.
const KnobInfo* knobTable(int* count);
const KnobInfo& knobInfo(Knob k);

// True when the knob (or its alias) is set in the environment.
bool knobIsSet(Knob k);
// Raw value: environment or the default.
std::string knobString(Knob k);
// Parsed values; a malformed value logs one warning and yields the default.
int64_t knobInt(Knob k);
bool knobBool(Knob k);
// Size with K/M/G suffix (powers of 1024).
uint64_t knobSize(Knob k);

// Parses "123", "64K", "2M", "1G". Returns false on junk.
bool parseSize(const std::string& text, uint64_t* out);

}  // namespace tide
