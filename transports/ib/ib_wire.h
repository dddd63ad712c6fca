// Wire formats of the verbs net's connection setup, independent of verbs so
// they are unit-tested without a device (tests/unit/test_ib_net.cc).
//
//  - IbHandle: what listen() writes into the caller's TIDE_NET_HANDLE_MAXSIZE
//    buffer: the TCP side channel's address and a random nonce. Plain bytes
//    (little-endian), no pointers; bytes [kIbHandleStateOffset, +8) stay free
//    for connect()'s state pointer (net.h allows it).
//  - IbConnInfo: what each side sends over the side channel: its QPs
//    (number, PSN), port address (LID, GID, link layer, MTU) and, from the
//    sender, its CTS FIFO (address, rkey). Fixed size, little-endian,
//    versioned; decode() rejects anything malformed.
// Thread-safety: plain functions on caller-owned data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"
#include "transports/ib/ib_logic.h"

namespace tide {

constexpr uint32_t kIbHandleMagic = 0x48424954;    // "TIBH"
constexpr uint32_t kIbConnInfoMagic = 0x43424954;  // "TIBC"
constexpr uint16_t kIbWireVersion = 1;
constexpr size_t kIbHandleBytes = 48;
constexpr size_t kIbHandleStateOffset = 96;
constexpr size_t kIbAddrMax = 28;  // sizeof(sockaddr_in6)

struct IbHandle {
  uint64_t nonce = 0;
  uint16_t addrLen = 0;           // bytes of addr used (a sockaddr_in or sockaddr_in6)
  uint8_t addr[kIbAddrMax] = {};  // the side channel's listening address
};
// Writes kIbHandleBytes bytes to `out`.
void ibHandleEncode(const IbHandle& h, uint8_t* out);
// invalidArgument when `in` is not an ib-net handle.
Status ibHandleDecode(const uint8_t* in, IbHandle* h);

enum class IbRole : uint8_t { Sender = 1, Receiver = 2 };

struct IbConnInfo {
  IbRole role = IbRole::Sender;
  uint64_t nonce = 0;     // the listener's nonce (checked by the acceptor)
  int nqps = 1;           // 1 .. kIbMaxQps
  uint8_t linkLayer = 0;  // IBV_LINK_LAYER_*
  uint8_t mtu = 0;        // enum ibv_mtu (1..5)
  uint16_t lid = 0;
  uint8_t gid[16] = {};
  uint64_t ctsAddr = 0;  // sender: its CTS FIFO; receiver: 0
  uint32_t ctsRkey = 0;
  uint32_t qpn[kIbMaxQps] = {};
  uint32_t psn[kIbMaxQps] = {};
};
constexpr size_t kIbConnInfoBytes = 48 + 8 * kIbMaxQps;
void ibConnInfoEncode(const IbConnInfo& c, uint8_t* out);
// invalidArgument naming the problem (magic, version, role, QP count, MTU,
// QPN or PSN beyond 24 bits).
Status ibConnInfoDecode(const uint8_t* in, size_t len, IbConnInfo* c);

// The path MTU both ends support (the smaller enum ibv_mtu value).
uint8_t ibPathMtu(uint8_t local, uint8_t remote);

}  // namespace tide
