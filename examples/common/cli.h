// The examples' command-line conventions, the same as every Pollux program's: --help and -h print
// the program's help to stdout and exit 0; --version prints "<program> <version>"; an unknown
// flag is refused on stderr with a suggestion ("unknown flag '--cuont'; did you mean '--count'?
// (see --help)") and exit status 64 (EX_USAGE). Application code, built on the standard library
// only: the examples parse their flags by hand (pollux-feed) or with absl::flags (pollux-exchange).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pollux::examples {

inline constexpr int kUsageExit = 64;  // EX_USAGE

// The version the examples were built with (Pollux's project version).
const char* version();

// Every "--name" that `help` mentions, in order, without repeats: the candidates of a suggestion.
std::vector<std::string> flags_in(std::string_view help);

// "unknown flag '--cuont'; did you mean '--count'? (see --help)" (the closest of `candidates`
// within about a third of the flag's length; none: no suggestion). A bare word gets
// "unexpected argument 'x' (see --help)".
std::string unknown_flag_message(std::string_view arg, const std::vector<std::string>& candidates);

// -h/--help prints `help` to stdout and returns 0; --version prints "<program> <version>" and
// returns 0; anything else returns -1 (go on parsing).
int handle_standard_flag(std::string_view arg, std::string_view program, std::string_view help);

}  // namespace pollux::examples
