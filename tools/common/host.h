// What a measuring program says about and does to its host: the machine's description, the
// cost of a clock read, pinning a thread and forking onto a CPU. Shared by the benchmarks
// (bench/bench_util.h) and the tools (pollux-latency), so neither includes from the other.
#pragma once

#include <sched.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

#include "core/clock.h"
#include "core/histogram.h"
#include "core/topology.h"

namespace pollux::host {

inline std::string machine_description() {
  std::string model = "?";
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  }
  utsname u{};
  uname(&u);
  return model + ", " + std::to_string(sysconf(_SC_NPROCESSORS_ONLN)) + " CPUs, kernel " + u.release + ", clock " +
         core::Clock::describe();
}

// Cost of one Clock::now_ns() call, measured as the median of batches.
inline double clock_cost_ns() {
  core::Histogram h;
  for (int r = 0; r < 200; ++r) {
    const std::int64_t a = core::Clock::now_ns();
    std::int64_t x = 0;
    for (int i = 0; i < 100; ++i) x += core::Clock::now_ns();
    const std::int64_t b = core::Clock::now_ns();
    h.record((b - a) * 10);  // tenths of ns per call
    if (x == 42) std::puts("");
  }
  return static_cast<double>(h.percentile(50)) / 1000.0;
}

inline void pin(int cpu) {
  if (cpu < 0) return;
  if (auto s = core::topology().pin_current_thread(cpu); !s.ok()) {
    std::fprintf(stderr, "warning: %s\n", std::string(s.message()).c_str());
  }
}

// fork() whose child runs on `child_cpu` from its first instruction: the parent moves the child
// there before returning. (A parent pinned to a CPU and running SCHED_FIFO would otherwise keep
// a same-priority child, which inherits its affinity, from ever running to pin itself.)
inline pid_t fork_on(int child_cpu) {
  const pid_t child = fork();
  if (child > 0 && child_cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(child_cpu, &set);
    if (sched_setaffinity(child, sizeof set, &set) != 0) std::perror("warning: sched_setaffinity(child)");
  }
  return child;
}

}  // namespace pollux::host
