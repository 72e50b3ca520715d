// pollux-config (tools/pollux_config.cc) run as a user runs it: a valid file prints the
// effective configuration; an invalid one names file:line: key; what depends on the host
// (udp.interface) is checked against this host - a warning, or with --check-host an error.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "tests/support/process.h"

namespace pollux {
namespace {

struct ToolRun {
  int status;
  std::string out, err;
};

class ConfigToolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = ::testing::TempDir() + "/config_tool_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }
  void TearDown() override {
    std::remove(file_.c_str());
    std::remove((base_ + ".err").c_str());
  }
  // Writes `toml` to a file of the test's own.
  std::string write(const std::string& toml) {
    file_ = base_ + ".toml";
    std::ofstream(file_) << toml;
    return file_;
  }
  // pollux-config `args`: exit status, stdout and stderr apart.
  ToolRun run(const std::string& args) {
    const std::string err = base_ + ".err";
    const testing::CommandOutput o =
        testing::RunCommand(std::string(POLLUX_CONFIG_BIN) + " " + args + " 2>'" + err + "'");
    std::ifstream in(err);
    std::string e((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return {o.status, o.text, e};
  }
  std::string base_, file_;
};

constexpr char kNoSuchInterface[] = "pollux-noif0";

// An IPv4 address of TEST-NET-3 (RFC 5737) that no interface of this host holds.
std::string foreign_address() {
  for (int last = 254; last > 0; --last) {
    const std::string a = "203.0.113." + std::to_string(last);
    in_addr want{};
    inet_pton(AF_INET, a.c_str(), &want);
    bool local = false;
    ifaddrs* list = nullptr;
    if (getifaddrs(&list) == 0) {
      for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
        local = local || (i->ifa_addr != nullptr && i->ifa_addr->sa_family == AF_INET &&
                          reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr == want.s_addr);
      }
      freeifaddrs(list);
    }
    if (!local) return a;
  }
  return "";
}

TEST_F(ConfigToolTest, UnknownInterfaceIsAWarningNamingFileLineKey) {
  ASSERT_EQ(if_nametoindex(kNoSuchInterface), 0u) << "this host has an interface named " << kNoSuchInterface;
  const std::string f =
      write(std::string("[transport]\nkind = \"udp\"\n\n[udp]\ninterface = \"") + kNoSuchInterface + "\"\n");
  const ToolRun r = run("'" + f + "'");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("interface = \"pollux-noif0\""), std::string::npos) << "the effective configuration:\n" << r.out;
  EXPECT_NE(r.err.find("pollux-config: warning: " + f +
                       ":5: udp.interface: no IPv4 interface named \"pollux-noif0\" (have: lo 127.0.0.1"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("--check-host makes this an error"), std::string::npos) << r.err;
}

TEST_F(ConfigToolTest, CheckHostMakesAnUnknownInterfaceAnError) {
  const std::string f =
      write(std::string("[transport]\nkind = \"udp\"\n\n[udp]\ninterface = \"") + kNoSuchInterface + "\"\n");
  const ToolRun r = run("--check-host '" + f + "'");
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_EQ(r.out, "") << "nothing printed for a file this host cannot use";
  EXPECT_EQ(r.err.rfind(f + ":5: udp.interface: no IPv4 interface named \"pollux-noif0\" (have: ", 0), 0u) << r.err;
}

TEST_F(ConfigToolTest, AnAddressNoInterfaceHoldsIsCheckedToo) {
  const std::string addr = foreign_address();
  ASSERT_FALSE(addr.empty()) << "every address of 203.0.113.0/24 is on this host";
  const std::string f = write("[transport]\nkind = \"udp\"\n[udp]\ninterface = \"" + addr + "\"\n");
  const ToolRun r = run("--check-host '" + f + "'");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find(f + ":4: udp.interface: no local interface has address " + addr), std::string::npos) << r.err;
}

TEST_F(ConfigToolTest, ExistingInterfaceByNameOrAddressPassesQuietly) {
  for (const char* iface : {"lo", "127.0.0.1"}) {
    const std::string f = write(std::string("[transport]\nkind = \"udp\"\n[udp]\ninterface = \"") + iface + "\"\n");
    const ToolRun r = run("--check-host '" + f + "'");
    EXPECT_EQ(r.status, 0) << iface << ": " << r.err;
    EXPECT_EQ(r.err, "") << iface;
  }
}

// The key is written but the transport is shm: a warning that says when it would matter; not
// an error even with --check-host (nothing on this host opens a UDP stream with this file).
TEST_F(ConfigToolTest, UnusedInterfaceIsOnlyAWarning) {
  const std::string f = write(std::string("[udp]\ninterface = \"") + kNoSuchInterface + "\"\n");
  const ToolRun r = run("--check-host '" + f + "'");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("warning: " + f + ":2: udp.interface: no IPv4 interface named"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("used when transport.kind = \"udp\""), std::string::npos) << r.err;
}

TEST_F(ConfigToolTest, InvalidFileNamesFileLineKeyAndTheTableTheKeyBelongsIn) {
  const std::string f = write("kind = \"udp\"\n");
  const ToolRun r = run("'" + f + "'");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, f + ":1: kind: unknown key (did you mean transport.kind? kind belongs in the [transport] table)\n");
}

}  // namespace
}  // namespace pollux
