// Shared helpers for the benchmark programs: machine description, clock cost, pinning, the
// command line (Cli: --help, flag validation, exit 64) and JSON-lines results (--json FILE).
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
#include "tools/common/json_out.h"

namespace pollux::bench {

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

inline void print_hist(const char* label, const core::Histogram& h) {
  std::printf("%-34s p50 %8.3f  p90 %8.3f  p99 %8.3f  p99.9 %8.3f  p99.99 %8.3f  max %9.3f us  (n=%llu)\n", label,
              h.percentile(50) / 1e3, h.percentile(90) / 1e3, h.percentile(99) / 1e3, h.percentile(99.9) / 1e3,
              h.percentile(99.99) / 1e3, static_cast<double>(h.max()) / 1e3, static_cast<unsigned long long>(h.count()));
}

// ---- command line -------------------------------------------------------------------------------
//
// Every flag of a program is registered once, with its help and a pointer to the variable
// holding its default; parse() fills the variables. --help (or -h) prints the program's
// description and one entry per flag (with its default) to stdout and exits 0 before anything
// runs; --machine prints machine_description() and exits 0 (bench/run-all.sh's machine.txt).
// An unknown flag, a missing value or a bad value prints "<program>: <flag>: <why> (see --help)"
// to stderr and exits 64 (EX_USAGE). "--flag value" and "--flag=value" both work.
class Cli {
 public:
  static constexpr int kUsageExit = 64;

  Cli(std::string program, std::string about) : program_(std::move(program)), about_(std::move(about)) {}

  // An unsigned count in [min, max].
  Cli& count(const char* flag, std::uint64_t* v, const char* help, std::uint64_t min = 1,
             std::uint64_t max = UINT64_MAX) {
    return add(flag, "N", help, std::to_string(*v), [this, flag, v, min, max](const std::string& s) {
      *v = parse_uint(flag, s, min, max);
    });
  }
  // A signed integer in [min, max].
  Cli& integer(const char* flag, int* v, const char* help, int min, int max) {
    return add(flag, "N", help, std::to_string(*v), [this, flag, v, min, max](const std::string& s) {
      const bool neg = !s.empty() && s[0] == '-';
      const std::uint64_t mag = parse_uint(flag, neg ? s.substr(1) : s, 0, 1u << 31);
      const long long x = neg ? -static_cast<long long>(mag) : static_cast<long long>(mag);
      if (x < min || x > max) fail(std::string(flag) + ": " + s + " is outside [" + std::to_string(min) + ", " +
                                   std::to_string(max) + "]");
      *v = static_cast<int>(x);
    });
  }
  // A number (decimal point allowed) in [min, max].
  Cli& real(const char* flag, double* v, const char* metavar, const char* help, double min, double max) {
    char def[32];
    std::snprintf(def, sizeof def, "%g", *v);
    return add(flag, metavar, help, def, [this, flag, v, min, max](const std::string& s) {
      char* end = nullptr;
      errno = 0;
      const double x = std::strtod(s.c_str(), &end);
      if (s.empty() || errno != 0 || end != s.c_str() + s.size() || !std::isfinite(x)) {
        fail(std::string(flag) + ": not a number: \"" + s + "\"");
      }
      if (x < min || x > max) fail(std::string(flag) + ": " + s + " is out of range");
      *v = x;
    });
  }
  // Free text (a path, an address); `metavar` names it in the help.
  Cli& text(const char* flag, std::string* v, const char* metavar, const char* help) {
    return add(flag, metavar, help, *v, [this, flag, v](const std::string& s) {
      if (s.empty()) fail(std::string(flag) + ": empty value");
      *v = s;
    });
  }
  // One of `choices`.
  Cli& choice(const char* flag, std::string* v, std::vector<std::string> choices, const char* help) {
    std::string meta;
    for (const auto& c : choices) {
      if (!meta.empty()) meta += '|';
      meta += c;
    }
    return add(flag, meta, help, *v, [this, flag, v, choices](const std::string& s) {
      for (const auto& c : choices) {
        if (c == s) {
          *v = s;
          return;
        }
      }
      fail(std::string(flag) + ": \"" + s + "\" is not one of " + join(choices));
    });
  }
  // A comma-separated, non-empty subset of `known` (the cases to run); the default is shown.
  Cli& list(const char* flag, std::string* v, std::vector<std::string> known, const char* help) {
    return add(flag, "LIST", help, *v, [this, flag, v, known](const std::string& s) {
      if (s.empty()) fail(std::string(flag) + ": empty list");
      for (std::size_t b = 0, e; b <= s.size(); b = e + 1) {
        e = s.find(',', b);
        if (e == std::string::npos) e = s.size();
        const std::string item = s.substr(b, e - b);
        bool ok = false;
        for (const auto& k : known) ok = ok || k == item;
        if (!ok) fail(std::string(flag) + ": unknown case \"" + item + "\" (known: " + join(known) + ")");
      }
      *v = s;
    });
  }
  // A flag without a value: sets *v to true.
  Cli& toggle(const char* flag, bool* v, const char* help) {
    opts_.push_back({flag, "", help, "", [v](const std::string&) { *v = true; }, false});
    return *this;
  }
  // Arguments starting with `prefix` are not ours: they are collected into *out (e.g.
  // --benchmark_* for Google Benchmark) instead of being rejected.
  Cli& forward(const char* prefix, std::vector<std::string>* out, const char* help) {
    forward_prefix_ = prefix;
    forward_ = out;
    forward_help_ = help;
    return *this;
  }
  // Up to one bare number before any flag, for an older positional form ("N [R]" of
  // pollux-bench-ring); each positional fills the next of these.
  Cli& positional(const char* name, std::uint64_t* v, const char* help, std::uint64_t min = 1) {
    positionals_.push_back({name, "", help, std::to_string(*v), [this, name, v, min](const std::string& s) {
                              *v = parse_uint(name, s, min, UINT64_MAX);
                            }, true});
    return *this;
  }
  // Text printed after the flags (what each case measures, examples).
  Cli& epilog(std::string text) {
    epilog_ = std::move(text);
    return *this;
  }

  void parse(int argc, char** argv, int first = 1) {
    std::size_t next_positional = 0;
    for (int i = first; i < argc; ++i) {
      std::string a = argv[i];
      if (a == "--help" || a == "-h") {
        std::fputs(help().c_str(), stdout);
        std::exit(0);
      }
      if (a == "--machine") {
        core::Clock::init();
        std::printf("%s\n", machine_description().c_str());
        std::exit(0);
      }
      if (forward_ != nullptr && a.rfind(forward_prefix_, 0) == 0) {
        forward_->push_back(a);
        continue;
      }
      if (a.rfind("--", 0) != 0) {
        if (next_positional < positionals_.size() && i - first == static_cast<int>(next_positional)) {
          positionals_[next_positional++].set(a);
          continue;
        }
        fail("unexpected argument \"" + a + "\"");
      }
      std::string value;
      bool inline_value = false;
      if (const std::size_t eq = a.find('='); eq != std::string::npos) {
        value = a.substr(eq + 1);
        a.resize(eq);
        inline_value = true;
      }
      const Opt* o = nullptr;
      for (const Opt& x : opts_) {
        if (x.flag == a) o = &x;
      }
      if (o == nullptr) fail("unknown flag \"" + a + "\"");
      if (!o->takes_value) {
        if (inline_value) fail(a + " takes no value");
        o->set("");
        continue;
      }
      if (!inline_value) {
        if (i + 1 >= argc) fail(a + " needs a value");
        value = argv[++i];
      }
      o->set(value);
    }
  }

  [[noreturn]] void fail(const std::string& why) const {
    std::fprintf(stderr, "%s: %s (see --help)\n", program_.c_str(), why.c_str());
    std::exit(kUsageExit);
  }

  std::string help() const {
    std::string h = about_ + "\n\nUsage: " + program_;
    for (const Opt& p : positionals_) h += " [" + p.flag + "]";
    h += " [flags]\n\n";
    auto entry = [&h](const std::string& left, const std::string& text, const std::string& def) {
      std::string l = "  " + left;
      if (l.size() < 26) {
        l.resize(26, ' ');
      } else {
        l += "\n" + std::string(26, ' ');
      }
      std::string body = text;
      if (!def.empty()) body += " (default " + def + ")";
      // Word-wrapped to 100 columns (a '\n' in the help counts as a space).
      std::string line;
      for (std::size_t b = 0; b <= body.size();) {
        std::size_t e = body.find_first_of(" \n", b);
        if (e == std::string::npos) e = body.size();
        const std::string word = body.substr(b, e - b);
        if (!line.empty() && line.size() + 1 + word.size() > 100 - 26) {
          h += l + line + "\n";
          l = std::string(26, ' ');
          line.clear();
        }
        if (!line.empty() && !word.empty()) line += ' ';
        line += word;
        b = e + 1;
      }
      if (!line.empty()) h += l + line + "\n";
    };
    for (const Opt& p : positionals_) entry(p.flag, p.help + " (older positional form)", p.def);
    for (const Opt& o : opts_) entry(o.flag + (o.meta.empty() ? "" : " " + o.meta), o.help, o.def);
    if (forward_ != nullptr) entry(forward_prefix_ + "...", forward_help_, "");
    entry("--machine", "print the machine description (CPU model, CPUs, kernel, clock) and exit", "");
    entry("--help", "this text", "");
    if (!epilog_.empty()) h += "\n" + epilog_ + (epilog_.back() == '\n' ? "" : "\n");
    return h;
  }

  const std::string& program() const { return program_; }

 private:
  struct Opt {
    std::string flag, meta, help, def;
    std::function<void(const std::string&)> set;
    bool takes_value = true;
  };

  Cli& add(const char* flag, std::string meta, const char* help, std::string def,
           std::function<void(const std::string&)> set) {
    opts_.push_back({flag, std::move(meta), help, std::move(def), std::move(set), true});
    return *this;
  }

  std::uint64_t parse_uint(const std::string& flag, const std::string& s, std::uint64_t min,
                           std::uint64_t max) const {
    char* end = nullptr;
    errno = 0;
    const unsigned long long x = std::strtoull(s.c_str(), &end, 10);
    if (s.empty() || s[0] < '0' || s[0] > '9' || errno != 0 || end != s.c_str() + s.size()) {
      fail(flag + ": not a whole number: \"" + s + "\"");
    }
    if (x < min || x > max) {
      fail(flag + ": " + s + " is outside [" + std::to_string(min) + ", " +
           (max == UINT64_MAX ? std::string("...") : std::to_string(max)) + "]");
    }
    return x;
  }

  static std::string join(const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) {
      if (!s.empty()) s += ',';
      s += x;
    }
    return s;
  }

  std::string program_, about_, epilog_;
  std::vector<Opt> opts_, positionals_;
  std::string forward_prefix_, forward_help_;
  std::vector<std::string>* forward_ = nullptr;
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
    add(JsonObject().str("program", program).str("machine", machine_description()).str("argv", args).str("date_utc", date));
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

}  // namespace pollux::bench
