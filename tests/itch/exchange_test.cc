// pollux-exchange from the outside: its command line, and a run on loopback multicast that
// checks what each line carries, a re-request answered with line A's bytes, and refusals
// counted in the summary JSON. No timing asserts: waits only bound a hang.
#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "itch/generator.h"
#include "itch/mapped_file.h"
#include "itch/moldudp64.h"
#include "itch/reader.h"
#include "tests/itch/test_util.h"

extern char** environ;

namespace pollux::itch {
namespace {

using Clock = std::chrono::steady_clock;

// Ports and groups unique per test process (tests/udp/transport_test.cc's pattern), below
// the ephemeral range; the tests of one process run one after another, each waiting for
// its child, so they may share ports.
uint32_t base_port() { return 24000 + static_cast<uint32_t>(getpid() % 600) * 8; }
std::string group(int line) {
  return absl::StrFormat("239.255.%d.%d", 1 + getpid() % 200, 1 + 2 * ((getpid() / 200) % 100) + line);
}

using testing::Cli;
Cli RunCli(const std::string& args) { return testing::RunProgram(POLLUX_EXCHANGE_BIN, args); }

TEST(ExchangeCliTest, HelpUnknownFlagsMissingAndBadValues) {
  const Cli h = RunCli("--help");
  EXPECT_EQ(h.rc, 0) << h.out;
  for (const char* flag : {"--itch", "--generate", "--line-a", "--line-b", "--rerequest-port", "--interface",
                           "--drop-a", "--drop-b", "--seed", "--rate", "--session", "--linger-ms", "--speed",
                           "--history", "--request-limit", "--delay-b-us", "--no-rerequest", "--heartbeat-ms",
                           "--mtu", "--summary-json", "--max-requesters"}) {
    EXPECT_NE(h.out.find(flag), std::string::npos) << flag << "\n" << h.out;
  }
  const Cli bogus = RunCli("--bogus 1");
  EXPECT_EQ(bogus.rc, 64) << bogus.out;
  EXPECT_NE(bogus.out.find("unknown flag '--bogus'"), std::string::npos) << bogus.out;

  const std::string a = "--line-a 239.255.0.1:24001", b = "--line-b 239.255.0.2:24002", p = "--rerequest-port 24003";
  const std::string src = "--generate 100";
  struct Missing {
    std::string args, named;
  };
  for (const Missing& m : {Missing{a + " " + b + " " + p, "--itch"}, Missing{src + " " + b + " " + p, "--line-a"},
                           Missing{src + " " + a + " " + p, "--line-b"},
                           Missing{src + " " + a + " " + b, "--rerequest-port"}}) {
    const Cli c = RunCli(m.args);
    EXPECT_EQ(c.rc, 64) << m.args << "\n" << c.out;
    EXPECT_NE(c.out.find(m.named), std::string::npos) << m.named << "\n" << c.out;
  }
  const std::string ok = src + " " + a + " " + b + " " + p;
  for (const std::string& bad : {std::string("--drop-b 101"), std::string("--rate fast"), std::string("--generate x"),
                                 std::string("--line-a 10.0.0.1:5"), std::string("--session ELEVENCHARS"),
                                 std::string("--interface nosuchif0"), std::string("--itch f.itch")}) {
    const Cli c = RunCli(ok + " " + bad);
    EXPECT_EQ(c.rc, 64) << bad << "\n" << c.out;
    EXPECT_NE(c.out.find("pollux-exchange: "), std::string::npos) << c.out;
  }
  const Cli stray = RunCli(ok + " extra");
  EXPECT_EQ(stray.rc, 64) << stray.out;
  EXPECT_NE(stray.out.find("unexpected argument \"extra\""), std::string::npos) << stray.out;
}

int JoinLine(const std::string& grp, uint32_t port) {
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  const int one = 1, big = 8 << 20;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  // As root the limit rmem_max does not apply; a full buffer would drop and flake.
  if (::setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big) != 0) {
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, grp.c_str(), &a.sin_addr);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
  ip_mreqn m{};
  m.imr_multiaddr = a.sin_addr;
  m.imr_ifindex = static_cast<int>(if_nametoindex("lo"));
  EXPECT_EQ(::setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof m), 0) << std::strerror(errno);
  return fd;
}

pid_t Spawn(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  std::string bin = POLLUX_EXCHANGE_BIN;
  argv.push_back(bin.data());
  std::vector<std::string> copy = args;
  for (std::string& s : copy) argv.push_back(s.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  EXPECT_EQ(posix_spawn(&pid, bin.c_str(), nullptr, nullptr, argv.data(), environ), 0);
  return pid;
}

// Exit status of `pid`, or -1 (after killing it) if it has not exited within `limit`.
int WaitExit(pid_t pid, std::chrono::milliseconds limit) {
  const auto end = Clock::now() + limit;
  int st = 0;
  while (::waitpid(pid, &st, WNOHANG) == 0) {
    if (Clock::now() > end) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &st, 0);
      return -1;
    }
    ::usleep(10000);
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// The summary JSON the exchange wrote at `path`, which is then removed.
std::string ReadAndRemove(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  std::remove(path.c_str());
  return ss.str();
}

uint64_t JsonField(const std::string& json, const std::string& key) {
  const size_t at = json.find("\"" + key + "\": ");
  if (at == std::string::npos) return ~uint64_t{0};
  return std::strtoull(json.c_str() + at + key.size() + 4, nullptr, 10);
}

struct Line {
  std::map<uint64_t, std::vector<uint8_t>> data;  // first sequence -> packet bytes
  std::vector<uint64_t> order;                    // first sequences as received
  uint64_t eos = 0;                               // end-of-session sequence (0: not yet)
  uint64_t bad = 0;
  uint64_t next = 1;                                      // after the last data packet
  std::vector<std::pair<uint64_t, uint64_t>> heartbeats;  // (its sequence, `next` then)
};

void Receive(int fd, Line& l, const mold::Session& s) {
  uint8_t buf[65536];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0) return;
    const mold::Packet p = mold::Parse(std::span<const uint8_t>(buf, static_cast<size_t>(n)), s);
    if (!p.ok()) {
      ++l.bad;
    } else if (p.kind == mold::Kind::kEndOfSession) {
      l.eos = p.sequence;
    } else if (p.kind == mold::Kind::kData && l.eos == 0) {
      l.order.push_back(p.sequence);
      l.data[p.sequence].assign(buf, buf + n);
      l.next = p.next_sequence();
    } else if (p.kind == mold::Kind::kHeartbeat) {
      l.heartbeats.emplace_back(p.sequence, l.next);
    }
  }
}

void SendRequest(int fd, uint32_t port, const mold::Session& s, uint64_t seq, uint16_t count) {
  uint8_t req[mold::kRequestSize];
  const auto r = mold::EncodeRequest(req, s, seq, count);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  ASSERT_EQ(::sendto(fd, r.data(), r.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to),
            static_cast<ssize_t>(r.size()));
}

int RequestSocket() {
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return fd;
}

// Runs the exchange and receives both lines until end of session on each (or `limit`).
struct Run2 {
  Line a, b;
  pid_t pid = -1;
  bool ended = false;
};
Run2 RunExchange(const std::vector<std::string>& extra, uint32_t port0,
                 const mold::Session& s = mold::Session::From("POLLUX0001")) {
  const uint32_t pa = port0, pb = port0 + 1, pr = port0 + 2;
  const int fa = JoinLine(group(0), pa), fb = JoinLine(group(1), pb);
  std::vector<std::string> args = {"--line-a", absl::StrFormat("%s:%u", group(0), pa),
                                   "--line-b", absl::StrFormat("%s:%u", group(1), pb),
                                   "--rerequest-port", std::to_string(pr), "--interface", "lo"};
  args.insert(args.end(), extra.begin(), extra.end());
  Run2 r;
  r.pid = Spawn(args);
  const auto end = Clock::now() + std::chrono::seconds(8);
  while (Clock::now() < end && (r.a.eos == 0 || r.b.eos == 0)) {
    pollfd p[2] = {{fa, POLLIN, 0}, {fb, POLLIN, 0}};
    ::poll(p, 2, 50);
    Receive(fa, r.a, s);
    Receive(fb, r.b, s);
  }
  r.ended = r.a.eos != 0 && r.b.eos != 0;
  if (!r.ended) {  // the caller's ASSERT returns: leave no child behind
    ::kill(r.pid, SIGKILL);
    ::waitpid(r.pid, nullptr, 0);
  }
  ::close(fa);
  ::close(fb);
  return r;
}

TEST(ExchangeTest, LinesRerequestsAndRefusals) {
  const std::string json = ::testing::TempDir() + "/exchange_" + std::to_string(getpid()) + ".json";
  const uint32_t pr = base_port() + 2;
  const mold::Session s = mold::Session::From("POLLUX0001");
  const int rq = RequestSocket();
  Run2 r = RunExchange({"--generate", "20000", "--rate", "200000", "--linger-ms", "1500", "--drop-b", "30",
                        "--seed", "5", "--history", "15000", "--summary-json", json},
                       base_port());
  ASSERT_TRUE(r.ended) << "no end of session on both lines";
  EXPECT_EQ(r.a.eos, 20001u);
  EXPECT_EQ(r.b.eos, 20001u);
  EXPECT_EQ(r.a.bad + r.b.bad, 0u);

  // Line A: every message 1..20000, in order, exactly once.
  uint64_t next = 1;
  for (uint64_t first : r.a.order) {
    const mold::Packet p = mold::Parse(r.a.data[first], s);
    ASSERT_EQ(p.sequence, next) << "line A out of order or missing";
    next = p.next_sequence();
  }
  EXPECT_EQ(next, 20001u);

  // Line B: a strict subset of line A's packets, byte for byte.
  EXPECT_LT(r.b.data.size(), r.a.data.size());
  EXPECT_GT(r.b.data.size(), r.a.data.size() / 2);
  for (const auto& [first, bytes] : r.b.data) {
    ASSERT_TRUE(r.a.data.contains(first)) << first;
    EXPECT_EQ(bytes, r.a.data[first]) << first;
  }
  // The newest packet B missed (inside the 15000-message history) comes back as A sent it.
  uint64_t missed = 0;
  for (auto it = r.a.data.rbegin(); it != r.a.data.rend(); ++it) {
    if (!r.b.data.contains(it->first)) {
      missed = it->first;
      break;
    }
  }
  ASSERT_GT(missed, 5001u);
  const std::vector<uint8_t>& want = r.a.data[missed];
  const mold::Packet wp = mold::Parse(want, s);
  SendRequest(rq, pr, s, missed, wp.count);
  pollfd p{rq, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 3000), 1) << "no reply to the re-request";
  uint8_t reply[65536];
  const ssize_t n = ::recv(rq, reply, sizeof reply, 0);
  ASSERT_GT(n, 0);
  EXPECT_EQ(std::vector<uint8_t>(reply, reply + n), want);

  // Refused: another session, older than the history, beyond what was sent.
  SendRequest(rq, pr, mold::Session::From("OTHER"), missed, 1);
  SendRequest(rq, pr, s, 1, 10);
  SendRequest(rq, pr, s, 20001, 1);
  EXPECT_EQ(WaitExit(r.pid, std::chrono::seconds(8)), 0);
  ::close(rq);

  const std::string j = ReadAndRemove(json);
  EXPECT_EQ(JsonField(j, "messages_a"), 20000u) << j;
  EXPECT_EQ(JsonField(j, "dropped_a"), 0u) << j;
  EXPECT_EQ(JsonField(j, "packets_a"), r.a.data.size()) << j;
  EXPECT_EQ(JsonField(j, "packets_b"), r.b.data.size()) << j;
  EXPECT_EQ(JsonField(j, "packets_b") + JsonField(j, "dropped_b"), r.a.data.size()) << j;
  EXPECT_EQ(JsonField(j, "end_of_session_sequence"), 20001u) << j;
  EXPECT_EQ(JsonField(j, "requests"), 4u) << j;
  EXPECT_EQ(JsonField(j, "requests_served"), 1u) << j;
  EXPECT_EQ(JsonField(j, "refused_wrong_session"), 1u) << j;
  EXPECT_EQ(JsonField(j, "refused_too_old"), 1u) << j;
  EXPECT_EQ(JsonField(j, "refused_beyond_sent"), 1u) << j;
  EXPECT_EQ(JsonField(j, "requests_refused"), 3u) << j;
}

// The same seed drops the same line B packets; --no-rerequest receives but never answers.
TEST(ExchangeTest, SeedReproducesDropsAndNoRerequestIsCounted) {
  const std::string json = ::testing::TempDir() + "/exchange_nr_" + std::to_string(getpid()) + ".json";
  const uint32_t port0 = base_port() + 3;
  const mold::Session s = mold::Session::From("POLLUX0001");
  const std::vector<std::string> common = {"--generate", "3000", "--rate", "max", "--drop-a", "20",
                                           "--drop-b", "20", "--seed", "9", "--linger-ms", "1000"};
  std::vector<std::string> first = common;
  first.insert(first.end(), {"--no-rerequest", "--summary-json", json});
  const int rq = RequestSocket();
  Run2 r1 = RunExchange(first, port0);
  ASSERT_TRUE(r1.ended);
  SendRequest(rq, port0 + 2, s, 1, 5);
  EXPECT_EQ(WaitExit(r1.pid, std::chrono::seconds(8)), 0);
  // The second run's history (100 messages) wraps its rings many times; a request for all of
  // it comes back as generated. Its limit (101 messages a second) leaves ~1 token, so an
  // immediate second request is clamped (unless a second passes in between).
  const std::string json2 = json + ".2";
  std::vector<std::string> second = common;
  second.insert(second.end(), {"--history", "100", "--request-limit", "101", "--summary-json", json2});
  Run2 r2 = RunExchange(second, port0);
  ASSERT_TRUE(r2.ended);
  SendRequest(rq, port0 + 2, s, 2901, 200);
  // Line A drops 20% here, so the reference is the generator itself (same flags, same bytes).
  GeneratorOptions o;
  o.messages = 3000;
  o.seed = 9;
  auto gen = GenerateItch(o);
  ASSERT_TRUE(gen.ok()) << gen.status();
  std::vector<std::vector<uint8_t>> msgs(1);  // index = sequence
  ASSERT_TRUE(ForEachMessage(*gen, [&](MessageView m) { msgs.emplace_back(m.bytes().begin(), m.bytes().end()); }).ok());
  ASSERT_EQ(msgs.size(), 3001u);
  uint64_t next = 2901;
  uint8_t reply[65536];
  while (next < 3001) {
    pollfd p{rq, POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, 3000), 1) << "reply stopped at " << next;
    const ssize_t n = ::recv(rq, reply, sizeof reply, 0);
    const mold::Packet pk = mold::Parse(std::span<const uint8_t>(reply, static_cast<size_t>(n)), s);
    ASSERT_TRUE(pk.ok());
    ASSERT_EQ(pk.sequence, next);
    for (std::span<const uint8_t> m : pk) {
      ASSERT_LT(next, msgs.size());
      EXPECT_TRUE(std::equal(m.begin(), m.end(), msgs[next].begin(), msgs[next].end())) << next;
      ++next;
    }
  }
  SendRequest(rq, port0 + 2, s, 2901, 100);
  EXPECT_EQ(WaitExit(r2.pid, std::chrono::seconds(8)), 0);
  uint64_t late = 0;  // messages in the clamped reply
  for (ssize_t n; (n = ::recv(rq, reply, sizeof reply, MSG_DONTWAIT)) > 0;) {
    late += mold::Parse(std::span<const uint8_t>(reply, static_cast<size_t>(n)), s).messages();
  }
  ::close(rq);
  const std::string j2 = ReadAndRemove(json2);
  EXPECT_EQ(JsonField(j2, "requests_served"), 2u) << j2;
  EXPECT_EQ(JsonField(j2, "requests_clamped"), 2u) << j2;  // past the end; the limit
  EXPECT_EQ(JsonField(j2, "reply_messages"), 100 + late) << j2;
  EXPECT_GE(late, 1u);
  EXPECT_LT(late, 100u);
  EXPECT_EQ(r1.a.order, r2.a.order);
  EXPECT_EQ(r1.b.order, r2.b.order);
  EXPECT_NE(r1.a.order, r1.b.order);  // each line draws its own drops

  const std::string j = ReadAndRemove(json);
  EXPECT_EQ(JsonField(j, "requests"), 1u) << j;
  EXPECT_EQ(JsonField(j, "refused_disabled"), 1u) << j;
  EXPECT_EQ(JsonField(j, "requests_served"), 0u) << j;
  EXPECT_EQ(JsonField(j, "packets_a"), r1.a.data.size()) << j;
}

// The per-requester budgets are bounded (--max-requesters): with room for 2, a third requester
// while the first two are active is refused as rate limited; the first two are served.
TEST(ExchangeTest, RequestersBeyondTheBoundAreRefused) {
  const std::string json = ::testing::TempDir() + "/exchange_mr_" + std::to_string(getpid()) + ".json";
  const uint32_t port0 = base_port();
  const mold::Session s = mold::Session::From("POLLUX0001");
  const int rq[3] = {RequestSocket(), RequestSocket(), RequestSocket()};
  Run2 r = RunExchange({"--generate", "2000", "--rate", "max", "--linger-ms", "1000", "--max-requesters", "2",
                        "--summary-json", json},
                       port0);
  ASSERT_TRUE(r.ended);
  for (const int fd : rq) SendRequest(fd, port0 + 2, s, 1, 1);  // microseconds apart
  EXPECT_EQ(WaitExit(r.pid, std::chrono::seconds(8)), 0);
  for (const int fd : rq) ::close(fd);
  const std::string j = ReadAndRemove(json);
  EXPECT_EQ(JsonField(j, "requests"), 3u) << j;
  EXPECT_EQ(JsonField(j, "requests_served"), 2u) << j;
  EXPECT_EQ(JsonField(j, "refused_rate_limited"), 1u) << j;
}

// A file at a scaled pace with line B delayed: both lines carry the file's messages, byte for
// byte and in order (B drops nothing here).
TEST(ExchangeTest, FileAtSpeedWithDelayedLineB) {
  auto file = MappedFile::Open(POLLUX_ITCH_FIXTURE_FILE);
  ASSERT_TRUE(file.ok()) << file.status();
  std::vector<std::vector<uint8_t>> want;
  ASSERT_TRUE(ForEachMessage(file->bytes(), [&](MessageView m) {
                want.emplace_back(m.bytes().begin(), m.bytes().end());
              }).ok());
  const mold::Session s = mold::Session::From("FILE");
  Run2 r = RunExchange({"--itch", POLLUX_ITCH_FIXTURE_FILE, "--speed", "1e9", "--delay-b-us", "20000",
                        "--session", "FILE", "--linger-ms", "100", "--mtu", "600"},
                       base_port(), s);
  ASSERT_TRUE(r.ended);
  EXPECT_EQ(WaitExit(r.pid, std::chrono::seconds(8)), 0);
  EXPECT_EQ(r.a.bad + r.b.bad, 0u);
  EXPECT_EQ(r.a.eos, want.size() + 1);
  EXPECT_EQ(r.a.data, r.b.data);
  EXPECT_EQ(r.a.order, r.b.order);
  size_t i = 0;
  for (uint64_t first : r.a.order) {
    const mold::Packet p = mold::Parse(r.a.data[first], s);
    ASSERT_TRUE(p.ok());
    EXPECT_LE(p.size, 600u);
    ASSERT_EQ(p.sequence, i + 1);
    for (std::span<const uint8_t> m : p) {
      ASSERT_LT(i, want.size());
      EXPECT_TRUE(std::equal(m.begin(), m.end(), want[i].begin(), want[i].end())) << i;
      ++i;
    }
  }
  EXPECT_EQ(i, want.size());
}

// Slow enough (10 ms a message) that 1 ms heartbeats fall between messages; each carries
// the next sequence.
TEST(ExchangeTest, HeartbeatsCarryTheNextSequence) {
  Run2 r = RunExchange({"--generate", "30", "--symbols", "2", "--rate", "100", "--heartbeat-ms", "1",
                        "--linger-ms", "50"},
                       base_port());
  ASSERT_TRUE(r.ended);
  EXPECT_EQ(WaitExit(r.pid, std::chrono::seconds(8)), 0);
  EXPECT_EQ(r.a.eos, 31u);
  EXPECT_FALSE(r.a.heartbeats.empty());
  for (const auto& [seq, next] : r.a.heartbeats) EXPECT_EQ(seq, next);
}

}  // namespace
}  // namespace pollux::itch
