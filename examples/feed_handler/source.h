// The feed to replay: a generated stream or a memory-mapped BinaryFILE, validated up front.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "feed_handler/feed_config.h"
#include "itch/reader.h"

namespace pollux::feed {

struct Source {
  std::string description;         // for the summary
  std::span<const std::uint8_t> data;  // BinaryFILE framing (length prefixes may be 0)
  std::uint64_t messages = 0;
  double prepare_seconds = 0;      // generating or mapping + validating

  std::vector<std::uint8_t> generated;
  std::optional<itch::Reader> reader;
};

// Generates or maps the source of `cfg` and validates every record, so a malformed file
// fails before anything is published. Errors name the file: "<path>: itch: offset N: ...".
absl::StatusOr<std::unique_ptr<Source>> OpenSource(const FeedConfig& cfg);

}  // namespace pollux::feed
