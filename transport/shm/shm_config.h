// [shm]: the shared-memory transport's configuration (transport/shm/, docs/ARCHITECTURE.md): its
// struct and its TOML table, added to core's registry (core/config_registry.h) by the transport
// registry (transport/factory.cc).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/config.h"

namespace pollux::transport::shm {

enum class FlowControl { kLossy, kBackpressure };
std::string_view flow_control_name(FlowControl f);

struct ShmConfig {
  std::uint64_t log_size = 16u << 20;  // bytes per stream log (power of two, >= 64 KiB)
  FlowControl flow_control = FlowControl::kLossy;
  std::uint32_t max_subscribers = 32;
  std::uint32_t liveness_timeout_ms = 2000;  // publisher considered dead after this silence
  std::string group;                         // "" : segments 0600, same uid only; else 0660 with this group
};

inline const ShmConfig& config(const core::Config& c) { return c.table<ShmConfig>(); }
inline ShmConfig& config(core::Config& c) { return c.table<ShmConfig>(); }

// Adds the [shm] table to `r`.
void register_config(core::ConfigRegistry& r);

}  // namespace pollux::transport::shm
