#include "tools/doctor/host_fs.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace pollux::doctor {

HostFs::HostFs(std::string root) : root_(std::move(root)) {
  while (!root_.empty() && root_.back() == '/') root_.pop_back();
}

std::string HostFs::path(std::string_view abs) const { return root_ + std::string(abs); }

std::optional<std::string> HostFs::text(std::string_view abs) const {
  std::ifstream f(path(abs));
  if (!f) return std::nullopt;
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return std::nullopt;  // sysfs attributes that exist but refuse reads (speed of a down link)
  return ss.str();
}

std::optional<std::string> HostFs::line(std::string_view abs) const {
  std::ifstream f(path(abs));
  std::string l;
  if (!f || !std::getline(f, l)) return std::nullopt;
  return l;
}

std::optional<long long> HostFs::integer(std::string_view abs) const {
  const std::optional<std::string> l = line(abs);
  long long v = 0;
  if (!l || !absl::SimpleAtoi(absl::StripAsciiWhitespace(*l), &v)) return std::nullopt;
  return v;
}

bool HostFs::exists(std::string_view abs) const { return access(path(abs).c_str(), F_OK) == 0; }

bool HostFs::is_dir(std::string_view abs) const {
  struct stat st {};
  return stat(path(abs).c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::vector<std::string> HostFs::list(std::string_view abs_dir) const {
  std::vector<std::string> out;
  if (DIR* d = opendir(path(abs_dir).c_str())) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') out.emplace_back(e->d_name);
    }
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<std::string> HostFs::resolve(std::string_view abs) const {
  char buf[PATH_MAX];
  if (realpath(path(abs).c_str(), buf) == nullptr) return std::nullopt;
  std::string p = buf;
  if (root_.empty()) return p;
  char rbuf[PATH_MAX];
  if (realpath(root_.c_str(), rbuf) == nullptr) return std::nullopt;
  const std::string r = rbuf;
  if (p.compare(0, r.size(), r) != 0) return std::nullopt;  // a link out of the tree
  p.erase(0, r.size());
  return p.empty() ? "/" : p;
}

// (absl::string_view is not std::string_view in Debian's Abseil: convert at the boundary.)
std::optional<std::vector<int>> parse_cpu_list(std::string_view input) {
  std::vector<int> out;
  const absl::string_view text = absl::StripAsciiWhitespace(absl::string_view(input.data(), input.size()));
  if (text.empty()) return out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    const std::vector<absl::string_view> ends = absl::StrSplit(part, '-');
    int a = 0, b = 0;
    if (ends.size() == 1 && absl::SimpleAtoi(ends[0], &a)) {
      b = a;
    } else if (ends.size() != 2 || !absl::SimpleAtoi(ends[0], &a) || !absl::SimpleAtoi(ends[1], &b)) {
      return std::nullopt;
    }
    if (a < 0 || b < a || b - a > 65536) return std::nullopt;
    for (int c = a; c <= b; ++c) out.push_back(c);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string format_cpu_list(std::vector<int> cpus) {
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j == i ? absl::StrCat(cpus[i]) : absl::StrCat(cpus[i], "-", cpus[j]);
    i = j + 1;
  }
  return out;
}

std::string cmdline_value(std::string_view cmdline, std::string_view key) {
  std::string value;
  for (absl::string_view tok :
       absl::StrSplit(absl::string_view(cmdline.data(), cmdline.size()), absl::ByAnyChar(" \t\n"), absl::SkipEmpty())) {
    if (tok == "--") break;  // what follows belongs to init
    if (tok.size() > key.size() && std::string_view(tok.data(), key.size()) == key && tok[key.size()] == '=') {
      value = std::string(tok.substr(key.size() + 1));
    }
  }
  return value;
}

}  // namespace pollux::doctor
