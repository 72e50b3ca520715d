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

// Parses [--config FILE] [--count N] (and [--zero-copy] when `zero_copy_flag`). Returns -1 to
// go on, or the exit status: 0 after --help, 64 for a bad or unknown argument.
inline int parse_options(int argc, char** argv, const char* program, const char* usage, bool zero_copy_flag,
                         Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::printf("%s", usage);
      return 0;
    }
    if (a == "--zero-copy" && zero_copy_flag) {
      o->zero_copy = true;
    } else if (a == "--config" && i + 1 < argc) {
      o->config = argv[++i];
    } else if (a == "--count" && i + 1 < argc) {
      const char* v = argv[++i];
      char* end = nullptr;
      const unsigned long long n = std::strtoull(v, &end, 10);
      if (end == v || *end != '\0' || n == 0 || v[0] == '-') {
        std::fprintf(stderr, "%s: --count: expected a positive number, got \"%s\"\n", program, v);
        return 64;
      }
      o->count = n;
    } else {
      std::fprintf(stderr, "%s: unknown or incomplete argument \"%s\" (see --help)\n", program, a.c_str());
      return 64;
    }
  }
  return -1;
}
