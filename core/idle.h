// Idle strategies: small policy objects the agent runner calls with the work count of each
// duty cycle. Chosen by name in config (runtime.idle): "busy-spin", "yield", "backoff" (the
// static ones below), "interrupt" (sleep on the sources' notifications after every empty
// cycle) and "adaptive" (the default: core/controller.h moves each poller between busy
// polling, spin-then-sleep and interrupt mode by load). The last two are run by the poller
// itself (core/poller.cc), since sleeping means arming its progress sources.
#pragma once

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <optional>
#include <string_view>

#include "core/cache.h"

namespace pollux::core {

template <typename I>
concept IdleStrategy = requires(I i, int work) {
  { i.idle(work) }
  noexcept;
  { i.reset() }
  noexcept;
};

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

}  // namespace pollux::core
