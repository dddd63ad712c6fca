#include "transports/ib/ib_wire.h"

#include <algorithm>
#include <cstring>

namespace tide {
namespace {

class Writer {
 public:
  explicit Writer(uint8_t* p) : p_(p) {}
  void u8(uint8_t v) { *p_++ = v; }
  void u16(uint16_t v) { put(v, 2); }
  void u32(uint32_t v) { put(v, 4); }
  void u64(uint64_t v) { put(v, 8); }
  void bytes(const uint8_t* b, size_t n) {
    memcpy(p_, b, n);
    p_ += n;
  }

 private:
  void put(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) *p_++ = static_cast<uint8_t>(v >> (8 * i));
  }
  uint8_t* p_;
};

class Reader {
 public:
  explicit Reader(const uint8_t* p) : p_(p) {}
  uint8_t u8() { return *p_++; }
  uint16_t u16() { return static_cast<uint16_t>(get(2)); }
  uint32_t u32() { return static_cast<uint32_t>(get(4)); }
  uint64_t u64() { return get(8); }
  void bytes(uint8_t* b, size_t n) {
    memcpy(b, p_, n);
    p_ += n;
  }

 private:
  uint64_t get(int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= uint64_t{*p_++} << (8 * i);
    return v;
  }
  const uint8_t* p_;
};

}  // namespace

void ibHandleEncode(const IbHandle& h, uint8_t* out) {
  memset(out, 0, kIbHandleBytes);
  Writer w(out);
  w.u32(kIbHandleMagic);
  w.u16(kIbWireVersion);
  w.u16(h.addrLen);
  w.u64(h.nonce);
  w.bytes(h.addr, kIbAddrMax);
}

Status ibHandleDecode(const uint8_t* in, IbHandle* h) {
  Reader r(in);
  uint32_t magic = r.u32();
  uint16_t version = r.u16();
  if (magic != kIbHandleMagic) return invalidArgument("ib net: not an ib-net handle");
  if (version != kIbWireVersion) {
    return invalidArgument("ib net: handle version %u, this build speaks %u", version,
                           kIbWireVersion);
  }
  h->addrLen = r.u16();
  h->nonce = r.u64();
  r.bytes(h->addr, kIbAddrMax);
  if (h->addrLen < 16 || h->addrLen > kIbAddrMax) {
    return invalidArgument("ib net: handle with a %u-byte address", h->addrLen);
  }
  return Status::Ok();
}

void ibConnInfoEncode(const IbConnInfo& c, uint8_t* out) {
  memset(out, 0, kIbConnInfoBytes);
  Writer w(out);
  w.u32(kIbConnInfoMagic);
  w.u16(kIbWireVersion);
  w.u8(static_cast<uint8_t>(c.role));
  w.u8(static_cast<uint8_t>(c.nqps));
  w.u64(c.nonce);
  w.u8(c.linkLayer);
  w.u8(c.mtu);
  w.u16(c.lid);
  w.bytes(c.gid, 16);
  w.u64(c.ctsAddr);
  w.u32(c.ctsRkey);
  for (int q = 0; q < kIbMaxQps; ++q) w.u32(c.qpn[q]);
  for (int q = 0; q < kIbMaxQps; ++q) w.u32(c.psn[q]);
}

Status ibConnInfoDecode(const uint8_t* in, size_t len, IbConnInfo* c) {
  if (len < kIbConnInfoBytes) return invalidArgument("ib net: short connection info (%zu B)", len);
  Reader r(in);
  if (r.u32() != kIbConnInfoMagic) return invalidArgument("ib net: bad connection info magic");
  uint16_t version = r.u16();
  if (version != kIbWireVersion) {
    return invalidArgument("ib net: peer speaks version %u, this build %u", version,
                           kIbWireVersion);
  }
  uint8_t role = r.u8();
  if (role != static_cast<uint8_t>(IbRole::Sender) &&
      role != static_cast<uint8_t>(IbRole::Receiver))
    return invalidArgument("ib net: connection info with role %u", role);
  c->role = static_cast<IbRole>(role);
  c->nqps = r.u8();
  if (c->nqps < 1 || c->nqps > kIbMaxQps)
    return invalidArgument("ib net: peer has %d QPs per connection", c->nqps);
  c->nonce = r.u64();
  c->linkLayer = r.u8();
  c->mtu = r.u8();
  if (c->mtu < 1 || c->mtu > 5) return invalidArgument("ib net: peer MTU code %u", c->mtu);
  c->lid = r.u16();
  r.bytes(c->gid, 16);
  c->ctsAddr = r.u64();
  c->ctsRkey = r.u32();
  for (int q = 0; q < kIbMaxQps; ++q) c->qpn[q] = r.u32();
  for (int q = 0; q < kIbMaxQps; ++q) c->psn[q] = r.u32();
  for (int q = 0; q < c->nqps; ++q) {
    if (c->qpn[q] == 0 || c->qpn[q] > 0xffffff || c->psn[q] > 0xffffff)
      return invalidArgument("ib net: peer QP %d has QPN %u / PSN %u", q, c->qpn[q], c->psn[q]);
  }
  if (c->role == IbRole::Sender && c->ctsRkey == 0 && c->ctsAddr == 0)
    return invalidArgument("ib net: sender without a CTS FIFO");
  return Status::Ok();
}

uint8_t ibPathMtu(uint8_t local, uint8_t remote) { return std::min(local, remote); }

}  // namespace tide
