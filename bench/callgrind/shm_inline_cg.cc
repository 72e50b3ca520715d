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
#include "bench/callgrind/cg_workload.h"
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
  pollux::bench::CgPair cg;
  if (!cg.open("[runtime]\nname = \"" + name + "\"\nthreading = \"inline\"\nidle = \"busy-spin\"\ncounters = " +
                   counters + "\n[shm]\nlog_size = \"1MiB\"\nflow_control = \"" + flow + "\"\n",
               "pollux-callgrind-shm-inline", false)) {
    return 1;
  }
  pollux::Publisher& pub = *cg.pub;
  pollux::Subscriber& sub = *cg.sub;
  for (int i = 0; !pub.is_connected(); ++i) {
    if (i > 100000) {
      std::fprintf(stderr, "publisher never saw the subscriber\n");
      return 1;
    }
    (void)sub.poll([](const pollux::Message&) {}, 1);
    usleep(100);
  }
  // The session's announcement (kNewSession) comes with its first frame, and a poll() that
  // hands it out delivers no message: one message before the measured loop takes it, so that
  // each measured poll() delivers its own message.
  const std::byte first[1] = {};
  while (pub.offer(first, sizeof first) < 0) {
  }
  bool got = false;
  for (int i = 0; !got; ++i) {
    if (i > 100000) {
      std::fprintf(stderr, "the first message never arrived\n");
      return 1;
    }
    (void)sub.poll([&](const pollux::Message&) { got = true; }, 16);
  }
  return pollux::bench::measure(pub, sub, count, size, 0);
}
