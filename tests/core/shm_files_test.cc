// Issue #9: files in runtime.shm_dir written by other processes - the clock calibration
// (item 10) and the counters files (items 2 and 4, pollux-stat) - are not trusted blindly.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "core/clock.h"
#include "core/counters.h"

namespace pollux::core {
namespace {

// The calibration file as core/clock.cc writes it (80 bytes).
struct CalibrationFile {
  std::uint32_t magic;
  std::uint32_t version;
  char boot_id[40];
  ClockCalibration cal;
};
static_assert(sizeof(CalibrationFile) == 80);

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
  // A good calibration file in dir, made by a process of our own.
  void make_good_file() {
    EXPECT_EXIT(
        {
          Clock::init(dir);
          _exit(Clock::using_tsc() ? 0 : 1);
        },
        ::testing::ExitedWithCode(0), "");
    ASSERT_EQ(::access(path.c_str(), F_OK), 0) << "no calibration written in " << dir;
  }
  std::string dir, path;
};

// In a fresh process: init from dir, then check the clock tracks CLOCK_MONOTONIC over 20 ms and
// describe() contains `want`. Exit codes say which check failed.
[[noreturn]] void clock_child(const std::string& dir, const std::string& want) {
  Clock::init(dir);
  const std::int64_t a = Clock::now_ns();
  const std::int64_t ma = Clock::monotonic_ns();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const std::int64_t b = Clock::now_ns();
  const std::int64_t mb = Clock::monotonic_ns();
  std::fprintf(stderr, "describe: %s\n", Clock::describe().c_str());
  if (std::llabs(a - ma) > 1'000'000 || std::llabs(b - mb) > 1'000'000) _exit(1);
  if (std::llabs((b - a) - (mb - ma)) > 200'000) _exit(2);
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
// now disagrees with it: it is not used, and - being our own file - it is replaced.
TEST_F(ClockFileTest, WrongMultiplierIsRefusedAndReplaced) {
  make_good_file();
  CalibrationFile f = read();
  const std::uint64_t good_mult = f.cal.mult;
  f.cal.mult *= 2;
  write(f);
  EXPECT_CLOCK_GOOD(dir, "replaced a bad one");
  const CalibrationFile now = read();
  EXPECT_NEAR(static_cast<double>(now.cal.mult) / static_cast<double>(good_mult), 1.0, 1e-3);
  // An anchor far off CLOCK_MONOTONIC (the rate right) is refused as well.
  f = read();
  f.cal.base_ns -= 5'000'000'000;  // 5 s
  write(f);
  EXPECT_CLOCK_GOOD(dir, "replaced a bad one");
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

// Issue #9 item 4 (counters part): truncating a process's counters file killed it with SIGBUS
// in Counter::add(); it now counts on in private memory.
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
