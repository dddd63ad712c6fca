// libFuzzer target: the unique-id decoder and the wire address conversion.
// Whatever decodes must re-encode to an id that decodes to the same thing.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/boot/bootstrap.h"
#include "core/unique_id.h"

namespace {

[[noreturn]] void fail() { __builtin_trap(); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tide;
  tideUniqueId id;
  memset(&id, 0, sizeof(id));
  memcpy(id.internal, data, size < sizeof(id) ? size : sizeof(id));
  UniqueIdData d;
  if (decodeUniqueId(id, &d).ok()) {
    std::string where = d.root.str();
    tideUniqueId again;
    encodeUniqueId(d, &again);
    UniqueIdData d2;
    if (!decodeUniqueId(again, &d2).ok()) fail();
    if (d2.root.str() != where || d2.authenticated != d.authenticated ||
        d2.rank0StartsRoot != d.rank0StartsRoot || memcmp(d2.secret, d.secret, kSecretBytes) != 0)
      fail();
  }
  if (size >= sizeof(WireAddr)) {
    WireAddr w;
    memcpy(&w, data, sizeof(w));
    SockAddr a = fromWire(w);
    if (a.valid()) {
      (void)a.str();
      (void)a.hostStr();
      WireAddr back = toWire(a);
      if (back.family != w.family || back.port != w.port) fail();
    }
  }
  return 0;
}
