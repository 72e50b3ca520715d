// ITCH 5.0 throughput: framing, typed decoding, and decoding + order book, over a
// generated in-memory BinaryFILE of ~10M messages (one core, no I/O).
//
//   build/bin/pollux-bench-itch [--filter REGEX] [--messages N] [--min-time S] [--cpu N]
//                               [--json FILE] [--benchmark_...]      (--help describes them)
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

#include "bench/bench_util.h"
#include "itch/book_set.h"
#include "itch/generator.h"
#include "itch/reader.h"

namespace pollux::itch {
namespace {

uint64_t g_messages = 10'000'000;  // --messages

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
      o.messages = g_messages;
      o.seed = 1;
      absl::StatusOr<std::vector<uint8_t>> b = generate_itch(o);
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
    ParseResult r = for_each_message(s.bytes, [&counts](MessageView m) { ++counts[m.type_byte()]; });
    benchmark::DoNotOptimize(r);
    benchmark::DoNotOptimize(counts.data());
  }
  Report(state, s);
}
BENCHMARK(BM_Frame)->Unit(benchmark::kMillisecond);

// BM_ParseTyped's visitor: sums of the fields a book needs, so that no load is optimized away.
struct Sum {
  uint64_t refs = 0, shares = 0, prices = 0, other = 0;
  // A message about one order: its reference, its share count and, where `Price` names one, its
  // price (the accessors are members of M).
  template <auto Shares, auto Price = nullptr, class M>
  void order(const M& m) {
    refs += m.order_reference();
    shares += (m.*Shares)();
    if constexpr (Price != nullptr) prices += (m.*Price)();
  }
  void operator()(const AddOrder& m) { order<&AddOrder::shares, &AddOrder::price>(m); }
  void operator()(const AddOrderMpid& m) { order<&AddOrderMpid::shares, &AddOrderMpid::price>(m); }
  void operator()(const OrderExecuted& m) { order<&OrderExecuted::executed_shares>(m); }
  void operator()(const OrderExecutedWithPrice& m) {
    order<&OrderExecutedWithPrice::executed_shares, &OrderExecutedWithPrice::execution_price>(m);
  }
  void operator()(const OrderCancel& m) { order<&OrderCancel::cancelled_shares>(m); }
  void operator()(const OrderDelete& m) { refs += m.order_reference(); }
  void operator()(const OrderReplace& m) {
    refs += m.original_order_reference() ^ m.new_order_reference();
    shares += m.shares();
    prices += m.price();
  }
  void operator()(const Trade& m) {
    shares += m.shares();
    prices += m.price();
  }
  void operator()(const SystemEvent& m) { other += m.timestamp(); }
  void operator()(const StockDirectory& m) { other += m.round_lot_size(); }
  void operator()(const StockTradingAction& m) { other += static_cast<uint8_t>(m.trading_state()); }
};

// Framing + typed dispatch + the big-endian loads a book needs from every order message.
void BM_ParseTyped(benchmark::State& state) {
  const Stream& s = GetStream(100);
  for (auto _ : state) {
    Sum sum;
    ParseResult r = visit_messages(s.bytes, sum);
    benchmark::DoNotOptimize(r);
    benchmark::DoNotOptimize(sum);
  }
  Report(state, s);
}
BENCHMARK(BM_ParseTyped)->Unit(benchmark::kMillisecond);

// Parse + apply to the order books. Arg: number of symbols (book count); the live order
// count is ~64 per symbol. The BookSet is cleared (capacity kept) between iterations.
// `apply(books, bytes)` is the way in under test.
template <class Apply>
void RunBooks(benchmark::State& state, Apply apply) {
  const Stream& s = GetStream(static_cast<uint32_t>(state.range(0)));
  // Sized for the ~64 live orders per symbol the generator keeps (x2 for the skew).
  BookSetOptions o;
  o.expected_orders = 2 * 64 * static_cast<size_t>(state.range(0));
  BookSet books(o);
  for (auto _ : state) {
    state.PauseTiming();
    books.clear();
    state.ResumeTiming();
    ParseResult r = apply(books, s.bytes);
    benchmark::DoNotOptimize(r);
  }
  state.counters["live_orders"] = static_cast<double>(books.live_orders());
  Report(state, s);
}

// One BookSet::apply per framed message.
void BM_ParseAndBook(benchmark::State& state) {
  RunBooks(state, [](BookSet& books, std::span<const uint8_t> bytes) {
    return for_each_message(bytes, [&books](MessageView m) { books.apply(m); });
  });
}
BENCHMARK(BM_ParseAndBook)->Arg(100)->Arg(1000)->Arg(8000)->Unit(benchmark::kMillisecond);

// The same through BookSet::apply_all (order slots and levels prefetched a few messages ahead
// once the market is large).
void BM_ApplyAll(benchmark::State& state) {
  RunBooks(state, [](BookSet& books, std::span<const uint8_t> bytes) { return books.apply_all(bytes); });
}
BENCHMARK(BM_ApplyAll)->Arg(100)->Arg(1000)->Arg(8000)->Unit(benchmark::kMillisecond);

// Subscriber path: one payload per message (no prefix), validated by check_message.
void BM_DecodeSingle(benchmark::State& state) {
  const Stream& s = GetStream(100);
  std::vector<std::span<const uint8_t>> payloads;
  payloads.reserve(s.messages);
  (void)for_each_message(s.bytes, [&](MessageView m) { payloads.push_back(m.bytes()); });
  for (auto _ : state) {
    uint64_t ok = 0;
    for (const auto& p : payloads) ok += check_message(p).ok();
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
    absl::StatusOr<std::vector<uint8_t>> b = generate_itch(o);
    benchmark::DoNotOptimize(b);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * o.messages));
}
BENCHMARK(BM_Generate)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace pollux::itch

// The console output of Google Benchmark (colour on a terminal, as its default), plus one JSON
// line per benchmark run for --json. (It replaces the default display reporter, so
// --benchmark_format is not honoured; --benchmark_out still is.)
class JsonTeeReporter : public benchmark::ConsoleReporter {
 public:
  explicit JsonTeeReporter(pollux::bench::JsonLines* json)
      : benchmark::ConsoleReporter(isatty(STDOUT_FILENO) ? OO_Color : OO_None), json_(json) {}
  void ReportRuns(const std::vector<Run>& runs) override {
    benchmark::ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      pollux::bench::JsonObject o;
      o.str("case", r.benchmark_name()).num("iterations", static_cast<int64_t>(r.iterations));
      if (!r.aggregate_name.empty()) o.str("aggregate", r.aggregate_name);
      o.flag("error", r.error_occurred);
      o.num("ns_per_iteration", r.GetAdjustedRealTime() * 1e9 / benchmark::GetTimeUnitMultiplier(r.time_unit));
      for (const auto& [name, c] : r.counters) {
        if (name == "items_per_second")
          o.num("msgs_per_s", c.value);
        else if (name == "bytes_per_second")
          o.num("bytes_per_s", c.value);
        else if (name == "msgs")
          o.num("count", c.value);
        else
          o.num(name, c.value);
      }
      json_->add(o);
    }
  }

 private:
  pollux::bench::JsonLines* json_;
};

// Pins the benchmark to the last CPU (override with --cpu or POLLUX_BENCH_CPU=<n>) so the
// scheduler does not migrate it mid-run; on a 2-core VM that is the best isolation there is.
int main(int argc, char** argv) {
  const char* env = std::getenv("POLLUX_BENCH_CPU");
  const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  int cpu = env != nullptr ? std::atoi(env) : static_cast<int>(ncpu - 1);
  std::string filter, json_path;
  double min_time = 0;
  std::vector<std::string> forwarded;
  pollux::bench::Cli cli(
      "pollux-bench-itch",
      "pollux-bench-itch: ITCH 5.0 throughput on one pinned core, no I/O (Google Benchmark):\n"
      "framing (BM_Frame), typed decoding (BM_ParseTyped), decoding + order books\n"
      "(BM_ParseAndBook/100, /1000, /8000 symbols: Apply per message; BM_ApplyAll: the same\n"
      "through the prefetching BookSet::ApplyAll), per-message validation (BM_DecodeSingle) and the\n"
      "generator (BM_Generate), over a generated in-memory BinaryFILE. items_per_second (JSON:\n"
      "msgs_per_s) is messages per second. No floor: a CPU-bound parse has none to hold against.");
  cli.count("--messages", &pollux::itch::g_messages,
            "messages in the generated stream (generated once, about 1.5 s per 10M)", 1000)
      .text("--filter", &filter, "REGEX", "run only the benchmarks matching REGEX (--benchmark_filter)")
      .real("--min-time", &min_time, "SECONDS", "minimum time per benchmark (--benchmark_min_time; 0 = its default)", 0,
            3600)
      .integer("--cpu", &cpu, "CPU to pin to (also set by POLLUX_BENCH_CPU=N; the default is the last CPU)", 0,
               static_cast<int>(ncpu - 1))
      .text("--json", &json_path, "FILE",
            "also write JSON lines: one object per benchmark run (case, iterations, ns_per_iteration,\n"
            "msgs_per_s, bytes_per_s, count = messages per iteration)")
      .forward("--benchmark_", &forwarded, "passed to Google Benchmark as they are (its own flags)")
      .parse(argc, argv);
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) {
    std::fprintf(stderr, "pollux-bench-itch: cannot pin to CPU %d (running unpinned)\n", cpu);
  }
  std::vector<std::string> args{argv[0]};
  if (!filter.empty()) args.push_back("--benchmark_filter=" + filter);
  if (min_time > 0) args.push_back("--benchmark_min_time=" + std::to_string(min_time));
  args.insert(args.end(), forwarded.begin(), forwarded.end());
  std::vector<char*> bargv;
  for (std::string& a : args) bargv.push_back(a.data());
  int bargc = static_cast<int>(bargv.size());
  bargv.push_back(nullptr);
  benchmark::Initialize(&bargc, bargv.data());
  if (benchmark::ReportUnrecognizedArguments(bargc, bargv.data())) {
    std::fprintf(stderr, "pollux-bench-itch: --benchmark_* flags are Google Benchmark's own (see --help)\n");
    return pollux::bench::Cli::kUsageExit;
  }
  benchmark::AddCustomContext("pinned_cpu", std::to_string(cpu));
  benchmark::AddCustomContext("messages", std::to_string(pollux::itch::g_messages));
  pollux::core::Clock::init();  // machine_description() names the clock
  pollux::bench::JsonLines json(cli.program(), argc, argv);
  JsonTeeReporter reporter(&json);
  const size_t ran = benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  if (ran == 0) {
    std::fprintf(stderr, "pollux-bench-itch: no benchmark matches the filter\n");
    return 1;
  }
  return json.write(json_path) ? 0 : 1;
}
