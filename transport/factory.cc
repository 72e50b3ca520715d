// The transport registry: the one place that knows every transport's class. The API reaches the
// transports through make_transport() and the Transport interface only.
#include "transport/transport.h"

#include "absl/strings/str_format.h"
#include "core/counter_help.h"
#include "transport/rdma/rdma_config.h"
#include "transport/shm/shm_config.h"
#include "transport/shm/shm_transport.h"
#if POLLUX_HAVE_RDMA
#include "transport/rdma/connection_manager.h"
#include "transport/rdma/device.h"
#include "transport/rdma/rdma_endpoints.h"
#include "transport/rdma/rdma_transport.h"
#include "transport/rdma/ud_endpoints.h"
#endif
#include "transport/udp/poller_source.h"
#include "transport/udp/rx_endpoint.h"
#include "transport/udp/tx_core.h"
#include "transport/udp/udp_config.h"
#include "transport/udp/udp_transport.h"

namespace pollux::core {

// The order of the tables in Config::to_toml().
void register_transport_tables(ConfigRegistry& r) {
  transport::shm::register_config(r);
  transport::rdma::register_config(r);
  transport::udp::register_config(r);
}

#define POLLUX_HELP_ENTRY_(field, name, help, ...) CounterInfo{name, help},
std::span<const CounterInfo> transport_counter_help() noexcept {
  static constexpr CounterInfo kHelp[] = {
    POLLUX_SHM_TX_COUNTERS(POLLUX_HELP_ENTRY_) POLLUX_SHM_RX_COUNTERS(POLLUX_HELP_ENTRY_)
        POLLUX_SENDER_COUNTERS(POLLUX_HELP_ENTRY_) POLLUX_RECEIVER_COUNTERS(POLLUX_HELP_ENTRY_)
            POLLUX_UDP_TX_COUNTERS(POLLUX_HELP_ENTRY_) POLLUX_UDP_TX_STAMP_COUNTERS(POLLUX_HELP_ENTRY_)
                POLLUX_UDP_RX_COUNTERS(POLLUX_HELP_ENTRY_) POLLUX_UDP_RX_STAMP_COUNTERS(POLLUX_HELP_ENTRY_)
                    POLLUX_UDP_POLLER_COUNTERS(POLLUX_HELP_ENTRY_) POLLUX_UDP_XDP_COUNTERS(POLLUX_HELP_ENTRY_)
#if POLLUX_HAVE_RDMA
                        POLLUX_RDMA_GROUP_COUNTERS(POLLUX_HELP_ENTRY_) POLLUX_RDMA_CM_COUNTERS(POLLUX_HELP_ENTRY_)
                            POLLUX_RDMA_TX_COUNTERS(POLLUX_HELP_ENTRY_) POLLUX_RDMA_RX_COUNTERS(POLLUX_HELP_ENTRY_)
                                POLLUX_UD_TX_COUNTERS(POLLUX_HELP_ENTRY_) POLLUX_UD_RX_COUNTERS(POLLUX_HELP_ENTRY_)
#endif
  };
  return kHelp;
}
#undef POLLUX_HELP_ENTRY_

}  // namespace pollux::core

namespace pollux::transport {

absl::StatusOr<std::unique_ptr<Transport>> make_transport(const TransportEnv& env) {
  switch (env.config->transport) {
    case core::TransportKind::kShm:
      return std::unique_ptr<Transport>(new shm::ShmTransport(env));
    case core::TransportKind::kUdp:
      return std::unique_ptr<Transport>(new udp::UdpTransport(env));
    case core::TransportKind::kRdma:
#if POLLUX_HAVE_RDMA
      return rdma::RdmaTransport::create(env);
#else
      break;
#endif
  }
  return absl::UnimplementedError(
      absl::StrFormat("%s: transport.kind = \"%s\" is not available in this build (only \"shm\" is)",
                      env.config->source, core::transport_name(env.config->transport)));
}

std::string placement_device(const core::Config& config) {
  if (!config.runtime.device.empty()) return config.runtime.device;
#if POLLUX_HAVE_RDMA
  if (config.transport == core::TransportKind::kRdma) {
    auto name = rdma::resolve_device_name(rdma::config(config), "");
    if (name.ok()) return *name;
  }
#endif
  return "";
}

std::string_view flow_control_name(const core::Config& config) {
  return shm::flow_control_name(shm::config(config).flow_control);
}

bool needs_pool(const core::Config& config) {
  return config.runtime.threading != core::ThreadingMode::kInline || config.transport != core::TransportKind::kShm;
}

bool position_in_stream_counters(const core::Config& config) { return config.transport != core::TransportKind::kShm; }

}  // namespace pollux::transport
