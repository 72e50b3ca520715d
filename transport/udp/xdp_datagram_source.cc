// The AF_XDP datagram source (transport.h: DatagramSource), behind pollux::DatagramReceiver: one
// xdp::Xsk on the interface's RX queues (or one), the destinations added in its program's map, and one kernel
// socket per multicast destination for the IGMP membership (the XDP program takes the frames
// before that socket could read any).
#include <arpa/inet.h>
#include <linux/if_xdp.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "transport/transport.h"
#if POLLUX_HAVE_XDP
#include "transport/udp/xdp/frame.h"
#include "transport/udp/xdp/preflight.h"
#include "transport/udp/xdp/xsk.h"
#endif

namespace pollux::transport {

#if POLLUX_HAVE_XDP
namespace {

constexpr std::uint32_t kFrameSize = 4096;
constexpr std::uint32_t kMaxBatch = 64;

std::string addr_text(std::uint32_t addr) {
  char text[INET_ADDRSTRLEN] = "?";
  in_addr a{addr};
  inet_ntop(AF_INET, &a, text, sizeof text);
  return text;
}

class XdpDatagramSource final : public DatagramSource {
 public:
  XdpDatagramSource(std::unique_ptr<udp::xdp::Xsk> xsk, int ifindex) : xsk_(std::move(xsk)), ifindex_(ifindex) {}
  ~XdpDatagramSource() override {
    for (const Dest& d : dests_) {
      (void)xsk_->remove_destination(d.addr, d.port);
      if (d.fd >= 0) ::close(d.fd);
    }
  }

  absl::StatusOr<std::uint32_t> add(std::uint32_t addr, std::uint16_t port, std::uint32_t source) override {
    const std::string where = absl::StrFormat("%s:%u", addr_text(addr), ntohs(port));
    for (const Dest& d : dests_) {
      if (d.addr == addr && d.port == port) {
        return absl::AlreadyExistsError(absl::StrCat(where, " is already received on ", xsk_->ifname()));
      }
    }
    int fd = -1;
    if (IN_MULTICAST(ntohl(addr))) {
      absl::StatusOr<int> s = join(addr, port, source, where);
      if (!s.ok()) return s.status();
      fd = *s;
    }
    if (absl::Status st = xsk_->add_destination(addr, port); !st.ok()) {
      if (fd >= 0) ::close(fd);
      return st;
    }
    dests_.push_back(Dest{addr, port, fd});
    return static_cast<std::uint32_t>(dests_.size() - 1);
  }

  std::uint32_t peek(RawDatagram* out, std::uint32_t max) noexcept override {
    udp::xdp::RxFrame frames[kMaxBatch];
    const std::uint32_t n = xsk_->rx_peek(frames, max < kMaxBatch ? max : kMaxBatch);
    // An empty ring: a zero-copy driver that went to sleep asks for a wakeup (copy mode never does).
    if (n == 0) (void)xsk_->rx_kick(false);
    std::uint32_t k = 0;
    for (std::uint32_t i = 0; i < n; ++i) {
      udp::xdp::Udp4View v;
      if (__builtin_expect(!udp::xdp::parse_udp4_frame(frames[i].data, frames[i].len, &v), 0)) {
        ++stats_.malformed;
        continue;
      }
      const udp::xdp::Checksums sums = udp::xdp::check_udp4_checksums(frames[i].data, v);
      if (__builtin_expect(sums == udp::xdp::Checksums::kBad, 0)) {
        ++stats_.malformed;
        continue;
      }
      if (sums == udp::xdp::Checksums::kPartial) ++stats_.partial_checksums;
      std::uint32_t line = 0;
      const auto nd = static_cast<std::uint32_t>(dests_.size());
      while (line < nd &&
             !(dests_[line].port == v.dst_port && (dests_[line].addr == 0 || dests_[line].addr == v.dst_addr))) {
        ++line;
      }
      if (__builtin_expect(line == nd, 0)) {
        ++stats_.unmatched;
        continue;
      }
      out[k++] = RawDatagram{v.payload, static_cast<std::uint32_t>(v.len), line, v.src_addr, v.src_port};
    }
    stats_.frames += n;
    return k;
  }

  void release() noexcept override { xsk_->rx_release(); }
  int fd() const noexcept override { return xsk_->fd(); }
  bool pending() const noexcept override { return xsk_->rx_available(); }

  DatagramSourceStats stats() noexcept override {
    stats_.kernel_dropped = xsk_->kernel_dropped();
    return stats_;
  }

  std::string describe() const override {
    const std::string& notes = xsk_->info().notes;
    return absl::StrCat(xsk_->describe(), notes.empty() ? "" : absl::StrCat(" (", notes, ")"));
  }

 private:
  struct Dest {
    std::uint32_t addr;
    std::uint16_t port;
    int fd;  // the membership's socket (-1: unicast)
  };

  // A socket bound to the group and port that holds the membership on the interface (IGMP); it
  // never reads. `source` != 0: source-specific, falling back to any-source where the kernel
  // cannot (the caller checks senders).
  absl::StatusOr<int> join(std::uint32_t addr, std::uint16_t port, std::uint32_t source, const std::string& where) {
    const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
    auto fail = [&](const char* what) {
      const absl::Status s =
          absl::UnavailableError(absl::StrFormat("%s %s on %s: %s", what, where, xsk_->ifname(), std::strerror(errno)));
      ::close(fd);
      return s;
    };
    const int one = 1, zero = 0, small = 4096;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    (void)::setsockopt(fd, IPPROTO_IP, IP_MULTICAST_ALL, &zero, sizeof zero);
    sockaddr_in g{};
    g.sin_family = AF_INET;
    g.sin_addr.s_addr = addr;
    g.sin_port = port;
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&g), sizeof g) != 0) return fail("bind");
    if (source != 0) {
      group_source_req r{};
      r.gsr_interface = static_cast<std::uint32_t>(ifindex_);
      g.sin_port = 0;
      sockaddr_in src{};
      src.sin_family = AF_INET;
      src.sin_addr.s_addr = source;
      std::memcpy(&r.gsr_group, &g, sizeof g);
      std::memcpy(&r.gsr_source, &src, sizeof src);
      if (::setsockopt(fd, IPPROTO_IP, MCAST_JOIN_SOURCE_GROUP, &r, sizeof r) == 0) return fd;
      if (errno != ENOPROTOOPT && errno != EINVAL) return fail("source-specific join");
    }
    ip_mreqn m{};
    m.imr_multiaddr.s_addr = addr;
    m.imr_ifindex = ifindex_;
    if (::setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof m) != 0) return fail("join");
    return fd;
  }

  std::unique_ptr<udp::xdp::Xsk> xsk_;
  int ifindex_;
  std::vector<Dest> dests_;
  DatagramSourceStats stats_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DatagramSource>> make_xdp_datagram_source(const DatagramSourceOptions& o) {
  udp::xdp::XskMode mode;
  if (o.xdp_mode == "auto") {
    mode = udp::xdp::XskMode::kAuto;
  } else if (o.xdp_mode == "copy") {
    mode = udp::xdp::XskMode::kCopy;
  } else if (o.xdp_mode == "zerocopy") {
    mode = udp::xdp::XskMode::kZeroCopy;
  } else if (o.xdp_mode == "generic") {
    mode = udp::xdp::XskMode::kGeneric;
  } else {
    return absl::InvalidArgumentError(
        absl::StrFormat("AF_XDP mode \"%s\": expected \"auto\", \"copy\", \"zerocopy\" or \"generic\"", o.xdp_mode));
  }
  if (o.ifname.empty()) {
    return absl::InvalidArgumentError("AF_XDP needs an interface by name: the socket is bound to one interface");
  }
  const int ifindex = static_cast<int>(if_nametoindex(o.ifname.c_str()));
  if (ifindex == 0) return absl::NotFoundError(absl::StrFormat("AF_XDP: no interface \"%s\"", o.ifname));
  // Every RX queue, or the one the lines are steered to.
  std::vector<std::uint32_t> requested;
  if (o.queue >= 0) requested.push_back(static_cast<std::uint32_t>(o.queue));
  absl::StatusOr<std::vector<std::uint32_t>> queues = udp::xdp::select_queues(o.ifname, requested, "AF_XDP");
  if (!queues.ok()) return queues.status();
  const std::uint64_t umem = static_cast<std::uint64_t>(o.frames) * kFrameSize;
  if (std::string why = udp::xdp::preflight(o.ifname, umem, "the kernel sockets' datapath", "the UMEM's frames");
      !why.empty()) {
    return absl::PermissionDeniedError(why);
  }
  udp::xdp::XskOptions xo;
  xo.ifname = o.ifname;
  xo.queues = *queues;
  xo.mode = mode;
  xo.frame_count = o.frames;
  xo.frame_size = kFrameSize;
  auto xsk = udp::xdp::Xsk::open(xo);
  if (!xsk.ok()) return xsk.status();
  return std::unique_ptr<DatagramSource>(new XdpDatagramSource(std::move(*xsk), ifindex));
}

#else

absl::StatusOr<std::unique_ptr<DatagramSource>> make_xdp_datagram_source(const DatagramSourceOptions& o) {
  return absl::UnimplementedError(absl::StrFormat(
      "AF_XDP on interface %s: this build has no AF_XDP support (configure with libxdp-dev, libbpf-dev and clang "
      "installed)",
      o.ifname));
}

#endif

}  // namespace pollux::transport
