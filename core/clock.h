// Nanosecond clock for timestamps and latency measurement.
//
// On x86-64 with an invariant TSC (constant_tsc + nonstop_tsc) Clock::now_ns() is one rdtsc and
// a 128-bit multiply: ns = base_ns + ((tsc - base_tsc) * mult) >> 32, read from a ClockPage
// under a sequence lock. The page is shared by every Pollux process on the host: it lives in a
// small file in runtime.shm_dir that each process maps (checked before it is trusted, see
// init()), so timestamps taken in one process and compared in another use the same conversion
// and differ only by the real elapsed time.
//
// The conversion follows CLOCK_MONOTONIC: the TSC and CLOCK_MONOTONIC (NTP-disciplined, and in
// a VM the hypervisor's clock) drift apart by ppm - 1 ms a day at 12 ppm, as measured on the
// project's CI host - so the page is re-anchored while Pollux runs. maintain(), called from
// every poller's timers and every inline publisher's service(), compares the conversion with
// CLOCK_MONOTONIC at most once a second per process (once a second per host for the page) and,
// when they are more than kClockTolerance_ns apart or the rate has moved, rewrites the page for
// every process at once: a small lead is slewed away (the rate lowered for about a second, so
// now_ns() never steps back), a lag or a large error is stepped. Values stay comparable with
// the fallback: without a usable TSC (or with POLLUX_CLOCK=monotonic in the environment)
// now_ns() is clock_gettime(CLOCK_MONOTONIC).
#pragma once

#include <atomic>
#include <cstdint>
#include <ctime>
#include <string>
#include <string_view>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace pollux::core {

// One snapshot of the conversion (calibration(), tests).
struct ClockCalibration {
  std::uint64_t base_tsc = 0;
  std::int64_t base_ns = 0;
  std::uint64_t mult = 0;  // ns per tick << 32
  bool tsc = false;        // false: now_ns() is clock_gettime(CLOCK_MONOTONIC)
};

// The conversion as it lies in shared memory: one cache line, written only under `seq`.
struct alignas(64) ClockPage {
  std::atomic<std::uint32_t> seq{0};  // odd while a writer rewrites the fields below
  std::atomic<std::uint32_t> tsc{0};  // 0: now_ns() is clock_gettime(CLOCK_MONOTONIC)
  std::atomic<std::uint64_t> base_tsc{0};
  std::atomic<std::int64_t> base_ns{0};
  std::atomic<std::uint64_t> mult{0};
  // Writers' bookkeeping: the TSC rate without any slew (ns per tick << 32), the last
  // (tsc, CLOCK_MONOTONIC) pair sampled at a re-anchoring, from which the next one measures the
  // rate, and when the page was last checked.
  std::atomic<std::uint64_t> rate{0};
  std::atomic<std::uint64_t> ref_tsc{0};
  std::atomic<std::int64_t> ref_ns{0};
  std::atomic<std::int64_t> checked_ns{0};
};
static_assert(sizeof(ClockPage) == 64);

// How far now_ns() may stray from CLOCK_MONOTONIC before maintain() corrects it.
inline constexpr std::int64_t kClockTolerance_ns = 20'000;

namespace detail {
inline ClockPage g_private_page;  // before init() (tsc 0: clock_gettime)
// Set by Clock::init(); the release store pairs with now_ns()'s acquire load.
inline std::atomic<const ClockPage*> g_page{&g_private_page};
inline std::atomic<std::int64_t> g_next_check_ns{0};  // maintain(): this process's next check
void maintain_slow(std::int64_t now) noexcept;
}  // namespace detail

class Clock {
 public:
  // Maps (or creates) the host-wide conversion page <shm_dir>/pollux-clock once per process;
  // the first call's directory wins. Idempotent and thread-safe; called by Context creation with
  // runtime.shm_dir. Before init() now_ns() uses clock_gettime.
  //
  // The shared file is trusted only if it is a regular file (not a link) owned by this user or
  // root, not writable by others, of this boot. A fresh 5 ms calibration must agree with its
  // rate (0.1%) and its anchor must be within 1 ms of CLOCK_MONOTONIC; a file of this user that
  // fails those checks is corrected in place (recalibrated, 50 ms), one with a bad header is
  // replaced. A root file that a non-root process may not correct is then not used: this
  // process calibrates itself and keeps its conversion private. describe() says which.
  // "" = never share.
  static void init(std::string_view shm_dir = "/dev/shm");

  // Keeps the shared conversion on CLOCK_MONOTONIC (see the top of this file). `now` is any
  // recent now_ns(). Cheap between checks (one relaxed load); safe from any thread.
  static void maintain(std::int64_t now) noexcept {
    if (__builtin_expect(now >= detail::g_next_check_ns.load(std::memory_order_relaxed), 0)) {
      detail::maintain_slow(now);
    }
  }
  // Checks and, if needed, corrects the conversion now, whatever the time of the last check.
  // False if this process may not write the page (private or read-only) or another process is
  // rewriting it.
  static bool reanchor() noexcept;

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
    // One straight-line attempt inline (the common case: no update in progress, TSC on); the
    // bounded retry loop and the fallback stay out of line, so callers on the hot path (offer())
    // carry neither a loop counter nor the field addresses it would keep live.
    std::int64_t ns;
    if (__builtin_expect(try_now_ns(&ns), 1)) return ns;
    return now_ns_slow();
  }

  // now_ns()'s first attempt alone: false when it could not decide (an update in progress, no
  // TSC), and then the caller must call now_ns(). For hot paths that would rather leave through
  // a tail call than keep their state across a call to now_ns_slow().
  static bool try_now_ns(std::int64_t* out) noexcept {
    const ClockPage* p = detail::g_page.load(std::memory_order_acquire);
    // Acquire pairs with the writer's release store of the even seq that ends its update: the
    // fields read below are at least that update's.
    const std::uint32_t s = p->seq.load(std::memory_order_acquire);
    // An update in progress, or no TSC: the caller's slow path decides (and reads everything
    // again). Tested before the other fields are loaded, so that fewer values are live at once;
    // a torn `tsc` read is caught by the seq re-check below like any other field's.
    if (__builtin_expect((s & 1) != 0 || p->tsc.load(std::memory_order_relaxed) == 0, 0)) return false;
    const std::uint64_t base_tsc = p->base_tsc.load(std::memory_order_relaxed);
    const std::int64_t base_ns = p->base_ns.load(std::memory_order_relaxed);
    const std::uint64_t mult = p->mult.load(std::memory_order_relaxed);
    const std::uint64_t t = ticks();
    // The field loads complete before seq is read again (pairs with the writer's release fence
    // after making seq odd): an update that overlapped them changes seq.
    std::atomic_thread_fence(std::memory_order_acquire);
    // t < base_tsc: re-anchored a moment ago by a core whose TSC reads a few ticks ahead of ours.
    if (__builtin_expect(p->seq.load(std::memory_order_relaxed) == s && t >= base_tsc, 1)) {
      *out = base_ns + static_cast<std::int64_t>((static_cast<unsigned __int128>(t - base_tsc) * mult) >> 32);
      return true;
    }
    return false;
  }

  // now_ns() when its first attempt failed: the same read, retried a bounded number of times.
  [[gnu::noinline, gnu::cold]] static std::int64_t now_ns_slow() noexcept {
    const ClockPage* p = detail::g_page.load(std::memory_order_acquire);
    // Sequence-lock read, bounded: a writer that died half-way (seq left odd) or a page that
    // another process scribbled on sends this to clock_gettime, never into a spin.
    for (int i = 0; i < 16; ++i) {
      // Acquire: as in now_ns().
      const std::uint32_t s = p->seq.load(std::memory_order_acquire);
      const std::uint32_t on = p->tsc.load(std::memory_order_relaxed);
      const std::uint64_t base_tsc = p->base_tsc.load(std::memory_order_relaxed);
      const std::int64_t base_ns = p->base_ns.load(std::memory_order_relaxed);
      const std::uint64_t mult = p->mult.load(std::memory_order_relaxed);
      const std::uint64_t t = ticks();
      // As in now_ns(): pairs with the writer's release fence after making seq odd.
      std::atomic_thread_fence(std::memory_order_acquire);
      if (__builtin_expect(p->seq.load(std::memory_order_relaxed) != s || (s & 1) != 0, 0)) continue;
      // Off, or re-anchored a moment ago by a core whose TSC reads a few ticks ahead of ours.
      if (__builtin_expect(on == 0 || t < base_tsc, 0)) break;
      return base_ns + static_cast<std::int64_t>((static_cast<unsigned __int128>(t - base_tsc) * mult) >> 32);
    }
    return monotonic_ns();
  }

  static bool using_tsc() noexcept {
    return detail::g_page.load(std::memory_order_acquire)->tsc.load(std::memory_order_relaxed) != 0;
  }
  // The conversion now (tsc false when now_ns() is clock_gettime).
  static ClockCalibration calibration() noexcept;
  // Ticks per second implied by the calibration (0 when the TSC is not used).
  static double tsc_hz() noexcept;
  // "tsc (shared calibration /dev/shm/pollux-clock), 2095.9 MHz" or "clock_gettime(CLOCK_MONOTONIC)".
  static std::string describe();
};

}  // namespace pollux::core
