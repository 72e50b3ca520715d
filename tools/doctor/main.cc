// pollux-doctor: checks this host for what Pollux needs and what costs it latency (docs/OPERATIONS.md,
// "Tuning a host"): CPU topology and isolation, frequency governor, memory limits and hugepages,
// NIC and RDMA devices, socket sysctls, interrupt placement, AF_XDP, running Pollux processes. Each
// finding is one line with a verdict (ok / info / warn / fail) and a hint.
//
// Hidden, for tests: --root DIR (or POLLUX_DOCTOR_ROOT=DIR) reads /sys and /proc under DIR, a
// fabricated tree (hwloc too, through HWLOC_FSROOT); RDMA devices are then not queried.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "tools/common/cli.h"
#include "tools/doctor/checks.h"

namespace {

constexpr char kUsage[] = "usage: pollux-doctor [--config FILE] [--json] [--shm-dir DIR] [--no-probe]\n";

constexpr char kHelp[] = R"(Checks this host for Pollux: what it needs to run and what costs it latency.
Each line is a check with a verdict and, when something should change, a hint (-> ...):
  ok    as Pollux wants it            info  a fact, nothing to change
  warn  works, but latency suffers    fail  Pollux will not start or work as configured

Areas: cpu (NUMA nodes, cores, SMT siblings, where the pollers would run, isolcpus, nohz_full,
frequency governor, idle states), memory (memlock against the pool an RDMA context registers,
hugepages, transparent hugepages), net (interfaces with NUMA node and IRQs, net.core.rmem_max /
wmem_max against udp.socket_rcvbuf / sndbuf, busy_poll sysctls, NIC interrupts on the pollers'
CPUs), xdp (what the AF_XDP datapath needs: capabilities, memlock against the UMEM, udp.mtu
against the UMEM frame, AF_XDP sockets, bpffs, libxdp's dispatcher, and per interface the
driver, rx queues, MTU and attached XDP programs, Pollux's with its owner alive or stale), rdma
(devices, ports, link layer, GIDs, max_inline_data probed with a throw-away QP, CQ moderation,
completion timestamps), process (running Pollux processes found by their counters
files, poller threads pinned to the same CPU). docs/OPERATIONS.md explains each check and its fix.

Options:
  --config FILE   judge against this configuration (its transport, pool, pollers, sockets);
                  without it the built-in defaults are used and every transport is judged
  --json          one JSON object instead of text:
                    {"checks":[{"area":"cpu","name":"isolcpus","verdict":"warn",
                                "value":"what was found","hint":"what to do, or empty"},...],
                     "summary":{"ok":N,"info":N,"warn":N,"fail":N,"exit_status":0|1,
                                "config":"<defaults> or FILE","version":"X.Y.Z"}}
                  area is cpu|memory|net|xdp|rdma|process; verdict is ok|info|warn|fail
  --shm-dir DIR   where running processes keep their counters files (default: the
                  configuration's runtime.shm_dir, /dev/shm)
  --no-probe      do not create throw-away RDMA QPs (max_inline_data is then not reported)
  --version       print the version
  -h, --help      this text

Exit status: 0 no check failed (warnings allowed), 1 at least one fail verdict,
2 the configuration could not be loaded, 64 bad command line.
)";

int usage_error(const std::string& msg) {
  std::fprintf(stderr, "pollux-doctor: %s\n%s(--help describes every option)\n", msg.c_str(), kUsage);
  return 64;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace pollux;
  std::string config_path, shm_dir, root;
  bool json = false, probe = true;
  if (const char* e = std::getenv("POLLUX_DOCTOR_ROOT"); e != nullptr && *e != '\0') root = e;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](std::string* out) {
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    if (const int rc = cli::handle_standard_flag(a, "pollux-doctor", absl::StrCat(kUsage, kHelp)); rc >= 0) return rc;
    if (a == "--json") {
      json = true;
    } else if (a == "--no-probe") {
      probe = false;
    } else if (a == "--config") {
      if (!value(&config_path)) return usage_error("--config needs a FILE");
    } else if (a == "--shm-dir") {
      if (!value(&shm_dir)) return usage_error("--shm-dir needs a DIR");
    } else if (a == "--root") {
      if (!value(&root)) return usage_error("--root needs a DIR");
    } else {
      return cli::unknown_flag("pollux-doctor", a, kHelp);
    }
  }

  doctor::Host h;
  h.fs = doctor::HostFs(root);
  h.config_given = !config_path.empty();
  absl::StatusOr<core::Config> cfg =
      config_path.empty() ? core::parse_config("", "<defaults>") : core::load_config_file(config_path);
  if (!cfg.ok()) {
    std::fprintf(stderr, "pollux-doctor: %s\n", std::string(cfg.status().message()).c_str());
    return 2;
  }
  h.cfg = std::move(*cfg);
  h.shm_dir = shm_dir.empty() ? h.cfg.runtime.shm_dir : shm_dir;
  h.probe_qps = probe;
  if (!h.fs.real()) setenv("HWLOC_FSROOT", h.fs.root().c_str(), 1);  // hwloc reads the same tree
  if (auto t = core::Topology::load(); t.ok()) {
    h.topo = std::move(*t);
  } else {
    h.topo_error = std::string(t.status().message());
  }
  doctor::plan_pollers(h);

  doctor::Report report;
  doctor::check_cpu(h, report);
  doctor::check_memory(h, report);
  doctor::check_network(h, report);
  doctor::check_xdp(h, report);
  doctor::check_rdma(h, report);
  doctor::check_processes(h, report);

  if (json) {
    std::fputs(report.json(h.cfg.source, POLLUX_VERSION).c_str(), stdout);
  } else {
    std::printf("pollux-doctor %s: this host for Pollux (configuration: %s)\n", POLLUX_VERSION, h.cfg.source.c_str());
    std::fputs(report.text().c_str(), stdout);
  }
  return report.exit_status();
}
