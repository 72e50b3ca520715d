// What the network-namespace tests (tests/udp/netns.sh) need from the host, checked once per
// suite: a test suite that cannot have its namespaces is skipped with the reason.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

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

// The reason given when netns.sh (or a link added after it) could not set the namespaces up.
inline constexpr const char* kNetnsSetupFailed =
    "could not create namespaces/veth/bridge (kernel without veth or bridge support?)";

}  // namespace pollux::testing
