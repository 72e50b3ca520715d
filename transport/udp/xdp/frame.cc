#include "transport/udp/xdp/frame.h"

#include <bit>
#include <cstring>

namespace pollux::transport::udp::xdp {
namespace {

constexpr std::uint16_t kEtherTypeIpv4 = 0x0800;
constexpr std::uint8_t kProtoUdp = 17;

void put16(std::uint8_t* p, std::uint16_t host) {
  p[0] = static_cast<std::uint8_t>(host >> 8);
  p[1] = static_cast<std::uint8_t>(host);
}

std::uint16_t get16(const std::uint8_t* p) { return static_cast<std::uint16_t>((p[0] << 8) | p[1]); }

// One's-complement sum of 16-bit big-endian words, not folded. The sum is computed on 32-bit
// native-order words into a 64-bit accumulator and byte-swapped at the end: the one's-complement
// sum does not depend on the byte order it is computed in (RFC 1071, 2.B), and this is ~8x fewer
// additions than word by word (it runs over every datagram sent, and received when checked).
std::uint32_t sum16(std::uint32_t sum, const std::uint8_t* p, std::size_t len) {
  std::uint64_t acc = 0;
  for (; len >= 8; p += 8, len -= 8) {
    std::uint32_t a, b;
    std::memcpy(&a, p, 4);
    std::memcpy(&b, p + 4, 4);
    acc += static_cast<std::uint64_t>(a) + b;
  }
  for (; len >= 2; p += 2, len -= 2) {
    std::uint16_t w;
    std::memcpy(&w, p, 2);
    acc += w;
  }
  if (len) {
    const std::uint8_t last[2] = {p[0], 0};
    std::uint16_t w;
    std::memcpy(&w, last, 2);
    acc += w;
  }
  while (acc >> 16) acc = (acc & 0xffff) + (acc >> 16);
  const std::uint16_t native = static_cast<std::uint16_t>(acc);
  std::uint16_t be;
  const std::uint8_t bytes[2] = {static_cast<std::uint8_t>(native), static_cast<std::uint8_t>(native >> 8)};
  // The native-order sum read as big-endian: on a little-endian host its bytes swap.
  if constexpr (std::endian::native == std::endian::little) {
    be = static_cast<std::uint16_t>((bytes[0] << 8) | bytes[1]);
  } else {
    be = native;
  }
  return sum + be;
}

std::uint16_t fold(std::uint32_t sum) {
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<std::uint16_t>(~sum);
}

}  // namespace

std::uint16_t internet_checksum(const void* data, std::size_t len) {
  return fold(sum16(0, static_cast<const std::uint8_t*>(data), len));
}

std::size_t build_udp4_frame(std::uint8_t* out, std::size_t cap, const Udp4Addressing& a, std::uint8_t ttl,
                             const void* payload, std::size_t len) {
  const std::size_t ip_len = kIpv4HeaderSize + kUdpHeaderSize + len;
  if (ip_len > 0xffff || kEthHeaderSize + ip_len > cap) return 0;
  std::uint8_t* eth = out;
  std::memcpy(eth, a.dst_mac, 6);
  std::memcpy(eth + 6, a.src_mac, 6);
  put16(eth + 12, kEtherTypeIpv4);

  std::uint8_t* ip = eth + kEthHeaderSize;
  ip[0] = 0x45;  // version 4, ihl 5
  ip[1] = 0;     // DSCP/ECN
  put16(ip + 2, static_cast<std::uint16_t>(ip_len));
  put16(ip + 4, 0);       // identification: DF datagrams are never fragmented
  put16(ip + 6, 0x4000);  // DF
  ip[8] = ttl;
  ip[9] = kProtoUdp;
  put16(ip + 10, 0);
  std::memcpy(ip + 12, &a.src_addr, 4);
  std::memcpy(ip + 16, &a.dst_addr, 4);
  put16(ip + 10, internet_checksum(ip, kIpv4HeaderSize));

  std::uint8_t* udp = ip + kIpv4HeaderSize;
  std::memcpy(udp, &a.src_port, 2);
  std::memcpy(udp + 2, &a.dst_port, 2);
  put16(udp + 4, static_cast<std::uint16_t>(kUdpHeaderSize + len));
  put16(udp + 6, 0);
  if (len) std::memcpy(udp + kUdpHeaderSize, payload, len);
  // Pseudo header (addresses, protocol, UDP length) + UDP header + payload; 0 is sent as 0xffff.
  std::uint32_t sum = sum16(0, ip + 12, 8);
  sum += kProtoUdp;
  sum += static_cast<std::uint32_t>(kUdpHeaderSize + len);
  const std::uint16_t check = fold(sum16(sum, udp, kUdpHeaderSize + len));
  put16(udp + 6, check ? check : 0xffff);
  return kEthHeaderSize + ip_len;
}

bool parse_udp4_frame(const std::uint8_t* frame, std::size_t len, Udp4View* out) {
  if (len < kEthHeaderSize + kIpv4HeaderSize || get16(frame + 12) != kEtherTypeIpv4) return false;
  const std::uint8_t* ip = frame + kEthHeaderSize;
  const std::size_t ihl = static_cast<std::size_t>(ip[0] & 0x0f) * 4;
  if ((ip[0] >> 4) != 4 || ihl < kIpv4HeaderSize || ip[9] != kProtoUdp) return false;
  if (get16(ip + 6) & 0x3fff) return false;  // a fragment
  const std::size_t ip_len = get16(ip + 2);
  if (ip_len < ihl + kUdpHeaderSize || kEthHeaderSize + ip_len > len) return false;
  const std::uint8_t* udp = ip + ihl;
  const std::size_t udp_len = get16(udp + 4);
  if (udp_len < kUdpHeaderSize || udp_len > ip_len - ihl) return false;
  std::memcpy(&out->src_addr, ip + 12, 4);
  std::memcpy(&out->dst_addr, ip + 16, 4);
  std::memcpy(&out->src_port, udp, 2);
  std::memcpy(&out->dst_port, udp + 2, 2);
  out->payload = udp + kUdpHeaderSize;
  out->len = udp_len - kUdpHeaderSize;
  return true;
}

Checksums check_udp4_checksums(const std::uint8_t* frame, const Udp4View& v) {
  const std::uint8_t* ip = frame + kEthHeaderSize;
  const std::size_t ihl = static_cast<std::size_t>(ip[0] & 0x0f) * 4;
  if (fold(sum16(0, ip, ihl)) != 0) return Checksums::kBad;
  const std::uint8_t* udp = v.payload - kUdpHeaderSize;
  const std::uint16_t field = get16(udp + 6);
  if (field == 0) return Checksums::kOk;  // sent without a checksum (RFC 768)
  std::uint32_t pseudo = sum16(0, ip + 12, 8);
  pseudo += kProtoUdp;
  pseudo += static_cast<std::uint32_t>(kUdpHeaderSize + v.len);
  if (fold(sum16(pseudo, udp, kUdpHeaderSize + v.len)) == 0) return Checksums::kOk;
  // Offloaded and never computed: the field is the pseudo-header's folded sum, not complemented.
  return field == static_cast<std::uint16_t>(~fold(pseudo)) ? Checksums::kPartial : Checksums::kBad;
}

}  // namespace pollux::transport::udp::xdp
