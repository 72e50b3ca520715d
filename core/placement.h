// Poller placement that does not collide: processes on one host coordinate the automatic
// choice of poller cores (runtime.poller_cores = []) through claims in runtime.shm_dir.
//
// A claim on CPU n is an exclusive flock(2) on <dir>/pollux-cpu-<n>.claim, whose content names
// the holder ("pid P start S boot B name N", one line, for people and for the warnings). The
// kernel drops a flock when its holder exits, however it exits (kill -9 included), so a claim
// is never stale: a dead holder's file is simply locked again by the next process, which
// rewrites the content. A holder that exits cleanly removes the file while still holding the
// lock; an acquirer that locked a file which was removed meanwhile notices (the path no longer
// names the inode it locked) and starts again. Locks belong to open file descriptions, so two
// contexts of one process coordinate too. A forked child inherits its parent's claims (the
// descriptor is shared) until it execs (O_CLOEXEC).
//
// Automatic placement walks the candidate cores (the NIC's NUMA node, highest-numbered first:
// CPU 0 usually takes the OS's interrupts) and takes the first unclaimed one per poller. When
// every candidate is claimed, the poller runs unpinned (the scheduler spreads it) and a warning
// names the cores and their holders. Explicit runtime.poller_cores are never overridden: they
// are claimed where possible, and a core another process holds is warned about.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace pollux::core {

// Who holds (or last held) a claim, from the claim file's content.
struct ClaimHolder {
  int pid = 0;
  std::uint64_t start = 0;
  std::uint64_t boot = 0;
  std::string name;    // runtime.name of the holder (printable characters only)
  bool known = false;  // the content parsed
};

class CpuClaim {
 public:
  CpuClaim() = default;
  CpuClaim(CpuClaim&& o) noexcept;
  CpuClaim& operator=(CpuClaim&& o) noexcept;
  ~CpuClaim();  // releases (removes the file while still holding the lock, then closes)

  // Claims `cpu` in `dir` for this process (owner_name: runtime.name, written into the file).
  // Unavailable (with the holder in the message) when another open description holds it;
  // FailedPrecondition when the path is not a regular file we may lock (a link, a FIFO);
  // other errors as open(2) reports them.
  static absl::StatusOr<CpuClaim> acquire(const std::string& dir, int cpu, std::string_view owner_name);

  int cpu() const noexcept { return cpu_; }
  const std::string& path() const noexcept { return path_; }
  bool held() const noexcept { return fd_ >= 0; }

 private:
  void release() noexcept;
  int fd_ = -1;
  int cpu_ = -1;
  std::uint64_t dev_ = 0, ino_ = 0;
  std::string path_;
};

std::string claim_path(const std::string& dir, int cpu);
// The holder named in `dir`'s claim file for `cpu` (known = false when absent or unreadable).
ClaimHolder read_claim(const std::string& dir, int cpu);
// Whether some open description holds the claim right now (from /proc/locks: taking a probe
// lock could make a process claiming at that moment skip the core).
bool claim_held(const std::string& dir, int cpu);
// CPUs with a claim file in `dir` (held or not), ascending.
std::vector<int> claimed_cpus(const std::string& dir);
// Claim files in `dir` nobody holds (their holders exited without removing them): removed
// under the lock, as a releasing holder does. Returns the paths removed.
std::vector<std::string> remove_unheld_claims(const std::string& dir);

struct PlacementRequest {
  std::string claims_dir;           // "" = no coordination (every core is free)
  std::vector<int> candidates;      // OS CPUs in order of preference (automatic placement)
  std::vector<int> explicit_cores;  // runtime.poller_cores: non-empty = used as given
  std::uint32_t pollers = 0;
  std::string owner_name;  // runtime.name
};

struct Placement {
  std::vector<int> cpus;              // per poller: OS CPU, -1 = unpinned
  std::vector<CpuClaim> claims;       // held for the pollers' lifetime
  std::vector<std::string> warnings;  // for the error log and describe()
};

// Chooses (automatic) or checks (explicit) the pollers' cores and claims them.
Placement place_pollers(const PlacementRequest& req);

}  // namespace pollux::core
