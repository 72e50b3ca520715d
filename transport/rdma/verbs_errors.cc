#include "transport/rdma/verbs_errors.h"

#include <arpa/inet.h>
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/code_names.h"

namespace pollux::transport::rdma {
namespace {

std::string human(std::uint64_t bytes) {
  if (bytes == std::numeric_limits<std::uint64_t>::max()) return "unlimited";
  if (bytes >= (1ull << 30) && bytes % (1ull << 30) == 0) return absl::StrCat(bytes >> 30, " GiB");
  if (bytes >= (1ull << 20)) return absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return absl::StrCat(bytes >> 10, " KiB");
}

std::string memlock_advice(std::uint64_t need_bytes) {
  // `ulimit -l` counts KiB; ask for some headroom over the pool (QPs, CQs and SRQs pin memory too).
  const std::uint64_t kib = ((need_bytes + (need_bytes >> 2)) >> 10) + 1024;
  return absl::StrFormat(
      "raise the locked-memory limit: `ulimit -l unlimited` (or at least `ulimit -l %u`) in the shell that starts "
      "the process, LimitMEMLOCK=infinity for a systemd service, `* - memlock unlimited` in "
      "/etc/security/limits.conf, or --ulimit memlock=-1 for a container; or lower pool.slots / pool.slot_size",
      kib);
}

}  // namespace

MemlockLimit current_memlock() {
  MemlockLimit m;
  rlimit rl{};
  if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
    m.soft_bytes = rl.rlim_cur == RLIM_INFINITY ? std::numeric_limits<std::uint64_t>::max() : rl.rlim_cur;
    m.hard_bytes = rl.rlim_max == RLIM_INFINITY ? std::numeric_limits<std::uint64_t>::max() : rl.rlim_max;
  }
  // capget without libcap: version 3 header, two 32-bit words of capability sets.
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (syscall(SYS_capget, &hdr, data) == 0) {
    m.cap_ipc_lock = (data[CAP_IPC_LOCK / 32].effective & (1u << (CAP_IPC_LOCK % 32))) != 0;
  }
  return m;
}

absl::Status check_memlock(std::uint64_t bytes, const MemlockLimit& limit, std::string_view device) {
  if (limit.cap_ipc_lock || limit.soft_bytes == std::numeric_limits<std::uint64_t>::max() ||
      bytes <= limit.soft_bytes) {
    return absl::OkStatus();
  }
  return absl::ResourceExhaustedError(absl::StrFormat(
      "rdma: cannot register the %s buffer pool with %s: the locked-memory limit (RLIMIT_MEMLOCK, `ulimit -l`) is %s "
      "and RDMA pins every registered byte; %s",
      human(bytes), device, human(limit.soft_bytes), memlock_advice(bytes)));
}

absl::Status reg_mr_error(int err, std::uint64_t bytes, const MemlockLimit& limit, std::string_view device) {
  if (err == ENOMEM || err == EPERM || err == EAGAIN) {
    if (!limit.cap_ipc_lock && limit.soft_bytes != std::numeric_limits<std::uint64_t>::max()) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "rdma: ibv_reg_mr(%s) on %s failed: %s; the locked-memory limit (`ulimit -l`) is %s, which must cover the "
          "pool plus queue memory: %s",
          human(bytes), device, std::strerror(err), human(limit.soft_bytes), memlock_advice(bytes)));
    }
    return absl::ResourceExhaustedError(absl::StrFormat(
        "rdma: ibv_reg_mr(%s) on %s failed: %s although the memlock limit is %s; the device may be out of translation "
        "resources: lower pool.slots or pool.slot_size",
        human(bytes), device, std::strerror(err), limit.cap_ipc_lock ? "lifted by CAP_IPC_LOCK" : "unlimited"));
  }
  if (err == EACCES) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "rdma: ibv_reg_mr(%s) on %s: permission denied; check /dev/infiniband/uverbs* permissions (add the user to the "
        "`rdma` group)",
        human(bytes), device));
  }
  return absl::InternalError(
      absl::StrFormat("rdma: ibv_reg_mr(%s) on %s failed: %s", human(bytes), device, std::strerror(err)));
}

absl::Status open_device_error(int err, std::string_view device) {
  if (err == EACCES || err == EPERM) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "rdma: cannot open %s: %s; give the user access to /dev/infiniband/uverbs* (the `rdma` group on Debian, "
        "udev rule 60-rdma-core)",
        device, std::strerror(err)));
  }
  if (err == ENOENT || err == ENODEV || err == ENXIO) {
    return absl::NotFoundError(
        absl::StrFormat("rdma: cannot open %s: %s; the ib_uverbs module may not be loaded (`modprobe ib_uverbs`)",
                        device, std::strerror(err)));
  }
  return absl::UnavailableError(absl::StrFormat("rdma: cannot open %s: %s", device, std::strerror(err)));
}

absl::Status no_device_error(std::string_view wanted, const std::vector<std::string>& available) {
  if (available.empty()) {
    return absl::NotFoundError(absl::StrFormat(
        "rdma: no RDMA device found (rdma.device = \"%s\"): `ibv_devices` lists none. Load the driver for the NIC "
        "(mlx5_ib, ...), or for Soft-RoCE `modprobe rdma_rxe && rdma link add rxe0 type rxe netdev <eth>`; check "
        "/sys/class/infiniband; or use transport.kind = \"shm\"/\"udp\"",
        wanted));
  }
  return absl::NotFoundError(absl::StrFormat("rdma: rdma.device = \"%s\": no such RDMA device; available: %s", wanted,
                                             absl::StrJoin(available, ", ")));
}

std::string_view port_state_name(int state) {
  static constexpr core::CodeName<int> kNames[] = {
      {IBV_PORT_NOP, "NOP"},     {IBV_PORT_DOWN, "DOWN"},     {IBV_PORT_INIT, "INIT"},
      {IBV_PORT_ARMED, "ARMED"}, {IBV_PORT_ACTIVE, "ACTIVE"}, {IBV_PORT_ACTIVE_DEFER, "ACTIVE_DEFER"},
  };
  return core::name_of(state, kNames, "UNKNOWN");
}

absl::Status port_down_error(std::string_view device, std::uint32_t port, int state, int phys_state) {
  return absl::UnavailableError(absl::StrFormat(
      "rdma: %s port %u is %s (physical state %d%s), not ACTIVE: check the cable/link and that the Ethernet interface "
      "under it is up (`ip link set <netdev> up`, `rdma link show`), or pick another rdma.device/rdma.port",
      device, port, port_state_name(state), phys_state,
      phys_state == 3   ? " = disabled"
      : phys_state == 2 ? " = polling"
                        : ""));
}

std::string format_gid(const ibv_gid& gid) {
  char buf[INET6_ADDRSTRLEN];
  if (inet_ntop(AF_INET6, gid.raw, buf, sizeof buf) == nullptr) return "?";
  return buf;
}

std::optional<std::uint32_t> gid_ipv4(const ibv_gid& gid) {
  static constexpr std::uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(gid.raw, kPrefix, sizeof kPrefix) != 0) return std::nullopt;
  return (static_cast<std::uint32_t>(gid.raw[12]) << 24) | (static_cast<std::uint32_t>(gid.raw[13]) << 16) |
         (static_cast<std::uint32_t>(gid.raw[14]) << 8) | gid.raw[15];
}

std::string format_ipv4(std::uint32_t ip) {
  return absl::StrFormat("%u.%u.%u.%u", ip >> 24, (ip >> 16) & 0xff, (ip >> 8) & 0xff, ip & 0xff);
}

ibv_gid multicast_gid(std::uint32_t group) {
  ibv_gid g{};
  g.raw[10] = 0xff;
  g.raw[11] = 0xff;
  g.raw[12] = static_cast<std::uint8_t>(group >> 24);
  g.raw[13] = static_cast<std::uint8_t>(group >> 16);
  g.raw[14] = static_cast<std::uint8_t>(group >> 8);
  g.raw[15] = static_cast<std::uint8_t>(group);
  return g;
}

absl::Status bad_gid_error(std::string_view device, std::uint32_t port, int index, std::string_view why,
                           const std::vector<GidEntry>& valid) {
  std::vector<std::string> list;
  for (const GidEntry& e : valid) {
    list.push_back(absl::StrFormat("%d (%s, %s)", e.index, format_gid(e.gid), e.roce_v2 ? "RoCE v2" : "RoCE v1/IB"));
  }
  const std::string where = index < 0 ? "rdma.gid_index = -1 (auto)" : absl::StrFormat("rdma.gid_index = %d", index);
  return absl::NotFoundError(absl::StrFormat(
      "rdma: %s: %s port %u %s; valid GIDs: %s. Use -1 to pick the RoCEv2 IPv4 GID, and make sure the Ethernet "
      "interface under the device has an IPv4 address",
      where, device, port, why, list.empty() ? "none" : absl::StrJoin(list, ", ")));
}

std::string_view gid_type_name(std::uint32_t type) {
  static constexpr core::CodeName<std::uint32_t> kNames[] = {
      {IBV_GID_TYPE_IB, "IB"},
      {IBV_GID_TYPE_ROCE_V1, "RoCE v1"},
      {IBV_GID_TYPE_ROCE_V2, "RoCE v2"},
  };
  return core::name_of(type, kNames, "unknown");
}

int pick_roce_v2_ipv4(const std::vector<GidEntry>& entries) {
  for (const GidEntry& e : entries) {
    if (e.roce_v2 && gid_ipv4(e.gid).has_value()) return e.index;
  }
  return -1;
}

std::string_view wc_status_hint(ibv_wc_status status) {
  static constexpr core::CodeName<ibv_wc_status> kNames[] = {
      {IBV_WC_SUCCESS, "success"},
      {IBV_WC_RETRY_EXC_ERR, "the peer stopped acknowledging (it died, or the path to it is down)"},
      {IBV_WC_RNR_RETRY_EXC_ERR, "the receiver had no receive buffers posted for too long"},
      {IBV_WC_WR_FLUSH_ERR, "flushed: the queue pair was already in the error state"},
      {IBV_WC_LOC_LEN_ERR, "a frame was larger than the receive buffer (pool.slot_size differs between ends?)"},
      {IBV_WC_LOC_PROT_ERR, "local protection error (buffer outside the registered pool: a bug)"},
      {IBV_WC_REM_INV_REQ_ERR, "the peer rejected the request (message too large for its buffers?)"},
      {IBV_WC_REM_ACCESS_ERR, "remote access error"},
      {IBV_WC_REM_OP_ERR, "the peer failed to process the request"},
  };
  const std::string_view hint = core::name_of(status, kNames, {});
  return hint.empty() ? std::string_view(ibv_wc_status_str(status)) : hint;
}

bool parse_ipv4(std::string_view s, std::uint32_t* ip) {
  in_addr a{};
  const std::string z(s);
  if (inet_pton(AF_INET, z.c_str(), &a) != 1) return false;
  *ip = ntohl(a.s_addr);
  return true;
}

bool parse_ip_port(std::string_view s, std::uint32_t* ip, std::uint16_t* port) {
  const std::size_t colon = s.rfind(':');
  if (colon == std::string_view::npos) return false;
  std::uint32_t p = 0;
  if (!parse_ipv4(s.substr(0, colon), ip) || !absl::SimpleAtoi(std::string(s.substr(colon + 1)), &p) || p == 0 ||
      p > 65535) {
    return false;
  }
  *port = static_cast<std::uint16_t>(p);
  return true;
}

}  // namespace pollux::transport::rdma
