// The workload bench/callgrind/shm-inline.sh runs under callgrind: one publisher and one
// subscriber of one stream in this process, inline threading, shm transport; each iteration
// offers one message and polls it back (exactly one offer() and one poll() call that delivers
// it: with inline shm the frame is readable as soon as offer() returns). Not a timing
// benchmark: it prints the sum of the delivered payload sizes, which the script checks.
// Instruction counts per iteration come from two runs of different --count (setup cancels).
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "pollux/pollux.h"

int main(int argc, char** argv) {
  std::uint64_t count = 100000, size = 32;
  std::string flow = "backpressure", counters = "true";
  pollux::bench::Cli cli("pollux-callgrind-shm-inline",
                         "One offer() + one poll() per iteration on inline shm, in one process (the workload of "
                         "bench/callgrind/shm-inline.sh; run it under valgrind --tool=callgrind).");
  cli.count("--count", &count, "iterations (one message each)")
      .count("--size", &size, "payload bytes per message", 1, 4096)
      .choice("--flow", &flow, {"backpressure", "lossy"}, "shm.flow_control of the stream")
      .choice("--counters", &counters, {"true", "false"}, "runtime.counters (a counters file, or none)");
  cli.parse(argc, argv);

  const std::string name = "cg-shm-" + std::to_string(getpid());
  auto ctx = pollux::Context::from_string(
      "[runtime]\nname = \"" + name + "\"\nthreading = \"inline\"\nidle = \"busy-spin\"\ncounters = " + counters +
          "\n[shm]\nlog_size = \"1MiB\"\nflow_control = \"" + flow + "\"\n",
      "pollux-callgrind-shm-inline");
  if (!ctx.ok()) {
    std::fprintf(stderr, "%s\n", std::string(ctx.status().message()).c_str());
    return 1;
  }
  auto pub = (*ctx)->publisher("cg");
  auto sub = (*ctx)->subscriber("cg");
  if (!pub.ok() || !sub.ok()) {
    std::fprintf(stderr, "%s\n", std::string((pub.ok() ? sub.status() : pub.status()).message()).c_str());
    return 1;
  }
  // Connected, and the subscriber has seen the session start (its first poll after the
  // publisher appeared reports kNewSession): from then on each poll of the loop below delivers
  // the one message offered before it.
  bool session_seen = false;
  for (int i = 0; !pub->is_connected() || !session_seen; ++i) {
    if (i > 100000) {
      std::fprintf(stderr, "publisher never saw the subscriber\n");
      return 1;
    }
    (void)sub->poll([](const pollux::Message&) {}, [](const pollux::Gap&) {},
                    [&](const pollux::StreamEvent& e) {
                      session_seen = session_seen || e.kind == pollux::StreamEventKind::kNewSession;
                    },
                    1);
    usleep(100);
  }
  std::vector<std::byte> payload(size);
  std::uint64_t sum = 0, retries = 0;
  for (std::uint64_t i = 0; i < count; ++i) {
    payload[0] = static_cast<std::byte>(i);
    while (pub->offer(payload.data(), payload.size()) < 0) ++retries;
    while (sub->poll([&](const pollux::Message& m) { sum += m.payload.size(); }, 1) == 0) ++retries;
  }
  // The script checks these: every message delivered, no iteration needed a second call.
  std::printf("delivered_bytes %llu retries %llu\n", static_cast<unsigned long long>(sum),
              static_cast<unsigned long long>(retries));
  return sum == count * size ? 0 : 1;
}
