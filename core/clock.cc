#include "core/clock.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <new>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/mapping_guard.h"
#include "core/shm_file.h"

namespace pollux::core {
namespace {

constexpr char kCalibrationName[] = "pollux-clock";
constexpr std::uint32_t kCalibrationMagic = 0x504c434b;  // "PLCK"
// 2: the conversion is a mapped, re-anchored ClockPage (1 was a write-once record).
constexpr std::uint32_t kCalibrationVersion = 2;
// A shared page is used only if a fresh 5 ms calibration agrees on the rate within this and
// the page's conversion is within 1 ms of CLOCK_MONOTONIC now.
constexpr double kMaxRateError = 1e-3;
constexpr std::int64_t kMaxAnchorError_ns = 1'000'000;
// maintain(): how often, how far a lead may be slewed rather than stepped, over how long, and
// how far the rate may move before the page takes the new one.
constexpr std::int64_t kCheckPeriod_ns = 1'000'000'000;
constexpr std::int64_t kMaxSlew_ns = 1'000'000;
constexpr long double kSlewHorizon_ns = 1e9L;
constexpr double kRateTolerance = 2e-6;
constexpr std::int64_t kMinRateBaseline_ns = 500'000'000;  // rate error ~0.1 ppm
// A writer that left seq odd this long is taken to be dead.
constexpr std::int64_t kStuckWriter_ns = 1'000'000'000;

struct CalibrationFile {
  std::uint32_t magic;
  std::uint32_t version;
  char boot_id[40];  // invalid after a reboot: the TSC restarts
  char reserved[16];
  ClockPage page;
};
static_assert(sizeof(CalibrationFile) == 128 && offsetof(CalibrationFile, page) == 64);

// A consistent read of a page.
struct Snapshot {
  std::uint32_t seq = 0;
  ClockCalibration c;
  std::uint64_t rate = 0;
  std::uint64_t ref_tsc = 0;
  std::int64_t ref_ns = 0;
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
      return line.find(" constant_tsc") != std::string::npos && line.find(" nonstop_tsc") != std::string::npos;
    }
  }
#endif
  return false;
}

// One (tsc, monotonic) pair with the tightest bracket among a few tries, so the anchor error
// is a few tens of ns rather than a preemption.
void sample(std::uint64_t* tsc, std::int64_t* ns) noexcept {
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

// The conversion of `t` (also before the anchor). Unsigned arithmetic: a page another process
// scribbled on gives a wrong number, never undefined behaviour.
std::int64_t convert(const ClockCalibration& c, std::uint64_t t) noexcept {
  const std::uint64_t base = static_cast<std::uint64_t>(c.base_ns);
  if (t >= c.base_tsc) {
    return static_cast<std::int64_t>(
        base + static_cast<std::uint64_t>((static_cast<unsigned __int128>(t - c.base_tsc) * c.mult) >> 32));
  }
  return static_cast<std::int64_t>(
      base - static_cast<std::uint64_t>((static_cast<unsigned __int128>(c.base_tsc - t) * c.mult) >> 32));
}

// Sequence-lock read of the whole page (pairing as in Clock::now_ns()). False while a writer
// holds it.
bool read_page(const ClockPage& p, Snapshot* s) noexcept {
  for (int i = 0; i < 64; ++i) {
    s->seq = p.seq.load(std::memory_order_acquire);
    s->c.tsc = p.tsc.load(std::memory_order_relaxed) != 0;
    s->c.base_tsc = p.base_tsc.load(std::memory_order_relaxed);
    s->c.base_ns = p.base_ns.load(std::memory_order_relaxed);
    s->c.mult = p.mult.load(std::memory_order_relaxed);
    s->rate = p.rate.load(std::memory_order_relaxed);
    s->ref_tsc = p.ref_tsc.load(std::memory_order_relaxed);
    s->ref_ns = p.ref_ns.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if ((s->seq & 1) == 0 && p.seq.load(std::memory_order_relaxed) == s->seq) return true;
  }
  return false;
}

// Writes a page whose seq this writer moved from `from` (even, or a dead writer's odd value) to
// the odd `held`. Writers exclude each other by that compare-exchange; readers retry while seq
// is odd or has moved.
void write_page(ClockPage& p, std::uint32_t held, const ClockCalibration& c, std::uint64_t rate, std::uint64_t ref_tsc,
                std::int64_t ref_ns) noexcept {
  // Release fence: pairs with the readers' acquire fence - a reader that loads any field stored
  // below then sees seq changed on its second load.
  std::atomic_thread_fence(std::memory_order_release);
  p.tsc.store(c.tsc ? 1 : 0, std::memory_order_relaxed);
  p.base_tsc.store(c.base_tsc, std::memory_order_relaxed);
  p.base_ns.store(c.base_ns, std::memory_order_relaxed);
  p.mult.store(c.mult, std::memory_order_relaxed);
  p.rate.store(rate, std::memory_order_relaxed);
  p.ref_tsc.store(ref_tsc, std::memory_order_relaxed);
  p.ref_ns.store(ref_ns, std::memory_order_relaxed);
  // Release: pairs with the readers' acquire load of seq. A compare-exchange, not a store: if a
  // later writer took the page over from us (we stalled for kStuckWriter_ns), seq is its own.
  std::uint32_t expected = held;
  (void)p.seq.compare_exchange_strong(expected, held + 1, std::memory_order_release, std::memory_order_relaxed);
}

bool try_lock(ClockPage& p, std::uint32_t from, std::uint32_t* held) noexcept {
  *held = (from & 1) == 0 ? from + 1 : from + 2;
  return p.seq.compare_exchange_strong(from, *held, std::memory_order_relaxed, std::memory_order_relaxed);
}

// What this process measured itself at init(): the rate every shared value is checked against.
std::uint64_t g_own_mult = 0;
ClockPage* g_writable = nullptr;  // the page maintain() may correct (null: read-only or off)
std::atomic<std::uint32_t> g_stuck_seq{0};
std::atomic<std::int64_t> g_stuck_since_ns{0};

// A step to `rate` anchored now.
ClockCalibration anchored_now(std::uint64_t rate, std::uint64_t* t, std::int64_t* m) noexcept {
  sample(t, m);
  ClockCalibration n;
  n.tsc = true;
  n.base_tsc = *t;
  n.base_ns = *m;
  n.mult = rate;
  return n;
}

// Compares the page with CLOCK_MONOTONIC and rewrites it when it strays (see clock.h), or
// unconditionally to `fresh`. False when another writer holds the page.
bool update_page(ClockPage& p, const ClockCalibration* fresh) noexcept {
  Snapshot s;
  std::uint64_t t = 0;
  std::int64_t m = 0;
  if (!read_page(p, &s)) {
    // A writer holds it: for a moment, or forever if it died half-way.
    const std::uint32_t odd = p.seq.load(std::memory_order_relaxed);
    const std::int64_t now = Clock::monotonic_ns();
    if (g_stuck_seq.exchange(odd, std::memory_order_relaxed) != odd) {
      g_stuck_since_ns.store(now, std::memory_order_relaxed);
      return false;
    }
    if (now - g_stuck_since_ns.load(std::memory_order_relaxed) < kStuckWriter_ns) return false;
    std::uint32_t held;
    if ((odd & 1) == 0 || !try_lock(p, odd, &held)) return false;
    const ClockCalibration n = anchored_now(fresh != nullptr ? fresh->mult : g_own_mult, &t, &m);
    write_page(p, held, n, n.mult, t, m);
    return true;
  }
  ClockCalibration n;
  std::uint64_t rate = 0;
  if (fresh != nullptr) {
    n = anchored_now(fresh->mult, &t, &m);
    rate = fresh->mult;
  } else {
    sample(&t, &m);
    const std::int64_t err = convert(s.c, t) - m;
    // The true rate: measured since the last re-anchoring when that is long enough ago, else
    // the page's unslewed rate. Never the page's mult, which may carry a slew.
    const double own = static_cast<double>(g_own_mult);
    const auto sane = [own](std::uint64_t r) { return std::fabs(static_cast<double>(r) / own - 1) <= kMaxRateError; };
    rate = sane(s.rate) ? s.rate : g_own_mult;
    if (s.ref_ns != 0 && m - s.ref_ns >= kMinRateBaseline_ns && t > s.ref_tsc) {
      const auto measured =
          static_cast<std::uint64_t>((static_cast<unsigned __int128>(m - s.ref_ns) << 32) / (t - s.ref_tsc));
      if (sane(measured)) rate = measured;
    }
    const bool page_sane = s.c.tsc && sane(s.c.mult);
    const double rate_moved = std::fabs(static_cast<double>(rate) / static_cast<double>(s.c.mult) - 1);
    if (page_sane && std::llabs(err) <= kClockTolerance_ns && rate_moved <= kRateTolerance) return true;
    n.tsc = true;
    n.base_tsc = t;
    if (!page_sane || err < -kClockTolerance_ns || err > kMaxSlew_ns) {
      n.base_ns = m;  // step (forward for a lag)
      n.mult = rate;
    } else {
      n.base_ns = m + err;  // continuous: no step back
      n.mult = err > kClockTolerance_ns
                   ? static_cast<std::uint64_t>(static_cast<long double>(rate) *
                                                (1.0L - static_cast<long double>(err) / kSlewHorizon_ns))
                   : rate;
    }
  }
  std::uint32_t held;
  if (!try_lock(p, s.seq, &held)) return false;
  write_page(p, held, n, rate, t, m);
  return true;
}

// Does `c` (from a shared page) agree with this host's TSC right now?
std::string check_sane(const ClockCalibration& c, const ClockCalibration& fresh) {
  if (!c.tsc || c.mult == 0) return "it holds no conversion";
  const double rate = static_cast<double>(c.mult) / static_cast<double>(fresh.mult);
  if (rate < 1 - kMaxRateError || rate > 1 + kMaxRateError) {
    return absl::StrFormat("its rate (%.3f MHz) disagrees with a fresh calibration (%.3f MHz)",
                           1e3 * 4294967296.0 / static_cast<double>(c.mult),
                           1e3 * 4294967296.0 / static_cast<double>(fresh.mult));
  }
  std::uint64_t t;
  std::int64_t m;
  sample(&t, &m);
  const std::int64_t err = convert(c, t) - m;
  if (std::llabs(err) > kMaxAnchorError_ns) {
    return absl::StrFormat("it is %d ns off CLOCK_MONOTONIC (at most %d ns accepted)", err, kMaxAnchorError_ns);
  }
  return "";
}

enum class Load { kOk, kAbsent, kRefusedFile, kRefusedContents };

struct Mapped {
  ClockPage* page = nullptr;
  bool writable = false;
};

// Maps the shared page at `path` if it is one this process may trust: a regular file (no link)
// owned by this user or root that nobody else may write, of this boot. Writable only when it is
// this user's. `why` says why not.
Load map_shared(const std::string& path, const std::string& boot_id, Mapped* out, std::string* why) {
  constexpr int kFlags = O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY;
  int fd = ::open(path.c_str(), O_RDWR | kFlags);
  if (fd < 0 && (errno == EACCES || errno == EROFS || errno == EPERM)) fd = ::open(path.c_str(), O_RDONLY | kFlags);
  if (fd < 0) {
    if (errno == ENOENT) return Load::kAbsent;
    *why = std::strerror(errno);
    return Load::kRefusedFile;
  }
  struct stat st;
  const auto refuse = [&](Load l, std::string w) {
    ::close(fd);
    *why = std::move(w);
    return l;
  };
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return refuse(Load::kRefusedFile, "not a regular file");
  if (st.st_uid != geteuid() && st.st_uid != 0) {
    return refuse(Load::kRefusedFile,
                  absl::StrFormat("owned by uid %u (only files of uid %u or root are trusted)", st.st_uid, geteuid()));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return refuse(Load::kRefusedFile, absl::StrFormat("mode %04o lets other users write it", st.st_mode & 07777));
  }
  CalibrationFile f;
  if (st.st_size < static_cast<off_t>(sizeof f) || ::pread(fd, &f, sizeof f, 0) != static_cast<ssize_t>(sizeof f)) {
    return refuse(Load::kRefusedContents, "not a calibration of this boot");
  }
  f.boot_id[sizeof f.boot_id - 1] = '\0';
  if (f.magic != kCalibrationMagic || f.version != kCalibrationVersion || boot_id != f.boot_id) {
    return refuse(Load::kRefusedContents, "not a calibration of this boot");
  }
  const bool writable = st.st_uid == geteuid() && (::fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDWR;
  const std::size_t len = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  void* mem = ::mmap(nullptr, len, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (mem == MAP_FAILED) {
    *why = absl::StrCat("mmap: ", std::strerror(errno));
    return Load::kRefusedFile;
  }
  // Truncated by another process: the page turns to zeros (tsc 0: clock_gettime), no SIGBUS.
  (void)guard_mapping(mem, len);
  out->page = reinterpret_cast<ClockPage*>(static_cast<std::byte*>(mem) + offsetof(CalibrationFile, page));
  out->writable = writable;
  return Load::kOk;
}

// Publishes a page holding `c` at `path`: only where there is none (link semantics: the first
// process wins and every later one maps its file), or replacing a bad file of our own.
void store_shared(const std::string& path, const std::string& boot_id, const ClockCalibration& c, bool replace) {
  CalibrationFile f{};
  f.magic = kCalibrationMagic;
  f.version = kCalibrationVersion;
  std::snprintf(f.boot_id, sizeof f.boot_id, "%s", boot_id.c_str());
  f.page.seq.store(1, std::memory_order_relaxed);  // not yet visible to anyone: seq 1 -> 2
  write_page(f.page, 1, c, c.mult, c.base_tsc, c.base_ns);
  NewFile file;
  if (!file.create(path, 0644, FileAccess::kNoGroup, "clock calibration").ok()) return;  // processes calibrate alone
  if (::write(file.fd(), &f, sizeof f) != static_cast<ssize_t>(sizeof f)) return;        // full: same
  (void)(replace ? file.publish() : file.publish_exclusive());
}

std::once_flag g_once;
std::string g_source = "clock_gettime(CLOCK_MONOTONIC)";

// This process alone: its own page, which maintain() keeps on CLOCK_MONOTONIC as well. Shared
// anonymous memory, so processes forked after init() (pollux-latency's ping and pong) keep one
// conversion, however it is re-anchored.
void use_private(const ClockCalibration& c) {
  ClockPage* p = &detail::g_private_page;
  void* mem = ::mmap(nullptr, sizeof(ClockPage), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem != MAP_FAILED) p = new (mem) ClockPage;
  // Threads may read the static page already (the default, tsc 0): a locked write like any.
  std::uint32_t held;
  if (try_lock(*p, p->seq.load(std::memory_order_relaxed), &held))
    write_page(*p, held, c, c.mult, c.base_tsc, c.base_ns);
  g_writable = p;
  detail::g_page.store(p, std::memory_order_release);
}

void init_once(std::string_view shm_dir) {
  const char* env = std::getenv("POLLUX_CLOCK");
  if (env != nullptr && std::strcmp(env, "monotonic") == 0) {
    g_source = "clock_gettime(CLOCK_MONOTONIC) (POLLUX_CLOCK=monotonic)";
    return;
  }
  if (!tsc_is_invariant()) {
    g_source = "clock_gettime(CLOCK_MONOTONIC) (no invariant TSC)";
    return;
  }
  const ClockCalibration check = calibrate(5'000'000);
  if (!check.tsc) return;
  g_own_mult = check.mult;
  ClockCalibration own;  // 50 ms, made when needed
  const auto own_calibration = [&own]() -> const ClockCalibration& {
    if (!own.tsc) own = calibrate(50'000'000);
    return own;
  };
  if (shm_dir.empty()) {
    if (!own_calibration().tsc) return;
    g_own_mult = own.mult;
    use_private(own);
    g_source = "tsc (calibrated, not shared: no runtime.shm_dir)";
    return;
  }
  const std::string boot_id = read_boot_id();
  const std::string path = std::string(shm_dir) + "/" + kCalibrationName;
  std::string replaced;  // why a bad file was replaced
  bool created = false;
  for (int attempt = 0; attempt < 3; ++attempt) {
    Mapped mp;
    std::string why;
    const Load r = map_shared(path, boot_id, &mp, &why);
    if (r == Load::kOk) {
      Snapshot s;
      bool readable = read_page(*mp.page, &s);
      if (!readable) {  // a writer holds it: give it a millisecond (a rewrite takes ~100 ns)
        timespec ms{0, 1'000'000};
        nanosleep(&ms, nullptr);
        readable = read_page(*mp.page, &s);
      }
      std::string bad = readable ? check_sane(s.c, check) : "a writer left it half-written";
      if (bad.empty()) {
        if (mp.writable) (void)update_page(*mp.page, nullptr);  // a lead or lag under 1 ms
        g_source = created ? replaced.empty()
                                 ? absl::StrFormat("tsc (calibrated, shared via %s)", path)
                                 : absl::StrFormat("tsc (calibrated, shared via %s, which replaced a bad one: %s)",
                                                   path, replaced)
                           : absl::StrFormat("tsc (shared calibration %s)", path);
      } else if (mp.writable) {
        if (!own_calibration().tsc) return;
        // Ours to correct, for every process that maps it. A writer that held seq over the
        // millisecond above is taken to be dead (update_page() takes over on its second try).
        for (int i = 0; i < 3 && !update_page(*mp.page, &own); ++i) {
          g_stuck_since_ns.store(Clock::monotonic_ns() - kStuckWriter_ns, std::memory_order_relaxed);
        }
        g_source = absl::StrFormat("tsc (shared calibration %s, corrected in place: %s)", path, bad);
      } else {
        if (!own_calibration().tsc) return;
        use_private(own);
        g_source = absl::StrFormat("tsc (calibrated privately: %s refused: %s)", path, bad);
        return;
      }
      g_writable = mp.writable ? mp.page : nullptr;
      detail::g_page.store(mp.page, std::memory_order_release);
      if (mp.writable) mp.page->checked_ns.store(Clock::monotonic_ns(), std::memory_order_relaxed);
      return;
    }
    if (r == Load::kRefusedFile || attempt == 2) {
      if (!own_calibration().tsc) return;
      use_private(own);
      g_source = absl::StrFormat("tsc (calibrated privately: %s refused: %s)", path, why);
      return;
    }
    // Absent: publish ours. Bad contents in a file we may trust to be ours: replace it. Then map
    // what is there - ours, or the file of a process that won the race, so all agree.
    if (!own_calibration().tsc) return;
    if (r == Load::kRefusedContents) replaced = why;
    store_shared(path, boot_id, own, r == Load::kRefusedContents);
    created = true;
  }
}

}  // namespace

void detail::maintain_slow(std::int64_t now) noexcept {
  std::int64_t next = g_next_check_ns.load(std::memory_order_relaxed);
  if (now < next || !g_next_check_ns.compare_exchange_strong(next, now + kCheckPeriod_ns, std::memory_order_relaxed)) {
    return;  // not due, or another thread of this process checks
  }
  ClockPage* p = g_writable;
  if (p == nullptr) return;
  // Once a second per host: the first process due claims the check.
  const std::int64_t m = Clock::monotonic_ns();
  std::int64_t last = p->checked_ns.load(std::memory_order_relaxed);
  if (m >= last && m - last < kCheckPeriod_ns) return;
  if (!p->checked_ns.compare_exchange_strong(last, m, std::memory_order_relaxed)) return;
  (void)update_page(*p, nullptr);
}

bool Clock::reanchor() noexcept {
  ClockPage* p = g_writable;
  if (p == nullptr) return false;
  p->checked_ns.store(monotonic_ns(), std::memory_order_relaxed);
  return update_page(*p, nullptr);
}

void Clock::init(std::string_view shm_dir) {
  std::call_once(g_once, [shm_dir] {
    init_once(shm_dir);
    // init() checked (and corrected) the page a moment ago.
    detail::g_next_check_ns.store(monotonic_ns() + kCheckPeriod_ns, std::memory_order_relaxed);
  });
}

ClockCalibration Clock::calibration() noexcept {
  Snapshot s;
  if (!read_page(*detail::g_page.load(std::memory_order_acquire), &s) || !s.c.tsc) return {};
  return s.c;
}

double Clock::tsc_hz() noexcept {
  const ClockCalibration c = calibration();
  if (!c.tsc || c.mult == 0) return 0;
  return 1e9 * 4294967296.0 / static_cast<double>(c.mult);
}

std::string Clock::describe() {
  if (!using_tsc()) return g_source;
  return absl::StrFormat("%s, %.1f MHz", g_source, tsc_hz() / 1e6);
}

}  // namespace pollux::core
