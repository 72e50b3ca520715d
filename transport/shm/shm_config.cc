#include "transport/shm/shm_config.h"

#include "absl/strings/str_format.h"
#include "core/config_values.h"

namespace pollux::transport::shm {

std::string_view flow_control_name(FlowControl f) { return f == FlowControl::kLossy ? "lossy" : "backpressure"; }

namespace {

const ConfigTable<ShmConfig>& table() {
  static const ConfigTable<ShmConfig> t =
      ConfigTable<ShmConfig>("shm")
          .size("log_size", &ShmConfig::log_size, 64u << 10, 4ull << 30,
                "bytes of each stream's broadcast log (power of two, 64KiB..4GiB); the largest message is log_size/32",
                core::check_pow2)
          .choice("flow_control", &ShmConfig::flow_control,
                  {{"lossy", FlowControl::kLossy}, {"backpressure", FlowControl::kBackpressure}},
                  "lossy: the publisher never waits, a lapped subscriber gets a gap report; backpressure: offer() "
                  "returns kBackPressured while the slowest live subscriber is a whole log behind")
          .integer("max_subscribers", &ShmConfig::max_subscribers, 1, 64, "subscriber slots per stream log")
          .integer("liveness_timeout_ms", &ShmConfig::liveness_timeout_ms, 10, 3'600'000,
                   "a publisher or subscriber silent (no heartbeat, process gone) this long is considered dead")
          .text("group", &ShmConfig::group, "a string",
                "\"\": segments are 0600 and only files of this user are attached; a group name (or gid): segments are "
                "created 0660 with that group and files of that group (any owner, group-writable) are attached too; "
                "never files others may write");
  return t;
}

// The largest frame must fit the log 32 times over.
core::ConfigIssue validate(const core::Config& c) {
  const ShmConfig& s = config(c);
  if (s.log_size / 32 < c.pool.slot_size && c.transport == core::TransportKind::kShm) {
    return {"pool.slot_size",
            absl::StrFormat(
                "%u is larger than shm.log_size/32 = %u: frames that big do not fit the log; raise shm.log_size",
                c.pool.slot_size, s.log_size / 32)};
  }
  return {};
}

}  // namespace

void register_config(core::ConfigRegistry& r) { r.add(table(), validate); }

}  // namespace pollux::transport::shm
