// The counters of one poller thread (scope "poller N", kind kPoller): declared once here, read by
// name by pollux-stat.
#pragma once

#include <cstdint>

#include "core/controller.h"
#include "core/counter_set.h"

namespace pollux::core {

// Entries with a value are copied from the poller's controller by Poller::publish_mode(), which
// names `ctl` (the PollController), `k` (its ControllerCounters) and `now`; the poller updates the
// others itself (each cycle, each sleep, at start; doorbells by whoever rings).
#define POLLUX_POLLER_COUNTERS(X)                                                                             \
  X(cycles, "duty_cycles", "duty cycles run")                                                                 \
  X(work, "work_items", "work the cycles did (frames, completions, timers)")                                  \
  X(idle, "idle_cycles", "cycles that found no work")                                                         \
  X(mode_switches, "mode_switches", "controller mode changes (busy, spin, interrupt)", k.transitions)         \
  X(sleeps, "sleeps", "times the poller blocked (interrupt mode)")                                            \
  X(wakeups, "wakeups", "wakeups from a sleep, by event or timeout", k.wakeups)                               \
  X(timer_wakeups, "timer_wakeups", "wakeups by the timeout rather than an event", k.timer_wakeups)           \
  X(spurious_wakeups, "spurious_wakeups", "event wakeups whose next cycle found no work", k.spurious_wakeups) \
  X(time_busy_ns, "time_busy_ns", "time in busy mode",                                                        \
    static_cast<std::uint64_t>(ctl.time_in_mode_ns(PollMode::kBusy, now)))                                    \
  X(time_spin_ns, "time_spin_ns", "time in spin mode",                                                        \
    static_cast<std::uint64_t>(ctl.time_in_mode_ns(PollMode::kSpin, now)))                                    \
  X(time_interrupt_ns, "time_interrupt_ns", "time in interrupt mode (asleep or about to be)",                 \
    static_cast<std::uint64_t>(ctl.time_in_mode_ns(PollMode::kInterrupt, now)))                               \
  X(spin_budget_ns, "spin_budget_ns", "how long the controller spins before it sleeps now",                   \
    static_cast<std::uint64_t>(ctl.spin_budget_ns()))                                                         \
  X(arm_refused, "arm_refused", "sleeps a progress source refused (work pending)")                            \
  X(doorbells, "doorbells", "wakeups rung by producers")                                                      \
  X(mode, "mode", "the controller's mode now: 0 busy, 1 spin, 2 interrupt (PollMode)",                        \
    static_cast<std::uint64_t>(ctl.mode()))                                                                   \
  X(thread_id, "thread_id", "the kernel tid of thread pollux-poll-N (top -H, perf -t)")                       \
  X(idle_strategy, "idle_strategy", "the idle strategy (core::IdleKind): a controller runs for adaptive/interrupt")
// Present only when the poller is pinned.
#define POLLUX_POLLER_PINNED_COUNTERS(X) X(pinned_cpu, "pinned_cpu", "the core the poller thread is pinned to")
#define POLLUX_POLLER_ALL_COUNTERS(X) POLLUX_POLLER_COUNTERS(X) POLLUX_POLLER_PINNED_COUNTERS(X)

POLLUX_COUNTER_SET(PollerCounters, POLLUX_POLLER_ALL_COUNTERS);

}  // namespace pollux::core
