#include "transport/udp/rx_endpoint.h"

#include <arpa/inet.h>
#include <linux/errqueue.h>
#include <linux/net_tstamp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/clock.h"
#include "core/random_id.h"
#include "transport/udp/poller_source.h"
#include "transport/udp/udp_config.h"
#include "transport/udp/udp_internal.h"

namespace pollux::transport::udp {
namespace {

using reliability::FaultInjector;
using reliability::PeerAddress;

// The kernel's software stamp (ts[0] of SO_TIMESTAMPING) among a message's cmsgs.
bool software_stamp(msghdr& h, timespec* out) noexcept {
  for (cmsghdr* c = CMSG_FIRSTHDR(&h); c != nullptr; c = CMSG_NXTHDR(&h, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_TIMESTAMPING &&
        c->cmsg_len >= CMSG_LEN(sizeof(scm_timestamping))) {
      scm_timestamping t;
      std::memcpy(&t, CMSG_DATA(c), sizeof t);
      if (t.ts[0].tv_sec == 0 && t.ts[0].tv_nsec == 0) return false;
      *out = t.ts[0];
      return true;
    }
  }
  return false;
}

}  // namespace

absl::StatusOr<std::unique_ptr<UdpRxEndpoint>> UdpRxEndpoint::open(const TransportEnv& env, const EndpointSpec& spec,
                                                                   UdpPollerSource* source) {
  const core::Config& cfg = *env.config;
  const udp::UdpConfig& u = udp::config(cfg);
  auto opened = open_channel(cfg, spec.stream, /*rx=*/true);
  if (!opened.ok()) return opened.status();
  std::unique_ptr<UdpRxEndpoint> ep(new UdpRxEndpoint());
  ep->ch_ = opened->ch;
  ep->sock_ = std::move(opened->sock);
  ep->source_ = source;
  ep->stream_id_ = spec.stream_id;
  ep->direct_.poll = &UdpRxEndpoint::direct_poll;
  const std::uint32_t datagram = u.mtu - 28;
  ep->buf_size_ = static_cast<std::uint32_t>(core::align_up(datagram, 64));
  ep->nbufs_ = u.rx_buffers;
  ep->bufs_ = reliability::Region<std::byte>(static_cast<std::size_t>(ep->buf_size_) * ep->nbufs_);
  if (!ep->bufs_.ok()) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("%s: udp.rx_buffers: cannot map %u datagram buffers of %u bytes: out of memory (lower "
                        "udp.rx_buffers or udp.mtu)",
                        cfg.source, ep->nbufs_, ep->buf_size_));
  }
  ep->free_.reset(new std::uint32_t[ep->nbufs_]);
  ep->refs_.reset(new std::uint32_t[ep->nbufs_]());
  ep->len_.reset(new std::uint32_t[ep->nbufs_]());
  ep->src_.reset(new sockaddr_in[ep->nbufs_]());
  for (std::uint32_t i = ep->nbufs_; i-- > 0;) ep->free_buffer(i);
  ep->rx_batch_ = std::min(u.rx_batch, ep->nbufs_);
  ep->batch_buf_.reset(new std::uint32_t[ep->rx_batch_]);
  ep->msgs_.reset(new ::mmsghdr[ep->rx_batch_]());
  ep->iov_.reset(new iovec[ep->rx_batch_]());
  for (std::uint32_t i = 0; i < ep->rx_batch_; ++i) {
    ep->msgs_[i].msg_hdr.msg_iov = &ep->iov_[i];
    ep->msgs_[i].msg_hdr.msg_iovlen = 1;
  }
  ep->rx_ns_.reset(new std::int64_t[ep->nbufs_]());
  ep->krx_ns_.reset(new std::int64_t[ep->nbufs_]());
  if (ep->sock_.kernel_timestamps) {
    static_assert(CMSG_SPACE(sizeof(scm_timestamping)) <= kRxControlBytes);
    // new[] of std::byte is aligned for any fundamental type (cmsghdr included); each slot's
    // size is a multiple of 8.
    ep->ctrl_.reset(new std::byte[static_cast<std::size_t>(ep->rx_batch_) * kRxControlBytes]());
  }
  ep->frames_per_dgram_ = std::max<std::uint32_t>(1, datagram / core::kFrameHeaderSize);
  // At most half a window of frames per read (in datagrams full of minimal frames), at least one.
  ep->max_read_ = std::max<std::uint32_t>(1, (u.reorder_window / 2) / ep->frames_per_dgram_);
  const reliability::ReceiverOptions ro =
      reliability::receiver_options(u, spec.stream_id, us(u.heartbeat_interval_us), ms(u.session_timeout_ms));
  if (absl::Status st = ep->receiver_.init(ro); !st.ok()) {
    return absl::ResourceExhaustedError(
        absl::StrCat(cfg.source, ": udp.reorder_window / udp.max_sessions: ", st.message()));
  }
  ep->faults_ =
      FaultInjector(reliability::FaultOptions{u.fault_loss, u.fault_duplicate, u.fault_reorder, 8, u.fault_seed});
  if (u.datapath == UdpDatapath::kXdp) {
    auto port = XdpPort::acquire(cfg, ep->ch_, source, env.counters);
    if (!port.ok()) return port.status();
    ep->xdp_ = std::move(*port);
    // The datagrams' receive time is the poller's clock: the kernel never sees them.
    ep->sock_.kernel_timestamps = false;
  }
  if (source == nullptr) {
    if (absl::Status s = ep->waiter_.open(ep->xdp_ ? ep->xdp_->fd() : ep->sock_.fd); !s.ok()) return s;
  }
  if (env.counters != nullptr) {
    const std::string scope = absl::StrFormat("udp sub stream %u", spec.stream_id);
    ep->c_.allocate(*env.counters, scope, spec.stream_id, ep->sock_.kernel_timestamps);
  }
  // poll_direct()'s fixed conditions, checked once (none of them changes after open).
  ep->direct_ok_ = source == nullptr && !ep->faults_.enabled() && !ep->sock_.kernel_timestamps && ep->max_read_ > 0;
  if (ep->xdp_ != nullptr) {
    // Last: from here the port's thread hands this endpoint datagrams. Unicast: what the socket
    // binds (the subscriber's address, or any); multicast: the group.
    if (absl::Status st = ep->xdp_->add_rx(ep->ch_.dest.sin_addr.s_addr, ep->ch_.dest.sin_port, ep.get()); !st.ok()) {
      return st;
    }
  }
  return ep;
}

UdpRxEndpoint::~UdpRxEndpoint() {
  close_st();
  if (sock_.fd >= 0) ::close(sock_.fd);
}

void UdpRxEndpoint::send_control(const PeerAddress& to, const std::byte* msg, std::uint32_t len) noexcept {
  if (sock_.fd < 0 || to.length != sizeof(sockaddr_in)) return;
  sockaddr_in sa;
  std::memcpy(&sa, to.bytes, sizeof sa);
  if (::sendto(sock_.fd, msg, len, MSG_DONTWAIT, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) < 0) {
    ++control_errors_;  // best effort: NAKs are retried by timer, status messages are periodic
  }
}

void UdpRxEndpoint::process(std::uint32_t b, int times, std::int64_t now_ns) noexcept {
  PeerAddress from;
  std::memcpy(from.bytes, &src_[b], sizeof(sockaddr_in));
  from.length = sizeof(sockaddr_in);
  std::uint32_t stored = 0;
  for (int t = 0; t < times; ++t) stored += receiver_.on_datagram(buffer(b), len_[b], from, b, now_ns);
  refs_[b] += stored;
  if (refs_[b] == 0) free_buffer(b);  // heartbeats, duplicates, other streams: nothing kept
}

std::uint32_t UdpRxEndpoint::receive(std::int64_t now_ns, bool none_ready) noexcept {
  // Deliverable frames are waiting for the application: take no more until it drained some
  // (frames beyond the window would be dropped). Frames held behind a gap do not count: the
  // repair must still get in. none_ready (poll_st: its poll just drained everything) skips the
  // walk over the sessions that says so.
  if (!none_ready && receiver_.held() > receiver_.window() / 2 && receiver_.ready()) return 0;
  if (__builtin_expect(free_n_ == 0, 0) && receiver_.held() > 0 && (none_ready || !receiver_.ready())) evict(now_ns);
  if (xdp_ != nullptr) {
    // The port's ring: what it hands this endpoint arrives through xdp_datagram(), and what it
    // hands the other subscribers of the port waits in theirs.
    const std::uint32_t before = xdp_taken_;
    (void)xdp_->poll(now_ns);
    std::uint32_t got = xdp_taken_ - before;
    // RX queues udp.xdp_queues leaves out have no AF_XDP socket: the program passes this
    // stream's frames that arrive there to the kernel, which queues them on this socket. Read
    // it now and then, so that a steering mistake costs latency and a counter, not data. Its
    // emptiness says nothing about the ring's: the port reports the drain.
    if (__builtin_expect(xdp_->partial_queues() && now_ns >= next_socket_read_ns_, 0)) {
      next_socket_read_ns_ = now_ns + kXdpSocketReadNs;
      const std::uint32_t k = receive_socket(now_ns, /*report_drained=*/false);
      xdp_socket_receives_ += k;
      got += k;
    }
    return got;
  }
  return receive_socket(now_ns, /*report_drained=*/true);
}

std::uint32_t UdpRxEndpoint::receive_socket(std::int64_t now_ns, bool report_drained) noexcept {
  const std::uint32_t k = std::min({cur_batch_, free_n_, max_read_});
  if (k == 0) return 0;
  const bool kts = sock_.kernel_timestamps;
  if (k == 1 && __builtin_expect(!kts, 1)) {
    // Sparse traffic (the adaptive batch is 1; a ping-pong): recvfrom() is a shorter kernel
    // path than recvmmsg, and one buffer needs none of the batch's descriptors (read_one()).
    std::uint32_t b;
    const ReadOne r = read_one(now_ns, &b);
    if (r == ReadOne::kEmpty) return 0;
    if (r == ReadOne::kGot) admit_read(b, now_ns);
    return 1;
  }
  for (std::uint32_t i = 0; i < k; ++i) {
    const std::uint32_t b = free_[--free_n_];
    batch_buf_[i] = b;
    iov_[i].iov_base = buffer(b);
    iov_[i].iov_len = buf_size_;
    msghdr& h = msgs_[i].msg_hdr;
    h.msg_name = &src_[b];
    h.msg_namelen = sizeof(sockaddr_in);
    h.msg_flags = 0;
    if (__builtin_expect(kts, 0)) {
      h.msg_control = ctrl_.get() + static_cast<std::size_t>(i) * kRxControlBytes;
      h.msg_controllen = kRxControlBytes;
    }
  }
  int r;
  if (k == 1 && __builtin_expect(kts, 0)) {
    // One datagram with the control block of the kernel's receive stamp (recvmsg: the
    // recvfrom path above has no control block).
    const ssize_t n = ::recvmsg(sock_.fd, &msgs_[0].msg_hdr, MSG_DONTWAIT | MSG_TRUNC);
    r = n < 0 ? -1 : 1;
    if (n >= 0) msgs_[0].msg_len = static_cast<unsigned>(std::min<ssize_t>(n, buf_size_));
  } else {
    r = ::recvmmsg(sock_.fd, msgs_.get(), k, MSG_DONTWAIT, nullptr);
  }
  if (r < 0) {
    if (errno != EAGAIN && errno != EWOULDBLOCK) ++recv_errors_;
    r = 0;
  }
  const std::uint32_t got = static_cast<std::uint32_t>(r);
  for (std::uint32_t i = k; i-- > got;) free_buffer(batch_buf_[i]);
  if (got < k && report_drained) receiver_.drained(now_ns);  // the socket is empty: everything sent before now was read
  adapt_batch(k, got);
  if (got == 0) return 0;
  last_rx_ns_ = now_ns;
  // Traced frames: when recvmmsg returned (one clock read per batch, only for a batch with a
  // traced frame), and with udp.kernel_timestamps the kernel's receive time of each datagram.
  bool traced = false;
  for (std::uint32_t i = 0; i < got && !traced; ++i) {
    traced = has_traced_frame(buffer(batch_buf_[i]), std::min<std::uint32_t>(msgs_[i].msg_len, buf_size_));
  }
  if (__builtin_expect(traced, 0)) {
    traced_seen_ = true;
    const std::int64_t t = kts ? stamp_clock_.sample() : core::Clock::now_ns();
    for (std::uint32_t i = 0; i < got; ++i) {
      const std::uint32_t b = batch_buf_[i];
      rx_ns_[b] = t;
      krx_ns_[b] = 0;
      if (!kts) continue;
      timespec ts;
      if (software_stamp(msgs_[i].msg_hdr, &ts)) {
        krx_ns_[b] = stamp_clock_.to_clock(ts);
        ++rx_stamps_;
      } else {
        ++rx_stamps_missing_;
      }
    }
  }
  for (std::uint32_t i = 0; i < got; ++i) {
    const std::uint32_t b = batch_buf_[i];
    len_[b] = msgs_[i].msg_len;
    if (__builtin_expect(msgs_[i].msg_hdr.msg_flags & MSG_TRUNC, 0)) {
      ++truncated_;  // larger than udp.mtu - 28: a misconfigured publisher
      free_buffer(b);
      continue;
    }
    admit(b, now_ns);
  }
  return got;
}

std::uint32_t UdpRxEndpoint::xdp_datagram(const std::uint8_t* payload, std::uint32_t len, std::uint32_t src_addr,
                                          std::uint16_t src_port, std::int64_t now_ns) noexcept {
  if (__builtin_expect(free_n_ == 0, 0)) return 0;
  // receive()'s gate: half the window deliverable and not yet polled.
  if (__builtin_expect(receiver_.held() > receiver_.window() / 2, 0) && receiver_.ready()) return 0;
  if (__builtin_expect(len > buf_size_, 0)) {
    ++truncated_;  // larger than udp.mtu - 28: a misconfigured publisher
    return 1;
  }
  const std::uint32_t b = free_[--free_n_];
  std::memcpy(buffer(b), payload, len);
  len_[b] = len;
  sockaddr_in& from = src_[b];
  from = sockaddr_in{};
  from.sin_family = AF_INET;
  from.sin_addr.s_addr = src_addr;
  from.sin_port = src_port;
  last_rx_ns_ = now_ns;
  ++xdp_taken_;
  admit_read(b, now_ns);
  return 1;
}

// MSG_TRUNC makes recvfrom() return the real length, so truncation is still seen. The same
// steps as receive()'s batch path.
UdpRxEndpoint::ReadOne UdpRxEndpoint::read_one(std::int64_t now_ns, std::uint32_t* out) noexcept {
  const std::uint32_t b = free_[--free_n_];
  socklen_t alen = sizeof(sockaddr_in);
  const ssize_t n = ::recvfrom(sock_.fd, buffer(b), buf_size_, MSG_DONTWAIT | MSG_TRUNC,
                               reinterpret_cast<sockaddr*>(&src_[b]), &alen);
  if (n < 0) {
    if (errno != EAGAIN && errno != EWOULDBLOCK) ++recv_errors_;
    free_buffer(b);
    receiver_.drained(now_ns);  // the socket is empty
    adapt_batch(1, 0);
    return ReadOne::kEmpty;
  }
  adapt_batch(1, 1);
  last_rx_ns_ = now_ns;
  if (__builtin_expect(n > static_cast<ssize_t>(buf_size_), 0)) {
    ++truncated_;  // larger than udp.mtu - 28: a misconfigured publisher
    free_buffer(b);
    return ReadOne::kDropped;
  }
  len_[b] = static_cast<std::uint32_t>(n);
  *out = b;
  return ReadOne::kGot;
}

void UdpRxEndpoint::admit_read(std::uint32_t b, std::int64_t now_ns) noexcept {
  if (__builtin_expect(has_traced_frame(buffer(b), len_[b]), 0)) {
    rx_ns_[b] = core::Clock::now_ns();
    krx_ns_[b] = 0;
    traced_seen_ = true;
  }
  admit(b, now_ns);
}

// Adaptive batch: one datagram per call while traffic is sparse (a ping-pong pays for no empty
// second slot), doubling up to rx_batch while every slot gets filled. From 1 it grows only after
// two single reads in a row found a datagram: one datagram after an empty read is a ping-pong's
// reply, and a batch of 2 would make the next read - the spin's empty one - a recvmmsg instead
// of the shorter recvfrom, every round trip. A read smaller than the batch because buffers or
// the window ran short (k < cur_batch_) that filled every slot changes nothing.
void UdpRxEndpoint::adapt_batch(std::uint32_t k, std::uint32_t got) noexcept {
  if (got == k && k == cur_batch_) {
    if (k > 1 || ++single_hits_ >= 2) {
      cur_batch_ = std::min(cur_batch_ * 2, rx_batch_);
      single_hits_ = 0;
    }
  } else if (got < k) {
    cur_batch_ = std::max<std::uint32_t>(1, got);
    single_hits_ = 0;
  }
}

void UdpRxEndpoint::admit(std::uint32_t b, std::int64_t now_ns) noexcept {
  if (__builtin_expect(!faults_.enabled(), 1)) {
    process(b, 1, now_ns);
    return;
  }
  faults_.admit(
      b, [&](std::uint32_t t, int times) { process(t, times, now_ns); }, [&](std::uint32_t t) { free_buffer(t); });
}

void UdpRxEndpoint::evict(std::int64_t now_ns) noexcept {
  // Every buffer is referenced and nothing is deliverable: frames are held behind a gap whose
  // repair now has nowhere to land. Give back the datagrams with the highest sequences (they
  // are NAKed again later) until a batch of buffers is free.
  const std::uint32_t target = std::min(rx_batch_, nbufs_ / 4 + 1);
  for (int round = 0; round < 64 && free_n_ < target; ++round) {
    std::uint32_t best = UINT32_MAX;
    std::uint64_t best_seq = 0;
    for (std::uint32_t b = 0; b < nbufs_; ++b) {
      if (refs_[b] == 0) continue;
      const auto* f = reinterpret_cast<const core::FrameHeader*>(buffer(b));
      if (f->sequence >= best_seq) {
        best_seq = f->sequence;
        best = b;
      }
    }
    if (best == UINT32_MAX) return;
    reliability::FrameCursor cur(buffer(best), len_[best]);
    for (const core::FrameHeader* f = cur.next(); f != nullptr; f = cur.next()) {
      if (f->flags & core::kFlagHeartbeat) continue;
      if (receiver_.forget(f->session_id, f->sequence, f, now_ns)) --refs_[best];
    }
    if (refs_[best] != 0) return;  // frames of it are with the application: wait for releases
    free_buffer(best);
    ++evictions_;
  }
}

void UdpRxEndpoint::attach() noexcept {
  attached_ = true;
  source_->attach(this);
}

// Traced messages get the stamps of the datagram that brought them: receive_ns, and with
// udp.kernel_timestamps the kernel's receive time, written into this process's own copy of the
// frame (our datagram buffer) and flagged in the descriptor for the subscriber.
void UdpRxEndpoint::stamp_traced(RxDesc* out, std::uint32_t n) noexcept {
  if (__builtin_expect(!traced_seen_, 1)) return;  // no traced frame ever read: nothing to stamp
  for (std::uint32_t i = 0; i < n; ++i) {
    RxDesc& d = out[i];
    if (__builtin_expect(d.kind != RxKind::kMessage || !(d.frame->flags & core::kFlagTraced), 1)) continue;
    d.receive_ns = rx_ns_[d.token];
    if (!sock_.kernel_timestamps) continue;
    // The frame lies in our buffer d.token, and FrameCursor let it through only with room for
    // its trace block: the buffer is ours to write until release.
    auto* t = reinterpret_cast<core::StageTrace*>(const_cast<std::byte*>(reinterpret_cast<const std::byte*>(d.frame)) +
                                                  core::kFrameHeaderSize);
    const std::int64_t k = krx_ns_[d.token];
    t->kernel_rx_ns = k;
    if (k != 0) d.reserved |= kRxFlagKernelRx;
  }
}

std::uint32_t UdpRxEndpoint::poll_st(std::span<RxDesc> out) noexcept {
  if (__builtin_expect(closed_, 0)) return 0;
  const std::uint32_t max = static_cast<std::uint32_t>(out.size());
  if (source_ != nullptr) {
    // Poller mode: the source read the socket this cycle; hand out what it queued.
    if (__builtin_expect(!attached_, 0)) attach();
    const std::uint32_t n = receiver_.poll(out.data(), max);
    stamp_traced(out.data(), n);
    return n;
  }
  const std::int64_t now = core::Clock::now_ns();  // once per call
  std::uint32_t n = receiver_.poll(out.data(), max);
  // One socket read per call while frames are delivered (the caller polls again). While a gap
  // holds every frame back, a read delivers nothing; reading only once per call would then take
  // one batch off the socket per call, as slow as the traffic arrives for a caller that polls
  // less often than every batch's worth of it (a recorder draining every 200 us): the backlog and
  // the NAKs fall further behind until the repairs are out of the publisher's buffer. So the
  // datagrams behind a gap (and its repair) are read on, up to kBlockedReads batches a call.
  for (int round = 0; n < max && round < kBlockedReads; ++round) {
    if (receive(now, true) == 0) break;
    n += receiver_.poll(out.data() + n, max - n);
    if (n > 0) break;
  }
  stamp_traced(out.data(), n);
  // What the datagrams just read (a gap to NAK, a new session or an end to confirm), an
  // eviction or the poll (an end delivered) made due: service() recomputes the rest.
  next_service_ns_ = std::min(next_service_ns_, receiver_.take_new_deadline());
  if (__builtin_expect(receiver_.connected() != connected_.load(std::memory_order_relaxed), 0)) {
    connected_.store(receiver_.connected(), std::memory_order_relaxed);
  }
  if (__builtin_expect(now >= next_service_ns_, 0)) housekeeping_st(now);
  return n;
}

void UdpRxEndpoint::release_st(std::span<const RxDesc> done, bool /*validate*/) noexcept {
  // Buffers are ours until released: views cannot be overwritten, nothing to validate.
  for (const RxDesc& d : done) {
    if (d.kind != RxKind::kMessage) continue;
    if (--refs_[d.token] == 0) free_buffer(d.token);
  }
}

int UdpRxEndpoint::housekeeping_st(std::int64_t now_ns) noexcept {
  if (closed_) return 0;
  if (source_ != nullptr) {
    // Poller mode: the source runs the timers (service()); attach in case this is the first call.
    if (!attached_) attach();
    return 0;
  }
  return service(now_ns);
}

int UdpRxEndpoint::duty_st(std::int64_t now_ns) noexcept {
  if (closed_ || source_ != nullptr) return housekeeping_st(now_ns);
  const int read = static_cast<int>(receive(now_ns, false));
  if (receiver_.connected() != connected_.load(std::memory_order_relaxed)) {
    connected_.store(receiver_.connected(), std::memory_order_relaxed);
  }
  return read + service(now_ns);
}

int UdpRxEndpoint::service(std::int64_t now_ns) noexcept {
  int work = 0;
  if (__builtin_expect(xdp_ != nullptr && xdp_->partial_queues(), 0)) {
    // The inline direct path never reads the socket: what reached it (see receive()) is read
    // here at the latest, at every service (1 ms at most apart).
    const std::uint32_t k = receive_socket(now_ns, /*report_drained=*/false);
    xdp_socket_receives_ += k;
    work += static_cast<int>(k);
  }
  work += receiver_.service(now_ns, *this);
  work += static_cast<int>(
      faults_.flush_if_idle(now_ns - last_rx_ns_, [&](std::uint32_t t, int times) { process(t, times, now_ns); }));
  next_service_ns_ = std::min(receiver_.next_deadline(), now_ns + 1'000'000);
  if (faults_.delayed() > 0) next_service_ns_ = std::min(next_service_ns_, now_ns + 1'000'000);
  connected_.store(receiver_.connected(), std::memory_order_relaxed);
  publish_counters();
  if (xdp_ != nullptr) xdp_->publish_counters(now_ns);
  return work;
}

bool UdpRxEndpoint::try_arm_st() noexcept {
  if (source_ != nullptr || closed_) return false;  // poller mode: the source arms
  if (has_queued()) return false;
  const std::int64_t now = core::Clock::now_ns();
  const std::int64_t deadline = receiver_.next_deadline();
  if (deadline <= now) return false;
  // A datagram already queued makes the (level-triggered) descriptor readable as it is added.
  return waiter_.arm(deadline, now);
}

void UdpRxEndpoint::close_st() noexcept {
  if (closed_) return;
  closed_ = true;
  receiver_.close(*this);  // publishers stop waiting for us
  connected_.store(false, std::memory_order_relaxed);
  publish_counters();
  if (attached_) source_->detach(this);  // poller mode: on the poller thread (context.cc)
  attached_ = false;
  if (xdp_ != nullptr) xdp_->remove_rx(this);  // the thread that drives the port (see XdpPort)
}

void UdpRxEndpoint::publish_counters() noexcept {
  c_.proto.publish(receiver_, faults_, truncated_, evictions_);
  c_.publish(*this);
}

void UdpRxEndpoint::Counters::publish(const UdpRxEndpoint& ep) noexcept {
  if (!own.recv_errors.valid()) return;
  POLLUX_COUNTER_PUBLISH(POLLUX_UDP_RX_COUNTERS, own);
  if (stamped.rx_stamps.valid()) POLLUX_COUNTER_PUBLISH(POLLUX_UDP_RX_STAMP_COUNTERS, stamped);
}

std::string UdpRxEndpoint::describe() const {
  const reliability::ReceiverStats& s = receiver_.stats();
  const reliability::WindowStats w = receiver_.window_stats();
  std::string out = absl::StrFormat(
      "udp subscriber stream %u on %s, rcvbuf %d, busy poll %s, %u/%u buffers free; %u datagrams, %u frames, %u "
      "duplicates, %u gaps, %u NAKs, %u fills, %u unrecoverable",
      stream_id_, ch_.text, sock_.rcvbuf, sock_.busy_poll ? "on" : "off", free_n_, nbufs_, s.datagrams, w.frames,
      w.duplicates, w.gaps_opened, s.naks_sent, w.fills, w.lost);
  if (sock_.kernel_timestamps) {
    absl::StrAppendFormat(&out, "; kernel RX timestamps: %u traced datagrams stamped, %u without a stamp", rx_stamps_,
                          rx_stamps_missing_);
  }
  for (std::uint32_t i = 0; i < receiver_.sessions(); ++i) {
    const auto si = receiver_.session_info(i);
    absl::StrAppendFormat(&out, "; session %08x next %u seen %u gaps %u held %u", si.session_id, si.expected, si.hwm,
                          si.gaps, si.held);
  }
  if (xdp_ != nullptr)
    absl::StrAppend(&out, "; datapath ", xdp_->describe(), ", receive times from the poller's clock");
  if (!sock_.notes.empty()) absl::StrAppend(&out, "; ", sock_.notes);
  return out;
}

int UdpRxEndpoint::direct_poll(RxEndpoint* ep, FrameFn on_frame, void* ctx, const void* handlers, int limit) noexcept {
  auto* const self = static_cast<UdpRxEndpoint*>(ep);
  const RxBinding& b = self->binding_;
  if (__builtin_expect(limit <= 0, 0)) return b.general(b.caller, handlers, limit, 0);
  bool slow = false;
  std::uint64_t bytes = 0, last = 0;
  const std::uint32_t n = self->poll_direct(
      static_cast<std::uint32_t>(limit),
      [&](const core::FrameHeader* f, std::uint32_t len) {
        bytes += len - core::kFrameHeaderSize;
        last = f->sequence;
        on_frame(ctx, f, len);
      },
      &slow);
  if (n != 0) b.count(n, bytes, last);
  if (!slow || static_cast<int>(n) >= limit) return static_cast<int>(n);
  return b.general(b.caller, handlers, limit, static_cast<int>(n));
}

}  // namespace pollux::transport::udp
