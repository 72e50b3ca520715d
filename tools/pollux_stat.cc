// pollux-stat: prints the counters of running (or crashed) Pollux processes from their
// shared-memory counters files, while they run.
//
//   pollux-stat [--dir /dev/shm] [--watch SECONDS] [--clean] [--all]
//
// --watch repeats every SECONDS and shows per-second rates; --clean removes the files of
// processes that no longer exist; zero counters are hidden unless --all.
//
// Any local user can leave a file named pollux-*.counters in a shared directory: files are
// copied, not mapped (no SIGBUS if one is truncated while read), links and FIFOs are refused,
// and names from the files are printed with control characters escaped.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>

#include "core/counters.h"

namespace {

// Scope and counter names come from files anyone may have written: no terminal escapes.
std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

constexpr char kUsage[] = "usage: %s [--dir DIR] [--watch SECONDS] [--clean] [--all] [--json]\n";

std::string json_str(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

const char* mode_name(std::uint64_t m) {
  switch (m) {
    case 0: return "busy";
    case 1: return "spin";
    case 2: return "interrupt";
  }
  return "?";
}

// One line per poller: its controller's current mode, the share of time in each mode, and
// its sleeps and wakeups (counters "poller N" / mode, time_*_ns, wakeups, ...).
void print_pollers(const pollux::core::CountersFileSnapshot& snap) {
  std::map<std::string, std::map<std::string, std::uint64_t>> pollers;
  for (const auto& c : snap.counters) {
    if (c.scope.rfind("poller ", 0) == 0 && c.scope.find(' ', 7) == std::string::npos) pollers[c.scope][c.name] = c.value;
  }
  for (auto& [scope, v] : pollers) {
    const double total = static_cast<double>(v["time_busy_ns"] + v["time_spin_ns"] + v["time_interrupt_ns"]);
    auto pct = [&](const char* k) { return total > 0 ? 100.0 * static_cast<double>(v[k]) / total : 0.0; };
    std::printf("  %s: mode %s (busy %.1f%%, spin %.1f%%, interrupt %.1f%% of %.1f s), spin budget %llu ns, "
                "sleeps %llu, wakeups %llu (spurious %llu, timer %llu), arm refusals %llu, mode switches %llu\n",
                printable(scope).c_str(), mode_name(v["mode"]), pct("time_busy_ns"), pct("time_spin_ns"),
                pct("time_interrupt_ns"), total / 1e9, static_cast<unsigned long long>(v["spin_budget_ns"]),
                static_cast<unsigned long long>(v["sleeps"]), static_cast<unsigned long long>(v["wakeups"]),
                static_cast<unsigned long long>(v["spurious_wakeups"]),
                static_cast<unsigned long long>(v["timer_wakeups"]), static_cast<unsigned long long>(v["arm_refused"]),
                static_cast<unsigned long long>(v["mode_switches"]));
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "/dev/shm";
  double watch = 0;
  bool clean = false, all = false, json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf(kUsage, argv[0]);
      std::printf(
          "Prints the counters of the Pollux processes whose counters files are in DIR (default /dev/shm).\n"
          "  --watch SECONDS  repeat every SECONDS, with per-second rates\n"
          "  --clean          remove the files of processes that no longer exist\n"
          "  --all            show zero counters too\n"
          "  --json           one JSON document: {\"files\":[{\"path\",\"name\",\"pid\",\"alive\",\"counters\":\n"
          "                   [{\"scope\",\"name\",\"stream_id\",\"value\"}]}]} (all counters, once)\n"
          "Each poller's line shows its idle controller: current mode (busy, spin, interrupt), time in\n"
          "each mode, sleeps, wakeups (spurious: woken with nothing to do; timer: runtime.sleep_timer_ms).\n");
      return 0;
    }
    if (a == "--dir" && i + 1 < argc) dir = argv[++i];
    else if (a == "--watch" && i + 1 < argc) watch = std::atof(argv[++i]);
    else if (a == "--clean") clean = true;
    else if (a == "--all") all = true;
    else if (a == "--json") json = true;
    else {
      std::fprintf(stderr, "pollux-stat: unknown argument '%s'\n", printable(a).c_str());
      std::fprintf(stderr, kUsage, argv[0]);
      return 64;
    }
  }
  if (json) {
    std::string out = "{\"files\":[";
    bool first = true;
    for (const std::string& path : pollux::core::list_counters_files(dir)) {
      auto snap = pollux::core::read_counters_file(path);
      if (!snap.ok()) continue;
      out += first ? "" : ",";
      first = false;
      out += "{\"path\":" + json_str(path) + ",\"name\":" + json_str(snap->name) +
             ",\"pid\":" + std::to_string(snap->pid) + ",\"alive\":" + (snap->alive ? "true" : "false") +
             ",\"counters\":[";
      for (std::size_t i = 0; i < snap->counters.size(); ++i) {
        const auto& c = snap->counters[i];
        out += (i ? "," : "") + std::string("{\"scope\":") + json_str(c.scope) + ",\"name\":" + json_str(c.name) +
               ",\"stream_id\":" + std::to_string(c.stream_id) + ",\"value\":" + std::to_string(c.value) + "}";
      }
      out += "]}";
    }
    out += "]}\n";
    std::fputs(out.c_str(), stdout);
    return 0;
  }
  std::map<std::string, std::uint64_t> prev;
  for (;;) {
    const auto files = pollux::core::list_counters_files(dir);
    if (files.empty()) std::printf("no pollux counters files in %s\n", dir.c_str());
    for (const std::string& path : files) {
      auto snap = pollux::core::read_counters_file(path);
      if (!snap.ok()) {
        std::printf("%s: %s\n", printable(path).c_str(), printable(std::string(snap.status().message())).c_str());
        continue;
      }
      if (!snap->alive && clean) {
        std::printf("removing %s (pid %d is gone)\n", printable(path).c_str(), snap->pid);
        ::unlink(path.c_str());
        continue;
      }
      std::printf("== %s  pid %d%s  (%s)\n", printable(snap->name).c_str(), snap->pid, snap->alive ? "" : " [exited]",
                  printable(path).c_str());
      print_pollers(*snap);
      for (const auto& c : snap->counters) {
        if (c.value == 0 && !all) continue;
        const std::string key = path + "|" + c.scope + "|" + c.name;
        std::printf("  %-40s %-24s %16llu", printable(c.scope).c_str(), printable(c.name).c_str(),
                    static_cast<unsigned long long>(c.value));
        if (watch > 0 && prev.count(key)) {
          std::printf("  %14.0f/s", static_cast<double>(c.value - prev[key]) / watch);
        }
        std::printf("\n");
        prev[key] = c.value;
      }
    }
    if (watch <= 0) break;
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::duration<double>(watch));
    std::printf("\n");
  }
  return 0;
}
