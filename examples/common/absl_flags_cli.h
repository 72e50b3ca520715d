// Pollux's command-line conventions (pollux/cli.h) for a program whose flags are absl::flags:
// Abseil's own ParseCommandLine exits 1 and knows only underscored names, while every Pollux
// program takes "--flag value" and "--flag=value", exits 64 on a usage error and answers a typo
// with a suggestion.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pollux::examples {

struct AbslFlagsProgram {
  const char* name;                // "pollux-exchange"
  std::string usage;               // printed by --help before the flags
  std::vector<const char*> flags;  // the ABSL_FLAG names the program takes, in help order
  bool dashed = true;              // shown and suggested as --line-a (else as declared: --zero_length_prefix)
};

// --help/-h and --version anywhere print and exit 0; then every argument is set or refused
// (exit 64). Either spelling of a name (dashes or underscores) is accepted; a bool flag takes no
// value.
void parse_absl_flags(int argc, char** argv, const AbslFlagsProgram& p);

// "<program>: <message> (see --help)" on stderr, exit 64.
[[noreturn]] void usage_error(std::string_view program, std::string_view message);

// "line_a" -> "line-a".
std::string dashed(std::string name);

}  // namespace pollux::examples
