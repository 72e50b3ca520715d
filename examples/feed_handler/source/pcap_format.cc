#include "feed_handler/source/pcap_format.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace pollux::feed::pcap {

namespace {

constexpr std::uint16_t kEtherTypeIpv4 = 0x0800;
constexpr std::uint16_t kEtherTypeVlan = 0x8100;
constexpr std::uint16_t kEtherTypeQinQ = 0x88a8;
constexpr std::uint8_t kProtoUdp = 17;
constexpr std::size_t kSllHeaderSize = 16;
constexpr std::size_t kSll2HeaderSize = 20;

std::uint16_t be16(const std::uint8_t* p) noexcept { return static_cast<std::uint16_t>((p[0] << 8) | p[1]); }
void put_be16(std::uint8_t* p, std::uint16_t v) noexcept {
  p[0] = static_cast<std::uint8_t>(v >> 8);
  p[1] = static_cast<std::uint8_t>(v);
}
template <class T>
void put_host(std::uint8_t* p, T v) noexcept {
  std::memcpy(p, &v, sizeof v);
}

// An IPv4 packet (from its first header byte to the end of what was captured).
FrameKind decode_ipv4(std::span<const std::uint8_t> ip, Datagram* out) noexcept {
  if (ip.size() < kIpv4HeaderSize) return FrameKind::kMalformed;
  if ((ip[0] >> 4) != 4) return FrameKind::kOther;
  const std::size_t ihl = static_cast<std::size_t>(ip[0] & 0x0f) * 4;
  const std::size_t total = be16(&ip[2]);
  if (ihl < kIpv4HeaderSize || total < ihl || total > ip.size()) return FrameKind::kMalformed;
  ip = ip.first(total);  // Ethernet pads short frames: the IP length says where the packet ends
  if (ip[9] != kProtoUdp) return FrameKind::kOther;
  const std::uint16_t frag = be16(&ip[6]);
  if ((frag & 0x3fff) != 0) return FrameKind::kFragment;  // MF set or an offset: a piece of a datagram
  const std::span<const std::uint8_t> udp = ip.subspan(ihl);
  if (udp.size() < kUdpHeaderSize) return FrameKind::kMalformed;
  const std::size_t udp_len = be16(&udp[4]);
  if (udp_len < kUdpHeaderSize || udp_len > udp.size()) return FrameKind::kMalformed;
  std::memcpy(&out->src.addr, &ip[12], 4);
  std::memcpy(&out->dst.addr, &ip[16], 4);
  std::memcpy(&out->src.port, &udp[0], 2);
  std::memcpy(&out->dst.port, &udp[2], 2);
  out->payload = udp.subspan(kUdpHeaderSize, udp_len - kUdpHeaderSize);
  return FrameKind::kUdp;
}

}  // namespace

std::string rotated_name(const std::string& path, std::uint64_t index) {
  return index == 0 ? path : absl::StrCat(path, ".", index);
}

std::uint16_t ipv4_checksum(std::span<const std::uint8_t> bytes) noexcept {
  std::uint32_t sum = 0;
  for (std::size_t i = 0; i + 1 < bytes.size(); i += 2) sum += be16(&bytes[i]);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<std::uint16_t>(~sum);
}

void write_file_header(std::uint8_t (&out)[kFileHeaderSize]) noexcept {
  put_host<std::uint32_t>(out, kMagicNanoseconds);
  put_host<std::uint16_t>(out + 4, 2);  // version 2.4
  put_host<std::uint16_t>(out + 6, 4);
  put_host<std::uint32_t>(out + 8, 0);   // thiszone
  put_host<std::uint32_t>(out + 12, 0);  // sigfigs
  put_host<std::uint32_t>(out + 16, kSnaplen);
  put_host<std::uint32_t>(out + 20, kLinkTypeEthernet);
}

void write_record_headers(std::uint8_t* out, std::int64_t ts_ns, const Endpoint& src, const Endpoint& dst,
                          std::size_t payload_len, std::uint16_t ip_id) noexcept {
  const auto frame_len = static_cast<std::uint32_t>(kFrameHeadersSize + payload_len);
  const std::int64_t sec = ts_ns >= 0 ? ts_ns / 1'000'000'000 : 0;
  const std::int64_t nsec = ts_ns >= 0 ? ts_ns % 1'000'000'000 : 0;
  put_host<std::uint32_t>(out, static_cast<std::uint32_t>(sec));
  put_host<std::uint32_t>(out + 4, static_cast<std::uint32_t>(nsec));
  put_host<std::uint32_t>(out + 8, frame_len);
  put_host<std::uint32_t>(out + 12, frame_len);

  std::uint8_t* eth = out + kRecordHeaderSize;
  std::memset(eth, 0, 12);
  std::uint8_t d[4];
  std::memcpy(d, &dst.addr, 4);  // network order: d[0] is the first octet
  if ((d[0] & 0xf0) == 0xe0) {   // 224.0.0.0/4: the group's MAC (RFC 1112)
    eth[0] = 0x01;
    eth[1] = 0x00;
    eth[2] = 0x5e;
    eth[3] = d[1] & 0x7f;
    eth[4] = d[2];
    eth[5] = d[3];
  }
  put_be16(eth + 12, kEtherTypeIpv4);

  std::uint8_t* ip = eth + kEthernetHeaderSize;
  ip[0] = 0x45;
  ip[1] = 0;
  put_be16(ip + 2, static_cast<std::uint16_t>(kIpv4HeaderSize + kUdpHeaderSize + payload_len));
  put_be16(ip + 4, ip_id);
  put_be16(ip + 6, 0x4000);  // DF
  ip[8] = 64;
  ip[9] = kProtoUdp;
  put_be16(ip + 10, 0);
  std::memcpy(ip + 12, &src.addr, 4);
  std::memcpy(ip + 16, &dst.addr, 4);
  put_be16(ip + 10, ipv4_checksum({ip, kIpv4HeaderSize}));

  std::uint8_t* udp = ip + kIpv4HeaderSize;
  std::memcpy(udp, &src.port, 2);
  std::memcpy(udp + 2, &dst.port, 2);
  put_be16(udp + 4, static_cast<std::uint16_t>(kUdpHeaderSize + payload_len));
  put_be16(udp + 6, 0);
}

FrameKind decode_frame(LinkType link, std::span<const std::uint8_t> frame, Datagram* out) noexcept {
  std::uint16_t type = 0;
  std::size_t off = 0;
  switch (link) {
    case LinkType::kRawIpv4:
      return decode_ipv4(frame, out);
    case LinkType::kSll:
      if (frame.size() < kSllHeaderSize) return FrameKind::kMalformed;
      type = be16(&frame[14]);
      off = kSllHeaderSize;
      break;
    case LinkType::kSll2:
      if (frame.size() < kSll2HeaderSize) return FrameKind::kMalformed;
      type = be16(&frame[0]);
      off = kSll2HeaderSize;
      break;
    case LinkType::kEthernet:
      if (frame.size() < kEthernetHeaderSize) return FrameKind::kMalformed;
      type = be16(&frame[12]);
      off = kEthernetHeaderSize;
      // Up to two VLAN tags (802.1Q, 802.1ad): 4 bytes each, the real type after them.
      for (int tags = 0; tags < 2 && (type == kEtherTypeVlan || type == kEtherTypeQinQ); ++tags) {
        if (frame.size() < off + 4) return FrameKind::kMalformed;
        type = be16(&frame[off + 2]);
        off += 4;
      }
      break;
  }
  if (type != kEtherTypeIpv4) return FrameKind::kOther;
  return decode_ipv4(frame.subspan(off), out);
}

}  // namespace pollux::feed::pcap
