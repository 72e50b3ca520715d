#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/config.h"
#include "tests/support/config_errors.h"
#include "transport/shm/shm_config.h"
#include "transport/udp/udp_config.h"

namespace pollux::core {
namespace {

std::string error_of(std::string_view toml, std::string_view source = "feed.toml") {
  auto c = parse_config(toml, source);
  EXPECT_FALSE(c.ok()) << "expected an error for:\n" << toml;
  return c.ok() ? "" : std::string(c.status().message());
}

void ExpectErrors(std::initializer_list<testing::ConfigErrorCase> cases) {
  testing::expect_config_errors([](std::string_view toml) { return error_of(toml); }, cases);
}

TEST(ConfigTest, EmptyIsAllDefaults) {
  auto c = parse_config("", "x.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->runtime.threading, ThreadingMode::kDedicated);
  EXPECT_EQ(c->runtime.idle, IdleKind::kAdaptive);
  EXPECT_EQ(c->transport, TransportKind::kShm);
  EXPECT_EQ(transport::shm::config(*c).log_size, 16u << 20);
  EXPECT_EQ(transport::shm::config(*c).flow_control, transport::shm::FlowControl::kLossy);
  EXPECT_EQ(c->rings.capacity, 1024u);
  EXPECT_TRUE(c->streams.empty());
}

TEST(ConfigTest, ParsesEveryKind) {
  auto c = parse_config(R"(
[runtime]
threading = "inline"
pollers = 2
poller_cores = [1, 0]
idle = "yield"
name = "feed-a"
[pool]
slot_size = "4KiB"
hugepages = "off"
[rings]
capacity = 256
[shm]
log_size = "1MiB"
flow_control = "backpressure"
[[streams]]
topic = "itch.0"
id = 7
trace = true
trace_every = 100
)",
                        "x.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->runtime.threading, ThreadingMode::kInline);
  EXPECT_EQ(c->runtime.pollers, 2u);
  EXPECT_EQ(c->runtime.poller_cores, (std::vector<int>{1, 0}));
  EXPECT_EQ(c->runtime.idle, IdleKind::kYield);
  EXPECT_EQ(c->runtime.name, "feed-a");
  EXPECT_EQ(c->pool.slot_size, 4096u);
  EXPECT_EQ(c->pool.hugepages, HugePages::kOff);
  EXPECT_EQ(c->rings.capacity, 256u);
  EXPECT_EQ(transport::shm::config(*c).log_size, 1u << 20);
  EXPECT_EQ(transport::shm::config(*c).flow_control, transport::shm::FlowControl::kBackpressure);
  ASSERT_EQ(c->streams.size(), 1u);
  EXPECT_EQ(c->streams[0].topic, "itch.0");
  EXPECT_EQ(c->stream_id("itch.0"), 7u);
  EXPECT_TRUE(c->streams[0].trace);
  EXPECT_EQ(c->streams[0].trace_every, 100u);
}

TEST(ConfigTest, BadEnumNamesFileLineKeyAndChoices) {
  EXPECT_EQ(error_of("# comment\n\n[runtime]\npollers = 1\nthreading = \"dedicted\"\n"),
            "feed.toml:5: runtime.threading: expected dedicated|shared|inline, got \"dedicted\"");
}

TEST(ConfigTest, UnknownKeyIsAnErrorWithSuggestion) {
  ExpectErrors({
      {"[runtime]\ntreading = \"inline\"\n",
       "feed.toml:2: runtime.treading: unknown key (did you mean runtime.threading?)"},
      {"[runtim]\nthreading = \"inline\"\n", "feed.toml:1: runtim: unknown key (did you mean runtime?)"},
      {"[[streams]]\ntopic = \"a\"\nid = 1\ntrase = true\n",
       "feed.toml:4: streams[0].trase: unknown key (did you mean trace?)"},
  });
}

// A key written in the wrong table is answered with the table it belongs in, not with the
// nearest spelling: `kind = "udp"` at the top level is transport.kind (rings.kind is the closer
// string and also a "kind", but it does not take "udp").
TEST(ConfigTest, KeyInTheWrongTableSuggestsTheTableThatHasIt) {
  ExpectErrors({
      {"kind = \"udp\"\n",
       "feed.toml:1: kind: unknown key (did you mean transport.kind? kind belongs in the [transport] table)"},
      {"[runtime]\nthreading = \"inline\"\nkind = \"udp\"\n",
       "feed.toml:3: runtime.kind: unknown key (did you mean transport.kind? kind belongs in the [transport] table)"},
      {"[transport]\nkind = \"shm\"\n[shm]\nkind = \"boost\"\n",
       "feed.toml:4: shm.kind: unknown key (did you mean rings.kind? kind belongs in the [rings] table)"},
      // A value neither takes: both tables are named.
      {"[shm]\nkind = 5\n", "feed.toml:2: shm.kind: unknown key (did you mean rings.kind or transport.kind?)"},
      {"[rdma]\ninterface = \"eth0\"\n",
       "feed.toml:2: rdma.interface: unknown key (did you mean udp.interface? interface belongs in the [udp] table)"},
      {"[runtime]\nspin_factor = 2.0\n",
       "feed.toml:2: runtime.spin_factor: unknown key (did you mean runtime.adaptive.spin_factor? spin_factor "
       "belongs in the [runtime.adaptive] table)"},
      {"[adaptive]\nspin_factor = 2.0\n", "feed.toml:1: adaptive: unknown key (did you mean [runtime.adaptive]?)"},
      {"[[streams]]\ntopic = \"a\"\nid = 1\ninterface = \"lo\"\n",
       "feed.toml:4: streams[0].interface: unknown key (did you mean udp.interface? interface belongs in the [udp] "
       "table)"},
      {"[udp]\ntopic = \"a\"\n",
       "feed.toml:2: udp.topic: unknown key (did you mean [[streams]] topic? topic is a key of each [[streams]] "
       "entry)"},
      // A plain misspelling still gets the nearest key of its own table.
      {"[runtime]\nthreding = \"inline\"\n",
       "feed.toml:2: runtime.threding: unknown key (did you mean runtime.threading?)"},
  });
}

TEST(ConfigTest, WrongTypeAndRange) {
  ExpectErrors({
      {"[runtime]\npollers = \"two\"\n", "feed.toml:2: runtime.pollers: expected an integer, got \"two\""},
      {"[runtime]\npollers = 0\n", "feed.toml:2: runtime.pollers: expected 1..64, got 0"},
      {"[runtime]\ncounters = 1\n", "feed.toml:2: runtime.counters: expected true|false, got 1"},
      {"[runtime]\npoller_cores = 3\n", "feed.toml:2: runtime.poller_cores: expected an array of CPU numbers, got 3"},
      {"[runtime]\nname = \"a b\"\n",
       "feed.toml:2: runtime.name: expected 1-40 characters from [A-Za-z0-9_.-], got \"a b\""},
      {"runtime = 5\n", "feed.toml:1: runtime: expected a table [runtime], got 5"},
  });
}

TEST(ConfigTest, SizesAndPowersOfTwo) {
  ExpectErrors({
      {"[rings]\ncapacity = 1000\n", "feed.toml:2: rings.capacity: expected a power of two, got 1000"},
      {"[shm]\nlog_size = \"3MiB\"\n", "feed.toml:2: shm.log_size: expected a power of two, got 3145728"},
      {"[shm]\nlog_size = \"lots\"\n",
       "feed.toml:2: shm.log_size: expected a size like 16777216 or \"16MiB\", got \"lots\""},
      {"[shm]\nlog_size = 1024\n", "feed.toml:2: shm.log_size: expected 65536..4294967296 bytes, got 1024"},
  });
}

// A size whose suffix multiplication overflows 64 bits must not wrap around
// ("17592186044432MiB" = 2^64 + 16 MiB is not 16 MiB). Every size key goes through
// the same conversion; each overflow is an error naming file:line:key.
TEST(ConfigTest, SizeOverflowIsAnErrorNotAWrap) {
  ExpectErrors({
      {"[shm]\nlog_size = \"17592186044432MiB\"\n",
       "feed.toml:2: shm.log_size: \"17592186044432MiB\" does not fit in 64 bits; expected 65536..4294967296 bytes"},
      {"[udp]\nretransmit_buffer = \"17179869185GiB\"\n",
       "feed.toml:2: udp.retransmit_buffer: \"17179869185GiB\" does not fit in 64 bits; expected 65536..4294967296 "
       "bytes"},
      {"\n[pool]\nslot_size = \"18014398509481985KiB\"\n",
       "feed.toml:3: pool.slot_size: \"18014398509481985KiB\" does not fit in 64 bits; expected 128..16777216 bytes"},
      {"[udp]\nsocket_rcvbuf = \"18446744073709551616\"\n",
       "feed.toml:2: udp.socket_rcvbuf: \"18446744073709551616\" does not fit in 64 bits; expected 4096..2147483648 "
       "bytes"},
      // The largest sizes that do fit are range errors, not overflows.
      {"[shm]\nlog_size = \"17592186044415MiB\"\n",
       "feed.toml:2: shm.log_size: expected 65536..4294967296 bytes, got 18446744073708503040"},
      {"[shm]\nlog_size = \"18446744073709551615B\"\n",
       "feed.toml:2: shm.log_size: expected 65536..4294967296 bytes, got 18446744073709551615"},
  });
  // Suffixes still work, in any case, with spaces.
  auto c = parse_config("[shm]\nlog_size = \"4GiB\"\n[udp]\nretransmit_buffer = \" 64 kib\"\n", "x.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(transport::shm::config(*c).log_size, 4ull << 30);
  EXPECT_EQ(transport::udp::config(*c).retransmit_buffer, 64u << 10);
}

// The other numeric conversions: integers beyond int64 are TOML errors with line and column;
// every integer key is range-checked before it is narrowed; negative sizes are refused.
TEST(ConfigTest, IntegerConversionsNeverWrap) {
  const std::string big = error_of("[runtime]\npollers = 9223372036854775808\n");
  EXPECT_EQ(big.rfind("feed.toml:2:", 0), 0u) << big;
  ExpectErrors({
      {"[runtime]\npollers = 4294967297\n", "feed.toml:2: runtime.pollers: expected 1..64, got 4294967297"},
      {"[udp]\nport = 4294967297\n", "feed.toml:2: udp.port: expected 1..65535, got 4294967297"},
      {"[udp]\nnak_retry_max_us = -1\n", "feed.toml:2: udp.nak_retry_max_us: expected 10..60000000, got -1"},
      {"[rdma]\ngid_index = -2\n", "feed.toml:2: rdma.gid_index: expected -1..4095, got -2"},
      {"[udp]\nfault_seed = -1\n", "feed.toml:2: udp.fault_seed: expected 0..9223372036854775807, got -1"},
      {"[shm]\nlog_size = -65536\n", "feed.toml:2: shm.log_size: expected a size, got -65536"},
      {"[shm]\nliveness_timeout_ms = 1e3\n", "feed.toml:2: shm.liveness_timeout_ms: expected an integer, got 1000"},
      {"[udp]\nfault_loss = nan\n", "feed.toml:2: udp.fault_loss: expected a probability 0.0..1.0, got nan"},
      {"[runtime]\npoller_cores = [0, 4096]\n",
       "feed.toml:2: runtime.poller_cores: element 1: expected 0..4095, got 4096"},
      {"[rdma]\npeers = [\"10.0.0.1:7471\", \"10.0.0.2:4294967297\"]\n",
       "feed.toml:2: rdma.peers: element 1: expected \"a.b.c.d:port\" (IPv4 address and port 1..65535), got "
       "\"10.0.0.2:4294967297\""},
  });
}

TEST(ConfigTest, StreamsAreValidated) {
  ExpectErrors({
      {"[[streams]]\nid = 1\n", "feed.toml:1: streams[0].topic: missing (every [[streams]] entry needs a topic)"},
      {"[[streams]]\ntopic = \"a\"\n", "feed.toml:1: streams[0].id: missing (every [[streams]] entry needs an id)"},
      {"[[streams]]\ntopic = \"a\"\nid = 1\n[[streams]]\ntopic = \"b\"\nid = 1\n",
       "feed.toml:4: streams[1].id: duplicate stream id 1"},
      {"[[streams]]\ntopic = \"a\"\nid = 1\n[[streams]]\ntopic = \"a\"\nid = 2\n",
       "feed.toml:4: streams[1].topic: duplicate topic \"a\""},
      {"[[streams]]\ntopic = \"a\"\nid = 0\n", "feed.toml:3: streams[0].id: expected 1..2147483647, got 0"},
      {"streams = 3\n", "feed.toml:1: streams: expected an array of tables ([[streams]]), got 3"},
  });
}

TEST(ConfigTest, StreamStartTakesLiveEarliestASequenceOrATime) {
  const std::string head =
      "[[recordings]]\ntopic = \"a\"\ndirectory = \"/tmp/r\"\n[[streams]]\ntopic = \"a\"\nid = 1\n";
  auto c = parse_config(head + "start = \"earliest\"\n", "x.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->streams[0].start, StreamConfig::Start::kEarliest);
  c = parse_config(head + "start = { sequence = 1234 }\n", "x.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->streams[0].start, StreamConfig::Start::kSequence);
  EXPECT_EQ(c->streams[0].start_sequence, 1234u);
  c = parse_config(head + "start = { time = \"2026-12-07T09:30:00.5+01:00\" }\n", "x.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->streams[0].start, StreamConfig::Start::kTime);
  EXPECT_EQ(c->streams[0].start_time_ns,
            1796635800'500'000'000 - 3600'000'000'000);  // date -u -d 2026-12-07T09:30:00Z +%s
  // The effective configuration prints it back as written.
  EXPECT_NE(c->to_toml().find("start = { time = \"2026-12-07T09:30:00.5+01:00\" }"), std::string::npos);
  c = parse_config("[[streams]]\ntopic = \"a\"\nid = 1\nstart = \"live\"\n", "x.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->streams[0].start, StreamConfig::Start::kLive);
  c = parse_config("[[streams]]\ntopic = \"a\"\nid = 1\nstart = \"earliest\"\narchive_dir = \"/r\"\n", "x.toml");
  ASSERT_TRUE(c.ok()) << c.status();

  const std::string want = "expected \"live\", \"earliest\", { sequence = N } or { time = \"RFC 3339 time\" }";
  ExpectErrors({
      {"[[streams]]\ntopic = \"a\"\nid = 1\nstart = \"later\"\n",
       "feed.toml:4: streams[0].start: " + want + ", got \"later\""},
      {"[[streams]]\ntopic = \"a\"\nid = 1\nstart = 5\n", "feed.toml:4: streams[0].start: " + want + ", got 5"},
      {"[[streams]]\ntopic = \"a\"\nid = 1\nstart = { sequence = 0 }\n",
       "feed.toml:4: streams[0].start: sequence: expected an integer >= 1, got 0"},
      {"[[streams]]\ntopic = \"a\"\nid = 1\nstart = { sequence = \"5\" }\n",
       "feed.toml:4: streams[0].start: sequence: expected an integer >= 1, got \"5\""},
      {"[[streams]]\ntopic = \"a\"\nid = 1\nstart = { time = \"yesterday\" }\n",
       "feed.toml:4: streams[0].start: time: expected an RFC 3339 time such as \"2026-12-07T09:30:00Z\", got "
       "\"yesterday\""},
      {"[[streams]]\ntopic = \"a\"\nid = 1\nstart = { time = \"2026-02-29T09:30:00Z\" }\n",
       "feed.toml:4: streams[0].start: time: expected an RFC 3339 time such as \"2026-12-07T09:30:00Z\", got "
       "\"2026-02-29T09:30:00Z\""},
      {"[[streams]]\ntopic = \"a\"\nid = 1\nstart = { offset = 3 }\n",
       "feed.toml:4: streams[0].start: " + want + ", got a table with \"offset\""},
      {"[[streams]]\ntopic = \"a\"\nid = 1\nstart = \"earliest\"\n",
       "feed.toml:1: streams[0].start: a start other than \"live\" reads the stream's recording: set "
       "archive_dir in this entry (the recorder's directory), or record the topic \"a\" here with a "
       "[[recordings]] entry"},
  });
}

TEST(ConfigTest, RecordingsTakeStreamAndDirAsOtherNamesOfTopicAndDirectory) {
  auto c = parse_config("[[recordings]]\nstream = \"a\"\ndir = \"/tmp/r\"\n", "x.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->recordings.size(), 1u);
  EXPECT_EQ(c->recordings[0].topic, "a");
  EXPECT_EQ(c->recordings[0].directory, "/tmp/r");
  ExpectErrors({
      {"[[recordings]]\nstream = \"a\"\ntopic = \"b\"\ndir = \"/r\"\n",
       "feed.toml:3: recordings[0].topic: given twice, as stream and as topic (stream is another name of topic): give "
       "one of them"},
      {"[[recordings]]\nstream = \"a\"\ndirectory = \"/r\"\ndir = \"/s\"\n",
       "feed.toml:3: recordings[0].directory: given twice, as dir and as directory (dir is another name of "
       "directory): give one of them"},
      {"[[recordings]]\ndir = \"/r\"\n",
       "feed.toml:1: recordings[0].topic: missing (every [[recordings]] entry names the stream's topic: topic = "
       "\"...\" or stream = \"...\")"},
      {"[[recordings]]\nstream = \"a\"\n",
       "feed.toml:1: recordings[0].directory: missing (where the recording's files go: directory = \"...\" or dir = "
       "\"...\")"},
  });
}

TEST(ConfigTest, Rfc3339) {
  std::int64_t ns = 0;
  ASSERT_TRUE(parse_rfc3339("1970-01-01T00:00:00Z", &ns));
  EXPECT_EQ(ns, 0);
  ASSERT_TRUE(parse_rfc3339("2000-03-01t00:00:00.000000001z", &ns));
  EXPECT_EQ(ns, 951868800'000'000'001);
  ASSERT_TRUE(parse_rfc3339("1969-12-31 23:59:59-00:30", &ns));
  EXPECT_EQ(ns, 1799'000'000'000);
  ASSERT_TRUE(parse_rfc3339("2024-02-29T12:00:00+00:00", &ns));
  EXPECT_EQ(ns, 1709208000'000'000'000);
  for (const char* bad :
       {"", "2026-12-07", "2026-12-07T09:30:00", "2026-13-01T00:00:00Z", "2026-12-32T00:00:00Z", "2026-12-07T24:00:00Z",
        "2026-12-07T09:30:00.Z", "2026-12-07T09:30:00Z ", "2026-12-07T09:30:00+1:00", "+2026-12-07T09:30:00Z"}) {
    EXPECT_FALSE(parse_rfc3339(bad, &ns)) << bad;
  }
}

TEST(ConfigTest, CrossFieldChecksPointAtTheKey) {
  EXPECT_EQ(error_of("[pool]\nslot_size = 8192\n[shm]\nlog_size = \"128KiB\"\n"),
            "feed.toml:2: pool.slot_size: 8192 is larger than shm.log_size/32 = 4096: frames that big do not fit the "
            "log; raise shm.log_size");
  EXPECT_EQ(error_of("[runtime]\npollers = 3\npoller_cores = [1]\n"),
            "feed.toml:3: runtime.poller_cores: lists 1 core(s) for 3 pollers");
}

TEST(ConfigTest, SyntaxErrorHasLineAndColumn) {
  const std::string e = error_of("[runtime]\nthreading = \n");
  EXPECT_EQ(e.rfind("feed.toml:2:", 0), 0u) << e;
  EXPECT_NE(e.find("TOML syntax error"), std::string::npos) << e;
}

TEST(ConfigTest, MissingFileNamesThePath) {
  auto c = load_config_file("/nonexistent/dir/feed.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("/nonexistent/dir/feed.toml"), absl::string_view::npos);
}

TEST(ConfigTest, FileErrorsUseThePath) {
  const std::string path = ::testing::TempDir() + "/pollux_cfg_test.toml";
  std::ofstream(path) << "[transport]\nkind = \"tcp\"\n";
  auto c = load_config_file(path);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(std::string(c.status().message()), path + ":2: transport.kind: expected shm|udp|rdma, got \"tcp\"");
}

// A directory of its own per test, removed afterwards.
class ConfigFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/pollux-cfg-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { (void)!std::system(("rm -rf '" + dir_ + "'").c_str()); }
  std::string dir_;
};

// Reads `path` on another thread: a reader that blocks (a FIFO opened for reading without
// O_NONBLOCK waits for a writer) fails the test after 30 s instead of hanging it; the FIFO is
// then opened for writing, which lets the stuck read return.
absl::StatusOr<std::string> ReadUnlessItBlocks(const std::string& path, bool* blocked) {
  std::future<absl::StatusOr<std::string>> f =
      std::async(std::launch::async, [path] { return read_config_file(path); });
  *blocked = f.wait_for(std::chrono::seconds(30)) != std::future_status::ready;
  if (*blocked) {
    const int w = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);
    if (w >= 0) ::close(w);
  }
  return f.get();
}

TEST_F(ConfigFileTest, FifoNobodyWritesIsRefusedWithoutBlocking) {
  const std::string fifo = dir_ + "/pollux.toml";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  bool blocked = false;
  absl::StatusOr<std::string> r = ReadUnlessItBlocks(fifo, &blocked);
  EXPECT_FALSE(blocked) << "read_config_file blocked on a FIFO nobody writes to";
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            fifo + ": not a regular file: it is a FIFO (a configuration is read from a regular file)")
      << r.status();
  // The library's loader goes through the same check.
  absl::StatusOr<Config> c = load_config_file(fifo);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(), r.status().message()) << c.status();
}

TEST_F(ConfigFileTest, DirectoryDeviceAndSocketAreRefusedWithTheirType) {
  const std::string sock = dir_ + "/s.toml";
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  ASSERT_LT(sock.size(), sizeof a.sun_path);
  std::memcpy(a.sun_path, sock.c_str(), sock.size() + 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
  for (const auto& [path, kind] : {std::pair<std::string, std::string>{dir_, "a directory"},
                                   {"/dev/zero", "a character device"},
                                   {"/dev/null", "a character device"},
                                   {sock, "a socket"}}) {
    absl::StatusOr<std::string> r = read_config_file(path);
    ASSERT_FALSE(r.ok()) << path << " was read: " << r->size() << " bytes";
    EXPECT_EQ(r.status().message(),
              path + ": not a regular file: it is " + kind + " (a configuration is read from a regular file)")
        << r.status();
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  }
  ::close(fd);
}

TEST_F(ConfigFileTest, FileOverTheCapIsRefusedAndOneAtTheCapIsRead) {
  const std::string big = dir_ + "/big.toml";
  {
    // A comment line repeated: valid TOML, so only the size can be what is refused.
    std::ofstream f(big, std::ios::binary);
    const std::string line(1023, '#');
    for (std::size_t i = 0; i < kMaxConfigFileBytes / 1024; ++i) f << line << '\n';
  }
  ASSERT_EQ(::truncate(big.c_str(), static_cast<off_t>(kMaxConfigFileBytes)), 0);
  absl::StatusOr<std::string> at_cap = read_config_file(big);
  ASSERT_TRUE(at_cap.ok()) << at_cap.status();
  EXPECT_EQ(at_cap->size(), kMaxConfigFileBytes);
  ASSERT_EQ(::truncate(big.c_str(), static_cast<off_t>(kMaxConfigFileBytes + 1)), 0);
  absl::StatusOr<std::string> over = read_config_file(big);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().message(),
            big +
                ": config file too large: 16777217 bytes, more than the 16 MiB a configuration may have (is it the "
                "right file?)")
      << over.status();
  absl::StatusOr<Config> c = load_config_file(big);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(), over.status().message());
}

// A file whose size says 0 (as every file in /proc does) is read to its end.
TEST(ConfigTest, FileWithoutASizeIsReadToItsEnd) {
  absl::StatusOr<std::string> r = read_config_file("/proc/self/status");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(*r, ::testing::HasSubstr("Pid:"));
}

TEST(ConfigTest, EffectiveConfigRoundTrips) {
  auto c = parse_config(
      "[runtime]\nthreading = \"shared\"\n[shm]\nlog_size = \"2MiB\"\n[[streams]]\ntopic = \"t\"\nid = 9\n", "a.toml");
  ASSERT_TRUE(c.ok());
  const std::string printed = c->to_toml();
  EXPECT_NE(printed.find("threading = \"shared\""), std::string::npos) << printed;
  EXPECT_NE(printed.find("# "), std::string::npos);  // help text
  auto again = parse_config(printed, "printed");
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << printed;
  EXPECT_EQ(again->to_toml().substr(again->to_toml().find('\n')), printed.substr(printed.find('\n')));
}

TEST(ConfigTest, UnconfiguredTopicsGetStableHighBitIds) {
  Config c;
  const std::uint32_t a = c.stream_id("alpha");
  EXPECT_EQ(a, c.stream_id("alpha"));
  EXPECT_NE(a, c.stream_id("beta"));
  EXPECT_NE(a & 0x80000000u, 0u);
}

}  // namespace
}  // namespace pollux::core

namespace pollux::core {
namespace {
TEST(ConfigAdaptive, SubTableAndDottedKeysAndErrorsWithLines) {
  auto a = parse_config("[runtime.adaptive]\nwakeup_cost_ns = 7000\nspin_quantile = 0.5\n", "a.toml");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->runtime.adaptive.wakeup_cost_ns, 7000);
  EXPECT_EQ(a->runtime.adaptive.spin_quantile, 0.5);
  auto b = parse_config("[runtime]\nidle = \"interrupt\"\nadaptive.max_spin_ns = 5000\n", "b.toml");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->runtime.adaptive.max_spin_ns, 5000);
  EXPECT_EQ(b->runtime.idle, IdleKind::kInterrupt);
  auto c = parse_config("[runtime.adaptive]\nwakeup_cost = 1\n", "c.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("c.toml:2: runtime.adaptive.wakeup_cost: unknown key"),
            std::string::npos)
      << c.status();
  // Cross-field rule from ControllerOptions::validate(), reported at the offending key's line.
  auto d = parse_config("[runtime.adaptive]\ndense_gap_ns = 50000\nbusy_exit_gap_ns = 1000\n", "d.toml");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(std::string(d.status().message()).find("d.toml:3: runtime.adaptive.busy_exit_gap_ns"), std::string::npos)
      << d.status();
  auto e = parse_config("[rings]\nkind = \"boost\"\n", "e.toml");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->rings.kind, RingKind::kBoost);
  EXPECT_FALSE(parse_config("[rings]\nkind = \"mpmc\"\n", "f.toml").ok());
}
}  // namespace
}  // namespace pollux::core
