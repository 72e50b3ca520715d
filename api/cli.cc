#include "pollux/cli.h"

#include <algorithm>
#include <csignal>
#include <cstdio>

namespace pollux::cli {

const char* version() { return POLLUX_PROJECT_VERSION; }

std::vector<std::string> flags_in(std::string_view help) {
  std::vector<std::string> out;
  auto name_char = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  };
  for (std::size_t i = help.find("--"); i != std::string_view::npos; i = help.find("--", i)) {
    // Not the middle of a word ("a--b") nor a run of dashes (a "----" rule).
    if (i > 0 && (name_char(help[i - 1]))) {
      i += 2;
      continue;
    }
    std::size_t e = i + 2;
    while (e < help.size() && name_char(help[e])) ++e;
    std::string f(help.substr(i, e - i));
    while (!f.empty() && (f.back() == '-' || f.back() == '_')) f.pop_back();  // "--benchmark_..."
    if (f.size() > 2 && f[2] != '-' && std::find(out.begin(), out.end(), f) == out.end()) out.push_back(f);
    i = e;
  }
  return out;
}

namespace {

// Optimal string alignment distance: insertions, deletions, substitutions and transpositions of
// two neighbours ("cuont" -> "count" is 1) cost 1 each.
std::size_t distance(std::string_view a, std::string_view b) {
  const std::size_t n = a.size(), m = b.size();
  std::vector<std::size_t> d((n + 1) * (m + 1));
  auto at = [&](std::size_t i, std::size_t j) -> std::size_t& { return d[i * (m + 1) + j]; };
  for (std::size_t i = 0; i <= n; ++i) at(i, 0) = i;
  for (std::size_t j = 0; j <= m; ++j) at(0, j) = j;
  for (std::size_t i = 1; i <= n; ++i) {
    for (std::size_t j = 1; j <= m; ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      at(i, j) = std::min({at(i - 1, j) + 1, at(i, j - 1) + 1, at(i - 1, j - 1) + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        at(i, j) = std::min(at(i, j), at(i - 2, j - 2) + 1);
    }
  }
  return at(n, m);
}

std::string_view strip(std::string_view f) {
  while (!f.empty() && f.front() == '-') f.remove_prefix(1);
  return f;
}

}  // namespace

std::string closest(std::string_view flag, const std::vector<std::string>& candidates) {
  const std::string_view want = strip(flag);
  if (want.empty()) return "";
  // '_' and '-' are one mistake apart at most; compare with them unified.
  auto unify = [](std::string_view s) {
    std::string u(s);
    std::replace(u.begin(), u.end(), '_', '-');
    return u;
  };
  const std::string w = unify(want);
  const std::size_t limit = std::max<std::size_t>(2, w.size() / 3);
  std::string best;
  std::size_t best_d = limit + 1;
  for (const std::string& c : candidates) {
    const std::string u = unify(strip(c));
    std::size_t d = distance(w, u);
    // A unique-looking abbreviation ("--cou" for "--count") is as good as a typo.
    if (w.size() >= 3 && u.rfind(w, 0) == 0) d = std::min<std::size_t>(d, 1);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

std::string unknown_flag_message(std::string_view arg, const std::vector<std::string>& candidates) {
  if (arg.size() < 2 || arg[0] != '-') return "unexpected argument '" + std::string(arg) + "' (see --help)";
  std::string_view flag = arg.substr(0, arg.find('='));
  std::string m = "unknown flag '" + std::string(flag) + "'";
  if (const std::string c = closest(flag, candidates); !c.empty() && c != flag) m += "; did you mean '" + c + "'?";
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

const char* signal_name(int sig) noexcept {
  switch (sig) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
  }
  return "a signal";
}

}  // namespace pollux::cli
