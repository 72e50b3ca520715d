// Context: one configured Pollux instance (config, buffer pool, transport, pollers).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "pollux/export.h"
#include "pollux/publisher.h"
#include "pollux/subscriber.h"

namespace pollux {

namespace detail {
class ContextImpl;
}

class POLLUX_API Context {
 public:
  // Loads and validates a TOML configuration (errors name file:line and key) and starts the
  // pollers. An empty string is the all-defaults configuration.
  static absl::StatusOr<std::unique_ptr<Context>> from_file(const std::string& path);
  static absl::StatusOr<std::unique_ptr<Context>> from_string(std::string_view toml,
                                                              std::string_view source_name = "<string>");
  // Stops the pollers and closes every publisher and subscriber (their calls then return
  // kClosed / 0). Publishers and subscribers may outlive the context safely.
  ~Context();

  // Opens a publisher / subscriber on a topic. Topics listed in [[streams]] use their
  // configured stream id; others get a stable id derived from the name.
  absl::StatusOr<Publisher> publisher(std::string_view topic);
  absl::StatusOr<Subscriber> subscriber(std::string_view topic);

  std::uint32_t stream_id(std::string_view topic) const;
  // The effective configuration as TOML (every key, with its help text).
  std::string effective_config() const;
  // Clock, topology, pool, pollers and transport, one per line.
  std::string describe() const;
  // Path of the shared-memory counters file (empty when runtime.counters = false).
  std::string counters_path() const;

 private:
  Context() = default;
  static absl::StatusOr<std::unique_ptr<Context>> adopt(absl::StatusOr<std::unique_ptr<detail::ContextImpl>> impl);
  std::unique_ptr<detail::ContextImpl> impl_;
};

}  // namespace pollux
