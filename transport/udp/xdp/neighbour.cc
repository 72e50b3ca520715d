#include "transport/udp/xdp/neighbour.h"

#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace pollux::transport::udp::xdp {

MacAddress multicast_mac(std::uint32_t group) {
  const std::uint8_t* g = reinterpret_cast<const std::uint8_t*>(&group);
  return MacAddress{{0x01, 0x00, 0x5e, static_cast<std::uint8_t>(g[1] & 0x7f), g[2], g[3]}};
}

absl::StatusOr<std::uint32_t> next_hop(int ifindex, std::uint32_t addr) {
  const int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd < 0) {
    return absl::Status(absl::ErrnoToStatusCode(errno),
                        absl::StrCat("route lookup: netlink socket: ", std::strerror(errno)));
  }
  struct {
    nlmsghdr header;
    rtmsg body;
    char attrs[64];
  } request{};
  request.header.nlmsg_type = RTM_GETROUTE;
  request.header.nlmsg_flags = NLM_F_REQUEST;
  request.header.nlmsg_seq = 1;
  request.body.rtm_family = AF_INET;
  request.body.rtm_dst_len = 32;
  int len = static_cast<int>(NLMSG_LENGTH(sizeof(rtmsg)));
  auto add_attr = [&](unsigned short type, const void* data, std::size_t size) {
    auto* a = reinterpret_cast<rtattr*>(reinterpret_cast<char*>(&request) + NLMSG_ALIGN(len));
    a->rta_type = type;
    a->rta_len = static_cast<unsigned short>(RTA_LENGTH(size));
    std::memcpy(RTA_DATA(a), data, size);
    len = static_cast<int>(NLMSG_ALIGN(len) + RTA_ALIGN(a->rta_len));
  };
  add_attr(RTA_DST, &addr, 4);
  add_attr(RTA_OIF, &ifindex, 4);
  request.header.nlmsg_len = static_cast<std::uint32_t>(len);
  if (send(fd, &request, request.header.nlmsg_len, 0) < 0) {
    const int e = errno;
    close(fd);
    return absl::Status(absl::ErrnoToStatusCode(e), absl::StrCat("route lookup: netlink send: ", std::strerror(e)));
  }
  alignas(nlmsghdr) char buf[4096];
  // The answer is queued during send(): no wait.
  const ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
  close(fd);
  auto left = static_cast<unsigned>(n > 0 ? n : 0);
  for (auto* h = reinterpret_cast<nlmsghdr*>(buf); n > 0 && NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
    if (h->nlmsg_type == NLMSG_ERROR) {
      const auto* err = static_cast<const nlmsgerr*>(NLMSG_DATA(h));
      return absl::Status(absl::ErrnoToStatusCode(-err->error),
                          absl::StrCat("route lookup: ", std::strerror(-err->error)));
    }
    if (h->nlmsg_type != RTM_NEWROUTE) continue;
    const auto* rt = static_cast<const rtmsg*>(NLMSG_DATA(h));
    int attr_len = static_cast<int>(h->nlmsg_len - NLMSG_LENGTH(sizeof(*rt)));
    for (auto* a =
             reinterpret_cast<rtattr*>(reinterpret_cast<char*>(const_cast<rtmsg*>(rt)) + NLMSG_ALIGN(sizeof(*rt)));
         RTA_OK(a, attr_len); a = RTA_NEXT(a, attr_len)) {
      if (a->rta_type == RTA_GATEWAY && RTA_PAYLOAD(a) == 4) {
        std::uint32_t gw;
        std::memcpy(&gw, RTA_DATA(a), 4);
        return gw;
      }
    }
    return addr;  // on the link
  }
  return absl::NotFoundError("route lookup: no answer");
}

absl::StatusOr<MacAddress> lookup_neighbour(int ifindex, std::uint32_t addr) {
  const int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd < 0) {
    return absl::Status(absl::ErrnoToStatusCode(errno),
                        absl::StrCat("neighbour lookup: netlink socket: ", std::strerror(errno)));
  }
  struct {
    nlmsghdr header;
    ndmsg body;
  } request{};
  request.header.nlmsg_len = sizeof(request);
  request.header.nlmsg_type = RTM_GETNEIGH;
  request.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  request.header.nlmsg_seq = 1;
  request.body.ndm_family = AF_INET;
  request.body.ndm_ifindex = ifindex;
  if (send(fd, &request, sizeof(request), 0) < 0) {
    const int e = errno;
    close(fd);
    return absl::Status(absl::ErrnoToStatusCode(e), absl::StrCat("neighbour lookup: netlink send: ", std::strerror(e)));
  }
  alignas(nlmsghdr) char buf[16384];
  bool found = false;
  MacAddress mac{};
  for (bool done = false; !done;) {
    // Non-blocking: the kernel queues the dump's first part during send() and each next part
    // inside the recv() that takes the previous one, so there is always something to read until
    // NLMSG_DONE; never wait on a poller's thread.
    const ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n <= 0) break;
    auto left = static_cast<unsigned>(n);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
      if (h->nlmsg_type == NLMSG_DONE || h->nlmsg_type == NLMSG_ERROR) {
        done = true;
        break;
      }
      if (h->nlmsg_type != RTM_NEWNEIGH) continue;
      const auto* nd = static_cast<const ndmsg*>(NLMSG_DATA(h));
      if (nd->ndm_ifindex != ifindex || (nd->ndm_state & (NUD_INCOMPLETE | NUD_FAILED)) != 0) continue;
      int attr_len = static_cast<int>(h->nlmsg_len - NLMSG_LENGTH(sizeof(*nd)));
      bool same_addr = false;
      const std::uint8_t* lladdr = nullptr;
      for (auto* a =
               reinterpret_cast<rtattr*>(reinterpret_cast<char*>(const_cast<ndmsg*>(nd)) + NLMSG_ALIGN(sizeof(*nd)));
           RTA_OK(a, attr_len); a = RTA_NEXT(a, attr_len)) {
        if (a->rta_type == NDA_DST && RTA_PAYLOAD(a) == 4 && std::memcmp(RTA_DATA(a), &addr, 4) == 0) same_addr = true;
        if (a->rta_type == NDA_LLADDR && RTA_PAYLOAD(a) == 6) lladdr = static_cast<const std::uint8_t*>(RTA_DATA(a));
      }
      if (same_addr && lladdr != nullptr) {
        std::memcpy(mac.bytes, lladdr, 6);
        found = true;
      }
    }
  }
  close(fd);
  if (!found) {
    const std::uint8_t* a = reinterpret_cast<const std::uint8_t*>(&addr);
    return absl::NotFoundError(absl::StrCat("neighbour lookup: no link-layer address for ", a[0], ".", a[1], ".", a[2],
                                            ".", a[3], " on interface #", ifindex));
  }
  return mac;
}

}  // namespace pollux::transport::udp::xdp
