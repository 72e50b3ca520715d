#include "transport/udp/udp_config.h"

#include "absl/strings/str_format.h"
#include "core/config_values.h"
#include "transport/reliability/config_keys.h"

namespace pollux::transport::udp {

namespace {

constexpr pollux::ConfigChoice<UdpDatapath> kDatapathNames[] = {{"socket", UdpDatapath::kSocket},
                                                                {"xdp", UdpDatapath::kXdp}};
constexpr pollux::ConfigChoice<UdpXdpMode> kXdpModeNames[] = {{"auto", UdpXdpMode::kAuto},
                                                              {"zerocopy", UdpXdpMode::kZeroCopy},
                                                              {"copy", UdpXdpMode::kCopy},
                                                              {"generic", UdpXdpMode::kGeneric}};

// Smallest frame on the wire (a bare 32-byte header): bounds the frames per datagram.
constexpr std::uint32_t kSmallestFrame = 32;

const ConfigTable<UdpConfig>& table() {
  static const ConfigTable<UdpConfig> table = [] {
    ConfigTable<UdpConfig> t("udp");
    t.text("address", &UdpConfig::address, "a string",
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
        .choice("datapath", &UdpConfig::datapath, kDatapathNames,
                "how datagrams enter and leave the host: \"socket\" (the kernel's UDP sockets) or \"xdp\" (an "
                "AF_XDP socket per interface fed by Pollux's XDP program: needs root or CAP_NET_ADMIN, CAP_BPF and "
                "CAP_NET_RAW, a named udp.interface, and one Pollux process per interface; docs/XDP.md)")
        .choice("xdp_mode", &UdpConfig::xdp_mode, kXdpModeNames,
                "AF_XDP mode: \"auto\" (zero-copy where the driver has it, else copy; generic (skb) attach when "
                "the driver has no native XDP), or force \"zerocopy\", \"copy\" or \"generic\"")
        .integer_list("xdp_queues", &UdpConfig::xdp_queues, "a list of RX queue numbers", 0, 63,
                      "RX queues AF_XDP sockets bind (one socket per queue, one UMEM); [] = every RX queue of the "
                      "interface. To leave the other queues to other programs, steer the streams' traffic with "
                      "ethtool (ethtool -N IF flow-type udp4 dst-ip GROUP dst-port PORT action Q) and name Q here")
        .integer("xdp_frames", &UdpConfig::xdp_frames, 64, 1 << 20,
                 "UMEM frames (4 KiB each, power of two) of an AF_XDP socket: half receive, half transmit; the "
                 "UMEM is locked memory (RLIMIT_MEMLOCK, ulimit -l, unless CAP_IPC_LOCK)",
                 core::check_pow2)
        .boolean("xdp_busy_poll", &UdpConfig::xdp_busy_poll,
                 "SO_PREFER_BUSY_POLL on the AF_XDP socket (with SO_BUSY_POLL = udp.busy_poll_us or 50, budget "
                 "udp.rx_batch): the driver's NAPI runs in the poller's syscalls instead of interrupts, where "
                 "the driver supports it")
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
              core::check_pow2);
    reliability::add_gap_keys(t, "", "",
                              "a subscriber NAKs a new gap after a random delay in [0, this]: reordered datagrams fill "
                              "it meanwhile, and many subscribers missing the same datagram spread their NAKs (the "
                              "publisher repairs once)");
    t.integer("retransmit_linger_us", &UdpConfig::retransmit_linger_us, 0, 10'000'000,
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
            "more frames (fewer, fuller datagrams; inline publishers must keep calling offer() or service())");
    reliability::add_repair_keys(t, "", "the stream's rate", 1024, "");
    reliability::add_fault_keys(t, "testing",
                                "probability that a received datagram is dropped before the protocol sees it");
    t.number("fault_tx_loss", &UdpConfig::fault_tx_loss, 0, 1,
             "testing: probability that a datagram is not sent (loss every subscriber sees)", "a probability 0.0..1.0")
        .integer("fault_seed", &UdpConfig::fault_seed, 0, INT64_MAX,
                 "testing: seed of the fault injector (same seed, same faults)");
    return t;
  }();
  return table;
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
  if (u.datapath == UdpDatapath::kXdp) {
#if !POLLUX_HAVE_XDP
    return {"udp.datapath",
            "\"xdp\" needs a libpollux built with AF_XDP (libxdp-dev, libbpf-dev and clang at build time; "
            "POLLUX_WITH_XDP): this one was built without it"};
#endif
    for (std::size_t i = 0; i < u.xdp_queues.size(); ++i) {
      for (std::size_t j = 0; j < i; ++j) {
        if (u.xdp_queues[i] == u.xdp_queues[j]) {
          return {"udp.xdp_queues", absl::StrFormat("queue %u is listed twice", u.xdp_queues[i])};
        }
      }
    }
    if (u.mtu + 14 > 4096) {
      return {"udp.mtu", absl::StrFormat("%u: a frame of mtu + 14 bytes does not fit an AF_XDP frame of 4096 bytes "
                                         "(no fragmentation): lower udp.mtu to 4082 or use udp.datapath = \"socket\"",
                                         u.mtu)};
    }
  }
  return reliability::check_keys(u, "udp");
}

}  // namespace

void register_config(core::ConfigRegistry& r) { r.add(table(), validate); }

}  // namespace pollux::transport::udp
