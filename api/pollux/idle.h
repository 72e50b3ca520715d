// Idle strategies: what a polling loop does after a cycle, given how much work the cycle did.
// Pollux's pollers use them (runtime.idle chooses one by name), and so can an application's own
// loops: `idle.idle(do_work())` until done. Small policy objects, inline, no allocation.
#pragma once

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <optional>
#include <string_view>

#include "pollux/cpu.h"

namespace pollux {

template <typename I>
concept IdleStrategy = requires(I i, int work) {
  { i.idle(work) }
  noexcept;
  { i.reset() }
  noexcept;
};

// runtime.idle: "busy-spin", "yield", "backoff" (the strategies below), "interrupt" (a poller
// sleeps on its sources' notifications after every empty cycle) and "adaptive" (the default: a
// poller moves between busy polling, spin-then-sleep and interrupt mode by load). The last two
// are run by the poller itself, since sleeping means arming its sources.
enum class IdleKind { kBusySpin, kYield, kBackoff, kInterrupt, kAdaptive };

inline std::optional<IdleKind> parse_idle_kind(std::string_view s) {
  if (s == "busy-spin") return IdleKind::kBusySpin;
  if (s == "yield") return IdleKind::kYield;
  if (s == "backoff") return IdleKind::kBackoff;
  if (s == "interrupt") return IdleKind::kInterrupt;
  if (s == "adaptive") return IdleKind::kAdaptive;
  return std::nullopt;
}
inline std::string_view idle_kind_name(IdleKind k) {
  switch (k) {
    case IdleKind::kBusySpin:
      return "busy-spin";
    case IdleKind::kYield:
      return "yield";
    case IdleKind::kBackoff:
      return "backoff";
    case IdleKind::kInterrupt:
      return "interrupt";
    case IdleKind::kAdaptive:
      return "adaptive";
  }
  return "?";
}

// Lowest latency, burns a core: only with a core per poller.
struct alignas(kFalseSharingRange) BusySpinIdle {
  void idle(int work) noexcept {
    if (work == 0) cpu_relax();
  }
  void reset() noexcept {}
};

// Gives the core away on every idle cycle: right when pollers share cores (2-core machines,
// tests), costs a syscall per idle cycle.
struct alignas(kFalseSharingRange) YieldIdle {
  void idle(int work) noexcept {
    if (work == 0) sched_yield();
  }
  void reset() noexcept {}
};

// spin -> yield -> park with exponential back-off capped at max_park_ns.
struct alignas(kFalseSharingRange) BackoffIdle {
  std::int64_t max_spins = 1000;
  std::int64_t max_yields = 100;
  std::int64_t min_park_ns = 1'000;
  std::int64_t max_park_ns = 1'000'000;

  void idle(int work) noexcept {
    if (work > 0) {
      reset();
      return;
    }
    if (spins_ < max_spins) {
      ++spins_;
      cpu_relax();
    } else if (yields_ < max_yields) {
      ++yields_;
      sched_yield();
    } else {
      timespec ts{0, static_cast<long>(park_ns_)};
      nanosleep(&ts, nullptr);
      park_ns_ = std::min(park_ns_ * 2, max_park_ns);
    }
  }
  void reset() noexcept {
    spins_ = 0;
    yields_ = 0;
    park_ns_ = min_park_ns;
  }

 private:
  std::int64_t spins_ = 0;
  std::int64_t yields_ = 0;
  std::int64_t park_ns_ = 1'000;
};

// An application loop that idles as the context's pollers do (ContextInfo::idle): the strategy
// is picked once at construction; one switch per idle call is noise next to a sched_yield. The
// sleeping kinds (interrupt, adaptive) back off here: an application's loop has no sources for
// Pollux to arm.
class AppIdle {
 public:
  explicit AppIdle(IdleKind kind) noexcept : kind_(kind) {}
  void idle(int work) noexcept {
    switch (kind_) {
      case IdleKind::kBusySpin:
        spin_.idle(work);
        break;
      case IdleKind::kYield:
        yield_.idle(work);
        break;
      case IdleKind::kBackoff:
      case IdleKind::kInterrupt:
      case IdleKind::kAdaptive:
        backoff_.idle(work);
        break;
    }
  }
  void reset() noexcept { backoff_.reset(); }
  IdleKind kind() const noexcept { return kind_; }
  // Whether idle() may sleep (backoff parks), rather than only spin or yield.
  bool may_sleep() const noexcept { return kind_ != IdleKind::kBusySpin && kind_ != IdleKind::kYield; }

 private:
  IdleKind kind_;
  BusySpinIdle spin_;
  YieldIdle yield_;
  BackoffIdle backoff_;
};

}  // namespace pollux
