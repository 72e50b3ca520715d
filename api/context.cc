#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "api/internal.h"
#include "core/placement.h"
#include "core/process.h"
#include "core/topology.h"
#include "pollux/context.h"
#include "pollux/late_join.h"

namespace pollux {
namespace detail {

namespace {
// Waits for a poller to acknowledge a closing channel; bounded so a wedged transport cannot
// hang close() forever.
template <typename Ch>
bool wait_drained(const Ch& ch, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!ch.drained.load(std::memory_order_acquire)) {  // pairs with the poller's release
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return true;
}
// A new endpoint (`what`: "publisher", "subscriber") on `topic`, its stream id and topic set;
// refused while the context is closed, or if the topic cannot name a stream (quoted escaped,
// cut at 64 bytes).
template <typename Impl>
absl::StatusOr<std::shared_ptr<Impl>> new_endpoint(bool closed, const char* what, std::string_view topic,
                                                   const core::Config& cfg) {
  if (closed) return absl::FailedPreconditionError("context is closed");
  if (const std::string e = core::topic_error(topic); !e.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " on topic \"",
                     absl::CHexEscape(absl::string_view(topic.data(), std::min<std::size_t>(topic.size(), 64))),
                     topic.size() > 64 ? "...\": " : "\": ", e));
  }
  auto impl = std::make_shared<Impl>();
  impl->stream_id = cfg.stream_id(topic);
  impl->topic = std::string(topic);
  return impl;
}

}  // namespace

StreamCounters ContextImpl::make_counters(bool publisher, std::uint32_t stream_id, std::string_view topic) {
  const std::string scope = absl::StrFormat("%s stream %u %s", publisher ? "pub" : "sub", stream_id, topic);
  if (publisher) return StreamCounters::publication(*counters, scope, stream_id);
  return StreamCounters::subscription(*counters, scope, stream_id, transport::position_in_stream_counters(cfg));
}

absl::Status ContextImpl::start() {
  core::Clock::init(cfg.runtime.shm_dir);
  auto cf = core::CountersFile::create(cfg.runtime.counters ? cfg.runtime.shm_dir : "", cfg.runtime.name,
                                       cfg.runtime.counters_capacity);
  if (!cf.ok()) return cf.status();
  counters = std::move(*cf);
  if (!cfg.metrics.listen.empty()) {
    metrics::ServerOptions mo{cfg.metrics.listen, cfg.metrics.max_connections, cfg.metrics.timeout_ms};
    auto server = metrics::Server::start(mo, [path = counters->path()] {
      std::vector<core::CountersFileSnapshot> procs;
      if (auto s = core::read_counters_file(path); s.ok()) procs.push_back(std::move(*s));
      return procs;
    });
    if (!server.ok())
      return absl::Status(server.status().code(),
                          absl::StrCat(cfg.source, ": metrics.listen: ", server.status().message()));
    metrics_server = std::move(*server);
  }

  int device_node = -1;
  if (!cfg.runtime.device.empty()) {
    auto loc = core::topology().locate_device(cfg.runtime.device);
    if (!loc.ok()) return absl::NotFoundError(absl::StrCat(cfg.source, ": runtime.device: ", loc.status().message()));
    device_node = loc->numa_node;
  } else if (const std::string dev = transport::placement_device(cfg); !dev.empty()) {
    // The transport's own device (rdma.device): place pollers and pool near it when hwloc knows it.
    if (auto loc = core::topology().locate_device(dev); loc.ok()) device_node = loc->numa_node;
  }
  if (cfg.pool.numa_node < 0) cfg.pool.numa_node = device_node;

  if (transport::needs_pool(cfg)) {
    if (absl::Status s = ensure_pool(); !s.ok()) return s;
  }
  transport::TransportEnv env{&cfg, pool_.get(), counters.get()};
  auto t = transport::make_transport(env);
  if (!t.ok()) return t.status();
  transport = std::move(*t);
  if (pool_ != nullptr) {
    if (absl::Status s = transport->register_memory(*pool_); !s.ok()) return s;
  }

  // One entry per poller: its preferred CPU (runtime.poller_cores, else the device node's highest
  // cores: what pollux-doctor predicts), -1 for shared mode's unpinned poller; none in inline mode.
  const std::vector<int> node_cpus = core::topology().cpus_on_node(device_node);
  const std::vector<int> preferred = core::poller_cpus(cfg.runtime, node_cpus);
  const auto npollers = static_cast<std::uint32_t>(preferred.size());
  if (cfg.runtime.threading == core::ThreadingMode::kDedicated) {
    // Dedicated pollers are pinned: cores claimed in shm_dir so that processes on this host do
    // not pick the same ones (core/placement.h). The first process gets the preferred cores,
    // later ones the next unclaimed cores, highest-numbered first.
    core::PlacementRequest req;
    req.claims_dir = cfg.runtime.shm_dir;
    req.candidates.assign(node_cpus.rbegin(), node_cpus.rend());
    req.explicit_cores = cfg.runtime.poller_cores;
    req.pollers = npollers;
    req.owner_name = cfg.runtime.name;
    placement = core::place_pollers(req);
    for (const std::string& w : placement.warnings) {
      counters->error_log().record(absl::StatusCode::kResourceExhausted, absl::StrCat("placement: ", w));
    }
  }
  for (std::uint32_t i = 0; i < npollers; ++i) {
    const int cpu = i < placement.cpus.size() ? placement.cpus[i] : preferred[i];  // shared mode: -1
    PollerSlot slot;
    slot.poller = std::make_unique<core::Poller>(static_cast<int>(i), cfg, counters.get());
    slot.tx = std::make_unique<AppTxSource>(slot.poller->burst());
    slot.rx = std::make_unique<AppRxSource>(slot.poller->burst());
    auto src = transport->poller_source(static_cast<int>(i));
    if (!src.ok()) return src.status();
    slot.transport = *src;
    // Duty-cycle order: post what the applications queued, progress the transport (completions,
    // receives), then deliver to the subscribers.
    slot.poller->add_source(slot.tx.get());
    slot.poller->add_source(slot.transport);
    slot.poller->add_source(slot.rx.get());
    if (absl::Status s = slot.poller->start(cfg.runtime.idle, cpu); !s.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(cfg.source, ": runtime.poller_cores: ", s.message()));
    }
    pollers.push_back(std::move(slot));
  }
  return absl::OkStatus();
}

absl::Status ContextImpl::ensure_pool() {
  if (pool_ != nullptr) return absl::OkStatus();
  core::PoolOptions o;
  o.slot_size = cfg.pool.slot_size;
  o.slots = cfg.pool.slots;
  o.hugepages = cfg.pool.hugepages;
  o.numa_node = cfg.pool.numa_node;
  auto p = core::BufferPool::create(o);
  if (!p.ok()) return p.status();
  pool_ = std::move(*p);
  return absl::OkStatus();
}

PollerSlot* ContextImpl::poller_for(std::uint32_t stream_id) {
  if (pollers.empty()) return nullptr;
  // All endpoints of one stream live on one poller (a shm stream has a single writer).
  return &pollers[stream_id % pollers.size()];
}

absl::StatusOr<std::shared_ptr<PublisherImpl>> ContextImpl::open_publisher(std::string_view topic) {
  std::lock_guard<std::mutex> lock(mu_);
  auto made = new_endpoint<PublisherImpl>(closed_, "publisher", topic, cfg);
  if (!made.ok()) return made.status();
  std::shared_ptr<PublisherImpl> p = *std::move(made);
  const core::StreamConfig* sc = cfg.find_stream(p->stream_id);
  p->trace = sc != nullptr && sc->trace;
  p->trace_every = sc != nullptr ? sc->trace_every : 1;
  p->trace_countdown = p->trace_every;
  p->stamp = sc == nullptr || sc->publisher_timestamp;
  const bool inline_mode = cfg.runtime.threading == core::ThreadingMode::kInline;
  PollerSlot* slot = inline_mode ? nullptr : poller_for(p->stream_id);
  core::Poller* poller = slot != nullptr ? slot->poller.get() : nullptr;
  transport::EndpointSpec spec{p->stream_id, p->topic, sc, poller != nullptr ? poller->index() : -1};
  // Traced streams with an endpoint of their own learn their frames' local send completions
  // (a shared shm endpoint has none: the log write is the send).
  if (p->trace && !transport->shared_tx_endpoint()) {
    p->send_log = std::make_shared<core::SendCompletionLog>();
    spec.send_log = p->send_log.get();
  }

  // The transport endpoint: shared per stream (shm) or one per publisher.
  std::shared_ptr<transport::TxEndpoint> ep;
  if (transport->shared_tx_endpoint()) {
    auto it = shared_tx_.find(p->stream_id);
    if (it != shared_tx_.end()) {
      if (inline_mode) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "topic \"%s\" (stream %u) already has a publisher in this process; in inline mode a shm stream has one "
            "publishing thread (use runtime.threading = \"dedicated\" for several)",
            topic, p->stream_id));
      }
      ep = it->second.ep;
      ++it->second.refs;
    } else {
      auto opened = transport->open_tx(spec);
      if (!opened.ok()) return opened.status();
      ep = std::shared_ptr<transport::TxEndpoint>(std::move(*opened));
      shared_tx_[p->stream_id] = SharedTx{ep, poller, 1};
    }
  } else {
    auto opened = transport->open_tx(spec);
    if (!opened.ok()) return opened.status();
    ep = std::shared_ptr<transport::TxEndpoint>(std::move(*opened));
  }
  p->ep = ep;
  p->tx = ep.get();
  p->direct = ep->direct();
  const std::uint32_t trace_bytes = p->trace ? sizeof(core::StageTrace) : 0;
  p->counters = make_counters(true, p->stream_id, topic);

  if (inline_mode && p->direct.offer != nullptr && p->direct.traced) {
    p->mode = PublisherImpl::Mode::kDirect;
    p->max_payload = ep->max_frame() - core::kFrameHeaderSize - trace_bytes;
  } else {
    if (absl::Status s = ensure_pool(); !s.ok()) return s;
    p->pool = pool_.get();
    const std::uint32_t max_frame = std::min(ep->max_frame(), pool_->slot_size());
    p->max_payload = max_frame - core::kFrameHeaderSize - trace_bytes;
    const std::uint32_t nslots = inline_mode ? cfg.rings.capacity : cfg.rings.capacity + 2 * cfg.rings.burst;
    auto range = pool_->carve(nslots);
    if (!range.ok()) return range.status();
    p->free_slots.reset(*range);
    p->slot_lease = std::make_shared<core::SlotLease>(pool_.get(), *range);
    ep->hold(p->slot_lease);
    if (inline_mode) {
      p->mode = PublisherImpl::Mode::kInlinePost;
    } else {
      p->mode = PublisherImpl::Mode::kQueued;
      auto ch = std::make_shared<TxChannel>(cfg.rings.capacity, nslots, cfg.rings.kind);
      ch->slots = *range;
      ch->slot_lease = p->slot_lease;
      ch->ep = ep;
      ch->send_log = p->send_log;  // the poller drives ep: the log it records into stays with it
      ch->stream_id = p->stream_id;
      ch->pool = pool_.get();
      const std::string scope = absl::StrFormat("poller %d stream %u", poller->index(), p->stream_id);
      ch->posted = counters->allocate(scope, "posted", p->stream_id, core::CounterKind::kPollerStream);
      ch->back_pressure =
          counters->allocate(scope, "transport_back_pressure", p->stream_id, core::CounterKind::kPollerStream);
      p->channel = ch;
      p->poller = poller;
      AppTxSource* src = slot->tx.get();
      poller->run_on_poller([src, ch] { src->add(ch); });
    }
  }
  if (p->mode == PublisherImpl::Mode::kDirect) {
    ep->bind_direct(
        transport::TxBinding{&p->counters.messages, &p->counters.bytes, &PublisherImpl::general_offer, p.get()});
    if (!p->trace) p->fast_path.store(true, std::memory_order_relaxed);
  }
  if (inline_mode) p->duties = duties_;
  p->ctx = this;
  pubs_.push_back(p);
  return p;
}

absl::StatusOr<std::shared_ptr<SubscriberImpl>> ContextImpl::open_subscriber(std::string_view topic) {
  std::lock_guard<std::mutex> lock(mu_);
  auto made = new_endpoint<SubscriberImpl>(closed_, "subscriber", topic, cfg);
  if (!made.ok()) return made.status();
  std::shared_ptr<SubscriberImpl> s = *std::move(made);
  PollerSlot* slot = cfg.runtime.threading == core::ThreadingMode::kInline ? nullptr : poller_for(s->stream_id);
  const transport::EndpointSpec spec{s->stream_id, s->topic, cfg.find_stream(s->stream_id),
                                     slot != nullptr ? slot->poller->index() : -1};
  auto ep = transport->open_rx(spec);
  if (!ep.ok()) return ep.status();
  s->counters = make_counters(false, s->stream_id, topic);
  if (cfg.runtime.threading == core::ThreadingMode::kInline) {
    s->mode = SubscriberImpl::Mode::kInline;
    s->ep = std::move(*ep);
    s->rx = s->ep.get();
    // poll()'s direct path, where the endpoint offers one, is enabled by the owner's first
    // call (take_drive): until then the context's duty call may drive the endpoint.
    s->direct = s->rx->direct();
    s->rx->bind_direct(transport::RxBinding{&s->counters.messages, &s->counters.bytes, &s->counters.position,
                                            &s->received, &SubscriberImpl::general_poll, s.get()});
    s->drive.store(SubscriberImpl::kDriveFree, std::memory_order_relaxed);
    s->duties = duties_;
    {
      std::lock_guard<std::mutex> dl(duties_->mu);
      duties_->subs.push_back(s);
    }
    duties_->unowned.fetch_add(1, std::memory_order_relaxed);
  } else {
    s->mode = SubscriberImpl::Mode::kQueued;
    core::Poller* poller = slot->poller.get();
    auto ch = std::make_shared<RxChannel>(cfg.rings.capacity, cfg.rings.kind);
    if (absl::Status st = ch->app_bell.init(); !st.ok()) return st;
    ch->ep = std::move(*ep);
    ch->stream_id = s->stream_id;
    s->channel = ch;
    s->poller = poller;
    AppRxSource* src = slot->rx.get();
    poller->run_on_poller([src, ch] { src->add(ch); });
  }
  s->ctx = this;
  subs_.push_back(s);
  return s;
}

void ContextImpl::release_publisher(PublisherImpl* p) {
  std::shared_ptr<transport::TxEndpoint> ep = p->ep;
  if (p->channel != nullptr) {
    p->channel->closing.store(true, std::memory_order_release);  // pairs with the poller's acquire
    p->poller->wake();  // a sleeping poller must see the close (app-tx refuses to arm while closing)
    if (!wait_drained(*p->channel, std::chrono::seconds(5))) {
      // close() returns nothing to report it through: the error log (and its errors counter).
      counters->error_log().recordf(absl::StatusCode::kDeadlineExceeded,
                                    "publisher of topic \"%s\" (stream %u) closed with frames still queued after 5 s "
                                    "(transport back-pressured): they were not sent",
                                    p->topic, p->stream_id);
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  core::Poller* poller = p->poller;
  auto close_ep = [&] {
    if (poller != nullptr) {
      poller->run_on_poller([ep] { ep->close_st(); });
    } else {
      ep->close_st();
    }
  };
  auto it = shared_tx_.find(p->stream_id);
  if (it != shared_tx_.end() && it->second.ep == ep) {
    if (--it->second.refs == 0) {
      close_ep();
      shared_tx_.erase(it);
    }
  } else {
    close_ep();
  }
}

void ContextImpl::release_subscriber(SubscriberImpl* s) {
  if (s->channel != nullptr) {
    s->channel->closing.store(true, std::memory_order_release);
    s->poller->wake();
    (void)wait_drained(*s->channel, std::chrono::seconds(5));
    // On the poller thread: the endpoint may share per-poller state with endpoints it still
    // drives (RDMA: the CQ and SRQ).
    RxChannel* ch = s->channel.get();
    if (s->poller != nullptr) {
      s->poller->run_on_poller([ch] { ch->ep->close_st(); });
    } else {
      ch->ep->close_st();
    }
  } else if (s->ep != nullptr) {
    s->ep->close_st();
  }
}

ContextImpl::~ContextImpl() {
  std::vector<std::shared_ptr<PublisherImpl>> pubs;
  std::vector<std::shared_ptr<SubscriberImpl>> subs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    for (auto& w : pubs_) {
      if (auto p = w.lock()) pubs.push_back(std::move(p));
    }
    for (auto& w : subs_) {
      if (auto s = w.lock()) subs.push_back(std::move(s));
    }
  }
  // Close every handle still open (lock order: handle, then context - as in close()).
  for (auto& p : pubs) p->close();
  for (auto& s : subs) s->close();
  for (auto& p : pollers) p.poller->stop();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, tx] : shared_tx_) tx.ep->close_st();
  shared_tx_.clear();
  if (transport != nullptr) transport->close();
}

// The transport of every stream of this context (one per context: `transport` in the
// configuration) and what of its configuration decides how it behaves.
std::string ContextImpl::transport_line() const { return transport->describe(); }

// Where one stream's messages go on the configured transport.
std::string ContextImpl::stream_route(std::uint32_t stream_id) const { return transport->stream_route(stream_id); }

std::string ContextImpl::describe() const {
  std::string s;
  absl::StrAppendFormat(&s, "config:    %s\n", cfg.source);
  // What really runs: in inline mode no thread idles - runtime.idle is read by pollers only.
  const std::string_view idle = core::idle_kind_name(cfg.runtime.idle);
  switch (cfg.runtime.threading) {
    case core::ThreadingMode::kDedicated:
      absl::StrAppendFormat(&s, "threading: dedicated: %u poller thread(s), each idling with %s\n", pollers.size(),
                            idle);
      break;
    case core::ThreadingMode::kShared:
      absl::StrAppendFormat(&s, "threading: shared: 1 poller thread for every stream, idling with %s\n", idle);
      break;
    case core::ThreadingMode::kInline:
      absl::StrAppendFormat(&s,
                            "threading: inline: no poller thread; the application thread drives the transport inside "
                            "offer()/poll() (it polls as often as it calls them) and Subscriber::wait() sleeps until "
                            "the transport wakes it (runtime.idle = \"%s\" is not used)\n",
                            idle);
      break;
  }
  absl::StrAppendFormat(&s, "transport: %s\n", transport_line());
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& w : pubs_) {
      if (auto p = w.lock(); p != nullptr && !p->closed.load(std::memory_order_relaxed)) {
        absl::StrAppendFormat(&s, "stream:    %u \"%s\" publisher over %s\n", p->stream_id, p->topic,
                              stream_route(p->stream_id));
      }
    }
    for (const auto& w : subs_) {
      if (auto sub = w.lock(); sub != nullptr && !sub->closed.load(std::memory_order_relaxed)) {
        absl::StrAppendFormat(&s, "stream:    %u \"%s\" subscriber over %s\n", sub->stream_id, sub->topic,
                              stream_route(sub->stream_id));
      }
    }
  }
  absl::StrAppendFormat(&s, "clock:     %s\n", core::Clock::describe());
  absl::StrAppendFormat(&s, "topology:  %s\n", core::topology().describe());
  absl::StrAppendFormat(&s, "pool:      %s\n", pool_ != nullptr ? pool_->describe() : "none (inline shm needs none)");
  for (const auto& p : pollers) {
    const int cpu = p.poller->cpu();
    const auto claim = std::find_if(placement.claims.begin(), placement.claims.end(),
                                    [&](const core::CpuClaim& c) { return c.cpu() == cpu; });
    absl::StrAppendFormat(
        &s, "poller %d:  thread pollux-poll-%d (tid %d), %s\n", p.poller->index(), p.poller->index(), p.poller->tid(),
        cpu < 0 ? std::string("unpinned")
                : absl::StrCat("pinned to cpu ", cpu,
                               claim != placement.claims.end() ? absl::StrCat(" (claimed: ", claim->path(), ")")
                                                               : std::string(" (not claimed)")));
  }
  for (const std::string& w : placement.warnings) absl::StrAppendFormat(&s, "placement: %s\n", w);
  absl::StrAppendFormat(&s, "counters:  %s\n",
                        counters->path().empty() ? "private (runtime.counters = false)" : counters->path());
  if (metrics_server != nullptr) {
    absl::StrAppendFormat(&s, "metrics:   %smetrics (Prometheus/OpenMetrics), %s (live page)\n", metrics_server->url(),
                          metrics_server->url());
  }
  const std::vector<core::ErrorRecord> errors = counters->error_log().entries();
  std::uint64_t total = 0;
  for (const auto& e : errors) total += e.count;
  absl::StrAppendFormat(&s, "errors:    %u distinct, %u in all%s\n", errors.size(), total,
                        errors.empty() ? "" : " (pollux-stat --errors shows them; the latest below)");
  // The most recent few, newest first.
  std::vector<const core::ErrorRecord*> recent;
  for (const auto& e : errors) recent.push_back(&e);
  std::sort(recent.begin(), recent.end(), [](auto* a, auto* b) { return a->last_ns > b->last_ns; });
  for (std::size_t i = 0; i < recent.size() && i < 5; ++i) {
    absl::StrAppendFormat(&s, "  %s x%u %s: %s\n", core::format_wall_clock(recent[i]->last_ns), recent[i]->count,
                          core::error_code_name(recent[i]->code), recent[i]->message);
  }
  return s;
}

}  // namespace detail

// ---- handle -------------------------------------------------------------------------------------

namespace {
absl::StatusOr<std::unique_ptr<detail::ContextImpl>> make_impl(absl::StatusOr<core::Config> cfg) {
  if (!cfg.ok()) return cfg.status();
  auto impl = std::make_unique<detail::ContextImpl>();
  impl->cfg = std::move(*cfg);
  if (absl::Status s = impl->start(); !s.ok()) return s;
  return impl;
}
}  // namespace

absl::StatusOr<std::unique_ptr<Context>> Context::adopt(absl::StatusOr<std::unique_ptr<detail::ContextImpl>> impl) {
  if (!impl.ok()) return impl.status();
  std::unique_ptr<Context> c(new Context());
  c->impl_ = std::move(*impl);
  auto rec = detail::start_recordings(*c, c->impl_->cfg);
  if (!rec.ok()) return rec.status();
  c->impl_->recordings = std::move(*rec);
  return c;
}

absl::StatusOr<std::unique_ptr<Context>> Context::from_string(std::string_view toml, std::string_view source_name) {
  return adopt(make_impl(core::parse_config(toml, source_name)));
}

absl::StatusOr<std::unique_ptr<Context>> Context::from_file(const std::string& path) {
  return adopt(make_impl(core::load_config_file(path)));
}

Context::~Context() {
  if (impl_ != nullptr) (void)detail::stop_recordings(impl_->recordings);
}

std::vector<RecordingStatus> Context::stop_recordings() { return detail::stop_recordings(impl_->recordings); }

absl::StatusOr<Publisher> Context::publisher(std::string_view topic) {
  auto p = impl_->open_publisher(topic);
  if (!p.ok()) return p.status();
  return Publisher(std::move(*p));
}

absl::StatusOr<Subscriber> Context::subscriber(std::string_view topic) {
  const core::Config& cfg = impl_->cfg;
  const core::StreamConfig* sc = cfg.find_stream(cfg.stream_id(topic));
  if (sc == nullptr || sc->start == core::StreamConfig::Start::kLive) return live_subscriber(topic);
  LateJoinOptions o;
  o.directory = cfg.archive_dir_of(*sc);
  switch (sc->start) {
    case core::StreamConfig::Start::kSequence:
      o.start = LateJoinOptions::Start::kPosition;
      o.from = ReplayPosition::at_sequence(sc->start_sequence);
      break;
    case core::StreamConfig::Start::kTime:
      o.start = LateJoinOptions::Start::kPosition;
      o.from = ReplayPosition::at_time(sc->start_time_ns);
      break;
    default:
      o.start = LateJoinOptions::Start::kEarliest;
  }
  o.max_buffered_bytes = sc->max_catchup_bytes;
  absl::StatusOr<std::unique_ptr<LateJoinSubscriber>> late = LateJoinSubscriber::open(*this, topic, o);
  if (!late.ok()) return late.status();
  return Subscriber(std::move(*late));
}

absl::StatusOr<Subscriber> Context::live_subscriber(std::string_view topic) {
  auto s = impl_->open_subscriber(topic);
  if (!s.ok()) return s.status();
  return Subscriber(std::move(*s));
}

std::uint32_t Context::stream_id(std::string_view topic) const { return impl_->cfg.stream_id(topic); }
std::string Context::effective_config() const { return impl_->cfg.to_toml(); }
std::string Context::describe() const { return impl_->describe(); }
std::string Context::counters_path() const { return impl_->counters->path(); }

AppCounter Context::counter(std::string_view scope, std::string_view name) {
  return AppCounter(impl_->counters->allocate(scope, name).cell());
}

AppHistogram Context::histogram(std::string_view scope, std::string_view name) {
  core::CountersFile& f = *impl_->counters;
  const std::string base(name.substr(0, 40));
  const std::uint16_t owner = f.new_owner();
  auto cell = [&](const std::string& n) {
    return f.allocate(scope, absl::StrCat(base, " ", n), 0, core::CounterKind::kHistogram, owner).cell();
  };
  AppHistogram h;
  for (std::size_t i = 0; i + 1 < AppHistogram::kBuckets; ++i) {
    h.buckets_[i] = cell(absl::StrCat("le ", AppHistogram::kBoundsNs[i]));
  }
  h.buckets_[AppHistogram::kBuckets - 1] = cell("le inf");
  h.sum_ns_ = cell("sum_ns");
  h.count_ = cell("count");
  return h;
}

}  // namespace pollux
