// Histogram: the latency histogram Pollux's own tools report with (pollux-latency, the feed
// handler's summary), for an application's measurements.
//
// HDR-style latency histogram: log-linear buckets with 128 linear sub-buckets per power of two,
// so any recorded value is reported within 1/128 (< 0.8%) of itself. Values are integers
// (nanoseconds by convention) in [0, 2^44). Fixed memory (~36 KiB), no allocation after
// construction, record() is a few instructions; histograms of the same shape merge by adding
// counts. Single-writer: one thread records, others may merge a copy.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "pollux/export.h"

namespace pollux {

class POLLUX_API Histogram {
 public:
  static constexpr int kSubBits = 7;  // 128 sub-buckets
  static constexpr std::int64_t kSubCount = 1 << kSubBits;
  static constexpr int kMaxBits = 44;  // values < 2^44 ns (~4.9 hours)
  static constexpr std::int64_t kMaxValue = (std::int64_t{1} << kMaxBits) - 1;
  static constexpr int kBuckets = kSubCount + (kMaxBits - kSubBits) * kSubCount;

  Histogram() { reset(); }

  void record(std::int64_t v) noexcept {
    if (v < 0) v = 0;
    if (v > kMaxValue) v = kMaxValue;
    ++counts_[index_of(v)];
    ++total_;
    if (v < min_) min_ = v;
    if (v > max_) max_ = v;
    sum_ += static_cast<double>(v);
  }
  void record_n(std::int64_t v, std::uint64_t n) noexcept;

  void merge(const Histogram& o) noexcept;
  void reset() noexcept;

  std::uint64_t count() const noexcept { return total_; }
  std::int64_t min() const noexcept { return total_ ? min_ : 0; }
  std::int64_t max() const noexcept { return total_ ? max_ : 0; }
  double mean() const noexcept { return total_ ? sum_ / static_cast<double>(total_) : 0.0; }

  // Smallest recorded value v such that at least `p` percent of values are <= v, reported as
  // the highest value equivalent to v's bucket (clamped to max()): at most 1/128 above exact.
  std::int64_t percentile(double p) const noexcept;

  // "p50=1.23us p90=... p99=... p99.9=... p99.99=... max=... (n=...)", values in ns / unit_ns.
  std::string summary(double unit_ns = 1.0, const char* unit = "ns") const;

  static int index_of(std::int64_t v) noexcept {
    if (v < kSubCount) return static_cast<int>(v);
    const int msb = 63 - __builtin_clzll(static_cast<std::uint64_t>(v));
    const int shift = msb - kSubBits;  // v >> shift lies in [128, 256)
    return static_cast<int>(kSubCount + shift * kSubCount + ((v >> shift) - kSubCount));
  }
  // Lowest and highest value mapping to bucket i.
  static std::int64_t lowest_of(int i) noexcept;
  static std::int64_t highest_of(int i) noexcept;

 private:
  std::array<std::uint64_t, kBuckets> counts_;
  std::uint64_t total_ = 0;
  std::int64_t min_ = 0;
  std::int64_t max_ = 0;
  double sum_ = 0;
};

}  // namespace pollux
