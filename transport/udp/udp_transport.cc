#include "transport/udp/udp_transport.h"

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
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/clock.h"
#include "transport/udp/udp_config.h"

namespace pollux::transport::udp {

namespace {
// A number from /proc/sys (net.core.rmem_max), or -1.
long long read_sysctl(const char* path) {
  std::FILE* f = std::fopen(path, "r");
  if (f == nullptr) return -1;
  long long v = -1;
  if (std::fscanf(f, "%lld", &v) != 1) v = -1;
  std::fclose(f);
  return v;
}
}  // namespace

std::string UdpTransport::describe() const {
  const udp::UdpConfig& u = udp::config(*env_.config);
  std::string rcvbuf = absl::StrCat("socket_rcvbuf ", core::format_size(u.socket_rcvbuf));
  // The kernel silently caps SO_RCVBUF at net.core.rmem_max: say what a socket really gets.
  if (const long long max = read_sysctl("/proc/sys/net/core/rmem_max");
      max >= 0 && static_cast<std::uint64_t>(max) < u.socket_rcvbuf) {
    absl::StrAppend(&rcvbuf, " asked, effective ", core::format_size(static_cast<std::uint64_t>(max)),
                    " (capped by net.core.rmem_max; raise it, see pollux-doctor)");
  } else if (max >= 0) {
    absl::StrAppend(&rcvbuf, " (effective: net.core.rmem_max = ", core::format_size(static_cast<std::uint64_t>(max)),
                    " allows it)");
  }
  return absl::StrFormat("udp (every stream): %s:%u on interface %s, %s, socket_sndbuf %s", u.address, u.port,
                         u.interface.empty() ? "(the kernel's choice)" : u.interface, rcvbuf,
                         core::format_size(u.socket_sndbuf));
}

std::string UdpTransport::stream_route(std::uint32_t stream_id) const {
  const core::Config& c = *env_.config;
  const core::StreamConfig* sc = c.find_stream(stream_id);
  const std::string addr = sc != nullptr && !sc->udp_address.empty() ? sc->udp_address : udp::config(c).address;
  const std::uint32_t port = sc != nullptr && sc->udp_port != 0 ? sc->udp_port : udp::config(c).port;
  return absl::StrFormat("udp %s:%u", addr, port);
}

absl::StatusOr<core::ProgressSource*> UdpTransport::poller_source(int poller) {
  if (poller < 0) return absl::InvalidArgumentError("udp: poller_source: poller index must be >= 0");
  while (sources_.size() <= static_cast<std::size_t>(poller)) {
    auto s = UdpPollerSource::create(static_cast<int>(sources_.size()), env_.counters);
    if (!s.ok()) return s.status();
    sources_.push_back(std::move(*s));
  }
  return sources_[static_cast<std::size_t>(poller)].get();
}

absl::StatusOr<UdpPollerSource*> UdpTransport::source_for(const EndpointSpec& spec) {
  if (spec.poller < 0) return nullptr;
  if (static_cast<std::size_t>(spec.poller) >= sources_.size()) {
    // The context asks for every poller's source before it opens endpoints on it.
    return absl::FailedPreconditionError(
        absl::StrFormat("udp: stream %u: endpoint for poller %d, which has no progress source (poller_source() first)",
                        spec.stream_id, spec.poller));
  }
  return sources_[static_cast<std::size_t>(spec.poller)].get();
}

absl::StatusOr<std::unique_ptr<TxEndpoint>> UdpTransport::open_tx(const EndpointSpec& spec) {
  auto src = source_for(spec);
  if (!src.ok()) return src.status();
  return UdpTxEndpoint::open(env_, spec, *src);  // the StatusOr converts to the interface's
}

absl::StatusOr<std::unique_ptr<RxEndpoint>> UdpTransport::open_rx(const EndpointSpec& spec) {
  auto src = source_for(spec);
  if (!src.ok()) return src.status();
  return UdpRxEndpoint::open(env_, spec, *src);
}

void UdpTransport::close() {
  // The pollers have stopped (ContextImpl stops them first): publishers that closed just before
  // still get their tail repaired and their end confirmed, as an inline close would.
  for (auto& s : sources_) s->finish_lingers();
  sources_.clear();
}

}  // namespace pollux::transport::udp
