// What a polling loop needs of the CPU: how far apart data written by different cores must be,
// and the pause instruction of a spin.
#pragma once

#include <cstddef>

namespace pollux {

// x86 prefetches pairs of 64-byte lines (adjacent-line prefetch), so data written by different
// cores is kept 128 bytes apart: alignas(kFalseSharingRange) on what one thread writes and
// another reads.
inline constexpr std::size_t kCacheLine = 64;
inline constexpr std::size_t kFalseSharingRange = 128;

// One pause of a spin loop (x86 `pause`, Arm `yield`): lets the sibling hyper-thread run and
// saves power, without giving the core away.
inline void cpu_relax() noexcept {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace pollux
