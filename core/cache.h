#pragma once
#include <cstddef>

namespace pollux::core {
// x86 prefetches pairs of 64-byte lines (adjacent-line prefetch), so data written by different
// cores is kept 128 bytes apart.
inline constexpr std::size_t kCacheLine = 64;
inline constexpr std::size_t kFalseSharingRange = 128;

inline void cpu_relax() noexcept {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}
}  // namespace pollux::core
