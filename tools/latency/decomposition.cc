#include "tools/latency/decomposition.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pollux::latency {

namespace {
constexpr std::string_view kPointNames[kPointCount] = {"offer",   "ring_enqueue",       "poller_dequeue",
                                                       "post",    "send_completion",    "kernel_rx",
                                                       "receive", "ring_to_subscriber", "delivery"};

constexpr std::string_view kStageLabels[kStageCount] = {
    "API call (offer -> app ring)",        "app ring (-> poller dequeue)",
    "poller (dequeue -> transport call)",  "local send completion",
    "kernel/NIC + wire (-> RX timestamp)", "transport (post call -> receiver sees frame)",
    "receiver poller -> subscriber ring",  "-> handler (subscriber ring, or inline: poll dispatch)",
};
}  // namespace

std::string_view point_name(int p) { return p >= 0 && p < kPointCount ? kPointNames[p] : "?"; }
std::string_view stage_label(int s) { return s >= 0 && s < kStageCount ? kStageLabels[s] : "?"; }

Sample sample_from_stage_times(const std::int64_t* ns7) noexcept {
  Sample s;
  s.ns[kOffer] = ns7[0];
  s.ns[kRingEnqueue] = ns7[1];
  s.ns[kPollerDequeue] = ns7[2];
  s.ns[kPost] = ns7[3];
  s.ns[kReceive] = ns7[4];
  s.ns[kRingToSubscriber] = ns7[5];
  s.ns[kDelivery] = ns7[6];
  return s;
}

double Dist::stddev() const noexcept {
  if (n < 2) return 0.0;
  const double m = mean();
  const double var = sumsq / static_cast<double>(n) - m * m;
  return var > 0 ? std::sqrt(var) : 0.0;
}

void Decomposer::reset(double clock_cost_ns) noexcept {
  clock_cost_ = clock_cost_ns;
  have_layout_ = false;
  for (int p = 0; p < kPointCount; ++p) {
    state_[p] = PointState::kAbsent;
    alias_[p] = 0;
    from_[p] = 0;
  }
  for (Dist& d : stage_) {
    d.hist.reset();
    d.sum = d.sumsq = 0;
    d.n = 0;
  }
  e2e_.hist.reset();
  e2e_.sum = e2e_.sumsq = 0;
  e2e_.n = 0;
  accepted_ = no_offer_ = out_of_order_ = layout_mismatch_ = 0;
}

Decomposer::Verdict Decomposer::add(const Sample& s) noexcept {
  if (s.ns[kOffer] <= 0) {
    ++no_offer_;
    return Verdict::kNoOffer;
  }
  PointState st[kPointCount];
  std::int8_t alias[kPointCount] = {};
  std::int8_t from[kPointCount] = {};
  st[kOffer] = PointState::kPresent;
  int last = kOffer;
  for (int p = 1; p < kPointCount; ++p) {
    const std::int64_t v = s.ns[p];
    if (v == 0) {
      st[p] = PointState::kAbsent;
    } else if (v == s.ns[last]) {
      st[p] = PointState::kAlias;
      alias[p] = static_cast<std::int8_t>(last);
    } else if (v < s.ns[last]) {
      ++out_of_order_;
      return Verdict::kOutOfOrder;
    } else {
      st[p] = PointState::kPresent;
      from[p] = static_cast<std::int8_t>(last);
      last = p;
    }
  }
  if (!have_layout_) {
    for (int p = 0; p < kPointCount; ++p) {
      state_[p] = st[p];
      alias_[p] = alias[p];
      from_[p] = from[p];
    }
    have_layout_ = true;
  } else {
    for (int p = 0; p < kPointCount; ++p) {
      if (st[p] != state_[p] || alias[p] != alias_[p]) {
        ++layout_mismatch_;
        return Verdict::kLayoutMismatch;
      }
    }
  }
  double total = 0;
  for (int p = 1; p < kPointCount; ++p) {
    if (st[p] != PointState::kPresent) continue;
    const double d = static_cast<double>(s.ns[p] - s.ns[from[p]]) - clock_cost_;
    stage_[p - 1].add(d);
    total += d;
  }
  e2e_.add(total);
  ++accepted_;
  return Verdict::kAccepted;
}

bool Decomposer::merge(const Decomposer& o) noexcept {
  if (o.have_layout_) {
    if (!have_layout_) {
      for (int p = 0; p < kPointCount; ++p) {
        state_[p] = o.state_[p];
        alias_[p] = o.alias_[p];
        from_[p] = o.from_[p];
      }
      have_layout_ = true;
    } else {
      for (int p = 0; p < kPointCount; ++p) {
        if (state_[p] != o.state_[p] || alias_[p] != o.alias_[p]) return false;
      }
    }
  }
  for (int s = 0; s < kStageCount; ++s) stage_[s].merge(o.stage_[s]);
  e2e_.merge(o.e2e_);
  accepted_ += o.accepted_;
  no_offer_ += o.no_offer_;
  out_of_order_ += o.out_of_order_;
  layout_mismatch_ += o.layout_mismatch_;
  return true;
}

PointNotes transport_notes(std::string_view transport) {
  PointNotes n;
  if (transport == "udp") {
    n[kSendCompletion] =
        "absent: udp.kernel_timestamps = false (no SO_TIMESTAMPING software TX timestamp asked for), or none came "
        "back (refused by the socket, or the device does not stamp: see the publisher's describe() and its "
        "tx_timestamps counters)";
    n[kKernelRx] = "absent: udp.kernel_timestamps = false (the kernel's SO_TIMESTAMPING software RX timestamp is off)";
  } else if (transport == "rdma") {
    n[kSendCompletion] = "not measured by this version (send CQE time; completion timestamps are not queried)";
    n[kKernelRx] = "not measured by this version (recv CQE completion timestamp is not queried)";
  } else {
    n[kSendCompletion] = "absent: shm has no send completion (the log write is the send)";
    n[kKernelRx] = "absent: no kernel or NIC on the shm path";
  }
  return n;
}

std::vector<StageRow> stage_rows(const Decomposer& d, const PointNotes& notes) {
  std::vector<StageRow> rows;
  double total = 0;
  for (int s = 0; s < kStageCount; ++s) {
    if (d.stage_present(s)) total += d.stage(s).mean();
  }
  for (int s = 0; s < kStageCount; ++s) {
    const int p = s + 1;
    StageRow r;
    r.stage = s;
    r.name = std::string(point_name(p));
    r.label = std::string(stage_label(s));
    if (!d.has_layout()) {
      r.note = "no traced message was decomposed";
    } else if (d.stage_present(s)) {
      const Dist& x = d.stage(s);
      r.present = true;
      r.from = std::string(point_name(d.from_point(s)));
      r.mean_ns = x.mean();
      r.stddev_ns = x.stddev();
      r.p50_ns = x.p(50);
      r.p99_ns = x.p(99);
      r.count = x.n;
      r.share_pct = total != 0 ? 100.0 * r.mean_ns / total : 0.0;
    } else if (d.state(p) == PointState::kAlias) {
      r.note = absl::StrCat("not stamped separately (same clock read as ", std::string(point_name(d.alias_of(p))), ")");
    } else if (!notes[p].empty()) {
      r.note = notes[p];
    } else {
      r.note = "absent (not passed in this mode)";
    }
    rows.push_back(std::move(r));
  }
  return rows;
}

double Checks::perturbation_pct() const noexcept {
  if (!have_untraced || untraced_p50_ns <= 0) return 0.0;
  const double traced = have_library_only ? library_only_p50_ns : traced_p50_ns;
  return 100.0 * (traced - untraced_p50_ns) / untraced_p50_ns;
}

double Checks::traced_perturbation_pct() const noexcept {
  if (!have_untraced || untraced_p50_ns <= 0) return 0.0;
  return 100.0 * (traced_p50_ns - untraced_p50_ns) / untraced_p50_ns;
}

double Checks::kernel_timestamps_pct() const noexcept {
  if (!have_library_only || library_only_p50_ns <= 0) return 0.0;
  return 100.0 * (traced_p50_ns - library_only_p50_ns) / library_only_p50_ns;
}

double Checks::coverage_pct(const Decomposer& d) const noexcept {
  if (!have_untraced || untraced_p50_ns <= 0) return 0.0;
  if (have_library_only) return 100.0 * library_only_e2e_p50_ns / untraced_p50_ns;
  if (d.end_to_end().n == 0) return 0.0;
  return 100.0 * static_cast<double>(d.end_to_end().p(50)) / untraced_p50_ns;
}

double Checks::decomposed_coverage_pct(const Decomposer& d) const noexcept {
  if (traced_p50_ns <= 0 || d.end_to_end().n == 0) return 0.0;
  return 100.0 * static_cast<double>(d.end_to_end().p(50)) / traced_p50_ns;
}

namespace {
// Microseconds, 3 decimals; no "-0.000" for a stage that rounds to nothing.
std::string us(double ns) {
  const double v = ns / 1e3;
  return absl::StrFormat("%.3f", std::fabs(v) < 0.0005 ? 0.0 : v);
}
double pct(double v) { return std::fabs(v) < 0.05 ? 0.0 : v; }
}  // namespace

std::string format_table(const Decomposer& d, const PointNotes& notes, const Checks& c) {
  std::string out = absl::StrFormat("%-48s %-36s %10s %10s %10s %7s\n", "stage", "from -> to", "mean us", "p50 us",
                                    "p99 us", "share");
  for (const StageRow& r : stage_rows(d, notes)) {
    if (r.present) {
      absl::StrAppendFormat(&out, "%-48s %-36s %10s %10s %10s %6.1f%%\n", r.label, absl::StrCat(r.from, " -> ", r.name),
                            us(r.mean_ns), us(static_cast<double>(r.p50_ns)), us(static_cast<double>(r.p99_ns)),
                            pct(r.share_pct));
    } else {
      absl::StrAppendFormat(&out, "%-48s %-36s %10s  %s\n", r.label, absl::StrCat("-> ", r.name), "absent", r.note);
    }
  }
  const Dist& e = d.end_to_end();
  absl::StrAppendFormat(&out, "%-48s %-36s %10s %10s %10s %6.1f%%\n", "end-to-end (one-way, sum of stages)",
                        "offer -> delivery", us(e.mean()), us(static_cast<double>(e.p(50))),
                        us(static_cast<double>(e.p(99))), e.n ? 100.0 : 0.0);
  absl::StrAppendFormat(&out,
                        "samples: %u decomposed, %u rejected with a stamp out of order, %u with other stages "
                        "present, %u without an offer stamp; clock read %.1f ns subtracted per stamp\n",
                        d.accepted(), d.out_of_order(), d.layout_mismatch(), d.no_offer(), d.clock_cost_ns());
  if (c.have_untraced && c.have_library_only) {
    absl::StrAppendFormat(
        &out, "untraced %s p50: %s us   traced (library stamps only) %s p50: %s us   perturbation: %+.1f%%\n", c.method,
        us(c.untraced_p50_ns), c.method, us(c.library_only_p50_ns), c.perturbation_pct());
    absl::StrAppendFormat(&out,
                          "traced + kernel timestamps (the stream decomposed above) %s p50: %s us: the kernel's "
                          "timestamps cost %+.1f%% over library-only tracing (%+.1f%% over untraced)\n",
                          c.method, us(c.traced_p50_ns), c.kernel_timestamps_pct(), c.traced_perturbation_pct());
    if (!c.perturbation_note.empty()) absl::StrAppendFormat(&out, "  (%s)\n", c.perturbation_note);
    absl::StrAppendFormat(
        &out,
        "the stages account for %.1f%% of the untraced %s p50 (library-only stream's end-to-end p50 / "
        "untraced p50); the decomposed stream's stages for %.1f%% of its own traced p50\n",
        c.coverage_pct(d), c.method, c.decomposed_coverage_pct(d));
  } else if (c.have_untraced) {
    absl::StrAppendFormat(&out, "untraced %s p50: %s us   traced %s p50: %s us   perturbation: %+.1f%%\n", c.method,
                          us(c.untraced_p50_ns), c.method, us(c.traced_p50_ns), c.perturbation_pct());
    if (!c.perturbation_note.empty()) absl::StrAppendFormat(&out, "  (%s)\n", c.perturbation_note);
    absl::StrAppendFormat(&out,
                          "the stages account for %.1f%% of the untraced %s p50 (end-to-end p50 / untraced p50)\n",
                          c.coverage_pct(d), c.method);
  }
  if (c.floor_p50_ns > 0) {
    absl::StrAppendFormat(&out, "floor RTT/2 p50: %s us (untraced Pollux / floor: %.2fx)\n", us(c.floor_p50_ns),
                          c.untraced_p50_ns / c.floor_p50_ns);
  }
  return out;
}

std::vector<PercentilePoint> percentile_points(const Dist& d) {
  std::vector<PercentilePoint> out;
  const std::uint64_t total = d.hist.count();
  if (total == 0) return out;
  // HdrHistogram's PercentileIterator with 5 ticks per half distance: the step halves each time
  // the remaining distance to 100% halves.
  double pct = 0;
  for (int guard = 0; guard < 10000; ++guard) {
    const std::uint64_t rank =
        std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::ceil(pct / 100.0 * static_cast<double>(total))));
    if (rank >= total) break;
    out.push_back({pct, d.hist.percentile(pct), rank});
    const double halvings = std::floor(std::log2(100.0 / (100.0 - pct)));
    pct += 100.0 / (5.0 * std::pow(2.0, halvings + 1));
  }
  out.push_back({100.0, d.hist.max(), total});
  return out;
}

std::string hgrm(const Dist& d) {
  constexpr double kScale = 1000.0;  // ns -> us
  std::string out = absl::StrFormat("%12s %14s %10s %14s\n\n", "Value", "Percentile", "TotalCount", "1/(1-Percentile)");
  for (const PercentilePoint& p : percentile_points(d)) {
    const double v = static_cast<double>(p.value_ns) / kScale;
    if (p.pct >= 100.0) {
      absl::StrAppendFormat(&out, "%12.3f %2.12f %10u\n", v, 1.0, p.count);
    } else {
      absl::StrAppendFormat(&out, "%12.3f %2.12f %10u %14.2f\n", v, p.pct / 100.0, p.count,
                            1.0 / (1.0 - p.pct / 100.0));
    }
  }
  const std::uint64_t total = d.hist.count();
  absl::StrAppendFormat(&out, "#[Mean    = %12.3f, StdDeviation   = %12.3f]\n", d.mean() / kScale, d.stddev() / kScale);
  absl::StrAppendFormat(&out, "#[Max     = %12.3f, Total count    = %12u]\n",
                        static_cast<double>(d.hist.max()) / kScale, total);
  absl::StrAppendFormat(&out, "#[Buckets = %12d, SubBuckets     = %12d]\n",
                        core::Histogram::kMaxBits - core::Histogram::kSubBits + 1,
                        static_cast<int>(core::Histogram::kSubCount));
  return out;
}

std::string json_decomposition(const Decomposer& d, const PointNotes& notes) {
  std::string out = "\"stages\": [";
  bool first = true;
  for (const StageRow& r : stage_rows(d, notes)) {
    if (!first) out += ", ";
    first = false;
    if (r.present) {
      absl::StrAppendFormat(&out,
                            "{\"name\": %s, \"label\": %s, \"from\": %s, \"absent\": false, \"mean_ns\": %s, "
                            "\"p50_ns\": %d, \"p99_ns\": %d, \"stddev_ns\": %s, \"share_pct\": %s, \"count\": %u}",
                            json_string(r.name), json_string(r.label), json_string(r.from), json_number(r.mean_ns),
                            r.p50_ns, r.p99_ns, json_number(r.stddev_ns), json_number(r.share_pct), r.count);
    } else {
      absl::StrAppendFormat(&out,
                            "{\"name\": %s, \"label\": %s, \"absent\": true, \"note\": %s, \"mean_ns\": null, "
                            "\"p50_ns\": null, \"p99_ns\": null, \"share_pct\": null}",
                            json_string(r.name), json_string(r.label), json_string(r.note));
    }
  }
  const Dist& e = d.end_to_end();
  absl::StrAppendFormat(&out,
                        "], \"end_to_end\": {\"mean_ns\": %s, \"p50_ns\": %d, \"p99_ns\": %d, \"stddev_ns\": %s, "
                        "\"max_ns\": %d, \"count\": %u}, \"samples\": {\"decomposed\": %u, \"out_of_order\": %u, "
                        "\"layout_mismatch\": %u, \"no_offer\": %u}, \"clock_cost_ns\": %s",
                        json_number(e.mean()), e.p(50), e.p(99), json_number(e.stddev()), e.hist.max(), e.n,
                        d.accepted(), d.out_of_order(), d.layout_mismatch(), d.no_offer(),
                        json_number(d.clock_cost_ns()));
  return out;
}

}  // namespace pollux::latency
