// What the network-namespace tests (tests/udp/netns.sh) need from the host, checked once per
// suite: a test suite that cannot have its namespaces is skipped with the reason.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace pollux::testing {

// Runs `cmd` through the shell with its output discarded; its exit status, -1 when it did not exit.
inline int shell_status(const std::string& cmd) {
  const int rc = std::system((cmd + " >/dev/null 2>&1").c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// Why namespaces cannot be made on this host ("" when they can): not root, no `ip netns` (tried
// with the command `ip`), or no nft.
inline std::string netns_unavailable(const std::string& ip) {
  if (geteuid() != 0) return "needs root to create network namespaces (CI runs as root)";
  if (shell_status(ip + " netns list") != 0) return "`ip netns` is unavailable (install iproute2)";
  if (shell_status("command -v nft") != 0) return "nft is unavailable (install nftables)";
  return "";
}

// Sets up the namespaces named `prefix`... with netns.sh (`netns`: the command that runs it): takes
// down what a previous run left, brings them up with `up_args`, then runs `more` commands in
// order (each must succeed). On a failure takes them down again and returns why; "" when up.
inline std::string netns_up(const std::string& netns, const std::string& prefix, const std::string& up_args,
                            const std::vector<std::string>& more = {}) {
  shell_status(netns + " down " + prefix);
  bool up = shell_status(netns + " up " + prefix + " " + up_args) == 0;
  for (const std::string& cmd : more) up = up && shell_status(cmd) == 0;
  if (up) return "";
  shell_status(netns + " down " + prefix);
  return "could not create namespaces/veth/bridge (kernel without veth or bridge support?)";
}

}  // namespace pollux::testing
