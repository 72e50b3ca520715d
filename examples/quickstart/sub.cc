// quickstart-sub: receives N quotes on the topic "quotes", checks each, and prints how many
// arrived and their publish-to-handler latency (the tutorial: README "Your first program").
//
//   ./quickstart-sub & ./quickstart-pub
//
// Exits 0 when all N quotes arrived intact, 1 otherwise; stopped by Ctrl-C or SIGTERM, it closes
// cleanly, prints its summary and exits 0 when what arrived was intact.
#include <pollux/pollux.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

#include "quickstart.h"

namespace {

// [readme:sub]
int subscribe(const std::string& config_path, std::uint64_t count) {
  absl::StatusOr<std::unique_ptr<pollux::Context>> ctx = pollux::Context::from_file(config_path);
  if (!ctx.ok()) {
    std::fprintf(stderr, "sub: %s\n", ctx.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<pollux::Subscriber> sub = (*ctx)->subscriber("quotes");
  if (!sub.ok()) {
    std::fprintf(stderr, "sub: %s\n", sub.status().ToString().c_str());
    return 1;
  }

  std::uint64_t received = 0, lost = 0, bad = 0;
  std::int64_t lat_min = std::numeric_limits<std::int64_t>::max(), lat_max = 0, lat_sum = 0;
  bool ended = false;
  constexpr std::int64_t kIdleLimitNs = 30'000'000'000;  // give up after 30 s without a message
  std::int64_t last_message = pollux::now_ns();
  while (!ended && received + lost < count && g_stop_signal == 0) {  // Ctrl-C or SIGTERM: stop cleanly
    const int n = sub->poll(
        [&](const pollux::Message& m) {  // m.payload is valid during this call only
          // publisher_ns is the publisher's pollux::now_ns() at offer(): on one host, the
          // difference is the latency (queueing included while the publisher runs ahead).
          const std::int64_t latency = pollux::now_ns() - m.publisher_ns;
          Quote q;
          if (m.payload.size() != sizeof q) {  // validate before reading
            ++bad;
            return;
          }
          std::memcpy(&q, m.payload.data(), sizeof q);
          if (q.id + 1 != m.sequence) ++bad;  // sequences count from 1 per publisher session
          ++received;
          lat_min = std::min(lat_min, latency);
          lat_max = std::max(lat_max, latency);
          lat_sum += latency;
        },
        [&](const pollux::Gap& g) { lost += g.count; },  // messages that will never arrive
        [&](const pollux::StreamEvent& e) {
          if (e.kind == pollux::StreamEventKind::kEndOfStream || e.kind == pollux::StreamEventKind::kPublisherDied) {
            ended = true;  // the publisher closed (or died): nothing more will come
          }
        },
        /*limit=*/256);
    if (n > 0) {
      last_message = pollux::now_ns();
    } else if (pollux::now_ns() - last_message > kIdleLimitNs) {
      std::fprintf(stderr, "sub: nothing for 30 s: is quickstart-pub running with the same config?\n");
      return 1;
    } else {
      (void)sub->wait(/*timeout_us=*/100'000);  // sleep until a message comes (a signal ends it early)
    }
  }
  sub->close();
  ctx->reset();  // stops the context: its counters file is removed
  // The latency is offer-to-handler with the queue in between: quickstart-pub offers as fast as
  // it can and runs ahead by up to a whole log, so mean and max are mostly time spent waiting in
  // the log (milliseconds), not the transport's cost (pollux-latency measures that).
  std::printf("sub: received=%llu lost=%llu bad=%llu latency_ns min=%lld mean=%lld max=%lld%s\n",
              static_cast<unsigned long long>(received), static_cast<unsigned long long>(lost),
              static_cast<unsigned long long>(bad), static_cast<long long>(received ? lat_min : 0),
              static_cast<long long>(received ? lat_sum / static_cast<std::int64_t>(received) : 0),
              static_cast<long long>(lat_max), stopped_text());
  std::printf(
      "sub: latency_ns is offer to handler, queueing included: the publisher runs ahead, so mean and max "
      "mostly measure the backlog (pollux-latency measures the transport alone)\n");
  if (g_stop_signal != 0) return lost == 0 && bad == 0 ? 0 : 1;  // stopped: all that came was intact
  return received == count && lost == 0 && bad == 0 ? 0 : 1;
}
// [/readme:sub]

}  // namespace

int main(int argc, char** argv) {
  constexpr char kUsage[] =
      "usage: quickstart-sub [--config FILE] [--count N]\n"
      "Receives N quotes on the topic \"quotes\" from quickstart-pub and prints how many arrived,\n"
      "how many were lost or malformed, and the publish-to-handler latency (queueing included).\n"
      "Exit 0: all N intact. Ctrl-C or SIGTERM stops it: it removes its files from runtime.shm_dir,\n"
      "prints its summary with stopped=SIGINT|SIGTERM and exits 0 if what came was intact, else 1.\n"
      "  --config FILE  TOML configuration (default: quickstart.toml in this folder)\n"
      "  --count N      quotes to expect (default 100000, as quickstart-pub)\n"
      "  --version      print \"quickstart-sub <Pollux version>\" and exit\n"
      "  -h, --help     this text\n";
  Options o;
  if (const int rc = parse_options(argc, argv, "quickstart-sub", kUsage, /*zero_copy_flag=*/false, &o); rc >= 0)
    return rc;
  install_stop_handlers();
  return subscribe(o.config, o.count);
}
