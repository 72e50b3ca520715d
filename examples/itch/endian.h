// Big-endian loads and stores for ITCH wire fields.
//
// ITCH fields are unaligned and big-endian. memcpy + byte swap compiles to a single
// MOVBE/BSWAP load on x86 and keeps the code free of alignment UB; the 48-bit timestamp
// is split into a 16-bit and a 32-bit load so it never reads past the field.
#pragma once

#include <cstdint>
#include <cstring>

namespace pollux::itch {

[[nodiscard]] inline uint16_t load_be16(const uint8_t* p) noexcept {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return __builtin_bswap16(v);
}

[[nodiscard]] inline uint32_t load_be32(const uint8_t* p) noexcept {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return __builtin_bswap32(v);
}

[[nodiscard]] inline uint64_t load_be64(const uint8_t* p) noexcept {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return __builtin_bswap64(v);
}

// 6-byte unsigned integer (ITCH timestamps: nanoseconds since midnight).
[[nodiscard]] inline uint64_t load_be48(const uint8_t* p) noexcept {
  return (static_cast<uint64_t>(load_be16(p)) << 32) | load_be32(p + 2);
}

inline void store_be16(uint8_t* p, uint16_t v) noexcept {
  v = __builtin_bswap16(v);
  std::memcpy(p, &v, sizeof v);
}

inline void store_be32(uint8_t* p, uint32_t v) noexcept {
  v = __builtin_bswap32(v);
  std::memcpy(p, &v, sizeof v);
}

inline void store_be64(uint8_t* p, uint64_t v) noexcept {
  v = __builtin_bswap64(v);
  std::memcpy(p, &v, sizeof v);
}

// Stores the low 48 bits of `v`.
inline void store_be48(uint8_t* p, uint64_t v) noexcept {
  store_be16(p, static_cast<uint16_t>(v >> 32));
  store_be32(p + 2, static_cast<uint32_t>(v));
}

}  // namespace pollux::itch
