#include "common/absl_flags_cli.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "absl/flags/reflection.h"
#include "common/cli.h"

namespace pollux::examples {

std::string Dashed(std::string name) {
  for (char& c : name) c = c == '_' ? '-' : c;
  return name;
}

void UsageError(std::string_view program, std::string_view message) {
  std::fprintf(stderr, "%.*s: %.*s (see --help)\n", static_cast<int>(program.size()), program.data(),
               static_cast<int>(message.size()), message.data());
  std::exit(kUsageExit);
}

namespace {

std::string Shown(const AbslFlagsProgram& p, const char* name) { return p.dashed ? Dashed(name) : std::string(name); }

void PrintHelp(const AbslFlagsProgram& p) {
  std::fputs(p.usage.c_str(), stdout);
  for (const char* name : p.flags) {
    const absl::CommandLineFlag* f = absl::FindCommandLineFlag(name);
    if (f == nullptr) continue;
    const std::string shown = Shown(p, name);
    const int width = std::max(18, static_cast<int>(shown.size()) + 1);  // two spaces before the help
    std::printf("  --%-*s %s (default: %s)\n", width, shown.c_str(), f->Help().c_str(),
                f->DefaultValue().empty() ? "\"\"" : f->DefaultValue().c_str());
  }
  std::printf("  --%-18s print \"%s <version>\" and exit\n  %-20s this text\n", "version", p.name, "-h, --help");
}

// "unknown flag '-x'" for anything that starts with '-' and is not one of ours (short flags
// included), with a "did you mean" when one is close; "unexpected argument" for a bare word.
[[noreturn]] void RejectArgument(const AbslFlagsProgram& p, std::string_view arg) {
  std::vector<std::string> candidates{"--help", "--version"};
  for (const char* k : p.flags) candidates.push_back("--" + Shown(p, k));
  const std::string m = UnknownFlagMessage(arg, candidates);
  UsageError(p.name, m.substr(0, m.rfind(" (see --help)")));
}

}  // namespace

void ParseAbslFlags(int argc, char** argv, const AbslFlagsProgram& p) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "-h" || a == "--help" || a == "-help") {
      PrintHelp(p);
      std::exit(0);
    }
    if (a == "--version") {
      std::printf("%s %s\n", p.name, Version());
      std::exit(0);
    }
  }
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a.size() < 3 || a.substr(0, 2) != "--") RejectArgument(p, a);
    a.remove_prefix(2);
    std::string name(a.substr(0, a.find('=')));
    const bool has_value = a.find('=') != std::string_view::npos;
    for (char& c : name) c = c == '-' ? '_' : c;
    bool known = false;
    for (const char* k : p.flags) known = known || name == k;
    absl::CommandLineFlag* f = known ? absl::FindCommandLineFlag(name) : nullptr;
    if (f == nullptr) RejectArgument(p, argv[i]);
    std::string value;
    if (has_value) {
      value = std::string(a.substr(a.find('=') + 1));
    } else if (f->IsOfType<bool>()) {
      value = "true";
    } else {
      if (i + 1 >= argc) UsageError(p.name, "flag '--" + Shown(p, name.c_str()) + "' needs a value");
      value = argv[++i];
    }
    std::string err;
    if (!f->ParseFrom(value, &err)) {
      UsageError(p.name, "bad value '" + value + "' for --" + Shown(p, name.c_str()) + ": " + err);
    }
  }
}

}  // namespace pollux::examples
