// pollux-latency: the latency decomposition tool (docs/BENCHMARKS.md, "Latency decomposition:
// pollux-latency"). `pollux-latency --help` is the summary.
//
// One run: the tool forks itself (no exec); the parent is the ping side, the child the pong
// side, pinned like pollux-bench-rate (--pin split: parent + its poller on the first CPU of
// --cpus, child + its poller on the second). Both read core::Clock with the calibration the
// parent made before forking, so every stamp of both processes is one TSC on one host and a
// ping's stamps (offer ... delivery, taken in both processes) subtract directly. Across hosts
// only the RTT/2 would be meaningful; this tool does not run across hosts. It runs across network
// namespaces of the host: --peer-netns makes the pong process enter another one (setns) right
// after the fork, and --peer-set gives it its own overrides (its udp.interface, say), so UDP can
// cross a veth pair with either datapath.
//
// Ping-pong (default): round trips alternate between a traced pair of streams (lat.ping.t ->
// lat.pong.t, `trace = true`, `trace_every` = --trace-every) and an untraced pair (lat.ping.u
// -> lat.pong.u) in the same Contexts, so the untraced RTT/2 - the honesty check - is measured
// in the same run, interleaved message by message. UDP with the kernel's timestamps on (the
// tool's default) adds a third pair, lat.ping.l -> lat.pong.l: traced with the library's stamps
// only (kernel_timestamps = false on its and the untraced pair's sockets), so one run gives the
// library's perturbation (library-only vs untraced) and the kernel stamps' cost (traced vs
// library-only) apart. The pong side copies the ping's stage
// stamps (Message::trace, as it saw the ping) into its echo; the ping side decomposes them
// (tools/latency/decomposition.h). Before the Contexts start, the same two processes measure
// the transport's floor: a bare cache-line ping-pong (shm) or two bare UDP sockets on
// 127.0.0.1 (udp).
//
// --rate R: a fixed-rate one-way stream instead (open loop, message k scheduled at t0 + k/R,
// alternating between lat.ping.t and lat.ping.u); the receiving process decomposes and
// records delivery - t_k of both streams into a shared mapping.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#include <toml++/toml.h>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/cache.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/placement.h"
#include "latency/embedded_config.h"
#include "pollux/pollux.h"
#include "tools/common/cli.h"
#include "tools/common/config_override.h"
#include "tools/common/host.h"
#include "tools/latency/decomposition.h"
#include "tools/latency/rdma_caps.h"
#include "transport/rdma/rdma_config.h"
#include "transport/udp/udp_config.h"

namespace pollux::latency {
namespace {

using core::Clock;

constexpr int kExitUsage = 64;

// ---- stopping -------------------------------------------------------------------------------------
//
// SIGINT and SIGTERM set g_stop_signal; every wait and measurement loop of both processes polls
// StopRequested(), so the parent stops measuring, tells the pong process to close, reaps it and
// removes what the run left. sigaction without SA_RESTART: a blocking call the signal interrupts
// (usleep, nanosleep, waitpid) returns EINTR instead of resuming, so no wait swallows the request.
// SA_RESETHAND on SIGINT: a second Ctrl-C kills outright.
//
// The pong process ignores SIGINT (Ctrl-C reaches the whole process group; its parent
// coordinates the stop) and keeps the SIGTERM handler: SIGTERM is also its parent-death signal,
// so it closes its Context - removing its stream logs and CPU claim - when the parent dies,
// however the parent dies.
volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void OnStopSignal(int sig) { g_stop_signal = sig; }

void InstallStopHandlers() {
  struct sigaction sa {};
  sigemptyset(&sa.sa_mask);
  sa.sa_handler = OnStopSignal;
  sa.sa_flags = 0;
  sigaction(SIGTERM, &sa, nullptr);
  sa.sa_flags = SA_RESETHAND;
  sigaction(SIGINT, &sa, nullptr);
}

constexpr char kHelp[] = R"(usage: pollux-latency [options]

Measures where the time of a message goes: a traced ping-pong (or, with --rate, a fixed-rate
one-way stream) between two processes of this host, over the configured transport, printed
as the stages of the message's path (offer -> app ring -> poller -> post -> local send
completion -> kernel RX -> receive -> subscriber ring -> handler) with mean, p50, p99 and
share of the total, the end-to-end line, and the honesty checks: the same path untraced
(RTT/2 p50, same run, interleaved), how much tracing perturbs it, and what share of the
untraced one-way the stages account for. On UDP with udp.kernel_timestamps (on unless set
false) a third stream pair, traced with the library's stamps only, separates the library's
tracing cost (the perturbation) from the kernel timestamps' cost (a line of its own). Stamps
of both processes come from one TSC (one host); across hosts only RTT/2 would be meaningful.

Configuration:
  --config FILE        Pollux TOML configuration (default: the embedded
                       tools/latency/latency.toml: shm, dedicated pollers, idle = yield)
  --set KEY=VALUE      override one key, e.g. --set transport.kind=udp
                       --set runtime.threading=inline (repeatable; VALUE in TOML syntax or a
                       bare word taken as a string)
  --print-config       print the effective configuration of the ping side and exit

Two network namespaces (UDP across a veth pair, either udp.datapath; needs root):
  --peer-netns NAME    the pong process enters the network namespace /var/run/netns/NAME
                       (setns) before it opens anything; the ping process stays in the
                       caller's (choose it with `ip netns exec`). Both still run on this host
                       (one TSC: the stage decomposition holds). The UDP floor then runs
                       between each side's udp.interface IPv4 address. Use a multicast
                       udp.address (the default group) and give each side the interface of
                       its own namespace, e.g.
                         ip netns exec A pollux-latency --peer-netns B --set transport.kind=udp
                           --set udp.interface=vethA --peer-set udp.interface=vethB
  --peer-set KEY=VALUE override one key on the pong side only, after --set (repeatable)
  On udp.datapath = "xdp" there are no kernel timestamps: the kernel RX stage prints as
  absent with the reason, no library-only pair runs, and the send completion is where the
  library hands the datagram to its AF_XDP port (with udp.kernel_timestamps = true, the
  default here): the TX kick, the wire and the RX ring are the transport stage after it.

Measurement:
  --count N            measured round trips (ping-pong) or messages (--rate) per variant:
                       N on each stream pair (traced, untraced; UDP with kernel
                       timestamps: also library-only), interleaved (default 20000)
  --warmup N           round trips / messages per variant before measuring (default 2000)
  --trace-every N      trace one message in N on the traced streams (default 1: every one)
  --rate MSG_PER_S     fixed-rate one-way stream instead of ping-pong (open loop: latency from
                       the scheduled send time; the streams alternate, each at 1/2 of the
                       rate, or 1/3 with the library-only stream); k/M suffixes accepted
  --payload BYTES      ping payload size, >= 16 (default 32); the pong carries 72 bytes
  --timeout-ms MS      a round trip without its echo this long is counted as a timeout (1000)
  --burst N            ping-pong under a burst load: each ping is N messages offered back to
                       back on the same stream (default 1); the pong answers after the last.
                       The LAST message of each burst is the one decomposed (its stages include
                       waiting behind the N-1 before it); RTT/2 runs from the first offer to
                       the echo of the last. E.g. --burst 16 --ab rdma.post_batch=1,32
  --pin split|none     split (default): ping process + its poller on the first CPU of --cpus,
                       pong process + its poller on the second; none: no pinning
  --cpus A,B           CPUs for --pin split (default 0,1)

A/B switches:
  --ab KEY=A,B         run interleaved pairs, each a full run with KEY=A then KEY=B, and print
                       the before/after tables with per-stage deltas and their spread over the
                       pairs, e.g. --ab runtime.idle=busy-spin,interrupt
                       --ab rdma.inline_threshold=0,256 --ab udp.busy_poll_us=0,50
                       (repeatable: each KEY is its own experiment; values cannot contain ',')
  --pairs N            pairs per --ab (default 3, at least 3)
  --seed               run every seed switch that applies to the configured transport, as --ab
                       experiments (RDMA: rdma.inline_threshold=0,256, rdma.signal_every=1,16,
                       runtime.idle=busy-spin,interrupt, rdma.post_batch=1,32 under --burst 16;
                       UDP: udp.busy_poll_us=0,50, runtime.idle=busy-spin,interrupt; shm:
                       runtime.idle), and print a line for each switch that cannot be measured
                       here: NUMA (poller on the device's node vs another: "single NUMA node:
                       not measurable here" on one node, else an --ab runtime.poller_cores
                       pair) and mlx5dv/BlueFlame (--ab rdma.mlx5dv=off,auto on mlx5, else
                       "mlx5dv: not present"). Adds to any --ab given.
  --seed-plan          with --seed: print those lines and the experiments, run nothing, exit 0

Output:
  --json FILE          one JSON object: transport, stages (path order), end_to_end, untraced,
                       traced, perturbation_pct, coverage_pct, floor, library_only (UDP with
                       kernel timestamps, else null) with kernel_timestamps_cost_pct, and
                       with --ab "ab"
  --hgrm FILE          the end-to-end distribution in HdrHistogram's percentile format (values
                       in us), and beside it FILE's stem + .<stage>.hgrm per present stage,
                       .untraced.hgrm and .floor.hgrm (with --ab: + .<key>=<value> per side)
  --plot DIR           gnuplot PNGs in DIR: stacked stage means per configuration
                       (latency-stages.png) and percentile curves on a log "nines" axis,
                       Pollux against its floor (latency-percentiles.png); needs gnuplot
  --version            print "pollux-latency <version>" and exit
  -h, --help           this text

UDP ports: every stream gets a port of its own, picked for each run by binding port 0 (the
kernel hands out a port no socket holds) and held until the process subscribing to the
stream binds it; a port another program takes in that instant is picked again (3 attempts).
With udp.port set (in the file or by --set) the streams use udp.port .. udp.port + 5 as given.

Stopping: SIGINT (Ctrl-C) or SIGTERM stops the measurement: the pong process is told to close
and reaped (it also ends by itself if this process dies), the run's files in runtime.shm_dir
(stream logs, counters, CPU claims) are removed, what was measured so far is printed (and
written to --json, with "interrupted"), and the exit status is 128 + the signal. A second
Ctrl-C ends the tool at once.

Exit status: 0 done, 1 a run failed, 64 bad usage, 130 stopped by SIGINT, 143 stopped by SIGTERM.
)";

[[noreturn]] void UsageError(const std::string& msg) {
  std::fprintf(stderr, "pollux-latency: %s (see --help)\n", msg.c_str());
  std::exit(kExitUsage);
}

struct AbSpec {
  std::string key;  // section.key
  std::string a, b;
  std::uint32_t burst = 0;  // --seed: this experiment's --burst (0: the command line's)
};

struct Options {
  std::string config_path;
  std::vector<std::string> sets;
  std::uint64_t count = 20000;
  std::uint64_t warmup = 2000;
  std::uint32_t trace_every = 1;
  double rate = 0;  // 0: ping-pong
  std::size_t payload = 32;
  double timeout_ms = 1000;
  bool pin_split = true;
  int cpu_a = 0, cpu_b = 1;
  std::vector<AbSpec> ab;
  int pairs = 3;
  std::uint32_t burst = 1;  // messages per ping (--burst)
  bool seed = false, seed_plan = false;
  std::string json, hgrm, plot_dir;
  bool print_config = false;
  // --peer-netns: the pong process's network namespace (a name under kNetnsDir) and the
  // descriptor of it opened before the first fork; --peer-set: overrides of the pong side only.
  std::string peer_netns;
  int peer_netns_fd = -1;
  std::vector<std::string> peer_sets;
};

// "20k", "1M": a count or a rate.
double ParseNumber(const std::string& flag, const std::string& s) { return cli::scaled_number(flag, s, UsageError); }

std::uint64_t ParseCount(const std::string& flag, const std::string& s, std::uint64_t lo, std::uint64_t hi) {
  const double v = ParseNumber(flag, s);
  if (v != std::floor(v) || v < static_cast<double>(lo) || v > static_cast<double>(hi)) {
    UsageError(absl::StrFormat("%s: expected a whole number in %d..%d, got \"%s\"", flag, lo, hi, s));
  }
  return static_cast<std::uint64_t>(v);
}

Options parse_args(int argc, char** argv) {
  Options o;
  for (cli::FlagReader args(argc, argv, UsageError); args.next();) {
    const std::string& flag = args.flag();
    auto arg = [&] { return args.value(); };
    auto no_value = [&] { args.no_value(); };
    if (const int rc = cli::handle_standard_flag(flag, "pollux-latency", kHelp); rc >= 0) {
      std::exit(rc);  // --help, --version
    } else if (flag == "--config") {
      o.config_path = arg();
    } else if (flag == "--set") {
      const std::string kv = arg();
      if (absl::StatusOr<tools::ConfigOverride> ov = tools::ParseOverride(kv); !ov.ok()) {
        UsageError(std::string(ov.status().message()));
      }
      o.sets.push_back(kv);
    } else if (flag == "--peer-set") {
      const std::string kv = arg();
      if (absl::StatusOr<tools::ConfigOverride> ov = tools::ParseOverride(kv, "--peer-set"); !ov.ok()) {
        UsageError(std::string(ov.status().message()));
      }
      o.peer_sets.push_back(kv);
    } else if (flag == "--peer-netns") {
      o.peer_netns = arg();
      if (o.peer_netns.empty() || o.peer_netns.find('/') != std::string::npos || o.peer_netns == "." ||
          o.peer_netns == "..") {
        UsageError(
            "--peer-netns: expected the name of a namespace in /var/run/netns (as `ip netns list` prints it), "
            "got \"" +
            o.peer_netns + "\"");
      }
    } else if (flag == "--print-config") {
      no_value();
      o.print_config = true;
    } else if (flag == "--count") {
      o.count = ParseCount(flag, arg(), 1, std::uint64_t{1} << 32);
    } else if (flag == "--warmup") {
      o.warmup = ParseCount(flag, arg(), 0, std::uint64_t{1} << 32);
    } else if (flag == "--trace-every") {
      o.trace_every = static_cast<std::uint32_t>(ParseCount(flag, arg(), 1, 1 << 30));
    } else if (flag == "--rate") {
      o.rate = ParseNumber(flag, arg());
      if (o.rate <= 0 || o.rate > 1e8) UsageError("--rate: expected (0, 100M] messages per second");
    } else if (flag == "--payload") {
      o.payload = static_cast<std::size_t>(ParseCount(flag, arg(), 16, 1 << 16));
    } else if (flag == "--timeout-ms") {
      o.timeout_ms = ParseNumber(flag, arg());
      if (o.timeout_ms <= 0) UsageError("--timeout-ms must be > 0");
    } else if (flag == "--pin") {
      const std::string v = arg();
      if (v != "split" && v != "none") UsageError("--pin: split or none, got \"" + v + "\"");
      o.pin_split = v == "split";
    } else if (flag == "--cpus") {
      std::vector<std::string> l;
      for (absl::string_view p : absl::StrSplit(arg(), ',')) l.emplace_back(p);
      if (l.size() != 2) UsageError("--cpus: two CPU numbers, e.g. 0,1");
      o.cpu_a = static_cast<int>(ParseCount(flag, l[0], 0, 4095));
      o.cpu_b = static_cast<int>(ParseCount(flag, l[1], 0, 4095));
    } else if (flag == "--ab") {
      const std::string v = arg();
      const auto eq = v.find('=');
      std::vector<std::string> ab;
      if (eq != std::string::npos) {
        for (absl::string_view p : absl::StrSplit(v.substr(eq + 1), ',')) ab.emplace_back(p);
      }
      if (eq == std::string::npos || ab.size() != 2 || ab[0].empty() || ab[1].empty()) {
        UsageError("--ab: expected KEY=A,B (e.g. runtime.idle=busy-spin,interrupt), got \"" + v + "\"");
      }
      const std::string key = v.substr(0, eq);
      if (absl::StatusOr<tools::ConfigOverride> ov = tools::ParseOverride(key + "=" + ab[0], "--ab"); !ov.ok()) {
        UsageError(std::string(ov.status().message()));
      }
      o.ab.push_back({key, ab[0], ab[1]});
    } else if (flag == "--burst") {
      o.burst = static_cast<std::uint32_t>(ParseCount(flag, arg(), 1, 64));
    } else if (flag == "--seed") {
      no_value();
      o.seed = true;
    } else if (flag == "--seed-plan") {
      no_value();
      o.seed = o.seed_plan = true;
    } else if (flag == "--pairs") {
      o.pairs = static_cast<int>(ParseCount(flag, arg(), 3, 1000));
    } else if (flag == "--json") {
      o.json = arg();
    } else if (flag == "--hgrm") {
      o.hgrm = arg();
    } else if (flag == "--plot") {
      o.plot_dir = arg();
    } else {
      std::exit(cli::unknown_flag("pollux-latency", args.raw(), kHelp));
    }
  }
  if (o.burst > 1 && o.rate > 0) UsageError("--burst is a ping-pong load; it does not combine with --rate");
  return o;
}

// ---- configuration ----------------------------------------------------------------------------

constexpr std::uint32_t kStreamIdBase = 2147480001u;
constexpr int kTopicCount = 6;
constexpr const char* kTopics[kTopicCount] = {"lat.ping.t", "lat.pong.t", "lat.ping.u",
                                              "lat.pong.u", "lat.ping.l", "lat.pong.l"};
enum TopicIndex { kPingT = 0, kPongT = 1, kPingU = 2, kPongU = 3, kPingL = 4, kPongL = 5 };
// The round trips' (messages') streams in their interleaving order: traced (decomposed),
// untraced, and with RunConfig::library_only the library-only traced pair.
enum Variant { kTraced = 0, kUntraced = 1, kLibraryOnly = 2 };

struct RunConfig {
  std::string ping_toml, pong_toml;  // the two processes' configurations
  core::Config cfg;                  // the ping side's, parsed
  std::string source;
  // UDP with kernel timestamps: the third, library-only traced pair runs (kLibraryOnly).
  bool library_only = false;
  // UDP: the tool picks the streams' ports (PortReservation); false when udp.port is configured.
  bool picks_udp_ports = false;
  // UDP: each side's udp.datapath is "xdp" (the ping side's sends then carry no kernel TX
  // timestamp, the pong side's receives no kernel RX timestamp), and each side's udp.interface
  // (the floor's addresses with --peer-netns).
  bool ping_xdp = false, pong_xdp = false;
  std::string ping_interface, pong_interface;
  int variants() const noexcept { return library_only ? 3 : 2; }
};

// A UDP socket bound to `addr` (host order) port 0, the port the kernel picked in *port; -1 with
// errno on failure, *bind_failed telling whether socket() or bind() failed.
int BoundUdpSocket(std::uint32_t addr, int* port, bool* bind_failed) {
  *bind_failed = false;
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(addr);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    const int err = errno;
    close(fd);
    *bind_failed = true;
    errno = err;
    return -1;
  }
  *port = ntohs(a.sin_port);
  return fd;
}

// UDP ports for the streams, one per stream (indexed like kTopics): each a socket bound to
// INADDR_ANY port 0 without SO_REUSEADDR, so the kernel picks a port no socket holds on any
// address, and holds it until the process that subscribes to the stream is about to bind it.
// Both processes inherit the sockets at fork: each closes its copies of the other side's ports
// at once, and its own just before opening its subscribers (a port is free again only when both
// copies are closed).
class PortReservation {
 public:
  PortReservation() = default;
  PortReservation(const PortReservation&) = delete;
  PortReservation& operator=(const PortReservation&) = delete;
  ~PortReservation() { release_all(); }

  absl::Status reserve(int n) {
    clear();
    for (int i = 0; i < n; ++i) {
      int port = 0;
      bool bind_failed = false;
      const int fd = BoundUdpSocket(INADDR_ANY, &port, &bind_failed);
      if (fd < 0) {
        const int err = errno;
        clear();
        return absl::UnavailableError(absl::StrCat("picking a UDP port: ", bind_failed ? "bind(0.0.0.0:0)" : "socket()",
                                                   ": ", std::strerror(err)));
      }
      fds_.push_back(fd);
      ports_.push_back(port);
    }
    return absl::OkStatus();
  }
  const std::vector<int>& ports() const noexcept { return ports_; }
  // Closes this process's copies of the ports of the streams `topics` (kTopics indices).
  void release(std::initializer_list<int> topics) noexcept {
    for (int t : topics) {
      if (t >= 0 && t < static_cast<int>(fds_.size()) && fds_[t] >= 0) {
        close(fds_[t]);
        fds_[t] = -1;
      }
    }
  }
  void release_all() noexcept {
    for (int& fd : fds_) {
      if (fd >= 0) close(fd);
      fd = -1;
    }
  }
  void clear() noexcept {
    release_all();
    fds_.clear();
    ports_.clear();
  }

 private:
  std::vector<int> fds_, ports_;
};

absl::StatusOr<std::string> BaseText(const Options& o, std::string* source) {
  if (o.config_path.empty()) {
    *source = "<embedded latency.toml>";
    return std::string(kEmbeddedLatencyToml);
  }
  std::ifstream f(o.config_path, std::ios::binary);
  if (!f) {
    return absl::NotFoundError(absl::StrFormat("%s: cannot open config file: %s", o.config_path, std::strerror(errno)));
  }
  std::stringstream ss;
  ss << f.rdbuf();
  *source = o.config_path;
  return ss.str();
}

toml::table& TableOf(toml::table& root, const char* name) {
  if (root.get(name) == nullptr || !root.get(name)->is_table()) root.insert_or_assign(name, toml::table{});
  return *root.get(name)->as_table();
}

std::string serialize(const toml::table& t) {
  std::ostringstream os;
  os << toml::toml_formatter(t);
  return os.str();
}

// The configuration of run `run` (unique runtime.name), with `extra` overrides (an A/B side)
// after --set. UDP streams take `udp_ports` (PortReservation::ports(), one per kTopics entry)
// unless udp.port is configured (then udp.port + the stream's index); with neither (a
// configuration only checked, never run) they get no port of their own.
absl::StatusOr<RunConfig> Compose(const Options& o, const std::vector<std::string>& extra, int run,
                                  const std::vector<int>& udp_ports = {}) {
  RunConfig rc;
  std::string source;
  absl::StatusOr<std::string> text = BaseText(o, &source);
  if (!text.ok()) return text.status();
  toml::table root;
  try {
    root = toml::parse(*text, std::string_view(source));
  } catch (const toml::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrFormat("%s:%d:%d: TOML syntax error: %s", source, e.source().begin.line,
                                                      e.source().begin.column, e.description()));
  }
  // The user's configuration is checked as written first, so its errors name the user's lines.
  if (absl::StatusOr<core::Config> c = core::parse_config(*text, source); !c.ok()) return c.status();
  std::vector<std::string> all = o.sets;
  all.insert(all.end(), extra.begin(), extra.end());
  for (const std::string& s : all) {
    absl::StatusOr<tools::ConfigOverride> ov = tools::ParseOverride(s);
    if (!ov.ok()) return ov.status();
    if (absl::Status st = tools::ApplyOverride(root, *ov); !st.ok()) return st;
  }
  rc.source = all.empty() ? source : absl::StrCat(source, " + --set");
  absl::StatusOr<core::Config> user = core::parse_config(serialize(root), rc.source);
  if (!user.ok()) return user.status();
  // The pong side: the same configuration with --peer-set on top (applied again to its final
  // text below, after the tool's own keys).
  const std::string peer_source = absl::StrCat(rc.source, " + --peer-set");
  auto with_peer_sets = [&](toml::table t) -> absl::StatusOr<toml::table> {
    for (const std::string& s : o.peer_sets) {
      absl::StatusOr<tools::ConfigOverride> ov = tools::ParseOverride(s, "--peer-set");
      if (!ov.ok()) return ov.status();
      if (absl::Status st = tools::ApplyOverride(t, *ov); !st.ok()) return st;
    }
    return t;
  };
  absl::StatusOr<toml::table> peer_root = with_peer_sets(root);
  if (!peer_root.ok()) return peer_root.status();
  absl::StatusOr<core::Config> peer = core::parse_config(serialize(*peer_root), peer_source);
  if (!peer.ok()) return peer.status();
  if (peer->transport != user->transport) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: --peer-set changes transport.kind (%s on the ping side, %s on the pong side): both sides "
                        "must use one transport",
                        peer_source, core::transport_name(user->transport), core::transport_name(peer->transport)));
  }
  for (const core::StreamConfig& s : user->streams) {
    for (int i = 0; i < kTopicCount; ++i) {
      if (s.topic == kTopics[i] || s.id == kStreamIdBase + static_cast<std::uint32_t>(i)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: [[streams]] \"%s\" (id %d) collides with pollux-latency's own streams (topics lat.ping.t, "
            "lat.pong.t, lat.ping.u, lat.pong.u, lat.ping.l, lat.pong.l; ids %d-%d): rename it or remove it from "
            "the file",
            rc.source, s.topic, s.id, kStreamIdBase, kStreamIdBase + kTopicCount - 1));
      }
    }
  }
  toml::table& runtime = TableOf(root, "runtime");
  runtime.insert_or_assign("name", absl::StrFormat("lat%dr%d", static_cast<int>(getpid()), run));
  const bool udp = user->transport == core::TransportKind::kUdp;
  if (udp) {
    // The kernel's timestamps (send completion and kernel_rx stages): on unless the file,
    // --set or --ab says otherwise. When on, they are on for the decomposed traced pair only;
    // the untraced pair and the library-only pair (kLibraryOnly) turn them off per stream, so
    // perturbation_pct is the library's own tracing and the kernel's cost is a line of its own.
    // On the XDP datapath there are no kernel timestamps (the frames skip the kernel's socket
    // path), so a side on it takes no library-only pair: there is no kernel cost to separate.
    rc.ping_xdp = transport::udp::config(*user).datapath == transport::udp::UdpDatapath::kXdp;
    rc.pong_xdp = transport::udp::config(*peer).datapath == transport::udp::UdpDatapath::kXdp;
    rc.ping_interface = transport::udp::config(*user).interface;
    rc.pong_interface = transport::udp::config(*peer).interface;
    toml::table& u = TableOf(root, "udp");
    if (u.get("kernel_timestamps") == nullptr) u.insert("kernel_timestamps", true);
    const toml::node* k = u.get("kernel_timestamps");
    rc.library_only = k->is_boolean() && k->as_boolean()->get() && !rc.ping_xdp && !rc.pong_xdp;
  }
  // UDP: a configured udp.port is kept (the streams take it and the next five); otherwise the
  // caller's picks.
  int udp_base = 0;
  if (udp) {
    const toml::node* configured = TableOf(root, "udp").get("port");
    if (configured != nullptr) {
      udp_base = static_cast<int>(transport::udp::config(*user).port);
      if (udp_base + kTopicCount - 1 > 65535) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: udp.port = %d: pollux-latency gives its streams udp.port .. udp.port + %d, past 65535; pick a lower "
            "port or leave udp.port unset (the tool then picks free ports)",
            rc.source, udp_base, kTopicCount - 1));
      }
    } else {
      rc.picks_udp_ports = true;
    }
  }
  auto udp_port_of = [&](int i) -> int {
    if (udp_base != 0) return udp_base + i;
    return i < static_cast<int>(udp_ports.size()) ? udp_ports[i] : 0;
  };
  // RDMA RC listeners (rdma_cm's port space, not the kernel's UDP/TCP ports): per invocation and run.
  const int rdma_port = 52000 + static_cast<int>(getpid() % 400) * 32 + (run % 4) * 8;
  toml::array* streams = nullptr;
  if (root.get("streams") == nullptr) root.insert("streams", toml::array{});
  streams = root.get("streams")->as_array();
  if (streams == nullptr) return absl::InvalidArgumentError(rc.source + ": streams: expected [[streams]] tables");
  for (int i = 0; i < (rc.library_only ? 6 : 4); ++i) {
    toml::table t;
    const bool traced = i != kPingU && i != kPongU;
    t.insert("topic", kTopics[i]);
    t.insert("id", static_cast<std::int64_t>(kStreamIdBase) + i);
    t.insert("trace", traced);
    if (traced) t.insert("trace_every", static_cast<std::int64_t>(o.trace_every));
    if (udp && udp_port_of(i) != 0) t.insert("udp_port", static_cast<std::int64_t>(udp_port_of(i)));
    if (rc.library_only && i != kPingT && i != kPongT) t.insert("kernel_timestamps", false);
    streams->push_back(std::move(t));
  }
  // RDMA RC on one host: each side listens on its own port and lists the other as its peer
  // (the host part comes from the configuration's first rdma.peers entry: the device's IPv4).
  std::string rdma_host;
  if (user->transport == core::TransportKind::kRdma &&
      transport::rdma::config(*user).mode == transport::rdma::RdmaMode::kRc) {
    if (transport::rdma::config(*user).peers.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: rdma.peers is empty: pollux-latency runs both RC sides on this host and needs its RDMA device's IPv4 "
          "address, given as rdma.peers = [\"<address>:<any port>\"] (each side then listens on its own port and "
          "lists the other)",
          rc.source));
    }
    rdma_host = transport::rdma::config(*user).peers[0].substr(0, transport::rdma::config(*user).peers[0].rfind(':'));
  }
  const bool pin_pollers = o.pin_split && user->runtime.threading != core::ThreadingMode::kInline &&
                           user->runtime.poller_cores.empty() && user->runtime.pollers == 1;
  auto side = [&](int cpu, int self) -> absl::StatusOr<std::string> {
    if (pin_pollers) runtime.insert_or_assign("poller_cores", toml::array{static_cast<std::int64_t>(cpu)});
    if (!rdma_host.empty()) {
      toml::table& rdma = TableOf(root, "rdma");
      rdma.insert_or_assign("listen_port", static_cast<std::int64_t>(rdma_port + self));
      rdma.insert_or_assign("peers", toml::array{absl::StrFormat("%s:%d", rdma_host, rdma_port + 1 - self)});
    }
    std::string s;
    if (self == 1 && !o.peer_sets.empty()) {
      absl::StatusOr<toml::table> t = with_peer_sets(root);
      if (!t.ok()) return t.status();
      s = serialize(*t);
    } else {
      s = serialize(root);
    }
    if (absl::StatusOr<core::Config> c = core::parse_config(s, self == 1 ? peer_source : rc.source); !c.ok()) {
      return c.status();
    }
    return s;
  };
  absl::StatusOr<std::string> a = side(o.cpu_a, 0);
  if (!a.ok()) return a.status();
  absl::StatusOr<std::string> b = side(o.cpu_b, 1);
  if (!b.ok()) return b.status();
  rc.ping_toml = *a;
  rc.pong_toml = *b;
  absl::StatusOr<core::Config> parsed = core::parse_config(rc.ping_toml, rc.source);
  if (!parsed.ok()) return parsed.status();
  rc.cfg = *parsed;
  return rc;
}

std::string TransportName(const core::Config& c) { return std::string(core::transport_name(c.transport)); }

// ---- shared state between the two processes of a run ---------------------------------------------

struct alignas(core::kFalseSharingRange) PaddedWord {
  std::atomic<std::uint64_t> v{0};
};

struct Shared {
  // Child -> parent: 1 = floor side ready, 2 = Context and streams open, -1 = failed (error[]
  // written before; the release store pairs with the parent's acquire loads in WaitChild).
  std::atomic<int> child_state{0};
  // Parent -> child: 1 = floor finished (open the Context), 2 = measurement over (close),
  // 3 = parent closed. Release stores; the child's acquire loads pair with them.
  std::atomic<int> phase{0};
  // Child -> parent: its results below are written (release; the parent acquires).
  std::atomic<int> child_done{0};
  // shm floor: the ping and pong words on their own lines (release/acquire pairs, one per hop).
  PaddedWord ping, pong;
  // udp floor: the two sockets' ports (child's written before child_state = 1; the parent's
  // before its store to udp_ready, release; the child acquires).
  std::atomic<int> child_port{0};
  std::atomic<int> parent_port{0};
  // ... and their IPv4 addresses (host order; 127.0.0.1, or with --peer-netns each side's
  // udp.interface address), published with the ports.
  std::atomic<std::uint32_t> child_addr{0};
  std::atomic<std::uint32_t> parent_addr{0};
  std::atomic<int> udp_ready{0};
  // Child -> parent: the pong publishers are connected (release; the parent acquires before
  // its first ping, so the first echo does not wait for a UDP status message).
  std::atomic<int> pongs_connected{0};
  // --rate: the sender's totals, then sender_done (release; the child's acquire).
  std::atomic<std::uint64_t> sent{0};
  std::atomic<int> sender_done{0};
  // --rate, child -> parent (valid after child_done).
  std::uint64_t received = 0, lost = 0, gaps = 0, malformed = 0;
  Dist traced_one_way, untraced_one_way, library_one_way;
  Decomposer dec, dec_library;  // the traced stream's samples; the library-only stream's
  // Child -> parent: opening a subscriber failed because its UDP port was taken (written before
  // the release store of child_state = -1).
  std::atomic<int> port_taken{0};
  char error[1024] = {};
};
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<std::uint64_t>::is_always_lock_free,
              "Shared is used by two processes");

// The pong process's Shared (null in the parent): its parent closing (phase 3) stops it too.
Shared* g_pong_shared = nullptr;

// Whether this process should stop: a signal came (either process), or (pong process) its
// parent has closed.
bool StopRequested() noexcept {
  if (g_stop_signal != 0) return true;
  return g_pong_shared != nullptr &&
         g_pong_shared->phase.load(std::memory_order_acquire) >= 3;  // pairs with the parent's release
}

// A subscriber that could not bind its UDP port: another socket holds it.
bool PortTaken(const absl::Status& st) { return st.code() == absl::StatusCode::kAlreadyExists; }

Shared* MapShared(double clock_cost) {
  void* p = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  Shared* sh = new (p) Shared();
  sh->dec.reset(clock_cost);
  sh->dec_library.reset(clock_cost);
  return sh;
}

void UnmapShared(Shared* sh) {
  sh->~Shared();
  munmap(sh, sizeof(Shared));
}

void SetError(Shared* sh, const std::string& e) {
  std::snprintf(sh->error, sizeof sh->error, "%s", e.c_str());
  sh->child_state.store(-1, std::memory_order_release);  // pairs with WaitChild's acquire
}

inline void CpuPause() noexcept {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

// ---- --peer-netns ------------------------------------------------------------------------------

constexpr char kNetnsDir[] = "/var/run/netns/";

// Whether this process has CAP_SYS_ADMIN (setns needs it), from /proc/self/status.
bool HasCapSysAdmin() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("CapEff:", 0) != 0) continue;
    std::uint64_t caps = 0;
    return absl::SimpleHexAtoi(absl::StripAsciiWhitespace(line.substr(7)), &caps) && (caps >> 21 & 1) != 0;
  }
  return false;
}

// Opens the namespace of --peer-netns into o->peer_netns_fd (kept for every run's pong process);
// "" or why it cannot be entered.
std::string OpenPeerNetns(Options* o) {
  const std::string path = kNetnsDir + o->peer_netns;
  o->peer_netns_fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (o->peer_netns_fd < 0) {
    const int err = errno;
    if (err == ENOENT) {
      return absl::StrFormat(
          "--peer-netns %s: no such network namespace (%s does not exist; create it with `ip netns add %s`, list "
          "them with `ip netns list`)",
          o->peer_netns, path, o->peer_netns);
    }
    return absl::StrFormat("--peer-netns %s: cannot open %s: %s%s", o->peer_netns, path, std::strerror(err),
                           err == EACCES ? " (entering a network namespace needs root)" : "");
  }
  if (!HasCapSysAdmin()) {
    return absl::StrFormat(
        "--peer-netns %s: entering a network namespace needs CAP_SYS_ADMIN, which this process lacks: run "
        "pollux-latency as root",
        o->peer_netns);
  }
  return "";
}

// In the pong process, before anything opens a socket: enters the --peer-netns namespace, then
// (best effort, as `ip netns exec` does) mounts a sysfs of that namespace in a mount namespace of
// its own, so that /sys/class/net lists its interfaces (the XDP datapath counts an interface's RX
// queues there; without it the count is unknown and not checked). "" or the error.
std::string EnterPeerNetns(const Options& o) {
  if (setns(o.peer_netns_fd, CLONE_NEWNET) != 0) {
    const int err = errno;
    return absl::StrFormat("pong side: setns(%s%s, CLONE_NEWNET): %s%s", kNetnsDir, o.peer_netns, std::strerror(err),
                           err == EINVAL  ? " (not a network namespace)"
                           : err == EPERM ? " (needs CAP_SYS_ADMIN: run as root)"
                                          : "");
  }
  if (unshare(CLONE_NEWNS) == 0 && mount(nullptr, "/", nullptr, MS_SLAVE | MS_REC, nullptr) == 0 &&
      umount2("/sys", MNT_DETACH) == 0) {
    (void)mount(o.peer_netns.c_str(), "/sys", "sysfs", 0, nullptr);
  }
  return "";
}

// What a step of a run returns in place of an error when a signal stopped it.
constexpr char kInterrupted[] = "interrupted";

// Waits until the child reaches `state`; false with `err` if it failed, died or took 20 s, or
// kInterrupted.
bool WaitChild(Shared* sh, pid_t child, int state, std::string* err) {
  return host::wait_for_child(sh->child_state, state, sh->error, child,
                              {"pong process", "get ready", StopRequested, kInterrupted}, err);
}

// Waits (pause, then yield) until `pred` or `timeout_ns`; false on timeout or a stop request.
template <typename Pred>
bool SpinUntil(Pred&& pred, std::int64_t timeout_ns) {
  std::int64_t deadline = 0;
  for (std::uint32_t spins = 0;; ++spins) {
    if (pred()) return true;
    if ((spins & 1023) == 1023) {
      if (StopRequested()) return false;
      const std::int64_t now = Clock::now_ns();
      if (deadline == 0) deadline = now + timeout_ns;
      if (now > deadline) return false;
      if (spins > 1'000'000) sched_yield();
    }
    CpuPause();
  }
}

// ---- floors ---------------------------------------------------------------------------------------

// kUdpNetns: the UDP floor across network namespaces (--peer-netns), each socket on its side's
// udp.interface address.
enum class FloorKind { kNone, kShm, kUdp, kUdpNetns };

// Each transport's floor, and how the report names it: one row per transport.
struct Floor {
  core::TransportKind transport;
  FloorKind kind;
  const char* name;
};
constexpr Floor kFloors[] = {
    {core::TransportKind::kShm, FloorKind::kShm, "bare cache-line ping-pong between the two processes"},
    {core::TransportKind::kUdp, FloorKind::kUdp, "two bare UDP sockets on 127.0.0.1, busy recv(MSG_DONTWAIT)"},
    {core::TransportKind::kUdp, FloorKind::kUdpNetns,
     "two bare UDP sockets across the network namespaces (--peer-netns), each on its side's udp.interface address, "
     "busy recv(MSG_DONTWAIT)"},
    {core::TransportKind::kRdma, FloorKind::kNone, "not measured by this tool (RDMA: perftest ib_send_lat in the VM)"},
};

// `cross_netns`: the pong side runs in another network namespace (--peer-netns).
FloorKind FloorFor(const core::Config& c, bool cross_netns) {
  for (const Floor& f : kFloors) {
    if (f.transport == c.transport) return f.kind == FloorKind::kUdp && cross_netns ? FloorKind::kUdpNetns : f.kind;
  }
  return FloorKind::kNone;
}

std::string FloorName(FloorKind k) {
  for (const Floor& f : kFloors) {
    if (f.kind == k) return f.name;
  }
  return "?";
}

bool ConnectUdp(int fd, std::uint32_t addr, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(addr);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  return connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
}

// The address a side's floor socket binds (host order): 127.0.0.1, or for kUdpNetns the IPv4
// address of `interface` (a name, or an address as udp.interface allows) in the calling
// process's network namespace; 0 with *err when there is none.
std::uint32_t FloorAddress(FloorKind kind, const std::string& interface, std::string* err) {
  if (kind != FloorKind::kUdpNetns) return INADDR_LOOPBACK;
  in_addr a{};
  if (inet_pton(AF_INET, interface.c_str(), &a) == 1) return ntohl(a.s_addr);
  std::uint32_t found = 0;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    *err = absl::StrCat("floor: getifaddrs: ", std::strerror(errno));
    return 0;
  }
  for (const ifaddrs* i = list; i != nullptr && found == 0; i = i->ifa_next) {
    if (i->ifa_addr != nullptr && i->ifa_addr->sa_family == AF_INET && interface == i->ifa_name) {
      found = ntohl(reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr);
    }
  }
  freeifaddrs(list);
  if (found == 0) {
    *err = absl::StrFormat(
        "floor: udp.interface \"%s\" has no IPv4 address in this network namespace (with --peer-netns each side's "
        "udp.interface must be an interface of its own namespace: --set for the ping side, --peer-set for the pong "
        "side)",
        interface);
  }
  return found;
}

std::string AddressText(std::uint32_t addr) {
  return absl::StrFormat("%d.%d.%d.%d", addr >> 24, (addr >> 16) & 255, (addr >> 8) & 255, addr & 255);
}

// Child side of the floor: echoes until the parent moves to phase 1. `interface`: the pong
// side's udp.interface (kUdpNetns).
void FloorEchoChild(Shared* sh, FloorKind kind, std::size_t payload, const std::string& interface) {
  auto over = [&] {
    return sh->phase.load(std::memory_order_acquire) >= 1 || StopRequested();
  };  // pairs with the parent's release
  if (kind == FloorKind::kShm) {
    sh->child_state.store(1, std::memory_order_release);  // pairs with WaitChild's acquire
    std::uint64_t seen = 0;
    while (!over()) {
      // Checking `phase` costs a load of another line only every 256 spins.
      for (int k = 0; k < 256; ++k) {
        const std::uint64_t v = sh->ping.v.load(std::memory_order_acquire);  // pairs with the parent's release
        if (v != seen) {
          seen = v;
          sh->pong.v.store(v, std::memory_order_release);  // pairs with the parent's acquire
        }
        CpuPause();
      }
    }
    return;
  }
  if (kind == FloorKind::kUdp || kind == FloorKind::kUdpNetns) {
    std::string err;
    const std::uint32_t addr = FloorAddress(kind, interface, &err);
    if (addr == 0) {
      SetError(sh, err);
      return;
    }
    int port = 0;
    bool bind_failed = false;
    const int fd = BoundUdpSocket(addr, &port, &bind_failed);
    if (fd < 0) {
      SetError(sh, absl::StrCat("floor: UDP socket on ", AddressText(addr), ": ", std::strerror(errno)));
      return;
    }
    sh->child_addr.store(addr, std::memory_order_relaxed);
    sh->child_port.store(port, std::memory_order_relaxed);
    sh->child_state.store(1, std::memory_order_release);  // pairs with WaitChild's acquire
    if (!SpinUntil([&] { return sh->udp_ready.load(std::memory_order_acquire) != 0 || over(); }, 20'000'000'000) ||
        over() ||
        !ConnectUdp(fd, sh->parent_addr.load(std::memory_order_relaxed),
                    sh->parent_port.load(std::memory_order_relaxed))) {
      close(fd);
      return;
    }
    std::vector<char> buf(std::max<std::size_t>(payload, 64));
    for (std::uint32_t spins = 0;; ++spins) {
      const ssize_t n = recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
      if (n > 0) {
        if (send(fd, buf.data(), static_cast<std::size_t>(n), 0) < 0) break;
        continue;
      }
      if ((spins & 255) == 0 && over()) break;
    }
    close(fd);
    return;
  }
  sh->child_state.store(1, std::memory_order_release);  // pairs with WaitChild's acquire
}

// Parent side: `warm` + `count` round trips; RTT/2 (one clock read subtracted) into `out`.
// `interface`: the ping side's udp.interface (kUdpNetns). Returns "" or what went wrong.
std::string FloorPingParent(Shared* sh, FloorKind kind, const std::string& interface, std::uint64_t warm,
                            std::uint64_t count, std::size_t payload, double clock_cost, std::int64_t timeout_ns,
                            Dist* out) {
  if (kind == FloorKind::kShm) {
    for (std::uint64_t i = 1; i <= warm + count; ++i) {
      const std::int64_t t0 = Clock::now_ns();
      sh->ping.v.store(i, std::memory_order_release);  // pairs with the child's acquire
      if (!SpinUntil([&] { return sh->pong.v.load(std::memory_order_acquire) == i; },
                     timeout_ns)) {  // pairs with the child's release
        return StopRequested() ? kInterrupted : "floor: no echo from the pong process";
      }
      const std::int64_t t1 = Clock::now_ns();
      if (i > warm) out->add((static_cast<double>(t1 - t0) - clock_cost) / 2.0);
    }
    return "";
  }
  if (kind == FloorKind::kUdp || kind == FloorKind::kUdpNetns) {
    std::string addr_err;
    const std::uint32_t addr = FloorAddress(kind, interface, &addr_err);
    if (addr == 0) return addr_err;
    int port = 0;
    bool bind_failed = false;
    const int fd = BoundUdpSocket(addr, &port, &bind_failed);
    if (fd < 0) return absl::StrCat("floor: UDP socket on ", AddressText(addr), ": ", std::strerror(errno));
    if (!ConnectUdp(fd, sh->child_addr.load(std::memory_order_relaxed),
                    sh->child_port.load(std::memory_order_relaxed))) {
      close(fd);
      return absl::StrCat("floor: connect: ", std::strerror(errno));
    }
    sh->parent_addr.store(addr, std::memory_order_relaxed);
    sh->parent_port.store(port, std::memory_order_relaxed);
    sh->udp_ready.store(1, std::memory_order_release);  // pairs with the child's acquire
    std::vector<char> buf(std::max<std::size_t>(payload, 64), 0);
    std::string err;
    std::uint64_t losses = 0;
    for (std::uint64_t i = 1; i <= warm + count && err.empty(); ++i) {
      std::memcpy(buf.data(), &i, sizeof i);
      const std::int64_t t0 = Clock::now_ns();
      if (send(fd, buf.data(), payload, 0) < 0) {
        err = absl::StrCat("floor: send: ", std::strerror(errno));
        break;
      }
      std::uint64_t got = 0;
      const bool ok = SpinUntil(
          [&] {
            const ssize_t n = recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
            if (n >= static_cast<ssize_t>(sizeof got)) std::memcpy(&got, buf.data(), sizeof got);
            return n > 0 && got == i;
          },
          timeout_ns);
      const std::int64_t t1 = Clock::now_ns();
      if (!ok) {
        if (StopRequested()) {
          err = kInterrupted;
        } else if (++losses > 100) {
          err = "floor: more than 100 UDP round trips without an echo";
        }
        continue;
      }
      if (i > warm) out->add((static_cast<double>(t1 - t0) - clock_cost) / 2.0);
    }
    close(fd);
    return err;
  }
  return "";
}

// ---- one run --------------------------------------------------------------------------------------

struct RunResult {
  std::string error;
  // A signal stopped the run (g_stop_signal): the figures below are what was measured until then.
  bool interrupted = false;
  // Opening a subscriber failed because its UDP port was taken (error says which): the run may
  // be tried again with other ports.
  bool port_taken = false;
  std::uint64_t completed = 0, planned = 0;  // round trips (messages with --rate) done / planned, all variants
  std::string transport, threading, idle;
  bool kernel_tx_stamps = false;  // UDP with udp.kernel_timestamps: traced sends ask the kernel for TX stamps
  std::unique_ptr<Decomposer> dec;
  Dist traced, untraced;  // RTT/2 (ping-pong) or one-way from the scheduled send (--rate)
  // UDP with kernel timestamps (RunConfig::library_only): the library-only traced pair's
  // RTT/2 (one-way) and its samples.
  bool library_only = false;
  Dist library;
  std::unique_ptr<Decomposer> dec_library;
  Dist floor;
  FloorKind floor_kind = FloorKind::kNone;
  std::uint64_t timeouts = 0, stale = 0, lost = 0, gaps = 0, sent = 0, received = 0;
  std::uint64_t send_completion_missing = 0;  // measured traced pings whose send completion never came
  // RDMA: the traced pings' local send completions (post -> send CQE polled), off the summed
  // path (AddSendCompletion); how many came before the pong side's receive / delivery stamp,
  // and traced pings whose completion was not known within the wait.
  Dist send_cqe;
  std::uint64_t send_cqe_missing = 0, send_cqe_before_rx = 0, send_cqe_before_delivery = 0;
  // Ping-pong, traced round trips (not --burst): the round trip cut at the stamps both
  // messages carry - t0 -> ping offer stamp, ping one-way (offer -> delivery), the pong's
  // turnaround (its delivery -> the echo's offer stamp), the echo's one-way, echo delivery ->
  // t1 - each less one clock read. Their means add up to the traced RTT (less 5 reads); they
  // show where RTT/2 goes that the ping's stages do not cover.
  static constexpr int kRtParts = 5;
  Dist rt_parts[kRtParts];
  Checks checks() const {
    Checks c;
    c.have_untraced = untraced.n > 0 && traced.n > 0;
    c.untraced_p50_ns = static_cast<double>(untraced.p(50));
    c.traced_p50_ns = static_cast<double>(traced.p(50));
    c.floor_p50_ns = floor.n ? static_cast<double>(floor.p(50)) : 0.0;
    c.have_library_only = library_only && library.n > 0;
    c.library_only_p50_ns = static_cast<double>(library.p(50));
    c.library_only_e2e_p50_ns =
        dec_library && dec_library->end_to_end().n ? static_cast<double>(dec_library->end_to_end().p(50)) : 0.0;
    return c;
  }
};

// Pong payload: sequence, a has-trace word, the ping's 7 stamps as the pong side saw them, its
// kernel RX stamp (StageTimes::kKernelRx) and its Message::sequence (the ping side looks up the
// ping's send completion by it).
constexpr std::size_t kPongBytes = 8 + 8 + 7 * 8 + 8 + 8;
constexpr std::size_t kPongKernelRx = 8 + 8 + 7 * 8;
constexpr std::size_t kPongSequence = kPongKernelRx + 8;

// A sample of a traced message's StageTimes as the receiver saw them (kernel_rx included).
Sample SampleOf(const pollux::StageTimes& t) noexcept {
  Sample s = sample_from_stage_times(t.ns);
  s.ns[kKernelRx] = t.ns[pollux::StageTimes::kKernelRx];
  return s;
}

// The application loop's step after an empty poll: inline mode spins (the thread is the I/O
// path; pinned, one per CPU) and runs the publishers' duties every 64 empty polls; with
// pollers it yields the CPU (an application thread and a poller share each CPU).
struct AppIdle {
  bool inline_mode;
  pollux::Publisher* pubs[3];  // the variants' publishers (the third: nullptr without kLibraryOnly)
  std::uint32_t empty = 0;
  void idle() noexcept {
    if (inline_mode) {
      if ((++empty & 63) == 0) service();
      CpuPause();
    } else {
      sched_yield();
    }
  }
  void service() noexcept {
    if (inline_mode) {
      for (pollux::Publisher* p : pubs) {
        if (p != nullptr) (void)p->service();
      }
    }
  }
};

// One side's streams per variant (kTraced, kUntraced, kLibraryOnly; the first `n`): a publisher
// on kTopics[pub_topics[v]] and a subscriber on kTopics[sub_topics[v]], either list null for
// none (--rate: the sender subscribes to nothing, the receiver publishes nothing).
constexpr int kPingOf[3] = {kPingT, kPingU, kPingL}, kPongOf[3] = {kPongT, kPongU, kPongL};
struct VariantStreams {
  int n = 0;
  pollux::Publisher pubs[3];
  pollux::Subscriber subs[3];
  // Every subscriber before any publisher: a publisher's socket binds an ephemeral port, which
  // must not be one of this side's UDP ports released just before (PortReservation).
  absl::Status open(pollux::Context& ctx, int nv, const int* pub_topics, const int* sub_topics) {
    n = nv;
    for (int v = 0; v < n && sub_topics != nullptr; ++v) {
      absl::StatusOr<pollux::Subscriber> sub = ctx.subscriber(kTopics[sub_topics[v]]);
      if (!sub.ok()) return sub.status();
      subs[v] = std::move(*sub);
    }
    for (int v = 0; v < n; ++v) {
      if (pub_topics != nullptr) {
        absl::StatusOr<pollux::Publisher> pub = ctx.publisher(kTopics[pub_topics[v]]);
        if (!pub.ok()) return pub.status();
        pubs[v] = std::move(*pub);
      }
    }
    return absl::OkStatus();
  }
  AppIdle idle(bool inline_mode) noexcept {
    return AppIdle{inline_mode, {&pubs[0], &pubs[1], n > 2 ? &pubs[2] : nullptr}};
  }
  bool connected() const noexcept {
    for (int v = 0; v < n; ++v) {
      if (!pubs[v].is_connected()) return false;
    }
    return true;
  }
  // Polls every subscriber, discarding (inline: also answers the other side's status).
  void drain(int max) noexcept {
    for (int v = 0; v < n; ++v) (void)subs[v].poll([](const pollux::Message&) {}, max);
  }
  void close() noexcept {
    for (int v = 0; v < n; ++v) pubs[v].close();
  }
};

// The ping publisher's send completion of a traced ping (Publisher::send_completion_ns), waited
// for a bounded while: up to kWaitNs per ping, and not at all once the first kProbe pings all
// came without one (a transport that records none: the stage is then absent, not waited for).
class SendCompletionWait {
 public:
  static constexpr std::int64_t kWaitNs = 2'000'000;
  static constexpr std::uint64_t kProbe = 16;
  explicit SendCompletionWait(bool possible) : possible_(possible) {}
  bool wanted() const noexcept { return possible_ && (seen_ > 0 || tried_ < kProbe); }
  std::int64_t wait(pollux::Publisher& pub, std::uint64_t sequence, AppIdle& idle) noexcept {
    ++tried_;
    std::int64_t deadline = 0;
    for (std::uint32_t k = 0;; ++k) {
      if (const std::int64_t ns = pub.send_completion_ns(sequence); ns != 0) {
        ++seen_;
        return ns;
      }
      if ((k & 15) == 15) {
        const std::int64_t now = Clock::now_ns();
        if (deadline == 0) deadline = now + kWaitNs;
        if (now > deadline) return 0;
      }
      if (idle.inline_mode) {
        (void)pub.service();
      } else {
        sched_yield();
      }
    }
  }

 private:
  bool possible_;
  std::uint64_t tried_ = 0, seen_ = 0;
};

// Offers until accepted; false on kClosed/kMessageTooLarge or after `timeout_ns`.
bool OfferRetry(pollux::Publisher& pub, const void* data, std::size_t len, AppIdle& idle, std::int64_t timeout_ns,
                std::string* err) {
  std::int64_t deadline = 0;
  for (;;) {
    const std::int64_t r = pub.offer(data, len);
    if (r >= 0) return true;
    if (r == pollux::kClosed || r == pollux::kMessageTooLarge) {
      *err = absl::StrCat("offer: ", std::string(pollux::result_name(r)));
      return false;
    }
    if (StopRequested()) {
      *err = kInterrupted;
      return false;
    }
    const std::int64_t now = Clock::now_ns();
    if (deadline == 0) deadline = now + timeout_ns;
    if (now > deadline) {
      *err = absl::StrCat("offer: still ", std::string(pollux::result_name(r)), " after the timeout");
      return false;
    }
    idle.service();
    if (!idle.inline_mode) sched_yield();
  }
}

// The pong process's own stop (SIGTERM: sent to it, or its parent died): reported as its error.
int PongStopped(Shared* sh) {
  if (g_stop_signal != 0) SetError(sh, absl::StrCat("pong side: stopped by ", cli::signal_name(g_stop_signal)));
  return 3;
}

// `ports`: the reservation the parent made (UDP; empty otherwise), this process's copies.
int PongMain(const Options& o, const RunConfig& rc, FloorKind floor, Shared* sh, PortReservation& ports) {
  ports.release({kPongT, kPongU, kPongL});  // the ping side's to bind
  FloorEchoChild(sh, floor, o.payload, rc.pong_interface);
  if (sh->child_state.load(std::memory_order_relaxed) == -1) return 2;
  if (StopRequested()) return PongStopped(sh);
  auto ctx = pollux::Context::from_string(rc.pong_toml, "pollux-latency (pong side)");
  if (!ctx.ok()) {
    SetError(sh, std::string(ctx.status().message()));
    return 2;
  }
  const bool rate = o.rate > 0;
  // Per variant: the ping subscriber and the pong publisher.
  const int nv = rc.variants();
  VariantStreams vs;
  ports.release({kPingT, kPingU, kPingL});
  if (absl::Status st = vs.open(**ctx, nv, rate ? nullptr : kPongOf, kPingOf); !st.ok()) {
    if (PortTaken(st)) sh->port_taken.store(1, std::memory_order_relaxed);  // published by SetError's release
    SetError(sh, std::string(st.message()));
    return 2;
  }
  pollux::Subscriber* const subs = vs.subs;
  pollux::Publisher* const pubs = vs.pubs;
  // Wait for the parent (phase 1) before reporting ready: the floor is over by then.
  while (sh->phase.load(std::memory_order_acquire) < 1) {  // pairs with the parent's release
    if (StopRequested()) return PongStopped(sh);
    usleep(100);
  }
  sh->child_state.store(2, std::memory_order_release);  // pairs with WaitChild's acquire
  const bool inline_mode = rc.cfg.runtime.threading == core::ThreadingMode::kInline;
  AppIdle idle = vs.idle(inline_mode);
  const std::int64_t timeout_ns = static_cast<std::int64_t>(o.timeout_ms * 1e6);
  std::string err;
  auto done = [&] {
    return sh->phase.load(std::memory_order_acquire) >= 2 || StopRequested();
  };  // pairs with the parent's release
  if (!rate) {
    const std::int64_t deadline = Clock::monotonic_ns() + 10'000'000'000;
    while (!vs.connected()) {
      idle.service();
      vs.drain(16);  // inline: the status to the ping side
      if (StopRequested()) return PongStopped(sh);
      if (Clock::monotonic_ns() > deadline) {
        SetError(sh, "pong side: publishers not connected to the ping side after 10 s");
        return 2;
      }
      usleep(100);
    }
    sh->pongs_connected.store(1, std::memory_order_release);  // pairs with the parent's acquire
    unsigned char pong[kPongBytes];
    auto echo = [&](pollux::Publisher& pub, const pollux::Message& m) {
      // --burst: only the last message of a ping (word 1 = 1) is answered.
      std::uint64_t last = 1;
      if (m.payload.size() >= 16) std::memcpy(&last, m.payload.data() + 8, 8);
      if (last == 0) return;
      std::memset(pong, 0, sizeof pong);
      if (m.payload.size() >= 8) std::memcpy(pong, m.payload.data(), 8);
      std::memcpy(pong + kPongSequence, &m.sequence, 8);
      if (m.trace != nullptr) {
        const std::uint64_t one = 1;
        std::memcpy(pong + 8, &one, 8);
        std::memcpy(pong + 16, m.trace->ns, 7 * 8);
        std::memcpy(pong + kPongKernelRx, &m.trace->ns[pollux::StageTimes::kKernelRx], 8);
        std::memcpy(pong + kPongSequence, &m.sequence, 8);
      }
      if (!OfferRetry(pub, pong, sizeof pong, idle, timeout_ns, &err)) return;
    };
    for (std::uint32_t k = 0; err.empty(); ++k) {
      int n = 0;
      for (int v = 0; v < nv; ++v) n += subs[v].poll([&](const pollux::Message& m) { echo(pubs[v], m); }, 16);
      if (n == 0) {
        if ((k & 255) == 0 && done()) break;
        idle.idle();
      }
    }
  } else {
    const std::uint64_t warm = o.warmup;
    auto on_msg = [&](int variant, const pollux::Message& m) {
      const std::int64_t now = Clock::now_ns();
      if (m.payload.size() < 16) {
        ++sh->malformed;
        return;
      }
      std::int64_t tk;
      std::uint64_t k;
      std::memcpy(&tk, m.payload.data(), 8);
      std::memcpy(&k, m.payload.data() + 8, 8);
      ++sh->received;
      if (k / static_cast<std::uint64_t>(nv) < warm) return;
      const double lat = static_cast<double>(now - tk) - sh->dec.clock_cost_ns();
      if (variant == kTraced) {
        sh->traced_one_way.add(lat);
        if (m.trace != nullptr) (void)sh->dec.add(SampleOf(*m.trace));
      } else if (variant == kLibraryOnly) {
        sh->library_one_way.add(lat);
        if (m.trace != nullptr) (void)sh->dec_library.add(SampleOf(*m.trace));
      } else {
        sh->untraced_one_way.add(lat);
      }
    };
    auto on_gap = [&](const pollux::Gap& g) {
      ++sh->gaps;
      if (g.reason != pollux::GapReason::kOverrun) sh->lost += g.count;
    };
    std::int64_t drain_deadline = 0;
    for (std::uint32_t k = 0;; ++k) {
      int n = 0;
      for (int v = 0; v < nv; ++v) n += subs[v].poll([&](const pollux::Message& m) { on_msg(v, m); }, on_gap, 64);
      if (n > 0) continue;
      if (sh->sender_done.load(std::memory_order_acquire) != 0) {  // pairs with the sender's release
        const std::uint64_t sent = sh->sent.load(std::memory_order_relaxed);
        if (sh->received + sh->lost >= sent) break;
        const std::int64_t now = Clock::now_ns();
        if (drain_deadline == 0) drain_deadline = now + 2'000'000'000;
        if (now > drain_deadline) break;
      } else if ((k & 1023) == 0 && done()) {
        break;
      }
      idle.idle();
    }
  }
  if (g_stop_signal != 0) {
    std::snprintf(sh->error, sizeof sh->error, "pong side: stopped by %s", cli::signal_name(g_stop_signal));
  } else if (!err.empty() && err != kInterrupted) {
    std::snprintf(sh->error, sizeof sh->error, "pong side: %s", err.c_str());
  }
  sh->child_done.store(1, std::memory_order_release);  // pairs with the parent's acquire
  // Stay until the parent has closed its side: a UDP publisher's close lingers for our status.
  const std::int64_t until = Clock::monotonic_ns() + 5'000'000'000;
  while (sh->phase.load(std::memory_order_acquire) < 3 && g_stop_signal == 0 &&
         Clock::monotonic_ns() < until) {  // pairs with the parent's release
    vs.drain(64);
    idle.service();
    usleep(50);
  }
  vs.close();  // --rate: none open
  return 0;
}

// RDMA: the traced ping's local send completion (its send CQE, polled by whoever drives the
// ping publisher's endpoint: its poller, or in inline mode this thread's service()), waited for
// at most 5 ms. Off the message's summed path on RC: the CQE follows the receiver's ACK, which
// often comes after the pong side polled the frame, so it is a line of its own.
void AddSendCompletion(RunResult& r, pollux::Publisher& pub, std::uint64_t seq, const Sample& s, AppIdle& idle,
                       double clock_cost) {
  std::int64_t sc = pub.send_completion_ns(seq);
  const std::int64_t deadline = Clock::now_ns() + 5'000'000;
  while (sc == 0 && Clock::now_ns() < deadline) {
    idle.service();
    sched_yield();
    sc = pub.send_completion_ns(seq);
  }
  if (sc == 0) {
    ++r.send_cqe_missing;
    return;
  }
  const std::int64_t post = s.ns[kPost] != 0 ? s.ns[kPost] : s.ns[kOffer];
  r.send_cqe.add(static_cast<double>(sc - post) - clock_cost);
  if (s.ns[kReceive] != 0 && sc <= s.ns[kReceive]) ++r.send_cqe_before_rx;
  if (s.ns[kDelivery] != 0 && sc <= s.ns[kDelivery]) ++r.send_cqe_before_delivery;
}

void SleepNs(std::int64_t ns) {
  timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  nanosleep(&ts, nullptr);
}

// Reaps a child of a run (the pong process; RDMA: the runner). Unbounded while the run ends
// normally (a publisher's close may linger as long as the configuration lets it) until a stop
// signal comes; `bounded` (a run that failed or was stopped, or from that signal on) it gets
// `grace_s` to close its Context - which removes its stream logs and CPU claim - and is then
// killed. Returns waitpid's status.
int ReapChild(pid_t child, bool bounded, std::int64_t grace_s = 5) {
  int status = 0;
  const std::int64_t grace_ns = grace_s * 1'000'000'000;
  std::int64_t deadline = bounded ? Clock::monotonic_ns() + grace_ns : 0;
  for (;;) {
    const pid_t w = waitpid(child, &status, deadline == 0 ? 0 : WNOHANG);
    if (w == child) return status;
    if (w < 0 && errno != EINTR) return status;  // ECHILD: nothing left to reap
    if (deadline == 0) {
      if (StopRequested()) deadline = Clock::monotonic_ns() + grace_ns;
      continue;
    }
    if (Clock::monotonic_ns() > deadline) {
      kill(child, SIGKILL);
      while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
      }
      return status;
    }
    usleep(1000);
  }
}

// Once per run, when the first measured round trip is in (--rate: the first measured message
// sent): from then on a stop prints figures.
void AnnounceMeasuring() {
  absl::PrintF("measuring (warm-up done): Ctrl-C stops the run and prints what was measured so far\n");
  std::fflush(stdout);
}

// A run's result before it runs: what `rc` measures (transport, threading, idle strategy).
RunResult StartResult(const RunConfig& rc) {
  RunResult r;
  r.transport = TransportName(rc.cfg);
  r.kernel_tx_stamps =
      rc.cfg.transport == core::TransportKind::kUdp && transport::udp::config(rc.cfg).kernel_timestamps && !rc.ping_xdp;
  r.threading = std::string(core::threading_name(rc.cfg.runtime.threading));
  r.idle = std::string(core::idle_kind_name(rc.cfg.runtime.idle));
  return r;
}

// `ports` (UDP, picked by the tool; else empty): released to each side just before it binds them.
RunResult RunOnce(const Options& o, const RunConfig& rc, double clock_cost, PortReservation& ports) {
  RunResult r = StartResult(rc);
  r.dec = std::make_unique<Decomposer>(clock_cost);
  r.dec_library = std::make_unique<Decomposer>(clock_cost);
  r.library_only = rc.library_only;
  const bool rate = o.rate > 0;
  r.floor_kind = rate ? FloorKind::kNone : FloorFor(rc.cfg, !o.peer_netns.empty());
  Shared* sh = MapShared(clock_cost);
  if (sh == nullptr) {
    r.error = absl::StrCat("mmap: ", std::strerror(errno));
    return r;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t parent = getpid();
  const pid_t child = host::fork_on(o.pin_split ? o.cpu_b : -1);
  if (child < 0) {
    r.error = absl::StrCat("fork: ", std::strerror(errno));
    UnmapShared(sh);
    return r;
  }
  if (child == 0) {
    // The pong process dies with its parent: SIGTERM (handled: it stops, closes its Context and
    // exits) when the parent exits, however it exits. The signal is armed only for the parent of
    // the moment: one that died before the prctl has already left this process to init.
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0) {
      SetError(sh, absl::StrCat("pong side: prctl(PR_SET_PDEATHSIG): ", std::strerror(errno)));
      _exit(2);
    }
    if (getppid() != parent) _exit(4);
    struct sigaction ign {};
    sigemptyset(&ign.sa_mask);
    ign.sa_handler = SIG_IGN;
    sigaction(SIGINT, &ign, nullptr);  // Ctrl-C reaches the whole group: the parent coordinates the stop
    g_pong_shared = sh;
    if (o.peer_netns_fd >= 0) {
      if (std::string e = EnterPeerNetns(o); !e.empty()) {
        SetError(sh, e);
        _exit(2);
      }
    }
    if (o.pin_split) host::pin(o.cpu_b);
    _exit(PongMain(o, rc, r.floor_kind, sh, ports));
  }
  ports.release({kPingT, kPingU, kPingL});  // the pong side's to bind
  auto finish = [&](const std::string& err) {
    if (err == kInterrupted || g_stop_signal != 0) {
      r.interrupted = true;
    } else if (!err.empty() && r.error.empty()) {
      r.error = err;
    }
    if (!r.error.empty() && sh->port_taken.load(std::memory_order_relaxed) != 0) r.port_taken = true;
    const bool clean = r.error.empty() && !r.interrupted;
    sh->phase.store(3, std::memory_order_release);  // pairs with the child's acquire
    const int status = ReapChild(child, !clean);
    if (g_stop_signal != 0) r.interrupted = true;  // came while the pong process was closing
    if (r.error.empty() && !r.interrupted) {
      if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        r.error = absl::StrFormat("pong process ended with status %d", status);
      }
      if (r.error.empty() && sh->error[0] != 0) r.error = sh->error;
    }
    UnmapShared(sh);
    return std::move(r);
  };
  std::string err;
  const std::int64_t timeout_ns = static_cast<std::int64_t>(o.timeout_ms * 1e6);
  if (!WaitChild(sh, child, 1, &err)) return finish(err);
  if (r.floor_kind != FloorKind::kNone) {
    const std::uint64_t n = std::min<std::uint64_t>(o.count, 100000);
    err = FloorPingParent(sh, r.floor_kind, rc.ping_interface, std::min<std::uint64_t>(o.warmup, 10000), n, o.payload,
                          clock_cost, timeout_ns, &r.floor);
    if (!err.empty()) return finish(err);
  }
  sh->phase.store(1, std::memory_order_release);  // pairs with the child's acquire
  if (!WaitChild(sh, child, 2, &err)) return finish(err);
  auto ctx = pollux::Context::from_string(rc.ping_toml, "pollux-latency (ping side)");
  if (!ctx.ok()) return finish(absl::StrCat("ping side: ", ctx.status().message()));
  // Per variant: the ping publisher and the pong subscriber.
  const int nv = rc.variants();
  VariantStreams vs;
  ports.release({kPongT, kPongU, kPongL});
  if (absl::Status st = vs.open(**ctx, nv, kPingOf, rate ? nullptr : kPongOf); !st.ok()) {
    r.port_taken = PortTaken(st);
    return finish(absl::StrCat("ping side: ", st.message()));
  }
  pollux::Publisher* const pubs = vs.pubs;
  pollux::Subscriber* const subs = vs.subs;
  pollux::Publisher& pt = pubs[kTraced];
  const bool inline_mode = rc.cfg.runtime.threading == core::ThreadingMode::kInline;
  AppIdle idle = vs.idle(inline_mode);
  {
    const std::int64_t deadline = Clock::monotonic_ns() + 10'000'000'000;
    while (!vs.connected() ||
           (!rate && sh->pongs_connected.load(std::memory_order_acquire) == 0)) {  // pairs with the child's release
      if (sh->child_state.load(std::memory_order_acquire) == -1)
        return finish(absl::StrCat("pong process: ", sh->error));
      if (StopRequested()) return finish(kInterrupted);
      idle.service();
      vs.drain(16);
      if (Clock::monotonic_ns() > deadline)
        return finish("ping side: publishers not connected to the pong side after 10 s");
      usleep(100);
    }
  }
  std::vector<unsigned char> payload(o.payload, 0x5a);
  if (!rate) {
    // Round trip i: on variant i % nv (traced, untraced, library-only). The echo is matched by
    // sequence; a late echo of a timed-out round trip is counted as stale and ignored.
    const std::uint64_t total = static_cast<std::uint64_t>(nv) * (o.warmup + o.count);
    std::uint64_t consecutive_timeouts = 0;
    // UDP's kernel TX timestamp is on the path (between post and the kernel RX stamp); RDMA's
    // send CQE is not (AddSendCompletion below); shm has none.
    // The XDP datapath's sends carry no kernel TX timestamp: with udp.kernel_timestamps the
    // library records the hand-over to its AF_XDP port in its place.
    SendCompletionWait send_completions(rc.cfg.transport == core::TransportKind::kUdp);
    r.planned = total;
    bool announced = false;
    for (std::uint64_t i = 0; i < total && err.empty() && !StopRequested(); r.completed = ++i) {
      if (!announced && r.traced.n + r.untraced.n + r.library.n > 0) {
        announced = true;
        AnnounceMeasuring();
      }
      const int variant = static_cast<int>(i % static_cast<std::uint64_t>(nv));
      const bool measured = i >= static_cast<std::uint64_t>(nv) * o.warmup;
      pollux::Publisher& pub = pubs[variant];
      pollux::Subscriber& sub = subs[variant];
      const std::uint64_t seq = i + 1;
      std::memcpy(payload.data(), &seq, 8);
      bool got = false;
      std::int64_t t1 = 0;
      Sample sample;
      bool have_trace = false;
      std::uint64_t ping_sequence = 0;  // the traced ping's Message::sequence, from the echo
      std::int64_t rt[4] = {};          // ping offer, ping delivery (pong side), echo offer, echo delivery
      auto on_pong = [&](const pollux::Message& m) {
        const std::int64_t now = Clock::now_ns();
        std::uint64_t s = 0;
        if (m.payload.size() < kPongBytes) return;
        std::memcpy(&s, m.payload.data(), 8);
        if (s != seq) {
          ++r.stale;
          return;
        }
        t1 = now;
        got = true;
        std::uint64_t flag = 0;
        std::memcpy(&flag, m.payload.data() + 8, 8);
        if (flag == 1) {
          std::int64_t ns7[7];
          std::memcpy(ns7, m.payload.data() + 16, sizeof ns7);
          sample = sample_from_stage_times(ns7);
          std::memcpy(&sample.ns[kKernelRx], m.payload.data() + kPongKernelRx, 8);
          std::memcpy(&ping_sequence, m.payload.data() + kPongSequence, 8);
          have_trace = true;
          if (m.trace != nullptr) {
            rt[0] = ns7[pollux::StageTimes::kOffer];
            rt[1] = ns7[pollux::StageTimes::kDelivery];
            rt[2] = m.trace->ns[pollux::StageTimes::kOffer];
            rt[3] = m.trace->ns[pollux::StageTimes::kDelivery];
          }
        }
      };
      const std::int64_t t0 = Clock::now_ns();
      bool offered = true;
      for (std::uint32_t b = 0; b < o.burst && offered; ++b) {  // --burst: the pong answers the last
        const std::uint64_t last = b + 1 == o.burst ? 1 : 0;
        std::memcpy(payload.data() + 8, &last, 8);
        offered = OfferRetry(pub, payload.data(), payload.size(), idle, timeout_ns, &err);
      }
      if (!offered) break;
      std::int64_t deadline = 0;
      for (std::uint32_t k = 0; !got; ++k) {
        if (sub.poll(on_pong, 16) > 0) continue;
        if ((k & 255) == 255) {
          if (StopRequested()) break;
          const std::int64_t now = Clock::now_ns();
          if (deadline == 0) deadline = now + timeout_ns;
          if (now > deadline) break;
        }
        idle.idle();
      }
      if (!got && StopRequested()) break;  // the round trip in flight is neither measured nor a timeout
      if (!got) {
        ++r.timeouts;
        if (++consecutive_timeouts > 20) err = "20 round trips in a row without an echo";
        continue;
      }
      consecutive_timeouts = 0;
      if (variant == kLibraryOnly) {
        if (!measured) continue;
        r.library.add((static_cast<double>(t1 - t0) - clock_cost) / 2.0);
        if (have_trace) (void)r.dec_library->add(sample);
        continue;
      }
      if (have_trace && send_completions.wanted()) {
        // The ping's local send completion (UDP: the kernel's TX timestamp), recorded by the
        // ping publisher's duties: inline, its offer()/service() (run them for a bounded
        // while); dedicated, the poller (yield to it). After the echo, so off the timed path.
        sample.ns[kSendCompletion] = send_completions.wait(pt, ping_sequence, idle);
      }
      if (!measured) continue;
      const double half = (static_cast<double>(t1 - t0) - clock_cost) / 2.0;
      (variant == kTraced ? r.traced : r.untraced).add(half);
      if (variant == kTraced && o.burst <= 1 && t0 <= rt[0] && rt[0] <= rt[1] && rt[1] <= rt[2] && rt[2] <= rt[3] &&
          rt[3] <= t1 && rt[0] != 0) {
        const std::int64_t cut[6] = {t0, rt[0], rt[1], rt[2], rt[3], t1};
        for (int k = 0; k < RunResult::kRtParts; ++k) {
          r.rt_parts[k].add(static_cast<double>(cut[k + 1] - cut[k]) - clock_cost);
        }
      }
      if (have_trace) {
        if (send_completions.wanted() && sample.ns[kSendCompletion] == 0) ++r.send_completion_missing;
        // RDMA: the send CQE is off the summed path (on RC it follows the receiver's ACK).
        if (rc.cfg.transport == core::TransportKind::kRdma)
          AddSendCompletion(r, pub, ping_sequence, sample, idle, clock_cost);
        (void)r.dec->add(sample);
      }
    }
  } else {
    // Open loop: message k at t0 + k / rate, on variant k % nv.
    const std::uint64_t total = static_cast<std::uint64_t>(nv) * (o.warmup + o.count);
    const double period = 1e9 / o.rate;
    const std::int64_t t0 = Clock::now_ns() + 2'000'000;
    std::uint64_t sent = 0;
    r.planned = total;
    for (std::uint64_t k = 0; k < total && err.empty() && !StopRequested(); ++k) {
      if (k == static_cast<std::uint64_t>(nv) * o.warmup + 1) AnnounceMeasuring();
      const std::int64_t tk = t0 + static_cast<std::int64_t>(static_cast<double>(k) * period);
      for (;;) {
        const std::int64_t rem = tk - Clock::now_ns();
        if (rem <= 0 || StopRequested()) break;
        if (rem > 150'000) {
          idle.service();
          SleepNs(rem - 100'000);
        } else if (rem > 5'000) {
          idle.service();
          sched_yield();
        } else {
          CpuPause();
        }
      }
      std::memcpy(payload.data(), &tk, 8);
      std::memcpy(payload.data() + 8, &k, 8);
      if (!OfferRetry(pubs[k % static_cast<std::uint64_t>(nv)], payload.data(), payload.size(), idle, timeout_ns,
                      &err)) {
        break;
      }
      ++sent;
    }
    r.sent = r.completed = sent;
    sh->sent.store(sent, std::memory_order_relaxed);
    sh->sender_done.store(1, std::memory_order_release);  // pairs with the child's acquire
  }
  sh->phase.store(2, std::memory_order_release);  // pairs with the child's acquire
  {
    const std::int64_t deadline = Clock::monotonic_ns() + 15'000'000'000;
    while (sh->child_done.load(std::memory_order_acquire) == 0) {  // pairs with the child's release
      idle.service();
      vs.drain(16);  // --rate: no subscribers
      sched_yield();
      if (Clock::monotonic_ns() > deadline) {
        if (err.empty()) err = "pong process did not finish";
        break;
      }
    }
  }
  vs.close();
  if (rate) {
    r.dec->merge(sh->dec);
    r.dec_library->merge(sh->dec_library);
    r.traced.merge(sh->traced_one_way);
    r.untraced.merge(sh->untraced_one_way);
    r.library.merge(sh->library_one_way);
    r.received = sh->received;
    r.lost = sh->lost;
    r.gaps = sh->gaps;
  }
  ctx->reset();
  return finish(err);
}

// RDMA: every run in a process of its own. librdmacm keeps process-wide state (its device list
// with open verbs contexts) from the first rdma_cm call on; a pong process forked from a ping
// process that has already run a Context inherits it and its pings go unanswered (found in the
// VM: the second run of every --ab in one process timed out). So the first process never runs a
// Context: a runner child runs RunOnce (and forks the pong side) and hands the result back
// through a shared mapping (fixed-size members only).
struct RunShared {
  Decomposer dec, dec_library;
  Dist traced, untraced, library, floor, send_cqe;
  Dist rt_parts[RunResult::kRtParts];
  bool library_only = false;
  FloorKind floor_kind = FloorKind::kNone;
  std::uint64_t timeouts = 0, stale = 0, lost = 0, gaps = 0, sent = 0, received = 0;
  std::uint64_t send_cqe_missing = 0, send_cqe_before_rx = 0, send_cqe_before_delivery = 0;
  bool interrupted = false, port_taken = false;
  std::uint64_t completed = 0, planned = 0;
  std::atomic<int> done{0};  // the runner's release store pairs with the parent's acquire load
  char error[2048] = {};
};

// What a run leaves in runtime.shm_dir when one of its processes was killed before it could close
// its Context: stream logs and counters named after the run, and CPU claims naming it. The name
// (lat<pid>r<run>, per invocation and run) carries this process's pid, and this process is alive,
// so no other process uses it. A claim is removed under its lock, as a releasing holder does, and
// only while nobody holds it and it still names this run.
void RemoveRunFiles(const core::Config& cfg) {
  const std::string& dir = cfg.runtime.shm_dir;
  const std::string& name = cfg.runtime.name;
  const std::string prefix = absl::StrCat("pollux-", name, "-");
  std::vector<std::string> files;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n.rfind(prefix, 0) == 0 && (n.ends_with(".log") || n.ends_with(".counters"))) files.push_back(dir + "/" + n);
    }
    closedir(d);
  }
  for (const std::string& f : files) (void)unlink(f.c_str());
  for (int cpu : core::claimed_cpus(dir)) {
    if (core::read_claim(dir, cpu).name != name) continue;
    const std::string path = core::claim_path(dir, cpu);
    const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat locked {
    }, now{};
    if (flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &locked) == 0 && lstat(path.c_str(), &now) == 0 &&
        locked.st_ino == now.st_ino && locked.st_dev == now.st_dev && core::read_claim(dir, cpu).name == name) {
      (void)unlink(path.c_str());
    }
    close(fd);
  }
}

RunResult RunIsolatedOnce(const Options& o, const RunConfig& rc, double clock_cost, PortReservation& ports) {
  if (rc.cfg.transport != core::TransportKind::kRdma) return RunOnce(o, rc, clock_cost, ports);
  RunResult r = StartResult(rc);
  void* p = mmap(nullptr, sizeof(RunShared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    r.error = absl::StrCat("mmap: ", std::strerror(errno));
    return r;
  }
  RunShared* rs = new (p) RunShared();
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    r.error = absl::StrCat("fork: ", std::strerror(errno));
  } else if (pid == 0) {
    // Dies with the first process (SIGTERM: it stops its run as on Ctrl-C); see RunOnce.
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent) _exit(4);
    RunResult x = RunOnce(o, rc, clock_cost, ports);
    rs->dec = *x.dec;
    rs->dec_library = *x.dec_library;
    rs->traced = x.traced;
    rs->untraced = x.untraced;
    rs->library = x.library;
    rs->library_only = x.library_only;
    for (int k = 0; k < RunResult::kRtParts; ++k) rs->rt_parts[k] = x.rt_parts[k];
    rs->floor = x.floor;
    rs->send_cqe = x.send_cqe;
    rs->floor_kind = x.floor_kind;
    rs->timeouts = x.timeouts;
    rs->stale = x.stale;
    rs->lost = x.lost;
    rs->gaps = x.gaps;
    rs->sent = x.sent;
    rs->received = x.received;
    rs->send_cqe_missing = x.send_cqe_missing;
    rs->send_cqe_before_rx = x.send_cqe_before_rx;
    rs->send_cqe_before_delivery = x.send_cqe_before_delivery;
    rs->interrupted = x.interrupted;
    rs->port_taken = x.port_taken;
    rs->completed = x.completed;
    rs->planned = x.planned;
    std::snprintf(rs->error, sizeof rs->error, "%s", x.error.c_str());
    rs->done.store(1, std::memory_order_release);  // pairs with the parent's acquire below
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(0);
  } else {
    // The runner gets Ctrl-C too and stops its run by itself: time to reap its pong process.
    const int status = ReapChild(pid, false, 15);
    if (rs->done.load(std::memory_order_acquire) == 0) {  // pairs with the runner's release
      if (g_stop_signal != 0) {
        r.interrupted = true;
      } else {
        r.error = absl::StrFormat("the run's process ended without a result (status %d)", status);
      }
    } else {
      r.dec = std::make_unique<Decomposer>(rs->dec);
      r.dec_library = std::make_unique<Decomposer>(rs->dec_library);
      r.traced = rs->traced;
      r.untraced = rs->untraced;
      r.library = rs->library;
      r.library_only = rs->library_only;
      for (int k = 0; k < RunResult::kRtParts; ++k) r.rt_parts[k] = rs->rt_parts[k];
      r.floor = rs->floor;
      r.send_cqe = rs->send_cqe;
      r.floor_kind = rs->floor_kind;
      r.timeouts = rs->timeouts;
      r.stale = rs->stale;
      r.lost = rs->lost;
      r.gaps = rs->gaps;
      r.sent = rs->sent;
      r.received = rs->received;
      r.send_cqe_missing = rs->send_cqe_missing;
      r.send_cqe_before_rx = rs->send_cqe_before_rx;
      r.send_cqe_before_delivery = rs->send_cqe_before_delivery;
      r.interrupted = rs->interrupted;
      r.port_taken = rs->port_taken;
      r.completed = rs->completed;
      r.planned = rs->planned;
      r.error = rs->error;
    }
  }
  if (r.dec == nullptr) r.dec = std::make_unique<Decomposer>(clock_cost);
  if (r.dec_library == nullptr) r.dec_library = std::make_unique<Decomposer>(clock_cost);
  rs->~RunShared();
  munmap(p, sizeof(RunShared));
  return r;
}

// One run of the configuration with `extra` overrides (an A/B side; none for a plain run) as run
// number `run`, and the cleanup of what its processes left. UDP ports the tool picks
// (RunConfig::picks_udp_ports) are picked again when one was taken between the pick and its
// bind: up to 3 attempts.
RunResult RunIsolated(const Options& o, const std::vector<std::string>& extra, int run, double clock_cost) {
  for (int attempt = 1;; ++attempt) {
    RunResult failed;
    failed.dec = std::make_unique<Decomposer>(clock_cost);
    failed.dec_library = std::make_unique<Decomposer>(clock_cost);
    absl::StatusOr<RunConfig> rc = Compose(o, extra, run);
    PortReservation ports;
    if (rc.ok() && rc->picks_udp_ports) {
      if (absl::Status st = ports.reserve(kTopicCount); !st.ok()) {
        failed.error = std::string(st.message());
        return failed;
      }
      rc = Compose(o, extra, run, ports.ports());
    }
    if (!rc.ok()) {
      failed.error = std::string(rc.status().message());
      return failed;
    }
    RunResult r = RunIsolatedOnce(o, *rc, clock_cost, ports);
    ports.clear();
    RemoveRunFiles(rc->cfg);
    if (!r.port_taken || !rc->picks_udp_ports || attempt == 3 || r.interrupted) return r;
    std::fprintf(stderr,
                 "pollux-latency: %s\npollux-latency: a picked UDP port was taken before it was bound; "
                 "picking others (attempt %d of 3)\n",
                 r.error.c_str(), attempt + 1);
  }
}

// ---- output -----------------------------------------------------------------------------------------

std::string Method(const Options& o) { return o.rate > 0 ? "one-way (from the scheduled send)" : "RTT/2"; }

// With --burst the checks compare unlike quantities: say so under the perturbation line.
void AddBurstNote(std::uint32_t burst, Checks* c) {
  if (burst <= 1) return;
  if (!c->perturbation_note.empty()) c->perturbation_note += "; ";
  c->perturbation_note += absl::StrFormat(
      "--burst %u: a round trip spans the whole burst, so the RTT/2 figures and the coverage below compare the "
      "burst's last message's one-way with half the burst's round trip, not like with like",
      burst);
}

Checks ChecksOf(const Options& o, const RunResult& r) {
  Checks c = r.checks();
  c.method = Method(o);
  if (c.have_library_only) {
    c.perturbation_note =
        "udp.kernel_timestamps = true: the decomposed stream's sends ask the kernel for a TX timestamp (skb clone, "
        "error queue) and its sockets take RX stamps; the untraced and the library-only streams turn them off per "
        "stream ([[streams]] kernel_timestamps = false), so the perturbation above is the library's own tracing";
  } else if (r.kernel_tx_stamps) {
    c.perturbation_note =
        "with udp.kernel_timestamps = true the traced sends also ask the kernel for a TX timestamp, which it "
        "charges to them (skb clone, error queue); the library's own tracing alone: --set "
        "udp.kernel_timestamps=false";
  }
  AddBurstNote(o.burst, &c);
  return c;
}

std::string Us(double ns) { return absl::StrFormat("%.3f", ns / 1e3); }

std::string RunJson(const Options& o, const RunResult& r, const PointNotes& notes) {
  const Checks c = ChecksOf(o, r);
  std::string out = "{" + json_decomposition(*r.dec, notes);
  absl::StrAppendFormat(&out,
                        ", \"untraced\": {\"rtt_half_p50_ns\": %d, \"p50_ns\": %d, \"p99_ns\": %d, \"mean_ns\": %s, "
                        "\"count\": %u, \"method\": %s}",
                        r.untraced.p(50), r.untraced.p(50), r.untraced.p(99), json_number(r.untraced.mean()),
                        r.untraced.n, json_string(Method(o)));
  absl::StrAppendFormat(&out,
                        ", \"traced\": {\"rtt_half_p50_ns\": %d, \"p50_ns\": %d, \"p99_ns\": %d, \"mean_ns\": %s, "
                        "\"count\": %u, \"method\": %s}",
                        r.traced.p(50), r.traced.p(50), r.traced.p(99), json_number(r.traced.mean()), r.traced.n,
                        json_string(Method(o)));
  absl::StrAppendFormat(&out, ", \"perturbation_pct\": %s, \"coverage_pct\": %s, \"kernel_tx_timestamps\": %s",
                        c.have_untraced ? json_number(c.perturbation_pct()) : "null",
                        c.have_untraced ? json_number(c.coverage_pct(*r.dec)) : "null",
                        r.kernel_tx_stamps ? "true" : "false");
  // UDP with kernel timestamps: the library-only traced stream, and what the kernel's stamps
  // add on top of it (perturbation_pct and coverage_pct above are then the library-only ones).
  if (c.have_library_only) {
    const Dist& e = r.dec_library->end_to_end();
    absl::StrAppendFormat(
        &out,
        ", \"library_only\": {\"rtt_half_p50_ns\": %d, \"p50_ns\": %d, \"p99_ns\": %d, \"mean_ns\": %s, "
        "\"count\": %u, \"method\": %s, \"end_to_end_p50_ns\": %s}, \"traced_perturbation_pct\": %s, "
        "\"kernel_timestamps_cost_pct\": %s, \"decomposed_coverage_pct\": %s",
        r.library.p(50), r.library.p(50), r.library.p(99), json_number(r.library.mean()), r.library.n,
        json_string(Method(o)), e.n ? absl::StrCat(e.p(50)) : std::string("null"),
        json_number(c.traced_perturbation_pct()), json_number(c.kernel_timestamps_pct()),
        json_number(c.decomposed_coverage_pct(*r.dec)));
  } else {
    out += ", \"library_only\": null";
  }
  if (r.floor.n > 0) {
    absl::StrAppendFormat(
        &out, ", \"floor\": {\"kind\": %s, \"rtt_half_p50_ns\": %d, \"rtt_half_p99_ns\": %d, \"count\": %u}",
        json_string(FloorName(r.floor_kind)), r.floor.p(50), r.floor.p(99), r.floor.n);
  } else {
    absl::StrAppendFormat(&out, ", \"floor\": null, \"floor_note\": %s",
                          json_string(o.rate > 0 ? "no floor in --rate mode" : FloorName(r.floor_kind)));
  }
  if (r.send_cqe.n > 0 || r.send_cqe_missing > 0) {
    absl::StrAppendFormat(
        &out,
        ", \"send_completion\": {\"from\": \"post\", \"on_path\": false, \"mean_ns\": %s, \"p50_ns\": %d, "
        "\"p99_ns\": %d, \"count\": %u, \"missing\": %u, \"before_receive_pct\": %s, "
        "\"before_delivery_pct\": %s}",
        json_number(r.send_cqe.mean()), r.send_cqe.p(50), r.send_cqe.p(99), r.send_cqe.n, r.send_cqe_missing,
        json_number(r.send_cqe.n ? 100.0 * static_cast<double>(r.send_cqe_before_rx) / static_cast<double>(r.send_cqe.n)
                                 : 0.0),
        json_number(r.send_cqe.n
                        ? 100.0 * static_cast<double>(r.send_cqe_before_delivery) / static_cast<double>(r.send_cqe.n)
                        : 0.0));
  }
  if (r.rt_parts[0].n > 0) {
    static constexpr const char* kNames[RunResult::kRtParts] = {"ping_call", "ping_one_way", "pong_turnaround",
                                                                "echo_one_way", "echo_to_timer"};
    out += ", \"round_trip\": {\"from\": \"traced round trips, cut at the ping's and the echo's stamps\", \"parts\": [";
    for (int k = 0; k < RunResult::kRtParts; ++k) {
      absl::StrAppendFormat(&out, "%s{\"name\": %s, \"mean_ns\": %s, \"p50_ns\": %d, \"count\": %u}", k ? ", " : "",
                            json_string(kNames[k]), json_number(r.rt_parts[k].mean()), r.rt_parts[k].p(50),
                            r.rt_parts[k].n);
    }
    out += "]}";
  } else {
    out += ", \"round_trip\": null";
  }
  absl::StrAppendFormat(&out, ", \"timeouts\": %u, \"stale\": %u, \"send_completion_missing\": %u", r.timeouts, r.stale,
                        r.send_completion_missing);
  if (r.interrupted) {
    absl::StrAppendFormat(&out, ", \"interrupted\": {\"signal\": %s, \"completed\": %u, \"planned\": %u}",
                          json_string(cli::signal_name(g_stop_signal)), r.completed, r.planned);
  }
  if (o.rate > 0) {
    absl::StrAppendFormat(&out, ", \"sent\": %u, \"received\": %u, \"lost\": %u, \"gaps\": %u", r.sent, r.received,
                          r.lost, r.gaps);
  }
  return out + "}";
}

std::string RunTable(const Options& o, const RunResult& r, const PointNotes& notes) {
  std::string out = format_table(*r.dec, notes, ChecksOf(o, r));
  if (r.floor.n == 0 && o.rate <= 0) absl::StrAppendFormat(&out, "floor: %s\n", FloorName(r.floor_kind));
  if (r.send_cqe.n > 0 || r.send_cqe_missing > 0) {
    const double n = static_cast<double>(std::max<std::uint64_t>(r.send_cqe.n, 1));
    absl::StrAppendFormat(
        &out,
        "local send completion (send CQE polled; off the summed path: on RC it follows the receiver's "
        "ACK): post -> send CQE mean %s p50 %s p99 %s us; before the pong side's receive stamp in "
        "%.1f%%, before its delivery in %.1f%% of %u; %u traced pings without it within 5 ms\n",
        Us(r.send_cqe.mean()), Us(static_cast<double>(r.send_cqe.p(50))), Us(static_cast<double>(r.send_cqe.p(99))),
        100.0 * static_cast<double>(r.send_cqe_before_rx) / n,
        100.0 * static_cast<double>(r.send_cqe_before_delivery) / n, r.send_cqe.n, r.send_cqe_missing);
  }
  if (r.rt_parts[0].n > 0) {
    const Dist* p = r.rt_parts;
    double sum = 0;
    for (int k = 0; k < RunResult::kRtParts; ++k) sum += p[k].mean();
    auto mp = [](const Dist& d) { return absl::StrCat(Us(d.mean()), " (", Us(static_cast<double>(d.p(50))), ")"); };
    absl::StrAppendFormat(
        &out,
        "traced round trip cut at the stamps (mean (p50) us; %u round trips): t0 -> ping offer %s, "
        "ping one-way %s, pong turnaround (delivery -> echo offer) %s, echo one-way %s, echo delivery "
        "-> t1 %s; sum of means %s = traced RTT mean %s. The ping's one-way is %.1f%% of the two "
        "one-ways; the turnaround and the two calls are %.1f%% of the RTT (means)\n",
        p[0].n, mp(p[0]), mp(p[1]), mp(p[2]), mp(p[3]), mp(p[4]), Us(sum), Us(2.0 * r.traced.mean()),
        100.0 * p[1].mean() / std::max(1.0, p[1].mean() + p[3].mean()),
        100.0 * (p[0].mean() + p[2].mean() + p[4].mean()) / std::max(1.0, sum));
  }
  if (r.timeouts || r.stale)
    absl::StrAppendFormat(&out, "round trips timed out: %u, late echoes ignored: %u\n", r.timeouts, r.stale);
  if (r.send_completion_missing) {
    absl::StrAppendFormat(&out, "traced pings without a send completion (not decomposed: a different layout): %u\n",
                          r.send_completion_missing);
  }
  if (o.rate > 0) {
    absl::StrAppendFormat(&out, "sent %u, received %u, lost %u (%u gaps)\n", r.sent, r.received, r.lost, r.gaps);
  }
  if (r.interrupted) {
    absl::StrAppendFormat(&out,
                          "interrupted by %s after %u of the %u %s planned (warm-up included): the figures above "
                          "are those measured until then\n",
                          cli::signal_name(g_stop_signal), r.completed, r.planned,
                          o.rate > 0 ? "messages" : "round trips");
  }
  return out;
}

// A/B: per-pair deltas (B - A).
struct Spread {
  double median = 0, lo = 0, hi = 0;
  bool valid = false;
};
Spread SpreadOf(std::vector<double> v) {
  Spread s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.valid = true;
  s.lo = v.front();
  s.hi = v.back();
  const std::size_t n = v.size();
  s.median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
  return s;
}

struct AbResult {
  AbSpec spec;
  std::vector<RunResult> a, b;  // one per pair
  Decomposer merged_a, merged_b, merged_library_a, merged_library_b;
  Dist untraced_a, untraced_b, traced_a, traced_b, floor_a, floor_b, library_a, library_b;
  bool merged_ok = true;
};

std::string SideLabel(const AbSpec& s, bool b) { return absl::StrCat(s.key, "=", b ? s.b : s.a); }

std::string AbTable(const Options& o, const AbResult& ab, const PointNotes& notes) {
  std::string out;
  const int pairs = static_cast<int>(ab.a.size());
  std::vector<StageRow> ra = stage_rows(ab.merged_a, notes), rb = stage_rows(ab.merged_b, notes);
  absl::StrAppendFormat(&out, "\nA/B %s: %s (A, before) vs %s (B, after), %d interleaved pairs\n", ab.spec.key,
                        ab.spec.a, ab.spec.b, pairs);
  absl::StrAppendFormat(&out, "%-48s %10s %10s %12s %22s\n", "stage (mean us)", "A", "B", "B-A median",
                        "B-A spread (pairs)");
  for (int s = 0; s < kStageCount; ++s) {
    const bool pa = ra[s].present, pb = rb[s].present;
    if (!pa && !pb) {
      absl::StrAppendFormat(&out, "%-48s %10s %10s\n", ra[s].label, "absent", "absent");
      continue;
    }
    std::vector<double> d;
    for (int i = 0; i < pairs; ++i) {
      if (ab.a[i].dec->stage_present(s) && ab.b[i].dec->stage_present(s)) {
        d.push_back(ab.b[i].dec->stage(s).mean() - ab.a[i].dec->stage(s).mean());
      }
    }
    const Spread sp = SpreadOf(d);
    absl::StrAppendFormat(&out, "%-48s %10s %10s %12s %22s\n", ra[s].label, pa ? Us(ra[s].mean_ns) : "absent",
                          pb ? Us(rb[s].mean_ns) : "absent", sp.valid ? absl::StrFormat("%+.3f", sp.median / 1e3) : "-",
                          sp.valid ? absl::StrFormat("[%+.3f, %+.3f]", sp.lo / 1e3, sp.hi / 1e3) : "-");
  }
  auto line = [&](const char* name, auto get) {
    std::vector<double> d;
    for (int i = 0; i < pairs; ++i) d.push_back(get(ab.b[i]) - get(ab.a[i]));
    const Spread sp = SpreadOf(d);
    double a = 0, b = 0;
    for (int i = 0; i < pairs; ++i) {
      a += get(ab.a[i]) / pairs;
      b += get(ab.b[i]) / pairs;
    }
    absl::StrAppendFormat(&out, "%-48s %10s %10s %12s %22s\n", name, Us(a), Us(b),
                          absl::StrFormat("%+.3f", sp.median / 1e3),
                          absl::StrFormat("[%+.3f, %+.3f]", sp.lo / 1e3, sp.hi / 1e3));
  };
  line("end-to-end mean (sum of stages; pairs' mean)", [](const RunResult& r) { return r.dec->end_to_end().mean(); });
  line("end-to-end p50 (pairs' mean)",
       [](const RunResult& r) { return static_cast<double>(r.dec->end_to_end().p(50)); });
  line(absl::StrCat("untraced ", Method(o), " p50 (pairs' mean)").c_str(),
       [](const RunResult& r) { return static_cast<double>(r.untraced.p(50)); });
  if (ab.a[0].library_only && ab.b[0].library_only) {
    line(absl::StrCat("library-only traced ", Method(o), " p50 (pairs' mean)").c_str(),
         [](const RunResult& r) { return static_cast<double>(r.library.p(50)); });
  }
  if (ab.a[0].send_cqe.n > 0) {
    line("post -> send CQE mean (off the path; pairs' mean)", [](const RunResult& r) { return r.send_cqe.mean(); });
  }
  return out;
}

std::string AbJson(const Options& o, const AbResult& ab, const PointNotes& notes) {
  const int pairs = static_cast<int>(ab.a.size());
  std::string out = absl::StrFormat("{\"key\": %s, \"a\": %s, \"b\": %s, \"pairs\": [", json_string(ab.spec.key),
                                    json_string(ab.spec.a), json_string(ab.spec.b));
  for (int i = 0; i < pairs; ++i) {
    if (i) out += ", ";
    absl::StrAppendFormat(&out, "{\"a\": %s, \"b\": %s}", RunJson(o, ab.a[i], notes), RunJson(o, ab.b[i], notes));
  }
  std::vector<double> de, dp, du;
  for (int i = 0; i < pairs; ++i) {
    de.push_back(ab.b[i].dec->end_to_end().mean() - ab.a[i].dec->end_to_end().mean());
    dp.push_back(static_cast<double>(ab.b[i].dec->end_to_end().p(50) - ab.a[i].dec->end_to_end().p(50)));
    du.push_back(static_cast<double>(ab.b[i].untraced.p(50) - ab.a[i].untraced.p(50)));
  }
  const Spread se = SpreadOf(de), sp = SpreadOf(dp), su = SpreadOf(du);
  absl::StrAppendFormat(&out,
                        "], \"delta_ns\": %s, \"delta_spread_ns\": [%s, %s], \"delta_p50_ns\": %s, "
                        "\"delta_p50_spread_ns\": [%s, %s], \"untraced_delta_p50_ns\": %s, "
                        "\"untraced_delta_p50_spread_ns\": [%s, %s], \"stage_deltas\": [",
                        json_number(se.median), json_number(se.lo), json_number(se.hi), json_number(sp.median),
                        json_number(sp.lo), json_number(sp.hi), json_number(su.median), json_number(su.lo),
                        json_number(su.hi));
  for (int s = 0; s < kStageCount; ++s) {
    std::vector<double> d;
    for (int i = 0; i < pairs; ++i) {
      if (ab.a[i].dec->stage_present(s) && ab.b[i].dec->stage_present(s)) {
        d.push_back(ab.b[i].dec->stage(s).mean() - ab.a[i].dec->stage(s).mean());
      }
    }
    const Spread x = SpreadOf(d);
    if (s) out += ", ";
    absl::StrAppendFormat(&out, "{\"name\": %s, \"delta_mean_ns\": %s, \"spread_ns\": [%s, %s]}",
                          json_string(point_name(s + 1)), x.valid ? json_number(x.median) : "null",
                          x.valid ? json_number(x.lo) : "null", x.valid ? json_number(x.hi) : "null");
  }
  absl::StrAppendFormat(&out, "], \"a_merged\": {%s}, \"b_merged\": {%s}}", json_decomposition(ab.merged_a, notes),
                        json_decomposition(ab.merged_b, notes));
  return out;
}

bool WriteFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  if (!f) {
    std::fprintf(stderr, "pollux-latency: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
    return false;
  }
  return true;
}

// FILE.hgrm -> FILE<infix>.hgrm
std::string WithInfix(const std::string& path, const std::string& infix) {
  const std::size_t slash = path.rfind('/');
  const std::size_t dot = path.rfind('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return path + infix;
  return path.substr(0, dot) + infix + path.substr(dot);
}

bool WriteHgrms(const std::string& path, const std::string& side, const Decomposer& d, const Dist& untraced,
                const Dist& floor) {
  bool ok = WriteFile(WithInfix(path, side), hgrm(d.end_to_end()));
  for (int s = 0; s < kStageCount; ++s) {
    if (d.stage_present(s))
      ok &= WriteFile(WithInfix(path, side + "." + std::string(point_name(s + 1))), hgrm(d.stage(s)));
  }
  if (untraced.n) ok &= WriteFile(WithInfix(path, side + ".untraced"), hgrm(untraced));
  if (floor.n) ok &= WriteFile(WithInfix(path, side + ".floor"), hgrm(floor));
  return ok;
}

// One configuration of the plots.
struct PlotConfig {
  std::string label;
  const Decomposer* dec;
  const Dist* untraced;
  const Dist* floor;
};

std::string GnuplotQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'')
      out += "''";
    else
      out.push_back(c);
  }
  return out + "'";
}

std::string PercentileData(const Dist& d) {
  std::string out;
  for (const PercentilePoint& p : percentile_points(d)) {
    if (p.pct >= 100.0) break;
    absl::StrAppendFormat(&out, "%.6f %.3f\n", 1.0 / (1.0 - p.pct / 100.0), static_cast<double>(p.value_ns) / 1e3);
  }
  return out;
}

bool WritePlots(const Options& o, const std::string& title, const std::vector<PlotConfig>& cfgs) {
  const std::string& dir = o.plot_dir;
  mkdir(dir.c_str(), 0755);
  // Stacked bars: one row per configuration, one column per stage present in any.
  std::vector<int> stages;
  for (int s = 0; s < kStageCount; ++s) {
    for (const PlotConfig& c : cfgs) {
      if (c.dec->stage_present(s)) {
        stages.push_back(s);
        break;
      }
    }
  }
  std::string dat = "config";
  for (int s : stages) {
    dat.push_back('\t');
    dat.append(point_name(s + 1));
  }
  dat += "\n";
  for (const PlotConfig& c : cfgs) {
    dat += c.label;
    // A stage shorter than the clock read subtracted from it can have a mean below 0: drawn as 0.
    for (int s : stages) {
      absl::StrAppendFormat(&dat, "\t%.3f",
                            c.dec->stage_present(s) ? std::max(0.0, c.dec->stage(s).mean() / 1e3) : 0.0);
    }
    dat += "\n";
  }
  bool ok = WriteFile(dir + "/latency-stages.dat", dat);
  std::string gp = absl::StrFormat(
      "set terminal pngcairo size 1100,650 noenhanced\nset output %s\nset datafile separator tab\n"
      "set title %s\nset style data histograms\nset style histogram rowstacked\nset style fill solid 0.8 border -1\n"
      "set boxwidth 0.6\nset key outside right top\nset ylabel 'mean one-way latency per stage (us)'\n"
      "set yrange [0:*]\nset xtics rotate by -20\n",
      GnuplotQuote(dir + "/latency-stages.png"), GnuplotQuote(title + ": stage means"));
  if (stages.empty()) {
    gp += "set label 'no stage measured' at graph 0.4,0.5\nplot 0 notitle\n";
  } else {
    absl::StrAppendFormat(&gp, "plot for [i=2:%d] %s using i:xtic(1) title columnheader(i)\n", stages.size() + 1,
                          GnuplotQuote(dir + "/latency-stages.dat"));
  }
  ok &= WriteFile(dir + "/latency-stages.gp", gp);
  // Percentile curves on a nines axis: x = 1/(1-p).
  std::string plots;
  int k = 0;
  auto curve = [&](const Dist& d, const std::string& name) {
    if (d.n == 0) return;
    const std::string file = absl::StrFormat("%s/latency-pct-%d.dat", dir, k++);
    ok &= WriteFile(file, PercentileData(d));
    if (!plots.empty()) plots += ", \\\n     ";
    plots += absl::StrFormat("%s using 1:2 with lines lw 2 title %s", GnuplotQuote(file), GnuplotQuote(name));
  };
  for (std::size_t i = 0; i < cfgs.size(); ++i) {
    const PlotConfig& c = cfgs[i];
    const std::string pre = cfgs.size() > 1 ? c.label + ": " : "";
    curve(c.dec->end_to_end(), pre + "traced one-way (sum of stages)");
    curve(*c.untraced, pre + "untraced " + Method(o));
    if (i == 0 && c.floor != nullptr) curve(*c.floor, pre + "floor RTT/2");
  }
  std::string gp2 = absl::StrFormat(
      "set terminal pngcairo size 1100,650 noenhanced\nset output %s\nset title %s\nset logscale x\nset logscale y\n"
      "set xtics ('0%%%%' 1, '90%%%%' 10, '99%%%%' 100, '99.9%%%%' 1000, '99.99%%%%' 10000, '99.999%%%%' 100000)\n"
      "set xlabel 'percentile'\nset ylabel 'latency (us)'\nset grid\nset key left top\n",
      GnuplotQuote(dir + "/latency-percentiles.png"), GnuplotQuote(title + ": percentiles"));
  gp2 += plots.empty() ? "set label 'no data' at graph 0.4,0.5\nplot 1 notitle\n" : "plot " + plots + "\n";
  ok &= WriteFile(dir + "/latency-percentiles.gp", gp2);
  if (!ok) return false;
  std::fflush(stdout);
  for (const char* script : {"/latency-stages.gp", "/latency-percentiles.gp"}) {
    const std::string path = dir + script;
    const pid_t pid = fork();
    if (pid == 0) {
      execlp("gnuplot", "gnuplot", path.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      absl::FPrintF(stderr, "pollux-latency: gnuplot %s failed (%s); the data files stay in %s\n", path,
                    code == 127 ? "gnuplot is not installed: apt-get install gnuplot-nox"
                                : absl::StrFormat("exit status %d", code),
                    dir);
      return false;
    }
  }
  return true;
}

// --seed: the seed's switches for the configured transport as A/B experiments, and a line for
// each one this machine cannot measure (printed first, and by --seed-plan alone).
std::vector<std::string> AddSeedExperiments(Options& o, const core::Config& cfg) {
  std::vector<std::string> lines;
  auto add = [&](const char* key, const char* a, const char* b, std::uint32_t burst, const std::string& why) {
    o.ab.push_back({key, a, b, burst});
    lines.push_back(absl::StrFormat("seed switch: --ab %s=%s,%s%s (%s)", key, a, b,
                                    burst ? absl::StrFormat(" under --burst %d", burst) : "", why));
  };
  const bool inline_mode = cfg.runtime.threading == core::ThreadingMode::kInline;
  switch (cfg.transport) {
    case core::TransportKind::kRdma: {
      add("rdma.inline_threshold", "0", "256", 0, "inline data off/on");
      add("rdma.signal_every", "1", "16", 0, "signal every send vs 1 in 16");
      add("runtime.idle", "busy-spin", "interrupt", 0,
          inline_mode ? "completion by polling vs interrupt; inline threading: the application thread polls, so "
                        "runtime.idle changes nothing there"
                      : "completion by polling vs interrupt (the poller sleeps on the CQ's completion channel)");
      add("rdma.post_batch", "1", "32", 16,
          inline_mode ? "one doorbell per message vs per burst; inline threading posts every offer by itself, so "
                        "this shows no difference there: use dedicated"
                      : "one doorbell per message vs one per burst");
      bool mlx5 = false;
      const std::string note = rdma_mlx5dv_note(cfg, &mlx5);
      if (mlx5) {
        add("rdma.mlx5dv", "off", "auto", 0, "mlx5dv / BlueFlame off/on");
      } else {
        lines.push_back(note);
      }
      break;
    }
    case core::TransportKind::kUdp:
      add("udp.busy_poll_us", "0", "50", 0, "kernel busy-poll off/on (SO_BUSY_POLL; raising it needs CAP_NET_ADMIN)");
      add("runtime.idle", "busy-spin", "interrupt", 0, "busy-poll vs blocking receive (the poller sleeps in epoll)");
      break;
    case core::TransportKind::kShm:
      add("runtime.idle", "busy-spin", "interrupt", 0, "polling vs sleeping on the futex");
      break;
  }
  const NumaPlan numa = numa_plan(cfg);
  if (numa.local_cpu >= 0 && numa.remote_cpu >= 0) {
    const std::string a = absl::StrFormat("[%d]", numa.local_cpu), b = absl::StrFormat("[%d]", numa.remote_cpu);
    o.ab.push_back({"runtime.poller_cores", a, b, 0});
  }
  lines.push_back(numa.note);
  lines.push_back(
      "mlx5dv / NUMA lines above come from the device and sysfs; pre-registered pool vs ibv_reg_mr per "
      "message is a bench/ harness: pollux-bench-rdma-pingpong --reg-per-message");
  return lines;
}

int Main(int argc, char** argv) {
  Options o = parse_args(argc, argv);
  absl::StatusOr<RunConfig> base = Compose(o, {}, 0);
  if (!base.ok()) {
    std::fprintf(stderr, "pollux-latency: %s\n", std::string(base.status().message()).c_str());
    return kExitUsage;
  }
  if (o.print_config) {
    // With the UDP ports a run would pick now (each run picks its own).
    PortReservation ports;
    if (base->picks_udp_ports && ports.reserve(kTopicCount).ok()) {
      if (absl::StatusOr<RunConfig> c = Compose(o, {}, 0, ports.ports()); c.ok()) base = std::move(c);
    }
    std::fputs(base->cfg.to_toml().c_str(), stdout);
    return 0;
  }
  if (!o.peer_netns.empty()) {
    if (std::string e = OpenPeerNetns(&o); !e.empty()) {
      std::fprintf(stderr, "pollux-latency: %s\n", e.c_str());
      return 1;
    }
  }
  std::vector<std::string> seed_lines;
  if (o.seed) {
    if (o.rate > 0) UsageError("--seed runs ping-pong experiments; drop --rate");
    seed_lines = AddSeedExperiments(o, base->cfg);
    for (const std::string& l : seed_lines) absl::PrintF("%s\n", l);
    if (o.seed_plan) return 0;
    absl::PrintF("\n");
  }
  // Every --ab side must compose too, before anything runs.
  for (const AbSpec& ab : o.ab) {
    for (const std::string& v : {ab.a, ab.b}) {
      if (absl::StatusOr<RunConfig> c = Compose(o, {ab.key + "=" + v}, 0); !c.ok()) {
        std::fprintf(stderr, "pollux-latency: --ab %s=%s: %s\n", ab.key.c_str(), v.c_str(),
                     std::string(c.status().message()).c_str());
        return kExitUsage;
      }
    }
  }
  signal(SIGPIPE, SIG_IGN);
  InstallStopHandlers();
  // A stop request: what was measured is printed by the caller; the status is 128 + the signal.
  auto stopped = [](const std::string& what) {
    std::fflush(stdout);
    std::fprintf(stderr, "pollux-latency: stopped by %s%s; the pong process was reaped and the run's files removed\n",
                 cli::signal_name(g_stop_signal), what.c_str());
    return 128 + g_stop_signal;
  };
  // One calibration for both processes of every run: made here, inherited by fork.
  Clock::init(base->cfg.runtime.shm_dir);
  if (o.pin_split) host::pin(o.cpu_a);
  const double clock_cost = host::clock_cost_ns();
  const std::string transport = TransportName(base->cfg);
  PointNotes notes = transport_notes(transport);
  if (o.rate > 0 && base->cfg.transport == core::TransportKind::kUdp) {
    notes[kSendCompletion] = "not joined in --rate mode (the kernel's TX timestamp stays in the sending process)";
  }
  const bool xdp_kick_stamp = base->ping_xdp && transport::udp::config(base->cfg).kernel_timestamps;
  if (base->ping_xdp && !xdp_kick_stamp) {
    notes[kSendCompletion] =
        "absent: udp.datapath = \"xdp\" on the sending side and udp.kernel_timestamps = false (with it, the stage "
        "ends where the library hands the datagram to its AF_XDP port)";
  }
  if (base->pong_xdp) {
    notes[kKernelRx] =
        "absent: udp.datapath = \"xdp\" on the receiving side (frames come off the AF_XDP RX ring, past the kernel's "
        "UDP stack: no SO_TIMESTAMPING RX timestamp exists; receive is stamped from the poller's clock)";
  }
  if (base->cfg.transport == core::TransportKind::kRdma) {
    // Asked once, of the ping side's device (both sides use the same configuration).
    const std::string ts = rdma_completion_timestamp_note(base->cfg);
    notes[kKernelRx] = ts;
    notes[kSendCompletion] =
        "off the summed path on RC (the send CQE follows the receiver's ACK): post -> send CQE is "
        "printed below the table, at CQE poll time; " +
        ts;
  }
  absl::PrintF(
      "pollux-latency: %s, %s, idle %s; %s %s interleaved, %d per variant (+%d warm-up), "
      "trace 1 in %d\n",
      transport, core::threading_name(base->cfg.runtime.threading), core::idle_kind_name(base->cfg.runtime.idle),
      o.rate > 0 ? absl::StrFormat("one-way stream at %.0f msg/s,", o.rate) : std::string("ping-pong,"),
      base->library_only ? "traced (+ kernel timestamps), untraced and traced (library stamps only)"
                         : "traced and untraced",
      o.count, o.warmup, o.trace_every);
  if (o.burst > 1) {
    absl::PrintF(
        "burst: each ping is %d messages back to back; the last one is decomposed, RTT/2 runs from the first "
        "offer to the echo of the last\n",
        o.burst);
  }
  absl::PrintF("config: %s; pinning: %s\n", base->source,
               o.pin_split ? absl::StrFormat("ping side on CPU %d, pong side on CPU %d", o.cpu_a, o.cpu_b) : "none");
  if (!o.peer_netns.empty()) {
    absl::PrintF(
        "network namespaces: ping side in this process's, pong side in %s%s\n", o.peer_netns,
        o.peer_sets.empty() ? "" : absl::StrCat(" (pong side: --peer-set ", absl::StrJoin(o.peer_sets, " "), ")"));
  }
  if (base->cfg.transport == core::TransportKind::kUdp) {
    absl::PrintF("udp datapath: ping side %s, pong side %s\n", base->ping_xdp ? "xdp" : "socket",
                 base->pong_xdp ? "xdp" : "socket");
    if (xdp_kick_stamp) {
      absl::PrintF(
          "send_completion on the XDP datapath: the clock read as the library hands the datagram to its AF_XDP "
          "port (not a kernel stamp); from there the frame is built in the UMEM, posted on the TX ring and the kernel "
          "kicked (sendto: in copy mode it transmits inside that call, and on veth also runs the peer's XDP program "
          "and fills its RX ring), so send_completion -> receive holds the TX kick, the wire and the receiver "
          "noticing the frame in its ring\n");
    }
  }
  absl::PrintF("machine: %s\n", host::machine_description());
  absl::PrintF(
      "clock: Clock::now_ns() costs %.1f ns (measured now; subtracted once per stamp). One host, one %s: "
      "both processes' stamps are comparable (across hosts only RTT/2 would be).\n\n",
      clock_cost, core::Clock::using_tsc() ? "TSC" : "CLOCK_MONOTONIC");
  std::fflush(stdout);

  std::string json = absl::StrFormat(
      "{\"tool\": \"pollux-latency\", \"transport\": %s, \"threading\": %s, \"idle\": %s, "
      "\"mode\": %s, \"rate\": %s, \"count\": %u, \"warmup\": %u, \"trace_every\": %u, "
      "\"one_host\": true, \"machine\": %s, \"clock\": %s",
      json_string(transport), json_string(core::threading_name(base->cfg.runtime.threading)),
      json_string(core::idle_kind_name(base->cfg.runtime.idle)), json_string(o.rate > 0 ? "rate" : "ping-pong"),
      o.rate > 0 ? json_number(o.rate) : "null", o.count, o.warmup, o.trace_every,
      json_string(host::machine_description()), json_string(Clock::describe()));
  absl::StrAppendFormat(&json, ", \"burst\": %d", o.burst);
  if (base->cfg.transport == core::TransportKind::kUdp) {
    // What the send_completion stage ends on (null: nothing stamps it).
    absl::StrAppendFormat(&json, ", \"udp_datapath\": {\"ping\": %s, \"pong\": %s}, \"send_completion_source\": %s",
                          json_string(base->ping_xdp ? "xdp" : "socket"),
                          json_string(base->pong_xdp ? "xdp" : "socket"),
                          !transport::udp::config(base->cfg).kernel_timestamps ? "null"
                          : xdp_kick_stamp                                     ? "\"xdp_port_handover\""
                                                                               : "\"kernel_tx_timestamp\"");
  }
  if (!seed_lines.empty()) {
    json += ", \"seed_notes\": [";
    for (std::size_t i = 0; i < seed_lines.size(); ++i) json += (i ? ", " : "") + json_string(seed_lines[i]);
    json += "]";
  }
  int rc = 0;
  const std::string title =
      absl::StrFormat("pollux-latency %s %s", transport, core::threading_name(base->cfg.runtime.threading));
  if (StopRequested()) return stopped(" before the first run");
  if (o.ab.empty()) {
    RunResult r = RunIsolated(o, {}, 0, clock_cost);
    if (r.interrupted) {
      // What was measured until the stop, if anything: the table, and --json (marked).
      if (r.traced.n + r.untraced.n + r.library.n == 0) return stopped(" before anything was measured");
      std::fputs(RunTable(o, r, notes).c_str(), stdout);
      const std::string run = RunJson(o, r, notes);
      if (!o.json.empty()) (void)WriteFile(o.json, json + ", " + run.substr(1, run.size() - 2) + "}\n");
      return stopped("");
    }
    if (!r.error.empty()) {
      std::fprintf(stderr, "pollux-latency: %s\n", r.error.c_str());
      return 1;
    }
    std::fputs(RunTable(o, r, notes).c_str(), stdout);
    const std::string run = RunJson(o, r, notes);
    json += ", " + run.substr(1, run.size() - 2) + "}\n";
    if (!o.hgrm.empty() && !WriteHgrms(o.hgrm, "", *r.dec, r.untraced, r.floor)) rc = 1;
    if (!o.plot_dir.empty() && !WritePlots(o, title, {{"base", r.dec.get(), &r.untraced, &r.floor}})) rc = 1;
  } else {
    std::vector<std::unique_ptr<AbResult>> results;
    int run_index = 1;
    bool interrupted = false;
    for (std::size_t e = 0; e < o.ab.size() && !interrupted; ++e) {
      const AbSpec& spec = o.ab[e];
      auto ab = std::make_unique<AbResult>();
      ab->spec = spec;
      ab->merged_a.reset(clock_cost);
      ab->merged_b.reset(clock_cost);
      ab->merged_library_a.reset(clock_cost);
      ab->merged_library_b.reset(clock_cost);
      for (int i = 0; i < o.pairs && !interrupted; ++i) {
        // A pair counts once both sides ran in full: a stop drops the pair it interrupted.
        RunResult pair[2];
        for (int side = 0; side < 2; ++side) {
          const std::string v = side == 0 ? spec.a : spec.b;
          absl::PrintF("A/B %s, pair %d/%d: %s ...\n", spec.key, i + 1, o.pairs, SideLabel(spec, side == 1));
          std::fflush(stdout);
          Options run_opts = o;
          if (spec.burst != 0) run_opts.burst = spec.burst;
          pair[side] = RunIsolated(run_opts, {spec.key + "=" + v}, run_index++, clock_cost);
          if (pair[side].interrupted) {
            interrupted = true;
            break;
          }
          if (!pair[side].error.empty()) {
            std::fprintf(stderr, "pollux-latency: %s: %s\n", SideLabel(spec, side == 1).c_str(),
                         pair[side].error.c_str());
            return 1;
          }
        }
        if (interrupted) break;
        for (int side = 0; side < 2; ++side) {
          RunResult& r = pair[side];
          Decomposer& m = side == 0 ? ab->merged_a : ab->merged_b;
          if (!m.merge(*r.dec)) ab->merged_ok = false;
          (side == 0 ? ab->untraced_a : ab->untraced_b).merge(r.untraced);
          (side == 0 ? ab->traced_a : ab->traced_b).merge(r.traced);
          (side == 0 ? ab->floor_a : ab->floor_b).merge(r.floor);
          (side == 0 ? ab->library_a : ab->library_b).merge(r.library);
          (void)(side == 0 ? ab->merged_library_a : ab->merged_library_b).merge(*r.dec_library);
          (side == 0 ? ab->a : ab->b).push_back(std::move(r));
        }
      }
      if (!ab->a.empty()) results.push_back(std::move(ab));
    }
    if (results.empty()) return stopped(" before the first A/B pair was complete");
    std::vector<PlotConfig> plots;
    for (std::size_t k = 0; k < results.size(); ++k) {
      const AbResult& ab = *results[k];
      for (int side = 0; side < 2; ++side) {
        const Decomposer& m = side == 0 ? ab.merged_a : ab.merged_b;
        Checks c;
        c.method = Method(o);
        const Dist& un = side == 0 ? ab.untraced_a : ab.untraced_b;
        const Dist& tr = side == 0 ? ab.traced_a : ab.traced_b;
        const Dist& fl = side == 0 ? ab.floor_a : ab.floor_b;
        c.have_untraced = un.n > 0 && tr.n > 0;
        c.untraced_p50_ns = static_cast<double>(un.p(50));
        c.traced_p50_ns = static_cast<double>(tr.p(50));
        c.floor_p50_ns = fl.n ? static_cast<double>(fl.p(50)) : 0.0;
        const Dist& lib = side == 0 ? ab.library_a : ab.library_b;
        const Decomposer& mlib = side == 0 ? ab.merged_library_a : ab.merged_library_b;
        c.have_library_only = lib.n > 0;
        c.library_only_p50_ns = static_cast<double>(lib.p(50));
        c.library_only_e2e_p50_ns = mlib.end_to_end().n ? static_cast<double>(mlib.end_to_end().p(50)) : 0.0;
        AddBurstNote(ab.spec.burst != 0 ? ab.spec.burst : o.burst, &c);
        absl::PrintF("\n== %s (%s), %d runs merged\n", SideLabel(ab.spec, side == 1),
                     side == 0 ? "A, before" : "B, after", ab.a.size());
        std::fputs(format_table(m, notes, c).c_str(), stdout);
        if (!o.hgrm.empty() && !WriteHgrms(o.hgrm, "." + SideLabel(ab.spec, side == 1), m, un, fl)) rc = 1;
        plots.push_back({SideLabel(ab.spec, side == 1), &m, &un, &fl});
      }
      if (!ab.merged_ok)
        std::printf("note: the pairs' runs did not all pass the same stages; merged tables hold the first layout\n");
      std::fputs(AbTable(o, ab, notes).c_str(), stdout);
    }
    // Top level: the first experiment's A side (merged), then every experiment.
    const AbResult& first = *results[0];
    std::string top = "{" + json_decomposition(first.merged_a, notes);
    absl::StrAppendFormat(
        &top, ", \"untraced\": {\"rtt_half_p50_ns\": %d, \"method\": %s}, \"traced\": {\"rtt_half_p50_ns\": %d}",
        first.untraced_a.p(50), json_string(Method(o)), first.traced_a.p(50));
    json += ", " + top.substr(1) + ", \"ab\": [";
    for (std::size_t k = 0; k < results.size(); ++k) {
      if (k) json += ", ";
      json += AbJson(o, *results[k], notes);
    }
    json += "]";
    if (interrupted) {
      absl::PrintF("\ninterrupted by %s: the A/B tables above hold the pairs complete by then\n",
                   cli::signal_name(g_stop_signal));
      absl::StrAppendFormat(&json, ", \"interrupted\": {\"signal\": %s}", json_string(cli::signal_name(g_stop_signal)));
    }
    json += "}\n";
    if (!interrupted && !o.plot_dir.empty() && !WritePlots(o, title, plots)) rc = 1;
  }
  if (!o.json.empty() && !WriteFile(o.json, json)) rc = 1;
  if (StopRequested()) return stopped("");
  return rc;
}

}  // namespace
}  // namespace pollux::latency

int main(int argc, char** argv) { return pollux::latency::Main(argc, argv); }
