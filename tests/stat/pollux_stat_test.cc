// pollux-stat (tools/pollux_stat.cc) against running processes (pollux-test-peer stat) in a
// shm directory of its own: its --json fields (topics, positions, lag, pollers, the error log,
// timestamps, stream logs, CPU claims), --clean (a dead publisher's log, a dead process's
// counters file, unheld claims - never what a live process uses), its refusals (unknown flags,
// a counters file of another version) and automatic placement across contexts.
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/counters.h"
#include "core/placement.h"
#include "core/topology.h"
#include "gtest/gtest.h"
#include "pollux/pollux.h"
#include "tests/latency/json_lite.h"
#include "tests/support/process.h"
#include "tests/support/udp_ports.h"

namespace pollux {
namespace {

using jsonlite::Value;
using testing::Child;

std::string frame_dir() {
  struct stat st;
  return ::stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : ::testing::TempDir();
}

// A peer process with a pipe that keeps it alive until released.
struct Peer {
  Child c;
  int hold = -1;      // our end: closing it lets the peer exit
  std::string ready;  // its "ready ..." line
  int pid() const { return c.pid; }
  void release() {
    if (hold >= 0) ::close(hold);
    hold = -1;
  }
  int finish() {
    release();
    return testing::wait_child(c, 30);
  }
  // SIGKILL, reaped at once.
  void kill9() {
    c.kill_now();
    release();
  }
};

class StatTest : public ::testing::Test {
 protected:
  void SetUp() override {
    peers.reserve(8);  // start() hands out references into it
    dir = absl::StrFormat("%s/pollux-stattest-%d-%s", frame_dir(), getpid(),
                          ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0) << dir;
  }
  void TearDown() override {
    for (Peer& p : peers) p.c.kill_now();
    std::system(("rm -rf '" + dir + "'").c_str());
  }

  // Starts the peer and waits (up to 60 s) for its "ready" line.
  Peer& start(const std::string& role, const std::vector<std::string>& extra = {}) {
    int p[2];
    EXPECT_EQ(::pipe2(p, O_CLOEXEC), 0);
    std::vector<std::string> argv = {POLLUX_TEST_PEER, "stat", "--dir",     dir,
                                     "--role",         role,   "--hold-fd", std::to_string(p[0])};
    argv.insert(argv.end(), extra.begin(), extra.end());
    Peer peer;
    peer.c = testing::spawn(argv, {p[0]});
    ::close(p[0]);
    peer.hold = p[1];
    peer.c.wait_for_output([](const std::string& o) { return o.find('\n') != std::string::npos; }, 60);
    const std::string& out = peer.c.output;
    const std::string line = out.substr(0, out.find('\n') == std::string::npos ? out.size() : out.find('\n') + 1);
    EXPECT_EQ(line.rfind("ready", 0), 0u) << role << " peer: " << out;
    peer.ready = line;
    peers.push_back(std::move(peer));
    return peers.back();
  }

  // Runs pollux-stat with `args`; its exit code, stdout in *out.
  int stat(const std::vector<std::string>& args, std::string* out) {
    std::vector<std::string> argv = {POLLUX_STAT};
    argv.insert(argv.end(), args.begin(), args.end());
    Child c = testing::spawn(argv);
    const int rc = testing::wait_child(c, 60);
    *out = c.output;
    return rc;
  }
  Value stat_json(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"--dir", dir, "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::string out;
    EXPECT_EQ(stat(args, &out), 0);
    std::string err;
    auto v = jsonlite::Parse(out, &err);
    EXPECT_TRUE(v.has_value()) << err << "\n" << out;
    return v.value_or(Value{});
  }
  bool exists(const std::string& path) const { return ::access(path.c_str(), F_OK) == 0; }
  std::string log_path() const { return dir + "/pollux-statpeer-stream-7.log"; }

  std::string dir;
  std::vector<Peer> peers;
};

double num(const Value* v) { return v != nullptr && v->is_number() ? v->num : -1; }
std::string str(const Value* v) { return v != nullptr && v->is_string() ? v->str : "<missing>"; }

const Value* find_process(const Value& doc, const std::string& path) {
  const Value* procs = doc.get("processes");
  if (procs == nullptr) return nullptr;
  for (const Value& p : procs->arr) {
    if (str(p.get("path")) == path) return &p;
  }
  return nullptr;
}

TEST_F(StatTest, JsonShowsTopicsPositionsLagPollersAndTheErrorLog) {
  Peer& peer = start("demo");
  // "ready <counters of context A> <counters of context B>"
  std::vector<std::string> parts;
  for (std::size_t b = 0, e; b < peer.ready.size(); b = e + 1) {
    e = peer.ready.find_first_of(" \n", b);
    if (e == std::string::npos) e = peer.ready.size();
    parts.push_back(peer.ready.substr(b, e - b));
  }
  ASSERT_EQ(parts.size(), 3u) << peer.ready;
  const Value doc = stat_json();
  ASSERT_TRUE(doc.is_object());
  EXPECT_GT(num(doc.get("snapshot_ns")), 1.6e18);
  EXPECT_EQ(str(doc.get("snapshot_time")).size(), 24u) << "2026-12-01T14:03:07.123Z";
  EXPECT_EQ(str(doc.get("dir")), dir);

  // Context A: the exchange (100 offered, 60 polled; 64-byte frames).
  const Value* a = find_process(doc, parts[1]);
  ASSERT_NE(a, nullptr) << parts[1];
  EXPECT_EQ(num(a->get("pid")), peer.pid());
  EXPECT_TRUE(a->get("alive")->b);
  EXPECT_EQ(str(a->get("name")), "statpeer");
  EXPECT_LE(num(a->get("start_ns")), num(doc.get("snapshot_ns")));
  EXPECT_GE(num(a->get("uptime_s")), 0);
  EXPECT_EQ(str(a->get("start_time")).size(), 24u);
  const Value& pubs = *a->get("publications");
  ASSERT_EQ(pubs.arr.size(), 1u);
  EXPECT_EQ(str(pubs.arr[0].get("topic")), "quotes");
  EXPECT_EQ(num(pubs.arr[0].get("stream_id")), 7);
  EXPECT_EQ(num(pubs.arr[0].get("position")), 6400);
  EXPECT_EQ(str(pubs.arr[0].get("position_unit")), "bytes");
  EXPECT_EQ(num(pubs.arr[0].get("messages")), 100);
  EXPECT_EQ(num(pubs.arr[0].get("bytes")), 3200);
  EXPECT_EQ(num(pubs.arr[0].get("back_pressure")->get("total")), 0);
  EXPECT_NE(pubs.arr[0].get("back_pressure")->get("log_full"), nullptr);
  const Value& subs = *a->get("subscriptions");
  ASSERT_EQ(subs.arr.size(), 1u);
  EXPECT_EQ(str(subs.arr[0].get("topic")), "quotes");
  EXPECT_EQ(num(subs.arr[0].get("position")), 3840);
  EXPECT_EQ(num(subs.arr[0].get("lag")), 2560);
  EXPECT_EQ(num(subs.arr[0].get("messages")), 60);
  EXPECT_EQ(num(subs.arr[0].get("gaps")), 0);
  EXPECT_EQ(num(a->get("errors")), 0);
  EXPECT_TRUE(a->get("error_log")->get("entries")->arr.empty());

  // Context B: its poller, unpinned (every core was claimed), and the warning in its error log.
  const Value* b = find_process(doc, parts[2]);
  ASSERT_NE(b, nullptr) << parts[2];
  const Value& pollers = *b->get("pollers");
  ASSERT_EQ(pollers.arr.size(), 1u);
  const Value& pl = pollers.arr[0];
  EXPECT_EQ(str(pl.get("thread")), "pollux-poll-0");
  EXPECT_TRUE(pl.get("cpu")->is_null()) << "unpinned";
  EXPECT_EQ(str(pl.get("idle")), "adaptive");
  EXPECT_TRUE(pl.get("controller")->b);
  const std::string mode = str(pl.get("mode"));
  EXPECT_TRUE(mode == "busy" || mode == "spin" || mode == "interrupt") << mode;
  // The tid is the thread's, and the kernel knows it by its name.
  const int tid = static_cast<int>(num(pl.get("tid")));
  ASSERT_GT(tid, 0);
  std::ifstream comm(absl::StrFormat("/proc/%d/task/%d/comm", peer.pid(), tid));
  std::string name;
  std::getline(comm, name);
  EXPECT_EQ(name, "pollux-poll-0");
  EXPECT_EQ(num(b->get("errors")), 1);
  const Value& log = *b->get("error_log");
  EXPECT_TRUE(log.get("ok")->b);
  EXPECT_EQ(num(log.get("observations")), 1);
  ASSERT_EQ(log.get("entries")->arr.size(), 1u);
  const Value& e = log.get("entries")->arr[0];
  EXPECT_EQ(str(e.get("code_name")), "RESOURCE_EXHAUSTED");
  EXPECT_NE(str(e.get("message")).find("placement: poller 0 runs unpinned"), std::string::npos)
      << str(e.get("message"));
  EXPECT_NE(str(e.get("message")).find(absl::StrFormat("(pid %d, statpeer-preclaim)", peer.pid())), std::string::npos)
      << "names the holders: " << str(e.get("message"));
  EXPECT_EQ(num(e.get("count")), 1);
  EXPECT_LE(num(e.get("first_ns")), num(e.get("last_ns")));
  EXPECT_EQ(str(e.get("last_time")).size(), 24u);

  // The stream log: publisher and the subscriber's slot.
  const Value& streams = *doc.get("shm_streams");
  ASSERT_EQ(streams.arr.size(), 1u);
  const Value& s = streams.arr[0];
  EXPECT_EQ(str(s.get("path")), log_path());
  EXPECT_EQ(num(s.get("stream_id")), 7);
  EXPECT_EQ(num(s.get("publisher_pid")), peer.pid());
  EXPECT_TRUE(s.get("publisher_alive")->b);
  EXPECT_EQ(num(s.get("position")), 6400);
  ASSERT_EQ(s.get("subscribers")->arr.size(), 1u);
  EXPECT_EQ(num(s.get("subscribers")->arr[0].get("pid")), peer.pid());
  EXPECT_EQ(num(s.get("subscribers")->arr[0].get("lag")), 2560);

  // The claims of every core, held by the peer.
  const Value& claims = *doc.get("cpu_claims");
  EXPECT_EQ(claims.arr.size(), core::topology().cores().size());
  for (const Value& c : claims.arr) {
    EXPECT_TRUE(c.get("held")->b);
    EXPECT_EQ(num(c.get("pid")), peer.pid());
  }

  // The text view and --errors say the same things.
  std::string text;
  ASSERT_EQ(stat({"--dir", dir}, &text), 0);
  EXPECT_NE(text.find("pub quotes (stream 7)  position 6400 B"), std::string::npos) << text;
  EXPECT_NE(text.find("sub quotes (stream 7)  position 3840 B  lag 2560 B"), std::string::npos) << text;
  EXPECT_NE(text.find("thread pollux-poll-0"), std::string::npos) << text;
  ASSERT_EQ(stat({"--dir", dir, "--errors"}, &text), 0);
  EXPECT_NE(text.find("RESOURCE_EXHAUSTED"), std::string::npos) << text;
  EXPECT_EQ(text.find("pub quotes"), std::string::npos) << "--errors shows only the error logs";
  EXPECT_EQ(peer.finish(), 0);
}

TEST_F(StatTest, UdpPositionsAreSequencesAndLagIsMessages) {
  Peer& peer =
      start("udp", {"--port", std::to_string(testing::UdpPortBlock::Base())});  // free, below the ephemeral range
  const Value doc = stat_json();
  const Value* p = find_process(doc, peer.ready.substr(6, peer.ready.find('\n') - 6));
  ASSERT_NE(p, nullptr) << peer.ready;
  const Value& pubs = *p->get("publications");
  ASSERT_EQ(pubs.arr.size(), 1u);
  EXPECT_EQ(str(pubs.arr[0].get("position_unit")), "sequence");
  const Value& subs = *p->get("subscriptions");
  ASSERT_EQ(subs.arr.size(), 1u);
  EXPECT_EQ(str(subs.arr[0].get("position_unit")), "sequence");
  EXPECT_EQ(num(pubs.arr[0].get("position")) - num(subs.arr[0].get("position")), 40)
      << "100 sent, 60 taken: pub " << num(pubs.arr[0].get("position")) << ", sub " << num(subs.arr[0].get("position"));
  EXPECT_EQ(num(subs.arr[0].get("lag")), 40);
  EXPECT_EQ(num(subs.arr[0].get("messages")), 60);
  EXPECT_EQ(peer.finish(), 0);
}

// After kill -9 a publisher's 16 MiB log must not stay behind and refuse a new publisher.
TEST_F(StatTest, CleanRemovesADeadPublishersLogOnceNobodyIsAttached) {
  Peer& pub = start("pub");
  Peer& sub = start("sub");  // attached to pub's log
  const std::string pub_counters = pub.ready.substr(6, pub.ready.find('\n') - 6);
  ASSERT_TRUE(exists(log_path()));
  pub.kill9();
  ASSERT_TRUE(pub.c.exited());
  // The subscriber still maps the log: kept; the dead publisher's counters file goes.
  Value doc = stat_json({"--clean"});
  ASSERT_NE(doc.get("removed"), nullptr);
  std::vector<std::string> removed;
  for (const Value& r : doc.get("removed")->arr) removed.push_back(r.str);
  EXPECT_EQ(removed, std::vector<std::string>{pub_counters});
  EXPECT_TRUE(exists(log_path())) << "a live subscriber is attached";
  ASSERT_EQ(doc.get("shm_streams")->arr.size(), 1u);
  EXPECT_FALSE(doc.get("shm_streams")->arr[0].get("publisher_alive")->b);
  // Once the subscriber is gone too, --clean removes the log.
  sub.kill9();
  ASSERT_TRUE(sub.c.exited());
  std::string out;
  ASSERT_EQ(stat({"--dir", dir, "--clean"}, &out), 0);
  EXPECT_NE(out.find("removed " + log_path()), std::string::npos) << out;
  EXPECT_FALSE(exists(log_path()));
  EXPECT_TRUE(core::list_counters_files(dir).empty());
}

// A new publisher 0.5 s after a kill -9 takes the log over although the killed publisher is a
// zombie (its parent has not reaped it), which kill(pid, 0) reports alive. No --clean needed.
TEST_F(StatTest, ANewPublisherTakesOverAKilledPublishersLog) {
  Peer& first = start("pub");
  ::kill(first.c.pid, SIGKILL);
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(first.c.pid), &info, WEXITED | WNOWAIT), 0);  // a zombie
  Peer& second = start("pub");
  EXPECT_EQ(second.ready.rfind("ready", 0), 0u) << second.ready;
  const Value doc = stat_json();
  ASSERT_EQ(doc.get("shm_streams")->arr.size(), 1u);
  EXPECT_EQ(num(doc.get("shm_streams")->arr[0].get("publisher_pid")), second.pid());
  EXPECT_TRUE(doc.get("shm_streams")->arr[0].get("publisher_alive")->b);
  EXPECT_EQ(second.finish(), 0);
}

TEST_F(StatTest, CleanNeverTouchesALivePublishersLogOrHeldClaims) {
  Peer& pub = start("pub");
  auto held = core::CpuClaim::acquire(dir, 0, "held");
  ASSERT_TRUE(held.ok()) << held.status();
  {
    auto left = core::CpuClaim::acquire(dir, 1, "left");
    ASSERT_TRUE(left.ok());
  }
  // A claim file left behind by a crashed holder (released without removing it).
  std::ofstream(core::claim_path(dir, 2)) << "pid 999999 start 1 boot 1 name crashed\n";
  const Value doc = stat_json({"--clean"});
  std::vector<std::string> removed;
  for (const Value& r : doc.get("removed")->arr) removed.push_back(r.str);
  EXPECT_EQ(removed, std::vector<std::string>{core::claim_path(dir, 2)});
  EXPECT_TRUE(exists(log_path()));
  EXPECT_TRUE(exists(core::claim_path(dir, 0)));
  EXPECT_EQ(pub.finish(), 0);
}

TEST_F(StatTest, UnreadableFilesAreReportedNotFatal) {
  // Another version's counters file, and garbage under a counters name.
  auto f = core::CountersFile::create(dir, "future");
  ASSERT_TRUE(f.ok()) << f.status();
  const std::string path = (*f)->path();
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::uint32_t v3 = 3;
  std::memcpy(bytes.data() + offsetof(core::CountersHeader, version), &v3, 4);
  const std::string copy = dir + "/pollux-future-1.counters";
  std::ofstream(copy, std::ios::binary) << bytes;
  std::ofstream(dir + "/pollux-junk-2.counters") << std::string(5000, '\x1b');
  std::string out;
  ASSERT_EQ(stat({"--dir", dir}, &out), 0);
  EXPECT_NE(out.find("counters file version 3, this reader understands version 2"), std::string::npos) << out;
  EXPECT_NE(out.find("bad magic"), std::string::npos) << out;
  EXPECT_EQ(out.find('\x1b'), std::string::npos) << "no terminal escapes from the files";
  const Value doc = stat_json();
  EXPECT_EQ(doc.get("unreadable")->arr.size(), 2u);
  EXPECT_EQ(doc.get("processes")->arr.size(), 1u) << "the readable one";
  // --clean: another version's file of a dead process goes (its pid alone decides), one of a
  // live process and the garbage stay.
  const std::string dead_copy = dir + "/pollux-future-2.counters";
  std::int32_t gone = 0;  // above pid_max: no such process
  std::ifstream("/proc/sys/kernel/pid_max") >> gone;
  ASSERT_GT(gone, 0);
  ++gone;
  std::memcpy(bytes.data() + offsetof(core::CountersHeader, pid), &gone, 4);
  std::ofstream(dead_copy, std::ios::binary) << bytes;
  const Value cleaned = stat_json({"--clean"});
  std::vector<std::string> removed;
  for (const Value& r : cleaned.get("removed")->arr) removed.push_back(r.str);
  EXPECT_EQ(removed, std::vector<std::string>{dead_copy});
  EXPECT_TRUE(exists(copy));
  EXPECT_TRUE(exists(dir + "/pollux-junk-2.counters"));
}

TEST_F(StatTest, UsageErrorsAndHelp) {
  std::string out;
  EXPECT_EQ(stat({"--help"}, &out), 0);
  EXPECT_NE(out.find("--clean"), std::string::npos);
  EXPECT_NE(out.find("--watch SECONDS"), std::string::npos);
  EXPECT_EQ(stat({"--bogus"}, &out), 64);
  EXPECT_EQ(stat({"--watch", "abc"}, &out), 64);
  EXPECT_EQ(stat({"--watch", "0"}, &out), 64);
  EXPECT_EQ(stat({"--dir"}, &out), 64);
  EXPECT_EQ(stat({"--json", "--watch", "1"}, &out), 64);
  EXPECT_EQ(stat({"--version"}, &out), 0);
  EXPECT_NE(out.find("pollux-stat"), std::string::npos);
}

// A --dir that does not exist or is not a directory is an error naming the path (exit 66,
// EX_NOINPUT), not an empty host; so is one this user cannot read.
TEST_F(StatTest, MissingOrUnreadableDirIsAnErrorNamingThePath) {
  const std::string missing = dir + "/no-such-dir";
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--dir", missing}, std::vector<std::string>{"--dir", missing, "--json"},
        std::vector<std::string>{"--dir", missing, "--clean"}}) {
    std::string cmd = std::string(POLLUX_STAT);
    for (const std::string& a : args) cmd += " '" + a + "'";
    Child c = testing::spawn({"/bin/sh", "-c", cmd + " 2>&1"});
    EXPECT_EQ(testing::wait_child(c, 60), 66) << cmd << "\n" << c.output;
    EXPECT_NE(c.output.find("cannot read directory " + missing + ": No such file or directory"), std::string::npos)
        << c.output;
    EXPECT_EQ(c.output.find("\"snapshot_ns\""), std::string::npos) << "no document for a missing directory";
  }
  const std::string file = dir + "/a-file";
  std::ofstream(file) << "x";
  Child f = testing::spawn({"/bin/sh", "-c", std::string(POLLUX_STAT) + " --dir '" + file + "' 2>&1"});
  EXPECT_EQ(testing::wait_child(f, 60), 66) << f.output;
  EXPECT_NE(f.output.find(file + " is not a directory"), std::string::npos) << f.output;
}

TEST_F(StatTest, UnreadableDirIsAnError) {
  // Root reads every directory: as root the program runs as nobody (setpriv, util-linux).
  std::string as_user;
  if (::geteuid() == 0) {
    if (::access("/usr/bin/setpriv", X_OK) != 0) GTEST_SKIP() << "root, and no /usr/bin/setpriv to run as nobody";
    as_user = "/usr/bin/setpriv --reuid=65534 --regid=65534 --clear-groups ";
    ASSERT_EQ(::chmod(dir.c_str(), 0711), 0);  // nobody may pass through, not list
  }
  const std::string locked = dir + "/locked";
  ASSERT_EQ(::mkdir(locked.c_str(), 0), 0);
  Child c = testing::spawn({"/bin/sh", "-c", as_user + POLLUX_STAT + " --dir '" + locked + "' 2>&1"});
  EXPECT_EQ(testing::wait_child(c, 60), 66) << c.output;
  EXPECT_NE(c.output.find("cannot read directory " + locked + ": Permission denied"), std::string::npos) << c.output;
  ::chmod(locked.c_str(), 0700);
  ::chmod(dir.c_str(), 0700);
}

// Runs pollux-stat with `args`, its stdout and stderr on a pseudo-terminal (as from a shell);
// returns its exit status (-1 when it did not end within 60 s), the output in *out.
int stat_on_terminal(const std::vector<std::string>& args, std::string* out) {
  int master = -1;
  const pid_t pid = ::forkpty(&master, nullptr, nullptr, nullptr);
  if (pid < 0) return -2;
  if (pid == 0) {
    std::vector<char*> av{const_cast<char*>(POLLUX_STAT)};
    for (const std::string& a : args) av.push_back(const_cast<char*>(a.c_str()));
    av.push_back(nullptr);
    ::execv(av[0], av.data());
    ::_exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  char buf[4096];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{master, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = ::read(master, buf, sizeof buf);
    if (n <= 0) break;  // EIO: the program ended and the terminal closed
    out->append(buf, static_cast<std::size_t>(n));
  }
  // The terminal closes as the program exits: it is reaped moments later.
  int status = 0;
  pid_t reaped = 0;
  while ((reaped = ::waitpid(pid, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (reaped != pid) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    ::close(master);
    return -1;
  }
  ::close(master);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::size_t occurrences(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto p = text.find(what); p != std::string::npos; p = text.find(what, p + what.size())) ++n;
  return n;
}

// --watch into a file or a pipe: the snapshots one after the other with a separator line, no
// terminal escape codes; on a terminal: cleared and redrawn. --count ends it.
TEST_F(StatTest, WatchClearsTheScreenOnlyOnATerminal) {
  start("pub");
  std::string piped;
  ASSERT_EQ(stat({"--dir", dir, "--watch", "0.01", "--count", "3"}, &piped), 0) << piped;
  EXPECT_EQ(piped.find('\033'), std::string::npos) << "escape codes written to a pipe:\n" << piped;
  EXPECT_EQ(occurrences(piped, "pollux-stat  "), 3u) << piped;
  EXPECT_EQ(occurrences(piped, "\n" + std::string(80, '-') + "\n"), 2u) << piped;
  EXPECT_EQ(occurrences(piped, "pub "), 3u) << "each snapshot shows the peer's publication:\n" << piped;

  std::string screen;
  ASSERT_EQ(stat_on_terminal({"--dir", dir, "--watch", "0.01", "--count", "2"}, &screen), 0) << screen;
  EXPECT_EQ(occurrences(screen, "\033[H\033[2J"), 2u) << screen;
  EXPECT_EQ(occurrences(screen, std::string(80, '-')), 0u) << screen;

  std::string out;
  EXPECT_EQ(stat({"--dir", dir, "--count", "2"}, &out), 64) << "--count without --watch";
  EXPECT_EQ(stat({"--dir", dir, "--watch", "1", "--count", "0"}, &out), 64);
}

// Automatic placement across contexts on this machine's real topology: each context's poller
// gets a core of its own while unclaimed cores remain, the next one runs unpinned and says so
// (describe() and its error log).
// A late joiner (a [[streams]] start) shows its state and counts as a line of its own and in
// --json's late_joins.
TEST_F(StatTest, ALateJoinersStateAndCountsAreShown) {
  const std::string rec_dir = dir + "/recording";
  const std::string cfg = absl::StrFormat(
      "[runtime]\nname = \"lj\"\nshm_dir = \"%s\"\nthreading = \"inline\"\nidle = \"yield\"\n"
      "[shm]\nflow_control = \"backpressure\"\n[[streams]]\ntopic = \"quotes\"\nid = 7\nstart = \"earliest\"\n"
      "archive_dir = \"%s\"\n",
      dir, rec_dir);
  auto ctx = Context::from_string(cfg, "lj.toml");
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  // The recorder on this thread: it has recorded what the test says, no more, no less.
  RecordingOptions ro;
  ro.topic = "quotes";
  ro.directory = rec_dir;
  ro.segment_size = 1 << 20;
  auto rec = Recorder::start(**ctx, ro);
  ASSERT_TRUE(rec.ok()) << rec.status();
  auto pub = (*ctx)->publisher("quotes");
  ASSERT_TRUE(pub.ok()) << pub.status();
  const char payload[16] = "0123456789abcde";
  std::uint64_t published = 0;
  auto publish = [&] {
    while (pub->offer(payload, sizeof payload) < 0) (*rec)->poll();
    ++published;
    while ((*rec)->status().messages < published) (*rec)->poll();
  };
  for (int i = 0; i < 100; ++i) publish();
  auto sub = (*ctx)->subscriber("quotes");
  ASSERT_TRUE(sub.ok()) << sub.status();
  int got = 0;
  // Replay only what it can before the recording's end: at most 100 messages.
  while (got < 40) got += sub->poll([](const Message&) {}, 40 - got);

  std::string out;
  ASSERT_EQ(stat({"--dir", dir}, &out), 0) << out;
  EXPECT_NE(out.find("late join quotes  state replaying  replayed 40  buffered 0  live 0  duplicates 0  missing 0  "
                     "fell_behind 0"),
            std::string::npos)
      << out;
  for (int i = 0; i < 1000 && std::string(sub->late_join()->state()) != "live"; ++i) {
    if (sub->poll([](const Message&) {}, 64) == 0) publish();
  }
  ASSERT_STREQ(sub->late_join()->state(), "live");
  const Value doc = stat_json();
  const Value* proc = find_process(doc, (*ctx)->counters_path());
  ASSERT_NE(proc, nullptr);
  const Value* lj = proc->get("late_joins");
  ASSERT_NE(lj, nullptr);
  ASSERT_EQ(lj->arr.size(), 1u);
  EXPECT_EQ(str(lj->arr[0].get("topic")), "quotes");
  EXPECT_EQ(str(lj->arr[0].get("state")), "live");
  EXPECT_GE(num(lj->arr[0].get("replayed")), 100);
  EXPECT_EQ(num(lj->arr[0].get("missing")), 0);
}

TEST_F(StatTest, ContextsOnTheRealTopologyDoNotShareCores) {
  const std::size_t cores = core::topology().cpus_on_node(-1).size();
  const std::size_t n = std::min<std::size_t>(cores, 4);
  const std::string cfg = absl::StrFormat(
      "[runtime]\nname = \"place\"\nshm_dir = \"%s\"\nthreading = \"dedicated\"\npollers = 1\nidle = \"adaptive\"\n",
      dir);
  std::vector<std::unique_ptr<Context>> ctxs;
  std::vector<std::string> cpus;
  for (std::size_t i = 0; i < n; ++i) {
    auto c = Context::from_string(cfg, "<place>");
    ASSERT_TRUE(c.ok()) << c.status();
    const std::string d = (*c)->describe();
    const auto at = d.find("pinned to cpu ");
    ASSERT_NE(at, std::string::npos) << d;
    EXPECT_NE(d.find("(claimed: "), std::string::npos) << d;
    EXPECT_NE(d.find("thread pollux-poll-0"), std::string::npos) << d;
    cpus.push_back(d.substr(at, d.find(' ', at + 14) - at));
    ctxs.push_back(std::move(*c));
  }
  std::sort(cpus.begin(), cpus.end());
  EXPECT_EQ(std::unique(cpus.begin(), cpus.end()), cpus.end()) << "two contexts share a core";
  if (n == cores) {
    auto extra = Context::from_string(cfg, "<place>");
    ASSERT_TRUE(extra.ok()) << extra.status();
    const std::string d = (*extra)->describe();
    EXPECT_NE(d.find("unpinned"), std::string::npos) << d;
    EXPECT_NE(d.find("placement: poller 0 runs unpinned: every candidate core is claimed"), std::string::npos) << d;
    auto snap = core::read_counters_file((*extra)->counters_path());
    ASSERT_TRUE(snap.ok()) << snap.status();
    ASSERT_EQ(snap->errors.entries.size(), 1u);
    EXPECT_NE(snap->errors.entries[0].message.find("runs unpinned"), std::string::npos);
  }
  // Released with the contexts.
  ctxs.clear();
  for (int cpu : core::claimed_cpus(dir)) EXPECT_FALSE(core::claim_held(dir, cpu)) << cpu;
}

}  // namespace
}  // namespace pollux
