// Fuzzes the subscriber's reorder/loss window (transport/reliability/receive_window.h) with a
// sequence of events a hostile or lossy network can produce: data frames at any sequence,
// heartbeats with any (next, oldest), drains, NAK timers, buffer-pressure forgets, session
// time-outs and restarts. The input is a list of events (see the switch below); a reference
// model (which frames are held) is kept next to the window and compared after every event.
//
// Invariants:
//  - accept() stores exactly the frames the documented rules say (in [expected, expected +
//    window), not held yet); forget() drops exactly a held frame;
//  - drain() hands out, in order and without holes, each held frame (the very frame and
//    token accepted for that sequence) or a loss report, never a loss report over a frame
//    that is held; it stops only at max, at the limit, or at a gap that may still be repaired;
//  - expected <= hwm; every held sequence is in [expected, hwm); NAK ranges lie in
//    [max(expected, lost_through), hwm) and are not empty;
//  - one event (one datagram) never moves the window's reach (hwm, lost_through) further
//    than one window beyond where delivery stands, unless an earlier heartbeat already claimed
//    that far: a single forged heartbeat must not cost more than a window.
//    (How a claim becomes believed - e.g. confirmed by a later consistent heartbeat - is the
//    window's business; that it takes more than the one datagram is checked here.)
//
// The window is fed what ReliableReceiver passes it: sequences in [1, 2^62] (the receiver
// refuses larger ones as forgeries, they would overflow window arithmetic), heartbeats with
// oldest <= next, sessions starting at a sequence in [1, 2^62]. Inputs outside that contract
// are skipped here; the udp_receiver harness feeds them to the receiver itself.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "core/frame.h"
#include "tests/fuzz/formats.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/rx_names.h"
#include "transport/reliability/receive_window.h"
#include "transport/transport.h"

namespace {

using namespace pollux::fuzz::rx_names;  // NOLINT(google-build-using-namespace)

constexpr std::uint32_t kSession = 0x5e55;

// The receiver's plausibility bound (ReliableReceiver::kMaxSequence).
constexpr u64 kMaxSequence = u64{1} << 62;

u64 sat_add(u64 a, u64 b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

u64 pick_seq(pollux::fuzz::FuzzInput& in, const rel::ReceiveWindow& w) {
  const u64 delta = static_cast<u64>(static_cast<std::int64_t>(static_cast<std::int8_t>(in.u8())));
  namespace seq = pollux::fuzz::seq;
  switch (in.u8() % seq::kBases) {
    case seq::kExpected:
      return w.expected() + delta;
    case seq::kHwm:
      return w.hwm() + delta;
    case seq::kWindowEnd:
      return w.expected() + w.window() + delta;
    case seq::kOther:
      return w.lost_through() + delta;
    default:
      return in.u64();  // anything a forged datagram can carry
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  pollux::fuzz::FuzzInput in(data, size);
  rel::WindowOptions o;
  static constexpr std::uint32_t kWindows[] = {64, 128, 1024, 65536};
  o.window = kWindows[in.u8() % 4];
  o.nak_delay_ns = 100'000;
  o.nak_retry_ns = 2'000'000;
  o.nak_retry_max_ns = 50'000'000;
  o.give_up_ns = 1'000'000'000;
  rel::ReceiveWindow w;
  FUZZ_CHECK(w.init(o, 42), "init failed");
  const u64 window = w.window();
  FUZZ_CHECK(window >= o.window && (window & (window - 1)) == 0, "window %llu for %u asked",
             static_cast<unsigned long long>(window), o.window);
  w.reset(1 + in.u64() % kMaxSequence);  // a session starts at the first heartbeat's sequence

  std::map<u64, std::pair<const core::FrameHeader*, std::uint32_t>> held;  // the model
  std::vector<std::unique_ptr<core::FrameHeader>> frames;                  // every frame offered, kept alive
  std::int64_t now = 1'000'000'000;
  RxDesc out[64];
  rel::NakRange naks[32];
  u64 claimed = 0;    // the furthest sequence an earlier heartbeat claimed (its next: oldest <= next)
  u64 last_next = 0;  // the claim of the event being checked

  for (int ops = 0; !in.empty() && ops < 4096; ++ops) {
    const u64 exp0 = w.expected(), hwm0 = w.hwm(), lost0 = w.lost_through();
    namespace op = pollux::fuzz::window;
    switch (in.u8() % op::kOpCount) {
      case op::kData:
      case op::kData + 1: {  // a data frame
        const u64 seq = pick_seq(in, w);
        auto f = std::make_unique<core::FrameHeader>();
        f->frame_length = core::kFrameHeaderSize + in.u8();
        f->sequence = seq;
        if (seq == 0 || seq > kMaxSequence) continue;  // the receiver drops it
        const std::uint32_t token = static_cast<std::uint32_t>(frames.size());
        const rel::ReceiveWindow::Accept a = w.accept(seq, f.get(), token, now);
        FUZZ_TRACE("accept(%llu) -> %d", static_cast<unsigned long long>(seq), static_cast<int>(a));
        const rel::ReceiveWindow::Accept want = seq < exp0             ? rel::ReceiveWindow::Accept::kDuplicate
                                                : seq - exp0 >= window ? rel::ReceiveWindow::Accept::kBeyond
                                                : held.count(seq) != 0 ? rel::ReceiveWindow::Accept::kDuplicate
                                                                       : rel::ReceiveWindow::Accept::kStored;
        FUZZ_CHECK(a == want, "accept(%llu) with expected %llu: got %d, expected %d",
                   static_cast<unsigned long long>(seq), static_cast<unsigned long long>(exp0), static_cast<int>(a),
                   static_cast<int>(want));
        if (a == rel::ReceiveWindow::Accept::kStored) held[seq] = {f.get(), token};
        frames.push_back(std::move(f));
        break;
      }
      case op::kHeartbeat: {
        const u64 next = pick_seq(in, w);
        const u64 oldest = pick_seq(in, w);
        if (next > kMaxSequence || oldest > next) continue;  // the receiver drops it as malformed
        w.on_heartbeat(next, oldest, now);
        last_next = next;
        FUZZ_TRACE("heartbeat(next %llu, oldest %llu)", static_cast<unsigned long long>(next),
                   static_cast<unsigned long long>(oldest));
        break;
      }
      case op::kDrain:
      case op::kDrain + 1: {  // the application polls
        const std::uint32_t max = 1 + in.u8() % 64;
        const u64 limit = in.flag() ? UINT64_MAX : pick_seq(in, w);
        const std::uint32_t n = w.drain(out, max, kSession, limit);
        FUZZ_TRACE("drain(max %u, limit %llu) -> %u events", max, static_cast<unsigned long long>(limit), n);
        FUZZ_CHECK(n <= max, "drain returned %u > max %u", n, max);
        u64 cursor = exp0;
        for (std::uint32_t i = 0; i < n; ++i) {
          const RxDesc& d = out[i];
          FUZZ_CHECK(d.session_id == kSession, "event of session %u", d.session_id);
          FUZZ_CHECK(d.sequence == cursor, "event #%u at sequence %llu, delivery stood at %llu", i,
                     static_cast<unsigned long long>(d.sequence), static_cast<unsigned long long>(cursor));
          if (d.kind == RxKind::kMessage) {
            auto it = held.find(cursor);
            FUZZ_CHECK(it != held.end(), "delivered sequence %llu, which is not held",
                       static_cast<unsigned long long>(cursor));
            FUZZ_CHECK(d.frame == it->second.first && d.token == it->second.second &&
                           d.length == it->second.first->frame_length,
                       "sequence %llu delivered with another frame/token/length",
                       static_cast<unsigned long long>(cursor));
            held.erase(it);
            ++cursor;
          } else {
            FUZZ_CHECK(d.kind == RxKind::kGap && d.reason == pollux::transport::kGapLost && d.gap_count > 0,
                       "event kind %d reason %u count %llu", static_cast<int>(d.kind), d.reason,
                       static_cast<unsigned long long>(d.gap_count));
            const auto it = held.lower_bound(cursor);
            FUZZ_CHECK(it == held.end() || it->first - cursor >= d.gap_count,
                       "loss of [%llu, +%llu) reported over held sequence %llu",
                       static_cast<unsigned long long>(cursor), static_cast<unsigned long long>(d.gap_count),
                       static_cast<unsigned long long>(it->first));
            FUZZ_CHECK(d.gap_count <= limit - cursor, "loss report runs past the limit");
            cursor += d.gap_count;
          }
        }
        FUZZ_CHECK(w.expected() == cursor, "expected %llu after delivering up to %llu",
                   static_cast<unsigned long long>(w.expected()), static_cast<unsigned long long>(cursor));
        FUZZ_CHECK(n == max || w.expected() >= limit || !w.deliverable(), "drain stopped at %llu with more deliverable",
                   static_cast<unsigned long long>(w.expected()));
        break;
      }
      case op::kNaks: {
        now += static_cast<std::int64_t>(in.u16()) * 10'000;
        const std::uint32_t max = 1 + in.u8() % 32;
        const std::uint32_t k = w.collect_naks(now, naks, max);
        FUZZ_TRACE("collect_naks(now %lld, max %u) -> %u ranges", static_cast<long long>(now), max, k);
        FUZZ_CHECK(k <= max, "%u NAK ranges > max %u", k, max);
        const u64 lo = std::max(w.expected(), w.lost_through());
        for (std::uint32_t i = 0; i < k; ++i) {
          FUZZ_CHECK(naks[i].count > 0 && naks[i].from >= lo && naks[i].count <= w.hwm() - naks[i].from,
                     "NAK [%llu, +%llu) outside [%llu, %llu)", static_cast<unsigned long long>(naks[i].from),
                     static_cast<unsigned long long>(naks[i].count), static_cast<unsigned long long>(lo),
                     static_cast<unsigned long long>(w.hwm()));
        }
        break;
      }
      case op::kForget: {  // buffer pressure: a held frame (or a wrong one) is given back
        const u64 seq = pick_seq(in, w);
        const bool pick_held = in.flag();
        auto it = held.find(seq);
        const bool right = it != held.end() && pick_held;
        static const core::FrameHeader kNotHeld{};  // forget() is never called without a frame
        const core::FrameHeader* f = right ? it->second.first : frames.empty() ? &kNotHeld : frames.back().get();
        const bool want = it != held.end() && it->second.first == f;
        FUZZ_TRACE("forget(%llu, %s frame)", static_cast<unsigned long long>(seq), want ? "its" : "another");
        FUZZ_CHECK(w.forget(seq, f, now) == want, "forget(%llu) disagrees with the model (held: %d)",
                   static_cast<unsigned long long>(seq), it != held.end());
        if (want) held.erase(it);
        break;
      }
      case op::kSilence:  // the publisher went silent: the receiver declares everything missing lost
        now += static_cast<std::int64_t>(in.u32()) * 1'000;
        FUZZ_TRACE("silence: declare_lost(%llu)", static_cast<unsigned long long>(w.hwm()));
        w.declare_lost(w.hwm());
        break;
      default: {  // a new session replaces the old one in this slot
        if (!in.flag()) break;
        const u64 start = pick_seq(in, w);
        if (start == 0 || start > kMaxSequence) continue;  // the receiver refuses such a session
        FUZZ_TRACE("reset(%llu)", static_cast<unsigned long long>(start));
        w.reset(start);
        held.clear();
        FUZZ_CHECK(w.expected() == start && w.hwm() == start && w.held() == 0, "reset(%llu) left state behind",
                   static_cast<unsigned long long>(start));
        continue;
      }
    }
    FUZZ_TRACE("  expected %llu hwm %llu lost_through %llu held %u gaps %u",
               static_cast<unsigned long long>(w.expected()), static_cast<unsigned long long>(w.hwm()),
               static_cast<unsigned long long>(w.lost_through()), w.held(), w.gaps());
    // Invariants after every event.
    FUZZ_CHECK(w.expected() <= w.hwm(), "expected %llu > hwm %llu", static_cast<unsigned long long>(w.expected()),
               static_cast<unsigned long long>(w.hwm()));
    FUZZ_CHECK(w.held() == held.size(), "window holds %u frames, the model %zu", w.held(), held.size());
    FUZZ_CHECK(held.empty() || (held.begin()->first >= w.expected() && held.rbegin()->first < w.hwm()),
               "held sequences [%llu, %llu] outside [expected %llu, hwm %llu)",
               static_cast<unsigned long long>(held.begin()->first),
               static_cast<unsigned long long>(held.rbegin()->first), static_cast<unsigned long long>(w.expected()),
               static_cast<unsigned long long>(w.hwm()));
    FUZZ_CHECK(w.gaps() <= rel::ReceiveWindow::kMaxGaps, "%u gaps", w.gaps());
    const u64 reach = std::max({hwm0, sat_add(exp0, window), claimed});
    FUZZ_CHECK(w.hwm() <= reach && (w.lost_through() <= std::max(lost0, reach)),
               "one event moved hwm %llu -> %llu, lost_through %llu -> %llu with delivery at %llu (window %llu, "
               "earlier heartbeats claimed up to %llu)",
               static_cast<unsigned long long>(hwm0), static_cast<unsigned long long>(w.hwm()),
               static_cast<unsigned long long>(lost0), static_cast<unsigned long long>(w.lost_through()),
               static_cast<unsigned long long>(exp0), static_cast<unsigned long long>(window),
               static_cast<unsigned long long>(claimed));
    if (last_next != 0) claimed = std::max(claimed, last_next);  // this heartbeat's claim counts from now on
    last_next = 0;
  }
  return 0;
}
