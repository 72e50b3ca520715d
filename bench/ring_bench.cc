// pollux-bench-ring: the two SPSC descriptor rings (hand-written cached-index SpscRing and
// boost::lockfree::spsc_queue) between two pinned threads: one-way throughput (single pushes
// and bursts of 32) and the round-trip "hop" latency (A -> B -> A through two rings).
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "bench/bench_util.h"
#include "core/cache.h"
#include "core/spsc_ring.h"
#include "transport/transport.h"

namespace {

using pollux::core::Clock;
using pollux::core::Histogram;
using Desc = pollux::transport::TxDesc;  // what the hot path carries (16 bytes)

template <typename Ring>
double throughput(std::uint64_t count, std::uint32_t burst) {
  Ring r(1024);
  std::atomic<bool> go{false};
  std::thread consumer([&] {
    pollux::bench::pin(1);
    Desc out[64];
    std::uint64_t got = 0, sum = 0;
    go.store(true, std::memory_order_release);
    while (got < count) {
      const std::uint32_t n = r.pop_burst(out, burst);
      for (std::uint32_t i = 0; i < n; ++i) sum += out[i].slot;
      got += n;
    }
    if (sum == 42) std::puts("");
  });
  pollux::bench::pin(0);
  while (!go.load(std::memory_order_acquire)) {
  }
  Desc in[64] = {};
  const std::int64_t t0 = Clock::now_ns();
  for (std::uint64_t sent = 0; sent < count;) {
    for (std::uint32_t i = 0; i < burst; ++i) in[i].slot = static_cast<std::uint32_t>(sent + i);
    sent += r.push_burst(in, static_cast<std::uint32_t>(std::min<std::uint64_t>(burst, count - sent)));
  }
  consumer.join();
  return static_cast<double>(count) / (static_cast<double>(Clock::now_ns() - t0) / 1e9);
}

template <typename Ring>
Histogram round_trip(std::uint64_t count) {
  Ring there(1024), back(1024);
  std::thread echo([&] {
    pollux::bench::pin(1);
    Desc d;
    for (std::uint64_t i = 0; i < count; ++i) {
      while (!there.try_pop(d)) pollux::core::cpu_relax();
      while (!back.try_push(d)) pollux::core::cpu_relax();
    }
  });
  pollux::bench::pin(0);
  Histogram h;
  Desc d{};
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::int64_t t0 = Clock::now_ns();
    d.slot = static_cast<std::uint32_t>(i);
    while (!there.try_push(d)) pollux::core::cpu_relax();
    while (!back.try_pop(d)) pollux::core::cpu_relax();
    h.record(Clock::now_ns() - t0);
  }
  echo.join();
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t count = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 20'000'000;
  const int runs = argc > 2 ? std::atoi(argv[2]) : 3;
  Clock::init();
  std::printf("machine: %s\n", pollux::bench::machine_description().c_str());
  for (int r = 1; r <= runs; ++r) {
    std::printf("--- run %d: %llu descriptors of %zu bytes\n", r, static_cast<unsigned long long>(count), sizeof(Desc));
    std::printf("%-28s single %7.1f M/s   burst32 %7.1f M/s\n", "SpscRing (cached indices)",
                throughput<pollux::core::SpscRing<Desc>>(count, 1) / 1e6,
                throughput<pollux::core::SpscRing<Desc>>(count, 32) / 1e6);
    std::printf("%-28s single %7.1f M/s   burst32 %7.1f M/s\n", "boost::lockfree::spsc_queue",
                throughput<pollux::core::LockfreeRing<Desc>>(count, 1) / 1e6,
                throughput<pollux::core::LockfreeRing<Desc>>(count, 32) / 1e6);
    pollux::bench::print_hist("SpscRing round trip", round_trip<pollux::core::SpscRing<Desc>>(count / 20));
    pollux::bench::print_hist("boost spsc_queue round trip", round_trip<pollux::core::LockfreeRing<Desc>>(count / 20));
  }
  return 0;
}
