// pollux-bench-udp-wakeup: how long a sleeping interrupt-mode poller takes to get a UDP
// datagram, next to bare epoll wakeups measured in the same run (the kernel's floor).
//
//   pollux-bench-udp-wakeup [--count N] [--gap-us G] [--runs R] [--cases ...]
//
// One process, the sender on CPU 0, the sleeper on CPU 1; one message every G us (default
// 200) so that every one finds the sleeper asleep; the latency of each into an HDR histogram.
//   bare-eventfd   a thread asleep in epoll_wait on an eventfd (a poller's doorbell); the sender
//                  stamps, writes the eventfd; latency = the sleeper's clock after epoll_wait
//   bare-udp       a thread asleep in epoll_wait on a UDP socket (127.0.0.1); the sender stamps
//                  and sends; latency = after epoll_wait + recv
//   poller-interrupt  a Pollux subscriber context (dedicated poller on CPU 1, runtime.idle =
//                  "interrupt", sleep_timer_ms = 0: it sleeps in epoll over the UDP source's
//                  epoll set after every empty cycle) and an inline publisher on CPU 0; traced
//                  stream: latency = StageTimes kRingToSubscriber (the poller handed the frame to the
//                  subscriber ring) - kOffer (the publisher's offer, which sends at once)
//   poller-busy    the same with runtime.idle = "busy-spin" (no sleep: the wakeup's share is the
//                  difference)
// The application thread of the poller cases drains the subscriber with Subscriber::wait()
// (unpinned); it is not on the measured path (kRingToSubscriber is stamped by the poller).
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "pollux/pollux.h"
#include "tools/common/loopback_udp.h"

namespace {

using pollux::core::Clock;
using pollux::core::Histogram;

int g_port = 0;

void sleep_us(int us) {
  timespec ts{0, static_cast<long>(us) * 1000};
  nanosleep(&ts, nullptr);
}

Histogram bare(bool udp, std::uint64_t count, int gap_us) {
  int fd = -1, tx = -1;
  sockaddr_in a{};
  if (udp) {
    fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    tx = ::socket(AF_INET, SOCK_DGRAM, 0);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<std::uint16_t>(g_port));
    if (fd < 0 || tx < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) std::abort();
    if (::connect(tx, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) std::abort();
  } else {
    fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  }
  const int ep = epoll_create1(0);
  epoll_event ev{};
  ev.events = EPOLLIN;
  if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) std::abort();
  std::atomic<std::int64_t> sent_ns{0};
  std::atomic<std::uint64_t> done{0};
  Histogram h;
  std::thread sleeper([&] {
    pollux::bench::pin(1);
    for (std::uint64_t i = 0; i < count; ++i) {
      epoll_event e;
      while (epoll_wait(ep, &e, 1, -1) != 1) {
      }
      std::int64_t t0 = 0;
      if (udp) {
        while (::recv(fd, &t0, sizeof t0, 0) != sizeof t0) {
        }
      } else {
        std::uint64_t v;
        (void)!::read(fd, &v, sizeof v);
        t0 = sent_ns.load(std::memory_order_acquire);  // pairs with the sender's release store
      }
      h.record(Clock::now_ns() - t0);
      done.store(i + 1, std::memory_order_release);  // pairs with the sender's acquire
    }
  });
  pollux::bench::pin(0);
  for (std::uint64_t i = 0; i < count; ++i) {
    sleep_us(gap_us);
    const std::int64_t t0 = Clock::now_ns();
    if (udp) {
      (void)!::send(tx, &t0, sizeof t0, 0);
    } else {
      sent_ns.store(t0, std::memory_order_release);
      const std::uint64_t one = 1;
      (void)!::write(fd, &one, sizeof one);
    }
    while (done.load(std::memory_order_acquire) <= i) sched_yield();
  }
  sleeper.join();
  for (int f : {fd, tx, ep}) {
    if (f >= 0) ::close(f);
  }
  return h;
}

std::string config(const std::string& threading, const std::string& idle, const std::string& name) {
  return absl::StrFormat(R"([runtime]
name = "%s"
threading = "%s"
pollers = 1
poller_cores = [1]
idle = "%s"
sleep_timer_ms = 0
counters = false
%sheartbeat_interval_us = 1000000
status_interval_ms = 1000
[[streams]]
topic = "w"
id = 1
udp_port = %d
trace = true
)",
                         name, threading, idle, pollux::tools::loopback_udp_tables(8192), g_port + 1);
}

Histogram poller(const std::string& idle, std::uint64_t count, int gap_us) {
  auto sctx = pollux::Context::from_string(config("dedicated", idle, "udpwake-sub"), "sub");
  auto pctx = pollux::Context::from_string(config("inline", "busy-spin", "udpwake-pub"), "pub");
  if (!sctx.ok() || !pctx.ok()) {
    std::fprintf(stderr, "%s %s\n", std::string(sctx.status().message()).c_str(),
                 std::string(pctx.status().message()).c_str());
    std::exit(2);
  }
  auto sub = (*sctx)->subscriber("w");
  auto pub = (*pctx)->publisher("w");
  if (!sub.ok() || !pub.ok()) std::exit(2);
  pollux::bench::pin(0);
  while (!pub->is_connected()) {
    pub->service();
    sleep_us(100);
  }
  Histogram h;
  std::atomic<std::uint64_t> got{0};
  std::atomic<bool> stop{false};
  std::thread app([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      const int n = sub->poll(
          [&](const pollux::Message& m) {
            if (m.trace != nullptr) {
              h.record(m.trace->ns[pollux::StageTimes::kRingToSubscriber] - m.trace->ns[pollux::StageTimes::kOffer]);
            }
            got.fetch_add(1, std::memory_order_release);  // pairs with the sender's acquire
          },
          16);
      if (n == 0) (void)sub->wait(10'000);
    }
  });
  std::byte payload[32] = {};
  for (std::uint64_t i = 0; i < count; ++i) {
    sleep_us(gap_us);
    while (pub->offer(payload, sizeof payload) < 0) pub->service();
    const std::int64_t give_up = Clock::now_ns() + 1'000'000'000;
    while (got.load(std::memory_order_acquire) <= i && Clock::now_ns() < give_up) sched_yield();
    pub->service();
  }
  stop.store(true, std::memory_order_relaxed);
  app.join();
  return h;
}

}  // namespace

constexpr const char* kHelp = R"(pollux-bench-udp-wakeup: how long a sleeping interrupt-mode poller takes to get a
UDP datagram, next to bare epoll wakeups measured in the same run (the kernel's floor). One
process; the sender on CPU 0, the sleeper on CPU 1; one message every --gap-us so that every
one finds the sleeper asleep.

  --count N       messages per case and run (default 20000)
  --gap-us G      microseconds between messages (default 200)
  --runs R        interleaved rounds of all cases (default 3; the histograms are merged)
  --cases LIST    bare-eventfd,bare-udp,poller-interrupt,poller-busy (default all):
                    bare-eventfd      a thread asleep in epoll_wait on an eventfd
                    bare-udp          a thread asleep in epoll_wait on a UDP socket (127.0.0.1)
                    poller-interrupt  a Pollux dedicated poller, runtime.idle = "interrupt",
                                      sleep_timer_ms = 0: offer -> the frame in the subscriber ring
                    poller-busy       the same with runtime.idle = "busy-spin" (no sleep)
  --json FILE     also write one JSON object per case (p50_ns ... max_ns, count) and the
                  poller-interrupt / bare-udp p50 ratio
  --version       print "pollux-bench-udp-wakeup <version>" and exit
  -h, --help      this text
)";

int main(int argc, char** argv) {
  std::uint64_t count = 20'000;
  int gap_us = 200, runs = 3;
  std::string cases = "bare-eventfd,bare-udp,poller-interrupt,poller-busy";
  std::string json_path;
  auto usage = [](const std::string& why) {
    std::fprintf(stderr, "pollux-bench-udp-wakeup: %s (see --help)\n", why.c_str());
    std::exit(64);
  };
  auto number = [&](const std::string& flag, const std::string& v) {
    char* end = nullptr;
    const long long n = std::strtoll(v.c_str(), &end, 10);
    if (end == v.c_str() || *end != 0 || n <= 0) usage(flag + ": a positive integer, got \"" + v + "\"");
    return n;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (const int rc = pollux::cli::handle_standard_flag(k, "pollux-bench-udp-wakeup", kHelp); rc >= 0) return rc;
    if (k != "--count" && k != "--gap-us" && k != "--runs" && k != "--cases" && k != "--json") {
      return pollux::cli::unknown_flag("pollux-bench-udp-wakeup", k, kHelp);
    }
    if (i + 1 >= argc) usage(k + " needs a value");
    const std::string v = argv[++i];
    if (k == "--count") count = static_cast<std::uint64_t>(number(k, v));
    if (k == "--gap-us") gap_us = static_cast<int>(number(k, v));
    if (k == "--runs") runs = static_cast<int>(number(k, v));
    if (k == "--cases") cases = v;
    if (k == "--json") json_path = v;
  }
  const std::vector<std::string> known{"bare-eventfd", "bare-udp", "poller-interrupt", "poller-busy"};
  for (const auto& c : absl::StrSplit(cases, ',')) {
    if (std::find(known.begin(), known.end(), std::string(c)) == known.end()) {
      usage("--cases: unknown case \"" + std::string(c) + "\"");
    }
  }
  g_port = 31000 + (getpid() % 1000) * 4;
  Clock::init();
  std::printf("machine: %s\n", pollux::bench::machine_description().c_str());
  std::printf("wakeup: %llu messages, one every %d us, sender CPU 0, sleeper CPU 1\n",
              static_cast<unsigned long long>(count), gap_us);
  auto want = [&](const char* c) { return ("," + cases + ",").find(std::string(",") + c + ",") != std::string::npos; };
  std::map<std::string, Histogram> all;
  for (int r = 0; r < runs; ++r) {  // interleaved: drifts of the machine hit every case alike
    if (want("bare-eventfd")) all["bare-eventfd"].merge(bare(false, count, gap_us));
    if (want("bare-udp")) all["bare-udp"].merge(bare(true, count, gap_us));
    if (want("poller-interrupt")) all["poller-interrupt"].merge(poller("interrupt", count, gap_us));
    if (want("poller-busy")) all["poller-busy"].merge(poller("busy-spin", count, gap_us));
  }
  std::string json;
  for (const auto& k : known) {
    if (all.count(k) == 0) continue;
    const Histogram& h = all[k];
    pollux::bench::print_hist(k.c_str(), h);
    absl::StrAppendFormat(
        &json,
        R"({"case": "%s", "p50_ns": %d, "p90_ns": %d, "p99_ns": %d, "p99_9_ns": %d, "max_ns": %d, "count": %u})"
        "\n",
        k, h.percentile(50), h.percentile(90), h.percentile(99), h.percentile(99.9), h.max(), h.count());
  }
  if (all.count("poller-interrupt") != 0 && all.count("bare-udp") != 0 && all["bare-udp"].percentile(50) > 0) {
    const double r = static_cast<double>(all["poller-interrupt"].percentile(50)) /
                     static_cast<double>(all["bare-udp"].percentile(50));
    std::printf("ratio p50 poller-interrupt / bare-udp  %.2fx\n", r);
    absl::StrAppendFormat(&json,
                          R"({"ratio": "poller-interrupt / bare-udp", "p50": %.3f})"
                          "\n",
                          r);
  }
  return pollux::bench::write_text(json_path, json, "pollux-bench-udp-wakeup") ? 0 : 1;
}
