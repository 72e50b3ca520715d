// Cache-line distances and the spin pause are public (pollux/cpu.h): applications pad and spin
// as the runtime does.
#pragma once

#include "pollux/cpu.h"

namespace pollux::core {
using ::pollux::cpu_relax;
using ::pollux::kCacheLine;
using ::pollux::kFalseSharingRange;
}  // namespace pollux::core
