// Ethernet + IPv4 + UDP frames for AF_XDP: built into a UMEM frame for TX, parsed from one on RX.
// No allocation; every multi-byte field given or returned here is in network byte order.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pollux::transport::udp::xdp {

// Sizes of the headers the frames carry (no VLAN tag, no IPv4 options when built).
inline constexpr std::size_t kEthHeaderSize = 14;
inline constexpr std::size_t kIpv4HeaderSize = 20;
inline constexpr std::size_t kUdpHeaderSize = 8;
inline constexpr std::size_t kUdp4HeadersSize = kEthHeaderSize + kIpv4HeaderSize + kUdpHeaderSize;

// The addresses of a datagram: MACs, IPv4 addresses and ports (network byte order). The
// destination MAC comes from the caller (a neighbour lookup, or the multicast mapping).
struct Udp4Addressing {
  std::uint8_t src_mac[6];
  std::uint8_t dst_mac[6];
  std::uint32_t src_addr;
  std::uint32_t dst_addr;
  std::uint16_t src_port;
  std::uint16_t dst_port;
};

// Writes Ethernet/IPv4/UDP headers and the payload into `out` (capacity `cap`): IPv4 with DF,
// TTL `ttl`, the header checksum, and the UDP checksum. Returns the frame's length, 0 when it does
// not fit in `cap` or the datagram exceeds IPv4's 65535 bytes.
std::size_t build_udp4_frame(std::uint8_t* out, std::size_t cap, const Udp4Addressing& a, std::uint8_t ttl,
                             const void* payload, std::size_t len);

// A received IPv4/UDP datagram inside a frame.
struct Udp4View {
  std::uint32_t src_addr;
  std::uint32_t dst_addr;
  std::uint16_t src_port;
  std::uint16_t dst_port;
  const std::uint8_t* payload;
  std::size_t len;
};

// Parses `frame` (`len` bytes, starting at the Ethernet header) as an unfragmented IPv4/UDP
// datagram, IPv4 options allowed. False when it is not one or its lengths do not fit the frame.
bool parse_udp4_frame(const std::uint8_t* frame, std::size_t len, Udp4View* out);

// The checksums of a frame parse_udp4_frame accepted as `v`: the kernel checks them before a socket
// sees a datagram; an XSK gets the frame as it came.
//   kOk       the IPv4 header checksum is right, and the UDP checksum is right or absent (0)
//   kPartial  the UDP checksum field holds only the pseudo-header's sum: the sender left it to a
//             device that never computed it (a virtual link: veth, tap, loopback; the kernel
//             trusts such packets, CHECKSUM_PARTIAL). A real NIC computes it before the wire.
//   kBad      anything else
enum class Checksums : std::uint8_t { kOk, kPartial, kBad };
Checksums check_udp4_checksums(const std::uint8_t* frame, const Udp4View& v);

// The Internet checksum (RFC 1071) of `len` bytes, folded and complemented.
std::uint16_t internet_checksum(const void* data, std::size_t len);

}  // namespace pollux::transport::udp::xdp
