// Fuzzes the publisher side of the reliability protocol from the wire: control datagrams
// (status messages and NAKs) go through ReliableSender::on_control (transport/reliability/
// sender.cc), which decodes them with parse_control/nak_ranges of wire.h, exactly as
// UdpTxEndpoint does with what its socket receives; appends, flushes, timers (repairs,
// heartbeats, subscriber time-outs) and a sink that may take fewer datagrams than offered are
// driven by the same input.
//
// Input: a list of events; a control datagram is raw bytes or built from a compact
// description (type, length, stream, session, receiver, position, NAK ranges relative to the
// log's window), so both the decoder and the repair logic are reached.
//
// Invariants (every datagram the sender emits is checked):
//  - at most max_datagram bytes, a whole number of valid frames of this stream and session
//    (the frame cursor walks it to the end without a malformed frame);
//  - a heartbeat announces the next unsent sequence and an oldest retransmittable sequence
//    that is not ahead of it;
//  - data frames (first sends and repairs) carry consecutive sequences the log has sent or is
//    sending, and exactly the bytes that were appended for that sequence: a repair re-sends
//    the original, never stale or foreign bytes;
//  - the log's bookkeeping stays ordered: oldest <= sent <= next;
//  - the session's first datagram is a heartbeat (its announcement).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "core/frame.h"
#include "tests/fuzz/formats.h"
#include "tests/fuzz/fuzz_util.h"
#include "transport/reliability/sender.h"
#include "transport/reliability/wire.h"

namespace {

namespace rel = pollux::transport::reliability;
namespace core = pollux::core;
using pollux::fuzz::FuzzInput;
using u64 = std::uint64_t;

constexpr std::uint32_t kStream = 7;
constexpr std::uint32_t kSession = 0x77;
constexpr std::uint32_t kMaxDatagram = 1472;

// Payload byte `i` of the frame with sequence `seq`: what a repair must reproduce.
std::byte payload_byte(u64 seq, std::uint32_t i) { return static_cast<std::byte>((seq * 131 + i * 7) & 0xff); }

class Sink final : public rel::DatagramSink {
 public:
  explicit Sink(const rel::ReliableSender& s) : s_(s) {}

  std::uint32_t send_datagrams(std::span<const Datagram> d) noexcept override {
    const std::uint32_t take = std::min<std::uint32_t>(static_cast<std::uint32_t>(d.size()), budget);
    budget -= take;
    for (std::uint32_t i = 0; i < take; ++i) check(d[i]);
    return take;
  }

  std::uint32_t budget = UINT32_MAX;  // datagrams the "socket" takes before it would block
  u64 datagrams = 0, frames = 0, heartbeats = 0;

 private:
  void check(const Datagram& d) {
    FUZZ_CHECK(d.bytes > 0 && d.bytes <= kMaxDatagram, "datagram of %u bytes", d.bytes);
    FUZZ_CHECK(reinterpret_cast<std::uintptr_t>(d.data) % rel::kWireAlignment == 0, "unaligned datagram");
    rel::FrameCursor cur(d.data, d.bytes);
    u64 prev = 0;
    std::uint32_t walked = 0;
    for (const core::FrameHeader* f = cur.next(); f != nullptr; f = cur.next()) {
      walked += rel::wire_size(f->frame_length);
      FUZZ_CHECK(f->stream_id == kStream && f->session_id == kSession, "frame of stream %u session %u", f->stream_id,
                 f->session_id);
      FUZZ_CHECK(heartbeats > 0 || (f->flags & core::kFlagHeartbeat),
                 "data before the session's announcement (subscribers join on a heartbeat: they would ignore it)");
      if (f->flags & core::kFlagHeartbeat) {
        FUZZ_CHECK(d.bytes == rel::kHeartbeatFrameLength && f->frame_length == rel::kHeartbeatFrameLength,
                   "heartbeat datagram of %u bytes", d.bytes);
        const rel::HeartbeatBody b = rel::heartbeat_body(f);
        FUZZ_CHECK(f->sequence == s_.log().sent(), "heartbeat announces %llu, the log has sent up to %llu",
                   static_cast<unsigned long long>(f->sequence), static_cast<unsigned long long>(s_.log().sent()));
        FUZZ_CHECK(b.oldest >= 1 && b.oldest <= f->sequence, "heartbeat oldest %llu, next %llu",
                   static_cast<unsigned long long>(b.oldest), static_cast<unsigned long long>(f->sequence));
        ++heartbeats;
        continue;
      }
      FUZZ_CHECK(prev == 0 || f->sequence == prev + 1, "sequence %llu after %llu in one datagram",
                 static_cast<unsigned long long>(f->sequence), static_cast<unsigned long long>(prev));
      prev = f->sequence;
      FUZZ_CHECK(f->sequence >= s_.log().oldest() && f->sequence < s_.log().next(),
                 "sequence %llu outside the log [%llu, %llu)", static_cast<unsigned long long>(f->sequence),
                 static_cast<unsigned long long>(s_.log().oldest()), static_cast<unsigned long long>(s_.log().next()));
      const auto* p = reinterpret_cast<const std::byte*>(f) + core::kFrameHeaderSize;
      for (std::uint32_t i = 0; i < f->frame_length - core::kFrameHeaderSize; ++i) {
        FUZZ_CHECK(p[i] == payload_byte(f->sequence, i), "frame %llu byte %u is not what was appended",
                   static_cast<unsigned long long>(f->sequence), i);
      }
      ++frames;
    }
    FUZZ_CHECK(!cur.malformed() && walked >= d.bytes, "datagram of %u bytes: malformed after %u bytes", d.bytes,
               walked);
    ++datagrams;
  }

  const rel::ReliableSender& s_;
};

u64 pick_seq(FuzzInput& in, const rel::ReliableSender& s) {
  const u64 delta = static_cast<u64>(static_cast<std::int64_t>(static_cast<std::int8_t>(in.u8())));
  namespace seq = pollux::fuzz::seq;
  switch (in.u8() % seq::kBases) {
    case seq::kExpected:
      return s.log().oldest() + delta;
    case seq::kHwm:
      return s.log().sent() + delta;
    case seq::kWindowEnd:
      return s.log().next() + delta;
    case seq::kOther:
      return 1 + in.u8();
    default:
      return in.u64();
  }
}

std::vector<std::byte> build_control(FuzzInput& in, const rel::ReliableSender& s) {
  const std::uint8_t sel = in.u8();
  const std::uint32_t ranges = in.u8() % 40;
  rel::ControlHeader c{};
  c.magic = rel::kControlMagic;
  c.version = (sel & 1) ? in.u8() : rel::kControlVersion;
  c.type = (sel & 2) ? in.u16() : static_cast<std::uint16_t>((sel & 4) ? rel::kControlNak : rel::kControlStatus);
  c.stream_id = (sel & 8) ? in.u32() : kStream;
  c.session_id = (sel & 16) ? in.u32() : kSession;
  c.receiver_id = in.u8() % 80;
  c.position = pick_seq(in, s);
  c.highest = pick_seq(in, s);
  c.range_count = (sel & 32) ? in.u16() : static_cast<std::uint16_t>(ranges);
  c.flags = in.u8() & 3;
  c.length = static_cast<std::uint32_t>(sizeof c + ranges * sizeof(rel::NakRange));
  if (sel & 64) c.length = in.u32();
  std::vector<std::byte> d(sizeof c + ranges * sizeof(rel::NakRange));
  std::memcpy(d.data(), &c, sizeof c);
  for (std::uint32_t i = 0; i < ranges; ++i) {
    rel::NakRange r;
    r.from = pick_seq(in, s);
    r.count = in.flag() ? in.u64() : in.u8();
    std::memcpy(d.data() + sizeof c + i * sizeof r, &r, sizeof r);
  }
  if (sel & 128) d.resize(d.size() - std::min<std::size_t>(d.size(), in.u8() % 64));  // cut short
  return d;
}

void append(rel::ReliableSender& s, std::uint32_t payload) {
  alignas(8) std::byte f[kMaxDatagram];
  const std::uint32_t len = core::kFrameHeaderSize + payload;
  std::memset(f, 0, core::kFrameHeaderSize);
  const u64 seq = s.log().next();
  for (std::uint32_t i = 0; i < payload; ++i) f[core::kFrameHeaderSize + i] = payload_byte(seq, i);
  (void)s.append(f, len);  // false = back-pressure (the log is full of unsent frames)
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzInput in(data, size);
  rel::SenderOptions o;
  o.log.capacity = 64u << 10;
  o.log.max_datagram = kMaxDatagram;
  o.log.stream_id = kStream;
  o.log.session_id = kSession;
  o.heartbeat_interval_ns = 10'000'000;
  o.tail_heartbeat_ns = 1'000'000;
  o.receiver_timeout_ns = 2'000'000'000;
  o.retransmit_linger_ns = 1'000'000;
  o.max_datagrams_per_call = 64;
  o.coalesce_ns = in.flag() ? 50'000 : 0;
  rel::ReliableSender s;
  FUZZ_CHECK(s.init(o).ok(), "init failed");
  Sink sink(s);
  std::int64_t now = 1'000'000'000;

  for (int ops = 0; !in.empty() && ops < 1024; ++ops) {
    sink.budget = in.u8() < 32 ? in.u8() % 4 : UINT32_MAX;
    namespace op = pollux::fuzz::control;
    switch (in.u8() % op::kOpCount) {
      case op::kControl:
      case op::kControl + 1:
      case op::kControl + 2: {  // a control datagram from a subscriber (or anyone)
        std::vector<std::byte> d;
        if (in.flag()) {
          std::size_t got = 0;
          const std::uint8_t* p = in.bytes(in.u16() % 1500, &got);
          d.assign(reinterpret_cast<const std::byte*>(p), reinterpret_cast<const std::byte*>(p) + got);
        } else {
          d = build_control(in, s);
        }
        // Exactly the datagram's size on the heap (8-aligned, as a receive buffer is).
        std::unique_ptr<std::byte[]> buf(new std::byte[std::max<std::size_t>(d.size(), 1)]);
        if (!d.empty()) std::memcpy(buf.get(), d.data(), d.size());
        s.on_control(buf.get(), static_cast<std::uint32_t>(d.size()), now);
        break;
      }
      case op::kService:  // timers
        now += static_cast<std::int64_t>(in.u16()) * 10'000;
        (void)s.service(sink, now);
        break;
      case op::kAppend: {  // the application publishes
        const int k = in.u8() % 32;
        for (int i = 0; i < k; ++i) append(s, in.u8() % 200);
        (void)s.flush(sink, now);
        break;
      }
      case op::kEndOfStream:
        s.send_end_of_stream(sink, now);
        break;
      default:
        now += static_cast<std::int64_t>(in.u32()) * 1'000;
        break;
    }
    FUZZ_CHECK(s.log().oldest() <= s.log().sent() && s.log().sent() <= s.log().next(),
               "log oldest %llu sent %llu next %llu", static_cast<unsigned long long>(s.log().oldest()),
               static_cast<unsigned long long>(s.log().sent()), static_cast<unsigned long long>(s.log().next()));
    FUZZ_CHECK(s.receivers() <= rel::ReliableSender::kMaxReceivers, "%u receivers", s.receivers());
  }
  return 0;
}
