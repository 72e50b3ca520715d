// The command-line conventions every Pollux program follows (pollux-latency, pollux-feed and the
// other tools and examples), for an application that wants to behave the same:
//   --help, -h   the program's help to stdout; exit 0 before anything runs
//   --version    "<program> <version>" (the version of this library); exit 0
//   an unknown flag: "<program>: unknown flag '--cuont'; did you mean '--count'? (see --help)"
//                to stderr; exit 64 (kUsageExit, EX_USAGE)
//   a stop signal: reported by name ("stopped by SIGINT")
// Not needed to use Pollux: the parsing itself stays the application's (by hand, absl::flags, ...).
// Standard library only; nothing here allocates on a hot path or touches a Context.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "pollux/export.h"

namespace pollux::cli {

// The exit status of a bad command line (EX_USAGE of <sysexits.h>).
inline constexpr int kUsageExit = 64;

// The version of the Pollux library (its CMake project version, e.g. "0.1.0").
POLLUX_API const char* version();

// Every "--name" (letters, digits, '-', '_'; a trailing '-' or '_' dropped: "--benchmark_...")
// that `help` mentions, in order, without repeats: the candidates of a "did you mean" hint for a
// program whose help text lists its flags. Neither "a--b" nor a "----" rule counts.
POLLUX_API std::vector<std::string> flags_in(std::string_view help);

// The candidate closest to `flag` (edit distance with '_' and '-' alike and a swap of two
// neighbours one edit, at most about a third of its length; an abbreviation of three or more
// characters counts as one edit), or "" when none is close. "--cuont" -> "--count".
POLLUX_API std::string closest(std::string_view flag, const std::vector<std::string>& candidates);

// "unknown flag '--cuont'; did you mean '--count'? (see --help)" ("=value" is not repeated;
// without a close candidate the hint is left out). A bare word gets
// "unexpected argument 'x' (see --help)".
POLLUX_API std::string unknown_flag_message(std::string_view arg, const std::vector<std::string>& candidates);

// For a parser called with each argument: -h/--help prints `help` to stdout (with a final
// newline) and returns 0; --version prints "<program> <version>" and returns 0; anything else
// returns -1 (go on parsing).
POLLUX_API int handle_standard_flag(std::string_view arg, std::string_view program, std::string_view help);

// The name of a signal that stops a program: "SIGINT", "SIGTERM", "SIGHUP"; "a signal" for any
// other. Async-signal-safe (returns a string literal).
POLLUX_API const char* signal_name(int sig) noexcept;

}  // namespace pollux::cli
