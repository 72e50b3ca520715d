#include "transport/udp/tx_endpoint.h"

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

}  // namespace

absl::StatusOr<std::unique_ptr<UdpTxEndpoint>> UdpTxEndpoint::open(const TransportEnv& env, const EndpointSpec& spec,
                                                                   UdpPollerSource* source) {
  const core::Config& cfg = *env.config;
  const udp::UdpConfig& u = udp::config(cfg);
  auto opened = open_channel(cfg, spec.stream, /*rx=*/false);
  if (!opened.ok()) return opened.status();
  std::unique_ptr<UdpTxEndpoint> ep(new UdpTxEndpoint());
  ep->core_ = std::make_unique<TxCore>();
  TxCore& t = *ep->core_;
  t.ch = opened->ch;
  t.sock = std::move(opened->sock);
  ep->source_ = source;
  ep->stream_id_ = spec.stream_id;
  ep->direct_.claim = &UdpTxEndpoint::direct_claim;
  ep->direct_.commit = &UdpTxEndpoint::direct_commit;
  ep->session_id_ = static_cast<std::uint32_t>(core::random_id64() | 1);
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
  if (spec.send_log != nullptr && udp::kernel_timestamps(cfg, spec.stream)) {
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
  if (u.datapath == UdpDatapath::kXdp) {
    auto port = XdpPort::acquire(cfg, t.ch, source, env.counters);
    if (!port.ok()) return port.status();
    t.xdp = std::move(*port);
    sockaddr_in local{};
    socklen_t len = sizeof local;
    if (::getsockname(t.sock.fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) {
      return absl::InternalError(absl::StrCat("udp: getsockname on the publisher's socket: ", std::strerror(errno)));
    }
    t.xdp_src_port = local.sin_port;
    t.xdp_ttl = t.ch.multicast ? static_cast<std::uint8_t>(u.ttl) : 64;
    // Traced streams' TX timestamps come from the kernel's socket path, which the data skips:
    // their send completion is the hand-over to the AF_XDP port instead (stamp_xdp_sends).
    t.xdp_tx_stamps = t.send_log != nullptr;
    t.tx_stamps = false;
    t.service_xdp(core::Clock::now_ns());
  }
  if (source == nullptr) {
    if (absl::Status s = ep->waiter_.open(t.sock.fd); !s.ok()) return s;
  }
  if (env.counters != nullptr) {
    const std::string scope = absl::StrFormat("udp pub stream %u session %08x", spec.stream_id, ep->session_id_);
    t.c.allocate(*env.counters, scope, spec.stream_id, t.tx_stamps);
  }
  // No heartbeat here: the session is announced by its owner's first service (inline: the first
  // offer() or service(); poller mode: the poller, once it attached the endpoint). Announced at
  // open, it would then stay silent for as long as the owner is busy elsewhere - opening the
  // application's other streams (each maps and pre-touches its retransmit buffer), say - and a
  // subscriber that joined would time it out (docs/PROTOCOL.md, section 2).
  return ep;
}

UdpTxEndpoint::~UdpTxEndpoint() { close_st(); }

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
  // Session 0 and sequence 0: the sender owns sessions and sequences (commit sets them).
  core::write_frame_header(h, c.frame_length, flags, self->stream_id_, 0, now);
  h->sequence = 0;
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
  t.service_xdp(now_ns);
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
  // A NAK already queued makes the (level-triggered) socket readable as it is added.
  return waiter_.arm(deadline, now);
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
  if (t.xdp != nullptr) {
    absl::StrAppendFormat(&out, "; datapath %s, %s, %u datagrams through the socket before the MAC was known",
                          t.xdp->describe(), t.xdp_resolved ? "destination MAC resolved" : "destination MAC unresolved",
                          t.xdp_socket_sends);
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

}  // namespace pollux::transport::udp
