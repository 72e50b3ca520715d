#include "common/absl_flags_cli.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "absl/flags/reflection.h"
#include "pollux/cli.h"

namespace pollux::examples {

std::string dashed(std::string name) {
  for (char& c : name) c = c == '_' ? '-' : c;
  return name;
}

void usage_error(std::string_view program, std::string_view message) {
  std::fprintf(stderr, "%.*s: %.*s (see --help)\n", static_cast<int>(program.size()), program.data(),
               static_cast<int>(message.size()), message.data());
  std::exit(cli::kUsageExit);
}

namespace {

std::string shown_name(const AbslFlagsProgram& p, const char* name) {
  return p.dashed ? dashed(name) : std::string(name);
}

void print_help(const AbslFlagsProgram& p) {
  std::fputs(p.usage.c_str(), stdout);
  for (const char* name : p.flags) {
    const absl::CommandLineFlag* f = absl::FindCommandLineFlag(name);
    if (f == nullptr) continue;
    const std::string shown = shown_name(p, name);
    const int width = std::max(18, static_cast<int>(shown.size()) + 1);  // two spaces before the help
    std::printf("  --%-*s %s (default: %s)\n", width, shown.c_str(), f->Help().c_str(),
                f->DefaultValue().empty() ? "\"\"" : f->DefaultValue().c_str());
  }
  std::printf("  --%-18s print \"%s <version>\" and exit\n  %-20s this text\n", "version", p.name, "-h, --help");
}

// "unknown flag '-x'" for anything that starts with '-' and is not one of ours (short flags
// included), with a "did you mean" when one is close; "unexpected argument" for a bare word.
[[noreturn]] void reject_argument(const AbslFlagsProgram& p, std::string_view arg) {
  std::vector<std::string> candidates{"--help", "--version"};
  for (const char* k : p.flags) candidates.push_back("--" + shown_name(p, k));
  const std::string m = cli::unknown_flag_message(arg, candidates);
  usage_error(p.name, m.substr(0, m.rfind(" (see --help)")));
}

}  // namespace

void parse_absl_flags(int argc, char** argv, const AbslFlagsProgram& p) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "-h" || a == "--help" || a == "-help") {
      print_help(p);
      std::exit(0);
    }
    if (a == "--version") {
      std::printf("%s %s\n", p.name, cli::version());
      std::exit(0);
    }
  }
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a.size() < 3 || a.substr(0, 2) != "--") reject_argument(p, a);
    a.remove_prefix(2);
    std::string name(a.substr(0, a.find('=')));
    const bool has_value = a.find('=') != std::string_view::npos;
    for (char& c : name) c = c == '-' ? '_' : c;
    bool known = false;
    for (const char* k : p.flags) known = known || name == k;
    absl::CommandLineFlag* f = known ? absl::FindCommandLineFlag(name) : nullptr;
    if (f == nullptr) reject_argument(p, argv[i]);
    std::string value;
    if (has_value) {
      value = std::string(a.substr(a.find('=') + 1));
    } else if (f->IsOfType<bool>()) {
      value = "true";
    } else {
      if (i + 1 >= argc) usage_error(p.name, "flag '--" + shown_name(p, name.c_str()) + "' needs a value");
      value = argv[++i];
    }
    std::string err;
    if (!f->ParseFrom(value, &err)) {
      usage_error(p.name, "bad value '" + value + "' for --" + shown_name(p, name.c_str()) + ": " + err);
    }
  }
}

}  // namespace pollux::examples
