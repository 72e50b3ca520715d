// Text for the tools' output (pollux-latency, pollux-doctor): JSON literals for --json (the
// documents themselves are assembled by each tool) and names from untrusted files made safe to
// print.
#pragma once

#include <string>
#include <string_view>

namespace pollux::tools {

// A JSON string literal for `s` (quotes, backslashes and control characters escaped).
std::string json_string(std::string_view s);
// A JSON number, or null when not finite.
std::string json_number(double v);
// Control characters and non-ASCII bytes as \xNN: names read from files anyone may write (shm
// counters files) never reach a terminal as escape sequences.
std::string printable(std::string_view s);

}  // namespace pollux::tools
