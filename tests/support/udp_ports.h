// UDP ports for tests whose configuration must name them (a subscriber binds the port its
// publisher sends to, so the transport cannot be given port 0), and the multicast group and the
// head of the UDP configuration those tests share (UniqueGroup, UdpTestConfigHead).
//
// A test process takes a block of consecutive ports below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range, 32768-60999 by default): the kernel never hands one of them to
// a socket bound to port 0 - a publisher's, another test's, any program's - so only a program
// binding that very number can take one. The block is checked free (every port binds on 0.0.0.0
// without SO_REUSEADDR, so no socket holds it on any address) and marked ours for the life of
// the process by an abstract AF_UNIX socket named after it (exclusive on the host, gone when the
// process exits, however it exits), so two test processes never take the same block. A block
// that fails either check is skipped: the search starts at a block derived from the pid, so
// parallel tests usually start apart, and goes round the whole range.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace pollux::testing {

// The kernel's ephemeral range (first, last); the default when it cannot be read.
inline std::pair<std::uint32_t, std::uint32_t> EphemeralPortRange() {
  std::uint32_t lo = 32768, hi = 60999;
  if (std::FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    unsigned a = 0, b = 0;
    if (std::fscanf(f, "%u %u", &a, &b) == 2 && a > 0 && a <= b && b <= 65535) {
      lo = a;
      hi = b;
    }
    std::fclose(f);
  }
  return {lo, hi};
}

// Binds UDP 0.0.0.0:port without SO_REUSEADDR; -1 with errno when something holds the port.
inline int BindUdpAny(std::uint32_t port) {
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    const int err = errno;
    ::close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

class UdpPortBlock {
 public:
  static constexpr std::uint32_t kSize = 32;

  // The first port of this process's block (found on the first call). Aborts the test program,
  // naming what it tried, when no block is free: nothing can run without ports.
  static std::uint32_t Base() {
    static const std::uint32_t base = Find();
    return base;
  }

 private:
  static std::uint32_t Find() {
    const auto [eph_lo, eph_hi] = EphemeralPortRange();
    // Below the ephemeral range, from 20000 (clear of the well-known and most registered
    // services' ports); above it when the range leaves too little room below.
    std::uint32_t first = 20000, last = eph_lo > 0 ? eph_lo - 1 : 0;
    if (last < first + 64 * kSize) {
      first = eph_hi + 1;
      last = 65535;
    }
    const std::uint32_t blocks = last >= first + kSize ? (last - first + 1) / kSize : 0;
    std::string tried;
    for (std::uint32_t k = 0; k < blocks; ++k) {
      const std::uint32_t b = (static_cast<std::uint32_t>(getpid()) + k) % blocks;
      const std::uint32_t base = first + b * kSize;
      const int mark = Mark(base);
      if (mark < 0) continue;  // another test process has it
      std::vector<int> probes;
      std::uint32_t held = 0;
      for (std::uint32_t p = base; p < base + kSize; ++p) {
        const int fd = BindUdpAny(p);
        if (fd < 0) {
          held = p;
          if (tried.size() < 400) {
            char what[96];
            std::snprintf(what, sizeof what, " %u (%s)", p, std::strerror(errno));
            tried.append(what);
          }
          break;
        }
        probes.push_back(fd);
      }
      for (int fd : probes) ::close(fd);
      if (held == 0) return base;  // `mark` stays open: the block is ours until the process exits
      ::close(mark);
    }
    std::fprintf(stderr, "udp_ports.h: no free block of %u UDP ports in %u-%u (ports held:%s)\n", kSize, first, last,
                 tried.c_str());
    std::abort();
  }

  // An abstract AF_UNIX socket named after the block: bound by one process at a time.
  static int Mark(std::uint32_t base) {
    const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    const int n = std::snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "pollux-test-udp-ports-%u", base);
    const socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0) {
      ::close(fd);
      return -1;
    }
    return fd;
  }
};

// A multicast group unique to this test process (239.255.x.y from its pid), so parallel test
// processes never share one.
inline std::string UniqueGroup() {
  return "239.255." + std::to_string(1 + getpid() % 200) + "." + std::to_string(1 + (getpid() / 200) % 200);
}

// The head of a test's UDP configuration on `iface` of this host: [runtime] with `threading`,
// idle = "yield" and no counters file; [transport] udp; [udp] with `address` and ttl 1. The caller
// appends its other [udp] keys, then its [[streams]].
inline std::string UdpTestConfigHead(const std::string& threading, const std::string& address,
                                     const std::string& iface = "lo") {
  return "\n[runtime]\nthreading = \"" + threading +
         "\"\nidle = \"yield\"\ncounters = false\n[transport]\nkind = \"udp\"\n" + "[udp]\naddress = \"" + address +
         "\"\ninterface = \"" + iface + "\"\nttl = 1\n";
}

}  // namespace pollux::testing
