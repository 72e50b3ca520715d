#include "tools/common/cli.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace pollux::cli {

int usage_error(std::string_view program, std::string_view message) {
  std::fprintf(stderr, "%.*s: %.*s\n", static_cast<int>(program.size()), program.data(),
               static_cast<int>(message.size()), message.data());
  return kUsageExit;
}

int unknown_flag(std::string_view program, std::string_view arg, std::string_view help) {
  std::vector<std::string> known = flags_in(help);
  known.push_back("--help");
  known.push_back("--version");
  return usage_error(program, unknown_flag_message(arg, known));
}

int handle_standard_flags(int argc, char** argv, std::string_view program, std::string_view help) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) break;
    if (const int rc = handle_standard_flag(argv[i], program, help); rc >= 0) return rc;
  }
  return -1;
}

double scaled_number(const std::string& flag, const std::string& s, Fail fail, bool lower_m_is_mega) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || errno != 0 || end == s.c_str()) fail(flag + ": not a number: \"" + s + "\"");
  const std::string suffix(end);
  double mult = 1;
  if (suffix == "k" || suffix == "K") {
    mult = 1e3;
  } else if (suffix == "M" || (lower_m_is_mega && suffix == "m")) {
    mult = 1e6;
  } else if (!suffix.empty()) {
    fail(flag + ": unexpected \"" + suffix + "\" in \"" + s + "\"");
  }
  if (!std::isfinite(v) || v < 0) fail(flag + ": out of range: \"" + s + "\"");
  return v * mult;
}

// ---- FlagReader ---------------------------------------------------------------------------------

bool FlagReader::next() {
  if (++i_ >= argc_) return false;
  flag_ = argv_[i_];
  value_.clear();
  has_value_ = false;
  if (const auto eq = flag_.find('='); flag_.rfind("--", 0) == 0 && eq != std::string::npos) {
    value_ = flag_.substr(eq + 1);
    flag_.resize(eq);
    has_value_ = true;
  }
  return true;
}

std::string FlagReader::value() {
  if (has_value_) return value_;
  if (i_ + 1 >= argc_) fail(flag_ + " needs a value");
  return argv_[++i_];
}

void FlagReader::no_value() const {
  if (has_value_) fail(flag_ + " takes no value");
}

void FlagReader::fail(const std::string& message) const {
  fail_(message);
  std::exit(kUsageExit);  // fail_ should not have returned
}

// ---- Parser -------------------------------------------------------------------------------------

void Parser::parse(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(help().c_str(), stdout);
      std::exit(0);
    }
    if (a == "--version") {
      std::printf("%s %s\n", program_.c_str(), version());
      std::exit(0);
    }
  }
  // "unknown flag '--cuont'; did you mean '--count'? (see --help)"
  auto unknown = [this](const std::string& a) {
    std::vector<std::string> known{"--help", "--version"};
    for (const Opt& x : opts_) known.push_back(x.flag);
    if (forward_ != nullptr) known.push_back(forward_prefix_);
    const std::string m = unknown_flag_message(a, known);
    fail(m.substr(0, m.size() - std::strlen(" (see --help)")));  // fail() adds it
  };
  std::size_t next_positional = 0;
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (forward_ != nullptr && a.rfind(forward_prefix_, 0) == 0) {
      forward_->push_back(a);
      continue;
    }
    if (a.rfind("--", 0) != 0) {
      // A positional is a bare number: "-x" (or "-count") is a flag nobody has, never a value.
      if (a.size() > 1 && a[0] == '-') unknown(a);
      if (next_positional < positionals_.size() && i - first == static_cast<int>(next_positional)) {
        positionals_[next_positional++].set(a);
        continue;
      }
      fail("unexpected argument \"" + a + "\"");
    }
    std::string value;
    bool inline_value = false;
    if (const std::size_t eq = a.find('='); eq != std::string::npos) {
      value = a.substr(eq + 1);
      a.resize(eq);
      inline_value = true;
    }
    const Opt* o = nullptr;
    for (const Opt& x : opts_) {
      if (x.flag == a) o = &x;
    }
    if (o == nullptr) unknown(a);
    if (!o->takes_value) {
      if (inline_value) fail(a + " takes no value");
      o->set("");
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= argc) fail(a + " needs a value");
      value = argv[++i];
    }
    o->set(value);
  }
}

void Parser::fail(const std::string& why) const {
  std::fprintf(stderr, "%s: %s (see --help)\n", program_.c_str(), why.c_str());
  std::exit(kUsageExit);
}

std::string Parser::help() const {
  std::string h = about_ + "\n\nUsage: " + program_;
  for (const Opt& p : positionals_) h += " [" + p.flag + "]";
  h += " [flags]\n\n";
  auto entry = [&h](const std::string& left, const std::string& text, const std::string& def) {
    std::string l = "  " + left;
    if (l.size() < 26) {
      l.resize(26, ' ');
    } else {
      l += "\n" + std::string(26, ' ');
    }
    std::string body = text;
    if (!def.empty()) body += " (default " + def + ")";
    // Word-wrapped to 100 columns (a '\n' in the help counts as a space).
    std::string line;
    for (std::size_t b = 0; b <= body.size();) {
      std::size_t e = body.find_first_of(" \n", b);
      if (e == std::string::npos) e = body.size();
      const std::string word = body.substr(b, e - b);
      if (!line.empty() && line.size() + 1 + word.size() > 100 - 26) {
        h += l + line + "\n";
        l = std::string(26, ' ');
        line.clear();
      }
      if (!line.empty() && !word.empty()) line += ' ';
      line += word;
      b = e + 1;
    }
    if (!line.empty()) h += l + line + "\n";
  };
  for (const Opt& p : positionals_) entry(p.flag, p.help + " (older positional form)", p.def);
  for (const Opt& o : opts_) entry(o.flag + (o.meta.empty() ? "" : " " + o.meta), o.help, o.def);
  if (forward_ != nullptr) entry(forward_prefix_ + "...", forward_help_, "");
  entry("--version", "print \"" + program_ + " <version>\" and exit", "");
  entry("-h, --help", "this text", "");
  if (!epilog_.empty()) h += "\n" + epilog_ + (epilog_.back() == '\n' ? "" : "\n");
  return h;
}

std::uint64_t Parser::parse_uint(const std::string& flag, const std::string& s, std::uint64_t min,
                                 std::uint64_t max) const {
  char* end = nullptr;
  errno = 0;
  const unsigned long long x = std::strtoull(s.c_str(), &end, 10);
  if (s.empty() || s[0] < '0' || s[0] > '9' || errno != 0 || end != s.c_str() + s.size()) {
    fail(flag + ": not a whole number: \"" + s + "\"");
  }
  if (x < min || x > max) {
    fail(flag + ": " + s + " is outside [" + std::to_string(min) + ", " +
         (max == UINT64_MAX ? std::string("...") : std::to_string(max)) + "]");
  }
  return x;
}

std::string Parser::join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) {
    if (!s.empty()) s += ',';
    s += x;
  }
  return s;
}

}  // namespace pollux::cli
