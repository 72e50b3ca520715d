// xdp: what the UDP transport's AF_XDP datapath (docs/XDP.md) needs from this process and host:
// capabilities, RLIMIT_MEMLOCK against the UMEM, the kernel's AF_XDP sockets, bpffs and libxdp's
// dispatcher, and per interface its driver, rx queues, MTU and the XDP programs attached to it
// (Pollux's with its owner process: alive, or dead and so stale).
//
// What stops the transport from opening its AF_XDP socket is a fail when the configuration
// selects the datapath (transport udp, udp.datapath = "xdp"), a warning without --config (every
// transport judged), and a fact for a configuration that does not use it. The checks follow what
// transport/udp/xdp_port.cc asks at open: its capabilities, memlock against udp.xdp_frames frames
// of 4 KiB, the queues udp.xdp_queues names (or all), udp.mtu against the
// interface's MTU.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tools/doctor/checks.h"

#if defined(POLLUX_HAVE_XDP)
#include <linux/capability.h>
#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "transport/udp/udp_config.h"
#include "transport/udp/xdp/frame.h"
#include "transport/udp/xdp/xsk.h"

extern "C" {
#include <bpf/libbpf.h>
#include <xdp/libxdp.h>
}
#endif

namespace pollux::doctor {

#if !defined(POLLUX_HAVE_XDP)

void check_xdp(const Host&, Report& r) {
  r.add("xdp", "support", Verdict::kInfo,
        "AF_XDP support was not built (POLLUX_WITH_XDP=OFF, or libxdp-dev, libbpf-dev or clang missing at "
        "configure time): udp.datapath = \"xdp\" is unavailable in this build");
}

#else

namespace {

using V = Verdict;
namespace xdp = transport::udp::xdp;

// The capabilities the datapath needs, and what each is for.
struct CapNeed {
  int cap;
  const char* name;
  const char* why;
};
constexpr CapNeed kCaps[] = {
    {CAP_NET_ADMIN, "cap_net_admin", "attach the XDP program"},
    {CAP_BPF, "cap_bpf", "load the XDP program (or cap_sys_admin)"},
    {CAP_NET_RAW, "cap_net_raw", "create the AF_XDP socket"},
    {CAP_IPC_LOCK, "cap_ipc_lock", "pin a UMEM above RLIMIT_MEMLOCK"},
};

// CapEff of /proc/self/status (under the root), nullopt when unreadable.
std::optional<std::uint64_t> effective_caps(const HostFs& fs) {
  const std::optional<std::string> status = fs.text("/proc/self/status");
  if (!status) return std::nullopt;
  for (absl::string_view line : absl::StrSplit(*status, '\n')) {
    if (!absl::ConsumePrefix(&line, "CapEff:")) continue;
    std::uint64_t v = 0;
    if (absl::SimpleHexAtoi(absl::StripAsciiWhitespace(line), &v)) return v;
  }
  return std::nullopt;
}

bool has(std::uint64_t caps, int cap) { return (caps >> cap) & 1u; }

// The soft "Max locked memory" of /proc/self/limits in bytes (nullopt: unreadable; UINT64_MAX:
// unlimited).
std::optional<std::uint64_t> memlock_soft_limit(const HostFs& fs) {
  const std::optional<std::string> limits = fs.text("/proc/self/limits");
  if (!limits) return std::nullopt;
  for (absl::string_view line : absl::StrSplit(*limits, '\n')) {
    if (!absl::ConsumePrefix(&line, "Max locked memory")) continue;
    const std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.empty()) return std::nullopt;
    if (f[0] == "unlimited") return UINT64_MAX;
    std::uint64_t v = 0;
    if (absl::SimpleAtoi(f[0], &v)) return v;
    return std::nullopt;
  }
  return std::nullopt;
}

std::string kib(std::uint64_t bytes) { return bytes == UINT64_MAX ? "unlimited" : absl::StrCat(bytes >> 10, " KiB"); }

// Bytes per UMEM frame: the transport's (xdp_port.cc), the socket's default.
constexpr std::uint32_t kFrameSize = xdp::kDefaultFrameSize;

void check_capabilities(Report& r, std::optional<std::uint64_t> caps, V bad) {
  if (!caps) {
    r.add("xdp", "capabilities", V::kInfo, "/proc/self/status has no readable CapEff");
    return;
  }
  std::vector<std::string> present, missing;
  bool required_missing = false;  // all but cap_ipc_lock (xdp memlock judges that one)
  for (const CapNeed& c : kCaps) {
    const bool ok = has(*caps, c.cap) || (c.cap == CAP_BPF && has(*caps, CAP_SYS_ADMIN));
    (ok ? present : missing).push_back(absl::StrCat(c.name, ok ? "" : absl::StrCat(" (to ", c.why, ")")));
    required_missing |= !ok && c.cap != CAP_IPC_LOCK;
  }
  const std::string value = absl::StrFormat("CapEff %016x", *caps);
  if (!required_missing) {
    r.add(
        "xdp", "capabilities", V::kOk,
        absl::StrCat(value, ": ", absl::StrJoin(present, ", "),
                     missing.empty() ? "" : "; no cap_ipc_lock: the UMEM counts against RLIMIT_MEMLOCK (xdp memlock)"));
    return;
  }
  r.add("xdp", "capabilities", bad,
        absl::StrCat(value, ": missing ", absl::StrJoin(missing, ", "),
                     present.empty() ? "" : absl::StrCat("; has ", absl::StrJoin(present, ", "))),
        "run as root, or give the binary the capabilities: setcap cap_net_admin,cap_bpf,cap_net_raw,cap_ipc_lock+ep "
        "BINARY (AmbientCapabilities= in a systemd unit)");
}

void check_umem_memlock(const Host& h, Report& r, std::optional<std::uint64_t> caps, V bad) {
  const std::uint32_t frames = transport::udp::config(h.cfg).xdp_frames;
  const std::uint64_t umem = static_cast<std::uint64_t>(frames) * kFrameSize;
  const std::optional<std::uint64_t> limit = memlock_soft_limit(h.fs);
  const std::string value = absl::StrFormat(
      "%s (`ulimit -l`) against a %s UMEM per AF_XDP socket (udp.xdp_frames %u x %u bytes)",
      limit ? kib(*limit) : std::string("unreadable (/proc/self/limits)"), kib(umem), frames, kFrameSize);
  if (caps && has(*caps, CAP_IPC_LOCK)) {
    r.add("xdp", "memlock", V::kOk, absl::StrCat(value, "; CAP_IPC_LOCK: the UMEM is not charged to the limit"));
  } else if (limit && *limit >= umem) {
    r.add("xdp", "memlock", V::kOk,
          absl::StrCat(value, "; without CAP_IPC_LOCK every UMEM of this user's sockets counts against it"));
  } else {
    r.add("xdp", "memlock", bad, absl::StrCat(value, ": without CAP_IPC_LOCK registering the UMEM fails (ENOBUFS)"),
          absl::StrFormat("raise the limit to at least %u KiB per socket: ulimit -l %u (shell), LimitMEMLOCK=%u "
                          "(systemd unit), memlock in /etc/security/limits.conf; or give the process CAP_IPC_LOCK; "
                          "or lower udp.xdp_frames",
                          umem >> 10, umem >> 10, umem));
  }
}

void check_frame_size(const Host& h, Report& r, V bad) {
  const std::uint32_t mtu = transport::udp::config(h.cfg).mtu;
  const std::uint64_t frame = static_cast<std::uint64_t>(mtu) + xdp::kEthHeaderSize;
  const std::string value =
      absl::StrFormat("udp.mtu %u + %u bytes of Ethernet header = %u bytes against a %u-byte UMEM frame", mtu,
                      xdp::kEthHeaderSize, frame, kFrameSize);
  if (frame <= kFrameSize) {
    r.add("xdp", "frame size", V::kOk, value);
  } else {
    r.add("xdp", "frame size", bad, absl::StrCat(value, ": the largest datagrams do not fit a frame"),
          absl::StrFormat("udp.mtu <= %u", kFrameSize - xdp::kEthHeaderSize));
  }
}

void check_socket(Report& r, V bad) {
  const int fd = ::socket(AF_XDP, SOCK_RAW | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    ::close(fd);
    r.add("xdp", "af_xdp socket", V::kOk, "socket(AF_XDP, SOCK_RAW, 0) works");
    return;
  }
  const int e = errno;
  const std::string value = absl::StrFormat("socket(AF_XDP, SOCK_RAW, 0): %s", std::strerror(e));
  if (e == EPERM || e == EACCES) {
    r.add("xdp", "af_xdp socket", bad, absl::StrCat(value, ": the process lacks CAP_NET_RAW"),
          "run as root, or setcap cap_net_admin,cap_bpf,cap_net_raw,cap_ipc_lock+ep BINARY");
  } else {
    r.add("xdp", "af_xdp socket", bad, absl::StrCat(value, ": this kernel has no AF_XDP sockets"),
          "a kernel built with CONFIG_XDP_SOCKETS=y (every mainstream distribution kernel has it)");
  }
}

// bpffs at /sys/fs/bpf, from the mount table of this process's mount namespace.
void check_bpffs(const Host& h, Report& r) {
  const std::optional<std::string> mounts = h.fs.text("/proc/self/mounts");
  std::vector<std::string> elsewhere;
  bool at_sys_fs_bpf = false;
  if (mounts) {
    for (absl::string_view line : absl::StrSplit(*mounts, '\n')) {
      const std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
      if (f.size() < 3 || f[2] != "bpf") continue;
      if (f[1] == "/sys/fs/bpf") {
        at_sys_fs_bpf = true;
      } else {
        elsewhere.emplace_back(f[1]);
      }
    }
  }
  if (!mounts) {
    r.add("xdp", "bpffs", V::kInfo, "/proc/self/mounts unreadable");
  } else if (at_sys_fs_bpf) {
    r.add("xdp", "bpffs", V::kOk, "mounted at /sys/fs/bpf (libxdp keeps its dispatcher state there)");
  } else {
    r.add("xdp", "bpffs", V::kInfo,
          absl::StrCat("not mounted at /sys/fs/bpf",
                       elsewhere.empty() ? "" : absl::StrCat(" (bpf mounted at ", absl::StrJoin(elsewhere, ", "), ")"),
                       ": libxdp cannot use its dispatcher, so only one XDP program fits an interface; `ip netns "
                       "exec` hides a host's bpffs"),
          "mount -t bpf bpf /sys/fs/bpf (or LIBXDP_BPFFS_AUTOMOUNT=1)");
  }
}

// Whether the kernel loads freplace (BPF_PROG_TYPE_EXT) programs, which libxdp's dispatcher
// needs to run several XDP programs on one interface. 1: yes, 0: no, <0: the probe failed.
int dispatcher_probe() { return libbpf_probe_bpf_prog_type(BPF_PROG_TYPE_EXT, nullptr); }

void check_dispatcher(Report& r, int probe) {
  if (probe == 1) {
    r.add("xdp", "dispatcher", V::kOk,
          "the kernel loads BPF_PROG_TYPE_EXT: libxdp's dispatcher can run Pollux's program next to other XDP "
          "programs (with bpffs mounted)");
  } else if (probe == 0) {
    r.add("xdp", "dispatcher", V::kInfo,
          "the kernel refuses BPF_PROG_TYPE_EXT (libbpf_probe_bpf_prog_type): no libxdp dispatcher, one XDP program "
          "per interface; Pollux's cannot share an interface with another (its attach gets EBUSY)");
  } else {
    r.add("xdp", "dispatcher", V::kInfo,
          absl::StrCat("not probed (BPF_PROG_TYPE_EXT, libxdp's dispatcher): ", std::strerror(-probe),
                       -probe == EPERM ? " (loading a program needs CAP_BPF or CAP_SYS_ADMIN)" : ""));
  }
}

// SIOCETHTOOL on `ifname` in this network namespace; false when the driver does not answer.
bool ethtool(const std::string& ifname, void* cmd) {
  const int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return false;
  ifreq ifr{};
  std::snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname.c_str());
  ifr.ifr_data = static_cast<char*>(cmd);
  const bool ok = ioctl(s, SIOCETHTOOL, &ifr) == 0;
  ::close(s);
  return ok;
}

// An attach mode's name, and the `ip link` keyword that detaches a program attached in it.
struct ModeNames {
  const char* name;
  const char* ip_link_off;
};
ModeNames mode_names(xdp_attach_mode m) {
  switch (m) {
    case XDP_MODE_NATIVE:
      return {"native", "xdp off"};
    case XDP_MODE_SKB:
      return {"generic", "xdpgeneric off"};
    case XDP_MODE_HW:
      return {"offload", "xdpoffload off"};
    case XDP_MODE_UNSPEC:
      break;
  }
  return {"unknown mode", "xdp off"};
}

// The XDP programs attached to `ifc`, judged: Pollux's with its owner (alive, or dead: stale),
// others against the dispatcher (without it Pollux's attach gets EBUSY).
void check_programs(Report& r, const std::string& ifc, bool judged, V bad, int dispatcher) {
  const std::string name = absl::StrCat(ifc, " programs");
  const int ifindex = static_cast<int>(if_nametoindex(ifc.c_str()));
  if (ifindex == 0) {
    r.add("xdp", name, V::kInfo, absl::StrCat("not in this network namespace: ", std::strerror(errno)));
    return;
  }
  xdp_multiprog* mp = xdp_multiprog__get_from_ifindex(ifindex);
  if (const long err = libxdp_get_error(mp); err == -ENOENT || (err == 0 && mp == nullptr)) {
    r.add("xdp", name, judged ? V::kOk : V::kInfo, "no XDP program attached");
    return;
  } else if (err != 0) {
    r.add("xdp", name, V::kInfo,
          absl::StrCat("could not list the attached XDP programs (libxdp): ", std::strerror(static_cast<int>(-err)),
                       -err == EPERM ? " (needs CAP_BPF or CAP_SYS_ADMIN)" : ""));
    return;
  }
  const absl::StatusOr<xdp::PolluxProgramOwner> owner = xdp::pollux_program_owner(ifindex);
  const xdp_attach_mode mode = xdp_multiprog__attach_mode(mp);
  const bool legacy = xdp_multiprog__is_legacy(mp);
  std::vector<std::string> progs;
  bool foreign = false;
  auto describe = [&](xdp_program* p, const std::string& how) {
    const std::uint32_t id = xdp_program__id(p);
    std::string s = absl::StrFormat("%s id %u %s", xdp_program__name(p), id, how);
    if (owner.ok() && owner->prog_id == id) {
      absl::StrAppend(&s, owner->pid == 0 ? ": Pollux's, without an owner record (treated as stale)"
                          : owner->alive  ? absl::StrFormat(": Pollux's, owner pid %u alive", owner->pid)
                                          : absl::StrFormat(": Pollux's, owner pid %u dead: stale", owner->pid));
    } else {
      foreign = true;
    }
    progs.push_back(std::move(s));
  };
  if (legacy) {
    if (xdp_program* p = xdp_multiprog__main_prog(mp)) describe(p, mode_names(mode).name);
  } else {
    if (xdp_program* d = xdp_multiprog__main_prog(mp)) {
      progs.push_back(absl::StrFormat("libxdp dispatcher %s id %u %s", xdp_program__name(d), xdp_program__id(d),
                                      mode_names(mode).name));
    }
    for (xdp_program* p = xdp_multiprog__next_prog(nullptr, mp); p != nullptr; p = xdp_multiprog__next_prog(p, mp)) {
      describe(p, absl::StrFormat("in the dispatcher (priority %u)", xdp_program__run_prio(p)));
    }
  }
  if (xdp_program* hw = xdp_multiprog__hw_prog(mp)) describe(hw, "offload");
  xdp_multiprog__close(mp);

  std::string value = absl::StrJoin(progs, "; ");
  if (!owner.ok()) absl::StrAppend(&value, "; Pollux's owner record unreadable: ", owner.status().message());
  const bool pollux = owner.ok() && owner->prog_id != 0;
  const bool stale = pollux && (owner->pid == 0 || !owner->alive);
  if (stale) {
    r.add("xdp", name, V::kWarn,
          absl::StrCat(value, owner->pid == 0 ? ": no process owns it (another Pollux version, or attached by hand)"
                                              : ": a Pollux process that died left it attached"),
          absl::StrFormat("the next Pollux start on %s removes it; to remove it now: ip link set dev %s %s", ifc, ifc,
                          mode_names(mode).ip_link_off));
  } else if (foreign && judged && (legacy || dispatcher != 1) && !pollux) {
    r.add("xdp", name, bad,
          absl::StrCat(value,
                       ": another XDP program holds the interface and libxdp's dispatcher cannot run both: "
                       "Pollux's attach gets EBUSY"),
          absl::StrFormat("detach it (ip link set dev %s %s, or xdp-loader unload %s --all) or use another interface",
                          ifc, mode_names(mode).ip_link_off, ifc));
  } else {
    r.add("xdp", name, V::kInfo, value);
  }
}

// One interface: driver, rx queues, MTU; then its programs. `used`: udp.interface names it. The
// transport binds the queues udp.xdp_queues lists, else all of them.
void check_interface(const Host& h, Report& r, const std::string& ifc, bool used, V bad, int dispatcher) {
  const bool judged = used && h.judged(core::TransportKind::kUdp);
  const transport::udp::UdpConfig& u = transport::udp::config(h.cfg);
  const std::string base = "/sys/class/net/" + ifc;
  std::vector<std::string> parts;
  // The driver: ETHTOOL_GDRVINFO (answers for virtual devices too), else the device's driver link.
  std::string driver;
  if (h.fs.real()) {
    ethtool_drvinfo info{};
    info.cmd = ETHTOOL_GDRVINFO;
    if (ethtool(ifc, &info)) driver = info.driver;
  }
  if (driver.empty()) {
    if (std::optional<std::string> d = h.fs.resolve(base + "/device/driver")) driver = d->substr(d->rfind('/') + 1);
  }
  parts.push_back(driver.empty() ? std::string("driver unknown") : absl::StrCat("driver ", driver));
  std::uint32_t rx_queues = 0;
  for (const std::string& q : h.fs.list(base + "/queues")) rx_queues += q.rfind("rx-", 0) == 0 ? 1 : 0;
  std::string queues = absl::StrFormat("%u rx queue%s", rx_queues, rx_queues == 1 ? "" : "s");
  if (h.fs.real()) {
    ethtool_channels ch{};
    ch.cmd = ETHTOOL_GCHANNELS;
    if (ethtool(ifc, &ch)) {
      absl::StrAppendFormat(&queues, " (channels: combined %u of max %u, rx %u of max %u)", ch.combined_count,
                            ch.max_combined, ch.rx_count, ch.max_rx);
    }
  }
  parts.push_back(queues);
  const std::optional<long long> mtu = h.fs.integer(base + "/mtu");
  if (mtu) {
    const long long frame = *mtu + xdp::kEthHeaderSize;
    parts.push_back(frame <= kFrameSize ? absl::StrFormat("mtu %lld", *mtu)
                                        : absl::StrFormat("mtu %lld (frames up to %lld bytes exceed a %u-byte UMEM "
                                                          "frame: many drivers refuse native XDP at this MTU)",
                                                          *mtu, frame, kFrameSize));
  }
  if (used) parts.push_back("used by udp.interface");
  const std::string value = absl::StrJoin(parts, ", ");
  const V v = judged ? bad : V::kInfo;
  const std::string steer =
      absl::StrFormat("ethtool -K %s ntuple on && ethtool -N %s flow-type udp4 dst-ip %s dst-port %u action Q", ifc,
                      ifc, u.address, u.port);
  int missing_queue = -1;  // the first queue udp.xdp_queues lists that the interface lacks
  for (const std::uint32_t q : u.xdp_queues) {
    if (rx_queues > 0 && q >= rx_queues && missing_queue < 0) missing_queue = static_cast<int>(q);
  }
  if (!used) {
    r.add("xdp", ifc, V::kInfo, value);  // the transport's keys say nothing about it
  } else if (missing_queue >= 0) {
    r.add("xdp", ifc, v,
          absl::StrFormat("%s: udp.xdp_queues names queue %d, which %s does not have", value, missing_queue, ifc),
          absl::StrFormat("udp.xdp_queues = [] (every queue), or queues in 0..%u that the streams are steered to (%s)",
                          rx_queues - 1, steer));
  } else if (mtu && u.mtu > *mtu) {
    r.add("xdp", ifc, v,
          absl::StrFormat("%s: udp.mtu %u is larger than the interface's: such frames are dropped (no fragmentation "
                          "on this path), and the transport refuses it",
                          value, u.mtu),
          absl::StrFormat("udp.mtu = %lld, or raise the interface's: ip link set dev %s mtu %u", *mtu, ifc, u.mtu));
  } else if (!u.xdp_queues.empty() && u.xdp_queues.size() < rx_queues) {
    const std::string listed = absl::StrJoin(u.xdp_queues, ",");
    r.add("xdp", ifc, judged ? V::kOk : V::kInfo,
          absl::StrFormat("%s; AF_XDP sockets bind queue%s %s of %u (udp.xdp_queues): datagrams the NIC puts on "
                          "other queues reach the kernel's stack, where the subscriber reads them from its socket "
                          "(later, counted in xdp_socket_receives), so steer the streams there (%s)",
                          value, u.xdp_queues.size() == 1 ? "" : "s", listed, rx_queues,
                          absl::StrReplaceAll(steer, {{"action Q", absl::StrCat("action ", u.xdp_queues[0])}})));
  } else if (u.xdp_queues.empty() && rx_queues > 1) {
    r.add("xdp", ifc, judged ? V::kOk : V::kInfo,
          absl::StrFormat("%s; AF_XDP sockets bind all %u rx queues (one socket each, one UMEM)", value, rx_queues));
  } else {
    r.add("xdp", ifc, judged ? V::kOk : V::kInfo, value);
  }
  if (h.fs.real()) check_programs(r, ifc, judged, bad, dispatcher);
}

}  // namespace

void check_xdp(const Host& h, Report& r) {
  // fail: the configuration's transport will not start; warn: without --config; info: unused.
  const V bad = !h.judged(core::TransportKind::kUdp)                                          ? V::kInfo
                : !h.config_given                                                             ? V::kWarn
                : transport::udp::config(h.cfg).datapath == transport::udp::UdpDatapath::kXdp ? V::kFail
                                                                                              : V::kInfo;
  const std::optional<std::uint64_t> caps = effective_caps(h.fs);
  check_capabilities(r, caps, bad);
  check_umem_memlock(h, r, caps, bad);
  check_frame_size(h, r, bad);
  check_bpffs(h, r);
  int dispatcher = 0;
  if (h.fs.real()) {
    check_socket(r, bad);
    // Unprivileged, the kernel refuses every program load: the probe would say "unsupported".
    dispatcher = caps && (has(*caps, CAP_BPF) || has(*caps, CAP_SYS_ADMIN)) ? dispatcher_probe() : -EPERM;
    check_dispatcher(r, dispatcher);
  } else {
    r.add("xdp", "kernel", V::kInfo, "AF_XDP socket, BPF_PROG_TYPE_EXT and attached programs not probed under --root");
  }
  // Every interface but loopback (unless udp.interface names it): a stale program can sit on any.
  const std::string udp_if = udp_interface_name(h);
  for (const std::string& ifc : h.fs.list("/sys/class/net")) {
    if (ifc != udp_if && h.fs.integer("/sys/class/net/" + ifc + "/type") == 772) continue;
    check_interface(h, r, ifc, ifc == udp_if, bad, dispatcher);
  }
}

#endif  // POLLUX_HAVE_XDP

}  // namespace pollux::doctor
