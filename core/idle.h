// Idle strategies are public (pollux/idle.h): an application's loops idle as the pollers do.
// core/poller.cc runs the two a poller runs itself (interrupt and adaptive, core/controller.h).
#pragma once

#include "pollux/idle.h"

namespace pollux::core {
using ::pollux::BackoffIdle;
using ::pollux::BusySpinIdle;
using ::pollux::idle_kind_name;
using ::pollux::IdleKind;
using ::pollux::IdleStrategy;
using ::pollux::parse_idle_kind;
using ::pollux::YieldIdle;
}  // namespace pollux::core
