// Pollux: polling-mode publish/subscribe for market data. Include this header.
#pragma once

#include "pollux/clock.h"
#include "pollux/config.h"
#include "pollux/context.h"
#include "pollux/cpu.h"
#include "pollux/datagram.h"
#include "pollux/histogram.h"
#include "pollux/idle.h"
#include "pollux/late_join.h"
#include "pollux/publisher.h"
#include "pollux/recording.h"
#include "pollux/replay.h"
#include "pollux/subscriber.h"
#include "pollux/types.h"
