#include "transport/udp/xdp/preflight.h"

#include <dirent.h>
#include <linux/capability.h>
#include <sys/resource.h>

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
