#include "transport/udp/udp_socket.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <linux/net_tstamp.h>
#include <net/if.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "transport/udp/udp_config.h"

namespace pollux::transport::udp {
namespace {

struct Iface {
  std::string name;
  in_addr addr;
};

std::vector<Iface> ipv4_interfaces() {
  std::vector<Iface> out;
  ifaddrs* ifa = nullptr;
  if (getifaddrs(&ifa) != 0) return out;
  for (ifaddrs* p = ifa; p != nullptr; p = p->ifa_next) {
    if (p->ifa_addr == nullptr || p->ifa_addr->sa_family != AF_INET) continue;
    out.push_back({p->ifa_name, reinterpret_cast<sockaddr_in*>(p->ifa_addr)->sin_addr});
  }
  freeifaddrs(ifa);
  return out;
}

std::string list(const std::vector<Iface>& ifs) {
  std::vector<std::string> v;
  for (const Iface& i : ifs) v.push_back(absl::StrCat(i.name, " ", inet_ntoa(i.addr)));
  return v.empty() ? "none" : absl::StrJoin(v, ", ");
}

absl::Status sys_error(const core::Config& cfg, std::string_view key, std::string_view what, int err) {
  return absl::UnavailableError(absl::StrFormat("%s: %s: %s: %s", cfg.source, key, what, std::strerror(err)));
}

// A new non-blocking UDP socket in si.fd.
absl::Status new_socket(const core::Config& cfg, SocketInfo& si) {
  si.fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  return si.fd < 0 ? sys_error(cfg, "udp", "socket()", errno) : absl::OkStatus();
}

// A step of an open failed (errno): the error names the key that governs it; the socket is closed.
absl::Status close_failed(const core::Config& cfg, int fd, std::string_view key, std::string_view what) {
  const int err = errno;
  ::close(fd);
  return sys_error(cfg, key, what, err);
}

// Asks for a socket buffer of `bytes`: the privileged option `forced` (beyond net.core.[rw]mem_max),
// else `capped` (up to that limit). `granted`: the size the kernel gave.
void set_buffer(int fd, int forced, int capped, std::uint64_t bytes, int& granted) {
  const int v = static_cast<int>(std::min<std::uint64_t>(bytes, INT32_MAX));
  if (setsockopt(fd, SOL_SOCKET, forced, &v, sizeof v) != 0) (void)setsockopt(fd, SOL_SOCKET, capped, &v, sizeof v);
  socklen_t len = sizeof granted;
  getsockopt(fd, SOL_SOCKET, capped, &granted, &len);
}

}  // namespace

absl::StatusOr<OpenChannel> open_channel(const core::Config& cfg, const core::StreamConfig* stream, bool rx) {
  auto ch = resolve_channel(cfg, stream);
  if (!ch.ok()) return ch.status();
  auto sock = rx ? open_rx_socket(cfg, *ch) : open_tx_socket(cfg, *ch);
  if (!sock.ok()) return sock.status();
  return OpenChannel{*ch, std::move(*sock)};
}

std::string to_string(const sockaddr_in& a) {
  char buf[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &a.sin_addr, buf, sizeof buf);
  return absl::StrFormat("%s:%u", buf, ntohs(a.sin_port));
}

absl::StatusOr<Channel> resolve_channel(const core::Config& cfg, const core::StreamConfig* stream) {
  const udp::UdpConfig& u = udp::config(cfg);
  Channel ch;
  const std::string address = stream != nullptr && !stream->udp_address.empty() ? stream->udp_address : u.address;
  const std::uint32_t port = stream != nullptr && stream->udp_port != 0 ? stream->udp_port : u.port;
  const char* addr_key = stream != nullptr && !stream->udp_address.empty() ? "streams.udp_address" : "udp.address";
  ch.address_key = addr_key;
  ch.port_key = stream != nullptr && stream->udp_port != 0 ? "streams.udp_port" : "udp.port";
  ch.kernel_timestamps = udp::kernel_timestamps(cfg, stream);
  ch.dest.sin_family = AF_INET;
  ch.dest.sin_port = htons(static_cast<std::uint16_t>(port));
  if (inet_pton(AF_INET, address.c_str(), &ch.dest.sin_addr) != 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %s: \"%s\" is not an IPv4 address", cfg.source, addr_key, address));
  }
  ch.multicast = (ntohl(ch.dest.sin_addr.s_addr) >> 28) == 0xE;
  ch.iface.s_addr = htonl(INADDR_ANY);
  if (!u.interface.empty()) {
    const std::vector<Iface> ifs = ipv4_interfaces();
    in_addr a{};
    bool found = false;
    if (inet_pton(AF_INET, u.interface.c_str(), &a) == 1) {
      for (const Iface& i : ifs) {
        if (i.addr.s_addr == a.s_addr) {
          ch.iface_name = i.name;
          found = true;
        }
      }
      if (!found) {
        return absl::NotFoundError(absl::StrFormat("%s: udp.interface: no local interface has address %s (have: %s)",
                                                   cfg.source, u.interface, list(ifs)));
      }
      ch.iface = a;
    } else {
      for (const Iface& i : ifs) {
        if (i.name == u.interface && !found) {
          ch.iface = i.addr;
          found = true;
        }
      }
      if (!found) {
        return absl::NotFoundError(absl::StrFormat("%s: udp.interface: no IPv4 interface named \"%s\" (have: %s)",
                                                   cfg.source, u.interface, list(ifs)));
      }
      ch.iface_name = u.interface;
    }
    ch.ifindex = static_cast<int>(if_nametoindex(ch.iface_name.c_str()));
  }
  ch.text = absl::StrFormat("%s %s", ch.multicast ? "multicast" : "unicast", to_string(ch.dest));
  if (ch.multicast) {
    absl::StrAppendFormat(&ch.text, " via %s",
                          ch.iface_name.empty() ? std::string("the default route")
                                                : absl::StrCat(ch.iface_name, " (", inet_ntoa(ch.iface), ")"));
  }
  return ch;
}

absl::StatusOr<SocketInfo> open_tx_socket(const core::Config& cfg, const Channel& ch) {
  const udp::UdpConfig& u = udp::config(cfg);
  SocketInfo si;
  if (absl::Status s = new_socket(cfg, si); !s.ok()) return s;
  auto fail = [&](std::string_view key, std::string_view what) { return close_failed(cfg, si.fd, key, what); };
  set_buffer(si.fd, SO_SNDBUFFORCE, SO_SNDBUF, u.socket_sndbuf, si.sndbuf);
  sockaddr_in local{};
  local.sin_family = AF_INET;
  local.sin_port = 0;  // ephemeral: subscribers learn it from the datagrams and NAK to it
  local.sin_addr.s_addr = htonl(INADDR_ANY);
  if (ch.multicast) {
    // Source address on the chosen interface, so NAKs come back the same way.
    local.sin_addr = ch.iface;
    ip_mreqn m{};
    m.imr_address = ch.iface;
    m.imr_ifindex = ch.ifindex;
    if (setsockopt(si.fd, IPPROTO_IP, IP_MULTICAST_IF, &m, sizeof m) != 0) {
      return fail("udp.interface", absl::StrCat("IP_MULTICAST_IF ", ch.iface_name));
    }
    const int ttl = static_cast<int>(u.ttl);
    if (setsockopt(si.fd, IPPROTO_IP, IP_MULTICAST_TTL, &ttl, sizeof ttl) != 0)
      return fail("udp.ttl", "IP_MULTICAST_TTL");
    const int loop = u.loopback ? 1 : 0;
    if (setsockopt(si.fd, IPPROTO_IP, IP_MULTICAST_LOOP, &loop, sizeof loop) != 0) {
      return fail("udp.loopback", "IP_MULTICAST_LOOP");
    }
  }
  if (::bind(si.fd, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0) {
    return fail("udp.interface", absl::StrCat("bind ", to_string(local)));
  }
  if (!ch.multicast) {
    sockaddr_in dest = ch.dest;
    if (::connect(si.fd, reinterpret_cast<sockaddr*>(&dest), sizeof dest) != 0) {
      return fail("udp.address", absl::StrCat("connect ", to_string(dest)));
    }
    si.connected = true;
  }
  return si;
}

namespace {
constexpr int kTxStampFlags = SOF_TIMESTAMPING_OPT_ID | SOF_TIMESTAMPING_OPT_TSONLY | SOF_TIMESTAMPING_SOFTWARE;
}  // namespace

void enable_tx_timestamps(SocketInfo& si) {
  const int flags = kTxStampFlags;
  if (setsockopt(si.fd, SOL_SOCKET, SO_TIMESTAMPING, &flags, sizeof flags) == 0) {
    si.kernel_timestamps = true;
  } else {
    absl::StrAppendFormat(&si.notes, "SO_TIMESTAMPING (TX software timestamps) refused: %s; ", std::strerror(errno));
  }
}

bool restart_tx_timestamp_ids(int fd) {
  const int off = kTxStampFlags & ~SOF_TIMESTAMPING_OPT_ID;
  const int on = kTxStampFlags;
  return setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPING, &off, sizeof off) == 0 &&
         setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPING, &on, sizeof on) == 0;
}

absl::StatusOr<SocketInfo> open_rx_socket(const core::Config& cfg, const Channel& ch) {
  const udp::UdpConfig& u = udp::config(cfg);
  SocketInfo si;
  if (absl::Status s = new_socket(cfg, si); !s.ok()) return s;
  auto fail = [&](std::string_view key, std::string_view what) { return close_failed(cfg, si.fd, key, what); };
  const int one = 1;
  // Several subscribers of one group on a host each bind the port (each gets every datagram).
  // Not for unicast: two sockets on one unicast port would split the datagrams between them.
  if (ch.multicast && setsockopt(si.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) {
    return fail(ch.port_key, "SO_REUSEADDR");
  }
  set_buffer(si.fd, SO_RCVBUFFORCE, SO_RCVBUF, u.socket_rcvbuf, si.rcvbuf);
  if (static_cast<std::uint64_t>(si.rcvbuf) < u.socket_rcvbuf) {
    absl::StrAppendFormat(&si.notes, "SO_RCVBUF capped at %d (raise net.core.rmem_max); ", si.rcvbuf);
  }
  if (ch.kernel_timestamps) {
    // Every datagram gets its receive time (and the host a global net timestamp static key:
    // netif_rx stamps every packet while any socket asks).
    const int flags = SOF_TIMESTAMPING_RX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE;
    if (setsockopt(si.fd, SOL_SOCKET, SO_TIMESTAMPING, &flags, sizeof flags) == 0) {
      si.kernel_timestamps = true;
    } else {
      absl::StrAppendFormat(&si.notes, "udp.kernel_timestamps: SO_TIMESTAMPING refused: %s; ", std::strerror(errno));
    }
  }
  if (u.busy_poll_us > 0) {
    const int us = static_cast<int>(u.busy_poll_us);
    if (setsockopt(si.fd, SOL_SOCKET, SO_BUSY_POLL, &us, sizeof us) == 0) {
      si.busy_poll = true;
    } else {
      absl::StrAppendFormat(&si.notes, "SO_BUSY_POLL refused (%s: needs CAP_NET_ADMIN); ", std::strerror(errno));
    }
  }
  // Bound to the group (or the unicast address) itself: the socket then gets only this
  // channel's datagrams, not every datagram for the port.
  sockaddr_in local = ch.dest;
  if (::bind(si.fd, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0) {
    const int err = errno;
    ::close(si.fd);
    if (err == EADDRINUSE && ch.multicast) {
      return absl::AlreadyExistsError(absl::StrFormat(
          "%s: %s: port %u of group %s (%s) is held by a socket that does not share it (bound without "
          "SO_REUSEADDR, by another program?): choose another %s or stop that program",
          cfg.source, ch.port_key, ntohs(ch.dest.sin_port), inet_ntoa(ch.dest.sin_addr), ch.address_key, ch.port_key));
    }
    if (err == EADDRINUSE) {
      return absl::AlreadyExistsError(absl::StrFormat(
          "%s: %s: %s (%s %s, %s %u) is already in use by another socket - another unicast subscriber of it, "
          "or another program: a unicast subscriber needs the port to itself; choose another %s or stop the other one",
          cfg.source, ch.port_key, to_string(ch.dest), ch.address_key, inet_ntoa(ch.dest.sin_addr), ch.port_key,
          ntohs(ch.dest.sin_port), ch.port_key));
    }
    if (err == EADDRNOTAVAIL && !ch.multicast) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: %s: cannot bind %s: no local interface has address %s (a unicast subscriber binds its own address)",
          cfg.source, ch.address_key, to_string(local), inet_ntoa(ch.dest.sin_addr)));
    }
    return sys_error(cfg, ch.multicast ? ch.port_key : ch.address_key, absl::StrCat("bind ", to_string(local)), err);
  }
  if (ch.multicast) {
    const int zero = 0;
    (void)setsockopt(si.fd, IPPROTO_IP, IP_MULTICAST_ALL, &zero, sizeof zero);
    ip_mreqn m{};
    m.imr_multiaddr = ch.dest.sin_addr;
    m.imr_address = ch.iface;
    m.imr_ifindex = ch.ifindex;
    if (setsockopt(si.fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof m) != 0) {
      return fail("udp.interface", absl::StrCat("joining ", to_string(ch.dest), " on ",
                                                ch.iface_name.empty() ? "the default interface" : ch.iface_name));
    }
  }
  return si;
}

}  // namespace pollux::transport::udp
