// Fuzzes the TOML configuration loader (core/config.cc) from a string: parse_config() is the
// whole of load_config_file() after the read, and touches neither the filesystem nor threads.
// The input is the file's text.
//
// Invariants (besides "no crash, no UB, no exception escapes"):
//  - a rejected file gets InvalidArgument naming the source ("<fuzz>:LINE: key: ..." or
//    "<fuzz>: key: ...");
//  - an accepted file round-trips: the effective configuration printed by to_toml() (what
//    pollux-config prints) parses again to the same configuration;
//  - stream lookups agree with the [[streams]] table.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "core/config.h"
#include "tests/fuzz/fuzz_util.h"

namespace core = pollux::core;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  constexpr std::string_view kSource = "<fuzz>";
  const absl::StatusOr<core::Config> cfg = core::parse_config(text, kSource);
  if (!cfg.ok()) {
    const std::string msg(cfg.status().message());
    FUZZ_CHECK(absl::IsInvalidArgument(cfg.status()), "rejected with %s, expected InvalidArgument",
               cfg.status().ToString().c_str());
    FUZZ_CHECK(msg.substr(0, kSource.size() + 1) == "<fuzz>:", "error does not name the source: %s", msg.c_str());
    return 0;
  }
  FUZZ_CHECK(cfg->source == kSource, "source is \"%s\"", cfg->source.c_str());

  const std::string printed = cfg->to_toml();
  const absl::StatusOr<core::Config> again = core::parse_config(printed, kSource);
  FUZZ_CHECK(again.ok(), "the printed configuration does not parse: %s\n--- printed ---\n%s",
             again.status().ToString().c_str(), printed.c_str());
  const std::string reprinted = again->to_toml();
  FUZZ_CHECK(reprinted == printed, "the configuration changed in a round trip\n--- first ---\n%s\n--- second ---\n%s",
             printed.c_str(), reprinted.c_str());

  for (const core::StreamConfig& s : cfg->streams) {
    FUZZ_CHECK(cfg->stream_id(s.topic) == s.id, "stream_id(\"%s\") != %u", s.topic.c_str(), s.id);
    const core::StreamConfig* f = cfg->find_stream(s.id);
    FUZZ_CHECK(f != nullptr && f->topic == s.topic, "find_stream(%u) does not find \"%s\"", s.id, s.topic.c_str());
  }
  return 0;
}
