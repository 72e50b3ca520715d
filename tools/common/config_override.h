// Command-line overrides of TOML configuration keys ("--set section.key=value") for the tools:
// core/config_override.h, under the tools' names.
#pragma once

#include <string_view>

#include "core/config_override.h"

namespace pollux::tools {

using ConfigOverride = core::ConfigOverride;

inline absl::StatusOr<ConfigOverride> ParseOverride(std::string_view text, std::string_view flag = "--set",
                                                    std::string_view example = "runtime.threading=shared") {
  return core::parse_override(text, flag, example);
}

inline absl::Status ApplyOverride(toml::table& root, const ConfigOverride& o, std::string_view flag = "--set") {
  return core::apply_override(root, o, flag);
}

}  // namespace pollux::tools
