// How a poller's RDMA source adapts CQ moderation (ibv_modify_cq {cq_count, cq_period}) while
// its poller sleeps in interrupt mode: a policy sees the running totals of completions polled
// and of wakeups by completion events, and says when to change the setting. The poller's
// source (RdmaPollerSource) asks it from housekeeping (about once per ms while polling, and
// after every wakeup), applies what it returns with CompletionGroup::set_moderation(), and tells
// it when the device refuses (rxe does): from then on the CQ raises one event per armed
// completion and the policy is not asked again.
//
// The tuner itself (core::CqModerationTuner, libvma's AIM / Linux's rdma_dim model) lives in
// core/moderation.h (branch h-ctl); this interface is the seam it plugs into, so the source and
// its tests do not depend on the tuner's arrival. Control-rate calls only (housekeeping), never
// per message: a virtual call is fine here.
#pragma once

#include <cstdint>
#include <optional>

#include "core/moderation.h"

namespace pollux::transport::rdma {

struct CqModerationSetting {
  std::uint16_t count = 1;      // completions merged into one event (1: an event per completion)
  std::uint16_t period_us = 0;  // longest a completion waits for its event (0: no delay)
};

class CqModerationPolicy {
 public:
  virtual ~CqModerationPolicy() = default;
  // Running totals (from the group's creation). Returns the new setting to apply, or nullopt
  // to keep the current one.
  virtual std::optional<CqModerationSetting> update(std::int64_t now_ns, std::uint64_t completions_total,
                                                    std::uint64_t wakeups_total) noexcept = 0;
  // The poller enters interrupt mode after a polling phase: what the totals did meanwhile says
  // nothing about interrupts; start a new measurement interval from here.
  virtual void restart(std::int64_t now_ns, std::uint64_t completions_total, std::uint64_t wakeups_total) noexcept = 0;
  // The device refused ibv_modify_cq.
  virtual void set_unsupported() noexcept = 0;
};

// The CQ moderation tuner of core/moderation.h behind the seam: what a poller's source uses in
// interrupt/adaptive mode when no static rdma.cq_moderation_count/usec is configured.
class TunerPolicy final : public CqModerationPolicy {
 public:
  TunerPolicy(const core::ModerationOptions& o, std::int64_t now_ns) : tuner_(o, now_ns) {}
  std::optional<CqModerationSetting> update(std::int64_t now_ns, std::uint64_t completions_total,
                                            std::uint64_t wakeups_total) noexcept override {
    auto m = tuner_.update(now_ns, completions_total, wakeups_total);
    if (!m) return std::nullopt;
    return CqModerationSetting{m->count, m->period_us};
  }
  void restart(std::int64_t now_ns, std::uint64_t completions_total, std::uint64_t wakeups_total) noexcept override {
    tuner_.restart(now_ns, completions_total, wakeups_total);
  }
  void set_unsupported() noexcept override { tuner_.set_unsupported(); }
  const core::CqModerationTuner& tuner() const noexcept { return tuner_; }

 private:
  core::CqModerationTuner tuner_;
};

}  // namespace pollux::transport::rdma
