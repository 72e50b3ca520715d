// pollux-config: validates a Pollux configuration file and prints the effective configuration
// (every key with its value and help text). With no file, prints the defaults.
//
//   pollux-config [FILE]      exit 0 = valid; 1 = invalid (the error names file:line: key)
#include <cstdio>
#include <string>
#include <string_view>

#include "core/config.h"
#include "tools/common/cli.h"

namespace {

constexpr char kHelp[] = R"(usage: pollux-config [FILE]

Validates a Pollux configuration file (TOML) and prints the effective configuration: every key
with its value and its help text, sizes with their binary unit ("16MiB"), parseable again as a
configuration. An error names the file, the line and the key. Without FILE, prints the defaults.

  FILE          the configuration to check (default: none, the built-in defaults)
  --version     print "pollux-config <version>" and exit
  -h, --help    this text

Exit status: 0 valid, 1 invalid (the message names file:line: key), 64 bad command line.
)";

}  // namespace

int main(int argc, char** argv) {
  if (const int rc = pollux::cli::handle_standard_flags(argc, argv, "pollux-config", kHelp); rc >= 0) return rc;
  std::string file;
  bool positional_only = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (!positional_only && a == "--") {
      positional_only = true;
      continue;
    }
    if (!positional_only && a.size() > 1 && a[0] == '-') return pollux::cli::unknown_flag("pollux-config", a, kHelp);
    if (!file.empty()) {
      return pollux::cli::usage_error("pollux-config", "one FILE at most, got \"" + std::string(a) + "\" too (see --help)");
    }
    file = a;
  }
  auto cfg = !file.empty() ? pollux::core::load_config_file(file) : pollux::core::parse_config("", "<defaults>");
  if (!cfg.ok()) {
    std::fprintf(stderr, "%s\n", std::string(cfg.status().message()).c_str());
    return 1;
  }
  std::fputs(cfg->to_toml().c_str(), stdout);
  return 0;
}
