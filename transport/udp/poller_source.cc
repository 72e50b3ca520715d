#include "transport/udp/poller_source.h"

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
#include "transport/udp/rx_endpoint.h"
#include "transport/udp/tx_endpoint.h"
#include "transport/udp/udp_internal.h"

namespace pollux::transport::udp {

absl::StatusOr<std::unique_ptr<UdpPollerSource>> UdpPollerSource::create(int poller, core::CountersFile* counters) {
  std::unique_ptr<UdpPollerSource> s(new UdpPollerSource());
  s->epfd_ = epoll_create1(EPOLL_CLOEXEC);
  const absl::Status timer = s->timer_.open();
  if (s->epfd_ < 0 || !timer.ok()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "udp: poller %d: cannot create its epoll set or timerfd: %s (raise the open-files limit, ulimit -n)", poller,
        std::strerror(errno)));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;  // level-triggered: read (or re-armed, which resets it) once it fired
  ev.data.ptr = nullptr;
  if (epoll_ctl(s->epfd_, EPOLL_CTL_ADD, s->timer_.fd(), &ev) != 0) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("udp: poller %d: epoll_ctl(timerfd): %s", poller, std::strerror(errno)));
  }
  if (counters != nullptr) {
    const std::string scope = absl::StrFormat("udp poller %d", poller);
    s->c_.allocate([&](std::string_view n) { return counters->allocate(scope, n); });
  }
  return s;
}

UdpPollerSource::~UdpPollerSource() {
  members_.clear();  // lingering sockets close with their TxCore
  if (epfd_ >= 0) ::close(epfd_);
}

void UdpPollerSource::recount() noexcept {
  nlinger_ = 0;
  std::uint32_t nrx = 0, nxdp = 0;
  UdpRxEndpoint* rx = nullptr;
  for (const auto& m : members_) {
    if (m->linger != nullptr) ++nlinger_;
    if (m->rx != nullptr) {
      ++nrx;
      rx = m->rx;
      if (m->rx->xdp_ != nullptr) ++nxdp;
    }
  }
  // One subscriber: read its socket directly every cycle (no epoll_wait), as an inline
  // endpoint does; publishers' control sockets (and the timerfd) are swept every kSweepNs.
  // Several: one epoll_wait round per cycle finds the ready ones. Subscribers that all receive
  // through AF_XDP ports: each port's ring is read directly every cycle (no syscall).
  single_rx_ = nrx == 1 ? rx : nullptr;
  xdp_rx_only_ = nrx > 1 && nxdp == nrx;
}

bool UdpPollerSource::Member::armed_only() const noexcept { return rx != nullptr && rx->xdp_ != nullptr && fd >= 0; }

void UdpPollerSource::add(std::unique_ptr<Member> m) noexcept {
  epoll_event ev{};
  ev.events = EPOLLIN;  // level-triggered: see try_arm()
  ev.data.ptr = m.get();
  if (m->fd == -1) {
    // An AF_XDP subscriber whose port another member registered: that one's readiness stands
    // for both (remove_at hands the registration over).
  } else if (m->armed_only()) {
    // Read directly every cycle; in the set only while armed (add_armed_only).
  } else if (epoll_ctl(epfd_, EPOLL_CTL_ADD, m->fd, &ev) != 0) {
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
  if (ep->xdp_ != nullptr) {
    // Data arrives in the port's ring (its fd is readable while the ring holds frames); the
    // socket only sends. One registration per port.
    m->fd = ep->xdp_->fd();
    for (const auto& o : members_) {
      if (o->rx != nullptr && o->rx->xdp_ == ep->xdp_ && o->fd >= 0) m->fd = -1;
    }
  }
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
  if (m.fd >= 0 && (!m.armed_only() || m.in_set)) (void)epoll_ctl(epfd_, EPOLL_CTL_DEL, m.fd, nullptr);
  std::unique_ptr<Member> gone = std::move(members_[i]);
  members_.erase(members_.begin() + static_cast<std::ptrdiff_t>(i));
  if (gone->fd >= 0 && gone->rx != nullptr && gone->rx->xdp_ != nullptr) {
    // Another subscriber of the same AF_XDP port takes its registration over.
    for (auto& o : members_) {
      if (o->rx != nullptr && o->rx->xdp_ == gone->rx->xdp_ && o->fd == -1) {
        std::unique_ptr<Member> heir = std::move(o);
        heir->fd = gone->fd;
        o = nullptr;
        members_.erase(std::find(members_.begin(), members_.end(), nullptr));
        add(std::move(heir));
        return;
      }
    }
  }
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
  if (c_.lingers.valid()) c_.lingers.set(lingers_);
  add(std::move(m));
}

bool UdpPollerSource::linger_step(Member& m, std::int64_t now_ns) noexcept {
  TxCore& t = *m.linger;
  t.service_xdp(now_ns);
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
    if (c_.linger_timeouts.valid()) c_.linger_timeouts.set(linger_timeouts_);
  }
  t.publish_counters();
  return true;
}

int UdpPollerSource::dispatch(Member* m, std::int64_t now_ns) noexcept {
  if (m == nullptr) {
    // The timerfd fired: consume the expiry (else the level-triggered set stays readable). The
    // deadline it stood for is served by progress() (service_ns_ is due).
    std::uint64_t ticks;
    (void)!::read(timer_.fd(), &ticks, sizeof ticks);
    timer_.fired();
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
  if (xdp_rx_only_ && now_ns < next_sweep_ns_) {
    // Every subscriber receives through an AF_XDP port: read each port's ring (through the
    // member that registered it), no epoll_wait.
    int work = 0;
    for (const auto& m : members_) {
      if (m->rx != nullptr && m->fd >= 0) work += static_cast<int>(m->rx->receive(now_ns));
    }
    return work;
  }
  // Several subscriber sockets (or a sweep is due): one epoll_wait round for all of them, and
  // the AF_XDP ports' rings, which are not in the set while polling.
  int work = sweep(now_ns);
  for (const auto& m : members_) {
    if (m->armed_only()) work += static_cast<int>(m->rx->receive(now_ns));
  }
  if (now_ns >= next_sweep_ns_) {
    // Publishers' own deadlines between the poller's 1 ms timers (repairs, coalesced tails).
    for (const auto& m : members_) {
      if (m->tx != nullptr && m->tx->core_->sender.next_deadline(now_ns) <= now_ns) work += m->tx->service(now_ns);
    }
    next_sweep_ns_ = now_ns + kSweepNs;
  }
  if (c_.epoll_waits.valid()) c_.epoll_waits.set(epoll_waits_);
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
      } else if (m.rx->xdp_ != nullptr) {
        // AF_XDP: read here (not in the set while polling); the port says when its ring emptied
        // (XdpPort::poll). A subscriber sharing another's port is read through that one.
        if (m.armed_only()) work += static_cast<int>(m.rx->receive(now_ns));
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
  if (c_.epoll_waits.valid()) c_.epoll_waits.set(epoll_waits_);
  return work;
}

// Runs after the poller announced its sleep. Data in the sockets needs no re-check: they are
// level-triggered in our set (and our set in the poller's), so a datagram that arrived before,
// during or after this call makes notify_fd() readable. What epoll cannot see is what is
// already in user space, and the protocol's own deadlines.
bool UdpPollerSource::try_arm() noexcept {
  if (members_.empty()) {
    timer_.arm(INT64_MAX, 0, /*disarm=*/true);
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
    if (c_.arm_refused.valid()) c_.arm_refused.add();
    return false;
  }
  if (!add_armed_only()) {
    if (c_.arm_refused.valid()) c_.arm_refused.add();
    return false;
  }
  timer_.arm(deadline, now, /*disarm=*/true);
  service_ns_ = timer_.armed_ns();
  return true;
}

bool UdpPollerSource::add_armed_only() noexcept {
  for (const auto& m : members_) {
    if (!m->armed_only() || m->in_set) continue;
    epoll_event ev{};
    ev.events = EPOLLIN;  // level-triggered: frames already in the ring make the set readable at once
    ev.data.ptr = m.get();
    if (epoll_ctl(epfd_, EPOLL_CTL_ADD, m->fd, &ev) != 0) {
      disarm();  // cannot wake us through this port: keep polling
      return false;
    }
    m->in_set = true;
  }
  return true;
}

void UdpPollerSource::disarm() noexcept {
  next_sweep_ns_ = 0;
  for (const auto& m : members_) {
    if (m->in_set) {
      (void)epoll_ctl(epfd_, EPOLL_CTL_DEL, m->fd, nullptr);
      m->in_set = false;
    }
  }
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

}  // namespace pollux::transport::udp
