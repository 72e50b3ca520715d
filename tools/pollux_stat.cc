// pollux-stat: what the Pollux processes of this host are doing, read from the files they share
// in the shm directory while they run (as Aeron's AeronStat, LossStat and ErrorStat read its CnC
// file): per process its pollers (thread, core, idle controller mode), publications (topic,
// position, back-pressure by cause), subscriptions (position, lag, gaps, losses), error log;
// per shm stream log its publisher and every attached subscriber's position and lag; the CPU
// claims of automatic poller placement.
//
//   pollux-stat [--dir DIR] [--watch SECONDS [--count N]] [--clean] [--all] [--json] [--errors]
//   pollux-stat [--dir DIR] --serve HOST:PORT [--max-connections N] [--timeout-ms N] [--json]
//
// Inputs are files any local user can leave in a shared directory: they are copied, never
// mapped (no SIGBUS if one is truncated while read), links and FIFOs are refused, every size
// and index is validated, and names from the files are printed with control characters escaped.
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "api/metrics.h"
#include "core/config_values.h"
#include "core/controller.h"
#include "core/counters.h"
#include "core/idle.h"
#include "core/placement.h"
#include "core/poller_counters.h"
#include "core/process.h"
#include "core/stream_counters.h"
#include "tools/common/cli.h"
#include "tools/common/json_out.h"
#include "tools/common/output.h"
#include "transport/shm/shm_segment.h"

namespace {

using pollux::core::CounterKind;
using pollux::core::CountersFileSnapshot;
using pollux::core::CounterSnapshot;
using pollux::tools::JsonOut;
namespace shm = pollux::transport::shm;
// The names of the counters this tool reads, from the tables that declare them.
using PollerNames = pollux::core::PollerCounters::names;
using StreamNames = pollux::core::StreamCounters::names;
// Every poller and stream counter is shown below (text and JSON): a new one must be added there.
static_assert(pollux::core::PollerCounters::kCounterCount == 18);
static_assert(pollux::core::StreamCounters::kCounterCount == 14);

constexpr char kUsage[] =
    "usage: pollux-stat [--dir DIR] [--watch SECONDS [--count N]] [--clean] [--all] [--json] [--errors]\n"
    "       pollux-stat [--dir DIR] --serve HOST:PORT [--max-connections N] [--timeout-ms N] [--json]\n";

constexpr int kNoInput = 66;  // EX_NOINPUT: DIR does not exist or cannot be read

constexpr char kHelp[] =
    "Shows what the Pollux processes of this host are doing, from the files they share in DIR\n"
    "(runtime.shm_dir, default /dev/shm), while they run.\n"
    "\n"
    "  --dir DIR          the shm directory to read (default /dev/shm)\n"
    "  --watch SECONDS    a new snapshot every SECONDS, with per-second rates; Ctrl-C ends. On a\n"
    "                     terminal the screen is cleared and redrawn; into a file or a pipe the\n"
    "                     snapshots follow each other, separated by a line of dashes\n"
    "  --count N          with --watch: stop after N snapshots (default: until Ctrl-C)\n"
    "  --clean            first remove what dead processes left: counters files of processes that\n"
    "                     no longer run (older builds' too), stream logs whose publisher is dead (or\n"
    "                     closed) and that no live process has attached, and CPU claim files nobody\n"
    "                     holds - of every Pollux application using DIR, not only yours (a process\n"
    "                     that closed cleanly left nothing; this is for those killed)\n"
    "  --all              show zero counters and every transport counter too\n"
    "  --errors           only the error logs (every distinct error: count, first and last time)\n"
    "  --json             one JSON document instead of text (cannot be combined with --watch):\n"
    "                     {snapshot_ns, snapshot_time, dir, processes:[{path, name, pid, alive,\n"
    "                     start_ns, start_time, uptime_s, errors, pollers:[...], publications:[...],\n"
    "                     subscriptions:[...], error_log:{...}, counters:[...]}], shm_streams:[...],\n"
    "                     cpu_claims:[...], unreadable:[...], removed:[...]} (README, Tools)\n"
    "  --serve HOST:PORT  serve the counters of every process in DIR over HTTP until SIGINT/SIGTERM:\n"
    "                     GET /metrics (Prometheus text format; OpenMetrics when Accept asks for\n"
    "                     application/openmetrics-text), GET / (a live page: rates, gaps, NAKs,\n"
    "                     controller state, latency percentiles), GET /api/snapshot (its JSON).\n"
    "                     Only the address given is bound: 127.0.0.1:9464 or :9464 is loopback,\n"
    "                     0.0.0.0:9464 every interface; port 0 takes a free port. Prints\n"
    "                     \"serving URL\" (with --json: {\"url\":...,\"dir\":...}) once listening\n"
    "  --max-connections N  with --serve: open connections at most (default 16); a new one past it\n"
    "                     closes the oldest\n"
    "  --timeout-ms N     with --serve: a request must arrive within N ms (default 5000)\n"
    "  --version          print \"pollux-stat <version>\" and exit\n"
    "  -h, --help         this text\n"
    "\n"
    "Per process: each poller's thread (pollux-poll-N), tid, pinned core, idle strategy and, for\n"
    "adaptive/interrupt, the controller's mode (busy, spin, interrupt = asleep) and time in each;\n"
    "each publication's position (shm: log bytes; udp/rdma: next sequence), messages, bytes and\n"
    "back-pressure by cause (log_full: the slowest shm subscriber; ring_full: the poller is behind;\n"
    "no_slot: every buffer in flight; transport: refused by the transport); each subscription's\n"
    "position and lag behind the publisher (shm: bytes; udp/rdma: messages, when the publisher runs\n"
    "on this host), gaps, messages lost, overruns; the error log.\n"
    "\n"
    "Exit status: 0; 64 usage error; 66 DIR does not exist, is not a directory or cannot be read;\n"
    "69 --serve cannot listen on the address (in use, not this host's).\n";

using pollux::tools::printable;  // names from files anyone may have written: no terminal escapes

std::string bytes_text(std::uint64_t b) {
  if (b >= (1ull << 30) && b % (1ull << 30) == 0) return absl::StrFormat("%uGiB", b >> 30);
  if (b >= (1ull << 20) && b % (1ull << 20) == 0) return absl::StrFormat("%uMiB", b >> 20);
  if (b >= (1ull << 10) && b % (1ull << 10) == 0) return absl::StrFormat("%uKiB", b >> 10);
  return absl::StrFormat("%u", b);
}

// ---- the snapshot ---------------------------------------------------------------------------------

// The counters of one publisher, subscriber or poller (one owner id in one file).
struct Group {
  CounterKind kind = CounterKind::kOther;
  std::uint16_t owner = 0;
  std::uint32_t stream_id = 0;
  std::string scope;
  std::map<std::string, std::uint64_t, std::less<>> v;
  std::uint64_t get(std::string_view k) const {
    auto it = v.find(k);
    return it == v.end() ? 0 : it->second;
  }
  bool has(std::string_view k) const { return v.find(k) != v.end(); }
  // "pub stream 7 quotes" -> "quotes" (a scope filled to its 55 characters was cut: marked).
  std::string topic() const {
    std::string_view s = scope;
    for (int words = 0; words < 3 && !s.empty(); ++words) {
      const auto sp = s.find(' ');
      s = sp == std::string_view::npos ? std::string_view() : s.substr(sp + 1);
    }
    std::string t(s);
    if (scope.size() >= sizeof(pollux::core::CounterLabel::scope) - 1) t += "...";
    return t;
  }
  int poller_index() const { return std::atoi(scope.c_str() + std::min<std::size_t>(scope.size(), 7)); }
};

struct Position {
  std::optional<std::uint64_t> value;
  const char* unit = "";             // "bytes" (shm log) or "sequence" (udp/rdma: the next sequence)
  std::optional<std::uint64_t> lag;  // subscribers: publisher position - this one
};

// A late-joining subscriber's counters (scope "late join <topic>", api/late_join.cc).
struct LateJoin {
  std::string topic;
  std::map<std::string, std::uint64_t, std::less<>> v;
  std::uint64_t get(std::string_view k) const {
    auto it = v.find(k);
    return it == v.end() ? 0 : it->second;
  }
  const char* state() const {
    static constexpr const char* kNames[] = {"replaying", "catching_up", "merged", "live"};
    const std::uint64_t s = get("state");
    return s < 4 ? kNames[s] : "unknown";
  }
};
constexpr std::string_view kLateJoinScope = "late join ";
constexpr std::string_view kLateJoinCounts[] = {"replayed", "buffered", "live", "duplicates", "missing", "fell_behind"};

struct Process {
  CountersFileSnapshot snap;
  std::vector<Group> pollers, pubs, subs;
  std::vector<LateJoin> late_joins;
  std::vector<CounterSnapshot> other;
  std::map<std::uint32_t, std::uint64_t> transport_pub_position;  // stream -> next sequence (udp/rdma)
  std::uint64_t errors = 0;
};

struct Claim {
  int cpu = -1;
  bool held = false;
  pollux::core::ClaimHolder holder;
};

struct Snapshot {
  std::string dir;
  std::int64_t taken_ns = 0;
  std::vector<Process> procs;
  std::vector<std::pair<std::string, std::string>> unreadable;  // path, why
  std::vector<shm::SegmentStatus> segments;
  std::vector<Claim> claims;
  std::vector<std::string> removed;  // --clean
};

// The runtime.name part of "pollux-<name>-stream-<id>.log".
std::string segment_owner_name(const std::string& path) {
  const std::string base = path.substr(path.rfind('/') + 1);
  const auto end = base.rfind("-stream-");
  return end == std::string::npos || end < 7 ? "" : base.substr(7, end - 7);
}

Process make_process(CountersFileSnapshot snap) {
  Process p;
  std::map<std::pair<int, int>, Group> groups;
  for (const CounterSnapshot& c : snap.counters) {
    const bool grouped = c.owner != 0 && (c.kind == CounterKind::kPublisher || c.kind == CounterKind::kSubscriber ||
                                          c.kind == CounterKind::kPoller);
    if (grouped) {
      Group& g = groups[{static_cast<int>(c.kind), c.owner}];
      g.kind = c.kind;
      g.owner = c.owner;
      g.stream_id = c.stream_id;
      g.scope = c.scope;
      g.v[c.name] = c.value;
      continue;
    }
    if (c.kind == CounterKind::kPublisher && c.name == StreamNames::position) {  // a transport's sequence
      std::uint64_t& pos = p.transport_pub_position[c.stream_id];
      pos = std::max(pos, c.value);
    }
    if (c.kind == CounterKind::kProcess && c.name == "errors") p.errors = c.value;
    if (std::string_view(c.scope).rfind(kLateJoinScope, 0) == 0) {
      const std::string topic = c.scope.substr(kLateJoinScope.size());
      auto it =
          std::find_if(p.late_joins.begin(), p.late_joins.end(), [&](const LateJoin& l) { return l.topic == topic; });
      if (it == p.late_joins.end()) it = p.late_joins.insert(p.late_joins.end(), LateJoin{topic, {}});
      it->v[c.name] = c.value;
      continue;
    }
    p.other.push_back(c);
  }
  for (auto& [key, g] : groups) {  // in owner order: the order they were opened
    if (g.kind == CounterKind::kPublisher) p.pubs.push_back(std::move(g));
    if (g.kind == CounterKind::kSubscriber) p.subs.push_back(std::move(g));
    if (g.kind == CounterKind::kPoller) p.pollers.push_back(std::move(g));
  }
  p.snap = std::move(snap);
  return p;
}

Snapshot take_snapshot(const std::string& dir, bool clean) {
  Snapshot s;
  s.dir = dir;
  if (clean) {
    for (const std::string& path : pollux::core::list_counters_files(dir)) {
      auto snap = pollux::core::read_counters_file(path);
      bool dead = snap.ok() && !snap->alive;
      if (!snap.ok() && absl::IsFailedPrecondition(snap.status())) {
        // Another version's file (an older build's process): its pid alone decides.
        auto pid = pollux::core::counters_file_pid(path);
        dead = pid.ok() && !pollux::core::process_alive(*pid);
      }
      if (dead && ::unlink(path.c_str()) == 0) s.removed.push_back(path);
    }
    for (const std::string& path : shm::list_segment_files(dir)) {
      if (auto r = shm::remove_if_abandoned(path); r.ok() && *r) s.removed.push_back(path);
    }
    for (std::string& path : pollux::core::remove_unheld_claims(dir)) s.removed.push_back(std::move(path));
  }
  s.taken_ns = pollux::core::wall_clock_ns();
  for (const std::string& path : pollux::core::list_counters_files(dir)) {
    auto snap = pollux::core::read_counters_file(path);
    if (!snap.ok()) {
      if (!absl::IsNotFound(snap.status())) s.unreadable.emplace_back(path, std::string(snap.status().message()));
      continue;
    }
    s.procs.push_back(make_process(std::move(*snap)));
  }
  std::stable_sort(s.procs.begin(), s.procs.end(), [](const Process& a, const Process& b) {
    return a.snap.start_ns < b.snap.start_ns;  // oldest first (a process's contexts in creation order)
  });
  for (const std::string& path : shm::list_segment_files(dir)) {
    auto st = shm::read_segment_status(path);
    if (st.ok()) {
      s.segments.push_back(std::move(*st));
    } else if (!absl::IsNotFound(st.status())) {
      s.unreadable.emplace_back(path, std::string(st.status().message()));
    }
  }
  for (int cpu : pollux::core::claimed_cpus(dir)) {
    s.claims.push_back({cpu, pollux::core::claim_held(dir, cpu), pollux::core::read_claim(dir, cpu)});
  }
  return s;
}

const shm::SegmentStatus* find_segment(const Snapshot& s, const Process& p, std::uint32_t stream_id) {
  for (const auto& seg : s.segments) {
    if (seg.layout.stream_id == stream_id && segment_owner_name(seg.path) == p.snap.name) return &seg;
  }
  return nullptr;
}

Position publisher_position(const Snapshot& s, const Process& p, const Group& g) {
  Position pos;
  if (const auto* seg = find_segment(s, p, g.stream_id); seg != nullptr && seg->layout.publisher_pid == p.snap.pid) {
    pos.value = seg->tail;
    pos.unit = "bytes";
  } else if (auto it = p.transport_pub_position.find(g.stream_id); it != p.transport_pub_position.end()) {
    pos.value = it->second;
    pos.unit = "sequence";
  }
  return pos;
}

Position subscriber_position(const Snapshot& s, const Process& p, const Group& g) {
  Position pos;
  if (const auto* seg = find_segment(s, p, g.stream_id)) {
    // The process's slots in the log (several subscribers of one stream in one process: the
    // one furthest behind).
    for (const auto& sub : seg->subscribers) {
      if (sub.pid != p.snap.pid || sub.state != shm::kSlotActive) continue;
      pos.value = pos.value ? std::min(*pos.value, sub.position) : sub.position;
    }
    if (pos.value) {
      pos.unit = "bytes";
      if (seg->tail >= *pos.value) pos.lag = seg->tail - *pos.value;
      return pos;
    }
  }
  if (g.has(StreamNames::position)) {
    pos.value = g.get(StreamNames::position);
    pos.unit = "sequence";
    // The publisher of the stream when it runs on this host (udp/rdma over loopback or a
    // local NIC); a remote publisher's position is not known here.
    std::optional<std::uint64_t> pub;
    for (const Process& q : s.procs) {
      if (!q.snap.alive) continue;
      if (auto it = q.transport_pub_position.find(g.stream_id); it != q.transport_pub_position.end()) {
        pub = pub ? std::max(*pub, it->second) : it->second;
      }
    }
    if (pub && *pub >= *pos.value) pos.lag = *pub - *pos.value;
  }
  return pos;
}

std::string mode_name(std::uint64_t m) {
  return m < static_cast<std::uint64_t>(pollux::core::kPollModes)
             ? std::string(pollux::core::PollController::mode_name(static_cast<pollux::core::PollMode>(m)))
             : "?";
}

std::string idle_name(const Group& g) {
  if (!g.has(PollerNames::idle_strategy)) return "?";
  const std::uint64_t k = g.get(PollerNames::idle_strategy);
  return k <= static_cast<std::uint64_t>(pollux::core::IdleKind::kAdaptive)
             ? std::string(pollux::core::idle_kind_name(static_cast<pollux::core::IdleKind>(k)))
             : "?";
}

bool has_controller(const Group& g) {
  const std::string idle = idle_name(g);
  return idle == "adaptive" || idle == "interrupt";
}

// Back-pressure by cause: the cause as shown, and its counter.
struct BackPressureCause {
  const char* cause;
  std::string_view counter;
};
constexpr BackPressureCause kBackPressureCauses[] = {{"log_full", StreamNames::bp_log_full},
                                                     {"ring_full", StreamNames::bp_ring_full},
                                                     {"no_slot", StreamNames::bp_no_slot},
                                                     {"transport", StreamNames::bp_transport}};

std::uint64_t back_pressure_total(const Group& g) {
  std::uint64_t n = 0;
  for (const BackPressureCause& c : kBackPressureCauses) n += g.get(c.counter);
  return n;
}

// ---- rates (--watch) ------------------------------------------------------------------------------

struct Rates {
  std::map<std::string, std::uint64_t> prev;
  std::int64_t prev_ns = 0;
  double seconds = 0;  // from the previous snapshot to the one being drawn (0: the first)
  void begin(const Snapshot& s) { seconds = prev_ns != 0 ? static_cast<double>(s.taken_ns - prev_ns) / 1e9 : 0; }
  void end(const Snapshot& s, std::map<std::string, std::uint64_t> values) {
    prev_ns = s.taken_ns;
    prev = std::move(values);
  }
  // Per-second rate of a counter since the previous snapshot, or "".
  std::string of(const std::string& key, std::uint64_t value) const {
    auto it = prev.find(key);
    if (seconds <= 0 || it == prev.end() || value < it->second) return "";
    return absl::StrFormat(" [%.0f/s]", static_cast<double>(value - it->second) / seconds);
  }
};

std::string key_of(const Process& p, const Group& g, std::string_view name) {
  return absl::StrFormat("%s|%d|%u|%s", p.snap.path, static_cast<int>(g.kind), g.owner, name);
}

// ---- text -----------------------------------------------------------------------------------------

void text_errors(std::string& out, const Process& p) {
  const auto& log = p.snap.errors;
  if (!p.snap.error_log_status.ok()) {
    absl::StrAppendFormat(&out, "  error log unreadable: %s\n",
                          printable(std::string(p.snap.error_log_status.message())));
    return;
  }
  if (log.entries.empty() && log.dropped == 0) {
    absl::StrAppendFormat(&out, "  errors: none\n");
    return;
  }
  absl::StrAppendFormat(
      &out, "  errors: %u distinct, %u in all%s\n", log.entries.size(), log.observations,
      log.dropped != 0 ? absl::StrFormat(" (%u of errors that did not fit the log)", log.dropped) : "");
  for (const auto& e : log.entries) {
    absl::StrAppendFormat(&out, "    x%-6u %s  first %s  last %s\n      %s\n", e.count,
                          pollux::core::error_code_name(e.code), pollux::core::format_wall_clock(e.first_ns),
                          pollux::core::format_wall_clock(e.last_ns), printable(e.message));
  }
}

std::string position_text(const Position& pos) {
  if (!pos.value) return "position ?";
  std::string s = absl::StrFormat("position %u%s", *pos.value, pos.unit[0] == 'b' ? " B" : " (seq)");
  if (pos.lag) absl::StrAppendFormat(&s, "  lag %u%s", *pos.lag, pos.unit[0] == 'b' ? " B" : " msgs");
  return s;
}

std::string render_text(const Snapshot& s, const Rates& rates, bool all, bool errors_only,
                        std::map<std::string, std::uint64_t>* values) {
  std::string out;
  absl::StrAppendFormat(&out, "pollux-stat  %s  %s\n", pollux::core::format_wall_clock(s.taken_ns), printable(s.dir));
  for (const std::string& r : s.removed) absl::StrAppendFormat(&out, "removed %s\n", printable(r));
  if (s.procs.empty()) absl::StrAppendFormat(&out, "no pollux counters files in %s\n", printable(s.dir));
  for (const auto& [path, why] : s.unreadable) absl::StrAppendFormat(&out, "%s: %s\n", printable(path), printable(why));
  auto rate = [&](const Process& p, const Group& g, std::string_view name) {
    const std::string k = key_of(p, g, name);
    (*values)[k] = g.get(name);
    return rates.of(k, g.get(name));
  };
  for (const Process& p : s.procs) {
    const double up = static_cast<double>(s.taken_ns - p.snap.start_ns) / 1e9;
    absl::StrAppendFormat(&out, "== %s  pid %d %s  started %s%s  %s\n", printable(p.snap.name), p.snap.pid,
                          p.snap.alive ? "running" : "[exited]", pollux::core::format_wall_clock(p.snap.start_ns),
                          p.snap.alive ? absl::StrFormat(" (up %.1f s)", up) : "", printable(p.snap.path));
    if (errors_only) {
      text_errors(out, p);
      continue;
    }
    for (const Group& g : p.pollers) {
      const int idx = g.poller_index();
      absl::StrAppendFormat(
          &out, "  poller %d  thread pollux-poll-%d  tid %u  %s  idle %s", idx, idx, g.get(PollerNames::thread_id),
          g.has(PollerNames::pinned_cpu) ? absl::StrFormat("cpu %u", g.get(PollerNames::pinned_cpu)) : "unpinned",
          idle_name(g));
      if (has_controller(g)) {
        const double total = static_cast<double>(g.get(PollerNames::time_busy_ns) + g.get(PollerNames::time_spin_ns) +
                                                 g.get(PollerNames::time_interrupt_ns));
        auto pct = [&](std::string_view k) { return total > 0 ? 100.0 * static_cast<double>(g.get(k)) / total : 0.0; };
        absl::StrAppendFormat(
            &out,
            ": mode %s (busy %.1f%%, spin %.1f%%, interrupt %.1f%% of %.1f s), spin budget %u ns, "
            "sleeps %u, wakeups %u (spurious %u, timer %u), arm refusals %u, mode switches %u",
            mode_name(g.get(PollerNames::mode)), pct(PollerNames::time_busy_ns), pct(PollerNames::time_spin_ns),
            pct(PollerNames::time_interrupt_ns), total / 1e9, g.get(PollerNames::spin_budget_ns),
            g.get(PollerNames::sleeps), g.get(PollerNames::wakeups), g.get(PollerNames::spurious_wakeups),
            g.get(PollerNames::timer_wakeups), g.get(PollerNames::arm_refused), g.get(PollerNames::mode_switches));
      } else {
        absl::StrAppendFormat(&out, " (no controller: polls without sleeping)");
      }
      absl::StrAppendFormat(&out, ", duty cycles %u%s\n", g.get(PollerNames::cycles), rate(p, g, PollerNames::cycles));
    }
    for (const Group& g : p.pubs) {
      const std::uint64_t bp = back_pressure_total(g);
      absl::StrAppendFormat(&out, "  pub %s (stream %u)  %s  messages %u%s  bytes %u%s  back-pressure %u",
                            printable(g.topic()), g.stream_id, position_text(publisher_position(s, p, g)),
                            g.get(StreamNames::messages), rate(p, g, StreamNames::messages), g.get(StreamNames::bytes),
                            rate(p, g, StreamNames::bytes), bp);
      if (bp != 0) {
        std::string causes;
        for (const BackPressureCause& c : kBackPressureCauses) {
          const std::uint64_t n = g.get(c.counter);
          if (n != 0) absl::StrAppendFormat(&causes, "%s%s %u", causes.empty() ? "" : ", ", c.cause, n);
        }
        absl::StrAppendFormat(&out, " (%s)", causes);
      }
      absl::StrAppendFormat(&out, "  not connected %u  too large %u\n", g.get(StreamNames::not_connected),
                            g.get(StreamNames::too_large));
    }
    for (const Group& g : p.subs) {
      absl::StrAppendFormat(&out,
                            "  sub %s (stream %u)  %s  messages %u%s  bytes %u%s  gaps %u  lost %u  overruns %u  "
                            "stream events %u  malformed %u\n",
                            printable(g.topic()), g.stream_id, position_text(subscriber_position(s, p, g)),
                            g.get(StreamNames::messages), rate(p, g, StreamNames::messages), g.get(StreamNames::bytes),
                            rate(p, g, StreamNames::bytes), g.get(StreamNames::gaps), g.get(StreamNames::lost),
                            g.get(StreamNames::overruns), g.get(StreamNames::events), g.get(StreamNames::malformed));
    }
    for (const LateJoin& l : p.late_joins) {
      absl::StrAppendFormat(&out, "  late join %s  state %s", printable(l.topic), l.state());
      for (std::string_view k : kLateJoinCounts) absl::StrAppendFormat(&out, "  %s %u", k, l.get(k));
      out += "\n";
    }
    text_errors(out, p);
    bool header = false;
    for (const CounterSnapshot& c : p.other) {
      if (c.kind == CounterKind::kProcess) continue;  // errors: above
      if (c.value == 0 && !all) continue;
      if (!header) {
        absl::StrAppendFormat(&out, "  other counters%s:\n", all ? "" : " (non-zero; --all for every one)");
        header = true;
      }
      const std::string k = absl::StrFormat("%s|%s|%s", p.snap.path, c.scope, c.name);
      (*values)[k] = c.value;
      absl::StrAppendFormat(&out, "    %-44s %-26s %16u%s\n", printable(c.scope), printable(c.name), c.value,
                            rates.of(k, c.value));
    }
  }
  if (errors_only) return out;
  if (!s.segments.empty()) absl::StrAppendFormat(&out, "shm stream logs:\n");
  for (const auto& seg : s.segments) {
    absl::StrAppendFormat(
        &out, "  %s  stream %u session %08x  publisher pid %d %s  position %u B  next sequence %u  log %s\n",
        printable(seg.path.substr(seg.path.rfind('/') + 1)), seg.layout.stream_id, seg.layout.session_id,
        seg.layout.publisher_pid,
        seg.closed            ? "(closed)"
        : seg.publisher_alive ? "(running)"
                              : "(dead)",
        seg.tail, seg.next_sequence, bytes_text(seg.layout.log_size));
    for (const auto& sub : seg.subscribers) {
      absl::StrAppendFormat(&out, "    subscriber slot %u  pid %d %s  position %u B  lag %s\n", sub.slot, sub.pid,
                            sub.alive                        ? "(running)"
                            : sub.state == shm::kSlotEvicted ? "(evicted)"
                                                             : "(gone)",
                            sub.position,
                            seg.tail >= sub.position ? absl::StrFormat("%u B", seg.tail - sub.position) : "?");
    }
  }
  if (!s.claims.empty()) absl::StrAppendFormat(&out, "cpu claims (automatic poller placement):\n");
  for (const Claim& c : s.claims) {
    absl::StrAppendFormat(&out, "  cpu %d  %s\n", c.cpu,
                          !c.held          ? std::string("free (left by an exited process)")
                          : c.holder.known ? absl::StrFormat("held by pid %d (%s)", c.holder.pid, c.holder.name)
                                           : std::string("held (holder unknown)"));
  }
  return out;
}

// ---- JSON -----------------------------------------------------------------------------------------

// Opens a publication's or subscription's object with what names it.
void json_endpoint_begin(JsonOut& j, const Group& g) {
  j.begin_object().field("topic", g.topic()).field("stream_id", g.stream_id).field("owner", static_cast<int>(g.owner));
}

void json_position(JsonOut& j, const Position& pos) {
  j.key("position");
  if (pos.value) {
    j.num(*pos.value);
  } else {
    j.null();
  }
  j.key("position_unit").str(pos.unit);
}

std::string render_json(const Snapshot& s) {
  JsonOut j;
  j.begin_object();
  j.field("snapshot_ns", s.taken_ns)
      .field("snapshot_time", pollux::core::format_wall_clock(s.taken_ns))
      .field("dir", s.dir);
  j.key("processes").begin_array();
  for (const Process& p : s.procs) {
    j.begin_object();
    j.field("path", p.snap.path).field("name", p.snap.name).field("pid", p.snap.pid).field("alive", p.snap.alive);
    j.field("start_ns", p.snap.start_ns).field("start_time", pollux::core::format_wall_clock(p.snap.start_ns));
    j.field("uptime_s", static_cast<double>(s.taken_ns - p.snap.start_ns) / 1e9).field("errors", p.errors);
    j.key("pollers").begin_array();
    for (const Group& g : p.pollers) {
      const int idx = g.poller_index();
      j.begin_object().field("index", idx).field("thread", absl::StrFormat("pollux-poll-%d", idx));
      j.field("tid", g.get(PollerNames::thread_id)).key("cpu");
      if (g.has(PollerNames::pinned_cpu)) {
        j.num(g.get(PollerNames::pinned_cpu));
      } else {
        j.null();
      }
      j.field("idle", idle_name(g)).field("controller", has_controller(g)).key("mode");
      if (has_controller(g)) {
        j.str(mode_name(g.get(PollerNames::mode)));
      } else {
        j.null();
      }
      for (std::string_view k :
           {PollerNames::time_busy_ns, PollerNames::time_spin_ns, PollerNames::time_interrupt_ns,
            PollerNames::spin_budget_ns, PollerNames::sleeps, PollerNames::wakeups, PollerNames::spurious_wakeups,
            PollerNames::timer_wakeups, PollerNames::arm_refused, PollerNames::mode_switches, PollerNames::cycles,
            PollerNames::work, PollerNames::idle, PollerNames::doorbells}) {
        j.field(k, g.get(k));
      }
      j.end_object();
    }
    j.end_array();
    j.key("publications").begin_array();
    for (const Group& g : p.pubs) {
      json_endpoint_begin(j, g);
      json_position(j, publisher_position(s, p, g));
      j.field(StreamNames::messages, g.get(StreamNames::messages)).field(StreamNames::bytes, g.get(StreamNames::bytes));
      j.key("back_pressure").begin_object().field("total", back_pressure_total(g));
      for (const BackPressureCause& c : kBackPressureCauses) j.field(c.cause, g.get(c.counter));
      j.end_object();
      j.field(StreamNames::not_connected, g.get(StreamNames::not_connected))
          .field(StreamNames::too_large, g.get(StreamNames::too_large))
          .end_object();
    }
    j.end_array();
    j.key("subscriptions").begin_array();
    for (const Group& g : p.subs) {
      json_endpoint_begin(j, g);
      const Position pos = subscriber_position(s, p, g);
      json_position(j, pos);
      j.key("lag");
      if (pos.lag) {
        j.num(*pos.lag);
      } else {
        j.null();
      }
      for (std::string_view k : {StreamNames::messages, StreamNames::bytes, StreamNames::gaps, StreamNames::lost,
                                 StreamNames::overruns, StreamNames::events, StreamNames::malformed}) {
        j.field(k, g.get(k));
      }
      j.end_object();
    }
    j.end_array();
    j.key("late_joins").begin_array();
    for (const LateJoin& l : p.late_joins) {
      j.begin_object().field("topic", l.topic).field("state", l.state());
      for (std::string_view k : kLateJoinCounts) j.field(k, l.get(k));
      j.end_object();
    }
    j.end_array();
    j.key("error_log").begin_object();
    j.field("ok", p.snap.error_log_status.ok());
    if (!p.snap.error_log_status.ok()) j.field("problem", std::string(p.snap.error_log_status.message()));
    j.field("capacity", p.snap.errors.capacity).field("observations", p.snap.errors.observations);
    j.field("dropped", p.snap.errors.dropped).key("entries").begin_array();
    for (const auto& e : p.snap.errors.entries) {
      j.begin_object().field("code", e.code).field("code_name", pollux::core::error_code_name(e.code));
      j.field("message", e.message).field("count", e.count).field("first_ns", e.first_ns);
      j.field("first_time", pollux::core::format_wall_clock(e.first_ns)).field("last_ns", e.last_ns);
      j.field("last_time", pollux::core::format_wall_clock(e.last_ns)).end_object();
    }
    j.end_array().end_object();
    j.key("counters").begin_array();
    for (const CounterSnapshot& c : p.snap.counters) {
      j.begin_object().field("scope", c.scope).field("name", c.name).field("stream_id", c.stream_id);
      j.field("kind", static_cast<int>(c.kind)).field("owner", static_cast<int>(c.owner)).field("value", c.value);
      j.end_object();
    }
    j.end_array();
    j.end_object();
  }
  j.end_array();
  j.key("shm_streams").begin_array();
  for (const auto& seg : s.segments) {
    j.begin_object().field("path", seg.path).field("stream_id", seg.layout.stream_id);
    j.field("session_id", seg.layout.session_id).field("publisher_pid", seg.layout.publisher_pid);
    j.field("publisher_alive", seg.publisher_alive).field("closed", seg.closed).field("log_size", seg.layout.log_size);
    j.field("position", seg.tail).field("next_sequence", seg.next_sequence).key("subscribers").begin_array();
    for (const auto& sub : seg.subscribers) {
      j.begin_object().field("slot", sub.slot).field("pid", sub.pid).field("alive", sub.alive);
      j.field("evicted", sub.state == shm::kSlotEvicted).field("position", sub.position).key("lag");
      if (seg.tail >= sub.position) {
        j.num(seg.tail - sub.position);
      } else {
        j.null();
      }
      j.end_object();
    }
    j.end_array().end_object();
  }
  j.end_array();
  j.key("cpu_claims").begin_array();
  for (const Claim& c : s.claims) {
    j.begin_object().field("cpu", c.cpu).field("held", c.held).key("pid");
    if (c.holder.known) {
      j.num(c.holder.pid).field("name", c.holder.name);
    } else {
      j.null();
    }
    j.end_object();
  }
  j.end_array();
  j.key("unreadable").begin_array();
  for (const auto& [path, why] : s.unreadable) j.begin_object().field("path", path).field("error", why).end_object();
  j.end_array();
  j.key("removed").begin_array();
  for (const std::string& r : s.removed) j.str(r);
  j.end_array();
  j.end_object();
  return j.text() + "\n";
}

// DIR must be a directory this process can list: a missing one is an error, not an empty host.
std::string dir_problem(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return absl::StrFormat("cannot read directory %s: %s", dir, std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) return absl::StrFormat("%s is not a directory", dir);
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return absl::StrFormat("cannot read directory %s: %s", dir, std::strerror(errno));
  ::closedir(d);
  return "";
}

// --serve: the endpoint over every counters file of `dir`, until SIGINT or SIGTERM.
int serve(const std::string& dir, const pollux::detail::metrics::ServerOptions& options, bool json) {
  // Blocked here, before the server's thread starts (it inherits the mask): sigwait takes them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  auto server = pollux::detail::metrics::Server::start(options, [dir] {
    std::vector<CountersFileSnapshot> procs;
    for (const std::string& path : pollux::core::list_counters_files(dir)) {
      if (auto snap = pollux::core::read_counters_file(path); snap.ok()) procs.push_back(std::move(*snap));
    }
    return procs;
  });
  if (!server.ok()) {
    std::fprintf(stderr, "pollux-stat: %s\n", printable(std::string(server.status().message())).c_str());
    return server.status().code() == absl::StatusCode::kInvalidArgument ? 64 : 69;
  }
  if (json) {
    JsonOut j;
    j.begin_object().field("url", (*server)->url()).field("port", static_cast<int>((*server)->port()));
    j.field("dir", dir).end_object();
    std::printf("%s\n", j.text().c_str());
  } else {
    std::printf("serving %s (metrics: %smetrics) for %s; Ctrl-C or SIGTERM ends\n", (*server)->url().c_str(),
                (*server)->url().c_str(), printable(dir).c_str());
  }
  std::fflush(stdout);
  int sig = 0;
  sigwait(&stop, &sig);
  return 0;
}

int usage_error(const std::string& msg) {
  std::fprintf(stderr, "pollux-stat: %s\n%s(see pollux-stat --help)\n", printable(msg).c_str(), kUsage);
  return 64;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "/dev/shm";
  double watch = 0;
  std::uint64_t count = 0;  // --watch snapshots; 0 = until interrupted
  bool clean = false, all = false, json = false, errors_only = false;
  pollux::detail::metrics::ServerOptions serve_options;
  auto positive = [](const char* v, std::uint32_t lo, std::uint32_t hi, std::uint32_t* out) {
    char* end = nullptr;
    const unsigned long long n = v != nullptr ? std::strtoull(v, &end, 10) : 0;
    if (v == nullptr || end == v || *end != '\0' || v[0] == '-' || n < lo || n > hi) return false;
    *out = static_cast<std::uint32_t>(n);
    return true;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    if (const int rc = pollux::cli::handle_standard_flag(a, "pollux-stat", absl::StrCat(kUsage, kHelp)); rc >= 0) {
      return rc;  // --help, --version
    }
    if (a == "--dir") {
      const char* v = value();
      if (v == nullptr) return usage_error("--dir needs a directory");
      dir = v;
    } else if (a == "--watch") {
      const char* v = value();
      char* end = nullptr;
      watch = v != nullptr ? std::strtod(v, &end) : 0;
      if (v == nullptr || end == v || *end != '\0' || !(watch > 0) || watch > 86400) {
        return usage_error(absl::StrFormat("--watch needs a number of seconds in (0, 86400], got \"%s\"", v ? v : ""));
      }
    } else if (a == "--count") {
      const char* v = value();
      char* end = nullptr;
      const unsigned long long n = v != nullptr ? std::strtoull(v, &end, 10) : 0;
      if (v == nullptr || end == v || *end != '\0' || v[0] == '-' || n == 0) {
        return usage_error(absl::StrFormat("--count needs a positive number of snapshots, got \"%s\"", v ? v : ""));
      }
      count = n;
    } else if (a == "--clean") {
      clean = true;
    } else if (a == "--all") {
      all = true;
    } else if (a == "--json") {
      json = true;
    } else if (a == "--errors") {
      errors_only = true;
    } else if (a == "--serve") {
      const char* v = value();
      if (v == nullptr) return usage_error("--serve needs HOST:PORT, e.g. 127.0.0.1:9464");
      std::string e;
      (void)pollux::core::parse_listen_address(v, &e);
      if (!e.empty()) return usage_error(absl::StrCat("--serve: ", e));
      serve_options.listen = v;
    } else if (a == "--max-connections") {
      if (!positive(value(), 1, 1024, &serve_options.max_connections)) {
        return usage_error("--max-connections needs a number in [1, 1024]");
      }
    } else if (a == "--timeout-ms") {
      if (!positive(value(), 100, 600'000, &serve_options.timeout_ms)) {
        return usage_error("--timeout-ms needs a number of milliseconds in [100, 600000]");
      }
    } else {
      return pollux::cli::unknown_flag("pollux-stat", printable(a), kHelp);
    }
  }
  if (json && watch > 0) return usage_error("--json prints one document: it cannot be combined with --watch");
  const bool serving = !serve_options.listen.empty();
  if (serving && (watch > 0 || clean || all || errors_only)) {
    return usage_error("--serve serves every counter: it cannot be combined with --watch, --clean, --all or --errors");
  }
  if (!serving && (serve_options.max_connections != 16 || serve_options.timeout_ms != 5000)) {
    return usage_error("--max-connections and --timeout-ms set up --serve: give --serve HOST:PORT too");
  }
  if (count != 0 && watch <= 0) return usage_error("--count counts --watch snapshots: give --watch SECONDS too");
  if (const std::string why = dir_problem(dir); !why.empty()) {
    std::fprintf(stderr, "pollux-stat: %s (--dir is the runtime.shm_dir of the processes to show; default /dev/shm)\n",
                 printable(why).c_str());
    return kNoInput;
  }
  if (serving) return serve(dir, serve_options, json);
  if (json) {
    std::fputs(render_json(take_snapshot(dir, clean)).c_str(), stdout);
    return 0;
  }
  Rates rates;
  // Escape codes only for a terminal: in a file or a pipe they are noise.
  const bool terminal = ::isatty(STDOUT_FILENO) == 1;
  for (std::uint64_t n = 1;; ++n) {
    const bool first = n == 1;
    const Snapshot s = take_snapshot(dir, clean && first);
    std::map<std::string, std::uint64_t> values;
    rates.begin(s);
    const std::string text = render_text(s, rates, all, errors_only, &values);
    if (watch > 0 && terminal) {
      std::fputs("\033[H\033[2J", stdout);  // cursor home + clear: the screen is redrawn
    } else if (watch > 0 && !first) {
      std::fputs("--------------------------------------------------------------------------------\n", stdout);
    }
    std::fputs(text.c_str(), stdout);
    if (watch <= 0 || n == count) break;
    std::fflush(stdout);
    rates.end(s, std::move(values));
    std::this_thread::sleep_for(std::chrono::duration<double>(watch));
  }
  return 0;
}
