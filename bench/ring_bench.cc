// pollux-bench-ring: the two SPSC descriptor rings (hand-written cached-index SpscRing and
// boost::lockfree::spsc_queue) between two pinned threads: one-way throughput (single pushes
// and bursts of 32) and the round-trip "hop" latency (A -> B -> A through two rings).
#include <algorithm>
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

// The round trip's floor: one 128-byte-padded line per direction, the same two pinned threads.
Histogram floor_round_trip(std::uint64_t count) {
  struct alignas(128) Line {
    std::atomic<std::uint64_t> v{0};
  };
  Line there, back;
  std::thread echo([&] {
    pollux::bench::pin(1);
    for (std::uint64_t i = 1; i <= count; ++i) {
      // Pairs with the release store of the timing thread below.
      while (there.v.load(std::memory_order_acquire) != i) pollux::core::cpu_relax();
      back.v.store(i, std::memory_order_release);  // pairs with the timing thread's acquire load
    }
  });
  pollux::bench::pin(0);
  Histogram h;
  for (std::uint64_t i = 1; i <= count; ++i) {
    const std::int64_t t0 = Clock::now_ns();
    there.v.store(i, std::memory_order_release);  // pairs with the echo thread's acquire load
    while (back.v.load(std::memory_order_acquire) != i) pollux::core::cpu_relax();  // pairs with its release
    h.record(Clock::now_ns() - t0);
  }
  echo.join();
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t count = 20'000'000, runs = 3;
  std::string json_path;
  pollux::bench::Cli cli(
      "pollux-bench-ring",
      "pollux-bench-ring: the two SPSC descriptor rings (the hand-written cached-index SpscRing and\n"
      "boost::lockfree::spsc_queue) between two threads pinned to CPUs 0 and 1: one-way throughput\n"
      "(single pushes, bursts of 32) and the round trip A -> B -> A through two rings, next to a bare\n"
      "cache-line ping-pong between the same threads (the round trip's floor, same run).");
  cli.positional("COUNT", &count, "as --count")
      .positional("RUNS", &runs, "as --runs")
      .count("--count", &count, "descriptors per throughput case; the round trips use COUNT/20 (at least 1)")
      .count("--runs", &runs, "runs of every case, printed one by one", 1, 1000)
      .text("--json", &json_path, "FILE",
            "also write JSON lines: per run, spsc-single, spsc-burst32, boost-single, boost-burst32\n"
            "(msgs_per_s), floor, spsc-rtt and boost-rtt (ns percentiles, ratio to the floor)")
      .parse(argc, argv);
  Clock::init();
  std::printf("machine: %s\n", pollux::bench::machine_description().c_str());
  pollux::bench::JsonLines json(cli.program(), argc, argv);
  const std::uint64_t rtt_count = std::max<std::uint64_t>(1, count / 20);
  for (std::uint64_t r = 1; r <= runs; ++r) {
    std::printf("--- run %llu: %llu descriptors of %zu bytes\n", static_cast<unsigned long long>(r),
                static_cast<unsigned long long>(count), sizeof(Desc));
    const double s1 = throughput<pollux::core::SpscRing<Desc>>(count, 1);
    const double s32 = throughput<pollux::core::SpscRing<Desc>>(count, 32);
    std::printf("%-28s single %7.1f M/s   burst32 %7.1f M/s\n", "SpscRing (cached indices)", s1 / 1e6, s32 / 1e6);
    const double b1 = throughput<pollux::core::LockfreeRing<Desc>>(count, 1);
    const double b32 = throughput<pollux::core::LockfreeRing<Desc>>(count, 32);
    std::printf("%-28s single %7.1f M/s   burst32 %7.1f M/s\n", "boost::lockfree::spsc_queue", b1 / 1e6, b32 / 1e6);
    for (const auto& [name, rate] : {std::pair{"spsc-single", s1}, std::pair{"spsc-burst32", s32},
                                     std::pair{"boost-single", b1}, std::pair{"boost-burst32", b32}}) {
      json.add(pollux::bench::JsonObject().str("case", name).num("run", r).num("count", count).num("msgs_per_s", rate));
    }
    const Histogram spsc = round_trip<pollux::core::SpscRing<Desc>>(rtt_count);
    pollux::bench::print_hist("SpscRing round trip", spsc);
    const Histogram boost = round_trip<pollux::core::LockfreeRing<Desc>>(rtt_count);
    pollux::bench::print_hist("boost spsc_queue round trip", boost);
    const Histogram floor = floor_round_trip(rtt_count);
    pollux::bench::print_hist("floor (bare cache-line, threads)", floor);
    json.add(pollux::bench::JsonObject().str("case", "floor").num("run", r).latency(floor));
    json.add(
        pollux::bench::JsonObject().str("case", "spsc-rtt").num("run", r).latency(spsc).floor("floor", floor, spsc));
    json.add(
        pollux::bench::JsonObject().str("case", "boost-rtt").num("run", r).latency(boost).floor("floor", floor, boost));
  }
  return json.write(json_path) ? 0 : 1;
}
