// pollux-bench-rdma-pingpong: round trip of a small message through Pollux over RDMA RC, the
// figure to hold against perftest's ib_send_lat (raw verbs SEND ping-pong) on the same devices.
//
//   server: pollux-bench-rdma-pingpong server --device rxe1 --listen 7600 --peer 10.0.0.1:7601
//   client: pollux-bench-rdma-pingpong client --device rxe0 --listen 7601 --peer 10.0.0.2:7600
//
// Each side has one context with a publisher (RC to the other side's listener) and a subscriber.
// The client offers a ping, polls until the pong arrives, and records the round trip with
// CLOCK_MONOTONIC (under TCG emulation the TSC calibration is unreliable); the server answers
// every ping. ib_send_lat reports half the round trip ("t_typical" is the median of RTT/2), so
// the client prints both RTT and RTT/2 percentiles; the comparison uses RTT/2 medians.
//
// Options: --threading inline|dedicated (inline: the application thread posts and polls, no
// poller; dedicated: a poller thread per context moves messages through SPSC rings), --idle
// busy-spin|yield (dedicated pollers), --poller-cpu N, --cpu N (the application thread),
// --iters N (5000), --warmup N (1000), --size BYTES (2, like ib_send_lat -s 2), --json FILE
// (the client's percentiles); --help describes every flag.
//
// --reg-per-message (both sides; --pairs P): the seed's "pre-registered pool vs ibv_reg_mr per
// message". The client runs P interleaved pairs of blocks of --iters round trips: the ordinary
// pre-registered path (Pollux's pool is registered once), then the same ping-pong with an
// ibv_reg_mr + ibv_dereg_mr of the message buffer around every send (a protection domain of the
// harness's own on the same device, IBV_ACCESS_LOCAL_WRITE; dereg once the pong is back, so the
// send has completed). Pollux still copies the message into its registered slot: the figure is
// what registering per message adds to a round trip, which a design without a pre-registered
// pool pays on every send. Output: one JSON line per block and a summary line with the per-pair
// deltas of the RTT/2 median (median, min, max) and the reg/dereg call medians.
#include <infiniband/verbs.h>
#include <sched.h>
#include <time.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "core/counters.h"
#include "core/histogram.h"
#include "pollux/pollux.h"

namespace {

struct Args {
  std::string role;
  std::string threading = "inline";
  std::string idle = "busy-spin";
  std::string device = "auto";
  std::string peer;  // ip:port of the other side's listener
  int listen = 7600;
  int poller_cpu = -1;
  int cpu = -1;
  std::uint64_t iters = 5000, warmup = 1000;
  std::uint64_t size = 2;
  std::string json;
  bool reg_per_message = false;
  std::uint64_t pairs = 3;
};

// --reg-per-message: the harness's own device context and protection domain (control path).
struct RegDomain {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  std::string error;
  explicit RegDomain(const std::string& device) {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list == nullptr || n == 0) {
      error = "no RDMA device (ibv_get_device_list)";
      if (list != nullptr) ibv_free_device_list(list);
      return;
    }
    for (int i = 0; i < n && ctx == nullptr; ++i) {
      if (device == "auto" || device == ibv_get_device_name(list[i])) ctx = ibv_open_device(list[i]);
    }
    ibv_free_device_list(list);
    if (ctx == nullptr) {
      error = "cannot open RDMA device " + device + " for --reg-per-message";
      return;
    }
    pd = ibv_alloc_pd(ctx);
    if (pd == nullptr) error = "ibv_alloc_pd failed on " + device;
  }
  ~RegDomain() {
    if (pd != nullptr) ibv_dealloc_pd(pd);
    if (ctx != nullptr) ibv_close_device(ctx);
  }
};

constexpr std::uint64_t kMaxPayload = 4096;  // run()'s message buffer

// Interval timer for the loop: the TSC where there is one (a few ns even under emulation),
// converted with a rate measured against CLOCK_MONOTONIC over the whole run - no per-sample
// calibration to go wrong. CLOCK_MONOTONIC itself costs ~1.4 us per call in the TCG guest (HPET
// clocksource), which would add ~3 us to every measured round trip.
std::uint64_t ticks() {
#if defined(__x86_64__)
  return __rdtsc();
#else
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000 + static_cast<std::uint64_t>(ts.tv_nsec);
#endif
}

std::int64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

std::string config(const Args& a) {
  std::string c = "[runtime]\nname = \"pingpong-" + a.role + "\"\nthreading = \"" + a.threading + "\"\nidle = \"" +
                  a.idle + "\"\ncounters = true\npollers = 1\n";
  if (a.poller_cpu >= 0) c += "poller_cores = [" + std::to_string(a.poller_cpu) + "]\n";
  c += "[pool]\nslots = 4096\n[transport]\nkind = \"rdma\"\n[rdma]\ndevice = \"" + a.device +
       "\"\nlisten_port = " + std::to_string(a.listen) + "\npeers = [\"" + a.peer + "\"]\nreconnect_ms = 20\n";
  return c;
}

// Stall diagnostics: every rdma counter of this process (its counters file).
void dump_counters(const pollux::Context& ctx, const char* why) {
  auto snap = pollux::core::read_counters_file(ctx.counters_path());
  if (!snap.ok()) return;
  std::fprintf(stderr, "---- %s: counters of pid %d\n", why, snap->pid);
  for (const auto& c : snap->counters) {
    if (c.scope.rfind("rdma", 0) == 0 || c.scope.rfind("poller", 0) == 0) {
      std::fprintf(stderr, "  %-40s %-28s %llu\n", c.scope.c_str(), c.name.c_str(),
                   static_cast<unsigned long long>(c.value));
    }
  }
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// --reg-per-message: per block RTT percentiles, per pair the RTT/2 median delta.
int report_reg(const Args& a, int argc, char** argv, const std::vector<std::uint64_t>& samples,
               const std::vector<std::uint64_t>& reg, const std::vector<std::uint64_t>& dereg, double ns_per_tick) {
  pollux::bench::JsonLines json("pollux-bench-rdma-pingpong", argc, argv);
  auto ns = [&](std::uint64_t t) { return static_cast<std::int64_t>(static_cast<double>(t) * ns_per_tick); };
  std::printf(
      "pollux rdma pingpong, pre-registered pool vs ibv_reg_mr + ibv_dereg_mr per message: %s, %llu-byte "
      "payload, threading %s%s, %llu pairs of %llu round trips each, after %llu warm-up\n",
      pollux::bench::machine_description().c_str(), static_cast<unsigned long long>(a.size), a.threading.c_str(),
      a.threading == "inline" ? "" : (", idle " + a.idle).c_str(), static_cast<unsigned long long>(a.pairs),
      static_cast<unsigned long long>(a.iters), static_cast<unsigned long long>(a.warmup));
  std::vector<double> deltas;
  for (std::uint64_t p = 0; p < a.pairs; ++p) {
    double half[2] = {};
    for (int side = 0; side < 2; ++side) {
      pollux::core::Histogram h;
      const std::uint64_t b = 2 * p + static_cast<std::uint64_t>(side);
      for (std::uint64_t k = b * a.iters; k < (b + 1) * a.iters && k < samples.size(); ++k) h.record(ns(samples[k]));
      half[side] = static_cast<double>(h.percentile(50)) / 2;
      const char* name = side == 0 ? "preregistered" : "reg-per-message";
      std::printf("pair %llu %-16s RTT/2 p50 %8.3f us  RTT p99 %8.3f us\n", static_cast<unsigned long long>(p + 1),
                  name, half[side] / 1e3, static_cast<double>(h.percentile(99)) / 1e3);
      json.add(pollux::bench::JsonObject()
                   .str("case", std::string("rc-") + a.threading + "-" + name)
                   .str("threading", a.threading)
                   .num("pair", p + 1)
                   .num("payload_bytes", a.size)
                   .latency(h)
                   .num("half_rtt_p50_ns", h.percentile(50) / 2));
    }
    deltas.push_back(half[1] - half[0]);
  }
  pollux::core::Histogram hr, hd;
  for (std::uint64_t t : reg) hr.record(ns(t));
  for (std::uint64_t t : dereg) hd.record(ns(t));
  const double dmed = median(deltas);
  const double dlo = *std::min_element(deltas.begin(), deltas.end());
  const double dhi = *std::max_element(deltas.begin(), deltas.end());
  std::printf(
      "RESULT reg_per_message threading=%s delta_half_rtt_p50_us=%.3f spread=[%.3f,%.3f] reg_mr_p50_us=%.3f "
      "dereg_mr_p50_us=%.3f pairs=%llu\n",
      a.threading.c_str(), dmed / 1e3, dlo / 1e3, dhi / 1e3, static_cast<double>(hr.percentile(50)) / 1e3,
      static_cast<double>(hd.percentile(50)) / 1e3, static_cast<unsigned long long>(a.pairs));
  json.add(pollux::bench::JsonObject()
               .str("case", std::string("rc-") + a.threading + "-reg-per-message-delta")
               .num("pairs", a.pairs)
               .num("delta_half_rtt_p50_ns", dmed)
               .nums("delta_spread_ns", {dlo, dhi})
               .nums("pair_deltas_ns", deltas)
               .num("reg_mr_p50_ns", hr.percentile(50))
               .num("reg_mr_p99_ns", hr.percentile(99))
               .num("dereg_mr_p50_ns", hd.percentile(50))
               .num("dereg_mr_p99_ns", hd.percentile(99)));
  return json.write(a.json) ? 0 : 1;
}

int run(const Args& a, int argc, char** argv) {
  auto ctx = pollux::Context::from_string(config(a), "pingpong.toml");
  if (!ctx.ok()) {
    std::fprintf(stderr, "%s\n", std::string(ctx.status().message()).c_str());
    return 2;
  }
  const bool client = a.role == "client";
  auto pub = (*ctx)->publisher(client ? "ping" : "pong");
  auto sub = (*ctx)->subscriber(client ? "pong" : "ping");
  if (!pub.ok() || !sub.ok()) {
    std::fprintf(stderr, "%s\n", std::string((pub.ok() ? sub.status() : pub.status()).message()).c_str());
    return 2;
  }
  pollux::bench::pin(a.cpu);
  std::uint64_t got = 0;
  auto on_msg = [&](const pollux::Message&) { ++got; };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  // The other side may be ready (and ping) first: count what arrives while waiting.
  while (!pub->is_connected() || !sub->is_connected()) {
    (void)sub->poll(on_msg, 16);
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "%s: the other side never connected\n", a.role.c_str());
      return 3;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  alignas(4096) static std::byte msg[kMaxPayload] = {};
  const std::uint64_t blocks = a.reg_per_message ? 2 * a.pairs : 1;
  const std::uint64_t total = a.warmup + a.iters * blocks;
  auto send = [&] {
    while (pub->offer(msg, a.size) < 0) {
    }
  };
  // With pollers the application threads must give the CPU away when idle: 2 processes x
  // (application thread + poller) share the VM's 2 vCPUs, and a spinning thread would hold its
  // CPU for a whole scheduler slice while its poller waits.
  const bool yield = a.threading != "inline";
  if (!client) {
    std::uint64_t idle = 0;
    for (std::uint64_t answered = 0; answered < total;) {
      if (got > answered) {
        send();
        ++answered;
        idle = 0;
      } else if (sub->poll(on_msg, 1) == 0) {
        if (yield) sched_yield();
        if ((++idle & 0xfffff) == 0) dump_counters(**ctx, "server waiting for a ping");
      }
    }
    // Let the last pong complete before the context closes.
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    return 0;
  }
  std::unique_ptr<RegDomain> dom;
  if (a.reg_per_message) {
    dom = std::make_unique<RegDomain>(a.device);
    if (!dom->error.empty()) {
      std::fprintf(stderr, "client: %s\n", dom->error.c_str());
      return 2;
    }
  }
  std::vector<std::uint64_t> samples, reg_ticks, dereg_ticks;
  samples.reserve(a.iters * blocks);
  reg_ticks.reserve(a.iters * a.pairs);
  dereg_ticks.reserve(a.iters * a.pairs);
  std::int64_t start_ns = 0;
  std::uint64_t start_ticks = 0;
  for (std::uint64_t i = 0; i < total; ++i) {
    if (i == a.warmup) {
      start_ns = mono_ns();
      start_ticks = ticks();
    }
    // Blocks alternate: even = pre-registered, odd = ibv_reg_mr per message.
    const bool reg = a.reg_per_message && i >= a.warmup && ((i - a.warmup) / a.iters) % 2 == 1;
    const std::uint64_t want = got + 1;
    const std::uint64_t t0 = ticks();
    ibv_mr* mr = nullptr;
    if (reg) {
      mr = ibv_reg_mr(dom->pd, msg, a.size, IBV_ACCESS_LOCAL_WRITE);
      if (mr == nullptr) {
        std::fprintf(stderr, "client: ibv_reg_mr(%llu bytes) failed: %s\n", static_cast<unsigned long long>(a.size),
                     std::strerror(errno));
        return 2;
      }
      reg_ticks.push_back(ticks() - t0);
    }
    send();
    std::uint64_t idle = 0;
    while (got < want) {
      if (sub->poll(on_msg, 1) == 0) {
        if (yield) sched_yield();
        if ((++idle & 0xfffff) == 0) dump_counters(**ctx, "client waiting for a pong");
      }
    }
    if (mr != nullptr) {
      const std::uint64_t d0 = ticks();
      (void)ibv_dereg_mr(mr);
      dereg_ticks.push_back(ticks() - d0);
    }
    const std::uint64_t t1 = ticks();
    if (i >= a.warmup) samples.push_back(t1 - t0);
  }
  const double ns_per_tick = static_cast<double>(mono_ns() - start_ns) / static_cast<double>(ticks() - start_ticks);
  if (a.reg_per_message) return report_reg(a, argc, argv, samples, reg_ticks, dereg_ticks, ns_per_tick);
  pollux::core::Histogram h;
  for (std::uint64_t t : samples) h.record(static_cast<std::int64_t>(static_cast<double>(t) * ns_per_tick));
  std::printf(
      "pollux rdma pingpong: %s, Clock::now_ns %.0f ns/call, %llu-byte payload (%llu-byte frame), threading %s%s, "
      "%llu iterations after %llu warm-up\n",
      pollux::bench::machine_description().c_str(), pollux::bench::clock_cost_ns(),
      static_cast<unsigned long long>(a.size), static_cast<unsigned long long>(a.size + 32), a.threading.c_str(),
      a.threading == "inline" ? "" : (", idle " + a.idle).c_str(), static_cast<unsigned long long>(a.iters),
      static_cast<unsigned long long>(a.warmup));
  pollux::bench::print_hist("round trip (RTT)", h);
  std::printf(
      "RESULT threading=%s rtt_p50_us=%.3f half_rtt_p50_us=%.3f rtt_p90_us=%.3f rtt_p99_us=%.3f "
      "rtt_avg_us=%.3f rtt_min_us=%.3f\n",
      a.threading.c_str(), h.percentile(50) / 1e3, h.percentile(50) / 2e3, h.percentile(90) / 1e3,
      h.percentile(99) / 1e3, h.mean() / 1e3, static_cast<double>(h.min()) / 1e3);
  pollux::bench::JsonLines json("pollux-bench-rdma-pingpong", argc, argv);
  json.add(pollux::bench::JsonObject()
               .str("case", "rc-" + a.threading)
               .str("threading", a.threading)
               .str("idle", a.threading == "inline" ? "" : a.idle)
               .num("payload_bytes", a.size)
               .latency(h)
               .num("half_rtt_p50_ns", h.percentile(50) / 2));
  return json.write(a.json) ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  std::uint64_t listen = static_cast<std::uint64_t>(a.listen);
  pollux::bench::Cli cli(
      "pollux-bench-rdma-pingpong",
      "pollux-bench-rdma-pingpong: round trip of a small message through Pollux over RDMA RC, the\n"
      "figure to hold against perftest's ib_send_lat (raw verbs SEND ping-pong, the floor) on the same\n"
      "devices. Needs RDMA devices: tests/rdma/bench-pingpong.sh runs both sides next to ib_send_lat in\n"
      "the Soft-RoCE VM (tests/rdma/run-in-vm.sh). The first argument is the role:\n"
      "  server: pollux-bench-rdma-pingpong server --device rxe1 --listen 7600 --peer 10.0.0.1:7601\n"
      "  client: pollux-bench-rdma-pingpong client --device rxe0 --listen 7601 --peer 10.0.0.2:7600\n"
      "The client offers a ping, polls until the pong arrives and prints RTT and RTT/2 percentiles\n"
      "(ib_send_lat's t_typical is the median of RTT/2); the server answers every ping.");
  cli.choice("--threading", &a.threading, {"inline", "dedicated", "shared"},
             "inline: the application thread posts and polls, no poller; dedicated/shared: poller\n"
             "threads move messages through SPSC rings")
      .choice("--idle", &a.idle, {"busy-spin", "yield", "backoff", "interrupt", "adaptive"},
              "runtime.idle of the pollers (dedicated/shared)")
      .text("--device", &a.device, "NAME", "RDMA device (rdma.device; auto = the first one)")
      .text("--peer", &a.peer, "IP:PORT",
            "the other side's listener (its --listen port on its device address); required")
      .count("--listen", &listen, "this side's listen port", 1, 65535)
      .integer("--poller-cpu", &a.poller_cpu, "CPU of the poller (-1: automatic)", -1, 4095)
      .integer("--cpu", &a.cpu, "CPU of the application thread (-1: unpinned)", -1, 4095)
      .count("--iters", &a.iters, "measured round trips")
      .count("--warmup", &a.warmup, "round trips before the measured ones", 0)
      .count("--size", &a.size, "payload bytes (2, like ib_send_lat -s 2)", 1, kMaxPayload)
      .text("--json", &a.json, "FILE",
            "client: also write JSON lines: case rc-<threading> with the RTT ns percentiles and\n"
            "half_rtt_p50_ns (no floor: ib_send_lat runs beside it, in bench-pingpong.sh)")
      .toggle("--reg-per-message", &a.reg_per_message,
              "both sides: --pairs interleaved pairs of --iters round trips, pre-registered pool vs\n"
              "ibv_reg_mr + ibv_dereg_mr of the message buffer around every send (the seed's 5-20 us per\n"
              "registration); prints per-pair RTT/2 medians, the delta's median and spread, reg/dereg medians")
      .count("--pairs", &a.pairs, "pairs for --reg-per-message (at least 3)", 3, 1000);
  const bool role = argc >= 2 && (std::strcmp(argv[1], "server") == 0 || std::strcmp(argv[1], "client") == 0);
  cli.parse(argc, argv, role ? 2 : 1);  // --help anywhere; flags before the role are rejected below
  if (!role) cli.fail("the first argument is the role: server or client");
  a.role = argv[1];
  a.listen = static_cast<int>(listen);
  if (a.peer.empty()) cli.fail("--peer IP:PORT (the other side's --listen port on its device address) is required");
  return run(a, argc, argv);
}
