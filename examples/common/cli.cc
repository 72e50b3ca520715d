#include "common/cli.h"

#include <algorithm>
#include <cstdio>

namespace pollux::examples {

const char* version() { return POLLUX_EXAMPLES_VERSION; }

std::vector<std::string> flags_in(std::string_view help) {
  std::vector<std::string> out;
  const auto word = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  };
  for (std::size_t i = help.find("--"); i != std::string_view::npos; i = help.find("--", i + 2)) {
    if (i > 0 && word(help[i - 1])) continue;  // inside a word ("a--b") or a rule ("----")
    std::size_t e = i + 2;
    while (e < help.size() && word(help[e])) ++e;
    const std::string f(help.substr(i, e - i));
    if (f.size() > 2 && f[2] != '-' && std::find(out.begin(), out.end(), f) == out.end()) out.push_back(f);
  }
  return out;
}

namespace {

// Edits between two flag names, '_' and '-' taken as the same character; a swap of two
// neighbours ("cuont") is one edit.
std::size_t edits(std::string_view a, std::string_view b) {
  const auto same = [](char x, char y) { return x == y || ((x == '_' || x == '-') && (y == '_' || y == '-')); };
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) {
    for (std::size_t j = 0; j <= b.size(); ++j) {
      if (i == 0 || j == 0) {
        d[i][j] = i + j;
        continue;
      }
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (same(a[i - 1], b[j - 1]) ? 0 : 1)});
      if (i > 1 && j > 1 && same(a[i - 1], b[j - 2]) && same(a[i - 2], b[j - 1])) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

std::string unknown_flag_message(std::string_view arg, const std::vector<std::string>& candidates) {
  if (arg.size() < 2 || arg[0] != '-') return "unexpected argument '" + std::string(arg) + "' (see --help)";
  const std::string_view flag = arg.substr(0, arg.find('='));
  std::string_view bare = flag;
  while (!bare.empty() && bare.front() == '-') bare.remove_prefix(1);
  std::string best;
  std::size_t best_edits = std::max<std::size_t>(2, bare.size() / 3) + 1;
  for (const std::string& c : candidates) {
    const std::string_view name = std::string_view(c).substr(c.find_first_not_of('-'));
    std::size_t e = edits(bare, name);
    if (bare.size() >= 3 && name.substr(0, bare.size()) == bare) e = std::min<std::size_t>(e, 1);  // "--cou"
    if (!bare.empty() && e < best_edits) {
      best_edits = e;
      best = c;
    }
  }
  std::string m = "unknown flag '" + std::string(flag) + "'";
  if (!best.empty() && best != flag) m += "; did you mean '" + best + "'?";
  return m + " (see --help)";
}

int handle_standard_flag(std::string_view arg, std::string_view program, std::string_view help) {
  if (arg == "-h" || arg == "--help") {
    std::fwrite(help.data(), 1, help.size(), stdout);
    if (!help.empty() && help.back() != '\n') std::fputc('\n', stdout);
    return 0;
  }
  if (arg == "--version") {
    std::printf("%.*s %s\n", static_cast<int>(program.size()), program.data(), version());
    return 0;
  }
  return -1;
}

}  // namespace pollux::examples
