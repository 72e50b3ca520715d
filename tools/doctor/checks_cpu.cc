// cpu: topology (hwloc), SMT siblings, where the pollers would run, isolcpus, nohz_full, the
// frequency governor and idle states of those CPUs.
#include <sched.h>

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "tools/doctor/checks.h"
#include "transport/transport.h"

namespace pollux::doctor {
namespace {

using V = Verdict;

bool subset(const std::vector<int>& a, const std::vector<int>& of) {
  return std::all_of(a.begin(), a.end(), [&](int c) { return std::find(of.begin(), of.end(), c) != of.end(); });
}

std::vector<int> minus(const std::vector<int>& a, const std::vector<int>& b) {
  std::vector<int> out;
  for (int c : a) {
    if (std::find(b.begin(), b.end(), c) == b.end()) out.push_back(c);
  }
  return out;
}

// "/sys/devices/system/cpu/isolated" and friends: "" and "(null)" (older kernels) mean none.
std::vector<int> cpu_list_file(const HostFs& fs, std::string_view abs, bool* present) {
  const std::optional<std::string> l = fs.line(abs);
  *present = l.has_value();
  if (!l || *l == "(null)") return {};
  return parse_cpu_list(*l).value_or(std::vector<int>{});
}

std::string pollers_text(const Host& h) {
  const core::RuntimeConfig& rt = h.cfg.runtime;
  if (rt.threading == core::ThreadingMode::kInline) return "no pollers (runtime.threading = inline)";
  if (rt.threading == core::ThreadingMode::kShared) return "one unpinned poller (runtime.threading = shared)";
  std::vector<std::string> parts;
  for (std::size_t i = 0; i < h.poller_cpus.size(); ++i) {
    parts.push_back(h.poller_cpus[i] >= 0 ? absl::StrFormat("poller %d on CPU %d", i, h.poller_cpus[i])
                                          : absl::StrFormat("poller %d unpinned", i));
  }
  std::string how;
  if (!rt.poller_cores.empty()) {
    how = "runtime.poller_cores";
  } else if (h.device_node >= 0 && h.topo != nullptr && h.topo->numa_nodes() > 1) {
    how = absl::StrFormat("automatic: highest cores of NUMA node %d, %s's", h.device_node, h.placement_device);
  } else {
    how = "automatic: highest-numbered cores";
  }
  return absl::StrFormat("%s (%s)", absl::StrJoin(parts, ", "), how);
}

}  // namespace

std::vector<int> Host::pinned_cpus() const {
  std::vector<int> out;
  for (int c : poller_cpus) {
    if (c >= 0) out.push_back(c);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void plan_pollers(Host& h) {
  if (const std::optional<std::string> l = h.fs.line("/sys/devices/system/cpu/online")) {
    h.online = parse_cpu_list(*l).value_or(std::vector<int>{});
  }
  h.placement_device = h.cfg.runtime.device;
  // The transport's own device (rdma.device, "auto" resolved through verbs) only on this host.
  if (h.placement_device.empty() && h.fs.real()) h.placement_device = transport::placement_device(h.cfg);
  if (!h.placement_device.empty()) {
    if (h.fs.real() && h.topo != nullptr) {
      if (auto loc = h.topo->locate_device(h.placement_device); loc.ok()) h.device_node = loc->numa_node;
    } else {
      for (const char* cls : {"/sys/class/net/", "/sys/class/infiniband/"}) {
        if (h.fs.exists(cls + h.placement_device)) h.device_node = sysfs_device_node(h.fs, cls + h.placement_device);
      }
    }
  }
  std::vector<int> node_cpus;
  if (h.topo != nullptr) {
    node_cpus = h.topo->cpus_on_node(h.device_node);
  } else {
    node_cpus = h.online;
  }
  h.poller_cpus = core::poller_cpus(h.cfg.runtime, node_cpus);
}

void check_cpu(const Host& h, Report& r) {
  // Topology.
  std::map<int, std::vector<int>> node_cpus;  // NUMA node -> OS CPUs (every hardware thread)
  std::map<int, std::vector<int>> siblings;   // OS CPU -> the other hardware threads of its core
  int threads = 0, max_per_core = 1;
  if (h.topo == nullptr) {
    r.add("cpu", "topology", V::kWarn, absl::StrCat("hwloc could not read the topology: ", h.topo_error),
          "pollers are placed by hwloc: check that /sys is mounted and readable (a container needs it)");
  } else {
    for (const core::CoreInfo& c : h.topo->cores()) {
      threads += static_cast<int>(c.pu_os_indexes.size());
      max_per_core = std::max(max_per_core, static_cast<int>(c.pu_os_indexes.size()));
      for (int pu : c.pu_os_indexes) {
        node_cpus[c.numa_node].push_back(pu);
        for (int other : c.pu_os_indexes) {
          if (other != pu) siblings[pu].push_back(other);
        }
      }
    }
    std::vector<std::string> nodes;
    for (auto& [node, cpus] : node_cpus)
      nodes.push_back(absl::StrFormat("node %d: CPUs %s", node, format_cpu_list(cpus)));
    r.add("cpu", "topology", V::kInfo,
          absl::StrFormat("%d NUMA node%s, %d cores, %d hardware threads; %s", h.topo->numa_nodes(),
                          h.topo->numa_nodes() == 1 ? "" : "s", h.topo->cores().size(), threads,
                          absl::StrJoin(nodes, "; ")),
          h.topo->numa_nodes() > 1 ? "keep each process's pollers, pool and NIC on one node: set runtime.device to "
                                     "the NIC (see net and rdma below for each device's node)"
                                   : "");
  }

  // CPUs online and usable by this process (what `nproc` counts).
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> usable;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) usable.push_back(c);
    }
  }
  const bool restricted = !h.online.empty() && !subset(h.online, usable);
  r.add("cpu", "cpus", V::kInfo,
        absl::StrFormat("%d usable by this process (%s) of %d online (%s)", usable.size(), format_cpu_list(usable),
                        h.online.size(), format_cpu_list(h.online)),
        restricted ? "this process is restricted (taskset, cgroup cpuset, container): Pollux processes started the "
                     "same way can only pin pollers to the usable CPUs"
                   : "");

  const std::vector<int> pinned = h.pinned_cpus();

  // SMT.
  if (h.topo != nullptr) {
    if (max_per_core <= 1) {
      r.add("cpu", "smt", V::kOk, "no SMT: one hardware thread per core");
    } else {
      std::vector<std::string> shared;
      std::vector<int> sib_cpus;
      for (int c : pinned) {
        for (int s : siblings[c]) {
          shared.push_back(absl::StrFormat("CPU %d shares its core with CPU %d", c, s));
          sib_cpus.push_back(s);
        }
      }
      r.add("cpu", "smt", V::kWarn,
            absl::StrFormat("%d hardware threads per core%s%s", max_per_core, shared.empty() ? "" : "; ",
                            absl::StrJoin(shared, ", ")),
            absl::StrFormat("a busy sibling thread slows a poller and adds jitter: keep %s idle (no application "
                            "threads or other pollers there; isolcpus keeps the scheduler off), or turn SMT off: "
                            "echo off > /sys/devices/system/cpu/smt/control",
                            sib_cpus.empty() ? std::string("each poller's sibling")
                                             : absl::StrCat("CPU ", format_cpu_list(sib_cpus))));
    }
  }

  // Where the pollers go.
  {
    V v = h.config_given ? V::kOk : V::kInfo;
    std::string hint = h.config_given ? "" : "these are the defaults: pass --config FILE to check your application's";
    std::vector<int> offline = h.online.empty() ? std::vector<int>{} : minus(pinned, h.online);
    if (!h.cfg.runtime.device.empty() && h.fs.real() && h.topo != nullptr &&
        !h.topo->locate_device(h.cfg.runtime.device).ok()) {
      v = V::kFail;
      hint = absl::StrCat("runtime.device = \"", h.cfg.runtime.device,
                          "\" is neither a network nor an RDMA device here: a context will not start; name one of "
                          "`ip link` or `rdma link` (or leave it empty)");
    } else if (!offline.empty()) {
      v = V::kFail;
      hint = absl::StrFormat(
          "CPU %s %s not online (online: %s): a context will not start; list online CPUs in "
          "runtime.poller_cores",
          format_cpu_list(offline), offline.size() == 1 ? "is" : "are", format_cpu_list(h.online));
    } else if (static_cast<std::ptrdiff_t>(pinned.size()) <
               std::count_if(h.poller_cpus.begin(), h.poller_cpus.end(), [](int c) { return c >= 0; })) {
      v = V::kWarn;
      hint =
          "two pollers of this process would share a CPU: give each its own (runtime.poller_cores), or lower "
          "runtime.pollers";
    }
    r.add("cpu", "pollers", v, pollers_text(h), hint);
  }

  // isolcpus.
  const std::string cmdline = h.fs.text("/proc/cmdline").value_or("");
  {
    bool present = false;
    const std::vector<int> isolated = cpu_list_file(h.fs, "/sys/devices/system/cpu/isolated", &present);
    const std::string arg = cmdline_value(cmdline, "isolcpus");
    std::string value = isolated.empty() ? "no isolated CPUs" : absl::StrCat("isolated: ", format_cpu_list(isolated));
    if (!arg.empty()) absl::StrAppend(&value, " (isolcpus=", arg, " on the kernel command line)");
    if (pinned.empty()) {
      r.add("cpu", "isolcpus", V::kInfo, absl::StrCat(value, "; no pinned pollers (threading is not dedicated)"));
    } else if (isolated.empty()) {
      const std::vector<int> rest = minus(h.online, pinned);
      r.add(
          "cpu", "isolcpus", V::kWarn,
          absl::StrFormat("%s: the scheduler may run other tasks on the pollers' CPU %s", value,
                          format_cpu_list(pinned)),
          absl::StrFormat("reserve the poller CPUs: boot with isolcpus=%s nohz_full=%s rcu_nocbs=%s%s (kernel command "
                          "line, e.g. GRUB_CMDLINE_LINUX in /etc/default/grub) and keep runtime.poller_cores on them",
                          format_cpu_list(pinned), format_cpu_list(pinned), format_cpu_list(pinned),
                          rest.empty() ? "" : absl::StrCat(" irqaffinity=", format_cpu_list(rest))));
    } else if (subset(pinned, isolated)) {
      r.add("cpu", "isolcpus", V::kOk,
            absl::StrFormat("%s; the pollers' CPU %s are isolated", value, format_cpu_list(pinned)));
    } else {
      std::vector<int> pick(isolated.begin(), isolated.begin() + static_cast<std::ptrdiff_t>(
                                                                     std::min(isolated.size(), h.poller_cpus.size())));
      r.add(
          "cpu", "isolcpus", V::kWarn,
          absl::StrFormat("%s, but the pollers would run on CPU %s", value, format_cpu_list(minus(pinned, isolated))),
          absl::StrFormat("put the pollers on isolated CPUs: runtime.poller_cores = [%s]", absl::StrJoin(pick, ", ")));
    }
  }

  // nohz_full.
  {
    bool present = false;
    const std::vector<int> nohz = cpu_list_file(h.fs, "/sys/devices/system/cpu/nohz_full", &present);
    if (!present) {
      r.add("cpu", "nohz_full", V::kInfo,
            "this kernel cannot stop the scheduler tick (no /sys/devices/system/cpu/nohz_full: built without "
            "CONFIG_NO_HZ_FULL)",
            pinned.empty() ? ""
                           : "the tick interrupts each poller CPU every 1-4 ms; a kernel with CONFIG_NO_HZ_FULL "
                             "and nohz_full= on its command line removes it");
    } else if (pinned.empty()) {
      r.add("cpu", "nohz_full", V::kInfo,
            absl::StrCat(nohz.empty() ? "none" : format_cpu_list(nohz), "; no pinned pollers"));
    } else if (subset(pinned, nohz)) {
      r.add("cpu", "nohz_full", V::kOk,
            absl::StrFormat("%s; covers the pollers' CPU %s", format_cpu_list(nohz), format_cpu_list(pinned)));
    } else {
      r.add("cpu", "nohz_full", V::kWarn,
            absl::StrFormat("%s: the scheduler tick interrupts the pollers' CPU %s every 1-4 ms",
                            nohz.empty() ? "no nohz_full CPUs" : absl::StrCat("nohz_full ", format_cpu_list(nohz)),
                            format_cpu_list(minus(pinned, nohz))),
            absl::StrFormat("boot with nohz_full=%s rcu_nocbs=%s (with isolcpus= of the same CPUs)",
                            format_cpu_list(pinned), format_cpu_list(pinned)));
    }
  }

  // Frequency governor.
  {
    const std::vector<int> relevant = pinned.empty() ? h.online : pinned;
    std::map<std::string, std::vector<int>> by_governor;
    for (int c : h.online) {
      if (auto g = h.fs.line(absl::StrFormat("/sys/devices/system/cpu/cpu%d/cpufreq/scaling_governor", c))) {
        by_governor[std::string(absl::StripAsciiWhitespace(*g))].push_back(c);
      }
    }
    if (by_governor.empty()) {
      r.add("cpu", "governor", V::kInfo,
            "no cpufreq on any CPU (/sys/devices/system/cpu/cpu*/cpufreq absent): a VM, or frequency left to "
            "the firmware",
            "nothing to set in this OS; on bare metal choose the firmware's performance profile (no deep "
            "C-states, no power capping)");
    } else {
      std::vector<std::string> parts;
      std::vector<int> slow;
      for (auto& [g, cpus] : by_governor) {
        parts.push_back(absl::StrFormat("%s on CPU %s", g, format_cpu_list(cpus)));
        if (g != "performance") {
          for (int c : cpus) {
            if (std::find(relevant.begin(), relevant.end(), c) != relevant.end()) slow.push_back(c);
          }
        }
      }
      if (slow.empty()) {
        r.add("cpu", "governor", V::kOk, absl::StrJoin(parts, "; "));
      } else {
        r.add("cpu", "governor", V::kWarn,
              absl::StrFormat("%s: CPU %s may run below full clock and ramp up under load", absl::StrJoin(parts, "; "),
                              format_cpu_list(slow)),
              absl::StrFormat(
                  "cpupower frequency-set -g performance (package linux-cpupower), or: echo performance | "
                  "tee /sys/devices/system/cpu/cpu%s/cpufreq/scaling_governor",
                  slow.size() == 1 ? absl::StrCat(slow[0]) : absl::StrCat("{", absl::StrJoin(slow, ","), "}")));
      }
    }
  }

  // Idle states of the first relevant CPU: how deep a sleeping poller (idle = adaptive,
  // interrupt, backoff) goes, and how long it takes to come back.
  {
    const std::vector<int> relevant = pinned.empty() ? h.online : pinned;
    const std::string driver =
        h.fs.line("/sys/devices/system/cpu/cpuidle/current_driver").value_or("none (no cpuidle)");
    std::vector<std::string> states;
    long long deepest = 0;
    std::string deepest_name;
    if (!relevant.empty()) {
      const std::string dir = absl::StrFormat("/sys/devices/system/cpu/cpu%d/cpuidle", relevant.front());
      for (const std::string& s : h.fs.list(dir)) {
        if (s.rfind("state", 0) != 0) continue;
        const std::string name = h.fs.line(absl::StrCat(dir, "/", s, "/name")).value_or(s);
        const long long lat = h.fs.integer(absl::StrCat(dir, "/", s, "/latency")).value_or(-1);
        const bool disabled = h.fs.integer(absl::StrCat(dir, "/", s, "/disable")).value_or(0) != 0;
        states.push_back(absl::StrFormat("%s %lld us%s", name, lat, disabled ? " (disabled)" : ""));
        if (!disabled && lat > deepest) {
          deepest = lat;
          deepest_name = name;
        }
      }
    }
    const bool sleeps = h.cfg.runtime.idle != core::IdleKind::kBusySpin && h.cfg.runtime.idle != core::IdleKind::kYield;
    std::string value = absl::StrCat("driver ", driver);
    if (!states.empty()) absl::StrAppend(&value, "; CPU ", relevant.front(), ": ", absl::StrJoin(states, ", "));
    std::string hint;
    if (sleeps && deepest > 10) {
      hint = absl::StrFormat(
          "a sleeping poller wakes from %s in up to %lld us: for the lowest wakeup latency cap the "
          "C-states (tuned's latency-performance profile, or hold /dev/cpu_dma_latency open with "
          "0), or use runtime.idle = \"busy-spin\"",
          deepest_name, deepest);
    }
    r.add("cpu", "idle states", V::kInfo, value, hint);
  }
}

}  // namespace pollux::doctor
