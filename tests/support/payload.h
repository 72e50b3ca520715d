// The payload of message s in the multi-process tests: its first 8 bytes are s, the rest a
// pattern derived from s, so a receiver checks every byte without knowing what was sent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace pollux::testing {

// A length between 8 and max - 1, derived from s.
inline std::uint32_t payload_len(std::uint64_t s, std::uint32_t max) {
  return 8 + static_cast<std::uint32_t>((s * 37) % (max - 8));
}
inline void fill_payload(std::byte* p, std::uint32_t len, std::uint64_t s) {
  std::memcpy(p, &s, 8);
  for (std::uint32_t i = 8; i < len; ++i) p[i] = static_cast<std::byte>((s + i) & 0xff);
}
inline bool check_payload(const std::byte* p, std::uint32_t len, std::uint64_t s) {
  std::uint64_t got;
  std::memcpy(&got, p, 8);
  if (got != s) return false;
  for (std::uint32_t i = 8; i < len; ++i) {
    if (p[i] != static_cast<std::byte>((s + i) & 0xff)) return false;
  }
  return true;
}

}  // namespace pollux::testing
