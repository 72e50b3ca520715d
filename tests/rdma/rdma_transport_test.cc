// In-process tests of the RDMA transport, run inside the Soft-RoCE VM only (rdma_vm_suite):
// publishers on rxe0 (10.0.0.1), subscribers on rxe1 (10.0.0.2), so every frame crosses the veth
// wire. Covers RC in every threading mode, the per-poller shared CQ/SRQ, the no-SRQ fallback,
// per-thread QPs, the interrupt hooks, the data-path guarantees (no ibv_reg_mr, allocation or
// lock per message) and the documented errors.
#include <dlfcn.h>
#include <linux/capability.h>
#include <poll.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <span>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_format.h"

#include "core/counters.h"
#include "core/frame.h"
#include "tests/rdma/rdma_test_util.h"
#include "tests/shm/test_util.h"
#include "transport/rdma/qp.h"
#include "transport/rdma/rdma_endpoints.h"
#include "transport/rdma/rdma_transport.h"

// Data-path probes: malloc/mutex/spinlock calls made by this thread while `g_counting` is set.
#include "tests/support/data_path_probe.h"

namespace pollux {
namespace {

using namespace rdmatest;  // NOLINT(google-build-using-namespace): the helpers of rdma_test_util.h
using testing::check_payload;
using testing::fill_payload;
using testing::payload_len;

struct Seen {
  std::uint64_t received = 0, bad = 0, out_of_order = 0, gaps = 0, lost = 0, sessions = 0, ends = 0, died = 0;
  std::uint64_t late_start = 0;                 // sessions whose first message was not sequence 1
  std::map<std::uint32_t, std::uint64_t> next;  // per session
};

// Drains `sub` until `count` messages arrived (or `seconds` passed), checking order and payload.
void receive(Subscriber& sub, std::uint64_t count, Seen* s, int seconds = 120) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (s->received < count && std::chrono::steady_clock::now() < deadline) {
    const int n = sub.poll(
        [&](const Message& m) {
          std::uint64_t tag = 0;
          std::memcpy(&tag, m.payload.data(), 8);
          if (tag != m.sequence || !check_payload(m.payload.data(), static_cast<std::uint32_t>(m.payload.size()), tag))
            ++s->bad;
          auto& nx = s->next[m.session_id];
          if (nx != 0 && m.sequence != nx) ++s->out_of_order;
          if (nx == 0 && m.sequence != 1) ++s->late_start;
          nx = m.sequence + 1;
          ++s->received;
        },
        [&](const Gap& g) {
          ++s->gaps;
          s->lost += g.count;
        },
        [&](const StreamEvent& e) {
          if (e.kind == StreamEventKind::kNewSession) ++s->sessions;
          if (e.kind != StreamEventKind::kNewSession) ++s->ends;
          if (e.kind == StreamEventKind::kPublisherDied) ++s->died;
        },
        256);
    if (n == 0) std::this_thread::yield();
  }
}

// Polls `sub` (dropping messages) until `e` counts a stream end (ends and deaths are counted there);
// false if none came within `seconds`.
bool wait_end(Subscriber& sub, Seen* e, int seconds) {
  return wait_for(
      [&] {
        (void)sub.poll([](const Message&) {}, [](const Gap&) {},
                       [&](const StreamEvent& ev) {
                         e->ends += ev.kind != StreamEventKind::kNewSession;
                         e->died += ev.kind == StreamEventKind::kPublisherDied;
                       },
                       64);
        return e->ends > 0;
      },
      seconds);
}

void offer_all(Publisher& pub, std::uint64_t count, std::uint32_t max_size = 200) {
  std::byte buf[4096];
  for (std::uint64_t i = 1; i <= count; ++i) {
    const std::uint32_t len = payload_len(i, max_size);
    fill_payload(buf, len, i);
    std::uint64_t spins = 0;
    for (;;) {
      const std::int64_t r = pub.offer(buf, len);
      if (r >= 0) break;
      ASSERT_TRUE(r == kBackPressured || r == kNotConnected) << result_name(r);
      if (++spins % 64 == 0) std::this_thread::yield();
      ASSERT_LT(spins, 2'000'000'000ull) << "stuck at " << i;
    }
  }
}

void run_rc(const std::string& threading, std::uint64_t count, const std::string& extra = "",
            const std::string& runtime_extra = "") {
  const int port = next_port();
  rdmatest::ConnectedPair c;
  ASSERT_NO_FATAL_FAILURE(
      c.open(sub_config(threading, port, extra, runtime_extra), pub_config(threading, port, extra, runtime_extra)));
  Subscriber* sub = &*c.sub;
  Publisher* pub = &*c.pub;
  std::thread producer([&] { offer_all(*pub, count); });
  Seen s;
  receive(*sub, count, &s);
  producer.join();
  EXPECT_EQ(s.received, count);
  EXPECT_EQ(s.bad, 0u);
  EXPECT_EQ(s.out_of_order, 0u);
  EXPECT_EQ(s.gaps, 0u);
  EXPECT_EQ(s.sessions, 1u);
  EXPECT_EQ(s.late_start, 0u) << "frames offered once connected must all reach the subscriber";
  // A clean close reaches the subscriber as end of stream (not "died").
  pub->close();
  Seen e;
  ASSERT_TRUE(wait_end(*sub, &e, 20)) << "no end of stream after close";
  EXPECT_EQ(e.died, 0u);
}

TEST(RdmaRc, InlineModeInOrder) {
  POLLUX_REQUIRE_RXE();
  run_rc("inline", 20000);
}

TEST(RdmaRc, DedicatedModeInOrder) {
  POLLUX_REQUIRE_RXE();
  run_rc("dedicated", 20000);
}

TEST(RdmaRc, SharedModeInOrder) {
  POLLUX_REQUIRE_RXE();
  run_rc("shared", 10000);
}

TEST(RdmaRc, WithoutSrqReceiveQueuePerQp) {
  POLLUX_REQUIRE_RXE();
  // Fewer receive buffers than a full subscriber ring would hold: RC back-pressures (RNR).
  run_rc("dedicated", 10000, "srq = \"off\"\nrecv_queue_depth = 256\n");
}

TEST(RdmaRc, NoInlineAndSignalEveryOne) {
  POLLUX_REQUIRE_RXE();
  run_rc("inline", 5000, "inline_threshold = 0\nsignal_every = 1\nrecv_batch = 1\n");
}

TEST(RdmaRc, LargeFramesNotInline) {
  POLLUX_REQUIRE_RXE();
  const int port = next_port();
  rdmatest::ConnectedPair c;
  ASSERT_NO_FATAL_FAILURE(c.open(sub_config("inline", port), pub_config("inline", port), "big"));
  Subscriber* sub = &*c.sub;
  Publisher* pub = &*c.pub;
  EXPECT_EQ(pub->max_payload(), 2048u - 32u);
  std::thread producer([&] { offer_all(*pub, 3000, 2000); });
  Seen s;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (s.received < 3000 && std::chrono::steady_clock::now() < deadline) {
    (void)sub->poll(
        [&](const Message& m) {
          std::uint64_t tag;
          std::memcpy(&tag, m.payload.data(), 8);
          if (tag != m.sequence || m.payload.size() != payload_len(tag, 2000) ||
              !check_payload(m.payload.data(), static_cast<std::uint32_t>(m.payload.size()), tag))
            ++s.bad;
          ++s.received;
        },
        64);
  }
  producer.join();
  EXPECT_EQ(s.received, 3000u);
  EXPECT_EQ(s.bad, 0u);
}

// poll() with a limit of 1: a frame that yields several descriptors (new session + message)
// hands them out over successive calls, in order.
TEST(RdmaRc, PollOneAtATime) {
  POLLUX_REQUIRE_RXE();
  const int port = next_port();
  rdmatest::ConnectedPair c;
  ASSERT_NO_FATAL_FAILURE(c.open(sub_config("inline", port), pub_config("inline", port), "md"));
  Subscriber* sub = &*c.sub;
  Publisher* pub = &*c.pub;
  std::thread producer([&] { offer_all(*pub, 3000); });
  Seen s;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (s.received < 3000 && std::chrono::steady_clock::now() < deadline) {
    (void)sub->poll(
        [&](const Message& m) {
          if (m.sequence != s.received + 1) ++s.out_of_order;
          ++s.received;
        },
        [](const Gap&) {}, [&](const StreamEvent& e) { s.sessions += e.kind == StreamEventKind::kNewSession; }, 1);
  }
  producer.join();
  EXPECT_EQ(s.received, 3000u);
  EXPECT_EQ(s.out_of_order, 0u);
  EXPECT_EQ(s.sessions, 1u);
}

// Inline subscribers each have their own receive queue (pool slots carved for good); closing one
// leaves it for the next instead of leaking it: 6 open/close rounds fit a pool that holds 2.
TEST(RdmaRc, InlineSubscribersReuseReceiveQueues) {
  POLLUX_REQUIRE_RXE();
  const int port = next_port();
  auto sub_ctx = make(sub_config("inline", port));
  auto pub_ctx = make(pub_config("inline", port));
  ASSERT_TRUE(sub_ctx && pub_ctx);
  // One publisher throughout (publishers carve their slots per open in every transport); it
  // reconnects to each new subscriber.
  auto pub = pub_ctx->publisher("md");
  ASSERT_TRUE(pub.ok()) << pub.status();
  for (int round = 0; round < 6; ++round) {
    auto sub = sub_ctx->subscriber("md");
    ASSERT_TRUE(sub.ok()) << "round " << round << ": " << sub.status();
    wait_connected(*pub, *sub);
    std::uint64_t got = 0, out_of_order = 0, next = 0;
    std::byte buf[64] = {};
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (got < 500 && std::chrono::steady_clock::now() < deadline) {
      (void)pub->offer(buf, sizeof buf);
      (void)sub->poll(
          [&](const Message& m) {
            if (next != 0 && m.sequence != next) ++out_of_order;
            next = m.sequence + 1;
            ++got;
          },
          64);
    }
    EXPECT_GE(got, 500u) << "round " << round;
    EXPECT_EQ(out_of_order, 0u);
    sub->close();
  }
}

// Two streams on one poller on each side: one CQ and one SRQ per poller serve both QPs.
TEST(RdmaRc, TwoStreamsShareOnePollersCqAndSrq) {
  POLLUX_REQUIRE_RXE();
  const int port = next_port();
  auto sub_ctx = make(sub_config("dedicated", port, "", "pollers = 1\n"));
  auto pub_ctx = make(pub_config("dedicated", port, "", "pollers = 1\n"));
  auto s1 = sub_ctx->subscriber("a");
  auto s2 = sub_ctx->subscriber("b");
  auto p1 = pub_ctx->publisher("a");
  auto p2 = pub_ctx->publisher("b");
  ASSERT_TRUE(s1.ok() && s2.ok() && p1.ok() && p2.ok());
  wait_connected(*p1, *s1);
  wait_connected(*p2, *s2);
  std::thread t1([&] { offer_all(*p1, 8000); });
  std::thread t2([&] { offer_all(*p2, 8000); });
  Seen a, b;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while ((a.received < 8000 || b.received < 8000) && std::chrono::steady_clock::now() < deadline) {
    receive(*s1, std::min<std::uint64_t>(8000, a.received + 64), &a, 1);
    receive(*s2, std::min<std::uint64_t>(8000, b.received + 64), &b, 1);
  }
  t1.join();
  t2.join();
  EXPECT_EQ(a.received, 8000u);
  EXPECT_EQ(b.received, 8000u);
  EXPECT_EQ(a.bad + b.bad + a.out_of_order + b.out_of_order + a.gaps + b.gaps, 0u);
}

// Two application threads publish on one stream: each Publisher has its own endpoint, QP and
// session, posted by its own poller channel without any lock; the subscriber sees two sessions,
// each complete and in order.
TEST(RdmaRc, TwoPublishingThreadsOwnQpsStress) {
  POLLUX_REQUIRE_RXE();
  const int port = next_port();
  auto sub_ctx = make(sub_config("dedicated", port));
  auto pub_ctx = make(pub_config("dedicated", port, "", "pollers = 1\n"));
  auto sub = sub_ctx->subscriber("md");
  auto p1 = pub_ctx->publisher("md");
  auto p2 = pub_ctx->publisher("md");
  ASSERT_TRUE(sub.ok() && p1.ok() && p2.ok());
  wait_connected(*p1, *sub);
  wait_connected(*p2, *sub);
  constexpr std::uint64_t kEach = 15000;
  std::thread t1([&] { offer_all(*p1, kEach); });
  std::thread t2([&] { offer_all(*p2, kEach); });
  Seen s;
  receive(*sub, 2 * kEach, &s, 180);
  t1.join();
  t2.join();
  EXPECT_EQ(s.received, 2 * kEach);
  EXPECT_EQ(s.next.size(), 2u) << "expected two sessions (one QP per publishing thread)";
  for (auto& [session, next] : s.next) EXPECT_EQ(next, kEach + 1) << "session " << session;
  EXPECT_EQ(s.bad, 0u);
  EXPECT_EQ(s.out_of_order, 0u);
  EXPECT_EQ(s.late_start, 0u);
  EXPECT_EQ(s.sessions, 2u);
}

std::uint64_t counter(Context& ctx, const std::string& name) {
  return rdmatest::counter_sum(ctx.counters_path(), name);
}

// The data path (offer -> post_st, poll -> poll_st -> release_st) after warm-up: no ibv_reg_mr
// (counter), no heap allocation and no mutex on either thread (interposed malloc and
// pthread_mutex_lock count what this thread calls). Provider spinlocks are reported, not
// asserted: rxe's ibv_post_send/ibv_poll_cq take their own (uncontended) queue spinlocks.
void data_path_probe(const std::string& sub_toml, const std::string& pub_toml) {
  rdmatest::ConnectedPair c;
  ASSERT_NO_FATAL_FAILURE(c.open(sub_toml, pub_toml));
  Subscriber* sub = &*c.sub;
  Publisher* pub = &*c.pub;
  constexpr std::uint64_t kWarm = 3000, kMeasured = 20000;
  std::atomic<long> pub_allocs{-1}, pub_mutex{-1}, pub_spin{-1};
  std::thread producer([&] {
    std::byte buf[256];
    for (std::uint64_t i = 1; i <= kWarm + kMeasured; ++i) {
      const std::uint32_t len = payload_len(i, 200);
      fill_payload(buf, len, i);
      g_counting = i > kWarm;
      while (pub->offer(buf, len) < 0) {
      }
      g_counting = false;
    }
    pub_allocs = g_allocs;
    pub_mutex = g_mutex_locks;
    pub_spin = g_spin_locks;
  });
  Seen s;
  std::uint64_t polls = 0;
  while (s.received < kWarm + kMeasured) {
    g_counting = s.received >= kWarm;
    const int n = sub->poll(
        [&](const Message& m) {
          if (m.sequence != s.received + 1) ++s.out_of_order;
          ++s.received;
        },
        64);
    g_counting = false;
    ++polls;
    if (n == 0) std::this_thread::yield();
  }
  producer.join();
  EXPECT_EQ(s.out_of_order, 0u);
  std::printf("publisher thread: %ld allocations, %ld mutex locks, %ld provider spinlocks in %llu offers\n",
              pub_allocs.load(), pub_mutex.load(), pub_spin.load(), static_cast<unsigned long long>(kMeasured));
  std::printf("subscriber thread: %ld allocations, %ld mutex locks, %ld provider spinlocks in %llu polls\n", g_allocs,
              g_mutex_locks, g_spin_locks, static_cast<unsigned long long>(polls));
  EXPECT_EQ(pub_allocs.load(), 0);
  EXPECT_EQ(pub_mutex.load(), 0);
  EXPECT_EQ(g_allocs, 0);
  EXPECT_EQ(g_mutex_locks, 0);
  // One registration per context (protection domain), made at start-up.
  EXPECT_EQ(counter(*c.pub_ctx, "mr_registrations"), 1u);
  EXPECT_EQ(counter(*c.sub_ctx, "mr_registrations"), 1u);
  EXPECT_GE(counter(*c.pub_ctx, "inline_sends"), kMeasured);
  // Selective signalling: about one completion per signal_every (16) sends.
  EXPECT_LT(counter(*c.pub_ctx, "signalled_sends"), (kWarm + kMeasured) / 4);
  // Batched re-posting: fewer post calls than buffers.
  EXPECT_LT(counter(*c.sub_ctx, "recv_post_calls") * 4, counter(*c.sub_ctx, "recv_buffers_posted"));
}

TEST(RdmaDataPath, NoRegMrNoAllocationNoLockPerMessage) {
  POLLUX_REQUIRE_RXE();
  const int port = next_port();
  data_path_probe(sub_config("inline", port, "", "counters = true\n"),
                  pub_config("inline", port, "", "counters = true\n"));
}

// The same over UD multicast with loss repair: the frame copied into the retransmit buffer
// (carved from the registered pool) and sent from there, the receiver's windows, NAK/status
// messages - nothing allocates, locks or registers memory per message either.
TEST(RdmaDataPath, UdMulticastNoRegMrNoAllocationNoLockPerMessage) {
  POLLUX_REQUIRE_RXE();
  const std::string ud = "multicast_group = \"239.255.69." + std::to_string(10 + getpid() % 200) + "\"\n";
  data_path_probe(rdmatest::rdma_config("inline", "rxe1", ud, "counters = true\n", "ud_mcast"),
                  rdmatest::rdma_config("inline", "rxe0", ud, "counters = true\n", "ud_mcast"));
}

// ---- transport level: endpoints driven directly --------------------------------------------------

std::uint32_t frame(RawPair& p, std::uint32_t i, std::uint32_t payload = 16) {
  const std::uint32_t slot = p.slots.first + i % p.slots.count;
  auto* h = reinterpret_cast<core::FrameHeader*>(p.pub.pool->slot(slot));
  h->frame_length = core::kFrameHeaderSize + payload;
  h->magic = core::kFrameMagic;
  h->version = core::kFrameVersion;
  h->flags = 0;
  h->stream_id = 7;
  h->session_id = 0;
  h->sequence = 0;
  h->timestamp_ns = 1;
  return slot;
}

std::uint32_t drain(transport::RxEndpoint& rx, std::vector<transport::RxDesc>* msgs = nullptr) {
  transport::RxDesc out[64];
  std::uint32_t got = 0;
  for (int k = 0; k < 5; ++k) {
    const std::uint32_t n = rx.poll_st(out);
    for (std::uint32_t i = 0; i < n; ++i) {
      if (out[i].kind != transport::RxKind::kMessage) continue;
      ++got;
      if (msgs != nullptr) msgs->push_back(out[i]);
    }
    rx.release_st({out, n}, true);
    if (n == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return got;
}

// Interrupt-mode hooks: try_arm() arms the CQ and reports pending work; the completion channel's
// fd becomes readable when a frame arrives while armed.
TEST(RdmaInterrupt, ArmWakesOnArrivalAndReportsPendingWork) {
  POLLUX_REQUIRE_RXE();
  RawPair p;
  open_pair(&p);
  auto* rx = static_cast<transport::rdma::RdmaRxEndpoint*>(p.rx.get());
  const int fd = rx->notify_fd();
  ASSERT_GE(fd, 0);
  (void)drain(*p.rx);
  ASSERT_TRUE(p.rx->try_arm_st()) << "nothing pending, yet try_arm refused";
  pollfd pf{fd, POLLIN, 0};
  EXPECT_EQ(::poll(&pf, 1, 50), 0) << "readable without any arrival";
  const transport::TxDesc d{frame(p, 0), core::kFrameHeaderSize + 16, 0, 0, 0};
  ASSERT_EQ(p.tx->post_st({&d, 1}), 1u);
  EXPECT_EQ(::poll(&pf, 1, 10000), 1) << "armed CQ raised no event for an arrival";
  p.rx->disarm_st();
  std::vector<transport::RxDesc> got;
  EXPECT_TRUE(wait_for([&] { return drain(*p.rx, &got) > 0 || !got.empty(); }, 10));
  EXPECT_EQ(got.size(), 1u);
  // The race re-check: a frame that arrived before arming makes try_arm() return false.
  const transport::TxDesc d2{frame(p, 1), core::kFrameHeaderSize + 16, 0, 0, 0};
  ASSERT_EQ(p.tx->post_st({&d2, 1}), 1u);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let rxe deliver it
  EXPECT_FALSE(p.rx->try_arm_st()) << "work was pending";
  p.rx->disarm_st();
  got.clear();
  (void)drain(*p.rx, &got);
  EXPECT_EQ(got.size(), 1u);
}

// CQ moderation: applied where the device supports ibv_modify_cq, reported (not fatal) where
// it refuses - rxe refuses.
TEST(RdmaInterrupt, CqModerationOutcomeIsReported) {
  POLLUX_REQUIRE_RXE();
  RawPair p;
  open_pair(&p, "cq_moderation_count = 16\ncq_moderation_usec = 10\n");
  auto* rx = static_cast<transport::rdma::RdmaRxEndpoint*>(p.rx.get());
  const std::string note = rx->group()->moderation_note();
  std::printf("moderation: %s\n", note.c_str());
  EXPECT_NE(note, "");
  EXPECT_NE(rx->describe().find("moderation"), std::string::npos) << rx->describe();
}

TEST(RdmaTransport, SequencesAndSessionsAreStampedByTheTransport) {
  POLLUX_REQUIRE_RXE();
  RawPair p;
  open_pair(&p);
  transport::TxDesc d[10];
  for (std::uint32_t i = 0; i < 10; ++i) d[i] = {frame(p, i, 8 + i), core::kFrameHeaderSize + 8 + i, 0, 0, 0};
  std::uint32_t sent = 0;
  while (sent < 10) sent += p.tx->post_st({d + sent, 10 - sent});
  std::vector<transport::RxDesc> got;
  ASSERT_TRUE(wait_for([&] {
    (void)drain(*p.rx, &got);
    return got.size() >= 10;
  }));
  for (std::uint32_t i = 0; i < 10; ++i) {
    EXPECT_EQ(got[i].sequence, i + 1);
    EXPECT_EQ(got[i].session_id, p.tx->session_id());
    EXPECT_EQ(got[i].length, core::kFrameHeaderSize + 8 + i);
  }
  // Completed slots come back to the publisher: these 10 sends were all unsignalled
  // (signal_every = 16); an idle housekeeping period (1 ms without posts, by the clock given to
  // housekeeping, not by the number of calls) flushes them with a signalled heartbeat.
  std::uint32_t freed[64];
  std::uint32_t back = p.tx->reap_st(freed);
  EXPECT_EQ(back, 0u);
  (void)p.tx->housekeeping_st(1);                // notes the position
  EXPECT_EQ(p.tx->housekeeping_st(2), 0);        // idle for 1 ns: no heartbeat yet
  EXPECT_EQ(p.tx->housekeeping_st(999'999), 0);  // nor just under 1 ms
  EXPECT_EQ(p.tx->reap_st(freed), 0u);
  EXPECT_EQ(p.tx->housekeeping_st(1'000'001), 1);  // idle 1 ms: one heartbeat
  ASSERT_TRUE(wait_for(
      [&] {
        back += p.tx->reap_st(freed);
        return back >= 10;
      },
      10))
      << back;
  // ... and the subscriber takes the heartbeat without reporting anything.
  got.clear();
  (void)drain(*p.rx, &got);
  EXPECT_TRUE(got.empty());
}

// A QP that fails under a live stream (NIC or path error): the subscriber sees the stream end
// (publisher presumed dead), the publisher reconnects by itself, and the frames that died with
// the old QP are reported as a gap in the same session - never silently skipped.
TEST(RdmaTransport, QpErrorEndsTheStreamThenReconnectReportsTheLossAsAGap) {
  POLLUX_REQUIRE_RXE();
  RawPair p;
  open_pair(&p);
  auto* tx = static_cast<transport::rdma::RdmaTxEndpoint*>(p.tx.get());
  std::uint32_t freed[64];
  auto send = [&](std::uint32_t count) {
    for (std::uint32_t i = 0; i < count;) {
      transport::TxDesc d{frame(p, i, 16), core::kFrameHeaderSize + 16, 0, 0, 0};
      i += p.tx->post_st({&d, 1});
      (void)p.tx->reap_st(freed);
    }
  };
  send(100);
  std::vector<transport::RxDesc> all;
  transport::RxDesc out[64];
  auto pump = [&] {
    const std::uint32_t n = p.rx->poll_st(out);
    for (std::uint32_t i = 0; i < n; ++i) all.push_back(out[i]);
    p.rx->release_st({out, n}, true);
    return n;
  };
  auto messages = [&] {
    std::uint32_t m = 0;
    for (const auto& d : all) m += d.kind == transport::RxKind::kMessage;
    return m;
  };
  ASSERT_TRUE(wait_for([&] {
    (void)pump();
    return messages() >= 100;
  }));
  tx->fail_connections_for_test();
  send(50);  // posted on (or dropped with) the failed QP: lost
  ASSERT_TRUE(wait_for(
      [&] {
        (void)pump();
        (void)p.tx->reap_st(freed);
        return tx->live_connections() == 0;
      },
      30))
      << "the publisher did not notice the failed QP";
  std::printf("after failure: %s\n", tx->describe().c_str());
  ASSERT_TRUE(wait_for(
      [&] {
        (void)pump();
        (void)p.tx->reap_st(freed);
        return tx->live_connections() == 1 && p.tx->connected();
      },
      30))
      << "no reconnect: " << tx->describe();
  send(50);
  ASSERT_TRUE(wait_for(
      [&] {
        (void)pump();
        return messages() >= 150;
      },
      30))
      << messages();
  std::uint64_t lost = 0, ends = 0, died = 0, gaps = 0, next = 1, out_of_order = 0;
  for (const auto& d : all) {
    if (d.kind == transport::RxKind::kEndOfStream) {
      ++ends;
      died += d.reason == 1;
    } else if (d.kind == transport::RxKind::kGap) {
      ++gaps;
      lost += d.gap_count;
      if (d.sequence != next) ++out_of_order;
      next = d.sequence + d.gap_count;
    } else if (d.kind == transport::RxKind::kMessage) {
      if (d.sequence != next) ++out_of_order;
      next = d.sequence + 1;
    }
  }
  std::printf("messages %u, gaps %llu (%llu lost), ends %llu (died %llu)\n", messages(),
              static_cast<unsigned long long>(gaps), static_cast<unsigned long long>(lost),
              static_cast<unsigned long long>(ends), static_cast<unsigned long long>(died));
  // Usually the subscriber hears of the failure first (end of stream, publisher died); when the
  // publisher is back on a new connection before that, the session simply goes on. Either way
  // the lost frames are a gap.
  EXPECT_LE(ends, 1u);
  EXPECT_EQ(died, ends) << "no end-of-stream frame came: the subscriber must call it a death";
  EXPECT_EQ(out_of_order, 0u) << "every sequence delivered or inside a gap";
  EXPECT_EQ(messages() + lost, 200u);
  EXPECT_GE(gaps, 1u);
  EXPECT_EQ(next, 201u);
}

// Posts frames 0..count-1 (16-byte payloads) without reaping: each takes a pool slot of its own
// (count <= the pair's 64), so none is reused while its send is in flight.
void post_unreaped(RawPair& p, std::uint32_t count) {
  ASSERT_LE(count, p.slots.count);
  for (std::uint32_t i = 0; i < count;) {
    transport::TxDesc d{frame(p, i, 16), core::kFrameHeaderSize + 16, 0, 0, 0};
    i += p.tx->post_st({&d, 1});
  }
}

// Frames a publisher posted before close() reach a subscriber that is slow to take them. The
// subscriber's QP has 16 receive buffers and nobody polls it: the first 16 frames land, the NIC
// retries the rest on RNR. close() lingers (rdma.linger_ms) until every frame and the end of stream
// are acknowledged: a fixed, shorter wait would leave the subscriber, polling later, with the
// first frames and "publisher died" and nothing reported lost.
TEST(RdmaTransport, CloseLingersUntilASlowSubscriberHasEveryFrame) {
  POLLUX_REQUIRE_RXE();
  RawPair p;
  open_pair(&p, "srq = \"off\"\nrecv_queue_depth = 16\nrecv_batch = 8\nlinger_ms = 60000\n");
  auto* rx = static_cast<transport::rdma::RdmaRxEndpoint*>(p.rx.get());
  // The subscriber's QP asks for rdma.rnr_timeout_us (160 us: code 8), not the CM's 655 ms.
  EXPECT_EQ(rx->min_rnr_timer_for_test(), transport::rdma::rnr_timer_code(160));
  EXPECT_EQ(rx->min_rnr_timer_for_test(), 8);
  constexpr std::uint32_t kFrames = 40;
  post_unreaped(p, kFrames);
  std::atomic<bool> closed{false};
  std::thread closer([&] {
    p.tx->close_st();
    closed.store(true, std::memory_order_release);
  });
  // Longer than the old fixed wait; close() cannot return before the subscriber polls.
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  EXPECT_FALSE(closed.load(std::memory_order_acquire)) << "close() returned with frames unacknowledged";
  std::vector<transport::RxDesc> all;
  transport::RxDesc out[64];
  bool ended = false;
  ASSERT_TRUE(wait_for(
      [&] {
        const std::uint32_t n = p.rx->poll_st(out);
        for (std::uint32_t i = 0; i < n; ++i) {
          all.push_back(out[i]);
          ended |= out[i].kind == transport::RxKind::kEndOfStream;
        }
        p.rx->release_st({out, n}, true);
        return ended;
      },
      60))
      << "no end of stream";
  closer.join();
  std::uint64_t next = 1, messages = 0, others = 0, died = 0;
  for (const auto& d : all) {
    if (d.kind == transport::RxKind::kMessage) {
      EXPECT_EQ(d.sequence, next);
      next = d.sequence + 1;
      ++messages;
    } else if (d.kind == transport::RxKind::kEndOfStream) {
      died += d.reason != 0;
    } else if (d.kind != transport::RxKind::kNewSession) {
      ++others;  // a gap: nothing may be missing
    }
  }
  EXPECT_EQ(messages, kFrames);
  EXPECT_EQ(others, 0u);
  EXPECT_EQ(died, 0u) << "a clean close must end the stream, not report the publisher dead";
  for (const auto& e : p.pub.counters->error_log().entries()) ADD_FAILURE() << "publisher error log: " << e.message;
}

// When the subscriber does not take the frames within rdma.linger_ms, close() gives up, and the
// loss is not silent: the publisher logs how many frames were not acknowledged, and the
// subscriber sees the publisher die after the frames it did get.
TEST(RdmaTransport, CloseGivesUpAfterLingerAndLogsTheUnacknowledgedFrames) {
  POLLUX_REQUIRE_RXE();
  RawPair p;
  open_pair(&p, "srq = \"off\"\nrecv_queue_depth = 16\nrecv_batch = 8\nlinger_ms = 200\n");
  constexpr std::uint32_t kFrames = 40;
  post_unreaped(p, kFrames);
  p.tx->close_st();  // the subscriber is not polling: at most 16 frames can be acknowledged
  std::uint64_t missing = 0;
  std::size_t logged = 0;
  for (const auto& e : p.pub.counters->error_log().entries()) {
    unsigned long long n = 0;
    if (std::sscanf(e.message.c_str(), "rdma: stream 7: closed with %llu frame(s) and the end of stream", &n) == 1) {
      missing = n;
      ++logged;
      EXPECT_NE(e.message.find("not acknowledged after rdma.linger_ms = 200 ms"), std::string::npos) << e.message;
    }
  }
  ASSERT_EQ(logged, 1u) << "the publisher must log the frames it closed without";
  EXPECT_GE(missing, kFrames - 16);
  EXPECT_LE(missing, kFrames);
  std::uint64_t messages = 0, died = 0, gaps = 0;
  transport::RxDesc out[64];
  ASSERT_TRUE(wait_for(
      [&] {
        const std::uint32_t n = p.rx->poll_st(out);
        for (std::uint32_t i = 0; i < n; ++i) {
          messages += out[i].kind == transport::RxKind::kMessage;
          gaps += out[i].kind == transport::RxKind::kGap;
          died += out[i].kind == transport::RxKind::kEndOfStream && out[i].reason != 0;
        }
        p.rx->release_st({out, n}, true);
        return died > 0;
      },
      60))
      << "the subscriber never heard the publisher go";
  EXPECT_EQ(gaps, 0u);
  EXPECT_LE(messages, 16u);
  // Every frame is accounted for: delivered, or counted lost by the publisher.
  EXPECT_GE(messages + missing, kFrames);
}

// One-way latencies (ns) of `count` messages sent one at a time on `pub` and read on `sub`,
// each carrying its send time; the publisher's poller posts them, this thread receives them.
std::vector<std::int64_t> one_way_latencies(Publisher& pub, Subscriber& sub, int count) {
  auto now = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  std::vector<std::int64_t> lat;
  for (int i = 0; i < count; ++i) {
    std::int64_t sent = now();
    while (pub.offer(std::as_bytes(std::span(&sent, 1))) < 0) sent = now();
    bool got = false;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!got && std::chrono::steady_clock::now() < deadline) {
      (void)sub.poll(
          [&](const Message& m) {
            std::int64_t t = 0;
            std::memcpy(&t, m.payload.data(), sizeof t);
            lat.push_back(now() - t);
            got = true;
          },
          16);
    }
    if (!got) break;
  }
  return lat;
}

std::string latency_summary(std::vector<std::int64_t> v) {
  if (v.empty()) return "none";
  std::sort(v.begin(), v.end());
  return absl::StrFormat(
      "p50 %lld us, p99 %lld us, max %lld us (%zu messages)", static_cast<long long>(v[v.size() / 2] / 1000),
      static_cast<long long>(v[v.size() * 99 / 100] / 1000), static_cast<long long>(v.back() / 1000), v.size());
}

// Closing never blocks a poller. Two publishers share the publishing context's only poller;
// the subscriber of the first takes nothing (16 receive buffers, not polled: the NIC retries
// the rest of its frames on RNR), so the first publisher's close lingers (rdma.linger_ms = 60 s)
// until that subscriber has every frame. close() returns at once and, while the linger runs,
// the poller keeps cycling and the second stream keeps delivering; once the slow subscriber
// polls it gets every frame and a clean end of stream, and the linger ends.
TEST(RdmaTransport, ALingeringCloseLeavesThePollersOtherStreamsRunning) {
  POLLUX_REQUIRE_RXE();
  const int port = next_port();
  const std::string rdma = "srq = \"off\"\nrecv_queue_depth = 16\nrecv_batch = 8\nlinger_ms = 60000\n";
  auto sub_ctx = make(sub_config("inline", port, rdma));
  auto pub_ctx = make(pub_config("dedicated", port, rdma, "pollers = 1\ncounters = true\n"));
  ASSERT_TRUE(sub_ctx && pub_ctx);
  auto slow = sub_ctx->subscriber("slow");
  auto live = sub_ctx->subscriber("live");
  auto slow_pub = pub_ctx->publisher("slow");
  auto live_pub = pub_ctx->publisher("live");
  ASSERT_TRUE(slow.ok() && live.ok() && slow_pub.ok() && live_pub.ok())
      << slow.status() << live.status() << slow_pub.status() << live_pub.status();
  wait_connected(*slow_pub, *slow);
  wait_connected(*live_pub, *live);
  const std::string counters = pub_ctx->counters_path();
  ASSERT_FALSE(counters.empty());
  auto rdma_poller = [&](const char* name) { return rdmatest::counter_sum(counters, name, "rdma poller "); };
  auto cycles = [&] { return rdmatest::counter_sum(counters, "duty_cycles", "poller "); };

  constexpr std::uint64_t kSlowFrames = 40;
  offer_all(*slow_pub, kSlowFrames);
  const std::vector<std::int64_t> before = one_way_latencies(*live_pub, *live, 200);
  ASSERT_EQ(before.size(), 200u);

  const std::uint64_t cycles_at_close = cycles();
  const auto t0 = std::chrono::steady_clock::now();
  slow_pub->close();
  const auto close_us =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(rdma_poller("closing_endpoints"), 1u) << "the close did not linger (or did not hand the linger over)";
  EXPECT_EQ(rdma_poller("lingering_closes"), 1u);

  const std::vector<std::int64_t> during = one_way_latencies(*live_pub, *live, 200);
  const std::uint64_t cycles_during = cycles() - cycles_at_close;
  EXPECT_EQ(during.size(), 200u) << "the other stream stopped while a publisher of its poller lingered";
  EXPECT_GT(cycles_during, 0u) << "the poller stopped cycling";
  EXPECT_EQ(rdma_poller("closing_endpoints"), 1u) << "the linger ended before the slow subscriber polled";

  // The slow subscriber takes its frames now: all of them, then a clean end; the linger ends.
  Seen got;
  receive(*slow, kSlowFrames, &got, 60);
  EXPECT_EQ(got.received, kSlowFrames);
  EXPECT_EQ(got.bad + got.out_of_order + got.gaps, 0u);
  ASSERT_TRUE(wait_end(*slow, &got, 60)) << "no end of stream";  // (or it came with the last frames)
  EXPECT_EQ(got.died, 0u) << "a clean close must end the stream, not report the publisher dead";
  ASSERT_TRUE(wait_for([&] { return rdma_poller("closing_endpoints") == 0; }, 60)) << "the linger never ended";
  EXPECT_EQ(rdmatest::counter_sum(counters, "unacknowledged_at_close"), 0u);
  std::printf(
      "close() returned in %lld us; while it lingered the poller ran %llu duty cycles\n"
      "other stream before the close: %s\nother stream during the linger: %s\n",
      static_cast<long long>(close_us), static_cast<unsigned long long>(cycles_during), latency_summary(before).c_str(),
      latency_summary(during).c_str());
}

// ---- errors a user can act on --------------------------------------------------------------------

std::string context_error(const std::string& toml) {
  auto c = Context::from_string(toml, "feed.toml");
  EXPECT_FALSE(c.ok());
  return c.ok() ? "" : std::string(c.status().message());
}

TEST(RdmaErrors, BadGidIndex) {
  POLLUX_REQUIRE_RXE();
  std::string toml = rdmatest::rdma_config("inline", "rxe1", "");
  toml.replace(toml.find("gid_index = 1"), 13, "gid_index = 7");
  const std::string e = context_error(toml);
  std::printf("%s\n", e.c_str());
  EXPECT_NE(e.find("rdma.gid_index = 7"), std::string::npos) << e;
  EXPECT_NE(e.find("rxe1 port 1 has no GID at index 7"), std::string::npos) << e;
  EXPECT_NE(e.find("1 (::ffff:10.0.0.2, RoCE v2)"), std::string::npos) << e;
  // Index 0 exists but is the IPv6 link-local GID: also refused, with the reason.
  toml.replace(toml.find("gid_index = 7"), 13, "gid_index = 0");
  const std::string e0 = context_error(toml);
  EXPECT_NE(e0.find("not an IPv4-mapped address"), std::string::npos) << e0;
}

TEST(RdmaErrors, MissingDevice) {
  POLLUX_REQUIRE_RXE();
  const std::string e = context_error(rdmatest::rdma_config("inline", "mlx5_9", ""));
  std::printf("%s\n", e.c_str());
  EXPECT_NE(e.find("rdma.device = \"mlx5_9\": no such RDMA device; available: rxe0, rxe1"), std::string::npos) << e;
  EXPECT_EQ(e.rfind("feed.toml: ", 0), 0u) << e;
}

TEST(RdmaErrors, PeerUnreachableAndNobodyListening) {
  POLLUX_REQUIRE_RXE();
  // 10.0.0.9 does not exist on the wire; 10.0.0.2 exists but nobody listens on that port.
  for (const std::string peer : {"10.0.0.9:7471", "10.0.0.2:7999"}) {
    rdmatest::RawTransport t;
    std::string toml = rdmatest::rdma_config(
        "inline", "rxe0", "peers = [\"" + peer + "\"]\nconnect_timeout_ms = 500\nreconnect_ms = 100\n");
    ASSERT_TRUE(rdmatest::open_raw(toml, &t).ok());
    auto tx = t.t->open_tx({9, "x", nullptr, -1});
    ASSERT_TRUE(tx.ok());
    auto* ep = static_cast<transport::rdma::RdmaTxEndpoint*>(tx->get());
    EXPECT_TRUE(wait_for([&] { return !ep->status().empty(); }, 30)) << peer;
    std::printf("%s -> %s\n", peer.c_str(), ep->status().c_str());
    EXPECT_FALSE(ep->connected());
    EXPECT_NE(ep->status().find("cannot connect to subscriber " + peer), std::string::npos) << ep->status();
    (*tx)->close_st();
  }
}

TEST(RdmaErrors, RcPublisherWithoutPeers) {
  POLLUX_REQUIRE_RXE();
  auto ctx = make(rdmatest::rdma_config("inline", "rxe0", ""));
  ASSERT_TRUE(ctx);
  auto pub = ctx->publisher("md");
  ASSERT_FALSE(pub.ok());
  EXPECT_NE(pub.status().message().find("rdma.peers is empty"), std::string::npos) << pub.status();
}

TEST(RdmaErrors, SecondSubscriberOnTheSameListenPort) {
  POLLUX_REQUIRE_RXE();
  const int port = next_port();
  auto a = make(sub_config("inline", port));
  auto b = make(sub_config("inline", port));
  ASSERT_TRUE(a && b);
  auto s1 = a->subscriber("md");
  ASSERT_TRUE(s1.ok());
  auto s2 = b->subscriber("md");
  ASSERT_FALSE(s2.ok());
  EXPECT_NE(s2.status().message().find("already taken"), std::string::npos) << s2.status();
}

// The memlock message, for real: a child without CAP_IPC_LOCK and a 64 KiB limit.
TEST(RdmaErrors, MemlockTooLowNamesUlimit) {
  POLLUX_REQUIRE_RXE();
  int pfd[2];
  ASSERT_EQ(pipe(pfd), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    close(pfd[0]);
    __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2]{};
    syscall(SYS_capget, &hdr, data);
    data[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
    syscall(SYS_capset, &hdr, data);
    rlimit rl{64 << 10, 64 << 10};
    setrlimit(RLIMIT_MEMLOCK, &rl);
    auto c = Context::from_string(rdmatest::rdma_config("inline", "rxe1", ""), "feed.toml");
    const std::string msg = c.ok() ? "OK" : std::string(c.status().message());
    (void)!write(pfd[1], msg.data(), msg.size());
    _exit(0);
  }
  close(pfd[1]);
  std::string msg;
  char buf[4096];
  ssize_t n;
  while ((n = read(pfd[0], buf, sizeof buf)) > 0) msg.append(buf, static_cast<std::size_t>(n));
  close(pfd[0]);
  waitpid(pid, nullptr, 0);
  std::printf("%s\n", msg.c_str());
  EXPECT_NE(msg.find("`ulimit -l"), std::string::npos) << msg;
  EXPECT_NE(msg.find("64 KiB"), std::string::npos) << msg;
}

std::string port_state(const char* dev) {
  std::ifstream f(std::string("/sys/class/infiniband/") + dev + "/ports/1/state");
  std::string s;
  std::getline(f, s);
  return s;
}

// Port down: take the netdev under rxe1 down, expect the documented error, bring it back (with
// the runner's policy route, which the kernel drops with the link) and check RC works again.
// Kept last: it briefly breaks the VM's wire.
TEST(RdmaErrorsZ, PortDownThenBackUp) {
  POLLUX_REQUIRE_RXE();
  ASSERT_EQ(system("ip link set veth1 down"), 0);
  EXPECT_TRUE(wait_for([] { return port_state("rxe1").find("DOWN") != std::string::npos; }, 10)) << port_state("rxe1");
  const std::string e = context_error(rdmatest::rdma_config("inline", "rxe1", ""));
  std::printf("%s\n", e.c_str());
  ASSERT_EQ(system("ip link set veth1 up && ip route replace 10.0.0.1 dev veth1 src 10.0.0.2 table 101"), 0);
  EXPECT_NE(e.find("rxe1 port 1 is DOWN"), std::string::npos) << e;
  EXPECT_NE(e.find("ip link set <netdev> up"), std::string::npos) << e;
  ASSERT_TRUE(wait_for([] { return port_state("rxe1").find("ACTIVE") != std::string::npos; }, 30))
      << port_state("rxe1");
  run_rc("inline", 1000);
}

}  // namespace
}  // namespace pollux
