// Interrupt mode. The reader's half (LogReader::arm, ShmRxEndpoint's inline
// hooks, the per-poller ShmPollerSource), the writer's half (LogWriter::publish_tail's wake
// check), hostile advertisements, and lost-wakeup stress across processes.
#include <errno.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/clock.h"
#include "core/counters.h"
#include "core/poller.h"
#include "core/wakeup.h"
#include "pollux/pollux.h"
#include "tests/shm/test_util.h"
#include "tests/support/threads.h"
#include "transport/shm/shm_config.h"
#include "transport/shm/shm_log.h"
#include "transport/shm/shm_segment.h"
#include "transport/shm/shm_transport.h"

namespace pollux::transport::shm {
namespace {

using pollux::testing::unique_name;

// ---- in one process: the arm protocol, step by step ------------------------------------------------

// Waits for `done` to hold; false only when it never does (60 s: far above any delay a loaded
// machine causes).
template <typename F>
bool eventually(F&& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return true;
}

std::uint64_t counter_value(const std::string& path, const std::string& scope, const std::string& name) {
  auto snap = core::read_counters_file(path);
  if (!snap.ok()) return 0;
  std::uint64_t v = 0;
  for (const auto& c : snap->counters) {
    if (c.scope == scope && c.name == name) v += c.value;
  }
  return v;
}

class WakeFixture : public ::testing::Test {
 protected:
  void SetUp() override { open(/*sleep_timer_ms=*/0); }
  void TearDown() override {
    g_sleeper_global_barrier = core::global_sleeper_barrier;
    rx_.clear();
    if (tx_ != nullptr) tx_->close_st();
    tx_.reset();
    transport_.reset();
  }

  void open(std::uint32_t sleep_timer_ms) {
    cfg_ = pollux::testing::shm_config(unique_name("wake"), 64 << 10, shm::FlowControl::kLossy);
    shm::config(cfg_).max_subscribers = 64;
    cfg_.runtime.sleep_timer_ms = sleep_timer_ms;
    env_ = TransportEnv{&cfg_, nullptr, nullptr};
    transport_ = std::make_unique<ShmTransport>(env_);
    auto tx = ShmTxEndpoint::open(env_, EndpointSpec{1, "t", nullptr, -1});
    ASSERT_TRUE(tx.ok()) << tx.status();
    tx_ = std::move(*tx);
    auto src = transport_->poller_source(0);
    ASSERT_TRUE(src.ok()) << src.status();
    source_ = static_cast<ShmPollerSource*>(*src);
  }

  // An rx endpoint driven by poller 0 (joins the source on its first poll), or inline (-1).
  ShmRxEndpoint* add_rx(int poller) {
    auto ep = transport_->open_rx(EndpointSpec{1, "t", nullptr, poller});
    EXPECT_TRUE(ep.ok()) << ep.status();
    if (!ep.ok()) return nullptr;
    rx_.emplace_back(static_cast<ShmRxEndpoint*>(ep->release()));
    drain(rx_.back().get());
    return rx_.back().get();
  }

  void publish(std::uint64_t n, bool flush = true) {
    LogWriter& w = tx_->writer();
    for (std::uint64_t i = 0; i < n; ++i) {
      LogWriter::Claim c;
      ASSERT_TRUE(w.try_claim(core::kFrameHeaderSize + 64, &c));
      std::memcpy(c.frame + core::kFrameHeaderSize, &sent_, sizeof sent_);
      ++sent_;
      if (flush) {
        w.commit(c, 0, core::Clock::now_ns());
      } else {
        w.commit_deferred(c, 0, core::Clock::now_ns());
      }
    }
  }

  // Polls (and releases) everything readable; returns the messages seen.
  std::uint64_t drain(ShmRxEndpoint* ep) {
    std::uint64_t got = 0;
    RxDesc buf[64];
    for (int i = 0; i < 1000; ++i) {
      const std::uint32_t n = ep->poll_st({buf, 64});
      for (std::uint32_t k = 0; k < n; ++k) got += buf[k].kind == RxKind::kMessage;
      ep->release_st({buf, n}, true);
      if (n == 0) break;
    }
    return got;
  }

  WakeState& wake() { return rx_.front()->segment()->header()->wake; }

  core::Config cfg_;
  TransportEnv env_;
  std::unique_ptr<ShmTransport> transport_;
  std::unique_ptr<ShmTxEndpoint> tx_;
  std::vector<std::unique_ptr<ShmRxEndpoint>> rx_;
  ShmPollerSource* source_ = nullptr;
  std::uint64_t sent_ = 0;
};

TEST_F(WakeFixture, SourceArmsOnAnIdleLogAndRefusesWithDataPending) {
  ShmRxEndpoint* ep = add_rx(0);
  ASSERT_NE(ep, nullptr);
  ASSERT_NE(ep->segment(), nullptr);
  EXPECT_EQ(source_->endpoints(), 1u);

  ASSERT_TRUE(source_->try_arm());
  core::FutexWait w[8];
  ASSERT_EQ(source_->futex_waits({w, 8}), 1u);
  EXPECT_EQ(w[0].word, &wake().word);
  EXPECT_TRUE(w[0].shared);
  EXPECT_EQ(w[0].expected, wake().word.load());
  EXPECT_NE(wake().sleepers.load(), 0u);  // advertised
  source_->disarm();
  EXPECT_EQ(wake().sleepers.load(), 0u);  // and withdrawn

  publish(1);
  EXPECT_FALSE(source_->try_arm());  // a frame is waiting
  EXPECT_EQ(wake().sleepers.load(), 0u) << "a refusing arm leaves nothing advertised";
  EXPECT_EQ(drain(ep), 1u);
  EXPECT_TRUE(source_->try_arm());
  source_->disarm();

  // A batch in progress: none of its frames is readable before its flush (the first holds its
  // sequence back), so the reader may sleep, and the flush must wake it.
  publish(2, /*flush=*/false);
  EXPECT_TRUE(source_->try_arm()) << "nothing of an unfinished batch is readable";
  const std::uint32_t word = wake().word.load();
  tx_->writer().flush_tail();
  EXPECT_NE(wake().word.load(), word) << "the batch's flush woke the armed reader";
  EXPECT_EQ(wake().sleepers.load(), 0u);
  source_->disarm();
  EXPECT_EQ(drain(ep), 2u);
  EXPECT_TRUE(source_->try_arm());
  source_->disarm();

  // The publisher closes: the end of the stream is an event to deliver, not a reason to sleep.
  tx_->writer().close();
  EXPECT_FALSE(source_->try_arm());
}

TEST_F(WakeFixture, WriterWakesOnlyWhenSomeoneSleeps) {
  ShmRxEndpoint* ep = add_rx(0);
  ASSERT_NE(ep, nullptr);
  publish(100);  // nobody sleeps: no wake-up, no syscall
  EXPECT_EQ(tx_->writer().wakes(), 0u);
  EXPECT_EQ(drain(ep), 100u);

  ASSERT_TRUE(source_->try_arm());
  core::FutexWait w[8];
  ASSERT_EQ(source_->futex_waits({w, 8}), 1u);
  publish(1);
  EXPECT_EQ(tx_->writer().wakes(), 1u);
  EXPECT_NE(w[0].word->load(), w[0].expected) << "the sleeper's futex wait would return at once";
  EXPECT_EQ(wake().sleepers.load(), 0u);  // the writer cleared the advertisements it answered
  publish(10);
  EXPECT_EQ(tx_->writer().wakes(), 1u) << "one wake-up per sleep, not one per message";
  source_->disarm();
  EXPECT_EQ(drain(ep), 11u);
}

TEST_F(WakeFixture, ASleepingThreadIsWokenByTheWriter) {
  ShmRxEndpoint* ep = add_rx(0);
  ASSERT_NE(ep, nullptr);
  for (int round = 0; round < 200; ++round) {
    ASSERT_TRUE(source_->try_arm());
    core::FutexWait w[8];
    ASSERT_EQ(source_->futex_waits({w, 8}), 1u);
    std::atomic<bool> woke{false};
    std::atomic<pid_t> tid{0};
    std::thread sleeper([&] {
      tid = ::gettid();
      // 10 s: a lost wake-up fails the test instead of hanging it.
      const int r = core::futex_wait_any({w, 1}, 10'000'000'000);
      woke.store(r == 0);
    });
    if (round % 2 == 0) {  // every other round the writer finds the thread asleep in the futex
      EXPECT_TRUE(eventually([&] { return tid != 0 && pollux::testing::thread_sleeping(tid); })) << "round " << round;
    }
    publish(1);
    sleeper.join();
    EXPECT_TRUE(woke.load()) << "round " << round;
    source_->disarm();
    ASSERT_EQ(drain(ep), 1u);
  }
}

TEST_F(WakeFixture, InlineEndpointArmsAndWaitsOnTheSegmentWord) {
  ShmRxEndpoint* ep = add_rx(-1);
  ASSERT_NE(ep, nullptr);
  EXPECT_EQ(source_->endpoints(), 0u) << "an inline endpoint does not join a poller";
  ASSERT_TRUE(ep->try_arm_st());
  core::FutexWait w[4];
  ASSERT_EQ(ep->futex_waits_st({w, 4}), 1u);
  EXPECT_EQ(w[0].word, &wake().word);
  EXPECT_TRUE(w[0].shared);
  publish(1);
  EXPECT_NE(w[0].word->load(), w[0].expected);
  ep->disarm_st();
  EXPECT_FALSE(ep->try_arm_st());  // data
  EXPECT_EQ(drain(ep), 1u);
  EXPECT_TRUE(ep->try_arm_st());
  ep->disarm_st();
  EXPECT_EQ(ep->sleeps(), 2u);
}

TEST_F(WakeFixture, HostileAdvertisementCostsWakeupsNotCorrectness) {
  ShmRxEndpoint* ep = add_rx(0);
  ASSERT_NE(ep, nullptr);
  // Bits nobody owns (another process forging the word, or a reader that died asleep).
  std::uint64_t got = 0;
  for (int i = 0; i < 1000; ++i) {
    wake().sleepers.store(~std::uint64_t{0});
    publish(1);
    got += drain(ep);
  }
  EXPECT_EQ(got, 1000u);
  EXPECT_EQ(tx_->writer().wakes(), 1000u);  // each forgery costs the writer one FUTEX_WAKE
  // The word bumped by those wake-ups does not confuse a real sleeper.
  ASSERT_TRUE(source_->try_arm());
  core::FutexWait w[8];
  ASSERT_EQ(source_->futex_waits({w, 8}), 1u);
  EXPECT_EQ(w[0].expected, wake().word.load());
  publish(1);
  EXPECT_NE(w[0].word->load(), w[0].expected);
  source_->disarm();
  EXPECT_EQ(drain(ep), 1u);
  // A forged word (the futex value) only makes sleepers wake early.
  ASSERT_TRUE(source_->try_arm());
  ASSERT_EQ(source_->futex_waits({w, 8}), 1u);
  wake().word.store(w[0].expected + 12345);
  EXPECT_EQ(core::futex_wait_any({w, 1}, 1'000'000'000), 0);  // returns at once, not after 1 s
  source_->disarm();
  // A dead reader's bit: cleared by the first wake-up, then free again.
  wake().sleepers.store(std::uint64_t{1} << 40);
  const std::uint64_t before = tx_->writer().wakes();
  publish(100);
  EXPECT_EQ(tx_->writer().wakes(), before + 1);
  EXPECT_EQ(drain(ep), 100u);
}

TEST_F(WakeFixture, AReaderThatCannotBeWokenKeepsItsPollerAwake) {
  if (tx_->writer().full_fence()) {
    GTEST_SKIP() << "this kernel has no global expedited membarrier: the writer fences fully and any reader can sleep";
  }
  g_sleeper_global_barrier = []() noexcept { return false; };
  ShmRxEndpoint* ep = add_rx(0);
  ASSERT_NE(ep, nullptr);
  EXPECT_FALSE(source_->try_arm());
  EXPECT_FALSE(ep->try_arm_st());
  EXPECT_GE(ep->unwakeable(), 2u);
  EXPECT_EQ(wake().sleepers.load(), 0u);
  g_sleeper_global_barrier = core::global_sleeper_barrier;
  EXPECT_TRUE(source_->try_arm());
  source_->disarm();
}

// The same through a real poller in interrupt mode (sleep_timer_ms = 0): it never sleeps, and
// counts the refusals; once the reader can be woken again, it sleeps.
TEST_F(WakeFixture, APollerWithAnUnwakeableReaderNeverSleeps) {
  if (tx_->writer().full_fence()) GTEST_SKIP() << "no global expedited membarrier on this kernel";
  g_sleeper_global_barrier = []() noexcept { return false; };
  ShmRxEndpoint* ep = add_rx(0);
  ASSERT_NE(ep, nullptr);
  auto counters = core::CountersFile::create("/dev/shm", unique_name("wakepoller"));
  ASSERT_TRUE(counters.ok()) << counters.status();
  auto value = [&](const char* name) { return counter_value((*counters)->path(), "poller 0", name); };
  {
    core::Poller poller(0, cfg_, counters->get());
    poller.add_source(source_);
    const absl::Status started = poller.start(core::IdleKind::kInterrupt, -1);
    ASSERT_TRUE(started.ok()) << started;
    ASSERT_TRUE(eventually([&] { return value("arm_refused") >= 100; }));
    EXPECT_EQ(value("sleeps"), 0u);
    poller.stop();
  }
  g_sleeper_global_barrier = core::global_sleeper_barrier;
  {
    core::Poller poller(0, cfg_, counters->get());
    poller.add_source(source_);
    const absl::Status started = poller.start(core::IdleKind::kInterrupt, -1);
    ASSERT_TRUE(started.ok()) << started;
    ASSERT_TRUE(eventually([&] { return value("sleeps") != 0; }));
    poller.stop();
  }
  EXPECT_GT(ep->unwakeable(), 0u);
}

TEST_F(WakeFixture, NoPublisherMeansNoSleepWithoutATimer) {
  tx_->close_st();  // unlinks the segment
  tx_.reset();
  ShmRxEndpoint* ep = add_rx(0);
  ASSERT_NE(ep, nullptr);
  ASSERT_EQ(ep->segment(), nullptr);
  EXPECT_FALSE(source_->try_arm()) << "nothing could wake it when a publisher appears";
  EXPECT_FALSE(ep->try_arm_st());
}

TEST(ShmWakeSource, NoPublisherWithATimerMaySleep) {
  core::Config cfg = pollux::testing::shm_config(unique_name("waketimer"), 64 << 10, shm::FlowControl::kLossy);
  cfg.runtime.sleep_timer_ms = 10;
  TransportEnv env{&cfg, nullptr, nullptr};
  ShmTransport t(env);
  auto src = t.poller_source(0);
  ASSERT_TRUE(src.ok()) << src.status();
  auto ep = t.open_rx(EndpointSpec{1, "t", nullptr, 0});
  ASSERT_TRUE(ep.ok()) << ep.status();
  RxDesc buf[4];
  EXPECT_EQ((*ep)->poll_st({buf, 4}), 0u);  // joins the source
  ASSERT_TRUE((*src)->try_arm());           // the poller's timer retries the attach
  core::FutexWait w[4];
  EXPECT_EQ((*src)->futex_waits({w, 4}), 0u);
  (*src)->disarm();
  (*ep)->close_st();
}

TEST_F(WakeFixture, MoreEndpointsThanFitRefuse) {
  for (std::uint32_t i = 0; i < ShmPollerSource::kMaxEndpoints; ++i) ASSERT_NE(add_rx(0), nullptr);
  EXPECT_TRUE(source_->try_arm());
  core::FutexWait w[64];
  // One word per endpoint: each maps the segment at its own address (the same shared futex).
  EXPECT_EQ(source_->futex_waits({w, 64}), ShmPollerSource::kMaxEndpoints);
  source_->disarm();
  ShmRxEndpoint* extra = add_rx(0);
  ASSERT_NE(extra, nullptr);
  EXPECT_FALSE(source_->try_arm()) << "an endpoint it cannot wait on";
  extra->close_st();
  EXPECT_TRUE(source_->try_arm());
  source_->disarm();
}

TEST_F(WakeFixture, FutexWaitsThatDoNotFitWakeAtOnce) {
  ShmRxEndpoint* ep = add_rx(0);
  ASSERT_NE(ep, nullptr);
  // A second stream (another segment, another word).
  auto tx2 = ShmTxEndpoint::open(env_, EndpointSpec{2, "u", nullptr, -1});
  ASSERT_TRUE(tx2.ok()) << tx2.status();
  auto ep2 = transport_->open_rx(EndpointSpec{2, "u", nullptr, 0});
  ASSERT_TRUE(ep2.ok()) << ep2.status();
  RxDesc buf[4];
  (void)(*ep2)->poll_st({buf, 4});
  ASSERT_TRUE(source_->try_arm());
  core::FutexWait w[2];
  ASSERT_EQ(source_->futex_waits({w, 2}), 2u);
  EXPECT_NE(w[0].word, w[1].word);
  ASSERT_EQ(source_->futex_waits({w, 1}), 1u);
  EXPECT_NE(w[0].word->load(), w[0].expected) << "a word that differs: futex_wait returns at once";
  source_->disarm();
  (*ep2)->close_st();
  (*tx2)->close_st();
}

// ---- across processes: lost-wakeup stress -------------------------------------------------------

std::uint64_t env_count(const char* name, std::uint64_t dflt) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 10) : dflt;
}

// Release on the 2-core box: ~40 us (inline) and ~80 us (dedicated) per round, with 1.2-2.3
// sleep/wake transitions per round - about 1,000,000 transitions in ~30 s for each test.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr std::uint64_t kInlineRounds = 20'000, kDedicatedRounds = 10'000;
#else
constexpr std::uint64_t kInlineRounds = 800'000, kDedicatedRounds = 450'000;
#endif

std::string stress_config(const std::string& name, const char* threading) {
  return "[runtime]\nname = \"" + name + "\"\nthreading = \"" + threading +
         "\"\npollers = 1\nidle = \"interrupt\"\nsleep_timer_ms = 0\ncounters = true\n[shm]\nlog_size = \"256KiB\"\n"
         "flow_control = \"backpressure\"\n";
}

// late: delivered > 100 ms after its offer. A lost wake-up (with sleep_timer_ms = 0 nothing else
// ends the wait) shows as a wait that times out (kWaitUs) followed by the message: late_lost.
// A late message whose wait was ended by a wake-up was late for the scheduler (an overloaded
// host), not for the protocol: late_sched, reported, not a failure.
struct Result {
  std::uint64_t received = 0, late_lost = 0, late_sched = 0, bad = 0, sleeps = 0, waits_timed_out = 0;
  std::int64_t max_delay_ns = 0;
  int failed = 0;
};

constexpr std::int64_t kLateNs = 100'000'000;  // 100 ms
constexpr std::int64_t kWaitUs = 2'000'000;    // a wake-up lost for 2 s shows as a late message
constexpr std::int64_t kStallNs = 20'000'000'000;

void idle_nap() {
  timespec ts{0, 50'000};
  nanosleep(&ts, nullptr);
}

// One side of the ping-pong: echo_side offers on `out` what it receives on `in` (the parent);
// the other (the child) offers `rounds` pings and waits for each pong.
Result run_side(Context& ctx, const char* in, const char* out, std::uint64_t rounds, bool initiator) {
  Result r;
  auto sub = ctx.subscriber(in);
  auto pub = ctx.publisher(out);
  if (!sub.ok() || !pub.ok()) {
    r.failed = 1;
    return r;
  }
  const std::int64_t t0 = core::Clock::now_ns();
  while (!pub->is_connected() || !sub->is_connected()) {
    (void)sub->poll([](const Message&) {}, 16);
    idle_nap();
    if (core::Clock::now_ns() - t0 > kStallNs) {
      r.failed = 2;
      return r;
    }
  }
  auto offer = [&](std::uint64_t v) {
    for (;;) {
      const std::int64_t rc = pub->offer(&v, sizeof v);
      if (rc >= 0) return true;
      if (rc == kClosed) return false;
      (void)pub->service();
      idle_nap();
    }
  };
  std::uint64_t next = 0;  // the value expected next
  bool timed_out = false;  // the last wait ended by its timeout, not by a wake-up
  std::int64_t last_progress = core::Clock::now_ns();
  if (initiator && !offer(0)) r.failed = 3;
  while (r.failed == 0 && next < rounds) {
    std::uint64_t got_any = 0;
    const int n = sub->poll(
        [&](const Message& m) {
          std::uint64_t v = ~std::uint64_t{0};
          if (m.payload.size() == sizeof v) std::memcpy(&v, m.payload.data(), sizeof v);
          const std::int64_t delay = core::Clock::now_ns() - m.publisher_ns;
          r.max_delay_ns = std::max(r.max_delay_ns, delay);
          if (delay > kLateNs) ++(timed_out ? r.late_lost : r.late_sched);
          if (v != next) ++r.bad;
          next = v + 1;
          ++r.received;
          ++got_any;
        },
        [&](const Gap&) { ++r.bad; }, [&](const StreamEvent&) {}, 16);
    if (n > 0) {
      last_progress = core::Clock::now_ns();
      timed_out = false;
    }
    if (got_any != 0) {
      // Answer (echo) or send the next ping.
      if (initiator ? next < rounds : true) {
        if (!offer(next - (initiator ? 0 : 1))) r.failed = 4;
      }
      continue;
    }
    if (n > 0) continue;
    timed_out = !sub->wait(kWaitUs);
    if (timed_out) ++r.waits_timed_out;
    if (core::Clock::now_ns() - last_progress > kStallNs) r.failed = 5;  // a lost wake-up, for good
  }
  return r;
}

void report(int fd, const Result& r) {
  (void)!write(fd, &r, sizeof r);
  close(fd);
}

struct StressOutcome {
  Result parent, child;
  double seconds = 0;
  std::uint64_t parent_sleeps = 0, child_sleeps = 0, poller_sleeps = 0, poller_wakeups = 0;
  int child_status = -1;
};

// The child publishes pings (inline, waiting with Subscriber::wait); the parent echoes them in
// `parent_threading` mode. Both ends run runtime.idle = "interrupt", sleep_timer_ms = 0.
StressOutcome stress(const char* parent_threading, std::uint64_t rounds) {
  StressOutcome o;
  const std::string name = unique_name("wakestress");
  int pipefd[2];
  if (pipe(pipefd) != 0) return o;
  // Fork before this process touches any Pollux state (clock, membarrier registration).
  const pid_t pid = fork();
  if (pid == 0) {
    close(pipefd[0]);
    Result r;
    {
      auto ctx = Context::from_string(stress_config(name, "inline"), "child.toml");
      if (!ctx.ok()) {
        r.failed = 10;
      } else {
        r = run_side(**ctx, "pong", "ping", rounds, /*initiator=*/true);
        r.sleeps = counter_value((*ctx)->counters_path(), "shm sub stream " + std::to_string((*ctx)->stream_id("pong")),
                                 "sleeps");
      }
    }
    report(pipefd[1], r);
    _exit(0);
  }
  close(pipefd[1]);
  const auto t0 = std::chrono::steady_clock::now();
  {
    // The same runtime.name on both sides (it names the segments); counters files are per pid.
    std::string cfg = stress_config(name, parent_threading);
    auto ctx = Context::from_string(cfg, "parent.toml");
    if (ctx.ok()) {
      o.parent = run_side(**ctx, "ping", "pong", rounds, /*initiator=*/false);
      o.parent_sleeps = counter_value((*ctx)->counters_path(),
                                      "shm sub stream " + std::to_string((*ctx)->stream_id("ping")), "sleeps");
      o.poller_sleeps = counter_value((*ctx)->counters_path(), "poller 0", "sleeps");
      o.poller_wakeups = counter_value((*ctx)->counters_path(), "poller 0", "wakeups");
      Result c;
      if (read(pipefd[0], &c, sizeof c) == static_cast<ssize_t>(sizeof c)) o.child = c;
    } else {
      o.parent.failed = 20;
      kill(pid, SIGKILL);
    }
  }
  o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  close(pipefd[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  o.child_status = st;
  o.child_sleeps = o.child.sleeps;
  return o;
}

void check(const StressOutcome& o, std::uint64_t rounds, std::uint64_t transitions) {
  EXPECT_EQ(o.parent.failed, 0);
  EXPECT_EQ(o.child.failed, 0);
  EXPECT_EQ(o.parent.received, rounds);
  EXPECT_EQ(o.child.received, rounds);
  EXPECT_EQ(o.parent.bad + o.child.bad, 0u) << "out of order or gaps";
  EXPECT_EQ(o.parent.late_lost + o.child.late_lost, 0u)
      << "messages delivered > 100 ms after their offer, found after a wait timed out: lost wake-ups";
  // A wait that ended by its timeout is not a failure by itself: the peer may not have run for
  // 2 s on an overloaded host. A lost wake-up shows as a message that was waiting while the
  // reader slept (late_lost, above) or, for good, as a stall (failed).
  std::printf(
      "rounds %llu in %.1f s (%.1f us/round): sleep/wake transitions %llu (child waits %llu, parent waits %llu, "
      "parent poller sleeps %llu wakeups %llu); max delay parent %.1f us child %.1f us; late (> 100 ms) after a "
      "wake-up (scheduling) %llu; waits ended by their 2 s timeout %llu\n",
      static_cast<unsigned long long>(rounds), o.seconds, o.seconds * 1e6 / static_cast<double>(rounds),
      static_cast<unsigned long long>(transitions), static_cast<unsigned long long>(o.child_sleeps),
      static_cast<unsigned long long>(o.parent_sleeps), static_cast<unsigned long long>(o.poller_sleeps),
      static_cast<unsigned long long>(o.poller_wakeups), o.parent.max_delay_ns / 1e3, o.child.max_delay_ns / 1e3,
      static_cast<unsigned long long>(o.parent.late_sched + o.child.late_sched),
      static_cast<unsigned long long>(o.parent.waits_timed_out + o.child.waits_timed_out));
  // Nearly every message must have found its reader asleep, or the test proves little.
  EXPECT_GE(transitions, rounds) << "too few sleeps: the test did not exercise the wake-up path";
}

TEST(ShmWakeStress, InlineWaitAcrossProcessesLosesNoWakeup) {
  const std::uint64_t rounds = env_count("POLLUX_WAKE_STRESS_ROUNDS", kInlineRounds);
  const StressOutcome o = stress("inline", rounds);
  check(o, rounds, o.child_sleeps + o.parent_sleeps);
}

TEST(ShmWakeStress, DedicatedPollerAcrossProcessesLosesNoWakeup) {
  const std::uint64_t rounds = env_count("POLLUX_WAKE_STRESS_ROUNDS", kDedicatedRounds);
  const StressOutcome o = stress("dedicated", rounds);
  // The parent's poller sleeps on the ping segment's word; its application thread on the
  // subscriber ring's eventfd.
  check(o, rounds, o.child_sleeps + o.poller_wakeups);
}

}  // namespace
}  // namespace pollux::transport::shm
