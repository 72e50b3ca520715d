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

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/shm_file.h"

namespace pollux::core {
namespace {

constexpr char kCalibrationName[] = "pollux-clock";
constexpr std::uint32_t kCalibrationMagic = 0x504c434b;  // "PLCK"
constexpr std::uint32_t kCalibrationVersion = 1;
// A shared calibration is used only if a fresh 5 ms calibration agrees on the rate within this
// and its anchor is within 1 ms (+ 50 ppm of its age) of CLOCK_MONOTONIC now.
constexpr double kMaxRateError = 1e-3;
constexpr std::int64_t kMaxAnchorError_ns = 1'000'000;
constexpr double kMaxDrift = 50e-6;

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

// 50 ms gives a rate error around 1 ppm (tens of ns of sampling jitter / 50 ms); the 5 ms
// check calibration is good to ~1e-5, far inside kMaxRateError.
ClockCalibration calibrate(long duration_ns) {
  ClockCalibration c;
  std::uint64_t t0 = 0, t1 = 0;
  std::int64_t n0 = 0, n1 = 0;
  sample(&t0, &n0);
  timespec req{0, duration_ns};
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

// Does `c` (from the shared file) agree with this host's TSC right now?
std::string check_sane(const ClockCalibration& c) {
  const ClockCalibration fresh = calibrate(5'000'000);
  if (!fresh.tsc) return "";  // cannot tell
  const double rate = static_cast<double>(c.mult) / static_cast<double>(fresh.mult);
  if (rate < 1 - kMaxRateError || rate > 1 + kMaxRateError) {
    return absl::StrFormat("its rate (%.3f MHz) disagrees with a fresh calibration (%.3f MHz)",
                           1e3 * 4294967296.0 / static_cast<double>(c.mult),
                           1e3 * 4294967296.0 / static_cast<double>(fresh.mult));
  }
  std::uint64_t t;
  std::int64_t m;
  sample(&t, &m);
  if (t < c.base_tsc || m < c.base_ns) return "its anchor lies in the future";
  const std::int64_t converted =
      c.base_ns + static_cast<std::int64_t>((static_cast<unsigned __int128>(t - c.base_tsc) * c.mult) >> 32);
  const std::int64_t err = converted > m ? converted - m : m - converted;
  const double allowed = static_cast<double>(kMaxAnchorError_ns) + kMaxDrift * static_cast<double>(m - c.base_ns);
  if (static_cast<double>(err) > allowed) {
    return absl::StrFormat("it is %d ns off CLOCK_MONOTONIC (at most %.0f ns expected)", err, allowed);
  }
  return "";
}

enum class Load { kOk, kAbsent, kRefusedFile, kRefusedContents };

// Loads the shared calibration at `path` if it is one this process may trust: a regular file
// (no link) owned by this user or root that nobody else may write, of this boot, whose rate and
// anchor agree with the TSC now. `why` says why not.
Load load_shared(const std::string& path, const std::string& boot_id, ClockCalibration* out, std::string* why) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    if (errno == ENOENT) return Load::kAbsent;
    *why = std::strerror(errno);
    return Load::kRefusedFile;
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    *why = "not a regular file";
    return Load::kRefusedFile;
  }
  if (st.st_uid != geteuid() && st.st_uid != 0) {
    ::close(fd);
    *why = absl::StrFormat("owned by uid %u (only files of uid %u or root are trusted)", st.st_uid, geteuid());
    return Load::kRefusedFile;
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    ::close(fd);
    *why = absl::StrFormat("mode %04o lets other users write it", st.st_mode & 07777);
    return Load::kRefusedFile;
  }
  CalibrationFile f;
  const ssize_t n = ::read(fd, &f, sizeof f);
  ::close(fd);
  f.boot_id[sizeof f.boot_id - 1] = '\0';
  if (n != static_cast<ssize_t>(sizeof f) || f.magic != kCalibrationMagic || f.version != kCalibrationVersion ||
      boot_id != f.boot_id || !f.cal.tsc || f.cal.mult == 0) {
    *why = "not a calibration of this boot";
    return Load::kRefusedContents;
  }
  if (std::string e = check_sane(f.cal); !e.empty()) {
    *why = e;
    return Load::kRefusedContents;
  }
  *out = f.cal;
  return Load::kOk;
}

// Publishes our calibration at `path`: only where there is none (link semantics: the first
// process wins and every later one loads its file), or replacing a bad file of our own.
void store_shared(const std::string& path, const std::string& boot_id, const ClockCalibration& c, bool replace) {
  CalibrationFile f{};
  f.magic = kCalibrationMagic;
  f.version = kCalibrationVersion;
  std::snprintf(f.boot_id, sizeof f.boot_id, "%s", boot_id.c_str());
  f.cal = c;
  NewFile file;
  if (!file.create(path, 0644, FileAccess::kNoGroup, "clock calibration").ok()) return;  // processes calibrate alone
  if (::write(file.fd(), &f, sizeof f) != static_cast<ssize_t>(sizeof f)) return;      // full: same
  (void)(replace ? file.publish() : file.publish_exclusive());
}

std::once_flag g_once;
std::string g_source = "clock_gettime(CLOCK_MONOTONIC)";

}  // namespace

void Clock::init(std::string_view shm_dir) {
  std::call_once(g_once, [shm_dir] {
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
    if (shm_dir.empty()) {
      c = calibrate(50'000'000);
      if (!c.tsc) return;
      g_source = "tsc (calibrated, not shared: no runtime.shm_dir)";
      detail::g_clock = c;
      return;
    }
    const std::string path = std::string(shm_dir) + "/" + kCalibrationName;
    std::string why;
    const Load first = load_shared(path, boot_id, &c, &why);
    if (first == Load::kOk) {
      g_source = absl::StrFormat("tsc (shared calibration %s)", path);
    } else {
      c = calibrate(50'000'000);
      if (!c.tsc) return;
      // Absent: publish ours. Bad contents in a file we may trust to be ours: replace it. A file
      // we may not trust stays (it is not ours to remove) and we keep our own calibration.
      if (first != Load::kRefusedFile) store_shared(path, boot_id, c, first == Load::kRefusedContents);
      // Re-load: if another process won the race, use its calibration so all agree.
      ClockCalibration shared;
      std::string why2;
      if (first != Load::kRefusedFile && load_shared(path, boot_id, &shared, &why2) == Load::kOk) {
        c = shared;
        g_source = first == Load::kAbsent
                       ? absl::StrFormat("tsc (calibrated, shared via %s)", path)
                       : absl::StrFormat("tsc (calibrated, shared via %s, which replaced a bad one: %s)", path, why);
      } else {
        g_source = absl::StrFormat("tsc (calibrated privately: %s refused: %s)", path,
                                   first == Load::kRefusedFile ? why : why2);
      }
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
