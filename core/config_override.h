// Command-line overrides of TOML configuration keys ("--set section.key=value"): the programs
// that take a configuration file and --set (pollux-latency, pollux-bench-rate), and an
// application's own table through pollux/config.h.
//
// A value is TOML ("--set udp.port=40000", "--set 'udp.address=\"127.0.0.1\"'"), and one that
// does not parse as TOML is taken as a bare string, so "--set runtime.threading=inline" works
// without shell-quoted quotes.
#pragma once

#include <string>
#include <string_view>

#include <toml++/toml.h>

#include "absl/status/statusor.h"

namespace pollux::core {

struct ConfigOverride {
  std::string section;  // "runtime"
  std::string key;      // "threading" (may itself be dotted: "adaptive.busy_us")
  toml::table holder;   // holds the value under "v"
  const toml::node& value() const { return *holder.get("v"); }
};

// Parses "section.key=value". `flag` and `example` shape the error message:
//   "--set nodot: expected section.key=value (e.g. runtime.threading=shared)".
absl::StatusOr<ConfigOverride> parse_override(std::string_view text, std::string_view flag = "--set",
                                              std::string_view example = "runtime.threading=shared");

// root[section][key] = value, creating [section] when absent. Fails (naming `flag` and the
// section) when root[section] exists but is not a table (e.g. [[streams]]).
absl::Status apply_override(toml::table& root, const ConfigOverride& o, std::string_view flag = "--set");

}  // namespace pollux::core
