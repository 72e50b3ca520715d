// Multi-process RDMA tests, run inside the Soft-RoCE VM only (rdma_vm_suite): publisher processes
// on rxe0 (10.0.0.1), subscriber processes on rxe1 (10.0.0.2), so every frame crosses the veth
// wire between two rxe devices. The processes are build/bin/pollux-rdma-peer.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/rdma/rdma_test_util.h"
#include "tests/shm/process.h"

namespace pollux {
namespace {

using rdmatest::next_port;
using testing::Child;
using testing::field;
using testing::spawn;
using testing::wait_child;
using testing::write_file;

std::string tmp(const std::string& name) { return "/tmp/" + rdmatest::unique_name(name.c_str()) + ".toml"; }

// Reads the child's stdout until `needle` appears or `seconds` pass (keeps what it read).
bool read_until(Child& c, const std::string& needle, int seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  char buf[4096];
  while (c.output.find(needle) == std::string::npos) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    pollfd p{c.out_fd, POLLIN, 0};
    if (::poll(&p, 1, 50) > 0) {
      const ssize_t n = read(c.out_fd, buf, sizeof buf);
      if (n <= 0) return c.output.find(needle) != std::string::npos;
      c.output.append(buf, static_cast<std::size_t>(n));
    }
  }
  return true;
}

bool wait_byte(int fd, int seconds) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, seconds * 1000) <= 0) return false;
  char c;
  return read(fd, &c, 1) == 1;
}

void kill_child(Child& c) {
  kill(c.pid, SIGKILL);
  (void)wait_child(c, 30);
}

std::vector<std::string> peer(const std::vector<std::string>& args) {
  std::vector<std::string> v{POLLUX_RDMA_PEER};
  v.insert(v.end(), args.begin(), args.end());
  return v;
}

// RC pub/sub between two processes, rxe0 -> rxe1: 100,000 messages, in order, none lost.
TEST(RdmaIpc, RcTwoProcesses100kInOrderNoLoss) {
  POLLUX_REQUIRE_RXE();
  const int port = next_port();
  const std::string sc = write_file(tmp("sub"), rdmatest::sub_config("dedicated", port));
  const std::string pc = write_file(tmp("pub"), rdmatest::pub_config("dedicated", port));
  Child sub = spawn(peer({"sub", sc, "md", "100000", "--no-loss", "--require-complete", "--timeout", "600"}));
  Child pub = spawn(peer({"pub", pc, "md", "100000", "--timeout", "600"}));
  const int prc = wait_child(pub, 700);
  const int src = wait_child(sub, 700);
  std::printf("%s%s", pub.output.c_str(), sub.output.c_str());
  EXPECT_EQ(prc, 0);
  EXPECT_EQ(src, 0);
  EXPECT_EQ(field(sub.output, "received"), 100000);
  EXPECT_EQ(field(sub.output, "lost"), 0);
  EXPECT_EQ(field(sub.output, "out_of_order"), 0);
  EXPECT_EQ(field(sub.output, "bad"), 0);
  EXPECT_EQ(field(sub.output, "died"), 0) << "a clean close must not look like a death";
}

// Two publishing threads in one process, each with its own Publisher - so its own endpoint,
// QP and session, posted without a lock - to a subscriber process.
TEST(RdmaIpc, RcTwoPublishingThreadsOwnQps) {
  POLLUX_REQUIRE_RXE();
  const int port = next_port();
  const std::string sc = write_file(tmp("sub"), rdmatest::sub_config("dedicated", port));
  const std::string pc = write_file(tmp("pub"), rdmatest::pub_config("dedicated", port));
  Child sub = spawn(peer({"sub", sc, "md", "20000", "--sessions", "2", "--no-loss", "--require-complete"}));
  Child pub = spawn(peer({"pub", pc, "md", "20000", "--threads", "2"}));
  const int prc = wait_child(pub, 600);
  const int src = wait_child(sub, 600);
  std::printf("%s%s", pub.output.c_str(), sub.output.c_str());
  EXPECT_EQ(prc, 0);
  EXPECT_EQ(src, 0);
  EXPECT_EQ(field(sub.output, "sessions"), 2);
  EXPECT_EQ(field(sub.output, "complete"), 2);
  EXPECT_EQ(field(sub.output, "received"), 40000);
}

// UD multicast from rxe0 to two subscriber processes on rxe1: every message is either delivered
// or reported in a gap (received + lost == sent for each), and loss is visible as gaps.
TEST(RdmaIpc, UdMulticastTwoSubscriberProcessesAccountForEveryMessage) {
  POLLUX_REQUIRE_RXE();
  const std::string ud = "multicast_group = \"239.255.77." + std::to_string(10 + getpid() % 200) + "\"\nheartbeat_ms = 20\n";
  const std::string sc = write_file(tmp("sub"), rdmatest::rdma_config("dedicated", "rxe1", ud, "", "ud_mcast"));
  const std::string pc = write_file(tmp("pub"), rdmatest::rdma_config("dedicated", "rxe0", ud, "", "ud_mcast"));
  constexpr int kCount = 30000;
  int start[2], r1[2], r2[2];
  ASSERT_EQ(pipe(start), 0);
  ASSERT_EQ(pipe(r1), 0);
  ASSERT_EQ(pipe(r2), 0);
  // The publisher heartbeats from the start; subscribers are ready once they heard it.
  Child pub = spawn(peer({"pub", pc, "md", std::to_string(kCount), "--start-fd", std::to_string(start[0]), "--rate",
                          "20000", "--max-size", "200"}),
                    {start[0]});
  Child s1 = spawn(peer({"sub", sc, "md", std::to_string(kCount), "--ready-fd", std::to_string(r1[1]),
                         "--require-complete", "--timeout", "300"}),
                   {r1[1]});
  Child s2 = spawn(peer({"sub", sc, "md", std::to_string(kCount), "--ready-fd", std::to_string(r2[1]),
                         "--require-complete", "--timeout", "300"}),
                   {r2[1]});
  ASSERT_TRUE(wait_byte(r1[0], 120)) << "subscriber 1 never heard the publisher";
  ASSERT_TRUE(wait_byte(r2[0], 120)) << "subscriber 2 never heard the publisher";
  ASSERT_EQ(write(start[1], "g", 1), 1);
  const int prc = wait_child(pub, 600);
  const int rc1 = wait_child(s1, 600);
  const int rc2 = wait_child(s2, 600);
  std::printf("%s%s%s", pub.output.c_str(), s1.output.c_str(), s2.output.c_str());
  EXPECT_EQ(prc, 0);
  for (const Child* s : {&s1, &s2}) {
    EXPECT_EQ(field(s->output, "received") + field(s->output, "lost"), kCount) << s->output;
    EXPECT_GT(field(s->output, "received"), kCount / 2) << "most messages should arrive";
    EXPECT_EQ(field(s->output, "bad"), 0);
    EXPECT_EQ(field(s->output, "out_of_order"), 0);
    if (field(s->output, "lost") > 0) {
      EXPECT_GT(field(s->output, "gaps"), 0) << "loss must be reported as gaps";
    }
  }
  EXPECT_EQ(rc1, 0);
  EXPECT_EQ(rc2, 0);
}

// Publisher killed mid-stream: the subscriber reports the publisher died (end of stream), and a
// new publisher process then connects to the same subscriber and delivers a complete session.
TEST(RdmaIpc, RcPublisherKilledMidStreamThenNewConnectionWorks) {
  POLLUX_REQUIRE_RXE();
  const int port = next_port();
  const std::string sc = write_file(tmp("sub"), rdmatest::sub_config("dedicated", port));
  const std::string pc = write_file(tmp("pub"), rdmatest::pub_config("dedicated", port));
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  Child sub = spawn(peer({"sub", sc, "md", "5000", "--sessions", "2", "--ready-fd", std::to_string(ready[1]),
                          "--signal-after", "1000", "--late-join", "--timeout", "300"}),
                    {ready[1]});
  Child pub1 = spawn(peer({"pub", pc, "md", "0", "--until-killed", "--rate", "5000"}));
  ASSERT_TRUE(wait_byte(ready[0], 120)) << "subscriber never got 1000 messages";
  kill_child(pub1);
  Child pub2 = spawn(peer({"pub", pc, "md", "5000"}));
  const int prc = wait_child(pub2, 300);
  const int src = wait_child(sub, 300);
  std::printf("%s%s", pub2.output.c_str(), sub.output.c_str());
  EXPECT_EQ(prc, 0);
  EXPECT_EQ(src, 0);
  EXPECT_EQ(field(sub.output, "sessions"), 2);
  EXPECT_EQ(field(sub.output, "died"), 1) << "the killed publisher must be reported dead";
  EXPECT_GE(field(sub.output, "complete"), 1) << "the new publisher's session must be complete";
  EXPECT_LE(field(sub.output, "late_start"), 1) << "only the killed publisher (--until-killed) may start late";
  EXPECT_EQ(field(sub.output, "out_of_order"), 0);
  EXPECT_EQ(field(sub.output, "bad"), 0);
}

// Subscriber killed mid-stream: the publisher notices (not connected, log line), keeps retrying,
// and a new subscriber process on the same address gets a complete, in-order stream.
TEST(RdmaIpc, RcSubscriberKilledMidStreamThenNewSubscriberConnects) {
  POLLUX_REQUIRE_RXE();
  const int port = next_port();
  const std::string sc = write_file(tmp("sub"), rdmatest::sub_config("dedicated", port));
  const std::string pc = write_file(tmp("pub"), rdmatest::pub_config("dedicated", port));
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  Child sub1 = spawn(peer({"sub", sc, "md", "100000000", "--ready-fd", std::to_string(ready[1]), "--signal-after", "1000"}),
                     {ready[1]});
  Child pub = spawn(peer({"pub", pc, "md", "0", "--until-killed", "--rate", "5000"}));
  ASSERT_TRUE(wait_byte(ready[0], 120)) << "subscriber 1 never got 1000 messages";
  kill_child(sub1);
  ASSERT_TRUE(read_until(pub, "pub: disconnected", 120)) << "publisher did not notice: " << pub.output;
  Child sub2 = spawn(peer({"sub", sc, "md", "3000", "--no-loss", "--require-complete", "--late-join", "--timeout", "300"}));
  const int src = wait_child(sub2, 300);
  kill_child(pub);
  std::printf("%s%s", pub.output.c_str(), sub2.output.c_str());
  EXPECT_EQ(src, 0);
  EXPECT_GE(field(sub2.output, "received"), 3000);
  EXPECT_EQ(field(sub2.output, "out_of_order"), 0);
}

}  // namespace
}  // namespace pollux
