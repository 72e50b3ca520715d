// Fuzzes the live feed handler's A/B arbiter (examples/feed_handler/arbiter/arbiter.h) with what two
// lines, a re-request server and anyone else on the segment can send it: data packets at any
// sequence (real bytes, altered bytes, other sessions), heartbeats and ends of session with any
// sequence, raw bytes, replies to its requests cut anywhere, drained sockets and time steps.
//
// The input is a list of events (the switch below). The feed is a fixed generated ITCH stream:
// the data for sequence s is its message ((s - 1) mod n), so copies agree unless altered.
//
// Invariants, checked after every event with the output taken as live_source.cc takes it:
//  - the output is valid BinaryFILE records, and notices of known kinds;
//  - per session: records delivered plus messages reported lost equal next_sequence() - 1
//    (nothing skipped silently, nothing delivered twice);
//  - next_sequence() <= frontier(); requests in flight <= the cap; held packets <= 2 x 8;
//  - every request asks for 1..65535 messages of the current session, at or after the cursor;
//  - alone, one datagram never skips: a twin arbiter gets line A's datagrams only and has no
//    server; when it holds nothing, a data packet or heartbeat beyond its frontier must leave
//    the frontier where it was (only line A's next data, going on from exactly there, could
//    confirm it - a second datagram). (An end of session is excluded: with line B dead, as it
//    is in the twin, one line's end is taken after the stale interval, by design.)
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "feed_handler/arbiter/arbiter.h"
#include "itch/generator.h"
#include "itch/moldudp64.h"
#include "itch/reader.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

namespace feed = pollux::feed;
namespace mold = pollux::itch::mold;
using u64 = std::uint64_t;

const std::vector<std::vector<std::uint8_t>>& Messages() {
  static const std::vector<std::vector<std::uint8_t>> msgs = [] {
    pollux::itch::GeneratorOptions g;
    g.messages = 1500;
    g.symbols = 5;
    g.seed = 3;
    const std::vector<std::uint8_t> bytes = *pollux::itch::generate_itch(g);
    std::vector<std::vector<std::uint8_t>> out;
    (void)pollux::itch::for_each_message(
        bytes, [&](pollux::itch::MessageView m) { out.emplace_back(m.bytes().begin(), m.bytes().end()); });
    return out;
  }();
  return msgs;
}

const mold::Session kSessions[3] = {mold::Session::from("FUZZ0001"), mold::Session::from("FUZZ0002"),
                                    mold::Session::from("FORGED")};

feed::ArbiterOptions Options(bool rerequest) {
  feed::ArbiterOptions o;
  o.window = 256;
  o.max_gaps = 64;
  o.max_outstanding = 4;
  o.rerequest = rerequest;
  o.rerequest_wait_ns = 1'000'000;
  o.rerequest_timeout_ns = 5'000'000;
  o.rerequest_timeout_max_ns = 40'000'000;
  o.rerequest_retries = 2;
  o.heartbeat_ns = 50'000'000;
  o.stale_heartbeats = 3;
  o.end_linger_ns = 5'000'000;
  o.output_bytes = 1u << 16;
  o.hold_bytes = 1u << 16;
  o.delivered_bytes = 1u << 14;
  return o;
}

struct Checker {
  feed::Arbiter& a;
  u64 records = 0, lost = 0;  // since the last session notice

  void Drain() {
    feed::Arbiter::Piece p;
    while (a.next(&p)) {
      if (p.notice != nullptr) {
        const feed::Notice& n = *p.notice;
        FUZZ_CHECK(n.kind >= feed::Notice::kGap && n.kind <= feed::Notice::kConflict, "notice kind %d", n.kind);
        if (n.kind == feed::Notice::kSession) records = lost = 0;
        if (n.kind == feed::Notice::kGap) {
          FUZZ_CHECK(n.count > 0, "an empty gap notice at %llu", static_cast<unsigned long long>(n.from));
          lost += n.count;
        }
        continue;
      }
      const pollux::itch::ParseResult r = pollux::itch::for_each_message(p.bytes, [](pollux::itch::MessageView) {});
      FUZZ_CHECK(r.ok(), "delivered bytes are not BinaryFILE records (%zu bytes)", p.bytes.size());
      records += r.messages;
      (void)pollux::fuzz::touch(p.bytes.data(), p.bytes.size());
    }
    a.reset_output();
    if (a.has_session()) {
      FUZZ_CHECK(records + lost == a.next_sequence() - 1, "delivered %llu + reported %llu != cursor %llu - 1",
                 static_cast<unsigned long long>(records), static_cast<unsigned long long>(lost),
                 static_cast<unsigned long long>(a.next_sequence()));
    }
    FUZZ_CHECK(a.next_sequence() <= a.frontier(), "cursor %llu beyond the frontier %llu",
               static_cast<unsigned long long>(a.next_sequence()), static_cast<unsigned long long>(a.frontier()));
    FUZZ_CHECK(a.outstanding() <= 4, "%u requests in flight", a.outstanding());
    FUZZ_CHECK(a.unconfirmed() <= 2 * feed::Arbiter::kClaimsPerLine, "%zu held", a.unconfirmed());
  }
};

std::vector<std::uint8_t> DataPacket(const mold::Session& s, u64 seq, u64 count, bool alter) {
  const auto& msgs = Messages();
  std::vector<std::uint8_t> buf(65536);
  mold::PacketBuilder b(buf);
  if (!b.begin(s, seq)) return {};
  for (u64 i = 0; i < count && seq + i != 0; ++i) {
    std::vector<std::uint8_t> m = msgs[(seq + i - 1) % msgs.size()];
    if (alter && !m.empty()) m.back() ^= 0x5a;
    if (!b.add(m)) break;
  }
  const std::span<const std::uint8_t> p = b.finish();
  return {p.begin(), p.end()};
}

u64 PickSeq(pollux::fuzz::FuzzInput& in, const feed::Arbiter& a) {
  const u64 delta = static_cast<u64>(static_cast<std::int64_t>(static_cast<std::int16_t>(in.u16())));
  switch (in.u8() % 5) {
    case 0:
      return a.next_sequence() + delta;
    case 1:
      return a.frontier() + delta;
    case 2:
      return Messages().size() + 1 + delta;
    case 3:
      return in.u64() >> (in.u8() % 64);
    default:
      return delta & 0xFFFF;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  pollux::fuzz::FuzzInput in(data, size);
  feed::Arbiter a(Options(true));
  // The twin: line A only, no server. Nothing can confirm a skip there but line A going on
  // with data from exactly where the skip ended.
  feed::Arbiter solo(Options(false));
  Checker check{a};
  Checker solo_check{solo};
  std::int64_t now = 1'000'000;
  std::vector<feed::RerequestOut> pending;
  for (int events = 0; !in.empty() && events < 4000; ++events) {
    const std::uint8_t op = in.u8() % 10;
    switch (op) {
      case 0:
      case 1:
      case 2: {  // a data packet on line A, line B or the re-request socket
        const feed::Line line = static_cast<feed::Line>(op);
        const std::uint8_t flags = in.u8();
        const u64 seq = PickSeq(in, a);
        const u64 count = 1 + in.u8() % 40;
        const std::vector<std::uint8_t> p = DataPacket(kSessions[(flags >> 1) % 3], seq, count, (flags & 1) != 0);
        FUZZ_TRACE("data line %d seq %llu count %llu flags %u", op, static_cast<unsigned long long>(seq),
                   static_cast<unsigned long long>(count), flags);
        if (p.empty()) break;
        (void)a.on_packet(line, p, now, (flags & 0x40) != 0);
        if (line == feed::Line::kA) {
          const u64 before = solo.frontier();
          const bool quiet = solo.has_session() && solo.unconfirmed() == 0;
          const mold::Packet parsed = mold::parse_packet(p);
          (void)solo.on_packet(line, p, now, (flags & 0x40) != 0);
          if (quiet && parsed.ok() && parsed.session == solo.session() && parsed.sequence > before) {
            FUZZ_CHECK(solo.frontier() == before, "one data packet at %llu moved the frontier %llu -> %llu",
                       static_cast<unsigned long long>(parsed.sequence), static_cast<unsigned long long>(before),
                       static_cast<unsigned long long>(solo.frontier()));
          }
        }
        break;
      }
      case 3:
      case 4: {  // a heartbeat or an end of session on a line
        const feed::Line line = static_cast<feed::Line>(in.u8() % 2);
        const std::uint8_t flags = in.u8();
        const u64 seq = PickSeq(in, a);
        std::uint8_t b[mold::kPacketHeaderSize];
        const mold::Session& s = kSessions[flags % 3];
        const std::span<const std::uint8_t> p =
            op == 3 ? mold::encode_heartbeat(b, s, seq) : mold::encode_end_of_session(b, s, seq);
        FUZZ_TRACE("%s line %d seq %llu", op == 3 ? "heartbeat" : "end", static_cast<int>(line),
                   static_cast<unsigned long long>(seq));
        if (p.empty()) break;
        (void)a.on_packet(line, p, now);
        if (line == feed::Line::kA) {
          const u64 before = solo.frontier();
          const bool quiet = solo.has_session() && solo.unconfirmed() == 0;
          (void)solo.on_packet(line, p, now);
          if (op == 3 && quiet && s == solo.session()) {
            FUZZ_CHECK(solo.frontier() == before, "one heartbeat at %llu moved the frontier %llu -> %llu",
                       static_cast<unsigned long long>(seq), static_cast<unsigned long long>(before),
                       static_cast<unsigned long long>(solo.frontier()));
          }
        }
        break;
      }
      case 5: {  // raw bytes on any socket
        const feed::Line line = static_cast<feed::Line>(in.u8() % 3);
        std::size_t got = 0;
        const std::uint8_t* raw = in.bytes(in.u8(), &got);
        (void)a.on_packet(line, {raw, got}, now);
        break;
      }
      case 6: {  // a socket read empty
        const feed::Line line = static_cast<feed::Line>(in.u8() % 3);
        a.line_drained(line, now);
        if (line == feed::Line::kA) solo.line_drained(line, now);
        break;
      }
      case 7: {  // time passes, timers run
        now += static_cast<std::int64_t>(in.u16()) * 1000;
        a.tick(now);
        solo.tick(now);
        for (const feed::RerequestOut& r : a.requests()) {
          FUZZ_CHECK(r.count >= 1, "a request for 0 messages");
          FUZZ_CHECK(r.session == a.session(), "a request for another session");
          FUZZ_CHECK(r.sequence >= a.next_sequence(), "a request at %llu, below the cursor %llu",
                     static_cast<unsigned long long>(r.sequence), static_cast<unsigned long long>(a.next_sequence()));
          if (pending.size() < 64) pending.push_back(r);
        }
        a.clear_requests();
        FUZZ_CHECK(solo.requests().empty(), "a handler without a server asked one");
        solo.clear_requests();
        break;
      }
      case 8: {  // the server answers the oldest request, one packet of at most k messages
        if (pending.empty()) break;
        const feed::RerequestOut r = pending.front();
        pending.erase(pending.begin());
        const u64 k = 1 + in.u8() % 40;
        const std::uint8_t flags = in.u8();
        if ((flags & 3) == 0) break;  // lost
        const std::vector<std::uint8_t> p =
            DataPacket(r.session, r.sequence, std::min<u64>(k, r.count), (flags & 4) != 0);
        if (!p.empty()) (void)a.on_packet(feed::Line::kReplay, p, now);
        a.line_drained(feed::Line::kReplay, now);
        break;
      }
      default: {  // both arbiters' timers at once, far ahead
        now += static_cast<std::int64_t>(in.u8()) * 10'000'000;
        a.tick(now);
        solo.tick(now);
        a.clear_requests();
        solo.clear_requests();
        break;
      }
    }
    check.Drain();
    solo_check.Drain();
  }
  return 0;
}
