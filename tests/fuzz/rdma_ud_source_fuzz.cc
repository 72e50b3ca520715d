// Fuzzes what the RDMA UD multicast path reads from the wire before the reliability protocol
// does: the 40 bytes a UD receive writes in front of every datagram (the packet's network
// header), decoded by ud_source() (transport/rdma/ud_address.h) into the PeerAddress a
// subscriber compares per datagram and sends its NAKs to - and the datagram behind it, through
// ReliableReceiver::on_datagram with that address, exactly as UdRxEndpoint::process does
// (GRH + datagram in one receive buffer; the frames start 40 bytes in). Verbs-free: the fuzz
// build has no RDMA transport, and needs none for this.
//
// Input: a list of events - a header alone (raw bytes, or an IPv4/IPv6 header described by a
// few fields, with a right or wrong checksum and garbage in front), or a receive buffer (a
// header from one of two sources + a datagram of raw bytes or described frames of one of two
// sessions).
//
// Invariants:
//  - ud_source accepts exactly what its rule (ud_address.h) accepts, and yields a 20-byte
//    address whose GID is the IPv4-mapped source (IPv4 reading) or the GRH's SGID, and whose QPN
//    is the completion's; bytes outside those fields (identification, TTL, checksum, the
//    undefined first 20 bytes of a RoCEv2 header) never change it;
//  - a receive buffer whose header is refused never reaches the receiver;
//  - once a session was joined from one source (QP and GID), a datagram of that session from
//    another source stores nothing and is counted as wrong_source; from the joining source,
//    the receiver's own checks apply;
//  - held frames lie inside their receive buffer (delivered views are whole frames of it).
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "core/frame.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/rx_names.h"
#include "transport/rdma/ud_address.h"
#include "transport/reliability/receiver.h"
#include "transport/reliability/wire.h"
#include "transport/transport.h"

namespace {

using namespace pollux::fuzz::rx_names;  // NOLINT(google-build-using-namespace)
namespace rdma = pollux::transport::rdma;

constexpr std::uint32_t kStream = 7;
constexpr std::uint32_t kGrh = 40;
constexpr std::uint32_t kSessions[] = {0x61, 0x62};
constexpr std::uint32_t kQpns[] = {0x11, 0x222};
constexpr std::uint8_t kSources[][4] = {{10, 0, 0, 1}, {10, 0, 0, 9}};

bool ipv4_checksum_ok(const std::uint8_t* h) {
  std::uint32_t sum = 0;
  for (int i = 0; i < 20; i += 2) sum += static_cast<std::uint32_t>(h[i] << 8 | h[i + 1]);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return sum == 0xffff;
}

void set_ipv4_checksum(std::uint8_t* h) {
  h[10] = h[11] = 0;
  std::uint32_t sum = 0;
  for (int i = 0; i < 20; i += 2) sum += static_cast<std::uint32_t>(h[i] << 8 | h[i + 1]);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  const auto c = static_cast<std::uint16_t>(~sum);
  h[10] = static_cast<std::uint8_t>(c >> 8);
  h[11] = static_cast<std::uint8_t>(c & 0xff);
}

// Checks ud_source on one header against the rule it implements; returns its verdict.
bool check_header(const std::uint8_t* g, std::uint32_t qpn, rel::PeerAddress* out) {
  const bool ok = rdma::ud_source(reinterpret_cast<const std::byte*>(g), qpn, out);
  const bool v6 = (g[0] >> 4) == 6, shape4 = g[20] == 0x45;
  FUZZ_CHECK(ok == (v6 || shape4), "ud_source said %d for byte0 %02x byte20 %02x", ok, g[0], g[20]);
  if (!ok) return false;
  FUZZ_CHECK(out->length == rdma::kUdPeerLength, "address of %u bytes", out->length);
  FUZZ_CHECK(rdma::ud_peer_qpn(*out) == qpn, "qpn %u, the completion said %u", rdma::ud_peer_qpn(*out), qpn);
  const bool ipv4 = shape4 && (!v6 || ipv4_checksum_ok(g + 20));
  std::uint8_t want[16] = {};
  if (ipv4) {
    want[10] = want[11] = 0xff;
    std::memcpy(want + 12, g + 32, 4);
  } else {
    std::memcpy(want, g + 8, 16);
  }
  FUZZ_CHECK(std::memcmp(rdma::ud_peer_gid(*out), want, 16) == 0, "wrong source GID (ipv4 reading %d)", ipv4);
  if (ipv4 && !v6) {
    // Per-packet fields and the undefined first 20 bytes do not change who sent it.
    std::uint8_t h[kGrh];
    std::memcpy(h, g, kGrh);
    for (int i = 0; i < 20; ++i) h[i] = static_cast<std::uint8_t>(h[i] ^ 0x0f);  // keeps byte 0's top nibble off 6
    if ((h[0] >> 4) == 6) h[0] = 0;
    h[24] ^= 0xff;  // identification
    h[28] ^= 0x3c;  // TTL
    h[30] ^= 0x55;  // checksum
    rel::PeerAddress again;
    FUZZ_CHECK(rdma::ud_source(reinterpret_cast<const std::byte*>(h), qpn, &again) && again == *out,
               "per-packet IPv4 fields changed the source");
  }
  return true;
}

// A RoCEv2 IPv4 header of source `src` (valid checksum), rxe-style zeros in front.
void ipv4_header(std::uint8_t* g, const std::uint8_t* src, std::uint16_t id) {
  std::memset(g, 0, kGrh);
  std::uint8_t* h = g + 20;
  h[0] = 0x45;
  h[2] = 0x04;
  h[4] = static_cast<std::uint8_t>(id >> 8);
  h[5] = static_cast<std::uint8_t>(id);
  h[8] = 1;     // TTL
  h[9] = 0x11;  // UDP
  std::memcpy(h + 12, src, 4);
  h[16] = 239;
  h[17] = 255;
  h[18] = 77;
  h[19] = 1;
  set_ipv4_checksum(h);
}

struct Buffer {
  std::unique_ptr<std::byte[]> bytes;
  std::uint32_t len = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzInput in(data, size);
  rel::ReceiverOptions ro;
  ro.window.window = 1024;
  ro.stream_id = kStream;
  ro.max_sessions = 2;
  ro.receiver_id = 3;
  rel::ReliableReceiver r;
  FUZZ_CHECK(r.init(ro).ok(), "receiver init");
  std::map<std::uint32_t, int> joined;  // session -> source index it was joined from
  std::vector<Buffer> held;             // receive buffers (kept for the harness's life: simple, no reuse)
  std::int64_t now = 1'000'000'000;
  std::uint64_t next_seq[2] = {1, 1};

  for (int ops = 0; !in.empty() && ops < 512; ++ops) {
    const std::uint8_t op = in.u8() % 4;
    if (op == 0) {  // a raw header
      std::uint8_t g[kGrh] = {};
      std::size_t got = 0;
      const std::uint8_t* p = in.bytes(kGrh, &got);
      std::memcpy(g, p, got);
      rel::PeerAddress a;
      (void)check_header(g, in.u32(), &a);
      continue;
    }
    if (op == 1) {  // a described header: IPv4 (maybe a wrong checksum, maybe a v6 nibble in front) or IPv6
      std::uint8_t g[kGrh];
      const std::uint8_t sel = in.u8();
      std::uint8_t src[4] = {in.u8(), in.u8(), in.u8(), in.u8()};
      ipv4_header(g, src, in.u16());
      if (sel & 1) g[31] ^= static_cast<std::uint8_t>(1 + in.u8() % 255);  // checksum wrong
      if (sel & 2) g[0] = static_cast<std::uint8_t>(0x60 | (in.u8() & 0x0f));
      if (sel & 4) {  // a real GRH: IPv6 version, SGID from the input
        g[0] = 0x60;
        for (int i = 8; i < 24; ++i) g[i] = in.u8();
        if (sel & 8) g[20] = in.u8();
      }
      rel::PeerAddress a;
      (void)check_header(g, in.u32(), &a);
      continue;
    }
    if (op == 3) {  // time passes, timers, deliveries
      now += static_cast<std::int64_t>(in.u16()) * 100'000;
      struct Null final : rel::ControlSink {
        void send_control(const rel::PeerAddress& to, const std::byte*, std::uint32_t) noexcept override {
          FUZZ_CHECK(to.length == rdma::kUdPeerLength, "control message to a %u-byte address", to.length);
        }
      } sink;
      (void)r.service(now, sink);
      RxDesc out[64];
      const std::uint32_t n = r.poll(out, 64);
      for (std::uint32_t i = 0; i < n; ++i) {
        if (out[i].kind != RxKind::kMessage) continue;
        FUZZ_CHECK(out[i].token < held.size(), "token %llu of no buffer",
                   static_cast<unsigned long long>(out[i].token));
        const Buffer& b = held[out[i].token];
        const auto* f = reinterpret_cast<const std::byte*>(out[i].frame);
        FUZZ_CHECK(f >= b.bytes.get() + kGrh && f + out[i].length <= b.bytes.get() + b.len,
                   "a delivered frame outside its receive buffer");
        (void)pollux::fuzz::touch(f, out[i].length);
      }
      continue;
    }
    // A receive buffer: header of source s, then a datagram.
    const int s = in.u8() & 1;
    const std::uint8_t sel = in.u8();
    std::vector<std::byte> d;
    if (sel & 1) {
      std::size_t got = 0;
      const std::uint8_t* p = in.bytes(in.u16() % 1100, &got);
      d.assign(reinterpret_cast<const std::byte*>(p), reinterpret_cast<const std::byte*>(p) + got);
    } else {
      // A heartbeat or up to 8 data frames of session k, sequences from the session's next.
      const int k = (sel >> 1) & 1;
      const bool hb = (sel & 4) != 0;
      const int frames = hb ? 1 : 1 + in.u8() % 8;
      std::uint64_t seq = next_seq[k] + (in.u8() % 4 == 0 ? in.u8() : 0);
      for (int i = 0; i < frames; ++i) {
        const std::uint32_t payload = hb ? sizeof(rel::HeartbeatBody) : in.u8() % 64;
        const std::uint32_t len = core::kFrameHeaderSize + payload;
        const std::size_t at = d.size();
        d.resize(at + rel::wire_size(len));
        core::FrameHeader h{};
        h.frame_length = len;
        h.magic = core::kFrameMagic;
        h.version = core::kFrameVersion;
        h.flags = hb ? core::kFlagHeartbeat : 0;
        h.stream_id = kStream;
        h.session_id = kSessions[k];
        h.sequence = seq;
        std::memcpy(d.data() + at, &h, sizeof h);
        if (hb) {
          const rel::HeartbeatBody body{seq > 1 ? seq - 1 : 1, 1, 0};
          std::memcpy(d.data() + at + core::kFrameHeaderSize, &body, sizeof body);
        } else {
          ++seq;
        }
      }
      next_seq[k] = std::max(next_seq[k], seq);
    }
    Buffer b;
    b.len = static_cast<std::uint32_t>(kGrh + d.size());
    b.bytes.reset(new std::byte[b.len]);  // 8-aligned: the frames start at +40, 8-aligned too
    auto* g = reinterpret_cast<std::uint8_t*>(b.bytes.get());
    ipv4_header(g, kSources[s], static_cast<std::uint16_t>(ops));
    if (sel & 8) g[20] = 0x46;  // a header no device writes: refused before the receiver sees it
    if (!d.empty()) std::memcpy(b.bytes.get() + kGrh, d.data(), d.size());
    rel::PeerAddress from;
    if (!check_header(g, kQpns[s], &from)) continue;
    // Which session the datagram (claims to) belong to, and whether that session is being
    // followed, joined from the other source.
    std::uint32_t session = 0;
    if (d.size() >= core::kFrameHeaderSize) std::memcpy(&session, d.data() + 12, 4);
    bool elsewhere = false;
    if (const auto j = joined.find(session); j != joined.end() && j->second != s) {
      for (std::uint32_t i = 0; i < r.sessions(); ++i) elsewhere |= r.session_info(i).session_id == session;
    }
    const std::uint64_t wrong_before = r.stats().wrong_source, started_before = r.stats().sessions_started;
    const std::uint32_t stored = r.on_datagram(b.bytes.get() + kGrh, static_cast<std::uint32_t>(d.size()), from,
                                               static_cast<std::uint32_t>(held.size()), now);
    if (elsewhere && !(sel & 1)) {  // a described datagram: its first frame is well formed
      FUZZ_CHECK(stored == 0 && r.stats().wrong_source == wrong_before + 1,
                 "session %08x joined from source %d took a datagram from source %d (%u stored)", session, 1 - s, s,
                 stored);
    }
    if (r.stats().sessions_started > started_before) joined[session] = s;
    held.push_back(std::move(b));
  }
  return 0;
}
