// The UDP subscriber endpoint: the data plane of one stream's subscriber (udp_transport.h
// describes who drives it in poller and inline mode).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>

#include "core/clock.h"
#include "core/counter_set.h"
#include "transport/reliability/fault_injector.h"
#include "transport/reliability/protocol_counters.h"
#include "transport/reliability/receiver.h"
#include "transport/reliability/region.h"
#include "transport/transport.h"
#include "transport/udp/kernel_timestamps.h"
#include "transport/udp/udp_socket.h"
#include "transport/udp/waiter.h"
#include "transport/udp/xdp_port.h"

struct mmsghdr;

namespace pollux::transport::udp {

class UdpPollerSource;

// The UDP subscriber's own counters, beside the protocol's (reliability::ReceiverCounters).
// Counters::publish() names: `ep` (the endpoint).
#define POLLUX_UDP_RX_COUNTERS(X)                                                                              \
  X(recv_errors, "recv_errors", "socket reads that failed other than on an empty socket", ep.recv_errors_)     \
  X(xdp_socket_receives, "xdp_socket_receives",                                                                \
    "udp.datapath = xdp: datagrams read from the kernel socket, having arrived on an RX queue udp.xdp_queues " \
    "leaves out (steer them to a listed queue: ethtool -N)",                                                   \
    ep.xdp_socket_receives_)                                                                                   \
  X(control_errors, "control_send_errors", "NAKs and status messages the socket refused (sent again later)",   \
    ep.control_errors_)
#define POLLUX_UDP_RX_STAMP_COUNTERS(X)                                                                     \
  X(rx_stamps, "rx_timestamps", "traced datagrams read with the kernel's receive timestamp", ep.rx_stamps_) \
  X(rx_stamps_missing, "rx_timestamps_missing", "traced datagrams read without one", ep.rx_stamps_missing_)
POLLUX_COUNTER_SET(RxOwnCounters, POLLUX_UDP_RX_COUNTERS);
POLLUX_COUNTER_SET(RxStampCounters, POLLUX_UDP_RX_STAMP_COUNTERS);

class UdpRxEndpoint final : public RxEndpoint, private reliability::ControlSink {
 public:
  static absl::StatusOr<std::unique_ptr<UdpRxEndpoint>> open(const TransportEnv& env, const EndpointSpec& spec,
                                                             UdpPollerSource* source = nullptr);
  ~UdpRxEndpoint() override;

  std::uint32_t poll_st(std::span<RxDesc> out) noexcept override;
  void release_st(std::span<const RxDesc> done, bool validate) noexcept override;
  // Inline mode, the subscriber's direct path (Subscriber::poll on the application thread):
  // reads datagrams one at a time (recvfrom, as receive() does while traffic is sparse) and
  // hands the frames of each that simply continues its session - plain data, in order, nothing
  // held, missing or pending (ReliableReceiver::take_in_order) - to deliver(frame, length)
  // straight from the receive buffer, which is free again on return: no RxDesc, no window slot,
  // no release. Returns how many frames were delivered, up to max. *slow = true when the
  // general path (poll_st) must run: something may be deliverable there, the protocol timers
  // are due, reads are batched, a datagram needs on_datagram() (it was passed to it), or the
  // endpoint is not inline. Nothing is delivered twice or skipped: both paths share the
  // receiver's state.
  template <class F>
  std::uint32_t poll_direct(std::uint32_t max, F&& deliver, bool* slow) noexcept;
  // Poller mode: 0 (the source runs the protocol timers).
  int housekeeping_st(std::int64_t now_ns) noexcept override;
  // The duty call (inline, before the first poll): reads what arrived - the publisher's setup and
  // heartbeats, data kept for the first poll - and answers it (status), as poll_st() would.
  int duty_st(std::int64_t now_ns) noexcept override;
  // Inline mode only (poller mode: false / -1, the poller's source arms instead).
  bool try_arm_st() noexcept override;
  void disarm_st() noexcept override { waiter_.disarm(); }
  int notify_fd() const noexcept override { return waiter_.fd(); }
  // Any thread (Subscriber::is_connected()): see UdpTxEndpoint::connected().
  bool connected() const noexcept override { return connected_.load(std::memory_order_relaxed); }
  void close_st() noexcept override;
  std::string describe() const override;

  const reliability::ReliableReceiver& receiver() const noexcept { return receiver_; }
  const reliability::FaultInjector& faults() const noexcept { return faults_; }
  std::uint32_t free_buffers() const noexcept { return free_n_; }
  // Datagrams the next socket read asks for (the adaptive batch: 1 = recvfrom, more = recvmmsg).
  std::uint32_t read_batch() const noexcept { return cur_batch_; }
  const SocketInfo& socket_info() const noexcept { return sock_; }

 private:
  friend class UdpPollerSource;
  friend class XdpPort;
  UdpRxEndpoint() = default;
  // udp.datapath = "xdp": a datagram for this subscriber that the port took off its ring (payload
  // and source in network byte order); copied into a free buffer and handled as receive() handles
  // a datagram it read. Returns 1 when taken, 0 when there is no room (no free buffer, or half the
  // window deliverable and not yet polled): the port then leaves it in the ring.
  std::uint32_t xdp_datagram(const std::uint8_t* payload, std::uint32_t len, std::uint32_t src_addr,
                             std::uint16_t src_port, std::int64_t now_ns) noexcept;
  template <class F>
  static void deliver_taken(const std::byte* data, std::uint32_t k, F& deliver) noexcept;
  // poll_direct() on the AF_XDP port: frames delivered from the UMEM frame itself.
  template <class F>
  std::uint32_t poll_direct_xdp(std::uint32_t max, F&& deliver, bool* slow, std::int64_t now) noexcept;
  static int direct_poll(RxEndpoint* ep, FrameFn on_frame, void* ctx, const void* handlers, int limit) noexcept;
  void send_control(const reliability::PeerAddress& to, const std::byte* msg, std::uint32_t len) noexcept override;
  void attach() noexcept;
  // Reads the socket (one recvfrom/recvmmsg). none_ready: the caller's poll just drained every
  // deliverable frame (receiver_.ready() is false).
  std::uint32_t receive(std::int64_t now_ns, bool none_ready = false) noexcept;
  // Socket reads per poll_st() call while a gap holds back everything read (see poll_st()).
  static constexpr int kBlockedReads = 16;
  // The socket read itself (receive() without the AF_XDP port); report_drained: an empty socket
  // means every datagram sent before now was read (false when a port's ring may hold more).
  std::uint32_t receive_socket(std::int64_t now_ns, bool report_drained) noexcept;
  // One recvfrom into a free buffer (*b): kGot (length in len_[*b]), kDropped (truncated; the
  // buffer is free again) or kEmpty (nothing to read: the receiver is told it drained).
  enum class ReadOne : std::uint8_t { kEmpty, kDropped, kGot };
  ReadOne read_one(std::int64_t now_ns, std::uint32_t* b) noexcept;
  // A datagram read into b that takes the general path: the traced-frame stamp, then admit().
  void admit_read(std::uint32_t b, std::int64_t now_ns) noexcept;
  int service(std::int64_t now_ns) noexcept;
  // Frames queued in user space (deliverable, or delayed by the fault injector): the source
  // must not sleep on them.
  bool has_queued() const noexcept { return receiver_.ready() || faults_.delayed() > 0; }
  void process(std::uint32_t b, int times, std::int64_t now_ns) noexcept;
  // A datagram read into buffer b (length in len_[b]): through the fault injector, if on.
  void admit(std::uint32_t b, std::int64_t now_ns) noexcept;
  void evict(std::int64_t now_ns) noexcept;
  // The adaptive read batch after a read that asked for k datagrams and got `got`.
  void adapt_batch(std::uint32_t k, std::uint32_t got) noexcept;
  void free_buffer(std::uint32_t b) noexcept { free_[free_n_++] = b; }
  std::byte* buffer(std::uint32_t b) const noexcept { return bufs_.get() + static_cast<std::size_t>(b) * buf_size_; }
  void publish_counters() noexcept;

  Channel ch_;
  SocketInfo sock_;
  // udp.datapath = "xdp": the AF_XDP port data arrives through (the socket then only sends NAKs
  // and status messages, and holds the multicast group's membership).
  std::shared_ptr<XdpPort> xdp_;
  std::uint32_t xdp_taken_ = 0;  // datagrams xdp_datagram() took (receive()'s count)
  // The port binds some of the interface's RX queues: the socket is read every kXdpSocketReadNs.
  static constexpr std::int64_t kXdpSocketReadNs = 50'000;
  std::int64_t next_socket_read_ns_ = 0;
  std::uint64_t xdp_socket_receives_ = 0;
  UdpPollerSource* source_ = nullptr;  // poller mode; null inline
  bool attached_ = false;              // poller mode: in the source's epoll set
  Waiter waiter_;                      // inline mode
  reliability::ReliableReceiver receiver_;
  reliability::FaultInjector faults_;
  reliability::Region<std::byte> bufs_;
  std::uint32_t buf_size_ = 0, nbufs_ = 0;
  std::unique_ptr<std::uint32_t[]> free_;
  std::uint32_t free_n_ = 0;
  std::unique_ptr<std::uint32_t[]> refs_;       // frames of the buffer held or delivered-unreleased
  std::unique_ptr<std::uint32_t[]> len_;        // datagram length
  std::unique_ptr<sockaddr_in[]> src_;          // datagram source
  std::unique_ptr<std::uint32_t[]> batch_buf_;  // buffers handed to the current recvmmsg
  std::unique_ptr<::mmsghdr[]> msgs_;
  std::unique_ptr<iovec[]> iov_;
  // Traced frames' stamps, per buffer, set when the batch that brought the buffer held a traced
  // frame: rx_ns_ at recvmmsg return, krx_ns_ the kernel's (udp.kernel_timestamps; 0 = none).
  std::unique_ptr<std::int64_t[]> rx_ns_, krx_ns_;
  // udp.kernel_timestamps: a control buffer per recvmmsg slot for the SO_TIMESTAMPING cmsg.
  static constexpr std::uint32_t kRxControlBytes = 64;
  std::unique_ptr<std::byte[]> ctrl_;
  RealtimeToClock stamp_clock_;
  std::uint64_t rx_stamps_ = 0, rx_stamps_missing_ = 0;
  void stamp_traced(RxDesc* out, std::uint32_t n) noexcept;
  std::uint32_t rx_batch_ = 32, cur_batch_ = 1, frames_per_dgram_ = 1;
  std::uint32_t single_hits_ = 0;  // single reads in a row that found a datagram (see receive())
  std::uint32_t max_read_ = 1;     // datagrams per read at most (half a window; see open())
  bool traced_seen_ = false;       // a datagram with a traced frame was read (stamp_traced() has work)
  // poll_direct() may run: inline, no fault injector, no kernel timestamps (set by open()).
  bool direct_ok_ = false;
  std::int64_t next_service_ns_ = 0;
  std::int64_t last_rx_ns_ = 0;
  std::uint64_t truncated_ = 0, evictions_ = 0, recv_errors_ = 0, control_errors_ = 0;
  bool closed_ = false;
  std::atomic<bool> connected_{false};  // receiver_.connected(), refreshed by the owner thread
  // The protocol's counters are shared with RDMA UD multicast. allocate(): the kernel timestamp
  // counters only with `stamps` (udp.kernel_timestamps on the socket).
  struct Counters : reliability::EndpointCounters<reliability::ReceiverCounters, RxOwnCounters, RxStampCounters> {
    // No-op when allocate() was never called.
    void publish(const UdpRxEndpoint& ep) noexcept;
  } c_;
};

template <class F>
std::uint32_t UdpRxEndpoint::poll_direct(std::uint32_t max, F&& deliver, bool* slow) noexcept {
  // The conditions of receive()'s single-datagram read, and nothing for poll_st() to do first.
  if (__builtin_expect(!direct_ok_ || closed_ || !receiver_.quiet() || cur_batch_ != 1, 0)) {
    *slow = true;
    return 0;
  }
  const std::int64_t now = core::Clock::now_ns();  // once per call
  if (__builtin_expect(now >= next_service_ns_, 0)) {
    *slow = true;
    return 0;
  }
  if (xdp_ != nullptr) return poll_direct_xdp(max, deliver, slow, now);
  std::uint32_t n = 0;
  while (n < max) {
    if (__builtin_expect(free_n_ == 0 || cur_batch_ != 1, 0)) {
      *slow = true;  // buffers all held, or traffic no longer sparse: batched reads
      break;
    }
    std::uint32_t b;
    const ReadOne r = read_one(now, &b);
    if (r == ReadOne::kEmpty) break;
    if (__builtin_expect(r == ReadOne::kDropped, 0)) continue;
    reliability::PeerAddress from;
    std::memcpy(from.bytes, &src_[b], sizeof(sockaddr_in));
    from.length = sizeof(sockaddr_in);
    const std::byte* data = buffer(b);
    const std::uint32_t k = receiver_.take_in_order(data, len_[b], from, max - n, now);
    if (__builtin_expect(k == 0, 0)) {
      admit_read(b, now);  // a gap, a heartbeat, a new session, ...: the receiver's general path
      next_service_ns_ = std::min(next_service_ns_, receiver_.take_new_deadline());
      *slow = true;
      break;
    }
    deliver_taken(data, k, deliver);
    free_buffer(b);
    n += k;
  }
  return n;
}

// The k frames take_in_order() walked and checked at the start of a datagram (plain data,
// consecutive), each handed to deliver(frame, length) in place.
template <class F>
void UdpRxEndpoint::deliver_taken(const std::byte* data, std::uint32_t k, F& deliver) noexcept {
  std::uint32_t off = 0;
  for (std::uint32_t i = 0; i < k; ++i) {
    const auto* f = reinterpret_cast<const core::FrameHeader*>(data + off);
    deliver(f, f->frame_length);
    off += reliability::wire_size(f->frame_length);
  }
}

template <class F>
std::uint32_t UdpRxEndpoint::poll_direct_xdp(std::uint32_t max, F&& deliver, bool* slow, std::int64_t now) noexcept {
  std::uint32_t n = 0;
  XdpPort::DirectFrame d;
  while (n < max) {
    const XdpPort::Direct r = xdp_->direct_peek(this, now, &d);
    if (r != XdpPort::Direct::kFrame) {
      *slow |= r == XdpPort::Direct::kSlow;  // another subscriber's frame, ...: poll_st() hands it out
      break;
    }
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = d.src_addr;
    sa.sin_port = d.src_port;
    reliability::PeerAddress from;
    std::memcpy(from.bytes, &sa, sizeof sa);
    from.length = sizeof sa;
    const auto* data = reinterpret_cast<const std::byte*>(d.payload);
    const std::uint32_t k = d.len <= buf_size_ ? receiver_.take_in_order(data, d.len, from, max - n, now) : 0;
    if (__builtin_expect(k == 0, 0)) {
      // The receiver's general path (a gap, a heartbeat, ...): copied into a buffer like poll()
      // does, or left in the ring when there is no room.
      if (xdp_datagram(d.payload, d.len, d.src_addr, d.src_port, now) != 0) {
        xdp_->direct_done();
      } else {
        xdp_->direct_keep();
      }
      next_service_ns_ = std::min(next_service_ns_, receiver_.take_new_deadline());
      *slow = true;
      break;
    }
    deliver_taken(data, k, deliver);  // from the UMEM frame, given back after
    xdp_->direct_done();
    last_rx_ns_ = now;
    ++xdp_taken_;
    n += k;
  }
  return n;
}

}  // namespace pollux::transport::udp
