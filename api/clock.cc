#include "pollux/clock.h"

#include "core/clock.h"

namespace pollux {

// Out of line on purpose: the conversion page is the library's (core::detail::g_page), and a
// program linked with libpollux.so must read the same one the library stamps messages with.
std::int64_t now_ns() noexcept { return core::Clock::now_ns(); }

}  // namespace pollux
