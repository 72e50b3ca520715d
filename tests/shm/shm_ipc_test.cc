// Publisher and subscriber in separate processes (fork/exec of pollux-test-peer).
#include <unistd.h>

#include <string>

#include <gtest/gtest.h>

#include "tests/shm/test_util.h"
#include "tests/support/process.h"

namespace pollux::testing {
namespace {

std::string config(const std::string& name, const std::string& threading, const std::string& flow,
                   const std::string& log_size) {
  // idle = "yield": on a 2-core machine spinning pollers would starve the other process.
  return "[runtime]\nname = \"" + name + "\"\nthreading = \"" + threading +
         "\"\nidle = \"yield\"\ncounters = false\n[shm]\nflow_control = \"" + flow + "\"\nlog_size = \"" + log_size +
         "\"\n";
}

class ShmIpcTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ShmIpcTest, OneMillionMessagesInOrderNoLossThroughZeroCopyViews) {
  const std::string name = unique_name("ipc");
  const std::string cfg =
      write_file(::testing::TempDir() + "/" + name + ".toml", config(name, GetParam(), "backpressure", "1MiB"));
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  Child sub = spawn({POLLUX_TEST_PEER, "sub", "--config", cfg, "--topic", "ticks", "--count", "1000000", "--until-end",
                     "--no-loss", "--max-size", "120", "--ready-fd", std::to_string(ready[1]), "--timeout", "240"},
                    {ready[1]});
  Child pub = spawn({POLLUX_TEST_PEER, "pub", "--config", cfg, "--topic", "ticks", "--count", "1000000", "--max-size",
                     "120", "--timeout", "240"});
  const int pub_rc = wait_child(pub, 300);
  const int sub_rc = wait_child(sub, 300);
  EXPECT_EQ(pub_rc, 0) << pub.output;
  EXPECT_EQ(sub_rc, 0) << sub.output;
  EXPECT_EQ(field(sub.output, "received"), 1000000) << sub.output;
  EXPECT_EQ(field(sub.output, "lost"), 0) << sub.output;
  EXPECT_EQ(field(sub.output, "bad"), 0) << sub.output;
  EXPECT_EQ(field(sub.output, "order_errors"), 0) << sub.output;
  EXPECT_EQ(field(sub.output, "last"), 1000000) << sub.output;
  close(ready[0]);
  close(ready[1]);
}

TEST_P(ShmIpcTest, ZeroCopyClaimCommitAcrossProcesses) {
  const std::string name = unique_name("ipcclaim");
  const std::string cfg =
      write_file(::testing::TempDir() + "/" + name + ".toml", config(name, GetParam(), "backpressure", "256KiB"));
  Child sub = spawn({POLLUX_TEST_PEER, "sub", "--config", cfg, "--topic", "claims", "--count", "100000", "--until-end",
                     "--no-loss", "--max-size", "700", "--timeout", "120"});
  Child pub = spawn({POLLUX_TEST_PEER, "pub", "--config", cfg, "--topic", "claims", "--count", "100000", "--claim",
                     "--max-size", "700"});
  EXPECT_EQ(wait_child(pub, 180), 0) << pub.output;
  EXPECT_EQ(wait_child(sub, 180), 0) << sub.output;
  EXPECT_EQ(field(sub.output, "received"), 100000) << sub.output;
}

// A subscriber that stops reading is lapped by a lossy publisher: it is told exactly how many
// messages it lost, and everything else arrives intact and in order.
TEST_P(ShmIpcTest, LappedSlowSubscriberGetsGapWithTheRightCount) {
  const std::string name = unique_name("lap");
  const std::string cfg =
      write_file(::testing::TempDir() + "/" + name + ".toml", config(name, GetParam(), "lossy", "64KiB"));
  int ready[2], start[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(start), 0);
  // The publisher waits for a subscriber; the subscriber attaches and then does not read.
  Child pub =
      spawn({POLLUX_TEST_PEER, "pub", "--config", cfg, "--topic", "lap", "--count", "20000", "--max-size", "100"});
  Child sub = spawn(
      {POLLUX_TEST_PEER, "sub", "--config", cfg, "--topic", "lap", "--count", "20000", "--until-end", "--max-size",
       "100", "--ready-fd", std::to_string(ready[1]), "--start-fd", std::to_string(start[0]), "--timeout", "120"},
      {ready[1], start[0]});
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  ASSERT_EQ(wait_child(pub, 120), 0) << pub.output;  // 20000 x ~96 B through a 64 KiB log
  ASSERT_EQ(write(start[1], "g", 1), 1);             // now read
  ASSERT_EQ(wait_child(sub, 120), 0) << sub.output;
  const long long received = field(sub.output, "received"), lost = field(sub.output, "lost");
  EXPECT_EQ(received + lost, 20000) << sub.output;
  EXPECT_GT(lost, 15000) << sub.output;
  EXPECT_GT(received, 200) << "the oldest intact part of the log should still be delivered: " << sub.output;
  if (GetParam() == "inline") {
    EXPECT_EQ(field(sub.output, "gaps"), 1) << sub.output;
  } else {
    // The poller read frames that went stale in the ring; the loss can be reported in a few
    // contiguous pieces (the peer checks each starts where the previous ended).
    EXPECT_GE(field(sub.output, "gaps"), 1) << sub.output;
    EXPECT_LE(field(sub.output, "gaps"), 4) << sub.output;
  }
  EXPECT_EQ(field(sub.output, "order_errors"), 0) << sub.output;
  EXPECT_EQ(field(sub.output, "bad"), 0) << sub.output;
  EXPECT_EQ(field(sub.output, "last"), 20000) << sub.output;
  for (int fd : {ready[0], ready[1], start[0], start[1]}) close(fd);
}

INSTANTIATE_TEST_SUITE_P(Threading, ShmIpcTest, ::testing::Values("inline", "dedicated", "shared"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace pollux::testing
