// The poll-mode controller: per poller, decides after every duty cycle whether to keep polling
// or to arm every source and sleep, and moves between three modes by the observed load:
//
//   kBusy       traffic is dense: never arms while messages keep arriving.
//   kSpin       traffic is sparse: after the last work, spins for a budget adapted to the
//               observed inter-arrival gaps, then arms.
//   kInterrupt  idle: arms at the first empty cycle; leaves on the first sign of load.
//
// The same class also expresses the static policies "busy-spin" (never arms) and "interrupt"
// (arms at every empty cycle), so a poller has one code path for all three. The yield and
// backoff strategies stay in core/idle.h: the poller runs those without a controller.
//
// Pure logic: no clock, no syscall, no allocation, no lock. Time comes from the caller (ns from
// any monotonic clock; tests pass numbers). One object per poller, used by the poller thread
// only (not thread-safe; read its counters from that thread and publish them).
//
// How a poller drives it (the whole contract):
//
//   PollController ctl(opts, clock.now_ns());            // or ctl.reset(now) at thread start
//   for (;;) {
//     const std::int64_t now = clock.now_ns();           // the cycle's one clock read
//     const int work = do_work(now);                     // honest count: 0 if nothing was done
//     if (ctl.on_cycle(now, work) == PollAction::kPoll) {
//       if (work == 0) cpu_relax();
//       continue;
//     }
//     // kArm: arm every source (seastar's try_enter_interrupt_mode). A source that refuses
//     // (work pending, or it cannot be woken) makes the poller disarm the others and call:
//     if (!arm_all()) { ctl.on_arm_refused(now); continue; }
//     const bool by_event = block_until_woken_or_timeout();   // epoll/futex wait
//     disarm_all();
//     ctl.on_wakeup(clock.now_ns(), by_event);
//   }
//
// After on_wakeup() the next on_cycle() tells the controller whether the wakeup found work;
// a wakeup by an event whose first cycle did no work is counted as spurious. A timeout
// (by_event = false) is counted as a timer wakeup, never as spurious. A refused arm is not a
// sleep and not a wakeup: the poller simply keeps polling; the controller then waits
// arm_retry_min_ns (doubling on each consecutive refusal, up to arm_retry_max_ns) before it
// asks to arm again, so a source that can never be woken costs one try_arm per back-off
// period, not one per cycle. The poller's sleep timeout (safety and timers) is its own
// choice; a timeout at most idle_after_ns keeps mode() and the time-in-mode counters fresh
// while asleep (they are updated at the next call).
//
// Definitions (docs/ARCHITECTURE.md "Adaptive controller" has the diagram):
//   * run: consecutive cycles with work > 0. A run ends at the first empty cycle or a sleep.
//   * gap: the time from the last cycle with work of one run to the first cycle of the next
//     run, i.e. the silence a spin would have had to cover to catch the next message without
//     sleeping. Measured with cycle timestamps. A gap that spans a sleep includes the wakeup
//     latency (so it overestimates the true gap by up to the wakeup cost). Before the first
//     work, the gap is measured from the start time.
//   * spin threshold: wakeup_cost_ns * spin_factor. Spinning through a gap pays only if the
//     gap is shorter than this.
//   * quantile gap: the smallest bucket bound b with P(gap <= b) >= spin_quantile over the
//     gap histogram (log2 buckets with 4 sub-buckets per octave, so b is within +25% of the
//     true quantile; exponentially decayed: halved when it holds 2 * window gaps).
//   * spin budget: if the histogram holds fewer than min_samples gaps, the spin threshold
//     (optimistic, right after leaving kInterrupt); else the quantile gap, raised to
//     min_spin_ns, if it is <= the spin threshold, else 0. Always bounded by max_spin_ns.
//
// Transitions (adaptive policy; counted in total and per target mode):
//   kInterrupt -> kBusy/kSpin  on a sign of load: exit_streak consecutive gaps <= the spin
//                 threshold (or a first cycle after a wakeup with work >= load_batch); or
//                 load_cycles consecutive cycles with work (immediately). Goes to kBusy if
//                 the triggering gap is <= dense_gap_ns (or for the cycles/batch signs),
//                 else kSpin; the histogram is cleared (it described the idle period).
//                 exit_streak starts at 1 ("the first sign of load"), doubles (up to
//                 max_exit_streak) each time kSpin falls back to kInterrupt by the sparse
//                 rule below, and resets to 1 on a gap >= idle_after_ns or when kInterrupt
//                 is entered by the idle rule: that is the hysteresis that keeps
//                 Poisson-like traffic near the threshold from flapping.
//   kSpin -> kBusy             at a recomputation (every recompute_every gaps) when the
//                 histogram holds >= min_samples gaps, the quantile gap <= dense_gap_ns and
//                 the newest gap <= dense_gap_ns too.
//   kBusy -> kSpin             when the quantile gap > busy_exit_gap_ns (hysteresis band
//                 between dense_gap_ns and busy_exit_gap_ns), or when the silence since the
//                 last work exceeds busy_linger_ns (traffic stopped or paused); kSpin's rule
//                 then applies in the same cycle.
//   kSpin -> kInterrupt        when the silence reaches idle_after_ns (the transition is dated
//                 last work + idle_after_ns, even if noticed later at a wakeup), or when the
//                 spin budget is 0 and the last sparse_wakeups wakeups were each followed by
//                 at most sparse_wake_cycles cycles with work before the next sleep (checked
//                 at the wakeup that ends that sleep).
#pragma once

#include <bit>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>

#include "absl/status/status.h"
#include "core/idle.h"

namespace pollux::core {

enum class PollMode : std::uint8_t { kBusy = 0, kSpin = 1, kInterrupt = 2 };
inline constexpr int kPollModes = 3;

enum class PollAction : std::uint8_t {
  kPoll,  // run the next cycle now (cpu_relax first if this one was empty)
  kArm,   // arm every source and block until woken; then call on_wakeup()
};

// Defaults chosen for this machine: a futex/epoll wakeup costs ~5-50 us; "dense" means
// >= ~50k msg/s (gaps <= 20 us). Suggested config keys (the poller's config table owns them):
// runtime.adaptive.<field name>, e.g. runtime.adaptive.wakeup_cost_ns.
struct ControllerOptions {
  // The poller's idle strategy (core/idle.h, runtime.idle): kBusySpin and kInterrupt are the
  // static policies (fixed mode, no statistics); kAdaptive - and any other - moves between modes.
  IdleKind policy = IdleKind::kAdaptive;

  // What one sleep/wakeup costs the next message (arm + block + wake + reschedule). The
  // spin threshold is wakeup_cost_ns * spin_factor. Underestimating it keeps traffic whose
  // gaps sit between the real and the configured cost in interrupt mode.
  std::int64_t wakeup_cost_ns = 25'000;
  double spin_factor = 2.0;
  // Spin through a gap only if P(gap <= budget) >= spin_quantile.
  double spin_quantile = 0.9;
  // Hard bound on the spin budget, whatever the statistics say.
  std::int64_t max_spin_ns = 100'000;
  // Floor on a non-zero budget: absorbs cycle-time jitter around short gaps.
  std::int64_t min_spin_ns = 2'000;

  // kBusy is entered when the quantile gap <= dense_gap_ns and left when it exceeds
  // busy_exit_gap_ns (must be >= dense_gap_ns) or when the silence exceeds busy_linger_ns.
  std::int64_t dense_gap_ns = 20'000;
  std::int64_t busy_exit_gap_ns = 40'000;
  std::int64_t busy_linger_ns = 50'000;

  // Silence after which the poller is idle (kSpin -> kInterrupt); a gap this long also
  // resets the kInterrupt exit hysteresis to "first sign of load".
  std::int64_t idle_after_ns = 10'000'000;
  // kSpin with budget 0 -> kInterrupt after this many consecutive sparse wakeups: wakeups
  // followed by at most sparse_wake_cycles cycles with work before the next sleep (a lone
  // message typically costs two: its delivery and, later, its release).
  std::uint32_t sparse_wakeups = 4;
  std::uint32_t sparse_wake_cycles = 2;

  // Signs of load that end kInterrupt at once: this many consecutive cycles with work, or a
  // first cycle after a wakeup with at least load_batch work units (0 = off). Work units are
  // whatever do_work() counts (messages, completions, releases).
  std::uint32_t load_cycles = 8;
  std::uint32_t load_batch = 16;
  // Upper bound of the kInterrupt exit hysteresis (consecutive short gaps required).
  std::uint32_t max_exit_streak = 16;

  // Gap histogram: halved when it holds 2 * window gaps (so it reflects the last ~window to
  // 2 * window gaps); the budget is recomputed every recompute_every gaps and trusted once
  // min_samples gaps are in.
  std::uint32_t window = 64;
  std::uint32_t recompute_every = 8;
  std::uint32_t min_samples = 8;

  // Back-off between arm attempts after refusals: min, doubling per consecutive refusal, max.
  std::int64_t arm_retry_min_ns = 1'000;
  std::int64_t arm_retry_max_ns = 1'000'000;

  // The static policies with default knobs.
  static ControllerOptions busy_spin() {
    ControllerOptions o;
    o.policy = IdleKind::kBusySpin;
    return o;
  }
  static ControllerOptions interrupt() {
    ControllerOptions o;
    o.policy = IdleKind::kInterrupt;
    return o;
  }

  // InvalidArgument naming the field (as runtime.adaptive.<field>) and the accepted range.
  // The constructor of PollController clamps out-of-range values instead of failing; call this
  // on the control path to report a bad configuration.
  absl::Status validate() const;
};

// Counters for the poller to publish (monotonic; single writer: the poller thread).
struct ControllerCounters {
  std::uint64_t transitions = 0;
  std::uint64_t transitions_to[kPollModes] = {0, 0, 0};  // indexed by PollMode
  std::uint64_t arms = 0;                                // kArm answers
  std::uint64_t arm_refusals = 0;                        // on_arm_refused() calls
  std::uint64_t wakeups = 0;                             // on_wakeup() calls (event or timeout)
  std::uint64_t timer_wakeups = 0;                       // ... with by_event = false
  std::uint64_t spurious_wakeups = 0;                    // by_event = true and the next cycle did no work
  std::int64_t sleep_ns = 0;                             // sum of (wakeup time - arm time)
};

class PollController {
 public:
  // Gap histogram geometry: 4 sub-buckets per power of two, values clamped to < 2^31 ns.
  static constexpr int kSubBits = 2;
  static constexpr int kMaxBits = 31;
  static constexpr int kBuckets = (kMaxBits - 1) * (1 << kSubBits);  // 120
  static constexpr std::int64_t kMaxGap = (std::int64_t{1} << kMaxBits) - 1;

  // start_ns: the poller's clock now; time in mode is counted from it. Initial mode:
  // kInterrupt (adaptive, interrupt) or kBusy (busy-spin).
  PollController(const ControllerOptions& opts, std::int64_t start_ns) noexcept;

  // Forgets statistics, counters and mode; as if newly constructed at now_ns.
  void reset(std::int64_t now_ns) noexcept;

  // After every duty cycle: its timestamp and the work it did (>= 0). Hot path: a handful of
  // compares and stores in the common case; out-of-line only when a run starts or when the
  // silence exceeds the current hold (then at most once per arm decision).
  [[nodiscard]] PollAction on_cycle(std::int64_t now_ns, int work) noexcept {
    if (wake_check_) [[unlikely]]
      first_cycle_after_wake(work);
    if (work > 0) {
      if (!in_run_) on_run_start(now_ns, work);
      in_run_ = true;
      last_work_ns_ = now_ns;
      ++wake_work_cycles_;
      if (++run_cycles_ == load_trigger_) [[unlikely]]
        on_sustained_work(now_ns);
      return PollAction::kPoll;
    }
    in_run_ = false;
    run_cycles_ = 0;
    if (now_ns - last_work_ns_ <= hold_ns_) return PollAction::kPoll;
    if (now_ns < retry_at_ns_) return PollAction::kPoll;
    return on_silence(now_ns);
  }

  // The poller could not arm every source after kArm (nothing slept).
  void on_arm_refused(std::int64_t now_ns) noexcept;

  // The poller returned from its blocking wait. by_event: woken by a source's notification
  // (fd/futex), false for a timeout.
  void on_wakeup(std::int64_t now_ns, bool by_event) noexcept;

  PollMode mode() const noexcept { return mode_; }
  IdleKind policy() const noexcept { return opts_.policy; }
  // The budget kSpin applies after the last work (0: arm at the first empty cycle). Computed
  // in every adaptive mode, applied only in kSpin.
  std::int64_t spin_budget_ns() const noexcept { return budget_ns_; }
  // The current quantile gap, or -1 while the histogram holds fewer than min_samples gaps.
  std::int64_t quantile_gap_ns() const noexcept { return quantile_gap_ns_; }
  std::uint64_t gaps_in_window() const noexcept { return hist_total_; }
  const ControllerCounters& counters() const noexcept { return c_; }
  // Time spent in mode m from start to now_ns (includes the current, open interval when m is
  // the current mode). The three add up to now_ns - start.
  std::int64_t time_in_mode_ns(PollMode m, std::int64_t now_ns) const noexcept;
  const ControllerOptions& options() const noexcept { return opts_; }

  static std::string_view mode_name(PollMode m) noexcept;

  // Histogram bucket of a gap and the largest gap of a bucket (exposed for tests).
  static int bucket_of(std::int64_t gap_ns) noexcept {
    std::uint64_t v = gap_ns <= 0 ? 0 : static_cast<std::uint64_t>(gap_ns > kMaxGap ? kMaxGap : gap_ns);
    if (v < (1u << (kSubBits + 1))) return static_cast<int>(v);
    const int msb = std::bit_width(v) - 1;
    return (msb - 1) * (1 << kSubBits) + static_cast<int>((v >> (msb - kSubBits)) & ((1u << kSubBits) - 1));
  }
  static std::int64_t bucket_upper(int b) noexcept;

 private:
  void first_cycle_after_wake(int work) noexcept;
  void on_run_start(std::int64_t now_ns, int work) noexcept;
  void on_sustained_work(std::int64_t now_ns) noexcept;
  PollAction on_silence(std::int64_t now_ns) noexcept;
  void record_gap(std::int64_t gap_ns) noexcept;
  void recompute(std::int64_t now_ns, std::int64_t last_gap_ns) noexcept;
  void clear_histogram() noexcept;
  void leave_interrupt(std::int64_t now_ns, PollMode to) noexcept;
  void enter_interrupt(std::int64_t at_ns, bool sparse) noexcept;
  void transition(PollMode to, std::int64_t at_ns) noexcept;
  void update_hold() noexcept;

  // Read on every cycle: kept together at the front.
  std::int64_t last_work_ns_ = 0;
  std::int64_t hold_ns_ = 0;      // poll while silence <= hold (per mode; see update_hold)
  std::int64_t retry_at_ns_ = 0;  // no kArm before this (refusal back-off)
  std::uint32_t run_cycles_ = 0;
  std::uint32_t load_trigger_ = 0;  // run_cycles_ value that signals load (0: never)
  std::uint32_t wake_work_cycles_ = 0;
  bool in_run_ = false;
  bool wake_check_ = false;
  PollMode mode_ = PollMode::kInterrupt;

  // Rare-path state.
  bool woke_ = false;        // at least one wakeup since reset (wake_work_cycles_ is valid)
  bool after_wake_ = false;  // the current run started in the first cycle after a wakeup
  bool wake_by_event_ = false;
  ControllerOptions opts_;
  std::int64_t spin_threshold_ns_ = 0;
  std::uint64_t quantile_q16_ = 0;  // spin_quantile in 1/65536
  std::int64_t start_ns_ = 0;
  std::int64_t mode_since_ns_ = 0;
  std::int64_t arm_at_ns_ = 0;
  std::int64_t retry_ns_ = 0;
  std::int64_t budget_ns_ = 0;
  std::int64_t quantile_gap_ns_ = -1;
  std::uint32_t sparse_wakes_ = 0;
  std::uint32_t short_streak_ = 0;
  std::uint32_t exit_streak_ = 1;
  std::uint32_t since_recompute_ = 0;
  std::uint64_t hist_total_ = 0;
  std::uint32_t hist_[kBuckets] = {};
  std::int64_t time_in_mode_[kPollModes] = {0, 0, 0};
  ControllerCounters c_;
};

}  // namespace pollux::core
