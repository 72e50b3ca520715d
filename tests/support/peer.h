// The parts of pollux-test-peer (peer_main.cc) that its roles share.
#pragma once

#include <cstdint>
#include <map>
#include <string>

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

// The "stat" role (peer_stat.cc).
int run_stat(const Args& a);

}  // namespace pollux::testing::peer
