// The latency histogram is public (pollux/histogram.h): the runtime, the tools and applications
// report with the same one.
#pragma once

#include "pollux/histogram.h"

namespace pollux::core {
using Histogram = ::pollux::Histogram;
}  // namespace pollux::core
