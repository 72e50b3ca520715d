// pollux-feed under hostile conditions: an input that is not a regular file,
// SIGTERM in the middle of a paced replay or while waiting for subscribers, and an input file
// truncated while it is replayed; also a configuration that is not a regular file or is far
// too big, and a symbol full of control characters. Each run must end within a bounded time
// (the harness kills it otherwise and the test fails), by itself and without a signal, with a
// clear message, and leave no shared-memory segment, counters file or subscriber process behind.
#include <errno.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "itch/encoder.h"
#include "itch/generator.h"
#include "tests/feed/feed_process.h"
#include "tests/itch/test_util.h"
#include "tests/support/shm_dir.h"

namespace pollux::feed {
namespace {

using feedtest::FeedProcess;
using ::testing::HasSubstr;

class TempDir {
 public:
  explicit TempDir(const std::string& parent = "/tmp") {
    std::string tmpl = parent + "/pollux-feed-robust-XXXXXX";
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    if (!::testing::Test::HasFailure()) (void)!system(("rm -rf " + path_).c_str());
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::string UniqueName() {
  static int n = 0;
  return "robust-" + std::to_string(getpid()) + "-" + std::to_string(n++);
}

// Shared-memory files (segments and counters, counters on) in `shm_dir`; two streams, two
// subscriber processes, progress lines every 50 ms so a test can see the replay running.
std::string Config(const std::string& shm_dir, const std::string& feed_extra) {
  return "[runtime]\nname = \"" + UniqueName() + "\"\nshm_dir = \"" + shm_dir +
         "\"\nthreading = \"inline\"\nidle = \"yield\"\ncounters = true\n\n"
         "[shm]\nlog_size = \"1MiB\"\nflow_control = \"backpressure\"\n\n"
         "[feed]\nstreams = 2\nsubscribers = 2\nbatch_bytes = 2000\nprogress_ms = 50\n" +
         feed_extra;
}

void WriteFile(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// A progress line with a publisher count above zero: the replay is under way.
bool Publishing(const std::string& out) {
  for (std::size_t at = out.find(" pub "); at != std::string::npos; at = out.find(" pub ", at + 1)) {
    if (at + 5 < out.size() && out[at + 5] >= '1' && out[at + 5] <= '9') return true;
  }
  return false;
}

// The subscriber processes a run reported ("subscriber 1 (pid 4711)") no longer exist.
void ExpectSubscribersGone(const std::string& out) {
  int seen = 0;
  for (std::size_t at = out.find("subscriber "); at != std::string::npos; at = out.find("subscriber ", at + 1)) {
    std::size_t i = at + 11;
    while (i < out.size() && std::isdigit(static_cast<unsigned char>(out[i]))) ++i;
    if (i == at + 11 || out.compare(i, 6, " (pid ") != 0) continue;
    const pid_t pid = std::atoi(out.c_str() + i + 6);
    if (pid <= 0) continue;
    errno = 0;
    EXPECT_EQ(kill(pid, 0), -1) << "subscriber pid " << pid << " still exists";
    EXPECT_EQ(errno, ESRCH);
    ++seen;
  }
  EXPECT_GT(seen, 0) << out;
}

TEST(FeedInput, FifoIsRefusedAtOnce) {
  TempDir dir;
  const std::string fifo = dir / "day.itch";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  // Nobody ever opens the FIFO for writing: opening it for reading without O_NONBLOCK blocks.
  FeedProcess p({"--itch", fifo, "--quiet", "--set", "runtime.name=" + UniqueName()});
  const int rc = p.Wait(30);
  EXPECT_FALSE(p.killed_after_timeout()) << p.output();
  EXPECT_EQ(rc, 2) << p.output();
  EXPECT_THAT(p.output(), HasSubstr("itch: '" + fifo + "' is a FIFO, not a regular file")) << p.output();
}

TEST(FeedInput, DirectoryAndDeviceAreRefused) {
  TempDir dir;
  for (const std::string& path : {dir.path(), std::string("/dev/null")}) {
    FeedProcess p({"--itch", path, "--quiet", "--set", "runtime.name=" + UniqueName()});
    const int rc = p.Wait(30);
    EXPECT_FALSE(p.killed_after_timeout()) << p.output();
    EXPECT_EQ(rc, 2) << p.output();
    EXPECT_THAT(p.output(), HasSubstr("itch: '" + path + "' is a")) << p.output();
    EXPECT_THAT(p.output(), HasSubstr("not a regular file")) << p.output();
  }
}

// --config takes a regular file of at most 16 MiB: a FIFO nobody writes to, a directory,
// /dev/zero and a bigger file are refused at once, naming the path and what it is (exit 2,
// a configuration error). The wait is bounded so that a hang fails instead of stalling.
TEST(FeedInput, ConfigThatIsNotARegularFileOrTooBigIsRefusedAtOnce) {
  TempDir dir;
  const std::string fifo = dir / "feed.toml";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::string big = dir / "big.toml";
  WriteFile(big, "[feed]\nsymbols = 3\n");
  ASSERT_EQ(truncate(big.c_str(), (16 << 20) + 1), 0);  // the rest NUL bytes: the size is refused first
  const std::string why = " (a configuration is read from a regular file)";
  for (const auto& [path, message] :
       {std::pair<std::string, std::string>{fifo, fifo + ": not a regular file: it is a FIFO" + why},
        {dir.path(), dir.path() + ": not a regular file: it is a directory" + why},
        {"/dev/zero", "/dev/zero: not a regular file: it is a character device" + why},
        {big, big + ": config file too large: 16777217 bytes, more than the 16 MiB a configuration may have (is it "
                    "the right file?)"}}) {
    const auto t0 = std::chrono::steady_clock::now();
    FeedProcess p({"--config", path, "--quiet"});
    const int rc = p.Wait(30);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_FALSE(p.killed_after_timeout()) << path << "\n" << p.output();
    EXPECT_EQ(rc, 2) << path << "\n" << p.output();
    EXPECT_EQ(p.output(), "pollux-feed: " + message + "\n") << path;
    std::printf("--config %s: exit %d after %.3f s\n", path.c_str(), rc, secs);
  }
}

// Symbols come off the wire: one with an escape sequence, a newline, DEL and a byte above 0x7f
// is printed in the summary's top-of-book table escaped exactly as --book-out writes it, and
// no raw control byte reaches the output.
TEST(FeedInput, ControlCharactersInASymbolAreEscapedInTheSummary) {
  std::vector<std::uint8_t> bytes;
  itch::Encoder e(&bytes);
  itch::Header h;
  h.timestamp = 1;
  e.append_system_event(h, 'O');
  const std::string hostile = std::string("A\x1b[2J\n\x7f") + "\xc3";  // 8 bytes: the whole field
  h.stock_locate = 1;
  e.append_stock_directory(h, hostile);
  h.stock_locate = 2;
  e.append_stock_directory(h, "PLAIN");
  e.append_add_order(h, 1, 'B', 100, "PLAIN", 1'000'000);
  h.stock_locate = 1;
  e.append_add_order(h, 2, 'S', 200, hostile, 2'000'000);
  h.stock_locate = 0;
  e.append_system_event(h, 'C');
  TempDir dir;
  const std::string file = dir / "hostile.itch";
  std::ofstream(file, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  const std::string books = dir / "books.jsonl";
  FeedProcess p({"--itch", file, "--quiet", "--set", "feed.subscriber_mode=\"thread\"", "--set",
                 "runtime.name=\"" + UniqueName() + "\"", "--book-out", books});
  const int rc = p.Wait(60);
  EXPECT_FALSE(p.killed_after_timeout()) << p.output();
  ASSERT_EQ(rc, 0) << p.output();
  const std::string escaped = "A\\u001b[2J\\u000a\\u007f\\u00c3";
  const std::size_t table = p.output().find("top of book");
  if (table != std::string::npos) std::printf("%s", p.output().substr(table).c_str());
  std::ifstream in(books);
  const std::string first_book((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(first_book, HasSubstr("{\"symbol\": \"" + escaped + "\", ")) << first_book;
  EXPECT_THAT(p.output(), HasSubstr("\n         1  " + escaped + " ")) << p.output();
  EXPECT_THAT(p.output(), HasSubstr("\n         2  PLAIN    ")) << p.output();
  for (const char raw : {'\x1b', '\x7f', '\xc3'}) {
    EXPECT_EQ(p.output().find(raw), std::string::npos)
        << "raw byte " << static_cast<int>(static_cast<unsigned char>(raw));
  }
}

// 400,000 messages at 20,000/s: twenty seconds of replay, interrupted as soon as it runs.
TEST(FeedSignals, SigtermDuringAPacedReplayEndsCleanly) {
  TempDir dir;
  TempDir shm("/dev/shm");
  const std::string cfg = dir / "feed.toml";
  WriteFile(cfg, Config(shm.path(), "messages = 400_000\nsymbols = 20\nreplay = \"rate\"\nrate = 20_000\n"));
  FeedProcess p({"--config", cfg});
  ASSERT_TRUE(p.WaitForOutput(Publishing, 60)) << p.output();
  EXPECT_THAT(testing::shm_dir_files(shm.path()), ::testing::Not(::testing::IsEmpty()));
  p.Signal(SIGTERM);
  const int rc = p.Wait(60);
  EXPECT_FALSE(p.killed_after_timeout()) << p.output();
  EXPECT_EQ(rc, 1) << p.output();  // stopped early: not a complete replay
  EXPECT_THAT(p.output(), HasSubstr("stopped by SIGTERM")) << p.output();
  EXPECT_THAT(p.output(), HasSubstr("STOPPED EARLY")) << p.output();
  EXPECT_THAT(p.output(), HasSubstr("all 2 subscribers built identical books")) << p.output();
  EXPECT_THAT(testing::shm_dir_files(shm.path()), ::testing::IsEmpty());
  ExpectSubscribersGone(p.output());
}

TEST(FeedSignals, SigtermWhileWaitingForSubscribersEndsCleanly) {
  TempDir dir;
  TempDir shm("/dev/shm");
  const std::string cfg = dir / "feed.toml";
  WriteFile(cfg, Config(shm.path(), "messages = 1000\nsymbols = 5\nconnect_timeout_ms = 600_000\n"));
  FeedProcess p({"--config", cfg, "--role", "pub"});
  ASSERT_TRUE(
      p.WaitForOutput([](const std::string& o) { return o.find("waiting for subscribers") != std::string::npos; }, 60))
      << p.output();
  p.Signal(SIGTERM);
  const int rc = p.Wait(60);
  EXPECT_FALSE(p.killed_after_timeout()) << p.output();
  EXPECT_EQ(rc, 1) << p.output();
  EXPECT_THAT(p.output(), HasSubstr("stopped while waiting for subscribers")) << p.output();
  EXPECT_THAT(testing::shm_dir_files(shm.path()), ::testing::IsEmpty());
}

// The input shrinks to 4 KiB while a paced replay is in its first megabyte: the replay
// stops with an error naming the file and the offset; no SIGBUS, nothing left behind.
TEST(FeedInput, TruncatedWhileReplayingIsAnErrorNotASigbus) {
  itch::GeneratorOptions o = itch::testing::GenOptions(20, 400'000, 5);
  absl::StatusOr<std::vector<std::uint8_t>> g = itch::generate_itch(o);
  ASSERT_TRUE(g.ok());
  ASSERT_GT(g->size(), 4u << 20);
  TempDir dir;
  TempDir shm("/dev/shm");
  const std::string file = dir / "day.itch";
  std::ofstream(file, std::ios::binary)
      .write(reinterpret_cast<const char*>(g->data()), static_cast<std::streamsize>(g->size()));
  const std::string cfg = dir / "feed.toml";
  WriteFile(cfg, Config(shm.path(), "replay = \"rate\"\nrate = 20_000\n"));  // 20 s of replay
  FeedProcess p({"--config", cfg, "--itch", file});
  ASSERT_TRUE(p.WaitForOutput(Publishing, 60)) << p.output();
  ASSERT_EQ(truncate(file.c_str(), 4096), 0);
  const int rc = p.Wait(60);
  EXPECT_FALSE(p.killed_after_timeout()) << p.output();
  EXPECT_EQ(rc, 1) << p.output();  // 135 = killed by SIGBUS
  EXPECT_THAT(p.output(), HasSubstr(file + ": input truncated at offset ")) << p.output();
  EXPECT_THAT(p.output(),
              HasSubstr("the file has 4096 bytes now, " + std::to_string(g->size()) + " when it was opened"))
      << p.output();
  EXPECT_THAT(testing::shm_dir_files(shm.path()), ::testing::IsEmpty());
  ExpectSubscribersGone(p.output());
}

}  // namespace
}  // namespace pollux::feed
