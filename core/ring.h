// The descriptor ring the hot path uses between application threads and pollers.
// bench/ring_bench.cc measures both candidates; docs/BENCHMARKS.md has the figures behind
// this choice.
#pragma once

#include "core/spsc_ring.h"

namespace pollux::core {
template <typename T>
using DescRing = SpscRing<T>;
}  // namespace pollux::core
