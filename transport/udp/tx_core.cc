#include "transport/udp/tx_core.h"

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
#include "transport/udp/udp_internal.h"

namespace pollux::transport::udp {
namespace {

using reliability::DatagramSink;
using reliability::FaultInjector;

// Control messages received per look, at most.
constexpr std::uint32_t kControlBatch = 8;
constexpr std::uint32_t kControlBufSize = 576;
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

}  // namespace

TxCore::~TxCore() {
  if (sock.fd >= 0) ::close(sock.fd);
}

std::uint32_t TxCore::send_datagrams(std::span<const DatagramSink::Datagram> d) noexcept {
  if (xdp != nullptr) {
    if (__builtin_expect(xdp_resolved, 1)) return send_xdp(d);
    const std::uint32_t n = send_socket(d);  // until the MAC is known: the kernel resolves it
    xdp_socket_sends += n;
    return n;
  }
  return send_socket(d);
}

std::uint32_t TxCore::send_xdp(std::span<const DatagramSink::Datagram> d) noexcept {
  if (__builtin_expect(!(tx_loss > 0), 1)) {
    // Read before the call: on veth the kick runs the peer's XDP program inside it, so a peer
    // polling its ring can see the frame before the call returns.
    const std::int64_t t = __builtin_expect(xdp_tx_stamps, 0) ? core::Clock::now_ns() : 0;
    const std::uint32_t n = xdp->send(ch.dest, xdp_mac, xdp_src_port, xdp_ttl, d);
    if (__builtin_expect(xdp_tx_stamps, 0)) stamp_xdp_sends(d.first(n), t);
    return n;
  }
  // Fault injection: the datagrams it drops count as sent; the rest go out one by one.
  std::uint32_t total = 0;
  for (; total < d.size(); ++total) {
    if (tx_faults.decide() == FaultInjector::Action::kDrop) continue;
    if (xdp->send(ch.dest, xdp_mac, xdp_src_port, xdp_ttl, d.subspan(total, 1)) == 0) break;
  }
  return total;
}

void TxCore::stamp_xdp_sends(std::span<const DatagramSink::Datagram> d, std::int64_t at_ns) noexcept {
  if (send_log == nullptr) return;
  for (const DatagramSink::Datagram& g : d) {
    reliability::FrameCursor cur(g.data, g.bytes);
    for (const core::FrameHeader* f = cur.next(); f != nullptr; f = cur.next()) {
      if (!(f->flags & core::kFlagTraced) || (f->flags & (core::kFlagHeartbeat | core::kFlagPadding))) continue;
      if (f->sequence <= xdp_stamp_hwm) continue;  // a repair
      send_log->record(f->sequence, at_ns);
      xdp_stamp_hwm = f->sequence;
    }
  }
}

void TxCore::service_xdp(std::int64_t now_ns) noexcept {
  if (xdp == nullptr || now_ns < xdp_next_resolve_ns) return;
  std::uint8_t mac[6];
  const bool ok = xdp->resolve(ch.dest, mac);
  if (ok) std::memcpy(xdp_mac, mac, 6);
  xdp_resolved = ok;
  // A multicast MAC never changes; a neighbour's may (a new host, a failover).
  xdp_next_resolve_ns = ch.multicast && ok ? INT64_MAX : now_ns + (ok ? 1'000'000'000 : 20'000'000);
}

std::uint32_t TxCore::send_socket(std::span<const DatagramSink::Datagram> d) noexcept {
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

void TxCore::publish_counters() noexcept {
  c.publish(*this);
  if (xdp != nullptr) xdp->publish_counters(core::Clock::now_ns());
}

void TxCore::Counters::publish(const TxCore& t) noexcept {
  if (!own.send_blocked.valid()) return;
  proto.publish(t.sender);
  POLLUX_COUNTER_PUBLISH(POLLUX_UDP_TX_COUNTERS, own);
  if (stamped.tx_stamps.valid()) {
    const TxStampStats& ts = t.stamps.stats();
    POLLUX_COUNTER_PUBLISH(POLLUX_UDP_TX_STAMP_COUNTERS, stamped);
  }
}

}  // namespace pollux::transport::udp
