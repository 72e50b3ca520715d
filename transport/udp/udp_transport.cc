#include "transport/udp/udp_transport.h"

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
#include <cstdio>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/clock.h"

namespace pollux::transport::udp {
namespace {

using reliability::DatagramSink;
using reliability::FaultInjector;
using reliability::PeerAddress;

// Publishers look for NAKs/status messages at least this often while posting (inline mode:
// offer() is the only call the application makes); each look is one recvmmsg.
constexpr std::int64_t kControlPollNs = 250'000;
// Control messages received per look, at most.
constexpr std::uint32_t kControlBatch = 8;
constexpr std::uint32_t kControlBufSize = 576;
// A lingering publisher repeats its end-of-stream heartbeat this often.
constexpr std::int64_t kEndResendNs = 5'000'000;
// Error-queue entries (TX timestamps) read per recvmmsg, and rounds per collect_tx_stamps().
constexpr std::uint32_t kStampBatch = 16;
constexpr int kStampRounds = 4;
// Control space of one error-queue entry: SO_TIMESTAMPING (scm_timestamping) + IP_RECVERR
// (sock_extended_err + the offender's address), with room to spare.
constexpr std::size_t kStampControlBytes = 256;
static_assert(CMSG_SPACE(sizeof(scm_timestamping)) + CMSG_SPACE(sizeof(sock_extended_err) + sizeof(sockaddr_in)) <=
              kStampControlBytes);

// The per-datagram request for a TX software timestamp (a cmsg on that sendmmsg entry).
struct TxStampRequest {
  alignas(cmsghdr) unsigned char buf[CMSG_SPACE(sizeof(std::uint32_t))];
  TxStampRequest() {
    std::memset(buf, 0, sizeof buf);
    auto* c = reinterpret_cast<cmsghdr*>(buf);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SO_TIMESTAMPING;
    c->cmsg_len = CMSG_LEN(sizeof(std::uint32_t));
    const std::uint32_t flags = SOF_TIMESTAMPING_TX_SOFTWARE;
    std::memcpy(CMSG_DATA(c), &flags, sizeof flags);
  }
};
// Read-only after construction: the kernel only reads it.
const TxStampRequest kTxStampRequest;

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

std::uint64_t random_u64() {
  std::random_device rd;
  std::uint64_t v = 0;
  while (v == 0) v = (static_cast<std::uint64_t>(rd()) << 32) | rd();
  return v;
}

std::int64_t us(std::uint32_t v) { return static_cast<std::int64_t>(v) * 1'000; }
std::int64_t ms(std::uint32_t v) { return static_cast<std::int64_t>(v) * 1'000'000; }

}  // namespace

// ---- Waiter -----------------------------------------------------------------------------------

Waiter::~Waiter() {
  if (timerfd_ >= 0) ::close(timerfd_);
  if (epfd_ >= 0) ::close(epfd_);
}

absl::Status Waiter::open(int socket_fd) {
  epfd_ = epoll_create1(EPOLL_CLOEXEC);
  timerfd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (epfd_ < 0 || timerfd_ < 0) return absl::UnavailableError(absl::StrCat("epoll/timerfd: ", std::strerror(errno)));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = socket_fd;
  if (epoll_ctl(epfd_, EPOLL_CTL_ADD, socket_fd, &ev) != 0)
    return absl::UnavailableError(absl::StrCat("epoll_ctl: ", std::strerror(errno)));
  ev.events = EPOLLIN | EPOLLET;  // each expiry is one edge; the count is never read
  ev.data.fd = timerfd_;
  if (epoll_ctl(epfd_, EPOLL_CTL_ADD, timerfd_, &ev) != 0)
    return absl::UnavailableError(absl::StrCat("epoll_ctl: ", std::strerror(errno)));
  return absl::OkStatus();
}

void Waiter::arm(std::int64_t deadline_ns, std::int64_t now_ns) noexcept {
  if (armed_ns_ > now_ns && armed_ns_ <= deadline_ns) return;  // fires in time (maybe early: harmless)
  if (deadline_ns == INT64_MAX) return;                        // nothing to wake up for but data
  itimerspec t{};
  const std::int64_t rel = std::max<std::int64_t>(deadline_ns - now_ns, 1'000);
  t.it_value.tv_sec = rel / 1'000'000'000;
  t.it_value.tv_nsec = rel % 1'000'000'000;
  (void)timerfd_settime(timerfd_, 0, &t, nullptr);
  armed_ns_ = now_ns + rel;
}

// ---- publisher ----------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<UdpTxEndpoint>> UdpTxEndpoint::open(const TransportEnv& env, const EndpointSpec& spec,
                                                                   UdpPollerSource* source) {
  const core::Config& cfg = *env.config;
  const core::UdpConfig& u = cfg.udp;
  auto ch = resolve_channel(cfg, spec.stream);
  if (!ch.ok()) return ch.status();
  auto sock = open_tx_socket(cfg, *ch);
  if (!sock.ok()) return sock.status();
  std::unique_ptr<UdpTxEndpoint> ep(new UdpTxEndpoint());
  ep->core_ = std::make_unique<TxCore>();
  TxCore& t = *ep->core_;
  t.ch = *ch;
  t.sock = *sock;
  ep->source_ = source;
  ep->stream_id_ = spec.stream_id;
  ep->direct_.claim = &UdpTxEndpoint::direct_claim;
  ep->direct_.commit = &UdpTxEndpoint::direct_commit;
  ep->session_id_ = static_cast<std::uint32_t>(random_u64() | 1);
  reliability::SenderOptions so;
  so.log.capacity = u.retransmit_buffer;
  so.log.max_datagram = u.mtu - 28;
  so.log.stream_id = spec.stream_id;
  so.log.session_id = ep->session_id_;
  so.heartbeat_interval_ns = us(u.heartbeat_interval_us);
  so.tail_heartbeat_ns = std::min<std::int64_t>(1'000'000, so.heartbeat_interval_ns);
  so.receiver_timeout_ns = ms(u.session_timeout_ms);
  so.retransmit_linger_ns = us(u.retransmit_linger_us);
  so.max_datagrams_per_call = std::max<std::uint32_t>(u.tx_batch, 64);
  so.coalesce_ns = us(u.coalesce_us);
  so.nak_max_range = u.nak_max_range;
  so.repair_rate = u.repair_rate;
  so.repair_burst = u.repair_burst;
  so.repair_rate_total = u.repair_rate_total;
  so.repair_burst_total = 4 * u.repair_burst;
  if (absl::Status s = t.sender.init(so); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(cfg.source, ": udp.retransmit_buffer: ", s.message()));
  }
  t.tx_loss = u.fault_tx_loss;
  t.tx_faults = FaultInjector(reliability::FaultOptions{u.fault_tx_loss, 0, 0, 1, u.fault_seed});
  ep->pool_ = env.pool;
  ep->max_frame_ = t.sender.log().max_frame();
  t.tx_batch = u.tx_batch;
  ep->linger_ns_ = ms(u.linger_ms);
  ep->done_cap_ = env.pool != nullptr ? env.pool->slots() : 4096;
  ep->done_.reset(new std::uint32_t[ep->done_cap_]);
  if (spec.send_log != nullptr && core::udp_kernel_timestamps(cfg, spec.stream)) {
    // A traced stream with udp.kernel_timestamps: its traced datagrams ask for the kernel's TX
    // timestamp. Opt-in like the RX stamps: the kernel's TX timestamp path costs ~1 us per
    // stamped send on this VM (docs/BENCHMARKS.md), far more than tracing's clock reads.
    enable_tx_timestamps(t.sock);
    t.tx_stamps = t.sock.kernel_timestamps;
    t.send_log = spec.send_log;
    t.stamps.init(t.tx_batch);
  }
  t.msgs.reset(new ::mmsghdr[t.tx_batch]());
  t.iov.reset(new iovec[t.tx_batch]());
  for (std::uint32_t i = 0; i < t.tx_batch; ++i) {
    msghdr& h = t.msgs[i].msg_hdr;
    h.msg_name = t.sock.connected ? nullptr : &t.ch.dest;
    h.msg_namelen = t.sock.connected ? 0 : sizeof t.ch.dest;
    h.msg_iov = &t.iov[i];
    h.msg_iovlen = 1;
  }
  if (source == nullptr) {
    if (absl::Status s = ep->waiter_.open(t.sock.fd); !s.ok()) return s;
  }
  if (env.counters != nullptr) {
    const std::string scope = absl::StrFormat("udp pub stream %u session %08x", spec.stream_id, ep->session_id_);
    core::CountersFile& f = *env.counters;
    TxCore::Counters& c = t.c;
    c.proto.allocate(f, scope, spec.stream_id);
    c.send_blocked = f.allocate(scope, "send_blocked", spec.stream_id);
    c.send_errors = f.allocate(scope, "send_errors", spec.stream_id);
    c.fault_dropped = f.allocate(scope, "fault_tx_dropped", spec.stream_id);
    if (t.tx_stamps) {
      c.tx_stamps = f.allocate(scope, "tx_timestamps", spec.stream_id);
      c.tx_stamps_expired = f.allocate(scope, "tx_timestamps_expired", spec.stream_id);
      c.tx_stamps_skipped = f.allocate(scope, "tx_timestamps_skipped", spec.stream_id);
      c.tx_stamp_errors = f.allocate(scope, "tx_timestamp_errors", spec.stream_id);
      c.tx_stamp_resyncs = f.allocate(scope, "tx_timestamp_resyncs", spec.stream_id);
    }
  }
  // No heartbeat here: the session is announced by its owner's first service (inline: the first
  // offer() or service(); poller mode: the poller, once it attached the endpoint). Announced at
  // open, it would then stay silent for as long as the owner is busy elsewhere - opening the
  // application's other streams (each maps and pre-touches its retransmit buffer), say - and a
  // subscriber that joined would time it out (docs/PROTOCOL.md, section 2).
  return ep;
}

UdpTxEndpoint::~UdpTxEndpoint() { close_st(); }

TxCore::~TxCore() {
  if (sock.fd >= 0) ::close(sock.fd);
}

std::uint32_t TxCore::send_datagrams(std::span<const DatagramSink::Datagram> d) noexcept {
  if (__builtin_expect(sock.fd < 0, 0)) return static_cast<std::uint32_t>(d.size());
  if (d.size() == 1 && !tx_stamps && !(tx_loss > 0)) {
    // One datagram, no timestamp request, no fault injection (a latency-bound publisher, a
    // heartbeat): straight to sendto(), as the loop below would, without its bookkeeping.
    if (::sendto(sock.fd, d[0].data, d[0].bytes, 0, static_cast<const sockaddr*>(msgs[0].msg_hdr.msg_name),
                 msgs[0].msg_hdr.msg_namelen) >= 0) {
      return 1;
    }
    return send_failure_is_transient() ? 0 : 1;
  }
  std::uint32_t total = 0;
  std::uint32_t idx[1024];
  while (total < d.size()) {
    const std::uint32_t k = std::min<std::uint32_t>(static_cast<std::uint32_t>(d.size()) - total, tx_batch);
    std::uint32_t m = 0;
    bool stamp_any = false;
    if (__builtin_expect(tx_stamps, 0)) stamps.begin_batch();
    for (std::uint32_t i = 0; i < k; ++i) {
      if (__builtin_expect(tx_loss > 0, 0) && tx_faults.decide() == FaultInjector::Action::kDrop) continue;
      iov[m].iov_base = const_cast<std::byte*>(d[total + i].data);
      iov[m].iov_len = d[total + i].bytes;
      if (__builtin_expect(tx_stamps, 0)) {
        // Traced streams only: a first transmission of a traced frame carries the request.
        const bool want = stamps.prepare(m, d[total + i].data, d[total + i].bytes);
        msghdr& h = msgs[m].msg_hdr;
        h.msg_control = want ? const_cast<unsigned char*>(kTxStampRequest.buf) : nullptr;
        h.msg_controllen = want ? sizeof kTxStampRequest.buf : 0;
        stamp_any |= want;
      }
      idx[m++] = i;
    }
    if (__builtin_expect(stamp_any, 0)) stamps.sent_at(core::Clock::now_ns());
    std::uint32_t consumed = k;
    if (m > 0) {
      // One datagram (a latency-bound publisher, a heartbeat): send()/sendto() is a shorter
      // kernel path than sendmmsg; measurable on a ping-pong (bench/udp). With a timestamp
      // request, sendmsg (the cmsg).
      const int r = m == 1 ? ((stamp_any ? ::sendmsg(sock.fd, &msgs[0].msg_hdr, 0)
                                         : ::sendto(sock.fd, iov[0].iov_base, iov[0].iov_len, 0,
                                                    static_cast<const sockaddr*>(msgs[0].msg_hdr.msg_name),
                                                    msgs[0].msg_hdr.msg_namelen)) >= 0
                                  ? 1
                                  : -1)
                           : ::sendmmsg(sock.fd, msgs.get(), m, 0);
      if (__builtin_expect(tx_stamps, 0)) stamps.end_batch(r > 0 ? static_cast<std::uint32_t>(r) : 0);
      if (r < 0) {
        // Full: nothing went out (datagrams dropped by the fault injector before it did).
        if (send_failure_is_transient()) consumed = idx[0];
      } else if (static_cast<std::uint32_t>(r) < m) {
        consumed = idx[r];
      }
    }
    total += consumed;
    if (consumed < k) break;
  }
  return total;
}

bool TxCore::send_failure_is_transient() noexcept {
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) return true;
  ++send_errors;
  last_errno = errno;
  return false;
}

int TxCore::collect_tx_stamps() noexcept {
  if (!tx_stamps || sock.fd < 0) return 0;
  alignas(cmsghdr) unsigned char ctrl[kStampBatch][kStampControlBytes];
  ::mmsghdr m[kStampBatch];
  int got = 0;
  for (int round = 0; round < kStampRounds; ++round) {
    std::memset(m, 0, sizeof m);
    for (std::uint32_t i = 0; i < kStampBatch; ++i) {
      m[i].msg_hdr.msg_control = ctrl[i];
      m[i].msg_hdr.msg_controllen = kStampControlBytes;
    }
    const int r = ::recvmmsg(sock.fd, m, kStampBatch, MSG_ERRQUEUE | MSG_DONTWAIT, nullptr);
    if (r <= 0) break;                         // EAGAIN: empty
    if (got == 0) (void)stamp_clock.sample();  // once per collection: see RealtimeToClock
    for (int i = 0; i < r; ++i) {
      msghdr& h = m[i].msg_hdr;
      timespec ts{};
      bool have_ts = false;
      const sock_extended_err* ee = nullptr;
      sock_extended_err eebuf;
      for (cmsghdr* c = CMSG_FIRSTHDR(&h); c != nullptr; c = CMSG_NXTHDR(&h, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_TIMESTAMPING &&
            c->cmsg_len >= CMSG_LEN(sizeof(scm_timestamping))) {
          scm_timestamping t;
          std::memcpy(&t, CMSG_DATA(c), sizeof t);
          ts = t.ts[0];
          have_ts = ts.tv_sec != 0 || ts.tv_nsec != 0;
        } else if (c->cmsg_level == SOL_IP && c->cmsg_type == IP_RECVERR &&
                   c->cmsg_len >= CMSG_LEN(sizeof(sock_extended_err))) {
          std::memcpy(&eebuf, CMSG_DATA(c), sizeof eebuf);
          ee = &eebuf;
        }
      }
      // A TX software stamp: ENOMSG from the timestamping origin, SCM_TSTAMP_SND, a software
      // time. Anything else (another error, a truncated control block) is counted, not used.
      if ((h.msg_flags & MSG_CTRUNC) || ee == nullptr || ee->ee_errno != ENOMSG ||
          ee->ee_origin != SO_EE_ORIGIN_TIMESTAMPING || ee->ee_info != SCM_TSTAMP_SND || !have_ts) {
        stamps.on_not_a_stamp();
        continue;
      }
      stamps.on_stamp(ee->ee_data, stamp_clock.to_clock(ts), send_log);
    }
    got += r;
    if (r < static_cast<int>(kStampBatch)) break;
  }
  return got;
}

void TxCore::service_tx_stamps(std::int64_t now_ns) noexcept {
  if (!tx_stamps) return;
  stamps.expire(now_ns);
  if (stamps.needs_reset()) {
    // Drain what is left (stamps of expired requests) before the kernel's numbering restarts.
    (void)collect_tx_stamps();
    if (restart_tx_timestamp_ids(sock.fd)) {
      stamps.reset();
    } else {
      stamps.disable();  // keeps asking for nothing; counted as skipped
    }
  }
}

int TxCore::receive_control(std::int64_t now_ns) noexcept {
  if (sock.fd < 0) return 0;
  // A stamp on the error queue also makes the socket report EPOLLERR (level-triggered in the
  // epoll sets): read them whenever the socket is looked at.
  if (__builtin_expect(tx_stamps, 0)) (void)collect_tx_stamps();
  alignas(8) std::byte bufs[kControlBatch][kControlBufSize];
  // Usually there is nothing (a look every kControlPollNs while data flows): one recvfrom()
  // answers that on a shorter kernel path than recvmmsg, with none of the batch's set-up.
  // Only when it found a message do the batched reads follow.
  const ssize_t first = ::recvfrom(sock.fd, bufs[0], kControlBufSize, MSG_DONTWAIT, nullptr, nullptr);
  if (first < 0) return 0;  // EAGAIN: nothing queued (other errors: the next look retries)
  sender.on_control(bufs[0], static_cast<std::uint32_t>(first), now_ns);
  ::mmsghdr m[kControlBatch] = {};
  iovec v[kControlBatch];
  int work = 1;
  for (int round = 0; round < 4; ++round) {
    for (std::uint32_t i = 0; i < kControlBatch; ++i) {
      v[i] = {bufs[i], kControlBufSize};
      m[i].msg_hdr.msg_iov = &v[i];
      m[i].msg_hdr.msg_iovlen = 1;
    }
    const int r = ::recvmmsg(sock.fd, m, kControlBatch, MSG_DONTWAIT, nullptr);
    if (r <= 0) break;
    for (int i = 0; i < r; ++i) sender.on_control(bufs[i], m[i].msg_len, now_ns);
    work += r;
    if (r < static_cast<int>(kControlBatch)) break;
  }
  return work;
}

void UdpTxEndpoint::attach() noexcept {
  attached_ = true;
  source_->attach(this);
}

std::uint32_t UdpTxEndpoint::post_st(std::span<const TxDesc> frames) noexcept {
  if (__builtin_expect(!attached_ && source_ != nullptr, 0)) attach();
  std::uint32_t n = 0;
  if (__builtin_expect(closed_ && core_ == nullptr, 0)) {
    // Closed in poller mode (the socket lingers with the source): nothing more goes out.
    for (const TxDesc& d : frames) {
      if (done_n_ == done_cap_) break;
      done_[done_n_++] = d.slot;
      ++n;
    }
    return n;
  }
  TxCore& t = *core_;
  for (const TxDesc& d : frames) {
    if (__builtin_expect(done_n_ == done_cap_, 0)) break;
    if (__builtin_expect(d.length > max_frame_ || d.length < core::kFrameHeaderSize, 0)) {
      // Cannot be sent in one datagram (Publisher::max_payload() prevents this): drop it.
      done_[done_n_++] = d.slot;
      ++n;
      continue;
    }
    if (!t.sender.append(pool_->slot(d.slot), d.length)) break;  // back-pressure: socket cannot keep up
    done_[done_n_++] = d.slot;
    ++n;
  }
  const std::int64_t now = core::Clock::now_ns();
  t.sender.flush(t, now);
  // Traced datagrams just went out: their stamps are usually queued by the time sendmmsg
  // returns (the driver stamps as it transmits). Collected now, right behind the send - in the
  // shadow of the wire and the peer's turnaround - rather than at some later duty that may fall
  // in the middle of another message's path.
  if (__builtin_expect(t.tx_stamps_outstanding(), 0)) (void)t.collect_tx_stamps();
  // Inline mode: the publisher's own timers ride on its calls. Poller mode: the source's.
  if (__builtin_expect(source_ == nullptr && now >= next_service_ns_, 0)) housekeeping_st(now);
  return n;
}

ClaimResult UdpTxEndpoint::direct_claim(TxEndpoint* ep, std::uint32_t frame_length, std::int64_t, TxClaim* c) noexcept {
  std::byte* frame = static_cast<UdpTxEndpoint*>(ep)->claim_direct(frame_length);
  if (__builtin_expect(frame == nullptr, 0)) return ClaimResult::kRefused;
  c->frame = frame;
  c->frame_length = frame_length;
  c->aligned = static_cast<std::uint32_t>(core::align_up(frame_length, core::kFrameAlignment));
  return ClaimResult::kClaimed;
}

std::int64_t UdpTxEndpoint::direct_commit(TxEndpoint* ep, const TxClaim& c, std::uint16_t flags, std::int64_t now,
                                          bool /*deferred: each frame is sent as committed*/) noexcept {
  auto* const self = static_cast<UdpTxEndpoint*>(ep);
  auto* h = reinterpret_cast<core::FrameHeader*>(c.frame);
  h->frame_length = c.frame_length;
  h->magic = core::kFrameMagic;
  h->version = core::kFrameVersion;
  h->flags = flags;
  h->stream_id = self->stream_id_;
  h->session_id = 0;  // the sender owns sessions and sequences (set by commit)
  h->sequence = 0;
  h->timestamp_ns = now;
  self->commit_direct(c.frame_length, now);
  return 0;
}

void UdpTxEndpoint::commit_direct(std::uint32_t length, std::int64_t now_ns) noexcept {
  TxCore& t = *core_;
  t.sender.commit(length);
  // What post_st() does after its appends, with the offer's clock reading when it took one
  // (the frame's timestamp, a few instructions ago).
  const std::int64_t now = now_ns != 0 ? now_ns : core::Clock::now_ns();
  t.sender.flush(t, now);
  if (__builtin_expect(t.tx_stamps_outstanding(), 0)) (void)t.collect_tx_stamps();
  if (__builtin_expect(source_ == nullptr && now >= next_service_ns_, 0)) housekeeping_st(now);
}

std::uint32_t UdpTxEndpoint::reap_st(std::span<std::uint32_t> freed) noexcept {
  if (__builtin_expect(!attached_ && source_ != nullptr, 0)) attach();
  // Frames were copied into the send log by post_st(): their slots are free already.
  const std::uint32_t n = std::min<std::uint32_t>(done_n_, static_cast<std::uint32_t>(freed.size()));
  done_n_ -= n;
  std::memcpy(freed.data(), done_.get() + done_n_, n * sizeof(std::uint32_t));
  // Stamps that were not queued yet when post_st() looked (a device that stamps later).
  if (__builtin_expect(core_ != nullptr && core_->tx_stamps_outstanding(), 0)) (void)core_->collect_tx_stamps();
  // Inline: look for NAKs now and then between the application's service() calls.
  if (source_ == nullptr && (++reaps_ & 63) == 0) {
    const std::int64_t now = core::Clock::now_ns();
    if (now >= next_service_ns_) housekeeping_st(now);
  }
  return n;
}

int UdpTxEndpoint::service(std::int64_t now_ns) noexcept {
  TxCore& t = *core_;
  const int work = t.sender.service(t, now_ns);
  t.service_tx_stamps(now_ns);
  next_service_ns_ = now_ns + kControlPollNs;
  connected_.store(t.sender.connected(), std::memory_order_relaxed);
  t.publish_counters();
  return work;
}

int UdpTxEndpoint::on_readable(std::int64_t now_ns) noexcept {
  TxCore& t = *core_;
  const int got = t.receive_control(now_ns);
  if (got == 0) return 0;
  // Repairs the NAKs asked for at once, and notices new subscribers (connected()).
  return got + service(now_ns);
}

int UdpTxEndpoint::housekeeping_st(std::int64_t now_ns) noexcept {
  if (source_ != nullptr) {
    // Poller mode: the source runs the timers; attach in case this is the first call.
    if (!attached_ && !closed_) attach();
    return 0;
  }
  if (core_ == nullptr || core_->sock.fd < 0) return 0;
  // Inline: Publisher::service() collects the TX stamps still outstanding.
  if (__builtin_expect(core_->tx_stamps_outstanding(), 0)) (void)core_->collect_tx_stamps();
  // Publisher::service() may call this in a tight idle loop: the recvmmsg for control messages
  // runs at most every kControlPollNs unless a protocol deadline is due.
  if (now_ns < next_service_ns_ && core_->sender.next_deadline(now_ns) > now_ns) return 0;
  const int work = core_->receive_control(now_ns);
  return work + service(now_ns);
}

bool UdpTxEndpoint::try_arm_st() noexcept {
  if (source_ != nullptr || core_ == nullptr) return false;  // poller mode: the source arms
  // Stamps queued on the error queue would keep the socket reporting EPOLLERR: read them now;
  // those queued later wake the waiter, and the next call collects them.
  if (core_->tx_stamps) (void)core_->collect_tx_stamps();
  const std::int64_t now = core::Clock::now_ns();
  const std::int64_t deadline = core_->sender.next_deadline(now);
  if (deadline <= now) return false;
  waiter_.arm(deadline, now);
  return true;  // a NAK already queued keeps the (level-triggered) socket readable
}

void UdpTxEndpoint::close_st() noexcept {
  if (closed_ || core_ == nullptr || core_->sock.fd < 0) return;
  closed_ = true;
  TxCore& t = *core_;
  std::int64_t now = core::Clock::now_ns();
  t.sender.service(t, now);
  t.sender.send_end_of_stream(t, now);
  connected_.store(false, std::memory_order_relaxed);
  const bool linger = linger_ns_ > 0 && t.sender.receivers() > 0 && !t.sender.all_caught_up();
  if (source_ != nullptr) {
    // Poller mode: never block the poller (it drives every other stream). The source keeps
    // the socket and the sender, serves NAKs and waits for the end confirmations in its
    // housekeeping, then closes the socket; this endpoint may be destroyed right away.
    if (attached_) source_->detach(this);
    attached_ = false;
    t.send_log = nullptr;  // the publisher (and its log) may go before the linger ends
    if (linger) {
      source_->linger(this, std::move(core_), now + linger_ns_, now);
    } else {
      t.publish_counters();
      core_.reset();  // closes the socket
    }
    return;
  }
  if (linger) {
    // Inline: the application's thread closes, so it lingers here. Keep repairing until every
    // subscriber we know of confirmed the end (or the linger time is up): a publisher that
    // exits right after its last offer() must not strand the tail.
    const std::int64_t deadline = now + linger_ns_;
    std::int64_t last_end = now;
    while (now < deadline && !t.sender.all_caught_up()) {
      pollfd p{t.sock.fd, POLLIN, 0};
      (void)::poll(&p, 1, 1);
      now = core::Clock::now_ns();
      t.receive_control(now);
      t.sender.service(t, now);
      if (now - last_end >= kEndResendNs) {
        t.sender.send_end_of_stream(t, now);
        last_end = now;
      }
    }
    t.sender.send_end_of_stream(t, now);
  }
  t.publish_counters();
  ::close(t.sock.fd);
  t.sock.fd = -1;
}

void TxCore::publish_counters() noexcept {
  if (!c.send_blocked.valid()) return;
  c.proto.publish(sender);
  c.send_blocked.set(sender.stats().send_blocked);
  c.send_errors.set(send_errors);
  c.fault_dropped.set(tx_faults.stats().dropped);
  if (c.tx_stamps.valid()) {
    const TxStampStats& ts = stamps.stats();
    c.tx_stamps.set(ts.stamped);
    c.tx_stamps_expired.set(ts.expired);
    c.tx_stamps_skipped.set(ts.skipped);
    c.tx_stamp_errors.set(ts.unknown + ts.stale + ts.not_stamps);
    c.tx_stamp_resyncs.set(ts.resyncs);
  }
}

std::string UdpTxEndpoint::describe() const {
  if (core_ == nullptr) {
    return absl::StrFormat("udp publisher stream %u session %08x: closed (lingering with its poller or done)",
                           stream_id_, session_id_);
  }
  const TxCore& t = *core_;
  const reliability::SenderStats& s = t.sender.stats();
  std::string out = absl::StrFormat(
      "udp publisher stream %u session %08x -> %s, max frame %u, sndbuf %d, retransmit buffer %u KiB "
      "(oldest %u, next %u), %u subscriber(s); sent %u datagrams, %u heartbeats, %u NAKs (%u suppressed, %u "
      "unavailable), %u frames repaired",
      stream_id_, session_id_, t.ch.text, max_frame_, t.sock.sndbuf, t.sender.log().capacity() >> 10,
      t.sender.log().oldest(), t.sender.log().next(), t.sender.receivers(), s.datagrams, s.heartbeats, s.naks,
      s.naks_suppressed, s.naks_unavailable, s.retransmit_frames);
  if (t.send_errors != 0) {
    absl::StrAppendFormat(&out, "; %u send errors (last: %s)", t.send_errors, std::strerror(t.last_errno));
  }
  if (t.tx_stamps) {
    const TxStampStats& ts = t.stamps.stats();
    absl::StrAppendFormat(&out,
                          "; TX timestamps: %u requested, %u stamped (%u frames), %u expired, %u skipped, %u unknown, "
                          "%u stale, %u not timestamps, %u resyncs",
                          ts.requested, ts.stamped, ts.frames, ts.expired, ts.skipped, ts.unknown, ts.stale,
                          ts.not_stamps, ts.resyncs);
  }
  if (!t.sock.notes.empty()) absl::StrAppend(&out, "; ", t.sock.notes);
  return out;
}
// ---- subscriber ---------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<UdpRxEndpoint>> UdpRxEndpoint::open(const TransportEnv& env, const EndpointSpec& spec,
                                                                   UdpPollerSource* source) {
  const core::Config& cfg = *env.config;
  const core::UdpConfig& u = cfg.udp;
  auto ch = resolve_channel(cfg, spec.stream);
  if (!ch.ok()) return ch.status();
  auto sock = open_rx_socket(cfg, *ch);
  if (!sock.ok()) return sock.status();
  std::unique_ptr<UdpRxEndpoint> ep(new UdpRxEndpoint());
  ep->ch_ = *ch;
  ep->sock_ = *sock;
  ep->source_ = source;
  ep->stream_id_ = spec.stream_id;
  ep->direct_.poll = &UdpRxEndpoint::direct_poll;
  ep->direct_.release = &UdpRxEndpoint::direct_release;
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
  reliability::ReceiverOptions ro;
  ro.window.window = u.reorder_window;
  ro.window.nak_delay_ns = us(u.nak_delay_us);
  ro.window.nak_retry_ns = us(u.nak_retry_us);
  ro.window.nak_retry_max_ns = us(u.nak_retry_max_us);
  ro.window.give_up_ns = ms(u.nak_give_up_ms);
  // Publishers heartbeat at least this often (same key on both sides): a forged claim is
  // refuted by a real heartbeat before it can be confirmed.
  ro.window.confirm_ns = 2 * us(u.heartbeat_interval_us);
  ro.stream_id = spec.stream_id;
  ro.max_sessions = u.max_sessions;
  ro.session_timeout_ns = ms(u.session_timeout_ms);
  ro.status_interval_ns = ms(u.status_interval_ms);
  ro.receiver_id = random_u64();
  ro.seed = ro.receiver_id;  // independent NAK jitter per subscriber
  if (absl::Status st = ep->receiver_.init(ro); !st.ok()) {
    return absl::ResourceExhaustedError(
        absl::StrCat(cfg.source, ": udp.reorder_window / udp.max_sessions: ", st.message()));
  }
  ep->faults_ =
      FaultInjector(reliability::FaultOptions{u.fault_loss, u.fault_duplicate, u.fault_reorder, 8, u.fault_seed});
  if (source == nullptr) {
    if (absl::Status s = ep->waiter_.open(ep->sock_.fd); !s.ok()) return s;
  }
  if (env.counters != nullptr) {
    const std::string scope = absl::StrFormat("udp sub stream %u", spec.stream_id);
    core::CountersFile& f = *env.counters;
    Counters& c = ep->c_;
    c.proto.allocate(f, scope, spec.stream_id);
    c.recv_errors = f.allocate(scope, "recv_errors", spec.stream_id);
    c.control_errors = f.allocate(scope, "control_send_errors", spec.stream_id);
    if (ep->sock_.kernel_timestamps) {
      c.rx_stamps = f.allocate(scope, "rx_timestamps", spec.stream_id);
      c.rx_stamps_missing = f.allocate(scope, "rx_timestamps_missing", spec.stream_id);
    }
  }
  // poll_direct()'s fixed conditions, checked once (none of them changes after open).
  ep->direct_ok_ = source == nullptr && !ep->faults_.enabled() && !ep->sock_.kernel_timestamps && ep->max_read_ > 0;
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
  if (got < k) receiver_.drained(now_ns);  // the socket is empty: everything sent before now was read
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
  std::uint32_t released[FaultInjector::kMaxDelayed];
  const FaultInjector::Action a = faults_.decide();
  const std::uint32_t nrel = faults_.tick(released);  // datagrams delayed behind earlier arrivals
  switch (a) {
    case FaultInjector::Action::kDrop:
      free_buffer(b);
      break;
    case FaultInjector::Action::kDuplicate:
      process(b, 2, now_ns);
      break;
    case FaultInjector::Action::kDelay:
      faults_.delay(b);
      break;
    case FaultInjector::Action::kPass:
      process(b, 1, now_ns);
      break;
  }
  for (std::uint32_t j = 0; j < nrel; ++j) process(released[j], 1, now_ns);
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
  if (n < max && receive(now, true) > 0) n += receiver_.poll(out.data() + n, max - n);
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
  int work = receiver_.service(now_ns, *this);
  if (faults_.delayed() > 0 && now_ns - last_rx_ns_ > 1'000'000) {
    // Traffic stopped: let the reordered datagrams in rather than hold them forever.
    std::uint32_t released[FaultInjector::kMaxDelayed];
    const std::uint32_t n = faults_.flush(released);
    for (std::uint32_t j = 0; j < n; ++j) process(released[j], 1, now_ns);
    work += static_cast<int>(n);
  }
  next_service_ns_ = std::min(receiver_.next_deadline(), now_ns + 1'000'000);
  if (faults_.delayed() > 0) next_service_ns_ = std::min(next_service_ns_, now_ns + 1'000'000);
  connected_.store(receiver_.connected(), std::memory_order_relaxed);
  publish_counters();
  return work;
}

bool UdpRxEndpoint::try_arm_st() noexcept {
  if (source_ != nullptr || closed_) return false;  // poller mode: the source arms
  if (has_queued()) return false;
  const std::int64_t now = core::Clock::now_ns();
  const std::int64_t deadline = receiver_.next_deadline();
  if (deadline <= now) return false;
  waiter_.arm(deadline, now);
  return true;  // a datagram already queued keeps the (level-triggered) socket readable
}

void UdpRxEndpoint::close_st() noexcept {
  if (closed_) return;
  closed_ = true;
  receiver_.close(*this);  // publishers stop waiting for us
  connected_.store(false, std::memory_order_relaxed);
  publish_counters();
  if (attached_) source_->detach(this);  // poller mode: on the poller thread (context.cc)
  attached_ = false;
}

void UdpRxEndpoint::publish_counters() noexcept {
  c_.proto.publish(receiver_, faults_, truncated_, evictions_);
  if (c_.recv_errors.valid()) {
    c_.recv_errors.set(recv_errors_);
    c_.control_errors.set(control_errors_);
  }
  if (c_.rx_stamps.valid()) {
    c_.rx_stamps.set(rx_stamps_);
    c_.rx_stamps_missing.set(rx_stamps_missing_);
  }
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
  if (!sock_.notes.empty()) absl::StrAppend(&out, "; ", sock_.notes);
  return out;
}

// ---- the poller's source ------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<UdpPollerSource>> UdpPollerSource::create(int poller, core::CountersFile* counters) {
  std::unique_ptr<UdpPollerSource> s(new UdpPollerSource());
  s->epfd_ = epoll_create1(EPOLL_CLOEXEC);
  s->timerfd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (s->epfd_ < 0 || s->timerfd_ < 0) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "udp: poller %d: cannot create its epoll set or timerfd: %s (raise the open-files limit, ulimit -n)", poller,
        std::strerror(errno)));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;  // level-triggered: read (or re-armed, which resets it) once it fired
  ev.data.ptr = nullptr;
  if (epoll_ctl(s->epfd_, EPOLL_CTL_ADD, s->timerfd_, &ev) != 0) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("udp: poller %d: epoll_ctl(timerfd): %s", poller, std::strerror(errno)));
  }
  if (counters != nullptr) {
    const std::string scope = absl::StrFormat("udp poller %d", poller);
    s->c_epoll_waits_ = counters->allocate(scope, "epoll_waits");
    s->c_lingers_ = counters->allocate(scope, "lingering_closes");
    s->c_linger_timeouts_ = counters->allocate(scope, "linger_timeouts");
    s->c_arm_refused_ = counters->allocate(scope, "arm_refused");
  }
  return s;
}

UdpPollerSource::~UdpPollerSource() {
  members_.clear();  // lingering sockets close with their TxCore
  if (timerfd_ >= 0) ::close(timerfd_);
  if (epfd_ >= 0) ::close(epfd_);
}

void UdpPollerSource::recount() noexcept {
  nlinger_ = 0;
  std::uint32_t nrx = 0;
  UdpRxEndpoint* rx = nullptr;
  for (const auto& m : members_) {
    if (m->linger != nullptr) ++nlinger_;
    if (m->rx != nullptr) {
      ++nrx;
      rx = m->rx;
    }
  }
  // One subscriber: read its socket directly every cycle (no epoll_wait), as an inline
  // endpoint does; publishers' control sockets (and the timerfd) are swept every kSweepNs.
  // Several: one epoll_wait round per cycle finds the ready ones.
  single_rx_ = nrx == 1 ? rx : nullptr;
}

void UdpPollerSource::add(std::unique_ptr<Member> m) noexcept {
  epoll_event ev{};
  ev.events = EPOLLIN;  // level-triggered: see try_arm()
  ev.data.ptr = m.get();
  if (epoll_ctl(epfd_, EPOLL_CTL_ADD, m->fd, &ev) != 0) {
    // Cannot happen for a valid socket short of ENOMEM; the member is still swept through its
    // own reads in housekeeping (rx: poll on each sweep), but cannot wake a sleeping poller:
    // say so by never letting it sleep.
    m->fd = -m->fd - 2;  // marks "not in the set"
  }
  members_.push_back(std::move(m));
  recount();
  next_sweep_ns_ = 0;
}

void UdpPollerSource::attach(UdpRxEndpoint* ep) noexcept {
  auto m = std::make_unique<Member>();
  m->rx = ep;
  m->fd = ep->sock_.fd;
  add(std::move(m));
}

void UdpPollerSource::attach(UdpTxEndpoint* ep) noexcept {
  auto m = std::make_unique<Member>();
  m->tx = ep;
  m->fd = ep->core_->sock.fd;
  add(std::move(m));
}

void UdpPollerSource::remove_at(std::size_t i) noexcept {
  Member& m = *members_[i];
  if (m.fd >= 0) (void)epoll_ctl(epfd_, EPOLL_CTL_DEL, m.fd, nullptr);
  members_.erase(members_.begin() + static_cast<std::ptrdiff_t>(i));
  recount();
}

void UdpPollerSource::detach(const void* ep) noexcept {
  for (std::size_t i = 0; i < members_.size(); ++i) {
    if (members_[i]->rx == ep || members_[i]->tx == ep) {
      remove_at(i);
      return;
    }
  }
}

void UdpPollerSource::linger(const UdpTxEndpoint* ep, std::unique_ptr<TxCore> core, std::int64_t deadline_ns,
                             std::int64_t now_ns) noexcept {
  (void)ep;
  auto m = std::make_unique<Member>();
  m->fd = core->sock.fd;
  m->linger = std::move(core);
  m->linger_deadline_ns = deadline_ns;
  m->last_end_ns = now_ns;
  ++lingers_;
  if (c_lingers_.valid()) c_lingers_.set(lingers_);
  add(std::move(m));
}

bool UdpPollerSource::linger_step(Member& m, std::int64_t now_ns) noexcept {
  TxCore& t = *m.linger;
  t.sender.service(t, now_ns);
  const bool confirmed = t.sender.all_caught_up();
  if (!confirmed && now_ns < m.linger_deadline_ns) {
    if (now_ns - m.last_end_ns >= kEndResendNs) {
      t.sender.send_end_of_stream(t, now_ns);
      m.last_end_ns = now_ns;
    }
    return false;
  }
  t.sender.send_end_of_stream(t, now_ns);
  if (!confirmed) {
    ++linger_timeouts_;
    if (c_linger_timeouts_.valid()) c_linger_timeouts_.set(linger_timeouts_);
  }
  t.publish_counters();
  return true;
}

int UdpPollerSource::dispatch(Member* m, std::int64_t now_ns) noexcept {
  if (m == nullptr) {
    // The timerfd fired: consume the expiry (else the level-triggered set stays readable). The
    // deadline it stood for is served by progress() (service_ns_ is due).
    std::uint64_t ticks;
    (void)!::read(timerfd_, &ticks, sizeof ticks);
    timer_ns_ = INT64_MAX;
    return 0;
  }
  if (m->rx != nullptr) return static_cast<int>(m->rx->receive(now_ns));
  if (m->tx != nullptr) return m->tx->on_readable(now_ns);
  // Lingering: NAKs and end confirmations; the next housekeeping() ends the linger.
  const int got = m->linger->receive_control(now_ns);
  if (got > 0) m->linger->sender.service(*m->linger, now_ns);
  return got;
}

int UdpPollerSource::sweep(std::int64_t now_ns, bool* complete) noexcept {
  constexpr int kMaxEvents = 64;
  epoll_event evs[kMaxEvents];
  const int n = epoll_wait(epfd_, evs, kMaxEvents, 0);
  ++epoll_waits_;
  // Every ready socket was reported (level-triggered): the others were empty at that moment.
  if (complete != nullptr) *complete = n >= 0 && n < kMaxEvents;
  int work = 0;
  for (int i = 0; i < n; ++i) {
    auto* m = static_cast<Member*>(evs[i].data.ptr);
    if (m != nullptr) m->ready_sweep = epoll_waits_;
    work += dispatch(m, now_ns);
  }
  return work;
}

int UdpPollerSource::progress(std::int64_t now_ns) noexcept {
  if (members_.empty()) return 0;
  if (__builtin_expect(now_ns >= service_ns_, 0)) {
    next_sweep_ns_ = now_ns + kSweepNs;
    return housekeeping(now_ns);  // one sweep (it reads the timerfd) + every member's timers
  }
  if (single_rx_ != nullptr && now_ns < next_sweep_ns_) return static_cast<int>(single_rx_->receive(now_ns));
  // Several subscriber sockets (or a sweep is due): one epoll_wait round for all of them.
  int work = sweep(now_ns);
  if (now_ns >= next_sweep_ns_) {
    // Publishers' own deadlines between the poller's 1 ms timers (repairs, coalesced tails).
    for (const auto& m : members_) {
      if (m->tx != nullptr && m->tx->core_->sender.next_deadline(now_ns) <= now_ns) work += m->tx->service(now_ns);
    }
    next_sweep_ns_ = now_ns + kSweepNs;
  }
  if (c_epoll_waits_.valid()) c_epoll_waits_.set(epoll_waits_);
  return work;
}

int UdpPollerSource::housekeeping(std::int64_t now_ns) noexcept {
  service_ns_ = INT64_MAX;  // served now; the next try_arm() sets it again
  last_service_ns_ = now_ns;
  if (members_.empty()) return 0;
  bool complete = false;
  int work = sweep(now_ns, &complete);  // also consumes a fired timerfd
  for (std::size_t i = 0; i < members_.size(); ++i) {
    Member& m = *members_[i];
    if (m.rx != nullptr) {
      if (m.fd < -1) {
        work += static_cast<int>(m.rx->receive(now_ns));  // not in the epoll set
      } else if (complete && m.ready_sweep != epoll_waits_) {
        // Its socket was empty: what it read is all its publishers sent (session time-outs
        // count silence in read traffic only, ReliableReceiver::drained). A readable one was
        // read by the sweep, which says so itself when it emptied the socket.
        m.rx->receiver_.drained(now_ns);
      }
      work += m.rx->service(now_ns);
    } else if (m.tx != nullptr) {
      if (m.fd < -1) work += m.tx->on_readable(now_ns);
      work += m.tx->service(now_ns);
    } else if (linger_step(m, now_ns)) {
      remove_at(i--);  // closes the socket
      ++work;
    }
  }
  if (c_epoll_waits_.valid()) c_epoll_waits_.set(epoll_waits_);
  return work;
}

void UdpPollerSource::arm_timer(std::int64_t deadline_ns, std::int64_t now_ns) noexcept {
  if (timer_ns_ > now_ns && timer_ns_ <= deadline_ns) return;  // fires in time (maybe early: harmless)
  itimerspec t{};                                              // all zero: disarms, and resets an expiry nobody read
  if (deadline_ns != INT64_MAX) {
    const std::int64_t rel = std::max<std::int64_t>(deadline_ns - now_ns, 1'000);
    t.it_value.tv_sec = rel / 1'000'000'000;
    t.it_value.tv_nsec = rel % 1'000'000'000;
    timer_ns_ = now_ns + rel;
  } else {
    if (timer_ns_ == INT64_MAX) return;
    timer_ns_ = INT64_MAX;
  }
  (void)timerfd_settime(timerfd_, 0, &t, nullptr);  // re-arming also clears a pending expiry
}

// Runs after the poller announced its sleep. Data in the sockets needs no re-check: they are
// level-triggered in our set (and our set in the poller's), so a datagram that arrived before,
// during or after this call makes notify_fd() readable. What epoll cannot see is what is
// already in user space, and the protocol's own deadlines.
bool UdpPollerSource::try_arm() noexcept {
  if (members_.empty()) {
    arm_timer(INT64_MAX, 0);
    return true;
  }
  const std::int64_t now = core::Clock::now_ns();
  std::int64_t deadline = INT64_MAX;
  bool ok = true;
  for (const auto& mp : members_) {
    const Member& m = *mp;
    if (m.fd < -1) ok = false;  // not in the epoll set: cannot wake us
    if (m.rx != nullptr) {
      if (m.rx->has_queued()) ok = false;
      deadline = std::min(deadline, m.rx->receiver_.next_deadline());
    } else if (m.tx != nullptr) {
      deadline = std::min(deadline, m.tx->core_->sender.next_deadline(now));
    } else {
      deadline =
          std::min({deadline, m.linger_deadline_ns, m.last_end_ns + kEndResendNs, m.linger->sender.next_deadline(now)});
    }
    if (!ok) break;
  }
  if (!ok || deadline <= now) {
    // The next progress() serves it - at most every kMinServiceNs, should it stay due (a repair
    // waiting for rate tokens, a socket that would block).
    if (deadline <= now) service_ns_ = std::max(deadline, last_service_ns_ + kMinServiceNs);
    if (c_arm_refused_.valid()) c_arm_refused_.add();
    return false;
  }
  arm_timer(deadline, now);
  service_ns_ = timer_ns_;
  return true;
}

void UdpPollerSource::finish_lingers() noexcept {
  while (nlinger_ > 0) {
    pollfd p{epfd_, POLLIN, 0};
    (void)::poll(&p, 1, 1);
    const std::int64_t now = core::Clock::now_ns();
    (void)sweep(now);
    for (std::size_t i = 0; i < members_.size(); ++i) {
      if (members_[i]->linger != nullptr && linger_step(*members_[i], now)) remove_at(i--);
    }
  }
}

// ---- transport ----------------------------------------------------------------------------------

std::uint32_t UdpRxEndpoint::direct_poll(RxEndpoint* ep, std::uint32_t max, FrameView* out, bool* slow) noexcept {
  return static_cast<UdpRxEndpoint*>(ep)->peek_direct(
      max,
      [&out](const core::FrameHeader* f, std::uint32_t len) {
        *out++ = FrameView{f, len, 0};
      },
      slow);
}

namespace {
// A number from /proc/sys (net.core.rmem_max), or -1.
long long read_sysctl(const char* path) {
  std::FILE* f = std::fopen(path, "r");
  if (f == nullptr) return -1;
  long long v = -1;
  if (std::fscanf(f, "%lld", &v) != 1) v = -1;
  std::fclose(f);
  return v;
}
}  // namespace

std::string UdpTransport::describe() const {
  const core::UdpConfig& u = env_.config->udp;
  std::string rcvbuf = absl::StrCat("socket_rcvbuf ", core::format_size(u.socket_rcvbuf));
  // The kernel silently caps SO_RCVBUF at net.core.rmem_max: say what a socket really gets.
  if (const long long max = read_sysctl("/proc/sys/net/core/rmem_max");
      max >= 0 && static_cast<std::uint64_t>(max) < u.socket_rcvbuf) {
    absl::StrAppend(&rcvbuf, " asked, effective ", core::format_size(static_cast<std::uint64_t>(max)),
                    " (capped by net.core.rmem_max; raise it, see pollux-doctor)");
  } else if (max >= 0) {
    absl::StrAppend(&rcvbuf, " (effective: net.core.rmem_max = ", core::format_size(static_cast<std::uint64_t>(max)),
                    " allows it)");
  }
  return absl::StrFormat("udp (every stream): %s:%u on interface %s, %s, socket_sndbuf %s", u.address, u.port,
                         u.interface.empty() ? "(the kernel's choice)" : u.interface, rcvbuf,
                         core::format_size(u.socket_sndbuf));
}

std::string UdpTransport::stream_route(std::uint32_t stream_id) const {
  const core::Config& c = *env_.config;
  const core::StreamConfig* sc = c.find_stream(stream_id);
  const std::string addr = sc != nullptr && !sc->udp_address.empty() ? sc->udp_address : c.udp.address;
  const std::uint32_t port = sc != nullptr && sc->udp_port != 0 ? sc->udp_port : c.udp.port;
  return absl::StrFormat("udp %s:%u", addr, port);
}

absl::StatusOr<core::ProgressSource*> UdpTransport::poller_source(int poller) {
  if (poller < 0) return absl::InvalidArgumentError("udp: poller_source: poller index must be >= 0");
  while (sources_.size() <= static_cast<std::size_t>(poller)) {
    auto s = UdpPollerSource::create(static_cast<int>(sources_.size()), env_.counters);
    if (!s.ok()) return s.status();
    sources_.push_back(std::move(*s));
  }
  return sources_[static_cast<std::size_t>(poller)].get();
}

absl::StatusOr<UdpPollerSource*> UdpTransport::source_for(const EndpointSpec& spec) {
  if (spec.poller < 0) return nullptr;
  if (static_cast<std::size_t>(spec.poller) >= sources_.size()) {
    // The context asks for every poller's source before it opens endpoints on it.
    return absl::FailedPreconditionError(
        absl::StrFormat("udp: stream %u: endpoint for poller %d, which has no progress source (poller_source() first)",
                        spec.stream_id, spec.poller));
  }
  return sources_[static_cast<std::size_t>(spec.poller)].get();
}

absl::StatusOr<std::unique_ptr<TxEndpoint>> UdpTransport::open_tx(const EndpointSpec& spec) {
  auto src = source_for(spec);
  if (!src.ok()) return src.status();
  auto ep = UdpTxEndpoint::open(env_, spec, *src);
  if (!ep.ok()) return ep.status();
  return std::unique_ptr<TxEndpoint>(std::move(*ep));
}

absl::StatusOr<std::unique_ptr<RxEndpoint>> UdpTransport::open_rx(const EndpointSpec& spec) {
  auto src = source_for(spec);
  if (!src.ok()) return src.status();
  auto ep = UdpRxEndpoint::open(env_, spec, *src);
  if (!ep.ok()) return ep.status();
  return std::unique_ptr<RxEndpoint>(std::move(*ep));
}

void UdpTransport::close() {
  // The pollers have stopped (ContextImpl stops them first): publishers that closed just before
  // still get their tail repaired and their end confirmed, as an inline close would.
  for (auto& s : sources_) s->finish_lingers();
  sources_.clear();
}

}  // namespace pollux::transport::udp
