// pollux-test-contract-peer: the other process of the API contract tests (tests/api/), written
// on the public API only. It opens one publisher or one subscriber and keeps it busy until it
// is killed (the tests kill it with SIGKILL: a process that dies without closing anything).
//
//   pollux-test-contract-peer pub CONFIG_FILE TOPIC   offers an 8-byte counter every ~1 ms
//   pollux-test-contract-peer sub CONFIG_FILE TOPIC   polls (and waits) without end
//
// Prints "ready" on stdout once its endpoint is open, and for a subscriber "connected" once
// its first message arrived.
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "pollux/pollux.h"

int main(int argc, char** argv) {
  if (argc != 4 || (std::strcmp(argv[1], "pub") != 0 && std::strcmp(argv[1], "sub") != 0)) {
    std::fprintf(stderr, "usage: %s pub|sub CONFIG_FILE TOPIC\n", argv[0]);
    return 64;
  }
  auto ctx = pollux::Context::from_file(argv[2]);
  if (!ctx.ok()) {
    std::fprintf(stderr, "peer: %s\n", std::string(ctx.status().message()).c_str());
    return 2;
  }
  if (std::strcmp(argv[1], "pub") == 0) {
    auto pub = (*ctx)->publisher(argv[3]);
    if (!pub.ok()) {
      std::fprintf(stderr, "peer: %s\n", std::string(pub.status().message()).c_str());
      return 2;
    }
    std::printf("ready\n");
    std::fflush(stdout);
    for (std::uint64_t i = 1;;) {
      if (pub->offer(&i, sizeof i) >= 0) ++i;
      (void)pub->service();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  auto sub = (*ctx)->subscriber(argv[3]);
  if (!sub.ok()) {
    std::fprintf(stderr, "peer: %s\n", std::string(sub.status().message()).c_str());
    return 2;
  }
  std::printf("ready\n");
  std::fflush(stdout);
  bool first = true;
  for (;;) {
    const int n = sub->poll(
        [&](const pollux::Message&) {
          if (first) {
            std::printf("connected\n");
            std::fflush(stdout);
            first = false;
          }
        },
        64);
    if (n == 0) (void)sub->wait(1000);
  }
}
