// pollux-bench-rate: open-loop fixed-rate latency sweep through the public API (Context,
// Publisher, Subscriber), per (transport, threading mode, idle strategy, rate), with the CPU
// time of the poller threads and of the application threads. `--help` lists the flags.
//
// Open loop, coordinated omission corrected: message k is scheduled at t_k = t0 + k / rate
// (or the bursty pattern's time); the sender waits until t_k (nanosleep while far, then
// sched_yield, then pause), writes t_k into the payload and offers it; back-pressured offers
// are retried and their delay counts. The subscriber records now - t_k on delivery: what a
// message waited behind a late sender, a full ring or a parked poller is all in the figure.
// Both sides read core::Clock::now_ns(), whose TSC calibration is shared host-wide.
//
// Publisher and subscriber run in two processes: the benchmark forks itself (no exec) for each
// point, the child is the subscriber. With --pin split (default) the publisher process and its
// poller run on the first CPU of --cpus, the subscriber process and its poller on the second.
//
// CPU%: utime+stime deltas of /proc/self/task/TID/stat over the measurement window (the
// scheduled times of the first and the last measured message), per process. "Library threads"
// are the tasks of the process that did not exist before its Context was created (the
// benchmark's own thread is the only other one); in dedicated mode those are the pollers. Resolution: one clock tick
// (10 ms) per thread per window.
//
// --rtt: one round trip every --rtt-interval-ms between two processes, application threads
// polling with sched_yield between empty polls, dedicated pollers on both sides; RTT measured
// from the scheduled ping time; each process's poller and application CPU%.
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <new>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "core/config.h"
#include "core/counters.h"
#include "pollux/pollux.h"
#include "tools/common/config_override.h"

#ifndef POLLUX_RATE_PLOT_SCRIPT
#define POLLUX_RATE_PLOT_SCRIPT "bench/rate/rate_plot.gp"
#endif

namespace {

using pollux::core::Clock;
using pollux::core::Histogram;

// ---- options ----------------------------------------------------------------------------------

struct RatePoint {
  std::string label;  // as given: "10k", "burst"
  double rate = 0;    // average messages per second
  bool burst = false;
};

struct Options {
  std::vector<std::string> transports{"shm", "udp"};
  std::vector<std::string> modes{"inline", "dedicated"};
  bool modes_given = false;
  std::vector<std::string> strategies{"busy-spin", "yield", "backoff", "interrupt", "adaptive"};
  std::vector<RatePoint> rates;
  double duration_s = 2.0;
  double warmup_s = 0.3;
  std::uint32_t burst_size = 100;
  double burst_rate = 1e6;
  double burst_avg = 1e4;
  std::size_t payload = 32;
  bool quick = false;
  std::string json;
  std::string plot_dir;
  std::string plot_script = POLLUX_RATE_PLOT_SCRIPT;
  bool allow_missing = false;
  std::string pin = "split";
  int cpu_a = 0, cpu_b = 1;
  std::string app_idle = "auto";
  std::string shm_flow = "backpressure";
  std::string udp_address = "127.0.0.1";
  std::string extra_toml;                           // contents of --extra-toml
  std::vector<pollux::tools::ConfigOverride> sets;  // --set KEY=VALUE, in order (the last one wins)
  std::int64_t sleep_above_ns = 150'000;
  std::int64_t sleep_margin_ns = 100'000;
  double drain_s = 1.0;
  bool rtt = false;
  double rtt_interval_ms = 5.0;
  double rtt_duration_s = 10.0;
  double rtt_timeout_ms = 1000.0;
  double idle_s = 0;  // --idle: seconds without traffic per point (0: not in idle mode)
  int rounds = 1;     // --rounds: the whole sweep / RTT / idle run repeated, points interleaved
};

constexpr const char* kHelp = R"(pollux-bench-rate: open-loop fixed-rate latency sweep (coordinated omission corrected)

Each point: a publisher process offers messages at fixed scheduled times t_k, a subscriber
process (forked) records now - t_k on delivery. Reports p50/p99/p99.9/max latency, messages
sent/received/lost and the CPU% of poller and application threads of both processes.

Sweep:
  --transports LIST     shm,udp,rdma (default shm,udp; rdma needs --extra-toml with [rdma])
  --modes LIST          inline,dedicated,shared (default inline,dedicated; --rtt: dedicated)
  --strategies LIST     runtime.idle values, passed to the config as given (default
                        busy-spin,yield,backoff,interrupt,adaptive); a value the config rejects is reported and
                        skipped, and the exit status is 1 unless --allow-missing
  --rates LIST          messages/s with k/M suffixes, and "burst" (default 1k,10k,100k,1M,burst)
  --burst N             burst pattern: messages per burst (default 100)
  --burst-rate R        rate inside a burst (default 1M)
  --burst-avg R         average rate of the burst pattern (default 10k)
  --duration S          measured seconds per point (default 2)
  --warmup S            seconds at the same rate before measuring (default 0.3)
  --quick               duration 0.15 s, warm-up 0.05 s, drain 0.5 s (~30 s for the default sweep)
  --payload BYTES       payload size, >= 16 (default 32)
  --drain S             after the last offer, how long the subscriber waits for stragglers
                        before counting them lost (default 1)
  --sleep-above-us US   the sender nanosleeps when the next send is further than this (150)
  --sleep-margin-us US  ... and wakes this much early, then yields/spins (100)

Setup:
  --pin split|none      split (default): publisher process + its poller on the first of --cpus,
                        subscriber process + its poller on the second; none: no pinning, the
                        library's default poller placement
  --cpus A,B            CPUs for --pin split (default 0,1)
  --app-idle MODE       what the subscriber's thread does after an empty poll: yield
                        (sched_yield), spin (pause), wait (Subscriber::wait, 1 ms at most),
                        mirror (the strategy's own step: busy-spin -> pause, yield ->
                        sched_yield, backoff -> spin/yield/park, interrupt -> wait, adaptive ->
                        1000 spins then wait; others -> yield), auto (default: mirror in inline
                        mode, yield otherwise). --rtt always yields (the issue's setup)
  --shm-flow MODE       shm.flow_control: backpressure (default; nothing lost, waits count)
                        or lossy
  --udp-address A       127.0.0.1 (default, unicast) or a 239.255.x.y group (multicast on lo,
                        TTL 1); no other address is accepted
  --extra-toml FILE     TOML appended to both processes' configs (sections the benchmark does
                        not write, e.g. [rdma])
  --set KEY=VALUE       one config key for both processes, VALUE in TOML syntax (strings
                        quoted), e.g. --set runtime.sleep_timer_ms=50 --set 'udp.address="239.255.0.9"';
                        repeatable; it goes into the section the benchmark writes (or a new one)

RTT mode:
  --rtt                 instead of the sweep: one round trip every --rtt-interval-ms between
                        two processes, apps polling with sched_yield, dedicated pollers
  --rtt-interval-ms MS  (default 5)
  --rtt-duration S      measured seconds per (transport, mode, strategy) (default 10, --quick 2)
  --rtt-timeout-ms MS   a ping without a reply this long after its send is a timeout (1000)

Idle mode:
  --idle S              instead of the sweep: per (transport, mode, strategy) two processes open
                        a stream (publisher / subscriber, dedicated pollers), exchange one
                        message, then send nothing for S seconds while both application threads
                        sleep (Subscriber::wait / nanosleep); reports each process's poller CPU%
                        over those S seconds and the pollers' sleep/wakeup counters. Modes:
                        dedicated or shared (default dedicated; inline has no poller)

 --rounds N             repeat the whole run N times (default 1); every point of the sweep is
                        run once per round, strategies back to back at each rate, so drifts of
                        the machine hit every strategy alike; JSON lines carry "round"
                        (bench/rate/targets.py takes medians over rounds)

Output:
  --json FILE           one JSON object per point (fields: docs/BENCHMARKS.md)
  --plot DIR            gnuplot PNGs, one per (transport, mode): latency p50/p99 and CPU% vs
                        rate, one line per strategy (needs gnuplot; data files stay in DIR)
  --plot-script FILE    gnuplot script (default: the source tree's bench/rate/rate_plot.gp)
  --allow-missing       exit 0 even if a strategy was rejected by the config
  --version             print "pollux-bench-rate <version>" and exit
  -h, --help            this text
)";

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "pollux-bench-rate: %s (see --help)\n", msg.c_str());
  std::exit(64);  // EX_USAGE, like every other bench program
}

// "10k", "1M" (or "1m"): a count or a rate.
double parse_number(const std::string& flag, const std::string& s) {
  return pollux::cli::scaled_number(flag, s, usage_error, /*lower_m_is_mega=*/true);
}

std::vector<std::string> parse_list(const std::string& flag, const std::string& s) {
  std::vector<std::string> out;
  for (absl::string_view p : absl::StrSplit(s, ',', absl::SkipEmpty())) out.emplace_back(p);
  if (out.empty()) usage_error(flag + ": empty list");
  return out;
}

// A value pasted into a TOML string must not be able to end it.
void check_word(const std::string& flag, const std::string& v) {
  for (char c : v) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_')) {
      usage_error(flag + ": \"" + v + "\" may only contain letters, digits, '-' and '_'");
    }
  }
}

bool udp_address_allowed(const std::string& a) {
  if (a == "127.0.0.1") return true;
  unsigned x = 0, y = 0;
  char tail = 0;
  return std::sscanf(a.c_str(), "239.255.%u.%u%c", &x, &y, &tail) == 2 && x <= 255 && y <= 255;
}

// The flags that only store their value, and the switches that only turn an option on.
constexpr std::pair<std::string_view, std::string Options::*> kValueFlags[] = {
    {"--json", &Options::json}, {"--plot", &Options::plot_dir}, {"--plot-script", &Options::plot_script}};
constexpr std::pair<std::string_view, bool Options::*> kSwitches[] = {
    {"--quick", &Options::quick}, {"--allow-missing", &Options::allow_missing}, {"--rtt", &Options::rtt}};

// The option `flag` names in `table`, or nullptr.
template <typename T, std::size_t N>
T Options::*find_flag(const std::pair<std::string_view, T Options::*> (&table)[N], const std::string& flag) {
  for (const auto& [name, field] : table) {
    if (name == flag) return field;
  }
  return nullptr;
}

Options parse_options(int argc, char** argv) {
  Options o;
  std::string rates = "1k,10k,100k,1M,burst";
  bool duration_given = false, warmup_given = false, drain_given = false, rtt_duration_given = false;
  for (pollux::cli::FlagReader args(argc, argv, usage_error); args.next();) {
    const std::string& flag = args.flag();
    auto arg = [&] { return args.value(); };
    auto no_value = [&] { args.no_value(); };
    if (const int rc = pollux::cli::handle_standard_flag(flag, "pollux-bench-rate", kHelp); rc >= 0) {
      std::exit(rc);  // --help, --version
    } else if (std::string Options::*value = find_flag(kValueFlags, flag)) {
      o.*value = arg();
    } else if (bool Options::*on = find_flag(kSwitches, flag)) {
      no_value();
      o.*on = true;
    } else if (flag == "--transports") {
      o.transports = parse_list(flag, arg());
      for (const auto& t : o.transports) {
        if (t != "shm" && t != "udp" && t != "rdma") usage_error("--transports: unknown transport \"" + t + "\"");
      }
    } else if (flag == "--modes") {
      o.modes = parse_list(flag, arg());
      o.modes_given = true;
      for (const auto& m : o.modes) {
        if (m != "inline" && m != "dedicated" && m != "shared") usage_error("--modes: unknown mode \"" + m + "\"");
      }
    } else if (flag == "--strategies") {
      o.strategies = parse_list(flag, arg());
      for (const auto& s : o.strategies) check_word(flag, s);
    } else if (flag == "--rates") {
      rates = arg();
    } else if (flag == "--burst") {
      o.burst_size = static_cast<std::uint32_t>(parse_number(flag, arg()));
      if (o.burst_size == 0) usage_error("--burst must be >= 1");
    } else if (flag == "--burst-rate") {
      o.burst_rate = parse_number(flag, arg());
    } else if (flag == "--burst-avg") {
      o.burst_avg = parse_number(flag, arg());
    } else if (flag == "--duration") {
      o.duration_s = parse_number(flag, arg());
      duration_given = true;
    } else if (flag == "--warmup") {
      o.warmup_s = parse_number(flag, arg());
      warmup_given = true;
    } else if (flag == "--drain") {
      o.drain_s = parse_number(flag, arg());
      drain_given = true;
    } else if (flag == "--payload") {
      o.payload = static_cast<std::size_t>(parse_number(flag, arg()));
      if (o.payload < 16) usage_error("--payload must be >= 16 (t_k and k are 16 bytes)");
    } else if (flag == "--sleep-above-us") {
      o.sleep_above_ns = static_cast<std::int64_t>(parse_number(flag, arg()) * 1e3);
    } else if (flag == "--sleep-margin-us") {
      o.sleep_margin_ns = static_cast<std::int64_t>(parse_number(flag, arg()) * 1e3);
    } else if (flag == "--pin") {
      o.pin = arg();
      if (o.pin != "split" && o.pin != "none") usage_error("--pin: split or none, got \"" + o.pin + "\"");
    } else if (flag == "--cpus") {
      const auto l = parse_list(flag, arg());
      if (l.size() != 2) usage_error("--cpus: two CPU numbers, e.g. 0,1");
      o.cpu_a = static_cast<int>(parse_number(flag, l[0]));
      o.cpu_b = static_cast<int>(parse_number(flag, l[1]));
    } else if (flag == "--app-idle") {
      o.app_idle = arg();
      if (o.app_idle != "auto" && o.app_idle != "yield" && o.app_idle != "spin" && o.app_idle != "mirror" &&
          o.app_idle != "wait") {
        usage_error("--app-idle: auto, yield, spin, wait or mirror, got \"" + o.app_idle + "\"");
      }
    } else if (flag == "--shm-flow") {
      o.shm_flow = arg();
      if (o.shm_flow != "backpressure" && o.shm_flow != "lossy") usage_error("--shm-flow: backpressure or lossy");
    } else if (flag == "--udp-address") {
      o.udp_address = arg();
      if (!udp_address_allowed(o.udp_address)) {
        usage_error("--udp-address: only 127.0.0.1 or a 239.255.x.y group on lo, got \"" + o.udp_address + "\"");
      }
    } else if (flag == "--extra-toml") {
      const std::string path = arg();
      std::ifstream f(path);
      if (!f) usage_error("--extra-toml: cannot read \"" + path + "\"");
      std::stringstream ss;
      ss << f.rdbuf();
      o.extra_toml = ss.str();
    } else if (flag == "--set") {
      // The parser pollux-feed and pollux-latency use (tools/common/config_override.h).
      absl::StatusOr<pollux::tools::ConfigOverride> ov =
          pollux::tools::ParseOverride(arg(), "--set", "runtime.sleep_timer_ms=50");
      if (!ov.ok()) usage_error(std::string(ov.status().message()));
      o.sets.push_back(*std::move(ov));
    } else if (flag == "--rtt-interval-ms") {
      o.rtt_interval_ms = parse_number(flag, arg());
      if (o.rtt_interval_ms <= 0) usage_error("--rtt-interval-ms must be > 0");
    } else if (flag == "--rtt-timeout-ms") {
      o.rtt_timeout_ms = parse_number(flag, arg());
      if (o.rtt_timeout_ms <= 0) usage_error("--rtt-timeout-ms must be > 0");
    } else if (flag == "--rounds") {
      o.rounds = static_cast<int>(parse_number(flag, arg()));
      if (o.rounds < 1 || o.rounds > 1000) usage_error("--rounds must be in 1..1000");
    } else if (flag == "--idle") {
      o.idle_s = parse_number(flag, arg());
      if (o.idle_s <= 0) usage_error("--idle must be > 0 seconds");
    } else if (flag == "--rtt-duration") {
      o.rtt_duration_s = parse_number(flag, arg());
      rtt_duration_given = true;
    } else {
      std::exit(pollux::cli::unknown_flag("pollux-bench-rate", args.raw(), kHelp));
    }
  }
  if (o.quick) {
    if (!duration_given) o.duration_s = 0.15;
    if (!warmup_given) o.warmup_s = 0.05;
    if (!drain_given) o.drain_s = 0.5;
    if (!rtt_duration_given) o.rtt_duration_s = 2.0;
  }
  if (o.rtt && !o.modes_given) o.modes = {"dedicated"};
  if (o.rtt && o.idle_s > 0) usage_error("--rtt and --idle are separate modes: give one");
  if (o.idle_s > 0) {
    if (!o.modes_given) o.modes = {"dedicated"};
    for (const auto& m : o.modes) {
      if (m == "inline") usage_error("--idle measures poller threads: inline mode has none (use dedicated or shared)");
    }
  }
  if (o.burst_rate <= 0 || o.burst_avg <= 0) usage_error("--burst-rate and --burst-avg must be > 0");
  if (o.burst_avg >= o.burst_rate) usage_error("--burst-avg must be below --burst-rate");
  for (const auto& r : parse_list("--rates", rates)) {
    if (r == "burst") {
      o.rates.push_back({r, o.burst_avg, true});
    } else {
      const double v = parse_number("--rates", r);
      if (v <= 0 || v > 1e8) usage_error("--rates: " + r + " is not in (0, 100M]");
      o.rates.push_back({r, v, false});
    }
  }
  if (o.duration_s <= 0) usage_error("--duration must be > 0");
  return o;
}

// ---- schedule ----------------------------------------------------------------------------------

// Offset of message k from t0: evenly spaced, or bursts of `size` at `in_burst_ns` spacing that
// start every `cycle_ns` (the burst pattern's average rate).
struct Schedule {
  bool burst = false;
  double period_ns = 0;
  std::uint32_t size = 1;
  double in_burst_ns = 0;
  double cycle_ns = 0;

  static Schedule make(const Options& o, const RatePoint& p) {
    Schedule s;
    s.burst = p.burst;
    if (p.burst) {
      s.size = o.burst_size;
      s.in_burst_ns = 1e9 / o.burst_rate;
      s.cycle_ns = 1e9 * o.burst_size / o.burst_avg;
    } else {
      s.period_ns = 1e9 / p.rate;
    }
    return s;
  }
  std::int64_t offset(std::uint64_t k) const {
    if (!burst) return static_cast<std::int64_t>(static_cast<double>(k) * period_ns);
    return static_cast<std::int64_t>(static_cast<double>(k / size) * cycle_ns +
                                     static_cast<double>(k % size) * in_burst_ns);
  }
  // Messages scheduled in `seconds` (whole bursts for the burst pattern, at least one).
  std::uint64_t count_for(double seconds) const {
    if (!burst) return std::max<std::uint64_t>(1, static_cast<std::uint64_t>(seconds * 1e9 / period_ns));
    return std::max<std::uint64_t>(1, static_cast<std::uint64_t>(seconds * 1e9 / cycle_ns)) * size;
  }
};

// ---- CPU time from /proc ------------------------------------------------------------------------

std::vector<pid_t> list_tasks() {
  std::vector<pid_t> out;
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] >= '0' && e->d_name[0] <= '9') out.push_back(static_cast<pid_t>(std::atol(e->d_name)));
  }
  closedir(d);
  return out;
}

// utime + stime of one task, in clock ticks (fields 14 and 15 of stat; the comm field may hold
// spaces and parentheses, so parse from the last ')').
std::uint64_t task_ticks(pid_t tid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%d/stat", static_cast<int>(tid));
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[1024];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr) return 0;
  // After ") ": field 3 (state) ... utime is field 14, stime field 15.
  unsigned long long utime = 0, stime = 0;
  if (std::sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) != 2) return 0;
  return utime + stime;
}

struct CpuSample {
  std::int64_t ns = 0;
  std::uint64_t app_ticks = 0, lib_ticks = 0;
  int lib_threads = 0;
  // The whole machine (/proc/stat "cpu" line): busy = user+nice+system+irq+softirq, steal.
  std::uint64_t host_busy = 0, host_steal = 0;
};

void read_host_ticks(CpuSample* s) {
  FILE* f = std::fopen("/proc/stat", "r");
  if (f == nullptr) return;
  unsigned long long user = 0, nice = 0, sys = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &user, &nice, &sys, &idle, &iowait, &irq, &softirq,
                  &steal) == 8) {
    s->host_busy = user + nice + sys + irq + softirq;
    s->host_steal = steal;
  }
  std::fclose(f);
}

// Splits the process's tasks into the benchmark's own (those alive before the Context was
// created) and the library's (created by it: the pollers in dedicated/shared mode).
class CpuSampler {
 public:
  void capture_own() {
    for (pid_t t : list_tasks()) own_.insert(t);
  }
  CpuSample sample() const {
    CpuSample s;
    s.ns = Clock::monotonic_ns();
    read_host_ticks(&s);
    for (pid_t t : list_tasks()) {
      const std::uint64_t v = task_ticks(t);
      if (own_.count(t) != 0) {
        s.app_ticks += v;
      } else {
        s.lib_ticks += v;
        ++s.lib_threads;
      }
    }
    return s;
  }

 private:
  std::set<pid_t> own_;
};

struct CpuPct {
  double app = 0, lib = 0, window_s = 0;
  int lib_threads = 0;
  double host_busy = 0, host_steal = 0;  // the whole machine, % of one core (2 CPUs: up to 200)
};

// CPU the rest of the machine used meanwhile: all busy time minus both processes' threads.
double others_pct(const CpuPct& mine, const CpuPct& peer) {
  return std::max(0.0, mine.host_busy - mine.app - mine.lib - peer.app - peer.lib);
}

CpuPct cpu_between(const CpuSample& a, const CpuSample& b) {
  CpuPct p;
  const double secs = static_cast<double>(b.ns - a.ns) / 1e9;
  if (secs <= 0) return p;
  const double hz = static_cast<double>(sysconf(_SC_CLK_TCK));
  p.app = 100.0 * static_cast<double>(b.app_ticks - a.app_ticks) / hz / secs;
  p.lib = 100.0 * static_cast<double>(b.lib_ticks - a.lib_ticks) / hz / secs;
  p.window_s = secs;
  p.lib_threads = b.lib_threads;
  p.host_busy = 100.0 * static_cast<double>(b.host_busy - a.host_busy) / hz / secs;
  p.host_steal = 100.0 * static_cast<double>(b.host_steal - a.host_steal) / hz / secs;
  return p;
}

// ---- application idle step ------------------------------------------------------------------------

enum class AppIdleKind { kSpin, kYield, kBackoff, kWait, kSpinWait };

std::string app_idle_name(AppIdleKind k) {
  // Indexed by AppIdleKind, in its order.
  static constexpr const char* kNames[] = {"spin", "yield", "backoff", "wait", "spin-wait"};
  static_assert(std::size(kNames) == static_cast<std::size_t>(AppIdleKind::kSpinWait) + 1);
  const auto i = static_cast<std::size_t>(k);
  return i < std::size(kNames) ? kNames[i] : "?";
}

AppIdleKind app_idle_for(const Options& o, const std::string& mode, const std::string& strategy) {
  std::string m = o.app_idle;
  if (m == "auto") m = mode == "inline" ? "mirror" : "yield";
  if (m == "spin") return AppIdleKind::kSpin;
  if (m == "yield") return AppIdleKind::kYield;
  if (m == "wait") return AppIdleKind::kWait;
  // "mirror": the application side of the pollers' strategy, indexed by pollux::IdleKind in its
  // order (yield for a strategy it does not know).
  constexpr AppIdleKind kMirror[] = {AppIdleKind::kSpin, AppIdleKind::kYield, AppIdleKind::kBackoff, AppIdleKind::kWait,
                                     AppIdleKind::kSpinWait};
  static_assert(std::size(kMirror) == static_cast<std::size_t>(pollux::IdleKind::kAdaptive) + 1);
  return kMirror[static_cast<std::size_t>(pollux::parse_idle_kind(strategy).value_or(pollux::IdleKind::kYield))];
}

inline void cpu_pause() noexcept {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

// The application's step after an empty poll. kBackoff copies the library's backoff strategy
// with its defaults (1000 spins, 100 yields, then parks from 1 us doubling to 1 ms), kept here so
// the benchmark depends only on the public API for what it measures. kWait sleeps in
// Subscriber::wait() (1 ms at most, so the loop's timed duties still run); kSpinWait spins
// 1000 times first.
struct AppIdle {
  AppIdleKind kind;
  pollux::Subscriber* sub = nullptr;
  std::int64_t spins = 0, yields = 0, park_ns = 1'000;
  void idle(int work) noexcept {
    if (work > 0) {
      spins = yields = 0;
      park_ns = 1'000;
      return;
    }
    switch (kind) {
      case AppIdleKind::kSpin:
        cpu_pause();
        break;
      case AppIdleKind::kYield:
        sched_yield();
        break;
      case AppIdleKind::kBackoff:
        if (spins < 1000) {
          ++spins;
          cpu_pause();
        } else if (yields < 100) {
          ++yields;
          sched_yield();
        } else {
          const timespec ts{0, static_cast<long>(park_ns)};
          nanosleep(&ts, nullptr);
          park_ns = std::min<std::int64_t>(park_ns * 2, 1'000'000);
        }
        break;
      case AppIdleKind::kSpinWait:
        if (spins < 1000) {
          ++spins;
          cpu_pause();
          break;
        }
        [[fallthrough]];
      case AppIdleKind::kWait:
        if (sub != nullptr) {
          (void)sub->wait(1000);
        } else {
          sched_yield();
        }
        break;
    }
  }
};

// ---- configuration --------------------------------------------------------------------------------

struct PointSpec {
  std::string transport, mode, strategy;
  int index = 0;  // unique per point: ports and names
  int round = 1;  // --rounds: which repetition of the sweep
};

int g_base_port = 0;

std::string make_config(const Options& o, const PointSpec& p, const std::string& name, int poller_cpu,
                        const std::vector<std::string>& topics) {
  std::string c =
      absl::StrFormat("[runtime]\nname = \"%s\"\nthreading = \"%s\"\nidle = \"%s\"\ncounters = true\npollers = 1\n",
                      name, p.mode, p.strategy);
  if (poller_cpu >= 0 && p.mode != "inline") absl::StrAppendFormat(&c, "poller_cores = [%d]\n", poller_cpu);
  absl::StrAppendFormat(&c, "[pool]\nhugepages = \"off\"\n[transport]\nkind = \"%s\"\n", p.transport);
  if (p.transport == "shm") {
    absl::StrAppendFormat(&c, "[shm]\nlog_size = \"16MiB\"\nflow_control = \"%s\"\n", o.shm_flow);
  } else if (p.transport == "udp") {
    // Sized like bench/udp's throughput case: 1M msg/s of single-frame datagrams overflows a
    // small socket buffer on a shared 2-CPU machine; drops are repaired by NAKs (and counted).
    absl::StrAppendFormat(&c,
                          "[udp]\naddress = \"%s\"\ninterface = \"lo\"\nttl = 1\nsocket_rcvbuf = \"32MiB\"\n"
                          "socket_sndbuf = \"8MiB\"\nretransmit_buffer = \"64MiB\"\nreorder_window = 1048576\n"
                          "rx_buffers = 4096\n",
                          o.udp_address);
  }
  if (!o.sets.empty()) {
    // --set replaces a key the benchmark wrote (or adds it, in a new section if need be).
    toml::table root;
    try {
      root = toml::parse(c, std::string_view("pollux-bench-rate config"));
    } catch (const toml::parse_error& e) {
      usage_error(absl::StrCat("internal: the generated config does not parse: ", std::string(e.description())));
    }
    for (const auto& ov : o.sets) {
      if (absl::Status st = pollux::tools::ApplyOverride(root, ov); !st.ok()) usage_error(std::string(st.message()));
    }
    std::ostringstream os;
    os << toml::toml_formatter(root);
    c = os.str() + "\n";
  }
  int port = g_base_port + p.index * 4;
  std::uint32_t id = 1;
  for (const auto& t : topics) {
    absl::StrAppendFormat(&c, "[[streams]]\ntopic = \"%s\"\nid = %u\n", t, id++);
    if (p.transport == "udp") absl::StrAppendFormat(&c, "udp_port = %d\n", port++);
  }
  if (!o.extra_toml.empty()) c += "\n" + o.extra_toml + "\n";
  return c;
}

// ---- shared state between the two processes of a point ------------------------------------------

struct Shared {
  // Child -> parent: 1 = subscriber open, -1 = failed (error[] says why). Release pairs with the
  // parent's acquire in wait_child_state(): error[] is written before.
  std::atomic<int> child_state{0};
  // Parent -> child: the measurement window. t_end is stored before t_measure (release), the
  // child loads t_measure (acquire) then t_end.
  std::atomic<std::int64_t> t_measure{0};
  std::atomic<std::int64_t> t_end{0};
  // Parent -> child: the number of messages offered, then sender_done (release; the child's
  // acquire of sender_done makes `sent` visible).
  std::atomic<std::uint64_t> sent{0};
  std::atomic<int> sender_done{0};
  // Child -> parent: the results below are written (release; parent acquires).
  std::atomic<int> child_done{0};
  // Parent -> child: the publisher is closed (the child may close its subscriber).
  std::atomic<int> parent_closed{0};

  Histogram hist;        // now - t_k (scheduled), measured messages
  Histogram hist_offer;  // now - Message::publisher_ns (the successful offer), measured messages
  std::uint64_t received = 0, measured = 0, gap_lost = 0, gaps = 0, malformed = 0;
  CpuPct cpu;
  char counters[2048] = {};  // the child's poller_counters_json()
  char error[1024] = {};
};

Shared* map_shared() {
  void* m = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    std::perror("mmap");
    std::exit(1);
  }
  return new (m) Shared();
}

void unmap_shared(Shared* s) {
  s->~Shared();
  munmap(s, sizeof(Shared));
}

// The process's poller counters (every counter of a "poller N" scope, summed over pollers, the
// nonzero ones) as a JSON object: sleeps, wakeups, arm refusals... whatever this version of the
// library counts. Read at the end of the point, so the warm-up is included.
std::string poller_counters_json(const pollux::Context& ctx) {
  std::map<std::string, std::uint64_t> sums;
  if (auto snap = pollux::core::read_counters_file(ctx.counters_path()); snap.ok()) {
    for (const auto& c : snap->counters) {
      if (c.scope.rfind("poller", 0) == 0 && c.value != 0) sums[c.name] += c.value;
    }
  }
  std::string out = "{";
  for (const auto& [k, v] : sums) absl::StrAppendFormat(&out, "%s\"%s\": %u", out.size() > 1 ? ", " : "", k, v);
  return out + "}";
}

void set_error(Shared* sh, const std::string& e) { std::snprintf(sh->error, sizeof sh->error, "%s", e.c_str()); }

// The parent's way out of a point: on an error, records it and kills the child; then releases
// a child still waiting for the parent (every flag it may wait on), reaps it and unmaps the page.
void end_child(Shared* sh, pid_t child, const std::string& err, std::string* error_out) {
  if (!err.empty()) {
    *error_out = err;
    kill(child, SIGKILL);
  }
  // Release stores pair with the child's acquire loads of each flag.
  sh->t_measure.store(1, std::memory_order_release);  // only read by a child still before the window
  sh->sender_done.store(1, std::memory_order_release);
  sh->parent_closed.store(1, std::memory_order_release);
  int status = 0;
  waitpid(child, &status, 0);
  unmap_shared(sh);
}

// Forks the point's child process (the subscriber or ponger side), pinned to the second CPU
// with --pin split; the child runs child_main() and exits with its result. -1 (and *err) if
// fork failed, after unmapping the shared page.
template <typename F>
pid_t fork_child(const Options& o, Shared* sh, std::string* err, F&& child_main) {
  const bool split = o.pin == "split";
  std::fflush(stdout);
  const pid_t child = pollux::bench::fork_on(split ? o.cpu_b : -1);
  if (child < 0) {
    *err = absl::StrCat("fork: ", std::strerror(errno));
    unmap_shared(sh);
    return -1;
  }
  if (child == 0) {
    if (split) pollux::bench::pin(o.cpu_b);
    _exit(child_main());
  }
  return child;
}

// A child process could not open its side: says why to the parent, which reports it.
int child_failed(Shared* sh, const absl::Status& st) {
  set_error(sh, std::string(st.message()));
  sh->child_state.store(-1, std::memory_order_release);  // pairs with wait_child_state()'s acquire
  return 2;
}

// Until `pub` (and `sub`, if given) is connected, at most 10 s: runs the publisher's duties and
// polls the subscriber (inline mode needs both; with pollers they return at once).
bool wait_connected(pollux::Publisher& pub, pollux::Subscriber* sub) {
  const std::int64_t deadline = Clock::monotonic_ns() + 10'000'000'000;
  while (!pub.is_connected() || (sub != nullptr && !sub->is_connected())) {
    pub.service();
    if (sub != nullptr) (void)sub->poll([](const pollux::Message&) {}, 16);
    if (Clock::monotonic_ns() > deadline) return false;
    usleep(100);
  }
  return true;
}

// Waits for the child to open its side; false (with `err`) if it failed or died.
bool wait_child_state(Shared* sh, pid_t child, std::string* err) {
  return pollux::host::wait_for_child(sh->child_state, 1, sh->error, child,
                                      {"subscriber process", "open its side", nullptr, ""}, err);
}

// 1-minute load average: other processes on a 2-CPU machine move every figure.
double loadavg() {
  double l = -1;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &l) != 1) l = -1;
    std::fclose(f);
  }
  return l;
}

void sleep_ns(std::int64_t ns) {
  timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  nanosleep(&ts, nullptr);
}

// The CPU time of a side over the measurement window: sampled when the window opens
// (t_measure) and when it closes (t_end, or a full window after a late start).
struct CpuWindow {
  CpuSample s0, s1;
  bool have0 = false, have1 = false;
  std::int64_t t_close = 0;

  void tick(const CpuSampler& cpu, std::int64_t now, std::int64_t t_measure, std::int64_t t_end) {
    if (!have0 && now >= t_measure) {
      s0 = cpu.sample();
      t_close = std::max(t_end, now + (t_end - t_measure));
      have0 = true;
    } else if (have0 && !have1 && now >= t_close) {
      s1 = cpu.sample();
      have1 = true;
    }
  }
  // A child's tick: the window is the one the parent publishes in `sh` (t_measure 0 until then).
  void tick(const CpuSampler& cpu, std::int64_t now, const Shared* sh) {
    const std::int64_t tm =
        have0 ? 0 : sh->t_measure.load(std::memory_order_acquire);  // pairs with the parent's release
    if (have0 || tm != 0) tick(cpu, now, tm, sh->t_end.load(std::memory_order_relaxed));
  }
  bool open() const { return have0 && !have1; }
  // Closes a window still open now.
  void close(const CpuSampler& cpu) {
    if (open()) {
      s1 = cpu.sample();
      have1 = true;
    }
  }
  CpuPct pct() const { return cpu_between(s0, s1); }
};

// A child's Context from `cfg` (`source` in its errors) with its own threads captured in `cpu`
// first; on an error the parent is told (child_failed) and the result is not ok.
absl::StatusOr<std::unique_ptr<pollux::Context>> open_child(const std::string& cfg, const char* source, CpuSampler* cpu,
                                                            Shared* sh) {
  cpu->capture_own();
  auto ctx = pollux::Context::from_string(cfg, source);
  if (!ctx.ok()) (void)child_failed(sh, ctx.status());
  return ctx;
}

// A subscriber child's start: its Context (open_child) and the subscriber of `stream`; then the
// parent is told the child is ready. `exit_code` is not 0 when that failed (the parent was told).
struct SubscriberChild {
  absl::StatusOr<std::unique_ptr<pollux::Context>> ctx;
  absl::StatusOr<pollux::Subscriber> sub;
  int exit_code = 0;
};

SubscriberChild open_subscriber_child(const std::string& cfg, const char* source, const char* stream, CpuSampler* cpu,
                                      Shared* sh) {
  SubscriberChild c;
  c.ctx = open_child(cfg, source, cpu, sh);
  if (!c.ctx.ok()) {
    c.exit_code = 2;
    return c;
  }
  c.sub = (*c.ctx)->subscriber(stream);
  if (!c.sub.ok()) {
    c.exit_code = child_failed(sh, c.sub.status());
    return c;
  }
  sh->child_state.store(1, std::memory_order_release);  // pairs with wait_child_state()'s acquire
  return c;
}

// A child's end: hands its poller counters to the parent, says it is done, then runs linger()
// until the parent has closed (at most 5 s: a UDP publisher's close lingers for confirmations).
template <typename F>
int end_child_side(Shared* sh, const pollux::Context& ctx, F&& linger) {
  std::snprintf(sh->counters, sizeof sh->counters, "%s", poller_counters_json(ctx).c_str());
  sh->child_done.store(1, std::memory_order_release);  // pairs with the parent's acquire
  const std::int64_t until = Clock::monotonic_ns() + 5'000'000'000;
  while (sh->parent_closed.load(std::memory_order_acquire) == 0 && Clock::monotonic_ns() < until) linger();
  return 0;
}

// The parent's side of a point: the shared page, the child process and the parent's Context.
struct Parent {
  Shared* sh = nullptr;
  pid_t child = -1;
  CpuSampler cpu;  // the parent's own threads, captured before its Context starts any
  std::unique_ptr<pollux::Context> ctx;

  // Ends the point (end_child) with `err` recorded in r.error; returns r.
  template <typename R>
  R finish(R& r, const std::string& err) {
    end_child(sh, child, err, &r.error);
    return r;
  }
};

// Starts a point of result `r`: both sides' configurations (resources named after `prefix`),
// the child forked to run child_main(its configuration) and waited for until its side is open,
// then the parent's Context (`source`; `who` names it in errors). false: r->error says why and
// the child is gone.
template <typename R, typename F>
bool start_point(const Options& o, const PointSpec& p, const char* prefix, const std::vector<std::string>& topics,
                 const char* source, const char* who, R* r, Parent* out, F&& child_main) {
  r->spec = p;
  r->load = loadavg();
  const bool split = o.pin == "split";
  const std::string name = absl::StrFormat("%s%dp%d", prefix, getpid(), p.index);
  const std::string child_cfg = make_config(o, p, name, split ? o.cpu_b : -1, topics);
  const std::string parent_cfg = make_config(o, p, name, split ? o.cpu_a : -1, topics);
  out->sh = map_shared();
  out->child = fork_child(o, out->sh, &r->error, [&] { return child_main(child_cfg); });
  if (out->child < 0) return false;
  std::string err;
  if (!wait_child_state(out->sh, out->child, &err)) {
    out->finish(*r, err);
    return false;
  }
  out->cpu.capture_own();
  auto ctx = pollux::Context::from_string(parent_cfg, source);
  if (!ctx.ok()) {
    out->finish(*r, absl::StrCat(who, " process: ", ctx.status().message()));
    return false;
  }
  out->ctx = std::move(*ctx);
  return true;
}

// ---- one point of the sweep -------------------------------------------------------------------

struct PointResult {
  PointSpec spec;
  RatePoint rate;
  std::string app_idle;
  std::string error;
  Histogram lat;        // now - t_k at the subscriber, measured messages
  Histogram lat_offer;  // now - the successful offer's timestamp (not corrected: for comparison)
  Histogram send_lag;   // offer return - t_k at the publisher, measured messages
  std::uint64_t scheduled = 0, sent = 0, unsent = 0, received = 0, measured = 0, lost = 0, gaps = 0;
  std::uint64_t retries = 0, malformed = 0;
  CpuPct pub_cpu, sub_cpu;
  std::string pub_counters = "{}", sub_counters = "{}";
  double load = 0;  // loadavg before the point
};

int receiver_main(const Options& o, const PointSpec& p, const std::string& cfg, std::uint64_t warm_n, Shared* sh) {
  CpuSampler cpu;
  SubscriberChild child = open_subscriber_child(cfg, "pollux-bench-rate (subscriber)", "rate", &cpu, sh);
  if (child.exit_code != 0) return child.exit_code;
  auto& ctx = child.ctx;
  auto& sub = child.sub;
  AppIdle idle{app_idle_for(o, p.mode, p.strategy), &*sub};
  Histogram& h = sh->hist;
  Histogram& ho = sh->hist_offer;
  std::uint64_t received = 0, measured = 0, gap_lost = 0, gaps = 0, malformed = 0;
  std::int64_t drain_deadline = 0;
  CpuWindow w;
  const std::int64_t drain_ns = static_cast<std::int64_t>(o.drain_s * 1e9);
  for (;;) {
    const int n = sub->poll(
        [&](const pollux::Message& m) {
          const std::int64_t now = Clock::now_ns();
          if (m.payload.size() < 16) {
            ++malformed;
            return;
          }
          std::int64_t tk;
          std::uint64_t k;
          std::memcpy(&tk, m.payload.data(), 8);
          std::memcpy(&k, m.payload.data() + 8, 8);
          ++received;
          if (k >= warm_n) {
            h.record(now - tk);
            ho.record(now - m.publisher_ns);
            ++measured;
          }
        },
        [&](const pollux::Gap& g) {
          ++gaps;
          if (g.reason != pollux::GapReason::kOverrun) gap_lost += g.count;
        },
        256);
    idle.idle(n);
    const std::int64_t now = Clock::now_ns();
    w.tick(cpu, now, sh);
    if (sh->sender_done.load(std::memory_order_acquire) != 0) {  // pairs with the sender's release
      const std::uint64_t sent = sh->sent.load(std::memory_order_relaxed);
      if (received + gap_lost >= sent) break;
      if (drain_deadline == 0) drain_deadline = now + drain_ns;
      if (now > drain_deadline) break;
    }
  }
  w.close(cpu);
  sh->received = received;
  sh->measured = measured;
  sh->gap_lost = gap_lost;
  sh->gaps = gaps;
  sh->malformed = malformed;
  if (w.have0) sh->cpu = w.pct();
  return end_child_side(sh, **ctx, [&] {
    (void)sub->poll([](const pollux::Message&) {}, 256);
    sched_yield();
  });
}

PointResult run_point(const Options& o, const PointSpec& p, const RatePoint& rp) {
  PointResult r;
  r.rate = rp;
  r.app_idle = app_idle_name(app_idle_for(o, p.mode, p.strategy));
  const Schedule sched = Schedule::make(o, rp);
  const std::uint64_t warm_n = o.warmup_s > 0 ? sched.count_for(o.warmup_s) : 0;
  const std::uint64_t meas_n = sched.count_for(o.duration_s);
  const std::uint64_t total = warm_n + meas_n;
  r.scheduled = meas_n;
  Parent pp;
  if (!start_point(o, p, "rate", {"rate"}, "pollux-bench-rate (publisher)", "publisher", &r, &pp,
                   [&](const std::string& cfg) { return receiver_main(o, p, cfg, warm_n, pp.sh); })) {
    return r;
  }
  Shared* sh = pp.sh;
  auto finish = [&](const std::string& err) { return pp.finish(r, err); };
  std::string err;
  auto pub_or = pp.ctx->publisher("rate");
  if (!pub_or.ok()) return finish(absl::StrCat("publisher: ", pub_or.status().message()));
  pollux::Publisher& pub = *pub_or;
  const bool inline_mode = p.mode == "inline";
  if (!wait_connected(pub, nullptr)) return finish("publisher not connected to the subscriber after 10 s");
  std::vector<std::byte> payload(o.payload, std::byte{0x5a});
  const std::int64_t t0 = Clock::now_ns() + 2'000'000;
  const std::int64_t t_measure = t0 + sched.offset(warm_n);
  const std::int64_t t_end = t0 + sched.offset(total);
  sh->t_end.store(t_end, std::memory_order_relaxed);
  sh->t_measure.store(t_measure, std::memory_order_release);  // pairs with the child's acquire
  // A sender that cannot keep up stops this long after the window; what it had not offered by
  // then is reported as unsent (its latency would be at least the time it waited).
  const std::int64_t cap = t_end + std::max<std::int64_t>(250'000'000, static_cast<std::int64_t>(o.duration_s * 1e9));
  CpuWindow w;
  std::uint64_t sent = 0, retries = 0;
  bool fatal = false;
  for (std::uint64_t k = 0; k < total && !fatal; ++k) {
    const std::int64_t tk = t0 + sched.offset(k);
    for (;;) {
      const std::int64_t now = Clock::now_ns();
      w.tick(pp.cpu, now, t_measure, t_end);
      const std::int64_t rem = tk - now;
      if (rem <= 0) break;
      if (rem > o.sleep_above_ns) {
        if (inline_mode) pub.service();
        sleep_ns(rem - o.sleep_margin_ns);
      } else if (rem > 5'000) {
        if (inline_mode) pub.service();
        sched_yield();
      } else {
        cpu_pause();
      }
    }
    std::memcpy(payload.data(), &tk, 8);
    std::memcpy(payload.data() + 8, &k, 8);
    bool offered = false;
    for (;;) {
      const std::int64_t res = pub.offer(payload.data(), payload.size());
      if (res >= 0) {
        offered = true;
        break;
      }
      if (res == pollux::kClosed || res == pollux::kMessageTooLarge) {
        err = absl::StrCat("offer: ", std::string(pollux::result_name(res)));
        fatal = true;
        break;
      }
      ++retries;
      if (Clock::now_ns() > cap) break;
      if (inline_mode) {
        pub.service();
      } else {
        sched_yield();  // the poller that drains the ring may share this CPU
      }
    }
    if (fatal) break;
    const std::int64_t now = Clock::now_ns();
    if (offered) {
      ++sent;
      if (k >= warm_n) r.send_lag.record(now - tk);
    }
    if (now > cap) {
      r.unsent = total - k - (offered ? 1 : 0);
      break;
    }
  }
  // Close the window on the wall clock if the last message was offered before its end.
  while (w.open()) {
    if (Clock::now_ns() >= w.t_close) {
      w.close(pp.cpu);
    } else {
      if (inline_mode) pub.service();
      sched_yield();
    }
  }
  sh->sent.store(sent, std::memory_order_relaxed);
  sh->sender_done.store(1, std::memory_order_release);  // pairs with the child's acquire
  {
    const std::int64_t deadline = Clock::monotonic_ns() + static_cast<std::int64_t>(o.drain_s * 1e9) + 10'000'000'000;
    while (sh->child_done.load(std::memory_order_acquire) == 0) {  // pairs with the child's release
      if (inline_mode) pub.service();                              // answer NAKs: the tail may need repairs
      sched_yield();
      if (Clock::monotonic_ns() > deadline) {
        pub.close();
        return finish("subscriber process did not finish draining");
      }
    }
  }
  pub.close();
  r.pub_counters = poller_counters_json(*pp.ctx);
  r.sub_counters = sh->counters;
  pp.ctx.reset();
  r.sent = sent;
  r.retries = retries;
  if (w.have0) r.pub_cpu = w.pct();
  r.lat = sh->hist;
  r.lat_offer = sh->hist_offer;
  r.received = sh->received;
  r.measured = sh->measured;
  r.gaps = sh->gaps;
  r.malformed = sh->malformed;
  r.lost = sent > r.received ? sent - r.received : 0;
  r.sub_cpu = sh->cpu;
  return finish(err);
}

// ---- RTT mode ---------------------------------------------------------------------------------------

struct RttResult {
  PointSpec spec;
  std::string error;
  Histogram rtt;      // reply - scheduled ping time, measured pings
  Histogram rtt_svc;  // reply - actual ping send time (not corrected: for comparison)
  std::uint64_t pings = 0, replies = 0, timeouts = 0, skipped = 0;
  CpuPct ping_cpu, pong_cpu;
  std::string ping_counters = "{}", pong_counters = "{}";
  double load = 0;
};

template <typename F>
void yield_poll(pollux::Subscriber& sub, pollux::Publisher& pub, bool inline_mode, F&& on_message) {
  if (sub.poll(on_message, 16) == 0) {
    if (inline_mode) pub.service();
    sched_yield();
  }
}

int ponger_main(const PointSpec& p, const std::string& cfg, Shared* sh) {
  CpuSampler cpu;
  auto ctx = open_child(cfg, "pollux-bench-rate --rtt (ponger)", &cpu, sh);
  if (!ctx.ok()) return 2;
  auto sub = (*ctx)->subscriber("ping");
  auto pub = (*ctx)->publisher("pong");
  if (!sub.ok() || !pub.ok()) return child_failed(sh, !sub.ok() ? sub.status() : pub.status());
  sh->child_state.store(1, std::memory_order_release);  // pairs with wait_child_state()'s acquire
  const bool inline_mode = p.mode == "inline";
  CpuWindow w;
  while (sh->sender_done.load(std::memory_order_acquire) == 0) {  // pairs with the pinger's release
    yield_poll(*sub, *pub, inline_mode, [&](const pollux::Message& m) {
      while (pub->offer(m.payload) < 0) {
        if (inline_mode)
          pub->service();
        else
          sched_yield();
      }
    });
    w.tick(cpu, Clock::now_ns(), sh);
  }
  w.close(cpu);
  if (w.have0) sh->cpu = w.pct();
  end_child_side(sh, **ctx, [&] { yield_poll(*sub, *pub, inline_mode, [](const pollux::Message&) {}); });
  pub->close();
  return 0;
}

RttResult run_rtt(const Options& o, const PointSpec& p) {
  RttResult r;
  Parent pp;
  if (!start_point(o, p, "rtt", {"ping", "pong"}, "pollux-bench-rate --rtt (pinger)", "pinger", &r, &pp,
                   [&](const std::string& cfg) { return ponger_main(p, cfg, pp.sh); })) {
    return r;
  }
  Shared* sh = pp.sh;
  auto finish = [&](const std::string& err) { return pp.finish(r, err); };
  auto pub_or = pp.ctx->publisher("ping");
  auto sub_or = pp.ctx->subscriber("pong");
  if (!pub_or.ok()) return finish(absl::StrCat("publisher: ", pub_or.status().message()));
  if (!sub_or.ok()) return finish(absl::StrCat("subscriber: ", sub_or.status().message()));
  pollux::Publisher& pub = *pub_or;
  pollux::Subscriber& sub = *sub_or;
  const bool inline_mode = p.mode == "inline";
  if (!wait_connected(pub, &sub)) return finish("ping/pong streams not connected after 10 s");
  const auto interval = static_cast<std::int64_t>(o.rtt_interval_ms * 1e6);
  const auto warm_n = static_cast<std::uint64_t>(o.warmup_s * 1e9 / static_cast<double>(interval));
  const std::uint64_t meas_n =
      std::max<std::uint64_t>(1, static_cast<std::uint64_t>(o.rtt_duration_s * 1e9 / static_cast<double>(interval)));
  const std::uint64_t total = warm_n + meas_n;
  const std::int64_t t0 = Clock::now_ns() + 2'000'000;
  const std::int64_t t_measure = t0 + static_cast<std::int64_t>(warm_n) * interval;
  const std::int64_t t_end = t0 + static_cast<std::int64_t>(total) * interval;
  sh->t_end.store(t_end, std::memory_order_relaxed);
  sh->t_measure.store(t_measure, std::memory_order_release);  // pairs with the ponger's acquire
  std::vector<std::byte> payload(o.payload, std::byte{0x5a});
  CpuWindow w;
  auto tick = [&](std::int64_t now) { w.tick(pp.cpu, now, t_measure, t_end); };
  // A pinger that fell this far behind (starved application threads) stops; the rest is skipped.
  const std::int64_t cap =
      t_end + std::max<std::int64_t>(2'000'000'000, static_cast<std::int64_t>(o.rtt_duration_s * 1e9));
  for (std::uint64_t k = 0; k < total; ++k) {
    const std::int64_t tk = t0 + static_cast<std::int64_t>(k) * interval;
    if (Clock::now_ns() > cap) {
      r.skipped = total - k;
      break;
    }
    // Between pings the application keeps polling (sched_yield between empty polls).
    for (std::int64_t now = Clock::now_ns(); now < tk; now = Clock::now_ns()) {
      tick(now);
      yield_poll(sub, pub, inline_mode, [](const pollux::Message&) {});
    }
    std::memcpy(payload.data(), &tk, 8);
    std::memcpy(payload.data() + 8, &k, 8);
    while (pub.offer(payload.data(), payload.size()) < 0) {
      if (inline_mode)
        pub.service();
      else
        sched_yield();
    }
    ++r.pings;
    bool got = false;
    const std::int64_t sent_at = Clock::now_ns();
    // From the actual send: a pinger that fell behind must not time out every later ping.
    const std::int64_t give_up = sent_at + static_cast<std::int64_t>(o.rtt_timeout_ms * 1e6);
    while (!got) {
      yield_poll(sub, pub, inline_mode, [&](const pollux::Message& m) {
        if (m.payload.size() < 16) return;
        std::uint64_t kk;
        std::memcpy(&kk, m.payload.data() + 8, 8);
        if (kk != k) return;  // a late reply to an earlier ping that timed out
        got = true;
        const std::int64_t now = Clock::now_ns();
        if (k >= warm_n) {
          r.rtt.record(now - tk);
          r.rtt_svc.record(now - sent_at);
        }
      });
      const std::int64_t now = Clock::now_ns();
      tick(now);
      if (!got && now > give_up) {
        ++r.timeouts;
        break;
      }
    }
    if (got) ++r.replies;
  }
  while (w.open()) tick(Clock::now_ns());
  if (w.have0) r.ping_cpu = w.pct();
  sh->sender_done.store(1, std::memory_order_release);  // pairs with the ponger's acquire
  const std::int64_t deadline = Clock::monotonic_ns() + 10'000'000'000;
  while (sh->child_done.load(std::memory_order_acquire) == 0) {  // pairs with the ponger's release
    yield_poll(sub, pub, inline_mode, [](const pollux::Message&) {});
    if (Clock::monotonic_ns() > deadline) return finish("ponger did not finish");
  }
  r.pong_cpu = sh->cpu;
  pub.close();
  r.ping_counters = poller_counters_json(*pp.ctx);
  r.pong_counters = sh->counters;
  pp.ctx.reset();
  return finish("");
}

// ---- idle mode ----------------------------------------------------------------------------------

struct IdleResult {
  PointSpec spec;
  std::string error;
  CpuPct pub_cpu, sub_cpu;
  std::string pub_counters = "{}", sub_counters = "{}";
  std::uint64_t stray = 0;  // messages the subscriber got during the idle window (expected 0)
  double load = 0;
};

// The subscriber side: receives the one message, then sleeps in Subscriber::wait() until t_end
// (anything delivered meanwhile is counted in `stray`), sampling its CPU over [t_measure, t_end].
int idle_child(const std::string& cfg, Shared* sh) {
  CpuSampler cpu;
  SubscriberChild child = open_subscriber_child(cfg, "pollux-bench-rate --idle (subscriber)", "idle", &cpu, sh);
  if (child.exit_code != 0) return child.exit_code;
  auto& ctx = child.ctx;
  auto& sub = child.sub;
  std::uint64_t got = 0;
  const std::int64_t give_up = Clock::monotonic_ns() + 20'000'000'000;
  while (got == 0 && Clock::monotonic_ns() < give_up) {
    if (sub->poll([&](const pollux::Message&) { ++got; }, 16) == 0) (void)sub->wait(10'000);
  }
  sh->received = got;
  std::int64_t tm = 0;
  while ((tm = sh->t_measure.load(std::memory_order_acquire)) == 0 &&  // pairs with the parent's release
         Clock::monotonic_ns() < give_up) {
    (void)sub->wait(1'000);
  }
  const std::int64_t t_end = sh->t_end.load(std::memory_order_relaxed);
  while (Clock::now_ns() < tm) sleep_ns(std::min<std::int64_t>(tm - Clock::now_ns(), 100'000'000));
  const CpuSample s0 = cpu.sample();
  std::uint64_t stray = 0;
  for (std::int64_t now = Clock::now_ns(); now < t_end; now = Clock::now_ns()) {
    stray += static_cast<std::uint64_t>(sub->poll([](const pollux::Message&) {}, 16));
    (void)sub->wait(std::max<std::int64_t>(1, (t_end - now) / 1000));
  }
  const CpuSample s1 = cpu.sample();
  sh->cpu = cpu_between(s0, s1);
  sh->measured = stray;
  return end_child_side(sh, **ctx, [&] { (void)sub->wait(1'000); });
}

IdleResult run_idle(const Options& o, const PointSpec& p) {
  IdleResult r;
  Parent pp;
  if (!start_point(o, p, "idle", {"idle"}, "pollux-bench-rate --idle (publisher)", "publisher", &r, &pp,
                   [&](const std::string& cfg) { return idle_child(cfg, pp.sh); })) {
    return r;
  }
  Shared* sh = pp.sh;
  auto finish = [&](const std::string& err) { return pp.finish(r, err); };
  auto pub_or = pp.ctx->publisher("idle");
  if (!pub_or.ok()) return finish(absl::StrCat("publisher: ", pub_or.status().message()));
  pollux::Publisher& pub = *pub_or;
  if (!wait_connected(pub, nullptr)) return finish("stream not connected after 10 s");
  std::vector<std::byte> payload(o.payload, std::byte{0x5a});
  while (pub.offer(payload.data(), payload.size()) < 0) usleep(100);
  // Half a second to settle (the controller leaves its busy/spin states after idle_after_ns).
  const std::int64_t t_measure = Clock::now_ns() + 500'000'000;
  const std::int64_t t_end = t_measure + static_cast<std::int64_t>(o.idle_s * 1e9);
  sh->t_end.store(t_end, std::memory_order_relaxed);
  sh->t_measure.store(t_measure, std::memory_order_release);  // pairs with the child's acquire
  while (Clock::now_ns() < t_measure) sleep_ns(std::min<std::int64_t>(t_measure - Clock::now_ns(), 100'000'000));
  const CpuSample s0 = pp.cpu.sample();
  while (Clock::now_ns() < t_end) sleep_ns(std::min<std::int64_t>(t_end - Clock::now_ns(), 100'000'000));
  const CpuSample s1 = pp.cpu.sample();
  r.pub_cpu = cpu_between(s0, s1);
  const std::int64_t deadline = Clock::monotonic_ns() + 10'000'000'000;
  while (sh->child_done.load(std::memory_order_acquire) == 0) {  // pairs with the child's release
    if (Clock::monotonic_ns() > deadline) return finish("subscriber did not finish");
    usleep(1000);
  }
  if (sh->received == 0) return finish("the subscriber never received the first message");
  r.sub_cpu = sh->cpu;
  r.stray = sh->measured;
  r.pub_counters = poller_counters_json(*pp.ctx);
  r.sub_counters = sh->counters;
  pub.close();
  pp.ctx.reset();
  return finish("");
}

// ---- output -------------------------------------------------------------------------------------

double us(std::int64_t ns) { return static_cast<double>(ns) / 1e3; }

std::string rate_text(const PointResult& r) {
  return r.rate.burst ? absl::StrFormat("burst/%s", r.rate.rate >= 1e3 ? absl::StrFormat("%gk", r.rate.rate / 1e3)
                                                                       : absl::StrFormat("%g", r.rate.rate))
                      : r.rate.label;
}

void print_rate_header() {
  std::printf("%-4s %-9s %-10s %-10s %9s %9s %9s %9s %8s %9s %9s %6s %7s %6s %6s %6s %6s %5s\n", "tr", "mode",
              "strategy", "rate", "p50 us", "p99 us", "p99.9 us", "max us", "offer50", "sent", "recv", "lost", "unsent",
              "pubP%", "subP%", "pubA%", "subA%", "oth%");
}

void print_rate_row(const PointResult& r) {
  if (!r.error.empty()) {
    std::printf("%-4s %-9s %-10s %-10s ERROR: %s\n", r.spec.transport.c_str(), r.spec.mode.c_str(),
                r.spec.strategy.c_str(), rate_text(r).c_str(), r.error.c_str());
    return;
  }
  const Histogram& h = r.lat;
  if (h.count() == 0) {
    std::printf(
        "%-4s %-9s %-10s %-10s no measured message delivered (sent %llu, received %llu, unsent %llu: the "
        "sender did not get past the warm-up)\n",
        r.spec.transport.c_str(), r.spec.mode.c_str(), r.spec.strategy.c_str(), rate_text(r).c_str(),
        static_cast<unsigned long long>(r.sent), static_cast<unsigned long long>(r.received),
        static_cast<unsigned long long>(r.unsent));
    std::fflush(stdout);
    return;
  }
  std::printf(
      "%-4s %-9s %-10s %-10s %9.1f %9.1f %9.1f %9.1f %8.1f %9llu %9llu %6llu %7llu %6.1f %6.1f %6.1f %6.1f %5.2f\n",
      r.spec.transport.c_str(), r.spec.mode.c_str(), r.spec.strategy.c_str(), rate_text(r).c_str(),
      us(h.percentile(50)), us(h.percentile(99)), us(h.percentile(99.9)), us(h.max()), us(r.lat_offer.percentile(50)),
      static_cast<unsigned long long>(r.sent), static_cast<unsigned long long>(r.received),
      static_cast<unsigned long long>(r.lost), static_cast<unsigned long long>(r.unsent), r.pub_cpu.lib, r.sub_cpu.lib,
      r.pub_cpu.app, r.sub_cpu.app, others_pct(r.pub_cpu, r.sub_cpu));
  std::fflush(stdout);
}

void print_rtt_header() {
  std::printf("%-4s %-9s %-10s %6s %9s %9s %9s %9s %8s %4s %5s %7s %7s %7s %7s %5s\n", "tr", "mode", "strategy", "n",
              "p50 us", "p99 us", "p99.9 us", "max us", "send50", "tmo", "skip", "pingP%", "pongP%", "pingA%", "pongA%",
              "oth%");
}

void print_rtt_row(const RttResult& r) {
  if (!r.error.empty()) {
    std::printf("%-4s %-9s %-10s ERROR: %s\n", r.spec.transport.c_str(), r.spec.mode.c_str(), r.spec.strategy.c_str(),
                r.error.c_str());
    return;
  }
  const Histogram& h = r.rtt;
  std::printf("%-4s %-9s %-10s %6llu %9.1f %9.1f %9.1f %9.1f %8.1f %4llu %5llu %7.1f %7.1f %7.1f %7.1f %5.2f\n",
              r.spec.transport.c_str(), r.spec.mode.c_str(), r.spec.strategy.c_str(),
              static_cast<unsigned long long>(h.count()), us(h.percentile(50)), us(h.percentile(99)),
              us(h.percentile(99.9)), us(h.max()), us(r.rtt_svc.percentile(50)),
              static_cast<unsigned long long>(r.timeouts), static_cast<unsigned long long>(r.skipped), r.ping_cpu.lib,
              r.pong_cpu.lib, r.ping_cpu.app, r.pong_cpu.app, others_pct(r.ping_cpu, r.pong_cpu));
  std::fflush(stdout);
}

void print_idle_header() {
  std::printf("%-4s %-9s %-10s %8s %8s %8s %8s %6s  %s\n", "tr", "mode", "strategy", "window s", "pubP%", "subP%",
              "oth%", "stray", "poller counters (pub | sub, whole run)");
}

void print_idle_row(const IdleResult& r) {
  if (!r.error.empty()) {
    std::printf("%-4s %-9s %-10s ERROR: %s\n", r.spec.transport.c_str(), r.spec.mode.c_str(), r.spec.strategy.c_str(),
                r.error.c_str());
    return;
  }
  std::printf("%-4s %-9s %-10s %8.2f %8.2f %8.2f %8.2f %6llu  %s | %s\n", r.spec.transport.c_str(), r.spec.mode.c_str(),
              r.spec.strategy.c_str(), r.pub_cpu.window_s, r.pub_cpu.lib, r.sub_cpu.lib,
              others_pct(r.pub_cpu, r.sub_cpu), static_cast<unsigned long long>(r.stray), r.pub_counters.c_str(),
              r.sub_counters.c_str());
  std::fflush(stdout);
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", static_cast<int>(c));
    } else {
      out += c;
    }
  }
  return out;
}

std::string json_hist(const Histogram& h) {
  return absl::StrFormat(R"({"count": %u, "p50": %d, "p90": %d, "p99": %d, "p99_9": %d, "max": %d, "mean": %.0f})",
                         h.count(), h.percentile(50), h.percentile(90), h.percentile(99), h.percentile(99.9), h.max(),
                         h.mean());
}

std::string json_cpu(const CpuPct& c) {
  return absl::StrFormat(R"({"app": %.2f, "pollers": %.2f, "poller_threads": %d, "window_s": %.3f})", c.app, c.lib,
                         c.lib_threads, c.window_s);
}

std::string json_common(const Options& o, const PointSpec& p, const std::string& error) {
  return absl::StrFormat(
      R"("transport": "%s", "mode": "%s", "strategy": "%s", "round": %d, "processes": 2, "pin": "%s", "payload": %u, "warmup_s": %.3f, "error": "%s")",
      p.transport, p.mode, p.strategy, p.round, o.pin, o.payload, o.warmup_s, json_escape(error));
}

std::string json_rate(const Options& o, const PointResult& r) {
  return absl::StrFormat(
      R"({"kind": "rate", %s, "pattern": "%s", "rate_label": "%s", "rate": %.1f, "burst_size": %u, "burst_rate": %.1f, )"
      R"("duration_s": %.3f, "app_idle": "%s", "scheduled": %u, "sent": %u, "unsent": %u, "received": %u, "measured": %u, )"
      R"("lost": %u, "gaps": %u, "offer_retries": %u, "malformed": %u, "latency_ns": %s, "latency_from_offer_ns": %s, )"
      R"("send_lag_ns": %s, "cpu_pct": {"pub": %s, "sub": %s, "others": %.2f, "steal": %.2f}, "loadavg": %.2f, )"
      R"("poller_counters": {"pub": %s, "sub": %s}})",
      json_common(o, r.spec, r.error), r.rate.burst ? "burst" : "fixed", r.rate.label, r.rate.rate,
      r.rate.burst ? o.burst_size : 1, r.rate.burst ? o.burst_rate : r.rate.rate, o.duration_s, r.app_idle, r.scheduled,
      r.sent, r.unsent, r.received, r.measured, r.lost, r.gaps, r.retries, r.malformed, json_hist(r.lat),
      json_hist(r.lat_offer), json_hist(r.send_lag), json_cpu(r.pub_cpu), json_cpu(r.sub_cpu),
      others_pct(r.pub_cpu, r.sub_cpu), r.pub_cpu.host_steal, r.load, r.pub_counters, r.sub_counters);
}

std::string json_rtt(const Options& o, const RttResult& r) {
  return absl::StrFormat(
      R"({"kind": "rtt", %s, "interval_ms": %.3f, "duration_s": %.3f, "app_idle": "yield", "pings": %u, "replies": %u, )"
      R"("timeouts": %u, "skipped": %u, "rtt_ns": %s, "rtt_from_send_ns": %s, "cpu_pct": {"ping": %s, "pong": %s, )"
      R"("others": %.2f, "steal": %.2f}, )"
      R"("loadavg": %.2f, "poller_counters": {"ping": %s, "pong": %s}})",
      json_common(o, r.spec, r.error), o.rtt_interval_ms, o.rtt_duration_s, r.pings, r.replies, r.timeouts, r.skipped,
      json_hist(r.rtt), json_hist(r.rtt_svc), json_cpu(r.ping_cpu), json_cpu(r.pong_cpu),
      others_pct(r.ping_cpu, r.pong_cpu), r.ping_cpu.host_steal, r.load, r.ping_counters, r.pong_counters);
}

std::string json_idle(const Options& o, const IdleResult& r) {
  return absl::StrFormat(
      R"({"kind": "idle", %s, "idle_s": %.3f, "stray_messages": %u, "cpu_pct": {"pub": %s, "sub": %s, "others": %.2f, )"
      R"("steal": %.2f}, "loadavg": %.2f, "poller_counters": {"pub": %s, "sub": %s}})",
      json_common(o, r.spec, r.error), o.idle_s, r.stray, json_cpu(r.pub_cpu), json_cpu(r.sub_cpu),
      others_pct(r.pub_cpu, r.sub_cpu), r.pub_cpu.host_steal, r.load, r.pub_counters, r.sub_counters);
}

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  f.close();
  if (!f) {
    std::fprintf(stderr, "pollux-bench-rate: cannot write %s\n", path.c_str());
    return false;
  }
  return true;
}

std::string shell_quote(const std::string& s) {
  return absl::StrCat("'", absl::StrReplaceAll(s, {{"'", "'\\''"}}), "'");
}

// One data file per (transport, mode, strategy), fixed rates only (the burst pattern has no
// place on a rate axis; it is in the table and the JSON), then one gnuplot call per
// (transport, mode). False if a file or gnuplot failed.
bool write_plots(const Options& o, const std::vector<PointResult>& results) {
  if (mkdir(o.plot_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    std::fprintf(stderr, "pollux-bench-rate: --plot: cannot create %s: %s\n", o.plot_dir.c_str(), std::strerror(errno));
    return false;
  }
  bool ok = true;
  for (const auto& t : o.transports) {
    for (const auto& m : o.modes) {
      std::vector<std::string> plotted;
      for (const auto& s : o.strategies) {
        // One row per rate: the median over rounds (--rounds) of each column.
        std::map<double, std::vector<std::array<double, 5>>> by_rate;
        for (const auto& r : results) {
          if (r.spec.transport != t || r.spec.mode != m || r.spec.strategy != s || r.rate.burst || !r.error.empty()) {
            continue;
          }
          if (r.lat.count() == 0) continue;
          by_rate[r.rate.rate].push_back({us(r.lat.percentile(50)), us(r.lat.percentile(99)),
                                          r.pub_cpu.lib + r.sub_cpu.lib, r.pub_cpu.app + r.sub_cpu.app,
                                          us(r.lat.percentile(99.9))});
        }
        if (by_rate.empty()) continue;
        std::string sorted =
            "# rate_msgs_per_s p50_us p99_us pollers_cpu_pct(pub+sub) app_cpu_pct(pub+sub) p99_9_us"
            " (medians over rounds)\n";
        for (auto& [rate, rows] : by_rate) {
          double med[5];
          for (int c = 0; c < 5; ++c) {
            std::vector<double> v;
            for (const auto& row : rows) v.push_back(row[c]);
            std::sort(v.begin(), v.end());
            med[c] = v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
          }
          absl::StrAppendFormat(&sorted, "%.1f %.3f %.3f %.2f %.2f %.3f\n", rate, med[0], med[1], med[2], med[3],
                                med[4]);
        }
        ok &= write_file(absl::StrFormat("%s/rate-%s-%s-%s.dat", o.plot_dir, t, m, s), sorted);
        plotted.push_back(s);
      }
      if (plotted.empty()) continue;
      const std::string prefix = absl::StrFormat("%s/rate-%s-%s", o.plot_dir, t, m);
      const std::string vars = absl::StrFormat("prefix='%s'; strategies='%s'; outfile='%s.png'; ttl='%s, %s mode'",
                                               prefix, absl::StrJoin(plotted, " "), prefix, t, m);
      const std::string cmd = absl::StrFormat("gnuplot -e %s %s", shell_quote(vars), shell_quote(o.plot_script));
      const int rc = std::system(cmd.c_str());
      if (rc != 0) {
        std::fprintf(stderr,
                     "pollux-bench-rate: gnuplot failed (status %d) for %s.png: is gnuplot installed "
                     "(scripts/install-deps.sh) and is %s readable? Data files are in %s\n",
                     rc, prefix.c_str(), o.plot_script.c_str(), o.plot_dir.c_str());
        ok = false;
      } else {
        std::printf("plot: %s.png\n", prefix.c_str());
      }
    }
  }
  return ok;
}

}  // namespace

// Every spec, o.rounds times over, measured by run(o, spec): its row printed, its JSON line
// added to *json, *failed set by an error.
template <typename Run, typename Print, typename Json>
void run_rounds(const Options& o, const std::vector<PointSpec>& specs, int* index, bool* failed, std::string* json,
                Run run, Print print_row, Json to_json) {
  for (int round = 1; round <= o.rounds; ++round) {
    for (PointSpec p : specs) {
      p.index = (*index)++;
      p.round = round;
      const auto r = run(o, p);
      print_row(r);
      if (!r.error.empty()) *failed = true;
      *json += to_json(o, r) + "\n";
    }
  }
}

int main(int argc, char** argv) {
  const Options o = parse_options(argc, argv);
  // Accurate short sleeps for the sender (default slack is 50 us).
  (void)prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  g_base_port = 20000 + static_cast<int>(getpid() % 2000) * 16;
  Clock::init();
  if (o.pin == "split") pollux::bench::pin(o.cpu_a);
  std::printf("machine: %s\n", pollux::bench::machine_description().c_str());
  std::printf("clock: %.1f ns per Clock::now_ns()\n", pollux::bench::clock_cost_ns());
  std::printf("setup: publisher and subscriber in two processes (fork), pin %s", o.pin.c_str());
  if (o.pin == "split")
    std::printf(" (publisher + its poller on CPU %d, subscriber + its poller on CPU %d)", o.cpu_a, o.cpu_b);
  std::printf(", %zu-byte payload, udp %s on lo\n", o.payload, o.udp_address.c_str());
  std::printf(
      "cpu: %% of one core over the measurement window from /proc/self/task/*/stat; pollers = tasks created "
      "by the Context (pollux-poll-N in dedicated mode), app = the benchmark's own thread\n");

  // Validate each strategy once per (transport, mode) with the library's own parser, so a
  // rejected value is reported with the config's message and skipped.
  std::set<std::string> rejected;
  bool missing = false, failed = false;
  int index = 0;
  std::vector<PointSpec> specs;
  for (const auto& t : o.transports) {
    for (const auto& m : o.modes) {
      for (const auto& s : o.strategies) {
        PointSpec p{t, m, s, 0};
        const std::string cfg = make_config(o, p, "validate", -1, {"rate"});
        if (auto c = pollux::core::parse_config(cfg, "pollux-bench-rate"); !c.ok()) {
          std::fprintf(stderr, "pollux-bench-rate: %s/%s: strategy \"%s\" skipped, the config rejects it: %s\n",
                       t.c_str(), m.c_str(), s.c_str(), std::string(c.status().message()).c_str());
          rejected.insert(s);
          missing = true;
          continue;
        }
        specs.push_back(p);
      }
    }
  }
  std::string json;
  if (o.idle_s > 0) {
    std::printf("idle: one message, then %.1f s without traffic per point; apps asleep; pollers' CPU over the window\n",
                o.idle_s);
    print_idle_header();
    run_rounds(o, specs, &index, &failed, &json, run_idle, print_idle_row, json_idle);
  } else if (o.rtt) {
    std::printf(
        "rtt: one round trip every %.3f ms, %.1f s measured after %.1f s warm-up, apps sched_yield between "
        "empty polls; RTT from the scheduled ping time\n",
        o.rtt_interval_ms, o.rtt_duration_s, o.warmup_s);
    std::printf(
        "columns: RTT from the scheduled ping time; send50 = p50 from the actual send (not corrected); "
        "tmo = no reply within --rtt-timeout-ms; skip = pings not sent (the pinger fell > max(2 s, duration) behind); "
        "P%% = pollers' CPU, A%% = application thread's CPU (%% of one core) per process; oth%% = other "
        "processes' CPU meanwhile (of 200)\n");
    print_rtt_header();
    run_rounds(o, specs, &index, &failed, &json, run_rtt, print_rtt_row, json_rtt);
  } else {
    std::printf(
        "sweep: %.2f s measured after %.2f s warm-up per point; burst = %u messages at %.0f msg/s, average "
        "%.0f msg/s; latency from the scheduled send time\n",
        o.duration_s, o.warmup_s, o.burst_size, o.burst_rate, o.burst_avg);
    std::printf(
        "columns: latency from the scheduled send time; offer50 = p50 from the successful offer (not "
        "corrected); P%% = poller threads' CPU, A%% = application thread's CPU (%% of one core) of the "
        "publisher/subscriber process; oth%% = CPU used meanwhile by every other process on the machine "
        "(/proc/stat busy minus both processes; of 200)\n");
    print_rate_header();
    std::vector<PointResult> results;
    // Per (transport, mode), rate by rate, the strategies back to back: a comparison between
    // strategies at one rate is then minutes apart at most within a round.
    for (int round = 1; round <= o.rounds; ++round)
      for (const auto& t : o.transports)
        for (const auto& m : o.modes)
          for (const auto& rp : o.rates)
            for (auto p : specs) {
              if (p.transport != t || p.mode != m) continue;
              {
                p.index = index++;
                p.round = round;
                results.push_back(run_point(o, p, rp));
                print_rate_row(results.back());
                if (!results.back().error.empty()) failed = true;
                json += json_rate(o, results.back()) + "\n";
              }
            }
    if (!o.plot_dir.empty() && !write_plots(o, results)) failed = true;
  }
  if (!o.json.empty() && !write_file(o.json, json)) failed = true;
  if (!rejected.empty()) {
    std::printf("skipped strategies (rejected by the config): %s\n", absl::StrJoin(rejected, ", ").c_str());
  }
  if (failed) return 1;
  if (missing && !o.allow_missing) return 1;
  return 0;
}
