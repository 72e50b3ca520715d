// The help text of counters, for readers that export them (the metrics endpoint): the sets core
// declares (streams, pollers) and every transport's, each from the table it is declared in.
#pragma once

#include <span>
#include <string_view>

#include "core/counter_set.h"

namespace pollux::core {

// Every counter a transport declares (name and help), in the transports' order; one name may
// appear twice (two transports, or a set each direction shares). Defined by the transport
// registry (transport/factory.cc), the one library that sees every transport.
std::span<const CounterInfo> transport_counter_help() noexcept;

}  // namespace pollux::core
