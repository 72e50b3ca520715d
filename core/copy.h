// The payload copy of every offer path (the API's and the transports' direct paths).
#pragma once

#include <cstddef>
#include <cstring>

namespace pollux::core {

// Copies n bytes (a 0-byte payload copies nothing: its data() may be null). Up to 64 bytes
// (market data's typical message) it is two to four overlapping fixed-size moves, inlined: a
// call into libc's memcpy - the call, its size dispatch and the register spills around it in
// offer() - costs more instructions than the copy itself there. Larger payloads go to memcpy.
inline void copy_payload(std::byte* dst, const std::byte* src, std::size_t n) noexcept {
  if (__builtin_expect(n > 64, 0)) {
    std::memcpy(dst, src, n);
  } else if (n > 32) {
    std::memcpy(dst, src, 32);
    std::memcpy(dst + n - 32, src + n - 32, 32);
  } else if (n > 16) {
    std::memcpy(dst, src, 16);
    std::memcpy(dst + n - 16, src + n - 16, 16);
  } else if (n >= 8) {
    std::memcpy(dst, src, 8);
    std::memcpy(dst + n - 8, src + n - 8, 8);
  } else if (n >= 4) {
    std::memcpy(dst, src, 4);
    std::memcpy(dst + n - 4, src + n - 4, 4);
  } else if (n >= 2) {
    std::memcpy(dst, src, 2);
    std::memcpy(dst + n - 2, src + n - 2, 2);
  } else if (n == 1) {
    *dst = *src;
  }
}

}  // namespace pollux::core
