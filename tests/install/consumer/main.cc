// A program built outside the Pollux tree, against the installed package.
#include <unistd.h>

#include <cstdio>
#include <string>

#include <pollux/pollux.h>

int main() {
  const std::string cfg = "[runtime]\nthreading = \"inline\"\nname = \"consumer-" + std::to_string(getpid()) +
                          "\"\ncounters = false\n[shm]\nflow_control = \"backpressure\"\n";
  auto ctx = pollux::Context::from_string(cfg);
  if (!ctx.ok()) {
    std::fprintf(stderr, "%s\n", std::string(ctx.status().message()).c_str());
    return 1;
  }
  auto sub = (*ctx)->subscriber("hello");
  auto pub = (*ctx)->publisher("hello");
  if (!sub.ok() || !pub.ok()) return 1;
  int received = 0;
  for (int i = 0; i < 1000; ++i) {
    while (pub->offer(&i, sizeof i) < 0) {
      (void)sub->poll([&](const pollux::Message&) { ++received; }, 64);
    }
  }
  while (received < 1000) {
    if (sub->poll([&](const pollux::Message&) { ++received; }, 64) == 0) break;
  }
  std::printf("received %d messages\n", received);
  return received == 1000 ? 0 : 1;
}
