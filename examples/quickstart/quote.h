// The message of the quickstart, shared by quickstart-pub and quickstart-sub.
#pragma once

#include <cstdint>
#include <cstdlib>

// A quote as it travels: plain bytes, read back with memcpy (a payload has no alignment
// guarantee).
struct Quote {
  std::uint64_t id;  // 0, 1, 2, ...: the subscriber checks that none is missing
  std::int64_t bid;
  std::int64_t ask;
};

// "--count N": a positive decimal number.
inline bool parse_count(const char* s, std::uint64_t* out) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s, &end, 10);
  if (end == s || *end != '\0' || v == 0 || s[0] == '-') return false;
  *out = v;
  return true;
}
