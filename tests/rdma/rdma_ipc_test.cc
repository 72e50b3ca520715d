// Multi-process RDMA tests, run inside the Soft-RoCE VM only (rdma_vm_suite): publisher processes
// on rxe0 (10.0.0.1), subscriber processes on rxe1 (10.0.0.2), so every frame crosses the veth
// wire between two rxe devices. The processes are build/bin/pollux-rdma-peer.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <initializer_list>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "tests/rdma/rdma_test_util.h"
#include "tests/support/process.h"

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

// The subscriber's and the publisher's config files of an RC pair on a fresh port (dedicated mode).
std::pair<std::string, std::string> rc_files() {
  const int port = next_port();
  return {write_file(tmp("sub"), rdmatest::sub_config("dedicated", port)),
          write_file(tmp("pub"), rdmatest::pub_config("dedicated", port))};
}

// Waits for the publisher, then the subscriber process (at most `seconds` each), prints what they
// wrote, and expects both to exit 0.
void expect_both_succeed(Child& pub, Child& sub, int seconds) {
  const int prc = wait_child(pub, seconds);
  const int src = wait_child(sub, seconds);
  std::printf("%s%s", pub.output.c_str(), sub.output.c_str());
  EXPECT_EQ(prc, 0);
  EXPECT_EQ(src, 0);
}

// A subscriber process (`sub_args` after "sub FILE") and a publisher process (`pub_args` after
// "pub FILE") of an RC pair, both expected to succeed within `seconds`; returns the subscriber.
Child run_rc_pair(std::vector<std::string> sub_args, std::vector<std::string> pub_args, int seconds) {
  const auto [sc, pc] = rc_files();
  sub_args.insert(sub_args.begin(), {"sub", sc});
  pub_args.insert(pub_args.begin(), {"pub", pc});
  Child sub = spawn(peer(sub_args));
  Child pub = spawn(peer(pub_args));
  expect_both_succeed(pub, sub, seconds);
  return sub;
}

// Expects each named "key value" field of a peer process's output to have its value.
void expect_fields(const Child& c, std::initializer_list<std::pair<const char*, long long>> want) {
  for (const auto& [key, value] : want) EXPECT_EQ(field(c.output, key), value) << key;
}

// RC pub/sub between two processes, rxe0 -> rxe1: 100,000 messages, in order, none lost.
TEST(RdmaIpc, RcTwoProcesses100kInOrderNoLoss) {
  POLLUX_REQUIRE_RXE();
  const Child sub = run_rc_pair({"md", "100000", "--no-loss", "--require-complete", "--timeout", "600"},
                                {"md", "100000", "--timeout", "600"}, 700);
  expect_fields(sub, {{"received", 100000}, {"lost", 0}, {"out_of_order", 0}, {"bad", 0}});
  EXPECT_EQ(field(sub.output, "died"), 0) << "a clean close must not look like a death";
}

// Two publishing threads in one process, each with its own Publisher - so its own endpoint,
// QP and session, posted without a lock - to a subscriber process.
TEST(RdmaIpc, RcTwoPublishingThreadsOwnQps) {
  POLLUX_REQUIRE_RXE();
  const Child sub = run_rc_pair({"md", "20000", "--sessions", "2", "--no-loss", "--require-complete"},
                                {"md", "20000", "--threads", "2"}, 600);
  expect_fields(sub, {{"sessions", 2}, {"complete", 2}, {"received", 40000}});
}

// A multicast group unique to this process and test (concurrent runs never share one).
std::string ud_group_config(int tag, const std::string& extra = "") {
  return "multicast_group = \"239.255." + std::to_string(70 + tag) + "." + std::to_string(10 + getpid() % 200) +
         "\"\nheartbeat_ms = 20\n" + extra;
}

// Starts `pub` (waiting on its start fd) and the subscribers (each signalling its ready fd once
// it heard the publisher's heartbeat), then lets the publisher go.
struct UdRun {
  Child pub;
  std::vector<Child> subs;
};
UdRun start_ud(const std::vector<std::string>& pub_args, const std::vector<std::vector<std::string>>& sub_args) {
  UdRun r;
  int start[2];
  EXPECT_EQ(pipe(start), 0);
  std::vector<std::string> pa = pub_args;
  pa.insert(pa.end(), {"--start-fd", std::to_string(start[0])});
  r.pub = spawn(peer(pa), {start[0]});
  std::vector<int> ready;
  for (const auto& sa : sub_args) {
    int rd[2];
    EXPECT_EQ(pipe(rd), 0);
    std::vector<std::string> a = sa;
    a.insert(a.end(), {"--ready-fd", std::to_string(rd[1])});
    r.subs.push_back(spawn(peer(a), {rd[1]}));
    ready.push_back(rd[0]);
  }
  for (std::size_t i = 0; i < ready.size(); ++i) {
    EXPECT_TRUE(wait_byte(ready[i], 120)) << "subscriber " << i << " never heard the publisher";
  }
  EXPECT_EQ(write(start[1], "g", 1), 1);
  return r;
}

// Waits for every process of the run, prints what they said, expects each to exit 0.
void finish(UdRun& r) {
  const int prc = wait_child(r.pub, 900);
  std::vector<int> rcs;
  for (Child& c : r.subs) rcs.push_back(wait_child(c, 900));
  std::printf("%s", r.pub.output.c_str());
  for (Child& c : r.subs) std::printf("%s", c.output.c_str());
  EXPECT_EQ(prc, 0) << r.pub.output;
  for (std::size_t i = 0; i < rcs.size(); ++i) EXPECT_EQ(rcs[i], 0) << r.subs[i].output;
}

// UD multicast from rxe0 to two subscriber processes on rxe1: what the path loses (receive
// queues overflowing under TCG) is repaired - each subscriber gets every message, in order -
// and NAKs of both go to the one publisher, whose repairs (to the group) serve both.
TEST(RdmaIpc, UdMulticastTwoSubscriberProcessesGetEveryMessage) {
  POLLUX_REQUIRE_RXE();
  const std::string ud = ud_group_config(0);
  const std::string sc = write_file(tmp("sub"), rdmatest::rdma_config("dedicated", "rxe1", ud, "", "ud_mcast"));
  const std::string pc = write_file(tmp("pub"), rdmatest::rdma_config("dedicated", "rxe0", ud, "", "ud_mcast"));
  constexpr int kCount = 30000;
  const std::vector<std::string> sub = {
      "sub", sc, "md", std::to_string(kCount), "--no-loss", "--require-complete", "--timeout", "300"};
  UdRun r = start_ud({"pub", pc, "md", std::to_string(kCount), "--rate", "20000", "--max-size", "200"}, {sub, sub});
  finish(r);
  for (std::size_t i = 0; i < r.subs.size(); ++i) {
    const std::string& o = r.subs[i].output;
    EXPECT_EQ(field(o, "received"), kCount) << o;
    EXPECT_EQ(field(o, "lost"), 0) << o;
    EXPECT_EQ(field(o, "bad"), 0);
    EXPECT_EQ(field(o, "out_of_order"), 0);
    EXPECT_EQ(field(o, "died"), 0) << "a clean close must not look like a death";
  }
  EXPECT_GT(field(r.pub.output, "control_received"), 0) << r.pub.output;  // status messages (and NAKs) arrived
}

// 100,000 messages over UD multicast with the loss interceptor at the
// subscriber dropping 5% of the datagrams, duplicating 1% and reordering 2%: none lost, in
// order, each exactly once; the repairs are counted on both sides.
TEST(RdmaIpc, UdMulticast100kWithInjectedLossAreAllRepairedInOrder) {
  POLLUX_REQUIRE_RXE();
  const std::string faults = "fault_loss = 0.05\nfault_duplicate = 0.01\nfault_reorder = 0.02\nfault_seed = 7\n";
  const std::string sc =
      write_file(tmp("sub"), rdmatest::rdma_config("dedicated", "rxe1", ud_group_config(1, faults), "", "ud_mcast"));
  const std::string pc =
      write_file(tmp("pub"), rdmatest::rdma_config("dedicated", "rxe0", ud_group_config(1), "", "ud_mcast"));
  constexpr int kCount = 100000;
  UdRun r =
      start_ud({"pub", pc, "md", std::to_string(kCount), "--rate", "25000", "--max-size", "200"},
               {{"sub", sc, "md", std::to_string(kCount), "--no-loss", "--require-complete", "--timeout", "600"}});
  finish(r);
  const std::string& o = r.subs[0].output;
  EXPECT_EQ(field(o, "received"), kCount);
  EXPECT_EQ(field(o, "lost"), 0);
  EXPECT_EQ(field(o, "out_of_order"), 0);
  EXPECT_EQ(field(o, "bad"), 0);
  EXPECT_EQ(field(o, "gaps"), 0) << "no gap may be reported: everything was repaired";
  // The interceptor did its part (per datagram: a datagram carries one to several frames, so
  // 5% of 15,000-20,000 datagrams), and the protocol noticed and repaired it: every dropped
  // datagram's frames came back as gap fills (repairs, or a late reordered copy).
  EXPECT_GT(field(o, "fault_dropped"), 300) << o;
  EXPECT_GT(field(o, "fault_duplicated"), 50) << o;
  EXPECT_GT(field(o, "fault_reordered"), 100) << o;
  EXPECT_GT(field(o, "duplicates_dropped"), 50) << o;
  EXPECT_GT(field(o, "naks_sent"), 0) << o;
  EXPECT_GE(field(o, "gap_fills"), field(o, "fault_dropped")) << o;
  EXPECT_EQ(field(o, "messages_unrecoverable"), 0) << o;
  EXPECT_GT(field(r.pub.output, "naks_received"), 0) << r.pub.output;
  EXPECT_GT(field(r.pub.output, "retransmitted_frames"), 1000) << r.pub.output;
  EXPECT_EQ(field(r.pub.output, "naks_unavailable"), 0) << "the 1 MiB retransmit buffer holds every repair";
}

// A subscriber that stops reading for 1.5 s while the publisher goes on at 20,000 messages/s
// misses far more than the publisher's retransmit buffer (64 KiB, ~500 messages) holds: what
// is gone from it is reported as exact gaps (received + lost = sent, every gap where delivery
// stopped), what is still there is repaired, and the stream goes on in order. The subscriber
// runs inline (its own thread polls the CQ).
TEST(RdmaIpc, UdMulticastLossBeyondTheRetransmitBufferIsAnExactGap) {
  POLLUX_REQUIRE_RXE();
  // A liveness timeout well above the stall: the subscriber must not be forgotten meanwhile.
  const std::string live = "liveness_timeout_ms = 10000\n";
  const std::string sc =
      write_file(tmp("sub"), rdmatest::rdma_config("inline", "rxe1", ud_group_config(2, live), "", "ud_mcast"));
  const std::string pc = write_file(
      tmp("pub"), rdmatest::rdma_config("dedicated", "rxe0",
                                        ud_group_config(2, live + "retransmit_buffer = \"64KiB\"\n"), "", "ud_mcast"));
  constexpr int kCount = 60000;
  UdRun r = start_ud({"pub", pc, "md", std::to_string(kCount), "--rate", "20000", "--max-size", "200"},
                     {{"sub", sc, "md", std::to_string(kCount), "--require-complete", "--stall-after", "5000",
                       "--stall-ms", "1500", "--timeout", "600"}});
  finish(r);
  const std::string& o = r.subs[0].output;
  const long long received = field(o, "received"), lost = field(o, "lost");
  EXPECT_EQ(received + lost, kCount) << o;
  EXPECT_GT(lost, 1000) << "1.5 s at 20,000/s is far beyond a 64 KiB retransmit buffer: " << o;
  EXPECT_GT(received, 6000) << "delivery goes on after the stall (it began at 5,000): " << o;
  EXPECT_GE(field(o, "gaps"), 1) << o;
  EXPECT_EQ(field(o, "out_of_order"), 0) << "every gap starts where delivery stopped: " << o;
  EXPECT_EQ(field(o, "bad"), 0);
  EXPECT_EQ(field(o, "messages_unrecoverable"), lost) << "the transport's count is the application's: " << o;
  EXPECT_GT(field(r.pub.output, "naks_unavailable"), 0) << "NAKs for data no longer held: " << r.pub.output;
}

// Publisher killed mid-stream: the subscriber reports the publisher died (end of stream), and a
// new publisher process then connects to the same subscriber and delivers a complete session.
TEST(RdmaIpc, RcPublisherKilledMidStreamThenNewConnectionWorks) {
  POLLUX_REQUIRE_RXE();
  const auto [sc, pc] = rc_files();
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  Child sub = spawn(peer({"sub", sc, "md", "5000", "--sessions", "2", "--ready-fd", std::to_string(ready[1]),
                          "--signal-after", "1000", "--late-join", "--timeout", "300"}),
                    {ready[1]});
  Child pub1 = spawn(peer({"pub", pc, "md", "0", "--until-killed", "--rate", "5000"}));
  ASSERT_TRUE(wait_byte(ready[0], 120)) << "subscriber never got 1000 messages";
  kill_child(pub1);
  Child pub2 = spawn(peer({"pub", pc, "md", "5000"}));
  expect_both_succeed(pub2, sub, 300);
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
  const auto [sc, pc] = rc_files();
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  Child sub1 =
      spawn(peer({"sub", sc, "md", "100000000", "--ready-fd", std::to_string(ready[1]), "--signal-after", "1000"}),
            {ready[1]});
  Child pub = spawn(peer({"pub", pc, "md", "0", "--until-killed", "--rate", "5000"}));
  ASSERT_TRUE(wait_byte(ready[0], 120)) << "subscriber 1 never got 1000 messages";
  kill_child(sub1);
  ASSERT_TRUE(read_until(pub, "pub: disconnected", 120)) << "publisher did not notice: " << pub.output;
  Child sub2 =
      spawn(peer({"sub", sc, "md", "3000", "--no-loss", "--require-complete", "--late-join", "--timeout", "300"}));
  const int src = wait_child(sub2, 300);
  kill_child(pub);
  std::printf("%s%s", pub.output.c_str(), sub2.output.c_str());
  EXPECT_EQ(src, 0);
  EXPECT_GE(field(sub2.output, "received"), 3000);
  EXPECT_EQ(field(sub2.output, "out_of_order"), 0);
}

}  // namespace
}  // namespace pollux
