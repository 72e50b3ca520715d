// pollux-bench-shm: shared-memory latency and throughput between two processes, next to the
// physical floor measured in the same run.
//
//   pollux-bench-shm [--count N] [--runs R] [--cases floor,inline32,inline256,dedicated32,dedicated256,tput]
//                    [--log-size S] [--flow lossy|backpressure] [--timer clock|rdtscp] [--rt] [--json FILE]
//                    (--help describes every flag)
//
// floor:       a bare cache-line ping-pong between two processes (one 128-byte-padded line
//              per direction) - the least any shm transport can do on these two cores.
// inline/dedicated N: Pollux ping-pong, N-byte payload: the parent offers on "ping" and spins
//              on "pong"; the child echoes. Round-trip time per message, HDR histogram.
// tput:        one-way 32-byte messages, publisher process -> subscriber process, inline mode,
//              back-pressure flow control (nothing lost), rate measured at the subscriber.
// Processes are pinned to CPUs 0 and 1 (the pollers of dedicated mode share those cores).
// --rt runs both processes SCHED_FIFO (root), so other processes on the host cannot preempt
// them (the kernel's RT throttling still leaves 5% of each second to everything else).
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "bench/open_context.h"
#include "core/cache.h"
#include "pollux/pollux.h"

namespace {

using pollux::core::Clock;
using pollux::core::Histogram;

// `stamp` false: the bench's streams (ping, pong, tput) have [[streams]] publisher_timestamp =
// false - offer() reads no clock, Message::publisher_ns is 0 (the cases with a "u" suffix).
// --log-size: [shm] log_size of every case's streams (the config's own syntax and checks).
std::string g_log_size = "16MiB";
std::string g_pingpong_flow = "lossy";  // --flow: shm.flow_control of the ping-pong cases

std::string config(const std::string& name, const std::string& threading, const std::string& idle, int poller_cpu,
                   const std::string& flow, bool stamp) {
  std::string c = "[runtime]\nname = \"" + name + "\"\nthreading = \"" + threading + "\"\nidle = \"" + idle +
                  "\"\ncounters = true\n";
  if (poller_cpu >= 0) c += "poller_cores = [" + std::to_string(poller_cpu) + "]\n";
  c += "[shm]\nlog_size = \"" + g_log_size + "\"\nflow_control = \"" + flow + "\"\n";
  if (!stamp) {
    int id = 101;
    for (const char* topic : {"ping", "pong", "tput"}) {
      c += "[[streams]]\ntopic = \"" + std::string(topic) + "\"\nid = " + std::to_string(id++) +
           "\npublisher_timestamp = false\n";
    }
  }
  return c;
}

// Round-trip timers. ClockNs (default): Clock::now_ns(), rdtsc and a multiply, not serialized.
// Rdtscp (--timer rdtscp): rdtscp, which waits for earlier instructions, converted to ns with
// Clock's TSC calibration - the timer of ../shared/peers' shm_pingpong and aeron_pingpong, so
// that figures from both sides carry the same timer overhead.
struct ClockNs {
  static std::int64_t now() noexcept { return Clock::now_ns(); }
  static std::int64_t ns(std::int64_t d) noexcept { return d; }
};
double g_tsc_per_ns = 1.0;  // --timer rdtscp: Clock::tsc_hz() / 1e9
#if defined(__x86_64__)
struct Rdtscp {
  static std::int64_t now() noexcept {
    unsigned aux;
    return static_cast<std::int64_t>(__rdtscp(&aux));
  }
  static std::int64_t ns(std::int64_t d) noexcept {
    return static_cast<std::int64_t>(static_cast<double>(d) / g_tsc_per_ns);
  }
};
#else
using Rdtscp = ClockNs;  // --timer rdtscp is refused off x86-64
#endif

// ---- floor ------------------------------------------------------------------------------------

struct alignas(128) Line {
  std::atomic<std::uint64_t> v{0};
};

template <class T>
Histogram floor_pingpong(std::uint64_t count, std::uint64_t warmup) {
  auto* lines = static_cast<Line*>(mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  new (&lines[0]) Line();
  new (&lines[1]) Line();
  const std::uint64_t total = count + warmup;
  const pid_t child = pollux::bench::fork_pair([&] {
    for (std::uint64_t i = 1; i <= total; ++i) {
      while (lines[0].v.load(std::memory_order_acquire) != i) pollux::core::cpu_relax();
      lines[1].v.store(i, std::memory_order_release);
    }
    return 0;
  });
  Histogram h;
  for (std::uint64_t i = 1; i <= total; ++i) {
    const std::int64_t t0 = T::now();
    lines[0].v.store(i, std::memory_order_release);
    while (lines[1].v.load(std::memory_order_acquire) != i) pollux::core::cpu_relax();
    const std::int64_t t1 = T::now();
    if (i > warmup) h.record(T::ns(t1 - t0));
  }
  waitpid(child, nullptr, 0);
  munmap(lines, 4096);
  return h;
}

// ---- log floor --------------------------------------------------------------------------------
// The least a log-based transport can do: each direction a ring of 64-byte frames (64 KiB, so
// it stays in L2 like Aeron's default IPC term), one new frame per message, the 32-byte payload
// copied in and out, the frame published by a release store of its sequence number (no
// zeroing: a reader waits for exactly the sequence it expects) and the length checked before
// the payload is read. No claim accounting, no lapping checks, no counters, no clock read:
// what remains above the cache-line floor is the cost of a new line per message and the copies.

struct alignas(64) LogFrame {
  std::atomic<std::uint64_t> seq{0};
  std::uint32_t len = 0;
  std::uint32_t pad = 0;
  std::byte payload[48];
};
constexpr std::uint64_t kLogFrames = 1024;  // 64 KiB per direction

template <class T>
Histogram log_floor_pingpong(std::uint64_t count, std::uint64_t warmup) {
  constexpr std::size_t bytes = 2 * kLogFrames * sizeof(LogFrame);
  auto* frames =
      static_cast<LogFrame*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (frames == MAP_FAILED) std::abort();
  for (std::uint64_t i = 0; i < 2 * kLogFrames; ++i) new (&frames[i]) LogFrame();
  LogFrame* const ping = frames;
  LogFrame* const pong = frames + kLogFrames;
  const std::uint64_t total = count + warmup;
  // Waits for frame `i` of `log` and returns its payload length, or aborts on a bad length.
  auto await = [](LogFrame* log, std::uint64_t i) -> LogFrame& {
    LogFrame& f = log[i % kLogFrames];
    while (f.seq.load(std::memory_order_acquire) != i) pollux::core::cpu_relax();  // pairs with publish
    if (f.len > sizeof f.payload) std::abort();
    return f;
  };
  auto publish = [](LogFrame* log, std::uint64_t i, const std::byte* p, std::uint32_t len) {
    LogFrame& f = log[i % kLogFrames];
    std::memcpy(f.payload, p, 32);
    f.len = len;
    f.seq.store(i, std::memory_order_release);  // after the payload and length: pairs with await
  };
  const pid_t child = pollux::bench::fork_pair([&] {
    for (std::uint64_t i = 1; i <= total; ++i) {
      LogFrame& f = await(ping, i);
      publish(pong, i, f.payload, f.len);
    }
    return 0;
  });
  std::byte msg[32] = {};
  std::uint64_t sum = 0;
  Histogram h;
  for (std::uint64_t i = 1; i <= total; ++i) {
    const std::int64_t t0 = T::now();
    publish(ping, i, msg, 32);
    sum += await(pong, i).len;
    const std::int64_t t1 = T::now();
    if (i > warmup) h.record(T::ns(t1 - t0));
  }
  if (sum != 32 * total) std::abort();
  waitpid(child, nullptr, 0);
  munmap(frames, bytes);
  return h;
}

// ---- Pollux ping-pong ---------------------------------------------------------------------------

int pong_child(const std::string& name, const std::string& threading, const std::string& idle, bool dedicated,
               std::uint64_t total, const int* sync, bool stamp) {
  auto ctx =
      pollux::Context::from_string(config(name, threading, idle, dedicated ? 1 : -1, g_pingpong_flow, stamp), "bench");
  if (!ctx.ok()) {
    std::fprintf(stderr, "%s\n", std::string(ctx.status().message()).c_str());
    return 2;
  }
  auto sub = (*ctx)->subscriber("ping");
  auto pub = (*ctx)->publisher("pong");
  while (!pub->is_connected() || !sub->is_connected()) {
    (void)sub->poll([](const pollux::Message&) {}, 1);
    std::this_thread::yield();
  }
  (void)!write(sync[1], "x", 1);
  std::uint64_t n = 0;
  while (n < total) {
    // poll() returns messages, gaps and events handled (a kNewSession too): count messages.
    const int k = sub->poll(
        [&](const pollux::Message& m) {
          while (pub->offer(m.payload) < 0) {
          }
          ++n;
        },
        16);
    // Dedicated mode: this thread shares its CPU with its poller; give it the CPU.
    if (k == 0) {
      if (dedicated)
        sched_yield();
      else
        pollux::core::cpu_relax();  // busy-spin idle step, as the floor's spin loop
    }
  }
  // Keep the pong stream open until the parent has read the last reply.
  char c;
  (void)!read(sync[0], &c, 1);
  return 0;
}

template <class T>
Histogram pollux_pingpong(const std::string& threading, std::size_t size, std::uint64_t count, std::uint64_t warmup,
                          bool stamp) {
  const std::string name = "bench" + std::to_string(getpid());
  const bool dedicated = threading == "dedicated";
  // Dedicated mode on 2 CPUs: each process's poller shares the CPU of its application thread;
  // busy-spinning pollers would fight the application for it, so pollers yield.
  const std::string idle = dedicated ? "yield" : "busy-spin";
  const std::uint64_t total = count + warmup;
  int sync[2];
  if (pipe(sync) != 0) std::abort();
  const pid_t child =
      pollux::bench::fork_pair([&] { return pong_child(name, threading, idle, dedicated, total, sync, stamp); });
  auto ctx =
      pollux::bench::open_context(config(name, threading, idle, dedicated ? 0 : -1, g_pingpong_flow, stamp), "bench");
  auto pub = (*ctx)->publisher("ping");
  auto sub = (*ctx)->subscriber("pong");
  char c;
  while (!pub->is_connected() || !sub->is_connected()) {
    (void)sub->poll([](const pollux::Message&) {}, 1);
    std::this_thread::yield();
  }
  if (read(sync[0], &c, 1) != 1) std::abort();
  std::vector<std::byte> payload(size, std::byte{7});
  Histogram h;
  for (std::uint64_t i = 0; i < total; ++i) {
    bool got = false;
    const std::int64_t t0 = T::now();
    while (pub->offer(payload) < 0) {
    }
    while (!got) {
      if (sub->poll([&](const pollux::Message&) { got = true; }, 1) == 0) {
        if (dedicated)
          sched_yield();
        else
          pollux::core::cpu_relax();
      }
    }
    const std::int64_t t1 = T::now();
    if (i >= warmup) h.record(T::ns(t1 - t0));
  }
  (void)!write(sync[1], "x", 1);
  waitpid(child, nullptr, 0);
  close(sync[0]);
  close(sync[1]);
  return h;
}

// ---- throughput ---------------------------------------------------------------------------------

int tput_child(const std::string& name, std::uint64_t count, const int* ready, const int* result, bool stamp);

double pollux_throughput(std::uint64_t count, std::uint32_t batch, bool stamp) {
  const std::string name = "tput" + std::to_string(getpid());
  int ready[2], result[2];
  if (pipe(ready) != 0 || pipe(result) != 0) std::abort();
  const pid_t child = pollux::bench::fork_pair([&] { return tput_child(name, count, ready, result, stamp); });
  auto ctx = pollux::Context::from_string(config(name, "inline", "busy-spin", -1, "backpressure", stamp), "bench");
  auto pub = (*ctx)->publisher("tput");
  char c;
  if (read(ready[0], &c, 1) != 1) std::abort();
  while (!pub->is_connected()) std::this_thread::yield();
  if (batch <= 1) {
    std::byte msg[32] = {};
    for (std::uint64_t i = 0; i < count; ++i) {
      std::memcpy(msg, &i, 8);
      while (pub->offer(msg, sizeof msg) < 0) pollux::core::cpu_relax();
    }
  } else {
    std::vector<std::array<std::byte, 32>> msgs(batch);
    std::vector<std::span<const std::byte>> views(batch);
    for (std::uint32_t k = 0; k < batch; ++k) views[k] = std::span<const std::byte>(msgs[k]);
    for (std::uint64_t i = 0; i < count;) {
      const std::uint32_t n = static_cast<std::uint32_t>(std::min<std::uint64_t>(batch, count - i));
      for (std::uint32_t k = 0; k < n; ++k) {
        const std::uint64_t v = i + k;
        std::memcpy(msgs[k].data(), &v, 8);
      }
      std::int64_t done;
      while ((done = pub->offer_batch({views.data(), n})) < 0) pollux::core::cpu_relax();
      // Back-pressured part-way: the next round rebuilds the batch from the first one not offered.
      i += static_cast<std::uint64_t>(done);
    }
  }
  double rate = 0;
  if (read(result[0], &rate, sizeof rate) != sizeof rate) std::abort();
  waitpid(child, nullptr, 0);
  return rate;
}

int tput_child(const std::string& name, std::uint64_t count, const int* ready, const int* result, bool stamp) {
  {
    auto ctx = pollux::Context::from_string(config(name, "inline", "busy-spin", -1, "backpressure", stamp), "bench");
    auto sub = (*ctx)->subscriber("tput");
    while (!sub->is_connected()) {
      (void)sub->poll([](const pollux::Message&) {}, 1);
      std::this_thread::yield();
    }
    (void)!write(ready[1], "r", 1);
    std::uint64_t n = 0, sum = 0;
    std::int64_t t0 = 0;
    while (n < count) {
      (void)sub->poll(
          [&](const pollux::Message& m) {
            std::uint64_t v;
            std::memcpy(&v, m.payload.data(), 8);
            sum += v;
            if (n++ == 0) t0 = Clock::now_ns();  // messages only: poll() also counts events
          },
          1024);
    }
    const double secs = static_cast<double>(Clock::now_ns() - t0) / 1e9;
    const double rate = static_cast<double>(count) / secs;
    if (sum != count * (count - 1) / 2) std::fprintf(stderr, "tput: checksum mismatch\n");
    (void)!write(result[1], &rate, sizeof rate);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t count = 200'000, runs = 3;
  std::string cases = "floor,inline32,inline256,dedicated32,dedicated256,tput";
  std::string json_path;
  bool rt = false;
  std::string timer = "clock";
  pollux::bench::Cli cli(
      "pollux-bench-shm",
      "pollux-bench-shm: shared-memory round trips and one-way throughput between two processes pinned\n"
      "to CPUs 0 and 1, next to the physical floor measured in the same run (a bare cache-line\n"
      "ping-pong between the two processes).");
  cli.count("--count", &count,
            "round trips per case and run (after count/10 warm-up; dedicated cases\n"
            "use count/4); throughput cases send count x 100 messages")
      .count("--runs", &runs, "runs of every case (each run measures its own floor)", 1, 1000)
      .list("--cases", &cases,
            {"floor", "logfloor", "inline32", "inline32u", "inline256", "dedicated32", "dedicated256", "tput", "tputu"},
            "cases to run, comma-separated")
      .text("--log-size", &g_log_size, "SIZE",
            "shm.log_size of the streams (default 16MiB; e.g. 64KiB keeps a ping-pong's log in L2)")
      .choice("--flow", &g_pingpong_flow, {"lossy", "backpressure"},
              "shm.flow_control of the ping-pong cases (inline*, dedicated*); tput always runs\n"
              "backpressure")
      .choice("--timer", &timer, {"clock", "rdtscp"},
              "round-trip timer: clock = Clock::now_ns() (rdtsc, not serialized); rdtscp = rdtscp\n"
              "(waits for earlier instructions), as ../shared/peers' shm_pingpong and aeron_pingpong")
      .toggle("--rt", &rt, "run both processes SCHED_FIFO 50 (needs root)")
      .text("--json", &json_path, "FILE",
            "also write JSON lines: per run, floor, inline32 ... dedicated256 (ns percentiles,\n"
            "ratio to the floor) and tput-offer, tput-batch64 (msgs_per_s)")
      .epilog(R"(Cases:
  floor          a bare cache-line ping-pong between the two processes (one 128-byte-padded
                 line per direction): the least any shm transport can do on these two cores
  logfloor       the least a log-based transport can do: a 64 KiB ring of 64-byte frames per
                 direction, 32-byte payload copied in and out, published by a release store of
                 the frame's sequence number; no accounting, counters or clock read
  inline32/256   Pollux ping-pong, threading inline, busy-spin, 32/256-byte payload: the parent
                 offers on "ping" and spins on "pong"; the child echoes
  inline32u      inline32 with [[streams]] publisher_timestamp = false on both streams (offer()
                 reads no clock; Message::publisher_ns is 0): the clock read's share, same run
  dedicated32/256  the same through dedicated pollers (idle yield; 4 threads on 2 CPUs)
  tput           one-way 32-byte messages publisher -> subscriber process, inline, backpressure
                 (nothing lost), rate at the subscriber: offer() and offer_batch() of 64
  tputu          tput's offer() case with publisher_timestamp = false (tput-offer-u))")
      .parse(argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress visible through pipes
  if (rt) {
    sched_param sp{};
    sp.sched_priority = 50;
    if (sched_setscheduler(0, SCHED_FIFO, &sp) != 0) {
      std::perror("sched_setscheduler(SCHED_FIFO) (needs root)");
      return 1;
    }
  }
  Clock::init();
  const bool rdtscp = timer == "rdtscp";
  if (rdtscp) {
#if defined(__x86_64__)
    g_tsc_per_ns = Clock::tsc_hz() / 1e9;  // 0 when the clock does not use the TSC
#else
    g_tsc_per_ns = 0;
#endif
    if (g_tsc_per_ns <= 0) {
      std::fprintf(stderr, "--timer rdtscp: needs x86-64 and a clock on the TSC (the clock is %s)\n",
                   Clock::describe().c_str());
      return 64;
    }
    std::printf("timer: rdtscp, %.4f ticks per ns\n", g_tsc_per_ns);
  }
  std::printf("scheduling: %s\n", rt ? "SCHED_FIFO 50 (--rt)" : "SCHED_OTHER");
  std::printf("machine: %s\nclock cost: %.1f ns per Clock::now_ns()\n\n", pollux::bench::machine_description().c_str(),
              pollux::bench::clock_cost_ns());
  const std::vector<std::string> wanted = pollux::bench::split_list(cases);
  pollux::bench::JsonLines json(cli.program(), argc, argv);
  auto has = [&](const char* c) { return std::find(wanted.begin(), wanted.end(), c) != wanted.end(); };
  const std::uint64_t warmup = count / 10;
  for (std::uint64_t r = 1; r <= runs; ++r) {
    std::printf("--- run %llu (round trips, %llu samples after %llu warm-up)\n", static_cast<unsigned long long>(r),
                static_cast<unsigned long long>(count), static_cast<unsigned long long>(warmup));
    double floor50 = 0;
    Histogram floor_h;
    if (has("floor")) {
      floor_h = rdtscp ? floor_pingpong<Rdtscp>(count, warmup) : floor_pingpong<ClockNs>(count, warmup);
      floor50 = static_cast<double>(floor_h.percentile(50));
      pollux::bench::print_hist("floor (bare cache-line ping-pong)", floor_h);
      json.add(pollux::bench::JsonObject().str("case", "floor").num("run", r).latency(floor_h));
    }
    if (has("logfloor")) {
      Histogram h = rdtscp ? log_floor_pingpong<Rdtscp>(count, warmup) : log_floor_pingpong<ClockNs>(count, warmup);
      pollux::bench::print_hist("log floor (bare 64-byte-frame log)", h);
      pollux::bench::JsonObject o;
      o.str("case", "logfloor").num("run", r).num("payload_bytes", 32).latency(h);
      if (has("floor")) o.floor("floor", floor_h, h);
      json.add(o);
      if (floor50 > 0) {
        std::printf("%-34s p50/floor p50 = %.2fx\n", "", static_cast<double>(h.percentile(50)) / floor50);
      }
    }
    for (const auto& [key, mode, size, stamp] :
         {std::tuple{"inline32", "inline", 32, true}, std::tuple{"inline32u", "inline", 32, false},
          std::tuple{"inline256", "inline", 256, true}, std::tuple{"dedicated32", "dedicated", 32, true},
          std::tuple{"dedicated256", "dedicated", 256, true}}) {
      if (!has(key)) continue;
      const std::uint64_t n = std::string(mode) == "dedicated" ? count / 4 : count;  // slower: fewer samples
      const auto sz = static_cast<std::size_t>(size);
      Histogram h = rdtscp ? pollux_pingpong<Rdtscp>(mode, sz, n, n / 10, stamp)
                           : pollux_pingpong<ClockNs>(mode, sz, n, n / 10, stamp);
      char label[64];
      std::snprintf(label, sizeof label, "pollux %s %d B%s", mode, size, stamp ? "" : " (no publisher stamp)");
      pollux::bench::print_hist(label, h);
      pollux::bench::JsonObject o;
      o.str("case", key).num("run", r).num("payload_bytes", size).latency(h);
      if (has("floor")) o.floor("floor", floor_h, h);
      json.add(o);
      if (floor50 > 0) {
        std::printf("%-34s p50/floor p50 = %.2fx, p99.99/p50 = %.1fx\n", "",
                    static_cast<double>(h.percentile(50)) / floor50,
                    static_cast<double>(h.percentile(99.99)) / static_cast<double>(h.percentile(50)));
      }
    }
    for (const auto& [key, batch, stamp] :
         {std::tuple{"tput", 1u, true}, std::tuple{"tputu", 1u, false}, std::tuple{"tput", 64u, true}}) {
      if (!has(key)) continue;
      {
        const double rate = pollux_throughput(count * 100, batch, stamp);
        std::printf("%-34s %.1f million msgs/s (%llu messages, inline, backpressure, %s%s)\n",
                    "pollux one-way 32 B throughput", rate / 1e6, static_cast<unsigned long long>(count * 100),
                    batch == 1 ? "offer" : "offer_batch of 64", stamp ? "" : ", no publisher stamp");
        json.add(pollux::bench::JsonObject()
                     .str("case", batch == 1 ? (stamp ? "tput-offer" : "tput-offer-u") : "tput-batch64")
                     .num("run", r)
                     .num("count", count * 100)
                     .num("payload_bytes", 32)
                     .num("msgs_per_s", rate));
      }
    }
  }
  return json.write(json_path) ? 0 : 1;
}
