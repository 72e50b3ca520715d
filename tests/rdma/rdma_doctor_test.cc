// pollux-doctor inside the Soft-RoCE VM (run by rdma_vm_suite): every RDMA device is listed with
// its port state, link layer, GIDs and max_inline_data, checked against what the test itself
// asks of the kernel and of verbs.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <infiniband/verbs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/latency/json_lite.h"
#include "tests/support/process.h"

namespace {

using Out = pollux::testing::CommandOutput;

Out Doctor(const std::string& args) { return pollux::testing::RunCommand(std::string(POLLUX_DOCTOR_BIN) + " " + args); }

// "area/name" -> {verdict, value}.
std::map<std::string, std::pair<std::string, std::string>> Checks(const Out& o) {
  std::map<std::string, std::pair<std::string, std::string>> out;
  std::string err;
  std::optional<pollux::jsonlite::Value> v = pollux::jsonlite::Parse(o.text, &err);
  EXPECT_TRUE(v.has_value()) << err << "\n" << o.text;
  if (!v || v->get("checks") == nullptr) return out;
  for (const auto& c : v->get("checks")->arr) {
    out[c.get("area")->str + "/" + c.get("name")->str] = {c.get("verdict")->str, c.get("value")->str};
  }
  return out;
}

std::vector<std::string> SysDevices() {
  std::vector<std::string> out;
  if (DIR* d = opendir("/sys/class/infiniband")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') out.emplace_back(e->d_name);
    }
    closedir(d);
  }
  return out;
}

// The IPv4 address of the Ethernet interface under `dev` port 1 (from sysfs and getifaddrs).
std::string NetdevIpv4(const std::string& dev) {
  std::ifstream f("/sys/class/infiniband/" + dev + "/ports/1/gid_attrs/ndevs/0");
  std::string ifname;
  if (!(f >> ifname)) return "";
  std::string addr;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr != nullptr && i->ifa_addr->sa_family == AF_INET && ifname == i->ifa_name) {
      char buf[INET_ADDRSTRLEN];
      inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof buf);
      addr = buf;
    }
  }
  freeifaddrs(list);
  return addr;
}

// Whether `dev` grants an RC QP asking for `inl` inline bytes (the test's own verbs call).
bool GrantsInline(const std::string& dev, std::uint32_t inl) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  bool ok = false;
  for (int i = 0; list != nullptr && i < n; ++i) {
    if (dev != ibv_get_device_name(list[i])) continue;
    ibv_context* ctx = ibv_open_device(list[i]);
    if (ctx == nullptr) break;
    ibv_pd* pd = ibv_alloc_pd(ctx);
    ibv_cq* cq = ibv_create_cq(ctx, 4, nullptr, nullptr, 0);
    ibv_qp_init_attr a{};
    a.qp_type = IBV_QPT_RC;
    a.send_cq = a.recv_cq = cq;
    a.cap.max_send_wr = a.cap.max_recv_wr = 1;
    a.cap.max_send_sge = a.cap.max_recv_sge = 1;
    a.cap.max_inline_data = inl;
    if (ibv_qp* qp = pd && cq ? ibv_create_qp(pd, &a) : nullptr) {
      ok = true;
      ibv_destroy_qp(qp);
    }
    if (cq) ibv_destroy_cq(cq);
    if (pd) ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
  }
  if (list != nullptr) ibv_free_device_list(list);
  return ok;
}

TEST(RdmaDoctor, ListsEveryDeviceWithPortsGidsAndInline) {
  const std::vector<std::string> devs = SysDevices();
  ASSERT_FALSE(devs.empty()) << "the VM has no RDMA device";
  const Out o = Doctor("--json");
  EXPECT_EQ(o.status, 0) << o.text;  // a configured Soft-RoCE host: nothing fails
  auto c = Checks(o);
  ASSERT_TRUE(c.count("rdma/devices")) << o.text;
  for (const std::string& d : devs) {
    SCOPED_TRACE(d);
    EXPECT_NE(c["rdma/devices"].second.find(d), std::string::npos) << c["rdma/devices"].second;
    const auto& port = c["rdma/" + d + " port 1"];
    EXPECT_NE(port.second.find("ACTIVE"), std::string::npos) << port.second;
    EXPECT_NE(port.second.find("link layer Ethernet"), std::string::npos) << port.second;
    const auto& gids = c["rdma/" + d + " port 1 gids"];
    const std::string ip = NetdevIpv4(d);
    ASSERT_FALSE(ip.empty()) << "no IPv4 on " << d << "'s netdev";
    EXPECT_NE(gids.second.find("::ffff:" + ip + " RoCE v2 IPv4-mapped"), std::string::npos) << gids.second;
    EXPECT_NE(gids.first, "warn") << gids.second;
    // max_inline_data: the largest the device grants, as the test's own QPs confirm.
    const auto& inl = c["rdma/" + d + " max_inline_data"];
    const std::uint32_t max = static_cast<std::uint32_t>(std::strtoul(inl.second.c_str(), nullptr, 10));
    EXPECT_GE(max, 256u) << inl.second;  // rdma.inline_threshold's default is granted
    EXPECT_TRUE(GrantsInline(d, max)) << max;
    EXPECT_FALSE(GrantsInline(d, max + 1)) << max;
    EXPECT_TRUE(c.count("rdma/" + d + " cq moderation"));
    EXPECT_TRUE(c.count("rdma/" + d + " timestamps"));
  }
}

// With an RDMA configuration the device it opens is judged: rxe1 chosen by name, its port and
// GIDs ok, memlock judged for RDMA (root in the VM: unlimited or CAP_IPC_LOCK).
TEST(RdmaDoctor, JudgesTheConfiguredDevice) {
  const std::vector<std::string> devs = SysDevices();
  ASSERT_FALSE(devs.empty());
  const std::string dev = devs.back();
  const std::string path = "/tmp/doctor_rdma_" + std::to_string(getpid()) + ".toml";
  std::ofstream(path) << "[transport]\nkind = \"rdma\"\n[rdma]\ndevice = \"" << dev << "\"\n";
  const Out o = Doctor("--json --no-probe --config " + path);
  std::remove(path.c_str());
  EXPECT_EQ(o.status, 0) << o.text;
  auto c = Checks(o);
  EXPECT_NE(c["rdma/devices"].second.find("opens " + dev), std::string::npos) << c["rdma/devices"].second;
  EXPECT_EQ(c["rdma/" + dev + " port 1"].first, "ok");
  EXPECT_EQ(c["rdma/" + dev + " port 1 gids"].first, "ok");
  EXPECT_EQ(c["memory/memlock"].first, "ok") << c["memory/memlock"].second;
  EXPECT_EQ(c["rdma/" + dev + " max_inline_data"].second, "not probed (--no-probe)");
}

}  // namespace
