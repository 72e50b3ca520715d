// End-to-end: build/bin/pollux-feed replays a feed from its process to subscriber processes
// over shared memory; the books and counts they write must equal those of an in-process
// replay (BookSet fed straight from the reader), in every threading mode.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "itch/book_set.h"
#include "itch/generator.h"
#include "itch/reader.h"
#include "itch/report.h"
#include "tests/feed/feed_process.h"
#include "tests/itch/test_util.h"

namespace pollux::feed {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct RunOutput {
  int rc = -1;
  std::string out;  // stdout and stderr, interleaved
};

// Runs pollux-feed with `args`, collecting its output; kills it after `seconds`.
RunOutput RunFeed(const std::vector<std::string>& args, int seconds = 300) {
  feedtest::FeedProcess p(args);
  RunOutput r;
  r.rc = p.Wait(seconds);
  r.out = p.output();
  return r;
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/pollux-feed-test-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() {
    if (!::testing::Test::HasFailure()) (void)!system(("rm -rf " + path_).c_str());
  }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

struct Expected {
  std::string books, counts;
};

// The in-process replay: a BookSet fed straight from the reader.
Expected Reference(std::span<const std::uint8_t> data) {
  itch::BookSet books;
  const itch::ParseResult r = books.apply_all(data);
  EXPECT_TRUE(r.ok()) << r.to_status();
  std::ostringstream b, c;
  itch::write_books_jsonl(books, b);
  itch::write_counts_json(books.counts(), c);
  return {b.str(), c.str()};
}

std::string UniqueName() {
  static int n = 0;
  return "feedtest-" + std::to_string(getpid()) + "-" + std::to_string(n++);
}

// A configuration for one replay: every test gets its own shm names.
std::string Config(const std::string& threading, const std::string& feed_extra, std::uint32_t batch_bytes,
                   std::uint32_t streams, std::uint32_t subscribers) {
  return "[runtime]\nname = \"" + UniqueName() + "\"\nthreading = \"" + threading +
         "\"\nidle = \"yield\"\ncounters = false\n\n[pool]\nslot_size = \"8KiB\"\nslots = 2048\n\n"
         "[rings]\ncapacity = 128\n\n"
         "[shm]\nlog_size = \"1MiB\"\nflow_control = \"backpressure\"\n\n[feed]\nstreams = " +
         std::to_string(streams) + "\nbatch_bytes = " + std::to_string(batch_bytes) +
         "\nsubscribers = " + std::to_string(subscribers) + "\nprogress_ms = 0\n" + feed_extra;
}

// Runs pollux-feed on `config` (written to dir/feed.toml) with its books and counts written to
// dir, then `extra_args`; checks that it ended with 0 (a fatal failure otherwise: callers wrap
// it in ASSERT_NO_FATAL_FAILURE) and wrote `want`'s books and counts. The run's output is left in r.
void RunAndCompare(const TempDir& dir, const std::string& config, const std::vector<std::string>& extra_args,
                   const Expected& want, RunOutput& r) {
  const std::string cfg = dir / "feed.toml";
  WriteFile(cfg, config);
  std::vector<std::string> args = {"--config",         cfg, "--book-out", dir / "books.jsonl", "--counts-out",
                                   dir / "counts.json"};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  r = RunFeed(args);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(ReadFile(dir / "books.jsonl"), want.books) << r.out;
  EXPECT_EQ(ReadFile(dir / "counts.json"), want.counts) << r.out;
}

bool HaveSample() { return access(POLLUX_ITCH_SAMPLE_FILE, R_OK) == 0; }

struct Case {
  std::string threading;
  std::uint32_t batch_bytes;
  std::uint32_t streams;
  std::uint32_t subscribers;
  std::uint32_t book_threads = 1;  // feed.book_threads: threads per subscriber, merged books
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.threading << ", batch_bytes " << c.batch_bytes << ", " << c.streams << " stream(s), " << c.subscribers
      << " subscriber(s), " << c.book_threads << " book thread(s)";
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return info.param.threading + "_batch" + std::to_string(info.param.batch_bytes) + "_streams" +
         std::to_string(info.param.streams) + "_subs" + std::to_string(info.param.subscribers) + "_books" +
         std::to_string(info.param.book_threads);
}

class FeedReplay : public ::testing::TestWithParam<Case> {
 protected:
  // Replays with `extra_args`, then checks every subscriber's summary and subscriber 0's files.
  void ReplayAndCompare(const std::string& feed_keys, const std::vector<std::string>& extra_args, const Expected& want,
                        std::uint64_t messages) {
    const Case& c = GetParam();
    TempDir dir;
    std::vector<std::string> args = {"--summary-json", dir / "summary.json", "--quiet"};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    RunOutput r;
    ASSERT_NO_FATAL_FAILURE(
        RunAndCompare(dir,
                      Config(c.threading, "book_threads = " + std::to_string(c.book_threads) + "\n" + feed_keys,
                             c.batch_bytes, c.streams, c.subscribers),
                      args, want, r));
    const std::string json = ReadFile(dir / "summary.json");
    EXPECT_THAT(json, HasSubstr("\"messages\": " + std::to_string(messages) + ", \"frames\""));
    for (std::uint32_t i = 0; i < c.subscribers; ++i) {
      EXPECT_THAT(r.out, HasSubstr("subscriber " + std::to_string(i) + " (pid "));
    }
    EXPECT_THAT(json, Not(HasSubstr("\"gaps\": 1")));
    EXPECT_THAT(r.out, HasSubstr("gaps 0 (0 Pollux messages lost), overruns 0, malformed 0"));
    EXPECT_THAT(r.out, HasSubstr("streams ended " + std::to_string(c.streams)));
    if (c.subscribers > 1) {
      EXPECT_THAT(r.out, HasSubstr("subscribers built identical books"));
    }
  }
};

TEST_P(FeedReplay, GeneratorBooksMatchInProcessReplay) {
  itch::GeneratorOptions o = itch::testing::GenOptions(37, 150'000, 7);
  absl::StatusOr<std::vector<std::uint8_t>> g = itch::generate_itch(o);
  ASSERT_TRUE(g.ok());
  ReplayAndCompare("source = \"generator\"\nsymbols = 37\nmessages = 150_000\nseed = 7\n", {}, Reference(*g),
                   o.messages);
}

TEST_P(FeedReplay, SharedSampleBooksMatchInProcessReplay) {
  if (!HaveSample()) GTEST_SKIP() << POLLUX_ITCH_SAMPLE_FILE << " is absent";
  absl::StatusOr<itch::Reader> reader = itch::Reader::open(POLLUX_ITCH_SAMPLE_FILE);
  ASSERT_TRUE(reader.ok()) << reader.status();
  ReplayAndCompare("", {"--itch", POLLUX_ITCH_SAMPLE_FILE}, Reference(reader->data()), 12'012);
}

INSTANTIATE_TEST_SUITE_P(Modes, FeedReplay,
                         ::testing::Values(Case{"dedicated", 2000, 3, 1}, Case{"shared", 0, 1, 1},
                                           Case{"inline", 8000, 4, 2}, Case{"dedicated", 0, 2, 1},
                                           Case{"shared", 8000, 5, 2}, Case{"inline", 0, 3, 1},
                                           // Books built by several threads per subscriber, merged.
                                           Case{"inline", 8000, 4, 1, 2}, Case{"shared", 0, 5, 2, 3},
                                           Case{"dedicated", 2000, 3, 1, 3}),
                         CaseName);

// Paced replays (fixed rate, scaled timestamps) and subscriber threads take the other paths.
TEST(FeedReplayPaced, RateSpeedAndThreadSubscribers) {
  itch::GeneratorOptions o = itch::testing::GenOptions(10, 30'000, 3);
  absl::StatusOr<std::vector<std::uint8_t>> g = itch::generate_itch(o);
  ASSERT_TRUE(g.ok());
  const Expected want = Reference(*g);
  const std::string gen = "symbols = 10\nmessages = 30_000\nseed = 3\n";
  struct Variant {
    std::string threading, feed;
    std::uint32_t batch;
  };
  for (const Variant& v :
       {Variant{"inline", gen + "replay = \"rate\"\nrate = 300_000\n", 4000},
        Variant{"dedicated", gen + "replay = \"rate\"\nrate = 100_000\n", 0},
        // The generator's day spans 6.5 hours: 1e5 x faster with pauses capped.
        Variant{"shared", gen + "replay = \"speed\"\nspeed = 100_000.0\nmax_gap_ms = 5\n", 2000},
        Variant{"inline", gen + "subscriber_mode = \"thread\"\n", 2000},
        Variant{"dedicated", gen + "subscriber_mode = \"thread\"\nreplay = \"rate\"\nrate = 200_000\n", 1000}}) {
    SCOPED_TRACE(v.threading + "\n" + v.feed);
    TempDir dir;
    RunOutput r;
    ASSERT_NO_FATAL_FAILURE(RunAndCompare(dir, Config(v.threading, v.feed, v.batch, 2, 2), {}, want, r));
    EXPECT_THAT(r.out, HasSubstr("all 2 subscribers built identical books")) << r.out;
    if (v.feed.find("replay") != std::string::npos) {
      EXPECT_THAT(r.out, HasSubstr("send lag behind schedule"));
    }
  }
}

// A file replay spans many read windows (1 MiB each): records cut by a window's end, bare
// views flushed before a window is replaced, the pacing schedule carried across windows.
TEST(FeedReplayFile, MultiWindowFileBooksMatchInProcessReplay) {
  itch::GeneratorOptions o = itch::testing::GenOptions(30, 150'000, 13);
  absl::StatusOr<std::vector<std::uint8_t>> g = itch::generate_itch(o);
  ASSERT_TRUE(g.ok());
  ASSERT_GT(g->size(), 4u << 20);
  const Expected want = Reference(*g);
  TempDir files;
  const std::string day = files / "day.itch";
  std::ofstream(day, std::ios::binary)
      .write(reinterpret_cast<const char*>(g->data()), static_cast<std::streamsize>(g->size()));
  struct Variant {
    std::string threading, feed;
    std::uint32_t batch;
  };
  for (const Variant& v : {Variant{"inline", "", 0}, Variant{"inline", "", 8000},
                           Variant{"dedicated", "replay = \"rate\"\nrate = 500_000\n", 2000},
                           Variant{"shared", "replay = \"rate\"\nrate = 500_000\n", 0}}) {
    SCOPED_TRACE(v.threading + " batch " + std::to_string(v.batch) + "\n" + v.feed);
    TempDir dir;
    RunOutput r;
    ASSERT_NO_FATAL_FAILURE(RunAndCompare(dir, Config(v.threading, v.feed, v.batch, 3, 1),
                                          {"--itch", day, "--summary-json", dir / "summary.json", "--quiet"}, want, r));
    EXPECT_THAT(ReadFile(dir / "summary.json"), HasSubstr("\"messages\": 150000, \"frames\""));
  }
}

// The same binary over another transport: only the configuration changes (UDP multicast on
// this host; a Pollux message must fit a datagram, hence the smaller batches).
TEST(FeedReplayTransports, UdpBooksMatchInProcessReplay) {
  itch::GeneratorOptions o = itch::testing::GenOptions(20, 60'000, 11);
  absl::StatusOr<std::vector<std::uint8_t>> g = itch::generate_itch(o);
  ASSERT_TRUE(g.ok());
  const Expected want = Reference(*g);
  for (const std::string threading : {"inline", "shared"}) {
    for (const std::uint32_t batch : {0u, 1400u}) {
      SCOPED_TRACE(threading + " batch " + std::to_string(batch));
      TempDir dir;
      RunOutput r;
      ASSERT_NO_FATAL_FAILURE(
          RunAndCompare(dir,
                        "[transport]\nkind = \"udp\"\n" +
                            Config(threading, "symbols = 20\nmessages = 60_000\nseed = 11\n", batch, 3, 1),
                        {}, want, r));
      EXPECT_THAT(r.out, HasSubstr("transport udp")) << r.out;
    }
  }
}

TEST(FeedErrors, MissingItchFileNamesThePath) {
  const RunOutput r = RunFeed({"--itch", "/nonexistent/dir/day.itch", "--quiet", "--set",
                               "feed.connect_timeout_ms=2000", "--set", "runtime.name=" + UniqueName()});
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.out, HasSubstr("itch: cannot open '/nonexistent/dir/day.itch': No such file or directory")) << r.out;
}

TEST(FeedErrors, MalformedItchFileGivesTheReadersErrorWithThePath) {
  TempDir dir;
  // One valid system event, then an unknown type at offset 14.
  std::string bytes = {0, 12, 'S', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 'O', 0, 5, 'Z', 1, 2, 3, 4};
  const std::string bad = dir / "bad.itch";
  WriteFile(bad, bytes);
  RunOutput r = RunFeed({"--itch", bad, "--quiet", "--set", "runtime.name=" + UniqueName()});
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.out, HasSubstr(bad + ": itch: offset 14: unknown message type 0x5a ('Z')")) << r.out;

  const std::string cut = dir / "cut.itch";
  WriteFile(cut, std::string(bytes.data(), 9));
  r = RunFeed({"--itch", cut, "--quiet", "--set", "runtime.name=" + UniqueName()});
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.out, HasSubstr(cut + ": itch: offset 0: truncated message type 'S'")) << r.out;
}

TEST(FeedErrors, ConfigErrorsNameFileLineAndKey) {
  TempDir dir;
  const std::string cfg = dir / "bad.toml";
  WriteFile(cfg, "[runtime]\nthreading = \"inline\"\n\n[feed]\nreplay = \"rate\"\nrate = 0\n");
  RunOutput r = RunFeed({"--config", cfg});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.out, HasSubstr(cfg + ":6: feed.rate: expected 1..1000000000, got 0")) << r.out;

  WriteFile(cfg, "[feed]\nstreams = 2\n[runtime]\nthreading = \"inlin\"\n");
  r = RunFeed({"--config", cfg});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.out, HasSubstr(cfg + ":4: runtime.threading: expected dedicated|shared|inline, got \"inlin\""))
      << r.out;

  r = RunFeed({"--set", "feed.replay=warp"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.out, HasSubstr("--set: feed.replay: expected original|speed|rate|max, got \"warp\"")) << r.out;

  r = RunFeed({"--bogus"});
  EXPECT_EQ(r.rc, 64);
  EXPECT_THAT(r.out, HasSubstr("unknown flag '--bogus'")) << r.out;
  r = RunFeed({"--qiet"});
  EXPECT_EQ(r.rc, 64);
  EXPECT_THAT(r.out, HasSubstr("did you mean '--quiet'?")) << r.out;
}

TEST(FeedCli, PrintConfigShowsBothTablesAndHelpWorks) {
  RunOutput r = RunFeed({"--print-config"});
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("[feed]\nsource = \"generator\""));
  EXPECT_THAT(r.out, HasSubstr("[runtime]\nthreading = \"inline\""));
  EXPECT_THAT(r.out, HasSubstr("flow_control = \"backpressure\""));
  r = RunFeed({"--help"});
  EXPECT_EQ(r.rc, 0);
  EXPECT_THAT(r.out, HasSubstr("--book-out FILE"));
}

}  // namespace
}  // namespace pollux::feed
