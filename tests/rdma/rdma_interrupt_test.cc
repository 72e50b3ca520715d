// The RDMA poller source and interrupt mode, inside the Soft-RoCE VM only (rdma_vm_suite):
//   - with N endpoints on one poller the shared CQ is polled exactly once per duty cycle
//     (the source polls, the endpoints are passive) - a counter, no timing;
//   - try_arm() arms the CQ and re-polls; completions that re-poll finds make it refuse and are
//     already dispatched to their endpoint (poll_st hands them out without another CQ poll);
//   - a connection-manager announcement wakes an armed source (the bell in its notify fd);
//   - CQ moderation from a policy: applied, or refused once (rxe) and counted;
//   - the lost-wakeup stress: two contexts with runtime.idle = "interrupt" and
//     runtime.sleep_timer_ms = 0 (no safety timer), one message at a time so both pollers
//     sleep and wake for every message, for POLLUX_RDMA_STRESS_SECONDS (60): no message later
//     than 100 ms after its offer, none lost.
#include <poll.h>
#include <time.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "core/counters.h"
#include "core/frame.h"
#include "core/wakeup.h"
#include "tests/rdma/rdma_test_util.h"
#include "transport/rdma/rdma_endpoints.h"
#include "transport/rdma/rdma_transport.h"

namespace pollux {
namespace {

using rdmatest::make;
using rdmatest::next_port;
using rdmatest::pub_config;
using rdmatest::sub_config;
using rdmatest::wait_for;
using transport::rdma::CompletionGroup;
using transport::rdma::CqModeration;
using transport::rdma::CqModerationPolicy;
using transport::rdma::RdmaPollerSource;

std::int64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

bool readable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, timeout_ms) == 1;
}

// Subscribers on poller 0 of a raw transport on rxe1 (the test thread plays the poller: it
// calls the source and then each endpoint, as Poller::do_work and AppRxSource do), inline
// publishers on rxe0.
struct PollerRig {
  rdmatest::RawTransport pub, sub;
  RdmaPollerSource* source = nullptr;
  std::vector<std::unique_ptr<transport::RxEndpoint>> rx;
  std::vector<std::unique_ptr<transport::TxEndpoint>> tx;
  core::SlotRange slots{};
  std::uint64_t received = 0;

  CompletionGroup* group() const { return source->group(); }
  // One duty cycle: the source, then every subscriber (deliver + release).
  int cycle() {
    int work = source->progress(mono_ns());
    transport::RxDesc out[64];
    for (auto& r : rx) {
      const std::uint32_t n = r->poll_st(out);
      for (std::uint32_t i = 0; i < n; ++i) received += out[i].kind == transport::RxKind::kMessage;
      r->release_st({out, n}, false);
      work += static_cast<int>(n);
    }
    return work;
  }
  std::uint32_t frame(std::uint32_t stream, std::uint32_t i) {
    const std::uint32_t slot = slots.first + i % slots.count;
    auto* h = reinterpret_cast<core::FrameHeader*>(pub.pool->slot(slot));
    h->frame_length = core::kFrameHeaderSize + 16;
    h->magic = core::kFrameMagic;
    h->version = core::kFrameVersion;
    h->flags = 0;
    h->stream_id = stream;
    h->session_id = 0;
    h->sequence = 0;
    h->timestamp_ns = 1;
    return slot;
  }
  // Posts one frame on publisher k (stream k + 1) and reaps what completed.
  void send(std::uint32_t k, std::uint32_t i) {
    const transport::TxDesc d{frame(k + 1, i), core::kFrameHeaderSize + 16, 0, 0, 0};
    std::uint32_t freed[64];
    for (int tries = 0; tx[k]->post_st({&d, 1}) != 1; ++tries) {
      (void)tx[k]->reap_st(freed);
      ASSERT_LT(tries, 1'000'000) << "publisher " << k << " stuck";
      std::this_thread::yield();
    }
    (void)tx[k]->reap_st(freed);
  }
};

void open_rig(PollerRig* r, std::uint32_t n, const std::string& extra = "") {
  const int port = next_port();
  ASSERT_TRUE(rdmatest::open_raw(sub_config("dedicated", port, extra), &r->sub).ok());
  ASSERT_TRUE(rdmatest::open_raw(pub_config("inline", port, extra), &r->pub).ok());
  auto src = r->sub.t->poller_source(0);
  ASSERT_TRUE(src.ok()) << src.status();
  r->source = dynamic_cast<RdmaPollerSource*>(*src);
  ASSERT_NE(r->source, nullptr) << "the rdma poller source is not an RdmaPollerSource";
  ASSERT_GE(r->source->notify_fd(), 0);
  for (std::uint32_t k = 0; k < n; ++k) {
    auto rx = r->sub.t->open_rx({k + 1, absl::StrCat("s", k), nullptr, 0});
    ASSERT_TRUE(rx.ok()) << rx.status();
    r->rx.push_back(std::move(*rx));
    auto tx = r->pub.t->open_tx({k + 1, absl::StrCat("s", k), nullptr, -1});
    ASSERT_TRUE(tx.ok()) << tx.status();
    r->tx.push_back(std::move(*tx));
  }
  auto s = r->pub.pool->carve(256);
  ASSERT_TRUE(s.ok());
  r->slots = *s;
  ASSERT_TRUE(wait_for([&] {
    (void)r->cycle();
    bool all = true;
    for (auto& t : r->tx) {
      std::uint32_t freed[8];
      (void)t->reap_st(freed);  // inline publisher: syncs its group (adopts the QP)
      all &= t->connected();
    }
    for (auto& x : r->rx) all &= x->connected();
    return all;
  })) << "publishers never connected";
}

// N endpoints on one poller, the CQ polled once per duty cycle (not once per endpoint through
// poll_st -> group->progress(), which would count N + 1 per cycle with the source).
TEST(RdmaPollerSource, SharedCqPolledOncePerDutyCycleWithFourEndpoints) {
  POLLUX_REQUIRE_RXE();
  PollerRig r;
  constexpr std::uint32_t kEndpoints = 4;
  open_rig(&r, kEndpoints);
  if (HasFatalFailure()) return;
  constexpr std::uint64_t kCycles = 2000;
  const std::uint64_t polls0 = r.group()->cq_polls();
  const std::uint64_t received0 = r.received;
  std::uint32_t sent = 0;
  for (std::uint64_t c = 0; c < kCycles; ++c) {
    if (c % 4 == 0 && c < kCycles / 2) {
      r.send(static_cast<std::uint32_t>(c / 4) % kEndpoints, sent);
      if (HasFatalFailure()) return;
      ++sent;
    }
    (void)r.cycle();
  }
  EXPECT_EQ(r.group()->cq_polls() - polls0, kCycles) << "the shared CQ must be polled once per duty cycle";
  // And the frames were all dispatched through that one poll (drain: more cycles, still one poll each).
  std::uint64_t extra = 0;
  ASSERT_TRUE(wait_for([&] {
    (void)r.cycle();
    ++extra;
    return r.received - received0 >= sent;
  })) << "received "
      << (r.received - received0) << " of " << sent;
  EXPECT_EQ(r.received - received0, sent);
  EXPECT_EQ(r.group()->cq_polls() - polls0, kCycles + extra);
}

// try_arm: arms and re-polls; the arrival raises an event on notify_fd(); a completion that
// the re-poll finds makes it refuse, and stays dispatched: poll_st hands it out with no other
// CQ poll in between.
TEST(RdmaPollerSource, ArmRefusesOnPendingCompletionAndKeepsItDispatched) {
  POLLUX_REQUIRE_RXE();
  PollerRig r;
  open_rig(&r, 1);
  if (HasFatalFailure()) return;
  // Settle: nothing in flight (the connect-time traffic consumed), then arm.
  // disarm() first: it consumes what earlier control events left on the fd (the bell).
  ASSERT_TRUE(wait_for([&] {
    r.source->disarm();
    return r.cycle() == 0 && r.source->try_arm();
  })) << "an idle source never armed";
  EXPECT_FALSE(readable(r.source->notify_fd(), 50)) << "readable without any arrival";
  r.send(0, 0);
  ASSERT_TRUE(readable(r.source->notify_fd(), 10000)) << "armed CQ raised no event for an arrival";
  // Still armed and not yet polled: the completion sits in the CQ. try_arm re-polls, finds it,
  // refuses - and the message is already with the endpoint.
  EXPECT_FALSE(r.source->try_arm()) << "a completion was pending";
  const std::uint64_t polls = r.group()->cq_polls();
  transport::RxDesc out[8];
  const std::uint32_t n = r.rx[0]->poll_st(out);
  std::uint32_t msgs = 0;
  for (std::uint32_t i = 0; i < n; ++i) msgs += out[i].kind == transport::RxKind::kMessage;
  r.rx[0]->release_st({out, n}, false);
  EXPECT_EQ(msgs, 1u) << "the completion found by try_arm's re-poll was lost";
  EXPECT_EQ(r.group()->cq_polls(), polls) << "a poller's endpoint polled the CQ itself";
  r.source->disarm();
  EXPECT_FALSE(readable(r.source->notify_fd(), 0)) << "disarm left the notify fd readable";
}

// A connection-manager event (a new publisher connecting) reaches an armed, sleeping source
// through its notify fd: the CM thread's announcement rings the group's bell.
TEST(RdmaPollerSource, ConnectionManagerAnnouncementWakesArmedSource) {
  POLLUX_REQUIRE_RXE();
  const int port = next_port();
  rdmatest::RawTransport sub, pub;
  ASSERT_TRUE(rdmatest::open_raw(sub_config("dedicated", port), &sub).ok());
  ASSERT_TRUE(rdmatest::open_raw(pub_config("inline", port), &pub).ok());
  auto src = sub.t->poller_source(0);
  ASSERT_TRUE(src.ok());
  auto rx = sub.t->open_rx({3, "c", nullptr, 0});
  ASSERT_TRUE(rx.ok()) << rx.status();
  transport::RxDesc out[4];
  ASSERT_TRUE(wait_for([&] {
    (*src)->disarm();  // consumes the bell rung by open_rx (enable_receives)
    const bool idle = (*src)->progress(mono_ns()) == 0 && (*rx)->poll_st(out) == 0;
    return idle && (*src)->try_arm();
  }));
  EXPECT_FALSE(readable((*src)->notify_fd(), 50));
  auto tx = pub.t->open_tx({3, "c", nullptr, -1});
  ASSERT_TRUE(tx.ok()) << tx.status();
  ASSERT_TRUE(readable((*src)->notify_fd(), 20000)) << "the new connection's announcement did not wake the source";
  (*src)->disarm();
  ASSERT_TRUE(wait_for([&] {
    (void)(*src)->progress(mono_ns());
    (void)(*rx)->poll_st(out);
    return (*rx)->connected();
  }));
}

// CQ moderation through the source's policy seam: the source applies what the policy returns;
// a device that refuses (rxe) is recorded once in "cq_moderation_unsupported" and the policy
// is told and never asked again; traffic goes on either way.
struct ScriptedPolicy final : CqModerationPolicy {
  int updates = 0, restarts = 0, unsupported = 0;
  std::optional<CqModeration> update(std::int64_t, std::uint64_t, std::uint64_t) noexcept override {
    ++updates;
    return CqModeration{16, 10};
  }
  void restart(std::int64_t, std::uint64_t, std::uint64_t) noexcept override { ++restarts; }
  void set_unsupported() noexcept override { ++unsupported; }
};

TEST(RdmaPollerSource, ModerationAppliedOrRefusedOnceAndCounted) {
  POLLUX_REQUIRE_RXE();
  PollerRig r;
  open_rig(&r, 1);
  if (HasFatalFailure()) return;
  auto owned = std::make_unique<ScriptedPolicy>();
  ScriptedPolicy* p = owned.get();
  r.source->set_moderation_policy(std::move(owned));
  for (int i = 0; i < 5; ++i) (void)r.source->housekeeping(mono_ns());
  const bool refused = r.group()->moderation_unsupported();
  std::printf("ibv_modify_cq on rxe1: %s\n", refused ? "refused" : "applied");
  if (refused) {
    EXPECT_EQ(p->updates, 1) << "asked again after the device refused";
    EXPECT_EQ(p->unsupported, 1);
  } else {
    EXPECT_EQ(p->updates, 5);
    EXPECT_EQ(p->unsupported, 0);
  }
  if (!r.sub.counters->path().empty()) {
    EXPECT_EQ(rdmatest::counter_sum(r.sub.counters->path(), "cq_moderation_unsupported", "rdma poller 0"),
              refused ? 1u : 0u);
  }
  // Either way frames still arrive.
  const std::uint64_t before = r.received;
  for (std::uint32_t i = 0; i < 20; ++i) r.send(0, i);
  ASSERT_TRUE(wait_for([&] {
    (void)r.cycle();
    return r.received - before >= 20;
  }));
}

// ---- lost-wakeup stress -------------------------------------------------------------------------

void dump_counters(Context& ctx, const char* who) {
  auto snap = core::read_counters_file(ctx.counters_path());
  if (!snap.ok()) return;
  std::printf("---- %s counters\n", who);
  for (const auto& c : snap->counters) {
    if (c.value != 0 && (c.scope.rfind("rdma", 0) == 0 || c.scope.rfind("poller", 0) == 0)) {
      std::printf("  %-36s %-28s %llu\n", c.scope.c_str(), c.name.c_str(), static_cast<unsigned long long>(c.value));
    }
  }
}

// A context configuration with runtime.idle = `idle`, no safety timer (sleep_timer_ms = 0), one
// poller and a counters file. rdma_config() sets idle = "yield"; TOML forbids a second idle key,
// so that line is swapped.
std::string with_idle(const std::string& base, const std::string& idle) {
  const std::string rt = "idle = \"" + idle + "\"\nsleep_timer_ms = 0\npollers = 1\ncounters = true\n";
  const std::string from = "idle = \"yield\"\n";
  const std::size_t at = base.find(from);
  return at == std::string::npos ? base : base.substr(0, at) + rt + base.substr(at + from.size());
}

std::uint64_t poller_counter(Context& ctx, const std::string& name) {
  return rdmatest::counter_sum(ctx.counters_path(), name, "poller ");
}

// One message in flight at a time, so every message finds both pollers (publisher side and
// subscriber side) asleep or about to sleep: each one is a sleep/wake transition on each side,
// through the app ring doorbell (publisher), the CQ completion event (subscriber; and the
// publisher's signalled sends) and the subscriber ring's eventfd. No safety timer
// (sleep_timer_ms = 0): a lost wakeup leaves its message undelivered until the next message,
// which never comes - the test sees it as a message later than 100 ms (and as lost after 10 s).
// Lateness is judged net of measured VM stalls (see the stall detector below): under TCG on
// shared cores the whole VM freezes for 100+ ms at times, polling pollers included.
TEST(RdmaInterruptStress, NoLostWakeupWithoutSafetyTimer) {
  POLLUX_REQUIRE_RXE();
  const char* env = std::getenv("POLLUX_RDMA_STRESS_SECONDS");
  const int seconds = env != nullptr ? std::atoi(env) : 60;
  const int port = next_port();
  // POLLUX_RDMA_STRESS_IDLE=yield runs the same traffic with polling pollers: the control run
  // that tells environment stalls (emulation, host load, rxe retransmits) from lost wakeups.
  const char* idle_env = std::getenv("POLLUX_RDMA_STRESS_IDLE");
  const std::string idle = idle_env != nullptr ? idle_env : "interrupt";
  const bool sleeping = idle == "interrupt" || idle == "adaptive";
  rdmatest::ConnectedPair c;
  ASSERT_NO_FATAL_FAILURE(
      c.open(with_idle(sub_config("dedicated", port), idle), with_idle(pub_config("dedicated", port), idle)));
  auto& [sub_ctx, pub_ctx, sub, pub] = c;

  std::atomic<std::uint32_t> delivered{0};  // tag of the last message delivered (futex word)
  std::atomic<bool> stop{false};
  std::uint64_t late = 0, bad = 0, out_of_order = 0, gaps = 0;
  std::int64_t worst_ns = 0;
  struct Slow {
    std::uint64_t tag;
    std::int64_t offered, delivered;
  };
  std::vector<Slow> slow;  // consumer thread until joined
  slow.reserve(4096);
  // Stall detector (cyclictest-style): a thread that sleeps 2 ms at a time and records every
  // oversleep beyond 1 ms - time the emulated VM was frozen or starved by the host (2 shared
  // cores), which delays every thread alike, polling or sleeping. A message's lateness is
  // judged net of the stalls that overlap its offer->delivery window: a lost wakeup shows no
  // matching stall (and, with no safety timer and nothing else to wake that poller, never
  // ends: "lost").
  struct Stall {
    std::int64_t from, to;
  };
  std::vector<Stall> stalls;
  stalls.reserve(1 << 18);
  std::atomic<bool> stop_monitor{false};
  std::thread monitor([&] {
    while (!stop_monitor.load(std::memory_order_relaxed)) {
      const std::int64_t t0 = mono_ns();
      timespec ts{0, 2'000'000};
      nanosleep(&ts, nullptr);
      const std::int64_t t1 = mono_ns();
      if (t1 - t0 > 3'000'000 && stalls.size() < stalls.capacity()) stalls.push_back({t0 + 2'000'000, t1});
    }
  });
  std::thread consumer([&] {
    std::uint64_t next = 1;
    while (!stop.load(std::memory_order_acquire)) {
      const int n = sub->poll(
          [&](const Message& m) {
            const std::int64_t now = mono_ns();
            std::uint64_t tag = 0;
            std::int64_t offered = 0;
            if (m.payload.size() < 16) {
              ++bad;
              return;
            }
            std::memcpy(&tag, m.payload.data(), 8);
            std::memcpy(&offered, m.payload.data() + 8, 8);
            if (tag != next) ++out_of_order;
            next = tag + 1;
            const std::int64_t lat = now - offered;
            worst_ns = std::max(worst_ns, lat);
            if (lat > 100'000'000 && slow.size() < slow.capacity()) slow.push_back({tag, offered, now});
            // Release pairs with the producer's acquire load: it then offers the next one.
            delivered.store(static_cast<std::uint32_t>(tag), std::memory_order_release);
            (void)core::futex_wake(&delivered, 1, false);
          },
          [&](const Gap&) { ++gaps; }, [](const StreamEvent&) {}, 16);
      if (n == 0) (void)sub->wait(200'000);  // us; a timeout only re-checks `stop`
    }
  });
  const std::uint64_t sleeps0 = poller_counter(*sub_ctx, "sleeps") + poller_counter(*pub_ctx, "sleeps");
  const std::uint64_t wakeups_sub0 = poller_counter(*sub_ctx, "wakeups");
  const std::uint64_t wakeups_pub0 = poller_counter(*pub_ctx, "wakeups");
  const std::int64_t end = mono_ns() + static_cast<std::int64_t>(seconds) * 1'000'000'000;
  std::uint64_t sent = 0, lost = 0;
  bool offer_failed = false;
  std::byte buf[64] = {};
  while (mono_ns() < end && !offer_failed) {
    const std::uint64_t tag = sent + 1;
    const std::int64_t now = mono_ns();
    std::memcpy(buf, &tag, 8);
    std::memcpy(buf + 8, &now, 8);
    std::int64_t r;
    std::uint64_t spins = 0;
    while ((r = pub->offer(buf, 24)) < 0) {
      if ((r != kBackPressured && r != kNotConnected) || ++spins > 100'000'000ull) {
        ADD_FAILURE() << "offer of " << tag << ": " << result_name(r);
        offer_failed = true;
        break;
      }
      if (spins % 16 == 0) std::this_thread::yield();
    }
    if (offer_failed) break;
    sent = tag;
    // Block (futex) until the consumer saw it; 10 s at most: longer means the message is lost.
    const std::int64_t give_up = now + 10'000'000'000;
    std::uint32_t d;
    while ((d = delivered.load(std::memory_order_acquire)) != static_cast<std::uint32_t>(tag) && mono_ns() < give_up) {
      (void)core::futex_wait(&delivered, d, false, 100'000'000);
    }
    if (d != static_cast<std::uint32_t>(tag)) {
      lost = 1;
      std::printf("lost: message %llu not delivered after 10 s (last delivered %u)\n",
                  static_cast<unsigned long long>(tag), d);
      dump_counters(*pub_ctx, "publisher context");
      dump_counters(*sub_ctx, "subscriber context");
      break;
    }
  }
  stop.store(true, std::memory_order_release);
  consumer.join();
  stop_monitor.store(true, std::memory_order_relaxed);
  monitor.join();
  std::int64_t stalled_ns = 0;
  for (const Stall& st : stalls) stalled_ns += st.to - st.from;
  for (const Slow& m : slow) {
    std::int64_t excused = 0;
    for (const Stall& st : stalls) {
      excused += std::max<std::int64_t>(0, std::min(st.to, m.delivered) - std::max(st.from, m.offered));
    }
    const std::int64_t net = m.delivered - m.offered - excused;
    if (net > 100'000'000) ++late;
    if (net > 100'000'000 || slow.size() <= 20) {
      std::printf("slow: message %llu delivered %.3f ms after its offer, %.3f ms of it in measured VM stalls%s\n",
                  static_cast<unsigned long long>(m.tag), (m.delivered - m.offered) / 1e6, excused / 1e6,
                  net > 100'000'000 ? " - LATE" : "");
    }
  }
  const std::uint64_t sleeps = poller_counter(*sub_ctx, "sleeps") + poller_counter(*pub_ctx, "sleeps") - sleeps0;
  const std::uint64_t wake_sub = poller_counter(*sub_ctx, "wakeups") - wakeups_sub0;
  const std::uint64_t wake_pub = poller_counter(*pub_ctx, "wakeups") - wakeups_pub0;
  std::printf(
      "lost-wakeup stress over rxe (idle %s): %d s, %llu messages, %llu poller sleeps (subscriber side %llu wakeups, "
      "publisher side %llu), worst offer->delivery %.3f ms, %zu over 100 ms of which late net of VM stalls %llu, lost "
      "%llu, "
      "spurious sub %llu pub %llu; VM stalls > 1 ms: %zu, %.1f ms in all\n",
      idle.c_str(), seconds, static_cast<unsigned long long>(sent), static_cast<unsigned long long>(sleeps),
      static_cast<unsigned long long>(wake_sub), static_cast<unsigned long long>(wake_pub), worst_ns / 1e6, slow.size(),
      static_cast<unsigned long long>(late), static_cast<unsigned long long>(lost),
      static_cast<unsigned long long>(poller_counter(*sub_ctx, "spurious_wakeups")),
      static_cast<unsigned long long>(poller_counter(*pub_ctx, "spurious_wakeups")), stalls.size(), stalled_ns / 1e6);
  RecordProperty("messages", static_cast<int>(sent));
  RecordProperty("sleeps", static_cast<int>(sleeps));
  EXPECT_EQ(lost, 0u) << "a message was never delivered: a lost wakeup";
  EXPECT_EQ(late, 0u) << "messages delivered later than 100 ms after their offer (net of measured VM stalls)";
  EXPECT_EQ(bad + out_of_order + gaps, 0u);
  EXPECT_GT(sent, 100u);
  // The pollers really slept: a source that refused to arm would pass the checks above while
  // spinning. Every message must have woken the subscriber's poller at least once (it can only
  // be woken, never spin, between messages) - allow for a handful of messages that arrived
  // while it was still awake.
  if (sleeping) {
    EXPECT_GE(wake_sub, sent / 2) << "the subscriber's poller hardly slept";
    EXPECT_GE(wake_pub, sent / 2) << "the publisher's poller hardly slept";
  }
}

// UD multicast with loss repair while both pollers sleep (runtime.idle = "interrupt", no safety
// timer, heartbeats only every second): the loss interceptor drops 10% of the subscriber's
// datagrams and every message is still delivered, in order, without a gap. The NAKs, the repairs
// and the tail heartbeat that reveals a lost last datagram go out on the group timers armed for
// the protocol's own deadlines (CompletionGroup::try_arm), or on the wakeups of the traffic.
TEST(RdmaInterruptUd, RepairsLossWhileThePollersSleep) {
  POLLUX_REQUIRE_RXE();
  const std::string ud = "multicast_group = \"239.255.68." + std::to_string(10 + getpid() % 200) +
                         "\"\nheartbeat_ms = 1000\nliveness_timeout_ms = 20000\n";
  rdmatest::ConnectedPair c;
  ASSERT_NO_FATAL_FAILURE(c.open(
      with_idle(rdmatest::rdma_config("dedicated", "rxe1", ud + "fault_loss = 0.1\nfault_seed = 3\n", "", "ud_mcast"),
                "interrupt"),
      with_idle(rdmatest::rdma_config("dedicated", "rxe0", ud, "", "ud_mcast"), "interrupt")));
  auto& [sub_ctx, pub_ctx, sub, pub] = c;
  constexpr std::uint64_t kCount = 2000;
  std::thread producer([&] {
    std::byte buf[64] = {};
    for (std::uint64_t i = 1; i <= kCount; ++i) {
      std::memcpy(buf, &i, 8);
      while (pub->offer(buf, sizeof buf) < 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
      std::this_thread::sleep_for(std::chrono::microseconds(500));  // both pollers go to sleep between messages
    }
  });
  std::uint64_t received = 0, out_of_order = 0, gaps = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (received < kCount && std::chrono::steady_clock::now() < deadline) {
    const int n = sub->poll(
        [&](const Message& m) {
          std::uint64_t tag;
          std::memcpy(&tag, m.payload.data(), 8);
          out_of_order += tag != received + 1;
          ++received;
        },
        [&](const Gap&) { ++gaps; }, [](const StreamEvent&) {}, 64);
    if (n == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  producer.join();
  auto counter = [](Context& ctx, const std::string& name) { return rdmatest::counter_sum(ctx.counters_path(), name); };
  const std::uint64_t dropped = counter(*sub_ctx, "fault_dropped"), fills = counter(*sub_ctx, "gap_fills");
  std::printf(
      "ud repair asleep: %llu received, %llu dropped by the interceptor, %llu gap fills, %llu NAKs, %llu "
      "repaired frames, %llu + %llu poller sleeps\n",
      static_cast<unsigned long long>(received), static_cast<unsigned long long>(dropped),
      static_cast<unsigned long long>(fills), static_cast<unsigned long long>(counter(*sub_ctx, "naks_sent")),
      static_cast<unsigned long long>(counter(*pub_ctx, "retransmitted_frames")),
      static_cast<unsigned long long>(poller_counter(*sub_ctx, "sleeps")),
      static_cast<unsigned long long>(poller_counter(*pub_ctx, "sleeps")));
  EXPECT_EQ(received, kCount);
  EXPECT_EQ(out_of_order, 0u);
  EXPECT_EQ(gaps, 0u);
  EXPECT_GT(dropped, 50u);
  // The drops were repaired: frames arrived below the highest sequence (gap fills, per frame),
  // and each came from a retransmission. No fixed ratio to `dropped` holds: a dropped datagram
  // may carry several frames (the publisher's poller drains what queued while it slept), a
  // dropped repair is asked for again, a dropped heartbeat needs nothing.
  const std::uint64_t retransmitted = counter(*pub_ctx, "retransmitted_frames");
  EXPECT_GT(fills, 0u);
  EXPECT_LE(fills, retransmitted + 5) << "gap fills without a retransmission (beyond a few reorderings)";
  EXPECT_GT(poller_counter(*sub_ctx, "sleeps"), 100u) << "the subscriber's poller must have slept";
  EXPECT_GT(poller_counter(*pub_ctx, "sleeps"), 100u) << "the publisher's poller must have slept";
}

}  // namespace
}  // namespace pollux
