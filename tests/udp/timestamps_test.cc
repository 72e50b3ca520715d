// Kernel software timestamps of the UDP transport (transport/udp/kernel_timestamps.h): the TX
// stamp bookkeeping on synthetic datagrams, the subscriber's trust rule for the kernel RX stamp,
// and traced streams over loopback (unicast and multicast, inline and dedicated) whose every
// message gets post <= send completion <= kernel RX <= receive <= delivery.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "api/internal.h"
#include "core/clock.h"
#include "core/counters.h"
#include "core/frame.h"
#include "core/trace.h"
#include "pollux/pollux.h"
#include "tests/support/status_assert.h"
#include "tests/support/udp_ports.h"
#include "tests/udp/scripted_subscriber.h"
#include "transport/reliability/wire.h"
#include "transport/udp/kernel_timestamps.h"
#include "transport/udp/udp_config.h"

namespace pollux {
namespace {

using transport::udp::TxStampTracker;

// ---- TxStampTracker on synthetic datagrams ------------------------------------------------------

// A datagram of frames (sequence, traced?) packed as the send log packs them.
struct Datagram {
  alignas(32) std::byte bytes[1024] = {};
  std::uint32_t len = 0;
  void add(std::uint64_t seq, bool traced, std::uint16_t extra_flags = 0) {
    const std::uint32_t flen = core::kFrameHeaderSize + (traced ? sizeof(core::StageTrace) : 0) + 8;
    auto* h = reinterpret_cast<core::FrameHeader*>(bytes + len);
    h->frame_length = flen;
    h->magic = core::kFrameMagic;
    h->version = core::kFrameVersion;
    h->flags = static_cast<std::uint16_t>((traced ? core::kFlagTraced : 0) | extra_flags);
    h->stream_id = 1;
    h->session_id = 7;
    h->sequence = seq;
    len += transport::reliability::wire_size(flen);
  }
};

// One send call of `dgrams` of which the first `sent` went out; returns which asked for a stamp.
std::vector<bool> send(TxStampTracker& t, const std::vector<const Datagram*>& dgrams, std::uint32_t sent,
                       std::int64_t now) {
  std::vector<bool> asked;
  t.begin_batch();
  bool any = false;
  for (std::uint32_t i = 0; i < dgrams.size(); ++i) {
    asked.push_back(t.prepare(i, dgrams[i]->bytes, dgrams[i]->len));
    any = any || asked.back();
  }
  if (any) t.sent_at(now);
  t.end_batch(sent);
  return asked;
}

TEST(TxStampTracker, MapsTheKernelsNumbersToTheTracedFramesOfEachDatagram) {
  TxStampTracker t;
  t.init(8);
  core::SendCompletionLog log;
  Datagram a, b, c;
  a.add(1, true);
  a.add(2, false);
  a.add(3, true);
  b.add(4, false);  // no traced frame: no request, no number
  c.add(5, true);
  EXPECT_EQ(send(t, {&a, &b, &c}, 3, 1000), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(t.outstanding(), 2u);
  // The kernel numbers only the timestamped sends: a is 0, c is 1. Out of order is fine.
  t.on_stamp(1, 1600, &log);
  EXPECT_EQ(log.find(5), 1600);
  EXPECT_EQ(t.outstanding(), 2u);  // a still outstanding, ahead of c
  t.on_stamp(0, 1500, &log);
  EXPECT_EQ(log.find(1), 1500);
  EXPECT_EQ(log.find(3), 1500);
  EXPECT_EQ(log.find(2), 0);  // untraced frames are not recorded
  EXPECT_EQ(log.find(4), 0);
  EXPECT_EQ(t.outstanding(), 0u);
  EXPECT_EQ(t.stats().stamped, 2u);
  EXPECT_EQ(t.stats().frames, 3u);
  // The next request gets the next number.
  Datagram d;
  d.add(6, true);
  EXPECT_EQ(send(t, {&d}, 1, 2000), std::vector<bool>{true});
  t.on_stamp(2, 2100, &log);
  EXPECT_EQ(log.find(6), 2100);
  EXPECT_FALSE(t.needs_reset());
}

TEST(TxStampTracker, RepairsAndHeartbeatsAskForNothing) {
  TxStampTracker t;
  t.init(4);
  Datagram a, hb;
  a.add(1, true);
  a.add(2, true);
  hb.add(3, true, core::kFlagHeartbeat);
  EXPECT_EQ(send(t, {&a}, 1, 10), std::vector<bool>{true});
  EXPECT_EQ(send(t, {&a}, 1, 20), std::vector<bool>{false});  // the same frames again: a repair
  EXPECT_EQ(send(t, {&hb}, 1, 30), std::vector<bool>{false});
  EXPECT_EQ(t.stats().requested, 1u);
}

// A tracker for 4 datagrams and two datagrams of one traced frame each: a (sequence 1) and b (2).
class TxStampTrackerTwoDatagrams : public ::testing::Test {
 protected:
  TxStampTrackerTwoDatagrams() {
    t.init(4);
    a.add(1, true);
    b.add(2, true);
  }
  TxStampTracker t;
  core::SendCompletionLog log;
  Datagram a, b;
};

TEST_F(TxStampTrackerTwoDatagrams, AnUnsentDatagramIsAskedForAgainButForcesANumberingRestart) {
  // Only a went out (the socket would block): b was not numbered by us, maybe by the kernel.
  EXPECT_EQ(send(t, {&a, &b}, 1, 100), (std::vector<bool>{true, true}));
  EXPECT_EQ(t.outstanding(), 1u);
  EXPECT_FALSE(t.needs_reset());                               // a is still outstanding
  EXPECT_EQ(send(t, {&b}, 1, 200), std::vector<bool>{false});  // no request until the restart
  EXPECT_EQ(t.stats().skipped, 1u);
  t.on_stamp(0, 150, &log);
  EXPECT_EQ(log.find(1), 150);
  ASSERT_TRUE(t.needs_reset());
  t.reset();  // the caller restarted the kernel's numbering
  Datagram c;
  c.add(3, true);
  EXPECT_EQ(send(t, {&c}, 1, 300), std::vector<bool>{true});
  t.on_stamp(0, 350, &log);
  EXPECT_EQ(log.find(3), 350);
  EXPECT_EQ(t.stats().resyncs, 1u);
}

TEST_F(TxStampTrackerTwoDatagrams, ShiftedNumbersAreCaughtNotRecorded) {
  EXPECT_EQ(send(t, {&a}, 1, 1000), std::vector<bool>{true});
  EXPECT_EQ(send(t, {&b}, 1, 5000), std::vector<bool>{true});
  // The kernel's count ran one ahead: a's stamp (time 1200) comes numbered 1, which is b's,
  // sent at 5000 - a stamp before its send cannot be b's.
  t.on_stamp(1, 1200, &log);
  EXPECT_EQ(log.find(2), 0);
  EXPECT_EQ(t.stats().stale, 1u);
  // Numbered beyond anything sent.
  t.on_stamp(7, 6000, &log);
  EXPECT_EQ(t.stats().unknown, 1u);
  EXPECT_EQ(log.find(1), 0);
  // Nothing is requested until the outstanding ones resolve (here: expire), then a restart.
  Datagram c;
  c.add(3, true);
  EXPECT_EQ(send(t, {&c}, 1, 6000), std::vector<bool>{false});
  t.expire(5000 + TxStampTracker::kExpireNs);
  EXPECT_EQ(t.stats().expired, 2u);
  EXPECT_TRUE(t.needs_reset());
}

TEST(TxStampTracker, BoundedWhenStampsNeverCome) {
  TxStampTracker t;
  t.init(1);
  std::uint64_t seq = 0;
  for (std::uint32_t i = 0; i < TxStampTracker::kMaxDatagrams + 10; ++i) {
    Datagram d;
    d.add(++seq, true);
    (void)send(t, {&d}, 1, 100);
  }
  EXPECT_EQ(t.outstanding(), TxStampTracker::kMaxDatagrams);
  EXPECT_EQ(t.stats().skipped, 10u);
  t.expire(100 + TxStampTracker::kExpireNs);
  EXPECT_EQ(t.outstanding(), 0u);
  EXPECT_EQ(t.stats().expired, TxStampTracker::kMaxDatagrams);
  EXPECT_FALSE(t.needs_reset());
}

TEST(KernelTimestamps, TracedFrameFoundOnlyInWellFormedDatagrams) {
  Datagram a;
  a.add(1, false);
  a.add(2, true);
  EXPECT_TRUE(transport::udp::has_traced_frame(a.bytes, a.len));
  Datagram b;
  b.add(1, false);
  EXPECT_FALSE(transport::udp::has_traced_frame(b.bytes, b.len));
  // A traced frame too short for its trace block is not one the receiver would take.
  auto* h =
      reinterpret_cast<core::FrameHeader*>(a.bytes + transport::reliability::wire_size(core::kFrameHeaderSize + 8));
  h->frame_length = core::kFrameHeaderSize;
  EXPECT_FALSE(transport::udp::has_traced_frame(a.bytes, a.len));
}

// ---- the subscriber trusts the kernel RX stamp only when the transport flagged it -------------------

TEST(KernelTimestamps, SubscriberReadsTheKernelStampOnlyWhenTheTransportFlaggedIt) {
  POLLUX_ASSERT_OK_DECL(counters, core::CountersFile::create("", "kts"));
  detail::SubscriberImpl sub;
  auto& f = **counters;
  test::init_inline_subscriber(sub, f, 1);
  // Two traced frames whose trace block says kernel_rx_ns = 12345 (as a hostile sender, or a shm
  // segment another process wrote, could); only the second descriptor carries the flag.
  Datagram d;
  d.add(1, true);
  d.add(2, true);
  const std::uint32_t second = transport::reliability::wire_size(core::kFrameHeaderSize + sizeof(core::StageTrace) + 8);
  for (std::uint32_t off : {0u, second}) {
    auto* t = reinterpret_cast<core::StageTrace*>(d.bytes + off + core::kFrameHeaderSize);
    t->stamp_ns[0] = 10;
    t->kernel_rx_ns = 12345;
  }
  auto desc = [&](std::uint32_t off, std::uint64_t seq, std::uint32_t flags) {
    transport::RxDesc x{};
    x.frame = reinterpret_cast<const core::FrameHeader*>(d.bytes + off);
    x.sequence = seq;
    x.length = reinterpret_cast<const core::FrameHeader*>(d.bytes + off)->frame_length;
    x.kind = transport::RxKind::kMessage;
    x.session_id = 7;
    x.reserved = flags;
    return x;
  };
  auto ep = std::make_unique<test::ScriptedRx>();
  ep->script = {desc(0, 1, 0), desc(second, 2, transport::kRxFlagKernelRx)};
  sub.ep = std::move(ep);
  std::vector<std::int64_t> krx;
  detail::Handlers h{&krx,
                     [](void* c, const Message& m) {
                       static_cast<std::vector<std::int64_t>*>(c)->push_back(
                           m.trace != nullptr ? m.trace->ns[StageTimes::kKernelRx] : -1);
                     },
                     [](void*, const Gap&) {}, [](void*, const StreamEvent&) {},
                     nullptr};  // on_frame: the scripted endpoint has no direct path
  EXPECT_EQ(sub.poll(h, 16), 2);
  EXPECT_EQ(krx, (std::vector<std::int64_t>{0, 12345}));
  EXPECT_EQ(StageTimes::name(StageTimes::kKernelRx), "kernel_rx");
  EXPECT_EQ(StageTimes::name(StageTimes::kDelivery), "delivery");
}

// ---- traced UDP streams over loopback -----------------------------------------------------------------

// A block of 32 free ports below the ephemeral range, this process's own (tests/support/udp_ports.h).
std::uint32_t base_port() { return testing::UdpPortBlock::Base(); }

// Streams "t" (traced, every message) and "u" (untraced) on ports base + offset, + 1.
// `t_kts`: stream t's own [[streams]] kernel_timestamps line ("" = none: it inherits).
std::string config(const std::string& threading, std::uint32_t offset, bool kernel_timestamps, bool unicast,
                   const std::string& t_kts = "") {
  return testing::UdpTestConfigHead(threading, unicast ? "127.0.0.1" : testing::UniqueGroup()) +
         absl::StrFormat(R"(kernel_timestamps = %s
session_timeout_ms = 60000
status_interval_ms = 20
heartbeat_interval_us = 2000
linger_ms = 100
[[streams]]
topic = "t"
id = 1
trace = true
udp_port = %u
%s
[[streams]]
topic = "u"
id = 2
udp_port = %u
)",
                         kernel_timestamps ? "true" : "false", base_port() + offset,
                         t_kts.empty() ? "" : "kernel_timestamps = " + t_kts, base_port() + offset + 1);
}

struct Seen {
  std::uint64_t sequence = 0;
  bool traced = false;
  std::int64_t ns[StageTimes::kCount] = {};
};

struct TracedRun {
  std::vector<Seen> t, u;
  std::vector<std::int64_t> completions;  // send_completion_ns of each "t" message (0: never came)
  std::vector<std::int64_t> untraced_completions;
};

// Bound of the waits for what must happen (connection, an offer going through, a message
// arriving): far above any delay a loaded host causes, so passing it means it never happened.
constexpr auto kWait = std::chrono::seconds(60);

// Sends `n` messages on each stream, one at a time, waiting for each (and, on "t", for its send
// completion: bounded, 30 s per message and 60 s in all) before the next.
void run_traced(const std::string& threading, std::uint32_t offset, bool kts, bool unicast, int n, TracedRun* out,
                const std::string& t_kts = "") {
  POLLUX_ASSERT_OK_DECL(sctx, Context::from_string(config(threading, offset, kts, unicast, t_kts), "sub.toml"));
  POLLUX_ASSERT_OK_DECL(pctx, Context::from_string(config(threading, offset, kts, unicast, t_kts), "pub.toml"));
  POLLUX_ASSERT_OK_DECL(st, (*sctx)->subscriber("t"));
  POLLUX_ASSERT_OK_DECL(su, (*sctx)->subscriber("u"));
  POLLUX_ASSERT_OK_DECL(pt, (*pctx)->publisher("t"));
  POLLUX_ASSERT_OK_DECL(pu, (*pctx)->publisher("u"));
  const bool inline_mode = threading == "inline";
  auto step = [&] {
    (void)pt->service();
    (void)pu->service();
    std::this_thread::yield();
  };
  auto take = [](std::vector<Seen>* v) {
    return [v](const Message& m) {
      Seen s;
      s.sequence = m.sequence;
      s.traced = m.trace != nullptr;
      if (m.trace != nullptr) std::memcpy(s.ns, m.trace->ns, sizeof s.ns);
      v->push_back(s);
    };
  };
  const auto connect_deadline = std::chrono::steady_clock::now() + kWait;
  while (!pt->is_connected() || !pu->is_connected()) {
    ASSERT_LT(std::chrono::steady_clock::now(), connect_deadline) << "publishers never saw the subscribers";
    (void)st->poll([](const Message&) {}, 16);
    (void)su->poll([](const Message&) {}, 16);
    step();
  }
  // Stream t's kernel timestamps as configured (its own key, else the transport's). A stamped
  // stream's send completion must come: it is waited for. An unstamped one's must not: with the
  // transport's timestamps on, each message gives it 2 s to show anyway (10 s in all).
  const bool t_stamped = t_kts.empty() ? kts : t_kts == "true";
  const auto sc_budget = std::chrono::steady_clock::now() + (t_stamped ? kWait : std::chrono::seconds(10));
  for (int i = 0; i < n; ++i) {
    for (int stream = 0; stream < 2; ++stream) {
      Publisher& pub = stream == 0 ? *pt : *pu;
      Subscriber& sub = stream == 0 ? *st : *su;
      std::vector<Seen>& got = stream == 0 ? out->t : out->u;
      const std::uint64_t payload[2] = {static_cast<std::uint64_t>(i), 0};
      const auto deadline = std::chrono::steady_clock::now() + kWait;
      while (pub.offer(payload, sizeof payload) < 0) {
        ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "offer refused for " << kWait.count() << " s";
        (void)sub.poll(take(&got), 16);
        step();
      }
      const std::size_t want = static_cast<std::size_t>(i) + 1;
      while (got.size() < want) {
        ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "message " << i << " never arrived";
        if (sub.poll(take(&got), 16) == 0) step();
      }
      // The completion is collected by the publisher's duties: inline its service(), dedicated
      // its poller (every cycle).
      const std::uint64_t seq = got.back().sequence;
      std::int64_t sc = pub.send_completion_ns(seq);
      // Up to 30 s per message, 60 s in all (a build that never stamps fails in a minute, not n x 30 s).
      const auto sc_deadline =
          std::min(std::chrono::steady_clock::now() + std::chrono::seconds(t_stamped ? 30 : 2), sc_budget);
      while (stream == 0 && (kts || t_stamped) && sc == 0 && std::chrono::steady_clock::now() < sc_deadline) {
        if (inline_mode) {
          (void)pub.service();
        } else {
          std::this_thread::yield();
        }
        sc = pub.send_completion_ns(seq);
      }
      (stream == 0 ? out->completions : out->untraced_completions).push_back(sc);
    }
  }
  pt->close();
  pu->close();
}

void expect_ordered_stages(const TracedRun& r, const std::string& threading, int n) {
  ASSERT_EQ(r.t.size(), static_cast<std::size_t>(n));
  ASSERT_EQ(r.completions.size(), static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    SCOPED_TRACE(i);
    const Seen& s = r.t[static_cast<std::size_t>(i)];
    ASSERT_TRUE(s.traced);
    const std::int64_t post = s.ns[StageTimes::kPost], sc = r.completions[static_cast<std::size_t>(i)],
                       krx = s.ns[StageTimes::kKernelRx], rcv = s.ns[StageTimes::kReceive],
                       dlv = s.ns[StageTimes::kDelivery];
    EXPECT_GT(post, 0);
    EXPECT_GT(sc, 0) << "no kernel TX timestamp for the traced message";
    EXPECT_GT(krx, 0) << "no kernel RX timestamp for the traced message";
    EXPECT_LE(post, sc);
    // The TX and RX stamps are both the kernel's CLOCK_REALTIME, but each endpoint converts with
    // its own sampled offset (RealtimeToClock: off by up to half its sample window, at most
    // kNarrowNs wide unless a thread was preempted three times in a row). On loopback the two
    // stamps are a few hundred ns apart, so two conversions may invert them by up to kNarrowNs.
    EXPECT_LE(sc, krx + transport::udp::RealtimeToClock::kNarrowNs);
    EXPECT_LE(krx, rcv);
    EXPECT_LE(rcv, dlv);
    if (threading == "inline") {
      EXPECT_LT(rcv, dlv) << "inline: receive (recvmmsg return) must be its own clock read, not delivery's";
    } else {
      EXPECT_LT(rcv, s.ns[StageTimes::kRingToSubscriber]) << "dedicated: receive before the ring push";
      EXPECT_LE(s.ns[StageTimes::kRingToSubscriber], dlv);
    }
  }
  for (const Seen& s : r.u) EXPECT_FALSE(s.traced);
  for (std::int64_t sc : r.untraced_completions) EXPECT_EQ(sc, 0) << "an untraced stream has no send completions";
}

// Kernel timestamps on: every traced message has its stages in order, in each threading mode,
// unicast and multicast.
struct StagesCase {
  const char* name;
  const char* threading;
  std::uint32_t port_offset;
  bool unicast;
  int messages;
};
class UdpKernelTimestampStages : public ::testing::TestWithParam<StagesCase> {};

TEST_P(UdpKernelTimestampStages, EveryTracedMessageHasOrderedStages) {
  const StagesCase& c = GetParam();
  TracedRun r;
  run_traced(c.threading, c.port_offset, true, c.unicast, c.messages, &r);
  if (HasFatalFailure()) return;
  expect_ordered_stages(r, c.threading, c.messages);
}

INSTANTIATE_TEST_SUITE_P(Udp, UdpKernelTimestampStages,
                         ::testing::Values(StagesCase{"InlineUnicast", "inline", 0, true, 100},
                                           StagesCase{"InlineMulticastLoopback", "inline", 2, false, 50},
                                           StagesCase{"DedicatedUnicast", "dedicated", 4, true, 100},
                                           StagesCase{"DedicatedMulticastLoopback", "dedicated", 6, false, 50}),
                         [](const auto& info) { return std::string(info.param.name); });

// udp.kernel_timestamps = false (the default): no kernel stamps either way, but UDP still stamps
// receive at recvmmsg return (inline: distinct from delivery).
TEST(UdpKernelTimestamps, OffByDefaultButReceiveIsStillItsOwnStamp) {
  const core::Config defaults;
  EXPECT_FALSE(transport::udp::config(defaults).kernel_timestamps);
  for (const char* mode : {"inline", "dedicated"}) {
    SCOPED_TRACE(mode);
    TracedRun r;
    run_traced(mode, std::string(mode) == "inline" ? 8 : 10, false, true, 30, &r);
    if (HasFatalFailure()) return;
    ASSERT_EQ(r.t.size(), 30u);
    for (std::size_t i = 0; i < r.t.size(); ++i) {
      const Seen& s = r.t[i];
      EXPECT_EQ(s.ns[StageTimes::kKernelRx], 0);
      EXPECT_EQ(r.completions[i], 0);
      EXPECT_GT(s.ns[StageTimes::kReceive], s.ns[StageTimes::kPost]);
      if (std::string(mode) == "inline") {
        EXPECT_LT(s.ns[StageTimes::kReceive], s.ns[StageTimes::kDelivery]);
      }
    }
  }
}

// [[streams]] kernel_timestamps overrides udp.kernel_timestamps for its stream, both ways.
TEST(UdpKernelTimestamps, PerStreamKeyOverridesTheTransportKey) {
  {
    SCOPED_TRACE("udp.kernel_timestamps = true, stream t: false");
    TracedRun r;
    run_traced("inline", 12, true, true, 30, &r, "false");
    if (HasFatalFailure()) return;
    ASSERT_EQ(r.t.size(), 30u);
    for (std::size_t i = 0; i < r.t.size(); ++i) {
      EXPECT_EQ(r.t[i].ns[StageTimes::kKernelRx], 0);
      EXPECT_EQ(r.completions[i], 0);
    }
  }
  {
    SCOPED_TRACE("udp.kernel_timestamps = false, stream t: true");
    TracedRun r;
    run_traced("inline", 14, false, true, 30, &r, "true");
    if (HasFatalFailure()) return;
    expect_ordered_stages(r, "inline", 30);
  }
}

TEST(UdpKernelTimestamps, PerStreamKeyRejectsOtherValues) {
  auto c = core::parse_config(config("inline", 16, false, true, "\"sometimes\""), "x.toml");
  ASSERT_FALSE(c.ok()) << c.status();
  EXPECT_NE(std::string(c.status().message()).find("kernel_timestamps"), std::string::npos) << c.status();
  POLLUX_ASSERT_OK_DECL(inherit, core::parse_config(config("inline", 16, true, true, "\"inherit\""), "x.toml"));
  EXPECT_TRUE(transport::udp::kernel_timestamps(*inherit, inherit->find_stream(1)));
}

}  // namespace
}  // namespace pollux
