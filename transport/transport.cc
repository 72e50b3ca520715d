#include "transport/transport.h"

#include "absl/strings/str_format.h"
#include "transport/shm/shm_transport.h"
#include "transport/udp/udp_transport.h"

namespace pollux::transport {

absl::StatusOr<std::unique_ptr<Transport>> make_transport(const TransportEnv& env) {
  switch (env.config->transport) {
    case core::TransportKind::kShm:
      return std::unique_ptr<Transport>(new shm::ShmTransport(env));
    case core::TransportKind::kUdp:
      return std::unique_ptr<Transport>(new udp::UdpTransport(env));
    case core::TransportKind::kRdma:
      break;
  }
  return absl::UnimplementedError(absl::StrFormat(
      "%s: transport.kind = \"%s\" is not available in this build (only \"shm\" is)", env.config->source,
      core::transport_name(env.config->transport)));
}

}  // namespace pollux::transport
