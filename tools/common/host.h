// What a measuring program says about and does to its host: the machine's description, the
// cost of a clock read, pinning a thread, forking onto a CPU and waiting for that child. Shared by the benchmarks
// (bench/bench_util.h) and the tools (pollux-latency), so neither includes from the other.
#pragma once

#include <sched.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
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

// How a parent names its forked child in a failed wait_for_child ("subscriber process", "open its
// side") and what ends the wait early (`stop`, may be null; then *err = `stopped`).
struct ChildWait {
  const char* who;
  const char* ready;
  bool (*stop)() = nullptr;
  const char* stopped = "";
};

// Waits (every 200 us, at most 20 s) until the forked `child` has stored a state of at least
// `want` in `state`; the acquire load pairs with the child's release store. A state of -1 means
// the child failed, `error` (written before that store) saying why. False with *err: "<who>:
// <error>", "<who> exited early (status N)" or "<who> did not <ready> within 20 s".
inline bool wait_for_child(const std::atomic<int>& state, int want, const char* error, pid_t child, const ChildWait& w,
                           std::string* err) {
  const std::int64_t deadline = core::Clock::monotonic_ns() + 20'000'000'000;
  for (;;) {
    const int s = state.load(std::memory_order_acquire);  // pairs with the child's release
    if (s >= want) return true;
    if (s == -1) {
      *err = std::string(w.who) + ": " + error;
      return false;
    }
    if (w.stop != nullptr && w.stop()) {
      *err = w.stopped;
      return false;
    }
    int status = 0;
    if (waitpid(child, &status, WNOHANG) == child) {
      *err = std::string(w.who) + " exited early (status " + std::to_string(status) + ")";
      return false;
    }
    if (core::Clock::monotonic_ns() > deadline) {
      *err = std::string(w.who) + " did not " + w.ready + " within 20 s";
      return false;
    }
    usleep(200);
  }
}

}  // namespace pollux::host
