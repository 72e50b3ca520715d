// Who sent a UD datagram, as the reliability protocol's opaque PeerAddress: the source GID of
// its network header and the sending QP (the work completion's src_qp). A UD multicast
// subscriber compares it for every datagram (all datagrams of a publisher session come from
// one QP: anything else carrying that session is dropped as wrong_source) and sends its NAKs
// and status messages back to it, unicast (an address handle for the GID, the QPN in the send
// work request). Verbs-free, so the host tests and the fuzz harness reach it without a device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "transport/reliability/wire.h"

namespace pollux::transport::rdma {

// PeerAddress layout: bytes 0..16 the source GID (RoCEv2 over IPv4: ::ffff:a.b.c.d, as the
// device's own GID table has it), 16..20 the source QPN (little-endian).
inline constexpr std::uint32_t kUdPeerLength = 20;
static_assert(kUdPeerLength <= sizeof(reliability::PeerAddress::bytes));

// The 40 bytes a UD receive writes in front of every datagram (kGrhBytes) carry the packet's
// network header. RoCEv2 over IPv4: bytes 20..40 are its IPv4 header and 0..20 are undefined;
// InfiniBand and RoCE over IPv6: an IPv6-format GRH whose source GID is bytes 8..24. Told apart
// as rdma-core's ibv_init_ah_from_wc does: an IPv6 version nibble in byte 0 means a GRH unless
// bytes 20..40 are an IPv4 header (version 4, IHL 5) whose checksum verifies; otherwise bytes
// 20..40 must be such an IPv4 header. Anything else is malformed (false): a device writes one
// of the two, so the datagram is dropped and counted.
inline bool ud_source(const std::byte* grh, std::uint32_t src_qpn, reliability::PeerAddress* out) noexcept {
  const auto* b = reinterpret_cast<const std::uint8_t*>(grh);
  const std::uint8_t* ip4 = b + 20;
  const bool ip4_shape = ip4[0] == 0x45;  // version 4, IHL 5 (RoCEv2 never carries IPv4 options)
  bool ipv4;
  if ((b[0] >> 4) != 6) {
    if (!ip4_shape) return false;
    ipv4 = true;
  } else if (!ip4_shape) {
    ipv4 = false;
  } else {
    // Both readings possible: the IPv4 header checksum decides (ones' complement sum of the ten
    // 16-bit words, the checksum field included, is 0xffff for a valid header).
    std::uint32_t sum = 0;
    for (int i = 0; i < 20; i += 2) sum += static_cast<std::uint32_t>(ip4[i] << 8 | ip4[i + 1]);
    while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
    ipv4 = sum == 0xffff;
  }
  std::memset(out->bytes, 0, sizeof out->bytes);
  auto* gid = reinterpret_cast<std::uint8_t*>(out->bytes);
  if (ipv4) {
    gid[10] = 0xff;
    gid[11] = 0xff;
    std::memcpy(gid + 12, ip4 + 12, 4);  // the IPv4 source address, network order
  } else {
    std::memcpy(gid, b + 8, 16);  // the GRH's SGID
  }
  std::memcpy(gid + 16, &src_qpn, 4);
  out->length = kUdPeerLength;
  out->reserved = 0;
  return true;
}

inline const std::uint8_t* ud_peer_gid(const reliability::PeerAddress& p) noexcept {
  return reinterpret_cast<const std::uint8_t*>(p.bytes);
}
inline std::uint32_t ud_peer_qpn(const reliability::PeerAddress& p) noexcept {
  std::uint32_t q;
  std::memcpy(&q, p.bytes + 16, 4);
  return q;
}

}  // namespace pollux::transport::rdma
