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

constexpr char kUsage[] = "usage: %s [--dir DIR] [--watch SECONDS] [--clean] [--all]\n";

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "/dev/shm";
  double watch = 0;
  bool clean = false, all = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf(kUsage, argv[0]);
      std::printf(
          "Prints the counters of the Pollux processes whose counters files are in DIR (default /dev/shm).\n"
          "  --watch SECONDS  repeat every SECONDS, with per-second rates\n"
          "  --clean          remove the files of processes that no longer exist\n"
          "  --all            show zero counters too\n");
      return 0;
    }
    if (a == "--dir" && i + 1 < argc) dir = argv[++i];
    else if (a == "--watch" && i + 1 < argc) watch = std::atof(argv[++i]);
    else if (a == "--clean") clean = true;
    else if (a == "--all") all = true;
    else {
      std::fprintf(stderr, "pollux-stat: unknown argument '%s'\n", printable(a).c_str());
      std::fprintf(stderr, kUsage, argv[0]);
      return 64;
    }
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
