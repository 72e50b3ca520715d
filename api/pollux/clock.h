// The clock of Message::publisher_ns, StageTimes and Publisher::send_completion_ns.
#pragma once

#include <cstdint>

#include "pollux/export.h"

namespace pollux {

// Nanoseconds on the host's CLOCK_MONOTONIC time line (time since boot, NTP-disciplined in rate,
// never stepping back), read as cheaply as the CPU allows: with an invariant TSC one rdtsc and a
// multiply (~10-15 ns), else clock_gettime(CLOCK_MONOTONIC). Every Pollux process on a host
// shares one TSC conversion (a small file in runtime.shm_dir, mapped when a Context starts) and
// keeps it within 20 us of CLOCK_MONOTONIC, so now_ns() in a subscriber minus the
// Message::publisher_ns stamped by a publisher in another process on the same host is the
// message's latency. Values from different hosts are not comparable (each host counts from its
// own boot). Any thread; no allocation, no lock, no system call on the TSC path.
POLLUX_API std::int64_t now_ns() noexcept;

}  // namespace pollux
