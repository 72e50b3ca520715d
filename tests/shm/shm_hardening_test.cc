// What another local process can do to a stream's segment - truncate it under a
// publisher and its subscribers, forge its writer state - and the cross-thread state of the
// shm endpoints (the TSan stage runs this binary: `scripts/test.sh --stages tsan`, build-tsan/).
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_format.h"
#include "core/counters.h"
#include "core/mapping_guard.h"
#include "pollux/pollux.h"
#include "tests/shm/test_util.h"
#include "tests/support/status_assert.h"
#include "transport/shm/shm_config.h"
#include "transport/shm/shm_log.h"
#include "transport/shm/shm_segment.h"
#include "transport/shm/shm_transport.h"

namespace pollux::transport::shm {
namespace {

using pollux::testing::unique_name;

// ---- truncation of a live segment -----------------------------------------------

// A segment truncated under a writer and a reader in one process (each with its own mapping, as
// two processes would have): neither dies of SIGBUS, both learn it on their control path.
class TruncateLog : public ::testing::TestWithParam<off_t> {};

TEST_P(TruncateLog, WriterAndReaderSurvive) {
  constexpr std::uint64_t kLog = 64 << 10;
  Segment::Options o;
  o.path = "/dev/shm/pollux-" + unique_name("trunclog") + "-stream-1.log";
  o.stream_id = 1;
  o.session_id = 5;
  o.log_size = kLog;
  o.subscriber_slots = 2;
  POLLUX_ASSERT_OK_DECL(pub, Segment::create(o));
  LogWriter w;
  w.init(pub->get(), shm::FlowControl::kLossy);
  POLLUX_ASSERT_OK_DECL(sub, Segment::attach(o.path, 1));
  LogReader r;
  SubscriberSlot* slot = (*sub)->slot(0);
  slot->pid = getpid();
  ASSERT_TRUE(r.init(sub->get(), slot, false));
  slot->state.store(kSlotActive);
  auto write = [&](std::uint64_t n) {
    for (std::uint64_t i = 0; i < n; ++i) {
      LogWriter::Claim c;
      ASSERT_TRUE(w.try_claim(core::kFrameHeaderSize + 200, &c));
      std::memset(c.frame + core::kFrameHeaderSize, 0x5a, 200);
      w.commit(c, 0, 1);
    }
  };
  std::vector<RxDesc> buf(64);
  write(10);
  EXPECT_EQ(r.poll(buf.data(), 64), 10u);
  r.release(buf.data(), 10);
  EXPECT_FALSE((*pub)->truncated());
  EXPECT_FALSE((*sub)->truncated());

  const std::uint64_t faults_before = core::guarded_faults_total();
  ASSERT_EQ(::truncate(o.path.c_str(), GetParam()), 0);
  write(2000);  // laps the 64 KiB log several times: touches every page
  for (int i = 0; i < 1000; ++i) {
    const std::uint32_t n = r.poll(buf.data(), 64);
    r.release(buf.data(), n);
  }
  EXPECT_TRUE((*pub)->truncated());
  EXPECT_TRUE((*sub)->truncated());
  if (GetParam() == 0) {
    EXPECT_GT(core::guarded_faults_total(), faults_before) << "the writer touched lost pages";
  }
  // Once neutralized, the reader's mapping is zero memory whose tail says "all overwritten".
  (*sub)->neutralize();
  (*sub)->neutralize();  // idempotent
  EXPECT_GE(LogReader::floor_of(**sub), kPoisonTail - kLog);
  for (int i = 0; i < 300; ++i) EXPECT_EQ(r.poll(buf.data(), 64), 0u);
  ::unlink(o.path.c_str());
}

INSTANTIATE_TEST_SUITE_P(Sizes, TruncateLog, ::testing::Values(off_t{0}, off_t{8192}),
                         [](const auto& info) { return absl::StrFormat("to%d", info.param); });

// Through the API, in both threading modes: the subscriber gets kSegmentTruncated, the
// publisher starts a new segment, the subscriber follows it as kNewSession; both count it.
class TruncateStream : public ::testing::TestWithParam<std::tuple<std::string, off_t>> {};

TEST_P(TruncateStream, SubscriberSeesTruncationThenTheNewSession) {
  const auto& [mode, size] = GetParam();
  const std::string name = unique_name("trunc");
  const std::string toml = absl::StrFormat(
      "[runtime]\nname = \"%s\"\nthreading = \"%s\"\nidle = \"yield\"\n[shm]\nlog_size = \"256KiB\"\n"
      "liveness_timeout_ms = 200\n",
      name, mode);
  POLLUX_ASSERT_OK_DECL(pub_ctx, Context::from_string(toml, "pub.toml"));
  POLLUX_ASSERT_OK_DECL(sub_ctx, Context::from_string(toml, "sub.toml"));
  POLLUX_ASSERT_OK_DECL(pub, (*pub_ctx)->publisher("t"));
  POLLUX_ASSERT_OK_DECL(sub, (*sub_ctx)->subscriber("t"));
  std::vector<StreamEventKind> events;
  std::uint64_t before = 0, after_new_session = 0;
  auto poll = [&] {
    return sub->poll(
        // Every session is announced, the first too: messages before the truncation are those
        // after the first event.
        [&](const Message&) { (events.size() <= 1 ? before : after_new_session) += 1; }, [](const Gap&) {},
        [&](const StreamEvent& e) { events.push_back(e.kind); }, 64);
  };
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  std::uint64_t v = 0;
  while (before < 10 && std::chrono::steady_clock::now() < deadline) {
    if (pub->offer(&v, sizeof v) >= 0) ++v;
    if (poll() == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  ASSERT_GE(before, 10u);
  const std::string path = absl::StrFormat("/dev/shm/pollux-%s-stream-%u.log", name, pub->stream_id());
  ASSERT_EQ(::truncate(path.c_str(), size), 0);
  deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (after_new_session == 0 && std::chrono::steady_clock::now() < deadline) {
    (void)pub->offer(&v, sizeof v);  // kNotConnected until the new segment has a subscriber
    ++v;
    if (poll() == 0) std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events[0], StreamEventKind::kNewSession);
  EXPECT_EQ(events[1], StreamEventKind::kSegmentTruncated);
  EXPECT_EQ(events[2], StreamEventKind::kNewSession);
  EXPECT_GT(after_new_session, 0u) << "the stream goes on in the publisher's new segment";
  // Counted on both sides (pollux-stat shows them).
  std::uint64_t pub_truncated = 0, sub_truncated = 0;
  for (const std::string& f : core::list_counters_files("/dev/shm")) {
    if (f.find("/pollux-" + name + "-") == std::string::npos) continue;
    POLLUX_ASSERT_OK_DECL(snap, core::read_counters_file(f));
    for (const auto& c : snap->counters) {
      if (c.name != "segment_truncated") continue;
      (c.scope.rfind("shm pub", 0) == 0 ? pub_truncated : sub_truncated) += c.value;
    }
  }
  EXPECT_EQ(pub_truncated, 1u);
  EXPECT_EQ(sub_truncated, 1u);
}

INSTANTIATE_TEST_SUITE_P(Modes, TruncateStream,
                         ::testing::Combine(::testing::Values("inline", "dedicated"),
                                            ::testing::Values(off_t{0}, off_t{8192})),
                         [](const auto& info) {
                           return absl::StrFormat("%s_to%d", std::get<0>(info.param), std::get<1>(info.param));
                         });

// ---- the SIGBUS handler chains ----------------------------------------------------------------

// A mapping of a scratch file (not a Pollux segment) that is then truncated: touching it faults.
volatile char* truncated_scratch_mapping() {
  char tmpl[] = "/dev/shm/pollux-scratch-XXXXXX";
  const int fd = mkstemp(tmpl);
  if (fd < 0 || ftruncate(fd, 8192) != 0) return nullptr;
  void* m = mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::unlink(tmpl);
  if (m == MAP_FAILED || ftruncate(fd, 0) != 0) return nullptr;
  ::close(fd);
  return static_cast<volatile char*>(m);
}

sigjmp_buf g_jump;
volatile sig_atomic_t g_app_handler_calls = 0;
void app_handler(int, siginfo_t*, void*) {
  g_app_handler_calls = g_app_handler_calls + 1;
  siglongjmp(g_jump, 1);
}

std::unique_ptr<Segment> guarded_segment(const std::string& tag) {
  Segment::Options o;
  o.path = "/dev/shm/pollux-" + unique_name(tag.c_str()) + "-stream-3.log";
  o.stream_id = 3;
  o.log_size = 64 << 10;
  o.subscriber_slots = 1;
  auto s = Segment::create(o);
  if (!s.ok()) return nullptr;
  return std::move(*s);
}

// The application's handler, installed before Pollux's, still gets the faults that are not in
// Pollux's mappings; Pollux's own faults never reach it. Runs in a fresh process (threadsafe
// death test), so Pollux's handler is installed after the application's.
TEST(SigbusGuard, ForeignFaultsReachTheHandlerInstalledBefore) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        struct sigaction sa = {};
        sa.sa_sigaction = app_handler;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGBUS, &sa, nullptr);
        auto seg = guarded_segment("chain");  // installs Pollux's handler, chaining to app_handler
        if (seg == nullptr) _exit(2);
        volatile char* scratch = truncated_scratch_mapping();
        if (scratch == nullptr) _exit(3);
        if (sigsetjmp(g_jump, 1) == 0) (void)scratch[0];
        if (g_app_handler_calls != 1) _exit(4);
        // A fault in the (truncated) segment is absorbed without the application's handler.
        if (::truncate(seg->path().c_str(), 0) != 0) _exit(5);
        seg->unlink();
        const std::uint64_t absorbed = core::guarded_faults_total();
        if (sigsetjmp(g_jump, 1) == 0) seg->log()[4096] = std::byte{1};
        if (core::guarded_faults_total() != absorbed + 1 || g_app_handler_calls != 1) _exit(6);
        _exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

// Without a previous handler, a SIGBUS outside Pollux's mappings still kills the process as it
// would have without Pollux (no silent retry loop, no swallowed fault).
TEST(SigbusGuard, ForeignFaultsStillKillWithTheDefaultAction) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        auto seg = guarded_segment("dfl");
        if (seg == nullptr) _exit(2);
        seg->unlink();
        volatile char* scratch = truncated_scratch_mapping();
        if (scratch == nullptr) _exit(3);
        (void)scratch[0];
        _exit(0);
      },
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
      // The sanitizer's own SIGBUS handler is the previous one: it reports and exits.
      [](int status) { return !(WIFEXITED(status) && WEXITSTATUS(status) == 0); }, "BUS");
#else
      ::testing::KilledBySignal(SIGBUS), "");
#endif
}

// ---- forged writer state ----------------------------------------------------

TEST(ShmEndpoint, SubscriberRefusesAWriterTailThatIsNotAFramePosition) {
  core::Config cfg = pollux::testing::shm_config(unique_name("badtail"), 64 << 10, shm::FlowControl::kLossy);
  TransportEnv env{&cfg, nullptr, nullptr};
  Segment::Options o;
  o.path = segment_path(cfg, 7);
  o.stream_id = 7;
  o.session_id = 9;
  o.log_size = shm::config(cfg).log_size;
  o.subscriber_slots = 4;
  POLLUX_ASSERT_OK_DECL(seg, Segment::create(o));
  const EndpointSpec spec{7, "t", nullptr, -1};
  // log_size - 1 must not make the reader load headers up to 31 bytes past the end of the log.
  for (std::uint64_t tail : {shm::config(cfg).log_size - 1, std::uint64_t{8}, kMaxLogPosition + 32}) {
    SCOPED_TRACE(tail);
    (*seg)->header()->writer.tail.store(tail);
    auto ep = ShmRxEndpoint::open(env, spec);
    ASSERT_FALSE(ep.ok()) << ep.status();
    EXPECT_EQ(ep.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(ep.status().message().find(absl::StrFormat("writer tail %u is not a frame position", tail)),
              absl::string_view::npos)
        << ep.status();
  }
  for (std::uint32_t i = 0; i < 4; ++i)
    EXPECT_EQ((*seg)->slot(i)->state.load(), kSlotFree) << "slot " << i << " leaked";
  (*seg)->header()->writer.tail.store(0);
  POLLUX_ASSERT_OK_DECL(ep, ShmRxEndpoint::open(env, spec));
  EXPECT_TRUE((*ep)->connected());
  (*seg)->unlink();
}

// ---- cross-thread endpoint state (meaningful under TSan) ------------------------

// The application thread asks connected() and (in poll) safe_floor() while the poller attaches
// to each new session, reports its end and detaches. TSan reported the reads of seg_/ended_
// racing with try_attach()/poll_st().
TEST(ShmEndpoint, ConnectedAndSafeFloorAreSafeWhileThePollerAttachesAndDetaches) {
  const std::string name = unique_name("race");
  const std::string sub_toml = absl::StrFormat(
      "[runtime]\nname = \"%s\"\nthreading = \"dedicated\"\nidle = \"yield\"\ncounters = false\n"
      "[shm]\nlog_size = \"64KiB\"\nliveness_timeout_ms = 40\n",
      name);
  const std::string pub_toml = absl::StrFormat(
      "[runtime]\nname = \"%s\"\nthreading = \"inline\"\ncounters = false\n[shm]\nlog_size = \"64KiB\"\n", name);
  POLLUX_ASSERT_OK_DECL(sub_ctx, Context::from_string(sub_toml, "sub.toml"));
  POLLUX_ASSERT_OK_DECL(sub, (*sub_ctx)->subscriber("race"));
  int ends = 0, sessions = 0;
  std::uint64_t received = 0, connected_polls = 0;
  // One connected() question and one poll, counting messages, ends and sessions.
  auto ask_and_poll = [&] {
    connected_polls += sub->is_connected();
    return sub->poll([&](const Message&) { ++received; }, [](const Gap&) {},
                     [&](const StreamEvent& e) {
                       ends += e.kind == StreamEventKind::kEndOfStream;
                       sessions += e.kind == StreamEventKind::kNewSession;
                     },
                     64);
  };
  for (int round = 0; round < 3; ++round) {
    POLLUX_ASSERT_OK_DECL(pub_ctx, Context::from_string(pub_toml, "pub.toml"));
    POLLUX_ASSERT_OK_DECL(pub, (*pub_ctx)->publisher("race"));
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    for (std::uint64_t i = 0; i < 200 && std::chrono::steady_clock::now() < deadline;) {
      if (pub->offer(&i, sizeof i) >= 0) ++i;
      (void)ask_and_poll();
      std::this_thread::yield();
    }
    pub->close();
    while (ends <= round && std::chrono::steady_clock::now() < deadline) {
      if (ask_and_poll() == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  EXPECT_EQ(ends, 3);
  EXPECT_EQ(sessions, 3) << "every round is a session, announced (the first one too)";
  EXPECT_GT(received, 0u);
  EXPECT_GT(connected_polls, 0u);
}

}  // namespace
}  // namespace pollux::transport::shm
