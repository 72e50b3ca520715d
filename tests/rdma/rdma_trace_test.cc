// Traced RDMA frames (VM test, tests/rdma/README.md): the local send completion of every traced
// message (its send CQE, always signalled whatever rdma.signal_every says) reaches
// Publisher::send_completion_ns, and the receive CQE's poll time becomes the message's receive
// stamp; untraced messages get neither. Also: rdma.post_batch splits a burst into several
// doorbells (the post_calls counter), deterministically at the transport level.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/buffer_pool.h"
#include "core/clock.h"
#include "core/counters.h"
#include "core/frame.h"
#include "core/trace.h"
#include "pollux/pollux.h"
#include "tests/rdma/rdma_test_util.h"
#include "transport/transport.h"

namespace pollux {
namespace {

using namespace rdmatest;  // NOLINT(google-build-using-namespace): the helpers of rdma_test_util.h

// Two streams on each context: "t" traced (every message), "u" not.
constexpr char kStreams[] =
    "[[streams]]\ntopic = \"t\"\nid = 71\ntrace = true\ntrace_every = 1\n"
    "[[streams]]\ntopic = \"u\"\nid = 72\n";

struct Got {
  bool have = false;
  bool traced = false;
  std::uint64_t sequence = 0;
  std::int64_t ns[StageTimes::kCount] = {};
};

// Offers one message on `pub` and polls `sub` until it arrives (inline: both sides' duties run
// on this thread).
Got round(Publisher& pub, Subscriber& sub, std::uint64_t i) {
  Got g;
  std::byte buf[64] = {};
  std::memcpy(buf, &i, sizeof i);
  for (int spins = 0; pub.offer(buf, sizeof buf) < 0; ++spins) {
    (void)pub.service();
    if (spins % 64 == 63) std::this_thread::yield();
    if (spins > 20'000'000) return g;
  }
  EXPECT_TRUE(wait_for(
      [&] {
        (void)pub.service();
        (void)sub.poll(
            [&](const Message& m) {
              g.have = true;
              g.sequence = m.sequence;
              g.traced = m.trace != nullptr;
              if (m.trace != nullptr) std::memcpy(g.ns, m.trace->ns, sizeof g.ns);
            },
            4);
        return g.have;
      },
      30))
      << "message " << i << " never arrived";
  return g;
}

// Waits (bounded) for the publisher to learn the send completion of `seq`.
std::int64_t completion(Publisher& pub, std::uint64_t seq) {
  std::int64_t sc = 0;
  (void)wait_for(
      [&] {
        (void)pub.service();  // inline: the publisher's duties poll its CQ
        sc = pub.send_completion_ns(seq);
        return sc != 0;
      },
      10);
  return sc;
}

void run_traced(const std::string& threading) {
  const int port = next_port();
  // signal_every = 16: a traced send must be signalled by itself, not 1 in 16.
  const std::string extra = "signal_every = 16\n";
  auto sub_ctx = make(sub_config(threading, port, extra) + kStreams);
  auto pub_ctx = make(pub_config(threading, port, extra) + kStreams);
  ASSERT_TRUE(sub_ctx && pub_ctx);
  auto sub_t = sub_ctx->subscriber("t");
  auto sub_u = sub_ctx->subscriber("u");
  auto pub_t = pub_ctx->publisher("t");
  auto pub_u = pub_ctx->publisher("u");
  ASSERT_TRUE(sub_t.ok() && sub_u.ok() && pub_t.ok() && pub_u.ok());
  ASSERT_TRUE(wait_for([&] {
    (void)sub_t->poll([](const Message&) {}, 1);
    (void)sub_u->poll([](const Message&) {}, 1);
    (void)pub_t->service();
    (void)pub_u->service();
    return pub_t->is_connected() && pub_u->is_connected();
  })) << "publishers never connected";

  constexpr std::uint64_t kMessages = 100;
  std::uint64_t checked = 0, ring_after_receive = 0;
  for (std::uint64_t i = 1; i <= kMessages; ++i) {
    const Got t = round(*pub_t, *sub_t, i);
    ASSERT_TRUE(t.have && t.traced) << i;
    const std::int64_t post = t.ns[StageTimes::kPost];
    const std::int64_t receive = t.ns[StageTimes::kReceive];
    const std::int64_t delivery = t.ns[StageTimes::kDelivery];
    const std::int64_t sc = completion(*pub_t, t.sequence);
    const std::int64_t now = core::Clock::now_ns();
    ASSERT_NE(post, 0) << i;
    ASSERT_NE(sc, 0) << "no send completion for traced message " << i << " (sequence " << t.sequence << ")";
    // The send was posted before it completed, and completed before we asked.
    EXPECT_LE(post, sc) << i;
    EXPECT_LE(sc, now) << i;
    // The receive stamp is the receive CQE's poll: after the post, before the delivery.
    EXPECT_LE(post, receive) << i;
    EXPECT_LE(receive, delivery) << i;
    if (threading != "inline") {
      // Dedicated: the poller's push to the subscriber ring is its own clock read, after the
      // CQE poll (before this change they were the same read).
      const std::int64_t ring = t.ns[StageTimes::kRingToSubscriber];
      EXPECT_LE(receive, ring) << i;
      EXPECT_LE(ring, delivery) << i;
      ring_after_receive += ring > receive;
    }
    ++checked;

    const Got u = round(*pub_u, *sub_u, i);
    ASSERT_TRUE(u.have) << i;
    EXPECT_FALSE(u.traced) << i;
    EXPECT_EQ(pub_u->send_completion_ns(u.sequence), 0) << "untraced message " << i << " has a send completion";
  }
  EXPECT_EQ(checked, kMessages);
  if (threading != "inline") {
    EXPECT_EQ(ring_after_receive, kMessages) << "the receive stamp is not the CQE poll (same read as the ring push)";
  } else {
    // Inline: the receive CQE poll and the delivery are different clock reads now.
    const Got t = round(*pub_t, *sub_t, kMessages + 1);
    EXPECT_LT(t.ns[StageTimes::kReceive], t.ns[StageTimes::kDelivery]);
  }
}

TEST(RdmaTrace, InlineSendCompletionAndReceiveStamp) {
  POLLUX_REQUIRE_RXE();
  run_traced("inline");
}

TEST(RdmaTrace, DedicatedSendCompletionAndReceiveStamp) {
  POLLUX_REQUIRE_RXE();
  run_traced("dedicated");
}

// ---- transport level: one post_st call of a 16-frame burst ---------------------------------------

transport::TxDesc frame(RawPair& p, std::uint32_t i, bool traced) {
  const std::uint32_t slot = p.slots.first + i % p.slots.count;
  auto* h = reinterpret_cast<core::FrameHeader*>(p.pub.pool->slot(slot));
  const std::uint32_t len = core::kFrameHeaderSize + static_cast<std::uint32_t>(sizeof(core::StageTrace)) + 16;
  h->frame_length = len;
  h->magic = core::kFrameMagic;
  h->version = core::kFrameVersion;
  h->flags = traced ? core::kFlagTraced : 0;
  h->stream_id = 7;
  h->session_id = 0;
  h->sequence = 0;
  h->timestamp_ns = 1;
  return transport::TxDesc{slot, len, h->flags, 0, 0};
}

std::uint64_t tx_counter(const RawPair& p, const char* name) {
  return rdmatest::counter_sum(p.pub.counters->path(), name, "rdma tx stream 7 ");
}
std::uint64_t post_calls(const RawPair& p) { return tx_counter(p, "post_calls"); }

// Posts one burst of 16 frames (frames 5 and 11 traced) in a single post_st call; returns the
// post calls it took; checks delivery, the receive stamps and the send completion log.
std::uint64_t burst(const std::string& extra) {
  RawPair p;
  open_pair(&p, extra);
  if (::testing::Test::HasFatalFailure()) return 0;
  constexpr std::uint32_t kBurst = 16;
  transport::TxDesc d[kBurst];
  for (std::uint32_t i = 0; i < kBurst; ++i) d[i] = frame(p, i, i == 5 || i == 11);
  const std::uint64_t before = post_calls(p);
  const std::uint64_t signalled_before = tx_counter(p, "signalled_sends");
  const std::int64_t t_post = core::Clock::now_ns();
  EXPECT_EQ(p.tx->post_st({d, kBurst}), kBurst);
  const std::uint64_t calls = post_calls(p) - before;
  // signal_every = 16 over 16 fresh sends would signal only the 16th; the two traced sends are
  // signalled by themselves and restart the count, so exactly those two are signalled.
  EXPECT_EQ(tx_counter(p, "signalled_sends") - signalled_before, 2u) << "traced sends are not signalled by themselves";
  // Receive side: all 16 in order; traced ones carry the receive CQE's poll time.
  std::vector<transport::RxDesc> got;
  EXPECT_TRUE(wait_for(
      [&] {
        transport::RxDesc out[32];
        const std::uint32_t n = p.rx->poll_st(out);
        for (std::uint32_t i = 0; i < n; ++i) {
          if (out[i].kind == transport::RxKind::kMessage) got.push_back(out[i]);
        }
        p.rx->release_st({out, n}, true);
        return got.size() >= kBurst;
      },
      30));
  EXPECT_EQ(got.size(), kBurst);
  const std::int64_t t_rx = core::Clock::now_ns();
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].sequence, i + 1);
    if (i == 5 || i == 11) {
      EXPECT_GE(got[i].receive_ns, t_post) << i;
      EXPECT_LE(got[i].receive_ns, t_rx) << i;
    } else {
      EXPECT_EQ(got[i].receive_ns, 0) << "untraced frame " << i << " was stamped";
    }
  }
  // Send side: the traced frames' completions reach the log (signal_every = 16 would signal
  // only the 16th send; traced ones are signalled by themselves), the untraced ones never do.
  std::uint32_t freed[kBurst];
  EXPECT_TRUE(wait_for(
      [&] {
        (void)p.tx->reap_st(freed);  // inline endpoint: polls its CQ
        return p.log.find(6) != 0 && p.log.find(12) != 0;
      },
      30))
      << "traced sends 6 and 12 never completed into the log";
  for (std::uint64_t seq = 1; seq <= kBurst; ++seq) {
    if (seq == 6 || seq == 12) {
      EXPECT_GE(p.log.find(seq), t_post) << seq;
      EXPECT_LE(p.log.find(seq), core::Clock::now_ns()) << seq;
    } else {
      EXPECT_EQ(p.log.find(seq), 0) << "untraced sequence " << seq << " in the send completion log";
    }
  }
  return calls;
}

TEST(RdmaPostBatch, DefaultChainsABurstIntoOneDoorbell) {
  POLLUX_REQUIRE_RXE();
  EXPECT_EQ(burst("signal_every = 16\n"), 1u);
}

TEST(RdmaPostBatch, PostBatchOneIsOneDoorbellPerMessage) {
  POLLUX_REQUIRE_RXE();
  EXPECT_EQ(burst("signal_every = 16\npost_batch = 1\n"), 16u);
}

TEST(RdmaPostBatch, PostBatchFiveSplitsSixteenIntoFour) {
  POLLUX_REQUIRE_RXE();
  EXPECT_EQ(burst("signal_every = 16\npost_batch = 5\n"), 4u);
}

}  // namespace
}  // namespace pollux
