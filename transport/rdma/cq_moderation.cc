#include "transport/rdma/cq_moderation.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace pollux::transport::rdma {

absl::Status ModerationOptions::validate() const {
  if (target_interrupts_per_s == 0)
    return absl::InvalidArgumentError(
        "rdma.moderation.target_interrupts_per_s: expected >= 1 (interrupts per second to aim at), got 0");
  if (max_count == 0)
    return absl::InvalidArgumentError(
        "rdma.moderation.max_count: expected 1..65535 (1 = merge nothing, moderate by period only), got 0");
  if (interval_ns <= 0)
    return absl::InvalidArgumentError(
        absl::StrCat("rdma.moderation.interval_ns: expected >= 1 (e.g. 100000000 = 100 ms), got ", interval_ns));
  if (!(hysteresis >= 0.0) || !(hysteresis < 1.0))
    return absl::InvalidArgumentError(
        absl::StrCat("rdma.moderation.hysteresis: expected a fraction in [0, 1), e.g. 0.25, got ", hysteresis));
  return absl::OkStatus();
}

CqModeration CqModerationTuner::compute(const ModerationOptions& opts, double events_per_s, double wakeups_per_s,
                                        CqModeration current) noexcept {
  if (!(events_per_s > 0.0) || opts.target_interrupts_per_s == 0) return CqModeration{};
  const double target = opts.target_interrupts_per_s;
  const double h = std::clamp(opts.hysteresis, 0.0, 0.99);
  // The interrupt rate this CQ would raise without moderation: each wakeup of the interval
  // stood for up to `count` completions (more than one per completion is impossible). With
  // {1, 0} it is the wakeup rate itself, which is below the event rate when the poller drains
  // several completions per wakeup - then moderation would add latency and save nothing.
  const double unmoderated = std::min(events_per_s, std::max(wakeups_per_s, 0.0) * std::max<double>(current.count, 1));
  const bool on = current.moderated();
  if (on ? unmoderated < target * (1.0 - h) : unmoderated <= target * (1.0 + h)) return CqModeration{};

  // Throughput mode: `count` completions per event brings the rate to the target; the period
  // is the rest of one target interval after one event gap, so it rarely fires before count.
  const std::uint16_t max_count = std::max<std::uint16_t>(opts.max_count, 1);
  const double want = std::round(events_per_s / target);
  std::uint16_t count =
      max_count < 2 ? 1 : static_cast<std::uint16_t>(std::clamp(want, 2.0, static_cast<double>(max_count)));
  const double period_us = std::round(1e6 / target - 1e6 / events_per_s);
  std::uint16_t period = 0;
  if (opts.max_period_us > 0)
    period = static_cast<std::uint16_t>(std::clamp(period_us, 1.0, static_cast<double>(opts.max_period_us)));
  if (count == 1 && period == 0) return CqModeration{};  // nothing left to moderate with

  if (on) {
    // Small changes are not worth an ibv_modify_cq, and keep the setting from wandering.
    if (std::abs(static_cast<double>(count) - current.count) <= h * current.count) count = current.count;
    if (std::abs(static_cast<double>(period) - current.period_us) <= h * current.period_us) period = current.period_us;
  }
  return CqModeration{count, period};
}

CqModerationTuner::CqModerationTuner(const ModerationOptions& opts, std::int64_t now_ns) noexcept
    : opts_(opts), since_ns_(now_ns) {
  if (opts_.interval_ns <= 0) opts_.interval_ns = 1;
}

void CqModerationTuner::restart(std::int64_t now_ns, std::uint64_t events_total, std::uint64_t wakeups_total) noexcept {
  since_ns_ = now_ns;
  events_ = events_total;
  wakeups_ = wakeups_total;
}

std::optional<CqModeration> CqModerationTuner::update(std::int64_t now_ns, std::uint64_t events_total,
                                                      std::uint64_t wakeups_total) noexcept {
  if (unsupported_) return std::nullopt;
  if (events_total < events_ || wakeups_total < wakeups_ || now_ns < since_ns_) {
    restart(now_ns, events_total, wakeups_total);
    return std::nullopt;
  }
  const std::int64_t elapsed = now_ns - since_ns_;
  if (elapsed < opts_.interval_ns) return std::nullopt;
  const double secs = static_cast<double>(elapsed) * 1e-9;
  last_event_rate_ = static_cast<double>(events_total - events_) / secs;
  last_wakeup_rate_ = static_cast<double>(wakeups_total - wakeups_) / secs;
  restart(now_ns, events_total, wakeups_total);
  const CqModeration next = compute(opts_, last_event_rate_, last_wakeup_rate_, current_);
  if (next == current_) return std::nullopt;
  current_ = next;
  ++changes_;
  return next;
}

}  // namespace pollux::transport::rdma
