#include "core/placement.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/process.h"
#include "core/shm_file.h"

namespace pollux::core {
namespace {

constexpr int kOpenFlags = O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY;

std::string safe_name(std::string_view n) {
  std::string out;
  for (char c : n.substr(0, 63)) {
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    out += ok ? c : '_';
  }
  return out.empty() ? "-" : out;
}

bool same_file(const std::string& path, const struct stat& st) {
  struct stat now;
  return ::lstat(path.c_str(), &now) == 0 && now.st_ino == st.st_ino && now.st_dev == st.st_dev;
}

std::string describe_holder(const std::string& dir, int cpu) {
  const ClaimHolder h = read_claim(dir, cpu);
  if (!h.known) return absl::StrFormat("cpu %d (holder unknown)", cpu);
  return absl::StrFormat("cpu %d (pid %d, %s)", cpu, h.pid, h.name);
}

}  // namespace

std::string claim_path(const std::string& dir, int cpu) { return absl::StrFormat("%s/pollux-cpu-%d.claim", dir, cpu); }

CpuClaim::CpuClaim(CpuClaim&& o) noexcept
    : fd_(o.fd_), cpu_(o.cpu_), dev_(o.dev_), ino_(o.ino_), path_(std::move(o.path_)) {
  o.fd_ = -1;
}

CpuClaim& CpuClaim::operator=(CpuClaim&& o) noexcept {
  if (this != &o) {
    release();
    fd_ = o.fd_;
    cpu_ = o.cpu_;
    dev_ = o.dev_;
    ino_ = o.ino_;
    path_ = std::move(o.path_);
    o.fd_ = -1;
  }
  return *this;
}

CpuClaim::~CpuClaim() { release(); }

void CpuClaim::release() noexcept {
  if (fd_ < 0) return;
  // Removed while still locked (an acquirer that locked this inode meanwhile notices that the
  // path names another file or none, and starts again); a file another user owns in a sticky
  // directory stays (unlink fails) and is simply reused.
  struct stat now;
  if (::lstat(path_.c_str(), &now) == 0 && static_cast<std::uint64_t>(now.st_ino) == ino_ &&
      static_cast<std::uint64_t>(now.st_dev) == dev_) {
    (void)::unlink(path_.c_str());
  }
  ::close(fd_);
  fd_ = -1;
}

absl::StatusOr<CpuClaim> CpuClaim::acquire(const std::string& dir, int cpu, std::string_view owner_name) {
  const std::string path = claim_path(dir, cpu);
  for (int attempt = 0; attempt < 16; ++attempt) {
    bool writable = true;
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | kOpenFlags, 0644);
    if (fd < 0 && (errno == EACCES || errno == EPERM)) {
      // Another user's claim file (fs.protected_regular refuses O_CREAT on it): a lock needs no
      // write access; the content then keeps naming its last writer.
      writable = false;
      fd = ::open(path.c_str(), O_RDONLY | kOpenFlags);
      if (fd < 0 && errno == ENOENT) continue;  // removed between the two opens
      if (fd < 0 && (errno == EACCES || errno == EPERM)) {
        return absl::UnavailableError(
            absl::StrFormat("%s belongs to another user and cannot be read: treated as claimed", path));
      }
    }
    if (fd < 0) {
      if (errno == ELOOP) {
        return absl::FailedPreconditionError(absl::StrFormat("%s is a symbolic link: not used as a CPU claim", path));
      }
      return open_error(errno, path, "CPU claim file");
    }
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      return absl::FailedPreconditionError(absl::StrFormat("%s is not a regular file: not used as a CPU claim", path));
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      ::close(fd);
      if (err == EWOULDBLOCK) {
        return absl::UnavailableError(absl::StrFormat("%s is claimed: %s", path, describe_holder(dir, cpu)));
      }
      return absl::InternalError(absl::StrFormat("flock(%s): %s", path, std::strerror(err)));
    }
    if (!same_file(path, st)) {  // its holder removed it while we waited for the lock
      ::close(fd);
      continue;
    }
    if (writable) {
      // Readable by everyone whatever the umask: other users' processes lock it too.
      if (st.st_uid == geteuid()) (void)::fchmod(fd, 0644);
      const std::string line = absl::StrFormat("pid %d start %u boot %u name %s\n", getpid(), self_start_time(),
                                               boot_id_hash(), safe_name(owner_name));
      if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, line.data(), line.size(), 0) != static_cast<ssize_t>(line.size())) {
        // The lock is what counts; the content is only for people.
      }
    }
    CpuClaim c;
    c.fd_ = fd;
    c.cpu_ = cpu;
    c.dev_ = static_cast<std::uint64_t>(st.st_dev);
    c.ino_ = static_cast<std::uint64_t>(st.st_ino);
    c.path_ = path;
    return c;
  }
  return absl::UnavailableError(absl::StrFormat("%s kept being replaced while claiming it", path));
}

ClaimHolder read_claim(const std::string& dir, int cpu) {
  ClaimHolder h;
  const int fd = ::open(claim_path(dir, cpu).c_str(), O_RDONLY | kOpenFlags);
  if (fd < 0) return h;
  struct stat st;
  char buf[160] = {};
  ssize_t n = -1;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) n = ::pread(fd, buf, sizeof buf - 1, 0);
  ::close(fd);
  if (n <= 0) return h;
  buf[n] = '\0';
  // Anyone may have written it: parsed with bounds, the name kept to safe characters.
  char name[64] = {};
  unsigned long long start = 0, boot = 0;
  int pid = 0;
  if (std::sscanf(buf, "pid %d start %llu boot %llu name %63s", &pid, &start, &boot, name) == 4 && pid > 0) {
    h.pid = pid;
    h.start = start;
    h.boot = boot;
    h.name = safe_name(name);
    h.known = true;
  }
  return h;
}

bool claim_held(const std::string& dir, int cpu) {
  const std::string path = claim_path(dir, cpu);
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  // /proc/locks lists every flock with its file as "MAJ:MIN:INODE": reading it disturbs nobody
  // (a probe lock of our own could make a process claiming at that moment skip this core).
  char key[64];
  std::snprintf(key, sizeof key, " %02x:%02x:%llu ", major(st.st_dev), minor(st.st_dev),
                static_cast<unsigned long long>(st.st_ino));
  if (FILE* locks = std::fopen("/proc/locks", "re")) {
    bool held = false;
    char line[256];
    while (!held && std::fgets(line, sizeof line, locks) != nullptr) {
      held = std::strstr(line, "FLOCK") != nullptr && std::strstr(line, key) != nullptr;
    }
    std::fclose(locks);
    return held;
  }
  // No /proc: try a shared lock (conflicts with the holder's exclusive one) and let it go.
  const int fd = ::open(path.c_str(), O_RDONLY | kOpenFlags);
  if (fd < 0) return false;
  const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);
  return held;
}

std::vector<int> claimed_cpus(const std::string& dir) {
  std::vector<int> cpus;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return cpus;
  while (dirent* e = ::readdir(d)) {
    int cpu = -1;
    int end = 0;
    // Exactly "pollux-cpu-<n>.claim" with n as claim_path() writes it.
    if (std::sscanf(e->d_name, "pollux-cpu-%d.claim%n", &cpu, &end) == 1 && cpu >= 0 && e->d_name[end] == '\0' &&
        claim_path(dir, cpu) == dir + "/" + e->d_name) {
      cpus.push_back(cpu);
    }
  }
  ::closedir(d);
  std::sort(cpus.begin(), cpus.end());
  return cpus;
}

std::vector<std::string> remove_unheld_claims(const std::string& dir) {
  std::vector<std::string> removed;
  for (int cpu : claimed_cpus(dir)) {
    const std::string path = claim_path(dir, cpu);
    const int fd = ::open(path.c_str(), O_RDONLY | kOpenFlags);
    if (fd < 0) continue;
    struct stat st;
    // Locked, then removed while locked: exactly what a releasing holder does (acquire() then
    // notices the path no longer names the file it locked).
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ::flock(fd, LOCK_EX | LOCK_NB) == 0 && same_file(path, st) &&
        ::unlink(path.c_str()) == 0) {
      removed.push_back(path);
    }
    ::close(fd);
  }
  return removed;
}

Placement place_pollers(const PlacementRequest& req) {
  Placement out;
  out.cpus.assign(req.pollers, -1);
  auto ours = [&](int cpu) {
    return std::any_of(out.claims.begin(), out.claims.end(), [&](const CpuClaim& c) { return c.cpu() == cpu; });
  };
  if (!req.explicit_cores.empty()) {
    for (std::uint32_t i = 0; i < req.pollers && i < req.explicit_cores.size(); ++i) {
      const int cpu = req.explicit_cores[i];
      out.cpus[i] = cpu;
      if (req.claims_dir.empty() || ours(cpu)) continue;
      auto c = CpuClaim::acquire(req.claims_dir, cpu, req.owner_name);
      if (c.ok()) {
        out.claims.push_back(std::move(*c));
      } else if (absl::IsUnavailable(c.status())) {
        out.warnings.push_back(absl::StrFormat(
            "poller %u: runtime.poller_cores puts it on cpu %d, which another poller also claims - %s: they share "
            "the core",
            i, cpu, describe_holder(req.claims_dir, cpu)));
      } else {
        out.warnings.push_back(absl::StrFormat("poller %u: cpu %d pinned as configured, but not claimed: %s", i, cpu,
                                               c.status().message()));
      }
    }
    return out;
  }
  for (std::uint32_t i = 0; i < req.pollers; ++i) {
    if (req.candidates.empty()) break;  // no topology: unpinned, as always
    std::vector<int> held;
    std::string unusable;
    for (int cpu : req.candidates) {
      if (ours(cpu)) continue;
      if (req.claims_dir.empty()) {
        out.cpus[i] = cpu;
        break;
      }
      auto c = CpuClaim::acquire(req.claims_dir, cpu, req.owner_name);
      if (c.ok()) {
        out.cpus[i] = cpu;
        out.claims.push_back(std::move(*c));
        break;
      }
      if (absl::IsUnavailable(c.status())) {
        held.push_back(cpu);
      } else if (unusable.empty()) {
        unusable = std::string(c.status().message());
      }
    }
    if (out.cpus[i] >= 0) continue;
    if (held.empty() && !unusable.empty()) {
      // Claims cannot be made at all (the directory is not writable...): place as before,
      // uncoordinated, and say so.
      out.cpus[i] = req.candidates[i % req.candidates.size()];
      out.warnings.push_back(
          absl::StrFormat("poller %u: pinned to cpu %d without a claim (%s): other processes may pick the same core", i,
                          out.cpus[i], unusable));
      continue;
    }
    std::vector<std::string> who;
    for (int cpu : held) who.push_back(describe_holder(req.claims_dir, cpu));
    std::vector<std::string> mine;
    for (const CpuClaim& c : out.claims) mine.push_back(absl::StrFormat("cpu %d", c.cpu()));
    out.warnings.push_back(absl::StrFormat(
        "poller %u runs unpinned: every candidate core is claimed - %s%s (set runtime.poller_cores to share a core "
        "deliberately, or run fewer pollers on this NUMA node)",
        i, who.empty() ? "none free" : absl::StrJoin(who, ", "),
        mine.empty() ? "" : absl::StrCat(", ", absl::StrJoin(mine, ", "), " by this context")));
  }
  return out;
}

}  // namespace pollux::core
