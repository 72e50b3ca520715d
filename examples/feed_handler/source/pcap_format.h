// The bytes of a packet capture, both ways: what pollux-feed's capture writes (libpcap's
// nanosecond file format, one Ethernet/IPv4/UDP frame rebuilt around each datagram it
// received) and how a captured frame is taken apart again for a replay (Ethernet with up to
// two VLAN tags, Linux cooked SLL and SLL2, raw IPv4). No I/O and no libpcap here: the
// capture writer (capture.h) and the replay (pcap_source.h) use these, and the tests and the
// fuzz harness call them directly.
//
// Every length in a frame is checked against the bytes present before it is used: a frame
// that lies about its IPv4 or UDP length, or is cut inside a header, is kMalformed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace pollux::feed::pcap {

// The file header of libpcap's format with nanosecond timestamps (magic a1b23c4d, version
// 2.4), written in this host's byte order as libpcap does.
inline constexpr std::uint32_t kMagicNanoseconds = 0xa1b23c4d;
inline constexpr std::uint32_t kMagicMicroseconds = 0xa1b2c3d4;
inline constexpr std::size_t kFileHeaderSize = 24;
inline constexpr std::size_t kRecordHeaderSize = 16;  // ts_sec, ts_nsec, incl_len, orig_len
inline constexpr std::uint32_t kSnaplen = 262144;     // libpcap's default: a whole UDP datagram fits
inline constexpr std::uint32_t kLinkTypeEthernet = 1;

inline constexpr std::size_t kEthernetHeaderSize = 14;
inline constexpr std::size_t kIpv4HeaderSize = 20;  // without options (what the writer builds)
inline constexpr std::size_t kUdpHeaderSize = 8;
// What the capture writer puts before each datagram: record header and rebuilt frame headers.
inline constexpr std::size_t kFrameHeadersSize = kEthernetHeaderSize + kIpv4HeaderSize + kUdpHeaderSize;
inline constexpr std::size_t kRecordOverhead = kRecordHeaderSize + kFrameHeadersSize;
// The largest UDP payload IPv4 can carry (65535 - 20 - 8).
inline constexpr std::size_t kMaxUdpPayload = 65507;

// An IPv4 endpoint, address and port in network byte order (as in sockaddr_in).
struct Endpoint {
  std::uint32_t addr = 0;
  std::uint16_t port = 0;
};

// The files of a rotated capture: PATH, then PATH.1, PATH.2, ... (what the capture writes and
// the replay reads on).
std::string rotated_name(const std::string& path, std::uint64_t index);

void write_file_header(std::uint8_t (&out)[kFileHeaderSize]) noexcept;

// Writes into `out` (kRecordOverhead bytes) the record header (timestamp `ts_ns`, ns since
// the epoch; both lengths those of the whole frame) and the frame's Ethernet, IPv4 and UDP
// headers for a datagram of `payload_len` (<= kMaxUdpPayload) bytes from `src` to `dst`.
// Ethernet: destination 01:00:5e + the low 23 bits of a multicast group, else zeros (the
// capture never saw the link layer); source zeros. IPv4: no options, DF, TTL 64, `ip_id`,
// header checksum computed. UDP: checksum 0 ("none", valid over IPv4).
void write_record_headers(std::uint8_t* out, std::int64_t ts_ns, const Endpoint& src, const Endpoint& dst,
                          std::size_t payload_len, std::uint16_t ip_id) noexcept;

// The link layers a replay reads.
enum class LinkType : std::uint8_t {
  kEthernet,  // DLT_EN10MB (tcpdump -i eth0, -i lo)
  kSll,       // DLT_LINUX_SLL (tcpdump -i any, older libpcap)
  kSll2,      // DLT_LINUX_SLL2 (tcpdump -i any, libpcap >= 1.10)
  kRawIpv4,   // DLT_RAW / DLT_IPV4: the frame starts with the IP header
};

// A UDP datagram found in a frame: its endpoints and payload (a view into the frame).
struct Datagram {
  Endpoint src, dst;
  std::span<const std::uint8_t> payload;
};

enum class FrameKind : std::uint8_t {
  kUdp,        // *out holds the datagram
  kOther,      // well formed but not an unfragmented IPv4/UDP datagram (ARP, IPv6, TCP, IGMP...)
  kFragment,   // an IPv4 fragment (a datagram larger than the path MTU): not reassembled
  kMalformed,  // a header cut short, or a length field that overruns what is there
};

// Takes a frame apart. A frame longer than its IPv4 total length (Ethernet padding) is
// trimmed to it.
FrameKind decode_frame(LinkType link, std::span<const std::uint8_t> frame, Datagram* out) noexcept;

// The one's-complement sum of RFC 791 over `bytes` (even length), folded and inverted.
std::uint16_t ipv4_checksum(std::span<const std::uint8_t> bytes) noexcept;

}  // namespace pollux::feed::pcap
