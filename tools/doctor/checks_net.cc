// net: interfaces (state, NUMA node, driver, IRQs), the socket-buffer and busy-poll sysctls
// against what the UDP transport asks for, and where each NIC's interrupts go.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <linux/capability.h>
#include <netinet/in.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tools/doctor/checks.h"
#include "transport/udp/udp_config.h"

namespace pollux::doctor {
namespace {

using V = Verdict;

std::string parent(const std::string& p) {
  const std::size_t slash = p.rfind('/');
  return slash == 0 || slash == std::string::npos ? "/" : p.substr(0, slash);
}

std::string basename(const std::string& p) {
  const std::size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

// The device directory behind a class entry and its ancestors under /sys/devices, nearest first.
std::vector<std::string> device_chain(const HostFs& fs, const std::string& class_dir) {
  std::vector<std::string> out;
  std::optional<std::string> p = fs.resolve(class_dir + "/device");
  if (!p) return out;
  for (std::string d = *p; d.rfind("/sys/devices/", 0) == 0; d = parent(d)) out.push_back(d);
  return out;
}

// /sys/class/net/IF/type (ARPHRD_*): the link layer.
std::string link_type(long long t) {
  switch (t) {
    case 1:
      return "Ethernet";
    case 32:
      return "InfiniBand (IPoIB)";
    case 772:
      return "loopback";
    case 65534:
      return "no link layer (tun)";
  }
  return absl::StrCat("link type ", t);
}

bool has_cap(int cap) {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (syscall(SYS_capget, &hdr, data) != 0) return false;
  return (data[cap / 32].effective & (1u << (cap % 32))) != 0;
}

void check_buffer_sysctl(const Host& h, Report& r, const char* sysctl, const char* key, std::uint64_t want,
                         const char* force) {
  const std::string path = absl::StrCat("/proc/sys/net/core/", sysctl);
  const std::optional<long long> have = h.fs.integer(path);
  const std::string name = absl::StrCat("net.core.", sysctl);
  if (!have) {
    r.add("net", sysctl, V::kInfo, absl::StrCat(path, " unreadable"));
    return;
  }
  const std::string value = absl::StrFormat("%lld bytes; %s asks for %u", *have, key, want);
  if (static_cast<std::uint64_t>(*have) >= want) {
    r.add("net", sysctl, V::kOk, value);
    return;
  }
  r.add("net", sysctl, h.judged(core::TransportKind::kUdp) ? V::kWarn : V::kInfo,
        absl::StrCat(value,
                     ": the kernel caps the socket buffer, and a burst beyond it is dropped (then repaired by "
                     "NAK, late)"),
        absl::StrFormat("sysctl -w %s=%u (persist in /etc/sysctl.d/90-pollux.conf); a process with CAP_NET_ADMIN "
                        "gets %s anyway (%s)%s",
                        name, want, key, force,
                        h.judged(core::TransportKind::kUdp) ? "" : "; matters only with transport.kind = \"udp\""));
}

}  // namespace

std::string udp_interface_name(const Host& h) {
  const std::string& want = transport::udp::config(h.cfg).interface;
  in_addr a{};
  if (want.empty() || inet_pton(AF_INET, want.c_str(), &a) != 1) return want;
  std::string name;
  ifaddrs* list = nullptr;
  if (h.fs.real() && getifaddrs(&list) == 0) {
    for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr != nullptr && i->ifa_addr->sa_family == AF_INET &&
          reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr == a.s_addr) {
        name = i->ifa_name;
        break;
      }
    }
    freeifaddrs(list);
  }
  return name;
}

int sysfs_device_node(const HostFs& fs, const std::string& class_dir) {
  for (const std::string& d : device_chain(fs, class_dir)) {
    if (std::optional<long long> n = fs.integer(d + "/numa_node")) return static_cast<int>(*n);
  }
  return -1;
}

std::vector<int> sysfs_device_irqs(const HostFs& fs, const std::string& class_dir) {
  std::vector<int> out;
  for (const std::string& d : device_chain(fs, class_dir)) {
    for (const std::string& e : fs.list(d + "/msi_irqs")) {
      int irq = 0;
      if (absl::SimpleAtoi(e, &irq)) out.push_back(irq);
    }
    if (!out.empty()) break;
    if (fs.resolve(d + "/subsystem") == "/sys/bus/pci") {  // a PCI function without MSI: its legacy line, if any
      if (std::optional<long long> irq = fs.integer(d + "/irq"); irq && *irq > 0) out.push_back(static_cast<int>(*irq));
      break;
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

void check_irqs(const Host& h, Report& r, const std::string& area, const std::string& device,
                const std::vector<int>& irqs) {
  if (irqs.empty()) return;
  const std::vector<int> pinned = h.pinned_cpus();
  std::vector<std::string> where, hits;
  std::vector<int> bad_irqs;
  for (int irq : irqs) {
    const std::string dir = absl::StrFormat("/proc/irq/%d", irq);
    // effective_affinity_list: where the kernel delivers it now; smp_affinity_list: where it may.
    std::optional<std::string> aff = h.fs.line(dir + "/effective_affinity_list");
    if (!aff) aff = h.fs.line(dir + "/smp_affinity_list");
    const std::vector<int> cpus = aff ? parse_cpu_list(*aff).value_or(std::vector<int>{}) : std::vector<int>{};
    std::string action;
    for (const std::string& e : h.fs.list(dir)) {
      if (h.fs.is_dir(dir + "/" + e)) action = e;  // the handler's name ("mlx5_comp0@pci:...", "virtio2-input.0")
    }
    const std::string label = action.empty() ? absl::StrCat(irq) : absl::StrFormat("%d (%s)", irq, action);
    where.push_back(absl::StrFormat("%s -> CPU %s", label, aff ? format_cpu_list(cpus) : std::string("?")));
    std::vector<int> on;
    for (int c : cpus) {
      if (std::find(pinned.begin(), pinned.end(), c) != pinned.end()) on.push_back(c);
    }
    if (!on.empty()) {
      hits.push_back(absl::StrFormat("IRQ %s on poller CPU %s", label, format_cpu_list(on)));
      bad_irqs.push_back(irq);
    }
  }
  const std::string name = absl::StrCat(device, " irqs");
  const std::string value = absl::StrCat("IRQ ", absl::StrJoin(where, ", "));
  if (pinned.empty()) {
    r.add(area, name, V::kInfo, absl::StrCat(value, "; no pinned pollers"));
  } else if (hits.empty()) {
    r.add(area, name, V::kOk, absl::StrFormat("%s; none on the pollers' CPU %s", value, format_cpu_list(pinned)));
  } else {
    std::vector<int> rest;
    for (int c : h.online) {
      if (std::find(pinned.begin(), pinned.end(), c) == pinned.end()) rest.push_back(c);
    }
    const std::string target = rest.empty() ? std::string("another CPU") : format_cpu_list(rest);
    r.add(area, name, V::kWarn,
          absl::StrCat(absl::StrJoin(hits, ", "), ": each interrupt preempts the poller (", value, ")"),
          absl::StrFormat("steer them off the poller CPUs, as root: for i in %s; do echo %s > /proc/irq/$i/"
                          "smp_affinity_list; done; and keep irqbalance from moving them back "
                          "(IRQBALANCE_BANNED_CPULIST=%s in /etc/default/irqbalance, or stop it)",
                          absl::StrJoin(bad_irqs, " "), target, format_cpu_list(pinned)));
  }
}

void check_network(const Host& h, Report& r) {
  const std::string udp_if = udp_interface_name(h);
  const std::vector<int> pinned = h.pinned_cpus();
  const std::vector<std::string> ifaces = h.fs.list("/sys/class/net");
  std::vector<std::pair<std::string, std::vector<int>>> with_irqs;
  for (const std::string& ifc : ifaces) {
    const std::string base = "/sys/class/net/" + ifc;
    std::vector<std::string> used;
    if (ifc == udp_if) used.push_back("udp.interface");
    if (ifc == h.cfg.runtime.device) used.push_back("runtime.device");
    const bool judged = !used.empty() && (h.judged(core::TransportKind::kUdp) || ifc == h.cfg.runtime.device);
    const std::string state = h.fs.line(base + "/operstate").value_or("?");
    std::vector<std::string> parts = {state};
    if (auto type = h.fs.integer(base + "/type")) parts.push_back(link_type(*type));
    if (auto mtu = h.fs.integer(base + "/mtu")) parts.push_back(absl::StrCat("mtu ", *mtu));
    if (auto speed = h.fs.integer(base + "/speed"); speed && *speed > 0) parts.push_back(absl::StrCat(*speed, " Mb/s"));
    const std::optional<std::string> dev = h.fs.resolve(base + "/device");
    if (!dev) {
      parts.push_back("virtual");
    } else {
      std::string drv = "no driver";
      if (auto d = h.fs.resolve(base + "/device/driver")) drv = absl::StrCat("driver ", basename(*d));
      parts.push_back(absl::StrCat(drv, " (", *dev, ")"));
    }
    const int node = sysfs_device_node(h.fs, base);
    if (dev) parts.push_back(node >= 0 ? absl::StrCat("NUMA node ", node) : "no NUMA node");
    const std::vector<int> irqs = sysfs_device_irqs(h.fs, base);
    if (!irqs.empty()) {
      parts.push_back(absl::StrFormat("%d IRQs", irqs.size()));
      with_irqs.emplace_back(ifc, irqs);
    }
    if (!used.empty()) parts.push_back(absl::StrCat("used by ", absl::StrJoin(used, ", ")));
    V v = V::kInfo;
    std::string hint;
    if (judged && state == "down") {
      v = V::kWarn;
      hint = absl::StrCat("bring it up: ip link set ", ifc, " up (and check the cable/peer: `ip link show ", ifc, "`)");
    } else if (judged && node >= 0 && h.topo != nullptr && h.topo->numa_nodes() > 1 && !pinned.empty()) {
      std::vector<int> remote;
      for (int c : pinned) {
        for (const core::CoreInfo& ci : h.topo->cores()) {
          if (std::find(ci.pu_os_indexes.begin(), ci.pu_os_indexes.end(), c) != ci.pu_os_indexes.end() &&
              ci.numa_node != node) {
            remote.push_back(c);
          }
        }
      }
      if (!remote.empty()) {
        v = V::kWarn;
        hint = absl::StrFormat(
            "the pollers' CPU %s are not on %s's NUMA node %d (every packet crosses the "
            "interconnect): set runtime.device = \"%s\" and leave runtime.poller_cores empty, or "
            "list CPUs of node %d",
            format_cpu_list(remote), ifc, node, ifc, node);
      } else {
        v = V::kOk;
      }
    } else if (judged) {
      v = V::kOk;
    }
    r.add("net", ifc, v, absl::StrJoin(parts, ", "), hint);
  }
  if (!udp_if.empty() && std::find(ifaces.begin(), ifaces.end(), udp_if) == ifaces.end()) {
    r.add("net", "udp.interface", h.judged(core::TransportKind::kUdp) ? V::kFail : V::kInfo,
          absl::StrFormat("udp.interface = \"%s\": no such interface", transport::udp::config(h.cfg).interface),
          absl::StrFormat("name one of: %s (or its IPv4 address)", absl::StrJoin(ifaces, ", ")));
  } else if (udp_if.empty() && !transport::udp::config(h.cfg).interface.empty()) {
    r.add("net", "udp.interface", h.judged(core::TransportKind::kUdp) ? V::kWarn : V::kInfo,
          absl::StrFormat("udp.interface = \"%s\": no interface holds that address here",
                          transport::udp::config(h.cfg).interface),
          "check `ip -4 addr`");
  }

  check_buffer_sysctl(h, r, "rmem_max", "udp.socket_rcvbuf", transport::udp::config(h.cfg).socket_rcvbuf,
                      "SO_RCVBUFFORCE");
  check_buffer_sysctl(h, r, "wmem_max", "udp.socket_sndbuf", transport::udp::config(h.cfg).socket_sndbuf,
                      "SO_SNDBUFFORCE");

  // Busy polling in the kernel: SO_BUSY_POLL (udp.busy_poll_us) on subscriber sockets spins on
  // the NIC queue inside recvmmsg; a value above net.core.busy_read needs CAP_NET_ADMIN.
  {
    const long long busy_read = h.fs.integer("/proc/sys/net/core/busy_read").value_or(-1);
    const long long busy_poll = h.fs.integer("/proc/sys/net/core/busy_poll").value_or(-1);
    const std::uint32_t want = transport::udp::config(h.cfg).busy_poll_us;
    const std::string value = absl::StrFormat("net.core.busy_read %lld, net.core.busy_poll %lld; udp.busy_poll_us %u",
                                              busy_read, busy_poll, want);
    if (want == 0) {
      r.add("net", "busy_poll", V::kInfo, absl::StrCat(value, ": the kernel does not busy-poll Pollux's sockets"),
            "the pollers already spin on recvmmsg; udp.busy_poll_us = 50 also makes the kernel poll the NIC queue "
            "inside it (no interrupt and softirq on the receive path; needs CAP_NET_ADMIN or net.core.busy_read >= "
            "50, and a NIC driver with NAPI busy polling)");
    } else if (busy_read >= static_cast<long long>(want) || has_cap(CAP_NET_ADMIN)) {
      r.add("net", "busy_poll", V::kOk, value);
    } else {
      r.add("net", "busy_poll", h.judged(core::TransportKind::kUdp) ? V::kWarn : V::kInfo,
            absl::StrCat(value, ": without CAP_NET_ADMIN the socket refuses SO_BUSY_POLL above net.core.busy_read"),
            absl::StrFormat("sysctl -w net.core.busy_read=%u, or run the process with CAP_NET_ADMIN (setcap "
                            "cap_net_admin+ep BINARY, AmbientCapabilities=CAP_NET_ADMIN in a systemd unit)",
                            want));
    }
  }

  for (const auto& [ifc, irqs] : with_irqs) check_irqs(h, r, "net", ifc, irqs);
}

}  // namespace pollux::doctor
