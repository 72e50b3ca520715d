// One frozen configuration struct, built from TOML by a table of (key, default, help, type)
// entries (core/config.cc). Every key has a documented default; unknown keys are errors; an
// error names the file, line and key:
//   feed.toml:12: runtime.threading: expected dedicated|shared|inline, got "dedicted"
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/buffer_pool.h"
#include "core/controller.h"
#include "core/idle.h"
#include "core/ring.h"

namespace pollux::core {

enum class ThreadingMode { kDedicated, kShared, kInline };
enum class TransportKind { kShm, kUdp, kRdma };
enum class FlowControl { kLossy, kBackpressure };

std::string_view threading_name(ThreadingMode m);
std::string_view transport_name(TransportKind k);
std::string_view flow_control_name(FlowControl f);

struct StreamConfig {
  std::string topic;
  std::uint32_t id = 0;
  bool trace = false;             // carry stage timestamps
  std::uint32_t trace_every = 1;  // trace one message in N
  std::string udp_address;        // udp: this stream's group/address ("" = udp.address)
  std::uint32_t udp_port = 0;     // udp: this stream's port (0 = udp.port)
  int kernel_timestamps = -1;     // udp: SO_TIMESTAMPING on this stream (1/0), -1 = udp.kernel_timestamps
  bool publisher_timestamp =
      true;  // frames carry the publisher's clock at offer (Message::publisher_ns); false: 0, no clock read per offer
  int line = 0;  // where it was defined (for later diagnostics)
};

struct RuntimeConfig {
  ThreadingMode threading = ThreadingMode::kDedicated;
  std::uint32_t pollers = 1;
  std::vector<int> poller_cores;  // empty: chosen automatically (NUMA node of `device`)
  IdleKind idle = IdleKind::kAdaptive;
  std::uint32_t sleep_timer_ms = 50;  // a sleeping poller runs its timers at least this often (0: only when woken)
  ControllerOptions adaptive;         // runtime.adaptive.*: the controller's knobs (core/controller.h)
  bool poll_yield = true;             // adaptive/interrupt: sched_yield (true) or cpu_relax on an empty polling cycle
  std::string name = "pollux";        // instance name: prefixes shm files
  std::string shm_dir = "/dev/shm";
  bool counters = true;  // publish counters in <shm_dir>/pollux-<name>-<pid>.counters
  std::string device;    // network/RDMA device whose NUMA node hosts pollers and memory
};

struct PoolConfig {
  std::uint32_t slot_size = 2048;
  std::uint32_t slots = 8192;
  HugePages hugepages = HugePages::kAuto;
  int numa_node = -1;  // -1: the device's node if runtime.device is set, else unbound
};

struct RingsConfig {
  std::uint32_t capacity = 1024;    // descriptors per application<->poller ring (power of two)
  std::uint32_t burst = 32;         // max descriptors a poller moves per ring per duty cycle
  RingKind kind = RingKind::kSpsc;  // spsc (ours) or boost (boost::lockfree::spsc_queue)
};

struct ShmConfig {
  std::uint64_t log_size = 16u << 20;  // bytes per stream log (power of two, >= 64 KiB)
  FlowControl flow_control = FlowControl::kLossy;
  std::uint32_t max_subscribers = 32;
  std::uint32_t liveness_timeout_ms = 2000;  // publisher considered dead after this silence
  std::string group;                         // "" : segments 0600, same uid only; else 0660 with this group
};

enum class RdmaMode { kRc, kUdMulticast };
enum class RdmaSrq { kAuto, kOn, kOff };
enum class RdmaMlx5 { kAuto, kOff };
std::string_view rdma_mode_name(RdmaMode m);

// [rdma]: the verbs transport (transport/rdma/, docs/RDMA.md).
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

// [udp]: the UDP unicast/multicast transport with NAK-based recovery (transport/udp/,
// docs/PROTOCOL.md). Durations are in the unit their name says.
struct UdpConfig {
  std::string address = "239.255.0.1";  // multicast group (224.0.0.0/4) or unicast IPv4 address
  std::uint32_t port = 40456;
  std::string interface = "lo";                  // name or IPv4 address; "" = the kernel's choice
  std::uint32_t ttl = 1;                         // multicast TTL (1: never leaves the subnet)
  bool loopback = true;                          // IP_MULTICAST_LOOP: subscribers on this host receive
  std::uint32_t mtu = 1500;                      // IP MTU of the path: datagrams carry up to mtu - 28 bytes
  std::uint32_t tx_batch = 32;                   // datagrams per sendmmsg
  std::uint32_t rx_batch = 32;                   // datagrams per recvmmsg (adaptive below this)
  std::uint32_t rx_buffers = 4096;               // datagram buffers per subscriber endpoint
  std::uint32_t busy_poll_us = 0;                // SO_BUSY_POLL on subscriber sockets (0 = off)
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

struct Config {
  std::string source = "<defaults>";  // file path or "<string>"
  RuntimeConfig runtime;
  PoolConfig pool;
  RingsConfig rings;
  TransportKind transport = TransportKind::kShm;
  ShmConfig shm;
  UdpConfig udp;
  RdmaConfig rdma;
  std::vector<StreamConfig> streams;

  // Stream id for a topic: the configured one, else a stable id derived from the topic name
  // (FNV-1a, high bit set so it never collides with configured ids, which must be < 2^31).
  std::uint32_t stream_id(std::string_view topic) const;
  const StreamConfig* find_stream(std::uint32_t id) const;

  // The effective configuration as TOML, every key with its help text.
  std::string to_toml() const;
};

// udp: whether the stream takes the kernel's software timestamps ([[streams]] kernel_timestamps,
// else udp.kernel_timestamps). `s` may be null (an unconfigured topic).
inline bool udp_kernel_timestamps(const Config& c, const StreamConfig* s) {
  return s != nullptr && s->kernel_timestamps >= 0 ? s->kernel_timestamps != 0 : c.udp.kernel_timestamps;
}

// `source_name` is used in error messages (the file name, or "<string>").
// Why `topic` cannot name a stream ("" when it can): a topic is 1 to kMaxTopicBytes bytes
// without control characters (it appears in counters, logs and pollux-stat's output).
inline constexpr std::size_t kMaxTopicBytes = 255;
std::string topic_error(std::string_view topic);

absl::StatusOr<Config> parse_config(std::string_view toml_text, std::string_view source_name);
// Reads `path` with read_config_file() and parses it.
absl::StatusOr<Config> load_config_file(const std::string& path);

// The largest configuration file read_config_file() takes: far above any real one, so a
// bigger file is the wrong file (a capture, a log) rather than a configuration.
inline constexpr std::size_t kMaxConfigFileBytes = std::size_t{16} << 20;

// The whole text of the configuration file `path`, for every reader of a TOML file (the
// library, pollux-feed, the tools). Only a regular file of at most kMaxConfigFileBytes is
// read: a FIFO, a directory, a device or a socket is refused before it is opened for
// reading, so one nobody writes to cannot block the caller, /dev/zero cannot fill memory
// and a directory is not taken for an empty file. Errors start with the path:
//   conf/x.toml: not a regular file: it is a FIFO (a configuration is read from a regular file)
absl::StatusOr<std::string> read_config_file(const std::string& path);

// A size given as text: bytes ("2000") or with a binary suffix ("64KiB", "16MiB", "1GiB"),
// within [lo, hi]. "" on success, else the message after "key: " (as every config error).
std::string parse_size(std::string_view text, std::uint64_t lo, std::uint64_t hi, std::uint64_t* out);
// A size for people: the largest binary unit that divides it exactly ("16MiB", "64KiB"), else
// bytes ("2000 bytes").
std::string format_size(std::uint64_t v);

// Levenshtein distance, and " (did you mean X?)" for the closest of `known` within 3 edits
// (empty when none is): for error messages about unknown keys.
std::size_t edit_distance(std::string_view a, std::string_view b);
std::string did_you_mean(std::string_view key, const std::vector<std::string>& known);

}  // namespace pollux::core
