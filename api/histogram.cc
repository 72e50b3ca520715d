#include "pollux/histogram.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace pollux {

void Histogram::record_n(std::int64_t v, std::uint64_t n) noexcept {
  if (n == 0) return;
  if (v < 0) v = 0;
  if (v > kMaxValue) v = kMaxValue;
  counts_[index_of(v)] += n;
  total_ += n;
  min_ = std::min(min_, v);
  max_ = std::max(max_, v);
  sum_ += static_cast<double>(v) * static_cast<double>(n);
}

void Histogram::merge(const Histogram& o) noexcept {
  if (o.total_ == 0) return;
  for (int i = 0; i < kBuckets; ++i) counts_[i] += o.counts_[i];
  total_ += o.total_;
  min_ = std::min(min_, o.min_);
  max_ = std::max(max_, o.max_);
  sum_ += o.sum_;
}

void Histogram::reset() noexcept {
  counts_.fill(0);
  total_ = 0;
  min_ = kMaxValue;
  max_ = 0;
  sum_ = 0;
}

std::int64_t Histogram::lowest_of(int i) noexcept {
  if (i < kSubCount) return i;
  const int shift = (i - kSubCount) / kSubCount;
  const std::int64_t sub = (i - kSubCount) % kSubCount + kSubCount;
  return sub << shift;
}

std::int64_t Histogram::highest_of(int i) noexcept {
  if (i < kSubCount) return i;
  const int shift = (i - kSubCount) / kSubCount;
  return lowest_of(i) + (std::int64_t{1} << shift) - 1;
}

std::int64_t Histogram::percentile(double p) const noexcept {
  if (total_ == 0) return 0;
  p = std::clamp(p, 0.0, 100.0);
  // Rank of the wanted value (1-based), as a sorted-array definition would pick it.
  std::uint64_t rank = static_cast<std::uint64_t>(std::ceil(p / 100.0 * static_cast<double>(total_)));
  rank = std::clamp<std::uint64_t>(rank, 1, total_);
  std::uint64_t seen = 0;
  for (int i = 0; i < kBuckets; ++i) {
    seen += counts_[i];
    if (seen >= rank) return std::min(std::max(highest_of(i), min_), max_);
  }
  return max_;
}

std::string Histogram::summary(double unit_ns, const char* unit) const {
  auto f = [&](std::int64_t v) { return static_cast<double>(v) / unit_ns; };
  return absl::StrFormat("p50=%.3f%s p90=%.3f%s p99=%.3f%s p99.9=%.3f%s p99.99=%.3f%s max=%.3f%s (n=%u)",
                         f(percentile(50)), unit, f(percentile(90)), unit, f(percentile(99)), unit, f(percentile(99.9)),
                         unit, f(percentile(99.99)), unit, f(max()), unit, total_);
}

}  // namespace pollux
