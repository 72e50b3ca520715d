// Helpers shared by the shm tests.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>

#include <gtest/gtest.h>

#include "core/config.h"

namespace pollux::testing {

// A unique instance name so concurrent test processes never share shm files.
inline std::string unique_name(const char* tag) {
  static std::atomic<int> n{0};
  return std::string(tag) + "-" + std::to_string(getpid()) + "-" + std::to_string(n++);
}

inline core::Config shm_config(const std::string& name, std::uint64_t log_size, core::FlowControl fc) {
  core::Config c;
  c.runtime.name = name;
  c.runtime.shm_dir = "/dev/shm";
  c.shm.log_size = log_size;
  c.shm.flow_control = fc;
  c.shm.max_subscribers = 8;
  return c;
}

// Deterministic payload for sequence s: length and contents derived from s.
inline std::uint32_t payload_len(std::uint64_t s, std::uint32_t max) { return 8 + static_cast<std::uint32_t>((s * 37) % (max - 8)); }
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
