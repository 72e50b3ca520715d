// The live mode's arbitration and gap logic (examples/feed_handler/arbiter.h) without
// sockets: packets are built here and handed over in any order, with duplicates, losses,
// re-request replies, session changes and hostile bytes; time is a plain number.
#include "feed_handler/arbiter.h"

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
    bytes = *itch::GenerateItch(o);
    (void)itch::ForEachMessage(bytes, [&](itch::MessageView m) { msgs.push_back(m.bytes()); });
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
  EXPECT_TRUE(b.Begin(s, seq));
  for (std::uint64_t i = 0; i < count; ++i) EXPECT_TRUE(b.Add(f.msgs[seq + i - 1]));
  const auto p = b.Finish();
  return {p.begin(), p.end()};
}
std::vector<std::uint8_t> Heartbeat(const mold::Session& s, std::uint64_t next) {
  std::uint8_t b[20];
  const auto p = mold::EncodeHeartbeat(b, s, next);
  return {p.begin(), p.end()};
}
std::vector<std::uint8_t> End(const mold::Session& s, std::uint64_t next) {
  std::uint8_t b[20];
  const auto p = mold::EncodeEndOfSession(b, s, next);
  return {p.begin(), p.end()};
}

const mold::Session kS1 = mold::Session::From("SESSION1");
const mold::Session kS2 = mold::Session::From("SESSION2");

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
  while (a.Next(&p)) {
    if (p.notice != nullptr) {
      out->notices.push_back({*p.notice, out->records});
      continue;
    }
    const itch::ParseResult r = itch::ForEachMessage(p.bytes, [](itch::MessageView) {});
    ASSERT_TRUE(r.ok()) << "delivered bytes are not BinaryFILE records";
    out->records += r.messages;
    out->bytes.insert(out->bytes.end(), p.bytes.begin(), p.bytes.end());
  }
  a.ResetOutput();
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

// Hands a packet over and drains the output.
V Put(Arbiter& a, Line l, const std::vector<std::uint8_t>& p, std::int64_t now, Out* out) {
  const V v = a.OnPacket(l, p, now);
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
  a.Tick(now);
  Drain(a, out);
}
// Sends the replies the server would: every message of every queued request.
int Answer(Arbiter& a, const Feed& f, std::int64_t now, Out* out) {
  std::vector<RerequestOut> reqs(a.requests().begin(), a.requests().end());
  a.ClearRequests();
  for (const RerequestOut& r : reqs) (void)Put(a, Line::kReplay, Data(f, r.session, r.sequence, r.count), now, out);
  return static_cast<int>(reqs.size());
}

std::uint64_t C(const Arbiter& a, LiveCounter c) { return a.counter(c); }

TEST(Arbiter, InOrderOnBothLinesDeliversOnceAndCountsEveryDuplicate) {
  const Feed f(400);
  Arbiter a(Opts());
  Out out;
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
  const Feed f(300);
  Arbiter a(Opts());
  Out out;
  std::int64_t t = 0;
  for (std::uint64_t s = 1; s <= 300; s += 10, t += kMs) {
    if (s % 30 != 11) (void)Put(a, Line::kA, Data(f, kS1, s, 10), t, &out);  // A loses every third
    TickAt(a, t, &out);
    (void)Put(a, Line::kB, Data(f, kS1, s, 10), t, &out);
    a.LineDrained(Line::kA, t);
    a.LineDrained(Line::kB, t);
    TickAt(a, t, &out);
  }
  EXPECT_EQ(out.bytes, f.Records(1, 301));
  EXPECT_EQ(C(a, LiveCounter::kRerequestsSent), 0u);
  EXPECT_EQ(C(a, LiveCounter::kGapsDetected), 0u);  // B filled each before A went past it
  EXPECT_TRUE(out.gaps().empty());
}

TEST(Arbiter, AGapSeenOnALeadingLineWaitsForTheOtherLine) {
  const Feed f(100);
  Arbiter a(Opts());
  Out out;
  (void)Put(a, Line::kA, Data(f, kS1, 1, 10), 0, &out);
  (void)Put(a, Line::kA, Data(f, kS1, 21, 10), 0, &out);  // A lost 11..20
  EXPECT_EQ(C(a, LiveCounter::kGapsDetected), 1u);
  EXPECT_EQ(C(a, LiveCounter::kOutOfOrderPackets), 1u);
  EXPECT_EQ(C(a, LiveCounter::kOutOfOrderMessages), 10u);
  a.LineDrained(Line::kB, 0);
  TickAt(a, 500'000, &out);  // before the wait: nothing
  EXPECT_EQ(C(a, LiveCounter::kRerequestsSent), 0u);
  // B's socket still had data: read empty only before the wait ended, so still no request.
  TickAt(a, 5 * kMs, &out);
  EXPECT_EQ(C(a, LiveCounter::kRerequestsSent), 0u);
  (void)Put(a, Line::kB, Data(f, kS1, 1, 10), 5 * kMs, &out);
  (void)Put(a, Line::kB, Data(f, kS1, 11, 10), 5 * kMs, &out);
  EXPECT_EQ(out.bytes, f.Records(1, 31));
  TickAt(a, 6 * kMs, &out);
  EXPECT_EQ(C(a, LiveCounter::kRerequestsSent), 0u);
}

TEST(Arbiter, ASilentLineDoesNotHoldRecoveryUp) {
  const Feed f(100);
  Arbiter a(Opts());
  Out out;
  (void)Put(a, Line::kA, Data(f, kS1, 1, 10), 0, &out);
  (void)Put(a, Line::kA, Data(f, kS1, 21, 10), 0, &out);
  a.LineDrained(Line::kB, 2 * kMs);  // read empty after the 1 ms wait
  TickAt(a, 2 * kMs, &out);
  ASSERT_EQ(a.requests().size(), 1u);
  EXPECT_EQ(a.requests()[0].sequence, 11u);
  EXPECT_EQ(a.requests()[0].count, 10u);
  EXPECT_EQ(Answer(a, f, 3 * kMs, &out), 1);
  EXPECT_EQ(out.bytes, f.Records(1, 31));
  EXPECT_EQ(C(a, LiveCounter::kRerequestsAnswered), 1u);
  EXPECT_EQ(C(a, LiveCounter::kMessagesRecovered), 10u);
}

TEST(Arbiter, ALossOnBothLinesIsRequestedOnceBothWentPastIt) {
  const Feed f(100);
  Arbiter a(Opts());
  Out out;
  Both(a, {Data(f, kS1, 1, 10), Data(f, kS1, 21, 10)}, 0, &out);
  TickAt(a, 0, &out);  // no wait needed: missing on both
  ASSERT_EQ(a.requests().size(), 1u);
  EXPECT_EQ(a.requests()[0].sequence, 11u);
  EXPECT_EQ(a.requests()[0].count, 10u);
  EXPECT_EQ(std::string(a.requests()[0].session.view()), std::string(kS1.view()));
  TickAt(a, 1 * kMs, &out);  // in flight: not again
  EXPECT_EQ(C(a, LiveCounter::kRerequestsSent), 1u);
  Answer(a, f, 2 * kMs, &out);
  EXPECT_EQ(out.bytes, f.Records(1, 31));
  EXPECT_EQ(a.outstanding(), 0u);
  TickAt(a, 100 * kMs, &out);
  EXPECT_EQ(C(a, LiveCounter::kRerequestsSent), 1u);
  EXPECT_EQ(C(a, LiveCounter::kRerequestsTimedOut), 0u);
  // A late second copy of the reply is a duplicate.
  EXPECT_EQ(Put(a, Line::kReplay, Data(f, kS1, 11, 10), 3 * kMs, &out), V::kDuplicate);
}

TEST(Arbiter, UnansweredRequestsBackOffThenTheExactRangeIsReportedWhereItWas) {
  const Feed f(100);
  Arbiter a(Opts());  // timeout 10 ms, doubled, 3 retries
  Out out;
  Both(a, {Data(f, kS1, 1, 10), Data(f, kS1, 18, 13)}, 0, &out);  // 11..17 lost on both
  std::vector<std::int64_t> sent_at;
  for (std::int64_t t = 0; t <= 200 * kMs; t += kMs / 2) {
    TickAt(a, t, &out);
    if (!a.requests().empty()) {
      EXPECT_EQ(a.requests()[0].sequence, 11u);
      EXPECT_EQ(a.requests()[0].count, 7u);
      sent_at.push_back(t);
      a.ClearRequests();
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
  const std::vector<std::uint8_t> rest = f.Records(18, 31);
  want.insert(want.end(), rest.begin(), rest.end());
  EXPECT_EQ(out.bytes, want);
  EXPECT_EQ(C(a, LiveCounter::kMessagesUnrecoverable), 7u);
  EXPECT_EQ(C(a, LiveCounter::kGapsUnrecoverable), 1u);
}

TEST(Arbiter, WithoutAServerAGapMissingOnBothLinesIsReportedAtOnce) {
  const Feed f(100);
  ArbiterOptions o = Opts();
  o.rerequest = false;
  Arbiter a(o);
  Out out;
  Both(a, {Data(f, kS1, 1, 10), Data(f, kS1, 16, 5)}, 0, &out);
  TickAt(a, 0, &out);
  EXPECT_TRUE(a.requests().empty());
  ASSERT_EQ(out.gaps().size(), 1u);
  EXPECT_EQ(out.gaps()[0].n.count, 5u);
  EXPECT_EQ(out.records, 15u);
}

TEST(Arbiter, OutstandingRequestsAreCapped) {
  const Feed f(400);
  Arbiter a(Opts());  // at most 4 in flight
  Out out;
  for (Line l : {Line::kA, Line::kB}) {
    for (std::uint64_t s = 1; s <= 400; s += 10) {
      if ((s / 10) % 2 == 1) continue;  // every other packet lost on both: 20 ranges
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
  EXPECT_EQ(out.bytes, f.Records(1, 391));
  EXPECT_EQ(C(a, LiveCounter::kRerequestsSent), 19u);
  EXPECT_EQ(C(a, LiveCounter::kRerequestsAnswered), 19u);
}

TEST(Arbiter, HeartbeatAndEndOfSessionRevealALossAtTheTail) {
  const Feed f(100);
  Arbiter a(Opts());
  Out out;
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

TEST(Arbiter, SessionChangeAfterEndOfSessionParksTheNewSessionUntilTheOldIsComplete) {
  const Feed f(100);
  Arbiter a(Opts());
  Out out;
  (void)Put(a, Line::kA, Data(f, kS1, 1, 10), 0, &out);
  (void)Put(a, Line::kA, End(kS1, 21), 0, &out);  // A lost 11..20; B lags
  // The next session's first packet on A (its messages 21.. of the feed are 1.. there).
  std::vector<std::uint8_t> s2p = Data(f, kS1, 21, 10);
  (void)mold::detail::Write20(s2p, kS2, 1, 10);
  EXPECT_EQ(Put(a, Line::kA, s2p, 0, &out), V::kPark);
  EXPECT_TRUE(a.parked(Line::kA));
  TickAt(a, 0, &out);
  EXPECT_EQ(Put(a, Line::kA, s2p, 0, &out), V::kPark);  // offered again: still waiting
  (void)Put(a, Line::kB, Data(f, kS1, 1, 10), 0, &out);
  (void)Put(a, Line::kB, Data(f, kS1, 11, 10), 0, &out);
  TickAt(a, 0, &out);  // the old session is complete: switch
  EXPECT_FALSE(a.parked(Line::kA));
  EXPECT_EQ(std::string(a.session().view()), std::string(kS2.view()));
  EXPECT_EQ(Put(a, Line::kA, s2p, 0, &out), V::kAccepted);
  EXPECT_EQ(C(a, LiveCounter::kPacketsA), 3u);  // the parked packet is counted once
  // Line B's old-session packets now count as an old session's.
  EXPECT_EQ(Put(a, Line::kB, End(kS1, 21), 0, &out), V::kRejected);
  EXPECT_EQ(C(a, LiveCounter::kOldSession), 1u);
  EXPECT_EQ(out.bytes, f.Records(1, 31));
  EXPECT_EQ(out.count(Notice::kSession), 2);
  EXPECT_EQ(C(a, LiveCounter::kSessionChanges), 1u);
  EXPECT_EQ(C(a, LiveCounter::kPacketsB), 3u);
}

TEST(Arbiter, SessionChangeWithoutEndOfSessionSwitchesOnceBothLinesMoved) {
  const Feed f(100);
  Arbiter a(Opts());
  Out out;
  std::vector<std::uint8_t> s2 = Data(f, kS1, 11, 10);
  (void)mold::detail::Write20(s2, kS2, 1, 10);
  (void)Put(a, Line::kA, Data(f, kS1, 1, 10), 0, &out);
  (void)Put(a, Line::kB, Data(f, kS1, 1, 10), 0, &out);
  EXPECT_EQ(Put(a, Line::kA, s2, 0, &out), V::kPark);
  TickAt(a, 0, &out);
  EXPECT_EQ(std::string(a.session().view()), std::string(kS1.view()));  // B may still bring more
  EXPECT_EQ(Put(a, Line::kB, s2, 0, &out), V::kPark);
  TickAt(a, 0, &out);
  EXPECT_EQ(std::string(a.session().view()), std::string(kS2.view()));
  EXPECT_EQ(Put(a, Line::kA, s2, 0, &out), V::kAccepted);
  EXPECT_EQ(Put(a, Line::kB, s2, 0, &out), V::kDuplicate);
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
  const Feed f(400);
  ArbiterOptions o = Opts();
  o.window = 64;
  Arbiter a(o);
  Out out;
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
    a.ClearRequests();  // never answered
  }
  (void)Put(a, Line::kA, End(kS1, 4801), now, &out);
  (void)Put(a, Line::kB, End(kS1, 4801), now, &out);
  for (int i = 0; i < 200 && !a.done(); ++i) {
    now += 10 * kMs;
    TickAt(a, now, &out);
    a.ClearRequests();
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
  const Feed f(400);
  ArbiterOptions o = Opts();
  o.window = 64;
  Arbiter a(o);
  Out out;
  Both(a, {Data(f, kS1, 1, 10), Data(f, kS1, 111, 10)}, 0, &out);  // 100 missing > 64
  TickAt(a, 0, &out);
  EXPECT_TRUE(a.requests().empty());
  ASSERT_EQ(out.gaps().size(), 1u);
  EXPECT_EQ(out.gaps()[0].n.count, 100u);
  EXPECT_EQ(out.records, 20u);
}

// Random orders: every packet on each line with independent losses, lines interleaved at
// random with duplicates, replies to every request (some lost), random time steps. The
// output must be the feed exactly, with nothing reported lost.
TEST(Arbiter, AnyOrderOfTwoLossyLinesAndRepliesRebuildsTheFeedExactly) {
  const Feed f(3000, 11);
  const std::uint64_t n = f.msgs.size();
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    std::mt19937_64 rng(seed);
    ArbiterOptions o = Opts();
    o.window = 1u << 12;
    o.rerequest_retries = 50;
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
        if (rng() % 100 < 10) continue;                       // 10% loss per line
        lines[l].push_back(Data(f, kS1, s, c));
        if (rng() % 100 < 3) lines[l].push_back(Data(f, kS1, s, c));  // a duplicate
      }
      lines[l].push_back(End(kS1, n + 1));
    }
    std::size_t pos[2] = {0, 0};
    std::int64_t t = 0;
    std::vector<RerequestOut> pending;
    for (int step = 0; step < 200000 && !a.done(); ++step) {
      t += static_cast<std::int64_t>(rng() % 300'000);
      const int l = static_cast<int>(rng() % 2);
      if (pos[l] < lines[l].size()) {
        (void)Put(a, l == 0 ? Line::kA : Line::kB, lines[l][pos[l]++], t, &out);
      } else {
        a.LineDrained(l == 0 ? Line::kA : Line::kB, t);
      }
      if (rng() % 4 == 0) {
        TickAt(a, t, &out);
        for (const RerequestOut& r : a.requests()) pending.push_back(r);
        a.ClearRequests();
      }
      if (!pending.empty() && rng() % 3 == 0) {
        const RerequestOut r = pending.front();
        pending.erase(pending.begin());
        if (rng() % 100 >= 20) (void)Put(a, Line::kReplay, Data(f, r.session, r.sequence, r.count), t, &out);
      }
    }
    ASSERT_TRUE(a.done()) << "seed " << seed;
    ASSERT_TRUE(out.gaps().empty()) << "seed " << seed;
    ASSERT_EQ(out.records, n) << "seed " << seed;
    ASSERT_TRUE(out.bytes == f.Records(1, n + 1)) << "seed " << seed;
    EXPECT_EQ(C(a, LiveCounter::kMessages), n);
    EXPECT_EQ(C(a, LiveCounter::kRerequestsSent),
              C(a, LiveCounter::kRerequestsAnswered) + C(a, LiveCounter::kRerequestsTimedOut))
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
          (void)mold::detail::Write20(p, rng() % 2 ? kS2 : mold::Session::From("X"), s, static_cast<std::uint16_t>(c));
          break;
        default: break;
      }
      const V v = a.OnPacket(line, p, t, rng() % 50 == 0);
      if (v == V::kPark && rng() % 2) (void)a.OnPacket(line, p, t);
      Drain(a, &out);
      if (rng() % 3 == 0) a.LineDrained(static_cast<Line>(rng() % 2), t);
      TickAt(a, t, &out);
      a.ClearRequests();
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
