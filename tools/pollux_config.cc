// pollux-config: validates a Pollux configuration file and prints the effective configuration
// (every key with its value and help text). With no file, prints the defaults.
//
//   pollux-config [--check-host] [FILE]
//       exit 0 = valid; 1 = invalid (the error names file:line: key), or with --check-host a
//       value this host cannot satisfy
//
// The file is validated on its own: the same answer on every host. What depends on the host it
// runs on (today udp.interface: does this host have that interface?) is then checked against
// this host, and reported as a warning, because a configuration is often checked on another
// host than the one it is for (a build or CI machine, an operator's workstation); with
// --check-host, run on the host that will use the file, it is an error.
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include <toml++/toml.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/config.h"
#include "tools/common/cli.h"
#include "transport/udp/udp_socket.h"

namespace {

constexpr char kHelp[] = R"(usage: pollux-config [--check-host] [FILE]

Validates a Pollux configuration file (TOML) and prints the effective configuration: every key
with its value and its help text, sizes with their binary unit ("16MiB"), parseable again as a
configuration. An error names the file, the line and the key. Without FILE, prints the defaults.

Then checks what depends on the host against this one: udp.interface must name an IPv4
interface of this host (or hold one of its addresses), as every program using the file will
require when it opens a UDP stream. A mismatch is a warning on stderr (the file may be meant for
another host); --check-host makes it an error.

  FILE          the configuration to check (default: none, the built-in defaults)
  --check-host  the file is for this host: a value this host cannot satisfy is an error (exit 1)
                when the configuration's transport uses it
  --version     print "pollux-config <version>" and exit
  -h, --help    this text

Exit status: 0 valid (warnings allowed), 1 invalid (the message names file:line: key) or, with
--check-host, not usable on this host, 64 bad command line.
)";

struct HostProblem {
  std::string message;  // "x.toml:7: udp.interface: no IPv4 interface named ..."
  bool used = false;    // the configuration's transport uses the key
};

// The line of `key` ("udp.interface") in the configuration's text, or 0 when the file does not
// set it (the text parsed before, so this parse succeeds).
int line_of(const std::string& text, const std::string& source, std::string_view key) {
  try {
    const toml::table root = toml::parse(text, source);
    const toml::node* n = root.at_path(key).node();
    return n != nullptr ? static_cast<int>(n->source().begin.line) : 0;
  } catch (const toml::parse_error&) {
    return 0;
  }
}

// "<source>: <key>: <what>" from the transport becomes "<source>:<line>: <key>: <what>" when
// the file sets the key.
std::string with_line(const pollux::core::Config& cfg, int line, std::string_view key, std::string msg) {
  const std::string prefix = absl::StrCat(cfg.source, ": ", std::string(key), ": ");
  if (line > 0 && msg.rfind(prefix, 0) == 0) {
    msg = absl::StrCat(cfg.source, ":", line, ": ", std::string(key), ": ", msg.substr(prefix.size()));
  }
  return msg;
}

// The values this host must provide, checked by the function the UDP transport itself calls
// when it opens a stream (so the verdict is the programs' own).
std::vector<HostProblem> host_problems(const pollux::core::Config& cfg, const std::string& text) {
  std::vector<HostProblem> out;
  const bool udp = cfg.transport == pollux::core::TransportKind::kUdp;
  const int line = line_of(text, cfg.source, "udp.interface");
  if (udp || line > 0) {
    auto ch = pollux::transport::udp::resolve_channel(cfg, nullptr);
    if (!ch.ok() && absl::IsNotFound(ch.status())) {
      HostProblem p{with_line(cfg, line, "udp.interface", std::string(ch.status().message())), udp};
      if (!udp) absl::StrAppend(&p.message, "; used when transport.kind = \"udp\"");
      out.push_back(std::move(p));
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (const int rc = pollux::cli::handle_standard_flags(argc, argv, "pollux-config", kHelp); rc >= 0) return rc;
  std::string file;
  bool positional_only = false, check_host = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (!positional_only && a == "--") {
      positional_only = true;
      continue;
    }
    if (!positional_only && a == "--check-host") {
      check_host = true;
      continue;
    }
    if (!positional_only && a.size() > 1 && a[0] == '-') return pollux::cli::unknown_flag("pollux-config", a, kHelp);
    if (!file.empty()) {
      return pollux::cli::usage_error("pollux-config",
                                      "one FILE at most, got \"" + std::string(a) + "\" too (see --help)");
    }
    file = a;
  }
  std::string text;  // the file's text: empty for the defaults
  if (!file.empty()) {
    absl::StatusOr<std::string> t = pollux::core::read_config_file(file);
    if (!t.ok()) {
      std::fprintf(stderr, "%s\n", std::string(t.status().message()).c_str());
      return 1;
    }
    text = std::move(*t);
  }
  auto cfg = pollux::core::parse_config(text, file.empty() ? "<defaults>" : file);
  if (!cfg.ok()) {
    std::fprintf(stderr, "%s\n", std::string(cfg.status().message()).c_str());
    return 1;
  }
  bool unusable = false;
  for (const HostProblem& p : host_problems(*cfg, text)) {
    if (check_host && p.used) {
      std::fprintf(stderr, "%s\n", p.message.c_str());
      unusable = true;
    } else if (p.used) {
      std::fprintf(stderr,
                   "pollux-config: warning: %s (the file is valid; on this host every program using it fails to "
                   "open a UDP stream%s)\n",
                   p.message.c_str(), check_host ? "" : "; --check-host makes this an error");
    } else {
      std::fprintf(stderr, "pollux-config: warning: %s\n", p.message.c_str());
    }
  }
  if (unusable) return 1;
  std::fputs(cfg->to_toml().c_str(), stdout);
  return 0;
}
