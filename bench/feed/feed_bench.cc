// pollux-bench-feed: end-to-end feed-handler figures, measured by running pollux-feed itself
// (a publisher process and a subscriber process that rebuilds every book, over shm).
//
//   1. replay rate: a generated feed (cached as a BinaryFILE under $TMPDIR, so a second run
//      skips the generation) replayed as fast as possible, --reps times; messages/s from the
//      publisher's first offer to the subscriber's last book update.
//   2. latency: a fixed-rate (open-loop) replay, publish-to-book percentiles per ITCH message
//      and the publisher's lag behind its schedule (coordinated omission shows there).
//
//   pollux-bench-feed [--json FILE] [--messages N] [--symbols S] [--reps R] [--rate MSGS_PER_S]
//                     [--latency-messages N] [--idle busy-spin|yield|backoff] (both parts;
//                     default: yield for the replay rate - the two processes may share a core
//                     with other load, and a back-pressured publisher should give it up -
//                     busy-spin for latency)
//                     [--threading inline|shared|dedicated] [--streams N] [--batch-bytes N] [--book-threads N]
//                     [--itch FILE] [--feed-bin PATH] [--skip-rate] [--skip-latency]
//   (--help describes every flag)
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "core/clock.h"
#include "itch/generator.h"

namespace {

struct Options {
  std::uint64_t messages = 50'000'000;
  std::uint32_t symbols = 1000;
  int reps = 3;
  std::uint64_t rate = 1'000'000;
  std::uint64_t latency_messages = 10'000'000;
  std::string idle;  // empty: yield for the rate, busy-spin for latency
  std::string threading = "inline";
  std::uint32_t streams = 4;
  std::uint32_t batch_bytes = 8000;
  std::uint32_t book_threads = 1;
  std::string itch;
  std::string feed_bin;
  bool skip_rate = false, skip_latency = false;
};

// A run-time failure (not a usage error): the message, exit 1.
[[noreturn]] void Die(const std::string& msg) {
  std::fprintf(stderr, "pollux-bench-feed: %s\n", msg.c_str());
  std::exit(1);
}

Options Parse(int argc, char** argv, std::string* json_path) {
  Options o;
  std::uint64_t symbols = o.symbols, reps = static_cast<std::uint64_t>(o.reps), streams = o.streams,
                batch_bytes = o.batch_bytes, book_threads = o.book_threads;
  pollux::bench::Cli cli(
      "pollux-bench-feed",
      "pollux-bench-feed: end-to-end feed-handler figures, measured by running pollux-feed itself (a\n"
      "publisher process and a subscriber process that rebuilds every book, over shm):\n"
      "  1. replay rate: a generated feed (cached as a BinaryFILE under $TMPDIR, so a second run skips\n"
      "     the generation) replayed as fast as possible, --reps times; messages/s from the\n"
      "     publisher's first offer to the subscriber's last book update;\n"
      "  2. latency: a fixed-rate (open-loop) replay, publish-to-book percentiles per ITCH message and\n"
      "     the publisher's lag behind its schedule (coordinated omission shows there).\n"
      "No floor: this is the application's own end-to-end figure (the shm floor is pollux-bench-shm's).");
  cli.count("--messages", &o.messages, "messages in the generated replay feed")
      .count("--symbols", &symbols, "symbols (order books) in the generated feeds", 1, 1'000'000)
      .count("--reps", &reps, "replays for the rate (the median and the best are reported)", 1, 1000)
      .count("--rate", &o.rate, "messages per second of the fixed-rate latency run", 1, 100'000'000)
      .count("--latency-messages", &o.latency_messages, "messages in the latency run")
      .choice("--idle", &o.idle, {"busy-spin", "yield", "backoff", "interrupt", "adaptive"},
              "runtime.idle of both parts (default: yield for the replay rate - the two processes may\n"
              "share a core with other load, and a back-pressured publisher should give it up -\n"
              "busy-spin for latency)")
      .choice("--threading", &o.threading, {"inline", "shared", "dedicated"}, "runtime.threading")
      .count("--streams", &streams, "feed.streams (shm streams the feed is split over)", 1, 1024)
      .count("--batch-bytes", &batch_bytes, "feed.batch_bytes (ITCH messages packed per Pollux message)", 1, 1u << 20)
      .count("--book-threads", &book_threads,
             "feed.book_threads: threads per subscriber building books, each owning streams p % N\n"
             "(at most --streams; the subscriber CPU figure is their sum)",
             1, 64)
      .text("--itch", &o.itch, "FILE", "replay this BinaryFILE instead of a generated feed")
      .text("--feed-bin", &o.feed_bin, "PATH", "the pollux-feed binary (default: next to this program)")
      .toggle("--skip-rate", &o.skip_rate, "skip the replay-rate part")
      .toggle("--skip-latency", &o.skip_latency, "skip the latency part")
      .text("--json", json_path, "FILE",
            "also write JSON lines: replay (per rep: msgs_per_s, seconds, cpu), replay-median,\n"
            "publish-to-book and publisher-lag (ns percentiles of the fixed-rate run)")
      .parse(argc, argv);
  o.symbols = static_cast<std::uint32_t>(symbols);
  o.reps = static_cast<int>(reps);
  o.streams = static_cast<std::uint32_t>(streams);
  o.batch_bytes = static_cast<std::uint32_t>(batch_bytes);
  o.book_threads = static_cast<std::uint32_t>(book_threads);
  if (o.book_threads > o.streams) {
    std::fprintf(stderr, "pollux-bench-feed: --book-threads %u exceeds --streams %u (a thread owns whole streams)\n",
                 o.book_threads, o.streams);
    std::exit(64);
  }
  return o;
}

std::string SelfDir() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string p(buf, static_cast<std::size_t>(n));
  return p.substr(0, p.rfind('/'));
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The number after "key": following the first occurrence of "section" in pollux-feed's
// --summary-json output (flat enough for this).
double Num(const std::string& json, const std::string& section, const std::string& key) {
  std::size_t p = section.empty() ? 0 : json.find("\"" + section + "\"");
  if (p == std::string::npos) return -1;
  p = json.find("\"" + key + "\": ", p);
  if (p == std::string::npos) return -1;
  return std::atof(json.c_str() + p + key.size() + 4);
}

// Runs pollux-feed with `args` (stdout to /dev/null, stderr kept); returns the summary JSON.
std::string RunFeed(const Options& o, const std::string& idle, std::vector<std::string> args) {
  const std::string json = std::string(getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp") + "/pollux-bench-feed-" +
                           std::to_string(getpid()) + ".json";
  args.insert(args.begin(), o.feed_bin);
  for (const std::string& s : {std::string("--quiet"), std::string("--summary-json"), json, std::string("--set"),
                               "runtime.idle=" + idle, std::string("--set"), "runtime.threading=" + o.threading,
                               std::string("--set"), "feed.streams=" + std::to_string(o.streams), std::string("--set"),
                               "feed.batch_bytes=" + std::to_string(o.batch_bytes), std::string("--set"),
                               "feed.book_threads=" + std::to_string(o.book_threads), std::string("--set"),
                               "runtime.name=bench-feed-" + std::to_string(getpid())}) {
    args.push_back(s);
  }
  std::vector<char*> av;
  for (std::string& s : args) av.push_back(s.data());
  av.push_back(nullptr);
  std::fflush(stdout);  // or the child's freopen would print what is buffered a second time
  const pid_t pid = fork();
  if (pid == 0) {
    if (!freopen("/dev/null", "w", stdout)) _exit(126);
    execv(av[0], av.data());
    _exit(127);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    std::fprintf(stderr, "pollux-bench-feed: %s failed (status %d)\n", o.feed_bin.c_str(), st);
    std::exit(1);
  }
  std::string out = ReadFile(json);
  unlink(json.c_str());
  return out;
}

std::string EnsureFeedFile(const Options& o) {
  if (!o.itch.empty()) return o.itch;
  const std::string path = std::string(getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp") + "/pollux-bench-feed-s" +
                           std::to_string(o.symbols) + "-m" + std::to_string(o.messages) + "-seed1.itch";
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && st.st_size > 0) {
    std::printf("feed file: %s (cached, %.0f MB)\n", path.c_str(), static_cast<double>(st.st_size) / 1e6);
    return path;
  }
  pollux::itch::GeneratorOptions g;
  g.symbols = o.symbols;
  g.messages = o.messages;
  g.seed = 1;
  const auto t0 = std::chrono::steady_clock::now();
  auto bytes = pollux::itch::generate_itch(g);
  if (!bytes.ok()) Die(std::string(bytes.status().message()));
  const std::string tmp = path + ".tmp";
  if (auto s = pollux::itch::write_binary_file(tmp, *bytes); !s.ok()) Die(std::string(s.message()));
  rename(tmp.c_str(), path.c_str());
  std::printf("feed file: %s (generated in %.1f s, %.0f MB)\n", path.c_str(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
              static_cast<double>(bytes->size()) / 1e6);
  return path;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  Options o = Parse(argc, argv, &json_path);
  if (o.feed_bin.empty()) o.feed_bin = SelfDir() + "/pollux-feed";
  if (access(o.feed_bin.c_str(), X_OK) != 0) Die("cannot run " + o.feed_bin + " (build it, or use --feed-bin)");
  pollux::core::Clock::init();
  pollux::bench::JsonLines json("pollux-bench-feed", argc, argv);
  std::printf("machine: %s\nclock cost: %.1f ns per Clock::now_ns()\n", pollux::bench::machine_description().c_str(),
              pollux::bench::clock_cost_ns());
  const std::string rate_idle = o.idle.empty() ? "yield" : o.idle;
  const std::string latency_idle = o.idle.empty() ? "busy-spin" : o.idle;
  std::printf(
      "pollux-feed: %s; shm, threading %s, idle %s (rate) / %s (latency), %u stream(s), batch_bytes %u, "
      "book_threads %u, backpressure\n\n",
      o.feed_bin.c_str(), o.threading.c_str(), rate_idle.c_str(), latency_idle.c_str(), o.streams, o.batch_bytes,
      o.book_threads);

  if (!o.skip_rate) {
    const std::string file = EnsureFeedFile(o);
    std::vector<double> e2e, sub_cpu_rate;
    for (int r = 0; r < o.reps; ++r) {
      const std::string j = RunFeed(o, rate_idle, {"--itch", file, "--set", "feed.replay=max"});
      e2e.push_back(Num(j, "end_to_end", "messages_per_s"));
      const double msgs = Num(j, "publisher", "messages");
      const double pub_cpu = Num(j, "publisher", "cpu_seconds");
      const double sub_cpu = Num(j, "subscribers", "cpu_seconds");
      const double sub_secs = Num(j, "subscribers", "seconds");
      sub_cpu_rate.push_back(sub_cpu > 0 ? msgs / sub_cpu : 0);
      std::printf(
          "replay %d: %.0f messages, end to end %.2f M msg/s (%.2f s); publisher cpu %.2f s (%.1f M msg per "
          "cpu-s), subscriber cpu %.2f s = %.0f%% of its %.2f s (%.2f M msg per cpu-s); gaps %.0f; load %s",
          r + 1, msgs, e2e.back() / 1e6, Num(j, "end_to_end", "seconds"), pub_cpu,
          pub_cpu > 0 ? msgs / pub_cpu / 1e6 : 0.0, sub_cpu, sub_secs > 0 ? 100 * sub_cpu / sub_secs : 0.0, sub_secs,
          sub_cpu_rate.back() / 1e6, Num(j, "subscribers", "gaps"), ReadFile("/proc/loadavg").c_str());
      json.add(pollux::bench::JsonObject()
                   .str("case", "replay")
                   .num("run", r + 1)
                   .num("count", msgs)
                   .num("msgs_per_s", e2e.back())
                   .num("seconds", Num(j, "end_to_end", "seconds"))
                   .num("publisher_cpu_s", pub_cpu)
                   .num("subscriber_cpu_s", sub_cpu)
                   .num("subscriber_msgs_per_cpu_s", sub_cpu_rate.back())
                   .num("gaps", Num(j, "subscribers", "gaps")));
    }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    const double m = median(e2e);
    std::printf(
        "end-to-end replay: median %.2f M msg/s, best %.2f M msg/s over %d run(s) (a 400M-message day: "
        "%.1f s at the median, %.1f s at the best); subscriber median %.2f M msg per cpu-second\n\n",
        m / 1e6, *std::max_element(e2e.begin(), e2e.end()) / 1e6, o.reps, m > 0 ? 400e6 / m : 0.0,
        400e6 / *std::max_element(e2e.begin(), e2e.end()), median(sub_cpu_rate) / 1e6);
    json.add(pollux::bench::JsonObject()
                 .str("case", "replay-median")
                 .num("runs", o.reps)
                 .num("msgs_per_s", m)
                 .num("best_msgs_per_s", *std::max_element(e2e.begin(), e2e.end()))
                 .num("subscriber_msgs_per_cpu_s", median(sub_cpu_rate)));
  }

  if (!o.skip_latency) {
    const std::string j =
        RunFeed(o, latency_idle,
                {"--set", "feed.source=generator", "--set", "feed.symbols=" + std::to_string(o.symbols), "--set",
                 "feed.messages=" + std::to_string(o.latency_messages), "--set", "feed.replay=rate", "--set",
                 "feed.rate=" + std::to_string(o.rate)});
    auto us = [&](const char* section, const char* key) { return Num(j, section, key) / 1e3; };
    std::printf(
        "fixed rate %.2f M msg/s, %.0f messages (%.1f s): achieved %.3f M msg/s, %.0f Pollux messages "
        "(%.2f ITCH messages each), gaps %.0f\n",
        static_cast<double>(o.rate) / 1e6, Num(j, "publisher", "messages"), Num(j, "publisher", "seconds"),
        Num(j, "publisher", "messages_per_s") / 1e6, Num(j, "publisher", "frames"),
        Num(j, "publisher", "messages") / std::max(1.0, Num(j, "publisher", "frames")), Num(j, "subscribers", "gaps"));
    std::printf("%-34s p50 %8.2f  p90 %8.2f  p99 %8.2f  p99.9 %8.2f  p99.99 %8.2f  max %9.2f us\n",
                "publish-to-book latency", us("latency_ns", "p50"), us("latency_ns", "p90"), us("latency_ns", "p99"),
                us("latency_ns", "p99.9"), us("latency_ns", "p99.99"), us("latency_ns", "max"));
    std::printf("load during the run: %s", ReadFile("/proc/loadavg").c_str());
    std::printf("%-34s p50 %8.2f  p90 %8.2f  p99 %8.2f  p99.9 %8.2f  p99.99 %8.2f  max %9.2f us\n",
                "publisher lag behind schedule", us("lag_ns", "p50"), us("lag_ns", "p90"), us("lag_ns", "p99"),
                us("lag_ns", "p99.9"), us("lag_ns", "p99.99"), us("lag_ns", "max"));
    // pollux-feed's summary has the percentiles in ns already.
    for (const auto& [name, section] :
         {std::pair{"publish-to-book", "latency_ns"}, std::pair{"publisher-lag", "lag_ns"}}) {
      json.add(pollux::bench::JsonObject()
                   .str("case", name)
                   .num("count", Num(j, "publisher", "messages"))
                   .num("rate_msgs_per_s", o.rate)
                   .num("achieved_msgs_per_s", Num(j, "publisher", "messages_per_s"))
                   .num("p50_ns", Num(j, section, "p50"))
                   .num("p90_ns", Num(j, section, "p90"))
                   .num("p99_ns", Num(j, section, "p99"))
                   .num("p99_9_ns", Num(j, section, "p99.9"))
                   .num("p99_99_ns", Num(j, section, "p99.99"))
                   .num("max_ns", Num(j, section, "max"))
                   .num("gaps", Num(j, "subscribers", "gaps")));
    }
  }
  return json.write(json_path) ? 0 : 1;
}
