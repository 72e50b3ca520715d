// pollux-feed (examples/feed_handler) over RDMA in the Soft-RoCE VM: the ITCH replay published
// from rxe0 and rebuilt into order books by a subscriber process on rxe1, over RC and over UD
// multicast. The books and message counts must be identical to the same replay over shared
// memory.
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/rdma/rdma_test_util.h"
#include "tests/support/itch_data.h"
#include "tests/support/process.h"

namespace pollux {
namespace {

#ifdef POLLUX_FEED_BIN
using testing::Child;
using testing::spawn;
using testing::wait_child;

// Small enough for an emulated CPU; batches that fit one UD datagram (MTU 1024 on rxe).
const std::vector<std::string> kCommon = {"--quiet",
                                          "--set",
                                          "feed.messages=200000",
                                          "--set",
                                          "feed.seed=7",
                                          "--set",
                                          "feed.symbols=50",
                                          "--set",
                                          "feed.batch_bytes=900",
                                          "--set",
                                          "feed.connect_timeout_ms=120000"};

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Child feed(std::vector<std::string> args) {
  std::vector<std::string> argv{POLLUX_FEED_BIN};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.insert(argv.end(), kCommon.begin(), kCommon.end());
  return spawn(argv);
}

class RdmaFeed : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!rdmatest::in_vm()) return;
    dir_ = "/tmp/" + rdmatest::unique_name("feed");
    ASSERT_EQ(system(("mkdir -p " + dir_).c_str()), 0);
    Child ref = feed({"--set", "runtime.name=" + rdmatest::unique_name("fshm"), "--book-out", dir_ + "/shm_books.jsonl",
                      "--counts-out", dir_ + "/shm_counts.json"});
    ASSERT_EQ(wait_child(ref, 600), 0) << ref.output;
  }

  // The shm replay of `source` (e.g. {"--itch", FILE}) that an RDMA replay with reference
  // `ref` is compared with; made once.
  static void reference(const std::string& ref, const std::vector<std::string>& source) {
    if (std::ifstream(dir_ + "/" + ref + "_books.jsonl").good()) return;
    std::vector<std::string> args = {"--set",        "runtime.name=" + rdmatest::unique_name("fshm"),
                                     "--book-out",   dir_ + "/" + ref + "_books.jsonl",
                                     "--counts-out", dir_ + "/" + ref + "_counts.json"};
    args.insert(args.end(), source.begin(), source.end());
    Child c = feed(args);
    ASSERT_EQ(wait_child(c, 600), 0) << c.output;
  }

  // Subscriber on rxe1 started first (it must be listening / joined), then the publisher on rxe0.
  // `source` selects the feed (default: the generator of kCommon); `ref` names its shm replay.
  void replay(const std::string& tag, const std::vector<std::string>& sub_extra,
              const std::vector<std::string>& pub_extra, int start_delay_ms,
              const std::vector<std::string>& source = {}, const std::string& ref = "shm") {
    std::vector<std::string> sub = {
        "--role", "sub", "--set", "runtime.name=" + rdmatest::unique_name("fsub"), "--book-out",
        dir_ + "/" + tag + "_books.jsonl", "--counts-out", dir_ + "/" + tag + "_counts.json", "--set",
        "transport.kind=rdma", "--set", "rdma.device=rxe1", "--set", "rdma.gid_index=1",
        // Inline mode: each of the 4 subscribers has its own receive queue.
        "--set", "pool.slot_size=2048", "--set", "pool.slots=8192", "--set", "rdma.recv_queue_depth=1024"};
    sub.insert(sub.end(), sub_extra.begin(), sub_extra.end());
    // rdma.linger_ms: the whole replay must arrive, and in the emulated VM the subscriber may
    // take its first frames more than a second after the publisher is done (the default 500 ms
    // linger then closes with frames unacknowledged: lost, and logged).
    std::vector<std::string> pub = {"--role", "pub",
                                    "--set",  "runtime.name=" + rdmatest::unique_name("fpub"),
                                    "--set",  "transport.kind=rdma",
                                    "--set",  "rdma.device=rxe0",
                                    "--set",  "rdma.gid_index=1",
                                    "--set",  "pool.slot_size=2048",
                                    "--set",  "pool.slots=8192",
                                    "--set",  "rdma.linger_ms=120000"};
    pub.insert(pub.end(), pub_extra.begin(), pub_extra.end());
    pub.insert(pub.end(), source.begin(), source.end());
    Child s = feed(sub);
    std::this_thread::sleep_for(std::chrono::milliseconds(start_delay_ms));
    Child p = feed(pub);
    const int prc = wait_child(p, 600);
    const int src = wait_child(s, 600);
    std::printf("--- %s publisher (rc %d)\n%s--- %s subscriber (rc %d)\n%s", tag.c_str(), prc, p.output.c_str(),
                tag.c_str(), src, s.output.c_str());
    EXPECT_EQ(prc, 0);
    EXPECT_EQ(src, 0);
    const std::string want_books = slurp(dir_ + "/" + ref + "_books.jsonl");
    const std::string got_books = slurp(dir_ + "/" + tag + "_books.jsonl");
    ASSERT_FALSE(want_books.empty());
    EXPECT_TRUE(got_books == want_books) << "books differ from the shm replay (" << got_books.size() << " vs "
                                         << want_books.size() << " bytes)";
    EXPECT_EQ(slurp(dir_ + "/" + tag + "_counts.json"), slurp(dir_ + "/" + ref + "_counts.json"));
  }

  static std::string dir_;
};
std::string RdmaFeed::dir_;

TEST_F(RdmaFeed, OverRcBuildsTheSameBooksAsShm) {
  POLLUX_REQUIRE_RXE();
  const std::string port = std::to_string(rdmatest::next_port());
  replay("rc", {"--set", "rdma.listen_port=" + port}, {"--set", "rdma.peers=[\"10.0.0.2:" + port + "\"]"}, 500);
}

TEST_F(RdmaFeed, OverUdMulticastBuildsTheSameBooksAsShm) {
  POLLUX_REQUIRE_RXE();
  // Paced: UD has no flow control, and a loss would (correctly) show as a gap and differing books.
  const std::vector<std::string> ud = {"--set", "rdma.mode=ud_mcast",  "--set", "rdma.multicast_group=239.255.78.9",
                                       "--set", "rdma.heartbeat_ms=20"};
  std::vector<std::string> pub = ud;
  for (const char* s : {"--set", "feed.replay=rate", "--set", "feed.rate=200000"}) pub.emplace_back(s);
  replay("ud", ud, pub, 3000);
}
// The ITCH sample (the host's file system is the VM's), or the project's fixture.
std::string itch_file() { return testing::itch_sample_or_fixture(); }

TEST_F(RdmaFeed, ItchFileOverRcBuildsTheSameBooksAsShm) {
  POLLUX_REQUIRE_RXE();
  const std::vector<std::string> source = {"--itch", itch_file()};
  std::printf("ITCH file: %s\n", itch_file().c_str());
  reference("shm_file", source);
  const std::string port = std::to_string(rdmatest::next_port());
  replay("rc_file", {"--set", "rdma.listen_port=" + port}, {"--set", "rdma.peers=[\"10.0.0.2:" + port + "\"]"}, 500,
         source, "shm_file");
}

TEST_F(RdmaFeed, ItchFileOverUdMulticastBuildsTheSameBooksAsShm) {
  POLLUX_REQUIRE_RXE();
  const std::vector<std::string> source = {"--itch", itch_file()};
  reference("shm_file", source);
  const std::vector<std::string> ud = {"--set", "rdma.mode=ud_mcast",  "--set", "rdma.multicast_group=239.255.78.10",
                                       "--set", "rdma.heartbeat_ms=20"};
  std::vector<std::string> pub = ud;
  for (const char* s : {"--set", "feed.replay=rate", "--set", "feed.rate=200000"}) pub.emplace_back(s);
  replay("ud_file", ud, pub, 3000, source, "shm_file");
}
#else
TEST(RdmaFeed, NotBuilt) { GTEST_SKIP() << "pollux-feed (examples/feed_handler) is not part of this build"; }
#endif

}  // namespace
}  // namespace pollux
