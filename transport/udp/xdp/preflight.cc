#include "transport/udp/xdp/preflight.h"

#include <dirent.h>
#include <linux/capability.h>
#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pollux::transport::udp::xdp {
namespace {

// CapEff bits of this process.
std::uint64_t effective_caps() {
  std::FILE* f = std::fopen("/proc/self/status", "re");
  if (f == nullptr) return 0;
  char line[256];
  std::uint64_t caps = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, "CapEff:", 7) == 0) caps = std::strtoull(line + 7, nullptr, 16);
  }
  std::fclose(f);
  return caps;
}

}  // namespace

std::uint32_t rx_queue_count(const std::string& ifname) {
  // The driver's channels (ETHTOOL_GCHANNELS on a socket of the calling thread's network
  // namespace): receive queues are the combined channels plus the receive-only ones.
  ethtool_channels ch{};
  ch.cmd = ETHTOOL_GCHANNELS;
  ifreq ifr{};
  std::snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname.c_str());
  ifr.ifr_data = reinterpret_cast<char*>(&ch);
  const int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  const bool answered = s >= 0 && ::ioctl(s, SIOCETHTOOL, &ifr) == 0;
  if (s >= 0) ::close(s);
  if (answered && ch.combined_count + ch.rx_count > 0) return ch.combined_count + ch.rx_count;
  // A driver without the call: sysfs, which shows the network namespace it was mounted in (the
  // caller's under `ip netns exec`).
  const std::string dir = absl::StrCat("/sys/class/net/", ifname, "/queues");
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return 0;  // sysfs not mounted for this namespace: unknown
  std::uint32_t n = 0;
  while (const dirent* e = ::readdir(d)) {
    if (std::strncmp(e->d_name, "rx-", 3) == 0) ++n;
  }
  ::closedir(d);
  return n;
}

absl::StatusOr<std::vector<std::uint32_t>> select_queues(const std::string& ifname,
                                                         const std::vector<std::uint32_t>& requested,
                                                         const std::string& key) {
  const std::uint32_t queues = rx_queue_count(ifname);
  if (requested.empty()) {
    std::vector<std::uint32_t> all(queues == 0 ? 1 : queues);
    for (std::uint32_t i = 0; i < all.size(); ++i) all[i] = i;
    return all;
  }
  for (std::size_t i = 0; i < requested.size(); ++i) {
    if (queues != 0 && requested[i] >= queues) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: interface %s has %u RX queues (0..%u), not queue %u", key,
                                                        ifname, queues, queues - 1, requested[i]));
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (requested[j] == requested[i]) {
        return absl::InvalidArgumentError(absl::StrFormat("%s: queue %u is named twice", key, requested[i]));
      }
    }
  }
  return requested;
}

std::string preflight(const std::string& ifname, std::uint64_t umem_bytes, const std::string& instead,
                      const std::string& frames_key) {
  const std::uint64_t caps = effective_caps();
  auto has = [&](int cap) { return (caps >> cap) & 1u; };
  std::string missing;
  if (!has(CAP_NET_ADMIN)) absl::StrAppend(&missing, missing.empty() ? "" : ", ", "CAP_NET_ADMIN (attach)");
  if (!has(CAP_BPF) && !has(CAP_SYS_ADMIN)) {
    absl::StrAppend(&missing, missing.empty() ? "" : ", ", "CAP_BPF (load the program)");
  }
  if (!has(CAP_NET_RAW)) absl::StrAppend(&missing, missing.empty() ? "" : ", ", "CAP_NET_RAW (AF_XDP socket)");
  if (!missing.empty()) {
    return absl::StrCat("AF_XDP on interface ", ifname, ": this process lacks ", missing,
                        ": run it as root, or grant them: setcap cap_net_admin,cap_bpf,cap_net_raw,cap_ipc_lock+ep "
                        "BINARY (or use ",
                        instead, ")");
  }
  rlimit rl{};
  if (!has(CAP_IPC_LOCK) && ::getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
      rl.rlim_cur < umem_bytes) {
    return absl::StrFormat(
        "AF_XDP on interface %s: the UMEM needs %u bytes of locked memory but RLIMIT_MEMLOCK is %u: raise it "
        "(ulimit -l %u, or LimitMEMLOCK= in a systemd unit), grant CAP_IPC_LOCK, or lower %s",
        ifname, umem_bytes, static_cast<std::uint64_t>(rl.rlim_cur), (umem_bytes + 1023) / 1024, frames_key);
  }
  return "";
}

}  // namespace pollux::transport::udp::xdp
