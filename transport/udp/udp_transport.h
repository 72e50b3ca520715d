// UDP transport: unicast or multicast datagrams carrying runs of frames, made reliable by the
// NAK protocol of transport/reliability/ (docs/PROTOCOL.md).
//
// Data plane per burst: post_st() copies frames into the publisher's send log (its retransmit
// buffer) and sends them as datagrams packed up to the MTU with one sendmmsg; received
// datagrams land in buffers the frames are then delivered from without a copy. Inline
// endpoints also have direct paths for the API's single messages: claim_direct() /
// commit_direct() build a frame in place in the send log, poll_direct() hands a datagram that
// simply continues its session from the receive buffer to the handler.
//
// Who reads the sockets depends on who drives the endpoint:
//   - poller mode (spec.poller >= 0): the poller's UdpPollerSource owns one epoll set over the
//     sockets of every endpoint opened on that poller (plus one timerfd for the earliest
//     protocol deadline). Its progress() reads the ready sockets in bursts (one epoll_wait
//     round per cycle, recvmmsg per ready socket) and hands datagrams to their endpoints;
//     endpoints are passive: poll_st() returns what the source queued, post_st() sends, and
//     the source's housekeeping() runs the protocol timers. close_st() never blocks: a
//     publisher that must linger (serve NAKs until its subscribers confirmed the end) hands its
//     socket and sender state to the source, which finishes the linger in housekeeping.
//   - inline mode (spec.poller == -1): the endpoint progresses itself inside poll_st() /
//     post_st() / housekeeping_st(), and owns a Waiter (its socket + a timerfd) exposed as
//     notify_fd() for Subscriber::wait().
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <vector>

#include "core/clock.h"
#include "transport/reliability/fault_injector.h"
#include "transport/reliability/protocol_counters.h"
#include "transport/reliability/receiver.h"
#include "transport/reliability/region.h"
#include "transport/reliability/sender.h"
#include "transport/transport.h"
#include "transport/udp/kernel_timestamps.h"
#include "transport/udp/udp_socket.h"

struct mmsghdr;

namespace pollux::transport::udp {

class UdpPollerSource;

// Epoll set of one inline endpoint: its socket (level-triggered: a datagram that arrived before
// the caller went to sleep still wakes it, so arming needs no "is anything pending" syscall) and
// a timerfd for the next protocol deadline (edge-triggered: an expiry wakes once, nothing to
// read). Steady state costs no syscall per arm: the timer is only re-armed when the deadline
// moves earlier or the armed one has passed; a timer that fires early only causes an empty poll.
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

// A publisher's socket, protocol state and send path: what must outlive the endpoint when its
// close lingers (UdpPollerSource keeps it until the subscribers confirmed the end).
struct TxCore final : reliability::DatagramSink {
  ~TxCore() override;
  std::uint32_t send_datagrams(std::span<const reliability::DatagramSink::Datagram> d) noexcept override;
  // Reads NAKs / status messages (a few recvmmsg of kControlBatch), and the error queue when TX
  // timestamps are on; returns how many control messages.
  int receive_control(std::int64_t now_ns) noexcept;
  // Traced streams: reads the kernel's TX timestamps from the error queue (a bounded batch,
  // non-blocking) and records them in send_log. Returns the number read.
  int collect_tx_stamps() noexcept;
  // A send that failed (errno): true when the socket is full - nothing went out, retry later;
  // otherwise (unreachable network, filtered, ...) counted in send_errors and false: the
  // caller moves on rather than spin on the same datagrams (subscribers NAK what they missed).
  bool send_failure_is_transient() noexcept;
  // Timers of the TX timestamps: expiry, restarting the numbering. Cheap when off.
  void service_tx_stamps(std::int64_t now_ns) noexcept;
  bool tx_stamps_outstanding() const noexcept { return tx_stamps && stamps.outstanding() != 0; }
  void publish_counters() noexcept;

  Channel ch;
  SocketInfo sock;
  reliability::ReliableSender sender;
  reliability::FaultInjector tx_faults;
  double tx_loss = 0;
  std::uint32_t tx_batch = 32;
  std::unique_ptr<::mmsghdr[]> msgs;
  std::unique_ptr<iovec[]> iov;
  std::uint64_t send_errors = 0;
  int last_errno = 0;
  // TX software timestamps (traced streams whose socket accepted SO_TIMESTAMPING): see
  // kernel_timestamps.h. send_log is the publisher's; null once the endpoint closed.
  bool tx_stamps = false;
  core::SendCompletionLog* send_log = nullptr;
  TxStampTracker stamps;
  RealtimeToClock stamp_clock;
  struct Counters {
    reliability::SenderCounters proto;  // the protocol's, shared with RDMA UD multicast
    core::Counter send_blocked, send_errors, fault_dropped, tx_stamps, tx_stamps_expired, tx_stamps_skipped,
        tx_stamp_errors, tx_stamp_resyncs;
  } c;
};

class UdpTxEndpoint final : public TxEndpoint {
 public:
  static absl::StatusOr<std::unique_ptr<UdpTxEndpoint>> open(const TransportEnv& env, const EndpointSpec& spec,
                                                             UdpPollerSource* source = nullptr);
  ~UdpTxEndpoint() override;

  std::uint32_t post_st(std::span<const TxDesc> frames) noexcept override;
  std::uint32_t reap_st(std::span<std::uint32_t> freed) noexcept override;
  // Inline mode, the publisher's direct path (Publisher::offer on the application thread): the
  // frame is built in place in the send log - no pool slot, no copy, nothing to reap.
  // claim_direct(): room for a frame of `length` bytes (null: back-pressure, or a length
  // post_st() would drop); the caller writes the whole frame there (header fields the log owns
  // are set by commit) and calls commit_direct(), which sends it as post_st() would.
  std::byte* claim_direct(std::uint32_t length) noexcept {
    if (__builtin_expect(core_ == nullptr || length > max_frame_ || length < core::kFrameHeaderSize, 0)) return nullptr;
    return core_->sender.claim(length);
  }
  // now_ns: the caller's clock reading of this offer (0: none, read here).
  void commit_direct(std::uint32_t length, std::int64_t now_ns) noexcept;
  // Poller mode: 0 (the source runs the protocol timers).
  int housekeeping_st(std::int64_t now_ns) noexcept override;
  // Inline mode only (poller mode: false / -1, the poller's source arms instead).
  bool try_arm_st() noexcept override;
  void disarm_st() noexcept override {}  // see Waiter: nothing to undo
  int notify_fd() const noexcept override { return waiter_.fd(); }
  // Any thread (Publisher::is_connected() / offer() on the application thread in queued
  // modes): a relaxed flag the owner thread refreshes; nothing is published through it.
  bool connected() const noexcept override { return connected_.load(std::memory_order_relaxed); }
  std::uint32_t max_frame() const noexcept override { return max_frame_; }
  // Inline mode: lingers here (up to udp.linger_ms) for the subscribers' end confirmations.
  // Poller mode: returns at once; the poller's source lingers with the socket.
  void close_st() noexcept override;
  std::string describe() const override;

  // Valid until close_st() in poller mode (the state then moves to the source).
  const reliability::ReliableSender& sender() const noexcept { return core_->sender; }
  const SocketInfo& socket_info() const noexcept { return core_->sock; }

 private:
  friend class UdpPollerSource;
  UdpTxEndpoint() = default;
  // The direct path (TxDirect, inline mode): claim_direct() / commit_direct() with the header
  // written at commit. Untraced frames only (traced ones take a pool slot and post_st()).
  static ClaimResult direct_claim(TxEndpoint* ep, std::uint32_t frame_length, std::int64_t now, TxClaim* c) noexcept;
  static std::int64_t direct_commit(TxEndpoint* ep, const TxClaim& c, std::uint16_t flags, std::int64_t now,
                                    bool deferred) noexcept;
  void attach() noexcept;
  // Poller mode, called by the source: the socket is readable / the timers.
  int on_readable(std::int64_t now_ns) noexcept;
  int service(std::int64_t now_ns) noexcept;

  std::unique_ptr<TxCore> core_;
  UdpPollerSource* source_ = nullptr;  // poller mode; null inline
  bool attached_ = false;              // poller mode: in the source's epoll set
  Waiter waiter_;                      // inline mode
  core::BufferPool* pool_ = nullptr;
  std::uint32_t max_frame_ = 0;
  std::int64_t linger_ns_ = 0;
  std::int64_t next_service_ns_ = 0;
  std::uint32_t reaps_ = 0;
  bool closed_ = false;
  std::atomic<bool> connected_{false};  // sender.connected(), refreshed by the owner thread
  // Slots copied into the log and not yet handed back by reap_st().
  std::unique_ptr<std::uint32_t[]> done_;
  std::uint32_t done_n_ = 0, done_cap_ = 0;
};

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
  // poll_direct() in two steps (the transport interface's RxDirect): peek_direct() delivers up
  // to `max` (<= kMaxDirectViews) frames and keeps their receive buffers; release_direct(),
  // once they were used, frees the buffers. Nothing else may run on the endpoint in between.
  template <class F>
  std::uint32_t peek_direct(std::uint32_t max, F&& deliver, bool* slow) noexcept;
  void release_direct() noexcept {
    for (std::uint32_t i = 0; i < held_n_; ++i) free_buffer(held_[i]);
    held_n_ = 0;
  }
  // Poller mode: 0 (the source runs the protocol timers).
  int housekeeping_st(std::int64_t now_ns) noexcept override;
  // The duty call (inline, before the first poll): reads what arrived - the publisher's setup and
  // heartbeats, data kept for the first poll - and answers it (status), as poll_st() would.
  int duty_st(std::int64_t now_ns) noexcept override;
  // Inline mode only (poller mode: false / -1, the poller's source arms instead).
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
  // Datagrams the next socket read asks for (the adaptive batch: 1 = recvfrom, more = recvmmsg).
  std::uint32_t read_batch() const noexcept { return cur_batch_; }
  const SocketInfo& socket_info() const noexcept { return sock_; }

 private:
  friend class UdpPollerSource;
  UdpRxEndpoint() = default;
  static std::uint32_t direct_poll(RxEndpoint* ep, std::uint32_t max, FrameView* out, bool* slow) noexcept;
  static void direct_release(RxEndpoint* ep, std::uint32_t) noexcept {
    static_cast<UdpRxEndpoint*>(ep)->release_direct();
  }
  void send_control(const reliability::PeerAddress& to, const std::byte* msg, std::uint32_t len) noexcept override;
  void attach() noexcept;
  // Reads the socket (one recvfrom/recvmmsg). none_ready: the caller's poll just drained every
  // deliverable frame (receiver_.ready() is false).
  std::uint32_t receive(std::int64_t now_ns, bool none_ready = false) noexcept;
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
  UdpPollerSource* source_ = nullptr;  // poller mode; null inline
  bool attached_ = false;              // poller mode: in the source's epoll set
  Waiter waiter_;                      // inline mode
  reliability::ReliableReceiver receiver_;
  reliability::FaultInjector faults_;
  reliability::Region<std::byte> bufs_;
  std::uint32_t buf_size_ = 0, nbufs_ = 0;
  std::unique_ptr<std::uint32_t[]> free_;
  std::uint32_t free_n_ = 0;
  // Buffers of the frames peek_direct() handed over, freed by release_direct(): at most one per
  // frame.
  std::uint32_t held_[kMaxDirectViews];
  std::uint32_t held_n_ = 0;
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
  struct Counters {
    reliability::ReceiverCounters proto;  // the protocol's, shared with RDMA UD multicast
    core::Counter rx_stamps, rx_stamps_missing;
    core::Counter recv_errors, control_errors;  // failed reads (not EAGAIN); NAKs and status the socket refused
  } c_;
};

template <class F>
std::uint32_t UdpRxEndpoint::poll_direct(std::uint32_t max, F&& deliver, bool* slow) noexcept {
  std::uint32_t n = 0;
  while (n < max) {
    const std::uint32_t want = std::min(max - n, kMaxDirectViews);
    const std::uint32_t k = peek_direct(want, deliver, slow);
    release_direct();
    n += k;
    if (*slow || k < want) break;
  }
  return n;
}

template <class F>
std::uint32_t UdpRxEndpoint::peek_direct(std::uint32_t max, F&& deliver, bool* slow) noexcept {
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
    // take_in_order() walked and checked these frames: plain data, consecutive, in the datagram.
    std::uint32_t off = 0;
    for (std::uint32_t i = 0; i < k; ++i) {
      const auto* f = reinterpret_cast<const core::FrameHeader*>(data + off);
      deliver(f, f->frame_length);
      off += reliability::wire_size(f->frame_length);
    }
    held_[held_n_++] = b;  // k >= 1 frames: at most max (<= kMaxDirectViews) buffers held
    n += k;
  }
  return n;
}

// The progress source of one poller (Transport::poller_source): one epoll set over the sockets
// of every endpoint opened on that poller, lingering publisher sockets, and one timerfd.
// Poller thread only (endpoints attach themselves on their first data-plane call, which the
// poller makes; close_st() runs there too).
//
// progress(): with exactly one subscriber socket, reads it directly (one recvfrom/recvmmsg per
// cycle, as an inline endpoint does); otherwise one epoll_wait(0) round over the whole set and
// a burst read of each ready socket. Publisher sockets (NAKs, status messages) and the timerfd
// are also swept at least every kSweepNs and in every housekeeping().
// try_arm(): the sockets are level-triggered in the set, so a datagram that arrives at any
// time keeps notify_fd() readable and nothing needs re-checking after the arm; the source
// refuses when frames are queued in user space (deliverable but not yet polled, delayed by the
// fault injector) or a protocol deadline is due, and otherwise sets the timerfd to the earliest
// deadline (heartbeat, NAK, status, linger) so the poller wakes for it.
class UdpPollerSource final : public core::ProgressSource {
 public:
  static absl::StatusOr<std::unique_ptr<UdpPollerSource>> create(int poller, core::CountersFile* counters);
  ~UdpPollerSource() override;

  int progress(std::int64_t now_ns) noexcept override;
  int housekeeping(std::int64_t now_ns) noexcept override;
  bool try_arm() noexcept override;
  // Nothing to undo (level-triggered sockets; an early timer only costs an empty cycle), but
  // the poller may have slept: the next progress() sweeps every socket (a publisher's NAK may
  // be what woke it), not just the subscriber it reads directly.
  void disarm() noexcept override { next_sweep_ns_ = 0; }
  int notify_fd() const noexcept override { return epfd_; }
  std::string_view name() const noexcept override { return "udp"; }

  // Control path (the application thread, after the poller stopped): serves every lingering
  // close to its end (confirmations or deadline), blocking. Called by UdpTransport::close().
  void finish_lingers() noexcept;

  // Diagnostics and tests.
  std::uint64_t epoll_waits() const noexcept { return epoll_waits_; }
  std::uint32_t members() const noexcept { return static_cast<std::uint32_t>(members_.size()); }
  std::uint32_t lingering() const noexcept { return nlinger_; }
  std::uint64_t lingers_timed_out() const noexcept { return linger_timeouts_; }

  // Endpoint side (poller thread).
  void attach(UdpRxEndpoint* ep) noexcept;
  void attach(UdpTxEndpoint* ep) noexcept;
  void detach(const void* ep) noexcept;
  // Takes over a closing publisher's socket and sender until `deadline_ns`.
  void linger(const UdpTxEndpoint* ep, std::unique_ptr<TxCore> core, std::int64_t deadline_ns,
              std::int64_t now_ns) noexcept;

  // Publishers sweep their sockets for control messages at least this often while polling.
  static constexpr std::int64_t kSweepNs = 250'000;

 private:
  struct Member {
    UdpRxEndpoint* rx = nullptr;
    UdpTxEndpoint* tx = nullptr;
    std::unique_ptr<TxCore> linger;  // a closed publisher's state, lingering
    std::int64_t linger_deadline_ns = 0, last_end_ns = 0;
    std::uint64_t ready_sweep = 0;  // the last sweep (epoll_waits_) that found its socket readable
    int fd = -1;
  };
  UdpPollerSource() = default;
  void add(std::unique_ptr<Member> m) noexcept;
  // One epoll_wait round; `complete` (if given): every ready socket was reported.
  int sweep(std::int64_t now_ns, bool* complete = nullptr) noexcept;
  int dispatch(Member* m, std::int64_t now_ns) noexcept;
  // Returns true when the linger is over (the member must be removed).
  bool linger_step(Member& m, std::int64_t now_ns) noexcept;
  void remove_at(std::size_t i) noexcept;
  void arm_timer(std::int64_t deadline_ns, std::int64_t now_ns) noexcept;
  void recount() noexcept;

  int epfd_ = -1;
  int timerfd_ = -1;
  std::int64_t timer_ns_ = INT64_MAX;  // when the armed timer fires (INT64_MAX: not armed)
  // progress() runs housekeeping() once now reaches this: the armed timer's deadline, or one
  // try_arm() found due. Pollers run timers only every ~1 ms and after a timer wakeup; a
  // deadline that woke us through the timerfd (an epoll event) is served here at once.
  std::int64_t service_ns_ = INT64_MAX;
  std::int64_t last_service_ns_ = 0;  // the last housekeeping()
  static constexpr std::int64_t kMinServiceNs = 50'000;
  std::vector<std::unique_ptr<Member>> members_;
  UdpRxEndpoint* single_rx_ = nullptr;  // the only member, a subscriber: read directly
  std::uint32_t nlinger_ = 0;
  std::int64_t next_sweep_ns_ = 0;
  std::uint64_t epoll_waits_ = 0, linger_timeouts_ = 0, lingers_ = 0;
  core::Counter c_epoll_waits_, c_lingers_, c_linger_timeouts_, c_arm_refused_;
};

class UdpTransport final : public Transport {
 public:
  explicit UdpTransport(const TransportEnv& env) : env_(env) {}
  ~UdpTransport() override { close(); }
  std::string_view name() const override { return "udp"; }
  // Frames are copied into the send log, so the pool needs no registration.
  absl::Status register_memory(core::BufferPool&) override { return absl::OkStatus(); }
  absl::StatusOr<std::unique_ptr<TxEndpoint>> open_tx(const EndpointSpec& spec) override;
  absl::StatusOr<std::unique_ptr<RxEndpoint>> open_rx(const EndpointSpec& spec) override;
  // Finishes lingering closes (the pollers have stopped), then drops the sources.
  void close() override;
  // A socket (and session) per publisher: publishers on different threads never share one.
  bool shared_tx_endpoint() const noexcept override { return false; }
  absl::StatusOr<core::ProgressSource*> poller_source(int poller) override;
  std::string describe() const override;
  std::string stream_route(std::uint32_t stream_id) const override;

 private:
  absl::StatusOr<UdpPollerSource*> source_for(const EndpointSpec& spec);
  std::vector<std::unique_ptr<UdpPollerSource>> sources_;
  TransportEnv env_;
};

}  // namespace pollux::transport::udp
