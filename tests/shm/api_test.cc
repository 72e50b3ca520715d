// In-process tests of the public API: threading modes, result codes, tracing, stream events,
// counters and error reporting.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/counters.h"
#include "pollux/pollux.h"
#include "tests/shm/test_util.h"
#include "tests/support/status_assert.h"
#include "tests/support/threads.h"

namespace pollux {
namespace {

using testing::check_payload;
using testing::fill_payload;
using testing::payload_len;
using testing::unique_name;

std::string cfg(const std::string& name, const std::string& threading, const std::string& extra = "",
                const std::string& shm_extra = "") {
  return "[runtime]\nname = \"" + name + "\"\nthreading = \"" + threading +
         "\"\nidle = \"yield\"\n[shm]\nflow_control = \"backpressure\"\nlog_size = \"256KiB\"\n" + shm_extra + extra;
}

std::unique_ptr<Context> make(const std::string& toml) {
  auto c = Context::from_string(toml, "test.toml");
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

template <typename Pred>
bool poll_until(Subscriber& s, Pred done, std::vector<Message>* /*unused*/ = nullptr, int seconds = 30) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    if (s.poll([](const Message&) {}, 0) == 0) std::this_thread::yield();
  }
  return true;
}

void wait_connected(Publisher& p, Subscriber& s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!p.is_connected() || !s.is_connected()) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "never connected";
    (void)s.poll([](const Message&) {}, 1);
    std::this_thread::yield();
  }
}

// One context (cfg(), a fresh name) with a publisher and a subscriber on `topic`, connected.
struct Connected {
  std::unique_ptr<Context> ctx;
  std::optional<Publisher> pub;
  std::optional<Subscriber> sub;
};

void open_connected(const std::string& topic, const std::string& threading, Connected& c) {
  c.ctx = make(cfg(unique_name(topic.c_str()), threading));
  ASSERT_TRUE(c.ctx != nullptr);
  POLLUX_ASSERT_OK_DECL(pub, c.ctx->publisher(topic));
  POLLUX_ASSERT_OK_DECL(sub, c.ctx->subscriber(topic));
  c.pub.emplace(std::move(*pub));
  c.sub.emplace(std::move(*sub));
  ASSERT_NO_FATAL_FAILURE(wait_connected(*c.pub, *c.sub));
}

// What a subscriber saw, reduced to something comparable across runs.
struct Record {
  std::uint64_t seq;
  std::uint32_t len;
  std::uint64_t sum;
  bool operator==(const Record&) const = default;
};

std::vector<Record> run_stream(const std::string& threading, std::uint64_t count, const std::string& extra = "") {
  const std::string name = unique_name("modes");
  auto pub_ctx = make(cfg(name, threading, extra));
  auto sub_ctx = make(cfg(name, threading, extra));
  auto pub = pub_ctx->publisher("orders");
  auto sub = sub_ctx->subscriber("orders");
  EXPECT_TRUE(pub.ok()) << pub.status();
  EXPECT_TRUE(sub.ok()) << sub.status();
  wait_connected(*pub, *sub);
  std::thread producer([&] {
    std::byte buf[2048];
    for (std::uint64_t i = 1; i <= count; ++i) {
      const std::uint32_t len = payload_len(i, 1500);
      for (;;) {
        std::int64_t r;
        if (i % 3 == 0) {  // a third through zero-copy claims
          Claim c;
          r = pub->claim(len, c);
          if (r >= 0) {
            fill_payload(c.buffer().data(), len, i);
            r = pub->commit(c);
          }
        } else {
          fill_payload(buf, len, i);
          r = pub->offer(buf, len);
        }
        if (r >= 0) break;
        EXPECT_EQ(r, kBackPressured) << result_name(r);
        std::this_thread::yield();
      }
    }
  });
  std::vector<Record> got;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (got.size() < count && std::chrono::steady_clock::now() < deadline) {
    const int n = sub->poll(
        [&](const Message& m) {
          std::uint64_t sum = 0;
          for (std::byte b : m.payload) sum = sum * 31 + static_cast<std::uint8_t>(b);
          EXPECT_TRUE(check_payload(m.payload.data(), static_cast<std::uint32_t>(m.payload.size()), m.sequence));
          got.push_back({m.sequence, static_cast<std::uint32_t>(m.payload.size()), sum});
        },
        [&](const Gap& g) { ADD_FAILURE() << "unexpected gap from " << g.from << " count " << g.count; }, 64);
    if (n == 0) std::this_thread::yield();
  }
  producer.join();
  return got;
}

TEST(ApiTest, SameStreamDeliveredIdenticallyInAllThreadingModes) {
  constexpr std::uint64_t kCount = 30000;
  const std::vector<Record> in_line = run_stream("inline", kCount);
  ASSERT_EQ(in_line.size(), kCount);
  for (std::uint64_t i = 0; i < kCount; ++i) ASSERT_EQ(in_line[i].seq, i + 1);
  EXPECT_EQ(run_stream("dedicated", kCount), in_line);
  EXPECT_EQ(run_stream("shared", kCount), in_line);
}

// rings.kind = "boost": the application<->poller rings are boost::lockfree::spsc_queue.
TEST(ApiTest, BoostRingsDeliverTheSameStream) {
  constexpr std::uint64_t kCount = 20000;
  const std::vector<Record> spsc = run_stream("dedicated", kCount);
  ASSERT_EQ(spsc.size(), kCount);
  EXPECT_EQ(run_stream("dedicated", kCount, "[rings]\nkind = \"boost\"\n"), spsc);
  EXPECT_EQ(run_stream("shared", kCount, "[rings]\nkind = \"boost\"\n"), spsc);
}

// Subscriber::wait() instead of spinning, with the sleeping strategies: every message of a
// paced stream arrives, and the waits were real (most returned because of data).
TEST(ApiTest, SubscriberWaitDeliversEveryMessage) {
  for (const char* idle : {"adaptive", "interrupt"}) {
    for (const char* threading : {"dedicated", "inline"}) {
      const std::string name = unique_name("wait");
      std::string toml = "[runtime]\nname = \"" + name + "\"\nthreading = \"" + threading + "\"\nidle = \"" + idle +
                         "\"\nsleep_timer_ms = 0\n[shm]\nflow_control = \"backpressure\"\nlog_size = \"256KiB\"\n";
      auto pub_ctx = make(toml);
      auto sub_ctx = make(toml);
      POLLUX_ASSERT_OK_DECL(pub, pub_ctx->publisher("orders"));
      POLLUX_ASSERT_OK_DECL(sub, sub_ctx->subscriber("orders"));
      wait_connected(*pub, *sub);
      constexpr int kCount = 500;
      std::thread producer([&] {
        for (int i = 1; i <= kCount; ++i) {
          std::uint64_t v = static_cast<std::uint64_t>(i);
          while (pub->offer(&v, sizeof v) < 0) std::this_thread::yield();
          if (i % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // let it sleep
        }
      });
      int got = 0, woken = 0, waits = 0;
      std::uint64_t expect = 1;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (got < kCount && std::chrono::steady_clock::now() < deadline) {
        const int n = sub->poll(
            [&](const Message& m) {
              std::uint64_t v;
              std::memcpy(&v, m.payload.data(), sizeof v);
              EXPECT_EQ(v, expect++);
              ++got;
            },
            64);
        if (n == 0) {
          ++waits;
          woken += sub->wait(200'000) ? 1 : 0;
        }
      }
      producer.join();
      EXPECT_EQ(got, kCount) << idle << " " << threading;
      EXPECT_GT(waits, 0) << idle << " " << threading;
      std::printf("%s/%s: %d waits, %d woken by data\n", idle, threading, waits, woken);
    }
  }
}

// CPU seconds (utime + stime) of this process's threads named `comm`, from /proc.
double threads_cpu_seconds(const std::string& comm) {
  double total = 0;
  for (const std::filesystem::path& task : pollux::testing::threads_named(comm)) {
    std::ifstream st(task / "stat");
    std::string all((std::istreambuf_iterator<char>(st)), std::istreambuf_iterator<char>());
    std::istringstream rest(all.substr(all.rfind(')') + 2));
    std::string f;
    unsigned long long ut = 0, sy = 0;
    for (int i = 3; i <= 15 && rest >> f; ++i) {
      if (i == 14) ut = std::stoull(f);
      if (i == 15) sy = std::stoull(f);
    }
    total += static_cast<double>(ut + sy) / static_cast<double>(sysconf(_SC_CLK_TCK));
  }
  return total;
}

// Aeron #2092 (phantom work keeps an idle agent spinning): with a publisher and a subscriber
// open and no traffic, an adaptive poller sleeps; its CPU over 2 s stays under a generous
// bound (the target, < 1% of a core, is measured in bench/).
TEST(ApiTest, IdleAdaptivePollersSleep) {
  const std::string name = unique_name("idle");
  const std::string toml = "[runtime]\nname = \"" + name + "\"\nthreading = \"dedicated\"\nidle = \"adaptive\"\n";
  auto pub_ctx = make(toml);
  auto sub_ctx = make(toml);
  POLLUX_ASSERT_OK_DECL(pub, pub_ctx->publisher("orders"));
  POLLUX_ASSERT_OK_DECL(sub, sub_ctx->subscriber("orders"));
  wait_connected(*pub, *sub);
  std::uint64_t v = 1;
  while (pub->offer(&v, sizeof v) < 0) std::this_thread::yield();
  int got = 0;
  while (got == 0) got += sub->poll([](const Message&) {}, 8);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // idle_after_ns (10 ms) and settle
  const double c0 = threads_cpu_seconds("pollux-poll-0");
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const double used = threads_cpu_seconds("pollux-poll-0") - c0;  // both contexts' pollers
  EXPECT_LT(used, 0.2) << "two idle adaptive pollers used " << used << " s of CPU in 2 s";
}

TEST(ApiTest, ResultCodes) {
  const std::string name = unique_name("codes");
  auto ctx = make(cfg(name, "inline"));
  POLLUX_ASSERT_OK_DECL(pub, ctx->publisher("codes"));
  const char msg[] = "hello";
  EXPECT_EQ(pub->offer(msg, sizeof msg), kNotConnected);
  POLLUX_ASSERT_OK_DECL(sub, ctx->subscriber("codes"));
  wait_connected(*pub, *sub);
  EXPECT_GE(pub->offer(msg, sizeof msg), 0);
  std::vector<std::byte> big(pub->max_payload() + 1);
  EXPECT_EQ(pub->offer(big.data(), big.size()), kMessageTooLarge);
  EXPECT_EQ(big.size() - 1, 256u * 1024 / 32 - 32) << "max payload = log_size/32 - header";
  EXPECT_GE(pub->offer(big.data(), big.size() - 1), 0);
  std::string got;
  ASSERT_TRUE(poll_until(*sub, [&] {
    (void)sub->poll(
        [&](const Message& m) {
          if (got.empty()) got.assign(reinterpret_cast<const char*>(m.payload.data()), m.payload.size());
        },
        10);
    return !got.empty();
  }));
  EXPECT_EQ(got, std::string(msg, sizeof msg));
  pub->close();
  EXPECT_EQ(pub->offer(msg, sizeof msg), kClosed);
  EXPECT_TRUE(pub->is_closed());
}

TEST(ApiTest, BackPressureIsReportedNotBlocking) {
  Connected c;
  ASSERT_NO_FATAL_FAILURE(open_connected("bp", "inline", c));
  auto& pub = c.pub;
  auto& sub = c.sub;
  std::byte buf[1000] = {};
  int ok = 0;
  std::int64_t r;
  while ((r = pub->offer(buf, sizeof buf)) >= 0) ++ok;
  EXPECT_EQ(r, kBackPressured);
  EXPECT_GT(ok, 200);  // most of the 256 KiB log
  int got = 0;
  while (sub->poll([&](const Message&) { ++got; }, 1000) > 0) {
  }
  EXPECT_EQ(got, ok);
  EXPECT_GE(pub->offer(buf, sizeof buf), 0) << "space again after the subscriber caught up";
}

TEST(ApiTest, InlineModeRefusesASecondPublisherOnOneStream) {
  auto ctx = make(cfg(unique_name("two"), "inline"));
  POLLUX_ASSERT_OK_DECL(a, ctx->publisher("x"));
  auto b = ctx->publisher("x");
  ASSERT_FALSE(b.ok()) << b.status();
  EXPECT_NE(b.status().message().find("already has a publisher in this process"), absl::string_view::npos);
}

TEST(ApiTest, DedicatedModeTakesSeveralPublishingThreadsOnOneStream) {
  const std::string name = unique_name("multi");
  auto ctx = make(cfg(name, "dedicated"));
  POLLUX_ASSERT_OK_DECL(sub, ctx->subscriber("multi"));
  constexpr int kThreads = 3, kEach = 5000;
  std::vector<std::thread> threads;
  std::atomic<int> done{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto pub = ctx->publisher("multi");  // one publisher (endpoint, ring) per thread
      ASSERT_TRUE(pub.ok()) << pub.status();
      while (!pub->is_connected()) std::this_thread::yield();
      for (std::uint32_t i = 0; i < kEach; ++i) {
        const std::uint64_t v = (static_cast<std::uint64_t>(t) << 32) | i;
        while (pub->offer(&v, sizeof v) < 0) std::this_thread::yield();
      }
      // Keep the stream open until every thread is done: closing the last publisher of a
      // stream ends it (a later one would start a new session).
      done.fetch_add(1);
      while (done.load() < kThreads) std::this_thread::yield();
    });
  }
  std::vector<std::uint32_t> next(kThreads, 0);
  int total = 0;
  std::uint64_t last_seq = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (total < kThreads * kEach && std::chrono::steady_clock::now() < deadline) {
    (void)sub->poll(
        [&](const Message& m) {
          std::uint64_t v;
          std::memcpy(&v, m.payload.data(), 8);
          const int t = static_cast<int>(v >> 32);
          EXPECT_EQ(static_cast<std::uint32_t>(v), next[t]++) << "per-thread order";
          EXPECT_EQ(m.sequence, last_seq + 1) << "one stream, one sequence";
          last_seq = m.sequence;
          ++total;
        },
        256);
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(total, kThreads * kEach);
}

TEST(ApiTest, TracedMessagesCarryOrderedStageTimes) {
  for (const std::string mode : {"inline", "dedicated"}) {
    SCOPED_TRACE(mode);
    const std::string name = unique_name("trace");
    auto ctx = make(cfg(name, mode, "[[streams]]\ntopic = \"tr\"\nid = 42\ntrace = true\ntrace_every = 10\n"));
    auto pub = ctx->publisher("tr");
    auto sub = ctx->subscriber("tr");
    ASSERT_EQ(pub->stream_id(), 42u);
    wait_connected(*pub, *sub);
    for (std::uint64_t i = 1; i <= 100; ++i) {
      while (pub->offer(&i, sizeof i) < 0) std::this_thread::yield();
    }
    int traced = 0, seen = 0;
    ASSERT_TRUE(poll_until(*sub, [&] {
      (void)sub->poll(
          [&](const Message& m) {
            ++seen;
            std::uint64_t v;
            ASSERT_EQ(m.payload.size(), 8u);  // the trace block is not part of the payload
            std::memcpy(&v, m.payload.data(), 8);
            EXPECT_EQ(v, m.sequence);
            if (m.trace == nullptr) return;
            ++traced;
            const auto& t = m.trace->ns;
            EXPECT_GT(t[StageTimes::kOffer], 0);
            EXPECT_LE(t[StageTimes::kOffer], t[StageTimes::kPost]);
            EXPECT_LE(t[StageTimes::kPost], t[StageTimes::kReceive]);
            EXPECT_LE(t[StageTimes::kReceive], t[StageTimes::kDelivery]);
            // The reader stamps when it saw the frame (its own clock read, not delivery's).
            EXPECT_LT(t[StageTimes::kReceive], t[StageTimes::kDelivery]);
            // shm has no local send completion: the log write is the send.
            EXPECT_EQ(pub->send_completion_ns(m.sequence), 0);
            if (mode == "dedicated") {
              EXPECT_LE(t[StageTimes::kOffer], t[StageTimes::kRingEnqueue]);
              EXPECT_LE(t[StageTimes::kRingEnqueue], t[StageTimes::kPollerDequeue]);
              EXPECT_LE(t[StageTimes::kPollerDequeue], t[StageTimes::kPost]);
              EXPECT_LE(t[StageTimes::kReceive], t[StageTimes::kRingToSubscriber]);
              EXPECT_LE(t[StageTimes::kRingToSubscriber], t[StageTimes::kDelivery]);
            } else {
              EXPECT_EQ(t[StageTimes::kRingEnqueue], 0);
              EXPECT_EQ(t[StageTimes::kRingToSubscriber], 0);
            }
          },
          100);
      return seen == 100;
    }));
    EXPECT_EQ(traced, 10) << "one message in 10";
  }
}

TEST(ApiTest, EndOfStreamAndNewSessionAreReported) {
  const std::string name = unique_name("eos");
  auto sub_ctx = make(cfg(name, "inline", "", "liveness_timeout_ms = 40\n"));
  POLLUX_ASSERT_OK_DECL(sub, sub_ctx->subscriber("eos"));
  std::vector<StreamEventKind> events;
  std::vector<std::uint64_t> seqs;
  auto drain = [&](int seconds, std::size_t want_events) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (events.size() < want_events && std::chrono::steady_clock::now() < deadline) {
      if (sub->poll([&](const Message& m) { seqs.push_back(m.sequence); }, [](const Gap&) {},
                    [&](const StreamEvent& e) { events.push_back(e.kind); }, 64) == 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    }
  };
  for (int round = 0; round < 2; ++round) {
    auto pub_ctx = make(cfg(name, "inline"));
    POLLUX_ASSERT_OK_DECL(pub, pub_ctx->publisher("eos"));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!pub->is_connected()) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline);
      (void)sub->poll([](const Message&) {}, 1);
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    for (std::uint64_t i = 1; i <= 5; ++i) ASSERT_GE(pub->offer(&i, sizeof i), 0);
    pub->close();
    drain(10, round == 0 ? 2 : 4);
  }
  // Each round: its session announced, 5 messages, end of stream (the first session is
  // announced like the second).
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0], StreamEventKind::kNewSession);
  EXPECT_EQ(events[1], StreamEventKind::kEndOfStream);
  EXPECT_EQ(events[2], StreamEventKind::kNewSession);
  EXPECT_EQ(events[3], StreamEventKind::kEndOfStream);
  EXPECT_EQ(seqs, (std::vector<std::uint64_t>{1, 2, 3, 4, 5, 1, 2, 3, 4, 5}));
}

// A publisher and a subscriber of `topic`, each in its own context of `mode` on a stream unique
// to this test (`tag`), connected.
struct ConnectedPair {
  std::unique_ptr<Context> pub_ctx, sub_ctx;
  std::optional<Publisher> pub;
  std::optional<Subscriber> sub;
};
void open_connected(const char* tag, const char* mode, const char* topic, ConnectedPair* c) {
  const std::string name = unique_name(tag);
  c->pub_ctx = make(cfg(name, mode));
  c->sub_ctx = make(cfg(name, mode));
  ASSERT_TRUE(c->pub_ctx && c->sub_ctx);
  POLLUX_ASSERT_OK_DECL(pub, c->pub_ctx->publisher(topic));
  POLLUX_ASSERT_OK_DECL(sub, c->sub_ctx->subscriber(topic));
  c->pub.emplace(std::move(*pub));
  c->sub.emplace(std::move(*sub));
  wait_connected(*c->pub, *c->sub);
}

// Polls `sub` (each message to `on_message`; 100 us of sleep after an empty poll) until its end
// of stream or 10 s; returns the number of ends seen.
template <typename F>
int poll_until_end(Subscriber& sub, F&& on_message) {
  int ended = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (ended == 0 && std::chrono::steady_clock::now() < deadline) {
    if (sub.poll(
            on_message, [](const Gap&) {},
            [&](const StreamEvent& e) { ended += e.kind == StreamEventKind::kEndOfStream; }, 64) == 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  return ended;
}

// Found by the feed handler (examples/feed_handler): a subscriber that joined a stream and
// received nothing before the publisher closed it never saw kEndOfStream.
TEST(ApiTest, EndOfStreamReachesASubscriberThatReceivedNothing) {
  for (const char* mode : {"inline", "shared", "dedicated"}) {
    SCOPED_TRACE(mode);
    ConnectedPair c;
    ASSERT_NO_FATAL_FAILURE(open_connected("eos-empty", mode, "empty", &c));
    c.pub->close();
    EXPECT_EQ(poll_until_end(*c.sub, [](const Message&) {}), 1);
  }
}

// Found by the feed handler: in queued modes the poller unmapped an ended stream's log while
// the application still held undelivered views into it (SIGSEGV reading the payload).
TEST(ApiTest, EndedStreamStaysMappedUntilItsViewsAreReleased) {
  for (const char* mode : {"shared", "dedicated"}) {
    SCOPED_TRACE(mode);
    ConnectedPair c;
    ASSERT_NO_FATAL_FAILURE(open_connected("eos-views", mode, "views", &c));
    auto& pub = c.pub;
    std::byte buf[512];
    constexpr std::uint64_t kCount = 100;  // fewer than the poller hands out without releases
    for (std::uint64_t i = 1; i <= kCount; ++i) {
      fill_payload(buf, sizeof buf, i);
      while (pub->offer(buf, sizeof buf) == kBackPressured) std::this_thread::yield();
    }
    pub->close();
    // The poller reads everything, sees the end and runs its housekeeping while we hold back.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::uint64_t good = 0;
    const int ended = poll_until_end(*c.sub, [&](const Message& m) {
      good += check_payload(m.payload.data(), static_cast<std::uint32_t>(m.payload.size()), m.sequence);
    });
    EXPECT_EQ(good, kCount);
    EXPECT_EQ(ended, 1);
  }
}

TEST(ApiTest, OfferBatchDeliversEveryMessageInOrder) {
  for (const char* mode : {"inline", "dedicated"}) {
    SCOPED_TRACE(mode);
    Connected c;
    ASSERT_NO_FATAL_FAILURE(open_connected("batch", mode, c));
    auto& pub = c.pub;
    auto& sub = c.sub;
    constexpr std::uint64_t kCount = 50000;  // several laps of the 256 KiB log, in batches of 100
    std::vector<std::vector<std::byte>> bufs(100);
    std::vector<std::span<const std::byte>> views(100);
    std::uint64_t next_out = 1, next_in = 1;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (next_in <= kCount && std::chrono::steady_clock::now() < deadline) {
      if (next_out <= kCount) {
        const std::uint64_t n = std::min<std::uint64_t>(100, kCount - next_out + 1);
        for (std::uint64_t k = 0; k < n; ++k) {
          const std::uint64_t s = next_out + k;
          bufs[k].resize(payload_len(s, 300));
          fill_payload(bufs[k].data(), static_cast<std::uint32_t>(bufs[k].size()), s);
          views[k] = bufs[k];
        }
        const std::int64_t r = pub->offer_batch({views.data(), n});
        if (r > 0)
          next_out += static_cast<std::uint64_t>(r);
        else
          ASSERT_EQ(r, kBackPressured);
      }
      (void)sub->poll(
          [&](const Message& m) {
            ASSERT_EQ(m.sequence, next_in);
            ASSERT_TRUE(check_payload(m.payload.data(), static_cast<std::uint32_t>(m.payload.size()), next_in));
            ++next_in;
          },
          [](const Gap& g) { FAIL() << "gap " << g.from << "+" << g.count; }, 256);
    }
    EXPECT_EQ(next_in, kCount + 1);
  }
}

TEST(ApiTest, CorruptSegmentIsRejectedWithAClearError) {
  const std::string name = unique_name("corrupt");
  auto ctx = make(cfg(name, "inline"));
  const std::uint32_t id = ctx->stream_id("bad");
  const std::string path = "/dev/shm/pollux-" + name + "-stream-" + std::to_string(id) + ".log";
  const int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0600);
  ASSERT_GE(fd, 0);
  std::vector<char> junk(1 << 20, 'Z');
  ASSERT_EQ(::write(fd, junk.data(), junk.size()), static_cast<ssize_t>(junk.size()));
  ::close(fd);
  auto sub = ctx->subscriber("bad");
  ASSERT_FALSE(sub.ok()) << sub.status();
  EXPECT_NE(sub.status().message().find("bad magic"), absl::string_view::npos) << sub.status();
  EXPECT_NE(sub.status().message().find(path), absl::string_view::npos) << sub.status();
  ::unlink(path.c_str());
}

TEST(ApiTest, ConfigErrorsSurfaceFromTheContext) {
  auto c = Context::from_string("[runtime]\nthreading = \"dedicted\"\n", "feed.toml");
  ASSERT_FALSE(c.ok()) << c.status();
  EXPECT_EQ(std::string(c.status().message()),
            "feed.toml:2: runtime.threading: expected dedicated|shared|inline, got \"dedicted\"");
  auto d = Context::from_string("[runtime]\ndevice = \"mlx5_99\"\n", "feed.toml");
  ASSERT_FALSE(d.ok()) << d.status();
  EXPECT_NE(d.status().message().find("device 'mlx5_99' not found"), absl::string_view::npos) << d.status();
  auto t = Context::from_string("[transport]\nkind = \"tcp\"\n", "feed.toml");
  ASSERT_FALSE(t.ok()) << t.status();
  EXPECT_EQ(std::string(t.status().message()), "feed.toml:2: transport.kind: expected shm|udp|rdma, got \"tcp\"");
}

TEST(ApiTest, CountersAreReadableFromTheFile) {
  Connected c;
  ASSERT_NO_FATAL_FAILURE(open_connected("ctr", "inline", c));
  auto& pub = c.pub;
  auto& sub = c.sub;
  for (std::uint64_t i = 0; i < 10; ++i) ASSERT_GE(pub->offer(&i, sizeof i), 0);
  int n = 0;  // messages (poll() also counts the session's announcement)
  while (n < 10) (void)sub->poll([&](const Message&) { ++n; }, 10);
  POLLUX_ASSERT_OK_DECL(snap, core::read_counters_file(c.ctx->counters_path()));
  std::uint64_t pub_msgs = 0, sub_msgs = 0, pub_bytes = 0;
  for (const auto& c : snap->counters) {
    if (c.scope.rfind("pub stream", 0) == 0 && c.name == "messages") pub_msgs = c.value;
    if (c.scope.rfind("pub stream", 0) == 0 && c.name == "bytes") pub_bytes = c.value;
    if (c.scope.rfind("sub stream", 0) == 0 && c.name == "messages") sub_msgs = c.value;
  }
  EXPECT_EQ(pub_msgs, 10u);
  EXPECT_EQ(pub_bytes, 80u);
  EXPECT_EQ(sub_msgs, 10u);
}

// An application's own counters land in the same file, under its scope and name.
TEST(ApiTest, ApplicationCountersAreReadableFromTheFile) {
  auto ctx = make(cfg(unique_name("appctr"), "inline"));
  AppCounter a = ctx->counter("feed live", "packets_a");
  AppCounter b = ctx->counter("feed live", "stale");
  a.add(3);
  a.add();
  b.set(7);
  EXPECT_EQ(a.get(), 4u);
  AppCounter none;  // default-constructed: counts nothing, reads 0
  none.add(5);
  EXPECT_EQ(none.get(), 0u);
  POLLUX_ASSERT_OK_DECL(snap, core::read_counters_file(ctx->counters_path()));
  std::uint64_t va = 0, vb = 0;
  for (const auto& c : snap->counters) {
    if (c.scope == "feed live" && c.name == "packets_a") va = c.value;
    if (c.scope == "feed live" && c.name == "stale") vb = c.value;
  }
  EXPECT_EQ(va, 4u);
  EXPECT_EQ(vb, 7u);
}

TEST(ApiTest, HandlesOutliveTheContext) {
  auto ctx = make(cfg(unique_name("life"), "dedicated"));
  POLLUX_ASSERT_OK_DECL(pub, ctx->publisher("life"));
  POLLUX_ASSERT_OK_DECL(sub, ctx->subscriber("life"));
  ctx.reset();
  const int v = 1;
  EXPECT_EQ(pub->offer(&v, sizeof v), kClosed);
  EXPECT_EQ(sub->poll([](const Message&) {}, 10), 0);
  EXPECT_FALSE(sub->is_connected());
}

// pollux::now_ns() is the clock of Message::publisher_ns (pollux/clock.h): CLOCK_MONOTONIC's
// time line, shared by the library's stamps. Bracketing reads make the checks independent of
// how long any step takes.
TEST(ApiTest, PublicNowNsIsTheClockOfPublisherNs) {
  auto mono = [] {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
  };
  auto ctx = make(cfg(unique_name("now"), "inline"));  // maps the host's TSC conversion
  ASSERT_NE(ctx, nullptr);
  // Within the conversion's tolerance of CLOCK_MONOTONIC (kClockTolerance_ns, 20 us; 1 ms
  // allowed here for a conversion another process is about to correct).
  constexpr std::int64_t kSlack = 1'000'000;
  for (int i = 0; i < 1000; ++i) {
    const std::int64_t before = mono();
    const std::int64_t now = pollux::now_ns();
    const std::int64_t after = mono();
    ASSERT_GE(now, before - kSlack);
    ASSERT_LE(now, after + kSlack);
  }
  POLLUX_ASSERT_OK_DECL(pub, ctx->publisher("now"));
  POLLUX_ASSERT_OK_DECL(sub, ctx->subscriber("now"));
  wait_connected(*pub, *sub);
  const std::int64_t before = pollux::now_ns();
  const int v = 7;
  ASSERT_GE(pub->offer(&v, sizeof v), 0);
  const std::int64_t after = pollux::now_ns();
  std::int64_t stamp = 0;
  ASSERT_TRUE(poll_until(*sub, [&] {
    (void)sub->poll([&](const Message& m) { stamp = m.publisher_ns; }, 10);
    return stamp != 0;
  }));
  EXPECT_GE(stamp, before);
  EXPECT_LE(stamp, after);
}

// describe() says what really runs: the threading mode's threads and how they idle (inline:
// no thread idles, the application polls), the transport with its configuration, and one line
// per open stream with the transport it goes over.
TEST(ApiTest, DescribeNamesTheTransportAndWhatIdles) {
  const std::string name = unique_name("describe");
  {
    auto c = make(cfg(name, "inline"));
    ASSERT_NE(c, nullptr);
    POLLUX_ASSERT_OK_DECL(pub, c->publisher("quotes"));
    POLLUX_ASSERT_OK_DECL(sub, c->subscriber("quotes"));
    const std::string d = c->describe();
    EXPECT_NE(d.find("threading: inline: no poller thread"), std::string::npos) << d;
    EXPECT_NE(d.find("runtime.idle = \"yield\" is not used"), std::string::npos) << d;
    EXPECT_EQ(d.find("idling with"), std::string::npos) << d;
    EXPECT_NE(d.find("transport: shm (every stream): a 256KiB log per stream"), std::string::npos) << d;
    EXPECT_NE(d.find("flow control backpressure"), std::string::npos) << d;
    const std::string id = std::to_string(c->stream_id("quotes"));
    EXPECT_NE(d.find("stream:    " + id + " \"quotes\" publisher over shm"), std::string::npos) << d;
    EXPECT_NE(d.find("stream:    " + id + " \"quotes\" subscriber over shm"), std::string::npos) << d;
  }
  {
    auto c = make(cfg(name + "s", "shared"));
    ASSERT_NE(c, nullptr);
    const std::string d = c->describe();
    EXPECT_NE(d.find("threading: shared: 1 poller thread for every stream, idling with yield"), std::string::npos) << d;
    EXPECT_EQ(d.find("stream:"), std::string::npos) << d;  // none open
  }
  {
    auto c = make("[runtime]\nname = \"" + name +
                  "u\"\nthreading = \"dedicated\"\npollers = 1\nidle = \"backoff\"\n"
                  "counters = false\n[transport]\nkind = \"udp\"\n[udp]\naddress = \"239.255.0.9\"\nport = 41000\n"
                  "interface = \"lo\"\nsocket_rcvbuf = \"1GiB\"\n");
    ASSERT_NE(c, nullptr);
    const std::string d = c->describe();
    EXPECT_NE(d.find("threading: dedicated: 1 poller thread(s), each idling with backoff"), std::string::npos) << d;
    EXPECT_NE(d.find("transport: udp (every stream): 239.255.0.9:41000 on interface lo, socket_rcvbuf 1GiB"),
              std::string::npos)
        << d;
    // The kernel caps SO_RCVBUF at net.core.rmem_max: the line says what a socket really gets.
    long long rmem_max = -1;
    if (std::FILE* f = std::fopen("/proc/sys/net/core/rmem_max", "r")) {
      if (std::fscanf(f, "%lld", &rmem_max) != 1) rmem_max = -1;
      std::fclose(f);
    }
    ASSERT_GT(rmem_max, 0);
    EXPECT_NE(d.find(rmem_max < (1ll << 30) ? "capped by net.core.rmem_max" : "net.core.rmem_max"), std::string::npos)
        << d;
  }
}

}  // namespace
}  // namespace pollux
