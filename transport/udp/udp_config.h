// [udp]: the UDP unicast/multicast transport's configuration (transport/udp/, docs/PROTOCOL.md):
// its struct and its TOML table, added to core's registry (core/config_registry.h) by the
// transport registry (transport/factory.cc). Durations are in the unit their name says.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"

namespace pollux::transport::udp {

// How datagrams enter and leave the host (docs/XDP.md): the kernel's UDP sockets, or an AF_XDP
// socket fed by Pollux's XDP program.
enum class UdpDatapath : std::uint8_t { kSocket, kXdp };
// The AF_XDP attach/bind mode (xdp::XskMode): auto = zero-copy, then copy, then generic.
enum class UdpXdpMode : std::uint8_t { kAuto, kZeroCopy, kCopy, kGeneric };

struct UdpConfig {
  std::string address = "239.255.0.1";  // multicast group (224.0.0.0/4) or unicast IPv4 address
  std::uint32_t port = 40456;
  std::string interface = "lo";     // name or IPv4 address; "" = the kernel's choice
  std::uint32_t ttl = 1;            // multicast TTL (1: never leaves the subnet)
  bool loopback = true;             // IP_MULTICAST_LOOP: subscribers on this host receive
  std::uint32_t mtu = 1500;         // IP MTU of the path: datagrams carry up to mtu - 28 bytes
  std::uint32_t tx_batch = 32;      // datagrams per sendmmsg
  std::uint32_t rx_batch = 32;      // datagrams per recvmmsg (adaptive below this)
  std::uint32_t rx_buffers = 4096;  // datagram buffers per subscriber endpoint
  std::uint32_t busy_poll_us = 0;   // SO_BUSY_POLL on subscriber sockets (0 = off)
  UdpDatapath datapath = UdpDatapath::kSocket;
  UdpXdpMode xdp_mode = UdpXdpMode::kAuto;
  std::vector<std::uint32_t> xdp_queues;         // RX queues to bind (empty: all of the interface's)
  std::uint32_t xdp_frames = 4096;               // UMEM frames of 4 KiB per AF_XDP socket (half RX, half TX)
  bool xdp_busy_poll = false;                    // SO_PREFER_BUSY_POLL on the AF_XDP socket (budget udp.rx_batch)
  bool kernel_timestamps = false;                // SO_TIMESTAMPING RX software stamps on subscriber sockets (tracing)
  std::uint64_t socket_rcvbuf = 4u << 20;        // SO_RCVBUF
  std::uint64_t socket_sndbuf = 4u << 20;        // SO_SNDBUF
  std::uint64_t retransmit_buffer = 16u << 20;   // bytes of sent frames kept for repairs (power of two)
  std::uint32_t reorder_window = 65536;          // sequences a subscriber holds ahead of a gap (power of two)
  std::uint32_t max_sessions = 4;                // publisher sessions a subscriber follows at once
  std::uint32_t nak_delay_us = 100;              // first NAK after a random delay in [0, this]
  std::uint32_t nak_retry_us = 2000;             // NAK retry interval, doubling per attempt ...
  std::uint32_t nak_retry_max_us = 50000;        // ... up to this
  std::uint32_t nak_give_up_ms = 5000;           // a gap unrepaired this long is reported lost
  std::uint32_t retransmit_linger_us = 1000;     // NAKs for data repaired this recently are ignored
  std::uint32_t heartbeat_interval_us = 50000;   // idle publisher heartbeat
  std::uint32_t status_interval_ms = 100;        // subscriber status messages
  std::uint32_t session_timeout_ms = 2000;       // silent publisher/subscriber considered gone
  std::uint32_t linger_ms = 500;                 // publisher close waits this long for subscribers to catch up
  std::uint32_t coalesce_us = 0;                 // hold a partly filled datagram this long for more frames
  std::uint32_t nak_max_range = 16384;           // sequences one NAK range may ask a publisher for
  std::uint64_t repair_rate = 64u << 20;         // repair bytes/s a publisher sends per subscriber (0 = unlimited)
  std::uint64_t repair_burst = 1u << 20;         // ... at most this many at once (all subscribers: 4x)
  std::uint64_t repair_rate_total = 256u << 20;  // repair bytes/s a publisher sends in all (0 = unlimited)
  double fault_loss = 0;                         // fault injection on received datagrams: drop ...
  double fault_duplicate = 0;                    // ... duplicate ...
  double fault_reorder = 0;                      // ... reorder (probabilities 0..1)
  double fault_tx_loss = 0;                      // drop sent datagrams
  std::uint64_t fault_seed = 1;
};

inline const UdpConfig& config(const core::Config& c) { return c.table<UdpConfig>(); }
inline UdpConfig& config(core::Config& c) { return c.table<UdpConfig>(); }

// Whether the stream takes the kernel's software timestamps ([[streams]] kernel_timestamps,
// else udp.kernel_timestamps). `s` may be null (an unconfigured topic).
inline bool kernel_timestamps(const core::Config& c, const core::StreamConfig* s) {
  return s != nullptr && s->kernel_timestamps >= 0 ? s->kernel_timestamps != 0 : config(c).kernel_timestamps;
}

// Adds the [udp] table to `r`.
void register_config(core::ConfigRegistry& r);

}  // namespace pollux::transport::udp
