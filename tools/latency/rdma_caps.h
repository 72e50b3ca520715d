// What the RDMA device of a configuration says about completion timestamps, asked for real
// (ibv_query_device_ex: completion_timestamp_mask, hca_core_clock), for pollux-latency's notes
// on the stages it cannot split yet.
#pragma once

#include <string>

#include "core/config.h"

namespace pollux::latency {

// One sentence: "device rxe0 does not offer completion timestamps (...)", or that it offers
// them and this version does not take them, or why the device could not be asked.
std::string rdma_completion_timestamp_note(const core::Config& cfg);

}  // namespace pollux::latency
