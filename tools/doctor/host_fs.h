// pollux-doctor's view of /sys and /proc: every path is read under a root ("/" normally; a
// fabricated tree in tests, `--root DIR`), so each check can be fed a host it does not run on.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pollux::doctor {

class HostFs {
 public:
  explicit HostFs(std::string root = "/");

  bool real() const noexcept { return root_.empty(); }  // reading the running host itself
  const std::string& root() const noexcept { return root_; }
  // `abs` (an absolute path such as "/proc/cmdline") under the root.
  std::string path(std::string_view abs) const;

  // The file's first line without its newline; nullopt when it cannot be read.
  std::optional<std::string> line(std::string_view abs) const;
  // The whole file; nullopt when it cannot be read.
  std::optional<std::string> text(std::string_view abs) const;
  std::optional<long long> integer(std::string_view abs) const;
  bool exists(std::string_view abs) const;
  bool is_dir(std::string_view abs) const;
  // Entries of a directory (no dot files), in name order; empty when it cannot be read.
  std::vector<std::string> list(std::string_view abs_dir) const;
  // The path `abs` resolves to (symlinks followed), as an absolute path inside the root.
  std::optional<std::string> resolve(std::string_view abs) const;

 private:
  std::string root_;  // "" for "/", else without a trailing slash
};

// Linux CPU lists ("0-3,8,10-11"; "" is the empty list). nullopt on malformed text.
std::optional<std::vector<int>> parse_cpu_list(std::string_view text);
std::string format_cpu_list(std::vector<int> cpus);
// Values of "key=value" kernel command-line parameters (the last one wins), "" when absent.
std::string cmdline_value(std::string_view cmdline, std::string_view key);

}  // namespace pollux::doctor
