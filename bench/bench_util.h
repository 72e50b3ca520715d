// Shared helpers for the benchmark programs: machine description, clock cost, pinning (from
// tools/common/host.h), the command line (Cli: --help, flag validation, exit 64) and JSON-lines results (--json FILE).
#pragma once

#include <sched.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/clock.h"
#include "core/histogram.h"
#include "core/topology.h"
#include "tools/common/cli.h"
#include "tools/common/host.h"
#include "tools/common/json_out.h"

namespace pollux::bench {

// The host helpers the tools use too (tools/common/host.h).
using host::clock_cost_ns;
using host::fork_on;
using host::machine_description;
using host::pin;

// Forks the second process of a two-process benchmark onto CPU 1, pinned there, to run
// `child_main` (its result is the child's exit status); the parent pins itself to CPU 0.
// Returns the child's pid.
template <class F>
pid_t fork_pair(F&& child_main) {
  const pid_t child = fork_on(1);
  if (child == 0) {
    pin(1);
    _exit(child_main());
  }
  pin(0);
  return child;
}

inline void print_hist(const char* label, const core::Histogram& h) {
  std::printf("%-34s p50 %8.3f  p90 %8.3f  p99 %8.3f  p99.9 %8.3f  p99.99 %8.3f  max %9.3f us  (n=%llu)\n", label,
              h.percentile(50) / 1e3, h.percentile(90) / 1e3, h.percentile(99) / 1e3, h.percentile(99.9) / 1e3,
              h.percentile(99.99) / 1e3, static_cast<double>(h.max()) / 1e3,
              static_cast<unsigned long long>(h.count()));
}

// ---- command line -------------------------------------------------------------------------------
//
// Every program Pollux builds shares one command line (tools/common/cli.h): each flag is
// registered once, with its help and a pointer to the variable holding its default; --help (-h)
// prints the description and every flag with its default and exits 0 before anything runs;
// --version prints "<program> <version>"; an unknown flag, a missing or bad value exits 64 with
// "<program>: <why> (see --help)". A benchmark adds --machine: machine_description() and exit 0
// (bench/run-all.sh's machine.txt).
class Cli : public cli::Parser {
 public:
  Cli(std::string program, std::string about) : cli::Parser(std::move(program), std::move(about)) {
    action("--machine", "print the machine description (CPU model, CPUs, kernel, clock) and exit", [] {
      core::Clock::init();
      std::printf("%s\n", machine_description().c_str());
    });
  }
};

// Splits a comma-separated list (a validated --cases value).
inline std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  for (std::size_t b = 0, e; b <= s.size(); b = e + 1) {
    e = s.find(',', b);
    if (e == std::string::npos) e = s.size();
    out.push_back(s.substr(b, e - b));
  }
  return out;
}

// ---- JSON results --------------------------------------------------------------------------------
//
// --json FILE writes JSON lines: a first object describing the run ("program", "machine",
// "argv", "date_utc"), then one object per case (field "case") or ratio line (field "ratio").
// Latency fields are integers in ns: count, min_ns, mean_ns, p50_ns, p90_ns, p99_ns, p99_9_ns,
// p99_99_ns, max_ns; a case measured against a floor of the same run adds floor (the floor
// case's name), floor_p50_ns, ratio_p50 and ratio_p99; throughput cases carry msgs_per_s.
// docs/BENCHMARKS.md lists each program's cases.
class JsonObject {
 public:
  JsonObject& str(std::string_view key, std::string_view v) {
    sep(key);
    body_ += quote(v);
    return *this;
  }
  template <typename T>
  JsonObject& num(std::string_view key, T v) {
    static_assert(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>);
    sep(key);
    if constexpr (std::is_integral_v<T>) {
      body_ += std::to_string(v);
    } else {
      body_ += number(static_cast<double>(v));
    }
    return *this;
  }
  JsonObject& flag(std::string_view key, bool v) {
    sep(key);
    body_ += v ? "true" : "false";
    return *this;
  }
  JsonObject& nums(std::string_view key, const std::vector<double>& v) {
    sep(key);
    body_ += "[";
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (i > 0) body_ += ", ";
      body_ += number(v[i]);
    }
    body_ += "]";
    return *this;
  }
  // count and the percentiles of `h` (ns).
  JsonObject& latency(const core::Histogram& h) {
    num("count", h.count()).num("min_ns", h.min()).num("mean_ns", std::llround(h.mean()));
    num("p50_ns", h.percentile(50)).num("p90_ns", h.percentile(90)).num("p99_ns", h.percentile(99));
    return num("p99_9_ns", h.percentile(99.9)).num("p99_99_ns", h.percentile(99.99)).num("max_ns", h.max());
  }
  // The floor of the same run this case is held against, and the ratios to it.
  JsonObject& floor(std::string_view floor_case, const core::Histogram& floor_h, const core::Histogram& h) {
    str("floor", floor_case).num("floor_p50_ns", floor_h.percentile(50)).num("floor_p99_ns", floor_h.percentile(99));
    num("ratio_p50", ratio(h.percentile(50), floor_h.percentile(50)));
    return num("ratio_p99", ratio(h.percentile(99), floor_h.percentile(99)));
  }
  std::string text() const { return "{" + body_ + "}"; }

  static double ratio(std::int64_t a, std::int64_t b) {
    return b > 0 ? static_cast<double>(a) / static_cast<double>(b) : std::nan("");
  }

 private:
  void sep(std::string_view key) {
    if (!body_.empty()) body_ += ", ";
    body_ += quote(key) + ": ";
  }
  // JSON has no NaN or infinity: such a value (a ratio to a zero floor) is null.
  static std::string number(double v) {
    if (!std::isfinite(v)) return "null";
    char b[40];
    std::snprintf(b, sizeof b, std::fabs(v) >= 1e6 ? "%.0f" : "%.6g", v);
    return b;
  }
  static std::string quote(std::string_view s) { return tools::JsonOut::quote(s); }
  std::string body_;
};

// The objects of one run, written to --json FILE at the end (nothing when the path is empty).
class JsonLines {
 public:
  // The first line: program, machine (machine_description(): call after Clock::init()),
  // command line and date.
  JsonLines(const std::string& program, int argc, char** argv) {
    std::string args;
    for (int i = 0; i < argc; ++i) {
      if (i > 0) args += ' ';
      args += argv[i];
    }
    char date[32];
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
    add(JsonObject()
            .str("program", program)
            .str("machine", machine_description())
            .str("argv", args)
            .str("date_utc", date));
  }
  void add(const JsonObject& o) { lines_ += o.text() + "\n"; }
  // False (and a message naming the file) when it cannot be written.
  bool write(const std::string& path) const {
    if (path.empty()) return true;
    FILE* f = std::fopen(path.c_str(), "w");
    const bool ok = f != nullptr && std::fputs(lines_.c_str(), f) >= 0;
    if (f != nullptr && std::fclose(f) != 0) return complain(path);
    return ok || complain(path);
  }

 private:
  static bool complain(const std::string& path) {
    std::fprintf(stderr, "cannot write %s: %s\n", path.c_str(), std::strerror(errno));
    return false;
  }
  std::string lines_;
};

// Writes `text` to `path` (nothing when `path` is empty); false, with "<program>: cannot write
// PATH" on stderr, when it cannot.
inline bool write_text(const std::string& path, const std::string& text, const char* program) {
  if (path.empty()) return true;
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr || std::fputs(text.c_str(), f) < 0 || std::fclose(f) != 0) {
    std::fprintf(stderr, "%s: cannot write %s\n", program, path.c_str());
    return false;
  }
  return true;
}

}  // namespace pollux::bench
