// Nanosecond clock for timestamps and latency measurement.
//
// On x86-64 with an invariant TSC (constant_tsc + nonstop_tsc) Clock::now_ns() is one rdtsc and
// a 128-bit multiply: ns = base_ns + ((tsc - base_tsc) * mult) >> 32. The calibration (mult and
// the anchor) is shared by every Pollux process on the host through a small file in
// runtime.shm_dir (checked before it is trusted, see init()), so timestamps taken in one
// process and compared in another use the same conversion and differ only by the real elapsed
// time. The anchor is CLOCK_MONOTONIC, so
// values are also comparable with the fallback. Without a usable TSC (or with
// POLLUX_CLOCK=monotonic in the environment) now_ns() is clock_gettime(CLOCK_MONOTONIC).
#pragma once

#include <cstdint>
#include <ctime>
#include <string>
#include <string_view>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace pollux::core {

struct ClockCalibration {
  std::uint64_t base_tsc = 0;
  std::int64_t base_ns = 0;
  std::uint64_t mult = 0;  // ns per tick << 32
  bool tsc = false;        // false: now_ns() is clock_gettime(CLOCK_MONOTONIC)
};

namespace detail {
inline ClockCalibration g_clock;  // written once by Clock::init() before any thread uses it
}  // namespace detail

class Clock {
 public:
  // Calibrates (or loads the host-wide calibration <shm_dir>/pollux-clock) once per process;
  // the first call's directory wins. Idempotent and thread-safe; called by Context creation with
  // runtime.shm_dir. Before init() now_ns() uses clock_gettime.
  //
  // The shared file is trusted only if it is a regular file (not a link) owned by this user or
  // root, not writable by others, of this boot, and a fresh 5 ms calibration agrees with its
  // rate (0.1%) and anchor (1 ms + 50 ppm of its age). Otherwise this process calibrates itself
  // (50 ms), replaces the file if it was ours, or keeps its calibration private; describe()
  // says which. "" = never share.
  static void init(std::string_view shm_dir = "/dev/shm");

  static std::int64_t monotonic_ns() noexcept {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
  }

  static std::uint64_t ticks() noexcept {
#if defined(__x86_64__)
    return __rdtsc();
#else
    return static_cast<std::uint64_t>(monotonic_ns());
#endif
  }

  static std::int64_t now_ns() noexcept {
    const ClockCalibration& c = detail::g_clock;
    if (__builtin_expect(c.tsc, 1)) {
      const std::uint64_t d = ticks() - c.base_tsc;
      return c.base_ns + static_cast<std::int64_t>((static_cast<unsigned __int128>(d) * c.mult) >> 32);
    }
    return monotonic_ns();
  }

  static bool using_tsc() noexcept { return detail::g_clock.tsc; }
  // Ticks per second implied by the calibration (0 when the TSC is not used).
  static double tsc_hz() noexcept;
  // "tsc 2095.9 MHz (shared calibration /dev/shm/pollux-clock)" or "clock_gettime(CLOCK_MONOTONIC)".
  static std::string describe();
};

}  // namespace pollux::core
