// The command line of every program Pollux builds (tools, examples, benchmarks): one behaviour
// for all of them.
//   --help, -h   the program's description and every flag with its help, to stdout; exit 0
//                before anything runs
//   --version    "<program> <version>" (the CMake project version); exit 0
//   an unknown flag, a missing or bad value: "<program>: unknown flag '--cuont'; did you mean
//                '--count'? (see --help)" to stderr; exit 64 (EX_USAGE)
//
// Parser registers each flag once (help, a pointer to the variable holding its default) and fills
// the variables; the programs that keep a hand-written parser use the free functions below
// (handle_standard_flag, unknown_flag) so their messages and exit statuses are the same.
//
// The conventions themselves (kUsageExit, version, flags_in, closest, unknown_flag_message,
// handle_standard_flag, signal_name) are public, pollux/cli.h, so an application - the examples
// among them - follows them too; this tools library adds the parsers on top, over the standard
// library and that header only (no Pollux layer, no transport).
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pollux/cli.h"

namespace pollux::cli {

// Prints "<program>: <message>" to stderr and returns kUsageExit. `message` should end with
// "(see --help)"; unknown_flag_message's does.
int usage_error(std::string_view program, std::string_view message);

// For a program with its own parser: prints the unknown-flag message (candidates taken from
// `help`) and returns kUsageExit.
int unknown_flag(std::string_view program, std::string_view arg, std::string_view help);

// handle_standard_flag (pollux/cli.h) over the whole command line before parsing: --help or
// --version anywhere wins (so `prog --count x --help` prints the help, not an error). Stops at
// "--".
int handle_standard_flags(int argc, char** argv, std::string_view program, std::string_view help);

// ---- Hand-written parsers -------------------------------------------------------------------------
//
// `fail` is the program's usage error ("<program>: <message> (see --help)", exit 64); it must not
// return.
using Fail = void (*)(const std::string& message);

// `s`, the value of `flag`, read as a non-negative number with an optional suffix k/K (x1e3) or M
// (x1e6; also m where `lower_m_is_mega`): "10k" -> 10000.
double scaled_number(const std::string& flag, const std::string& s, Fail fail, bool lower_m_is_mega = false);

// Each argument in turn, with its value given as "--flag value" or "--flag=value".
class FlagReader {
 public:
  FlagReader(int argc, char** argv, Fail fail) : argc_(argc), argv_(argv), fail_(fail) {}

  // Moves to the next argument; false after the last.
  bool next();
  // The flag without its "=value" ("--count" of "--count=5").
  const std::string& flag() const { return flag_; }
  // The argument as it was given, for an unknown-flag message.
  const char* raw() const { return argv_[i_]; }
  // The flag's value: after '=', else the next argument ("<flag> needs a value" when none).
  std::string value();
  // Refuses "--flag=value" for a flag that takes none ("<flag> takes no value").
  void no_value() const;

 private:
  [[noreturn]] void fail(const std::string& message) const;

  int argc_;
  char** argv_;
  Fail fail_;
  int i_ = 0;
  std::string flag_, value_;
  bool has_value_ = false;
};

// ---- Parser -------------------------------------------------------------------------------------
//
// "--flag value" and "--flag=value" both work. On a usage error parse() prints the message and
// exits 64; on --help/--version it prints and exits 0 (a program's main calls it first thing).
class Parser {
 public:
  static constexpr int kUsageExit = cli::kUsageExit;

  Parser(std::string program, std::string about) : program_(std::move(program)), about_(std::move(about)) {}

  // An unsigned count in [min, max].
  Parser& count(const char* flag, std::uint64_t* v, const char* help, std::uint64_t min = 1,
                std::uint64_t max = UINT64_MAX) {
    return add(flag, "N", help, std::to_string(*v),
               [this, flag, v, min, max](const std::string& s) { *v = parse_uint(flag, s, min, max); });
  }
  // A signed integer in [min, max].
  Parser& integer(const char* flag, int* v, const char* help, int min, int max) {
    return add(flag, "N", help, std::to_string(*v), [this, flag, v, min, max](const std::string& s) {
      const bool neg = !s.empty() && s[0] == '-';
      const std::uint64_t mag = parse_uint(flag, neg ? s.substr(1) : s, 0, 1u << 31);
      const long long x = neg ? -static_cast<long long>(mag) : static_cast<long long>(mag);
      if (x < min || x > max) {
        fail(std::string(flag) + ": " + s + " is outside [" + std::to_string(min) + ", " + std::to_string(max) + "]");
      }
      *v = static_cast<int>(x);
    });
  }
  // A number (decimal point allowed) in [min, max].
  Parser& real(const char* flag, double* v, const char* metavar, const char* help, double min, double max) {
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
  Parser& text(const char* flag, std::string* v, const char* metavar, const char* help) {
    return add(flag, metavar, help, *v, [this, flag, v](const std::string& s) {
      if (s.empty()) fail(std::string(flag) + ": empty value");
      *v = s;
    });
  }
  // One of `choices`.
  Parser& choice(const char* flag, std::string* v, std::vector<std::string> choices, const char* help) {
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
  Parser& list(const char* flag, std::string* v, std::vector<std::string> known, const char* help) {
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
  Parser& toggle(const char* flag, bool* v, const char* help) {
    opts_.push_back({flag, "", help, "", [v](const std::string&) { *v = true; }, false});
    return *this;
  }
  // A flag without a value that prints something and exits 0 (like --help): `run` prints.
  Parser& action(const char* flag, const char* help, std::function<void()> run) {
    opts_.push_back({flag, "", help, "",
                     [run](const std::string&) {
                       run();
                       std::exit(0);
                     },
                     false});
    return *this;
  }
  // Arguments starting with `prefix` are not ours: they are collected into *out (e.g.
  // --benchmark_* for Google Benchmark) instead of being rejected.
  Parser& forward(const char* prefix, std::vector<std::string>* out, const char* help) {
    forward_prefix_ = prefix;
    forward_ = out;
    forward_help_ = help;
    return *this;
  }
  // Up to one bare number before any flag, for an older positional form ("N [R]" of
  // pollux-bench-ring); each positional fills the next of these.
  Parser& positional(const char* name, std::uint64_t* v, const char* help, std::uint64_t min = 1) {
    positionals_.push_back({name, "", help, std::to_string(*v),
                            [this, name, v, min](const std::string& s) { *v = parse_uint(name, s, min, UINT64_MAX); },
                            true});
    return *this;
  }
  // Text printed after the flags (what each case measures, examples).
  Parser& epilog(std::string text) {
    epilog_ = std::move(text);
    return *this;
  }

  // Parses argv[first..argc). --help and --version anywhere win over an error elsewhere.
  void parse(int argc, char** argv, int first = 1);

  [[noreturn]] void fail(const std::string& why) const;

  std::string help() const;
  const std::string& program() const { return program_; }

 private:
  struct Opt {
    std::string flag, meta, help, def;
    std::function<void(const std::string&)> set;
    bool takes_value = true;
  };

  Parser& add(const char* flag, std::string meta, const char* help, std::string def,
              std::function<void(const std::string&)> set) {
    opts_.push_back({flag, std::move(meta), help, std::move(def), std::move(set), true});
    return *this;
  }

  std::uint64_t parse_uint(const std::string& flag, const std::string& s, std::uint64_t min, std::uint64_t max) const;
  static std::string join(const std::vector<std::string>& v);

  std::string program_, about_, epilog_;
  std::vector<Opt> opts_, positionals_;
  std::string forward_prefix_, forward_help_;
  std::vector<std::string>* forward_ = nullptr;
};

}  // namespace pollux::cli
