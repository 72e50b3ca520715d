// Fuzzes the subscriber side of the UDP/reliability protocol from the wire: datagrams go
// through ReliableReceiver::on_datagram (transport/reliability/receiver.cc), which decodes them
// with the frame cursor and heartbeat decoder of wire.h, exactly as UdpRxEndpoint::process does;
// poll(), service() (NAKs and status messages out) and buffer-pressure forgets (as
// UdpRxEndpoint::evict does) are driven by the same input. The inline direct path
// (take_in_order, before on_datagram whenever poll() has nothing) runs as the endpoint runs it. Datagram buffers live
// exactly as long as the endpoint keeps them (reference count = frames held or delivered), so a view into a datagram
// the receiver no longer holds is a heap-use-after-free ASan reports.
//
// Input: a list of events. A datagram is either raw bytes or built from a compact description
// (frames with chosen flags, session, sequence relative to the session's window, heartbeat
// body), so the fuzzer reaches deep states quickly while raw datagrams exercise the decoder.
//
// Invariants:
//  - every event belongs to a session announced by kNewSession and not yet ended; per session,
//    messages and loss reports are contiguous and in order (no duplicate, no hole, no reorder);
//  - a message is a complete frame of a datagram still held: inside its buffer, of the
//    announced length and sequence, of this stream and session; a traced frame is long enough
//    for its trace block;
//  - expected <= hwm in every session;
//  - one datagram never moves a session's reach (hwm) more than one window beyond delivery,
//    unless an earlier datagram's heartbeat already claimed that far (a single forged
//    datagram costs at most a window; how a claim becomes believed is the
//    receiver's business);
//  - control messages sent are valid (parse_control accepts them), go to the session's peer,
//    and NAK only ranges below the highest sequence seen, a window at most;
//  - no silent loss after a death: a session reported dead (kEndOfStream, reason 1) that is
//    announced again resumes exactly where its delivery stood (unless newer ends displaced
//    its memory, which the receiver counts in dead_forgotten).
// Time passing with nothing read is the transport finding its socket empty (drained()), so
// sessions time out as they do behind a real socket.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "core/frame.h"
#include "core/trace.h"
#include "tests/fuzz/formats.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/rx_names.h"
#include "transport/reliability/receiver.h"
#include "transport/reliability/wire.h"
#include "transport/transport.h"

namespace {

using namespace pollux::fuzz::rx_names;  // NOLINT(google-build-using-namespace)

constexpr std::uint32_t kStream = 7;
constexpr std::uint32_t kSessions[] = {0x51, 0x52, 0x53};
constexpr std::uint64_t kReceiverId = 99;
constexpr std::uint32_t kMaxDatagram = 1472;

u64 sat_add(u64 a, u64 b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

struct Buffer {
  std::unique_ptr<std::byte[]> bytes;  // exactly `len` bytes (8-aligned by new)
  std::uint32_t len = 0;
  std::uint32_t refs = 0;
};

class Sink final : public rel::ControlSink {
 public:
  explicit Sink(const rel::ReliableReceiver& r) : r_(r) {}
  void send_control(const rel::PeerAddress& to, const std::byte* msg, std::uint32_t len) noexcept override {
    const rel::ControlHeader* c = rel::parse_control(msg, len);
    FUZZ_CHECK(c != nullptr, "the receiver sent a control message of %u bytes that does not parse", len);
    FUZZ_CHECK(c->stream_id == kStream && c->receiver_id == kReceiverId, "control message for stream %u receiver %llu",
               c->stream_id, static_cast<unsigned long long>(c->receiver_id));
    FUZZ_CHECK(to.length == 16 && to.bytes[0] == static_cast<std::byte>(c->session_id & 0xff),
               "control message of session %u sent to another peer", c->session_id);
    FUZZ_CHECK(c->position <= c->highest, "status position %llu > highest %llu",
               static_cast<unsigned long long>(c->position), static_cast<unsigned long long>(c->highest));
    const rel::NakRange* n = rel::nak_ranges(c);
    for (std::uint32_t i = 0; i < c->range_count; ++i) {
      FUZZ_CHECK(n[i].count > 0 && n[i].count <= r_.window() && n[i].from >= c->position &&
                     n[i].count <= c->highest - n[i].from,
                 "NAK [%llu, +%llu) with position %llu highest %llu window %u",
                 static_cast<unsigned long long>(n[i].from), static_cast<unsigned long long>(n[i].count),
                 static_cast<unsigned long long>(c->position), static_cast<unsigned long long>(c->highest),
                 r_.window());
    }
    ++sent;
  }
  std::uint64_t sent = 0;

 private:
  const rel::ReliableReceiver& r_;
};

// Window state of session `id` (found = false when it has no slot).
rel::ReliableReceiver::SessionInfo info_of(const rel::ReliableReceiver& r, std::uint32_t id, bool* found) {
  for (std::uint32_t i = 0; i < r.sessions(); ++i) {
    const rel::ReliableReceiver::SessionInfo s = r.session_info(i);
    if (s.session_id == id) {
      *found = true;
      return s;
    }
  }
  *found = false;
  return {};
}

u64 pick_seq(FuzzInput& in, const rel::ReliableReceiver& r, std::uint32_t session) {
  bool found = false;
  const rel::ReliableReceiver::SessionInfo s = info_of(r, session, &found);
  const u64 delta = static_cast<u64>(static_cast<std::int64_t>(static_cast<std::int8_t>(in.u8())));
  namespace seq = pollux::fuzz::seq;
  switch (in.u8() % seq::kBases) {
    case seq::kExpected:
      return (found ? s.expected : 1) + delta;
    case seq::kHwm:
      return (found ? s.hwm : 1) + delta;
    case seq::kWindowEnd:
      return (found ? s.expected + r.window() : 1) + delta;
    case seq::kOther:
      return 1 + in.u8();
    default:
      return in.u64();
  }
}

// A datagram made of frames described by the input.
std::vector<std::byte> build_datagram(FuzzInput& in, const rel::ReliableReceiver& r) {
  std::vector<std::byte> d;
  const int frames = 1 + in.u8() % 8;
  for (int i = 0; i < frames && d.size() < kMaxDatagram; ++i) {
    const std::uint8_t sel = in.u8();
    core::FrameHeader h{};
    h.magic = core::kFrameMagic;
    h.version = core::kFrameVersion;
    if (sel & 1) h.flags |= core::kFlagHeartbeat;
    if (sel & 2) h.flags |= core::kFlagEndOfStream;
    if (sel & 4) h.flags |= core::kFlagPadding;
    if (sel & 8) h.flags |= core::kFlagTraced;
    const std::uint32_t pick = in.u8();
    h.session_id = pick < 240 ? kSessions[pick % 3] : in.u32();
    h.stream_id = (sel & 16) ? in.u32() : kStream;
    h.sequence = pick_seq(in, r, h.session_id);
    const std::uint32_t body =
        (h.flags & core::kFlagHeartbeat) && !(sel & 32) ? sizeof(rel::HeartbeatBody) : in.u8() % 160;
    h.frame_length = (sel & 64) ? in.u16() : core::kFrameHeaderSize + body;  // (64: any length at all)
    const std::size_t at = d.size();
    d.resize(at + rel::wire_size(core::kFrameHeaderSize + body));
    std::memcpy(d.data() + at, &h, sizeof h);
    if (h.flags & core::kFlagHeartbeat && body >= sizeof(rel::HeartbeatBody)) {
      rel::HeartbeatBody b{};
      b.oldest = pick_seq(in, r, h.session_id);
      std::memcpy(d.data() + at + core::kFrameHeaderSize, &b, sizeof b);
    }
  }
  if (in.flag()) d.resize(d.size() - std::min<std::size_t>(d.size(), in.u8() % 40));  // cut short
  return d;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzInput in(data, size);
  rel::ReceiverOptions o;
  o.window.window = in.flag() ? 64 : 1024;
  o.window.give_up_ns = 1'000'000'000;
  o.stream_id = kStream;
  o.max_sessions = 2;
  o.session_timeout_ns = 2'000'000'000;
  o.status_interval_ns = 100'000'000;
  o.receiver_id = kReceiverId;
  o.seed = 1;
  rel::ReliableReceiver r;
  FUZZ_CHECK(r.init(o).ok(), "init failed");
  Sink sink(r);

  std::vector<Buffer> bufs;
  std::map<std::uint32_t, u64> next;     // per announced session: the next sequence to be reported
  std::map<std::uint32_t, u64> claimed;  // per session id: the furthest a heartbeat so far claimed
  struct Death {
    u64 at;         // delivery stood here when the death was reported
    u64 forgotten;  // dead_forgotten then
  };
  std::map<std::uint32_t, Death> died;  // per session id reported dead
  std::int64_t now = 1'000'000'000;
  RxDesc out[64];
  auto unref = [&](std::uint32_t b) {
    FUZZ_CHECK(b < bufs.size() && bufs[b].refs > 0, "token %u is not a held datagram", b);
    if (--bufs[b].refs == 0) bufs[b].bytes.reset();
  };

  for (int ops = 0; !in.empty() && ops < 1024; ++ops) {
    namespace op = pollux::fuzz::udp;
    switch (in.u8() % op::kOpCount) {
      case op::kDatagram:
      case op::kDatagram + 1:
      case op::kDatagram + 2: {  // a datagram arrives (raw bytes, or described), possibly twice (duplication)
        if (bufs.size() >= 1024) break;
        std::vector<std::byte> d;
        if (in.flag()) {
          std::size_t got = 0;
          const std::uint8_t* p = in.bytes(in.u16() % (kMaxDatagram + 1), &got);
          d.assign(reinterpret_cast<const std::byte*>(p), reinterpret_cast<const std::byte*>(p) + got);
        } else {
          d = build_datagram(in, r);
        }
        const std::uint32_t b = static_cast<std::uint32_t>(bufs.size());
        Buffer& buf = bufs.emplace_back();
        buf.len = static_cast<std::uint32_t>(d.size());
        buf.bytes.reset(new std::byte[std::max<std::size_t>(d.size(), 1)]);
        if (!d.empty()) std::memcpy(buf.bytes.get(), d.data(), d.size());
        rel::PeerAddress from{};
        from.length = 16;
        from.bytes[0] = d.size() >= 16 ? d[12] : std::byte{0};  // the peer of a session: its id's low byte
        // Reach of every session before the datagram.
        std::map<std::uint32_t, rel::ReliableReceiver::SessionInfo> before;
        for (std::uint32_t i = 0; i < r.sessions(); ++i) before[r.session_info(i).session_id] = r.session_info(i);
        const int times = in.u8() < 16 ? 2 : 1;
        // The inline subscriber's direct path (UdpRxEndpoint::poll_direct) is tried first
        // whenever poll() certainly has nothing, as the endpoint does: what it takes is
        // delivered at once from the datagram (checked here as poll()'s messages are below),
        // and only a duplicate copy then goes through on_datagram().
        std::uint32_t direct = 0;
        if (r.quiet()) {
          direct = r.take_in_order(buf.bytes.get(), buf.len, from, 64, now);
          rel::FrameCursor cur(buf.bytes.get(), buf.len);
          for (std::uint32_t i = 0; i < direct; ++i) {
            const core::FrameHeader* f = cur.next();
            FUZZ_CHECK(f != nullptr, "direct path took %u frames of a datagram holding fewer", direct);
            FUZZ_CHECK(f->stream_id == kStream && f->flags == 0, "direct frame of stream %u, flags %u", f->stream_id,
                       static_cast<unsigned>(f->flags));
            auto it = next.find(f->session_id);
            FUZZ_CHECK(it != next.end(), "direct frame of session %u, which was not announced", f->session_id);
            FUZZ_CHECK(f->sequence == it->second, "session %u: direct frame at %llu, delivery stood at %llu",
                       f->session_id, static_cast<unsigned long long>(f->sequence),
                       static_cast<unsigned long long>(it->second));
            ++it->second;
          }
          FUZZ_CHECK(direct == 0 || (cur.next() == nullptr && !cur.malformed()),
                     "direct path delivered %u frames and left the rest of the datagram", direct);
        }
        for (int t = direct > 0 ? 1 : 0; t < times; ++t) {
          buf.refs += r.on_datagram(buf.bytes.get(), buf.len, from, b, now);
        }
        if (buf.refs == 0) buf.bytes.reset();
        for (std::uint32_t i = 0; i < r.sessions(); ++i) {
          const rel::ReliableReceiver::SessionInfo s = r.session_info(i);
          auto it = before.find(s.session_id);
          if (it == before.end()) continue;  // started by this datagram: it starts where it says
          const u64 reach = std::max({it->second.hwm, sat_add(it->second.expected, r.window()), claimed[s.session_id]});
          FUZZ_CHECK(s.hwm <= reach,
                     "one datagram moved session %u from hwm %llu to %llu (delivery at %llu, window %u, earlier "
                     "heartbeats claimed up to %llu)",
                     s.session_id, static_cast<unsigned long long>(it->second.hwm),
                     static_cast<unsigned long long>(s.hwm), static_cast<unsigned long long>(it->second.expected),
                     r.window(), static_cast<unsigned long long>(claimed[s.session_id]));
        }
        // What this datagram's heartbeats claim counts for the next ones (decoded with the
        // product's cursor; claims the receiver refused only make the bound looser).
        rel::FrameCursor claims(reinterpret_cast<const std::byte*>(d.data()), static_cast<std::uint32_t>(d.size()));
        for (const core::FrameHeader* f = claims.next(); f != nullptr; f = claims.next()) {
          if (!(f->flags & core::kFlagHeartbeat)) continue;
          u64& c = claimed[f->session_id];
          c = std::max({c, f->sequence, rel::heartbeat_body(f).oldest});
        }
        break;
      }
      case op::kPoll:
      case op::kPoll + 1: {  // the application polls, reads every message, releases them
        const std::uint32_t max = 1 + in.u8() % 64;
        const std::uint32_t n = r.poll(out, max);
        FUZZ_CHECK(n <= max, "poll returned %u > %u", n, max);
        for (std::uint32_t i = 0; i < n; ++i) {
          const RxDesc& d = out[i];
          if (d.kind == RxKind::kNewSession) {
            FUZZ_CHECK(next.count(d.session_id) == 0, "session %u announced twice", d.session_id);
            next[d.session_id] = d.sequence;
            if (auto dd = died.find(d.session_id); dd != died.end()) {
              FUZZ_CHECK(dd->second.forgotten != r.stats().dead_forgotten || d.sequence == dd->second.at,
                         "session %u reported dead at %llu came back at %llu: what lies between was lost silently",
                         d.session_id, static_cast<unsigned long long>(dd->second.at),
                         static_cast<unsigned long long>(d.sequence));
              died.erase(dd);
            }
            continue;
          }
          auto it = next.find(d.session_id);
          FUZZ_CHECK(it != next.end(), "event kind %d of session %u, which was not announced", static_cast<int>(d.kind),
                     d.session_id);
          if (d.kind == RxKind::kEndOfStream) {
            FUZZ_CHECK(d.sequence == it->second, "session %u ended at %llu, delivery stood at %llu", d.session_id,
                       static_cast<unsigned long long>(d.sequence), static_cast<unsigned long long>(it->second));
            if (d.reason != 0) died[d.session_id] = Death{d.sequence, r.stats().dead_forgotten};
            next.erase(it);
            continue;
          }
          FUZZ_CHECK(d.sequence == it->second, "session %u: event at sequence %llu, delivery stood at %llu",
                     d.session_id, static_cast<unsigned long long>(d.sequence),
                     static_cast<unsigned long long>(it->second));
          if (d.kind == RxKind::kGap) {
            FUZZ_CHECK(d.gap_count > 0 && d.gap_count <= UINT64_MAX - d.sequence, "loss report of %llu at %llu",
                       static_cast<unsigned long long>(d.gap_count), static_cast<unsigned long long>(d.sequence));
            it->second += d.gap_count;
            continue;
          }
          FUZZ_CHECK(d.kind == RxKind::kMessage, "event kind %d", static_cast<int>(d.kind));
          const auto tok = static_cast<std::uint32_t>(d.token);
          FUZZ_CHECK(d.token < bufs.size() && bufs[tok].refs > 0, "message in datagram %llu, which is not held",
                     static_cast<unsigned long long>(d.token));
          const Buffer& buf = bufs[tok];
          const auto* f = reinterpret_cast<const std::byte*>(d.frame);
          FUZZ_CHECK(f >= buf.bytes.get() && d.length >= core::kFrameHeaderSize &&
                         static_cast<std::size_t>(f - buf.bytes.get()) + d.length <= buf.len,
                     "message of %u bytes at offset %td of a %u-byte datagram", d.length, f - buf.bytes.get(), buf.len);
          FUZZ_CHECK(d.frame->frame_length == d.length && d.frame->sequence == d.sequence &&
                         d.frame->session_id == d.session_id && d.frame->stream_id == kStream,
                     "message header disagrees with its descriptor");
          FUZZ_CHECK(!(d.frame->flags & (core::kFlagHeartbeat | core::kFlagPadding)),
                     "a %s frame delivered as a message",
                     (d.frame->flags & core::kFlagHeartbeat) ? "heartbeat" : "padding");
          FUZZ_CHECK(
              !(d.frame->flags & core::kFlagTraced) || d.length >= core::kFrameHeaderSize + sizeof(core::StageTrace),
              "traced frame of %u bytes delivered: shorter than header + trace block (%zu)", d.length,
              core::kFrameHeaderSize + sizeof(core::StageTrace));
          (void)pollux::fuzz::touch(f, d.length);
          ++it->second;
        }
        for (std::uint32_t i = 0; i < n; ++i) {
          if (out[i].kind == RxKind::kMessage) unref(static_cast<std::uint32_t>(out[i].token));
        }
        break;
      }
      case op::kService: {  // timers: NAKs, status messages, session time-outs
        now += static_cast<std::int64_t>(in.u16()) * 100'000;
        (void)r.service(now, sink);
        break;
      }
      case op::kEvict: {  // buffer pressure: give back every frame of one held datagram (UdpRxEndpoint::evict)
        const std::uint8_t which = in.u8();
        std::vector<std::uint32_t> live;
        for (std::uint32_t b = 0; b < bufs.size(); ++b) {
          if (bufs[b].refs > 0) live.push_back(b);
        }
        if (live.empty()) break;
        const std::uint32_t b = live[which % live.size()];
        rel::FrameCursor cur(bufs[b].bytes.get(), bufs[b].len);
        std::uint32_t forgotten = 0;
        for (const core::FrameHeader* f = cur.next(); f != nullptr; f = cur.next()) {
          if (f->flags & core::kFlagHeartbeat) continue;
          if (r.forget(f->session_id, f->sequence, f, now)) ++forgotten;
        }
        FUZZ_CHECK(forgotten <= bufs[b].refs, "forgot %u frames of a datagram holding %u", forgotten, bufs[b].refs);
        for (std::uint32_t k = 0; k < forgotten; ++k) unref(b);
        break;
      }
      default:  // time passes, nothing arrives: the transport finds its socket empty
        now += static_cast<std::int64_t>(in.u32()) * 1'000;
        r.drained(now);
        break;
    }
    for (std::uint32_t i = 0; i < r.sessions(); ++i) {
      const rel::ReliableReceiver::SessionInfo s = r.session_info(i);
      FUZZ_CHECK(s.expected <= s.hwm, "session %u: expected %llu > hwm %llu", s.session_id,
                 static_cast<unsigned long long>(s.expected), static_cast<unsigned long long>(s.hwm));
    }
  }
  return 0;
}
