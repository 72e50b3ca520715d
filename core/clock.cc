#include "core/clock.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

#include "absl/strings/str_format.h"

namespace pollux::core {
namespace {

constexpr char kCalibrationPath[] = "/dev/shm/pollux-clock";
constexpr std::uint32_t kCalibrationMagic = 0x504c434b;  // "PLCK"
constexpr std::uint32_t kCalibrationVersion = 1;

struct CalibrationFile {
  std::uint32_t magic;
  std::uint32_t version;
  char boot_id[40];  // invalid after a reboot: the TSC restarts
  ClockCalibration cal;
};

std::string read_boot_id() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string s;
  std::getline(f, s);
  return s;
}

bool tsc_is_invariant() {
#if defined(__x86_64__)
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("flags", 0) == 0) {
      return line.find(" constant_tsc") != std::string::npos &&
             line.find(" nonstop_tsc") != std::string::npos;
    }
  }
#endif
  return false;
}

// One (tsc, monotonic) pair with the tightest bracket among a few tries, so the anchor error
// is a few tens of ns rather than a preemption.
void sample(std::uint64_t* tsc, std::int64_t* ns) {
  std::uint64_t best = ~0ull;
  *tsc = 0;
  *ns = 0;
  for (int i = 0; i < 32; ++i) {
    const std::uint64_t t0 = Clock::ticks();
    const std::int64_t m = Clock::monotonic_ns();
    const std::uint64_t t1 = Clock::ticks();
    if (t1 - t0 < best) {
      best = t1 - t0;
      *tsc = t0 + (t1 - t0) / 2;
      *ns = m;
    }
  }
}

ClockCalibration calibrate() {
  ClockCalibration c;
  std::uint64_t t0 = 0, t1 = 0;
  std::int64_t n0 = 0, n1 = 0;
  sample(&t0, &n0);
  // 50 ms gives a rate error well under 1 ppm-ish of the sampling jitter (tens of ns / 50 ms).
  timespec req{0, 50'000'000};
  nanosleep(&req, nullptr);
  sample(&t1, &n1);
  if (t1 <= t0 || n1 <= n0) return c;
  const long double ns_per_tick = static_cast<long double>(n1 - n0) / static_cast<long double>(t1 - t0);
  c.mult = static_cast<std::uint64_t>(ns_per_tick * 4294967296.0L);
  c.base_tsc = t1;
  c.base_ns = n1;
  c.tsc = c.mult != 0;
  return c;
}

bool load_shared(const std::string& boot_id, ClockCalibration* out) {
  int fd = ::open(kCalibrationPath, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  CalibrationFile f;
  const ssize_t n = ::read(fd, &f, sizeof f);
  ::close(fd);
  if (n != static_cast<ssize_t>(sizeof f) || f.magic != kCalibrationMagic ||
      f.version != kCalibrationVersion || boot_id != f.boot_id || !f.cal.tsc || f.cal.mult == 0) {
    return false;
  }
  *out = f.cal;
  return true;
}

void store_shared(const std::string& boot_id, const ClockCalibration& c) {
  CalibrationFile f{};
  f.magic = kCalibrationMagic;
  f.version = kCalibrationVersion;
  std::snprintf(f.boot_id, sizeof f.boot_id, "%s", boot_id.c_str());
  f.cal = c;
  const std::string tmp = absl::StrFormat("%s.%d", kCalibrationPath, getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;  // no /dev/shm: every process calibrates itself (documented)
  const bool ok = ::write(fd, &f, sizeof f) == static_cast<ssize_t>(sizeof f);
  ::close(fd);
  // link() publishes the complete file atomically and fails with EEXIST if another process
  // published first; the caller then re-loads whichever calibration won, so all agree.
  if (ok) (void)::link(tmp.c_str(), kCalibrationPath);
  ::unlink(tmp.c_str());
}

std::once_flag g_once;
std::string g_source = "clock_gettime(CLOCK_MONOTONIC)";

}  // namespace

void Clock::init() {
  std::call_once(g_once, [] {
    const char* env = std::getenv("POLLUX_CLOCK");
    if (env != nullptr && std::strcmp(env, "monotonic") == 0) {
      g_source = "clock_gettime(CLOCK_MONOTONIC) (POLLUX_CLOCK=monotonic)";
      return;
    }
    if (!tsc_is_invariant()) {
      g_source = "clock_gettime(CLOCK_MONOTONIC) (no invariant TSC)";
      return;
    }
    const std::string boot_id = read_boot_id();
    ClockCalibration c;
    if (load_shared(boot_id, &c)) {
      g_source = absl::StrFormat("tsc (shared calibration %s)", kCalibrationPath);
    } else {
      c = calibrate();
      if (!c.tsc) return;
      store_shared(boot_id, c);
      // Re-load: if another process won the race, use its calibration so all agree.
      ClockCalibration shared;
      if (load_shared(boot_id, &shared)) c = shared;
      g_source = absl::StrFormat("tsc (calibrated, shared via %s)", kCalibrationPath);
    }
    detail::g_clock = c;
  });
}

double Clock::tsc_hz() noexcept {
  if (!detail::g_clock.tsc) return 0;
  return 1e9 * 4294967296.0 / static_cast<double>(detail::g_clock.mult);
}

std::string Clock::describe() {
  if (!using_tsc()) return g_source;
  return absl::StrFormat("%s, %.1f MHz", g_source, tsc_hz() / 1e6);
}

}  // namespace pollux::core
