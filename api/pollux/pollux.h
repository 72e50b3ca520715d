// Pollux: polling-mode publish/subscribe for market data. Include this header.
#pragma once

#include "pollux/clock.h"
#include "pollux/context.h"
#include "pollux/publisher.h"
#include "pollux/subscriber.h"
#include "pollux/types.h"
