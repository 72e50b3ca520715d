// quickstart-pub: publishes N quotes on the topic "quotes" (the tutorial: README "Your first
// program"). Start quickstart-sub first, then this, from the folder holding quickstart.toml:
//
//   ./quickstart-sub & ./quickstart-pub
//
// Uses only the public API (<pollux/pollux.h>) and handles every error it can return.
#include <pollux/pollux.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "quickstart.h"

namespace {

// [readme:pub]
int publish(const std::string& config_path, std::uint64_t count, bool zero_copy) {
  // Errors come back as absl::Status with a message naming the file, line and key.
  absl::StatusOr<std::unique_ptr<pollux::Context>> ctx = pollux::Context::from_file(config_path);
  if (!ctx.ok()) {
    std::fprintf(stderr, "pub: %s\n", ctx.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<pollux::Publisher> pub = (*ctx)->publisher("quotes");
  if (!pub.ok()) {
    std::fprintf(stderr, "pub: %s\n", pub.status().ToString().c_str());
    return 1;
  }

  constexpr std::int64_t kStallLimitNs = 10'000'000'000;  // give up after 10 s without progress
  std::int64_t last_progress = pollux::now_ns();
  std::uint64_t back_pressured = 0;
  std::uint64_t i = 0;
  while (i < count && g_stop_signal == 0) {  // Ctrl-C or SIGTERM: stop and close cleanly
    const Quote q{i, 1'000'000 + static_cast<std::int64_t>(i % 100), 1'000'100 + static_cast<std::int64_t>(i % 100)};
    std::int64_t r;
    if (zero_copy) {
      // Write the message in place (the shm log itself in inline mode), then commit it.
      pollux::Claim claim;
      r = pub->claim(sizeof q, claim);
      if (r >= 0) {
        std::memcpy(claim.buffer().data(), &q, sizeof q);
        r = pub->commit(claim);  // [[nodiscard]]: a transport may still refuse the message
      }
    } else {
      r = pub->offer(&q, sizeof q);  // copies q into the stream
    }
    if (r >= 0) {  // r is the stream position after the message
      ++i;
      last_progress = pollux::now_ns();
      continue;
    }
    // Not errors: no subscriber yet (kNotConnected), or the slowest one is a whole log behind
    // (kBackPressured, shm.flow_control = "backpressure"). Run the transport's duties, let the
    // subscriber catch up, and offer the same message again - for a bounded time.
    if (r == pollux::kNotConnected || r == pollux::kBackPressured) {
      back_pressured += r == pollux::kBackPressured;
      if (pollux::now_ns() - last_progress > kStallLimitNs) {
        std::fprintf(stderr, "pub: no progress for 10 s (%s): is quickstart-sub running?\n",
                     std::string(pollux::result_name(r)).c_str());
        return 1;
      }
      (void)pub->service();
      std::this_thread::yield();
      continue;
    }
    // kClosed or kMessageTooLarge: the message can never be sent.
    std::fprintf(stderr, "pub: %s\n", std::string(pollux::result_name(r)).c_str());
    return 1;
  }
  pub->close();  // subscribers get StreamEventKind::kEndOfStream; the stream log is removed
  ctx->reset();  // stops the context: its counters file is removed
  std::printf("pub: published=%llu back_pressured=%llu%s\n", static_cast<unsigned long long>(i),
              static_cast<unsigned long long>(back_pressured), stopped_text());
  return 0;
}
// [/readme:pub]

}  // namespace

int main(int argc, char** argv) {
  constexpr char kUsage[] =
      "usage: quickstart-pub [--config FILE] [--count N] [--zero-copy]\n"
      "Publishes N quotes on the topic \"quotes\"; start quickstart-sub first.\n"
      "  --config FILE  TOML configuration (default: quickstart.toml in this folder)\n"
      "  --count N      quotes to publish (default 100000; give quickstart-sub the same N)\n"
      "  --zero-copy    write each quote in place with claim()/commit() instead of offer()\n"
      "  --version      print \"quickstart-pub <Pollux version>\" and exit\n"
      "  -h, --help     this text\n"
      "Ctrl-C or SIGTERM stops it: it closes the stream (quickstart-sub sees the end), removes its\n"
      "files from runtime.shm_dir, prints its summary with stopped=SIGINT|SIGTERM and exits 0.\n";
  Options o;
  if (const int rc = parse_options(argc, argv, "quickstart-pub", kUsage, /*zero_copy_flag=*/true, &o); rc >= 0)
    return rc;
  install_stop_handlers();
  return publish(o.config, o.count, o.zero_copy);
}
