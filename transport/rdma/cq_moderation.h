// CQ moderation for a poller's RDMA source in interrupt mode (ibv_modify_cq {cq_count,
// cq_period}): the tuner that picks the setting, and the policy seam the source asks.
//
// The tuner (CqModerationTuner): from the completion events and wakeups observed per interval,
// picks the {count, period_us} to give ibv_modify_cq so the
// poller is interrupted at about target_interrupts_per_s, and not at all more than needed.
// libvma's adaptive interrupt moderation (AIM, ring_simple::adapt_cq_moderation) is the model:
// count = events per second / target interrupts per second, period = the time left in one
// interrupt interval after one event gap, both capped. Two differences, both against the
// flapping libvma notes ("the rate is affected by the moderation and the moderation by the
// rate"): the decision to moderate uses an estimate of the interrupt rate the CQ would raise
// without moderation, and enter/leave thresholds and changes of count are separated by a
// hysteresis band.
//
// Pure logic: no clock, no verbs; the caller applies the result (ibv_modify_cq) and says when
// the device refuses (Soft-RoCE may), after which the tuner stays at {1, 0}. One object per
// CQ, used by the thread that owns the CQ.
//
// How the RDMA source uses it:
//   CqModerationTuner tuner(opts, now);
//   // whenever convenient (e.g. each wakeup or each housekeeping tick), with running totals:
//   if (auto m = tuner.update(now, completions_total, wakeups_total)) {
//     if (ibv_modify_cq(cq, {m->count, m->period_us}) fails) tuner.set_unsupported();  // log once
//   }
//   // on entering interrupt mode after polling (counters that moved while polling say
//   // nothing about interrupts): tuner.restart(now, completions_total, wakeups_total);
//
// The seam (CqModerationPolicy): a policy sees the running totals of completions polled and of
// wakeups by completion events, and says when to change the setting. The poller's source
// (RdmaPollerSource) asks it from housekeeping (about once per ms while polling, and after every
// wakeup), applies what it returns with CompletionGroup::set_moderation(), and tells it when the
// device refuses (rxe does): from then on the CQ raises one event per armed completion and the
// policy is not asked again. Tests plug in a policy of their own. Control-rate calls only
// (housekeeping), never per message: a virtual call is fine here.
#pragma once

#include <cstdint>
#include <optional>

#include "absl/status/status.h"

namespace pollux::transport::rdma {

// What ibv_modify_cq takes (struct ibv_moderate_cq: uint16 cq_count, uint16 cq_period in us).
// {1, 0}: an event per completion, no delay - the lowest latency.
struct CqModeration {
  std::uint16_t count = 1;
  std::uint16_t period_us = 0;
  bool moderated() const noexcept { return count > 1 || period_us > 0; }
  friend bool operator==(const CqModeration&, const CqModeration&) = default;
};

// Suggested config keys: rdma.moderation.<field name>.
struct ModerationOptions {
  // The interrupt rate to aim at when the event rate is high. 10k/s = one interrupt per
  // 100 us: a wakeup costs ~5-50 us, so this bounds interrupt overhead to a fraction of a core.
  std::uint32_t target_interrupts_per_s = 10'000;
  // Caps: at most this many completions merged into one event, and at most this long (us) a
  // completion may wait for its event - the latency moderation may add.
  std::uint16_t max_count = 64;
  std::uint16_t max_period_us = 50;
  // Recompute once per interval of the caller's clock.
  std::int64_t interval_ns = 100'000'000;
  // Relative hysteresis: moderate when the unmoderated interrupt rate would exceed
  // target * (1 + h), stop when it falls below target * (1 - h); a new count is applied only
  // if it differs from the current one by more than h (relative).
  double hysteresis = 0.25;

  // InvalidArgument naming the field (as rdma.moderation.<field>) and the accepted range.
  absl::Status validate() const;
};

class CqModerationTuner {
 public:
  // totals start at 0; use restart() if the caller's counters are already running.
  CqModerationTuner(const ModerationOptions& opts, std::int64_t now_ns) noexcept;

  // Call with the running totals of completion events polled from the CQ and of wakeups
  // (returns from the completion-channel wait). Recomputes when at least interval_ns has passed
  // since the last recomputation; returns the new setting if it differs from current(), else
  // nullopt. Totals that go backwards (a counter reset) restart the interval.
  std::optional<CqModeration> update(std::int64_t now_ns, std::uint64_t events_total,
                                     std::uint64_t wakeups_total) noexcept;

  // Starts a new interval from these totals, keeping the current setting.
  void restart(std::int64_t now_ns, std::uint64_t events_total, std::uint64_t wakeups_total) noexcept;

  // The device refused ibv_modify_cq: from now on current() is {1, 0} and update() returns
  // nullopt.
  void set_unsupported() noexcept {
    unsupported_ = true;
    current_ = CqModeration{};
  }
  bool unsupported() const noexcept { return unsupported_; }

  CqModeration current() const noexcept { return current_; }
  std::uint64_t changes() const noexcept { return changes_; }
  // Rates measured over the last completed interval (per second).
  double last_event_rate() const noexcept { return last_event_rate_; }
  double last_wakeup_rate() const noexcept { return last_wakeup_rate_; }

  // The decision itself, given the rates of one interval and the setting in force during it.
  static CqModeration compute(const ModerationOptions& opts, double events_per_s, double wakeups_per_s,
                              CqModeration current) noexcept;

 private:
  ModerationOptions opts_;
  std::int64_t since_ns_;
  std::uint64_t events_ = 0, wakeups_ = 0;
  CqModeration current_;
  bool unsupported_ = false;
  std::uint64_t changes_ = 0;
  double last_event_rate_ = 0, last_wakeup_rate_ = 0;
};

class CqModerationPolicy {
 public:
  virtual ~CqModerationPolicy() = default;
  // Running totals (from the group's creation). Returns the new setting to apply, or nullopt
  // to keep the current one.
  virtual std::optional<CqModeration> update(std::int64_t now_ns, std::uint64_t completions_total,
                                             std::uint64_t wakeups_total) noexcept = 0;
  // The poller enters interrupt mode after a polling phase: what the totals did meanwhile says
  // nothing about interrupts; start a new measurement interval from here.
  virtual void restart(std::int64_t now_ns, std::uint64_t completions_total, std::uint64_t wakeups_total) noexcept = 0;
  // The device refused ibv_modify_cq.
  virtual void set_unsupported() noexcept = 0;
};

// The tuner behind the seam: what a poller's source uses in interrupt/adaptive mode when no
// static rdma.cq_moderation_count/usec is configured.
class TunerPolicy final : public CqModerationPolicy {
 public:
  TunerPolicy(const ModerationOptions& o, std::int64_t now_ns) : tuner_(o, now_ns) {}
  std::optional<CqModeration> update(std::int64_t now_ns, std::uint64_t completions_total,
                                     std::uint64_t wakeups_total) noexcept override {
    return tuner_.update(now_ns, completions_total, wakeups_total);
  }
  void restart(std::int64_t now_ns, std::uint64_t completions_total, std::uint64_t wakeups_total) noexcept override {
    tuner_.restart(now_ns, completions_total, wakeups_total);
  }
  void set_unsupported() noexcept override { tuner_.set_unsupported(); }
  const CqModerationTuner& tuner() const noexcept { return tuner_; }

 private:
  CqModerationTuner tuner_;
};

}  // namespace pollux::transport::rdma
