// What quickstart-pub and quickstart-sub share: the message, and their command line.
#pragma once

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
