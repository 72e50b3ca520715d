// The parts of pollux-test-peer (peer_main.cc) that its roles share.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "absl/status/statusor.h"

namespace pollux::testing::peer {

// "--key value" options ("--flag" alone: "1"); anything else on the command line is an error.
class Args {
 public:
  Args(int argc, char** argv, int from);
  bool has(const std::string& key) const { return values_.count(key) != 0; }
  std::string str(const std::string& key) const;  // "" when absent
  std::int64_t num(const std::string& key, std::int64_t otherwise) const;

 private:
  std::map<std::string, std::string> values_;
};

// Prints "error: WHAT" on stdout (where the tests read) and exits 2.
[[noreturn]] void fail(const std::string& what);

// The value, or fail() naming `what` and the status.
template <typename T>
T must(absl::StatusOr<T> v, const char* what) {
  if (!v.ok()) fail(std::string(what) + ": " + std::string(v.status().message()));
  return std::move(*v);
}

// The "stat" role (peer_stat.cc).
int run_stat(const Args& a);

}  // namespace pollux::testing::peer
