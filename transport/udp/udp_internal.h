// Helpers shared by the UDP transport's source files (not part of its interface).
#pragma once

#include <cstdint>

#include "transport/reliability/sender.h"

namespace pollux::transport::udp {

// Publishers look for NAKs/status messages at least this often while posting (inline mode:
// offer() is the only call the application makes); each look is one recvmmsg.
inline constexpr std::int64_t kControlPollNs = 250'000;
using reliability::kEndResendNs;

inline std::int64_t us(std::uint32_t v) { return static_cast<std::int64_t>(v) * 1'000; }
inline std::int64_t ms(std::uint32_t v) { return static_cast<std::int64_t>(v) * 1'000'000; }

}  // namespace pollux::transport::udp
