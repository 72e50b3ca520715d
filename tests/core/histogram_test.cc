#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "core/histogram.h"

namespace pollux::core {
namespace {

std::int64_t exact_percentile(std::vector<std::int64_t> v, double p) {
  std::sort(v.begin(), v.end());
  std::size_t rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  rank = std::clamp<std::size_t>(rank, 1, v.size());
  return v[rank - 1];
}

void expect_close(std::int64_t got, std::int64_t want, const char* what) {
  // Within 1% of the exact value (the bucket width is < 1/128 of the value).
  EXPECT_LE(std::abs(static_cast<double>(got - want)), 0.01 * static_cast<double>(want) + 1e-9)
      << what << ": got " << got << " want " << want;
}

TEST(HistogramTest, PercentilesMatchSortedSamplesWithinOnePercent) {
  std::mt19937_64 rng(42);
  // Latency-like mix: a lognormal body plus a heavy tail.
  std::lognormal_distribution<double> body(6.0, 0.5);
  std::uniform_int_distribution<std::int64_t> tail(10'000, 50'000'000);
  std::vector<std::int64_t> samples;
  Histogram h;
  for (int i = 0; i < 200'000; ++i) {
    const std::int64_t v = i % 1000 == 0 ? tail(rng) : static_cast<std::int64_t>(body(rng));
    samples.push_back(v);
    h.record(v);
  }
  for (double p : {0.0, 1.0, 25.0, 50.0, 90.0, 99.0, 99.9, 99.99, 100.0}) {
    expect_close(h.percentile(p), exact_percentile(samples, p), "percentile");
  }
  EXPECT_EQ(h.count(), samples.size());
  EXPECT_EQ(h.max(), *std::max_element(samples.begin(), samples.end()));
  EXPECT_EQ(h.min(), *std::min_element(samples.begin(), samples.end()));
}

TEST(HistogramTest, SmallValuesAreExact) {
  Histogram h;
  for (int i = 0; i < 128; ++i) h.record(i);
  for (int i = 1; i <= 128; ++i) EXPECT_EQ(h.percentile(100.0 * i / 128), i - 1);
}

TEST(HistogramTest, BucketBoundsCoverEveryValueOnce) {
  for (int i = 0; i + 1 < Histogram::kBuckets; ++i) {
    ASSERT_EQ(Histogram::highest_of(i) + 1, Histogram::lowest_of(i + 1)) << i;
    ASSERT_EQ(Histogram::index_of(Histogram::lowest_of(i)), i);
    ASSERT_EQ(Histogram::index_of(Histogram::highest_of(i)), i);
    // Relative width bound that gives the <1% error.
    ASSERT_LE(static_cast<double>(Histogram::highest_of(i) - Histogram::lowest_of(i)),
              static_cast<double>(Histogram::lowest_of(i)) / 128.0 + 1e-9);
  }
}

TEST(HistogramTest, MergeEqualsRecordingEverything) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<std::int64_t> d(0, 1'000'000);
  Histogram a, b, all;
  for (int i = 0; i < 50'000; ++i) {
    const std::int64_t v = d(rng);
    (i % 2 ? a : b).record(v);
    all.record(v);
  }
  a.merge(b);
  EXPECT_EQ(a.count(), all.count());
  for (double p : {50.0, 90.0, 99.0, 99.9, 100.0}) EXPECT_EQ(a.percentile(p), all.percentile(p));
  EXPECT_EQ(a.min(), all.min());
  EXPECT_EQ(a.max(), all.max());
}

TEST(HistogramTest, ClampsOutOfRange) {
  Histogram h;
  h.record(-5);
  h.record(Histogram::kMaxValue + 1000);
  EXPECT_EQ(h.min(), 0);
  EXPECT_EQ(h.max(), Histogram::kMaxValue);
  EXPECT_EQ(h.count(), 2u);
}

TEST(HistogramTest, EmptyIsZero) {
  Histogram h;
  EXPECT_EQ(h.percentile(50), 0);
  EXPECT_EQ(h.max(), 0);
  EXPECT_EQ(h.count(), 0u);
}

}  // namespace
}  // namespace pollux::core
