// UDP transport over loopback only (127.0.0.1 unicast, multicast on `lo` with TTL 1): endpoint
// tests and the public API in inline and dedicated modes, with the fault injector.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "api/internal.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/counters.h"
#include "pollux/pollux.h"
#include "tests/support/status_assert.h"
#include "tests/support/udp_ports.h"
#include "tests/udp/scripted_subscriber.h"
#include "tests/udp/udp_test_util.h"
#include "transport/reliability/wire.h"
#include "transport/udp/udp_config.h"
#include "transport/udp/udp_transport.h"

namespace pollux {
namespace {

using testing::counter_sum;
using testing::kWaitMs;
using testing::open_fds;
using testing::spin_until;

// Ports and groups unique per test process, so parallel ctest runs do not cross: a block of 32
// free ports below the ephemeral range (tests/support/udp_ports.h).
std::uint32_t base_port() { return testing::UdpPortBlock::Base(); }
std::string group() { return testing::UniqueGroup(); }

// Session timeout of the tests that are not about it: far above any stall a loaded 2-core host
// causes (a starved poller thread, a descheduled test thread), so that no such stall ends a
// session. Tests about the timeout set their own in `extra`.
constexpr int kSessionTimeoutMs = 60000;

// The [udp] keys of the tests' configuration; `extra` may set any of them itself.
std::string udp_config_on_port(const std::string& threading, std::uint32_t port, const std::string& extra = "",
                               const std::string& address = "", const std::string& iface = "lo") {
  std::string keys;
  for (const auto& [key, value] :
       {std::pair<const char*, std::string>{"session_timeout_ms", std::to_string(kSessionTimeoutMs)},
        {"status_interval_ms", "20"},
        {"heartbeat_interval_us", "2000"},
        {"nak_delay_us", "50"},
        {"nak_retry_us", "1000"},
        {"linger_ms", "200"}}) {
    if (extra.find(std::string(key) + " =") == std::string::npos) keys += absl::StrFormat("%s = %s\n", key, value);
  }
  return testing::UdpTestConfigHead(threading, address.empty() ? group() : address, iface) +
         absl::StrFormat("port = %u\n%s%s\n", port, keys, extra);
}

std::string udp_config(const std::string& threading, std::uint32_t port_offset, const std::string& extra = "",
                       const std::string& address = "", const std::string& iface = "lo") {
  return udp_config_on_port(threading, base_port() + port_offset, extra, address, iface);
}

// A UDP socket bound to `address`:0 (the kernel picks a port nobody holds), or -1; `port` is set.
int bind_any_port(in_addr_t address, std::uint32_t* port) {
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = address;
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(fd);
    return -1;
  }
  *port = ntohs(a.sin_port);
  return fd;
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

// Offers one message, retrying a refused offer for up to kWaitMs while serving both sides (an
// inline publisher only hears its subscribers' status in service(): without it a publisher
// that lost them during a scheduler stall stays "not connected" forever). A test failure, not
// a hang, if it never goes through.
template <typename Poll>
bool offer_retrying(Publisher& pub, const void* data, std::size_t len, Poll&& poll) {
  const bool ok = spin_until([&] { return pub.offer(data, len) >= 0; }, kWaitMs,
                             [&] {
                               pub.service();
                               poll();
                             });
  if (!ok) ADD_FAILURE() << "offer() refused for " << kWaitMs / 1000 << " s";
  return ok;
}

// ---- config ---------------------------------------------------------------------------------

TEST(UdpConfig, ParsesAndValidates) {
  POLLUX_ASSERT_OK_DECL(
      c, core::parse_config(udp_config("inline", 0, "mtu = 9000\nreorder_window = 4096\nfault_loss = 0.05"), "t.toml"));
  EXPECT_EQ(transport::udp::config(*c).mtu, 9000u);
  EXPECT_DOUBLE_EQ(transport::udp::config(*c).fault_loss, 0.05);
  EXPECT_NE(c->to_toml().find("[udp]"), std::string::npos);

  auto bad = core::parse_config("[udp]\naddress = \"239.255.0\"\n", "t.toml");
  ASSERT_FALSE(bad.ok()) << bad.status();
  EXPECT_NE(bad.status().message().find("t.toml:2: udp.address"), std::string::npos) << bad.status();
  bad = core::parse_config("[udp]\nfault_loss = 1.5\n", "t.toml");
  ASSERT_FALSE(bad.ok()) << bad.status();
  EXPECT_NE(bad.status().message().find("t.toml:2: udp.fault_loss"), std::string::npos) << bad.status();
  bad = core::parse_config("[transport]\nkind = \"udp\"\n[udp]\nmtu = 65535\nreorder_window = 1024\n", "t.toml");
  ASSERT_FALSE(bad.ok()) << bad.status();
  EXPECT_NE(bad.status().message().find("t.toml:5: udp.reorder_window"), std::string::npos) << bad.status();
  bad = core::parse_config("[udp]\nretransmit_buffer = \"100KiB\"\n", "t.toml");
  ASSERT_FALSE(bad.ok()) << bad.status();
  EXPECT_NE(bad.status().message().find("power of two"), std::string::npos) << bad.status();
  POLLUX_ASSERT_OK_DECL(
      s, core::parse_config("[[streams]]\ntopic = \"a\"\nid = 1\nudp_port = 5000\nudp_address = \"127.0.0.1\"\n",
                            "t.toml"));
  EXPECT_EQ(s->streams[0].udp_port, 5000u);
}

TEST(UdpConfig, UnknownInterfaceIsAnActionableError) {
  POLLUX_ASSERT_OK_DECL(ctx, Context::from_string(udp_config("inline", 0, "") + "", "t.toml"));
  POLLUX_ASSERT_OK_DECL(
      c2, Context::from_string(
              absl::StrFormat(
                  "[transport]\nkind = \"udp\"\n[udp]\ninterface = \"nosuchif0\"\n[runtime]\ncounters = false\n"),
              "t.toml"));
  auto p = (*c2)->publisher("x");
  ASSERT_FALSE(p.ok()) << p.status();
  EXPECT_NE(p.status().message().find("udp.interface"), std::string::npos) << p.status();
  EXPECT_NE(p.status().message().find("nosuchif0"), std::string::npos) << p.status();
}

// udp.datapath and the AF_XDP keys: parsed, printed back, and refused with the key and the fix
// where they cannot work (no AF_XDP socket is opened here: the namespace tests do that).
TEST(UdpConfig, XdpDatapathKeys) {
  if (!POLLUX_TEST_XDP) {
    // A build without AF_XDP refuses the datapath with the configuration, saying why.
    auto refused = core::parse_config(udp_config("inline", 0, "datapath = \"xdp\""), "t.toml");
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.status().message().find("needs a libpollux built with AF_XDP"), std::string::npos)
        << refused.status();
    return;
  }
  POLLUX_ASSERT_OK_DECL(c, core::parse_config(udp_config("inline", 0,
                                                         "datapath = \"xdp\"\nxdp_mode = \"copy\"\nxdp_queues = [2]\n"
                                                         "xdp_frames = 8192\nxdp_busy_poll = true"),
                                              "t.toml"));
  const transport::udp::UdpConfig& u = transport::udp::config(*c);
  EXPECT_EQ(u.datapath, transport::udp::UdpDatapath::kXdp);
  EXPECT_EQ(u.xdp_mode, transport::udp::UdpXdpMode::kCopy);
  ASSERT_EQ(u.xdp_queues.size(), 1u);
  EXPECT_EQ(u.xdp_queues[0], 2u);
  EXPECT_EQ(u.xdp_frames, 8192u);
  EXPECT_TRUE(u.xdp_busy_poll);
  const std::string printed = c->to_toml();
  EXPECT_NE(printed.find("datapath = \"xdp\""), std::string::npos) << printed;
  EXPECT_NE(printed.find("xdp_mode = \"copy\""), std::string::npos) << printed;
  POLLUX_ASSERT_OK_DECL(d, core::parse_config(udp_config("inline", 0, ""), "t.toml"));
  EXPECT_EQ(transport::udp::config(*d).datapath, transport::udp::UdpDatapath::kSocket);  // the default

  struct Case {
    const char* keys;
    const char* want;  // in the message
  };
  for (const Case& k : {
           Case{"datapath = \"dpdk\"", "udp.datapath: expected socket|xdp, got \"dpdk\""},
           Case{"xdp_mode = \"fast\"", "udp.xdp_mode: expected auto|zerocopy|copy|generic"},
           Case{"xdp_frames = 1000", "power of two"},
           Case{"datapath = \"xdp\"\nxdp_queues = [1, 1]", "udp.xdp_queues: queue 1 is listed twice"},
           Case{"datapath = \"xdp\"\nmtu = 9000\nreorder_window = 4096", "lower udp.mtu to 4082"},
       }) {
    auto bad = core::parse_config(udp_config("inline", 0, k.keys), "t.toml");
    ASSERT_FALSE(bad.ok()) << k.keys;
    EXPECT_NE(bad.status().message().find(k.want), std::string::npos) << k.keys << "\n" << bad.status();
  }
}

// An AF_XDP socket is bound to one interface: udp.interface = "" (the kernel's choice) is refused
// when an endpoint opens, naming the key.
TEST(UdpConfig, XdpDatapathNeedsANamedInterface) {
  if (!POLLUX_TEST_XDP) GTEST_SKIP() << "AF_XDP is not part of this build (XdpDatapathKeys checks the refusal)";
  POLLUX_ASSERT_OK_DECL(
      ctx, Context::from_string("[transport]\nkind = \"udp\"\n[udp]\ninterface = \"\"\ndatapath = \"xdp\"\n"
                                "[runtime]\ncounters = false\n",
                                "t.toml"));
  auto p = (*ctx)->publisher("x");
  ASSERT_FALSE(p.ok()) << "opened";
  EXPECT_NE(p.status().message().find("udp.interface"), std::string::npos) << p.status();
  EXPECT_NE(p.status().message().find("needs an interface"), std::string::npos) << p.status();
}

// ---- a port already in use ---------------------------------------------------------------------

// A unicast subscriber whose port another socket holds (bound without SO_REUSEADDR): a clear
// error naming the address, the port and the key, and nothing left behind - no descriptor, no
// half-open subscriber; the same context opens it once the port is free.
TEST(UdpPortInUse, UnicastPortHeldByAnotherSocketIsAClearError) {
  // The holder takes whatever port the kernel gives it; the subscriber is configured on it.
  std::uint32_t port = 0;
  const int holder = bind_any_port(htonl(INADDR_LOOPBACK), &port);
  ASSERT_GE(holder, 0) << "bind(127.0.0.1:0): " << std::strerror(errno);
  POLLUX_ASSERT_OK_DECL(ctx, Context::from_string(udp_config_on_port("inline", port, "", "127.0.0.1"), "sub.toml"));
  const int before = open_fds();
  auto sub = (*ctx)->subscriber("t");
  ASSERT_FALSE(sub.ok()) << sub.status();
  const std::string msg(sub.status().message());
  EXPECT_EQ(sub.status().code(), absl::StatusCode::kAlreadyExists) << msg;
  EXPECT_NE(msg.find("sub.toml: udp.port"), std::string::npos) << msg;
  EXPECT_NE(msg.find(absl::StrFormat("127.0.0.1:%u", port)), std::string::npos) << msg;
  EXPECT_NE(msg.find("already in use"), std::string::npos) << msg;
  EXPECT_EQ(open_fds(), before) << "a descriptor was left behind";
  std::printf("%s\n", msg.c_str());
  ::close(holder);
  auto again = (*ctx)->subscriber("t");
  EXPECT_TRUE(again.ok()) << again.status();
}

// Two unicast subscribers on one port: the kernel would give each datagram to one of them
// only, so the second is refused (binding it with SO_REUSEADDR would silently take half).
TEST(UdpPortInUse, SecondUnicastSubscriberOnTheSamePortIsRefused) {
  POLLUX_ASSERT_OK_DECL(c1, Context::from_string(udp_config("inline", 17, "", "127.0.0.1"), "a.toml"));
  POLLUX_ASSERT_OK_DECL(c2, Context::from_string(udp_config("inline", 17, "", "127.0.0.1"), "b.toml"));
  POLLUX_ASSERT_OK_DECL(first, (*c1)->subscriber("t"));
  auto second = (*c2)->subscriber("t");
  ASSERT_FALSE(second.ok()) << second.status();
  EXPECT_NE(second.status().message().find("b.toml: udp.port"), std::string::npos) << second.status();
  // A [[streams]] override is named as such.
  POLLUX_ASSERT_OK_DECL(
      c3,
      Context::from_string(udp_config("inline", 17, "", "127.0.0.1") +
                               absl::StrFormat("[[streams]]\ntopic = \"u\"\nid = 9\nudp_port = %u\n", base_port() + 17),
                           "c.toml"));
  auto third = (*c3)->subscriber("u");
  ASSERT_FALSE(third.ok()) << third.status();
  EXPECT_NE(third.status().message().find("c.toml: streams.udp_port"), std::string::npos) << third.status();
}

// Multicast subscribers share the port (each gets every datagram), but not with a socket that
// holds it exclusively.
TEST(UdpPortInUse, MulticastPortHeldExclusivelyIsAClearError) {
  POLLUX_ASSERT_OK_DECL(c1, Context::from_string(udp_config("inline", 18), "a.toml"));
  POLLUX_ASSERT_OK_DECL(c2, Context::from_string(udp_config("inline", 18), "b.toml"));
  auto s1 = (*c1)->subscriber("t");
  auto s2 = (*c2)->subscriber("t");
  EXPECT_TRUE(s1.ok()) << s1.status();
  EXPECT_TRUE(s2.ok()) << s2.status();
  std::uint32_t port = 0;
  const int holder = bind_any_port(htonl(INADDR_ANY), &port);
  ASSERT_GE(holder, 0) << "bind(0.0.0.0:0): " << std::strerror(errno);
  POLLUX_ASSERT_OK_DECL(c3, Context::from_string(udp_config_on_port("inline", port), "c.toml"));
  const int before = open_fds();
  auto s3 = (*c3)->subscriber("t");
  ASSERT_FALSE(s3.ok()) << s3.status();
  EXPECT_NE(s3.status().message().find(absl::StrFormat("c.toml: udp.port: port %u of group %s", port, group())),
            std::string::npos)
      << s3.status();
  EXPECT_EQ(open_fds(), before);
  ::close(holder);
}

// Until `pub` is connected (at most kWaitMs): runs its duties and drains `sub` into `r` (the
// subscriber reports back only when polled in inline mode).
bool wait_connected(Publisher& pub, Subscriber& sub, Received& r) {
  return spin_until([&] { return pub.is_connected(); }, kWaitMs,
                    [&] {
                      pub.service();
                      drain(sub, r);
                    });
}

// ---- public API, inline mode ------------------------------------------------------------------------

void publish_and_check(const std::string& threading, const std::string& extra, std::uint64_t count,
                       const std::string& address = "", const std::string& iface = "lo") {
  POLLUX_ASSERT_OK_DECL(pctx, Context::from_string(udp_config(threading, 1, extra, address, iface), "pub.toml"));
  POLLUX_ASSERT_OK_DECL(sctx, Context::from_string(udp_config(threading, 1, extra, address, iface), "sub.toml"));
  POLLUX_ASSERT_OK_DECL(sub, (*sctx)->subscriber("t"));
  POLLUX_ASSERT_OK_DECL(pub, (*pctx)->publisher("t"));
  Received r;
  // Not connected until the subscriber heard the session and reported back.
  ASSERT_TRUE(wait_connected(*pub, *sub, r)) << "publisher never saw the subscriber";
  std::uint64_t sent = 0;
  const bool inline_mode = threading == "inline";
  // Queued modes: a consumer thread owns `r` until it is joined; the main thread only sees its
  // progress (messages + losses), published with a release store after each drain.
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> progress{0};
  std::thread consumer;
  if (!inline_mode) {
    consumer = std::thread([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        if (drain(*sub, r) == 0) {
          std::this_thread::yield();
        } else {
          progress.store(r.seqs.size() + r.lost, std::memory_order_release);  // pairs with seen()'s acquire
        }
      }
    });
  }
  struct Joiner {  // also on an early return of a failed ASSERT
    std::atomic<bool>& stop;
    std::thread& t;
    ~Joiner() {
      stop.store(true, std::memory_order_relaxed);
      if (t.joinable()) t.join();
    }
  } joiner{stop, consumer};
  auto seen = [&]() -> std::uint64_t {
    return inline_mode ? r.seqs.size() + r.lost : progress.load(std::memory_order_acquire);
  };
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
  const bool ok = spin_until([&] { return seen() >= count; }, kWaitMs,
                             [&] {
                               pub->service();
                               if (inline_mode) drain(*sub, r);
                             });
  stop = true;
  if (consumer.joinable()) consumer.join();  // r is the main thread's from here on
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
  publish_and_check("inline", "fault_loss = 0.05\nfault_duplicate = 0.03\nfault_reorder = 0.05\nfault_seed = 11",
                    50000);
}

TEST(UdpApi, DedicatedPollersWithInjectedFaults) {
  publish_and_check("dedicated", "fault_loss = 0.05\nfault_duplicate = 0.02\nfault_reorder = 0.05\nfault_seed = 5\n",
                    50000);
}

TEST(UdpApi, PublisherSideLossAndCoalescing) {
  publish_and_check("inline", "fault_tx_loss = 0.05\ncoalesce_us = 50\nfault_seed = 3", 30000);
}

// One frame per datagram (no coalescing), publisher-side loss: the inline subscriber's direct
// path meets gaps and repairs, the inline publisher's in-place frames are what gets repaired.
TEST(UdpApi, InlinePublisherSideLossOneFramePerDatagram) {
  publish_and_check("inline", "fault_tx_loss = 0.05\nfault_seed = 4", 20000, "127.0.0.1");
}

TEST(UdpApi, MessageTooLargeForTheMtu) {
  POLLUX_ASSERT_OK_DECL(ctx, Context::from_string(udp_config("inline", 2, "mtu = 1500"), "t.toml"));
  POLLUX_ASSERT_OK_DECL(pub, (*ctx)->publisher("t"));
  EXPECT_EQ(pub->max_payload(), 1472u - 32u);
  std::vector<std::byte> big(1500);
  EXPECT_EQ(pub->offer(big.data(), big.size()), kMessageTooLarge);
  EXPECT_EQ(pub->offer(big.data(), 10), kNotConnected);  // nobody listens
}

// About the session timeout: a short one (1 s), outlived three times over.
TEST(UdpApi, IdlePublisherKeepsTheSessionAliveThroughService) {
  const std::string timeout = "session_timeout_ms = 1000";
  POLLUX_ASSERT_OK_DECL(pctx, Context::from_string(udp_config("inline", 3, timeout), "pub.toml"));
  POLLUX_ASSERT_OK_DECL(sctx, Context::from_string(udp_config("inline", 3, timeout), "sub.toml"));
  POLLUX_ASSERT_OK_DECL(sub, (*sctx)->subscriber("t"));
  POLLUX_ASSERT_OK_DECL(pub, (*pctx)->publisher("t"));
  Received r;
  ASSERT_TRUE(wait_connected(*pub, *sub, r));
  // 3 x the session timeout with no message: heartbeats from service() keep it up.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(3000);
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
  EXPECT_TRUE(spin_until([&] { return r.ends > 0; }, kWaitMs, [&] { drain(*sub, r); }));
  closer.join();
  EXPECT_EQ(r.last_event, StreamEventKind::kEndOfStream);
  EXPECT_EQ(r.seqs.size(), 1u);
}

TEST(UdpApi, PublisherRestartIsANewSession) {
  POLLUX_ASSERT_OK_DECL(sctx, Context::from_string(udp_config("inline", 4), "sub.toml"));
  POLLUX_ASSERT_OK_DECL(sub, (*sctx)->subscriber("t"));
  Received r;
  std::uint32_t sessions[2] = {};
  for (int round = 0; round < 2; ++round) {
    POLLUX_ASSERT_OK_DECL(pctx, Context::from_string(udp_config("inline", 4), "pub.toml"));
    POLLUX_ASSERT_OK_DECL(pub, (*pctx)->publisher("t"));
    ASSERT_TRUE(wait_connected(*pub, *sub, r));
    for (std::uint64_t i = 1; i <= 100; ++i) {
      std::uint64_t v[2] = {i, 0};
      while (pub->offer(v, sizeof v) < 0) drain(*sub, r);
    }
    ASSERT_TRUE(spin_until([&] { return r.seqs.size() >= 100u * (round + 1); }, kWaitMs,
                           [&] {
                             pub->service();
                             drain(*sub, r);
                           }));
    sessions[round] = r.last_session;
    std::thread closer([&] { pub->close(); });
    spin_until([&] { return r.ends > static_cast<std::uint64_t>(round); }, kWaitMs, [&] { drain(*sub, r); });
    closer.join();
  }
  EXPECT_EQ(r.new_sessions, 2u);
  EXPECT_EQ(r.ends, 2u);
  EXPECT_NE(sessions[0], sessions[1]);
  EXPECT_EQ(r.seqs.size(), 200u);
  EXPECT_TRUE(r.in_order);
}

// ---- endpoints ---------------------------------------------------------------------------------

struct Endpoints : testing::EndpointEnv {
  explicit Endpoints(const std::string& toml) : EndpointEnv(toml, 4096, "udp-test") {
    transport::EndpointSpec spec{5, "t", nullptr};
    auto rx_or = transport::udp::UdpRxEndpoint::open(env, spec);
    EXPECT_TRUE(rx_or.ok()) << rx_or.status();
    rx = std::move(*rx_or);
    auto tx_or = transport::udp::UdpTxEndpoint::open(env, spec);
    EXPECT_TRUE(tx_or.ok()) << tx_or.status();
    tx = std::move(*tx_or);
    next_slot = 0;
  }
  // Until `connected` (at most kWaitMs), serving the join handshake: polls and the publisher's
  // housekeeping. False when it did not happen.
  template <typename Pred>
  bool handshake_until(Pred&& connected) {
    return spin_until(connected, kWaitMs, [&] {
      poll();
      tx->housekeeping_st(core::Clock::now_ns());
    });
  }
  // Until the publisher is connected (its callers assert it next).
  void join() {
    (void)handshake_until([&] { return tx->connected(); });
  }
  // Both sides connected, then what the handshake left drained. False: no connection in time.
  bool connect_and_drain() {
    if (!handshake_until([&] { return tx->connected() && rx->connected(); })) return false;
    for (int i = 0; i < 20; ++i) poll();
    return true;
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
  std::unique_ptr<transport::udp::UdpRxEndpoint> rx;
  std::unique_ptr<transport::udp::UdpTxEndpoint> tx;
  std::uint32_t next_slot = 0;
  std::uint64_t posted = 0;
};

TEST(UdpEndpoint, PacksManyFramesPerDatagram) {
  Endpoints e(udp_config("inline", 5, "mtu = 9000\nreorder_window = 4096"));
  e.post(1000);
  std::uint64_t msgs = 0, next = 0;
  spin_until([&] { return msgs >= 1000; }, kWaitMs,
             [&] {
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
  EXPECT_EQ(e.rx->free_buffers(), transport::udp::config(e.cfg).rx_buffers);  // all released
}

// udp_netns_test's FeedHandlerOverMulticast lost a stream on a loaded host: pollux-feed opens
// its four publishers one after the other (each maps and pre-touches a 64 MiB retransmit
// buffer), and the first one, announced with a heartbeat at open, then said nothing until all
// were open - longer than the session timeout, so its subscriber reported it dead. Nothing
// goes out before the owner services the endpoint; then the announcement comes first.
TEST(UdpEndpoint, SessionIsAnnouncedByItsOwnersFirstServiceNotAtOpen) {
  Endpoints e(udp_config("inline", 28));
  EXPECT_EQ(e.tx->sender().stats().datagrams, 0u) << "sent at open, before its owner serviced it";
  EXPECT_EQ(e.tx->sender().stats().heartbeats, 0u);
  EXPECT_FALSE(e.tx->connected());
  // The first post is the owner's first service: the heartbeat goes out before the data, so a
  // subscriber already listening joins at 1 and gets every message.
  ASSERT_EQ(e.post(10), 10u);
  EXPECT_EQ(e.tx->sender().stats().heartbeats, 1u);
  std::uint64_t msgs = 0, next = 0, sessions = 0;
  spin_until([&] { return msgs >= 10; }, kWaitMs,
             [&] {
               for (const auto& d : e.poll()) {
                 if (d.kind == transport::RxKind::kNewSession) {
                   ++sessions;
                   next = d.sequence;
                   EXPECT_EQ(d.sequence, 1u);
                 }
                 if (d.kind != transport::RxKind::kMessage) continue;
                 EXPECT_EQ(d.sequence, next++);
                 ++msgs;
               }
             });
  EXPECT_EQ(sessions, 1u);
  EXPECT_EQ(msgs, 10u);
  // An endpoint opened and serviced without data: housekeeping announces it just the same.
  transport::EndpointSpec spec{5, "t", nullptr};
  POLLUX_ASSERT_OK_DECL(idle, transport::udp::UdpTxEndpoint::open(e.env, spec));
  EXPECT_EQ((*idle)->sender().stats().datagrams, 0u);
  (void)(*idle)->housekeeping_st(core::Clock::now_ns());
  EXPECT_EQ((*idle)->sender().stats().heartbeats, 1u);
}

TEST(UdpEndpoint, NotifyFdWakesOnData) {
  Endpoints e(udp_config("inline", 6));
  // Let the join handshake settle.
  e.join();
  ASSERT_TRUE(e.tx->connected());
  for (int i = 0; i < 10; ++i) e.poll();
  ASSERT_TRUE(e.rx->try_arm_st());
  epoll_event ev;
  e.post(1);
  const int r = epoll_wait(e.rx->notify_fd(), &ev, 1, kWaitMs);
  EXPECT_EQ(r, 1);
  e.rx->disarm_st();
  bool got = false;
  spin_until([&] { return got; }, kWaitMs,
             [&] {
               for (const auto& d : e.poll()) got |= d.kind == transport::RxKind::kMessage;
             });
  EXPECT_TRUE(got);
}

// Descriptors in the epoll set `epfd` (its /proc/self/fdinfo lines "tfd: N ...").
std::vector<int> epoll_members(int epfd) {
  std::vector<int> fds;
  std::ifstream in("/proc/self/fdinfo/" + std::to_string(epfd));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("tfd:", 0) == 0) fds.push_back(std::stoi(line.substr(4)));
  }
  return fds;
}

// The socket is in the endpoint's epoll set only between arm and disarm: while the thread polls,
// a datagram's arrival runs no epoll wake-up callback in the kernel. A datagram that arrived
// before the arm still makes notify_fd() readable at once (level-triggered when added).
TEST(UdpEndpoint, NotifyFdHoldsTheSocketOnlyWhileArmed) {
  Endpoints e(udp_config("inline", 27));
  e.join();
  ASSERT_TRUE(e.tx->connected());
  for (int i = 0; i < 10; ++i) e.poll();
  const int epfd = e.rx->notify_fd();
  ASSERT_GE(epfd, 0);
  const std::vector<int> idle = epoll_members(epfd);
  ASSERT_EQ(idle.size(), 1u) << "only the timer while polling";
  ASSERT_TRUE(e.rx->try_arm_st());
  std::vector<int> armed = epoll_members(epfd);
  ASSERT_EQ(armed.size(), 2u) << "the socket joins the set while armed";
  const int sock = armed[0] == idle[0] ? armed[1] : armed[0];
  e.rx->disarm_st();
  EXPECT_EQ(epoll_members(epfd), idle);
  // A datagram that is in the socket before the arm.
  ASSERT_EQ(e.post(1), 1u);
  pollfd p{sock, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, kWaitMs), 1) << "the datagram never reached the socket";
  ASSERT_TRUE(e.rx->try_arm_st());
  epoll_event ev;
  EXPECT_EQ(epoll_wait(epfd, &ev, 1, 0), 1) << "a datagram that arrived before the arm wakes at once";
  e.rx->disarm_st();
  e.rx->disarm_st();  // idempotent
  EXPECT_EQ(epoll_members(epfd), idle);
  bool got = false;
  spin_until([&] { return got; }, kWaitMs,
             [&] {
               for (const auto& d : e.poll()) got |= d.kind == transport::RxKind::kMessage;
             });
  EXPECT_TRUE(got);
}

// The subscriber's adaptive read batch (1 datagram: recvfrom; more: recvmmsg). A ping-pong -
// an empty read (the spin), then the one reply - stays at 1: growing after every single hit
// made each round trip's empty read a recvmmsg of 2 (bench/callgrind/udp-inline.sh). Dense
// traffic - single reads that keep finding datagrams - still grows it.
//
// Each round's reply must be the only datagram in the socket, whatever the scheduler did: the
// tail heartbeat the publisher sends 1 ms after its last data is waited for and read between
// rounds (on a loaded host a round often takes longer than 1 ms, and the next post then sent the
// tail heartbeat just before the data: two datagrams at once, which grew the batch), and the
// periodic heartbeats are 1 s apart (at the usual 2 ms one could join them during a stall).
TEST(UdpEndpoint, ReadBatchStaysAtOneForAPingPongAndGrowsUnderDenseTraffic) {
  Endpoints e(udp_config("inline", 26, "heartbeat_interval_us = 1000000", "127.0.0.1"));
  ASSERT_TRUE(e.connect_and_drain());
  int delivered = 0;
  for (int round = 0; round < 50; ++round) {
    for (const auto& d : e.poll()) delivered += d.kind == transport::RxKind::kMessage;  // the spin: empty
    const std::uint64_t heartbeats = e.tx->sender().stats().heartbeats;
    ASSERT_EQ(e.post(1), 1u);
    bool got = false;
    ASSERT_TRUE(spin_until([&] { return got; }, kWaitMs,
                           [&] {
                             for (const auto& d : e.poll()) got |= d.kind == transport::RxKind::kMessage;
                           }));
    ++delivered;
    EXPECT_EQ(e.rx->read_batch(), 1u) << "round " << round;
    // The tail heartbeat out (not with the next round's data) and read; then an empty read.
    ASSERT_TRUE(spin_until([&] { return e.tx->sender().stats().heartbeats > heartbeats; }, kWaitMs,
                           [&] { (void)e.tx->housekeeping_st(core::Clock::now_ns()); }))
        << "round " << round << ": no tail heartbeat";
    for (int k = 0; k < 2; ++k) {
      for (const auto& d : e.poll()) delivered += d.kind == transport::RxKind::kMessage;
    }
  }
  EXPECT_EQ(delivered, 50);
  // Dense: 64 datagrams queued at once (one frame each: the tx batch sends them one by one).
  for (int i = 0; i < 64; ++i) ASSERT_EQ(e.post(1), 1u);
  std::uint32_t widest = 0;
  int dense = 0;
  ASSERT_TRUE(spin_until([&] { return dense >= 64; }, kWaitMs,
                         [&] {
                           for (const auto& d : e.poll()) dense += d.kind == transport::RxKind::kMessage;
                           widest = std::max(widest, e.rx->read_batch());
                         }));
  EXPECT_GE(widest, 4u) << "a backlog of 64 datagrams read one at a time";
}

// One poll as Subscriber::poll() makes it inline: the direct path (UdpRxEndpoint::poll_direct,
// datagram -> handler from the receive buffer), then the general one when it asks for it.
struct MixedPolls {
  std::vector<std::uint64_t> seqs, tags;
  std::uint64_t direct = 0, general = 0, gaps = 0;
  void poll(Endpoints& e) {
    bool slow = false;
    direct += e.rx->poll_direct(
        8,
        [&](const core::FrameHeader* f, std::uint32_t len) {
          EXPECT_EQ(len, 64u);
          EXPECT_EQ(f->flags, 0u);
          std::uint64_t tag;
          std::memcpy(&tag, reinterpret_cast<const std::byte*>(f) + 32, 8);
          seqs.push_back(f->sequence);
          tags.push_back(tag);
        },
        &slow);
    if (!slow) return;
    for (const auto& d : e.poll()) {
      if (d.kind == transport::RxKind::kGap) ++gaps;
      if (d.kind != transport::RxKind::kMessage) continue;
      std::uint64_t tag;
      std::memcpy(&tag, reinterpret_cast<const std::byte*>(d.frame) + 32, 8);
      seqs.push_back(d.sequence);
      tags.push_back(tag);
      ++general;
    }
  }
  // Every frame once, in order: sequences and the payloads' tags consecutive.
  void expect_in_order(std::uint64_t first_tag) const {
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      EXPECT_EQ(tags[i], first_tag + i) << "at " << i;
      if (i > 0) {
        EXPECT_EQ(seqs[i], seqs[i - 1] + 1) << "at " << i;
      }
    }
  }
};

// Inline ping-pong traffic goes the direct way; what it leaves (the handshake's session event,
// heartbeats, due timers) the general path takes, and together they deliver everything once.
TEST(UdpEndpoint, DirectPathDeliversPlainInOrderDatagramsFromTheReceiveBuffer) {
  Endpoints e(udp_config("inline", 27, "", "127.0.0.1"));
  ASSERT_TRUE(e.connect_and_drain());
  const std::uint64_t first_tag = e.posted + 1;
  MixedPolls m;
  for (int round = 0; round < 100; ++round) {
    ASSERT_EQ(e.post(1), 1u);
    const std::size_t want = m.seqs.size() + 1;
    ASSERT_TRUE(spin_until([&] { return m.seqs.size() >= want; }, kWaitMs, [&] { m.poll(e); })) << "round " << round;
  }
  EXPECT_EQ(m.seqs.size(), 100u);
  m.expect_in_order(first_tag);
  EXPECT_EQ(m.gaps, 0u);
  EXPECT_GT(m.direct, 0u) << "no datagram took the direct path";
  EXPECT_EQ(e.rx->free_buffers(), transport::udp::config(e.cfg).rx_buffers);  // direct buffers are free on return
}

// Datagrams the publisher loses (its fault injector): the first one past a gap, and every one
// until the repair, needs the window - the direct path hands it to on_datagram() and asks for
// the general poll, which NAKs, takes the repair and delivers in order; then direct again.
TEST(UdpEndpoint, DirectPathHandsGapsToTheGeneralPathAndRepairsArriveInOrder) {
  Endpoints e(udp_config("inline", 28, "fault_tx_loss = 0.2\nfault_seed = 9", "127.0.0.1"));
  ASSERT_TRUE(e.connect_and_drain());
  const std::uint64_t first_tag = e.posted + 1;
  MixedPolls m;
  constexpr std::uint64_t kFrames = 400;
  for (std::uint64_t i = 0; i < kFrames; ++i) {
    ASSERT_EQ(e.post(1), 1u);
    for (int k = 0; k < 3; ++k) m.poll(e);
    e.tx->housekeeping_st(core::Clock::now_ns());  // serves NAKs
  }
  ASSERT_TRUE(spin_until([&] { return m.seqs.size() >= kFrames; }, kWaitMs,
                         [&] {
                           m.poll(e);
                           e.tx->housekeeping_st(core::Clock::now_ns());
                         }))
      << "delivered " << m.seqs.size();
  EXPECT_EQ(m.seqs.size(), kFrames);
  m.expect_in_order(first_tag);
  EXPECT_EQ(m.gaps, 0u);
  EXPECT_GT(e.tx->sender().stats().retransmit_datagrams, 0u) << "the injector dropped nothing";
  EXPECT_GT(m.general, 0u);
  EXPECT_GT(m.direct, 0u);
}

TEST(UdpEndpoint, OverflowBeyondTheRetransmitBufferIsAnUnrecoverableGapWithTheRightCount) {
  // A tiny socket buffer drops most of a burst in the kernel; the publisher's 64 KiB log keeps
  // only the last ~1000 frames, so the rest is reported lost - with the exact count.
  Endpoints e(udp_config("inline", 7, "retransmit_buffer = \"64KiB\"\nsocket_rcvbuf = 4096\nmtu = 1500"));
  e.join();
  ASSERT_TRUE(e.tx->connected());
  for (int i = 0; i < 5; ++i) e.poll();
  const std::uint32_t total = 20000;
  for (std::uint32_t i = 0; i < total / 100; ++i) ASSERT_EQ(e.post(100), 100u);
  std::uint64_t msgs = 0, lost = 0, gaps = 0, next = 1;  // joined on the first heartbeat: sequence 1
  spin_until([&] { return msgs + lost >= total; }, kWaitMs,
             [&] {
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

// ---- hostile peers -----------------------------------------------------------------------------
// What an attacker on the network does: listen to the group (a multicast datagram reaches
// everyone who joined), learn the publisher's address, stream and session from its heartbeats,
// and send datagrams that claim to come from it (a raw socket forges the source address and
// port, so nothing tells them apart from the publisher's own).

// A socket joined to the group on `lo` that sees the publisher's datagrams.
class Eavesdropper {
 public:
  Eavesdropper(const std::string& grp, std::uint32_t port) {
    fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    const int one = 1;
    setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    inet_pton(AF_INET, grp.c_str(), &a.sin_addr);
    ok_ = ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ip_mreqn m{};
    m.imr_multiaddr = a.sin_addr;
    inet_pton(AF_INET, "127.0.0.1", &m.imr_address);
    ok_ = ok_ && setsockopt(fd_, IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof m) == 0;
    group_ = a;
  }
  ~Eavesdropper() { ::close(fd_); }
  bool ok() const { return ok_; }
  // Reads what arrived; remembers the publisher (source), stream, session and the highest
  // `next` its heartbeats announced.
  void pump() {
    alignas(8) std::byte buf[2048];
    for (;;) {
      sockaddr_in src{};
      socklen_t sl = sizeof src;
      const ssize_t n = ::recvfrom(fd_, buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&src), &sl);
      if (n < static_cast<ssize_t>(core::kFrameHeaderSize)) return;
      const auto* h = reinterpret_cast<const core::FrameHeader*>(buf);
      if (h->magic != core::kFrameMagic) continue;
      publisher = src;
      stream_id = h->stream_id;
      session_id = h->session_id;
      if (h->flags & core::kFlagHeartbeat) {
        next = std::max(next, h->sequence);
        std::memcpy(&oldest, buf + core::kFrameHeaderSize, 8);
        ++heartbeats;
      }
    }
  }
  const sockaddr_in& group() const { return group_; }
  sockaddr_in publisher{};
  std::uint32_t stream_id = 0, session_id = 0;
  std::uint64_t next = 0, oldest = 0, heartbeats = 0;

 private:
  int fd_ = -1;
  bool ok_ = false;
  sockaddr_in group_{};
};

// Sends one UDP datagram from `src` to `dst` through a raw socket (IP_HDRINCL), i.e. with a
// forged source address and port. Returns false when raw sockets are refused (no CAP_NET_RAW).
bool send_spoofed(const sockaddr_in& src, const sockaddr_in& dst, const void* payload, std::size_t len) {
  const int fd = ::socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW);
  if (fd < 0) return false;
  in_addr lo{};
  inet_pton(AF_INET, "127.0.0.1", &lo);
  setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &lo, sizeof lo);
  std::vector<std::uint8_t> pkt(sizeof(iphdr) + sizeof(udphdr) + len);
  auto* ip = reinterpret_cast<iphdr*>(pkt.data());
  ip->version = 4;
  ip->ihl = 5;
  ip->ttl = 1;
  ip->protocol = IPPROTO_UDP;
  ip->tot_len = htons(static_cast<std::uint16_t>(pkt.size()));
  ip->saddr = src.sin_addr.s_addr;
  ip->daddr = dst.sin_addr.s_addr;  // the kernel fills in the id and the header checksum
  auto* udp = reinterpret_cast<udphdr*>(pkt.data() + sizeof(iphdr));
  udp->source = src.sin_port;
  udp->dest = dst.sin_port;
  udp->len = htons(static_cast<std::uint16_t>(sizeof(udphdr) + len));
  udp->check = 0;  // IPv4: no checksum
  std::memcpy(pkt.data() + sizeof(iphdr) + sizeof(udphdr), payload, len);
  const bool sent = ::sendto(fd, pkt.data(), pkt.size(), 0, reinterpret_cast<const sockaddr*>(&dst), sizeof dst) ==
                    static_cast<ssize_t>(pkt.size());
  ::close(fd);
  return sent;
}

bool raw_sockets_allowed() {
  const int fd = ::socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

// Skips a test that forges `whose` source address ("publisher's") where raw sockets are not
// allowed.
#define POLLUX_REQUIRE_RAW_SOCKETS(whose) \
  if (!raw_sockets_allowed())             \
  GTEST_SKIP() << "needs CAP_NET_RAW to forge the " whose " source address (CI runs as root)"

// `toml` (from udp_config) with the counters file on, named `name`.
std::string with_counters(std::string toml, const std::string& name) {
  const std::string off = "counters = false";
  toml.replace(toml.find(off), off.size(), absl::StrFormat("counters = true\nname = \"%s\"", name));
  return toml;
}

// A live multicast session on `lo` (inline publisher and subscriber driven by the test
// thread) with an eavesdropper on the group: what each hostile test starts from. Every message
// carries its own sequence in a 16-byte payload, so anything forged that is delivered shows.
class HostileSession {
 public:
  HostileSession(std::uint32_t port_offset, const std::string& name, const std::string& extra = "")
      : eve_(group(), base_port() + port_offset) {
    auto s = Context::from_string(with_counters(udp_config("inline", port_offset, extra), name + "-sub"), "sub.toml");
    auto p = Context::from_string(with_counters(udp_config("inline", port_offset, extra), name + "-pub"), "pub.toml");
    EXPECT_TRUE(s.ok()) << s.status();
    EXPECT_TRUE(p.ok()) << p.status();
    EXPECT_TRUE(eve_.ok()) << "the eavesdropper could not bind or join " << group();
    if (!s.ok() || !p.ok()) return;
    sctx = std::move(*s);
    pctx = std::move(*p);
    auto sub_or = sctx->subscriber("t");
    auto pub_or = pctx->publisher("t");
    EXPECT_TRUE(sub_or.ok()) << sub_or.status();
    EXPECT_TRUE(pub_or.ok()) << pub_or.status();
    if (!sub_or.ok() || !pub_or.ok()) return;
    sub = std::move(*sub_or);
    pub = std::move(*pub_or);
    ok_ = spin_until([&] { return pub.is_connected(); }, kWaitMs,
                     [&] {
                       pub.service();
                       poll();
                     });
    EXPECT_TRUE(ok_) << "the publisher never saw the subscriber";
  }
  bool ok() const { return ok_; }
  int poll() {
    return sub.poll(
        [&](const Message& m) {
          max_size = std::max<std::uint64_t>(max_size, m.payload.size());
          std::uint64_t v = 0;
          if (m.payload.size() == 16) std::memcpy(&v, m.payload.data(), 8);  // never read a lying view
          if (m.payload.size() != 16 || v != m.sequence || (next != 0 && m.sequence != next)) ++wrong;
          next = m.sequence + 1;
          ++delivered;
        },
        [&](const Gap& g) { lost += g.count; },
        [&](const StreamEvent& e) {
          if (e.kind == StreamEventKind::kNewSession) {
            ++sessions;
          } else {
            ++ends;
          }
        },
        256);
  }
  void publish(std::uint64_t from, std::uint64_t to) {
    for (std::uint64_t i = from; i <= to; ++i) {
      std::uint64_t v[2] = {i, 0};
      if (!offer_retrying(pub, v, sizeof v, [&] { poll(); })) return;
    }
  }
  // Until `n` messages were delivered (or reported lost) and the eavesdropper heard a heartbeat
  // announcing n + 1 (it then knows the publisher's address, stream and session).
  bool settle(std::uint64_t n) {
    return spin_until([&] { return delivered + lost >= n && eve_.next >= n + 1; }, kWaitMs,
                      [&] {
                        pub.service();
                        poll();
                        eve_.pump();
                      });
  }
  // Sends `d` to the group as if from the publisher.
  void spoof(const void* d, std::size_t len) { ASSERT_TRUE(send_spoofed(eve_.publisher, eve_.group(), d, len)); }
  // A frame header of the live session.
  core::FrameHeader header(std::uint32_t length, std::uint16_t flags, std::uint64_t seq) const {
    core::FrameHeader h{};
    h.frame_length = length;
    h.magic = core::kFrameMagic;
    h.version = core::kFrameVersion;
    h.flags = flags;
    h.stream_id = eve_.stream_id;
    h.session_id = eve_.session_id;
    h.sequence = seq;
    return h;
  }
  void spoof_heartbeat(std::uint64_t next, std::uint64_t oldest, std::uint16_t flags = core::kFlagHeartbeat) {
    alignas(8) std::byte d[transport::reliability::kHeartbeatFrameLength] = {};
    const core::FrameHeader h = header(sizeof d, flags, next);
    std::memcpy(d, &h, sizeof h);
    std::memcpy(d + sizeof h, &oldest, 8);
    spoof(d, sizeof d);
  }
  std::uint64_t sub_counter(const std::string& name) const { return counter_sum(*sctx, "udp sub stream", name); }
  std::uint64_t pub_counter(const std::string& name) const { return counter_sum(*pctx, "udp pub stream", name); }
  Eavesdropper& eve() { return eve_; }

  std::unique_ptr<Context> sctx, pctx;
  Subscriber sub;
  Publisher pub;
  std::uint64_t delivered = 0, wrong = 0, max_size = 0, lost = 0, next = 0, ends = 0, sessions = 0;

 private:
  Eavesdropper eve_;
  bool ok_ = false;
};

// A 32-byte frame flagged "traced" (a 64-byte trace block should follow the
// header) claims a payload of 32 - 96 bytes = 4294967232 as an unsigned length. Sent by a
// spoofer with the live session's next sequence, it must be counted and dropped at decode;
// the real message with that sequence is then delivered as usual.
TEST(UdpHostile, TracedFrameShorterThanItsTraceBlockIsDroppedNotDelivered) {
  POLLUX_REQUIRE_RAW_SOCKETS("publisher's");
  HostileSession t(8, "udp-hostile-trace");
  ASSERT_TRUE(t.ok());
  t.publish(1, 10);
  ASSERT_TRUE(t.settle(10)) << "delivered " << t.delivered << ", eavesdropped next " << t.eve().next;
  const core::FrameHeader forged = t.header(32, core::kFlagTraced, 11);  // the next sequence the publisher sends
  t.spoof(&forged, sizeof forged);
  // Let it arrive before the real 11 (the subscriber reads its socket in order).
  for (int i = 0; i < 20; ++i) t.poll();
  t.publish(11, 20);
  EXPECT_TRUE(t.settle(20)) << "delivered " << t.delivered << " lost " << t.lost;
  EXPECT_EQ(t.max_size, 16u) << "a frame shorter than its trace block was delivered";
  EXPECT_EQ(t.wrong, 0u);
  EXPECT_EQ(t.delivered, 20u);
  EXPECT_EQ(t.lost, 0u);
  EXPECT_TRUE(spin_until([&] { return t.sub_counter("malformed") >= 1; }, kWaitMs, [&] { t.poll(); }))
      << "the forged frame was not counted as malformed";
  // The subscriber's own I/O failures are published too (0 here): a failing recvmmsg or a
  // refused NAK shows in pollux-stat.
  POLLUX_ASSERT_OK_DECL(snap, core::read_counters_file(t.sctx->counters_path()));
  std::set<std::string> names;
  for (const auto& c : snap->counters) {
    if (c.scope.rfind("udp sub stream", 0) == 0) names.insert(c.name);
  }
  EXPECT_EQ(names.count("recv_errors"), 1u);
  EXPECT_EQ(names.count("control_send_errors"), 1u);
}

// A datagram larger than the subscriber's buffers (udp.mtu - 28) from anyone on the group: read
// truncated by the single-datagram path (recvfrom with MSG_TRUNC, the ping-pong case), counted
// as malformed and dropped - never parsed as its first 1472 bytes - and the stream goes on.
TEST(UdpHostile, OversizedDatagramIsCountedAndDroppedByTheSingleReadPath) {
  HostileSession t(27, "udp-hostile-big", "mtu = 1500");
  ASSERT_TRUE(t.ok());
  t.publish(1, 10);
  ASSERT_TRUE(t.settle(10)) << "delivered " << t.delivered << ", eavesdropped next " << t.eve().next;
  const std::uint64_t malformed = t.sub_counter("malformed");
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  in_addr lo{};
  lo.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &lo, sizeof lo), 0);
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(static_cast<std::uint16_t>(base_port() + 27));
  ASSERT_EQ(inet_pton(AF_INET, group().c_str(), &dst.sin_addr), 1);
  // Starts like a valid frame of the live session, so parsing a truncated copy would deliver it.
  std::vector<std::byte> big(1600);
  const core::FrameHeader h = t.header(64, 0, 11);
  std::memcpy(big.data(), &h, sizeof h);
  ASSERT_EQ(::sendto(fd, big.data(), big.size(), 0, reinterpret_cast<const sockaddr*>(&dst), sizeof dst),
            static_cast<ssize_t>(big.size()));
  ::close(fd);
  EXPECT_TRUE(spin_until([&] { return t.sub_counter("malformed") > malformed; }, kWaitMs, [&] { t.poll(); }))
      << "the oversized datagram was not counted; wrong_source " << t.sub_counter("wrong_source");
  // Dropped as truncated, before its frames were looked at (their source is not the publisher's).
  EXPECT_EQ(t.sub_counter("wrong_source"), 0u);
  t.publish(11, 20);
  EXPECT_TRUE(spin_until([&] { return t.delivered >= 20; }, kWaitMs, [&] { t.poll(); }));
  EXPECT_EQ(t.delivered, 20u);
  EXPECT_EQ(t.wrong, 0u);
  EXPECT_EQ(t.lost, 0u);
}

// Forged heartbeats (sequence 2^63; 2^40, below the
// plausibility bound but far past the window; oldest beyond next) and a forged end of stream
// at the live position, each followed by more real traffic: every real message is delivered
// in order, nothing is reported lost, the stream does not end, and each forgery is counted.
TEST(UdpHostile, ForgedHeartbeatsAndEndOfStreamDoNotStopTheStream) {
  POLLUX_REQUIRE_RAW_SOCKETS("publisher's");
  HostileSession t(9, "udp-hostile-hb");
  ASSERT_TRUE(t.ok());
  t.publish(1, 10);
  ASSERT_TRUE(t.settle(10));
  t.spoof_heartbeat(1ull << 63, 1ull << 63);
  t.publish(11, 20);
  ASSERT_TRUE(t.settle(20)) << "delivered " << t.delivered << " lost " << t.lost;
  t.spoof_heartbeat(1ull << 40, 1ull << 40);
  t.publish(21, 30);
  ASSERT_TRUE(t.settle(30)) << "delivered " << t.delivered << " lost " << t.lost;
  t.spoof_heartbeat(31, 1000);
  t.publish(31, 40);
  ASSERT_TRUE(t.settle(40)) << "delivered " << t.delivered << " lost " << t.lost;
  // An end of stream at the live position, then the publisher goes on: its next frame (already
  // queued behind the forgery) contradicts it.
  t.spoof_heartbeat(41, 1, core::kFlagHeartbeat | core::kFlagEndOfStream);
  t.publish(41, 50);
  ASSERT_TRUE(t.settle(50)) << "delivered " << t.delivered << " lost " << t.lost << " ends " << t.ends;
  // A plain datagram (not spoofed) with the session's id, from another socket.
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  in_addr lo{};
  inet_pton(AF_INET, "127.0.0.1", &lo);
  ASSERT_EQ(setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &lo, sizeof lo), 0);
  const core::FrameHeader h = t.header(48, core::kFlagHeartbeat | core::kFlagEndOfStream, 51);
  alignas(8) std::byte hb[48] = {};
  std::memcpy(hb, &h, sizeof h);
  ASSERT_EQ(::sendto(fd, hb, sizeof hb, 0, reinterpret_cast<const sockaddr*>(&t.eve().group()), sizeof(sockaddr_in)),
            48);
  ::close(fd);
  t.publish(51, 60);
  ASSERT_TRUE(t.settle(60)) << "delivered " << t.delivered << " lost " << t.lost << " ends " << t.ends;
  EXPECT_EQ(t.delivered, 60u);
  EXPECT_EQ(t.lost, 0u);
  EXPECT_EQ(t.wrong, 0u);
  EXPECT_EQ(t.ends, 0u);
  EXPECT_EQ(t.sessions, 1u);
  EXPECT_TRUE(t.sub.is_connected());
  EXPECT_TRUE(spin_until(
      [&] {
        return t.sub_counter("malformed") >= 2 && t.sub_counter("ends_refuted") >= 1 &&
               t.sub_counter("wrong_source") >= 1;
      },
      kWaitMs, [&] { t.poll(); }))
      << "malformed " << t.sub_counter("malformed") << ", ends_refuted " << t.sub_counter("ends_refuted")
      << ", wrong_source " << t.sub_counter("wrong_source");
}

// The NAK amplification attack against a live publisher on loopback, in
// multicast mode (the publisher's socket takes NAKs from anyone: sent from a plain socket) and
// in unicast mode (its socket is connect()ed to the subscriber: the NAKs forge the subscriber's
// address and port). 315 NAKs of 30 ranges asking for the whole log (528 bytes each, the
// issue's 166 KB): from made-up subscribers they get nothing; from one that announced itself
// with a status message they get what its token bucket holds. Repair and NAK bytes are the
// publisher's own counters.

// The local port of the UDP socket connected to `remote` (the unicast publisher's), from
// /proc/net/udp; 0 if none.
std::uint16_t local_port_connected_to(const sockaddr_in& remote) {
  std::FILE* f = std::fopen("/proc/net/udp", "r");
  if (f == nullptr) return 0;
  char line[512];
  std::uint16_t port = 0;
  const unsigned want_addr = remote.sin_addr.s_addr, want_port = ntohs(remote.sin_port);
  while (std::fgets(line, sizeof line, f) != nullptr) {
    unsigned la, lp, ra, rp;
    if (std::sscanf(line, " %*d: %x:%x %x:%x", &la, &lp, &ra, &rp) == 4 && ra == want_addr && rp == want_port &&
        lp != want_port) {
      port = static_cast<std::uint16_t>(lp);
    }
  }
  std::fclose(f);
  return port;
}

struct NakAttackResult {
  std::uint64_t repair_bytes = 0, control_bytes = 0, unannounced = 0, rate_limited = 0;
  double elapsed_s = 0;
};

NakAttackResult nak_attack(bool multicast, bool announce, std::uint32_t port_offset, const std::string& limits) {
  NakAttackResult res;
  const std::string addr = multicast ? "" : "127.0.0.1";
  const std::string& extra = limits;
  auto sctx = Context::from_string(udp_config("inline", port_offset, extra, addr), "sub.toml");
  auto pctx =
      Context::from_string(with_counters(udp_config("inline", port_offset, extra, addr), "udp-nak-attack"), "pub.toml");
  EXPECT_TRUE(sctx.ok()) << sctx.status();
  EXPECT_TRUE(pctx.ok()) << pctx.status();
  auto sub = (*sctx)->subscriber("t");
  auto pub = (*pctx)->publisher("t");
  EXPECT_TRUE(sub.ok()) << sub.status();
  EXPECT_TRUE(pub.ok()) << pub.status();
  std::uint64_t delivered = 0;
  std::uint32_t session = 0;
  auto poll = [&] {
    sub->poll(
        [&](const Message& m) {
          ++delivered;
          session = m.session_id;
        },
        256);
  };
  EXPECT_TRUE(spin_until([&] { return pub->is_connected(); }, kWaitMs,
                         [&] {
                           pub->service();
                           poll();
                         }));
  constexpr std::uint64_t kMessages = 20000;  // 1.28 MB of 64-byte frames in the publisher's log
  for (std::uint64_t i = 1; i <= kMessages; ++i) {
    std::uint64_t v[4] = {i, 0, 0, 0};
    if (!offer_retrying(*pub, v, sizeof v, poll)) break;
    if (i % 16 == 0) poll();
  }
  EXPECT_TRUE(spin_until([&] { return delivered >= kMessages; }, kWaitMs,
                         [&] {
                           pub->service();
                           poll();
                         }));
  // Where the NAKs go and where they claim to come from.
  const sockaddr_in sub_addr = [&] {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(base_port() + port_offset));
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    return a;
  }();
  sockaddr_in pub_addr{};
  if (multicast) {
    Eavesdropper eve(group(), base_port() + port_offset);
    spin_until([&] { return eve.heartbeats > 0; }, kWaitMs,
               [&] {
                 pub->service();
                 poll();
                 eve.pump();
               });
    pub_addr = eve.publisher;
  } else {
    pub_addr = sub_addr;
    pub_addr.sin_port = htons(local_port_connected_to(sub_addr));
  }
  EXPECT_NE(pub_addr.sin_port, 0) << "publisher's address not found";
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  auto send = [&](const std::vector<std::byte>& m) {
    if (multicast) {
      ::sendto(fd, m.data(), m.size(), 0, reinterpret_cast<const sockaddr*>(&pub_addr), sizeof pub_addr);
    } else {
      send_spoofed(sub_addr, pub_addr, m.data(), m.size());
    }
  };
  auto control = [&](std::uint16_t type, std::uint64_t receiver, std::uint16_t ranges) {
    std::vector<std::byte> m(sizeof(transport::reliability::ControlHeader) +
                             ranges * sizeof(transport::reliability::NakRange));
    transport::reliability::ControlHeader c{};
    c.length = static_cast<std::uint32_t>(m.size());
    c.magic = transport::reliability::kControlMagic;
    c.version = transport::reliability::kControlVersion;
    c.type = type;
    c.stream_id = sub->stream_id();
    c.session_id = session;
    c.receiver_id = receiver;
    c.position = c.highest = kMessages + 1;
    c.range_count = ranges;
    std::memcpy(m.data(), &c, sizeof c);
    for (std::uint16_t i = 0; i < ranges; ++i) {
      const transport::reliability::NakRange r{1, kMessages};
      std::memcpy(m.data() + sizeof c + i * sizeof r, &r, sizeof r);
    }
    return m;
  };
  // From here on the real subscriber is not polled: it sends no NAK or status message, so every
  // repair the publisher sends is the attack's doing.
  const std::uint64_t repair0 = counter_sum(**pctx, "udp pub stream", "retransmitted_bytes");
  const std::uint64_t control0 = counter_sum(**pctx, "udp pub stream", "control_bytes_received");
  std::uint64_t sent_bytes = 0;
  // Each message is sent once the publisher took the previous one (its counter shows it), so
  // none is lost to a full socket buffer however slow the machine.
  auto deliver = [&](const std::vector<std::byte>& m) {
    send(m);
    sent_bytes += m.size();
    spin_until([&] { return counter_sum(**pctx, "udp pub stream", "control_bytes_received") - control0 >= sent_bytes; },
               2000, [&] { pub->service(); });
  };
  const auto t0 = std::chrono::steady_clock::now();
  if (announce) deliver(control(transport::reliability::kControlStatus, 0xBAD, 0));
  for (int k = 0; k < 315; ++k) {
    deliver(control(transport::reliability::kControlNak, announce ? 0xBAD : 0xBAD0000ull + k, 30));
  }
  // Everything the NAKs were granted goes out now (repairs are paid for when scheduled).
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  while (std::chrono::steady_clock::now() < until) pub->service();
  res.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::close(fd);
  pub->service();
  res.repair_bytes = counter_sum(**pctx, "udp pub stream", "retransmitted_bytes") - repair0;
  res.control_bytes = counter_sum(**pctx, "udp pub stream", "control_bytes_received") - control0;
  res.unannounced = counter_sum(**pctx, "udp pub stream", "naks_unannounced");
  res.rate_limited = counter_sum(**pctx, "udp pub stream", "repairs_rate_limited");
  std::printf("%s, %s: %llu control bytes received -> %llu repair bytes in %.3f s (%.2fx)\n",
              multicast ? "multicast" : "unicast, spoofed source",
              announce ? "announced forger" : "made-up subscribers", static_cast<unsigned long long>(res.control_bytes),
              static_cast<unsigned long long>(res.repair_bytes), res.elapsed_s,
              res.control_bytes ? static_cast<double>(res.repair_bytes) / res.control_bytes : 0.0);
  return res;
}

// Limits of these tests: 16 KiB/s and a 16 KiB burst per subscriber, 32 KiB/s in all. Within
// the 20 s the checks allow, 2 x the attack's 166 KB exceeds what the buckets can grant.
const std::string kTestLimits = "repair_rate = \"16KiB\"\nrepair_burst = \"16KiB\"\nrepair_rate_total = \"32KiB\"\n";

void check_bounded(const NakAttackResult& r) {
  ASSERT_LT(r.elapsed_s, 20.0) << "the machine stalled for 20 s during 315 datagrams";
  EXPECT_GE(r.control_bytes, 315u * 528u);  // the whole attack reached the publisher
  EXPECT_LE(static_cast<double>(r.repair_bytes), 16384.0 + 16384.0 * r.elapsed_s);  // its bucket: burst + rate x time
  EXPECT_LE(r.repair_bytes, 2 * r.control_bytes + 16384);  // the target: <= 2x beyond a small burst
}

TEST(UdpHostile, NakAmplificationMulticastMadeUpSubscribers) {
  const NakAttackResult r = nak_attack(true, false, 10, kTestLimits);
  check_bounded(r);
  EXPECT_EQ(r.repair_bytes, 0u);
  EXPECT_EQ(r.unannounced, 315u);
}

// An inline publisher whose subscriber went silent (a scheduler stall longer than
// session_timeout_ms, here simulated by not touching either side) is "not connected"; an
// application that then only spins on offer() - no service() - must still reconnect once the
// subscriber is back: a failed inline offer runs the transport's timers (heartbeats that let
// the subscriber rejoin, the status messages that reconnect the publisher).
TEST(UdpInline, PublisherThatLostItsSubscriberReconnectsThroughOfferAlone) {
  const std::string timeout = "session_timeout_ms = 500";  // the test is about it
  POLLUX_ASSERT_OK_DECL(sctx, Context::from_string(udp_config("inline", 25, timeout), "sub.toml"));
  POLLUX_ASSERT_OK_DECL(pctx, Context::from_string(udp_config("inline", 25, timeout), "pub.toml"));
  POLLUX_ASSERT_OK_DECL(sub, (*sctx)->subscriber("t"));
  POLLUX_ASSERT_OK_DECL(pub, (*pctx)->publisher("t"));
  std::uint64_t delivered = 0;
  auto poll = [&] { (void)sub->poll([&](const Message&) { ++delivered; }, 64); };
  ASSERT_TRUE(spin_until([&] { return pub->is_connected(); }, kWaitMs,
                         [&] {
                           pub->service();
                           poll();
                         }));
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // > 2 x session_timeout_ms (500)
  pub->service();                                                // notices the silence
  ASSERT_FALSE(pub->is_connected()) << "the subscriber was silent for 1.2 s: it should be gone";
  std::uint64_t v[4] = {42, 0, 0, 0};
  std::int64_t r = -1;
  // Only offer() on the publisher's side from here on.
  EXPECT_TRUE(spin_until([&] { return (r = pub->offer(v, sizeof v)) >= 0; }, kWaitMs, poll))
      << "offer() still refused (" << r << ") " << kWaitMs / 1000 << " s after the subscriber came back";
  EXPECT_TRUE(spin_until([&] { return delivered >= 1; }, kWaitMs, poll)) << "the message offered after reconnecting";
}

TEST(UdpHostile, NakAmplificationMulticastAnnouncedForger) {
  const NakAttackResult r = nak_attack(true, true, 11, kTestLimits);
  check_bounded(r);
  EXPECT_GT(r.rate_limited, 0u);
}

TEST(UdpHostile, NakAmplificationUnicastSpoofedSource) {
  POLLUX_REQUIRE_RAW_SOCKETS("subscriber's");
  const NakAttackResult made_up = nak_attack(false, false, 12, kTestLimits);
  check_bounded(made_up);
  EXPECT_EQ(made_up.repair_bytes, 0u);
  const NakAttackResult announced = nak_attack(false, true, 13, kTestLimits);
  check_bounded(announced);
  EXPECT_GT(announced.rate_limited, 0u);
}

// With the default limits (64 MiB/s per subscriber, 1 MiB burst): what the same attack gets.
TEST(UdpHostile, NakAmplificationWithTheDefaults) {
  const NakAttackResult made_up = nak_attack(true, false, 14, "");
  EXPECT_EQ(made_up.repair_bytes, 0u);
  const NakAttackResult r = nak_attack(true, true, 15, "");
  EXPECT_LE(static_cast<double>(r.repair_bytes), (1u << 20) + (64u << 20) * r.elapsed_s);
}

// The same defence one layer up, for every transport (RDMA included): whatever a transport
// hands the subscriber, a frame too short for its header + trace block is counted, dropped and
// reported as a one-message kMalformed gap. Driven through SubscriberImpl with an endpoint that
// returns such descriptors (the UDP cursor above no longer lets one through).
TEST(SubscriberDefence, FrameShorterThanItsTraceBlockIsAMalformedGapOnAnyTransport) {
  POLLUX_ASSERT_OK_DECL(counters, core::CountersFile::create("", "defence"));
  detail::SubscriberImpl sub;
  auto& f = **counters;
  test::init_inline_subscriber(sub, f, 5);
  sub.counters.malformed = f.allocate("sub", "malformed", 5);
  auto ep = std::make_unique<test::ScriptedRx>();
  test::ScriptedRx* rx = ep.get();
  // Frame bytes as a datagram would carry them: 1 = a traced 32-byte frame (no room for its
  // 64-byte trace block), 2 = a 20-byte "frame", 3 = a valid traced frame with 8 payload bytes.
  alignas(8) std::byte short_traced[32] = {}, tiny[32] = {}, good[104] = {};
  auto head = [](std::byte* p, std::uint32_t len, std::uint16_t flags, std::uint64_t seq) {
    auto* h = reinterpret_cast<core::FrameHeader*>(p);
    h->frame_length = len;
    h->magic = core::kFrameMagic;
    h->version = core::kFrameVersion;
    h->flags = flags;
    h->stream_id = 5;
    h->session_id = 9;
    h->sequence = seq;
  };
  head(short_traced, 32, core::kFlagTraced, 1);
  head(tiny, 20, 0, 2);
  head(good, 104, core::kFlagTraced, 3);
  auto desc = [](const std::byte* p, std::uint32_t len, std::uint64_t seq) {
    transport::RxDesc d{};
    d.frame = reinterpret_cast<const core::FrameHeader*>(p);
    d.sequence = seq;
    d.length = len;
    d.kind = transport::RxKind::kMessage;
    d.session_id = 9;
    return d;
  };
  rx->script = {desc(short_traced, 32, 1), desc(tiny, 20, 2), desc(good, 104, 3)};
  sub.ep = std::move(ep);
  std::vector<std::size_t> sizes;
  std::vector<Gap> gaps;
  struct Ctx {
    std::vector<std::size_t>* sizes;
    std::vector<Gap>* gaps;
  } ctx{&sizes, &gaps};
  detail::Handlers h{&ctx, [](void* c, const Message& m) { static_cast<Ctx*>(c)->sizes->push_back(m.payload.size()); },
                     [](void* c, const Gap& g) { static_cast<Ctx*>(c)->gaps->push_back(g); },
                     [](void*, const StreamEvent&) {}, nullptr};  // on_frame: the scripted endpoint has no direct path
  EXPECT_EQ(sub.poll(h, 16), 3);
  EXPECT_EQ(sizes, std::vector<std::size_t>{8});  // only the valid frame, with its real payload size
  ASSERT_EQ(gaps.size(), 2u);
  EXPECT_EQ(gaps[0].from, 1u);
  EXPECT_EQ(gaps[0].count, 1u);
  EXPECT_EQ(gaps[0].reason, GapReason::kMalformed);
  EXPECT_EQ(gaps[1].from, 2u);
  EXPECT_EQ(sub.counters.malformed.get(), 2u);
  EXPECT_EQ(sub.lost, 2u);
  EXPECT_EQ(sub.received, 1u);
  EXPECT_EQ(rx->released.size(), 3u);  // the dropped ones' buffers are handed back too
}

}  // namespace
}  // namespace pollux
