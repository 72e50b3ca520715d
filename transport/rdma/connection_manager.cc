#include "transport/rdma/connection_manager.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/str_format.h"
#include "transport/rdma/qp.h"
#include "transport/rdma/rdma_endpoints.h"
#include "transport/rdma/rdma_transport.h"
#include "transport/rdma/verbs_errors.h"
#include "transport/rdma/wire.h"

namespace pollux::transport::rdma {
namespace {

constexpr std::int64_t kGraceNs = 100'000'000;  // 100 ms

std::int64_t mono_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string addr_text(const sockaddr* sa) {
  if (sa == nullptr || sa->sa_family != AF_INET) return "?";
  const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
  return absl::StrFormat("%s:%u", format_ipv4(ntohl(in->sin_addr.s_addr)), ntohs(in->sin_port));
}

// IB CM reject reasons rdma_cm reports in event->status for REJECTED.
std::string reject_text(int status) {
  switch (status) {
    case 8:
      return "nobody listens there (invalid service id: no Pollux subscriber context on that address/port)";
    case 28:
      return "rejected by the subscriber";
    case 1:
      return "no QP resources at the subscriber";
    default:
      return absl::StrFormat("rejected (IB CM reason %d)", status);
  }
}

}  // namespace

struct ConnectionManager::Event {
  rdma_cm_event_type type;
  rdma_cm_id* id;
  rdma_cm_id* listen_id;
  int status;
  std::uint8_t data[64];
  std::uint32_t data_len;
};

ConnectionManager::ConnectionManager(RdmaTransport& t) : t_(t) {
  core::CountersFile& f = t.counters();
  const std::string scope = absl::StrFormat("rdma cm %s", t.device().name());
  POLLUX_COUNTER_ALLOCATE(POLLUX_RDMA_CM_COUNTERS, *this, [&](std::string_view n) { return f.allocate(scope, n); });
}

ConnectionManager::~ConnectionManager() { stop(); }

absl::Status ConnectionManager::start() {
  ch_ = rdma_create_event_channel();
  if (ch_ == nullptr) {
    const int err = errno;
    return absl::UnavailableError(
        absl::StrFormat("rdma: rdma_create_event_channel: %s; is the rdma_ucm module loaded (`modprobe rdma_ucm`) and "
                        "/dev/infiniband/rdma_cm accessible?",
                        std::strerror(err)));
  }
  const int fl = fcntl(ch_->fd, F_GETFL);
  (void)fcntl(ch_->fd, F_SETFL, fl | O_NONBLOCK);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return absl::InternalError(absl::StrFormat("rdma: eventfd: %s", std::strerror(errno)));
  thread_ = std::thread([this] { run(); });
  return absl::OkStatus();
}

void ConnectionManager::wake() {
  if (wake_fd_ < 0) return;
  const std::uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
}

void ConnectionManager::stop() {
  if (thread_.joinable()) {
    stop_.store(true, std::memory_order_release);  // pairs with run()'s acquire
    wake();
    thread_.join();
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [c, due] : graveyard_) destroy(c);
  graveyard_.clear();
  for (auto& l : links_) {
    if (l->conn != nullptr) {
      Conn* c = l->conn;
      l->conn = nullptr;
      c->link = nullptr;
      if (!c->announced) destroy(c);
    }
  }
  links_.clear();
  std::vector<Conn*> passive;
  passive.swap(passive_);
  for (Conn* c : passive) {
    if (!c->announced) destroy(c);
  }
  if (listen_id_ != nullptr) {
    rdma_destroy_id(listen_id_);
    listen_id_ = nullptr;
  }
  if (ch_ != nullptr) {
    rdma_destroy_event_channel(ch_);
    ch_ = nullptr;
  }
  if (wake_fd_ >= 0) {
    ::close(wake_fd_);
    wake_fd_ = -1;
  }
}

void ConnectionManager::add_publisher(RdmaTxEndpoint* ep) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& p : t_.cfg().peers) {
    auto l = std::make_unique<PeerLink>();
    l->ep = ep;
    l->peer = p;
    (void)parse_ip_port(p, &l->ip, &l->port);  // validated by the config parser
    links_.push_back(std::move(l));
  }
  wake();
}

void ConnectionManager::remove_publisher(RdmaTxEndpoint* ep) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = links_.begin(); it != links_.end();) {
    PeerLink& l = **it;
    if (l.ep != ep) {
      ++it;
      continue;
    }
    if (l.conn != nullptr) {
      l.conn->link = nullptr;
      // Announced connections are the owner's to retire; attempts in progress die here.
      if (!l.conn->announced) destroy(l.conn);
    }
    it = links_.erase(it);
  }
}

absl::Status ConnectionManager::add_subscriber(RdmaRxEndpoint* ep) {
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status s = listen_locked(); !s.ok()) return s;
  if (!subs_.emplace(ep->stream_id(), ep).second) {
    return absl::AlreadyExistsError(absl::StrFormat(
        "rdma: stream %u already has an RC subscriber in this context; publishers connect to one receiving endpoint "
        "per stream and address (share its messages in the application, or use another context with another "
        "rdma.listen_port)",
        ep->stream_id()));
  }
  return absl::OkStatus();
}

void ConnectionManager::remove_subscriber(RdmaRxEndpoint* ep) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = subs_.find(ep->stream_id());
  if (it != subs_.end() && it->second == ep) subs_.erase(it);
}

void ConnectionManager::retire(Conn* c) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    c->retired = true;
    c->group->forget(c);  // no announcement may outlive the Conn
    if (c->link != nullptr && c->link->conn == c) {
      PeerLink& l = *c->link;
      l.conn = nullptr;
      l.next_try_ns = mono_ns() + static_cast<std::int64_t>(t_.cfg().reconnect_ms) * 1'000'000;
    }
    c->link = nullptr;
    graveyard_.emplace_back(c, mono_ns() + kGraceNs);
  }
  wake();
}

absl::Status ConnectionManager::listen_locked() {
  if (listen_id_ != nullptr) return absl::OkStatus();
  if (rdma_create_id(ch_, &listen_id_, nullptr, RDMA_PS_TCP) != 0) {
    listen_id_ = nullptr;
    return absl::UnavailableError(absl::StrFormat("rdma: rdma_create_id: %s", std::strerror(errno)));
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(t_.cfg().listen_port));
  a.sin_addr.s_addr = htonl(t_.device().ipv4());
  const std::string where = absl::StrFormat("%s:%u", format_ipv4(t_.device().ipv4()), t_.cfg().listen_port);
  auto fail = [&](absl::Status s) {
    rdma_destroy_id(listen_id_);
    listen_id_ = nullptr;
    return s;
  };
  if (rdma_bind_addr(listen_id_, reinterpret_cast<sockaddr*>(&a)) != 0) {
    const int err = errno;
    if (err == EADDRINUSE) {
      return fail(absl::AlreadyExistsError(absl::StrFormat(
          "rdma: rdma.listen_port: %s is already taken (another Pollux subscriber context on this host?); give each "
          "subscribing context its own rdma.listen_port",
          where)));
    }
    return fail(absl::UnavailableError(
        absl::StrFormat("rdma: cannot listen on %s (%s): that address must be configured on the netdev under %s", where,
                        std::strerror(err), t_.device().name())));
  }
  if (rdma_listen(listen_id_, 64) != 0) {
    return fail(absl::UnavailableError(absl::StrFormat("rdma: rdma_listen on %s: %s", where, std::strerror(errno))));
  }
  if (listen_id_->verbs != nullptr && listen_id_->verbs != t_.device().context()) {
    return fail(absl::FailedPreconditionError(
        absl::StrFormat("rdma: %s belongs to RDMA device %s, not rdma.device = %s", where,
                        ibv_get_device_name(listen_id_->verbs->device), t_.device().name())));
  }
  return absl::OkStatus();
}

absl::Status ConnectionManager::to_state(Conn* c, ibv_qp_state state, int min_rnr_timer) {
  ibv_qp_attr a{};
  int mask = 0;
  a.qp_state = state;
  if (rdma_init_qp_attr(c->id, &a, &mask) != 0) {
    return absl::InternalError(absl::StrFormat("rdma_init_qp_attr(state %d): %s", state, std::strerror(errno)));
  }
  if (min_rnr_timer >= 0) {
    a.min_rnr_timer = static_cast<std::uint8_t>(min_rnr_timer);
    mask |= IBV_QP_MIN_RNR_TIMER;
  }
  if (int rc = ibv_modify_qp(c->qp, &a, mask); rc != 0) {
    return absl::InternalError(
        absl::StrFormat("ibv_modify_qp(qp %u to state %d): %s", c->qp_num, state, std::strerror(rc)));
  }
  return absl::OkStatus();
}

void ConnectionManager::run() noexcept {
  while (!stop_.load(std::memory_order_acquire)) {
    int timeout_ms = 1000;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const std::int64_t now = mono_ns();
      for (auto& l : links_) {
        if (l->conn == nullptr) {
          timeout_ms = std::min<int>(
              timeout_ms, static_cast<int>(std::max<std::int64_t>(0, (l->next_try_ns - now) / 1'000'000 + 1)));
        }
      }
      for (auto& [c, due] : graveyard_) {
        timeout_ms =
            std::min<int>(timeout_ms, static_cast<int>(std::max<std::int64_t>(0, (due - now) / 1'000'000 + 1)));
      }
    }
    pollfd fds[2] = {{ch_->fd, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    (void)::poll(fds, 2, timeout_ms);
    if (fds[1].revents & POLLIN) {
      std::uint64_t v;
      (void)!read(wake_fd_, &v, sizeof v);
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (;;) {
      rdma_cm_event* e = nullptr;
      if (rdma_get_cm_event(ch_, &e) != 0) break;
      Event ev{};
      ev.type = e->event;
      ev.id = e->id;
      ev.listen_id = e->listen_id;
      ev.status = e->status;
      if (e->param.conn.private_data != nullptr) {
        ev.data_len = std::min<std::uint32_t>(e->param.conn.private_data_len, sizeof ev.data);
        std::memcpy(ev.data, e->param.conn.private_data, ev.data_len);
      }
      // Acknowledge before handling: handling may destroy the id, which waits for its acks.
      rdma_ack_cm_event(e);
      handle(ev);
    }
    const std::int64_t now = mono_ns();
    for (auto& l : links_) {
      if (l->conn == nullptr && now >= l->next_try_ns) connect(*l, now);
    }
    for (std::size_t i = 0; i < graveyard_.size();) {
      Conn* r = graveyard_[i].first;
      if (r->id != nullptr && r->established && !r->disconnected.load(std::memory_order_relaxed)) {
        // Tell the peer at once; only the destruction waits for the grace period.
        (void)rdma_disconnect(r->id);
        r->disconnected.store(true, std::memory_order_relaxed);
      }
      if (graveyard_[i].second > now) {
        ++i;
        continue;
      }
      Conn* c = graveyard_[i].first;
      graveyard_[i] = graveyard_.back();
      graveyard_.pop_back();
      destroy(c);
    }
  }
}

void ConnectionManager::connect(PeerLink& l, std::int64_t now) {
  Conn* c = new Conn();
  c->kind = Conn::Kind::kTx;
  c->owner = l.ep;
  c->group = l.ep->group();
  c->link = &l;
  c->peer = l.peer;
  c_attempts_.add();
  if (rdma_create_id(ch_, &c->id, c, RDMA_PS_TCP) != 0) {
    c->id = nullptr;
    l.conn = c;
    fail(l, absl::StrFormat("rdma_create_id: %s", std::strerror(errno)), now);
    return;
  }
  l.conn = c;
  sockaddr_in src{};
  src.sin_family = AF_INET;
  src.sin_addr.s_addr = htonl(t_.device().ipv4());  // leave through our device
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(l.port);
  dst.sin_addr.s_addr = htonl(l.ip);
  if (rdma_resolve_addr(c->id, reinterpret_cast<sockaddr*>(&src), reinterpret_cast<sockaddr*>(&dst),
                        static_cast<int>(t_.cfg().connect_timeout_ms)) != 0) {
    fail(l, absl::StrFormat("rdma_resolve_addr: %s", std::strerror(errno)), now);
  }
}

void ConnectionManager::fail(PeerLink& l, const std::string& why, std::int64_t now) {
  if (l.conn != nullptr) {
    Conn* c = l.conn;
    l.conn = nullptr;
    c->link = nullptr;
    if (!c->announced) destroy(c);
  }
  c_failures_.add();
  ++l.failures;
  l.next_try_ns = now + static_cast<std::int64_t>(t_.cfg().reconnect_ms) * 1'000'000;
  const std::string msg = absl::StrFormat("stream %u: cannot connect to subscriber %s via %s: %s", l.ep->stream_id(),
                                          l.peer, t_.device().name(), why);
  // One error log entry per distinct error, its count the attempts that failed so.
  t_.counters().error_log().recordf(absl::StatusCode::kUnavailable, "rdma: %s; retrying every %u ms", msg,
                                    t_.cfg().reconnect_ms);
  l.last_error = why;
  l.ep->set_status(msg);
}

void ConnectionManager::handle(const Event& ev) {
  if (ev.type == RDMA_CM_EVENT_CONNECT_REQUEST) {
    on_connect_request(ev);
    return;
  }
  if (ev.id == listen_id_ || ev.id == nullptr) {
    if (ev.type == RDMA_CM_EVENT_DEVICE_REMOVAL) {
      t_.counters().error_log().recordf(absl::StatusCode::kUnavailable,
                                        "rdma: %s was removed: subscribers on it stop receiving", t_.device().name());
    }
    return;
  }
  Conn* c = static_cast<Conn*>(ev.id->context);
  if (c == nullptr || c->retired) return;
  PeerLink* l = c->link;
  const std::int64_t now = mono_ns();
  switch (ev.type) {
    case RDMA_CM_EVENT_ADDR_RESOLVED: {
      if (l == nullptr) return;
      if (ev.id->verbs != t_.device().context()) {
        fail(*l,
             absl::StrFormat("the route to it leaves through RDMA device %s, not rdma.device = %s (fix the IP "
                             "routes or rdma.device)",
                             ev.id->verbs != nullptr ? ibv_get_device_name(ev.id->verbs->device) : "?",
                             t_.device().name()),
             now);
        return;
      }
      if (rdma_resolve_route(c->id, static_cast<int>(t_.cfg().connect_timeout_ms)) != 0) {
        fail(*l, absl::StrFormat("rdma_resolve_route: %s", std::strerror(errno)), now);
      }
      return;
    }
    case RDMA_CM_EVENT_ROUTE_RESOLVED: {
      if (l == nullptr) return;
      RdmaTxEndpoint* ep = l->ep;
      QpSpec spec;
      spec.type = IBV_QPT_RC;
      spec.group = ep->group();
      spec.publisher = true;
      spec.sq_depth = t_.cfg().send_queue_depth;
      spec.inline_bytes = t_.cfg().inline_threshold;
      if (absl::Status s = create_qp(t_.device(), spec, c); !s.ok()) {
        fail(*l, std::string(s.message()), now);
        return;
      }
      if (absl::Status s = to_state(c, IBV_QPS_INIT); !s.ok()) {
        fail(*l, std::string(s.message()), now);
        return;
      }
      const ConnectRequest req = make_request(ep->stream_id(), ep->session_id(), ep->max_frame());
      rdma_conn_param p{};
      p.private_data = &req;
      p.private_data_len = sizeof req;
      p.responder_resources = 0;  // SEND only: no RDMA reads either way
      p.initiator_depth = 0;
      p.retry_count = 7;      // transport retries before the QP errors (peer dead)
      p.rnr_retry_count = 7;  // 7 = retry forever while the subscriber has no buffers (back-pressure)
      p.qp_num = c->qp_num;
      if (rdma_connect(c->id, &p) != 0) fail(*l, absl::StrFormat("rdma_connect: %s", std::strerror(errno)), now);
      return;
    }
    case RDMA_CM_EVENT_CONNECT_RESPONSE:
      if (l != nullptr) on_connect_response(c, ev);
      return;
    case RDMA_CM_EVENT_ESTABLISHED:
      c->established = true;
      return;
    case RDMA_CM_EVENT_REJECTED: {
      if (l == nullptr) return;
      ConnectReply rep;
      std::string why;
      if (absl::Status s = check_reply(ev.data, ev.data_len, l->ep->stream_id(), &rep);
          ev.data_len >= sizeof(ConnectReply) && rep.magic == kCmMagic) {
        why = std::string(s.ok() ? "rejected" : s.message());
        if (rep.status == kRejectFrameTooLarge) {
          why += absl::StrFormat(
              " (its buffers hold %u bytes, this publisher sends up to %u: use the same "
              "pool.slot_size on both ends)",
              rep.max_frame, l->ep->max_frame());
        }
      } else {
        why = reject_text(ev.status);
      }
      fail(*l, why, now);
      return;
    }
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_CONNECT_ERROR: {
      const std::string why = absl::StrFormat("peer unreachable (%s: %s)", rdma_event_str(ev.type),
                                              std::strerror(ev.status < 0 ? -ev.status : ev.status));
      if (l != nullptr && !c->announced) {
        fail(*l, why, now);
      } else if (c->announced && !c->disconnected.load(std::memory_order_relaxed)) {
        c->disconnected.store(true, std::memory_order_release);
        c->group->announce(c, true);
      }
      return;
    }
    case RDMA_CM_EVENT_DISCONNECTED:
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      c_disconnects_.add();
      if (!c->announced) {
        if (l != nullptr) fail(*l, rdma_event_str(ev.type), now);
        return;
      }
      if (!c->disconnected.load(std::memory_order_relaxed)) {
        // A publisher's subscriber going away is worth a log line; a subscriber's publisher going
        // away reaches the application as an end-of-stream event instead.
        if (c->kind == Conn::Kind::kTx || ev.type == RDMA_CM_EVENT_DEVICE_REMOVAL) {
          t_.counters().error_log().recordf(
              absl::StatusCode::kUnavailable, "rdma: stream %u: subscriber %s %s",
              static_cast<RdmaTxEndpoint*>(c->owner)->stream_id(), c->peer,
              ev.type == RDMA_CM_EVENT_DISCONNECTED ? "disconnected" : "lost: device removed");
        }
        // Release pairs with the owner's acquire of the group generation after announce().
        c->disconnected.store(true, std::memory_order_release);
        c->group->announce(c, true);
      }
      return;
    default:
      return;  // TIMEWAIT_EXIT, ADDR_CHANGE, ...
  }
}

void ConnectionManager::on_connect_response(Conn* c, const Event& ev) {
  PeerLink& l = *c->link;
  const std::int64_t now = mono_ns();
  ConnectReply rep;
  if (absl::Status s = check_reply(ev.data, ev.data_len, l.ep->stream_id(), &rep); !s.ok()) {
    fail(l, std::string(s.message()), now);
    return;
  }
  if (rep.max_frame < l.ep->max_frame()) {
    fail(l,
         absl::StrFormat("its receive buffers hold frames up to %u bytes, this publisher sends up to %u: use the "
                         "same pool.slot_size on both ends",
                         rep.max_frame, l.ep->max_frame()),
         now);
    return;
  }
  if (absl::Status s = to_state(c, IBV_QPS_RTR); !s.ok()) {
    fail(l, std::string(s.message()), now);
    return;
  }
  if (absl::Status s = to_state(c, IBV_QPS_RTS); !s.ok()) {
    fail(l, std::string(s.message()), now);
    return;
  }
  if (rdma_establish(c->id) != 0) {
    fail(l, absl::StrFormat("rdma_establish: %s", std::strerror(errno)), now);
    return;
  }
  c->established = true;
  c->announced = true;
  c_established_.add();
  // Recovered: not an error (the failed attempts are in the error log with their count; the
  // endpoint's status, in describe(), says "connected to").
  l.failures = 0;
  l.last_error.clear();
  l.ep->set_status(absl::StrFormat("connected to %s", l.peer));
  // Announce before counting it ready: a publisher that sees connected() may post at once, and
  // its post_st must then find the connection to adopt (add_ready's release pairs with the
  // acquire in connected(); announce() happened before it).
  c->group->announce(c, false);
  l.ep->add_ready(1);
}

void ConnectionManager::on_connect_request(const Event& ev) {
  rdma_cm_id* id = ev.id;
  ConnectRequest req{};
  std::string why;
  const std::string peer = addr_text(rdma_get_peer_addr(id));
  auto reject = [&](std::uint16_t reason, const std::string& msg) {
    const ConnectReply rep = make_reply(req.stream_id, reason, 0);
    (void)rdma_reject(id, &rep, sizeof rep);
    rdma_destroy_id(id);
    c_rejects_sent_.add();
    t_.counters().error_log().recordf(absl::StatusCode::kFailedPrecondition, "rdma: rejected publisher %s: %s", peer,
                                      msg);
  };
  if (std::uint16_t r = check_request(ev.data, ev.data_len, &req, &why); r != kAccepted) {
    reject(r, why);
    return;
  }
  auto it = subs_.find(req.stream_id);
  if (it == subs_.end()) {
    reject(kRejectNoSubscriber, absl::StrFormat("no subscriber for stream %u here (yet)", req.stream_id));
    return;
  }
  RdmaRxEndpoint* ep = it->second;
  if (req.max_frame > ep->max_frame()) {
    const ConnectReply rep = make_reply(req.stream_id, kRejectFrameTooLarge, ep->max_frame());
    (void)rdma_reject(id, &rep, sizeof rep);
    rdma_destroy_id(id);
    c_rejects_sent_.add();
    t_.counters().error_log().recordf(
        absl::StatusCode::kFailedPrecondition,
        "rdma: rejected publisher %s on stream %u: it sends frames up to %u bytes, receive "
        "buffers hold %u (use the same pool.slot_size on both ends)",
        peer, req.stream_id, req.max_frame, ep->max_frame());
    return;
  }
  if (id->verbs != t_.device().context()) {
    reject(kRejectNoResources, "connection arrived on another RDMA device");
    return;
  }
  Conn* c = new Conn();
  c->kind = Conn::Kind::kRx;
  c->owner = ep;
  c->id = id;
  c->peer = peer;
  c->remote_session = req.session_id;
  id->context = c;
  QpSpec spec;
  spec.type = IBV_QPT_RC;
  spec.group = ep->group();
  spec.publisher = false;
  spec.sq_depth = 1;
  spec.rq_depth = t_.cfg().recv_queue_depth;
  absl::Status s = create_qp(t_.device(), spec, c);
  if (s.ok()) s = to_state(c, IBV_QPS_INIT);
  // A receiver never sends: RTR is all it needs. Its RNR timer is how long the publisher waits
  // before sending again when no receive buffer is posted (the QP is accepted before its owner
  // adopts it and fills its receive queue; a subscriber holding every buffer): the kernel CM's
  // default, code 0, is the longest, 655 ms.
  if (s.ok()) s = to_state(c, IBV_QPS_RTR, rnr_timer_code(t_.cfg().rnr_timeout_us));
  if (!s.ok()) {
    c->id = nullptr;
    destroy(c);
    reject(kRejectNoResources, std::string(s.message()));
    return;
  }
  // Hand it to the owner before accepting: frames may arrive as soon as the publisher hears
  // the accept (SRQ buffers are posted already; a per-QP queue is filled on adoption, and RNR
  // retries cover the gap).
  c->announced = true;
  passive_.push_back(c);
  c->group->announce(c, false);
  const ConnectReply rep = make_reply(req.stream_id, kAccepted, ep->max_frame());
  rdma_conn_param p{};
  p.private_data = &rep;
  p.private_data_len = sizeof rep;
  p.responder_resources = 0;
  p.initiator_depth = 0;
  p.rnr_retry_count = 7;
  p.srq = c->has_rq ? 0 : 1;
  p.qp_num = c->qp_num;
  if (rdma_accept(id, &p) != 0) {
    t_.counters().error_log().recordf(absl::StatusCode::kUnavailable, "rdma: rdma_accept(publisher %s): %s", peer,
                                      std::strerror(errno));
    c->disconnected.store(true, std::memory_order_release);
    c->group->announce(c, true);
    return;
  }
  c_accepted_.add();
}

void ConnectionManager::destroy(Conn* c) {
  if (c->id != nullptr && c->established && !c->disconnected.load(std::memory_order_relaxed)) {
    (void)rdma_disconnect(c->id);
  }
  destroy_qp(c);
  if (c->id != nullptr) {
    c->id->context = nullptr;
    rdma_destroy_id(c->id);
    c->id = nullptr;
  }
  passive_.erase(std::remove(passive_.begin(), passive_.end(), c), passive_.end());
  delete c;
}

std::string ConnectionManager::describe() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string s = listen_id_ != nullptr
                      ? absl::StrFormat("listening on %s:%u", format_ipv4(t_.device().ipv4()), t_.cfg().listen_port)
                      : std::string("not listening");
  for (const auto& l : links_) {
    absl::StrAppendFormat(&s, "; stream %u -> %s: %s", l->ep->stream_id(), l->peer,
                          l->conn != nullptr && l->conn->announced ? "connected"
                          : l->last_error.empty()                  ? "connecting"
                                                                   : l->last_error);
  }
  return s;
}

}  // namespace pollux::transport::rdma
