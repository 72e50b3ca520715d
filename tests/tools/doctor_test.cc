// pollux-doctor on this host and on fabricated /sys + /proc trees (--root): the command-line
// contract, the JSON layout, the facts that are deterministic here (CPU count = nproc, memlock
// = ulimit -l), and the verdicts and hints of a badly tuned and a well tuned host.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/counters.h"
#include "tests/latency/json_lite.h"
#include "tests/support/netns.h"
#include "tests/support/process.h"
#include "tools/doctor/host_fs.h"
#if defined(POLLUX_HAVE_XDP)
#include <linux/if_link.h>
#include <net/if.h>

#include "transport/udp/xdp/xsk.h"

extern "C" {
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
}
#endif

namespace pollux::doctor {
namespace {

namespace fs = std::filesystem;

using Out = pollux::testing::CommandOutput;
using pollux::testing::RunCommand;

Out Doctor(const std::string& args, bool merge = false) {
  return RunCommand(std::string(POLLUX_DOCTOR_BIN) + " " + args, merge);
}

struct Checks {
  jsonlite::Value doc;
  std::map<std::string, const jsonlite::Value*> by_key;  // "area/name" -> check
  const jsonlite::Value* get(const std::string& key) const {
    auto it = by_key.find(key);
    return it == by_key.end() ? nullptr : it->second;
  }
  std::string verdict(const std::string& key) const {
    const jsonlite::Value* c = get(key);
    return c ? c->get("verdict")->str : "<missing " + key + ">";
  }
  std::string value(const std::string& key) const {
    const jsonlite::Value* c = get(key);
    return c ? c->get("value")->str : "";
  }
  std::string hint(const std::string& key) const {
    const jsonlite::Value* c = get(key);
    return c ? c->get("hint")->str : "";
  }
};

// Parses --json output and checks its layout: every check has the five string members with
// known areas and verdicts, (area, name) is unique, and the summary counts them.
Checks parse_report(const Out& o) {
  Checks c;
  std::string err;
  std::optional<jsonlite::Value> v = jsonlite::Parse(o.text, &err);
  EXPECT_TRUE(v.has_value()) << err << "\n" << o.text;
  if (!v) return c;
  c.doc = std::move(*v);
  const jsonlite::Value* checks = c.doc.get("checks");
  const jsonlite::Value* summary = c.doc.get("summary");
  EXPECT_TRUE(checks != nullptr && checks->is_array()) << o.text;
  EXPECT_TRUE(summary != nullptr && summary->is_object()) << o.text;
  if (checks == nullptr || summary == nullptr) return c;
  std::map<std::string, int> counts;
  const std::set<std::string> areas = {"cpu", "memory", "net", "xdp", "rdma", "process"};
  const std::set<std::string> verdicts = {"ok", "info", "warn", "fail"};
  for (const jsonlite::Value& ch : checks->arr) {
    for (const char* k : {"area", "name", "verdict", "value", "hint"}) {
      const jsonlite::Value* m = ch.get(k);
      EXPECT_TRUE(m != nullptr && m->is_string()) << "member " << k;
    }
    if (ch.get("area") == nullptr || ch.get("name") == nullptr || ch.get("verdict") == nullptr) continue;
    EXPECT_EQ(areas.count(ch.get("area")->str), 1u) << ch.get("area")->str;
    EXPECT_EQ(verdicts.count(ch.get("verdict")->str), 1u) << ch.get("verdict")->str;
    const std::string key = ch.get("area")->str + "/" + ch.get("name")->str;
    EXPECT_EQ(c.by_key.count(key), 0u) << "duplicate check " << key;
    c.by_key[key] = &ch;
    ++counts[ch.get("verdict")->str];
  }
  for (const std::string& v : verdicts) {
    const jsonlite::Value* n = summary->get(v);
    EXPECT_TRUE(n != nullptr && n->is_number()) << v;
    if (n != nullptr) {
      EXPECT_EQ(static_cast<int>(n->num), counts[v]) << v;
    }
  }
  const jsonlite::Value* es = summary->get("exit_status");
  EXPECT_TRUE(es != nullptr && es->is_number());
  if (es != nullptr) {
    EXPECT_EQ(static_cast<int>(es->num), counts["fail"] > 0 ? 1 : 0);
    EXPECT_EQ(static_cast<int>(es->num), o.status) << "exit status and summary disagree";
  }
  EXPECT_TRUE(summary->get("config") != nullptr && summary->get("config")->is_string());
  EXPECT_TRUE(summary->get("version") != nullptr && summary->get("version")->is_string());
  return c;
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string FirstWord(const std::string& s) { return s.substr(0, s.find(' ')); }

// ---- the command line -------------------------------------------------------------------------

TEST(DoctorCli, HelpDescribesOptionsJsonAndExitStatus) {
  const Out o = Doctor("--help");
  EXPECT_EQ(o.status, 0);
  for (const char* s : {"--config FILE", "--json", "--shm-dir", "--no-probe", "--version", "\"checks\":[",
                        "\"summary\":{", "Exit status: 0", "1 at least one fail"}) {
    EXPECT_NE(o.text.find(s), std::string::npos) << s << "\n" << o.text;
  }
}

TEST(DoctorCli, UnknownFlagExits64WithAHint) {
  const Out o = Doctor("--jsn", true);
  EXPECT_EQ(o.status, 64);
  EXPECT_NE(o.text.find("unknown flag '--jsn'; did you mean '--json'?"), std::string::npos) << o.text;
  EXPECT_NE(o.text.find("--help"), std::string::npos) << o.text;
  EXPECT_EQ(Doctor("--config", true).status, 64);  // a flag without its value
}

TEST(DoctorCli, VersionIsTheProjects) {
  const Out o = Doctor("--version");
  EXPECT_EQ(o.status, 0);
  EXPECT_EQ(Trim(o.text), std::string("pollux-doctor ") + POLLUX_VERSION);
}

TEST(DoctorCli, BadConfigExits2NamingTheKey) {
  const std::string path = ::testing::TempDir() + "/doctor_bad_" + std::to_string(getpid()) + ".toml";
  std::ofstream(path) << "[runtime]\nthreding = \"shared\"\n";
  const Out o = Doctor("--config " + path, true);
  std::remove(path.c_str());
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.text.find("runtime.threding"), std::string::npos) << o.text;
}

// ---- this host ----------------------------------------------------------------------------------

TEST(DoctorHost, JsonReportOfThisHost) {
  const Out o = Doctor("--json --no-probe");
  ASSERT_TRUE(o.status == 0 || o.status == 1) << o.status;
  const Checks c = parse_report(o);
  // CPUs usable by this process: what nproc counts.
  const std::string nproc = Trim(RunCommand("nproc").text);
  ASSERT_FALSE(nproc.empty());
  EXPECT_EQ(FirstWord(c.value("cpu/cpus")), nproc) << c.value("cpu/cpus");
  // The locked-memory limit in `ulimit -l`'s own terms (KiB or "unlimited").
  const std::string ulimit = Trim(RunCommand("sh -c 'ulimit -l'").text);
  ASSERT_FALSE(ulimit.empty());
  EXPECT_EQ(FirstWord(c.value("memory/memlock")), ulimit) << c.value("memory/memlock");
  // The sysctls as the kernel reports them.
  std::ifstream rmem("/proc/sys/net/core/rmem_max");
  long long rmem_max = 0;
  if (rmem >> rmem_max) {
    EXPECT_EQ(FirstWord(c.value("net/rmem_max")), std::to_string(rmem_max));
  }
  // Every area reported, each check with a verdict; warn and fail carry a hint.
  for (const char* key : {"cpu/topology", "cpu/smt", "cpu/pollers", "cpu/isolcpus", "cpu/nohz_full", "cpu/governor",
                          "memory/hugepages", "memory/thp", "net/wmem_max", "net/busy_poll", "rdma/devices"}) {
    EXPECT_NE(c.get(key), nullptr) << key;
  }
  for (const auto& [key, ch] : c.by_key) {
    const std::string v = ch->get("verdict")->str;
    if (v == "warn" || v == "fail") {
      EXPECT_FALSE(ch->get("hint")->str.empty()) << key << " has no hint";
    }
  }
  // AF_XDP: the process's own capabilities, as /proc/self/status shows them to this test (the
  // doctor inherits them), and the kernel probes; a build without it says so in one line.
#if defined(POLLUX_HAVE_XDP)
  for (const char* key :
       {"xdp/capabilities", "xdp/memlock", "xdp/frame size", "xdp/bpffs", "xdp/af_xdp socket", "xdp/dispatcher"}) {
    EXPECT_NE(c.get(key), nullptr) << key;
  }
  std::ifstream status("/proc/self/status");
  std::string line, cap_eff;
  while (std::getline(status, line)) {
    if (line.rfind("CapEff:", 0) == 0) cap_eff = line.substr(line.find_first_not_of(" \t", 7));
  }
  ASSERT_FALSE(cap_eff.empty());
  EXPECT_EQ(c.value("xdp/capabilities").rfind("CapEff " + cap_eff + ": ", 0), 0u) << c.value("xdp/capabilities");
  EXPECT_EQ(c.value("xdp/memlock").rfind(ulimit == "unlimited" ? ulimit : ulimit + " KiB", 0), 0u)
      << c.value("xdp/memlock");
  EXPECT_NE(c.value("xdp/memlock").find("16384 KiB UMEM per AF_XDP socket (udp.xdp_frames 4096 x 4096 bytes)"),
            std::string::npos)
      << c.value("xdp/memlock");
  EXPECT_EQ(c.get("xdp/support"), nullptr);
#else
  EXPECT_NE(c.value("xdp/support").find("AF_XDP support was not built"), std::string::npos);
#endif
  // Without --config the defaults are judged, and the summary says so.
  EXPECT_EQ(c.doc.get("summary")->get("config")->str, "<defaults>");
  // The text form carries the same checks.
  const Out t = Doctor("--no-probe");
  EXPECT_EQ(t.status, o.status);
  EXPECT_NE(t.text.find("cpu cpus"), std::string::npos) << t.text;
  EXPECT_NE(t.text.find(" ok, "), std::string::npos) << t.text;
}

// Two live processes whose pollers are pinned to one CPU (runtime.poller_cores, the same in
// both configurations): the doctor finds them through their counters files and /proc, names
// both threads, and warns.
TEST(DoctorHost, FindsRunningPollersSharingACpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  int cpu = 0;
  while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &set)) ++cpu;
  const std::string dir = ::testing::TempDir() + "/doctor_live_" + std::to_string(getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string cfg =
      pollux::testing::write_file(dir + "/app.toml", "[runtime]\nshm_dir = \"" + dir +
                                                         "\"\nname = \"doctor-live\"\nthreading = \"dedicated\"\n"
                                                         "pollers = 1\npoller_cores = [" +
                                                         std::to_string(cpu) + "]\nidle = \"interrupt\"\n");
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  // Publishers wait (up to --timeout) for a subscriber that never comes: they stay up, idle.
  std::vector<pollux::testing::Child> peers;
  for (const char* topic : {"doctor.a", "doctor.b"}) {
    peers.push_back(pollux::testing::spawn({POLLUX_TEST_PEER, "pub", "--config", cfg, "--topic", topic, "--count", "1",
                                            "--ready-fd", std::to_string(ready[1]), "--timeout", "120"},
                                           {ready[1]}));
    ASSERT_GT(peers.back().pid, 0);
  }
  close(ready[1]);
  char buf[2];
  std::size_t got = 0;
  while (got < 2) {  // both ready (or EOF: one died, and the check below says so)
    const ssize_t n = read(ready[0], buf, sizeof buf - got);
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  close(ready[0]);
  const Out o = Doctor("--json --no-probe --shm-dir " + dir);
  for (pollux::testing::Child& p : peers) {
    kill(p.pid, SIGKILL);
    pollux::testing::wait_child(p, 10);
  }
  fs::remove_all(dir);
  ASSERT_EQ(got, 2u) << "a peer did not start: " << peers[0].output << peers[1].output;
  const Checks c = parse_report(o);
  for (const pollux::testing::Child& p : peers) {
    const std::string key = "process/pid " + std::to_string(p.pid);
    EXPECT_NE(c.value(key).find("doctor-live: pollux-poll-0 pinned to CPU " + std::to_string(cpu)), std::string::npos)
        << key << ": " << c.value(key);
    EXPECT_NE(c.value("process/poller cores").find("pid " + std::to_string(p.pid) + " (doctor-live) pollux-poll-0"),
              std::string::npos)
        << c.value("process/poller cores");
  }
  EXPECT_EQ(c.verdict("process/poller cores"), "warn");
  EXPECT_NE(c.value("process/poller cores").find("CPU " + std::to_string(cpu) + ": "), std::string::npos);
  EXPECT_NE(c.hint("process/poller cores").find("runtime.poller_cores"), std::string::npos);
}

// ---- fabricated hosts (--root) ------------------------------------------------------------------

class Tree {
 public:
  Tree() {
    root_ = ::testing::TempDir() + "/doctor_root_" + std::to_string(getpid()) + "_" + std::to_string(++n_);
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  ~Tree() { fs::remove_all(root_); }
  const std::string& root() const { return root_; }
  void File(const std::string& rel, const std::string& text) {
    fs::create_directories(fs::path(root_ + rel).parent_path());
    std::ofstream(root_ + rel) << text;
  }
  void Dir(const std::string& rel) { fs::create_directories(root_ + rel); }
  void Link(const std::string& rel, const std::string& target) {
    fs::create_directories(fs::path(root_ + rel).parent_path());
    fs::create_directory_symlink(target, root_ + rel);
  }

  // Four CPUs in two SMT cores ({0,1}, {2,3}), one package, as hwloc reads them.
  void Cpus() {
    File("/sys/devices/system/cpu/online", "0-3\n");
    File("/sys/devices/system/cpu/possible", "0-3\n");
    File("/sys/devices/system/cpu/present", "0-3\n");
    for (int c = 0; c < 4; ++c) {
      const std::string t = "/sys/devices/system/cpu/cpu" + std::to_string(c) + "/topology/";
      const std::string sib = c < 2 ? "0-1" : "2-3", mask = c < 2 ? "3" : "c";
      File(t + "physical_package_id", "0\n");
      File(t + "core_id", std::to_string(c / 2) + "\n");
      File(t + "thread_siblings_list", sib + "\n");
      File(t + "thread_siblings", mask + "\n");
      File(t + "core_cpus_list", sib + "\n");
      File(t + "core_cpus", mask + "\n");
      File(t + "core_siblings_list", "0-3\n");
      File(t + "core_siblings", "f\n");
      File(t + "package_cpus_list", "0-3\n");
      File(t + "package_cpus", "f\n");
    }
  }
  // A PCI NIC eth9 on NUMA node 0 with two MSI IRQs (50 and 51).
  void Nic() {
    const std::string pci = "/sys/devices/pci0000:00/0000:00:05.0";
    Dir("/sys/bus/pci");
    Link(pci + "/subsystem", "../../../bus/pci");
    File(pci + "/numa_node", "0\n");
    File(pci + "/msi_irqs/50", "msix\n");
    File(pci + "/msi_irqs/51", "msix\n");
    File(pci + "/net/eth9/operstate", "up\n");
    File(pci + "/net/eth9/mtu", "1500\n");
    File(pci + "/net/eth9/type", "1\n");
    Link(pci + "/net/eth9/device", "../../../0000:00:05.0");
    Link("/sys/class/net/eth9", "../../devices/pci0000:00/0000:00:05.0/net/eth9");
    Dir("/proc/irq/50/eth9-rx-0");
    Dir("/proc/irq/51/eth9-tx-0");
  }

  // What the doctor judges, as the kernel shows it (eth9's IRQs 50 and 51: Nic()). The defaults
  // are a host tuned for one poller on CPU 2: isolated nohz_full CPUs, performance governor, IRQs
  // elsewhere, buffers and hugepages enough.
  struct Tuning {
    std::string isolated = "2-3", nohz_full = "2-3", cmdline = "isolcpus=2-3 nohz_full=2-3", governor = "performance";
    std::string irq50_allowed = "0-1", irq50_effective = "0", irq51_allowed = "0-1";
    long long rmem_max = 4194304, wmem_max = 4194304, busy_read = 50, busy_poll = 50;
    int hugepages_total = 64, hugepages_free = 64;
    std::string thp = "always [madvise] never";
  };
  void Tune(const Tuning& k) {
    File("/sys/devices/system/cpu/isolated", k.isolated + "\n");
    File("/sys/devices/system/cpu/nohz_full", k.nohz_full + "\n");
    File("/proc/cmdline", k.cmdline + "\n");
    for (int c = 0; c < 4; ++c) {
      File("/sys/devices/system/cpu/cpu" + std::to_string(c) + "/cpufreq/scaling_governor", k.governor + "\n");
    }
    File("/proc/irq/50/smp_affinity_list", k.irq50_allowed + "\n");
    File("/proc/irq/50/effective_affinity_list", k.irq50_effective + "\n");
    File("/proc/irq/51/smp_affinity_list", k.irq51_allowed + "\n");
    File("/proc/sys/net/core/rmem_max", std::to_string(k.rmem_max) + "\n");
    File("/proc/sys/net/core/wmem_max", std::to_string(k.wmem_max) + "\n");
    File("/proc/sys/net/core/busy_read", std::to_string(k.busy_read) + "\n");
    File("/proc/sys/net/core/busy_poll", std::to_string(k.busy_poll) + "\n");
    File("/proc/meminfo", "MemTotal: 8000000 kB\nHugePages_Total: " + std::to_string(k.hugepages_total) +
                              "\nHugePages_Free: " + std::to_string(k.hugepages_free) + "\nHugepagesize: 2048 kB\n");
    File("/sys/kernel/mm/transparent_hugepage/enabled", k.thp + "\n");
    File("/sys/kernel/mm/transparent_hugepage/defrag", "always defer [madvise] never\n");
  }

 private:
  std::string root_;
  static inline int n_ = 0;
};

std::string WriteConfig(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/doctor_" + name + "_" + std::to_string(getpid()) + ".toml";
  std::ofstream(path) << text;
  return path;
}

// pollux-doctor --json on the tree `t`, with `shm` as its shm directory and the configuration
// `text` (in a file named after `name`, removed after the run).
Out DoctorJsonOnTree(const Tree& t, const std::string& shm, const std::string& name, const std::string& text) {
  const std::string cfg = WriteConfig(name, text);
  const Out o = Doctor("--json --root " + t.root() + " --shm-dir " + shm + " --config " + cfg);
  std::remove(cfg.c_str());
  return o;
}

// A badly tuned host: isolated and nohz_full CPUs that are not where the pollers go, SMT,
// powersave, the NIC's receive IRQ on the poller's CPU, rmem_max below udp.socket_rcvbuf, too
// few hugepages and THP off; a running process whose two pollers share a CPU.
TEST(DoctorRoot, BadlyTunedHostGetsWarningsWithHints) {
  Tree t;
  t.Cpus();
  t.Nic();
  t.Tune({.isolated = "3",
          .nohz_full = "3",
          .cmdline = "BOOT_IMAGE=/vmlinuz root=/dev/sda1 isolcpus=3 nohz_full=3 quiet",
          .governor = "powersave",
          .irq50_allowed = "0-3",
          .irq50_effective = "2",  // delivered to the poller's CPU
          .irq51_allowed = "0",
          .rmem_max = 212992,
          .wmem_max = 8388608,
          .busy_read = 0,
          .busy_poll = 0,
          .hugepages_total = 16,
          .hugepages_free = 4,
          .thp = "always madvise [never]"});

  // A live Pollux process (this test's own pid: its counters file is real) whose /proc, in the
  // tree, shows two named pollers pinned to CPU 1 and one unnamed pinned thread on CPU 0.
  const std::string shm = ::testing::TempDir() + "/doctor_shm_" + std::to_string(getpid());
  fs::create_directories(shm);
  auto counters = core::CountersFile::create(shm, "bad-host");
  ASSERT_TRUE(counters.ok()) << counters.status();
  const std::string proc = "/proc/" + std::to_string(getpid());
  t.File(proc + "/comm", "feedapp\n");
  t.File(proc + "/task/" + std::to_string(getpid()) + "/comm", "feedapp\n");
  t.File(proc + "/task/" + std::to_string(getpid()) + "/status", "Name:\tfeedapp\nCpus_allowed_list:\t0-3\n");
  for (int i = 0; i < 2; ++i) {
    const std::string task = proc + "/task/" + std::to_string(900000 + i);
    t.File(task + "/comm", "pollux-poll-" + std::to_string(i) + "\n");
    t.File(task + "/status", "Name:\tpollux-poll-" + std::to_string(i) + "\nCpus_allowed_list:\t1\n");
  }
  const std::string unnamed = proc + "/task/900005";
  t.File(unnamed + "/comm", "feedapp\n");
  t.File(unnamed + "/status", "Name:\tfeedapp\nCpus_allowed_list:\t0\n");
  t.File(unnamed + "/stat",
         "900005 (feedapp) R 1 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 4 0 100 0 0 18446744073709551615 0 0 0 0 0 0 0 "
         "0 0 0 0 0 17 0 0 0 0 0 0\n");  // field 39 (processor) = 0

  const Out o = DoctorJsonOnTree(t, shm, "bad",
                                 "[transport]\nkind = \"udp\"\n[udp]\ninterface = \"eth9\"\n"
                                 "[runtime]\npollers = 1\n");
  counters->reset();
  fs::remove_all(shm);
  const Checks c = parse_report(o);
  EXPECT_EQ(o.status, 0) << "nothing here stops Pollux from starting\n" << o.text;

  // hwloc read the tree: 2 cores x 2 threads; automatic placement takes the highest core's first thread.
  EXPECT_NE(c.value("cpu/topology").find("2 cores, 4 hardware threads"), std::string::npos) << c.value("cpu/topology");
  EXPECT_EQ(c.verdict("cpu/smt"), "warn");
  EXPECT_NE(c.value("cpu/smt").find("CPU 2 shares its core with CPU 3"), std::string::npos) << c.value("cpu/smt");
  EXPECT_NE(c.value("cpu/pollers").find("poller 0 on CPU 2"), std::string::npos) << c.value("cpu/pollers");

  EXPECT_EQ(c.verdict("cpu/isolcpus"), "warn");
  EXPECT_NE(c.value("cpu/isolcpus").find("isolcpus=3 on the kernel command line"), std::string::npos);
  EXPECT_NE(c.hint("cpu/isolcpus").find("runtime.poller_cores = [3]"), std::string::npos) << c.hint("cpu/isolcpus");
  EXPECT_EQ(c.verdict("cpu/nohz_full"), "warn");
  EXPECT_NE(c.hint("cpu/nohz_full").find("nohz_full=2"), std::string::npos) << c.hint("cpu/nohz_full");
  EXPECT_EQ(c.verdict("cpu/governor"), "warn");
  EXPECT_NE(c.value("cpu/governor").find("powersave on CPU 0-3"), std::string::npos) << c.value("cpu/governor");
  EXPECT_NE(c.hint("cpu/governor").find("cpupower frequency-set -g performance"), std::string::npos);
  EXPECT_NE(c.hint("cpu/governor").find("tee /sys/devices/system/cpu/cpu2/cpufreq/scaling_governor"), std::string::npos)
      << c.hint("cpu/governor");

  EXPECT_EQ(c.verdict("net/eth9"), "ok") << c.value("net/eth9");
  EXPECT_NE(c.value("net/eth9").find("up, Ethernet, mtu 1500"), std::string::npos) << c.value("net/eth9");
  EXPECT_NE(c.value("net/eth9").find("NUMA node 0, 2 IRQs, used by udp.interface"), std::string::npos)
      << c.value("net/eth9");
  EXPECT_EQ(c.verdict("net/eth9 irqs"), "warn");
  EXPECT_NE(c.value("net/eth9 irqs").find("IRQ 50 (eth9-rx-0) on poller CPU 2"), std::string::npos)
      << c.value("net/eth9 irqs");
  EXPECT_NE(c.hint("net/eth9 irqs").find("for i in 50; do echo 0-1,3 > /proc/irq/$i/smp_affinity_list"),
            std::string::npos)
      << c.hint("net/eth9 irqs");
  EXPECT_EQ(c.verdict("net/rmem_max"), "warn");
  EXPECT_NE(c.hint("net/rmem_max").find("sysctl -w net.core.rmem_max=4194304"), std::string::npos)
      << c.hint("net/rmem_max");
  EXPECT_EQ(c.verdict("net/wmem_max"), "ok");

  EXPECT_EQ(c.verdict("memory/hugepages"), "warn");
  EXPECT_NE(c.value("memory/hugepages").find("4 of 16 free"), std::string::npos) << c.value("memory/hugepages");
  EXPECT_NE(c.hint("memory/hugepages").find("sysctl -w vm.nr_hugepages=20"), std::string::npos)
      << c.hint("memory/hugepages");
  EXPECT_EQ(c.verdict("memory/thp"), "warn");

  const std::string pid = "process/pid " + std::to_string(getpid());
  EXPECT_NE(c.value(pid).find("bad-host: pollux-poll-0 pinned to CPU 1"), std::string::npos) << c.value(pid);
  EXPECT_NE(c.value(pid).find("thread 900005 pinned to CPU 0, last ran on CPU 0 (unnamed"), std::string::npos)
      << c.value(pid);
  EXPECT_EQ(c.verdict("process/poller cores"), "warn");
  EXPECT_NE(
      c.value("process/poller cores").find("CPU 1: pid " + std::to_string(getpid()) + " (bad-host) pollux-poll-0, "),
      std::string::npos)
      << c.value("process/poller cores");
  EXPECT_NE(c.hint("process/poller cores").find("CPUs without a poller: 2-3"), std::string::npos)
      << c.hint("process/poller cores");
  EXPECT_EQ(c.get("process/new pollers"), nullptr) << "the configuration's CPU 2 is free";
  EXPECT_NE(c.value("rdma/devices").find("not queried under --root"), std::string::npos);
}

// The same host tuned: pollers on isolated nohz_full CPUs, performance governor, IRQs elsewhere,
// buffers and hugepages enough. The warnings above turn into ok.
TEST(DoctorRoot, TunedHostIsOk) {
  Tree t;
  t.Cpus();
  t.Nic();
  t.Tune({});  // the defaults: tuned
  const std::string shm = ::testing::TempDir() + "/doctor_shm_empty_" + std::to_string(getpid());
  fs::create_directories(shm);
  const Out o = DoctorJsonOnTree(t, shm, "tuned",
                                 "[transport]\nkind = \"udp\"\n[udp]\ninterface = \"eth9\"\n"
                                 "busy_poll_us = 50\n[runtime]\npoller_cores = [2]\n");
  fs::remove_all(shm);
  const Checks c = parse_report(o);
  EXPECT_EQ(o.status, 0);
  for (const char* key : {"cpu/pollers", "cpu/isolcpus", "cpu/nohz_full", "cpu/governor", "net/eth9", "net/eth9 irqs",
                          "net/rmem_max", "net/wmem_max", "net/busy_poll", "memory/hugepages", "memory/thp"}) {
    EXPECT_EQ(c.verdict(key), "ok") << key << ": " << c.value(key) << " -> " << c.hint(key);
  }
  EXPECT_NE(c.value("cpu/pollers").find("poller 0 on CPU 2 (runtime.poller_cores)"), std::string::npos);
  EXPECT_EQ(c.verdict("cpu/smt"), "warn") << "SMT stays a warning: the sibling is the operator's to keep idle";
  EXPECT_NE(c.value("process/running").find("no running Pollux process"), std::string::npos);
}

// What stops a context from starting is a fail, and fail is exit status 1.
TEST(DoctorRoot, WhatCannotStartFails) {
  Tree t;
  t.Cpus();
  t.File("/proc/meminfo", "HugePages_Total:       0\nHugePages_Free:        0\nHugepagesize:       2048 kB\n");
  const std::string cfg = WriteConfig("fail",
                                      "[runtime]\npollers = 1\npoller_cores = [7]\n[pool]\nhugepages = \"on\"\n"
                                      "[udp]\ninterface = \"eth7\"\n[transport]\nkind = \"udp\"\n");
  const std::string cfg2 = WriteConfig("empty", "");
  const Out o = Doctor("--json --root " + t.root() + " --config " + cfg);
  std::remove(cfg.c_str());
  const Checks c = parse_report(o);
  EXPECT_EQ(o.status, 1);
  EXPECT_EQ(c.verdict("cpu/pollers"), "fail");
  EXPECT_NE(c.hint("cpu/pollers").find("CPU 7 is not online (online: 0-3)"), std::string::npos)
      << c.hint("cpu/pollers");
  EXPECT_EQ(c.verdict("memory/hugepages"), "fail");
  EXPECT_EQ(c.verdict("net/udp.interface"), "fail");
  EXPECT_NE(c.value("net/udp.interface").find("\"eth7\": no such interface"), std::string::npos);
  // The text form: each fail on its line with the hint under it; an empty configuration (the
  // defaults) on the same host has nothing that fails, and exits 0.
  const Out text = Doctor("--root " + t.root() + " --config " + cfg2);
  std::remove(cfg2.c_str());
  EXPECT_EQ(text.status, 0) << text.text;
  EXPECT_NE(text.text.find("[warn] memory hugepages"), std::string::npos) << text.text;
  EXPECT_NE(text.text.find("  -> the pool falls back to 4 KiB pages"), std::string::npos) << text.text;
  EXPECT_NE(text.text.find(" 0 fail\n"), std::string::npos) << text.text;
}

#if defined(POLLUX_HAVE_XDP)
// ---- AF_XDP (area xdp) --------------------------------------------------------------------------

// A fabricated host: eth9 (mtu 1500) with four rx queues behind the ixgbe driver, a process with
// only CAP_NET_ADMIN and CAP_NET_RAW under an 8 MiB memlock limit, bpffs mounted. With
// udp.datapath = "xdp" what stops the transport is a fail with its fix; the same host is a warning
// without --config and a fact for the socket datapath.
TEST(DoctorRoot, XdpFindingsOfAFabricatedHost) {
  Tree t;
  t.Cpus();
  t.Nic();
  t.Tune({});
  const std::string pci = "/sys/devices/pci0000:00/0000:00:05.0";
  for (int q = 0; q < 4; ++q) t.Dir(pci + "/net/eth9/queues/rx-" + std::to_string(q));
  t.Dir(pci + "/net/eth9/queues/tx-0");
  t.Dir("/sys/bus/pci/drivers/ixgbe");
  t.Link(pci + "/driver", "../../../bus/pci/drivers/ixgbe");
  const auto process = [&](const char* cap_eff) {
    t.File("/proc/self/status", std::string("Name:\tpollux-doctor\nCapInh:\t0000000000000000\nCapEff:\t") + cap_eff +
                                    "\nCapBnd:\t000001ffffffffff\n");
    t.File("/proc/self/limits",
           "Limit                     Soft Limit           Hard Limit           Units     \n"
           "Max open files            1024                 4096                 files     \n"
           "Max locked memory         8388608              8388608              bytes     \n");
  };
  process("0000000000003000");  // cap_net_admin (12), cap_net_raw (13)
  t.File("/proc/self/mounts", "sysfs /sys sysfs rw 0 0\nbpf /sys/fs/bpf bpf rw,relatime 0 0\n");
  const std::string shm = ::testing::TempDir() + "/doctor_shm_xdp_" + std::to_string(getpid());
  fs::create_directories(shm);
  const std::string xdp = "[transport]\nkind = \"udp\"\n[udp]\ninterface = \"eth9\"\ndatapath = \"xdp\"\n";
  Out o = DoctorJsonOnTree(t, shm, "xdp", xdp);
  Checks c = parse_report(o);
  EXPECT_EQ(o.status, 1);
  EXPECT_EQ(c.verdict("xdp/capabilities"), "fail");
  EXPECT_EQ(
      c.value("xdp/capabilities"),
      "CapEff 0000000000003000: missing cap_bpf (to load the XDP program (or cap_sys_admin)), cap_ipc_lock (to pin "
      "a UMEM above RLIMIT_MEMLOCK); has cap_net_admin, cap_net_raw");
  EXPECT_NE(c.hint("xdp/capabilities").find("setcap cap_net_admin,cap_bpf,cap_net_raw,cap_ipc_lock+ep BINARY"),
            std::string::npos)
      << c.hint("xdp/capabilities");
  EXPECT_EQ(c.verdict("xdp/memlock"), "fail");
  EXPECT_NE(c.value("xdp/memlock").find("8192 KiB (`ulimit -l`) against a 16384 KiB UMEM"), std::string::npos)
      << c.value("xdp/memlock");
  EXPECT_NE(c.hint("xdp/memlock").find("ulimit -l 16384"), std::string::npos) << c.hint("xdp/memlock");
  EXPECT_NE(c.hint("xdp/memlock").find("LimitMEMLOCK=16777216"), std::string::npos) << c.hint("xdp/memlock");
  EXPECT_EQ(c.verdict("xdp/frame size"), "ok");
  EXPECT_EQ(c.verdict("xdp/bpffs"), "ok");
  // Four queues and udp.xdp_queues empty: a socket on each.
  EXPECT_EQ(c.verdict("xdp/eth9"), "ok") << c.value("xdp/eth9");
  EXPECT_NE(c.value("xdp/eth9")
                .find("driver ixgbe, 4 rx queues, mtu 1500, used by udp.interface; AF_XDP sockets bind all 4 rx "
                      "queues"),
            std::string::npos)
      << c.value("xdp/eth9");
  EXPECT_NE(c.value("xdp/kernel").find("not probed under --root"), std::string::npos);
  EXPECT_EQ(c.get("xdp/eth9 programs"), nullptr) << "the tree's interfaces are not this kernel's";

  // CAP_BPF and CAP_IPC_LOCK (the UMEM is not charged to the limit); a queue eth9 does not have.
  process("0000008000007000");  // + cap_ipc_lock (14), cap_bpf (39)
  c = parse_report(DoctorJsonOnTree(t, shm, "xdp_q7", xdp + "xdp_queues = [1, 7]\n"));
  EXPECT_EQ(c.verdict("xdp/capabilities"), "ok") << c.value("xdp/capabilities");
  EXPECT_EQ(c.verdict("xdp/memlock"), "ok") << c.value("xdp/memlock");
  EXPECT_NE(c.value("xdp/memlock").find("CAP_IPC_LOCK"), std::string::npos) << c.value("xdp/memlock");
  EXPECT_EQ(c.verdict("xdp/eth9"), "fail");
  EXPECT_NE(c.value("xdp/eth9").find("udp.xdp_queues names queue 7, which eth9 does not have"), std::string::npos)
      << c.value("xdp/eth9");
  EXPECT_NE(c.hint("xdp/eth9").find("queues in 0..3"), std::string::npos) << c.hint("xdp/eth9");
  // udp.mtu above the interface's.
  c = parse_report(DoctorJsonOnTree(t, shm, "xdp_mtu", xdp + "xdp_queues = [2]\nmtu = 2000\n"));
  EXPECT_EQ(c.verdict("xdp/eth9"), "fail");
  EXPECT_NE(c.value("xdp/eth9").find("udp.mtu 2000 is larger than the interface's"), std::string::npos)
      << c.value("xdp/eth9");
  EXPECT_NE(c.hint("xdp/eth9").find("udp.mtu = 1500"), std::string::npos) << c.hint("xdp/eth9");
  // A queue it has: ok, with the steering rule for that queue.
  o = DoctorJsonOnTree(t, shm, "xdp_q2", xdp + "xdp_queues = [2]\n");
  c = parse_report(o);
  EXPECT_EQ(o.status, 0) << o.text;
  EXPECT_EQ(c.verdict("xdp/eth9"), "ok") << c.value("xdp/eth9");
  EXPECT_NE(c.value("xdp/eth9").find("bind queue 2 of 4 (udp.xdp_queues)"), std::string::npos) << c.value("xdp/eth9");
  EXPECT_NE(c.value("xdp/eth9").find("dst-port 40456 action 2"), std::string::npos) << c.value("xdp/eth9");

  // Without --config: warnings. The socket datapath: facts (the frame size too).
  process("0000000000003000");
  o = Doctor("--json --root " + t.root() + " --shm-dir " + shm);
  c = parse_report(o);
  for (const char* key : {"xdp/capabilities", "xdp/memlock"}) {
    EXPECT_EQ(c.verdict(key), "warn") << key << ": " << c.value(key);
  }
  c = parse_report(
      DoctorJsonOnTree(t, shm, "xdp_socket", "[transport]\nkind = \"udp\"\n[udp]\ninterface = \"eth9\"\nmtu = 9000\n"));
  fs::remove_all(shm);
  for (const char* key : {"xdp/capabilities", "xdp/memlock", "xdp/eth9", "xdp/frame size"}) {
    EXPECT_EQ(c.verdict(key), "info") << key << ": " << c.value(key);
  }
  EXPECT_NE(c.value("xdp/frame size").find("= 9014 bytes against a 4096-byte UMEM frame"), std::string::npos)
      << c.value("xdp/frame size");
  EXPECT_EQ(c.hint("xdp/frame size"), "udp.mtu <= 4082");
}

// An unprivileged process (uid nobody, no capabilities; the test must be root to switch): every
// capability the datapath needs is named as missing with the setcap fix, the AF_XDP socket is
// refused for CAP_NET_RAW, and the dispatcher is not judged from a probe that cannot load.
TEST(DoctorHost, XdpUnprivilegedProcessIsToldWhatItLacks) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run the doctor as another user";
  if (pollux::testing::shell_status("command -v setpriv") != 0) GTEST_SKIP() << "setpriv is unavailable";
  const int probe = socket(AF_XDP, SOCK_RAW | SOCK_CLOEXEC, 0);
  if (probe < 0) GTEST_SKIP() << "AF_XDP sockets are unavailable: " << std::strerror(errno);
  close(probe);
  const Checks c = parse_report(RunCommand(std::string("setpriv --reuid=65534 --regid=65534 --clear-groups ") +
                                           POLLUX_DOCTOR_BIN + " --json --no-probe --shm-dir " + ::testing::TempDir()));
  EXPECT_EQ(c.verdict("xdp/capabilities"), "warn");
  EXPECT_EQ(c.value("xdp/capabilities")
                .rfind("CapEff 0000000000000000: missing cap_net_admin (to attach the XDP "
                       "program), cap_bpf",
                       0),
            0u)
      << c.value("xdp/capabilities");
  EXPECT_NE(c.hint("xdp/capabilities").find("setcap cap_net_admin,cap_bpf,cap_net_raw,cap_ipc_lock+ep"),
            std::string::npos);
  EXPECT_EQ(c.verdict("xdp/af_xdp socket"), "warn");
  EXPECT_NE(c.value("xdp/af_xdp socket").find("lacks CAP_NET_RAW"), std::string::npos) << c.value("xdp/af_xdp socket");
  EXPECT_NE(c.value("xdp/dispatcher").find("not probed"), std::string::npos) << c.value("xdp/dispatcher");
}

// A veth pair in a network namespace of the test's own, the doctor run inside it (`ip netns
// exec`: /sys/class/net shows the namespace's interfaces). Pollux's program attached by a child
// process (xdp::Xsk::open) is listed with its live owner; after the child is killed with SIGKILL
// the program stays and is reported stale with the dead pid; detached, none is listed.
class DoctorXdpNetns : public ::testing::Test {
 protected:
  static constexpr const char* kIf = "dxb0";
  static constexpr const char* kPeer = "dxa0";

  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (network namespace, XDP program, AF_XDP socket)";
    if (pollux::testing::shell_status("ip netns list") != 0) GTEST_SKIP() << "`ip netns` is unavailable";
    const int probe = socket(AF_XDP, SOCK_RAW | SOCK_CLOEXEC, 0);
    if (probe < 0) GTEST_SKIP() << "AF_XDP sockets are unavailable: " << std::strerror(errno);
    close(probe);
    ns_ = "pdoctorxdp" + std::to_string(getpid());
    for (const std::string& cmd :
         {"ip netns add " + ns_, "ip -n " + ns_ + " link add " + kPeer + " type veth peer name " + kIf,
          "ip -n " + ns_ + " link set " + kPeer + " up", "ip -n " + ns_ + " link set " + kIf + " up"}) {
      ASSERT_EQ(pollux::testing::shell_status(cmd), 0) << cmd;
    }
    cfg_ =
        WriteConfig("xdp_netns", std::string("[transport]\nkind = \"udp\"\n[udp]\ndatapath = \"xdp\"\ninterface = \"") +
                                     kIf + "\"\n");
  }
  void TearDown() override {
    if (child_ > 0) {
      kill(child_, SIGKILL);
      waitpid(child_, nullptr, 0);
    }
    if (!ns_.empty()) pollux::testing::shell_status("ip netns del " + ns_);
    if (!cfg_.empty()) std::remove(cfg_.c_str());
  }

  Checks DoctorInNs() {
    const Out o = RunCommand("ip netns exec " + ns_ + " " + POLLUX_DOCTOR_BIN + " --json --no-probe --config " + cfg_);
    EXPECT_TRUE(o.status == 0 || o.status == 1) << o.status << "\n" << o.text;
    return parse_report(o);
  }

  // Forks a child that enters the namespace, opens an XSK on kIf (attaching Pollux's program)
  // and waits to be killed; returns the program's id (0: the child could not open it).
  std::uint32_t AttachInChild() {
    int ready[2];
    if (pipe(ready) != 0) return 0;
    child_ = fork();
    if (child_ == 0) {
      close(ready[0]);
      const int fd = open(("/run/netns/" + ns_).c_str(), O_RDONLY | O_CLOEXEC);
      std::uint32_t id = 0;
      if (fd >= 0 && setns(fd, CLONE_NEWNET) == 0) {
        transport::udp::xdp::XskOptions options;
        options.ifname = kIf;
        options.mode = transport::udp::xdp::XskMode::kCopy;
        options.frame_count = 256;
        options.frame_size = 2048;
        auto xsk = transport::udp::xdp::Xsk::open(options);
        if (xsk.ok()) {
          id = (*xsk)->info().prog_id;
          if (write(ready[1], &id, sizeof(id)) != sizeof(id)) _exit(1);
          for (;;) pause();
        }
      }
      _exit(1);
    }
    close(ready[1]);
    std::uint32_t id = 0;
    if (read(ready[0], &id, sizeof(id)) != sizeof(id)) id = 0;
    close(ready[0]);
    return id;
  }

  // Loads a one-instruction XDP program (XDP_PASS) named doctor_foreign and attaches it to kIf in
  // generic mode through netlink, from a child in the namespace; returns its id (0: failed).
  std::uint32_t AttachForeignInChild() {
    int ready[2];
    if (pipe(ready) != 0) return 0;
    const pid_t child = fork();
    if (child == 0) {
      close(ready[0]);
      const int ns = open(("/run/netns/" + ns_).c_str(), O_RDONLY | O_CLOEXEC);
      std::uint32_t id = 0;
      if (ns >= 0 && setns(ns, CLONE_NEWNET) == 0) {
        const bpf_insn pass[] = {
            {BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, XDP_PASS},
            {BPF_JMP | BPF_EXIT, 0, 0, 0, 0},
        };
        const int prog = bpf_prog_load(BPF_PROG_TYPE_XDP, "doctor_foreign", "GPL", pass, 2, nullptr);
        bpf_prog_info info{};
        std::uint32_t len = sizeof(info);
        if (prog >= 0 &&
            bpf_xdp_attach(static_cast<int>(if_nametoindex(kIf)), prog, XDP_FLAGS_SKB_MODE, nullptr) == 0 &&
            bpf_obj_get_info_by_fd(prog, &info, &len) == 0) {
          id = info.id;
        }
      }
      _exit(write(ready[1], &id, sizeof(id)) == sizeof(id) ? 0 : 1);
    }
    close(ready[1]);
    std::uint32_t id = 0;
    if (child < 0 || read(ready[0], &id, sizeof(id)) != sizeof(id)) id = 0;
    close(ready[0]);
    if (child > 0) waitpid(child, nullptr, 0);
    return id;
  }

  std::string ns_;
  std::string cfg_;
  pid_t child_ = -1;
};

TEST_F(DoctorXdpNetns, ListsPolluxsProgramWithItsOwnerAliveThenStaleThenNone) {
  // Nothing attached yet: the veth's driver and queue, no program.
  Checks c = DoctorInNs();
  const std::string ifc = std::string("xdp/") + kIf, progs = ifc + " programs";
  EXPECT_NE(c.value(ifc).find("driver veth, 1 rx queue"), std::string::npos) << c.value(ifc);
  EXPECT_NE(c.value(ifc).find("used by udp.interface"), std::string::npos) << c.value(ifc);
  EXPECT_EQ(c.verdict(progs), "ok");
  EXPECT_EQ(c.value(progs), "no XDP program attached");
  EXPECT_EQ(c.value(std::string("xdp/") + kPeer + " programs"), "no XDP program attached");

  const std::uint32_t id = AttachInChild();
  ASSERT_NE(id, 0u) << "the child could not open the XSK";
  const std::string pid = std::to_string(child_);
  c = DoctorInNs();
  EXPECT_EQ(c.verdict(progs), "info") << c.value(progs);
  // The kernel keeps 15 characters of the name; libxdp completes it from BTF where it can.
  EXPECT_EQ(c.value(progs).rfind("pollux_xsk_filt", 0), 0u) << c.value(progs);
  EXPECT_NE(c.value(progs).find(" id " + std::to_string(id) + " native: Pollux's, owner pid " + pid + " alive"),
            std::string::npos)
      << c.value(progs);

  kill(child_, SIGKILL);
  ASSERT_EQ(waitpid(child_, nullptr, 0), child_);
  child_ = -1;
  c = DoctorInNs();
  EXPECT_EQ(c.verdict(progs), "warn") << c.value(progs);
  EXPECT_NE(c.value(progs).find(" id " + std::to_string(id) + " native: Pollux's, owner pid " + pid + " dead: stale"),
            std::string::npos)
      << c.value(progs);
  EXPECT_NE(c.hint(progs).find(std::string("ip link set dev ") + kIf + " xdp off"), std::string::npos) << c.hint(progs);
  EXPECT_EQ(c.value(std::string("xdp/") + kPeer + " programs"), "no XDP program attached");

  // The hint's command removes it.
  ASSERT_EQ(pollux::testing::shell_status("ip -n " + ns_ + " link set dev " + kIf + " xdp off"), 0);
  c = DoctorInNs();
  EXPECT_EQ(c.verdict(progs), "ok");
  EXPECT_EQ(c.value(progs), "no XDP program attached");
}

// Another XDP program on udp.interface, attached without libxdp's dispatcher: Pollux's attach
// would get EBUSY, so with udp.datapath = "xdp" the doctor fails, with the command that frees the
// interface.
TEST_F(DoctorXdpNetns, FailsWhenAForeignProgramBlocksPolluxsAttach) {
  const std::uint32_t id = AttachForeignInChild();
  ASSERT_NE(id, 0u) << "could not load and attach the test's XDP program";
  const std::string progs = std::string("xdp/") + kIf + " programs";
  Checks c = DoctorInNs();
  EXPECT_EQ(c.verdict(progs), "fail") << c.value(progs);
  EXPECT_EQ(c.value(progs).rfind("doctor_foreign id " + std::to_string(id) + " generic: another XDP program holds", 0),
            0u)
      << c.value(progs);
  EXPECT_NE(c.value(progs).find("Pollux's attach gets EBUSY"), std::string::npos) << c.value(progs);
  EXPECT_NE(c.hint(progs).find(std::string("ip link set dev ") + kIf + " xdpgeneric off"), std::string::npos)
      << c.hint(progs);
  // On an interface udp.interface does not name it is a fact.
  c = parse_report(RunCommand("ip netns exec " + ns_ + " " + POLLUX_DOCTOR_BIN + " --json --no-probe"));
  EXPECT_EQ(c.verdict(progs), "info") << c.value(progs);
}
#endif  // POLLUX_HAVE_XDP

// ---- parsers ------------------------------------------------------------------------------------

TEST(DoctorParse, CpuLists) {
  EXPECT_EQ(parse_cpu_list("0-3,8,10-11\n"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(parse_cpu_list(""), std::vector<int>{});
  EXPECT_EQ(parse_cpu_list("3,1,1"), (std::vector<int>{1, 3}));
  EXPECT_FALSE(parse_cpu_list("1-").has_value());
  EXPECT_FALSE(parse_cpu_list("3-1").has_value());
  EXPECT_FALSE(parse_cpu_list("a").has_value());
  EXPECT_FALSE(parse_cpu_list("0-99999999").has_value());
  EXPECT_EQ(format_cpu_list({3, 0, 1, 2, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(format_cpu_list({}), "");
}

TEST(DoctorParse, KernelCommandLine) {
  const std::string cl = "BOOT_IMAGE=/vmlinuz isolcpus=managed_irq,domain,2-3 nohz_full=2-3 quiet -- isolcpus=9";
  EXPECT_EQ(cmdline_value(cl, "isolcpus"), "managed_irq,domain,2-3");
  EXPECT_EQ(cmdline_value(cl, "nohz_full"), "2-3");
  EXPECT_EQ(cmdline_value(cl, "rcu_nocbs"), "");
  EXPECT_EQ(cmdline_value("isolcpusx=1", "isolcpus"), "");
}

}  // namespace
}  // namespace pollux::doctor
