// The RDMA transport's control plane (transport.kind = "rdma", docs/RDMA.md): opens the device,
// registers the pool once in its protection domain, owns the per-poller completion groups and
// the RC connection manager, and opens endpoints.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/rdma/completion_group.h"
#include "transport/rdma/connection_manager.h"
#include "transport/rdma/cq_moderation.h"
#include "transport/rdma/device.h"
#include "transport/rdma/rdma_config.h"
#include "transport/transport.h"

namespace pollux::transport::rdma {

// One per poller: the only code that polls the poller's shared CQ. progress() polls it once per
// duty cycle (a burst of up to CompletionGroup::kPollBurst completions) and dispatches every
// completion to its endpoint; the poller's endpoints are passive. Interrupt mode:
// try_arm() = CompletionGroup::try_arm() (ibv_req_notify_cq, then one more poll; refuses when
// that finds work, whose completions stay dispatched), disarm() consumes completion events
// (acknowledged in batches) and the control-plane bell, notify_fd() is the group's epoll fd
// over its completion channel and the bell (connection-manager announcements).
// housekeeping() re-posts batched receive buffers and drives CQ moderation (cq_moderation.h).
// Closing endpoints (endpoint_base.h) are stepped from progress(); while any is closing the
// source refuses to arm (a linger's deadline has no timer to wake the poller).
class RdmaPollerSource final : public core::ProgressSource {
 public:
  explicit RdmaPollerSource(CompletionGroup* g) : group_(g) {}
  int progress(std::int64_t now_ns) noexcept override {
    last_now_ns_ = now_ns;
    int done = group_->progress();
    // Endpoints closing on this poller (a lingering publisher): a step each, at most every
    // CompletionGroup::kCloseStepNs, between the poller's other duties.
    if (__builtin_expect(group_->has_closing(), 0)) done += group_->advance_closing(now_ns);
    return done;
  }
  int housekeeping(std::int64_t now_ns) noexcept override;
  bool try_arm() noexcept override;
  void disarm() noexcept override { group_->disarm(); }
  int notify_fd() const noexcept override { return group_->notify_fd(); }
  std::string_view name() const noexcept override { return "rdma"; }

  // Control path, before the poller drives the source (or on its thread).
  void set_moderation_policy(std::unique_ptr<CqModerationPolicy> p) { policy_ = std::move(p); }
  CompletionGroup* group() const noexcept { return group_; }

 private:
  // A poller that did not arm for this long was polling: the moderation interval restarts.
  static constexpr std::int64_t kPollingPhaseNs = 10'000'000;
  CompletionGroup* const group_;
  std::unique_ptr<CqModerationPolicy> policy_;
  std::int64_t last_now_ns_ = 0;
  std::int64_t last_arm_ns_ = 0;
};

class RdmaTransport final : public Transport, public ConnRetirer {
 public:
  static absl::StatusOr<std::unique_ptr<Transport>> create(const TransportEnv& env);
  ~RdmaTransport() override;

  std::string_view name() const override { return "rdma"; }
  absl::Status register_memory(core::BufferPool& pool) override;
  absl::StatusOr<std::unique_ptr<TxEndpoint>> open_tx(const EndpointSpec& spec) override;
  absl::StatusOr<std::unique_ptr<RxEndpoint>> open_rx(const EndpointSpec& spec) override;
  void close() override;
  bool shared_tx_endpoint() const noexcept override { return false; }  // a QP per publishing thread
  // The poller's source wraps the poller's completion group (created here if needed, so its
  // notify_fd() exists before the poller adds the source).
  absl::StatusOr<core::ProgressSource*> poller_source(int poller) override;

  void retire(Conn* c) override;
  // An inline endpoint closed: its private group (CQ, and SRQ with pool slots carved for good)
  // is kept for the next inline endpoint instead of being leaked. Any thread; the mutex hands
  // the group's owner-thread state over to its next owner.
  void release_inline_group(CompletionGroup* g);
  // Incremented (and waited on) each time an endpoint's close finishes (RdmaEndpointBase).
  std::atomic<std::uint32_t>& closes_finished() noexcept { return closes_finished_; }

  // Internal, for endpoints and the connection manager.
  const rdma::RdmaConfig& cfg() const noexcept { return rdma::config(*env_.config); }
  const core::Config& config() const noexcept { return *env_.config; }
  Device& device() noexcept { return *dev_; }
  core::BufferPool& pool() noexcept { return *env_.pool; }
  core::CountersFile& counters() noexcept { return *env_.counters; }
  ConnectionManager* cm() noexcept { return cm_.get(); }
  bool ud() const noexcept { return cfg().mode == rdma::RdmaMode::kUdMulticast; }
  std::string describe() const override;
  std::string stream_route(std::uint32_t stream_id) const override;

 private:
  explicit RdmaTransport(const TransportEnv& env) : env_(env) {}
  absl::StatusOr<CompletionGroup*> group_for(int poller);
  absl::StatusOr<std::unique_ptr<TxEndpoint>> open_ud_tx(const EndpointSpec& spec, CompletionGroup* g);
  // The Conn of a UD endpoint (its QP not created yet), addressed to rdma.multicast_group, whose
  // IPv4 address goes to `*group`.
  Conn* new_ud_conn(Conn::Kind kind, void* owner, std::uint32_t* group) const;

  TransportEnv env_;
  std::map<int, std::unique_ptr<RdmaPollerSource>> sources_;  // by poller index (under mu_)
  std::unique_ptr<Device> dev_;
  std::unique_ptr<ConnectionManager> cm_;
  std::mutex mu_;                                                // control plane: groups
  std::map<int, std::unique_ptr<CompletionGroup>> groups_;       // by poller index
  std::vector<std::unique_ptr<CompletionGroup>> inline_groups_;  // one per inline endpoint
  std::vector<CompletionGroup*> idle_inline_groups_;             // released, reusable
  bool closed_ = false;
  std::atomic<std::uint32_t> closes_finished_{0};
  core::Counter c_registrations_;
};

}  // namespace pollux::transport::rdma
