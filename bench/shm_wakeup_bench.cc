// pollux-bench-shm-wakeup: what a wake-up costs in shm interrupt mode, next to the bare futex
// floor measured in the same run, and what the writer pays per offer when nobody sleeps.
//
//   pollux-bench-shm-wakeup [--count N] [--cases futex,inline,dedicated,offer]
//
// futex:     two processes ping-pong through a MAP_SHARED page, each blocking in FUTEX_WAIT
//            until the other's FUTEX_WAKE: round trip / 2 = one cross-process wake-up.
// inline:    Pollux ping-pong, inline mode, runtime.idle = "interrupt", sleep_timer_ms = 0; both
//            sides block in Subscriber::wait(-1) (the shm futex protocol). Round trip / 2.
// dedicated: as inline, but the parent's subscriber is driven by a dedicated poller in interrupt
//            mode (the poller sleeps on the segment's word, the app thread on its ring's eventfd).
// offer:     one process, inline publisher, one attached subscriber that never sleeps (lossy
//            flow control, so the writer never waits): ns per offer() of a 32-byte message.
//            The writer's wake check is one load of WakeState::sleepers after each tail store.
// Processes are pinned to CPUs 0 and 1.
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

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

std::string config(const std::string& name, const std::string& threading, const char* flow) {
  return "[runtime]\nname = \"" + name + "\"\nthreading = \"" + threading +
         "\"\npollers = 1\nidle = \"interrupt\"\nsleep_timer_ms = 0\ncounters = false\n[shm]\nlog_size = \"1MiB\"\n"
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
  const pid_t child = pollux::bench::fork_on(1);
  if (child == 0) {
    pollux::bench::pin(1);
    for (std::uint32_t i = 1; i <= total; ++i) {
      wait_for(&w[0].v, i);
      w[1].v.store(i, std::memory_order_release);
      (void)futex(&w[1].v, FUTEX_WAKE, 1);
    }
    _exit(0);
  }
  pollux::bench::pin(0);
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
        },
        16);
    n += static_cast<std::uint64_t>(k);
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
  const pid_t child = pollux::bench::fork_on(1);
  if (child == 0) {
    pollux::bench::pin(1);
    _exit(pong_child(name, total));
  }
  pollux::bench::pin(0);
  Histogram h;
  {
    auto ctx = pollux::Context::from_string(config(name, threading, "backpressure"), "bench");
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

int main(int argc, char** argv) {
  std::uint64_t count = 100'000;
  std::string cases = "futex,inline,dedicated,offer";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--count" && i + 1 < argc) {
      count = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--cases" && i + 1 < argc) {
      cases = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--count N] [--cases futex,inline,dedicated,offer]\n", argv[0]);
      return 64;
    }
  }
  std::printf("%s\n", pollux::bench::machine_description().c_str());
  const std::uint64_t warmup = count / 10;
  auto want = [&](const char* c) { return ("," + cases + ",").find(std::string(",") + c + ",") != std::string::npos; };
  if (want("futex")) pollux::bench::print_hist("bare futex wake (RTT/2)", futex_pingpong(count, warmup));
  if (want("inline")) pollux::bench::print_hist("shm inline interrupt (RTT/2)", pollux_pingpong("inline", count, warmup));
  if (want("dedicated")) {
    pollux::bench::print_hist("shm dedicated interrupt (RTT/2)", pollux_pingpong("dedicated", count, warmup));
  }
  if (want("offer")) {
    const Histogram h = offer_cost(count * 100);
    std::printf("%-34s p50 %8.2f  p90 %8.2f  p99 %8.2f ns/offer (n=%llu batches of 1000)\n",
                "offer(), nobody sleeping", h.percentile(50) / 1e3, h.percentile(90) / 1e3, h.percentile(99) / 1e3,
                static_cast<unsigned long long>(h.count()));
  }
  return 0;
}
