// Control plane of the UDP transport: resolving a stream's channel (address, port,
// interface) and opening its non-blocking sockets with every option set, or an actionable
// error naming the config key.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "core/config.h"
#include "transport/udp/udp_config.h"

namespace pollux::transport::udp {

// Where one stream's datagrams go.
struct Channel {
  sockaddr_in dest{};  // group or unicast address + port
  bool multicast = false;
  in_addr iface{};                          // multicast interface address (INADDR_ANY: the kernel's choice)
  int ifindex = 0;                          // 0: unknown / the kernel's choice
  std::string iface_name;                   // for describe()
  std::string text;                         // "239.255.0.1:40456 via lo (127.0.0.1)"
  const char* address_key = "udp.address";  // the config keys that chose dest ([[streams]] overrides)
  const char* port_key = "udp.port";
  bool kernel_timestamps = false;  // SO_TIMESTAMPING for this stream (udp::kernel_timestamps)
};

// Resolves [udp] + the stream's [[streams]] overrides. Errors name the key
// ("<file>: udp.interface: no IPv4 interface named \"eth9\" (have: lo 127.0.0.1, ...)").
absl::StatusOr<Channel> resolve_channel(const core::Config& cfg, const core::StreamConfig* stream);

struct SocketInfo {
  int fd = -1;
  int rcvbuf = 0, sndbuf = 0;  // effective sizes (the kernel doubles what it was asked)
  bool busy_poll = false;      // SO_BUSY_POLL accepted
  bool connected = false;      // unicast publisher: connect()ed to the subscriber (no per-send route lookup)
  bool kernel_timestamps =
      false;          // SO_TIMESTAMPING accepted (subscriber: RX software stamps, udp.kernel_timestamps; publisher: TX)
  std::string notes;  // what was refused (not fatal), for describe()
};

// Publisher socket: non-blocking, bound to an ephemeral port (NAKs and status messages come
// back to it), multicast interface/TTL/loop set. Unicast: connect()ed to the subscriber's
// address, which is also where its NAKs come from (it binds that address), so nothing is
// filtered and every send skips the route lookup.
absl::StatusOr<SocketInfo> open_tx_socket(const core::Config& cfg, const Channel& ch);
// Traced publishers: SOF_TIMESTAMPING_OPT_ID | OPT_TSONLY | SOFTWARE on the socket, so that
// datagrams sent with a TX_SOFTWARE cmsg come back stamped on the error queue (nothing else does:
// no global cost). Refused is not fatal: sets kernel_timestamps false and says so in notes.
void enable_tx_timestamps(SocketInfo& si);
// Restarts the kernel's numbering of timestamped sends at 0 (OPT_ID off and on). False: refused.
bool restart_tx_timestamp_ids(int fd);
// Subscriber socket: non-blocking, bound to the group (or unicast address) and port, group
// joined on the interface, receive buffer and busy polling set. With
// udp.kernel_timestamps, SOF_TIMESTAMPING_RX_SOFTWARE | SOFTWARE (every datagram's kernel
// receive time in a cmsg; refused is reported in notes, not fatal). Multicast sockets set
// SO_REUSEADDR (every subscriber on the host gets every datagram); unicast ones do not, since
// the kernel would hand each datagram to only one of two sockets sharing the port: a port in
// use is an error naming the address, the port and its key.
absl::StatusOr<SocketInfo> open_rx_socket(const core::Config& cfg, const Channel& ch);

// A stream's channel (resolve_channel) and an endpoint's socket on it: open_rx_socket for a
// subscriber (`rx`), open_tx_socket for a publisher.
struct OpenChannel {
  Channel ch;
  SocketInfo sock;
};
absl::StatusOr<OpenChannel> open_channel(const core::Config& cfg, const core::StreamConfig* stream, bool rx);

std::string to_string(const sockaddr_in& a);

}  // namespace pollux::transport::udp
