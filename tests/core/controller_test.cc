// PollController on a stub clock: a simulated poller runs duty cycles of fixed length against a
// scripted list of message arrival times, sleeps when told to (until the next arrival plus a
// wakeup latency, or a timeout), and logs every mode the controller reports.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "core/controller.h"

namespace pollux::core {
namespace {

constexpr std::int64_t kUs = 1'000;
constexpr std::int64_t kMs = 1'000'000;

struct Sim {
  explicit Sim(const ControllerOptions& o, std::int64_t start = 0) : ctl(o, start), now(start), start_ns(start) {
    modes.push_back({start, ctl.mode()});
  }

  PollController ctl;
  std::int64_t now;
  const std::int64_t start_ns;
  std::int64_t cycle_ns = 300;
  std::int64_t wake_latency_ns = 10 * kUs;
  std::int64_t timeout_ns = -1;        // < 0: sleep until an event
  bool sources_refuse = false;         // a source that can never be woken
  int burst = 32;                      // most messages one cycle takes
  std::vector<std::int64_t> arrivals;  // sorted
  std::vector<std::int64_t> phantoms;  // sorted: events that wake the poller with no message
  std::size_t next = 0, next_phantom = 0;

  // Observations.
  std::vector<std::pair<std::int64_t, PollMode>> modes;  // every change, with its time
  std::vector<std::int64_t> arm_times;                   // successful sleeps (arm time)
  std::int64_t last_work = -1, refusals = 0, cycles = 0, empty_cycles = 0, delivered = 0, max_delay = 0;

  void log_mode() {
    if (ctl.mode() != modes.back().second) modes.push_back({now, ctl.mode()});
  }
  bool pending() const { return next < arrivals.size() && arrivals[next] <= now; }

  void run_until(std::int64_t end) {
    while (now < end) {
      int work = 0;
      while (work < burst && pending()) {
        max_delay = std::max(max_delay, now - arrivals[next]);
        ++next;
        ++work;
      }
      delivered += work;
      if (work > 0) last_work = now;
      ++cycles;
      if (work == 0) ++empty_cycles;
      const PollAction a = ctl.on_cycle(now, work);
      log_mode();
      now += cycle_ns;
      if (a == PollAction::kPoll) continue;
      if (sources_refuse || pending()) {
        ctl.on_arm_refused(now);
        ++refusals;
        log_mode();
        continue;
      }
      arm_times.push_back(now);
      std::int64_t wake = end;
      bool by_event = false;
      if (next < arrivals.size()) {
        wake = std::max(now, arrivals[next]) + wake_latency_ns;
        by_event = true;
      }
      if (next_phantom < phantoms.size() && phantoms[next_phantom] + wake_latency_ns < wake &&
          phantoms[next_phantom] >= now) {
        wake = phantoms[next_phantom++] + wake_latency_ns;
        by_event = true;
      }
      if (timeout_ns >= 0 && now + timeout_ns < wake) {
        wake = now + timeout_ns;
        by_event = false;
      }
      now = std::max(wake, now);
      ctl.on_wakeup(now, by_event);
      log_mode();
    }
  }

  std::int64_t arms_between(std::int64_t a, std::int64_t b) const {
    return std::count_if(arm_times.begin(), arm_times.end(), [&](std::int64_t t) { return t >= a && t < b; });
  }
  std::int64_t time_sum() const {
    std::int64_t s = 0;
    for (PollMode m : {PollMode::kBusy, PollMode::kSpin, PollMode::kInterrupt}) s += ctl.time_in_mode_ns(m, now);
    return s;
  }
  std::vector<PollMode> mode_sequence() const {
    std::vector<PollMode> v;
    for (const auto& [t, m] : modes) v.push_back(m);
    return v;
  }
};

void add_periodic(std::vector<std::int64_t>& v, std::int64_t from, std::int64_t every, std::int64_t until) {
  for (std::int64_t t = from; t < until; t += every) v.push_back(t);
}

// Invariants every scenario must satisfy.
// 500 arrivals from 1 ms on, 80% of the gaps 30 us and every fifth 1 ms, run to the last;
// returns its time.
std::int64_t run_mostly_short_gaps(Sim& s) {
  std::int64_t t = 1 * kMs;
  for (int i = 0; i < 500; ++i) {
    s.arrivals.push_back(t);
    t += i % 5 == 4 ? 1 * kMs : 30 * kUs;
  }
  s.run_until(t);
  return t;
}

void expect_accounting(const Sim& s) {
  const ControllerCounters& c = s.ctl.counters();
  EXPECT_EQ(s.time_sum(), s.now - s.start_ns) << "time in modes must add up to the elapsed time";
  EXPECT_EQ(c.transitions, c.transitions_to[0] + c.transitions_to[1] + c.transitions_to[2]);
  EXPECT_EQ(c.transitions, s.modes.size() - 1) << "every observed mode change is counted once";
  for (int m = 0; m < kPollModes; ++m) {
    const auto seen = std::count_if(s.modes.begin() + 1, s.modes.end(),
                                    [&](const auto& e) { return static_cast<int>(e.second) == m; });
    EXPECT_EQ(c.transitions_to[m], static_cast<std::uint64_t>(seen)) << PollController::mode_name(PollMode(m));
  }
  EXPECT_EQ(c.arms, s.arm_times.size() + static_cast<std::uint64_t>(s.refusals));
  EXPECT_EQ(c.arm_refusals, static_cast<std::uint64_t>(s.refusals));
  EXPECT_EQ(c.wakeups, s.arm_times.size());
  EXPECT_EQ(s.delivered, static_cast<std::int64_t>(s.next));
}

TEST(PollControllerTest, BucketBoundsCoverEveryGapOnce) {
  for (int b = 0; b + 1 < PollController::kBuckets; ++b) {
    ASSERT_EQ(PollController::bucket_of(PollController::bucket_upper(b)), b);
    ASSERT_EQ(PollController::bucket_of(PollController::bucket_upper(b) + 1), b + 1);
    // 4 sub-buckets per octave: a bucket is at most 25% wider than its lowest value.
    const std::int64_t lo = b == 0 ? 0 : PollController::bucket_upper(b - 1) + 1;
    ASSERT_LE(PollController::bucket_upper(b) - lo, std::max<std::int64_t>(lo / 4, 0)) << b;
  }
  EXPECT_EQ(PollController::bucket_of(-5), 0);
  EXPECT_EQ(PollController::bucket_of(std::int64_t{1} << 40), PollController::kBuckets - 1);
  EXPECT_EQ(PollController::bucket_of(30'000), PollController::bucket_of(32'767));
  EXPECT_EQ(PollController::bucket_upper(PollController::bucket_of(30'000)), 32'767);
}

TEST(PollControllerTest, DenseTrafficStaysBusyAndNeverArms) {
  Sim s(ControllerOptions{});
  add_periodic(s.arrivals, 100 * kUs, 2 * kUs, 10'100 * kUs);  // 500k msg/s for 10 ms
  s.run_until(10'100 * kUs);
  // Asleep before the first message (idle start), awake from the second wakeup on.
  EXPECT_EQ(s.mode_sequence(), (std::vector<PollMode>{PollMode::kInterrupt, PollMode::kBusy}));
  // The first wakeup's gap is measured from the start (long); the second's is short.
  EXPECT_LE(s.modes[1].first, 100 * kUs + 2 * (s.wake_latency_ns + s.cycle_ns) + 2 * kUs);
  EXPECT_EQ(s.arms_between(150 * kUs, s.now), 0);
  EXPECT_EQ(s.refusals, 0);
  EXPECT_EQ(s.ctl.mode(), PollMode::kBusy);
  EXPECT_GE(s.ctl.time_in_mode_ns(PollMode::kBusy, s.now), 9'900 * kUs);
  EXPECT_LE(s.ctl.quantile_gap_ns(), 2'600);  // the gaps are ~2 us
  EXPECT_LE(s.max_delay, s.wake_latency_ns + s.cycle_ns);
  expect_accounting(s);
}

TEST(PollControllerTest, SparseTrafficArmsAfterEveryMessage) {
  Sim s(ControllerOptions{});
  add_periodic(s.arrivals, 5 * kMs, 5 * kMs, 205 * kMs);  // 200 msg/s
  s.run_until(205 * kMs);
  const bool idle_like =
      s.ctl.mode() == PollMode::kInterrupt || (s.ctl.mode() == PollMode::kSpin && s.ctl.spin_budget_ns() == 0);
  EXPECT_TRUE(idle_like) << PollController::mode_name(s.ctl.mode()) << " budget " << s.ctl.spin_budget_ns();
  EXPECT_EQ(s.ctl.mode(), PollMode::kInterrupt);
  EXPECT_EQ(s.ctl.counters().transitions, 0u) << "5 ms gaps are never a sign of load";
  // One sleep per message (plus the one before the first), each right after the message.
  EXPECT_EQ(s.arm_times.size(), s.arrivals.size() + 1);
  EXPECT_LE(s.cycles, 2 * static_cast<std::int64_t>(s.arrivals.size()) + 1);
  EXPECT_EQ(s.delivered, static_cast<std::int64_t>(s.arrivals.size()));
  expect_accounting(s);
}

TEST(PollControllerTest, DenseThenSparseFallsBackToInterruptThroughSpin) {
  Sim s(ControllerOptions{});
  add_periodic(s.arrivals, 100 * kUs, 2 * kUs, 5 * kMs);
  add_periodic(s.arrivals, 10 * kMs, 5 * kMs, 300 * kMs);
  s.run_until(300 * kMs);
  const auto seq = s.mode_sequence();
  ASSERT_GE(seq.size(), 4u);
  EXPECT_EQ(seq[1], PollMode::kBusy);
  EXPECT_EQ(seq[2], PollMode::kSpin) << "the pause after the dense phase ends kBusy";
  EXPECT_EQ(s.ctl.mode(), PollMode::kInterrupt);
  EXPECT_EQ(s.ctl.spin_budget_ns(), 0);
  // From the sparse phase on, every message costs one sleep: no spinning between messages.
  const std::int64_t sparse_from = 100 * kMs;
  EXPECT_EQ(s.arms_between(sparse_from, s.now),
            std::count_if(s.arrivals.begin(), s.arrivals.end(), [&](std::int64_t t) { return t >= sparse_from; }));
  EXPECT_LE(s.ctl.counters().transitions, 4u);
  expect_accounting(s);
}

TEST(PollControllerTest, BurstyTrafficPollsDuringBurstsAndSleepsBetween) {
  Sim s(ControllerOptions{});
  constexpr int kBursts = 20;
  std::vector<std::int64_t> burst_start;
  std::int64_t t = 1 * kMs;
  for (int b = 0; b < kBursts; ++b) {
    burst_start.push_back(t);
    for (int i = 0; i < 100; ++i) s.arrivals.push_back(t + i * kUs);
    t += 99 * kUs + 5 * kMs;  // 5 ms of silence after the last message
  }
  s.run_until(t);
  // Within a burst the poller keeps polling (the first bursts may cost a wakeup or two while
  // it learns); between bursts it sleeps through the silence.
  for (int b = 2; b < kBursts; ++b) {
    EXPECT_EQ(s.arms_between(burst_start[b] + 5 * kUs, burst_start[b] + 99 * kUs), 0) << "burst " << b;
    EXPECT_EQ(s.arms_between(burst_start[b] + 99 * kUs, burst_start[b] + 99 * kUs + 5 * kMs), 1) << "gap " << b;
  }
  EXPECT_GE(s.ctl.counters().sleep_ns, kBursts * (49 * kMs / 10)) << "asleep for most of each 5 ms silence";
  // Between bursts it spins at most busy_linger + budget, not the whole silence.
  EXPECT_LT(s.cycles, kBursts * (300 + 2 * (ControllerOptions{}.busy_linger_ns + 2 * kUs) / s.cycle_ns));
  EXPECT_LE(s.max_delay, s.wake_latency_ns + s.cycle_ns);
  // Busy or spinning while messages flow.
  for (const auto& [when, m] : s.modes) {
    if (when > burst_start[2]) {
      EXPECT_NE(m, PollMode::kInterrupt) << "at " << when;
    }
  }
  expect_accounting(s);
}

TEST(PollControllerTest, NoWorkMeansInterruptAndArm) {
  {
    Sim s(ControllerOptions{});
    s.timeout_ns = 1 * kMs;
    s.run_until(50 * kMs);
    EXPECT_EQ(s.ctl.mode(), PollMode::kInterrupt);
    EXPECT_EQ(s.ctl.counters().transitions, 0u);
    EXPECT_EQ(s.cycles, static_cast<std::int64_t>(s.arm_times.size())) << "every (empty) cycle arms";
    EXPECT_EQ(s.ctl.counters().timer_wakeups, s.ctl.counters().wakeups);
    EXPECT_EQ(s.ctl.counters().spurious_wakeups, 0u) << "timeouts are not spurious wakeups";
    expect_accounting(s);
  }
  {
    // Load, then nothing: back to interrupt mode, dated idle_after_ns after the last message.
    const ControllerOptions o;
    Sim s(o);
    s.timeout_ns = 1 * kMs;
    add_periodic(s.arrivals, 100 * kUs, 2 * kUs, 2 * kMs);
    s.run_until(50 * kMs);
    EXPECT_EQ(s.ctl.mode(), PollMode::kInterrupt);
    ASSERT_GE(s.modes.size(), 3u);
    EXPECT_EQ(s.modes.back().second, PollMode::kInterrupt);
    // Noticed at the first timeout after idle_after_ns, dated last work + idle_after_ns.
    EXPECT_GE(s.modes.back().first, s.last_work + o.idle_after_ns);
    EXPECT_LE(s.modes.back().first, s.last_work + o.idle_after_ns + s.timeout_ns + s.cycle_ns);
    EXPECT_EQ(s.ctl.time_in_mode_ns(PollMode::kInterrupt, s.now),
              s.now - (s.last_work + o.idle_after_ns) + s.modes[1].first);
    // Asleep after the last message, woken only by the timer.
    EXPECT_NEAR(s.arms_between(2 * kMs + 100 * kUs, s.now), (s.now - 2 * kMs) / s.timeout_ns, 1);
    expect_accounting(s);
  }
}

TEST(PollControllerTest, LeavesInterruptOnTheFirstBurst) {
  Sim s(ControllerOptions{});
  s.timeout_ns = 1 * kMs;
  const std::int64_t load = 50 * kMs;
  add_periodic(s.arrivals, load, 2 * kUs, load + 5 * kMs);
  s.run_until(load + 5 * kMs);
  EXPECT_EQ(s.mode_sequence(), (std::vector<PollMode>{PollMode::kInterrupt, PollMode::kBusy}));
  EXPECT_LE(s.modes[1].first, load + 2 * (s.wake_latency_ns + s.cycle_ns) + 2 * kUs) << "second wakeup at the latest";
  EXPECT_EQ(s.arms_between(load + 30 * kUs, s.now), 0);
  expect_accounting(s);
}

TEST(PollControllerTest, SustainedWorkLeavesInterruptEvenWithSlowWakeups) {
  // Wakeups slower than the spin threshold hide the short gaps; consecutive busy cycles
  // (the poller cannot keep up in one cycle) still end interrupt mode.
  ControllerOptions o;
  o.load_batch = 0;
  Sim s(o);
  s.wake_latency_ns = 200 * kUs;
  s.burst = 4;
  add_periodic(s.arrivals, 1 * kMs, 200, 3 * kMs);  // 5M msg/s
  s.run_until(3 * kMs);
  ASSERT_GE(s.modes.size(), 2u);
  EXPECT_EQ(s.modes[1].second, PollMode::kBusy);
  EXPECT_EQ(s.modes[1].first, 1 * kMs + s.wake_latency_ns + (o.load_cycles - 1) * s.cycle_ns);
  expect_accounting(s);

  // The same with the batch sign: the first cycle after the wakeup already holds >= 16.
  ControllerOptions ob;
  ob.load_cycles = 0;
  Sim b(ob);
  b.wake_latency_ns = 200 * kUs;
  add_periodic(b.arrivals, 1 * kMs, 200, 3 * kMs);
  b.run_until(3 * kMs);
  ASSERT_GE(b.modes.size(), 2u);
  EXPECT_EQ(b.modes[1].second, PollMode::kBusy);
  EXPECT_EQ(b.modes[1].first, 1 * kMs + b.wake_latency_ns);
}

TEST(PollControllerTest, SpinBudgetFollowsTheGapQuantile) {
  const ControllerOptions o;  // threshold 50 us, dense 20 us, busy exit 40 us
  // Gaps of 30 us: sparse (not dense) but cheaper to spin through than to sleep through.
  {
    Sim s(o);
    add_periodic(s.arrivals, 1 * kMs, 30 * kUs, 20 * kMs);
    s.run_until(20 * kMs);
    EXPECT_EQ(s.ctl.mode(), PollMode::kSpin);
    EXPECT_GE(s.ctl.spin_budget_ns(), 30 * kUs);
    EXPECT_LE(s.ctl.spin_budget_ns(), 30 * kUs * 5 / 4 + s.cycle_ns);
    EXPECT_EQ(s.arms_between(2 * kMs, s.now), 0) << "every gap is inside the budget";
    expect_accounting(s);
  }
  // 80% of the gaps 30 us, 20% 1 ms: the 0.9 quantile is 1 ms > threshold -> budget 0.
  {
    Sim s(o);
    run_mostly_short_gaps(s);
    EXPECT_EQ(s.ctl.spin_budget_ns(), 0);
    EXPECT_GT(s.ctl.quantile_gap_ns(), 1 * kMs);
    EXPECT_NE(s.ctl.mode(), PollMode::kBusy);
    expect_accounting(s);
  }
  // With spin_quantile 0.75 the same traffic spins through the short gaps only.
  {
    ControllerOptions q = o;
    q.spin_quantile = 0.75;
    Sim s(q);
    const std::int64_t t = run_mostly_short_gaps(s);
    EXPECT_EQ(s.ctl.mode(), PollMode::kSpin);
    EXPECT_GE(s.ctl.spin_budget_ns(), 30 * kUs);
    EXPECT_LE(s.ctl.spin_budget_ns(), 30 * kUs * 5 / 4 + s.cycle_ns);
    // One sleep per long gap, none in the short ones.
    std::int64_t long_gaps = 0;
    for (std::size_t i = 1; i < s.arrivals.size(); ++i)
      if (s.arrivals[i] >= t - 100 * kMs && s.arrivals[i] - s.arrivals[i - 1] > 500 * kUs) ++long_gaps;
    EXPECT_EQ(s.arms_between(t - 100 * kMs, t), long_gaps);
  }
  // max_spin_ns bounds the budget even when sleeping would be dearer.
  {
    ControllerOptions m = o;
    m.wakeup_cost_ns = 1 * kMs;
    m.max_spin_ns = 50 * kUs;
    m.min_spin_ns = 1 * kUs;
    m.dense_gap_ns = 20 * kUs;
    m.busy_exit_gap_ns = 40 * kUs;
    Sim s(m);
    add_periodic(s.arrivals, 1 * kMs, 100 * kUs, 20 * kMs);
    s.run_until(20 * kMs);
    EXPECT_EQ(s.ctl.spin_budget_ns(), 50 * kUs);
    EXPECT_GT(s.ctl.quantile_gap_ns(), 100 * kUs);
    EXPECT_EQ(s.ctl.mode(), PollMode::kSpin);
  }
}

TEST(PollControllerTest, SpinPollsThroughTheBudgetThenArms) {
  // Direct calls: the exact cycle at which kSpin asks to arm.
  ControllerOptions o;
  PollController c(o, 0);
  std::int64_t t = 0;
  // Leave interrupt mode with a 30 us gap (-> kSpin, optimistic budget = threshold 50 us).
  EXPECT_EQ(c.on_cycle(t += 30 * kUs, 1), PollAction::kPoll);
  ASSERT_EQ(c.mode(), PollMode::kSpin);
  ASSERT_EQ(c.spin_budget_ns(), 50 * kUs);
  const std::int64_t last = t;
  for (std::int64_t d = 1 * kUs; d <= 50 * kUs; d += 1 * kUs)
    ASSERT_EQ(c.on_cycle(last + d, 0), PollAction::kPoll) << d;
  EXPECT_EQ(c.on_cycle(last + 50 * kUs + 1, 0), PollAction::kArm);
  EXPECT_EQ(c.counters().arms, 1u);
}

TEST(PollControllerTest, ArmRefusalKeepsPollingAndIsNotAWakeup) {
  const ControllerOptions o;
  Sim s(o);
  s.sources_refuse = true;
  s.run_until(20 * kMs);
  EXPECT_TRUE(s.arm_times.empty());
  EXPECT_EQ(s.ctl.counters().wakeups, 0u);
  EXPECT_GT(s.refusals, 0);
  EXPECT_EQ(static_cast<std::uint64_t>(s.refusals), s.ctl.counters().arms);
  // Back-off: 1, 2, 4 ... 1024 us, then every 1 ms: ~11 + 20 attempts, not one per cycle.
  EXPECT_LE(s.refusals, 40);
  EXPECT_GE(s.refusals, 20);
  EXPECT_GT(s.cycles, 60'000) << "it kept polling";
  expect_accounting(s);

  // A refusal in the middle of sparse traffic: the poller polls once more, delivers, and the
  // next arm succeeds (the back-off restarts after a real sleep).
  PollController c(o, 0);
  EXPECT_EQ(c.on_cycle(10 * kMs, 0), PollAction::kArm);
  c.on_arm_refused(10 * kMs);
  EXPECT_EQ(c.on_cycle(10 * kMs + 300, 1), PollAction::kPoll);
  EXPECT_EQ(c.on_cycle(10 * kMs + 600, 0), PollAction::kPoll) << "inside the 1 us back-off";
  EXPECT_EQ(c.on_cycle(10 * kMs + 1'300, 0), PollAction::kArm);
  c.on_wakeup(15 * kMs, true);
  EXPECT_EQ(c.counters().wakeups, 1u);
  EXPECT_EQ(c.counters().arm_refusals, 1u);
  EXPECT_EQ(c.counters().sleep_ns, 15 * kMs - (10 * kMs + 1'300));
}

TEST(PollControllerTest, SpuriousWakeupsAreCounted) {
  Sim s(ControllerOptions{});
  add_periodic(s.arrivals, 5 * kMs, 5 * kMs, 100 * kMs);
  add_periodic(s.phantoms, 7 * kMs, 10 * kMs, 100 * kMs);  // 10 phantom events, between messages
  s.timeout_ns = 3 * kMs;
  s.run_until(100 * kMs);
  const ControllerCounters& c = s.ctl.counters();
  EXPECT_EQ(c.spurious_wakeups, s.phantoms.size());
  EXPECT_GT(c.timer_wakeups, 0u);
  EXPECT_EQ(c.wakeups, s.arrivals.size() + s.phantoms.size() + c.timer_wakeups);
  EXPECT_EQ(s.delivered, static_cast<std::int64_t>(s.arrivals.size()));
  expect_accounting(s);
}

TEST(PollControllerTest, AccountingAddsUpOverMixedTraffic) {
  Sim s(ControllerOptions{}, 123'456'789);  // any origin
  const std::int64_t o = 123'456'789;
  add_periodic(s.arrivals, o + 1 * kMs, 2 * kUs, o + 4 * kMs);    // dense
  add_periodic(s.arrivals, o + 4 * kMs, 30 * kUs, o + 10 * kMs);  // spin band
  add_periodic(s.arrivals, o + 10 * kMs, 3 * kMs, o + 40 * kMs);  // sparse
  add_periodic(s.arrivals, o + 60 * kMs, 1 * kUs, o + 62 * kMs);  // dense again after idle
  s.timeout_ns = 2 * kMs;
  s.run_until(o + 80 * kMs);
  expect_accounting(s);
  const auto seq = s.mode_sequence();
  for (PollMode m : {PollMode::kBusy, PollMode::kSpin, PollMode::kInterrupt})
    EXPECT_NE(std::find(seq.begin(), seq.end(), m), seq.end()) << PollController::mode_name(m);
  EXPECT_EQ(s.ctl.mode(), PollMode::kInterrupt);
}

// Poisson traffic around the break-even point must not make the controller flap: the exit
// streak doubles each time it falls back to interrupt mode.
std::int64_t poisson_transitions(std::uint32_t max_exit_streak) {
  ControllerOptions o;
  o.max_exit_streak = max_exit_streak;
  Sim s(o);
  std::mt19937_64 rng(7);
  std::exponential_distribution<double> gap(1.0 / (100.0 * kUs));
  for (std::int64_t t = 1 * kMs; t < 400 * kMs; t += static_cast<std::int64_t>(gap(rng)) + 1) {
    s.arrivals.push_back(t);
  }
  s.run_until(400 * kMs);
  expect_accounting(s);
  return static_cast<std::int64_t>(s.ctl.counters().transitions);
}

TEST(PollControllerTest, HysteresisStopsFlappingOnPoissonTraffic) {
  const std::int64_t with = poisson_transitions(ControllerOptions{}.max_exit_streak);
  const std::int64_t without = poisson_transitions(1);
  std::printf("poisson transitions: %lld with hysteresis, %lld without\n", static_cast<long long>(with),
              static_cast<long long>(without));
  EXPECT_LE(with, 16) << "over ~4000 messages";
  EXPECT_GT(without, 4 * with) << "the same traffic without the streak hysteresis flaps";
}

TEST(PollControllerTest, BusySpinPolicyNeverArms) {
  Sim s(ControllerOptions::busy_spin());
  add_periodic(s.arrivals, 5 * kMs, 5 * kMs, 50 * kMs);
  s.run_until(50 * kMs);
  EXPECT_TRUE(s.arm_times.empty());
  EXPECT_EQ(s.refusals, 0);
  EXPECT_EQ(s.ctl.mode(), PollMode::kBusy);
  EXPECT_EQ(s.ctl.counters().transitions, 0u);
  EXPECT_EQ(s.ctl.time_in_mode_ns(PollMode::kBusy, s.now), s.now);
  EXPECT_LE(s.max_delay, s.cycle_ns);
  expect_accounting(s);
}

TEST(PollControllerTest, InterruptPolicyArmsAfterEveryEmptyCycle) {
  Sim s(ControllerOptions::interrupt());
  add_periodic(s.arrivals, 100 * kUs, 2 * kUs, 5 * kMs);  // even dense traffic
  s.run_until(5 * kMs);
  EXPECT_EQ(s.ctl.mode(), PollMode::kInterrupt);
  EXPECT_EQ(s.ctl.counters().transitions, 0u);
  // Every cycle that found nothing asked to arm (some refused: a message was already pending).
  EXPECT_EQ(static_cast<std::int64_t>(s.ctl.counters().arms), s.empty_cycles);
  EXPECT_GT(s.arm_times.size(), 300u) << "a sleep per ~5 messages (one wakeup latency)";
  EXPECT_GE(s.max_delay, s.wake_latency_ns);
  expect_accounting(s);
}

TEST(PollControllerTest, PolicyIsTheIdleStrategyAndNamesRoundTrip) {
  // The policy is the poller's idle strategy (runtime.idle), under the same names.
  for (auto p : {IdleKind::kAdaptive, IdleKind::kBusySpin, IdleKind::kInterrupt}) {
    EXPECT_EQ(parse_idle_kind(idle_kind_name(p)), p);
    ControllerOptions o;
    o.policy = p;
    const PollController c(o, 0);
    EXPECT_EQ(c.policy(), p);
    EXPECT_EQ(c.mode(), p == IdleKind::kBusySpin ? PollMode::kBusy : PollMode::kInterrupt) << idle_kind_name(p);
  }
  // The strategies without a controller run adaptive if one is made for them.
  for (auto p : {IdleKind::kYield, IdleKind::kBackoff}) {
    ControllerOptions o;
    o.policy = p;
    EXPECT_EQ(PollController(o, 0).policy(), IdleKind::kAdaptive) << idle_kind_name(p);
  }
  EXPECT_EQ(PollController::mode_name(PollMode::kBusy), "busy");
  EXPECT_EQ(PollController::mode_name(PollMode::kSpin), "spin");
  EXPECT_EQ(PollController::mode_name(PollMode::kInterrupt), "interrupt");
}

TEST(PollControllerTest, ValidateNamesTheKey) {
  EXPECT_TRUE(ControllerOptions{}.validate().ok());
  ControllerOptions o;
  o.spin_quantile = 1.5;
  EXPECT_NE(o.validate().message().find("runtime.adaptive.spin_quantile"), std::string::npos) << o.validate();
  o = {};
  o.busy_exit_gap_ns = o.dense_gap_ns - 1;
  EXPECT_NE(o.validate().message().find("runtime.adaptive.busy_exit_gap_ns"), std::string::npos);
  o = {};
  o.wakeup_cost_ns = 0;
  EXPECT_NE(o.validate().message().find("runtime.adaptive.wakeup_cost_ns"), std::string::npos);
  // Invalid options are clamped by the constructor, never undefined behaviour.
  o.spin_quantile = -1;
  o.window = 0;
  PollController c(o, 0);
  EXPECT_EQ(c.options().wakeup_cost_ns, 1);
  EXPECT_EQ(c.options().window, 1u);
}

}  // namespace
}  // namespace pollux::core
