// The RDMA transport's control plane (transport.kind = "rdma", docs/RDMA.md): opens the device,
// registers the pool once in its protection domain, owns the per-poller completion groups and
// the RC connection manager, and opens endpoints.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/rdma/completion_group.h"
#include "transport/rdma/connection_manager.h"
#include "transport/rdma/device.h"
#include "transport/transport.h"

namespace pollux::transport::rdma {

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
  absl::StatusOr<core::ProgressSource*> poller_source(int poller) override {
    while (sources_.size() <= static_cast<std::size_t>(poller)) {
      sources_.push_back(std::make_unique<SelfProgressingSource>("rdma"));
    }
    return sources_[static_cast<std::size_t>(poller)].get();
  }

  void retire(Conn* c) override;
  // An inline endpoint closed: its private group (CQ, and SRQ with pool slots carved for good)
  // is kept for the next inline endpoint instead of being leaked. Any thread; the mutex hands
  // the group's owner-thread state over to its next owner.
  void release_inline_group(CompletionGroup* g);

  // Internal, for endpoints and the connection manager.
  const core::RdmaConfig& cfg() const noexcept { return env_.config->rdma; }
  const core::Config& config() const noexcept { return *env_.config; }
  Device& device() noexcept { return *dev_; }
  core::BufferPool& pool() noexcept { return *env_.pool; }
  core::CountersFile& counters() noexcept { return *env_.counters; }
  ConnectionManager* cm() noexcept { return cm_.get(); }
  bool ud() const noexcept { return cfg().mode == core::RdmaMode::kUdMulticast; }
  std::string describe() const;

 private:
  explicit RdmaTransport(const TransportEnv& env) : env_(env) {}
  absl::StatusOr<CompletionGroup*> group_for(int poller);

  TransportEnv env_;
  std::vector<std::unique_ptr<core::ProgressSource>> sources_;
  std::unique_ptr<Device> dev_;
  std::unique_ptr<ConnectionManager> cm_;
  std::mutex mu_;  // control plane: groups
  std::map<int, std::unique_ptr<CompletionGroup>> groups_;     // by poller index
  std::vector<std::unique_ptr<CompletionGroup>> inline_groups_; // one per inline endpoint
  std::vector<CompletionGroup*> idle_inline_groups_;            // released, reusable
  bool closed_ = false;
  core::Counter c_registrations_;
};

}  // namespace pollux::transport::rdma
