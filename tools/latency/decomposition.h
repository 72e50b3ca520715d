// Latency decomposition: turns the stage stamps of traced messages (core/trace.h, seen by a
// subscriber as Message::trace) into per-stage statistics in path order - the table of
// pollux-latency (docs/BENCHMARKS.md, "Latency decomposition: pollux-latency").
//
// A message's path is a list of points (offer, app ring, poller, post, local send completion,
// kernel RX, receive, subscriber ring, handler). Stage s is the time from the previous point
// the message passed to point s+1; a point is
//   - present: stamped by its own clock read,
//   - absent: stamp 0 (the mode does not pass it, e.g. inline has no rings; or this version
//     does not stamp it, e.g. the UDP kernel TX/RX timestamps),
//   - an alias: the same value as the previous present point - the library filled it from
//     that point's clock read (inline: post = offer; receive = delivery), so it measures nothing.
// Each stamp is one Clock::now_ns() read, whose cost falls into the stage it ends: the measured
// cost of one read is subtracted from every present stage (and so n times from the end-to-end
// sum of n stages). A sample whose stamps go backwards (another core's TSC, a corrupt frame) is
// rejected and counted, as is one whose set of present points differs from the first
// sample's (the stages would not add up).
//
// Fixed size, no allocation after construction: a Decomposer may live in a shared mapping
// written by another process (pollux-latency --rate: the receiving process decomposes).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/histogram.h"
#include "tools/common/output.h"

namespace pollux::latency {

enum Point : int {
  kOffer = 0,
  kRingEnqueue,
  kPollerDequeue,
  kPost,
  kSendCompletion,
  kKernelRx,
  kReceive,
  kRingToSubscriber,
  kDelivery,
  kPointCount
};
inline constexpr int kStageCount = kPointCount - 1;  // stage s ends at point s + 1

// "offer", "ring_enqueue", "poller_dequeue", "post", "send_completion", "kernel_rx", "receive",
// "ring_to_subscriber", "delivery".
std::string_view point_name(int p);
// Stage s (ending at point s + 1) in the seed's words: "API call (offer -> app ring)", ...
std::string_view stage_label(int s);

struct Sample {
  std::int64_t ns[kPointCount] = {};  // 0 = not passed / not stamped
};
// From the 7 stamps of pollux::StageTimes (offer, ring_enqueue, poller_dequeue, post, receive,
// ring_to_subscriber, delivery); send_completion and kernel_rx are left 0.
Sample sample_from_stage_times(const std::int64_t* ns7) noexcept;

enum class PointState : std::uint8_t { kAbsent = 0, kPresent = 1, kAlias = 2 };

// One quantity: an HDR histogram for percentiles (values < 0 are recorded as 0) and exact
// sums of the unclamped values for mean and standard deviation.
struct Dist {
  core::Histogram hist;
  double sum = 0;
  double sumsq = 0;
  std::uint64_t n = 0;

  void add(double v) noexcept {
    hist.record(static_cast<std::int64_t>(std::llround(v)));
    sum += v;
    sumsq += v * v;
    ++n;
  }
  void merge(const Dist& o) noexcept {
    hist.merge(o.hist);
    sum += o.sum;
    sumsq += o.sumsq;
    n += o.n;
  }
  void reset() noexcept { *this = Dist{}; }
  double mean() const noexcept { return n ? sum / static_cast<double>(n) : 0.0; }
  double stddev() const noexcept;
  std::int64_t p(double pct) const noexcept { return hist.percentile(pct); }
};

class Decomposer {
 public:
  enum class Verdict { kAccepted, kNoOffer, kOutOfOrder, kLayoutMismatch };

  explicit Decomposer(double clock_cost_ns = 0) noexcept : clock_cost_(clock_cost_ns) {}

  Verdict add(const Sample& s) noexcept;
  // Adds `o`'s samples; false (nothing merged) when both have a layout and they differ.
  bool merge(const Decomposer& o) noexcept;
  void reset(double clock_cost_ns) noexcept;

  double clock_cost_ns() const noexcept { return clock_cost_; }
  bool has_layout() const noexcept { return have_layout_; }
  // Of the layout (the first accepted sample's); kAbsent before any.
  PointState state(int p) const noexcept { return state_[p]; }
  int alias_of(int p) const noexcept { return alias_[p]; }  // kAlias: the point it repeats
  bool stage_present(int s) const noexcept { return state_[s + 1] == PointState::kPresent; }
  int from_point(int s) const noexcept { return from_[s + 1]; }  // start of a present stage
  const Dist& stage(int s) const noexcept { return stage_[s]; }
  const Dist& end_to_end() const noexcept { return e2e_; }

  std::uint64_t accepted() const noexcept { return accepted_; }
  std::uint64_t no_offer() const noexcept { return no_offer_; }
  std::uint64_t out_of_order() const noexcept { return out_of_order_; }
  std::uint64_t layout_mismatch() const noexcept { return layout_mismatch_; }

 private:
  double clock_cost_ = 0;
  bool have_layout_ = false;
  PointState state_[kPointCount] = {};
  std::int8_t alias_[kPointCount] = {};
  std::int8_t from_[kPointCount] = {};
  Dist stage_[kStageCount];
  Dist e2e_;
  std::uint64_t accepted_ = 0, no_offer_ = 0, out_of_order_ = 0, layout_mismatch_ = 0;
};

// ---- reporting --------------------------------------------------------------------------------

// Why a point is not measured on a transport in this version ("" = nothing to say: an absent
// point is then "not passed in this mode"). Index: Point.
using PointNotes = std::array<std::string, kPointCount>;
PointNotes transport_notes(std::string_view transport);

struct StageRow {
  int stage = 0;
  std::string name;   // the end point's name: "ring_enqueue", ...
  std::string label;  // stage_label()
  std::string from;   // the start point's name (present stages)
  bool present = false;
  std::string note;  // absent stages: why
  double mean_ns = 0, stddev_ns = 0;
  std::int64_t p50_ns = 0, p99_ns = 0;
  double share_pct = 0;  // of the sum of present stage means: the present rows add up to 100
  std::uint64_t count = 0;
};

// Every stage in path order, present or not.
std::vector<StageRow> stage_rows(const Decomposer& d, const PointNotes& notes);

// The honesty checks of one run.
struct Checks {
  bool have_untraced = false;
  double untraced_p50_ns = 0;     // untraced RTT/2 (ping-pong) or one-way (rate) p50
  double traced_p50_ns = 0;       // the same measure on the traced streams
  double floor_p50_ns = 0;        // the bare floor's RTT/2 p50 (0: not measured)
  std::string method;             // "rtt/2" or "one-way from the scheduled send"
  std::string perturbation_note;  // printed under the perturbation line when not empty
  // UDP with the kernel's timestamps: a third stream pair, traced with the library's stamps
  // only (kernel timestamps off on its sockets), separates the library's tracing cost from the
  // kernel's (the decomposed, traced stream above has both).
  bool have_library_only = false;
  double library_only_p50_ns = 0;      // its RTT/2 (ping-pong) or one-way (rate) p50
  double library_only_e2e_p50_ns = 0;  // its end-to-end (sum of its stages) p50; 0: none
  // The library's tracing: (library-only traced - untraced) / untraced, % when
  // have_library_only, else (traced - untraced) / untraced, %.
  double perturbation_pct() const noexcept;
  // (traced - untraced) / untraced, %: everything the decomposed stream pays.
  double traced_perturbation_pct() const noexcept;
  // The kernel's timestamps: (traced - library-only traced) / library-only traced, %.
  double kernel_timestamps_pct() const noexcept;
  // What share of the untraced p50 the stages account for: the library-only stream's
  // end-to-end p50 / untraced p50 when have_library_only (the kernel-stamped stream is slower
  // than untraced by the kernel's cost), else the decomposed stream's, %.
  double coverage_pct(const Decomposer& d) const noexcept;
  // The decomposed stream's end-to-end p50 / its own traced p50, %.
  double decomposed_coverage_pct(const Decomposer& d) const noexcept;
};

// The human table: stage, from -> to, mean, p50, p99, share; the end-to-end line; the checks.
std::string format_table(const Decomposer& d, const PointNotes& notes, const Checks& c);

// The percentile levels HdrHistogram's outputPercentileDistribution reports (5 ticks per half
// distance to 100%: 0, 10, 20, ... 50, 55, ... 75, 77.5, ...), each with its value and the count
// of values at or below it, ending with (100, max, total). Empty when `d` is.
struct PercentilePoint {
  double pct;
  std::int64_t value_ns;
  std::uint64_t count;
};
std::vector<PercentilePoint> percentile_points(const Dist& d);

// HdrHistogram's percentile distribution text (outputPercentileDistribution: "Value Percentile
// TotalCount 1/(1-Percentile)" rows, then the Mean/StdDeviation/Max/Total count footer), values
// in microseconds (the value unit scaling ratio 1000 of HdrHistogram's own tools).
std::string hgrm(const Dist& d);

// JSON literals (tools/common/output.h).
using tools::json_number;
using tools::json_string;

// {"stages": [...], "end_to_end": {...}, "counts": {...}} members (no braces): the part of the
// tool's JSON that depends only on the decomposition.
std::string json_decomposition(const Decomposer& d, const PointNotes& notes);

}  // namespace pollux::latency
