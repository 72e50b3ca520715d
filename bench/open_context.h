// Opening the Pollux context of a benchmark: without it nothing can be measured, so a failure
// (the configuration refused, the transport not available) ends the program.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "pollux/pollux.h"

namespace pollux::bench {

// The context of `toml` (always ok); on a failure its status goes to stderr and the program
// exits 2.
inline absl::StatusOr<std::unique_ptr<Context>> open_context(const std::string& toml, const std::string& name) {
  auto ctx = Context::from_string(toml, name);
  if (!ctx.ok()) {
    std::fprintf(stderr, "%s\n", std::string(ctx.status().message()).c_str());
    std::exit(2);
  }
  return ctx;
}

}  // namespace pollux::bench
