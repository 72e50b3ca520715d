// Fuzzes the frame decoder of pollux-feed's capture replay (examples/feed_handler/source/pcap_format.h)
// with any bytes a capture file can hold as a frame: the first input byte picks the link type
// (Ethernet, Linux cooked SLL, SLL2, raw IPv4), the rest is the frame.
//
// Invariants:
//  - a datagram found lies inside the frame, and its UDP length field says its size;
//  - rebuilt by the capture writer (write_record_headers) and decoded again as Ethernet, it comes
//    back with the same endpoints and payload, and the rebuilt IPv4 header's checksum verifies.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "feed_handler/source/pcap_format.h"
#include "tests/fuzz/fuzz_util.h"

namespace pcap = pollux::feed::pcap;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const auto link = static_cast<pcap::LinkType>(data[0] % 4);
  // A copy of exactly the frame's bytes: a read past it is a sanitizer report.
  const std::vector<std::uint8_t> frame(data + 1, data + size);
  pcap::Datagram d;
  if (pcap::decode_frame(link, frame, &d) != pcap::FrameKind::kUdp) return 0;
  const std::uint8_t* begin = frame.data();
  const std::uint8_t* end = frame.data() + frame.size();
  FUZZ_CHECK(
      d.payload.size() <= frame.size() && d.payload.data() >= begin && d.payload.data() + d.payload.size() <= end,
      "payload outside the frame");
  FUZZ_CHECK(d.payload.size() <= pcap::kMaxUdpPayload, "payload larger than UDP allows: %zu", d.payload.size());
  std::uint16_t udp_len = 0;
  const std::uint8_t* udp = d.payload.data() - pcap::kUdpHeaderSize;
  udp_len = static_cast<std::uint16_t>((udp[4] << 8) | udp[5]);
  FUZZ_CHECK(udp_len == d.payload.size() + pcap::kUdpHeaderSize, "UDP length %u, payload %zu", udp_len,
             d.payload.size());

  std::vector<std::uint8_t> rec(pcap::kRecordOverhead + d.payload.size());
  pcap::write_record_headers(rec.data(), 123, d.src, d.dst, d.payload.size(), 7);
  std::memcpy(rec.data() + pcap::kRecordOverhead, d.payload.data(), d.payload.size());
  const std::span<const std::uint8_t> rebuilt(rec.data() + pcap::kRecordHeaderSize,
                                              rec.size() - pcap::kRecordHeaderSize);
  FUZZ_CHECK(pcap::ipv4_checksum(rebuilt.subspan(pcap::kEthernetHeaderSize, pcap::kIpv4HeaderSize)) == 0,
             "rebuilt IPv4 checksum does not verify");
  pcap::Datagram again;
  FUZZ_CHECK(pcap::decode_frame(pcap::LinkType::kEthernet, rebuilt, &again) == pcap::FrameKind::kUdp,
             "rebuilt frame refused");
  FUZZ_CHECK(again.src.addr == d.src.addr && again.src.port == d.src.port && again.dst.addr == d.dst.addr &&
                 again.dst.port == d.dst.port,
             "endpoints changed");
  FUZZ_CHECK(again.payload.size() == d.payload.size() &&
                 std::memcmp(again.payload.data(), d.payload.data(), d.payload.size()) == 0,
             "payload changed");
  return 0;
}
