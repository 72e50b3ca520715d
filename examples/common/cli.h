// The examples' command-line conventions, the same as every Pollux program's: --help and -h print
// the program's help to stdout and exit 0; --version prints "<program> <version>"; an unknown
// flag is refused on stderr with a suggestion ("unknown flag '--cuont'; did you mean '--count'?
// (see --help)") and exit status 64 (EX_USAGE). The examples parse their flags by hand
// (pollux-feed) or with absl::flags (pollux-exchange); both use the one implementation the tools
// and benchmarks use (tools/common/cli.h, library pollux_cli: standard library only), under the
// names the examples have always called.
#pragma once

#include "tools/common/cli.h"

namespace pollux::examples {

using cli::flags_in;              // every "--name" a help text mentions: the candidates of a suggestion
using cli::handle_standard_flag;  // -h/--help and --version print and return 0; else -1
using cli::kUsageExit;            // 64, EX_USAGE
using cli::unknown_flag_message;  // "unknown flag '--cuont'; did you mean '--count'? (see --help)"
using cli::version;               // Pollux's project version

}  // namespace pollux::examples
