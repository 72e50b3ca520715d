// The decomposition of pollux-latency on synthetic stamps: stage intervals in path order, the
// clock cost subtracted per stamp, shares adding up to 100 %, absent and aliased points shown
// as absent, samples with a stamp out of order (or another set of stages) rejected and counted,
// and the .hgrm / JSON output parsing back.
#include "tools/latency/decomposition.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "tests/latency/json_lite.h"

namespace pollux::latency {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Dedicated-mode stamps: every point but send_completion / kernel_rx, ring_to_subscriber a
// distinct read. Stage gaps: 100, 200, 300, (absent, absent), 400, 50, 25 ns.
Sample Dedicated(std::int64_t t0, std::int64_t jitter = 0) {
  Sample s;
  s.ns[kOffer] = t0;
  s.ns[kRingEnqueue] = t0 + 100 + jitter;
  s.ns[kPollerDequeue] = s.ns[kRingEnqueue] + 200;
  s.ns[kPost] = s.ns[kPollerDequeue] + 300;
  s.ns[kReceive] = s.ns[kPost] + 400;
  s.ns[kRingToSubscriber] = s.ns[kReceive] + 50;
  s.ns[kDelivery] = s.ns[kRingToSubscriber] + 25;
  return s;
}

// Inline-mode stamps as the library writes them: post = offer (one read), no rings, receive =
// delivery (one read).
Sample Inline(std::int64_t t0, std::int64_t gap) {
  Sample s;
  s.ns[kOffer] = t0;
  s.ns[kPost] = t0;
  s.ns[kReceive] = t0 + gap;
  s.ns[kDelivery] = t0 + gap;
  return s;
}

// UDP inline with udp.kernel_timestamps: post = offer, the ping publisher's send completion
// (kernel TX stamp), the pong side's kernel RX stamp, its own receive (recvmmsg return) and the
// delivery. Stage gaps: 3000, 700, 3700, 100 ns.
Sample UdpInlineKernel(std::int64_t t0) {
  Sample s;
  s.ns[kOffer] = t0;
  s.ns[kPost] = t0;
  s.ns[kSendCompletion] = t0 + 3000;
  s.ns[kKernelRx] = s.ns[kSendCompletion] + 700;
  s.ns[kReceive] = s.ns[kKernelRx] + 3700;
  s.ns[kDelivery] = s.ns[kReceive] + 100;
  return s;
}

TEST(Decomposition, UdpKernelTimestampsSplitTheTransportStage) {
  auto d = std::make_unique<Decomposer>(10.0);
  for (int i = 0; i < 100; ++i)
    ASSERT_EQ(d->add(UdpInlineKernel(1'000'000 + i * 20'000)), Decomposer::Verdict::kAccepted);
  ASSERT_TRUE(d->stage_present(kSendCompletion - 1));
  EXPECT_EQ(d->from_point(kSendCompletion - 1), kOffer);  // post is the offer's read (an alias)
  EXPECT_DOUBLE_EQ(d->stage(kSendCompletion - 1).mean(), 2990);
  EXPECT_DOUBLE_EQ(d->stage(kKernelRx - 1).mean(), 690);
  EXPECT_EQ(d->from_point(kReceive - 1), kKernelRx);
  EXPECT_DOUBLE_EQ(d->stage(kReceive - 1).mean(), 3690);
  EXPECT_DOUBLE_EQ(d->stage(kDelivery - 1).mean(), 90);
  EXPECT_DOUBLE_EQ(d->end_to_end().mean(), 2990 + 690 + 3690 + 90);
  // A ping whose send completion did not come back has another set of stages: rejected and
  // counted, not folded into the transport stage.
  Sample missing = UdpInlineKernel(9'000'000);
  missing.ns[kSendCompletion] = 0;
  EXPECT_EQ(d->add(missing), Decomposer::Verdict::kLayoutMismatch);
  // A TX stamp converted after an NTP step that lands it after the RX stamp goes backwards.
  Sample stepped = UdpInlineKernel(9'500'000);
  stepped.ns[kSendCompletion] = stepped.ns[kKernelRx] + 1;
  EXPECT_EQ(d->add(stepped), Decomposer::Verdict::kOutOfOrder);
  EXPECT_EQ(d->accepted(), 100u);
  // The notes for an absent kernel stage name the key.
  EXPECT_THAT(transport_notes("udp")[kKernelRx], HasSubstr("udp.kernel_timestamps"));
  EXPECT_THAT(transport_notes("udp")[kSendCompletion], HasSubstr("udp.kernel_timestamps"));
}

TEST(Decomposition, StagesFollowThePathAndTheClockCostIsSubtractedPerStamp) {
  auto d = std::make_unique<Decomposer>(10.0);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(d->add(Dedicated(1'000'000 + i * 10'000)), Decomposer::Verdict::kAccepted);
  EXPECT_EQ(d->accepted(), 1000u);
  const double want[kStageCount] = {90, 190, 290, 0, 0, 390, 40, 15};
  for (int s = 0; s < kStageCount; ++s) {
    if (s == kSendCompletion - 1 || s == kKernelRx - 1) {
      EXPECT_FALSE(d->stage_present(s)) << s;
      continue;
    }
    ASSERT_TRUE(d->stage_present(s)) << s;
    EXPECT_DOUBLE_EQ(d->stage(s).mean(), want[s]) << point_name(s + 1);
    EXPECT_EQ(d->stage(s).p(50), static_cast<std::int64_t>(want[s])) << point_name(s + 1);
  }
  // receive's stage starts at post: the two absent points in between are skipped.
  EXPECT_EQ(d->from_point(kReceive - 1), kPost);
  // 6 present stages: 1075 ns of stamps minus 6 reads of 10 ns.
  EXPECT_DOUBLE_EQ(d->end_to_end().mean(), 1075.0 - 60.0);
}

TEST(Decomposition, SharesOfThePresentStagesSumTo100) {
  auto d = std::make_unique<Decomposer>(3.5);
  for (int i = 0; i < 500; ++i) d->add(Dedicated(5'000'000 + i * 10'000, i % 7));
  double sum = 0;
  int present = 0;
  for (const StageRow& r : stage_rows(*d, transport_notes("udp"))) {
    if (!r.present) continue;
    ++present;
    sum += r.share_pct;
    EXPECT_GT(r.share_pct, 0.0) << r.name;
  }
  EXPECT_EQ(present, 6);
  EXPECT_NEAR(sum, 100.0, 1e-9);
  // And the stage means add up to the end-to-end mean.
  double means = 0;
  for (int s = 0; s < kStageCount; ++s) {
    if (d->stage_present(s)) means += d->stage(s).mean();
  }
  EXPECT_NEAR(means, d->end_to_end().mean(), 1e-6);
}

TEST(Decomposition, AbsentAndAliasedPointsAreShownAsAbsentNotZero) {
  auto d = std::make_unique<Decomposer>(0.0);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(d->add(Inline(1'000'000 + i * 1000, 700)), Decomposer::Verdict::kAccepted);
  const std::vector<StageRow> rows = stage_rows(*d, transport_notes("udp"));
  ASSERT_EQ(rows.size(), static_cast<std::size_t>(kStageCount));
  // Only offer -> receive measures anything.
  for (const StageRow& r : rows) EXPECT_EQ(r.present, r.name == "receive") << r.name;
  EXPECT_EQ(rows[kReceive - 1].from, "offer");
  EXPECT_DOUBLE_EQ(rows[kReceive - 1].share_pct, 100.0);
  EXPECT_EQ(rows[kRingEnqueue - 1].note, "absent (not passed in this mode)");
  EXPECT_EQ(rows[kPost - 1].note, "not stamped separately (same clock read as offer)");
  EXPECT_EQ(rows[kDelivery - 1].note, "not stamped separately (same clock read as receive)");
  EXPECT_THAT(rows[kSendCompletion - 1].note, HasSubstr("SO_TIMESTAMPING"));
  EXPECT_THAT(stage_rows(*d, transport_notes("rdma"))[kSendCompletion - 1].note,
              HasSubstr("not measured by this version"));

  const std::string table = format_table(*d, transport_notes("udp"), Checks{});
  std::istringstream in(table);
  std::string line;
  int absent_lines = 0;
  while (std::getline(in, line)) {
    if (line.find(" absent ") != std::string::npos) {
      ++absent_lines;
      EXPECT_THAT(line, Not(HasSubstr("0.000"))) << line;  // absent, never a zero figure
    }
  }
  EXPECT_EQ(absent_lines, kStageCount - 1);
}

TEST(Decomposition, AStampOutOfOrderIsRejectedAndCounted) {
  auto d = std::make_unique<Decomposer>(0.0);
  d->add(Dedicated(1'000'000));
  Sample bad = Dedicated(2'000'000);
  bad.ns[kReceive] = bad.ns[kPost] - 1;  // received before it was posted
  EXPECT_EQ(d->add(bad), Decomposer::Verdict::kOutOfOrder);
  Sample no_offer = Dedicated(3'000'000);
  no_offer.ns[kOffer] = 0;
  EXPECT_EQ(d->add(no_offer), Decomposer::Verdict::kNoOffer);
  EXPECT_EQ(d->accepted(), 1u);
  EXPECT_EQ(d->out_of_order(), 1u);
  EXPECT_EQ(d->no_offer(), 1u);
  // The rejected sample left no trace in the statistics.
  EXPECT_EQ(d->stage(kReceive - 1).n, 1u);
  EXPECT_DOUBLE_EQ(d->stage(kReceive - 1).mean(), 400.0);
  EXPECT_THAT(format_table(*d, transport_notes("shm"), Checks{}), HasSubstr("1 rejected with a stamp out of order"));
}

TEST(Decomposition, ASampleWithOtherStagesIsRejectedAndCounted) {
  auto d = std::make_unique<Decomposer>(0.0);
  d->add(Dedicated(1'000'000));
  EXPECT_EQ(d->add(Inline(2'000'000, 500)), Decomposer::Verdict::kLayoutMismatch);
  EXPECT_EQ(d->layout_mismatch(), 1u);
  EXPECT_EQ(d->end_to_end().n, 1u);
  // Merging keeps layouts apart too.
  auto other = std::make_unique<Decomposer>(0.0);
  other->add(Inline(3'000'000, 500));
  EXPECT_FALSE(d->merge(*other));
  auto same = std::make_unique<Decomposer>(0.0);
  same->add(Dedicated(4'000'000));
  EXPECT_TRUE(d->merge(*same));
  EXPECT_EQ(d->end_to_end().n, 2u);
}

TEST(Decomposition, StagesFromStageTimesKeepTheirOrder) {
  const std::int64_t ns7[7] = {10, 20, 30, 40, 50, 60, 70};
  const Sample s = sample_from_stage_times(ns7);
  EXPECT_EQ(s.ns[kOffer], 10);
  EXPECT_EQ(s.ns[kPost], 40);
  EXPECT_EQ(s.ns[kSendCompletion], 0);
  EXPECT_EQ(s.ns[kKernelRx], 0);
  EXPECT_EQ(s.ns[kReceive], 50);
  EXPECT_EQ(s.ns[kDelivery], 70);
}

// Ten Inline() samples, 1 us apart, of `gap_ns` each.
std::unique_ptr<Decomposer> TenSamples(std::int64_t gap_ns) {
  auto d = std::make_unique<Decomposer>(0.0);
  for (int i = 0; i < 10; ++i) d->add(Inline(1'000'000 + i * 1000, gap_ns));
  return d;
}

// The checks of an RTT/2 run whose untraced p50 is 1000 ns and traced p50 `traced_ns`.
Checks AgainstUntraced(double traced_ns) {
  Checks c;
  c.have_untraced = true;
  c.untraced_p50_ns = 1000;
  c.traced_p50_ns = traced_ns;
  c.method = "RTT/2";
  return c;
}

TEST(Decomposition, ChecksComputePerturbationAndCoverage) {
  auto d = TenSamples(950);
  Checks c = AgainstUntraced(1030);
  EXPECT_NEAR(c.perturbation_pct(), 3.0, 1e-9);
  EXPECT_NEAR(c.coverage_pct(*d), 95.0, 1e-9);
  const std::string t = format_table(*d, transport_notes("shm"), c);
  EXPECT_THAT(t, HasSubstr("perturbation: +3.0%"));
  EXPECT_THAT(t, HasSubstr("account for 95.0% of the untraced RTT/2 p50"));
}

// UDP with kernel timestamps: the library-only stream gives the perturbation and the coverage;
// the kernel's share is the decomposed stream against it.
TEST(Decomposition, ChecksSplitTheLibrarysTracingFromTheKernelTimestamps) {
  auto d = TenSamples(1150);
  Checks c = AgainstUntraced(1200);
  c.have_library_only = true;
  c.library_only_p50_ns = 1020;
  c.library_only_e2e_p50_ns = 970;
  EXPECT_NEAR(c.perturbation_pct(), 2.0, 1e-9);
  EXPECT_NEAR(c.traced_perturbation_pct(), 20.0, 1e-9);
  EXPECT_NEAR(c.kernel_timestamps_pct(), 100.0 * 180.0 / 1020.0, 1e-9);
  EXPECT_NEAR(c.coverage_pct(*d), 97.0, 1e-9);
  EXPECT_NEAR(c.decomposed_coverage_pct(*d), 100.0 * 1150.0 / 1200.0, 1e-9);
  const std::string t = format_table(*d, transport_notes("udp"), c);
  EXPECT_THAT(t, HasSubstr("traced (library stamps only) RTT/2 p50: 1.020 us   perturbation: +2.0%"));
  EXPECT_THAT(t, HasSubstr("the kernel's timestamps cost +17.6% over library-only tracing (+20.0% over untraced)"));
  EXPECT_THAT(t, HasSubstr("account for 97.0% of the untraced RTT/2 p50"));
  EXPECT_THAT(t, HasSubstr("for 95.8% of its own traced p50"));
  // Without the third stream the old figures stand.
  c.have_library_only = false;
  EXPECT_NEAR(c.perturbation_pct(), 20.0, 1e-9);
  EXPECT_NEAR(c.coverage_pct(*d), 115.0, 1e-9);
  EXPECT_NEAR(c.kernel_timestamps_pct(), 0.0, 1e-9);
}

TEST(Hgrm, WritesHdrHistogramsPercentileDistribution) {
  Dist d;
  for (int i = 1; i <= 1000; ++i) d.add(i * 1000.0);  // 1..1000 us
  const std::string h = hgrm(d);
  std::istringstream in(h);
  std::string line;
  std::getline(in, line);
  EXPECT_THAT(line, HasSubstr("Value"));
  EXPECT_THAT(line, HasSubstr("Percentile"));
  EXPECT_THAT(line, HasSubstr("TotalCount"));
  EXPECT_THAT(line, HasSubstr("1/(1-Percentile)"));
  std::getline(in, line);
  EXPECT_EQ(line, "");
  double last_pct = -1, last_value = -1;
  std::uint64_t last_count = 0;
  int rows = 0;
  bool saw_final = false;
  while (std::getline(in, line) && line.rfind("#[", 0) != 0) {
    std::istringstream f(line);
    double value = 0, pct = 0;
    std::uint64_t count = 0;
    ASSERT_TRUE(f >> value >> pct >> count) << line;
    EXPECT_GE(pct, last_pct);
    EXPECT_GE(value, last_value);
    EXPECT_GE(count, last_count);
    last_pct = pct;
    last_value = value;
    last_count = count;
    ++rows;
    if (pct == 1.0) saw_final = true;
  }
  EXPECT_TRUE(saw_final);
  EXPECT_GT(rows, 20);
  EXPECT_EQ(last_count, 1000u);
  EXPECT_NEAR(last_value, 1000.0, 1000.0 / 128);  // max, in us
  EXPECT_THAT(line, HasSubstr("#[Mean    ="));
  EXPECT_THAT(h, HasSubstr("StdDeviation   ="));
  EXPECT_THAT(h, HasSubstr("#[Max     ="));
  EXPECT_THAT(h, HasSubstr("Total count    =         1000]"));
  EXPECT_THAT(h, HasSubstr("#[Buckets ="));
  EXPECT_THAT(h, HasSubstr("500.500"));  // the mean, us
}

TEST(Json, DecompositionParsesWithStagesInPathOrder) {
  auto d = std::make_unique<Decomposer>(1.0);
  for (int i = 0; i < 50; ++i) d->add(Dedicated(1'000'000 + i * 10'000));
  const std::string text = "{" + json_decomposition(*d, transport_notes("udp")) + "}";
  std::string err;
  const auto v = jsonlite::Parse(text, &err);
  ASSERT_TRUE(v.has_value()) << err << "\n" << text;
  const jsonlite::Value* stages = v->get("stages");
  ASSERT_NE(stages, nullptr);
  ASSERT_TRUE(stages->is_array());
  ASSERT_EQ(stages->arr.size(), static_cast<std::size_t>(kStageCount));
  for (int s = 0; s < kStageCount; ++s) {
    const jsonlite::Value& st = stages->arr[s];
    ASSERT_TRUE(st.get("name") && st.get("name")->is_string());
    EXPECT_EQ(st.get("name")->str, point_name(s + 1));
    const bool absent = st.get("absent")->b;
    EXPECT_EQ(absent, !d->stage_present(s));
    for (const char* k : {"mean_ns", "p50_ns", "p99_ns", "share_pct"}) {
      ASSERT_NE(st.get(k), nullptr) << k;
      EXPECT_EQ(st.get(k)->is_null(), absent) << k;
    }
  }
  const jsonlite::Value* e = v->get("end_to_end");
  ASSERT_NE(e, nullptr);
  EXPECT_TRUE(e->get("mean_ns")->is_number());
  EXPECT_DOUBLE_EQ(e->get("mean_ns")->num, 1075.0 - 6.0);
  EXPECT_TRUE(e->get("p50_ns")->is_number());
  EXPECT_TRUE(e->get("p99_ns")->is_number());
}

TEST(Json, TheTestParserRejectsBrokenDocuments) {
  EXPECT_TRUE(jsonlite::Parse(R"({"a": [1, 2.5e3, "x\"y", null, true]})").has_value());
  EXPECT_FALSE(jsonlite::Parse(R"({"a": 1,})").has_value());
  EXPECT_FALSE(jsonlite::Parse(R"({"a": nan})").has_value());
  EXPECT_FALSE(jsonlite::Parse(R"({"a": 1} x)").has_value());
  EXPECT_FALSE(jsonlite::Parse(R"(["unterminated)").has_value());
  EXPECT_EQ(json_string("a\"b\\c\n"), R"("a\"b\\c\u000a")");
  EXPECT_EQ(json_number(std::numeric_limits<double>::infinity()), "null");
}

}  // namespace
}  // namespace pollux::latency
