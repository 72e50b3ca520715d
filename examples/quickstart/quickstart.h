// What quickstart-pub and quickstart-sub share: the message, and their command line.
#pragma once

#include <signal.h>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

// A quote as it travels: plain bytes, read back with memcpy (a payload has no alignment
// guarantee).
struct Quote {
  std::uint64_t id;  // 0, 1, 2, ...: the subscriber checks that none is missing
  std::int64_t bid;
  std::int64_t ask;
};

struct Options {
  std::string config = "quickstart.toml";
  std::uint64_t count = 100'000;
  bool zero_copy = false;  // quickstart-pub only
};

// The signal (SIGINT or SIGTERM) that asked the program to stop, or 0. The programs check it in
// their loops, then close the publisher or subscriber and the context - which removes this
// process's files from runtime.shm_dir (its counters file; the publisher's stream log) - and print
// their summary. Left to the default action, the signal would kill the process on the spot and
// those files would stay behind until `pollux-stat --clean` or the next publisher of the stream.
inline volatile std::sig_atomic_t g_stop_signal = 0;

// Ctrl-C (SIGINT) and SIGTERM (kill, systemd, docker stop) set g_stop_signal. No SA_RESTART: a
// system call the program is blocked in (Subscriber::wait() sleeping) returns early with EINTR,
// so the loop sees the flag at once instead of at the end of the wait.
inline void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = [](int sig) { g_stop_signal = sig; };
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

// " stopped=SIGINT" for the summary line of a program a signal stopped, else "".
inline const char* stopped_text() {
  if (g_stop_signal == 0) return "";
  return g_stop_signal == SIGTERM ? " stopped=SIGTERM" : " stopped=SIGINT";
}

// The Pollux version these programs were built against (CMakeLists.txt and the Makefile pass it).
#ifndef QUICKSTART_VERSION
#define QUICKSTART_VERSION "unknown"
#endif

// A known flag that `arg` looks like a typo of (two neighbours swapped, one letter missing or
// extra, or an abbreviation), or nullptr: the hint after "unknown flag".
inline const char* similar_flag(const std::string& arg, bool zero_copy_flag) {
  const std::string a = arg.substr(0, arg.find('='));
  for (const char* known : {"--config", "--count", "--zero-copy", "--help", "--version"}) {
    const std::string k = known;
    if (k == "--zero-copy" && !zero_copy_flag) continue;
    if (a.size() >= 4 && k.compare(0, a.size(), a) == 0) return known;  // "--cou"
    if (a.size() == k.size()) {
      std::size_t diff = 0, first = 0;
      for (std::size_t i = 0; i < a.size(); ++i) {
        if (a[i] != k[i] && diff++ == 0) first = i;
      }
      if (diff == 1) return known;  // one letter wrong
      if (diff == 2 && first + 1 < a.size() && a[first] == k[first + 1] && a[first + 1] == k[first]) return known;
    }
    if (a.size() + 1 == k.size() || a.size() == k.size() + 1) {  // one letter missing or extra
      const std::string& longer = a.size() > k.size() ? a : k;
      const std::string& shorter = a.size() > k.size() ? k : a;
      for (std::size_t i = 0; i < longer.size(); ++i) {
        if (longer.substr(0, i) + longer.substr(i + 1) == shorter) return known;
      }
    }
  }
  return nullptr;
}

// Parses [--config FILE] [--count N] (and [--zero-copy] when `zero_copy_flag`). Returns -1 to
// go on, or the exit status: 0 after --help or --version, 64 for a bad or unknown argument
// (every Pollux program answers so).
inline int parse_options(int argc, char** argv, const char* program, const char* usage, bool zero_copy_flag,
                         Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::printf("%s", usage);
      return 0;
    }
    if (a == "--version") {
      std::printf("%s %s\n", program, QUICKSTART_VERSION);
      return 0;
    }
  }
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--zero-copy" && zero_copy_flag) {
      o->zero_copy = true;
    } else if ((a == "--config" || a == "--count") && i + 1 >= argc) {
      std::fprintf(stderr, "%s: %s needs a value (see --help)\n", program, a.c_str());
      return 64;
    } else if (a == "--config") {
      o->config = argv[++i];
    } else if (a == "--count") {
      const char* v = argv[++i];
      char* end = nullptr;
      const unsigned long long n = std::strtoull(v, &end, 10);
      if (end == v || *end != '\0' || n == 0 || v[0] == '-') {
        std::fprintf(stderr, "%s: --count: expected a positive number, got \"%s\" (see --help)\n", program, v);
        return 64;
      }
      o->count = n;
    } else if (a.size() > 1 && a[0] == '-') {
      const char* hint = similar_flag(a, zero_copy_flag);
      std::fprintf(stderr, "%s: unknown flag '%s'%s%s%s (see --help)\n", program, a.substr(0, a.find('=')).c_str(),
                   hint != nullptr ? "; did you mean '" : "", hint != nullptr ? hint : "", hint != nullptr ? "'?" : "");
      return 64;
    } else {
      std::fprintf(stderr, "%s: unexpected argument \"%s\" (see --help)\n", program, a.c_str());
      return 64;
    }
  }
  return -1;
}
