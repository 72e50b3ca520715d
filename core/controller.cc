#include "core/controller.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"

namespace pollux::core {

namespace {

constexpr std::int64_t kNever = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t kForever = std::numeric_limits<std::int64_t>::max();
// Upper bound of the durations added to timestamps (~13 days): keeps the sums far from overflow.
constexpr std::int64_t kMaxInterval = std::int64_t{1} << 50;

absl::Status bad(const std::string& field, const std::string& want, const std::string& got) {
  return absl::InvalidArgumentError(absl::StrCat("runtime.adaptive.", field, ": expected ", want, ", got ", got));
}

// The options with every value forced into its valid range (the constructor never fails).
ControllerOptions clamped(ControllerOptions o) {
  // The static policies are busy-spin and interrupt; every other idle strategy runs adaptive.
  if (o.policy != IdleKind::kBusySpin && o.policy != IdleKind::kInterrupt) o.policy = IdleKind::kAdaptive;
  o.wakeup_cost_ns = std::clamp<std::int64_t>(o.wakeup_cost_ns, 1, PollController::kMaxGap);
  if (!(o.spin_factor > 0.0) || !std::isfinite(o.spin_factor)) o.spin_factor = 2.0;
  o.spin_factor = std::min(o.spin_factor, 1e6);
  if (!(o.spin_quantile > 0.0)) o.spin_quantile = 0.9;
  o.spin_quantile = std::min(o.spin_quantile, 1.0);
  o.max_spin_ns = std::clamp<std::int64_t>(o.max_spin_ns, 0, PollController::kMaxGap);
  o.min_spin_ns = std::clamp<std::int64_t>(o.min_spin_ns, 0, o.max_spin_ns);
  o.dense_gap_ns = std::clamp<std::int64_t>(o.dense_gap_ns, 0, PollController::kMaxGap);
  o.busy_exit_gap_ns = std::clamp<std::int64_t>(o.busy_exit_gap_ns, o.dense_gap_ns, PollController::kMaxGap);
  o.busy_linger_ns = std::clamp<std::int64_t>(o.busy_linger_ns, 0, kMaxInterval);
  o.idle_after_ns = std::clamp<std::int64_t>(o.idle_after_ns, 1, kMaxInterval);
  o.sparse_wakeups = std::max<std::uint32_t>(o.sparse_wakeups, 1);
  o.max_exit_streak = std::clamp<std::uint32_t>(o.max_exit_streak, 1, 1u << 20);
  o.window = std::clamp<std::uint32_t>(o.window, 1, 1u << 20);
  o.recompute_every = std::max<std::uint32_t>(o.recompute_every, 1);
  o.min_samples = std::max<std::uint32_t>(o.min_samples, 1);
  o.arm_retry_min_ns = std::clamp<std::int64_t>(o.arm_retry_min_ns, 1, kMaxInterval);
  o.arm_retry_max_ns = std::clamp<std::int64_t>(o.arm_retry_max_ns, o.arm_retry_min_ns, kMaxInterval);
  return o;
}

}  // namespace

absl::Status ControllerOptions::validate() const {
  if (wakeup_cost_ns <= 0 || wakeup_cost_ns > PollController::kMaxGap)
    return bad("wakeup_cost_ns", "1..2147483647 (ns one sleep/wakeup costs; measure it with pollux-bench)",
               absl::StrCat(wakeup_cost_ns));
  if (!(spin_factor > 0.0) || !std::isfinite(spin_factor) || spin_factor > 1e6)
    return bad("spin_factor", "a number in (0, 1e6] (spin threshold = wakeup_cost_ns * spin_factor)",
               absl::StrCat(spin_factor));
  if (!(spin_quantile > 0.0) || spin_quantile > 1.0)
    return bad("spin_quantile", "a probability in (0, 1], e.g. 0.9", absl::StrCat(spin_quantile));
  if (max_spin_ns < 0 || max_spin_ns > PollController::kMaxGap)
    return bad("max_spin_ns", "0..2147483647", absl::StrCat(max_spin_ns));
  if (min_spin_ns < 0 || min_spin_ns > max_spin_ns)
    return bad("min_spin_ns", absl::StrCat("0..max_spin_ns (", max_spin_ns, ")"), absl::StrCat(min_spin_ns));
  if (dense_gap_ns < 0 || dense_gap_ns > PollController::kMaxGap)
    return bad("dense_gap_ns", "0..2147483647", absl::StrCat(dense_gap_ns));
  if (busy_exit_gap_ns < dense_gap_ns || busy_exit_gap_ns > PollController::kMaxGap)
    return bad("busy_exit_gap_ns", absl::StrCat("dense_gap_ns (", dense_gap_ns, ")..2147483647"),
               absl::StrCat(busy_exit_gap_ns));
  if (busy_linger_ns < 0 || busy_linger_ns > kMaxInterval)
    return bad("busy_linger_ns", "0..2^50", absl::StrCat(busy_linger_ns));
  if (idle_after_ns <= 0 || idle_after_ns > kMaxInterval)
    return bad("idle_after_ns", "1..2^50 (e.g. 10000000 = 10 ms)", absl::StrCat(idle_after_ns));
  if (sparse_wakeups == 0) return bad("sparse_wakeups", ">= 1", "0");
  if (max_exit_streak == 0 || max_exit_streak > (1u << 20))
    return bad("max_exit_streak", "1..1048576", absl::StrCat(max_exit_streak));
  if (window == 0 || window > (1u << 20)) return bad("window", "1..1048576", absl::StrCat(window));
  if (recompute_every == 0) return bad("recompute_every", ">= 1", "0");
  if (min_samples == 0) return bad("min_samples", ">= 1", "0");
  if (arm_retry_min_ns <= 0 || arm_retry_min_ns > kMaxInterval)
    return bad("arm_retry_min_ns", "1..2^50", absl::StrCat(arm_retry_min_ns));
  if (arm_retry_max_ns < arm_retry_min_ns || arm_retry_max_ns > kMaxInterval)
    return bad("arm_retry_max_ns", absl::StrCat("arm_retry_min_ns (", arm_retry_min_ns, ")..2^50"),
               absl::StrCat(arm_retry_max_ns));
  return absl::OkStatus();
}

std::string_view PollController::mode_name(PollMode m) noexcept {
  switch (m) {
    case PollMode::kBusy:
      return "busy";
    case PollMode::kSpin:
      return "spin";
    case PollMode::kInterrupt:
      return "interrupt";
  }
  return "?";
}

std::int64_t PollController::bucket_upper(int b) noexcept {
  if (b < (1 << (kSubBits + 1))) return b;
  const int msb = (b >> kSubBits) + 1;
  const std::int64_t sub = b & ((1 << kSubBits) - 1);
  const std::int64_t lower = ((std::int64_t{1} << kSubBits) + sub) << (msb - kSubBits);
  return lower + (std::int64_t{1} << (msb - kSubBits)) - 1;
}

PollController::PollController(const ControllerOptions& opts, std::int64_t start_ns) noexcept : opts_(clamped(opts)) {
  const double threshold = static_cast<double>(opts_.wakeup_cost_ns) * opts_.spin_factor;
  spin_threshold_ns_ = threshold >= static_cast<double>(kMaxGap) ? kMaxGap : static_cast<std::int64_t>(threshold);
  quantile_q16_ = static_cast<std::uint64_t>(std::ceil(opts_.spin_quantile * 65536.0));
  reset(start_ns);
}

void PollController::reset(std::int64_t now_ns) noexcept {
  last_work_ns_ = now_ns;
  retry_at_ns_ = kNever;
  retry_ns_ = 0;
  run_cycles_ = 0;
  wake_work_cycles_ = 0;
  in_run_ = false;
  wake_check_ = false;
  woke_ = false;
  after_wake_ = false;
  wake_by_event_ = false;
  start_ns_ = now_ns;
  mode_since_ns_ = now_ns;
  arm_at_ns_ = now_ns;
  sparse_wakes_ = 0;
  short_streak_ = 0;
  exit_streak_ = 1;
  for (auto& t : time_in_mode_) t = 0;
  c_ = ControllerCounters{};
  clear_histogram();
  mode_ = opts_.policy == IdleKind::kBusySpin ? PollMode::kBusy : PollMode::kInterrupt;
  update_hold();
}

void PollController::clear_histogram() noexcept {
  for (auto& h : hist_) h = 0;
  hist_total_ = 0;
  since_recompute_ = 0;
  quantile_gap_ns_ = -1;
  budget_ns_ = std::min(spin_threshold_ns_, opts_.max_spin_ns);  // optimistic until min_samples
}

// The silence the poller keeps polling through before it considers arming, per mode; and the
// run length that signals load in kInterrupt.
void PollController::update_hold() noexcept {
  load_trigger_ = 0;
  switch (opts_.policy) {
    case IdleKind::kBusySpin:
      hold_ns_ = kForever;
      return;
    case IdleKind::kInterrupt:
      hold_ns_ = -1;
      return;
    case IdleKind::kAdaptive:
    case IdleKind::kYield:  // not after clamped(): adaptive
    case IdleKind::kBackoff:
      break;
  }
  switch (mode_) {
    case PollMode::kBusy:
      hold_ns_ = opts_.busy_linger_ns;
      break;
    case PollMode::kSpin:
      hold_ns_ = budget_ns_ > 0 ? budget_ns_ : -1;
      break;
    case PollMode::kInterrupt:
      hold_ns_ = -1;
      load_trigger_ = opts_.load_cycles;
      break;
  }
}

void PollController::transition(PollMode to, std::int64_t at_ns) noexcept {
  if (to == mode_) return;
  at_ns = std::max(at_ns, mode_since_ns_);
  time_in_mode_[static_cast<int>(mode_)] += at_ns - mode_since_ns_;
  mode_since_ns_ = at_ns;
  mode_ = to;
  ++c_.transitions;
  ++c_.transitions_to[static_cast<int>(to)];
  update_hold();
}

std::int64_t PollController::time_in_mode_ns(PollMode m, std::int64_t now_ns) const noexcept {
  std::int64_t t = time_in_mode_[static_cast<int>(m)];
  if (m == mode_ && now_ns > mode_since_ns_) t += now_ns - mode_since_ns_;
  return t;
}

void PollController::first_cycle_after_wake(int work) noexcept {
  wake_check_ = false;
  if (work > 0) {
    after_wake_ = true;  // read by on_run_start(), called next in the same on_cycle()
  } else if (wake_by_event_) {
    ++c_.spurious_wakeups;
  }
}

void PollController::on_run_start(std::int64_t now_ns, int work) noexcept {
  const std::int64_t gap = now_ns - last_work_ns_;
  const bool first_after_wake = after_wake_;
  after_wake_ = false;
  if (opts_.policy != IdleKind::kAdaptive) return;
  if (mode_ == PollMode::kInterrupt) {
    if (gap >= opts_.idle_after_ns) exit_streak_ = 1;
    if (first_after_wake && opts_.load_batch > 0 && static_cast<std::uint32_t>(work) >= opts_.load_batch) {
      leave_interrupt(now_ns, PollMode::kBusy);
    } else if (gap <= spin_threshold_ns_) {
      if (++short_streak_ >= exit_streak_)
        leave_interrupt(now_ns, gap <= opts_.dense_gap_ns ? PollMode::kBusy : PollMode::kSpin);
    } else {
      short_streak_ = 0;
    }
  }
  record_gap(gap);
  if (++since_recompute_ >= opts_.recompute_every || hist_total_ == opts_.min_samples) recompute(now_ns, gap);
}

void PollController::on_sustained_work(std::int64_t now_ns) noexcept {
  // load_trigger_ is non-zero only in adaptive kInterrupt.
  if (mode_ == PollMode::kInterrupt) leave_interrupt(now_ns, PollMode::kBusy);
}

void PollController::leave_interrupt(std::int64_t now_ns, PollMode to) noexcept {
  clear_histogram();  // it described the idle period
  short_streak_ = 0;
  sparse_wakes_ = 0;
  transition(to, now_ns);
}

void PollController::enter_interrupt(std::int64_t at_ns, bool sparse) noexcept {
  exit_streak_ = sparse ? std::min(exit_streak_ * 2, opts_.max_exit_streak) : 1;
  short_streak_ = 0;
  transition(PollMode::kInterrupt, at_ns);
}

void PollController::record_gap(std::int64_t gap_ns) noexcept {
  ++hist_[bucket_of(gap_ns)];
  if (++hist_total_ >= 2ull * opts_.window) {
    // Exponential decay: halve every bucket, so old gaps fade and the histogram stays bounded.
    std::uint64_t total = 0;
    for (auto& h : hist_) {
      h >>= 1;
      total += h;
    }
    hist_total_ = total;
  }
}

void PollController::recompute(std::int64_t now_ns, std::int64_t last_gap_ns) noexcept {
  since_recompute_ = 0;
  if (hist_total_ < opts_.min_samples) {
    quantile_gap_ns_ = -1;
    budget_ns_ = std::min(spin_threshold_ns_, opts_.max_spin_ns);
  } else {
    // Smallest bucket b with cum(b) / total >= q, i.e. cum(b) * 65536 >= total * q16.
    const std::uint64_t want = hist_total_ * quantile_q16_;
    std::uint64_t cum = 0;
    int b = kBuckets - 1;
    for (int i = 0; i < kBuckets; ++i) {
      cum += hist_[i];
      if ((cum << 16) >= want) {
        b = i;
        break;
      }
    }
    quantile_gap_ns_ = bucket_upper(b);
    budget_ns_ = quantile_gap_ns_ <= spin_threshold_ns_
                     ? std::min(std::max(quantile_gap_ns_, opts_.min_spin_ns), opts_.max_spin_ns)
                     : 0;
    // kSpin -> kBusy needs the newest gap to be dense too: a long gap arriving while the
    // window still remembers a dense phase is a sign of the opposite.
    if (mode_ == PollMode::kSpin && quantile_gap_ns_ <= opts_.dense_gap_ns && last_gap_ns <= opts_.dense_gap_ns) {
      transition(PollMode::kBusy, now_ns);
    } else if (mode_ == PollMode::kBusy && quantile_gap_ns_ > opts_.busy_exit_gap_ns) {
      transition(PollMode::kSpin, now_ns);
    }
  }
  update_hold();
}

PollAction PollController::on_silence(std::int64_t now_ns) noexcept {
  if (opts_.policy == IdleKind::kAdaptive) {
    const std::int64_t silence = now_ns - last_work_ns_;
    if (mode_ == PollMode::kBusy) {
      transition(PollMode::kSpin, now_ns);  // the traffic paused longer than busy_linger_ns
      if (silence <= hold_ns_) return PollAction::kPoll;
    }
    if (mode_ == PollMode::kSpin && silence >= opts_.idle_after_ns)
      enter_interrupt(last_work_ns_ + opts_.idle_after_ns, false);
  }
  ++c_.arms;
  arm_at_ns_ = now_ns;
  return PollAction::kArm;
}

void PollController::on_arm_refused(std::int64_t now_ns) noexcept {
  ++c_.arm_refusals;
  retry_ns_ = retry_ns_ == 0 ? opts_.arm_retry_min_ns : std::min(retry_ns_ * 2, opts_.arm_retry_max_ns);
  retry_at_ns_ = now_ns + retry_ns_;
}

void PollController::on_wakeup(std::int64_t now_ns, bool by_event) noexcept {
  ++c_.wakeups;
  if (!by_event) ++c_.timer_wakeups;
  if (now_ns > arm_at_ns_) c_.sleep_ns += now_ns - arm_at_ns_;
  // Judge the period between the previous wakeup and this sleep.
  if (woke_) sparse_wakes_ = wake_work_cycles_ <= opts_.sparse_wake_cycles ? sparse_wakes_ + 1 : 0;
  woke_ = true;
  wake_work_cycles_ = 0;
  wake_check_ = true;
  wake_by_event_ = by_event;
  in_run_ = false;
  run_cycles_ = 0;
  retry_ns_ = 0;
  retry_at_ns_ = kNever;
  if (opts_.policy != IdleKind::kAdaptive || mode_ == PollMode::kInterrupt) return;
  if (now_ns - last_work_ns_ >= opts_.idle_after_ns) {
    enter_interrupt(last_work_ns_ + opts_.idle_after_ns, false);
  } else if (mode_ == PollMode::kSpin && budget_ns_ == 0 && sparse_wakes_ >= opts_.sparse_wakeups) {
    enter_interrupt(arm_at_ns_, true);
  }
}

}  // namespace pollux::core
