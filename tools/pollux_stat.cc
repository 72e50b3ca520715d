// pollux-stat: prints the counters of running (or crashed) Pollux processes from their
// shared-memory counters files, while they run.
//
//   pollux-stat [--dir /dev/shm] [--watch SECONDS] [--clean] [--all]
//
// --watch repeats every SECONDS and shows per-second rates; --clean removes the files of
// processes that no longer exist; zero counters are hidden unless --all.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>

#include "core/counters.h"

int main(int argc, char** argv) {
  std::string dir = "/dev/shm";
  double watch = 0;
  bool clean = false, all = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--dir" && i + 1 < argc) dir = argv[++i];
    else if (a == "--watch" && i + 1 < argc) watch = std::atof(argv[++i]);
    else if (a == "--clean") clean = true;
    else if (a == "--all") all = true;
    else {
      std::fprintf(stderr, "usage: %s [--dir DIR] [--watch SECONDS] [--clean] [--all]\n", argv[0]);
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
        std::printf("%s: %s\n", path.c_str(), std::string(snap.status().message()).c_str());
        continue;
      }
      if (!snap->alive && clean) {
        std::printf("removing %s (pid %d is gone)\n", path.c_str(), snap->pid);
        ::unlink(path.c_str());
        continue;
      }
      std::printf("== %s  pid %d%s  (%s)\n", snap->name.c_str(), snap->pid, snap->alive ? "" : " [exited]", path.c_str());
      for (const auto& c : snap->counters) {
        if (c.value == 0 && !all) continue;
        const std::string key = path + "|" + c.scope + "|" + c.name;
        std::printf("  %-40s %-24s %16llu", c.scope.c_str(), c.name.c_str(), static_cast<unsigned long long>(c.value));
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
