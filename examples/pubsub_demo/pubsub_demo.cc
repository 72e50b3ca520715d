// pollux-demo: the smallest complete Pollux program - a publisher process and a subscriber
// process on one host over shared memory, using only the public API (pollux/pollux.h).
//
//   pollux-demo [--config FILE] [--count N]
//
// The subscriber reports how many messages arrived, any gaps, and the publisher-to-handler
// latency percentiles measured from Message::publisher_ns.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "common/absl_flags_cli.h"
#include "pollux/pollux.h"

ABSL_FLAG(std::string, config, "", "TOML configuration FILE (default: the embedded one: shared memory)");
ABSL_FLAG(std::uint64_t, count, 1'000'000, "quotes to publish");

namespace {

// The embedded default: shared memory, inline threading (no poller threads), back-pressure so
// the demo loses nothing.
constexpr char kDefaultConfig[] = R"(
[runtime]
threading = "inline"
name = "demo"
[shm]
flow_control = "backpressure"
[[streams]]
topic = "quotes"
id = 1
)";

absl::StatusOr<std::unique_ptr<pollux::Context>> open(const std::string& path) {
  return path.empty() ? pollux::Context::from_string(kDefaultConfig, "<embedded demo config>")
                      : pollux::Context::from_file(path);
}

int subscriber(const std::string& cfg, std::uint64_t count, int ready_fd) {
  auto ctx = open(cfg);
  if (!ctx.ok()) {
    std::fprintf(stderr, "subscriber: %s\n", std::string(ctx.status().message()).c_str());
    return 2;
  }
  auto sub = (*ctx)->subscriber("quotes");
  if (!sub.ok()) {
    std::fprintf(stderr, "subscriber: %s\n", std::string(sub.status().message()).c_str());
    return 2;
  }
  (void)!write(ready_fd, "r", 1);
  std::vector<std::int64_t> latency;
  latency.reserve(count);
  std::uint64_t received = 0, lost = 0;
  bool ended = false;
  while (!ended && received + lost < count) {
    const int n = sub->poll(
        [&](const pollux::Message& m) {
          // publisher_ns is the publisher's pollux::now_ns(): one clock for every process of a host.
          latency.push_back(pollux::now_ns() - m.publisher_ns);
          ++received;
        },
        [&](const pollux::Gap& g) { lost += g.count; },
        [&](const pollux::StreamEvent& e) { ended = e.kind != pollux::StreamEventKind::kNewSession; }, 256);
    if (n == 0) std::this_thread::yield();
  }
  std::sort(latency.begin(), latency.end());
  auto pct = [&](double p) {
    return latency.empty()
               ? 0.0
               : latency[std::min(latency.size() - 1, static_cast<std::size_t>(p / 100 * latency.size()))] / 1e3;
  };
  std::printf(
      "subscriber: %llu messages received, %llu lost; publish->handler latency us (queueing included while the "
      "publisher runs ahead): p50 %.2f p99 %.2f p99.9 %.2f\n",
      static_cast<unsigned long long>(received), static_cast<unsigned long long>(lost), pct(50), pct(99), pct(99.9));
  return received + lost == count ? 0 : 1;
}

int publisher(const std::string& cfg, std::uint64_t count) {
  auto ctx = open(cfg);
  if (!ctx.ok()) {
    std::fprintf(stderr, "publisher: %s\n", std::string(ctx.status().message()).c_str());
    return 2;
  }
  std::printf("%s", (*ctx)->describe().c_str());
  auto pub = (*ctx)->publisher("quotes");
  if (!pub.ok()) {
    std::fprintf(stderr, "publisher: %s\n", std::string(pub.status().message()).c_str());
    return 2;
  }
  while (!pub->is_connected()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const auto t0 = pollux::now_ns();
  for (std::uint64_t i = 0; i < count; ++i) {
    struct Quote {
      std::uint64_t id;
      std::int64_t bid, ask;
    } q{i, 1000000 + static_cast<std::int64_t>(i % 100), 1000100 + static_cast<std::int64_t>(i % 100)};
    std::int64_t r;
    while ((r = pub->offer(&q, sizeof q)) < 0) {
      if (r != pollux::kBackPressured) {
        std::fprintf(stderr, "publisher: %s\n", std::string(pollux::result_name(r)).c_str());
        return 1;
      }
      std::this_thread::yield();  // the subscriber is behind: let it run
    }
  }
  const double secs = static_cast<double>(pollux::now_ns() - t0) / 1e9;
  std::printf("publisher: %llu messages in %.3f s (%.1f million/s)\n", static_cast<unsigned long long>(count), secs,
              static_cast<double>(count) / secs / 1e6);
  pub->close();  // subscribers see the end of the stream
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  pollux::examples::parse_absl_flags(
      argc, argv,
      {"pollux-demo",
       "A publisher process and a subscriber process exchange N quotes over one Pollux stream\n"
       "and the subscriber prints what it received, lost, and the publish-to-handler latency.\n"
       "  pollux-demo [--config FILE] [--count N]\n\n",
       {"config", "count"}});
  const std::string cfg = absl::GetFlag(FLAGS_config);
  const std::uint64_t count = absl::GetFlag(FLAGS_count);
  if (count == 0) pollux::examples::usage_error("pollux-demo", "--count must be at least 1");
  int ready[2];
  if (pipe(ready) != 0) return 1;
  const pid_t child = fork();
  if (child == 0) {
    const int rc = subscriber(cfg, count, ready[1]);
    std::fflush(stdout);  // _exit does not flush stdio
    _exit(rc);
  }
  char c;
  if (read(ready[0], &c, 1) != 1) return 1;
  const int prc = publisher(cfg, count);
  int status = 0;
  waitpid(child, &status, 0);
  return prc != 0 ? prc : (WIFEXITED(status) ? WEXITSTATUS(status) : 1);
}
