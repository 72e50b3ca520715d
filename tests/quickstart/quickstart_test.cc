// The tutorial stays true: examples/quickstart's two programs exchange quotes between two
// processes over shared memory with the shipped quickstart.toml, stop cleanly on SIGINT and
// SIGTERM (no file left behind), and the code README.md shows is the code of pub.cc and sub.cc,
// character for character.
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/shm/test_util.h"
#include "tests/support/process.h"

namespace pollux::testing {
namespace {

const std::string kDir = POLLUX_QUICKSTART_DIR;  // examples/quickstart
const std::string kReadme = POLLUX_README;

// quickstart.toml as shipped, with one line added: this test's own shm directory, so parallel
// test runs never meet.
class QuickstartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    shm_dir_ = "/dev/shm/" + unique_name("quickstart-test");
    ASSERT_EQ(mkdir(shm_dir_.c_str(), 0700), 0) << shm_dir_;
    std::string toml = read_file(kDir + "/quickstart.toml");
    const auto at = toml.find("[runtime]\n");
    ASSERT_NE(at, std::string::npos) << "quickstart.toml has no [runtime] table";
    toml.insert(at + 10, "shm_dir = \"" + shm_dir_ + "\"\n");
    config_ = write_file(shm_dir_ + ".toml", toml);
  }
  void TearDown() override {
    std::filesystem::remove_all(shm_dir_);
    std::filesystem::remove(config_);
  }

  // Runs quickstart-sub, then quickstart-pub, both with `extra` arguments; returns their outputs.
  void exchange(const std::vector<std::string>& pub_extra, int* pub_rc, std::string* pub_out, int* sub_rc,
                std::string* sub_out) {
    std::vector<std::string> sub_argv{POLLUX_QUICKSTART_SUB, "--config", config_, "--count", "20000"};
    std::vector<std::string> pub_argv{POLLUX_QUICKSTART_PUB, "--config", config_, "--count", "20000"};
    pub_argv.insert(pub_argv.end(), pub_extra.begin(), pub_extra.end());
    Child sub = spawn(sub_argv);
    ASSERT_GT(sub.pid, 0);
    // No start-up ordering needed: the publisher retries kNotConnected until the subscriber
    // has attached (bounded: 10 s without progress), the subscriber waits for the stream.
    Child pub = spawn(pub_argv);
    ASSERT_GT(pub.pid, 0);
    *pub_rc = wait_child(pub, 120);
    *sub_rc = wait_child(sub, 120);
    *pub_out = pub.output;
    *sub_out = sub.output;
  }

  std::string shm_dir_, config_;
};

TEST_F(QuickstartTest, TwoProcessesExchangeEveryQuoteOverShm) {
  int prc = 0, src = 0;
  std::string pout, sout;
  exchange({}, &prc, &pout, &src, &sout);
  EXPECT_EQ(prc, 0) << pout;
  EXPECT_EQ(src, 0) << sout;
  EXPECT_EQ(field(pout, "published"), 20000) << pout;
  EXPECT_EQ(field(sout, "received"), 20000) << sout;
  EXPECT_EQ(field(sout, "lost"), 0) << sout;
  EXPECT_EQ(field(sout, "bad"), 0) << sout;
  EXPECT_GT(field(sout, "min"), 0) << "latency from pollux::now_ns() - Message::publisher_ns: " << sout;
}

TEST_F(QuickstartTest, ZeroCopyClaimCommitDeliversTheSame) {
  int prc = 0, src = 0;
  std::string pout, sout;
  exchange({"--zero-copy"}, &prc, &pout, &src, &sout);
  EXPECT_EQ(prc, 0) << pout;
  EXPECT_EQ(src, 0) << sout;
  EXPECT_EQ(field(sout, "received"), 20000) << sout;
  EXPECT_EQ(field(sout, "bad"), 0) << sout;
}

// The names in the test's shm directory, less the host-wide clock calibration (pollux-clock:
// shared by every Pollux process of the host, kept on purpose).
std::vector<std::string> shm_files(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n != "pollux-clock") names.push_back(n);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : " ") + x;
  return s;
}

// Ctrl-C (SIGINT) or SIGTERM in the middle of a run: each program closes what it opened, so the
// library removes its counters file and the publisher's 16 MiB stream log, prints its summary
// with stopped=..., and exits 0.
TEST_F(QuickstartTest, SigintAndSigtermCloseCleanlyPrintTheSummaryAndLeaveNoFiles) {
  const std::string many = "1000000000000";  // more than either runs before it is stopped
  Child sub = spawn({POLLUX_QUICKSTART_SUB, "--config", config_, "--count", many});
  ASSERT_GT(sub.pid, 0);
  Child pub = spawn({POLLUX_QUICKSTART_PUB, "--config", config_, "--count", many});
  ASSERT_GT(pub.pid, 0);
  // Both contexts are up (their counters files) and the publisher has its stream log: the
  // signal handlers are installed by then (before the context is created).
  const std::string sub_counters = "pollux-quickstart-" + std::to_string(sub.pid) + ".counters";
  const std::string pub_counters = "pollux-quickstart-" + std::to_string(pub.pid) + ".counters";
  const std::string log = "pollux-quickstart-stream-1.log";
  auto present = [&](const std::string& name) { return std::filesystem::exists(shm_dir_ + "/" + name); };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!(present(sub_counters) && present(pub_counters) && present(log)) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(present(sub_counters) && present(pub_counters) && present(log))
      << "the programs did not start within 60 s; " << shm_dir_ << " holds: " << joined(shm_files(shm_dir_));

  ASSERT_EQ(::kill(sub.pid, SIGINT), 0);
  const int src = wait_child(sub, 60);
  EXPECT_EQ(src, 0) << sub.output;
  EXPECT_NE(sub.output.find("stopped=SIGINT"), std::string::npos) << sub.output;
  EXPECT_GE(field(sub.output, "received"), 0) << "no summary line: " << sub.output;
  EXPECT_EQ(field(sub.output, "lost"), 0) << sub.output;
  EXPECT_EQ(field(sub.output, "bad"), 0) << sub.output;
  EXPECT_NE(sub.output.find("queueing included"), std::string::npos) << "the latency line is explained: " << sub.output;
  EXPECT_FALSE(present(sub_counters)) << "quickstart-sub left its counters file";

  ASSERT_EQ(::kill(pub.pid, SIGTERM), 0);
  const int prc = wait_child(pub, 60);
  EXPECT_EQ(prc, 0) << pub.output;
  EXPECT_NE(pub.output.find("stopped=SIGTERM"), std::string::npos) << pub.output;
  EXPECT_GE(field(pub.output, "published"), 0) << "no summary line: " << pub.output;
  EXPECT_EQ(shm_files(shm_dir_), std::vector<std::string>{})
      << "left in " << shm_dir_ << ": " << joined(shm_files(shm_dir_));
}

// A configuration error reaches the user with the file, the line and the key.
TEST_F(QuickstartTest, ConfigErrorNamesFileLineAndKey) {
  const std::string bad = write_file(shm_dir_ + "/bad.toml", "[runtime]\nthreading = \"inlined\"\n");
  for (const char* bin : {POLLUX_QUICKSTART_PUB, POLLUX_QUICKSTART_SUB}) {
    Child c = spawn({"/bin/sh", "-c", std::string(bin) + " --config " + bad + " 2>&1"});  // stderr too
    EXPECT_EQ(wait_child(c, 60), 1) << c.output;
    EXPECT_NE(c.output.find(bad + ":2"), std::string::npos) << c.output;
    EXPECT_NE(c.output.find("runtime.threading"), std::string::npos) << c.output;
  }
}

TEST(QuickstartCli, HelpExitsZeroUnknownFlagExits64) {
  for (const char* bin : {POLLUX_QUICKSTART_PUB, POLLUX_QUICKSTART_SUB}) {
    Child h = spawn({bin, "--help"});
    EXPECT_EQ(wait_child(h, 30), 0) << bin;
    EXPECT_NE(h.output.find("--count N"), std::string::npos) << h.output;
    Child u = spawn({bin, "--bogus"});
    EXPECT_EQ(wait_child(u, 30), 64) << bin;
    Child z = spawn({bin, "--count", "0"});
    EXPECT_EQ(wait_child(z, 30), 64) << bin;
  }
}

// The text between "// [readme:NAME]" and "// [/readme:NAME]" in `source`.
std::string marked_region(const std::string& source, const std::string& name) {
  const std::string begin = "// [readme:" + name + "]\n", end = "// [/readme:" + name + "]\n";
  const auto b = source.find(begin);
  const auto e = source.find(end);
  if (b == std::string::npos || e == std::string::npos || e < b) return "";
  return source.substr(b + begin.size(), e - b - begin.size());
}

// The code block README.md shows after "<!-- snippet: examples/quickstart/FILE readme:NAME -->".
std::string readme_block(const std::string& readme, const std::string& file, const std::string& name) {
  const std::string tag = "<!-- snippet: examples/quickstart/" + file + " readme:" + name + " -->\n```cpp\n";
  const auto b = readme.find(tag);
  if (b == std::string::npos) return "";
  const auto e = readme.find("```\n", b + tag.size());
  if (e == std::string::npos) return "";
  return readme.substr(b + tag.size(), e - b - tag.size());
}

TEST(QuickstartReadme, SnippetsAreTheSourceOfThePrograms) {
  const std::string readme = read_file(kReadme);
  ASSERT_FALSE(readme.empty()) << kReadme;
  for (const auto& [file, name] : {std::pair<std::string, std::string>{"pub.cc", "pub"}, {"sub.cc", "sub"}}) {
    const std::string region = marked_region(read_file(kDir + "/" + file), name);
    ASSERT_FALSE(region.empty()) << file << " lost its // [readme:" << name << "] markers";
    const std::string block = readme_block(readme, file, name);
    ASSERT_FALSE(block.empty()) << "README.md lost <!-- snippet: examples/quickstart/" << file << " readme:" << name
                                << " --> and its ```cpp block";
    EXPECT_EQ(block, region) << "README.md's snippet differs from examples/quickstart/" << file
                             << ": paste the region between its [readme:" << name << "] markers into README.md";
  }
}

}  // namespace
}  // namespace pollux::testing
