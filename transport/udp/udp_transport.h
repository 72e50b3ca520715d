// UDP transport: unicast or multicast datagrams carrying runs of frames, made reliable by the
// NAK protocol of transport/reliability/ (docs/PROTOCOL.md).
//
// Data plane per burst: post_st() copies frames into the publisher's send log (its retransmit
// buffer) and sends them as datagrams packed up to the MTU with one sendmmsg; poll_st() takes
// up to rx_batch datagrams with one recvmmsg into buffers the frames are then delivered from
// without a copy. NAKs, status messages and heartbeats ride on the same sockets and are
// handled by housekeeping_st() (pollers call it every ms) and, rate-limited, by the data calls
// themselves. try_arm_st()/disarm_st(): each endpoint owns an epoll set (its socket + a
// timerfd for its next protocol deadline) exposed as notify_fd().
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <memory>
#include <vector>

#include "transport/reliability/fault_injector.h"
#include "transport/reliability/receiver.h"
#include "transport/reliability/region.h"
#include "transport/reliability/sender.h"
#include "transport/transport.h"
#include "transport/udp/udp_socket.h"

struct mmsghdr;

namespace pollux::transport::udp {

// Epoll set of one endpoint: its socket (level-triggered: a datagram that arrived before the
// caller went to sleep still wakes it, so arming needs no "is anything pending" syscall) and a
// timerfd for the next protocol deadline (edge-triggered: an expiry wakes once, nothing to read).
// Steady state costs no syscall per arm: the timer is only re-armed when the deadline moves
// earlier or the armed one has passed; a timer that fires early only causes an empty poll.
class Waiter {
 public:
  ~Waiter();
  absl::Status open(int socket_fd);
  // Arms the timer for `deadline_ns` (core::Clock time; INT64_MAX: none needed).
  void arm(std::int64_t deadline_ns, std::int64_t now_ns) noexcept;
  int fd() const noexcept { return epfd_; }

 private:
  int epfd_ = -1;
  int timerfd_ = -1;
  std::int64_t armed_ns_ = INT64_MAX;  // when the timer fires (INT64_MAX: not armed)
};

class UdpTxEndpoint final : public TxEndpoint, private reliability::DatagramSink {
 public:
  static absl::StatusOr<std::unique_ptr<UdpTxEndpoint>> open(const TransportEnv& env, const EndpointSpec& spec);
  ~UdpTxEndpoint() override;

  std::uint32_t post_st(std::span<const TxDesc> frames) noexcept override;
  std::uint32_t reap_st(std::span<std::uint32_t> freed) noexcept override;
  int housekeeping_st(std::int64_t now_ns) noexcept override;
  bool try_arm_st() noexcept override;
  void disarm_st() noexcept override {}  // see Waiter: nothing to undo
  int notify_fd() const noexcept override { return waiter_.fd(); }
  // Any thread (Publisher::is_connected() / offer() on the application thread in queued
  // modes): a relaxed flag the owner thread refreshes; nothing is published through it.
  bool connected() const noexcept override { return connected_.load(std::memory_order_relaxed); }
  std::uint32_t max_frame() const noexcept override { return max_frame_; }
  void close_st() noexcept override;
  std::string describe() const override;

  const reliability::ReliableSender& sender() const noexcept { return sender_; }
  const SocketInfo& socket_info() const noexcept { return sock_; }

 private:
  UdpTxEndpoint() = default;
  std::uint32_t send_datagrams(std::span<const reliability::DatagramSink::Datagram> d) noexcept override;
  int receive_control(std::int64_t now_ns) noexcept;
  void publish_counters() noexcept;

  Channel ch_;
  SocketInfo sock_;
  Waiter waiter_;
  reliability::ReliableSender sender_;
  reliability::FaultInjector tx_faults_;
  double tx_loss_ = 0;
  core::BufferPool* pool_ = nullptr;
  std::uint32_t max_frame_ = 0;
  std::uint32_t tx_batch_ = 32;
  std::int64_t linger_ns_ = 0;
  std::int64_t next_service_ns_ = 0;
  std::uint32_t reaps_ = 0;
  bool closed_ = false;
  std::atomic<bool> connected_{false};  // sender_.connected(), refreshed by the owner thread
  // Slots copied into the log and not yet handed back by reap_st().
  std::unique_ptr<std::uint32_t[]> done_;
  std::uint32_t done_n_ = 0, done_cap_ = 0;
  std::unique_ptr<::mmsghdr[]> msgs_;
  std::unique_ptr<iovec[]> iov_;
  std::uint64_t send_errors_ = 0;
  int last_errno_ = 0;
  struct Counters {
    core::Counter datagrams, bytes, heartbeats, naks, nak_ranges, naks_suppressed, naks_unavailable,
        retransmit_frames, retransmit_datagrams, receivers, send_blocked, send_errors, control_malformed,
        control_bytes, retransmit_bytes, naks_unannounced, nak_ranges_capped, repairs_rate_limited,
        repair_bytes_refused, fault_dropped;
  } c_;
};

class UdpRxEndpoint final : public RxEndpoint, private reliability::ControlSink {
 public:
  static absl::StatusOr<std::unique_ptr<UdpRxEndpoint>> open(const TransportEnv& env, const EndpointSpec& spec);
  ~UdpRxEndpoint() override;

  std::uint32_t poll_st(std::span<RxDesc> out) noexcept override;
  void release_st(std::span<const RxDesc> done, bool validate) noexcept override;
  int housekeeping_st(std::int64_t now_ns) noexcept override;
  bool try_arm_st() noexcept override;
  void disarm_st() noexcept override {}  // see Waiter: nothing to undo
  int notify_fd() const noexcept override { return waiter_.fd(); }
  // Any thread (Subscriber::is_connected()): see UdpTxEndpoint::connected().
  bool connected() const noexcept override { return connected_.load(std::memory_order_relaxed); }
  void close_st() noexcept override;
  std::string describe() const override;

  const reliability::ReliableReceiver& receiver() const noexcept { return receiver_; }
  const reliability::FaultInjector& faults() const noexcept { return faults_; }
  std::uint32_t free_buffers() const noexcept { return free_n_; }
  const SocketInfo& socket_info() const noexcept { return sock_; }

 private:
  UdpRxEndpoint() = default;
  void send_control(const reliability::PeerAddress& to, const std::byte* msg, std::uint32_t len) noexcept override;
  std::uint32_t receive(std::int64_t now_ns) noexcept;
  void process(std::uint32_t b, int times, std::int64_t now_ns) noexcept;
  void evict(std::int64_t now_ns) noexcept;
  void free_buffer(std::uint32_t b) noexcept { free_[free_n_++] = b; }
  std::byte* buffer(std::uint32_t b) const noexcept { return bufs_.get() + static_cast<std::size_t>(b) * buf_size_; }
  void publish_counters() noexcept;

  Channel ch_;
  SocketInfo sock_;
  Waiter waiter_;
  reliability::ReliableReceiver receiver_;
  reliability::FaultInjector faults_;
  reliability::Region<std::byte> bufs_;
  std::uint32_t buf_size_ = 0, nbufs_ = 0;
  std::unique_ptr<std::uint32_t[]> free_;
  std::uint32_t free_n_ = 0;
  std::unique_ptr<std::uint32_t[]> refs_;     // frames of the buffer held or delivered-unreleased
  std::unique_ptr<std::uint32_t[]> len_;      // datagram length
  std::unique_ptr<sockaddr_in[]> src_;        // datagram source
  std::unique_ptr<std::uint32_t[]> batch_buf_;  // buffers handed to the current recvmmsg
  std::unique_ptr<::mmsghdr[]> msgs_;
  std::unique_ptr<iovec[]> iov_;
  std::uint32_t rx_batch_ = 32, cur_batch_ = 1, frames_per_dgram_ = 1;
  std::int64_t next_service_ns_ = 0;
  std::int64_t last_rx_ns_ = 0;
  std::uint64_t truncated_ = 0, evictions_ = 0, recv_errors_ = 0, control_errors_ = 0;
  bool closed_ = false;
  std::atomic<bool> connected_{false};  // receiver_.connected(), refreshed by the owner thread
  struct Counters {
    core::Counter datagrams, frames, heartbeats, duplicates, beyond_window, fills, gaps, nak_ranges, naks, lost,
        loss_reports, sessions, sessions_ended, status_sent, malformed, other_stream, wrong_source, claims_refuted,
        ends_refuted, sessions_refused, evictions, fault_dropped,
        fault_duplicated, fault_reordered;
  } c_;
};

class UdpTransport final : public Transport {
 public:
  explicit UdpTransport(const TransportEnv& env) : env_(env) {}
  std::string_view name() const override { return "udp"; }
  // Frames are copied into the send log, so the pool needs no registration.
  absl::Status register_memory(core::BufferPool&) override { return absl::OkStatus(); }
  absl::StatusOr<std::unique_ptr<TxEndpoint>> open_tx(const EndpointSpec& spec) override;
  absl::StatusOr<std::unique_ptr<RxEndpoint>> open_rx(const EndpointSpec& spec) override;
  void close() override {}
  // A socket (and session) per publisher: publishers on different threads never share one.
  bool shared_tx_endpoint() const noexcept override { return false; }

  absl::StatusOr<core::ProgressSource*> poller_source(int poller) override {
    while (sources_.size() <= static_cast<std::size_t>(poller)) {
      sources_.push_back(std::make_unique<SelfProgressingSource>("udp"));
    }
    return sources_[static_cast<std::size_t>(poller)].get();
  }

 private:
  std::vector<std::unique_ptr<core::ProgressSource>> sources_;
  TransportEnv env_;
};

}  // namespace pollux::transport::udp
