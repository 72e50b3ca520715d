#include "transport/rdma/rdma_config.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "core/config_values.h"
#include "transport/reliability/config_keys.h"

namespace pollux::transport::rdma {

std::string_view rdma_mode_name(RdmaMode m) { return m == RdmaMode::kRc ? "rc" : "ud_mcast"; }

namespace {

// Dotted-quad IPv4 ("10.0.0.2"); returns false on anything else.
bool parse_ipv4(std::string_view s, std::uint32_t* host_order) {
  std::uint32_t v = 0;
  int parts = 0;
  std::size_t i = 0;
  while (parts < 4) {
    std::size_t j = i;
    std::uint32_t octet = 0;
    while (j < s.size() && s[j] >= '0' && s[j] <= '9' && j - i < 3)
      octet = octet * 10 + static_cast<std::uint32_t>(s[j++] - '0');
    if (j == i || octet > 255) return false;
    v = (v << 8) | octet;
    ++parts;
    i = j;
    if (parts < 4) {
      if (i >= s.size() || s[i] != '.') return false;
      ++i;
    }
  }
  if (i != s.size()) return false;
  *host_order = v;
  return true;
}

// "ip:port" with a dotted-quad IPv4 address (rdma_cm peers).
std::string check_ip_port(const std::string& s) {
  const std::size_t colon = s.rfind(':');
  std::uint32_t ip;
  std::uint32_t port = 0;
  if (colon == std::string::npos || !parse_ipv4(std::string_view(s).substr(0, colon), &ip) ||
      !absl::SimpleAtoi(s.substr(colon + 1), &port) || port == 0 || port > 65535) {
    return absl::StrFormat("expected \"a.b.c.d:port\" (IPv4 address and port 1..65535), got \"%s\"", s);
  }
  return "";
}

std::string check_device(const std::string& s) {
  return s.empty() ? "expected a device name or \"auto\", got \"\"" : "";
}

std::string check_multicast_group(const std::string& s) {
  std::uint32_t ip;
  if (!parse_ipv4(s, &ip) || (ip >> 28) != 0xE)
    return absl::StrFormat("expected an IPv4 multicast address (224.0.0.0 - 239.255.255.255), got \"%s\"", s);
  return "";
}

const ConfigTable<RdmaConfig>& table() {
  static const ConfigTable<RdmaConfig> table = [] {
    ConfigTable<RdmaConfig> t("rdma");
    t.text("device", &RdmaConfig::device, "a string",
           "RDMA device (e.g. \"mlx5_0\", \"rxe0\"), or \"auto\": runtime.device if it names one, else the first "
           "device with an active port; its NUMA node gets the pollers and the pool",
           check_device)
        .integer("port", &RdmaConfig::port, 1, 255, "device port number (1-based)")
        .integer("gid_index", &RdmaConfig::gid_index, -1, 4095,
                 "GID table index (ibv_devinfo -v, `show_gids`); -1 = the port's RoCEv2 IPv4-mapped GID")
        .choice("mode", &RdmaConfig::mode, {{"rc", RdmaMode::kRc}, {"ud_mcast", RdmaMode::kUdMulticast}},
                "rc: reliable connection per (publisher thread, subscriber) via rdma_cm; ud_mcast: datagrams to "
                "rdma.multicast_group, lost ones repaired by NAK over unicast UD (loss beyond rdma.retransmit_buffer "
                "reported as exact gaps)")
        .integer("listen_port", &RdmaConfig::listen_port, 1, 65535,
                 "rc: port (rdma_cm, TCP port space) on the device's IPv4 address where subscribers accept publishers")
        .text_list("peers", &RdmaConfig::peers, "an array of \"a.b.c.d:port\" strings", 64, "peers",
                   "rc: subscribers every publisher connects to, as [\"a.b.c.d:port\", ...] (their device address "
                   "and rdma.listen_port)",
                   check_ip_port)
        .text("multicast_group", &RdmaConfig::multicast_group, "a string",
              "ud_mcast: IPv4 multicast group (224.0.0.0/4) all streams are sent to; subscribers filter by stream id",
              check_multicast_group)
        .integer("inline_threshold", &RdmaConfig::inline_threshold, 0, 4096,
                 "frames up to this many bytes are copied into the work request (inline: no DMA read of the buffer); "
                 "capped by the QP's max_inline_data; 0 = never")
        .integer("send_queue_depth", &RdmaConfig::send_queue_depth, 16, 32768,
                 "work requests per send queue (one QP per publisher and subscriber)")
        .integer("recv_queue_depth", &RdmaConfig::recv_queue_depth, 16, 65536,
                 "receive buffers (pool slots) per poller's shared receive queue, or per QP without an SRQ; keep it "
                 "above rings.capacity, or a subscriber holding a full ring leaves none posted (RC then stalls on "
                 "RNR retries, UD drops)")
        .integer("cq_depth", &RdmaConfig::cq_depth, 64, 1 << 22,
                 "completion queue entries per poller (inline mode: per endpoint); grown when QPs need more")
        .integer("signal_every", &RdmaConfig::signal_every, 1, 4096,
                 "request a completion for one send in N (selective signalling); the rest complete silently")
        .integer("post_batch", &RdmaConfig::post_batch, 1, 64,
                 "most send work requests chained into one ibv_post_send, i.e. one doorbell (per QP); a burst of "
                 "more frames takes several; 1 = one doorbell per message (for A/B measurements); 64 = every burst "
                 "(up to 64 frames per post call) in one")
        .integer("recv_batch", &RdmaConfig::recv_batch, 1, 1024,
                 "released receive buffers are re-posted in batches of this many (one post call each)")
        .choice("srq", &RdmaConfig::srq, {{"auto", RdmaSrq::kAuto}, {"on", RdmaSrq::kOn}, {"off", RdmaSrq::kOff}},
                "shared receive queue per poller: auto (when the device has SRQs), on (fail without), off (a receive "
                "queue per QP)")
        .choice("mlx5dv", &RdmaConfig::mlx5dv, {{"auto", RdmaMlx5::kAuto}, {"off", RdmaMlx5::kOff}},
                "auto: mlx5 direct-verbs send path (BlueFlame, pre-built WQEs) when mlx5dv_is_supported(); off: "
                "plain verbs everywhere")
        .integer("cq_moderation_count", &RdmaConfig::cq_moderation_count, 0, 65535,
                 "interrupt moderation (ibv_modify_cq): raise a completion event after this many CQEs; 0 with "
                 "cq_moderation_usec 0 = off")
        .integer("cq_moderation_usec", &RdmaConfig::cq_moderation_usec, 0, 65535,
                 "interrupt moderation: or after this many microseconds")
        .integer("heartbeat_ms", &RdmaConfig::heartbeat_ms, 1, 60'000,
                 "ud_mcast: publishers send a heartbeat (with the next sequence, so tail loss shows as a gap) this "
                 "often when idle")
        .integer("liveness_timeout_ms", &RdmaConfig::liveness_timeout_ms, 10, 3'600'000,
                 "ud_mcast: a publisher silent this long is reported dead (end of stream)")
        .integer("reconnect_ms", &RdmaConfig::reconnect_ms, 10, 600'000,
                 "rc: a publisher retries an unreachable, rejecting or lost subscriber this often")
        .integer("connect_timeout_ms", &RdmaConfig::connect_timeout_ms, 10, 600'000,
                 "rc: rdma_cm address and route resolution timeout")
        .integer("rnr_timeout_us", &RdmaConfig::rnr_timeout_us, 10, 655'360,
                 "rc: when a subscriber has no receive buffer posted (it is not polling yet, or holds them all), the "
                 "publisher's NIC sends again after this long (the subscriber QP's RNR timer, rounded up to the next "
                 "of the 32 values InfiniBand can encode, 10 us .. 655360 us); publishers retry forever, so this is "
                 "how long a stalled stream waits once buffers are back")
        .size("retransmit_buffer", &RdmaConfig::retransmit_buffer, 64u << 10, 1ull << 30,
              "ud_mcast: bytes of sent frames each publisher keeps for repairs (power of two, 64KiB..1GiB), carved "
              "from the registered buffer pool (ceil(bytes / pool.slot_size) slots per publisher); a subscriber that "
              "falls further behind gets an exact, unrecoverable gap",
              core::check_pow2);
    reliability::add_gap_keys(t, "ud_mcast", "; frames held also hold their receive buffers (rdma.recv_queue_depth)",
                              "a subscriber NAKs a new gap after a random delay in [0, this] (reordered datagrams fill "
                              "it meanwhile; subscribers missing the same datagram spread their NAKs and the publisher "
                              "repairs once)");
    t.integer("status_interval_ms", &RdmaConfig::status_interval_ms, 1, 60'000,
              "ud_mcast: subscribers send a status message (position) to each publisher this often, unicast to "
              "its UD QP; a publisher is connected while it hears one within rdma.liveness_timeout_ms");
    reliability::add_repair_keys(t, "ud_mcast", "twice the stream's rate", 4096, ", at least one 4 KiB datagram");
    t.integer("linger_ms", &RdmaConfig::linger_ms, 0, 600'000,
              "Publisher::close() waits up to this long for its subscribers to have everything (0 = close at "
              "once). rc: until every frame and the end of stream are acknowledged; ud_mcast: repairing until "
              "every known subscriber confirmed the end of stream. Frames still unacknowledged then are lost and "
              "logged. It runs on the endpoint's thread (its poller, which meanwhile serves nothing else)");
    reliability::add_fault_keys(t, "ud_mcast testing",
                                "probability that a datagram a subscriber received is dropped before the protocol "
                                "sees it (the loss interceptor)");
    t.integer("fault_seed", &RdmaConfig::fault_seed, 0, INT64_MAX,
              "ud_mcast testing: seed of the loss interceptor (same seed, same faults)");
    return t;
  }();
  return table;
}

// What the queues need of each other, and (ud_mcast) what the repair protocol and the pool need.
core::ConfigIssue validate(const core::Config& c) {
  const RdmaConfig& r = config(c);
  if (r.signal_every > r.send_queue_depth / 2) {
    return {"rdma.signal_every", absl::StrFormat("%u is more than half of rdma.send_queue_depth (%u): the send queue "
                                                 "would fill before a completion frees it; lower it or raise the depth",
                                                 r.signal_every, r.send_queue_depth)};
  }
  if (r.recv_batch > r.recv_queue_depth / 2) {
    return {"rdma.recv_batch", absl::StrFormat("%u is more than half of rdma.recv_queue_depth (%u): too few buffers "
                                               "would stay posted; lower it or raise the depth",
                                               r.recv_batch, r.recv_queue_depth)};
  }
  if (c.transport != core::TransportKind::kRdma || r.mode != RdmaMode::kUdMulticast) return {};
  if (core::ConfigIssue i = reliability::check_keys(r, "rdma"); !i.key.empty()) return i;
  if (r.retransmit_buffer / c.pool.slot_size > c.pool.slots / 2) {
    return {"rdma.retransmit_buffer",
            absl::StrFormat(
                "%u bytes take %u of the pool's %u slots of %u bytes: a publisher's retransmit buffer is carved from "
                "the pool and leaves too little for its rings; raise pool.slots or lower rdma.retransmit_buffer",
                r.retransmit_buffer, (r.retransmit_buffer + c.pool.slot_size - 1) / c.pool.slot_size, c.pool.slots,
                c.pool.slot_size)};
  }
  return {};
}

}  // namespace

void register_config(core::ConfigRegistry& r) { r.add(table(), validate); }

}  // namespace pollux::transport::rdma
