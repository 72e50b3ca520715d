// LogReader::poll_direct (the inline subscriber's direct log -> handler path), driven
// single-threaded and step by step as in shm_log_test: mixed with poll()/release() exactly as
// SubscriberImpl::poll mixes them, it must deliver what poll() alone delivers - in order, with
// exact gap reports, overruns of views held during delivery reported (lossy and backpressure
// after an eviction), hostile headers never delivered - and plain frames must take the direct
// path.
#include <cstring>
#include <functional>
#include <vector>

#include <gtest/gtest.h>

#include "pollux/pollux.h"
#include "tests/shm/log_fixture.h"
#include "tests/shm/test_util.h"
#include "transport/shm/shm_config.h"
#include "transport/shm/shm_log.h"
#include "transport/shm/shm_segment.h"

namespace pollux::transport::shm {
namespace {

using pollux::testing::check_payload;
using pollux::testing::payload_len;

// One reader (slot 0) at the newest message.
struct Fixture : LogFixture {
  explicit Fixture(std::uint64_t log_size, shm::FlowControl fc = shm::FlowControl::kLossy)
      : LogFixture("directtest", log_size, fc, 5), rd(reader()), r(rd->r), slot(rd->slot) {}

  std::unique_ptr<Reader> rd;
  LogReader& r;
  SubscriberSlot* slot;
};

struct Out {
  std::vector<std::uint64_t> seqs;
  std::vector<RxDesc> gaps;
  bool payload_ok = true;
  std::uint64_t direct = 0;  // messages delivered by poll_direct
};

void take(Out& o, const core::FrameHeader* h, std::uint32_t len) {
  const std::uint32_t off = core::kFrameHeaderSize + ((h->flags & core::kFlagTraced) ? sizeof(core::StageTrace) : 0);
  o.payload_ok &= len >= off && check_payload(reinterpret_cast<const std::byte*>(h) + off, len - off, h->sequence);
  o.seqs.push_back(h->sequence);
}

// One SubscriberImpl::poll on inline shm: the direct path, then poll()/release() when it says
// so. `during` runs inside the last direct delivery of the batch (every view of the batch is
// then held: the reader validates them together after the loop).
std::uint32_t poll_once(Fixture& f, Out& o, std::uint32_t batch, const std::function<void()>& during = {}) {
  bool slow = false;
  std::uint32_t k = 0;
  const std::uint32_t d = f.r.poll_direct(
      batch,
      [&](const core::FrameHeader* h, std::uint32_t len) {
        take(o, h, len);
        if (++k == batch && during) during();
      },
      &slow);
  o.direct += d;
  if (!slow) return d;
  std::vector<RxDesc> buf(batch);
  const std::uint32_t n = f.r.poll(buf.data(), batch);
  for (std::uint32_t i = 0; i < n; ++i) {
    if (buf[i].kind == RxKind::kMessage) {
      take(o, buf[i].frame, buf[i].length);
    } else {
      o.gaps.push_back(buf[i]);
    }
  }
  f.r.release(buf.data(), n);
  return d + n;
}

Out drain(Fixture& f, std::uint32_t batch = 16) {
  Out o;
  for (int idle = 0; idle < 1000;) {
    if (poll_once(f, o, batch) == 0) ++idle;
  }
  return o;
}

TEST(ShmDirectTest, DeliversEverythingInOrderAcrossWrapsWithTracedFramesMixedIn) {
  for (const auto fc : {shm::FlowControl::kLossy, shm::FlowControl::kBackpressure}) {
    Fixture f(64 << 10, fc);
    Out o;
    std::uint64_t next = 1;
    while (next <= 20000) {
      for (int k = 0; k < 7 && next <= 20000; ++k, ++next) {
        ASSERT_TRUE(f.write(next, payload_len(next, 900), next % 97 == 0 ? core::kFlagTraced : 0));
      }
      for (int k = 0; k < 3; ++k) poll_once(f, o, 4);
    }
    Out rest = drain(f);
    o.seqs.insert(o.seqs.end(), rest.seqs.begin(), rest.seqs.end());
    ASSERT_EQ(o.seqs.size(), 20000u);
    for (std::size_t i = 0; i < o.seqs.size(); ++i) ASSERT_EQ(o.seqs[i], i + 1);
    EXPECT_TRUE(o.gaps.empty());
    EXPECT_TRUE(o.payload_ok && rest.payload_ok);
    EXPECT_GT(f.writer.position(), 100u * (64 << 10)) << "the log wrapped (padding frames)";
    // Plain frames go direct; traced and post-padding ones through poll().
    EXPECT_GT(o.direct + rest.direct, 15000u);
    EXPECT_LT(o.direct + rest.direct, 20000u - 200u);
    EXPECT_EQ(f.r.malformed(), 0u);
  }
}

TEST(ShmDirectTest, LappedReaderGetsTheExactGapCount) {
  Fixture f(64 << 10);
  for (std::uint64_t s = 1; s <= 100; ++s) ASSERT_TRUE(f.write(s, 200));
  Out a = drain(f);
  ASSERT_EQ(a.seqs.size(), 100u);
  EXPECT_EQ(a.direct, 100u - 16u) << "all but the first poll (the joining resync, through poll()) direct";
  for (std::uint64_t s = 101; s <= 3000; ++s) ASSERT_TRUE(f.write(s, payload_len(s, 500)));
  Out b = drain(f);
  ASSERT_EQ(b.gaps.size(), 1u);
  EXPECT_EQ(b.gaps[0].reason, kGapLapped);
  EXPECT_EQ(b.gaps[0].sequence, 101u);
  ASSERT_FALSE(b.seqs.empty());
  EXPECT_EQ(b.gaps[0].gap_count, b.seqs.front() - 101);
  for (std::size_t i = 1; i < b.seqs.size(); ++i) ASSERT_EQ(b.seqs[i], b.seqs[i - 1] + 1);
  EXPECT_EQ(b.seqs.back(), 3000u);
  EXPECT_EQ(b.gaps[0].gap_count + b.seqs.size(), 2900u);
  EXPECT_TRUE(b.payload_ok);
}

// Lossy: the writer laps the views while the handler holds them; the next poll reports them
// as an overrun gap (then the lapped gap), exactly.
// Messages 1-5 read (the joining resync, poll()), then 6-15 delivered directly while
// `meanwhile` runs and the writer goes on to 2000, lapping the reader: what drain() finds after.
void DeliverTenWhileLapped(Fixture& f, const std::function<void()>& meanwhile, Out* after) {
  for (std::uint64_t s = 1; s <= 5; ++s) ASSERT_TRUE(f.write(s, 100));
  ASSERT_EQ(drain(f).seqs.size(), 5u);
  for (std::uint64_t s = 6; s <= 15; ++s) ASSERT_TRUE(f.write(s, 100));
  Out o;
  ASSERT_EQ(poll_once(f, o, 10,
                      [&] {
                        meanwhile();
                        for (std::uint64_t s = 16; s <= 2000; ++s) ASSERT_TRUE(f.write(s, 100));
                      }),
            10u);
  EXPECT_EQ(o.direct, 10u);
  *after = drain(f);
}

TEST(ShmDirectTest, LossyOverrunDuringDirectDeliveryIsReported) {
  Fixture f(64 << 10);
  Out d;
  ASSERT_NO_FATAL_FAILURE(DeliverTenWhileLapped(
      f, [] {}, &d));
  EXPECT_EQ(f.r.overruns(), 1u);
  ASSERT_EQ(d.gaps.size(), 2u);
  EXPECT_EQ(d.gaps[0].reason, kGapOverrun);
  EXPECT_EQ(d.gaps[0].sequence, 6u);
  EXPECT_EQ(d.gaps[0].gap_count, 10u) << "all ten views were overwritten";
  EXPECT_EQ(d.gaps[1].reason, kGapLapped);
  EXPECT_EQ(d.gaps[1].sequence, 16u);
  EXPECT_EQ(d.gaps[1].gap_count + d.seqs.size(), 1985u);
}

// Backpressure: the writer cannot lap an active subscriber; once it evicts this one (a stall)
// it may, and views held during delivery are then checked before the position is published.
TEST(ShmDirectTest, BackpressureEvictionDuringDirectDeliveryIsReported) {
  Fixture f(64 << 10, shm::FlowControl::kBackpressure);
  Out d;
  // Evicted as LogWriter::reap_subscribers does, so the writer may lap it.
  ASSERT_NO_FATAL_FAILURE(DeliverTenWhileLapped(
      f, [&] { f.slot->state.store(kSlotEvicted); }, &d));
  EXPECT_EQ(f.r.overruns(), 1u);
  ASSERT_GE(d.gaps.size(), 1u);
  EXPECT_EQ(d.gaps[0].reason, kGapOverrun);
  EXPECT_EQ(d.gaps[0].sequence, 6u);
  EXPECT_EQ(d.gaps[0].gap_count, 10u);
  EXPECT_EQ(f.slot->state.load(), kSlotActive) << "rejoined flow control after the recovery";
}

// Without an eviction the same delivery reports nothing and hands the space back.
TEST(ShmDirectTest, BackpressureReleasesByPosition) {
  Fixture f(64 << 10, shm::FlowControl::kBackpressure);
  ASSERT_TRUE(f.write(1, 480));
  ASSERT_EQ(drain(f).seqs.size(), 1u);  // the joining resync (poll())
  std::uint64_t s = 2;
  while (f.write(s, 480)) ++s;
  Out o;
  ASSERT_EQ(poll_once(f, o, 8), 8u);
  EXPECT_EQ(o.direct, 8u);
  EXPECT_EQ(f.slot->position.load(), f.r.position());
  std::uint32_t more = 0;
  while (f.write(s, 480)) ++s, ++more;
  EXPECT_GE(more, 7u);
  EXPECT_LE(more, 8u);
  Out d = drain(f);
  EXPECT_TRUE(d.gaps.empty());
  EXPECT_EQ(d.seqs.size() + 8 + 1, s - 1);
  EXPECT_EQ(f.r.overruns(), 0u);
}

// Hostile bytes: each corrupted header field stops the direct path, and poll() drops that one
// frame as malformed (a one-message gap); nothing corrupt is delivered.
TEST(ShmDirectTest, CorruptHeadersAreNeverDeliveredDirectly) {
  const std::vector<std::function<void(core::FrameHeader*)>> corrupt = {
      [](core::FrameHeader* h) { h->magic = 0; },        [](core::FrameHeader* h) { h->version = 9; },
      [](core::FrameHeader* h) { h->stream_id = 6; },    [](core::FrameHeader* h) { h->session_id = 1; },
      [](core::FrameHeader* h) { h->frame_length = 8; }, [](core::FrameHeader* h) { h->frame_length = 1u << 30; },
  };
  for (std::size_t k = 0; k < corrupt.size(); ++k) {
    Fixture f(64 << 10);
    for (std::uint64_t s = 1; s <= 5; ++s) ASSERT_TRUE(f.write(s, 100));
    Out a = drain(f);
    ASSERT_EQ(a.seqs.size(), 5u);
    ASSERT_TRUE(f.write(6, 100));
    corrupt[k](reinterpret_cast<core::FrameHeader*>(f.seg->log() + (f.r.position() & ((64 << 10) - 1))));
    for (std::uint64_t s = 7; s <= 20; ++s) ASSERT_TRUE(f.write(s, 100));
    Out b = drain(f);
    std::vector<std::uint64_t> want;
    for (std::uint64_t s = 7; s <= 20; ++s) want.push_back(s);
    EXPECT_EQ(b.seqs, want) << "corruption " << k;
    ASSERT_EQ(b.gaps.size(), 1u) << "corruption " << k;
    EXPECT_EQ(b.gaps[0].reason, kGapMalformed);
    EXPECT_EQ(b.gaps[0].sequence, 6u);
    EXPECT_EQ(b.gaps[0].gap_count, 1u);
    EXPECT_EQ(f.r.malformed(), 1u);
    EXPECT_TRUE(b.payload_ok);
  }
}

// Through the API (inline shm: the publisher's direct offer and the subscriber's direct poll):
// every payload size from 0 to 300 bytes - the publisher copies up to 64 bytes with
// overlapping fixed-size moves - arrives byte for byte, as does a 0-byte message.
TEST(ShmDirectTest, EveryPayloadSizeArrivesIntactThroughTheApi) {
  const std::string name = pollux::testing::unique_name("directapi");
  auto ctx =
      pollux::Context::from_string("[runtime]\nname = \"" + name +
                                       "\"\nthreading = \"inline\"\ncounters = false\n[shm]\nlog_size = \"64KiB\"\n"
                                       "flow_control = \"backpressure\"\n",
                                   "test.toml");
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  auto pub = (*ctx)->publisher("sizes");
  auto sub = (*ctx)->subscriber("sizes");
  ASSERT_TRUE(pub.ok()) << pub.status();
  ASSERT_TRUE(sub.ok()) << sub.status();
  for (int i = 0; i < 100000 && !pub->is_connected(); ++i) (void)sub->poll([](const pollux::Message&) {}, 1);
  ASSERT_TRUE(pub->is_connected());
  std::vector<std::byte> buf(300 + 16);
  for (std::uint32_t round = 0; round < 3; ++round) {
    for (std::uint32_t n = 0; n <= 300; ++n) {
      // Source at varying alignment, its neighbours poisoned: a copy that reads or writes past
      // n bytes shows up as wrong bytes below.
      const std::uint32_t at = (n + round) % 16;
      for (std::size_t k = 0; k < buf.size(); ++k) buf[k] = static_cast<std::byte>(0xEE);
      for (std::uint32_t k = 0; k < n; ++k) buf[at + k] = static_cast<std::byte>((k * 7 + n + round) & 0xff);
      ASSERT_GE(pub->offer(buf.data() + at, n), 0) << n;
      int got = 0;  // messages (the first poll may hand out the session's announcement)
      bool ok = false;
      for (int spins = 0; got == 0 && spins < 1000; ++spins) {
        (void)sub->poll(
            [&](const pollux::Message& m) {
              ++got;
              ok = m.payload.size() == n;
              for (std::uint32_t k = 0; ok && k < n; ++k) {
                ok = m.payload[k] == static_cast<std::byte>((k * 7 + n + round) & 0xff);
              }
            },
            1);
      }
      ASSERT_EQ(got, 1) << n;
      ASSERT_TRUE(ok) << "payload of " << n << " bytes arrived wrong";
    }
  }
}

// offer_batch() checks the stream's state once and each message's length: before anything
// subscribes it is not connected; an oversized message ends the batch after the ones before it
// (published, counted), and a batch starting with one is refused whole.
TEST(ShmDirectTest, OfferBatchStopsAtAnOversizedMessageAndIsRefusedWhileNotConnected) {
  const std::string name = pollux::testing::unique_name("directbatch");
  auto ctx = pollux::Context::from_string("[runtime]\nname = \"" + name +
                                              "\"\nthreading = \"inline\"\n[shm]\nlog_size = \"64KiB\"\n"
                                              "flow_control = \"backpressure\"\n",
                                          "test.toml");
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  auto pub = (*ctx)->publisher("batch");
  ASSERT_TRUE(pub.ok()) << pub.status();
  const std::uint64_t v = 7;
  const std::span<const std::byte> small{reinterpret_cast<const std::byte*>(&v), sizeof v};
  const std::vector<std::byte> big(64 * 1024);  // larger than a 64 KiB log's largest message
  const std::span<const std::byte> three[3] = {small, small, std::span<const std::byte>(big)};
  EXPECT_EQ(pub->offer_batch(three), pollux::kNotConnected);
  auto sub = (*ctx)->subscriber("batch");
  ASSERT_TRUE(sub.ok()) << sub.status();
  for (int i = 0; i < 100000 && !pub->is_connected(); ++i) (void)sub->poll([](const pollux::Message&) {}, 1);
  ASSERT_TRUE(pub->is_connected());
  EXPECT_EQ(pub->offer_batch(three), 2);
  EXPECT_EQ(pub->offer_batch(std::span(three + 2, 1)), pollux::kMessageTooLarge);
  int got = 0;
  for (int spins = 0; spins < 10000 && got < 3; ++spins) {
    (void)sub->poll(
        [&](const pollux::Message& m) {
          ++got;
          EXPECT_EQ(m.payload.size(), sizeof v);
        },
        8);
  }
  EXPECT_EQ(got, 2);
}

// [[streams]] publisher_timestamp = false: offer() reads no clock and the message carries 0;
// the default stream next to it is stamped; a traced unstamped stream still carries its
// stages (and its offer stamp as publisher_ns). Through offer(), offer_batch() and claim().
TEST(ShmDirectTest, PublisherTimestampIsAPerStreamChoice) {
  const std::string name = pollux::testing::unique_name("directts");
  auto ctx = pollux::Context::from_string(
      "[runtime]\nname = \"" + name +
          "\"\nthreading = \"inline\"\n[shm]\nlog_size = \"64KiB\"\nflow_control = \"backpressure\"\n"
          "[[streams]]\ntopic = \"plain\"\nid = 11\npublisher_timestamp = false\n"
          "[[streams]]\ntopic = \"stamped\"\nid = 12\n"
          "[[streams]]\ntopic = \"traced\"\nid = 13\npublisher_timestamp = false\ntrace = true\n",
      "test.toml");
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  for (const char* topic : {"plain", "stamped", "traced"}) {
    SCOPED_TRACE(topic);
    auto pub = (*ctx)->publisher(topic);
    auto sub = (*ctx)->subscriber(topic);
    ASSERT_TRUE(pub.ok()) << pub.status();
    ASSERT_TRUE(sub.ok()) << sub.status();
    for (int i = 0; i < 100000 && !pub->is_connected(); ++i) (void)sub->poll([](const pollux::Message&) {}, 1);
    ASSERT_TRUE(pub->is_connected());
    const std::uint64_t v = 42;
    ASSERT_GE(pub->offer(&v, sizeof v), 0);
    const std::span<const std::byte> one{reinterpret_cast<const std::byte*>(&v), sizeof v};
    const std::span<const std::byte> batch[2] = {one, one};
    ASSERT_EQ(pub->offer_batch(batch), 2);
    pollux::Claim c;
    ASSERT_GE(pub->claim(sizeof v, c), 0);
    std::memcpy(c.buffer().data(), &v, sizeof v);
    ASSERT_GE(pub->commit(c), 0);
    std::vector<std::int64_t> stamps;
    int traced = 0;
    for (int spins = 0; stamps.size() < 4 && spins < 10000; ++spins) {
      (void)sub->poll(
          [&](const pollux::Message& m) {
            stamps.push_back(m.publisher_ns);
            if (m.trace != nullptr && m.trace->ns[pollux::StageTimes::kOffer] != 0) ++traced;
          },
          8);
    }
    ASSERT_EQ(stamps.size(), 4u);
    for (std::int64_t ns : stamps) {
      if (std::string(topic) == "plain") {
        EXPECT_EQ(ns, 0);
      } else {
        EXPECT_GT(ns, 0);
      }
    }
    EXPECT_EQ(traced, std::string(topic) == "traced" ? 4 : 0);
  }
}

}  // namespace
}  // namespace pollux::transport::shm
