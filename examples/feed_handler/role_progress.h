// Pieces shared by the publisher and subscriber roles.
#pragma once

#include <time.h>

#include <atomic>
#include <cstdint>

#include "pollux/cpu.h"
#include "pollux/idle.h"

namespace pollux::feed {

// CPU time of the calling thread, ns: the load-independent half of a rate on a shared
// machine (wall-clock rates drop when other processes take the cores).
inline std::int64_t thread_cpu_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// Live counters of a role, written by its thread (relaxed stores, once per frame at most) and
// read by the progress printer - possibly in another process, through a shared mapping - so
// each sits on its own pair of cache lines.
struct alignas(kFalseSharingRange) RoleProgress {
  enum State : std::uint32_t { kStarting = 0, kReady = 1, kDone = 2, kFailed = 3 };
  std::atomic<std::uint64_t> messages{0};
  std::atomic<std::uint64_t> frames{0};
  std::atomic<std::uint64_t> gaps{0};  // subscribers: gap notifications
  std::atomic<std::uint64_t> lost{0};  // subscribers: messages lost (Pollux messages)
  std::atomic<std::uint32_t> state{kStarting};
};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "RoleProgress is shared between processes");

}  // namespace pollux::feed
