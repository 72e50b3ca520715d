// pollux-latency --seed-plan on the host (no RDMA device needed): the seed's switches that
// apply to each transport are listed as A/B experiments, and the ones this machine cannot
// measure print a line instead of a fake pair - NUMA from sysfs, mlx5dv from the device.
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/support/process.h"

namespace {

using Out = pollux::testing::CommandOutput;

Out RunTool(const std::string& args) {
  return pollux::testing::RunCommand(std::string(POLLUX_LATENCY_BIN) + " " + args, true);
}

int NumaNodes() {
  int n = 0;
  if (DIR* d = opendir("/sys/devices/system/node")) {
    while (dirent* e = readdir(d)) {
      const std::string s = e->d_name;
      n += s.size() > 4 && s.compare(0, 4, "node") == 0 && s[4] >= '0' && s[4] <= '9';
    }
    closedir(d);
  }
  return n;
}

bool HasRdmaDevice() {
  DIR* d = opendir("/sys/class/infiniband");
  if (d == nullptr) return false;
  bool any = false;
  while (dirent* e = readdir(d)) any |= e->d_name[0] != '.';
  closedir(d);
  return any;
}

void ExpectNumaLine(const std::string& text) {
  if (NumaNodes() <= 1) {
    EXPECT_NE(text.find("NUMA: single NUMA node: not measurable here"), std::string::npos) << text;
    EXPECT_EQ(text.find("runtime.poller_cores"), std::string::npos) << text;
  } else {
    EXPECT_NE(text.find("NUMA: "), std::string::npos) << text;
  }
}

TEST(LatencySeedPlan, RdmaListsItsSwitchesAndTheUnmeasurableOnes) {
  const Out o = RunTool("--seed-plan --set transport.kind=rdma --set 'rdma.peers=[\"10.0.0.1:7471\"]'");
  ASSERT_EQ(o.status, 0) << o.text;
  for (const char* ab : {"--ab rdma.inline_threshold=0,256", "--ab rdma.signal_every=1,16",
                         "--ab runtime.idle=busy-spin,interrupt", "--ab rdma.post_batch=1,32 under --burst 16"}) {
    EXPECT_NE(o.text.find(ab), std::string::npos) << ab << "\n" << o.text;
  }
  ExpectNumaLine(o.text);
  if (!HasRdmaDevice()) {
    // No device to ask: said so, and no mlx5dv pair.
    EXPECT_NE(o.text.find("mlx5dv: not present (no RDMA device"), std::string::npos) << o.text;
  }
  if (o.text.find("mlx5dv: not present") != std::string::npos) {
    EXPECT_EQ(o.text.find("--ab rdma.mlx5dv"), std::string::npos) << o.text;
  } else {
    EXPECT_NE(o.text.find("--ab rdma.mlx5dv=off,auto"), std::string::npos) << o.text;
  }
  EXPECT_NE(o.text.find("--reg-per-message"), std::string::npos) << o.text;
  EXPECT_EQ(o.text.find("pollux-latency: rdma"), std::string::npos) << "--seed-plan ran something:\n" << o.text;
}

TEST(LatencySeedPlan, UdpAndShm) {
  const Out u = RunTool("--seed-plan --set transport.kind=udp");
  ASSERT_EQ(u.status, 0) << u.text;
  EXPECT_NE(u.text.find("--ab udp.busy_poll_us=0,50"), std::string::npos) << u.text;
  EXPECT_NE(u.text.find("--ab runtime.idle=busy-spin,interrupt"), std::string::npos) << u.text;
  EXPECT_EQ(u.text.find("rdma."), std::string::npos) << u.text;
  ExpectNumaLine(u.text);
  const Out s = RunTool("--seed-plan");
  ASSERT_EQ(s.status, 0) << s.text;
  EXPECT_NE(s.text.find("--ab runtime.idle=busy-spin,interrupt"), std::string::npos) << s.text;
  ExpectNumaLine(s.text);
}

TEST(LatencySeedPlan, BurstIsValidatedAndDocumented) {
  const Out h = RunTool("--help");
  ASSERT_EQ(h.status, 0);
  EXPECT_NE(h.text.find("--burst N"), std::string::npos);
  EXPECT_NE(h.text.find("--seed"), std::string::npos);
  EXPECT_EQ(RunTool("--burst 0").status, 64);
  EXPECT_EQ(RunTool("--burst 65").status, 64);
  EXPECT_EQ(RunTool("--burst 4 --rate 1000").status, 64);
}

}  // namespace
