// process: the running Pollux processes (their counters files in the shm directory, as
// pollux-stat finds them) and their poller threads: which CPU each is pinned to, and any CPU
// that two pollers share (each would take half of it, and a sleeping one's wakeup waits for the
// other's time slice).
#include <unistd.h>

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/counters.h"
#include "tools/common/output.h"
#include "tools/doctor/checks.h"

namespace pollux::doctor {
namespace {

using V = Verdict;

struct PollerThread {
  int pid = 0;
  int tid = 0;
  std::string process;  // instance name (runtime.name) from the counters file
  std::string thread;   // comm: "pollux-poll-N", or the process's own name when unnamed
  bool named = false;
  std::vector<int> allowed;  // Cpus_allowed_list
  int last_cpu = -1;         // /proc/PID/task/TID/stat field 39 (processor)
  std::string label() const {
    return absl::StrFormat("pid %d (%s) %s", pid, process, named ? thread : absl::StrFormat("thread %d", tid));
  }
};

// "Cpus_allowed_list:\t1" from /proc/PID/task/TID/status.
std::vector<int> allowed_cpus(const HostFs& fs, const std::string& task_dir) {
  for (absl::string_view l : absl::StrSplit(fs.text(task_dir + "/status").value_or(""), '\n')) {
    if (absl::ConsumePrefix(&l, "Cpus_allowed_list:"))
      return parse_cpu_list(std::string(l)).value_or(std::vector<int>{});
  }
  return {};
}

// Field 39 of /proc/PID/task/TID/stat: the CPU the thread last ran on. The command name (field
// 2) may hold spaces and parentheses, so fields are counted after its closing parenthesis.
int last_cpu(const HostFs& fs, const std::string& task_dir) {
  const std::string s = fs.line(task_dir + "/stat").value_or("");
  const std::size_t close = s.rfind(')');
  if (close == std::string::npos) return -1;
  const std::vector<absl::string_view> f = absl::StrSplit(s.substr(close + 1), ' ', absl::SkipEmpty());
  int cpu = -1;
  if (f.size() > 36 && absl::SimpleAtoi(f[36], &cpu)) return cpu;  // f[0] is field 3 (state)
  return -1;
}

// The poller threads of process `pid`: threads named pollux-poll-N (since pollers name
// themselves), and, for builds before that, unnamed threads (the process's own comm) other than
// the main one that are pinned to a single CPU.
std::vector<PollerThread> poller_threads(const HostFs& fs, int pid, const std::string& process) {
  std::vector<PollerThread> out;
  const std::string proc = absl::StrFormat("/proc/%d", pid);
  const std::string comm = std::string(absl::StripTrailingAsciiWhitespace(fs.line(proc + "/comm").value_or("")));
  for (const std::string& t : fs.list(proc + "/task")) {
    PollerThread p;
    if (!absl::SimpleAtoi(t, &p.tid)) continue;
    const std::string dir = proc + "/task/" + t;
    p.pid = pid;
    p.process = process;
    p.thread = std::string(absl::StripTrailingAsciiWhitespace(fs.line(dir + "/comm").value_or("")));
    p.named = p.thread.rfind("pollux-poll-", 0) == 0;
    p.allowed = allowed_cpus(fs, dir);
    p.last_cpu = last_cpu(fs, dir);
    const bool unnamed_pinned = !p.named && p.tid != pid && p.thread == comm && p.allowed.size() == 1;
    if (p.named || unnamed_pinned) out.push_back(std::move(p));
  }
  return out;
}

}  // namespace

void check_processes(const Host& h, Report& r) {
  std::map<int, std::string> alive;  // pid -> instance name (one process may own several files)
  std::vector<std::string> dead;
  for (const std::string& path : core::list_counters_files(h.shm_dir)) {
    absl::StatusOr<core::CountersFileSnapshot> snap = core::read_counters_file(path);
    if (!snap.ok()) continue;  // not ours, or being written: pollux-stat shows why
    if (snap->alive) {
      alive.emplace(snap->pid, tools::printable(snap->name));
    } else {
      dead.push_back(absl::StrFormat("pid %d (%s)", snap->pid, tools::printable(snap->name)));
    }
  }
  if (!dead.empty()) {
    r.add("process", "exited", V::kInfo,
          absl::StrFormat("counters files of exited processes in %s: %s", h.shm_dir, absl::StrJoin(dead, ", ")),
          absl::StrFormat("pollux-stat --dir %s --clean removes them", h.shm_dir));
  }
  if (alive.empty()) {
    r.add("process", "running", V::kInfo,
          absl::StrFormat("no running Pollux process (no live pollux-*.counters in %s)", h.shm_dir));
  }

  std::map<int, std::vector<std::string>> by_cpu;  // pinned CPU -> pollers there
  for (const auto& [pid, name] : alive) {
    const std::vector<PollerThread> pollers = poller_threads(h.fs, pid, name);
    std::vector<std::string> parts;
    for (const PollerThread& p : pollers) {
      std::string where;
      if (p.allowed.size() == 1) {
        where = absl::StrFormat("pinned to CPU %d", p.allowed[0]);
        by_cpu[p.allowed[0]].push_back(p.label());
      } else {
        where = absl::StrFormat("unpinned (CPUs %s)", format_cpu_list(p.allowed));
      }
      if (p.last_cpu >= 0) absl::StrAppendFormat(&where, ", last ran on CPU %d", p.last_cpu);
      parts.push_back(absl::StrFormat("%s %s%s", p.named ? p.thread : absl::StrFormat("thread %d", p.tid), where,
                                      p.named ? "" : " (unnamed: a build before named pollers?)"));
    }
    r.add("process", absl::StrFormat("pid %d", pid), V::kInfo,
          absl::StrFormat("%s: %s", name,
                          parts.empty() ? std::string("no poller threads (inline mode, or none pinned)")
                                        : absl::StrJoin(parts, "; ")));
  }

  std::vector<std::string> shared;
  for (const auto& [cpu, who] : by_cpu) {
    if (who.size() > 1) shared.push_back(absl::StrFormat("CPU %d: %s", cpu, absl::StrJoin(who, ", ")));
  }
  if (!alive.empty()) {
    std::vector<int> free_cpus;
    for (int c : h.online) {
      if (by_cpu.count(c) == 0) free_cpus.push_back(c);
    }
    if (shared.empty()) {
      r.add("process", "poller cores", V::kOk,
            by_cpu.empty() ? std::string("no pinned pollers running")
                           : absl::StrFormat("no two running pollers share a CPU (pinned: CPU %s)",
                                             absl::StrJoin(by_cpu, ",", [](std::string* o, const auto& e) {
                                               absl::StrAppend(o, e.first);
                                             })));
    } else {
      r.add("process", "poller cores", V::kWarn,
            absl::StrCat(absl::StrJoin(shared, "; "), ": pollers sharing a CPU take turns at it"),
            absl::StrFormat("give each process its own CPUs with runtime.poller_cores%s, or run the less critical one "
                            "with runtime.threading = \"shared\"",
                            free_cpus.empty()
                                ? std::string(" (no CPU is free of pollers: fewer pollers per host)")
                                : absl::StrFormat(" (CPUs without a poller: %s)", format_cpu_list(free_cpus))));
    }
  }

  // The configuration's own pollers against the running ones.
  std::vector<std::string> taken;
  std::vector<int> free_cpus;
  for (int c : h.online) {
    if (by_cpu.count(c) == 0) free_cpus.push_back(c);
  }
  for (int c : h.pinned_cpus()) {
    if (auto it = by_cpu.find(c); it != by_cpu.end()) {
      taken.push_back(absl::StrFormat("CPU %d (%s)", c, absl::StrJoin(it->second, ", ")));
    }
  }
  if (!taken.empty()) {
    r.add("process", "new pollers", h.config_given ? V::kWarn : V::kInfo,
          absl::StrFormat("a process started %s would pin a poller to %s",
                          h.config_given ? "with this configuration" : "with the defaults", absl::StrJoin(taken, "; ")),
          free_cpus.empty()
              ? std::string("every online CPU already has a running poller")
              : absl::StrFormat("set runtime.poller_cores to CPUs without a poller: %s", format_cpu_list(free_cpus)));
  }
}

}  // namespace pollux::doctor
