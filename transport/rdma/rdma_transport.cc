#include "transport/rdma/rdma_transport.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/clock.h"
#include "core/random_id.h"
#include "transport/rdma/qp.h"
#include "transport/rdma/rdma_config.h"
#include "transport/rdma/rdma_endpoints.h"
#include "transport/rdma/ud_endpoints.h"
#include "transport/rdma/verbs_errors.h"
#include "transport/rdma/wire.h"

namespace pollux::transport::rdma {

absl::StatusOr<std::unique_ptr<Transport>> RdmaTransport::create(const TransportEnv& env) {
  std::unique_ptr<RdmaTransport> t(new RdmaTransport(env));
  auto dev = Device::open(rdma::config(*env.config), env.config->runtime.device);
  if (!dev.ok()) {
    return absl::Status(dev.status().code(), absl::StrFormat("%s: %s", env.config->source, dev.status().message()));
  }
  t->dev_ = std::move(*dev);
  t->c_registrations_ = env.counters->allocate(absl::StrFormat("rdma %s", t->dev_->name()), "mr_registrations");
  if (!t->ud()) {
    t->cm_ = std::make_unique<ConnectionManager>(*t);
    if (absl::Status s = t->cm_->start(); !s.ok()) return s;
  } else {
    std::uint32_t group;
    if (!parse_ipv4(rdma::config(*env.config).multicast_group, &group)) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: rdma.multicast_group: \"%s\" is not an IPv4 address",
                                                        env.config->source, rdma::config(*env.config).multicast_group));
    }
  }
  return std::unique_ptr<Transport>(std::move(t));
}

RdmaTransport::~RdmaTransport() { close(); }

absl::Status RdmaTransport::register_memory(core::BufferPool& pool) {
  absl::Status s = dev_->register_pool(pool);
  c_registrations_.set(dev_->registrations());
  return s;
}

absl::StatusOr<CompletionGroup*> RdmaTransport::group_for(int poller) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return absl::FailedPreconditionError("rdma: transport is closed");
  if (poller >= 0) {
    auto it = groups_.find(poller);
    if (it != groups_.end()) return it->second.get();
  } else if (!idle_inline_groups_.empty()) {
    CompletionGroup* g = idle_inline_groups_.back();
    idle_inline_groups_.pop_back();
    return g;
  }
  GroupOptions o;
  o.poller = poller;
  o.ud = ud();
  const rdma::RdmaConfig& c = cfg();
  if (c.srq == rdma::RdmaSrq::kOn && !dev_->srq_supported()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "rdma.srq = \"on\" but %s has no shared receive queues; set rdma.srq = \"auto\" or \"off\"", dev_->name()));
  }
  o.srq = c.srq == rdma::RdmaSrq::kOn || (c.srq == rdma::RdmaSrq::kAuto && dev_->srq_supported());
  o.recv_depth = c.recv_queue_depth;
  o.recv_batch = c.recv_batch;
  o.cq_depth = c.cq_depth;
  o.moderation_count = c.cq_moderation_count;
  o.moderation_usec = c.cq_moderation_usec;
  if (ud()) {
    // Heartbeats every heartbeat_ms, liveness checked at that granularity too.
    o.timer_ns =
        static_cast<std::int64_t>(std::max<std::uint32_t>(1, std::min(c.heartbeat_ms, c.liveness_timeout_ms))) *
        1'000'000;
  }
  auto g = CompletionGroup::create(*dev_, *env_.pool, o, this, env_.counters);
  if (!g.ok()) return g.status();
  CompletionGroup* raw = g->get();
  if (poller >= 0) {
    groups_[poller] = std::move(*g);
  } else {
    inline_groups_.push_back(std::move(*g));
  }
  return raw;
}

absl::StatusOr<core::ProgressSource*> RdmaTransport::poller_source(int poller) {
  if (poller < 0) {
    return absl::InvalidArgumentError(
        "rdma: poller_source needs a poller index (inline endpoints progress themselves)");
  }
  auto g = group_for(poller);
  if (!g.ok()) return g.status();
  std::lock_guard<std::mutex> lock(mu_);
  std::unique_ptr<RdmaPollerSource>& s = sources_[poller];
  if (s == nullptr) {
    s = std::make_unique<RdmaPollerSource>(*g);
    // Adaptive moderation only where the poller sleeps, and only when no static setting was
    // asked for (rdma.cq_moderation_count/usec), and not on a device that already refused.
    const core::IdleKind idle = config().runtime.idle;
    if ((idle == core::IdleKind::kInterrupt || idle == core::IdleKind::kAdaptive) && cfg().cq_moderation_count == 0 &&
        cfg().cq_moderation_usec == 0 && !(*g)->moderation_unsupported()) {
      s->set_moderation_policy(std::make_unique<TunerPolicy>(ModerationOptions{}, core::Clock::now_ns()));
    }
  }
  return s.get();
}

int RdmaPollerSource::housekeeping(std::int64_t now_ns) noexcept {
  group_->sync();
  group_->flush_recycled();
  if (policy_ != nullptr && !group_->moderation_unsupported()) {
    if (auto m = policy_->update(now_ns, group_->completions_total(), group_->event_wakeups_total())) {
      if (!group_->set_moderation(m->count, m->period_us)) policy_->set_unsupported();
    }
  }
  return 0;
}

bool RdmaPollerSource::try_arm() noexcept {
  if (group_->has_closing()) return false;  // its deadline could not wake the poller
  if (!group_->try_arm()) return false;
  if (policy_ != nullptr && last_now_ns_ - last_arm_ns_ > kPollingPhaseNs) {
    // First sleep after a polling phase: moderation measures interrupts from here on.
    policy_->restart(last_now_ns_, group_->completions_total(), group_->event_wakeups_total());
  }
  last_arm_ns_ = last_now_ns_;
  return true;
}

absl::StatusOr<std::unique_ptr<TxEndpoint>> RdmaTransport::open_tx(const EndpointSpec& spec) {
  if (env_.pool == nullptr || dev_->lkey() == 0) {
    return absl::FailedPreconditionError("rdma: open_tx before the buffer pool was registered");
  }
  if (!ud() && cfg().peers.empty()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: rdma.peers is empty: an RC publisher (topic \"%s\", stream %u) connects to its subscribers, so list "
        "each as \"address:port\" (the subscriber's RDMA device IPv4 address and its rdma.listen_port), or use "
        "rdma.mode = \"ud_mcast\"",
        config().source, spec.topic, spec.stream_id));
  }
  auto g = group_for(spec.poller);
  if (!g.ok()) return g.status();
  if (ud()) return open_ud_tx(spec, *g);
  auto control = env_.pool->carve(1);
  if (!control.ok()) return control.status();
  const core::Config& c = config();
  const std::uint32_t ring = c.rings.capacity + 2 * c.rings.burst;
  auto ep = std::make_unique<RdmaTxEndpoint>(*this, *g, spec, core::random_id32(), ring, control->first);
  ep->hold(std::make_shared<core::SlotLease>(env_.pool, *control));
  cm_->add_publisher(ep.get());
  return std::unique_ptr<TxEndpoint>(std::move(ep));
}

Conn* RdmaTransport::new_ud_conn(Conn::Kind kind, void* owner, std::uint32_t* group) const {
  (void)parse_ipv4(cfg().multicast_group, group);  // checked by create()
  Conn* conn = new Conn();
  conn->kind = kind;
  conn->owner = owner;
  conn->peer = cfg().multicast_group;
  return conn;
}

absl::StatusOr<std::unique_ptr<TxEndpoint>> RdmaTransport::open_ud_tx(const EndpointSpec& spec, CompletionGroup* g) {
  const std::uint32_t need = UdTxEndpoint::slots_needed(cfg(), env_.pool->slot_size());
  auto slots = env_.pool->carve(need);
  if (!slots.ok()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s: rdma: a UD multicast publisher (topic \"%s\", stream %u) needs %u more pool slots for its retransmit "
        "buffer (rdma.retransmit_buffer = %u bytes in slots of %u bytes) and its NAK receive buffers: %s, or lower "
        "rdma.retransmit_buffer",
        config().source, spec.topic, spec.stream_id, need, cfg().retransmit_buffer, env_.pool->slot_size(),
        slots.status().message()));
  }
  // Back to the pool if the endpoint fails to open (the lease dies here) or once it is gone.
  auto lease = std::make_shared<core::SlotLease>(env_.pool, *slots);
  auto ep = std::make_unique<UdTxEndpoint>(*this, g, spec, core::random_id32());
  ep->hold(lease);
  std::uint32_t group = 0;
  Conn* conn = new_ud_conn(Conn::Kind::kTx, ep.get(), &group);
  ibv_ah_attr aa{};
  aa.is_global = 1;
  aa.port_num = dev_->port();
  aa.grh.dgid = multicast_gid(group);
  aa.grh.sgid_index = static_cast<std::uint8_t>(dev_->gid_index());
  aa.grh.hop_limit = 1;  // IP TTL 1: market data stays on the local segment
  conn->ah = ibv_create_ah(dev_->pd(), &aa);
  if (conn->ah == nullptr) {
    const int err = errno;
    delete conn;
    return absl::UnavailableError(absl::StrFormat(
        "rdma: cannot address multicast group %s from %s (ibv_create_ah: %s); check that a route for 224.0.0.0/4 "
        "leaves through the netdev under %s",
        cfg().multicast_group, dev_->name(), std::strerror(err), dev_->name()));
  }
  QpSpec qs;
  qs.type = IBV_QPT_UD;
  qs.group = g;
  qs.publisher = true;
  qs.sq_depth = cfg().send_queue_depth;
  qs.inline_bytes = cfg().inline_threshold;
  qs.rq_depth = UdTxEndpoint::kControlRecvBuffers;  // NAKs and status messages, unicast to this QP
  qs.ah = conn->ah;
  absl::Status s = create_qp(*dev_, qs, conn);
  if (s.ok()) s = ud_to_rts(conn->qp, dev_->port());
  if (s.ok()) s = ep->init(*slots, dev_->mtu_bytes(), conn);
  if (!s.ok()) {
    destroy_qp(conn);
    delete conn;
    return s;
  }
  g->announce(conn, false);
  return std::unique_ptr<TxEndpoint>(std::move(ep));
}

absl::StatusOr<std::unique_ptr<RxEndpoint>> RdmaTransport::open_rx(const EndpointSpec& spec) {
  if (env_.pool == nullptr || dev_->lkey() == 0) {
    return absl::FailedPreconditionError("rdma: open_rx before the buffer pool was registered");
  }
  auto g = group_for(spec.poller);
  if (!g.ok()) return g.status();
  if (absl::Status s = (*g)->enable_receives(); !s.ok()) return s;
  if (!ud()) {
    auto ep = std::make_unique<RdmaRxEndpoint>(*this, *g, spec);
    if (absl::Status s = cm_->add_subscriber(ep.get()); !s.ok()) return s;
    return std::unique_ptr<RxEndpoint>(std::move(ep));
  }
  auto ctl = env_.pool->carve(UdRxEndpoint::kControlSendSlots);
  if (!ctl.ok()) return ctl.status();
  auto ep = std::make_unique<UdRxEndpoint>(*this, *g, spec);
  ep->hold(std::make_shared<core::SlotLease>(env_.pool, *ctl));
  if (absl::Status s = ep->init(*ctl); !s.ok()) return s;
  std::uint32_t group = 0;
  Conn* conn = new_ud_conn(Conn::Kind::kRx, ep.get(), &group);
  QpSpec qs;
  qs.type = IBV_QPT_UD;
  qs.group = *g;
  qs.publisher = false;
  qs.sq_depth = UdRxEndpoint::kControlSendSlots;  // NAKs and status messages to publishers
  qs.inline_bytes = reliability::kMaxControlLength;
  qs.rq_depth = cfg().recv_queue_depth;
  absl::Status s = create_qp(*dev_, qs, conn);
  if (s.ok()) s = ud_to_rts(conn->qp, dev_->port());
  const ibv_gid mgid = multicast_gid(group);
  if (s.ok() && ibv_attach_mcast(conn->qp, &mgid, 0) != 0) {
    s = absl::UnavailableError(absl::StrFormat("rdma: ibv_attach_mcast(%s) on %s: %s", cfg().multicast_group,
                                               dev_->name(), std::strerror(errno)));
  }
  // The kernel must also be a member of the group, or Soft-RoCE (and the IP stack under any
  // RoCE NIC doing IGMP snooping) drops the datagrams: join on the device's address.
  int fd = -1;
  if (s.ok()) {
    fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ip_mreq m{};
    m.imr_multiaddr.s_addr = htonl(group);
    m.imr_interface.s_addr = htonl(dev_->ipv4());
    if (fd < 0 || setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof m) != 0) {
      s = absl::UnavailableError(absl::StrFormat(
          "rdma: cannot join multicast group %s on %s (IP_ADD_MEMBERSHIP: %s); the netdev under %s needs that IPv4 "
          "address and multicast enabled",
          cfg().multicast_group, format_ipv4(dev_->ipv4()), std::strerror(errno), dev_->name()));
    }
  }
  if (!s.ok()) {
    if (fd >= 0) ::close(fd);
    if (conn->qp != nullptr) (void)ibv_detach_mcast(conn->qp, &mgid, 0);
    destroy_qp(conn);
    delete conn;
    return s;
  }
  ep->set_multicast(conn, mgid, fd);
  (*g)->announce(conn, false);
  return std::unique_ptr<RxEndpoint>(std::move(ep));
}

void RdmaTransport::release_inline_group(CompletionGroup* g) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!closed_) idle_inline_groups_.push_back(g);
}

void RdmaTransport::retire(Conn* c) {
  if (cm_ != nullptr && c->id != nullptr) {
    cm_->retire(c);  // disconnect and destroy on the connection manager thread
    return;
  }
  destroy_qp(c);
  delete c;
}

void RdmaTransport::close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    closed_ = true;
  }
  // The pollers have stopped (the context stops them first): endpoints that were still closing
  // on them (a publisher lingering for its subscribers' acknowledgements) finish here, on the
  // closing application thread, before their connections and groups go.
  for (auto& [poller, g] : groups_) g->finish_closing();
  if (cm_ != nullptr) cm_->stop();
  sources_.clear();
  groups_.clear();
  idle_inline_groups_.clear();
  inline_groups_.clear();
  cm_.reset();
  dev_.reset();
}

std::string RdmaTransport::describe() const {
  return absl::StrFormat("rdma (every stream): %s on device %s port %u", rdma::rdma_mode_name(cfg().mode), cfg().device,
                         cfg().port);
}

std::string RdmaTransport::stream_route(std::uint32_t) const {
  return absl::StrCat("rdma ", std::string(rdma::rdma_mode_name(cfg().mode)));
}

}  // namespace pollux::transport::rdma
