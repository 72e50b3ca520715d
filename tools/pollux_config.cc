// pollux-config: validates a Pollux configuration file and prints the effective configuration
// (every key with its value and help text). With no file, prints the defaults.
//
//   pollux-config [FILE]      exit 0 = valid; 1 = invalid (the error names file:line: key)
#include <cstdio>
#include <string>

#include "core/config.h"

int main(int argc, char** argv) {
  if (argc > 2 || (argc == 2 && std::string(argv[1]).rfind("-", 0) == 0)) {
    std::fprintf(stderr, "usage: %s [FILE]\n", argv[0]);
    return 64;
  }
  auto cfg = argc == 2 ? pollux::core::load_config_file(argv[1]) : pollux::core::parse_config("", "<defaults>");
  if (!cfg.ok()) {
    std::fprintf(stderr, "%s\n", std::string(cfg.status().message()).c_str());
    return 1;
  }
  std::fputs(cfg->to_toml().c_str(), stdout);
  return 0;
}
