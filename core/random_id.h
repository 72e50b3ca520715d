// Random identifiers: publisher sessions, subscriber and receiver ids. Never 0, which the
// protocols and the shm segment reserve for "none". Control path (std::random_device reads the
// kernel's entropy).
#pragma once

#include <cstdint>
#include <random>

namespace pollux::core {

inline std::uint32_t random_id32() {
  std::random_device rd;
  std::uint32_t v = 0;
  while (v == 0) v = rd();
  return v;
}

inline std::uint64_t random_id64() {
  std::random_device rd;
  std::uint64_t v = 0;
  while (v == 0) v = (static_cast<std::uint64_t>(rd()) << 32) | rd();
  return v;
}

}  // namespace pollux::core
