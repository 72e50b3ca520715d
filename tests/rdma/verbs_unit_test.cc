// Host unit tests of the RDMA transport's device-free parts: [rdma] config parsing, the rdma_cm
// private data, sequence/gap tracking, the error messages, and the mlx5 WQE/CQE layout of the
// direct-verbs send path (built into plain memory: no device needed, none used).
#include <endian.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include <gtest/gtest.h>

#include "core/config.h"
#include "transport/rdma/cq_moderation.h"
#include "transport/rdma/mlx5_dv.h"
#include "transport/rdma/qp.h"
#include "transport/rdma/rdma_config.h"
#include "transport/rdma/send_pins.h"
#include "transport/rdma/sequence.h"
#include "transport/rdma/ud_address.h"
#include "transport/rdma/verbs_errors.h"
#include "transport/rdma/wire.h"

namespace pollux::transport::rdma {
namespace {

// ---- config --------------------------------------------------------------------------------------

std::string config_error(std::string_view toml) {
  auto c = core::parse_config(toml, "feed.toml");
  EXPECT_FALSE(c.ok()) << toml;
  return c.ok() ? "" : std::string(c.status().message());
}

// A document parse_config must refuse, and its message: all of it (kWhole) or a part (kPart).
enum class Match { kWhole, kPart };
struct ConfigErrorCase {
  std::string toml;
  std::string want;
  Match match;
};

void expect_config_errors(const std::vector<ConfigErrorCase>& cases) {
  for (const ConfigErrorCase& e : cases) {
    SCOPED_TRACE(e.toml);
    const std::string message = config_error(e.toml);
    if (e.match == Match::kWhole) {
      EXPECT_EQ(message, e.want);
    } else {
      EXPECT_NE(message.find(e.want), std::string::npos) << message;
    }
  }
}

// The numeric [rdma] keys: each one's line in a test document, its default and the value that
// line gives. `ud_repair`: the line is in UdRepairKeys' document, otherwise in ParsesEveryKey's.
using NumericField = std::variant<std::uint32_t RdmaConfig::*, std::uint64_t RdmaConfig::*, double RdmaConfig::*>;
struct NumericKey {
  std::string_view line;
  NumericField field;
  double default_value;
  double parsed;
  bool ud_repair;
};

constexpr bool kUd = true;
const NumericKey kNumericKeys[] = {
    {"port = 2", &RdmaConfig::port, 1, 2, !kUd},
    {"listen_port = 9000", &RdmaConfig::listen_port, 7471, 9000, !kUd},
    {"inline_threshold = 128", &RdmaConfig::inline_threshold, 256, 128, !kUd},
    {"send_queue_depth = 512", &RdmaConfig::send_queue_depth, 256, 512, !kUd},
    {"recv_queue_depth = 4096", &RdmaConfig::recv_queue_depth, 2048, 4096, !kUd},
    {"cq_depth = 16384", &RdmaConfig::cq_depth, 8192, 16384, !kUd},
    {"signal_every = 32", &RdmaConfig::signal_every, 16, 32, !kUd},
    {"recv_batch = 8", &RdmaConfig::recv_batch, 16, 8, !kUd},
    {"cq_moderation_count = 16", &RdmaConfig::cq_moderation_count, 0, 16, !kUd},
    {"cq_moderation_usec = 8", &RdmaConfig::cq_moderation_usec, 0, 8, !kUd},
    {"heartbeat_ms = 10", &RdmaConfig::heartbeat_ms, 100, 10, !kUd},
    {"liveness_timeout_ms = 500", &RdmaConfig::liveness_timeout_ms, 2000, 500, !kUd},
    {"reconnect_ms = 100", &RdmaConfig::reconnect_ms, 250, 100, !kUd},
    {"connect_timeout_ms = 1000", &RdmaConfig::connect_timeout_ms, 2000, 1000, !kUd},
    {"retransmit_buffer = \"256KiB\"", &RdmaConfig::retransmit_buffer, 1u << 20, 256u << 10, kUd},
    {"reorder_window = 4096", &RdmaConfig::reorder_window, 16384, 4096, kUd},
    {"max_sessions = 8", &RdmaConfig::max_sessions, 4, 8, kUd},
    {"nak_delay_us = 50", &RdmaConfig::nak_delay_us, 100, 50, kUd},
    {"nak_retry_us = 500", &RdmaConfig::nak_retry_us, 2000, 500, kUd},
    {"nak_retry_max_us = 20000", &RdmaConfig::nak_retry_max_us, 50000, 20000, kUd},
    {"nak_give_up_ms = 3000", &RdmaConfig::nak_give_up_ms, 5000, 3000, kUd},
    {"status_interval_ms = 20", &RdmaConfig::status_interval_ms, 100, 20, kUd},
    {"nak_max_range = 1000", &RdmaConfig::nak_max_range, 16384, 1000, kUd},
    {"repair_rate = \"8MiB\"", &RdmaConfig::repair_rate, 64u << 20, 8u << 20, kUd},
    {"repair_burst = \"64KiB\"", &RdmaConfig::repair_burst, 1u << 20, 64u << 10, kUd},
    {"repair_rate_total = 0", &RdmaConfig::repair_rate_total, 256u << 20, 0, kUd},
    {"linger_ms = 100", &RdmaConfig::linger_ms, 500, 100, kUd},
    {"fault_loss = 0.05", &RdmaConfig::fault_loss, 0, 0.05, kUd},
    {"fault_duplicate = 0.01", &RdmaConfig::fault_duplicate, 0, 0.01, kUd},
    {"fault_reorder = 0.02", &RdmaConfig::fault_reorder, 0, 0.02, kUd},
    {"fault_seed = 9", &RdmaConfig::fault_seed, 1, 9, kUd},
};

// The lines of one document's numeric keys, one a line.
std::string numeric_lines(bool ud_repair) {
  std::string out;
  for (const NumericKey& k : kNumericKeys) {
    if (k.ud_repair == ud_repair) out.append(k.line).append("\n");
  }
  return out;
}

// Every numeric key of one document holds `value` (its default or what its line gives).
void expect_numeric_keys(const RdmaConfig& r, bool ud_repair, double NumericKey::*value) {
  for (const NumericKey& k : kNumericKeys) {
    if (k.ud_repair != ud_repair) continue;
    SCOPED_TRACE(k.line);
    const double want = k.*value;
    std::visit(
        [&](auto field) {
          using T = std::remove_cvref_t<decltype(r.*field)>;
          if constexpr (std::is_floating_point_v<T>) {
            EXPECT_DOUBLE_EQ(r.*field, want);
          } else {
            EXPECT_EQ(r.*field, static_cast<T>(want));
          }
        },
        k.field);
  }
}

// ---- CQ moderation seam (what RdmaPollerSource::housekeeping feeds and applies) -----------------

// The source hands the tuner running totals (completions polled, wakeups by completion events)
// and applies what comes back; after the device refused once, nothing more comes back.
TEST(RdmaModeration, TunerPolicyPassesTotalsAndStopsWhenUnsupported) {
  constexpr std::int64_t kMs = 1'000'000;
  TunerPolicy p(ModerationOptions{}, 0);
  std::uint64_t completions = 0, wakeups = 0;
  std::int64_t now = 0;
  // Idle-ish: 1k completions/s, one wakeup each - no moderation asked for.
  for (int i = 0; i < 5; ++i) {
    now += 100 * kMs;
    completions += 100;
    wakeups += 100;
    EXPECT_FALSE(p.update(now, completions, wakeups).has_value());
  }
  // 1M completions/s with 400k wakeups/s: moderated, within the default caps.
  now += 100 * kMs;
  completions += 100'000;
  wakeups += 40'000;
  auto m = p.update(now, completions, wakeups);
  ASSERT_TRUE(m.has_value());
  EXPECT_GT(m->count, 1);
  EXPECT_LE(m->count, ModerationOptions{}.max_count);
  EXPECT_LE(m->period_us, ModerationOptions{}.max_period_us);
  // A polling phase restarts the interval: its totals do not count as interrupts.
  p.restart(now, completions + 5'000'000, wakeups);
  // The device refused (rxe): the tuner is back at {1, 0} and never asks again.
  p.set_unsupported();
  EXPECT_TRUE(p.tuner().unsupported());
  EXPECT_FALSE(p.tuner().current().moderated());
  for (int i = 0; i < 5; ++i) {
    now += 100 * kMs;
    completions += 100'000;
    wakeups += 40'000;
    EXPECT_FALSE(p.update(now, completions, wakeups).has_value());
  }
}

TEST(RdmaConfig, Defaults) {
  auto c = core::parse_config("", "x.toml");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(rdma::config(*c).device, "auto");
  EXPECT_EQ(rdma::config(*c).gid_index, -1);
  EXPECT_EQ(rdma::config(*c).mode, rdma::RdmaMode::kRc);
  EXPECT_EQ(rdma::config(*c).srq, rdma::RdmaSrq::kAuto);
  EXPECT_EQ(rdma::config(*c).mlx5dv, rdma::RdmaMlx5::kAuto);
  EXPECT_TRUE(rdma::config(*c).peers.empty());
  EXPECT_LE(rdma::config(*c).signal_every, rdma::config(*c).send_queue_depth / 2);
  EXPECT_GT(rdma::config(*c).recv_queue_depth, c->rings.capacity);
  expect_numeric_keys(rdma::config(*c), !kUd, &NumericKey::default_value);
}

TEST(RdmaConfig, ParsesEveryKey) {
  auto c = core::parse_config(R"(
[transport]
kind = "rdma"
[rdma]
device = "mlx5_0"
gid_index = 3
mode = "ud_mcast"
peers = ["10.0.0.2:9000", "10.0.0.3:9001"]
multicast_group = "239.1.2.3"
srq = "off"
mlx5dv = "off"
)" + numeric_lines(!kUd),
                              "x.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  const rdma::RdmaConfig& r = rdma::config(*c);
  EXPECT_EQ(c->transport, core::TransportKind::kRdma);
  EXPECT_EQ(r.device, "mlx5_0");
  EXPECT_EQ(r.gid_index, 3);
  EXPECT_EQ(r.mode, rdma::RdmaMode::kUdMulticast);
  ASSERT_EQ(r.peers.size(), 2u);
  EXPECT_EQ(r.peers[1], "10.0.0.3:9001");
  EXPECT_EQ(r.multicast_group, "239.1.2.3");
  EXPECT_EQ(r.srq, rdma::RdmaSrq::kOff);
  EXPECT_EQ(r.mlx5dv, rdma::RdmaMlx5::kOff);
  expect_numeric_keys(r, !kUd, &NumericKey::parsed);
  // The effective config prints the section, every key with its help text, and round-trips.
  const std::string toml = c->to_toml();
  EXPECT_NE(toml.find("[rdma]"), std::string::npos);
  EXPECT_NE(toml.find("peers = [\"10.0.0.2:9000\", \"10.0.0.3:9001\"]  # "), std::string::npos) << toml;
  EXPECT_NE(toml.find("mode = \"ud_mcast\""), std::string::npos);
  std::string stripped;
  for (std::size_t pos = 0; pos < toml.size();) {
    std::size_t eol = toml.find('\n', pos);
    std::string line = toml.substr(pos, eol - pos);
    if (auto h = line.find("  # "); h != std::string::npos) line.resize(h);
    stripped += line + "\n";
    pos = eol == std::string::npos ? toml.size() : eol + 1;
  }
  auto again = core::parse_config(stripped, "again.toml");
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << stripped;
  EXPECT_EQ(rdma::config(*again).peers, r.peers);
  EXPECT_EQ(rdma::config(*again).mode, r.mode);
}

TEST(RdmaConfig, ErrorsNameFileLineAndKey) {
  expect_config_errors({
      {"[rdma]\npeers = [\"10.0.0.2\"]\n",
       "feed.toml:2: rdma.peers: element 0: expected \"a.b.c.d:port\" (IPv4 address and port 1..65535), got "
       "\"10.0.0.2\"",
       Match::kWhole},
      {"[rdma]\n\nmulticast_group = \"10.0.0.1\"\n",
       "feed.toml:3: rdma.multicast_group: expected an IPv4 multicast address (224.0.0.0 - 239.255.255.255), got "
       "\"10.0.0.1\"",
       Match::kWhole},
      {"[rdma]\nmode = \"ud\"\n", "feed.toml:2: rdma.mode: expected rc|ud_mcast, got \"ud\"", Match::kWhole},
      {"[rdma]\ngid_index = -2\n", "feed.toml:2: rdma.gid_index: expected -1..4095, got -2", Match::kWhole},
      {"[rdma]\ndevice = \"\"\n", "feed.toml:2: rdma.device: expected a device name or \"auto\", got \"\"",
       Match::kWhole},
      {"[rdma]\nsrq = \"maybe\"\n", "feed.toml:2: rdma.srq: expected auto|on|off, got \"maybe\"", Match::kWhole},
      {"[rdma]\nsend_queue_depth = 32\nsignal_every = 17\n",
       "feed.toml:3: rdma.signal_every: 17 is more than half of rdma.send_queue_depth (32)", Match::kPart},
      {"[rdma]\nrecv_batch = 600\nrecv_queue_depth = 1024\n",
       "feed.toml:2: rdma.recv_batch: 600 is more than half of rdma.recv_queue_depth (1024)", Match::kPart},
      {"[rdma]\nsignal_evry = 4\n", "(did you mean rdma.signal_every?)", Match::kPart},
      {"[rdma]\npeers = [\"10.0.0.2:0\"]\n", "port 1..65535", Match::kPart},
      {"[rdma]\npeers = [\"10.0.0.256:7\"]\n", "expected \"a.b.c.d:port\"", Match::kPart},
  });
}

// rdma.rnr_timeout_us: the subscriber QP's RNR timer, rounded up to what InfiniBand can encode.
TEST(RdmaConfig, RnrTimeoutKeyAndEncoding) {
  auto d = core::parse_config("", "x.toml");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(rdma::config(*d).rnr_timeout_us, 160u);
  auto c = core::parse_config("[rdma]\nrnr_timeout_us = 1000\n", "x.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(rdma::config(*c).rnr_timeout_us, 1000u);
  expect_config_errors({
      {"[rdma]\nrnr_timeout_us = 5\n", "feed.toml:2: rdma.rnr_timeout_us", Match::kPart},
      {"[rdma]\nrnr_timeout_us = 700000\n", "feed.toml:2: rdma.rnr_timeout_us", Match::kPart},
  });
  // IBA table 45: code 1 = 10 us, 8 = 160 us, 14 = 1.28 ms, 31 = 491.52 ms, 0 = 655.36 ms.
  EXPECT_EQ(rnr_timer_code(10), 1);
  EXPECT_EQ(rnr_timer_code(11), 2);
  EXPECT_EQ(rnr_timer_code(160), 8);
  EXPECT_EQ(rnr_timer_code(161), 9);
  EXPECT_EQ(rnr_timer_code(1000), 14);
  EXPECT_EQ(rnr_timer_code(491'520), 31);
  EXPECT_EQ(rnr_timer_code(491'521), 0);
  EXPECT_EQ(rnr_timer_code(655'360), 0);
  EXPECT_EQ(rnr_timer_us(0), 655'360u);
  EXPECT_EQ(rnr_timer_us(8), 160u);
  // Monotonic: every code after 1 is a longer delay, up to code 0.
  for (std::uint8_t k = 2; k < 32; ++k) EXPECT_GT(rnr_timer_us(k), rnr_timer_us(k - 1)) << int(k);
  for (std::uint32_t us = 10; us <= 655'360; us = us * 5 / 4 + 1) {
    const std::uint8_t code = rnr_timer_code(us);
    EXPECT_GE(rnr_timer_us(code), us);
    if (code != 1) {
      EXPECT_LT(rnr_timer_us(code == 0 ? 31 : code - 1), us) << us;
    }
  }
}

// The ud_mcast repair keys: parsed, printed, validated with file:line:key.
TEST(RdmaConfig, UdRepairKeys) {
  auto d = core::parse_config("", "x.toml");
  ASSERT_TRUE(d.ok());
  expect_numeric_keys(rdma::config(*d), kUd, &NumericKey::default_value);
  // The UD multicast document (cross-key checks apply to a UD multicast configuration).
  const std::string ud = "[transport]\nkind = \"rdma\"\n[rdma]\nmode = \"ud_mcast\"\n";
  auto c = core::parse_config(ud + numeric_lines(kUd), "x.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  expect_numeric_keys(rdma::config(*c), kUd, &NumericKey::parsed);
  const std::string toml = c->to_toml();
  EXPECT_NE(toml.find("retransmit_buffer = \"256KiB\"  # ud_mcast: "), std::string::npos) << toml;
  EXPECT_NE(toml.find("repair_rate = \"8MiB\"  # ud_mcast: "), std::string::npos);

  expect_config_errors({
      {"[rdma]\nretransmit_buffer = 100000\n",
       "feed.toml:2: rdma.retransmit_buffer: expected a power of two, got 100000", Match::kWhole},
      {"[rdma]\nretransmit_buffer = \"32KiB\"\n", "feed.toml:2: rdma.retransmit_buffer:", Match::kPart},
      {"[rdma]\nreorder_window = 1000\n", "feed.toml:2: rdma.reorder_window: expected a power of two, got 1000",
       Match::kWhole},
      {"[rdma]\nrepair_burst = 1000\n", "feed.toml:2: rdma.repair_burst:", Match::kPart},
      {"[rdma]\nmax_sessions = 0\n", "feed.toml:2: rdma.max_sessions: expected 1..64", Match::kPart},
      {"[rdma]\nfault_loss = 1.5\n", "feed.toml:2: rdma.fault_loss:", Match::kPart},
      {ud + "nak_retry_us = 9000\nnak_retry_max_us = 8000\n",
       "feed.toml:5: rdma.nak_retry_us: 9000 is above rdma.nak_retry_max_us (8000)", Match::kWhole},
      {ud + "fault_loss = 0.6\nfault_reorder = 0.6\n",
       "feed.toml:5: rdma.fault_loss: rdma.fault_loss + fault_duplicate + fault_reorder must not exceed 1",
       Match::kWhole},
      {ud + "retransmit_buffer = \"8MiB\"\n[pool]\nslots = 4096\n",
       "feed.toml:5: rdma.retransmit_buffer: 8388608 bytes take 4096 of the pool's 4096 slots of 2048 bytes",
       Match::kPart},
  });
}

// ---- UD multicast repair: the verbs-free parts -----------------------------------------------------

// The 40 bytes in front of a UD datagram, as rxe writes them for RoCEv2 over IPv4: zeros, then
// the packet's IPv4 header (source 10.0.0.1, destination 239.255.77.1).
std::array<std::uint8_t, 40> roce_v2_ipv4_grh() {
  std::array<std::uint8_t, 40> g{};
  const std::uint8_t ip[20] = {0x45, 0x00, 0x00, 0x54, 0x12, 0x34, 0x40, 0x00, 0x01, 0x11,
                               0x00, 0x00, 10,   0,    0,    1,    239,  255,  77,   1};
  std::memcpy(g.data() + 20, ip, 20);
  // A correct header checksum (as on the wire).
  std::uint32_t sum = 0;
  for (int i = 0; i < 20; i += 2) sum += static_cast<std::uint32_t>(g[20 + i] << 8 | g[21 + i]);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  const std::uint16_t csum = static_cast<std::uint16_t>(~sum);
  g[30] = static_cast<std::uint8_t>(csum >> 8);
  g[31] = static_cast<std::uint8_t>(csum & 0xff);
  return g;
}

TEST(RdmaUdAddress, RoceV2Ipv4SourceBecomesTheIpv4MappedGid) {
  const auto g = roce_v2_ipv4_grh();
  reliability::PeerAddress a;
  ASSERT_TRUE(ud_source(reinterpret_cast<const std::byte*>(g.data()), 0x1234, &a));
  EXPECT_EQ(a.length, kUdPeerLength);
  const std::uint8_t want[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1};
  EXPECT_EQ(std::memcmp(ud_peer_gid(a), want, 16), 0);
  EXPECT_EQ(ud_peer_qpn(a), 0x1234u);
  // The same source, another QP: another peer (a session's datagrams all come from one QP).
  reliability::PeerAddress b;
  ASSERT_TRUE(ud_source(reinterpret_cast<const std::byte*>(g.data()), 0x1235, &b));
  EXPECT_FALSE(a == b);
  // Per-packet fields (identification, checksum, TTL) do not change who sent it.
  auto g2 = g;
  g2[24] = 0x99;  // identification
  g2[28] = 0x40;  // TTL
  ASSERT_TRUE(ud_source(reinterpret_cast<const std::byte*>(g2.data()), 0x1234, &b));
  EXPECT_TRUE(a == b);
}

TEST(RdmaUdAddress, Ipv6GrhAndAmbiguousAndMalformedHeaders) {
  // An IB / RoCE-over-IPv6 GRH: version 6, the source GID at bytes 8..24.
  std::array<std::uint8_t, 40> g{};
  g[0] = 0x60;
  for (int i = 0; i < 16; ++i) g[8 + i] = static_cast<std::uint8_t>(0xa0 + i);
  reliability::PeerAddress a;
  ASSERT_TRUE(ud_source(reinterpret_cast<const std::byte*>(g.data()), 7, &a));
  EXPECT_EQ(ud_peer_gid(a)[0], 0xa0);
  EXPECT_EQ(ud_peer_gid(a)[15], 0xaf);
  EXPECT_EQ(ud_peer_qpn(a), 7u);
  // Byte 0 says IPv6 but bytes 20..40 are a valid IPv4 header (a device that leaves garbage in
  // front of it): the checksum decides, as in ibv_init_ah_from_wc.
  auto v4 = roce_v2_ipv4_grh();
  v4[0] = 0x60;
  ASSERT_TRUE(ud_source(reinterpret_cast<const std::byte*>(v4.data()), 7, &a));
  EXPECT_EQ(ud_peer_gid(a)[10], 0xff);
  EXPECT_EQ(ud_peer_gid(a)[12], 10);
  v4[31] ^= 1;  // checksum wrong: an IPv6 GRH after all
  ASSERT_TRUE(ud_source(reinterpret_cast<const std::byte*>(v4.data()), 7, &a));
  EXPECT_EQ(ud_peer_gid(a)[10], v4[18]);
  // Neither: no IPv6 version and no IPv4 header of RoCE's shape (IHL 5).
  std::array<std::uint8_t, 40> bad{};
  EXPECT_FALSE(ud_source(reinterpret_cast<const std::byte*>(bad.data()), 7, &a));
  bad[20] = 0x46;  // IPv4 with options
  EXPECT_FALSE(ud_source(reinterpret_cast<const std::byte*>(bad.data()), 7, &a));
}

// The log must not overwrite what a posted send still reads: the lowest position of the
// requests in flight, which is not the oldest request's once a repair (old bytes) follows
// first transmissions (new bytes).
TEST(RdmaSendPins, LowestPositionInFlightAcrossRepairsAndCompletions) {
  SendPins p;
  p.init(8);
  EXPECT_EQ(p.floor(), SendPins::kNone);
  p.post(0, 1000);  // first transmissions
  p.post(1, 2000);
  p.post(2, 3000);
  EXPECT_EQ(p.floor(), 1000u);
  p.post(3, 100);  // a repair of old bytes
  EXPECT_EQ(p.floor(), 100u);
  EXPECT_EQ(p.size(), 1u) << "the newer, higher positions before it can never be the minimum again";
  p.post(4, 4000);
  p.complete(3);  // requests 0..2 completed: the repair is still in flight
  EXPECT_EQ(p.floor(), 100u);
  p.complete(4);  // the repair completed
  EXPECT_EQ(p.floor(), 4000u);
  p.complete(5);
  EXPECT_EQ(p.floor(), SendPins::kNone);
  // Against a brute-force minimum over a long random run with at most 8 requests in flight.
  SendPins q;
  q.init(8);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> live;
  std::uint64_t next = 0, done = 0, rng = 12345;
  for (int i = 0; i < 100000; ++i) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    if (next - done < 8 && (rng >> 60) < 10) {
      const std::uint64_t pos = (rng >> 20) % 5000;
      q.post(next, pos);
      live.emplace_back(next++, pos);
    } else if (done < next) {
      done += 1 + (rng >> 40) % (next - done);
      q.complete(done);
      std::erase_if(live, [&](const auto& e) { return e.first < done; });
    }
    std::uint64_t want = SendPins::kNone;
    for (const auto& e : live) want = std::min(want, e.second);
    ASSERT_EQ(q.floor(), want) << "step " << i;
  }
}

// ---- rdma_cm private data ------------------------------------------------------------------------

TEST(RdmaWire, RequestRoundTripAndRejections) {
  const ConnectRequest req = make_request(42, 0xabcd, 2048);
  std::uint8_t buf[56] = {};  // rdma_cm pads private data with zeros
  std::memcpy(buf, &req, sizeof req);
  ConnectRequest got;
  std::string why;
  EXPECT_EQ(check_request(buf, sizeof buf, &got, &why), kAccepted);
  EXPECT_EQ(got.stream_id, 42u);
  EXPECT_EQ(got.session_id, 0xabcdu);
  EXPECT_EQ(got.max_frame, 2048u);

  EXPECT_EQ(check_request(buf, 10, &got, &why), kRejectBadMagic);
  EXPECT_NE(why.find("10 bytes of private data"), std::string::npos) << why;
  ConnectRequest bad = req;
  bad.magic = 0x12345678;
  std::memcpy(buf, &bad, sizeof bad);
  EXPECT_EQ(check_request(buf, sizeof buf, &got, &why), kRejectBadMagic);
  EXPECT_NE(why.find("not Pollux's"), std::string::npos) << why;
  bad = req;
  bad.version = kProtocolVersion + 1;
  std::memcpy(buf, &bad, sizeof bad);
  EXPECT_EQ(check_request(buf, sizeof buf, &got, &why), kRejectBadVersion);
  EXPECT_NE(why.find("run the same Pollux release on both ends"), std::string::npos) << why;
  bad = req;
  bad.stream_id = 0;
  std::memcpy(buf, &bad, sizeof bad);
  EXPECT_EQ(check_request(buf, sizeof buf, &got, &why), kRejectBadMagic);
}

TEST(RdmaWire, Replies) {
  ConnectReply got;
  ConnectReply ok = make_reply(7, kAccepted, 2048);
  EXPECT_TRUE(check_reply(&ok, sizeof ok, 7, &got).ok());
  EXPECT_EQ(got.max_frame, 2048u);
  ConnectReply other = make_reply(8, kAccepted, 2048);
  EXPECT_FALSE(check_reply(&other, sizeof other, 7, &got).ok());
  ConnectReply rej = make_reply(7, kRejectNoSubscriber, 0);
  auto s = check_reply(&rej, sizeof rej, 7, &got);
  EXPECT_EQ(s.message(), "the subscriber rejected stream 7: no subscriber for this stream");
  ConnectReply ver = make_reply(7, kRejectBadVersion, 0);
  ver.version = 9;
  EXPECT_NE(check_reply(&ver, sizeof ver, 7, &got).message().find("protocol version 9"), std::string::npos);
  EXPECT_NE(check_reply(&ok, 3, 7, &got).message().find("not a Pollux reply"), std::string::npos);
}

// ---- sequences and gaps --------------------------------------------------------------------------

TEST(RdmaSequence, InOrderGapsStaleAndTail) {
  SequenceTracker t;
  EXPECT_FALSE(t.started());
  auto s = t.on_frame(5);  // late join: the first frame sets the baseline, no gap
  EXPECT_EQ(s.gap_count, 0u);
  EXPECT_EQ(t.next(), 6u);
  s = t.on_frame(6);
  EXPECT_EQ(s.gap_count, 0u);
  s = t.on_frame(10);
  EXPECT_EQ(s.gap_from, 7u);
  EXPECT_EQ(s.gap_count, 3u);
  s = t.on_frame(8);  // late duplicate or reordered: dropped
  EXPECT_TRUE(s.stale);
  EXPECT_EQ(t.next(), 11u);
  s = t.on_next(14);  // heartbeat: 11..13 never arrived
  EXPECT_EQ(s.gap_from, 11u);
  EXPECT_EQ(s.gap_count, 3u);
  s = t.on_next(14);  // repeated heartbeat: nothing new
  EXPECT_EQ(s.gap_count, 0u);
  SequenceTracker h;
  s = h.on_next(1);  // heartbeat before any data sets the baseline at 1
  EXPECT_EQ(s.gap_count, 0u);
  s = h.on_frame(3);  // so losing the very first frames is visible
  EXPECT_EQ(s.gap_from, 1u);
  EXPECT_EQ(s.gap_count, 2u);
}

TEST(RdmaSequence, SessionTableEvictsLeastRecentlyHeard) {
  SessionTable<2> t;
  bool created;
  auto* a = t.find_or_add(1, 100, &created);
  EXPECT_TRUE(created);
  a->last_heard_ns = 100;
  auto* b = t.find_or_add(2, 200, &created);
  EXPECT_TRUE(created);
  b->last_heard_ns = 200;
  EXPECT_EQ(t.find_or_add(1, 300, &created), a);
  EXPECT_FALSE(created);
  a->last_heard_ns = 300;
  auto* c = t.find_or_add(3, 400, &created);  // evicts session 2 (heard at 200)
  EXPECT_TRUE(created);
  EXPECT_EQ(c, b);
  EXPECT_EQ(c->session_id, 3u);
  EXPECT_FALSE(c->seq.started());
}

// ---- error messages ------------------------------------------------------------------------------

TEST(RdmaErrorsText, MemlockNamesUlimitValue) {
  MemlockLimit lim{64 << 10, 64 << 10, false};
  auto s = check_memlock(16u << 20, lim, "mlx5_0");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  const std::string m(s.message());
  EXPECT_NE(m.find("16.0 MiB buffer pool with mlx5_0"), std::string::npos) << m;
  EXPECT_NE(m.find("is 64 KiB"), std::string::npos) << m;
  EXPECT_NE(m.find("`ulimit -l unlimited` (or at least `ulimit -l 21504`)"), std::string::npos) << m;
  EXPECT_NE(m.find("LimitMEMLOCK=infinity"), std::string::npos) << m;
  EXPECT_TRUE(check_memlock(16u << 20, {std::numeric_limits<std::uint64_t>::max(), 0, false}, "x").ok());
  EXPECT_TRUE(check_memlock(16u << 20, {64 << 10, 64 << 10, true}, "x").ok()) << "CAP_IPC_LOCK lifts the limit";
  EXPECT_TRUE(check_memlock(1 << 20, {2 << 20, 2 << 20, false}, "x").ok());
  auto r = reg_mr_error(ENOMEM, 16u << 20, lim, "rxe0");
  EXPECT_NE(r.message().find("ibv_reg_mr(16.0 MiB) on rxe0 failed"), std::string::npos) << r.message();
  EXPECT_NE(r.message().find("`ulimit -l"), std::string::npos) << r.message();
  auto p = reg_mr_error(EACCES, 1 << 20, lim, "rxe0");
  EXPECT_EQ(p.code(), absl::StatusCode::kPermissionDenied);
}

TEST(RdmaErrorsText, DevicesPortsAndGids) {
  auto none = no_device_error("auto", {});
  EXPECT_NE(none.message().find("no RDMA device found"), std::string::npos);
  EXPECT_NE(none.message().find("rdma link add rxe0 type rxe netdev"), std::string::npos);
  auto missing = no_device_error("mlx5_9", {"rxe0", "rxe1"});
  EXPECT_EQ(missing.message(), "rdma: rdma.device = \"mlx5_9\": no such RDMA device; available: rxe0, rxe1");
  auto down = port_down_error("rxe0", 1, IBV_PORT_DOWN, 3);
  EXPECT_NE(down.message().find("rxe0 port 1 is DOWN (physical state 3 = disabled)"), std::string::npos)
      << down.message();
  EXPECT_NE(down.message().find("ip link set <netdev> up"), std::string::npos);
  auto perm = open_device_error(EACCES, "mlx5_0");
  EXPECT_EQ(perm.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(perm.message().find("rdma` group"), std::string::npos) << perm.message();

  ibv_gid ll{};
  ll.raw[0] = 0xfe;
  ll.raw[1] = 0x80;
  ll.raw[15] = 1;
  ibv_gid v4 = multicast_gid((10u << 24) | 2);  // ::ffff:10.0.0.2
  EXPECT_EQ(format_gid(v4), "::ffff:10.0.0.2");
  EXPECT_EQ(gid_ipv4(v4).value(), (10u << 24) | 2u);
  EXPECT_FALSE(gid_ipv4(ll).has_value());
  EXPECT_EQ(format_ipv4((239u << 24) | (255u << 16) | (77u << 8) | 1u), "239.255.77.1");
  const std::vector<GidEntry> gids = {{0, ll, true}, {1, v4, false}, {2, v4, true}};
  EXPECT_EQ(pick_roce_v2_ipv4(gids), 2) << "RoCEv2 and IPv4-mapped";
  EXPECT_EQ(pick_roce_v2_ipv4({{0, ll, true}}), -1);
  auto bad = bad_gid_error("rxe1", 1, 7, "has no GID at index 7", {{0, ll, true}, {1, v4, true}});
  EXPECT_EQ(bad.message(),
            "rdma: rdma.gid_index = 7: rxe1 port 1 has no GID at index 7; valid GIDs: 0 (fe80::1, RoCE v2), 1 "
            "(::ffff:10.0.0.2, RoCE v2). Use -1 to pick the RoCEv2 IPv4 GID, and make sure the Ethernet interface "
            "under the device has an IPv4 address");
  EXPECT_NE(std::string(wc_status_hint(IBV_WC_RETRY_EXC_ERR)).find("peer stopped acknowledging"), std::string::npos);
  EXPECT_EQ(std::string(wc_status_hint(IBV_WC_GENERAL_ERR)), ibv_wc_status_str(IBV_WC_GENERAL_ERR))
      << "no hint: verbs' own";
  EXPECT_EQ(port_state_name(IBV_PORT_ACTIVE), "ACTIVE");
  EXPECT_EQ(port_state_name(99), "UNKNOWN");
  EXPECT_EQ(gid_type_name(IBV_GID_TYPE_ROCE_V2), "RoCE v2");
  EXPECT_EQ(reject_reason_name(kRejectBadVersion), "protocol version mismatch");
  EXPECT_EQ(reject_reason_name(999), "unknown reason");
  std::uint32_t ip;
  std::uint16_t port;
  EXPECT_TRUE(parse_ip_port("10.0.0.2:7471", &ip, &port));
  EXPECT_EQ(ip, (10u << 24) | 2u);
  EXPECT_EQ(port, 7471);
  EXPECT_FALSE(parse_ip_port("10.0.0.2", &ip, &port));
  EXPECT_FALSE(parse_ip_port("10.0.0.2:70000", &ip, &port));
}

// ---- mlx5 WQE layout -----------------------------------------------------------------------------
#if POLLUX_HAVE_MLX5DV

// A send queue in plain memory, with a fake doorbell record and BlueFlame register.
struct FakeSq {
  static constexpr std::uint32_t kBbs = 8;
  alignas(64) std::byte ring[kBbs * 64];
  std::uint32_t dbrec[2] = {0, 0};
  alignas(64) std::byte bf[2 * 256];
  mlx5::SqLayout layout() {
    std::memset(ring, 0xee, sizeof ring);
    std::memset(bf, 0, sizeof bf);
    return {ring, kBbs, dbrec, bf, 256};
  }
};

std::uint32_t be32_at(const std::byte* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return be32toh(v);
}
std::uint64_t be64_at(const std::byte* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return be64toh(v);
}

constexpr std::uint32_t kQpn = 0x1234;
constexpr std::uint32_t kLkey = 0xa5a5;

TEST(Mlx5Wqe, RcSendFromTemplate) {
  FakeSq sq;
  mlx5::WqeWriter w;
  w.init(sq.layout(), kQpn, kLkey, nullptr, 128);
  EXPECT_EQ(w.template_ds(), 2u);  // ctrl + data segment
  char payload[100];
  ASSERT_TRUE(w.send(payload, 100, false, true, 77));
  const std::byte* wqe = sq.ring;
  // Control segment (PRM): opmod | wqe index << 8 | opcode; qpn << 8 | ds; fm_ce_se.
  EXPECT_EQ(be32_at(wqe + 0), (0u << 8) | 0x0a);
  EXPECT_EQ(be32_at(wqe + 4), (kQpn << 8) | 2u);
  EXPECT_EQ(static_cast<std::uint8_t>(wqe[11]), 0x08) << "signalled: CQ_UPDATE";
  // Data segment: byte count, lkey, address.
  EXPECT_EQ(be32_at(wqe + 16), 100u);
  EXPECT_EQ(be32_at(wqe + 20), kLkey);
  EXPECT_EQ(be64_at(wqe + 24), reinterpret_cast<std::uintptr_t>(payload));
  EXPECT_EQ(w.producer(), 1u);
  // The next WQE carries index 1 and no signal bit.
  ASSERT_TRUE(w.send(payload, 60, false, false, 78));
  EXPECT_EQ(be32_at(sq.ring + 64), (1u << 8) | 0x0a);
  EXPECT_EQ(static_cast<std::uint8_t>(sq.ring[64 + 11]), 0);
}

TEST(Mlx5Wqe, InlineSendSpansBasicBlocks) {
  FakeSq sq;
  mlx5::WqeWriter w;
  w.init(sq.layout(), kQpn, kLkey, nullptr, 128);
  std::byte data[100];
  for (int i = 0; i < 100; ++i) data[i] = static_cast<std::byte>(i + 1);
  ASSERT_TRUE(w.send(data, 100, true, false, 5));
  // ds = ctrl (1) + inline header + 100 bytes rounded to 16 (7) = 8 -> 128 bytes, two WQEBBs.
  EXPECT_EQ(be32_at(sq.ring + 4), (kQpn << 8) | 8u);
  EXPECT_EQ(be32_at(sq.ring + 16), 100u | 0x80000000u);
  EXPECT_EQ(std::memcmp(sq.ring + 20, data, 100), 0);
  EXPECT_EQ(w.producer(), 2u);
  EXPECT_FALSE(w.send(data, 129, true, false, 6)) << "over max_inline";
}

TEST(Mlx5Wqe, InlineDataWrapsAtTheRingEnd) {
  FakeSq sq;
  mlx5::WqeWriter w;
  w.init(sq.layout(), kQpn, kLkey, nullptr, 128);
  char small[8] = {};
  for (int i = 0; i < 7; ++i) {
    ASSERT_TRUE(w.send(small, 8, false, false, static_cast<std::uint64_t>(i)));
    (void)w.complete(static_cast<std::uint16_t>(i));
  }
  EXPECT_EQ(w.producer(), 7u);  // last basic block of the ring
  std::byte data[100];
  for (int i = 0; i < 100; ++i) data[i] = static_cast<std::byte>(200 - i);
  ASSERT_TRUE(w.send(data, 100, true, true, 99));
  const std::byte* last = sq.ring + 7 * 64;
  EXPECT_EQ(be32_at(last), (7u << 8) | 0x0a);
  EXPECT_EQ(be32_at(last + 16), 100u | 0x80000000u);
  // 44 bytes fit behind the inline header in the last block, the rest continues at the start.
  EXPECT_EQ(std::memcmp(last + 20, data, 44), 0);
  EXPECT_EQ(std::memcmp(sq.ring, data + 44, 56), 0);
  EXPECT_EQ(w.producer(), 9u);
  EXPECT_EQ(w.complete(7), 99u);
  EXPECT_EQ(w.consumer(), 9u);
}

TEST(Mlx5Wqe, UdTemplateCarriesTheAddressVector) {
  FakeSq sq;
  mlx5::WqeWriter w;
  std::byte av[48];
  for (int i = 0; i < 48; ++i) av[i] = static_cast<std::byte>(i);
  w.init(sq.layout(), kQpn, kLkey, av, 128);
  EXPECT_EQ(w.template_ds(), 5u);  // ctrl + 48-byte datagram segment + data
  char payload[40];
  ASSERT_TRUE(w.send(payload, 40, false, false, 1));
  const std::byte* wqe = sq.ring;
  EXPECT_EQ(be32_at(wqe + 4), (kQpn << 8) | 5u);
  // Datagram segment: Q_Key in the key field, remote QPN (multicast) with the extended-AV bit.
  EXPECT_EQ(be32_at(wqe + 16), kUdQkey);
  EXPECT_EQ(be32_at(wqe + 24), 0xffffffu | 0x80000000u);
  EXPECT_EQ(std::memcmp(wqe + 28, av + 12, 36), 0) << "rest of the AV copied verbatim";
  // Data segment in the second basic block.
  EXPECT_EQ(be32_at(wqe + 64), 40u);
  EXPECT_EQ(be32_at(wqe + 68), kLkey);
  EXPECT_EQ(w.producer(), 2u);
}

TEST(Mlx5Wqe, DoorbellRecordAndBlueFlame) {
  FakeSq sq;
  mlx5::WqeWriter w;
  w.init(sq.layout(), kQpn, kLkey, nullptr, 128);
  char payload[32];
  // One WQE: doorbell record = producer, whole WQE (rounded to 64 B) copied to BlueFlame half 0.
  ASSERT_TRUE(w.send(payload, 32, false, true, 1));
  w.ring();
  EXPECT_EQ(be32toh(sq.dbrec[1]), 1u);
  EXPECT_EQ(std::memcmp(sq.bf, sq.ring, 64), 0);
  EXPECT_EQ(w.bf_offset(), 256u) << "BlueFlame halves alternate";
  // A burst of three: only the last WQE's first 8 bytes go to the register (doorbell).
  std::memset(sq.bf, 0, sizeof sq.bf);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(w.send(payload, 32, false, i == 2, 2 + static_cast<std::uint64_t>(i)));
  w.ring();
  EXPECT_EQ(be32toh(sq.dbrec[1]), 4u);
  EXPECT_EQ(std::memcmp(sq.bf + 256, sq.ring + 3 * 64, 8), 0);
  const std::byte zero[8] = {};
  EXPECT_EQ(std::memcmp(sq.bf + 256 + 8, zero, 8), 0) << "nothing past the 8-byte doorbell";
  EXPECT_EQ(w.bf_offset(), 0u);
  // Ringing with nothing new writes nothing.
  std::memset(sq.bf, 0, sizeof sq.bf);
  w.ring();
  EXPECT_EQ(std::memcmp(sq.bf, zero, 8), 0);
}

TEST(Mlx5Wqe, FullQueueAndInOrderCompletions) {
  FakeSq sq;
  mlx5::WqeWriter w;
  w.init(sq.layout(), kQpn, kLkey, nullptr, 128);
  char p[8];
  for (std::uint64_t i = 0; i < FakeSq::kBbs; ++i) ASSERT_TRUE(w.send(p, 8, false, i % 4 == 3, 100 + i));
  EXPECT_FALSE(w.send(p, 8, false, false, 0)) << "ring full";
  EXPECT_EQ(w.complete(3), 103u);  // a signalled WQE completes everything before it
  EXPECT_EQ(w.consumer(), 4u);
  EXPECT_TRUE(w.send(p, 8, false, false, 200));
}

TEST(Mlx5Cqe, OwnershipOpcodeAndError) {
  alignas(64) std::byte cqe[64] = {};
  const std::uint32_t qpn_be = htobe32(0x001234u);
  const std::uint16_t ctr_be = htobe16(513);
  std::memcpy(cqe + 56, &qpn_be, 4);
  std::memcpy(cqe + 60, &ctr_be, 2);
  cqe[63] = static_cast<std::byte>((0 /*REQ*/ << 4) | 0);  // owner bit 0: valid on even passes
  mlx5::DvCompletion c{};
  ASSERT_TRUE(mlx5::parse_cqe(cqe, 5, 8, &c));
  EXPECT_EQ(c.qp_num, 0x1234u);
  EXPECT_EQ(c.wqe_counter, 513);
  EXPECT_TRUE(c.ok);
  EXPECT_FALSE(mlx5::parse_cqe(cqe, 8 + 5, 8, &c)) << "second pass expects owner bit 1";
  cqe[63] = static_cast<std::byte>((15 /*INVALID*/ << 4) | 0);
  EXPECT_FALSE(mlx5::parse_cqe(cqe, 5, 8, &c));
  cqe[63] = static_cast<std::byte>((13 /*REQ_ERR*/ << 4) | 1);
  cqe[55] = static_cast<std::byte>(0x15);  // syndrome
  ASSERT_TRUE(mlx5::parse_cqe(cqe, 8 + 5, 8, &c));
  EXPECT_FALSE(c.ok);
  EXPECT_EQ(c.opcode, 13);
  EXPECT_EQ(c.syndrome, 0x15);
}

#endif  // POLLUX_HAVE_MLX5DV

}  // namespace
}  // namespace pollux::transport::rdma
