// [rdma]: the verbs transport's configuration (transport/rdma/, docs/RDMA.md): its struct and its
// TOML table, added to core's registry (core/config_registry.h) by the transport registry
// (transport/factory.cc). Built with or without the verbs libraries: a configuration's [rdma]
// table is checked either way.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/config.h"

namespace pollux::transport::rdma {

enum class RdmaMode { kRc, kUdMulticast };
enum class RdmaSrq { kAuto, kOn, kOff };
enum class RdmaMlx5 { kAuto, kOff };
std::string_view rdma_mode_name(RdmaMode m);

struct RdmaConfig {
  std::string device = "auto";  // RDMA device name, or "auto": first with an active port
  std::uint32_t port = 1;       // device port
  int gid_index = -1;           // -1: the port's RoCEv2 IPv4-mapped GID
  RdmaMode mode = RdmaMode::kRc;
  std::uint32_t listen_port = 7471;              // rc: subscribers accept publishers here (rdma_cm, TCP port space)
  std::vector<std::string> peers;                // rc: "ip:port" of the subscribers a publisher connects to
  std::string multicast_group = "239.255.77.1";  // ud_mcast: IPv4 group shared by every stream
  std::uint32_t inline_threshold = 256;          // send frames up to this many bytes inline (capped by the QP)
  std::uint32_t send_queue_depth = 256;          // work requests per QP send queue
  std::uint32_t recv_queue_depth = 2048;         // receive buffers per poller (SRQ) or per QP (no SRQ)
  std::uint32_t cq_depth = 8192;                 // completions per poller CQ
  std::uint32_t signal_every = 16;               // one signalled send in N
  std::uint32_t post_batch = 64;                 // most send WRs chained per ibv_post_send (per doorbell)
  std::uint32_t recv_batch = 16;                 // receive buffers re-posted per post call
  RdmaSrq srq = RdmaSrq::kAuto;
  RdmaMlx5 mlx5dv = RdmaMlx5::kAuto;
  std::uint32_t cq_moderation_count = 0;  // 0/0: no interrupt moderation
  std::uint32_t cq_moderation_usec = 0;
  std::uint32_t heartbeat_ms = 100;          // ud_mcast: publisher heartbeat period (carries the next sequence)
  std::uint32_t liveness_timeout_ms = 2000;  // ud_mcast: publisher silent this long = died
  std::uint32_t reconnect_ms = 250;          // rc: a publisher retries an unreachable/lost subscriber this often
  std::uint32_t connect_timeout_ms = 2000;   // rc: address/route resolution timeout
  std::uint32_t rnr_timeout_us =
      160;  // rc: a subscriber without a posted receive buffer asks the publisher to retry after this
  // ud_mcast loss repair: the NAK protocol of transport/reliability/ (docs/RDMA.md section 4,
  // docs/PROTOCOL.md). Same meaning as the udp.* keys of the same name.
  std::uint64_t retransmit_buffer =
      1u << 20;                          // bytes of sent frames a publisher keeps, carved from the pool (power of two)
  std::uint32_t reorder_window = 16384;  // sequences a subscriber holds ahead of a gap (power of two)
  std::uint32_t max_sessions = 4;        // publisher sessions a subscriber follows at once per stream
  std::uint32_t nak_delay_us = 100;      // first NAK of a gap after a random delay in [0, this]
  std::uint32_t nak_retry_us = 2000;     // NAK retry interval, doubling per attempt ...
  std::uint32_t nak_retry_max_us = 50000;        // ... up to this
  std::uint32_t nak_give_up_ms = 5000;           // a gap unrepaired this long is reported lost
  std::uint32_t status_interval_ms = 100;        // subscriber status messages to each publisher
  std::uint32_t nak_max_range = 16384;           // sequences one NAK range may ask for
  std::uint64_t repair_rate = 64u << 20;         // repair bytes/s per subscriber (0 = unlimited)
  std::uint64_t repair_burst = 1u << 20;         // ... at most this many at once (all subscribers: 4x)
  std::uint64_t repair_rate_total = 256u << 20;  // repair bytes/s in all (0 = unlimited)
  std::uint32_t linger_ms =
      500;  // publisher close waits (rc) / repairs (ud_mcast) until subscribers have everything, at most this long
  double fault_loss = 0;       // testing: received datagrams dropped ...
  double fault_duplicate = 0;  // ... duplicated ...
  double fault_reorder = 0;    // ... reordered (probabilities 0..1), at the subscriber
  std::uint64_t fault_seed = 1;
};

inline const RdmaConfig& config(const core::Config& c) { return c.table<RdmaConfig>(); }
inline RdmaConfig& config(core::Config& c) { return c.table<RdmaConfig>(); }

// Adds the [rdma] table to `r`.
void register_config(core::ConfigRegistry& r);

}  // namespace pollux::transport::rdma
