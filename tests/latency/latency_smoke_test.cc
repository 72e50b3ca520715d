// Smoke test of build/bin/pollux-latency: short real runs on shm and UDP (127.0.0.1), inline and
// dedicated, checking the command-line contract (--help exits 0, unknown flags exit 64), the
// table's structure (stages in path order, the end-to-end line, the honesty checks), the JSON
// schema (parsed with tests/latency/json_lite.h), the .hgrm files and --ab. No figure is
// asserted: only that there are figures where the stages are present.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/process.h"
#include "tests/latency/json_lite.h"
#include "tools/latency/decomposition.h"

#include "tests/support/process.h"

namespace pollux::latency {
namespace {

namespace fs = std::filesystem;
using jsonlite::Value;
using ::testing::HasSubstr;
using ::testing::Not;

struct ToolRun {
  int status;
  std::string out;
};

// build/bin/pollux-latency with `args`, its stdout and stderr collected together. `before_exec`
// (optional) runs with its pid before it starts.
testing::Child Latency(const std::vector<std::string>& args, std::function<void(pid_t)> before_exec = {}) {
  std::vector<std::string> argv = {POLLUX_LATENCY_BIN};
  argv.insert(argv.end(), args.begin(), args.end());
  testing::SpawnOptions o;
  o.merge_stderr = true;
  o.before_exec = std::move(before_exec);
  return testing::spawn(argv, o);
}

ToolRun RunTool(const std::vector<std::string>& args, int seconds = 120) {
  testing::Child p = Latency(args);
  const int st = p.wait(seconds);
  return {st, p.output};
}

std::string ReadFile(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class LatencySmoke : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("pollux-latency-test-" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The stage lines of the table, in order (the lines between the header and the end-to-end line).
  static std::vector<std::string> StageLines(const std::string& out) {
    std::vector<std::string> lines;
    std::istringstream in(out);
    std::string line;
    bool in_table = false;
    while (std::getline(in, line)) {
      if (line.rfind("stage ", 0) == 0 && line.find("from -> to") != std::string::npos) {
        in_table = true;
        continue;
      }
      if (!in_table) continue;
      if (line.rfind("end-to-end", 0) == 0) break;
      lines.push_back(line);
    }
    return lines;
  }

  // Checks one run's table and JSON; returns the parsed JSON.
  Value CheckRun(const ToolRun& r, const std::string& transport, const fs::path& json) {
    EXPECT_EQ(r.status, 0) << r.out;
    const std::vector<std::string> lines = StageLines(r.out);
    EXPECT_EQ(lines.size(), static_cast<std::size_t>(kStageCount)) << r.out;
    for (std::size_t s = 0; s < lines.size(); ++s) {
      EXPECT_THAT(lines[s], HasSubstr(std::string(stage_label(static_cast<int>(s))))) << r.out;
      EXPECT_THAT(lines[s], HasSubstr(std::string(point_name(static_cast<int>(s) + 1)))) << r.out;
    }
    EXPECT_THAT(r.out, HasSubstr("end-to-end (one-way, sum of stages)"));
    EXPECT_THAT(r.out, HasSubstr("perturbation:"));
    EXPECT_THAT(r.out, HasSubstr("the stages account for"));
    EXPECT_THAT(r.out, HasSubstr("subtracted once per stamp"));
    std::string err;
    const std::string text = ReadFile(json);
    auto v = jsonlite::Parse(text, &err);
    EXPECT_TRUE(v.has_value()) << err << "\n" << text;
    if (!v) return Value{};
    EXPECT_TRUE(v->is_object());
    const Value* t = v->get("transport");
    EXPECT_TRUE(t != nullptr && t->is_string() && t->str == transport) << text;
    const Value* stages = v->get("stages");
    EXPECT_TRUE(stages != nullptr && stages->is_array()) << text;
    if (stages == nullptr) return *v;
    EXPECT_EQ(stages->arr.size(), static_cast<std::size_t>(kStageCount));
    int present = 0;
    double share = 0;
    for (std::size_t s = 0; s < stages->arr.size(); ++s) {
      const Value& st = stages->arr[s];
      const Value* name = st.get("name");
      EXPECT_TRUE(name != nullptr && name->is_string() && name->str == point_name(static_cast<int>(s) + 1)) << text;
      const Value* absent = st.get("absent");
      EXPECT_TRUE(absent != nullptr && absent->is_bool());
      if (absent == nullptr) continue;
      for (const char* k : {"mean_ns", "p50_ns", "p99_ns", "share_pct"}) {
        const Value* x = st.get(k);
        EXPECT_TRUE(x != nullptr && (absent->b ? x->is_null() : x->is_number())) << k << " in " << text;
      }
      if (!absent->b) {
        ++present;
        share += st.get("share_pct")->num;
      }
    }
    EXPECT_GE(present, 1) << text;
    EXPECT_NEAR(share, 100.0, 0.01 * present) << text;  // 3 decimals per share
    const Value* e = v->get("end_to_end");
    EXPECT_TRUE(e != nullptr && e->is_object()) << text;
    if (e != nullptr) {
      for (const char* k : {"mean_ns", "p50_ns", "p99_ns"}) {
        EXPECT_TRUE(e->get(k) != nullptr && e->get(k)->is_number()) << k;
      }
    }
    const Value* u = v->get("untraced");
    EXPECT_TRUE(u != nullptr && u->get("rtt_half_p50_ns") != nullptr && u->get("rtt_half_p50_ns")->is_number()) << text;
    if (u != nullptr && u->get("rtt_half_p50_ns") != nullptr) {
      EXPECT_GT(u->get("rtt_half_p50_ns")->num, 0);
    }
    return *v;
  }

  fs::path dir_;
};

TEST_F(LatencySmoke, HelpAndUnknownFlags) {
  ToolRun h = RunTool({"--help"});
  EXPECT_EQ(h.status, 0);
  for (const char* f :
       {"--config", "--set", "--count", "--rate", "--json", "--hgrm", "--plot", "--ab", "--pairs", "--trace-every"}) {
    EXPECT_THAT(h.out, HasSubstr(f));
  }
  ToolRun u = RunTool({"--no-such-flag"});
  EXPECT_EQ(u.status, 64) << u.out;
  EXPECT_THAT(u.out, HasSubstr("unknown flag '--no-such-flag'"));
  ToolRun bad_ab = RunTool({"--ab", "runtime.idle=yield"});
  EXPECT_EQ(bad_ab.status, 64) << bad_ab.out;
  ToolRun bad_key = RunTool({"--set", "runtime.no_such_key=1"});
  EXPECT_EQ(bad_key.status, 64) << bad_key.out;
  EXPECT_THAT(bad_key.out, HasSubstr("runtime.no_such_key"));
  ToolRun few_pairs = RunTool({"--ab", "runtime.idle=yield,backoff", "--pairs", "2"});
  EXPECT_EQ(few_pairs.status, 64) << few_pairs.out;
}

// --peer-netns / --peer-set: the errors a user meets first (no root needed for these).
TEST_F(LatencySmoke, PeerNetnsErrorsAreClear) {
  ToolRun h = RunTool({"--help"});
  EXPECT_THAT(h.out, HasSubstr("--peer-netns NAME"));
  EXPECT_THAT(h.out, HasSubstr("--peer-set KEY=VALUE"));
  const std::string missing = "pollux-latency-no-such-ns-" + std::to_string(getpid());
  ToolRun m = RunTool({"--peer-netns", missing, "--set", "transport.kind=udp"});
  EXPECT_EQ(m.status, 1) << m.out;
  EXPECT_THAT(m.out, HasSubstr("no such network namespace"));
  EXPECT_THAT(m.out, HasSubstr("ip netns add " + missing));
  ToolRun path = RunTool({"--peer-netns", "a/b"});
  EXPECT_EQ(path.status, 64) << path.out;
  ToolRun kind = RunTool({"--set", "transport.kind=udp", "--peer-set", "transport.kind=shm", "--print-config"});
  EXPECT_EQ(kind.status, 64) << kind.out;
  EXPECT_THAT(kind.out, HasSubstr("both sides must use one transport"));
  ToolRun key = RunTool({"--peer-set", "udp.no_such_key=1"});
  EXPECT_EQ(key.status, 64) << key.out;
  EXPECT_THAT(key.out, HasSubstr("udp.no_such_key"));
}

// Two network namespaces joined by a veth pair (root only): the ping side in A (this test enters
// it around the spawn), the pong side in B by --peer-netns, a multicast group on each side's end
// of the pair; with udp.datapath = socket the kernel stages are present, with xdp (where built)
// the send completion is the library's hand-over to its AF_XDP port, the kernel RX stage is
// absent and says why, and no library-only pair runs.
TEST_F(LatencySmoke, UdpAcrossNetworkNamespacesBothDatapaths) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces)";
  const std::string tag = "plat" + std::to_string(getpid());
  const std::string ns_a = tag + "a", ns_b = tag + "b", if_a = tag + "x", if_b = tag + "y";
  auto sh = [](const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()); };
  struct Cleanup {
    std::function<void()> f;
    ~Cleanup() { f(); }
  } cleanup{[&] {
    sh("ip netns del " + ns_a);
    sh("ip netns del " + ns_b);
  }};
  for (const std::string& cmd :
       {"ip netns add " + ns_a, "ip netns add " + ns_b,
        "ip -n " + ns_a + " link add " + if_a + " type veth peer name " + if_b + " netns " + ns_b,
        "ip -n " + ns_a + " addr add 10.215.0.1/24 dev " + if_a,
        "ip -n " + ns_b + " addr add 10.215.0.2/24 dev " + if_b, "ip -n " + ns_a + " link set " + if_a + " up",
        "ip -n " + ns_b + " link set " + if_b + " up"}) {
    if (sh(cmd) != 0) GTEST_SKIP() << "could not create the namespaces and veth pair: `" << cmd << "` failed";
  }
  const bool xdp = RunTool({"--set", "transport.kind=udp", "--set", "udp.datapath=xdp", "--print-config"}).status == 0;
  for (const char* datapath : {"socket", "xdp"}) {
    SCOPED_TRACE(datapath);
    if (std::string(datapath) == "xdp" && !xdp) {
      std::printf("udp.datapath = xdp skipped: this libpollux is built without AF_XDP\n");
      continue;
    }
    const fs::path json = dir_ / (std::string("netns-") + datapath + ".json");
    const int home = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    const int a = open(("/var/run/netns/" + ns_a).c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_TRUE(home >= 0 && a >= 0);
    ASSERT_EQ(setns(a, CLONE_NEWNET), 0);
    testing::Child p = Latency({"--peer-netns", ns_b,
                                "--set",        "transport.kind=udp",
                                "--set",        "udp.address=239.255.215.1",
                                "--set",        std::string("udp.datapath=") + datapath,
                                "--set",        "runtime.threading=inline",
                                "--set",        "udp.interface=" + if_a,
                                "--peer-set",   "udp.interface=" + if_b,
                                "--count",      "200",
                                "--warmup",     "20",
                                "--json",       json});
    ASSERT_EQ(setns(home, CLONE_NEWNET), 0);
    close(a);
    close(home);
    const int st = p.wait(120);
    const Value v = CheckRun({st, p.output}, "udp", json);
    EXPECT_THAT(p.output, HasSubstr("pong side in " + ns_b));
    const Value* floor = v.get("floor");
    ASSERT_TRUE(floor != nullptr && floor->is_object()) << p.output;
    EXPECT_THAT(floor->get("kind")->str, HasSubstr("across the network namespaces"));
    const Value* stages = v.get("stages");
    ASSERT_TRUE(stages != nullptr && stages->arr.size() == static_cast<std::size_t>(kStageCount)) << p.output;
    const Value& kernel_rx = stages->arr[kKernelRx - 1];
    const Value& send_completion = stages->arr[kSendCompletion - 1];
    if (std::string(datapath) == "socket") {
      EXPECT_FALSE(kernel_rx.get("absent")->b) << p.output;
      EXPECT_FALSE(send_completion.get("absent")->b) << p.output;
      EXPECT_TRUE(v.get("library_only")->is_object()) << p.output;
    } else {
      EXPECT_TRUE(kernel_rx.get("absent")->b) << p.output;
      EXPECT_THAT(kernel_rx.get("note")->str, HasSubstr("udp.datapath = \"xdp\"")) << p.output;
      // The send completion is the hand-over to the AF_XDP port: the transport stage after it
      // holds the kick, the wire and the RX ring, and every stamp is in path order.
      EXPECT_FALSE(send_completion.get("absent")->b) << p.output;
      EXPECT_EQ(v.get("send_completion_source")->str, "xdp_port_handover") << p.output;
      EXPECT_EQ(stages->arr[kReceive - 1].get("from")->str, "send_completion") << p.output;
      EXPECT_EQ(v.get("samples")->get("out_of_order")->num, 0) << p.output;
      EXPECT_THAT(p.output, HasSubstr("send_completion on the XDP datapath")) << p.output;
      EXPECT_TRUE(v.get("library_only")->is_null()) << p.output;
      EXPECT_FALSE(stages->arr[kReceive - 1].get("absent")->b) << p.output;
    }
  }
}

// The VM runs RDMA; here only the configuration is checked: an RC config gets a listener and
// a peer per side (each pointing at the other), and one without rdma.peers is refused.
TEST_F(LatencySmoke, RdmaConfigurationIsComposedPerSide) {
  ToolRun r = RunTool({"--set", "transport.kind=rdma", "--set", "rdma.peers=[\"10.0.0.1:7471\"]", "--print-config"});
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("kind = \"rdma\""));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("listen_port = [0-9]+"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("peers = \\[\"10\\.0\\.0\\.1:[0-9]+\"\\]"));
  EXPECT_THAT(r.out, HasSubstr("topic = \"lat.ping.t\""));
  ToolRun no_peers = RunTool({"--set", "transport.kind=rdma"});
  EXPECT_EQ(no_peers.status, 64) << no_peers.out;
  EXPECT_THAT(no_peers.out, HasSubstr("rdma.peers is empty"));
}

TEST_F(LatencySmoke, ShmDedicatedPingPong) {
  const fs::path json = dir_ / "shm.json", hgrm = dir_ / "shm.hgrm";
  ToolRun r = RunTool({"--count", "400", "--warmup", "50", "--json", json, "--hgrm", hgrm});
  const Value v = CheckRun(r, "shm", json);
  // Dedicated mode passes both rings: the app ring stage is present.
  if (const Value* st = v.get("stages")) {
    ASSERT_EQ(st->arr.size(), static_cast<std::size_t>(kStageCount));
    EXPECT_FALSE(st->arr[kPollerDequeue - 1].get("absent")->b) << r.out;
    EXPECT_TRUE(st->arr[kSendCompletion - 1].get("absent")->b) << r.out;
  }
  const Value* floor = v.get("floor");
  EXPECT_TRUE(floor != nullptr && floor->is_object() && floor->get("rtt_half_p50_ns")->is_number()) << r.out;
  // The traced round trip cut at its stamps: five parts whose means add up to the traced RTT
  // (each less one clock read), one sample per traced round trip.
  const Value* rt = v.get("round_trip");
  ASSERT_TRUE(rt != nullptr && rt->is_object()) << r.out;
  const Value* parts = rt->get("parts");
  ASSERT_TRUE(parts != nullptr && parts->arr.size() == 5u) << r.out;
  double sum = 0;
  for (const Value& p : parts->arr) {
    EXPECT_EQ(p.get("count")->num, v.get("traced")->get("count")->num) << r.out;
    sum += p.get("mean_ns")->num;
  }
  EXPECT_EQ(parts->arr[2].get("name")->str, "pong_turnaround");
  const double rtt = 2 * v.get("traced")->get("mean_ns")->num;
  EXPECT_NEAR(sum, rtt, 0.01 * rtt + 200) << r.out;
  EXPECT_THAT(r.out, HasSubstr("pong turnaround"));
  const std::string h = ReadFile(hgrm);
  EXPECT_THAT(h, HasSubstr("1/(1-Percentile)"));
  EXPECT_THAT(h, HasSubstr("#[Mean    ="));
  EXPECT_TRUE(fs::exists(dir_ / "shm.untraced.hgrm"));
  EXPECT_TRUE(fs::exists(dir_ / "shm.floor.hgrm"));
  EXPECT_TRUE(fs::exists(dir_ / "shm.ring_enqueue.hgrm"));
}

TEST_F(LatencySmoke, ShmInlineShowsTheRingStagesAsAbsent) {
  const fs::path json = dir_ / "inline.json";
  ToolRun r = RunTool({"--set", "runtime.threading=inline", "--count", "400", "--warmup", "50", "--json", json});
  const Value v = CheckRun(r, "shm", json);
  if (const Value* st = v.get("stages")) {
    ASSERT_EQ(st->arr.size(), static_cast<std::size_t>(kStageCount));
    EXPECT_TRUE(st->arr[kRingEnqueue - 1].get("absent")->b) << r.out;
    EXPECT_TRUE(st->arr[kPollerDequeue - 1].get("absent")->b) << r.out;
  }
  EXPECT_THAT(r.out, HasSubstr("absent"));
}

TEST_F(LatencySmoke, UdpDedicatedAndInline) {
  for (const char* mode : {"dedicated", "inline"}) {
    SCOPED_TRACE(mode);
    const fs::path json = dir_ / (std::string("udp-") + mode + ".json");
    ToolRun r = RunTool({"--set", "transport.kind=udp", "--set", std::string("runtime.threading=") + mode, "--count",
                         "300", "--warmup", "30", "--json", json});
    const Value v = CheckRun(r, "udp", json);
    // pollux-latency turns udp.kernel_timestamps on: the kernel's TX and RX software stamps
    // (SO_TIMESTAMPING) split the path into send completion, kernel/wire and receive.
    if (const Value* st = v.get("stages")) {
      ASSERT_EQ(st->arr.size(), static_cast<std::size_t>(kStageCount));
      EXPECT_FALSE(st->arr[kSendCompletion - 1].get("absent")->b) << r.out;
      EXPECT_FALSE(st->arr[kKernelRx - 1].get("absent")->b) << r.out;
      EXPECT_FALSE(st->arr[kReceive - 1].get("absent")->b) << r.out;
      EXPECT_EQ(st->arr[kReceive - 1].get("from")->str, "kernel_rx") << r.out;
    }
    const Value* floor = v.get("floor");
    EXPECT_TRUE(floor != nullptr && floor->is_object()) << r.out;
    // The third, library-only traced pair separates the library's tracing from the kernel's
    // timestamps: its RTT/2 and end-to-end, and the kernel's cost on top.
    const Value* lib = v.get("library_only");
    ASSERT_TRUE(lib != nullptr && lib->is_object()) << r.out;
    EXPECT_TRUE(lib->get("rtt_half_p50_ns")->is_number()) << r.out;
    EXPECT_GT(lib->get("count")->num, 0) << r.out;
    EXPECT_TRUE(lib->get("end_to_end_p50_ns")->is_number()) << r.out;
    for (const char* k : {"kernel_timestamps_cost_pct", "traced_perturbation_pct", "decomposed_coverage_pct"}) {
      EXPECT_TRUE(v.get(k) != nullptr && v.get(k)->is_number()) << k << " in " << r.out;
    }
    EXPECT_THAT(r.out, HasSubstr("traced (library stamps only)"));
    EXPECT_THAT(r.out, HasSubstr("the kernel's timestamps cost"));
  }
}

// The streams pollux-latency adds on UDP: the library-only pair and the untraced pair turn the
// kernel's timestamps off per stream, the decomposed traced pair keeps the transport's.
TEST_F(LatencySmoke, UdpLibraryOnlyStreamsTurnKernelTimestampsOff) {
  ToolRun r = RunTool({"--set", "transport.kind=udp", "--print-config"});
  ASSERT_EQ(r.status, 0) << r.out;
  for (const char* topic : {"lat.ping.t", "lat.pong.t", "lat.ping.u", "lat.pong.u", "lat.ping.l", "lat.pong.l"}) {
    const std::size_t at = r.out.find(std::string("topic = \"") + topic + "\"");
    ASSERT_NE(at, std::string::npos) << topic << " in " << r.out;
    const std::size_t end = r.out.find("[[streams]]", at);
    const std::string table = r.out.substr(at, end == std::string::npos ? std::string::npos : end - at);
    const bool traced_pair = topic[9] == 't';
    EXPECT_EQ(table.find("kernel_timestamps = false") != std::string::npos, !traced_pair) << topic << ": " << table;
  }
  ToolRun off = RunTool({"--set", "transport.kind=udp", "--set", "udp.kernel_timestamps=false", "--print-config"});
  ASSERT_EQ(off.status, 0) << off.out;
  EXPECT_THAT(off.out, Not(HasSubstr("lat.ping.l"))) << off.out;
}

// With udp.kernel_timestamps off (the library's default) the kernel stages are absent and say
// why; receive is still UDP's own stamp (recvmmsg return), not an alias of delivery.
TEST_F(LatencySmoke, UdpWithoutKernelTimestamps) {
  const fs::path json = dir_ / "udp-nokts.json";
  ToolRun r = RunTool({"--set", "transport.kind=udp", "--set", "runtime.threading=inline", "--set",
                       "udp.kernel_timestamps=false", "--count", "200", "--warmup", "20", "--json", json});
  const Value v = CheckRun(r, "udp", json);
  EXPECT_THAT(r.out, HasSubstr("udp.kernel_timestamps = false"));
  if (const Value* st = v.get("stages")) {
    ASSERT_EQ(st->arr.size(), static_cast<std::size_t>(kStageCount));
    EXPECT_TRUE(st->arr[kSendCompletion - 1].get("absent")->b) << r.out;
    EXPECT_TRUE(st->arr[kKernelRx - 1].get("absent")->b) << r.out;
    EXPECT_FALSE(st->arr[kReceive - 1].get("absent")->b) << r.out;
    EXPECT_FALSE(st->arr[kDelivery - 1].get("absent")->b) << r.out;
  }
  const Value* lib = v.get("library_only");
  EXPECT_TRUE(lib != nullptr && lib->is_null()) << r.out;
}

TEST_F(LatencySmoke, ConfigFileAndPlots) {
  const fs::path cfg = dir_ / "lat.toml";
  {
    std::ofstream f(cfg);
    f << "[runtime]\nthreading = \"shared\"\nidle = \"yield\"\n[pool]\nhugepages = \"off\"\n";
  }
  const fs::path json = dir_ / "cfg.json", plots = dir_ / "plots";
  const bool have_gnuplot = std::system("command -v gnuplot >/dev/null 2>&1") == 0;
  std::vector<std::string> args = {"--config", cfg, "--count", "200", "--warmup", "20", "--json", json};
  if (have_gnuplot) {
    args.push_back("--plot");
    args.push_back(plots);
  }
  ToolRun r = RunTool(args);
  const Value v = CheckRun(r, "shm", json);
  EXPECT_THAT(r.out, HasSubstr(cfg.string()));
  const Value* threading = v.get("threading");
  EXPECT_TRUE(threading != nullptr && threading->str == "shared") << r.out;
  if (have_gnuplot) {
    for (const char* png : {"latency-stages.png", "latency-percentiles.png"}) {
      const std::string data = ReadFile(plots / png);
      EXPECT_EQ(data.substr(0, 4), "\x89PNG") << png << "\n" << r.out;
    }
  }
  ToolRun missing = RunTool({"--config", (dir_ / "nope.toml").string()});
  EXPECT_EQ(missing.status, 64) << missing.out;
  EXPECT_THAT(missing.out, HasSubstr("nope.toml: cannot open config file"));
}

TEST_F(LatencySmoke, RateMode) {
  const fs::path json = dir_ / "rate.json";
  ToolRun r = RunTool({"--rate", "20k", "--count", "500", "--warmup", "50", "--json", json});
  const Value v = CheckRun(r, "shm", json);
  const Value* mode = v.get("mode");
  EXPECT_TRUE(mode != nullptr && mode->str == "rate");
  const Value* received = v.get("received");
  EXPECT_TRUE(received != nullptr && received->num == 1100) << r.out;  // 2 x (500 + 50)
}

TEST_F(LatencySmoke, AbPairs) {
  const fs::path json = dir_ / "ab.json";
  ToolRun r = RunTool({"--ab", "runtime.idle=yield,backoff", "--count", "100", "--warmup", "10", "--json", json}, 300);
  const Value v = CheckRun(r, "shm", json);
  EXPECT_THAT(r.out, HasSubstr("A/B runtime.idle: yield (A, before) vs backoff (B, after), 3 interleaved pairs"));
  const Value* ab = v.get("ab");
  ASSERT_TRUE(ab != nullptr && ab->is_array() && ab->arr.size() == 1) << r.out;
  const Value& e = ab->arr[0];
  EXPECT_EQ(e.get("key")->str, "runtime.idle");
  EXPECT_EQ(e.get("a")->str, "yield");
  EXPECT_EQ(e.get("b")->str, "backoff");
  ASSERT_TRUE(e.get("pairs") != nullptr && e.get("pairs")->is_array());
  EXPECT_EQ(e.get("pairs")->arr.size(), 3u);
  EXPECT_TRUE(e.get("delta_ns") != nullptr && e.get("delta_ns")->is_number());
  for (const Value& p : e.get("pairs")->arr) {
    EXPECT_TRUE(p.get("a") != nullptr && p.get("a")->get("stages") != nullptr);
    EXPECT_TRUE(p.get("b") != nullptr && p.get("b")->get("stages") != nullptr);
  }
}

// ---- stopping, and the processes and files a run leaves ---------------------------------------

// The tool's children (the pong process), from /proc/<pid>/stat's ppid field.
std::vector<pid_t> ChildrenOf(pid_t parent) {
  std::vector<pid_t> out;
  DIR* d = opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const std::size_t close = stat.rfind(')');  // the command name may hold spaces
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    char state = 0;
    int ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) out.push_back(pid);
  }
  closedir(d);
  return out;
}

// /proc/<pid>/status's State line ("" when there is no such process), for messages.
std::string ProcessState(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("State:", 0) == 0) return line;
  }
  return "";
}

// Polls until `done` holds or `seconds` pass; returns `done()`. Waits that end sooner cost nothing.
template <typename F>
bool PollUntil(F&& done, int seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return done();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// What a run of the tool with pid `tool` has in /dev/shm (its default runtime.shm_dir): files
// named after its runs (pollux-lat<pid>r<run>-...) and CPU claims naming them.
std::vector<std::string> RunFiles(pid_t tool) {
  std::vector<std::string> out;
  const std::string prefix = "pollux-lat" + std::to_string(tool) + "r";
  const std::string owner = "name lat" + std::to_string(tool) + "r";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/dev/shm", ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0) out.push_back(name);
    if (name.rfind("pollux-cpu-", 0) == 0 && ReadFile(e.path()).find(owner) != std::string::npos) out.push_back(name);
  }
  return out;
}

// Removes what RunFiles finds (a test that killed the tool outright cleans up after it).
void RemoveRunFiles(pid_t tool) {
  for (const std::string& f : RunFiles(tool)) fs::remove(fs::path("/dev/shm") / f);
}

// Waits for the tool's "measuring" line (its first measured round trip is in) and returns the
// pong process's pid and start time; fails the test (pid 0) when either does not come.
struct Pong {
  pid_t pid = 0;
  std::uint64_t start = 0;
};
// On failure the tool and every child it has are killed: a tool that does not stop its children
// must not leave them to the machine.
Pong WaitUntilMeasuring(testing::Child& p) {
  const bool measuring = p.wait_for_output(
      [](const std::string& out) { return out.find("measuring (warm-up done)") != std::string::npos; }, 200);
  EXPECT_TRUE(measuring) << "no \"measuring\" line; output:\n" << p.output;
  if (!measuring) {
    for (pid_t c : ChildrenOf(p.pid)) kill(c, SIGKILL);
    p.signal(SIGKILL);
    return {};
  }
  const std::vector<pid_t> children = ChildrenOf(p.pid);
  EXPECT_EQ(children.size(), 1u) << "the tool's children while it measures: " << children.size();
  if (children.size() != 1) return {};
  return {children[0], core::process_start_time(children[0])};
}

// Whether the process `pong` is gone: no such pid, or the pid now names a process that started
// later (reused).
bool Gone(const Pong& pong) { return core::process_start_time(pong.pid) != pong.start; }

// Sends `sig` (named `name`) to a measuring tool: it stops with 128 + sig, says why, and has
// reaped its pong process (the pid is gone at once: a child left running, or a zombie nobody
// reaped, keeps it) and removed the run's files.
void ExpectStoppedBy(testing::Child& p, const Pong& pong, int sig, const std::string& name) {
  p.signal(sig);
  const int status = p.wait(120);
  EXPECT_FALSE(p.killed_after_timeout()) << p.output;
  EXPECT_EQ(status, 128 + sig) << p.output;
  EXPECT_THAT(p.output, HasSubstr("pollux-latency: stopped by " + name)) << p.output;
  EXPECT_TRUE(PollUntil([&] { return Gone(pong); }, 30))
      << "pong process " << pong.pid << " still there: " << ProcessState(pong.pid);
  if (!Gone(pong)) kill(pong.pid, SIGKILL);
  const std::vector<std::string> left = RunFiles(p.pid);
  EXPECT_TRUE(left.empty()) << "left in /dev/shm: " << ::testing::PrintToString(left);
}

// Ctrl-C in the middle of a measurement: the tool stops, prints what it measured (and writes it
// to --json, marked), reaps the pong process and removes the run's stream logs and CPU claims,
// and exits 130. Ping-pong with a count no run finishes.
TEST_F(LatencySmoke, SigintMidRunStopsReapsThePongProcessAndRemovesTheRunsFiles) {
  for (const char* transport : {"shm", "udp"}) {
    SCOPED_TRACE(transport);
    const fs::path json = dir_ / (std::string("sigint-") + transport + ".json");
    testing::Child p = Latency({"--set", std::string("transport.kind=") + transport, "--count", "1000000000",
                                "--warmup", "100", "--json", json.string()});
    const Pong pong = WaitUntilMeasuring(p);
    if (pong.pid == 0) continue;
    if (std::string(transport) == "shm") {
      // The run's files exist while it runs (so that their absence below means something).
      EXPECT_GE(RunFiles(p.pid).size(), 4u) << "the four stream logs of a shm run";
    }
    ExpectStoppedBy(p, pong, SIGINT, "SIGINT");  // 130
    EXPECT_THAT(p.output,
                ::testing::ContainsRegex("interrupted by SIGINT after [1-9][0-9]* of the [0-9]+ round trips"));
    EXPECT_THAT(p.output, HasSubstr("end-to-end (one-way, sum of stages)"));
    std::string err;
    const std::string text = ReadFile(json);
    auto v = jsonlite::Parse(text, &err);
    ASSERT_TRUE(v.has_value()) << err << "\n" << text << "\n" << p.output;
    const Value* in = v->get("interrupted");
    ASSERT_TRUE(in != nullptr && in->is_object()) << text;
    EXPECT_EQ(in->get("signal")->str, "SIGINT") << text;
    EXPECT_GT(in->get("completed")->num, 0) << text;
    RemoveRunFiles(p.pid);
  }
}

// SIGTERM is handled like Ctrl-C: exit status 143.
TEST_F(LatencySmoke, SigtermStopsTheRunLikeSigint) {
  testing::Child p = Latency({"--count", "1000000000", "--warmup", "100"});
  const Pong pong = WaitUntilMeasuring(p);
  ASSERT_NE(pong.pid, 0);
  ExpectStoppedBy(p, pong, SIGTERM, "SIGTERM");  // 143
  RemoveRunFiles(p.pid);
}

// The pong process dies with its parent however the parent dies: killed outright (SIGKILL: no
// handler runs), the parent cannot stop it, but the parent-death signal does, and the pong
// process then closes its Context - removing its own stream logs - before it exits.
TEST_F(LatencySmoke, PongProcessDiesWithItsParent) {
  testing::Child p = Latency({"--count", "1000000000", "--warmup", "100"});
  const Pong pong = WaitUntilMeasuring(p);
  ASSERT_NE(pong.pid, 0);
  p.signal(SIGKILL);
  EXPECT_EQ(p.wait(60), 128 + SIGKILL);
  // Orphaned, it is init's to reap: it counts as gone once it no longer runs (a zombie).
  EXPECT_TRUE(PollUntil([&] { return Gone(pong) || !core::process_alive(static_cast<int>(pong.pid), pong.start); }, 60))
      << "pong process " << pong.pid << " outlived its parent: " << ProcessState(pong.pid);
  if (!Gone(pong)) kill(pong.pid, SIGKILL);
  // The pong side publishes lat.pong.t and lat.pong.u (stream ids 2147480002, 2147480004): the
  // logs it created are gone; the killed parent's stay (removed here).
  const std::vector<std::string> left = RunFiles(p.pid);
  for (const std::string& f : left) {
    EXPECT_EQ(f.find("-stream-2147480002.log"), std::string::npos) << ::testing::PrintToString(left);
    EXPECT_EQ(f.find("-stream-2147480004.log"), std::string::npos) << ::testing::PrintToString(left);
  }
  RemoveRunFiles(p.pid);
}

// ---- UDP ports ---------------------------------------------------------------------------------

// UDP sockets bound to 0.0.0.0:`ports` without SO_REUSEADDR (nobody else can bind them); a port
// something already holds is held all the same.
struct PortHolder {
  std::vector<int> fds;
  int held = 0;
  void hold(int port) {
    const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
      fds.push_back(fd);
      ++held;
    } else if (fd >= 0) {
      close(fd);
    }
  }
  ~PortHolder() {
    for (int fd : fds) close(fd);
  }
};

// The ports the tool once computed for its streams (52000 + a pid-derived offset, inside the
// kernel's ephemeral range) are held by another socket when it starts - held before it execs,
// from its pid: the run picks free ports and succeeds.
TEST_F(LatencySmoke, UdpRunPicksFreePortsWhenOthersHoldTheOnesItUsedToCompute) {
  PortHolder holder;
  const fs::path json = dir_ / "udp-held.json";
  testing::Child p = Latency({"--set", "transport.kind=udp", "--set", "runtime.threading=inline", "--count", "200",
                              "--warmup", "20", "--json", json.string()},
                             [&](pid_t pid) {
                               const int base = 52000 + static_cast<int>(pid % 400) * 32;
                               for (int i = 0; i < 8; ++i) holder.hold(base + i);
                             });
  const int status = p.wait(300);
  EXPECT_GT(holder.held, 0) << "none of the ports could be held: the test shows nothing";
  EXPECT_FALSE(p.killed_after_timeout()) << p.output;
  const Value v = CheckRun({status, p.output}, "udp", json);
  EXPECT_THAT(p.output, Not(HasSubstr("already in use"))) << p.output;
}

// A udp.port given in the configuration is kept: the streams take it and the next five.
TEST_F(LatencySmoke, UdpPortConfiguredIsKept) {
  ToolRun r = RunTool({"--set", "transport.kind=udp", "--set", "udp.port=21000", "--print-config"});
  ASSERT_EQ(r.status, 0) << r.out;
  for (int i = 0; i < 6; ++i) EXPECT_THAT(r.out, HasSubstr("udp_port = " + std::to_string(21000 + i))) << r.out;
  ToolRun high = RunTool({"--set", "transport.kind=udp", "--set", "udp.port=65533"});
  EXPECT_EQ(high.status, 64) << high.out;
  EXPECT_THAT(high.out, HasSubstr("past 65535"));
}

}  // namespace
}  // namespace pollux::latency
