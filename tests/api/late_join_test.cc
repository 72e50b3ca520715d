// pollux::LateJoinSubscriber (docs/ARCHIVE.md) over shm in one process: a Recorder records the
// stream, late joiners read the recording and switch to the live stream. Every joiner's delivered
// sequences are checked one by one: from its start, each exactly once, in order, payload intact.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pollux/pollux.h"
#include "tests/shm/test_util.h"
#include "tests/support/temp_dir.h"

namespace pollux {
namespace {

using testing::unique_name;

std::string config(const std::string& name) {
  return absl::StrCat("[runtime]\nname = \"", name,
                      "\"\nthreading = \"inline\"\nidle = \"yield\"\n[shm]\nflow_control = "
                      "\"backpressure\"\nlog_size = \"1MiB\"\n");
}

// Message i's payload: 8 bytes of i, then bytes following from it; 8..40 bytes long.
std::vector<std::byte> payload(std::uint64_t i) {
  std::vector<std::byte> p(8 + i * 13 % 33);
  std::memcpy(p.data(), &i, 8);
  for (std::size_t k = 8; k < p.size(); ++k) p[k] = static_cast<std::byte>((i * 7 + k) & 0xff);
  return p;
}

// What one joiner received: sequences must run from `start` without a hole or a repeat.
struct Check {
  std::uint64_t start = 1, next = 1, received = 0;
  std::string problem;
  void operator()(const Message& m) {
    ++received;
    std::uint64_t tag = 0;
    if (m.payload.size() >= 8) std::memcpy(&tag, m.payload.data(), 8);
    const std::vector<std::byte> want = payload(m.sequence);
    if (!problem.empty()) return;
    if (m.sequence != next) {
      problem = absl::StrCat("sequence ", m.sequence, " where ", next, " was due (start ", start, ")");
    } else if (tag != m.sequence || m.payload.size() != want.size() ||
               std::memcmp(m.payload.data(), want.data(), want.size()) != 0) {
      problem = absl::StrCat("message ", m.sequence, ": not the payload published");
    }
    next = m.sequence + 1;
  }
};

// A shm context whose topic "quotes" a Recorder records into a directory of its own (segments of
// `segment_size`), and a publisher of it.
struct RecordedStream {
  pollux::testing::TempDir d{"pollux-latejoin"};
  std::unique_ptr<Context> ctx;
  std::unique_ptr<Recorder> rec;
  std::optional<Publisher> pub;

  explicit RecordedStream(std::uint64_t segment_size) {
    auto c = Context::from_string(config(unique_name("lj")), "lj.toml");
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return;
    ctx = std::move(*c);
    RecordingOptions ro;
    ro.topic = "quotes";
    ro.directory = d.path();
    ro.segment_size = segment_size;
    auto r = Recorder::start(*ctx, ro);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return;
    rec = std::move(*r);
    auto p = ctx->publisher("quotes");
    EXPECT_TRUE(p.ok()) << p.status();
    if (p.ok()) pub.emplace(std::move(*p));
  }
  bool ok() const { return pub.has_value(); }
};

TEST(LateJoin, TenJoinersAtRandomTimesEachGetEverySequenceFromTheirStartExactlyOnce) {
  RecordedStream rs(1 << 20);
  ASSERT_TRUE(rs.ok());
  auto& ctx = rs.ctx;
  auto& rec = rs.rec;
  auto& pub = rs.pub;
  auto& d = rs.d;

  // The publisher runs until every joiner has switched to the live stream (so each one merges
  // while it publishes), then stops; joiners then read up to its last message.
  constexpr std::uint64_t kCount = 200000;  // joins happen within the first kCount messages
  constexpr std::uint64_t kWindow = 100000;
  std::atomic<std::uint64_t> slowest{0};  // the lowest sequence a joiner is due (0: none yet)
  std::atomic<bool> replaying{false};     // a joiner has not reached the recording's end yet
  std::atomic<std::uint64_t> published{0};
  std::atomic<bool> stop_publisher{false};
  std::atomic<bool> stop_recorder{false};
  std::thread recorder([&] {
    while (!stop_recorder.load(std::memory_order_acquire)) {
      if (rec->poll(4096) == 0) std::this_thread::yield();
    }
  });
  // The publisher as fast as the stream takes it (back-pressure from the recorder and the
  // joiners' live subscriptions).
  std::thread publisher([&] {
    for (std::uint64_t i = 1; !stop_publisher.load(std::memory_order_acquire);) {
      const std::vector<std::byte> p = payload(i);
      if (pub->offer(p.data(), p.size()) >= 0) {
        published.store(i++, std::memory_order_release);
        // The joiners share one thread and each reads the recording with a tenth of it, so a
        // publisher on a core of its own outruns them (by far under a sanitizer). It goes on as
        // fast as it can until it is kWindow messages ahead of the slowest joiner, then waits
        // until no joiner is still reading the recording without having reached its end: with
        // the publisher paused the recording stops growing, so each one gets there, subscribes
        // the live stream (which back-pressure then paces by it) and merges, whatever the
        // machine's speed.
        if (i > slowest.load(std::memory_order_acquire) + kWindow) {
          while (replaying.load(std::memory_order_acquire) && !stop_publisher.load(std::memory_order_acquire)) {
            std::this_thread::yield();
          }
        }
      } else {
        std::this_thread::yield();
      }
    }
  });

  std::mt19937_64 rng(0x5eed);
  struct Joiner {
    std::unique_ptr<LateJoinSubscriber> sub;
    Check check;
  };
  std::vector<Joiner> joiners;
  std::vector<std::uint64_t> join_at;
  for (int i = 0; i < 10; ++i) join_at.push_back(kCount / 20 + rng() % (kCount * 8 / 10));
  std::sort(join_at.begin(), join_at.end());
  std::printf("joins at messages");
  for (const std::uint64_t a : join_at) std::printf(" %llu", static_cast<unsigned long long>(a));
  std::printf("\n");
  std::size_t next_join = 0;
  std::uint64_t last = 0;  // the publisher's last message, once it stopped
  auto all_done = [&] {
    if (joiners.size() < join_at.size()) return false;
    if (last == 0) {
      for (const Joiner& j : joiners) {
        if (std::string(j.sub->state()) != "live" && j.check.problem.empty()) return false;
      }
      stop_publisher.store(true, std::memory_order_release);
      publisher.join();
      last = published.load(std::memory_order_acquire);
    }
    for (const Joiner& j : joiners) {
      if (j.check.next <= last && j.check.problem.empty()) return false;
    }
    return true;
  };
  while (!all_done()) {
    if (next_join < join_at.size() && published.load(std::memory_order_acquire) >= join_at[next_join]) {
      LateJoinOptions o;
      o.directory = d.path();
      Joiner j;
      // Half from the recording's first message, half from a sequence already published.
      if (next_join % 2 == 1) {
        o.start = LateJoinOptions::Start::kPosition;
        j.check.start = 1 + rng() % join_at[next_join];
        o.from = ReplayPosition::at_sequence(j.check.start);
      }
      j.check.next = j.check.start;
      auto s = LateJoinSubscriber::open(*ctx, "quotes", o);
      ASSERT_TRUE(s.ok()) << s.status();
      j.sub = std::move(*s);
      joiners.push_back(std::move(j));
      ++next_join;
    }
    int work = 0;
    std::uint64_t low = next_join < join_at.size() ? join_at[next_join] : ~0ull;
    bool any_replaying = false;
    for (Joiner& j : joiners) {
      // The live joiners pace the publisher (back-pressure), 1,024 messages a round each; one
      // still reading the recording with the same budget would only keep pace, never catch up.
      const bool is_live = std::string_view(j.sub->state()) == "live";
      work += j.sub->poll(j.check, is_live ? 1024 : 4096);
      if (!j.check.problem.empty()) continue;  // a failed one is done
      low = std::min(low, j.check.next);
      any_replaying = any_replaying || std::string_view(j.sub->state()) == "replaying";
    }
    replaying.store(any_replaying, std::memory_order_release);
    slowest.store(low, std::memory_order_release);
    if (work == 0) std::this_thread::yield();
  }
  stop_recorder.store(true, std::memory_order_release);
  recorder.join();
  for (std::size_t i = 0; i < joiners.size(); ++i) {
    const Joiner& j = joiners[i];
    const LateJoinStatus st = j.sub->status();
    std::printf(
        "joiner %zu: start %llu, %llu replayed, %llu live (%llu kept while catching up), %llu duplicates "
        "skipped, %llu fell behind\n",
        i, static_cast<unsigned long long>(j.check.start), static_cast<unsigned long long>(st.replayed),
        static_cast<unsigned long long>(st.live), static_cast<unsigned long long>(st.buffered),
        static_cast<unsigned long long>(st.duplicates), static_cast<unsigned long long>(st.fell_behind));
    SCOPED_TRACE(absl::StrCat("joiner ", i, " joined at ", join_at[i], ", start ", j.check.start, ": ", st.replayed,
                              " replayed, ", st.live, " live, ", st.duplicates, " duplicates skipped, state ",
                              st.state));
    EXPECT_EQ(j.check.problem, "");
    EXPECT_EQ(j.check.received, last - j.check.start + 1);
    EXPECT_STREQ(st.state, "live");
    EXPECT_GT(st.replayed, 0u);
    EXPECT_GT(st.live, 0u);
    EXPECT_EQ(st.missing, 0u);
    EXPECT_EQ(st.error, "");
  }
  ASSERT_TRUE(rec->stop().ok());
}

TEST(LateJoin, ALiveStreamRunningAheadOfTheBufferIsReportedAndMemoryStaysBounded) {
  RecordedStream rs(128ull << 20);
  ASSERT_TRUE(rs.ok());
  auto& ctx = rs.ctx;
  auto& rec = rs.rec;
  auto& pub = rs.pub;
  auto& d = rs.d;
  std::uint64_t seq = 0;
  auto publish = [&](int n) {
    for (int i = 0; i < n; ++i) {
      const std::vector<std::byte> p = payload(++seq);
      while (pub->offer(p.data(), p.size()) < 0) rec->poll();
    }
  };
  auto record_all = [&] {
    while (rec->status().messages < seq) rec->poll();
  };
  publish(100);
  record_all();
  LateJoinOptions o;
  o.directory = d.path();
  o.max_buffered_bytes = 4096;
  auto j = LateJoinSubscriber::open(*ctx, "quotes", o);
  ASSERT_TRUE(j.ok()) << j.status();
  Check check;
  for (int i = 0; i < 100 && std::string((*j)->state()) != "catching_up"; ++i) (*j)->poll(check, 64);
  ASSERT_STREQ((*j)->state(), "catching_up");
  EXPECT_EQ(check.next, 101u);

  // The recorder falls behind (not polled) while 200 more are published: more than 4 KiB of
  // live messages to keep.
  publish(200);
  for (int i = 0; i < 10; ++i) (*j)->poll(check, 1024);
  // Given up, and begun again at the recording's end (where it still is).
  LateJoinStatus st = (*j)->status();
  EXPECT_EQ(st.fell_behind, 1u);
  EXPECT_LE(st.buffered, 4096u / 32);
  EXPECT_EQ(check.next, 101u);
  const std::string described = ctx->describe();  // its latest errors among the rest
  EXPECT_NE(described.find("late join of quotes: the live stream ran more than 4096 bytes ahead"), std::string::npos)
      << described;

  // The recorder catches up; the joiner replays it, then merges with the next live messages.
  record_all();
  for (int round = 0; round < 5; ++round) {
    publish(10);
    record_all();
    for (int i = 0; i < 100; ++i) (*j)->poll(check, 1024);
  }
  EXPECT_EQ(check.problem, "");
  EXPECT_EQ(check.next, seq + 1);
  EXPECT_STREQ((*j)->state(), "live");
  ASSERT_TRUE(rec->stop().ok());
}

// The configuration alone makes ctx->subscriber() a late joiner: [[streams]] start, with the
// context's own [[recordings]] entry of the topic as the recording.
TEST(LateJoin, AStartInTheStreamsConfigurationMakesSubscriberALateJoiner) {
  pollux::testing::TempDir d("pollux-latejoin");
  const std::string toml = absl::StrCat(config(unique_name("ljc")),
                                        "[[streams]]\ntopic = \"quotes\"\nid = 7\nstart = { sequence = 50 }\n"
                                        "[[recordings]]\ntopic = \"quotes\"\ndirectory = \"",
                                        d.path(), "\"\nsegment_size = \"1MiB\"\n");
  auto ctx = Context::from_string(toml, "ljc.toml");
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  auto pub = (*ctx)->publisher("quotes");
  ASSERT_TRUE(pub.ok()) << pub.status();
  std::uint64_t seq = 0;
  auto publish = [&](int n) {
    for (int i = 0; i < n; ++i) {
      const std::vector<std::byte> p = payload(++seq);
      while (pub->offer(p.data(), p.size()) < 0) std::this_thread::yield();  // the recorder's thread drains
    }
  };
  publish(100);
  auto sub = (*ctx)->subscriber("quotes");
  ASSERT_TRUE(sub.ok()) << sub.status();
  ASSERT_NE(sub->late_join(), nullptr);
  EXPECT_EQ(sub->stream_id(), 7u);
  EXPECT_EQ(sub->topic(), "quotes");
  EXPECT_TRUE(sub->is_connected());
  Check check;
  check.start = check.next = 50;
  // More published while it replays, in rounds (the stream's log is 1 MiB: back-pressure from this
  // subscriber once it is live is released by polling it).
  for (int round = 0; round < 20; ++round) {
    publish(500);
    for (int i = 0; i < 50 && check.next <= seq; ++i) {
      if (sub->poll(check, 256) == 0) sub->wait(100);
    }
  }
  while (check.next <= seq && check.problem.empty()) {
    if (sub->poll(check, 256) == 0) sub->wait(1000);
  }
  const LateJoinStatus st = sub->late_join()->status();
  EXPECT_EQ(check.problem, "");
  EXPECT_EQ(check.received, seq - 49);
  EXPECT_EQ(sub->messages_received(), seq - 49);
  EXPECT_EQ(sub->messages_lost(), 0u);
  EXPECT_STREQ(st.state, "live") << st.replayed << " replayed, " << st.live << " live";
  EXPECT_GT(st.replayed, 0u);
  // Another subscriber of the same stream is a late joiner too (every subscriber of the topic).
  auto again = (*ctx)->subscriber("quotes");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_NE(again->late_join(), nullptr);
  again->close();
  sub->close();
  EXPECT_EQ(sub->poll(check, 10), 0);
}

TEST(LateJoin, AStartWithoutARecordingIsAConfigurationError) {
  const std::string base = config(unique_name("ljc"));
  auto ctx = Context::from_string(base + "[[streams]]\ntopic = \"quotes\"\nid = 7\nstart = \"earliest\"\n", "ljc.toml");
  ASSERT_FALSE(ctx.ok());
  EXPECT_NE(ctx.status().message().find("ljc.toml:8: streams[0].start: a start other than \"live\" reads the "
                                        "stream's recording: set archive_dir"),
            std::string::npos)
      << ctx.status();
  // A directory without a recording of the topic: the subscriber says so when it opens.
  pollux::testing::TempDir d("pollux-latejoin");
  auto ctx2 = Context::from_string(absl::StrCat(base, "[[streams]]\ntopic = \"quotes\"\nid = 7\nstart = \"earliest\"\n",
                                                "archive_dir = \"", d.path(), "\"\n"),
                                   "ljc.toml");
  ASSERT_TRUE(ctx2.ok()) << ctx2.status();
  auto sub = (*ctx2)->subscriber("quotes");
  ASSERT_FALSE(sub.ok());
  EXPECT_NE(sub.status().message().find("has no recording of quotes"), std::string::npos) << sub.status();
}

TEST(LateJoin, NoRecordingOfTheTopicIsAClearError) {
  pollux::testing::TempDir d("pollux-latejoin");
  auto ctx = Context::from_string(config(unique_name("lj")), "lj.toml");
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  LateJoinOptions o;
  o.directory = d.path();
  auto j = LateJoinSubscriber::open(**ctx, "quotes", o);
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(j.status().message().find("has no recording of quotes"), std::string::npos) << j.status();
  o.start = LateJoinOptions::Start::kLive;  // needs none
  auto live = LateJoinSubscriber::open(**ctx, "quotes", o);
  ASSERT_TRUE(live.ok()) << live.status();
  EXPECT_STREQ((*live)->state(), "live");
}

}  // namespace
}  // namespace pollux
