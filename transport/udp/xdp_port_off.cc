// A libpollux built without AF_XDP (POLLUX_WITH_XDP off, or libxdp/libbpf/clang missing at build
// time): udp.datapath = "xdp" is refused by the configuration check already (udp_config.cc); a
// port is never created, so only acquire() is ever called.
#include "transport/udp/xdp_port.h"

#include "absl/strings/str_cat.h"

namespace pollux::transport::udp {

absl::StatusOr<std::shared_ptr<XdpPort>> XdpPort::acquire(const core::Config& cfg, const Channel&, const void*,
                                                          core::CountersFile*) {
  return absl::UnimplementedError(absl::StrCat(cfg.source,
                                               ": udp.datapath: \"xdp\" needs a libpollux built with AF_XDP "
                                               "(libxdp-dev, libbpf-dev and clang at build time)"));
}
XdpPort::~XdpPort() = default;
absl::Status XdpPort::add_rx(std::uint32_t, std::uint16_t, UdpRxEndpoint*) { return absl::UnimplementedError("xdp"); }
void XdpPort::remove_rx(UdpRxEndpoint*) noexcept {}
std::uint32_t XdpPort::poll(std::int64_t) noexcept { return 0; }
std::uint32_t XdpPort::send(const sockaddr_in&, const std::uint8_t*, std::uint16_t, std::uint8_t,
                            std::span<const reliability::DatagramSink::Datagram>) noexcept {
  return 0;
}
XdpPort::Direct XdpPort::direct_peek(const UdpRxEndpoint*, std::int64_t, DirectFrame*) noexcept {
  return Direct::kEmpty;
}
void XdpPort::direct_done() noexcept {}
void XdpPort::direct_keep() noexcept {}
bool XdpPort::resolve(const sockaddr_in&, std::uint8_t*) const noexcept { return false; }
int XdpPort::fd() const noexcept { return -1; }
bool XdpPort::rx_pending() const noexcept { return false; }
std::uint32_t XdpPort::max_payload() const noexcept { return 0; }
std::string XdpPort::describe() const { return "AF_XDP not built"; }
void XdpPort::publish_counters(std::int64_t) noexcept {}
int XdpPort::mode_code() const noexcept { return 0; }

}  // namespace pollux::transport::udp
