// ITCH 5.0 throughput: framing, typed decoding, and decoding + order book, over a
// generated in-memory BinaryFILE of ~10M messages (one core, no I/O).
//
//   build/bin/pollux-bench-itch [--benchmark_filter=...]
//
// items_per_second is messages per second. The stream is generated once per process
// (about 1.5 s) and reused by every benchmark.
#include <benchmark/benchmark.h>
#include <sched.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "itch/book_set.h"
#include "itch/generator.h"
#include "itch/reader.h"

namespace pollux::itch {
namespace {

constexpr uint64_t kMessages = 10'000'000;

struct Stream {
  std::vector<uint8_t> bytes;
  uint64_t messages = 0;
};

// One stream per symbol count, generated on first use.
const Stream& GetStream(uint32_t symbols) {
  static std::array<Stream, 4> cache;
  static std::array<uint32_t, 4> keys{};
  for (size_t i = 0; i < cache.size(); ++i) {
    if (keys[i] == symbols) return cache[i];
    if (keys[i] == 0) {
      GeneratorOptions o;
      o.symbols = symbols;
      o.messages = kMessages;
      o.seed = 1;
      absl::StatusOr<std::vector<uint8_t>> b = GenerateItch(o);
      if (!b.ok()) {
        std::fprintf(stderr, "%s\n", b.status().ToString().c_str());
        std::abort();
      }
      keys[i] = symbols;
      cache[i] = Stream{*std::move(b), o.messages};
      return cache[i];
    }
  }
  std::abort();
}

void Report(benchmark::State& state, const Stream& s) {
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * s.messages));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * s.bytes.size()));
  state.counters["msgs"] = static_cast<double>(s.messages);
}

// Framing + validation only: the callback counts messages by type.
void BM_Frame(benchmark::State& state) {
  const Stream& s = GetStream(100);
  std::array<uint64_t, 256> counts{};
  for (auto _ : state) {
    ParseResult r = ForEachMessage(s.bytes, [&counts](MessageView m) { ++counts[m.type_byte()]; });
    benchmark::DoNotOptimize(r);
    benchmark::DoNotOptimize(counts.data());
  }
  Report(state, s);
}
BENCHMARK(BM_Frame)->Unit(benchmark::kMillisecond);

// Framing + typed dispatch + the big-endian loads a book needs from every order message.
void BM_ParseTyped(benchmark::State& state) {
  const Stream& s = GetStream(100);
  struct Sum {
    uint64_t refs = 0, shares = 0, prices = 0, other = 0;
    void operator()(const AddOrder& m) { refs += m.order_reference(); shares += m.shares(); prices += m.price(); }
    void operator()(const AddOrderMpid& m) { refs += m.order_reference(); shares += m.shares(); prices += m.price(); }
    void operator()(const OrderExecuted& m) { refs += m.order_reference(); shares += m.executed_shares(); }
    void operator()(const OrderExecutedWithPrice& m) { refs += m.order_reference(); shares += m.executed_shares(); prices += m.execution_price(); }
    void operator()(const OrderCancel& m) { refs += m.order_reference(); shares += m.cancelled_shares(); }
    void operator()(const OrderDelete& m) { refs += m.order_reference(); }
    void operator()(const OrderReplace& m) { refs += m.original_order_reference() ^ m.new_order_reference(); shares += m.shares(); prices += m.price(); }
    void operator()(const Trade& m) { shares += m.shares(); prices += m.price(); }
    void operator()(const SystemEvent& m) { other += m.timestamp(); }
    void operator()(const StockDirectory& m) { other += m.round_lot_size(); }
    void operator()(const StockTradingAction& m) { other += static_cast<uint8_t>(m.trading_state()); }
  };
  for (auto _ : state) {
    Sum sum;
    ParseResult r = VisitMessages(s.bytes, sum);
    benchmark::DoNotOptimize(r);
    benchmark::DoNotOptimize(sum);
  }
  Report(state, s);
}
BENCHMARK(BM_ParseTyped)->Unit(benchmark::kMillisecond);

// Parse + apply to the order books. Arg: number of symbols (book count); the live order
// count is ~64 per symbol. The BookSet is cleared (capacity kept) between iterations.
void BM_ParseAndBook(benchmark::State& state) {
  const Stream& s = GetStream(static_cast<uint32_t>(state.range(0)));
  // Sized for the ~64 live orders per symbol the generator keeps (x2 for the skew).
  BookSetOptions o;
  o.expected_orders = 2 * 64 * static_cast<size_t>(state.range(0));
  BookSet books(o);
  for (auto _ : state) {
    state.PauseTiming();
    books.Clear();
    state.ResumeTiming();
    ParseResult r = ForEachMessage(s.bytes, [&books](MessageView m) { books.Apply(m); });
    benchmark::DoNotOptimize(r);
  }
  state.counters["live_orders"] = static_cast<double>(books.live_orders());
  Report(state, s);
}
BENCHMARK(BM_ParseAndBook)->Arg(100)->Arg(1000)->Unit(benchmark::kMillisecond);

// Subscriber path: one payload per message (no prefix), validated by CheckMessage.
void BM_DecodeSingle(benchmark::State& state) {
  const Stream& s = GetStream(100);
  std::vector<std::span<const uint8_t>> payloads;
  payloads.reserve(s.messages);
  (void)ForEachMessage(s.bytes, [&](MessageView m) { payloads.push_back(m.bytes()); });
  for (auto _ : state) {
    uint64_t ok = 0;
    for (const auto& p : payloads) ok += CheckMessage(p).ok();
    benchmark::DoNotOptimize(ok);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * payloads.size()));
}
BENCHMARK(BM_DecodeSingle)->Unit(benchmark::kMillisecond);

void BM_Generate(benchmark::State& state) {
  GeneratorOptions o;
  o.symbols = 100;
  o.messages = 1'000'000;
  for (auto _ : state) {
    absl::StatusOr<std::vector<uint8_t>> b = GenerateItch(o);
    benchmark::DoNotOptimize(b);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * o.messages));
}
BENCHMARK(BM_Generate)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace pollux::itch

// Pins the benchmark to the last CPU (override with POLLUX_BENCH_CPU=<n>) so the
// scheduler does not migrate it mid-run; on a 2-core VM that is the best isolation there is.
int main(int argc, char** argv) {
  const char* env = std::getenv("POLLUX_BENCH_CPU");
  const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  const int cpu = env != nullptr ? std::atoi(env) : static_cast<int>(ncpu - 1);
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) {
    std::fprintf(stderr, "pollux-bench-itch: cannot pin to CPU %d (running unpinned)\n", cpu);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("pinned_cpu", std::to_string(cpu));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
