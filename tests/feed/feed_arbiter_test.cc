// The live mode's arbitration and gap logic (examples/feed_handler/arbiter/arbiter.h) without
// sockets: packets are built here and handed over in any order, with duplicates, losses,
// re-request replies, session changes and hostile bytes; time is a plain number.
#include "feed_handler/arbiter/arbiter.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "itch/generator.h"
#include "itch/moldudp64.h"
#include "itch/reader.h"

namespace pollux::feed {
namespace {

namespace mold = itch::mold;
using V = Arbiter::Verdict;

constexpr std::int64_t kMs = 1'000'000;

// ITCH messages of a generated feed, numbered from 1 like MoldUDP64 sequences.
struct Feed {
  std::vector<std::uint8_t> bytes;
  std::vector<std::span<const std::uint8_t>> msgs;  // msgs[0] is sequence 1
  explicit Feed(std::uint64_t n, std::uint64_t seed = 7) {
    itch::GeneratorOptions o;
    o.messages = n;
    o.symbols = 4;
    o.seed = seed;
    bytes = *itch::generate_itch(o);
    (void)itch::for_each_message(bytes, [&](itch::MessageView m) { msgs.push_back(m.bytes()); });
  }
  // BinaryFILE records of sequences [from, to).
  std::vector<std::uint8_t> Records(std::uint64_t from, std::uint64_t to) const {
    std::vector<std::uint8_t> out;
    for (std::uint64_t s = from; s < to; ++s) {
      const auto& m = msgs[s - 1];
      out.push_back(0);
      out.push_back(static_cast<std::uint8_t>(m.size()));
      out.insert(out.end(), m.begin(), m.end());
    }
    return out;
  }
};

std::vector<std::uint8_t> Data(const Feed& f, const mold::Session& s, std::uint64_t seq, std::uint64_t count) {
  std::vector<std::uint8_t> buf(65536);
  mold::PacketBuilder b(buf);
  EXPECT_TRUE(b.begin(s, seq));
  for (std::uint64_t i = 0; i < count; ++i) EXPECT_TRUE(b.add(f.msgs[seq + i - 1]));
  const auto p = b.finish();
  return {p.begin(), p.end()};
}
std::vector<std::uint8_t> Heartbeat(const mold::Session& s, std::uint64_t next) {
  std::uint8_t b[20];
  const auto p = mold::encode_heartbeat(b, s, next);
  return {p.begin(), p.end()};
}
std::vector<std::uint8_t> End(const mold::Session& s, std::uint64_t next) {
  std::uint8_t b[20];
  const auto p = mold::encode_end_of_session(b, s, next);
  return {p.begin(), p.end()};
}

const mold::Session kS1 = mold::Session::from("SESSION1");
const mold::Session kS2 = mold::Session::from("SESSION2");

// What came out: the records and the notices with the record count before each.
struct Out {
  std::vector<std::uint8_t> bytes;
  std::uint64_t records = 0;
  struct At {
    Notice n;
    std::uint64_t after;  // records delivered before it
  };
  std::vector<At> notices;
  std::vector<At> gaps() const {
    std::vector<At> g;
    for (const At& a : notices) {
      if (a.n.kind == Notice::kGap) g.push_back(a);
    }
    return g;
  }
  int count(Notice::Kind k) const {
    return static_cast<int>(std::count_if(notices.begin(), notices.end(), [k](const At& a) { return a.n.kind == k; }));
  }
};

void Drain(Arbiter& a, Out* out) {
  Arbiter::Piece p;
  while (a.next(&p)) {
    if (p.notice != nullptr) {
      out->notices.push_back({*p.notice, out->records});
      continue;
    }
    const itch::ParseResult r = itch::for_each_message(p.bytes, [](itch::MessageView) {});
    ASSERT_TRUE(r.ok()) << "delivered bytes are not BinaryFILE records";
    out->records += r.messages;
    out->bytes.insert(out->bytes.end(), p.bytes.begin(), p.bytes.end());
  }
  a.reset_output();
}

ArbiterOptions Opts() {
  ArbiterOptions o;
  o.window = 1024;
  o.rerequest_wait_ns = 1 * kMs;
  o.rerequest_timeout_ns = 10 * kMs;
  o.rerequest_timeout_max_ns = 1000 * kMs;
  o.rerequest_retries = 3;
  o.max_outstanding = 4;
  o.heartbeat_ns = 100 * kMs;
  o.stale_heartbeats = 3;
  o.end_linger_ns = 5 * kMs;
  return o;
}

// Opts() without a re-request server.
ArbiterOptions NoServerOpts() {
  ArbiterOptions o = Opts();
  o.rerequest = false;
  return o;
}
// Opts() with a window of `messages`.
ArbiterOptions WindowOpts(std::uint32_t messages) {
  ArbiterOptions o = Opts();
  o.window = messages;
  return o;
}

// The random tests of lossy lines: a window of 4096 messages and retries enough that nothing
// is given up.
ArbiterOptions LossyLinesOpts() {
  ArbiterOptions o = WindowOpts(1u << 12);
  o.rerequest_retries = 50;
  return o;
}

// What most tests start from: a generated feed of `n` messages, an arbiter with `o`, and what
// it delivered. A test binds them: auto [f, a, out] = Rig(100);
struct Rig {
  const Feed f;
  Arbiter a;
  Out out;
  explicit Rig(std::uint64_t n, const ArbiterOptions& o = Opts()) : f(n), a(o) {}
};

// Hands a packet over and drains the output.
V Put(Arbiter& a, Line l, const std::vector<std::uint8_t>& p, std::int64_t now, Out* out) {
  const V v = a.on_packet(l, p, now);
  Drain(a, out);
  return v;
}
// The same packets on line A, then on line B (a loss on both lines is a packet left out).
void Both(Arbiter& a, const std::vector<std::vector<std::uint8_t>>& packets, std::int64_t now, Out* out) {
  for (Line l : {Line::kA, Line::kB}) {
    for (const auto& p : packets) (void)Put(a, l, p, now, out);
  }
}
void TickAt(Arbiter& a, std::int64_t now, Out* out) {
  a.tick(now);
  Drain(a, out);
}
// Sends the replies the server would: every message of every queued request.
int Answer(Arbiter& a, const Feed& f, std::int64_t now, Out* out) {
  std::vector<RerequestOut> reqs(a.requests().begin(), a.requests().end());
  a.clear_requests();
  for (const RerequestOut& r : reqs) (void)Put(a, Line::kReplay, Data(f, r.session, r.sequence, r.count), now, out);
  return static_cast<int>(reqs.size());
}

// The random tests' server side: the requests of each tick queued, the oldest taken to be
// answered (or lost) as the test decides.
struct QueuedRequests {
  std::vector<RerequestOut> q;
  void Collect(Arbiter& a, std::int64_t t, Out* out) {
    TickAt(a, t, out);
    for (const RerequestOut& r : a.requests()) q.push_back(r);
    a.clear_requests();
  }
  // The oldest request, taken off the queue (false when there is none).
  bool Take(RerequestOut* r) {
    if (q.empty()) return false;
    *r = q.front();
    q.erase(q.begin());
    return true;
  }
};

std::uint64_t C(const Arbiter& a, LiveCounter c) { return a.counter(c); }
// Requests of either kind: for ranges established missing, or to confirm a skip.
std::uint64_t Asked(const Arbiter& a) {
  return a.counter(LiveCounter::kRerequestsSent) + a.counter(LiveCounter::kConfirmRequests);
}

TEST(Arbiter, InOrderOnBothLinesDeliversOnceAndCountsEveryDuplicate) {
  auto [f, a, out] = Rig(400);
  std::uint64_t packets = 0;
  for (std::uint64_t s = 1; s <= 400; s += 10, ++packets) {
    EXPECT_EQ(Put(a, Line::kA, Data(f, kS1, s, 10), 0, &out), V::kAccepted);
    EXPECT_EQ(Put(a, Line::kB, Data(f, kS1, s, 10), 0, &out), V::kDuplicate);
  }
  EXPECT_EQ(out.bytes, f.Records(1, 401));
  EXPECT_EQ(C(a, LiveCounter::kMessages), 400u);
  EXPECT_EQ(C(a, LiveCounter::kPacketsA), packets);
  EXPECT_EQ(C(a, LiveCounter::kPacketsB), packets);
  EXPECT_EQ(C(a, LiveCounter::kDuplicatePackets), packets);
  EXPECT_EQ(C(a, LiveCounter::kDuplicateMessages), 400u);
  EXPECT_EQ(C(a, LiveCounter::kGapsDetected), 0u);
  EXPECT_EQ(out.count(Notice::kSession), 1);  // the session, announced first
  EXPECT_EQ(out.notices[0].after, 0u);
  EXPECT_EQ(std::string(out.notices[0].n.session.view()), std::string(kS1.view()));
}

TEST(Arbiter, LossOnOneLineIsFilledByTheOtherWithoutARequest) {
  auto [f, a, out] = Rig(300);
  std::int64_t t = 0;
  for (std::uint64_t s = 1; s <= 300; s += 10, t += kMs) {
    if (s % 30 != 11) (void)Put(a, Line::kA, Data(f, kS1, s, 10), t, &out);  // A loses every third
    TickAt(a, t, &out);
    (void)Put(a, Line::kB, Data(f, kS1, s, 10), t, &out);
    a.line_drained(Line::kA, t);
    a.line_drained(Line::kB, t);
    TickAt(a, t, &out);
  }
  EXPECT_EQ(out.bytes, f.Records(1, 301));
  EXPECT_EQ(C(a, LiveCounter::kRerequestsSent), 0u);
  EXPECT_EQ(C(a, LiveCounter::kGapsDetected), 0u);  // B filled each before A went past it
  EXPECT_TRUE(out.gaps().empty());
}

TEST(Arbiter, AGapSeenOnALeadingLineWaitsForTheOtherLine) {
  auto [f, a, out] = Rig(100);
  (void)Put(a, Line::kA, Data(f, kS1, 1, 10), 0, &out);
  // A lost 11..20: its next packet skips ahead, which one line alone does not establish.
  EXPECT_EQ(Put(a, Line::kA, Data(f, kS1, 21, 10), 0, &out), V::kHeld);
  EXPECT_EQ(C(a, LiveCounter::kUnconfirmed), 1u);
  EXPECT_EQ(C(a, LiveCounter::kGapsDetected), 0u);
  EXPECT_EQ(a.frontier(), 11u);
  a.line_drained(Line::kB, 0);
  TickAt(a, 500'000, &out);  // before the wait: nothing
  EXPECT_TRUE(a.requests().empty());
  // B's socket still had data: read empty only before the wait ended, so still no request.
  TickAt(a, 5 * kMs, &out);
  EXPECT_TRUE(a.requests().empty());
  (void)Put(a, Line::kB, Data(f, kS1, 1, 10), 5 * kMs, &out);
  (void)Put(a, Line::kB, Data(f, kS1, 11, 10), 5 * kMs, &out);  // A's held packet follows in order
  EXPECT_EQ(out.bytes, f.Records(1, 31));
  EXPECT_EQ(a.unconfirmed(), 0u);
  EXPECT_EQ(C(a, LiveCounter::kUnconfirmedDropped), 0u);
  TickAt(a, 6 * kMs, &out);
  EXPECT_EQ(C(a, LiveCounter::kRerequestsSent), 0u);
  EXPECT_EQ(C(a, LiveCounter::kConfirmRequests), 0u);
  EXPECT_EQ(Put(a, Line::kB, Data(f, kS1, 21, 10), 6 * kMs, &out), V::kDuplicate);
}

// B silent past the wait: A's skip is confirmed by the server, whose reply fills the range.
TEST(Arbiter, ASilentLineDoesNotHoldRecoveryUp) {
  auto [f, a, out] = Rig(100);
  (void)Put(a, Line::kA, Data(f, kS1, 1, 10), 0, &out);
  (void)Put(a, Line::kA, Data(f, kS1, 21, 10), 0, &out);
  a.line_drained(Line::kB, 2 * kMs);  // read empty after the 1 ms wait
  TickAt(a, 2 * kMs, &out);
  ASSERT_EQ(a.requests().size(), 1u);
  EXPECT_EQ(a.requests()[0].sequence, 11u);
  EXPECT_EQ(a.requests()[0].count, 10u);
  EXPECT_EQ(C(a, LiveCounter::kConfirmRequests), 1u);
  EXPECT_EQ(Answer(a, f, 3 * kMs, &out), 1);
  EXPECT_EQ(out.bytes, f.Records(1, 31));
  EXPECT_EQ(C(a, LiveCounter::kMessagesRecovered), 10u);
  EXPECT_EQ(C(a, LiveCounter::kUnconfirmedDropped), 0u);
}

TEST(Arbiter, ALossOnBothLinesIsRequestedOnceBothWentPastIt) {
  auto [f, a, out] = Rig(100);
  // Both lines skip 11..20: the server is asked at once (to confirm the skip and fill it).
  Both(a, {Data(f, kS1, 1, 10), Data(f, kS1, 21, 10)}, 0, &out);
  TickAt(a, 0, &out);  // no wait needed: missing on both
  ASSERT_EQ(a.requests().size(), 1u);
  EXPECT_EQ(a.requests()[0].sequence, 11u);
  EXPECT_EQ(a.requests()[0].count, 10u);
  EXPECT_EQ(std::string(a.requests()[0].session.view()), std::string(kS1.view()));
  EXPECT_EQ(C(a, LiveCounter::kConfirmRequests), 1u);
  // Both lines go on (31..40): the skip is established meanwhile, and not asked for again.
  Both(a, {Data(f, kS1, 31, 10)}, kMs, &out);
  EXPECT_EQ(C(a, LiveCounter::kGapsDetected), 1u);
  TickAt(a, 1 * kMs, &out);  // in flight: not again
  EXPECT_EQ(Asked(a), 1u);
  Answer(a, f, 2 * kMs, &out);
  EXPECT_EQ(out.bytes, f.Records(1, 41));
  EXPECT_EQ(a.outstanding(), 0u);
  TickAt(a, 100 * kMs, &out);
  EXPECT_EQ(Asked(a), 1u);
  EXPECT_EQ(C(a, LiveCounter::kRerequestsTimedOut), 0u);
  // A late second copy of the reply is a duplicate.
  EXPECT_EQ(Put(a, Line::kReplay, Data(f, kS1, 11, 10), 3 * kMs, &out), V::kDuplicate);
}

TEST(Arbiter, UnansweredRequestsBackOffThenTheExactRangeIsReportedWhereItWas) {
  const Feed f(100);
  Arbiter a(Opts());  // timeout 10 ms, doubled, 3 retries
  Out out;
  // 11..17 lost on both; each line goes on after the skip (31..40), which establishes it.
  Both(a, {Data(f, kS1, 1, 10), Data(f, kS1, 18, 13), Data(f, kS1, 31, 10)}, 0, &out);
  std::vector<std::int64_t> sent_at;
  for (std::int64_t t = 0; t <= 200 * kMs; t += kMs / 2) {
    TickAt(a, t, &out);
    if (!a.requests().empty()) {
      EXPECT_EQ(a.requests()[0].sequence, 11u);
      EXPECT_EQ(a.requests()[0].count, 7u);
      sent_at.push_back(t);
      a.clear_requests();
    }
  }
  // 0, then after 10, 20 and 40 ms more; lost after the last 80 ms timeout.
  EXPECT_EQ(sent_at, (std::vector<std::int64_t>{0, 10 * kMs, 30 * kMs, 70 * kMs}));
  EXPECT_EQ(C(a, LiveCounter::kRerequestsSent), 4u);
  EXPECT_EQ(C(a, LiveCounter::kRerequestRetries), 3u);
  EXPECT_EQ(C(a, LiveCounter::kRerequestsTimedOut), 4u);
  const auto gaps = out.gaps();
  ASSERT_EQ(gaps.size(), 1u);
  EXPECT_EQ(gaps[0].n.from, 11u);
  EXPECT_EQ(gaps[0].n.count, 7u);
  EXPECT_EQ(gaps[0].after, 10u);  // between message 10 and message 18
  std::vector<std::uint8_t> want = f.Records(1, 11);
  const std::vector<std::uint8_t> rest = f.Records(18, 41);
  want.insert(want.end(), rest.begin(), rest.end());
  EXPECT_EQ(out.bytes, want);
  EXPECT_EQ(C(a, LiveCounter::kMessagesUnrecoverable), 7u);
  EXPECT_EQ(C(a, LiveCounter::kGapsUnrecoverable), 1u);
}

TEST(Arbiter, WithoutAServerAGapMissingOnBothLinesIsReportedAtOnce) {
  auto [f, a, out] = Rig(100, NoServerOpts());
  Both(a, {Data(f, kS1, 1, 10), Data(f, kS1, 16, 5), Data(f, kS1, 21, 5)}, 0, &out);
  TickAt(a, 0, &out);
  EXPECT_TRUE(a.requests().empty());
  ASSERT_EQ(out.gaps().size(), 1u);
  EXPECT_EQ(out.gaps()[0].n.count, 5u);
  EXPECT_EQ(out.records, 20u);
}

TEST(Arbiter, OutstandingRequestsAreCapped) {
  const Feed f(400);
  Arbiter a(Opts());  // at most 4 in flight
  Out out;
  for (Line l : {Line::kA, Line::kB}) {
    for (std::uint64_t s = 1; s <= 400; s += 10) {
      if ((s / 10) % 3 == 1) continue;  // every third packet lost on both: 13 ranges
      (void)Put(a, l, Data(f, kS1, s, 10), 0, &out);
    }
  }
  TickAt(a, 0, &out);
  EXPECT_EQ(a.requests().size(), 4u);
  EXPECT_EQ(a.outstanding(), 4u);
  Answer(a, f, kMs, &out);
  TickAt(a, kMs, &out);
  EXPECT_EQ(a.requests().size(), 4u);  // the next four, never more
  for (int round = 0; round < 10 && a.open_gaps() != 0; ++round) {
    Answer(a, f, kMs, &out);
    TickAt(a, kMs, &out);
  }
  EXPECT_EQ(out.bytes, f.Records(1, 401));
  EXPECT_EQ(C(a, LiveCounter::kRerequestsSent), 13u);
  EXPECT_EQ(C(a, LiveCounter::kRerequestsAnswered), 13u);
}

TEST(Arbiter, HeartbeatAndEndOfSessionRevealALossAtTheTail) {
  auto [f, a, out] = Rig(100);
  Both(a, {Data(f, kS1, 1, 10)}, 0, &out);
  Both(a, {Heartbeat(kS1, 16)}, kMs, &out);  // 11..15 lost
  EXPECT_EQ(C(a, LiveCounter::kHeartbeats), 2u);
  TickAt(a, kMs, &out);
  ASSERT_EQ(a.requests().size(), 1u);
  EXPECT_EQ(a.requests()[0].count, 5u);
  Answer(a, f, kMs, &out);
  Both(a, {End(kS1, 21)}, 2 * kMs, &out);  // 16..20 lost
  TickAt(a, 2 * kMs, &out);
  Answer(a, f, 2 * kMs, &out);
  EXPECT_EQ(out.bytes, f.Records(1, 21));
  EXPECT_FALSE(a.done());
  TickAt(a, 3 * kMs, &out);
  EXPECT_FALSE(a.done());  // lingering for a next session
  TickAt(a, 8 * kMs, &out);
  EXPECT_TRUE(a.done());
  EXPECT_EQ(C(a, LiveCounter::kEndOfSession), 2u);
}

TEST(Arbiter, SessionChangeAfterEndOfSessionHoldsTheNewSessionUntilTheOldIsComplete) {
  auto [f, a, out] = Rig(100);
  (void)Put(a, Line::kA, Data(f, kS1, 1, 10), 0, &out);
  EXPECT_EQ(Put(a, Line::kA, End(kS1, 21), 0, &out), V::kHeld);  // A lost 11..20; B lags
  // The next session's first packet on A (its messages 21.. of the feed are 1.. there).
  std::vector<std::uint8_t> s2p = Data(f, kS1, 21, 10);
  (void)mold::detail::write20(s2p, kS2, 1, 10);
  EXPECT_EQ(Put(a, Line::kA, s2p, 0, &out), V::kHeld);
  EXPECT_TRUE(a.moved(Line::kA));
  TickAt(a, 0, &out);
  EXPECT_EQ(std::string(a.session().view()), std::string(kS1.view()));  // one line's end is not the end
  (void)Put(a, Line::kB, Data(f, kS1, 1, 10), 0, &out);
  (void)Put(a, Line::kB, Data(f, kS1, 11, 10), 0, &out);
  EXPECT_EQ(Put(a, Line::kB, End(kS1, 21), 0, &out), V::kAccepted);  // both lines agree
  EXPECT_EQ(a.end_sequence(), 21u);
  TickAt(a, 0, &out);  // ended, but only line A shows the next session: it may be forged
  EXPECT_EQ(std::string(a.session().view()), std::string(kS1.view()));
  EXPECT_EQ(Put(a, Line::kB, s2p, 0, &out), V::kHeld);
  TickAt(a, 0, &out);  // both lines in the next session: switch, and the held packets are taken
  EXPECT_FALSE(a.moved(Line::kA));
  EXPECT_EQ(std::string(a.session().view()), std::string(kS2.view()));
  EXPECT_EQ(out.bytes, f.Records(1, 31));
  EXPECT_EQ(Put(a, Line::kA, s2p, 0, &out), V::kDuplicate);
  EXPECT_EQ(C(a, LiveCounter::kPacketsA), 4u);
  EXPECT_EQ(C(a, LiveCounter::kNextSessionHeld), 2u);
  // Line B's old-session packets now count as an old session's.
  EXPECT_EQ(Put(a, Line::kB, End(kS1, 21), 0, &out), V::kRejected);
  EXPECT_EQ(C(a, LiveCounter::kOldSession), 1u);
  EXPECT_EQ(out.count(Notice::kSession), 2);
  EXPECT_EQ(C(a, LiveCounter::kSessionChanges), 1u);
  EXPECT_EQ(C(a, LiveCounter::kPacketsB), 5u);
}

TEST(Arbiter, SessionChangeWithoutEndOfSessionSwitchesOnceBothLinesMoved) {
  auto [f, a, out] = Rig(100);
  std::vector<std::uint8_t> s2 = Data(f, kS1, 11, 10);
  (void)mold::detail::write20(s2, kS2, 1, 10);
  (void)Put(a, Line::kA, Data(f, kS1, 1, 10), 0, &out);
  (void)Put(a, Line::kB, Data(f, kS1, 1, 10), 0, &out);
  EXPECT_EQ(Put(a, Line::kA, s2, 0, &out), V::kHeld);
  // B quiet far past the wait but not for the stale interval (300 ms): it may still bring more.
  TickAt(a, 200 * kMs, &out);
  EXPECT_EQ(std::string(a.session().view()), std::string(kS1.view()));
  EXPECT_EQ(Put(a, Line::kB, s2, 200 * kMs, &out), V::kHeld);
  TickAt(a, 200 * kMs, &out);
  EXPECT_EQ(std::string(a.session().view()), std::string(kS2.view()));
  EXPECT_EQ(Put(a, Line::kA, s2, 200 * kMs, &out), V::kDuplicate);  // the held copies were taken
  EXPECT_EQ(out.records, 20u);
  EXPECT_EQ(out.bytes, f.Records(1, 21));
}

TEST(Arbiter, AConfiguredSessionIgnoresOthers) {
  const Feed f(50);
  ArbiterOptions o = Opts();
  o.session = "SESSION2";
  Arbiter a(o);
  Out out;
  EXPECT_EQ(Put(a, Line::kA, Data(f, kS1, 1, 10), 0, &out), V::kRejected);
  EXPECT_EQ(C(a, LiveCounter::kWrongSession), 1u);
  EXPECT_FALSE(a.has_session());
  EXPECT_EQ(Put(a, Line::kA, Data(f, kS2, 1, 10), 0, &out), V::kAccepted);
  EXPECT_EQ(Put(a, Line::kA, Data(f, kS1, 11, 10), 0, &out), V::kRejected);
  EXPECT_EQ(C(a, LiveCounter::kWrongSession), 2u);
}

TEST(Arbiter, StaleAfterMissedHeartbeatsThenFresh) {
  const Feed f(50);
  Arbiter a(Opts());  // heartbeat 100 ms, stale after 3
  Out out;
  (void)Put(a, Line::kA, Data(f, kS1, 1, 10), 0, &out);
  TickAt(a, 250 * kMs, &out);
  (void)Put(a, Line::kB, Heartbeat(kS1, 11), 250 * kMs, &out);  // B keeps the feed alive
  TickAt(a, 320 * kMs, &out);
  EXPECT_EQ(C(a, LiveCounter::kStaleA), 1u);
  EXPECT_EQ(C(a, LiveCounter::kStale), 0u);
  TickAt(a, 600 * kMs, &out);
  EXPECT_EQ(C(a, LiveCounter::kStaleB), 1u);
  EXPECT_EQ(C(a, LiveCounter::kStale), 1u);
  EXPECT_TRUE(a.stale());
  TickAt(a, 900 * kMs, &out);
  EXPECT_EQ(C(a, LiveCounter::kStale), 1u);  // flagged once
  (void)Put(a, Line::kA, Heartbeat(kS1, 11), 950 * kMs, &out);
  EXPECT_FALSE(a.stale());
  EXPECT_EQ(out.count(Notice::kStale), 1);
  EXPECT_EQ(out.count(Notice::kFresh), 1);
}

// Live data that does not fit the window gives up the oldest range in front of it: the range
// is reported lost where it was, nothing that arrived is dropped, and a late reply for the
// range is only a duplicate.
TEST(Arbiter, AFullWindowGivesUpTheOldestRangeAndKeepsTheLiveData) {
  auto [f, a, out] = Rig(400, WindowOpts(64));
  for (Line l : {Line::kA, Line::kB}) {
    (void)Put(a, l, Data(f, kS1, 1, 10), 0, &out);  // 11..20 lost on both lines
    for (std::uint64_t s = 21; s <= 200; s += 10) (void)Put(a, l, Data(f, kS1, s, 10), 0, &out);
  }
  TickAt(a, 0, &out);
  // The range was requested at most once before the window filled (sequence 71's packet, end
  // 81 > 11 + 64), then given up.
  EXPECT_EQ(C(a, LiveCounter::kGapsGivenUp), 1u);
  EXPECT_EQ(C(a, LiveCounter::kWindowOverflow), 0u);
  ASSERT_EQ(out.gaps().size(), 1u);
  EXPECT_EQ(out.gaps()[0].n.from, 11u);
  EXPECT_EQ(out.gaps()[0].n.count, 10u);
  EXPECT_EQ(out.gaps()[0].after, 10u);  // where it was
  EXPECT_EQ(C(a, LiveCounter::kGapsUnrecoverable), 1u);
  EXPECT_EQ(C(a, LiveCounter::kMessagesUnrecoverable), 10u);
  EXPECT_EQ(out.records, 190u);
  std::vector<std::uint8_t> want = f.Records(1, 11);
  const std::vector<std::uint8_t> rest = f.Records(21, 201);
  want.insert(want.end(), rest.begin(), rest.end());
  EXPECT_EQ(out.bytes, want);
  EXPECT_EQ(a.open_gaps(), 0u);
  // A reply that comes after all that changes nothing.
  (void)Put(a, Line::kReplay, Data(f, kS1, 11, 10), kMs, &out);
  EXPECT_EQ(out.records, 190u);
  EXPECT_EQ(C(a, LiveCounter::kMessagesRecovered), 0u);
}

// A silent re-request server and losses on both lines faster than the retries run out: every
// range is reported exactly once with its exact size (given up by the full window or after
// its retries), everything else is delivered in order, nothing is dropped.
TEST(Arbiter, SilentServerAndAFullWindowReportExactlyTheDoubleLosses) {
  const Feed f(5000, 3);
  ArbiterOptions o = Opts();
  o.window = 256;
  o.max_outstanding = 2;  // fewer in flight than ranges open: most wait their turn
  Arbiter a(o);
  Out out;
  std::mt19937_64 rng(5);
  std::uint64_t lost = 0, runs = 0;
  bool prev_lost = false;
  std::int64_t now = 0;
  for (std::uint64_t s = 1; s + 10 <= 4801; s += 10) {
    const bool lose_a = rng() % 100 < 20, lose_b = rng() % 100 < 20;
    if (lose_a && lose_b) {
      lost += 10;
      if (!prev_lost) ++runs;
    }
    prev_lost = lose_a && lose_b;
    const auto p = Data(f, kS1, s, 10);
    if (!lose_a) (void)Put(a, Line::kA, p, now, &out);
    if (!lose_b) (void)Put(a, Line::kB, p, now, &out);
    now += kMs / 10;  // 100 messages per ms: retries (10, 20, 40, 80 ms) outlast the window
    TickAt(a, now, &out);
    a.clear_requests();  // never answered
  }
  (void)Put(a, Line::kA, End(kS1, 4801), now, &out);
  (void)Put(a, Line::kB, End(kS1, 4801), now, &out);
  for (int i = 0; i < 200 && !a.done(); ++i) {
    now += 10 * kMs;
    TickAt(a, now, &out);
    a.clear_requests();
  }
  ASSERT_GT(runs, 5u);
  EXPECT_TRUE(a.done());
  EXPECT_GT(C(a, LiveCounter::kGapsGivenUp), 0u);
  EXPECT_EQ(C(a, LiveCounter::kWindowOverflow), 0u);
  EXPECT_EQ(C(a, LiveCounter::kMessagesUnrecoverable), lost);
  EXPECT_EQ(C(a, LiveCounter::kGapsUnrecoverable), runs);
  EXPECT_EQ(out.records, 4800u - lost);
  std::uint64_t reported = 0;
  for (const Out::At& g : out.gaps()) reported += g.n.count;
  EXPECT_EQ(reported, lost);
}

TEST(Arbiter, AGapLongerThanTheWindowIsReportedWithoutRequests) {
  auto [f, a, out] = Rig(400, WindowOpts(64));
  Both(a, {Data(f, kS1, 1, 10), Data(f, kS1, 111, 10), Data(f, kS1, 121, 10)}, 0, &out);  // 100 missing > 64
  TickAt(a, 0, &out);
  EXPECT_TRUE(a.requests().empty());
  ASSERT_EQ(out.gaps().size(), 1u);
  EXPECT_EQ(out.gaps()[0].n.count, 100u);
  EXPECT_EQ(out.records, 30u);
}

// ---- a server that answers one packet per request ----------------------------------------

// A re-request server as the MoldUDP64 specification describes one: each request is answered
// with one packet of at most `per_packet` messages from the requested sequence; with
// `packets` > 1, up to that many consecutive packets (a multi-packet server, bounded).
struct Server {
  const Feed& f;
  std::uint64_t per_packet;
  std::uint64_t packets = 1;
  std::vector<std::vector<std::uint8_t>> Reply(const RerequestOut& r) const {
    std::vector<std::vector<std::uint8_t>> out;
    const std::uint64_t end = std::min<std::uint64_t>(r.sequence + r.count, f.msgs.size() + 1);
    std::uint64_t seq = r.sequence;
    for (std::uint64_t k = 0; k < packets && seq < end; ++k) {
      const std::uint64_t c = std::min(per_packet, end - seq);
      out.push_back(Data(f, r.session, seq, c));
      seq += c;
    }
    return out;
  }
};

// A reply that fills the front of a range is followed, once the reply is over, by a request
// for the rest: a follow-up, not a retry. Only a request that brings nothing is a retry.
TEST(Arbiter, APartialReplyIsFollowedAtOnceByARequestForTheRest) {
  const Feed f(200);
  Arbiter a(Opts());  // wait 1 ms: a reply is over after 250 us of quiet
  Out out;
  std::vector<std::vector<std::uint8_t>> line;
  for (std::uint64_t s = 1; s <= 200; s += 10) {
    if (s < 11 || s > 110) line.push_back(Data(f, kS1, s, 10));  // 11..110 lost on both
  }
  Both(a, line, 0, &out);
  TickAt(a, 0, &out);
  ASSERT_EQ(a.requests().size(), 1u);
  EXPECT_EQ(a.requests()[0].sequence, 11u);
  EXPECT_EQ(a.requests()[0].count, 100u);
  a.clear_requests();
  const Server one{f, 30};
  (void)Put(a, Line::kReplay, one.Reply({kS1, 11, 100})[0], kMs, &out);  // 11..40
  a.line_drained(Line::kReplay, kMs);
  TickAt(a, kMs + 100'000, &out);  // the reply may not be over yet
  EXPECT_TRUE(a.requests().empty());
  a.line_drained(Line::kReplay, kMs + 300'000);
  TickAt(a, kMs + 300'000, &out);  // over: the rest at once, long before the 10 ms timeout
  ASSERT_EQ(a.requests().size(), 1u);
  EXPECT_EQ(a.requests()[0].sequence, 41u);
  EXPECT_EQ(a.requests()[0].count, 70u);
  a.clear_requests();
  EXPECT_EQ(C(a, LiveCounter::kRerequestFollowups), 1u);
  EXPECT_EQ(C(a, LiveCounter::kRerequestRetries), 0u);
  // This one brings nothing: after its timeout it is sent again, a retry.
  TickAt(a, kMs + 300'000 + 10 * kMs, &out);
  ASSERT_EQ(a.requests().size(), 1u);
  EXPECT_EQ(a.requests()[0].sequence, 41u);
  a.clear_requests();
  EXPECT_EQ(C(a, LiveCounter::kRerequestRetries), 1u);
  EXPECT_EQ(C(a, LiveCounter::kRerequestsTimedOut), 1u);
  // Progress again resets the count: 3 retries allowed after each answered request.
  std::int64_t t = 20 * kMs;
  for (std::uint64_t from = 41; from <= 110; from += 30) {
    (void)Put(a, Line::kReplay, one.Reply({kS1, from, static_cast<std::uint16_t>(111 - from)})[0], t, &out);
    a.line_drained(Line::kReplay, t + 300'000);
    TickAt(a, t + 300'000, &out);
    a.clear_requests();
    t += kMs;
  }
  EXPECT_EQ(out.bytes, f.Records(1, 201));
  EXPECT_TRUE(out.gaps().empty());
  // The first request, the retry and the two follow-ups after it.
  EXPECT_EQ(C(a, LiveCounter::kRerequestsAnswered), 4u);
  EXPECT_EQ(C(a, LiveCounter::kRerequestFollowups), 3u);
  EXPECT_EQ(C(a, LiveCounter::kRerequestRetries), 1u);
}

// The handler's default re-request settings behind a server that answers one packet per
// request (at most 8 messages), with 30% independent loss on each line and packets of 50
// messages: every gap is at least 50 messages and needs 7 or more replies. Nothing is
// reported lost, nothing is retried (the replies all come back), and the output is the feed.
// Then the same behind a multi-packet server (up to 4 packets of 8 per request).
void LossyLinesBehind(const Server& server, std::uint64_t seed) {
  const Feed& f = server.f;
  const std::uint64_t n = f.msgs.size();
  ArbiterOptions o;  // the defaults of feed.toml: wait 1 ms, timeout 20 ms doubled, 3 retries
  o.window = 1u << 16;
  Arbiter a(o);
  Out out;
  std::mt19937_64 rng(seed);
  struct Pending {
    std::int64_t due;
    RerequestOut r;
  };
  std::vector<Pending> pending;
  std::uint64_t double_runs = 0, double_messages = 0;
  bool prev_double = false;
  std::int64_t t = 0;
  auto step = [&](std::int64_t dt) {
    t += dt;
    a.line_drained(Line::kA, t);
    a.line_drained(Line::kB, t);
    for (std::size_t i = 0; i < pending.size();) {
      if (pending[i].due > t) {
        ++i;
        continue;
      }
      for (const auto& p : server.Reply(pending[i].r)) (void)Put(a, Line::kReplay, p, t, &out);
      pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
    }
    a.line_drained(Line::kReplay, t);
    TickAt(a, t, &out);
    for (const RerequestOut& r : a.requests()) pending.push_back({t + 200'000, r});  // 200 us round trip
    a.clear_requests();
  };
  for (std::uint64_t s = 1; s <= n; s += 50) {
    const std::uint64_t c = std::min<std::uint64_t>(50, n - s + 1);
    const auto p = Data(f, kS1, s, c);
    const bool lose_a = rng() % 100 < 30, lose_b = rng() % 100 < 30;
    if (lose_a && lose_b) {
      double_messages += c;
      if (!prev_double) ++double_runs;
    }
    prev_double = lose_a && lose_b;
    if (!lose_a) (void)Put(a, Line::kA, p, t, &out);
    if (!lose_b) (void)Put(a, Line::kB, p, t, &out);
    step(50'000);  // a packet every 50 us: 1M messages/s
  }
  (void)Put(a, Line::kA, End(kS1, n + 1), t, &out);
  (void)Put(a, Line::kB, End(kS1, n + 1), t, &out);
  for (int i = 0; i < 100'000 && !a.done(); ++i) step(100'000);
  std::printf(
      "%llu messages, %llu lost on both lines in %llu runs; %llu requests (%llu follow-ups, %llu retries), "
      "%llu recovered\n",
      static_cast<unsigned long long>(n), static_cast<unsigned long long>(double_messages),
      static_cast<unsigned long long>(double_runs), static_cast<unsigned long long>(C(a, LiveCounter::kRerequestsSent)),
      static_cast<unsigned long long>(C(a, LiveCounter::kRerequestFollowups)),
      static_cast<unsigned long long>(C(a, LiveCounter::kRerequestRetries)),
      static_cast<unsigned long long>(C(a, LiveCounter::kMessagesRecovered)));
  ASSERT_GT(double_runs, 10u);
  if (!a.done()) {
    for (std::size_t i = 0; i < kLiveCounterCount; ++i)
      std::printf("%s=%llu ", kLiveCounters[i].name, (unsigned long long)a.counters()[i]);
    std::printf("\nnext %llu hi %llu end %llu gaps %zu held %zu\n", (unsigned long long)a.next_sequence(),
                (unsigned long long)a.frontier(), (unsigned long long)a.end_sequence(), a.open_gaps(), a.unconfirmed());
  }
  EXPECT_TRUE(a.done());
  EXPECT_TRUE(out.gaps().empty());
  EXPECT_EQ(C(a, LiveCounter::kMessagesUnrecoverable), 0u);
  EXPECT_EQ(C(a, LiveCounter::kRerequestRetries), 0u);
  EXPECT_EQ(C(a, LiveCounter::kMessagesRecovered), double_messages);
  EXPECT_GE(Asked(a), double_messages / (server.per_packet * server.packets));
  EXPECT_EQ(out.records, n);
  EXPECT_TRUE(out.bytes == f.Records(1, n + 1));
}

TEST(Arbiter, OnePacketServerThirtyPercentLossOnBothLinesLongGapsNothingLost) {
  const Feed f(30'000, 5);
  LossyLinesBehind(Server{f, 8, 1}, 1);
}

TEST(Arbiter, MultiPacketServerThirtyPercentLossOnBothLinesLongGapsNothingLost) {
  const Feed f(30'000, 6);
  LossyLinesBehind(Server{f, 8, 4}, 2);
}

// ---- single forged datagrams -----------------------------------------------------------------

// The feed on both lines, in packets of 10, for [from, to).
void BothLines(Arbiter& a, const Feed& f, std::uint64_t from, std::uint64_t to, std::int64_t t, Out* out) {
  for (std::uint64_t s = from; s < to; s += 10) {
    (void)Put(a, Line::kA, Data(f, kS1, s, std::min<std::uint64_t>(10, to - s)), t, out);
    (void)Put(a, Line::kB, Data(f, kS1, s, std::min<std::uint64_t>(10, to - s)), t, out);
  }
}
// Ticks every ms from `from` to `to`, with both sockets read empty, answering nothing.
void Quiet(Arbiter& a, std::int64_t from, std::int64_t to, Out* out, std::uint64_t* requests = nullptr) {
  for (std::int64_t t = from; t <= to; t += kMs) {
    a.line_drained(Line::kA, t);
    a.line_drained(Line::kB, t);
    a.line_drained(Line::kReplay, t);
    TickAt(a, t, out);
    if (requests != nullptr) *requests += a.requests().size();
    a.clear_requests();
  }
}

TEST(Arbiter, AForgedEndOfSessionOnOneLineEndsNothing) {
  const Feed f(200);
  Arbiter a(Opts());  // stale after 300 ms
  Out out;
  BothLines(a, f, 1, 51, 0, &out);
  EXPECT_EQ(Put(a, Line::kA, End(kS1, 1), kMs, &out), V::kRejected);  // below what was received
  EXPECT_EQ(Put(a, Line::kA, End(kS1, 51), kMs, &out), V::kHeld);     // at the frontier: B disagrees
  Quiet(a, kMs, 200 * kMs, &out);                                     // both lines quiet (a pause), B alive
  EXPECT_EQ(a.end_sequence(), 0u);
  EXPECT_FALSE(a.done());
  BothLines(a, f, 51, 201, 201 * kMs, &out);  // the feed goes on: A's end is contradicted
  EXPECT_EQ(C(a, LiveCounter::kEndsRefused), 2u);
  EXPECT_EQ(Put(a, Line::kA, End(kS1, 201), 202 * kMs, &out), V::kHeld);
  EXPECT_EQ(Put(a, Line::kB, End(kS1, 201), 202 * kMs, &out), V::kAccepted);
  Quiet(a, 202 * kMs, 220 * kMs, &out);
  EXPECT_TRUE(a.done());
  EXPECT_EQ(out.bytes, f.Records(1, 201));
  EXPECT_TRUE(out.gaps().empty());
}

// A heartbeat, an end of session or a data packet far ahead, on one line, in a pause (both
// lines quiet, the server asked and silent) and in the flow: no gap, nothing dropped.
TEST(Arbiter, AForgedSequenceFarAheadNeverMovesTheCursor) {
  const Feed f(300);
  const Feed other(300, 99);  // other bytes for the forged data
  for (const std::uint64_t ahead : {std::uint64_t{1} << 62, std::uint64_t{1'000'000}, std::uint64_t{100'000}}) {
    for (int kind = 0; kind < 3; ++kind) {
      SCOPED_TRACE(testing::Message() << "ahead " << ahead << " kind " << kind);
      Arbiter a(Opts());
      Out out;
      BothLines(a, f, 1, 101, 0, &out);
      std::vector<std::uint8_t> forged = kind == 0   ? Heartbeat(kS1, ahead)
                                         : kind == 1 ? End(kS1, ahead)
                                                     : Data(other, kS1, 1, 5);
      if (kind == 2) (void)mold::detail::write20(forged, kS1, ahead, 5);
      EXPECT_EQ(Put(a, Line::kA, forged, kMs, &out), V::kHeld);
      std::uint64_t requests = 0;
      Quiet(a, kMs, 100 * kMs, &out, &requests);  // a pause: B quiet, the server asked
      EXPECT_EQ(a.next_sequence(), 101u);
      EXPECT_EQ(a.frontier(), 101u);
      EXPECT_LE(requests, 4u);  // confirmation requests (1 + 3 retries), which the server cannot answer
      EXPECT_EQ(C(a, LiveCounter::kRerequestsSent), 0u);
      BothLines(a, f, 101, 301, 101 * kMs, &out);  // the feed goes on
      (void)Put(a, Line::kA, End(kS1, 301), 102 * kMs, &out);
      (void)Put(a, Line::kB, End(kS1, 301), 102 * kMs, &out);
      Quiet(a, 102 * kMs, 500 * kMs, &out);
      EXPECT_TRUE(a.done());
      EXPECT_EQ(out.bytes, f.Records(1, 301));
      EXPECT_TRUE(out.gaps().empty());
      EXPECT_EQ(C(a, LiveCounter::kGapsDetected), 0u);
      EXPECT_EQ(C(a, LiveCounter::kMessagesUnrecoverable), 0u);
      EXPECT_EQ(C(a, LiveCounter::kConflictingCopies), 0u);
      // Held (a heartbeat or data) or refused once the feed went on (an end of session).
      EXPECT_EQ(C(a, kind == 1 ? LiveCounter::kEndsRefused : LiveCounter::kUnconfirmed), 1u);
    }
  }
}

// feed.session unset: a heartbeat of another session on line A does not take the handler
// over, however long line B is quiet (short of dead), and line A is still read: losses on
// both lines meanwhile are recovered.
TEST(Arbiter, AHeartbeatOfAnotherSessionDoesNotTakeTheFeedOver) {
  auto [f, a, out] = Rig(400);
  BothLines(a, f, 1, 101, 0, &out);
  EXPECT_EQ(Put(a, Line::kA, Heartbeat(kS2, 1), kMs, &out), V::kHeld);
  EXPECT_TRUE(a.moved(Line::kA));
  Quiet(a, kMs, 200 * kMs, &out);
  EXPECT_EQ(std::string(a.session().view()), std::string(kS1.view()));
  // The feed goes on with 131..140 lost on both lines: A is read, the gap is asked for.
  for (std::uint64_t s = 101; s <= 200; s += 10) {
    if (s == 131) continue;
    (void)Put(a, Line::kA, Data(f, kS1, s, 10), 201 * kMs, &out);
    (void)Put(a, Line::kB, Data(f, kS1, s, 10), 201 * kMs, &out);
  }
  EXPECT_FALSE(a.moved(Line::kA));  // it went on in the session
  EXPECT_EQ(C(a, LiveCounter::kNextSessionDropped), 1u);
  TickAt(a, 201 * kMs, &out);
  ASSERT_EQ(a.requests().size(), 1u);
  EXPECT_EQ(Answer(a, f, 202 * kMs, &out), 1);
  (void)Put(a, Line::kA, End(kS1, 201), 203 * kMs, &out);
  (void)Put(a, Line::kB, End(kS1, 201), 203 * kMs, &out);
  Quiet(a, 203 * kMs, 300 * kMs, &out);
  EXPECT_TRUE(a.done());
  EXPECT_EQ(out.bytes, f.Records(1, 201));
  EXPECT_EQ(C(a, LiveCounter::kSessionChanges), 0u);
  EXPECT_EQ(out.count(Notice::kSession), 1);
}

// After the real end of session, a forged packet of another session on line A, and line B
// quiet as lines are after an end: B ended the session itself, so it is done, not dead, and
// one line's new session is not followed. The handler ends after its linger.
TEST(Arbiter, AfterTheEndAnotherSessionOnOneLineIsNotFollowed) {
  const Feed f(100);
  Arbiter a(Opts());  // stale after 300 ms, linger 5 ms
  Out out;
  BothLines(a, f, 1, 101, 0, &out);
  (void)Put(a, Line::kB, End(kS1, 101), kMs, &out);
  (void)Put(a, Line::kA, End(kS1, 101), 400 * kMs, &out);  // A's end much later: B is quiet meanwhile
  EXPECT_EQ(a.end_sequence(), 101u);
  EXPECT_EQ(Put(a, Line::kA, Heartbeat(kS2, 1), 401 * kMs, &out), V::kHeld);
  Quiet(a, 401 * kMs, 410 * kMs, &out);
  EXPECT_TRUE(a.done());
  EXPECT_EQ(std::string(a.session().view()), std::string(kS1.view()));
  EXPECT_EQ(C(a, LiveCounter::kSessionChanges), 0u);
  EXPECT_EQ(out.bytes, f.Records(1, 101));
}

// A different copy of the next message on one line wins (in-order data is taken at once),
// but the copies both lines carry contradict it: counted and noticed, with the sequence. The
// same for a copy buffered behind a gap.
TEST(Arbiter, ConflictingCopiesAreCountedAndNoticed) {
  const Feed f(100);
  const Feed other(100, 99);
  Arbiter a(Opts());
  Out out;
  BothLines(a, f, 1, 51, 0, &out);
  std::vector<std::uint8_t> forged = Data(other, kS1, 1, 1);
  (void)mold::detail::write20(forged, kS1, 51, 1);
  EXPECT_EQ(Put(a, Line::kA, forged, kMs, &out), V::kAccepted);
  BothLines(a, f, 51, 61, kMs, &out);
  EXPECT_EQ(C(a, LiveCounter::kConflictingCopies), 2u);  // line A's real copy and line B's
  ASSERT_EQ(out.count(Notice::kConflict), 2);
  for (const Out::At& at : out.notices) {
    if (at.n.kind != Notice::kConflict) continue;
    EXPECT_EQ(at.n.from, 51u);
    EXPECT_EQ(at.n.count, 1u);
  }
  // Behind a gap: 61..70 lost on both, 71..80 buffered from A, then B's copy of 75 differs.
  (void)Put(a, Line::kA, Data(f, kS1, 71, 10), 2 * kMs, &out);
  (void)Put(a, Line::kB, Data(f, kS1, 71, 4), 2 * kMs, &out);
  std::vector<std::uint8_t> odd = Data(other, kS1, 5, 6);
  (void)mold::detail::write20(odd, kS1, 75, 6);
  (void)Put(a, Line::kB, odd, 2 * kMs, &out);
  EXPECT_EQ(C(a, LiveCounter::kConflictingCopies), 2u + 6u);
  TickAt(a, 2 * kMs, &out);
  Answer(a, f, 3 * kMs, &out);
  EXPECT_EQ(out.records, 80u);
}

// Line B dead: line A's end of session ends the session once B has been quiet for the stale
// interval, not before.
TEST(Arbiter, WithOneLineDeadItsPartnersEndOfSessionEndsAfterTheStaleInterval) {
  const Feed f(100);
  Arbiter a(Opts());  // stale after 300 ms
  Out out;
  for (std::uint64_t s = 1; s <= 100; s += 10) (void)Put(a, Line::kA, Data(f, kS1, s, 10), 0, &out);
  EXPECT_EQ(Put(a, Line::kA, End(kS1, 101), kMs, &out), V::kHeld);
  Quiet(a, kMs, 250 * kMs, &out);
  EXPECT_EQ(a.end_sequence(), 0u);
  Quiet(a, 251 * kMs, 400 * kMs, &out);
  EXPECT_EQ(a.end_sequence(), 101u);
  EXPECT_TRUE(a.done());
  EXPECT_EQ(out.bytes, f.Records(1, 101));
}

// Line B dead, no server: a loss on line A is established when A goes on from its next
// packet (its own sender vouches for it), then reported where it was.
TEST(Arbiter, WithOneLineDeadASkipIsConfirmedByItsLineGoingOn) {
  auto [f, a, out] = Rig(100, NoServerOpts());
  (void)Put(a, Line::kA, Data(f, kS1, 1, 10), 0, &out);
  EXPECT_EQ(Put(a, Line::kA, Data(f, kS1, 21, 10), 0, &out), V::kHeld);  // 11..20 lost
  Quiet(a, kMs, 5 * kMs, &out);
  EXPECT_EQ(out.records, 10u);
  // A goes on from it: the skip is established, the range missing, and both packets wait
  // behind it.
  EXPECT_EQ(Put(a, Line::kA, Data(f, kS1, 31, 10), 6 * kMs, &out), V::kAccepted);
  EXPECT_EQ(a.frontier(), 41u);
  EXPECT_EQ(C(a, LiveCounter::kGapsDetected), 1u);
  Quiet(a, 6 * kMs, 10 * kMs, &out);
  ASSERT_EQ(out.gaps().size(), 1u);
  EXPECT_EQ(out.gaps()[0].n.from, 11u);
  EXPECT_EQ(out.gaps()[0].n.count, 10u);
  EXPECT_EQ(out.records, 30u);
}

// Any mix of single forged datagrams on line A - heartbeats and ends anywhere, real bytes at
// made-up sequences, other sessions - between two lossy lines with a server: the output is
// the feed exactly, with nothing reported lost and the session never switched. (Forging both
// lines at once, two datagrams that agree, is beyond what the lines can tell apart: source
// filtering, feed.source_a and feed.source_b, is the defence there.)
TEST(Arbiter, SingleForgedDatagramsAmongLossyLinesNeverChangeTheOutput) {
  const Feed f(3000, 13);
  const std::uint64_t n = f.msgs.size();
  for (std::uint64_t seed = 1; seed <= 30; ++seed) {
    std::mt19937_64 rng(seed * 31);
    Arbiter a(LossyLinesOpts());
    Out out;
    std::vector<std::vector<std::uint8_t>> lines[2];
    for (int l = 0; l < 2; ++l) {
      for (std::uint64_t s = 1; s <= n; s += 10) {
        const std::uint64_t c = std::min<std::uint64_t>(10, n - s + 1);
        if (rng() % 100 < 10) continue;
        lines[l].push_back(Data(f, kS1, s, c));
      }
      for (int k = 0; k < 3; ++k) lines[l].push_back(End(kS1, n + 1));
    }
    std::size_t pos[2] = {0, 0};
    std::int64_t t = 0;
    QueuedRequests pending;
    std::uint64_t forged = 0;
    bool just_forged = false;  // single datagrams: a real one of line A between two forged
    for (int step = 0; step < 200000 && !a.done(); ++step) {
      t += static_cast<std::int64_t>(rng() % 200'000);
      const int l = static_cast<int>(rng() % 2);
      const Line line = l == 0 ? Line::kA : Line::kB;
      if (l == 0 && !just_forged && rng() % 5 == 0 && pos[0] > 0 && pos[l] < lines[l].size()) {
        // One forged datagram, between two real ones of this line.
        std::vector<std::uint8_t> p;
        const std::uint64_t at = 1 + rng() % (2 * n);
        switch (rng() % 4) {
          case 0:
            p = Heartbeat(kS1, at);
            break;
          case 1:
            p = End(kS1, at);
            break;
          case 2: {
            const std::uint64_t s = 1 + rng() % (n - 5);
            p = Data(f, kS1, s, 5);
            (void)mold::detail::write20(p, kS1, at + n, 5);  // real bytes, made-up place ahead
            break;
          }
          default:
            p = Data(f, kS1, 1, 3);
            (void)mold::detail::write20(p, kS2, at, 3);
            break;
        }
        (void)Put(a, line, p, t, &out);
        ++forged;
        just_forged = true;
      } else if (pos[l] < lines[l].size()) {
        (void)Put(a, line, lines[l][pos[l]++], t, &out);
        if (l == 0) just_forged = false;
      } else {
        a.line_drained(line, t);
      }
      if (rng() % 4 == 0) {
        a.line_drained(Line::kReplay, t);
        pending.Collect(a, t, &out);
      }
      RerequestOut r;
      if (rng() % 3 == 0 && pending.Take(&r)) {
        // One packet of at most 40 messages of its session, as a spec server would answer.
        const std::uint64_t c = std::min<std::uint64_t>({r.count, 40, n + 1 - std::min(r.sequence, n + 1)});
        if (c != 0 && r.session == kS1) (void)Put(a, Line::kReplay, Data(f, r.session, r.sequence, c), t, &out);
      }
    }
    ASSERT_GT(forged, 25u);
    if (!a.done() || out.records != n) {
      for (std::size_t i = 0; i < kLiveCounterCount; ++i)
        std::printf("%s=%llu ", kLiveCounters[i].name, (unsigned long long)a.counters()[i]);
      std::printf("\nnext %llu hi %llu end %llu gaps %zu held %zu moved %d %d pos %zu/%zu %zu/%zu\n",
                  (unsigned long long)a.next_sequence(), (unsigned long long)a.frontier(),
                  (unsigned long long)a.end_sequence(), a.open_gaps(), a.unconfirmed(), a.moved(Line::kA),
                  a.moved(Line::kB), pos[0], lines[0].size(), pos[1], lines[1].size());
    }
    ASSERT_TRUE(a.done()) << "seed " << seed;
    ASSERT_TRUE(out.gaps().empty()) << "seed " << seed;
    ASSERT_EQ(out.records, n) << "seed " << seed;
    ASSERT_TRUE(out.bytes == f.Records(1, n + 1)) << "seed " << seed;
    EXPECT_EQ(C(a, LiveCounter::kSessionChanges), 0u) << "seed " << seed;
    EXPECT_EQ(C(a, LiveCounter::kConflictingCopies), 0u) << "seed " << seed;
  }
}

// Random orders: every packet on each line with independent losses, lines interleaved at
// random with duplicates, replies to every request (some lost), random time steps. The
// output must be the feed exactly, with nothing reported lost.
TEST(Arbiter, AnyOrderOfTwoLossyLinesAndRepliesRebuildsTheFeedExactly) {
  const Feed f(3000, 11);
  const std::uint64_t n = f.msgs.size();
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    std::mt19937_64 rng(seed);
    ArbiterOptions o = LossyLinesOpts();
    o.max_outstanding = 2 + seed % 5;
    Arbiter a(o);
    Out out;
    // Packets of 1..30 messages.
    std::vector<std::pair<std::uint64_t, std::uint64_t>> packets;
    for (std::uint64_t s = 1; s <= n;) {
      const std::uint64_t c = std::min<std::uint64_t>(1 + rng() % 30, n - s + 1);
      packets.push_back({s, c});
      s += c;
    }
    std::vector<std::vector<std::uint8_t>> lines[2];
    for (int l = 0; l < 2; ++l) {
      for (const auto& [s, c] : packets) {
        if (rng() % 100 < 10) continue;  // 10% loss per line
        lines[l].push_back(Data(f, kS1, s, c));
        if (rng() % 100 < 3) lines[l].push_back(Data(f, kS1, s, c));  // a duplicate
      }
      lines[l].push_back(End(kS1, n + 1));
    }
    std::size_t pos[2] = {0, 0};
    std::int64_t t = 0;
    QueuedRequests pending;
    for (int step = 0; step < 200000 && !a.done(); ++step) {
      t += static_cast<std::int64_t>(rng() % 300'000);
      const int l = static_cast<int>(rng() % 2);
      if (pos[l] < lines[l].size()) {
        (void)Put(a, l == 0 ? Line::kA : Line::kB, lines[l][pos[l]++], t, &out);
      } else {
        a.line_drained(l == 0 ? Line::kA : Line::kB, t);
      }
      if (rng() % 4 == 0) pending.Collect(a, t, &out);
      RerequestOut r;
      if (rng() % 3 == 0 && pending.Take(&r) && rng() % 100 >= 20) {
        (void)Put(a, Line::kReplay, Data(f, r.session, r.sequence, r.count), t, &out);
      }
    }
    ASSERT_TRUE(a.done()) << "seed " << seed;
    ASSERT_TRUE(out.gaps().empty()) << "seed " << seed;
    ASSERT_EQ(out.records, n) << "seed " << seed;
    ASSERT_TRUE(out.bytes == f.Records(1, n + 1)) << "seed " << seed;
    EXPECT_EQ(C(a, LiveCounter::kMessages), n);
    EXPECT_EQ(Asked(a), C(a, LiveCounter::kRerequestsAnswered) + C(a, LiveCounter::kRerequestsTimedOut))
        << "seed " << seed;
  }
}

// Hostile datagrams on every socket: random bytes, truncated and mutated packets, huge
// sequence numbers, other sessions, zero counts. Nothing may crash or stall, the output is
// always valid records, and every message up to the cursor is either delivered or reported.
TEST(Arbiter, HostileDatagramsAreCountedAndNeverBreakTheStream) {
  const Feed f(2000, 3);
  const std::uint64_t n = f.msgs.size();
  for (std::uint64_t seed = 1; seed <= 30; ++seed) {
    std::mt19937_64 rng(seed * 977);
    ArbiterOptions o = Opts();
    o.window = 256;
    o.max_gaps = 64;
    o.rerequest_retries = 1;
    o.rerequest_timeout_ns = kMs;
    Arbiter a(o);
    Out out;
    std::int64_t t = 0;
    std::uint64_t malformed_sent = 0;
    for (int step = 0; step < 6000; ++step) {
      t += static_cast<std::int64_t>(rng() % 200'000);
      const Line line = static_cast<Line>(rng() % 3);
      const std::uint64_t s = 1 + rng() % n;
      const std::uint64_t c = std::min<std::uint64_t>(1 + rng() % 20, n - s + 1);
      std::vector<std::uint8_t> p = Data(f, kS1, s, c);
      switch (rng() % 10) {
        case 0:  // random bytes
          p.resize(rng() % 80);
          for (auto& b : p) b = static_cast<std::uint8_t>(rng());
          break;
        case 1:  // truncated
          p.resize(rng() % p.size());
          ++malformed_sent;
          break;
        case 2:  // a flipped byte anywhere
          p[rng() % p.size()] ^= static_cast<std::uint8_t>(1 + rng() % 255);
          break;
        case 3:  // a heartbeat or end of session far ahead (or at the very top)
          p = rng() % 2 ? Heartbeat(kS1, rng() % 2 ? s + rng() % 100000 : ~std::uint64_t{0} - 1)
                        : End(kS1, 1 + rng() % (n + 10));
          break;
        case 4:  // another session
          (void)mold::detail::write20(p, rng() % 2 ? kS2 : mold::Session::from("X"), s, static_cast<std::uint16_t>(c));
          break;
        default:
          break;
      }
      (void)a.on_packet(line, p, t, rng() % 50 == 0);
      Drain(a, &out);
      if (rng() % 3 == 0) a.line_drained(static_cast<Line>(rng() % 2), t);
      TickAt(a, t, &out);
      a.clear_requests();
      ASSERT_LE(a.outstanding(), o.max_outstanding);
      ASSERT_LE(a.open_gaps(), o.max_gaps + 2 * o.max_outstanding + 16);
    }
    EXPECT_GE(a.counter(LiveCounter::kMalformed), malformed_sent / 2) << "seed " << seed;
    // Accounting per session: delivered + reported lost == everything before the cursor.
    if (a.counter(LiveCounter::kSessionChanges) == 0) {
      EXPECT_EQ(a.counter(LiveCounter::kMessages) + a.counter(LiveCounter::kMessagesUnrecoverable),
                a.next_sequence() - 1)
          << "seed " << seed;
    }
  }
}

}  // namespace
}  // namespace pollux::feed
