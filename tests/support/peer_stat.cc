// pollux-test-peer's "stat" role: a process with known counters, positions and errors for the
// pollux-stat tests (tests/stat/pollux_stat_test.cc).
//
//   pollux-test-peer stat --dir DIR --role ROLE [--hold-fd N] [--port P]
//
// ROLE
//   demo  two contexts in DIR: A (inline shm, stream "quotes" id 7) offers 100 messages of 32
//         bytes and its subscriber polls 60 of them; B (dedicated, one adaptive poller) starts
//         after this process claimed every core of the machine, so its poller runs unpinned and
//         its error log holds the placement warning.
//   udp   one inline UDP context on loopback (group from --port): 100 offered, 60 polled.
//   pub   an inline shm publisher of "quotes" (nothing offered).
//   sub   an inline shm subscriber of "quotes", polled until it is attached to the log.
// Prints "ready <details>" on stdout once set up, then blocks reading --hold-fd until EOF (the
// test closes its end) and exits 0; any failure prints "error: ..." and exits 2.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/placement.h"
#include "core/topology.h"
#include "pollux/pollux.h"
#include "tests/support/peer.h"

namespace pollux::testing::peer {
namespace {

using Clock = std::chrono::steady_clock;

std::string config(const std::string& dir, const std::string& threading, const std::string& extra = "") {
  return absl::StrFormat(R"(
[runtime]
name = "statpeer"
shm_dir = "%s"
threading = "%s"
idle = "adaptive"
pollers = 1
[shm]
flow_control = "backpressure"
[[streams]]
topic = "quotes"
id = 7
%s
)",
                         dir, threading, extra);
}

// Offers `offer` messages of 32 bytes once connected, then polls exactly `take` of them.
void exchange(pollux::Publisher& pub, pollux::Subscriber& sub, int offer, int take) {
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  int got = 0;
  auto handler = [&](const pollux::Message&) { ++got; };
  while (!pub.is_connected()) {
    (void)sub.poll(handler, 1);
    (void)pub.service();
    if (Clock::now() > deadline) fail("the subscriber never connected");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::byte payload[32] = {};
  for (int i = 0; i < offer;) {
    const std::int64_t r = pub.offer(payload);
    if (r >= 0) {
      ++i;
    } else if (Clock::now() > deadline) {
      fail(absl::StrFormat("offer: %s", pollux::result_name(r)));
    }
  }
  while (got < take) {
    (void)sub.poll(handler, take - got);
    (void)pub.service();
    if (Clock::now() > deadline) fail(absl::StrFormat("polled %d of %d", got, take));
  }
  // Timers: the transports publish their counters (udp: the publisher's sequence) there.
  for (int i = 0; i < 50; ++i) {
    (void)pub.service();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

}  // namespace

int run_stat(const Args& a) {
  const std::string dir = a.str("dir"), role = a.str("role");
  if (dir.empty()) fail("usage: pollux-test-peer stat --dir DIR --role ROLE [--hold-fd N] [--port P]");
  const int hold_fd = static_cast<int>(a.num("hold-fd", -1));
  const auto port = static_cast<unsigned>(a.num("port", 0));
  std::vector<std::unique_ptr<pollux::Context>> ctxs;
  std::vector<pollux::Publisher> pubs;
  std::vector<pollux::Subscriber> subs;
  std::vector<pollux::core::CpuClaim> claims;
  std::string details;
  if (role == "demo") {
    ctxs.push_back(must(pollux::Context::from_string(config(dir, "inline"), "<demo A>"), "context A"));
    pubs.push_back(must(ctxs[0]->publisher("quotes"), "publisher"));
    subs.push_back(must(ctxs[0]->subscriber("quotes"), "subscriber"));
    exchange(pubs[0], subs[0], 100, 60);
    // Every core claimed by this process: context B's automatic placement finds none free.
    for (const auto& c : pollux::core::topology().cores()) {
      claims.push_back(must(pollux::core::CpuClaim::acquire(dir, c.first_pu_os_index, "statpeer-preclaim"), "claim"));
    }
    ctxs.push_back(must(pollux::Context::from_string(config(dir, "dedicated"), "<demo B>"), "context B"));
    details = absl::StrFormat("%s %s", ctxs[0]->counters_path(), ctxs[1]->counters_path());
  } else if (role == "udp") {
    const std::string extra = absl::StrFormat(
        "[transport]\nkind = \"udp\"\n[udp]\naddress = \"239.255.%u.%u\"\nport = %u\ninterface = \"lo\"\nttl = 1\n"
        "status_interval_ms = 20\nheartbeat_interval_us = 2000\n",
        1 + port % 200, 1 + (port / 200) % 200, port);
    ctxs.push_back(must(pollux::Context::from_string(config(dir, "inline", extra), "<udp>"), "context"));
    subs.push_back(must(ctxs[0]->subscriber("quotes"), "subscriber"));
    pubs.push_back(must(ctxs[0]->publisher("quotes"), "publisher"));
    exchange(pubs[0], subs[0], 100, 60);
    details = ctxs[0]->counters_path();
  } else if (role == "pub") {
    ctxs.push_back(must(pollux::Context::from_string(config(dir, "inline"), "<pub>"), "context"));
    pubs.push_back(must(ctxs[0]->publisher("quotes"), "publisher"));
    details = ctxs[0]->counters_path();
  } else if (role == "sub") {
    ctxs.push_back(must(pollux::Context::from_string(config(dir, "inline"), "<sub>"), "context"));
    subs.push_back(must(ctxs[0]->subscriber("quotes"), "subscriber"));
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    while (!subs[0].is_connected()) {
      (void)subs[0].poll([](const pollux::Message&) {}, 16);
      if (Clock::now() > deadline) fail("never attached to the log");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    details = ctxs[0]->counters_path();
  } else {
    fail("unknown role " + role);
  }
  std::printf("ready %s\n", details.c_str());
  std::fflush(stdout);
  if (hold_fd >= 0) {
    char c;
    while (read(hold_fd, &c, 1) > 0) {
    }
  } else {
    for (;;) pause();
  }
  return 0;
}

}  // namespace pollux::testing::peer
