// Files in runtime.shm_dir written by other processes - the clock calibration
// (item 10) and the counters files (items 2 and 4, pollux-stat) - are not trusted blindly.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "core/clock.h"
#include "core/counters.h"

namespace pollux::core {
namespace {

// The calibration file as core/clock.cc writes it (128 bytes): a header, then the ClockPage
// every process maps, spelled out in plain integers.
struct CalibrationFile {
  std::uint32_t magic;
  std::uint32_t version;
  char boot_id[40];
  char reserved[16];
  std::uint32_t seq;
  std::uint32_t tsc;
  std::uint64_t base_tsc;
  std::int64_t base_ns;
  std::uint64_t mult;
  std::uint64_t rate;
  std::uint64_t ref_tsc;
  std::int64_t ref_ns;
  std::int64_t checked_ns;
};
static_assert(sizeof(CalibrationFile) == 128);
static_assert(sizeof(ClockPage) == 64);

bool invariant_tsc() {
  const char* env = std::getenv("POLLUX_CLOCK");
  if (env != nullptr && std::strcmp(env, "monotonic") == 0) return false;
  std::ifstream f("/proc/cpuinfo");
  std::string l;
  while (std::getline(f, l)) {
    if (l.rfind("flags", 0) == 0) return l.find(" constant_tsc") != l.npos && l.find(" nonstop_tsc") != l.npos;
  }
  return false;
}

class ClockFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!invariant_tsc()) GTEST_SKIP() << "no invariant TSC: the clock never reads a calibration file";
    // Death tests fork ("fast" style): each child calls Clock::init() for the first time, as
    // this process never does.
    std::string t = "/dev/shm/pollux-clocktest-XXXXXX";
    ASSERT_NE(mkdtemp(t.data()), nullptr);
    dir = t;
    path = dir + "/pollux-clock";
  }
  void TearDown() override {
    if (!dir.empty()) std::system(("rm -rf " + dir).c_str());
  }
  CalibrationFile read() const {
    CalibrationFile f{};
    std::ifstream(path, std::ios::binary).read(reinterpret_cast<char*>(&f), sizeof f);
    return f;
  }
  void write(const CalibrationFile& f) const {
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(&f), sizeof f);
  }
  // Runs `check` in a child process (a death test) that first starts the clock on `dir`; the
  // child exits with what `check` returns, which must be 0 (otherwise the number of the check
  // that failed).
  void expect_clock_child(const std::function<int()>& check) {
    EXPECT_EXIT(
        {
          Clock::init(dir);
          _exit(check());
        },
        ::testing::ExitedWithCode(0), "");
  }
  // A good calibration file in dir, made by a process of our own.
  void make_good_file() {
    expect_clock_child([&] { return Clock::using_tsc() ? 0 : 1; });
    ASSERT_EQ(::access(path.c_str(), F_OK), 0) << "no calibration written in " << dir;
  }
  std::string dir, path;
};

// Clock::now_ns() - CLOCK_MONOTONIC, from one clock read bracketed by two monotonic reads. A
// bracket wider than 20 us means this process was preempted between the reads (a test on a
// loaded 2-CPU CI host is, now and then, for a millisecond): that pair is taken again, so the
// error measured is the clock's, not the scheduler's (seen once in CI: a 200 us check failed).
std::int64_t clock_error_ns() {
  std::int64_t best = 0, best_width = std::numeric_limits<std::int64_t>::max();
  for (int i = 0; i < 1000 && best_width > 20'000; ++i) {
    const std::int64_t m1 = Clock::monotonic_ns();
    const std::int64_t c = Clock::now_ns();
    const std::int64_t m2 = Clock::monotonic_ns();
    if (m2 - m1 < best_width) {
      best_width = m2 - m1;
      best = c - (m1 + (m2 - m1) / 2);
    }
  }
  return best;
}

// In a fresh process: init from dir, then check the clock tracks CLOCK_MONOTONIC over 20 ms and
// describe() contains `want`. Exit codes say which check failed.
[[noreturn]] void clock_child(const std::string& dir, const std::string& want) {
  Clock::init(dir);
  const std::int64_t ea = clock_error_ns();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const std::int64_t eb = clock_error_ns();
  std::fprintf(stderr, "describe: %s, error %lld then %lld ns\n", Clock::describe().c_str(), static_cast<long long>(ea),
               static_cast<long long>(eb));
  if (std::llabs(ea) > 1'000'000 || std::llabs(eb) > 1'000'000) _exit(1);
  if (std::llabs(eb - ea) > 200'000) _exit(2);  // a rate 1% off
  _exit(Clock::describe().find(want) != std::string::npos ? 0 : 3);
}
#define EXPECT_CLOCK_GOOD(dir, want) EXPECT_EXIT(clock_child(dir, want), ::testing::ExitedWithCode(0), "")

TEST_F(ClockFileTest, CalibrationIsSharedThroughTheConfiguredDirectory) {
  make_good_file();
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 0022, 0u) << "nobody else may write it";
  EXPECT_CLOCK_GOOD(dir, "shared calibration " + path);
}

// A planted file with a wrong multiplier (here: twice the rate) produced spurious
// PublisherDied/NewSession events in every process that loaded it. A fresh 5 ms calibration
// now disagrees with it: it is not used as it is, and - being our own file - it is corrected
// in place, for every process that maps it.
TEST_F(ClockFileTest, WrongMultiplierIsRefusedAndCorrectedInPlace) {
  make_good_file();
  CalibrationFile f = read();
  const std::uint64_t good_mult = f.mult;
  f.mult *= 2;
  write(f);
  EXPECT_CLOCK_GOOD(dir, "corrected in place");
  const CalibrationFile now = read();
  EXPECT_NEAR(static_cast<double>(now.mult) / static_cast<double>(good_mult), 1.0, 1e-3);
  EXPECT_EQ(now.seq % 2, 0u);
  // An anchor far off CLOCK_MONOTONIC (the rate right) is refused as well.
  f = read();
  f.base_ns -= 5'000'000'000;  // 5 s
  write(f);
  EXPECT_CLOCK_GOOD(dir, "corrected in place");
  // A file of an older layout, or of another boot, is replaced.
  f = read();
  f.version = 1;
  write(f);
  EXPECT_CLOCK_GOOD(dir, "replaced a bad one");
  EXPECT_EQ(read().version, 2u);
}

// The CI failure of 2026-12-02: a calibration written a day earlier had drifted 1.02 ms from
// CLOCK_MONOTONIC (the TSC and the host's NTP-disciplined clock differ by ~12 ppm here), and the
// old rule (1 ms + 50 ppm of its age) accepted it as it was. A page more than 1 ms off is now
// stepped back onto CLOCK_MONOTONIC at start, in either direction.
TEST_F(ClockFileTest, ADriftedPageIsSteppedBackOntoMonotonic) {
  for (const std::int64_t off : {-2'000'000LL, +2'000'000LL, +60'000'000'000LL}) {
    SCOPED_TRACE(off);
    make_good_file();
    CalibrationFile f = read();
    f.base_ns += off;
    write(f);
    expect_clock_child([&] {
      const std::int64_t err = clock_error_ns();
      std::fprintf(stderr, "describe: %s, error %lld ns\n", Clock::describe().c_str(), static_cast<long long>(err));
      if (std::llabs(err) > 200'000) return 1;
      return Clock::describe().find("corrected in place") != std::string::npos ? 0 : 2;
    });
  }
}

// A page a little ahead (under the 1 ms the start-up check accepts) is not stepped back - a
// running process would see time go backwards - but slewed: its rate lowered until the lead is
// gone, then restored. Every process sees the same values all along.
TEST_F(ClockFileTest, ASmallLeadIsSlewedAwayWithoutSteppingBack) {
  make_good_file();
  CalibrationFile f = read();
  const std::uint64_t good_mult = f.mult;
  f.base_ns += 500'000;  // 0.5 ms ahead
  write(f);
  expect_clock_child([&] {
    if (Clock::describe().find("shared calibration") == std::string::npos) return 1;
    // Slewed by ~lead / 1 s: 500 ppm.
    const double slew = 1 - static_cast<double>(Clock::calibration().mult) / static_cast<double>(good_mult);
    std::fprintf(stderr, "slew %.6f\n", slew);
    if (slew < 3e-4 || slew > 7e-4) return 2;
    std::int64_t prev = Clock::now_ns();
    for (int i = 0; i < 100; ++i) {  // up to 5 s; ~1 s expected
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      const std::int64_t t = Clock::now_ns();
      if (t < prev) return 3;
      prev = t;
      Clock::maintain(t);
      const std::int64_t err = clock_error_ns();
      const double rate = static_cast<double>(Clock::calibration().mult) / static_cast<double>(good_mult);
      if (std::llabs(err) < 50'000 && std::fabs(rate - 1) < 1e-4) return 0;
    }
    return 4;
  });
}

// Maps the file a second time, as another process would, to rewrite the page under its
// sequence lock (or to leave that lock held, as a writer that died half-way).
struct SecondMapping {
  explicit SecondMapping(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDWR);
    if (fd < 0) return;
    void* m = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (m != MAP_FAILED) page = reinterpret_cast<ClockPage*>(static_cast<char*>(m) + 64);
  }
  ClockPage* page = nullptr;
};

TEST_F(ClockFileTest, EveryProcessSeesAReanchoringAtOnce) {
  make_good_file();
  expect_clock_child([&] {
    SecondMapping other(path);
    if (other.page == nullptr) return 1;
    // "Another process" moves the conversion 7 ms ahead.
    const std::uint32_t s = other.page->seq.load();
    other.page->seq.store(s + 1);
    other.page->base_ns.fetch_add(7'000'000);
    other.page->seq.store(s + 2);
    const std::int64_t err = clock_error_ns();
    std::fprintf(stderr, "after the other's write: %lld ns\n", static_cast<long long>(err));
    if (err < 6'000'000 || err > 8'000'000) return 2;
    // This one corrects it, and the other sees that.
    if (!Clock::reanchor()) return 3;
    if (std::llabs(clock_error_ns()) > 200'000) return 4;
    if (other.page->base_ns.load() != Clock::calibration().base_ns) return 5;
    return 0;
  });
}

// A writer that died with the sequence lock held: readers fall back to clock_gettime at once
// (bounded retries, no spin), and the page is taken over once the lock has been held a second.
TEST_F(ClockFileTest, AWriterThatDiedHalfWayNeitherHangsNorStopsTheClock) {
  make_good_file();
  expect_clock_child([&] {
    SecondMapping other(path);
    if (other.page == nullptr) return 1;
    other.page->seq.fetch_add(1);  // odd, forever
    for (int i = 0; i < 1000; ++i) {
      if (std::llabs(clock_error_ns()) > 200'000) return 2;
    }
    if (Clock::reanchor()) return 3;  // held a moment ago: maybe a live writer
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
    if (!Clock::reanchor()) return 4;
    if (other.page->seq.load() % 2 != 0) return 5;
    if (!Clock::using_tsc() || std::llabs(clock_error_ns()) > 200'000) return 6;
    return 0;
  });
}

// Another process truncates the file: the page turns to zeros (no SIGBUS), the clock falls back
// to clock_gettime, and the next check gives this process a conversion of its own.
TEST_F(ClockFileTest, ATruncatedPageFallsBackToClockGettime) {
  make_good_file();
  expect_clock_child([&] {
    if (!Clock::using_tsc()) return 1;
    if (::truncate(path.c_str(), 0) != 0) return 2;
    if (std::llabs(clock_error_ns()) > 200'000) return 3;
    if (Clock::using_tsc()) return 4;
    if (!Clock::reanchor() || !Clock::using_tsc()) return 5;
    if (std::llabs(clock_error_ns()) > 200'000) return 6;
    return 0;
  });
}

// Files of another user, files others may write and links are not trusted at all (and not
// ours to replace): this process calibrates itself and says why.
TEST_F(ClockFileTest, ForeignWritableOrLinkedFilesAreNotTrusted) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to chown a file to another uid";
  make_good_file();
  ASSERT_EQ(::chown(path.c_str(), 65534, 65534), 0);
  EXPECT_CLOCK_GOOD(dir, "owned by uid 65534");
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 65534u) << "another user's file is left alone";
  ASSERT_EQ(::chown(path.c_str(), 0, 0), 0);
  ASSERT_EQ(::chmod(path.c_str(), 0666), 0);
  EXPECT_CLOCK_GOOD(dir, "mode 0666 lets other users write it");
  ASSERT_EQ(::rename(path.c_str(), (path + ".real").c_str()), 0);
  ASSERT_EQ(::chmod((path + ".real").c_str(), 0644), 0);
  ASSERT_EQ(::symlink((path + ".real").c_str(), path.c_str()), 0);
  EXPECT_CLOCK_GOOD(dir, "calibrated privately");
}

// ---- counters files ---------------------------------------------------------------------------

// Truncating a process's counters file under it must not kill it with SIGBUS in
// Counter::add(): it counts on in private memory.
TEST(CountersFileTest, TruncatedUnderTheWriterDoesNotKillIt) {
  auto f = CountersFile::create(::testing::TempDir(), "trunc");
  ASSERT_TRUE(f.ok()) << f.status();
  Counter c = (*f)->allocate("pub stream 1 x", "messages", 1);
  c.add(3);
  ASSERT_EQ(::truncate((*f)->path().c_str(), 0), 0);
  for (int i = 0; i < 1000; ++i) c.add();
  EXPECT_EQ(c.get(), 1000u) << "the page was replaced by zero memory, then counted on";
  auto snap = read_counters_file((*f)->path());
  EXPECT_FALSE(snap.ok());
  // pollux-stat may meet a file being truncated while it reads: it copies, never maps.
}

// pollux-stat runs over every pollux-*.counters name in a shared directory: a link must not be
// followed, a FIFO must not block it.
TEST(CountersFileTest, ReaderRefusesLinksAndFifosWithoutBlocking) {
  auto f = CountersFile::create(::testing::TempDir(), "real");
  ASSERT_TRUE(f.ok()) << f.status();
  const std::string link = ::testing::TempDir() + "/pollux-link-1.counters";
  const std::string fifo = ::testing::TempDir() + "/pollux-fifo-1.counters";
  ::unlink(link.c_str());
  ::unlink(fifo.c_str());
  ASSERT_EQ(::symlink((*f)->path().c_str(), link.c_str()), 0);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto l = read_counters_file(link);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("is a symbolic link"), absl::string_view::npos) << l.status();
  auto p = read_counters_file(fifo);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("not a regular file"), absl::string_view::npos) << p.status();
  ::unlink(link.c_str());
  ::unlink(fifo.c_str());
}

}  // namespace
}  // namespace pollux::core
