// UDP transport over loopback only (127.0.0.1 unicast, multicast on `lo` with TTL 1): endpoint
// tests and the public API in inline and dedicated modes, with the fault injector.
#include <gtest/gtest.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/counters.h"
#include "pollux/pollux.h"
#include "transport/udp/udp_transport.h"

namespace pollux {
namespace {

// Ports and groups unique per test process, so parallel ctest runs do not cross.
std::uint32_t base_port() { return 20000 + static_cast<std::uint32_t>(getpid() % 2000) * 16; }
std::string group() { return absl::StrFormat("239.255.%d.%d", 1 + getpid() % 200, 1 + (getpid() / 200) % 200); }

std::string udp_config(const std::string& threading, std::uint32_t port_offset, const std::string& extra = "",
                       const std::string& address = "", const std::string& iface = "lo") {
  return absl::StrFormat(R"(
[runtime]
threading = "%s"
idle = "yield"
counters = false
[transport]
kind = "udp"
[udp]
address = "%s"
port = %u
interface = "%s"
ttl = 1
session_timeout_ms = 500
status_interval_ms = 20
heartbeat_interval_us = 2000
nak_delay_us = 50
nak_retry_us = 1000
linger_ms = 200
%s
)",
                         threading, address.empty() ? group() : address, base_port() + port_offset, iface, extra);
}

struct Received {
  std::vector<std::uint64_t> seqs;
  std::uint64_t lost = 0, gaps = 0, new_sessions = 0, ends = 0;
  std::uint32_t last_session = 0;
  StreamEventKind last_event{};
  bool in_order = true;
  std::uint64_t next = 0;
};

int drain(Subscriber& s, Received& r, int limit = 256) {
  return s.poll(
      [&](const Message& m) {
        std::uint64_t v;
        std::memcpy(&v, m.payload.data(), 8);
        if (r.next != 0 && m.sequence != r.next) r.in_order = false;
        if (v != m.sequence) r.in_order = false;
        r.next = m.sequence + 1;
        r.seqs.push_back(m.sequence);
        r.last_session = m.session_id;
      },
      [&](const Gap& g) {
        r.lost += g.count;
        ++r.gaps;
        r.next = g.from + g.count;
      },
      [&](const StreamEvent& e) {
        r.last_event = e.kind;
        if (e.kind == StreamEventKind::kNewSession) {
          ++r.new_sessions;
          r.next = 0;
        } else {
          ++r.ends;
        }
      },
      limit);
}

template <typename F>
bool spin_until(F&& done, int ms, const std::function<void()>& step = [] {}) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    step();
    std::this_thread::yield();
  }
  return true;
}

// ---- config ---------------------------------------------------------------------------------

TEST(UdpConfig, ParsesAndValidates) {
  auto c = core::parse_config(udp_config("inline", 0, "mtu = 9000\nreorder_window = 4096\nfault_loss = 0.05"), "t.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->udp.mtu, 9000u);
  EXPECT_DOUBLE_EQ(c->udp.fault_loss, 0.05);
  EXPECT_NE(c->to_toml().find("[udp]"), std::string::npos);

  auto bad = core::parse_config("[udp]\naddress = \"239.255.0\"\n", "t.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("t.toml:2: udp.address"), std::string::npos) << bad.status();
  bad = core::parse_config("[udp]\nfault_loss = 1.5\n", "t.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("t.toml:2: udp.fault_loss"), std::string::npos) << bad.status();
  bad = core::parse_config("[transport]\nkind = \"udp\"\n[udp]\nmtu = 65535\nreorder_window = 1024\n", "t.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("t.toml:5: udp.reorder_window"), std::string::npos) << bad.status();
  bad = core::parse_config("[udp]\nretransmit_buffer = \"100KiB\"\n", "t.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("power of two"), std::string::npos) << bad.status();
  auto s = core::parse_config("[[streams]]\ntopic = \"a\"\nid = 1\nudp_port = 5000\nudp_address = \"127.0.0.1\"\n", "t.toml");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->streams[0].udp_port, 5000u);
}

TEST(UdpConfig, UnknownInterfaceIsAnActionableError) {
  auto ctx = Context::from_string(udp_config("inline", 0, "") + "", "t.toml");
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  auto c2 = Context::from_string(absl::StrFormat("[transport]\nkind = \"udp\"\n[udp]\ninterface = \"nosuchif0\"\n[runtime]\ncounters = false\n"), "t.toml");
  ASSERT_TRUE(c2.ok());
  auto p = (*c2)->publisher("x");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("udp.interface"), std::string::npos) << p.status();
  EXPECT_NE(p.status().message().find("nosuchif0"), std::string::npos) << p.status();
}

// ---- public API, inline mode ------------------------------------------------------------------------

void publish_and_check(const std::string& threading, const std::string& extra, std::uint64_t count,
                       const std::string& address = "", const std::string& iface = "lo") {
  auto pctx = Context::from_string(udp_config(threading, 1, extra, address, iface), "pub.toml");
  ASSERT_TRUE(pctx.ok()) << pctx.status();
  auto sctx = Context::from_string(udp_config(threading, 1, extra, address, iface), "sub.toml");
  ASSERT_TRUE(sctx.ok()) << sctx.status();
  auto sub = (*sctx)->subscriber("t");
  ASSERT_TRUE(sub.ok()) << sub.status();
  auto pub = (*pctx)->publisher("t");
  ASSERT_TRUE(pub.ok()) << pub.status();
  Received r;
  // Not connected until the subscriber heard the session and reported back.
  ASSERT_TRUE(spin_until([&] { return pub->is_connected(); }, 3000, [&] {
    pub->service();
    drain(*sub, r);
  })) << "publisher never saw the subscriber";
  std::uint64_t sent = 0;
  const bool inline_mode = threading == "inline";
  std::atomic<bool> stop{false};
  std::thread consumer;
  if (!inline_mode) {
    consumer = std::thread([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        if (drain(*sub, r) == 0) std::this_thread::yield();
      }
    });
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (sent < count && std::chrono::steady_clock::now() < deadline) {
    std::uint64_t payload[4] = {sent + 1, 0, 0, 0};
    const std::int64_t rc = pub->offer(payload, sizeof payload);
    if (rc >= 0) {
      ++sent;
    } else {
      ASSERT_EQ(rc, kBackPressured) << result_name(rc);
      std::this_thread::yield();
    }
    if (inline_mode && (sent % 16 == 0 || rc < 0)) drain(*sub, r);
  }
  ASSERT_EQ(sent, count);
  const bool ok = spin_until([&] { return r.seqs.size() + r.lost >= count; }, 30000, [&] {
    pub->service();
    if (inline_mode) drain(*sub, r);
  });
  stop = true;
  if (consumer.joinable()) consumer.join();
  EXPECT_TRUE(ok) << "received " << r.seqs.size() << " lost " << r.lost;
  EXPECT_EQ(r.seqs.size(), count);
  EXPECT_EQ(r.lost, 0u);
  EXPECT_TRUE(r.in_order);
  EXPECT_EQ(r.new_sessions, 1u);
  EXPECT_EQ(sub->messages_received(), count);
  EXPECT_EQ(sub->messages_lost(), 0u);
}

TEST(UdpApi, InlineMulticastLoopback) { publish_and_check("inline", "", 20000); }

TEST(UdpApi, InlineUnicastLoopback) { publish_and_check("inline", "", 20000, "127.0.0.1"); }

// The interface named by its address instead of its name.
TEST(UdpApi, InterfaceByAddress) { publish_and_check("inline", "", 5000, "", "127.0.0.1"); }

TEST(UdpApi, SharedPoller) { publish_and_check("shared", "fault_loss = 0.02\nfault_seed = 8", 20000); }

TEST(UdpApi, InlineWithInjectedLossDuplicationAndReordering) {
  publish_and_check("inline", "fault_loss = 0.05\nfault_duplicate = 0.03\nfault_reorder = 0.05\nfault_seed = 11", 50000);
}

TEST(UdpApi, DedicatedPollersWithInjectedFaults) {
  publish_and_check("dedicated", "fault_loss = 0.05\nfault_duplicate = 0.02\nfault_reorder = 0.05\nfault_seed = 5\n", 50000);
}

TEST(UdpApi, PublisherSideLossAndCoalescing) {
  publish_and_check("inline", "fault_tx_loss = 0.05\ncoalesce_us = 50\nfault_seed = 3", 30000);
}

TEST(UdpApi, MessageTooLargeForTheMtu) {
  auto ctx = Context::from_string(udp_config("inline", 2, "mtu = 1500"), "t.toml");
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  auto pub = (*ctx)->publisher("t");
  ASSERT_TRUE(pub.ok()) << pub.status();
  EXPECT_EQ(pub->max_payload(), 1472u - 32u);
  std::vector<std::byte> big(1500);
  EXPECT_EQ(pub->offer(big.data(), big.size()), kMessageTooLarge);
  EXPECT_EQ(pub->offer(big.data(), 10), kNotConnected);  // nobody listens
}

TEST(UdpApi, IdlePublisherKeepsTheSessionAliveThroughService) {
  auto pctx = Context::from_string(udp_config("inline", 3), "pub.toml");
  auto sctx = Context::from_string(udp_config("inline", 3), "sub.toml");
  ASSERT_TRUE(pctx.ok() && sctx.ok());
  auto sub = (*sctx)->subscriber("t");
  auto pub = (*pctx)->publisher("t");
  ASSERT_TRUE(sub.ok() && pub.ok());
  Received r;
  ASSERT_TRUE(spin_until([&] { return pub->is_connected(); }, 3000, [&] {
    pub->service();
    drain(*sub, r);
  }));
  // 3 x the session timeout with no message: heartbeats from service() keep it up.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
  while (std::chrono::steady_clock::now() < until) {
    pub->service();
    drain(*sub, r);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  EXPECT_EQ(r.ends, 0u);
  EXPECT_TRUE(sub->is_connected());
  EXPECT_TRUE(pub->is_connected());
  // Close: the subscriber sees a clean end of stream.
  std::uint64_t one = 1;
  ASSERT_GE(pub->offer(&one, 8), 0);
  std::thread closer([&] { pub->close(); });  // lingers until the subscriber confirms
  EXPECT_TRUE(spin_until([&] { return r.ends > 0; }, 3000, [&] { drain(*sub, r); }));
  closer.join();
  EXPECT_EQ(r.last_event, StreamEventKind::kEndOfStream);
  EXPECT_EQ(r.seqs.size(), 1u);
}

TEST(UdpApi, PublisherRestartIsANewSession) {
  auto sctx = Context::from_string(udp_config("inline", 4), "sub.toml");
  ASSERT_TRUE(sctx.ok());
  auto sub = (*sctx)->subscriber("t");
  ASSERT_TRUE(sub.ok());
  Received r;
  std::uint32_t sessions[2] = {};
  for (int round = 0; round < 2; ++round) {
    auto pctx = Context::from_string(udp_config("inline", 4), "pub.toml");
    ASSERT_TRUE(pctx.ok());
    auto pub = (*pctx)->publisher("t");
    ASSERT_TRUE(pub.ok());
    ASSERT_TRUE(spin_until([&] { return pub->is_connected(); }, 3000, [&] {
      pub->service();
      drain(*sub, r);
    }));
    for (std::uint64_t i = 1; i <= 100; ++i) {
      std::uint64_t v[2] = {i, 0};
      while (pub->offer(v, sizeof v) < 0) drain(*sub, r);
    }
    ASSERT_TRUE(spin_until([&] { return r.seqs.size() >= 100u * (round + 1); }, 5000, [&] {
      pub->service();
      drain(*sub, r);
    }));
    sessions[round] = r.last_session;
    std::thread closer([&] { pub->close(); });
    spin_until([&] { return r.ends > static_cast<std::uint64_t>(round); }, 3000, [&] { drain(*sub, r); });
    closer.join();
  }
  EXPECT_EQ(r.new_sessions, 2u);
  EXPECT_EQ(r.ends, 2u);
  EXPECT_NE(sessions[0], sessions[1]);
  EXPECT_EQ(r.seqs.size(), 200u);
  EXPECT_TRUE(r.in_order);
}

// ---- endpoints ---------------------------------------------------------------------------------

struct Endpoints {
  explicit Endpoints(const std::string& toml) {
    auto c = core::parse_config(toml, "ep.toml");
    EXPECT_TRUE(c.ok()) << c.status();
    cfg = *c;
    core::Clock::init();
    core::PoolOptions po;
    po.slots = 4096;
    po.hugepages = core::HugePages::kOff;
    pool = std::move(*core::BufferPool::create(po));
    auto cf = core::CountersFile::create("", "udp-test");
    counters = std::move(*cf);
    env = transport::TransportEnv{&cfg, pool.get(), counters.get()};
    transport::EndpointSpec spec{5, "t", nullptr};
    auto rx_or = transport::udp::UdpRxEndpoint::open(env, spec);
    EXPECT_TRUE(rx_or.ok()) << rx_or.status();
    rx = std::move(*rx_or);
    auto tx_or = transport::udp::UdpTxEndpoint::open(env, spec);
    EXPECT_TRUE(tx_or.ok()) << tx_or.status();
    tx = std::move(*tx_or);
    next_slot = 0;
  }
  // Posts `n` frames with a 32-byte payload carrying their index.
  std::uint32_t post(std::uint32_t n) {
    std::vector<transport::TxDesc> d;
    for (std::uint32_t i = 0; i < n; ++i) {
      const std::uint32_t slot = next_slot++ % pool->slots();
      std::byte* f = pool->slot(slot);
      auto* h = reinterpret_cast<core::FrameHeader*>(f);
      std::memset(h, 0, sizeof *h);
      h->frame_length = 64;
      h->stream_id = 5;
      const std::uint64_t tag = ++posted;
      std::memcpy(f + 32, &tag, 8);
      d.push_back({slot, 64, 0, 0, 0});
    }
    const std::uint32_t k = tx->post_st(d);
    std::uint32_t freed[4096];
    tx->reap_st({freed, 4096});
    return k;
  }
  // Polls once; returns events.
  std::vector<transport::RxDesc> poll() {
    transport::RxDesc d[256];
    const std::uint32_t n = rx->poll_st({d, 256});
    std::vector<transport::RxDesc> out(d, d + n);
    rx->release_st({d, n}, true);
    return out;
  }
  core::Config cfg;
  std::unique_ptr<core::BufferPool> pool;
  std::unique_ptr<core::CountersFile> counters;
  transport::TransportEnv env;
  std::unique_ptr<transport::udp::UdpRxEndpoint> rx;
  std::unique_ptr<transport::udp::UdpTxEndpoint> tx;
  std::uint32_t next_slot = 0;
  std::uint64_t posted = 0;
};

TEST(UdpEndpoint, PacksManyFramesPerDatagram) {
  Endpoints e(udp_config("inline", 5, "mtu = 9000\nreorder_window = 4096"));
  e.post(1000);
  std::uint64_t msgs = 0, next = 0;
  spin_until([&] { return msgs >= 1000; }, 3000, [&] {
    for (const auto& d : e.poll()) {
      if (d.kind == transport::RxKind::kNewSession) next = d.sequence;
      if (d.kind != transport::RxKind::kMessage) continue;
      EXPECT_EQ(d.sequence, next++);
      ++msgs;
    }
  });
  EXPECT_EQ(msgs, 1000u);
  // 64-byte frames, 8972-byte datagrams: 140 per datagram.
  EXPECT_LE(e.tx->sender().stats().data_datagrams, 1000u / 140 + 2);
  EXPECT_EQ(e.rx->free_buffers(), e.cfg.udp.rx_buffers);  // all released
}

TEST(UdpEndpoint, NotifyFdWakesOnData) {
  Endpoints e(udp_config("inline", 6));
  // Let the join handshake settle.
  spin_until([&] { return e.tx->connected(); }, 3000, [&] {
    e.poll();
    e.tx->housekeeping_st(core::Clock::now_ns());
  });
  ASSERT_TRUE(e.tx->connected());
  for (int i = 0; i < 10; ++i) e.poll();
  ASSERT_TRUE(e.rx->try_arm_st());
  epoll_event ev;
  e.post(1);
  const int r = epoll_wait(e.rx->notify_fd(), &ev, 1, 1000);
  EXPECT_EQ(r, 1);
  e.rx->disarm_st();
  bool got = false;
  spin_until([&] { return got; }, 1000, [&] {
    for (const auto& d : e.poll()) got |= d.kind == transport::RxKind::kMessage;
  });
  EXPECT_TRUE(got);
}

TEST(UdpEndpoint, OverflowBeyondTheRetransmitBufferIsAnUnrecoverableGapWithTheRightCount) {
  // A tiny socket buffer drops most of a burst in the kernel; the publisher's 64 KiB log keeps
  // only the last ~1000 frames, so the rest is reported lost - with the exact count.
  Endpoints e(udp_config("inline", 7, "retransmit_buffer = \"64KiB\"\nsocket_rcvbuf = 4096\nmtu = 1500"));
  spin_until([&] { return e.tx->connected(); }, 3000, [&] {
    e.poll();
    e.tx->housekeeping_st(core::Clock::now_ns());
  });
  ASSERT_TRUE(e.tx->connected());
  for (int i = 0; i < 5; ++i) e.poll();
  const std::uint32_t total = 20000;
  for (std::uint32_t i = 0; i < total / 100; ++i) ASSERT_EQ(e.post(100), 100u);
  std::uint64_t msgs = 0, lost = 0, gaps = 0, next = 1;  // joined on the first heartbeat: sequence 1
  spin_until([&] { return msgs + lost >= total; }, 10000, [&] {
    for (const auto& d : e.poll()) {
      if (d.kind == transport::RxKind::kNewSession) next = d.sequence;
      if (d.kind == transport::RxKind::kMessage) {
        EXPECT_EQ(d.sequence, next);
        next = d.sequence + 1;
        ++msgs;
      }
      if (d.kind == transport::RxKind::kGap) {
        EXPECT_EQ(d.sequence, next);
        EXPECT_EQ(d.reason, transport::kGapLost);
        lost += d.gap_count;
        next = d.sequence + d.gap_count;
        ++gaps;
      }
    }
    e.tx->housekeeping_st(core::Clock::now_ns());
  });
  EXPECT_EQ(msgs + lost, total);
  EXPECT_GT(lost, 0u);
  std::printf("delivered %llu, reported lost %llu in %llu gap(s)\n", static_cast<unsigned long long>(msgs),
              static_cast<unsigned long long>(lost), static_cast<unsigned long long>(gaps));
  EXPECT_GE(gaps, 1u);
  EXPECT_EQ(e.rx->receiver().window_stats().lost, lost);
}

}  // namespace
}  // namespace pollux
