#include "transport/udp/udp_config.h"

#include "absl/strings/str_format.h"
#include "core/config_values.h"

namespace pollux::transport::udp {

namespace {

constexpr const char* kProbability = "a probability 0.0..1.0";

// Smallest frame on the wire (a bare 32-byte header): bounds the frames per datagram.
constexpr std::uint32_t kSmallestFrame = 32;

const ConfigTable<UdpConfig>& table() {
  static const ConfigTable<UdpConfig> t =
      ConfigTable<UdpConfig>("udp")
          .text("address", &UdpConfig::address, "a string",
                "multicast group (224.0.0.0/4: every subscriber joins it) or unicast IPv4 address (the subscriber's) "
                "the publishers send to; [[streams]] udp_address overrides it per stream",
                core::check_ipv4)
          .integer("port", &UdpConfig::port, 1, 65535,
                   "UDP port of the data (subscribers bind it; publishers send from an ephemeral port that receives "
                   "NAKs); [[streams]] udp_port overrides it per stream")
          .text("interface", &UdpConfig::interface, "a string",
                "local interface for multicast (sending and joining) and the address subscribers bind for unicast: a "
                "name (\"eth0\") or an IPv4 address; \"\" = the kernel's routing choice. The default keeps traffic on "
                "this host")
          .integer("ttl", &UdpConfig::ttl, 0, 255, "multicast TTL (1 = never routed beyond the local subnet)")
          .boolean("loopback", &UdpConfig::loopback,
                   "deliver multicast to subscribers on the publishing host too (IP_MULTICAST_LOOP)")
          .integer("mtu", &UdpConfig::mtu, 576, 65535,
                   "IP MTU of the path (576..65535): a datagram carries up to mtu - 28 bytes of frames; the largest "
                   "message is mtu - 60 bytes (no fragmentation)")
          .integer("tx_batch", &UdpConfig::tx_batch, 1, 1024, "most datagrams per sendmmsg call")
          .integer("rx_batch", &UdpConfig::rx_batch, 1, 1024,
                   "most datagrams per recvmmsg call (the batch adapts between 1 and this to the traffic)")
          .integer("rx_buffers", &UdpConfig::rx_buffers, 16, 1 << 20,
                   "datagram buffers per subscriber (each mtu - 28 bytes, rounded up to 64): frames are delivered from "
                   "them without a copy")
          .integer("busy_poll_us", &UdpConfig::busy_poll_us, 0, 1'000'000,
                   "SO_BUSY_POLL on subscriber sockets in microseconds (0 = off; needs CAP_NET_ADMIN to raise above "
                   "net.core.busy_read; refused is reported, not fatal)")
          .boolean(
              "kernel_timestamps", &UdpConfig::kernel_timestamps,
              "stage tracing with the kernel's software timestamps (SO_TIMESTAMPING): publishers of traced streams ask "
              "for the TX timestamp of each datagram carrying a traced frame (Publisher::send_completion_ns), "
              "subscriber sockets take every datagram's receive timestamp (StageTimes::kKernelRx). Costs: the kernel's "
              "TX timestamp work on the traced message's path (~1 us per send on loopback here), a control buffer per "
              "received datagram and the host's global packet timestamping")
          .size("socket_rcvbuf", &UdpConfig::socket_rcvbuf, 4096, 1ull << 31,
                "SO_RCVBUF of subscriber sockets (the kernel caps it at net.core.rmem_max; the effective size is in "
                "describe())")
          .size("socket_sndbuf", &UdpConfig::socket_sndbuf, 4096, 1ull << 31,
                "SO_SNDBUF of publisher sockets (capped at net.core.wmem_max)")
          .size("retransmit_buffer", &UdpConfig::retransmit_buffer, 64u << 10, 4ull << 30,
                "bytes of sent frames each publisher keeps for repairs (power of two, 64KiB..4GiB); a subscriber that "
                "falls further behind gets an unrecoverable gap",
                core::check_pow2)
          .integer("reorder_window", &UdpConfig::reorder_window, 256, 1 << 24,
                   "sequences a subscriber can hold ahead of a gap while it is repaired (power of two); 16 bytes each "
                   "per session",
                   core::check_pow2)
          .integer("max_sessions", &UdpConfig::max_sessions, 1, 64,
                   "publisher sessions (publishers, or restarts of one) a subscriber follows at once on one stream")
          .integer(
              "nak_delay_us", &UdpConfig::nak_delay_us, 0, 1'000'000,
              "a subscriber NAKs a new gap after a random delay in [0, this]: reordered datagrams fill it meanwhile, "
              "and many subscribers missing the same datagram spread their NAKs (the publisher repairs once)")
          .integer("nak_retry_us", &UdpConfig::nak_retry_us, 10, 10'000'000,
                   "an unrepaired gap is NAKed again after this, doubling per attempt")
          .integer("nak_retry_max_us", &UdpConfig::nak_retry_max_us, 10, 60'000'000,
                   "longest interval between two NAKs of one gap")
          .integer("nak_give_up_ms", &UdpConfig::nak_give_up_ms, 1, 3'600'000,
                   "a gap still unrepaired after this (while the publisher is alive) is reported lost")
          .integer("retransmit_linger_us", &UdpConfig::retransmit_linger_us, 0, 10'000'000,
                   "after repairing a range the publisher ignores further NAKs for it this long (they were sent before "
                   "the repair arrived)")
          .integer("heartbeat_interval_us", &UdpConfig::heartbeat_interval_us, 100, 10'000'000,
                   "an idle publisher sends a heartbeat (next sequence, oldest repairable) this often; one also "
                   "follows 1 ms after the last data")
          .integer("status_interval_ms", &UdpConfig::status_interval_ms, 1, 60'000,
                   "subscribers send a status message (position) to each publisher this often; publishers count "
                   "subscribers by them")
          .integer("session_timeout_ms", &UdpConfig::session_timeout_ms, 10, 3'600'000,
                   "a publisher silent this long is reported dead (end of stream); a subscriber silent this long is "
                   "forgotten by the publisher (offer() returns kNotConnected with none left)")
          .integer("linger_ms", &UdpConfig::linger_ms, 0, 600'000,
                   "Publisher::close() keeps repairing for up to this long until every known subscriber confirmed the "
                   "end of stream (0 = close at once)")
          .integer(
              "coalesce_us", &UdpConfig::coalesce_us, 0, 1'000'000,
              "0: every post sends at once (lowest latency); > 0: a partly filled datagram waits up to this long for "
              "more frames (fewer, fuller datagrams; inline publishers must keep calling offer() or service())")
          .integer("nak_max_range", &UdpConfig::nak_max_range, 1, 1 << 24,
                   "most sequences one NAK range may ask a publisher for (a larger range is cut; the subscriber asks "
                   "for the rest again)")
          .size("repair_rate", &UdpConfig::repair_rate, 0, 1ull << 40,
                "repair bytes per second a publisher sends on behalf of one subscriber (token bucket; 0 = unlimited): "
                "bounds what forged NAKs can make it send. Keep it above the stream's rate, or a subscriber that fell "
                "behind cannot catch up while the stream runs")
          .size("repair_burst", &UdpConfig::repair_burst, 1024, 1ull << 36,
                "repair bytes a publisher sends for one subscriber at once (the bucket of udp.repair_rate; the bucket "
                "of udp.repair_rate_total holds 4x this)")
          .size("repair_rate_total", &UdpConfig::repair_rate_total, 0, 1ull << 40,
                "repair bytes per second a publisher sends in all, whoever asks (token bucket; 0 = unlimited)")
          .number("fault_loss", &UdpConfig::fault_loss, 0, 1,
                  "testing: probability that a received datagram is dropped before the protocol sees it", kProbability)
          .number("fault_duplicate", &UdpConfig::fault_duplicate, 0, 1,
                  "testing: probability that a received datagram is delivered twice", kProbability)
          .number("fault_reorder", &UdpConfig::fault_reorder, 0, 1,
                  "testing: probability that a received datagram is held back behind 1..8 later ones", kProbability)
          .number("fault_tx_loss", &UdpConfig::fault_tx_loss, 0, 1,
                  "testing: probability that a datagram is not sent (loss every subscriber sees)", kProbability)
          .integer("fault_seed", &UdpConfig::fault_seed, 0, INT64_MAX,
                   "testing: seed of the fault injector (same seed, same faults)");
  return t;
}

// What a udp transport needs of its keys together (checked only when it is the transport).
core::ConfigIssue validate(const core::Config& c) {
  if (c.transport != core::TransportKind::kUdp) return {};
  const UdpConfig& u = config(c);
  const std::uint32_t datagram = u.mtu - 28;
  if (u.reorder_window < 2 * (datagram / kSmallestFrame)) {
    return {
        "udp.reorder_window",
        absl::StrFormat(
            "%u cannot hold two datagrams of %u bytes (up to %u frames each); raise it to at least %u or lower udp.mtu",
            u.reorder_window, datagram, datagram / kSmallestFrame, 2 * (datagram / kSmallestFrame))};
  }
  if (u.retransmit_buffer < 4ull * datagram) {
    return {"udp.retransmit_buffer",
            absl::StrFormat("%u bytes hold fewer than 4 datagrams of %u bytes (udp.mtu %u); raise it",
                            u.retransmit_buffer, datagram, u.mtu)};
  }
  if (u.repair_burst < datagram) {
    return {"udp.repair_burst",
            absl::StrFormat(
                "%u bytes are less than one datagram of %u bytes (udp.mtu %u): no repair could ever be sent; raise it",
                u.repair_burst, datagram, u.mtu)};
  }
  if (u.nak_retry_us > u.nak_retry_max_us) {
    return {"udp.nak_retry_us",
            absl::StrFormat("%u is above udp.nak_retry_max_us (%u)", u.nak_retry_us, u.nak_retry_max_us)};
  }
  if (u.fault_loss + u.fault_duplicate + u.fault_reorder > 1.0) {
    return {"udp.fault_loss", "udp.fault_loss + fault_duplicate + fault_reorder must not exceed 1"};
  }
  return {};
}

}  // namespace

void register_config(core::ConfigRegistry& r) { r.add(table(), validate); }

}  // namespace pollux::transport::udp
