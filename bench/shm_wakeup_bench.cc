// pollux-bench-shm-wakeup: what a wake-up costs in shm interrupt mode, next to the bare futex
// floor measured in the same run, and what the writer pays per offer when nobody sleeps.
//
//   pollux-bench-shm-wakeup [--count N] [--cases futex,inline,futex-chain,dedicated,offer] [--json FILE]
//
// futex:     two processes ping-pong through a MAP_SHARED page, each blocking in FUTEX_WAIT
//            until the other's FUTEX_WAKE: round trip / 2 = one cross-process wake-up.
// inline:    Pollux ping-pong, inline mode, runtime.idle = "interrupt", sleep_timer_ms = 0; both
//            sides block in Subscriber::wait(-1) (the shm futex protocol). Round trip / 2.
// dedicated: as inline, but the parent's publisher and subscriber are driven by a dedicated poller
//            in interrupt mode, pinned to the parent's CPU (the poller sleeps on the segment's word
//            and its doorbell, the app thread on its ring's eventfd): a round trip crosses up to
//            four sleeping threads (app -> poller -> child -> poller -> app), not two.
// futex-chain: the bare floor of that topology: the parent's thread wakes a relay thread on the
//            same CPU, the relay wakes the child, the child wakes the relay, the relay wakes the
//            parent's thread; every hop is a FUTEX_WAKE of a thread blocked in FUTEX_WAIT.
// offer:     one process, inline publisher, one attached subscriber that never sleeps (lossy
//            flow control, so the writer never waits): ns per offer() of a 32-byte message.
//            The writer's wake check is one load of WakeState::sleepers after each tail store.
// Processes are pinned to CPUs 0 and 1.
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "bench/bench_util.h"
#include "pollux/pollux.h"

namespace {

using pollux::core::Clock;
using pollux::core::Histogram;

std::string config(const std::string& name, const std::string& threading, const char* flow, int poller_cpu = -1) {
  const std::string cores = poller_cpu >= 0 ? "poller_cores = [" + std::to_string(poller_cpu) + "]\n" : "";
  return "[runtime]\nname = \"" + name + "\"\nthreading = \"" + threading + "\"\n" + cores +
         "pollers = 1\nidle = \"interrupt\"\nsleep_timer_ms = 0\ncounters = false\n[shm]\nlog_size = \"1MiB\"\n"
         "flow_control = \"" +
         flow + "\"\n";
}

long futex(std::atomic<std::uint32_t>* w, int op, std::uint32_t v) {
  return syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(w), op, v, nullptr, nullptr, 0);
}

// ---- bare futex floor ------------------------------------------------------------------------------

Histogram futex_pingpong(std::uint64_t count, std::uint64_t warmup) {
  struct alignas(128) Word {
    std::atomic<std::uint32_t> v{0};
  };
  auto* w = static_cast<Word*>(mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  new (&w[0]) Word();
  new (&w[1]) Word();
  const std::uint64_t total = count + warmup;
  auto wait_for = [](std::atomic<std::uint32_t>* a, std::uint32_t want) {
    for (std::uint32_t cur; (cur = a->load(std::memory_order_acquire)) != want;) (void)futex(a, FUTEX_WAIT, cur);
  };
  const pid_t child = pollux::bench::fork_pair([&] {
    for (std::uint32_t i = 1; i <= total; ++i) {
      wait_for(&w[0].v, i);
      w[1].v.store(i, std::memory_order_release);
      (void)futex(&w[1].v, FUTEX_WAKE, 1);
    }
    return 0;
  });
  Histogram h;
  for (std::uint32_t i = 1; i <= total; ++i) {
    const std::int64_t t0 = Clock::now_ns();
    w[0].v.store(i, std::memory_order_release);
    (void)futex(&w[0].v, FUTEX_WAKE, 1);
    wait_for(&w[1].v, i);
    if (i > warmup) h.record((Clock::now_ns() - t0) / 2);
  }
  waitpid(child, nullptr, 0);
  munmap(w, 4096);
  return h;
}

// The bare floor of the dedicated topology: A (parent thread) -> P (relay, parent process, same
// CPU as A) -> C (child) -> P -> A, each hop a futex wake of a blocked thread.
Histogram futex_chain(std::uint64_t count, std::uint64_t warmup) {
  struct alignas(128) Word {
    std::atomic<std::uint32_t> v{0};
  };
  constexpr int kWords = 4;  // 0: A -> P, 1: P -> C, 2: C -> P, 3: P -> A
  auto* w = static_cast<Word*>(mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  for (int i = 0; i < kWords; ++i) new (&w[i]) Word();
  const std::uint64_t total = count + warmup;
  auto wait_for = [](std::atomic<std::uint32_t>* a, std::uint32_t want) {
    for (std::uint32_t cur; (cur = a->load(std::memory_order_acquire)) != want;) (void)futex(a, FUTEX_WAIT, cur);
  };
  auto post = [](std::atomic<std::uint32_t>* a, std::uint32_t v) {
    a->store(v, std::memory_order_release);  // pairs with wait_for()'s acquire
    (void)futex(a, FUTEX_WAKE, 1);
  };
  const pid_t child = pollux::bench::fork_pair([&] {
    for (std::uint32_t i = 1; i <= total; ++i) {
      wait_for(&w[1].v, i);
      post(&w[2].v, i);
    }
    return 0;
  });
  std::thread relay([&] {
    pollux::bench::pin(0);
    for (std::uint32_t i = 1; i <= total; ++i) {
      wait_for(&w[0].v, i);
      post(&w[1].v, i);
      wait_for(&w[2].v, i);
      post(&w[3].v, i);
    }
  });
  Histogram h;
  for (std::uint32_t i = 1; i <= total; ++i) {
    const std::int64_t t0 = Clock::now_ns();
    post(&w[0].v, i);
    wait_for(&w[3].v, i);
    if (i > warmup) h.record((Clock::now_ns() - t0) / 2);
  }
  relay.join();
  waitpid(child, nullptr, 0);
  munmap(w, 4096);
  return h;
}

// ---- Pollux ping-pong in interrupt mode --------------------------------------------------------------

int pong_child(const std::string& name, std::uint64_t total) {
  auto ctx = pollux::Context::from_string(config(name, "inline", "backpressure"), "bench");
  if (!ctx.ok()) {
    std::fprintf(stderr, "%s\n", std::string(ctx.status().message()).c_str());
    return 2;
  }
  auto sub = (*ctx)->subscriber("ping");
  auto pub = (*ctx)->publisher("pong");
  if (!sub.ok() || !pub.ok()) return 3;
  while (!pub->is_connected() || !sub->is_connected()) {
    (void)sub->poll([](const pollux::Message&) {}, 1);
    usleep(100);
  }
  std::uint64_t n = 0;
  while (n < total) {
    const int k = sub->poll(
        [&](const pollux::Message& m) {
          while (pub->offer(m.payload) < 0) std::this_thread::yield();
          ++n;  // messages only: poll() also counts gaps and events
        },
        16);
    if (k == 0) (void)sub->wait(-1);
  }
  // The parent closes first (its last pong read): wait for the end of the ping stream.
  for (int i = 0; i < 2000 && sub->is_connected(); ++i) {
    (void)sub->poll([](const pollux::Message&) {}, 16);
    usleep(1000);
  }
  return 0;
}

Histogram pollux_pingpong(const std::string& threading, std::uint64_t count, std::uint64_t warmup) {
  static int run = 0;
  const std::string name = "wakebench-" + std::to_string(getpid()) + "-" + std::to_string(run++);
  const std::uint64_t total = count + warmup;
  const pid_t child = pollux::bench::fork_pair([&] { return pong_child(name, total); });
  Histogram h;
  {
    auto ctx =
        pollux::Context::from_string(config(name, threading, "backpressure", threading == "inline" ? -1 : 0), "bench");
    if (!ctx.ok()) {
      std::fprintf(stderr, "%s\n", std::string(ctx.status().message()).c_str());
      kill(child, SIGKILL);
      waitpid(child, nullptr, 0);
      return h;
    }
    auto pub = (*ctx)->publisher("ping");
    auto sub = (*ctx)->subscriber("pong");
    while (!pub->is_connected() || !sub->is_connected()) {
      (void)sub->poll([](const pollux::Message&) {}, 1);
      usleep(100);
    }
    std::uint64_t payload[4] = {};
    for (std::uint64_t i = 0; i < total; ++i) {
      const std::int64_t t0 = Clock::now_ns();
      payload[0] = i;
      while (pub->offer(payload, sizeof payload) < 0) std::this_thread::yield();
      bool got = false;
      while (!got) {
        const int k = sub->poll([&](const pollux::Message&) { got = true; }, 1);
        if (k == 0) (void)sub->wait(-1);
      }
      if (i >= warmup) h.record((Clock::now_ns() - t0) / 2);
    }
  }
  waitpid(child, nullptr, 0);
  return h;
}

// ---- writer cost per offer, nobody sleeping -----------------------------------------------------------

Histogram offer_cost(std::uint64_t count) {
  const std::string name = "wakebench-offer-" + std::to_string(getpid());
  auto ctx = pollux::Context::from_string(config(name, "inline", "lossy"), "bench");
  Histogram h;
  if (!ctx.ok()) return h;
  auto pub = (*ctx)->publisher("ticks");
  auto sub = (*ctx)->subscriber("ticks");  // attached, never polled, never asleep
  while (!pub->is_connected()) {
    (void)sub->poll([](const pollux::Message&) {}, 1);
    usleep(100);
  }
  pollux::bench::pin(0);
  std::uint64_t payload[4] = {};
  constexpr std::uint64_t kBatch = 1000;
  for (std::uint64_t done = 0; done < count; done += kBatch) {
    const std::int64_t t0 = Clock::now_ns();
    for (std::uint64_t i = 0; i < kBatch; ++i) {
      payload[0] = done + i;
      (void)pub->offer(payload, sizeof payload);
    }
    h.record((Clock::now_ns() - t0) * 1000 / static_cast<std::int64_t>(kBatch));  // ps per offer
  }
  return h;
}

}  // namespace

constexpr const char* kHelp = R"(pollux-bench-shm-wakeup: what a wake-up costs in shm interrupt mode, next to
bare futex floors measured in the same run, and what the writer pays per offer when nobody sleeps.
Two processes pinned to CPUs 0 and 1 (the parent's poller, in the dedicated case, on CPU 0).

  --count N        round trips per case (default 100000; 10% more are run first as warm-up)
  --cases LIST     comma-separated, in this order (default all):
                     futex        bare FUTEX_WAIT/FUTEX_WAKE ping-pong between the two processes
                     inline       Pollux, inline mode, runtime.idle = "interrupt", both sides in
                                  Subscriber::wait(-1): one sleeping thread per direction
                     futex-chain  bare floor of the dedicated topology (app -> relay -> child ->
                                  relay -> app, each hop a futex wake)
                     dedicated    Pollux, the parent's streams on a dedicated interrupt-mode poller
                     offer        ns per offer() of 32 bytes with an attached subscriber awake
  --json FILE      also write one JSON object per case (name, p50_ns, p90_ns, p99_ns,
                   p99_9_ns, max_ns, count) and the ratios to their floors
  --version        print "pollux-bench-shm-wakeup <version>" and exit
  -h, --help       this text

Reported: RTT/2 percentiles; ratio lines inline/futex and dedicated/futex-chain (p50).
)";

std::string json_case(const std::string& name, const Histogram& h) {
  char buf[512];
  std::snprintf(
      buf, sizeof buf,
      R"({"case": "%s", "p50_ns": %lld, "p90_ns": %lld, "p99_ns": %lld, "p99_9_ns": %lld, "max_ns": %lld, "count": %llu})",
      name.c_str(), static_cast<long long>(h.percentile(50)), static_cast<long long>(h.percentile(90)),
      static_cast<long long>(h.percentile(99)), static_cast<long long>(h.percentile(99.9)),
      static_cast<long long>(h.max()), static_cast<unsigned long long>(h.count()));
  return buf;
}

int main(int argc, char** argv) {
  std::uint64_t count = 100'000;
  std::string cases = "futex,inline,futex-chain,dedicated,offer";
  std::string json_path;
  auto usage = [&](const std::string& why) {
    std::fprintf(stderr, "pollux-bench-shm-wakeup: %s (see --help)\n", why.c_str());
    std::exit(64);
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (const int rc = pollux::cli::handle_standard_flag(a, "pollux-bench-shm-wakeup", kHelp); rc >= 0) {
      return rc;  // --help, --version
    } else if (a == "--count" || a == "--cases" || a == "--json") {
      if (i + 1 >= argc) usage(a + " needs a value");
      const std::string v = argv[++i];
      if (a == "--count") {
        char* end = nullptr;
        count = std::strtoull(v.c_str(), &end, 10);
        if (end == v.c_str() || *end != 0 || count == 0) usage("--count: a positive integer, got \"" + v + "\"");
      } else if (a == "--cases") {
        cases = v;
      } else {
        json_path = v;
      }
    } else {
      return pollux::cli::unknown_flag("pollux-bench-shm-wakeup", a, kHelp);
    }
  }
  const char* known[] = {"futex", "inline", "futex-chain", "dedicated", "offer"};
  for (size_t b = 0; b <= cases.size();) {
    const size_t e = std::min(cases.find(',', b), cases.size());
    const std::string c = cases.substr(b, e - b);
    if (std::find(std::begin(known), std::end(known), c) == std::end(known))
      usage("--cases: unknown case \"" + c + "\"");
    b = e + 1;
  }
  std::printf("%s\n", pollux::bench::machine_description().c_str());
  const std::uint64_t warmup = count / 10;
  auto want = [&](const char* c) { return ("," + cases + ",").find(std::string(",") + c + ",") != std::string::npos; };
  std::string json;
  Histogram futex_h, inline_h, chain_h, ded_h;
  // Runs case `name` when it was asked for: its histogram into *h, printed as `label` and added
  // to the JSON.
  auto run_case = [&](const char* name, const char* label, Histogram* h, auto&& measure) {
    if (!want(name)) return;
    *h = measure();
    pollux::bench::print_hist(label, *h);
    json += json_case(name, *h) + "\n";
  };
  run_case("futex", "bare futex wake (RTT/2)", &futex_h, [&] { return futex_pingpong(count, warmup); });
  run_case("inline", "shm inline interrupt (RTT/2)", &inline_h,
           [&] { return pollux_pingpong("inline", count, warmup); });
  run_case("futex-chain", "bare futex chain, 4 hops (RTT/2)", &chain_h, [&] { return futex_chain(count, warmup); });
  run_case("dedicated", "shm dedicated interrupt (RTT/2)", &ded_h,
           [&] { return pollux_pingpong("dedicated", count, warmup); });
  auto ratio = [&](const char* what, const Histogram& a, const Histogram& b) {
    if (a.count() == 0 || b.count() == 0 || b.percentile(50) == 0) return;
    const double r = static_cast<double>(a.percentile(50)) / static_cast<double>(b.percentile(50));
    std::printf("ratio p50 %-28s %.2fx\n", what, r);
    char buf[160];
    std::snprintf(buf, sizeof buf, R"({"ratio": "%s", "p50": %.3f})", what, r);
    json += std::string(buf) + "\n";
  };
  ratio("inline / futex", inline_h, futex_h);
  ratio("dedicated / futex-chain", ded_h, chain_h);
  ratio("dedicated / futex", ded_h, futex_h);
  if (want("offer")) {
    const Histogram h = offer_cost(count * 100);
    std::printf("%-34s p50 %8.2f  p90 %8.2f  p99 %8.2f ns/offer (n=%llu batches of 1000)\n", "offer(), nobody sleeping",
                h.percentile(50) / 1e3, h.percentile(90) / 1e3, h.percentile(99) / 1e3,
                static_cast<unsigned long long>(h.count()));
    char buf[200];
    std::snprintf(buf, sizeof buf, R"({"case": "offer", "p50_ns_per_offer": %.3f, "p99_ns_per_offer": %.3f})",
                  h.percentile(50) / 1e3, h.percentile(99) / 1e3);
    json += std::string(buf) + "\n";
  }
  return pollux::bench::write_text(json_path, json, "pollux-bench-shm-wakeup") ? 0 : 1;
}
