// Single-threaded, deterministic tests of the broadcast log: the writer and readers are
// driven step by step, so every interleaving tested here is reproducible.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "tests/shm/log_fixture.h"
#include "tests/shm/test_util.h"
#include "transport/shm/shm_config.h"
#include "transport/shm/shm_log.h"
#include "transport/shm/shm_segment.h"

namespace pollux::transport::shm {
namespace {

using pollux::testing::check_payload;
using pollux::testing::fill_payload;
using pollux::testing::payload_len;

struct Fixture : LogFixture {
  explicit Fixture(std::uint64_t log_size, shm::FlowControl fc = shm::FlowControl::kLossy, std::uint32_t stream = 5)
      : LogFixture("logtest", log_size, fc, stream) {}
};

struct Drained {
  std::vector<std::uint64_t> seqs;
  std::vector<RxDesc> gaps;
  bool payload_ok = true;
};

// Polls until nothing is left, releasing after each batch like a subscriber.
Drained drain(LogReader& r, std::uint32_t batch = 16) {
  Drained d;
  std::vector<RxDesc> buf(batch);
  for (int spins = 0; spins < 1000;) {
    const std::uint32_t n = r.poll(buf.data(), batch);
    if (n == 0) {
      ++spins;
      continue;
    }
    for (std::uint32_t i = 0; i < n; ++i) {
      if (buf[i].kind == RxKind::kMessage) {
        const std::uint64_t s = buf[i].frame->sequence;
        const std::uint32_t len = buf[i].length - core::kFrameHeaderSize;
        std::uint64_t tag;
        std::memcpy(&tag, reinterpret_cast<const std::byte*>(buf[i].frame) + core::kFrameHeaderSize, 8);
        d.payload_ok &=
            check_payload(reinterpret_cast<const std::byte*>(buf[i].frame) + core::kFrameHeaderSize, len, tag);
        d.seqs.push_back(s);
      } else {
        d.gaps.push_back(buf[i]);
      }
    }
    r.release(buf.data(), n);
  }
  return d;
}

// Writes messages 1..n of `len` bytes, then drains `r`: all n must be read.
void write_and_read(Fixture& f, LogReader& r, std::uint64_t n, std::uint32_t len) {
  for (std::uint64_t s = 1; s <= n; ++s) ASSERT_TRUE(f.write(s, len));
  ASSERT_EQ(drain(r).seqs.size(), n);
}

TEST(ShmLogTest, DeliversEverythingInOrderAcrossManyWraps) {
  Fixture f(64 << 10);
  auto rd = f.reader();
  std::uint64_t next = 1, expect = 1;
  std::vector<RxDesc> buf(32);
  // Interleave writes and reads so the log wraps ~100 times with padding frames.
  while (next <= 20000) {
    for (int k = 0; k < 7 && next <= 20000; ++k, ++next) ASSERT_TRUE(f.write(next, payload_len(next, 900)));
    const std::uint32_t n = rd->r.poll(buf.data(), 32);
    for (std::uint32_t i = 0; i < n; ++i) {
      ASSERT_EQ(buf[i].kind, RxKind::kMessage);
      ASSERT_EQ(buf[i].frame->sequence, expect);
      ASSERT_EQ(buf[i].frame->timestamp_ns, static_cast<std::int64_t>(expect));
      ASSERT_EQ(buf[i].length, core::kFrameHeaderSize + payload_len(expect, 900));
      ASSERT_TRUE(check_payload(reinterpret_cast<const std::byte*>(buf[i].frame) + 32, buf[i].length - 32, expect));
      ++expect;
    }
    rd->r.release(buf.data(), n);
  }
  Drained rest = drain(rd->r);
  for (std::uint64_t s : rest.seqs) ASSERT_EQ(s, expect++);
  EXPECT_EQ(expect, 20001u);
  EXPECT_TRUE(rest.gaps.empty());
  EXPECT_GT(f.writer.position(), 100u * (64 << 10));
  EXPECT_EQ(rd->r.malformed(), 0u);
}

TEST(ShmLogTest, LappedReaderGetsExactGapCountThenContinuesInOrder) {
  Fixture f(64 << 10);
  auto rd = f.reader();
  // 100 messages read normally...
  ASSERT_NO_FATAL_FAILURE(write_and_read(f, rd->r, 100, 200));
  // ...then the reader stalls while the writer laps it several times.
  for (std::uint64_t s = 101; s <= 3000; ++s) ASSERT_TRUE(f.write(s, payload_len(s, 500)));
  Drained b = drain(rd->r);
  ASSERT_EQ(b.gaps.size(), 1u);
  const RxDesc& g = b.gaps[0];
  EXPECT_EQ(g.reason, kGapLapped);
  EXPECT_EQ(g.sequence, 101u);
  ASSERT_FALSE(b.seqs.empty());
  // The gap covers exactly what was not delivered; the rest arrives in order, intact.
  EXPECT_EQ(g.gap_count, b.seqs.front() - 101);
  for (std::size_t i = 1; i < b.seqs.size(); ++i) ASSERT_EQ(b.seqs[i], b.seqs[i - 1] + 1);
  EXPECT_EQ(b.seqs.back(), 3000u);
  EXPECT_EQ(g.gap_count + b.seqs.size(), 2900u);
  EXPECT_TRUE(b.payload_ok);
  // It resumes from the oldest intact data, not the live edge: most of a log's worth survives.
  EXPECT_GT(b.seqs.size() * 500 / 2, (64u << 10) / 2) << "resumed too late";
  EXPECT_EQ(rd->r.malformed(), 0u);
}

TEST(ShmLogTest, LateJoinerStartsAtLivePositionWithoutGap) {
  Fixture f(64 << 10);
  for (std::uint64_t s = 1; s <= 50; ++s) ASSERT_TRUE(f.write(s, 100));
  auto rd = f.reader();
  Drained none = drain(rd->r);
  EXPECT_TRUE(none.seqs.empty());
  EXPECT_TRUE(none.gaps.empty());
  for (std::uint64_t s = 51; s <= 60; ++s) ASSERT_TRUE(f.write(s, 100));
  Drained d = drain(rd->r);
  ASSERT_EQ(d.seqs.size(), 10u);
  EXPECT_EQ(d.seqs.front(), 51u);
  EXPECT_TRUE(d.gaps.empty());
}

TEST(ShmLogTest, JoinAtStartReadsTheWholeFirstLap) {
  Fixture f(64 << 10);
  for (std::uint64_t s = 1; s <= 50; ++s) ASSERT_TRUE(f.write(s, 100));
  auto rd = f.reader(/*at_start=*/true);
  Drained d = drain(rd->r);
  ASSERT_EQ(d.seqs.size(), 50u);
  EXPECT_EQ(d.seqs.front(), 1u);
}

TEST(ShmLogTest, BackpressureStopsTheWriterInsteadOfLapping) {
  Fixture f(64 << 10, shm::FlowControl::kBackpressure);
  auto rd = f.reader();
  std::uint64_t s = 1;
  while (f.write(s, 480)) ++s;  // until back-pressured
  const std::uint64_t written = s - 1;
  EXPECT_GT(written * 512, (64u << 10) * 3 / 4) << "should fill most of the log";
  EXPECT_LT(written * 512, 64u << 10) << "must never overwrite unread data";
  EXPECT_GE(f.writer.back_pressure_events(), 1u);
  std::vector<RxDesc> buf(8);
  const std::uint32_t n = rd->r.poll(buf.data(), 8);
  ASSERT_EQ(n, 8u);
  rd->r.release(buf.data(), n);  // frees 8 frames' worth
  std::uint32_t more = 0;
  while (f.write(s, 480)) ++s, ++more;
  EXPECT_GE(more, 7u);
  EXPECT_LE(more, 8u);
  Drained d = drain(rd->r);
  EXPECT_TRUE(d.gaps.empty());
  EXPECT_EQ(d.seqs.size() + 8, s - 1);
}

TEST(ShmLogTest, OverrunDuringDeliveryIsReported) {
  Fixture f(64 << 10);
  auto rd = f.reader();
  for (std::uint64_t s = 1; s <= 10; ++s) ASSERT_TRUE(f.write(s, 100));
  std::vector<RxDesc> buf(10);
  ASSERT_EQ(rd->r.poll(buf.data(), 10), 10u);
  // While the application "holds" these views, the writer laps them.
  for (std::uint64_t s = 11; s <= 2000; ++s) ASSERT_TRUE(f.write(s, 100));
  rd->r.release(buf.data(), 10);
  // Lossy mode checks released views at the start of the next poll (off the critical path).
  Drained d = drain(rd->r);
  EXPECT_EQ(rd->r.overruns(), 1u);
  ASSERT_GE(d.gaps.size(), 1u);
  EXPECT_EQ(d.gaps[0].reason, kGapOverrun);
  EXPECT_EQ(d.gaps[0].sequence, 1u);
  EXPECT_EQ(d.gaps[0].gap_count, 10u) << "all ten views were overwritten";
  // Followed by the lapped gap and the surviving messages in order.
  ASSERT_EQ(d.gaps.size(), 2u);
  EXPECT_EQ(d.gaps[1].reason, kGapLapped);
  EXPECT_EQ(d.gaps[1].sequence, 11u);
  EXPECT_EQ(d.gaps[1].gap_count + d.seqs.size(), 1990u);
}

// The lossy check's fast path (LogReader::surely_intact: the writer's checkpoint of one block
// instead of its tail) may only say "intact" where the tail would say so too, and it must say it
// for a reader at the live edge - the case it exists for. Frames of varied lengths (up to
// max_frame, padding at every wrap) over several laps; every 32-byte start of the last lap and
// a bit more is asked at each step.
TEST(ShmLogTest, CheckpointFastPathAgreesWithTheTail) {
  constexpr std::uint64_t kSize = 64 << 10;
  Fixture f(kSize);
  auto rd = f.reader();
  const std::uint32_t max_payload = f.writer.max_frame() - core::kFrameHeaderSize;
  std::uint64_t rng = 12345, fast = 0, asked = 0;
  for (std::uint64_t s = 1; f.writer.position() < 6 * kSize; ++s) {
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    const std::uint32_t len = (rng >> 33) % 4 == 0 ? 1 + static_cast<std::uint32_t>((rng >> 40) % max_payload)
                                                   : 1 + static_cast<std::uint32_t>((rng >> 40) % 200);
    ASSERT_TRUE(f.write(s, len));
    if (s % 7 != 0) continue;
    const std::uint64_t tail = f.writer.position();
    const std::uint64_t from = tail > kSize + 4096 ? tail - kSize - 4096 : 0;
    for (std::uint64_t start = from & ~std::uint64_t{31}; start < tail; start += 32) {
      ++asked;
      if (!rd->r.surely_intact(start)) continue;
      ++fast;
      ASSERT_LE(rd->r.safe_floor(), start) << "fast path said intact where the tail says overwritten; tail " << tail;
    }
    if (tail > kSize) {
      ASSERT_TRUE(rd->r.surely_intact(tail - 64)) << "a reader at the live edge must not need the tail";
    }
  }
  EXPECT_GT(fast, asked / 2);  // most starts of the last lap are decided without the tail
}

TEST(ShmLogTest, CorruptFrameIsCountedAndSkippedNotDelivered) {
  Fixture f(64 << 10);
  auto rd = f.reader();
  ASSERT_NO_FATAL_FAILURE(write_and_read(f, rd->r, 5, 100));
  // Next frame is written, then its header is scribbled over (a rogue writer).
  ASSERT_TRUE(f.write(6, 100));
  auto* h = reinterpret_cast<core::FrameHeader*>(f.seg->log() + (rd->r.position() & ((64 << 10) - 1)));
  h->magic = 0x00;
  for (std::uint64_t s = 7; s <= 20; ++s) ASSERT_TRUE(f.write(s, 100));
  Drained b = drain(rd->r);
  EXPECT_EQ(rd->r.malformed(), 1u);
  // Only the corrupt frame is lost, reported as a malformed-frame gap of one message.
  std::vector<std::uint64_t> want;
  for (std::uint64_t s = 7; s <= 20; ++s) want.push_back(s);
  EXPECT_EQ(b.seqs, want);
  ASSERT_EQ(b.gaps.size(), 1u);
  EXPECT_EQ(b.gaps[0].reason, kGapMalformed);
  EXPECT_EQ(b.gaps[0].sequence, 6u);
  EXPECT_EQ(b.gaps[0].gap_count, 1u);
}

// A frame flagged traced but shorter than header + trace block (96 bytes) would make
// the subscriber compute payload = length - 96, a 4 GiB view. The reader must drop it as
// malformed (one compare in plausible()), and still accept a traced frame of exactly 96 bytes.
TEST(ShmLogTest, TracedFrameShorterThanItsTraceBlockIsMalformed) {
  Fixture f(64 << 10);
  auto rd = f.reader();
  ASSERT_TRUE(f.write(1, 100));
  LogWriter::Claim c;
  ASSERT_TRUE(f.writer.try_claim(core::kFrameHeaderSize + 8, &c));  // 40 bytes, "traced"
  fill_payload(c.frame + core::kFrameHeaderSize, 8, 2);
  f.writer.commit(c, core::kFlagTraced, 2);
  ASSERT_TRUE(f.writer.try_claim(kMinTracedFrame, &c));  // exactly header + trace block
  std::memset(c.frame + core::kFrameHeaderSize, 0, kMinTracedFrame - core::kFrameHeaderSize);
  f.writer.commit(c, core::kFlagTraced, 3);
  ASSERT_TRUE(f.write(4, 100));
  std::vector<RxDesc> buf(16);
  std::vector<std::uint64_t> seqs;
  std::vector<RxDesc> gaps;
  for (int i = 0; i < 8; ++i) {
    const std::uint32_t n = rd->r.poll(buf.data(), 16);
    for (std::uint32_t k = 0; k < n; ++k) {
      if (buf[k].kind == RxKind::kMessage) {
        seqs.push_back(buf[k].sequence);
        EXPECT_GE(buf[k].length, (buf[k].frame->flags & core::kFlagTraced) ? kMinTracedFrame : core::kFrameHeaderSize);
      } else {
        gaps.push_back(buf[k]);
      }
    }
    rd->r.release(buf.data(), n);
  }
  EXPECT_EQ(seqs, (std::vector<std::uint64_t>{1, 3, 4}));
  EXPECT_EQ(rd->r.malformed(), 1u);
  ASSERT_EQ(gaps.size(), 1u);
  EXPECT_EQ(gaps[0].reason, kGapMalformed);
  EXPECT_EQ(gaps[0].sequence, 2u);
  EXPECT_EQ(gaps[0].gap_count, 1u);
}

// Checkpoints come from shared memory. A misaligned one taken as the lapped reader's position
// would mean misaligned loads (UBSan) and headers read across the end of the log; only aligned
// positions in range may be jumped to.
TEST(ShmLogTest, MisalignedCheckpointsAreNeverJumpedTo) {
  constexpr std::uint64_t kLog = 64 << 10;
  Fixture f(kLog);
  auto rd = f.reader();
  for (std::uint64_t s = 1; s <= 10; ++s) ASSERT_TRUE(f.write(s, 200));
  ASSERT_EQ(drain(rd->r).seqs.size(), 10u);
  // The reader stalls, the writer laps it; then every checkpoint is forged to a misaligned
  // position inside the window a lapped reader may resume from.
  std::uint64_t s = 11;
  for (; s <= 2000; ++s) ASSERT_TRUE(f.write(s, 200));
  const std::uint64_t tail = f.seg->header()->writer.tail.load();
  for (std::uint32_t k = 0; k < kCheckpoints; ++k) f.seg->header()->checkpoints.pos[k].store(tail - 8 - 32 * k);
  Drained d = drain(rd->r);
  EXPECT_EQ(rd->r.position() % core::kFrameAlignment, 0u) << rd->r.position();
  EXPECT_EQ(rd->r.malformed(), 0u);
  // It resynchronised at the live edge: the next message arrives intact after one lapped gap.
  ASSERT_TRUE(f.write(s, 200));
  Drained e = drain(rd->r);
  EXPECT_TRUE(d.payload_ok && e.payload_ok);
  ASSERT_FALSE(e.seqs.empty());
  EXPECT_EQ(e.seqs.back(), s);
  EXPECT_EQ(rd->r.malformed(), 0u);
  EXPECT_EQ(rd->r.position() % core::kFrameAlignment, 0u);
}

// Found by tests/fuzz (shm_reader, sequence_wraps_at_2_64.bin; fixed on main by 351b3f5, whose
// kMaxShmSequence check this takes as is): a frame whose sequence word was
// rewritten to 2^64-1 while the reader (re)synchronised was accepted, expected_ wrapped to 0 and
// the next frames were delivered "after" it - backwards. Sequences beyond 2^62 are forged.
TEST(ShmLogTest, ForgedHugeSequenceIsMalformedAndDeliveryNeverGoesBack) {
  Fixture f(64 << 10);
  for (std::uint64_t s = 1; s <= 5; ++s) ASSERT_TRUE(f.write(s, 100));
  seq_word(f.seg->log()).store(~std::uint64_t{0});  // frame 1
  auto rd = f.reader(/*at_start=*/true);            // resynchronises on its first frame
  Drained d = drain(rd->r);
  for (std::size_t i = 1; i < d.seqs.size(); ++i) EXPECT_GT(d.seqs[i], d.seqs[i - 1]) << "went backwards";
  EXPECT_EQ(d.seqs, (std::vector<std::uint64_t>{2, 3, 4, 5}));
  EXPECT_EQ(rd->r.malformed(), 1u);
  for (const RxDesc& g : d.gaps) EXPECT_LE(g.gap_count, 1u) << "gap of " << g.gap_count;
  EXPECT_LE(rd->r.expected_sequence(), 6u);
}

TEST(ShmLogTest, AbortedClaimBecomesPadding) {
  Fixture f(64 << 10);
  auto rd = f.reader();
  ASSERT_TRUE(f.write(1, 64));
  LogWriter::Claim c;
  ASSERT_TRUE(f.writer.try_claim(200, &c));
  f.writer.abort(c);
  ASSERT_TRUE(f.write(2, 64));
  Drained d = drain(rd->r);
  EXPECT_EQ(d.seqs, (std::vector<std::uint64_t>{1, 2}));
  EXPECT_TRUE(d.gaps.empty());
}

// A writer killed in the middle of a batch (commit_deferred, no flush_tail): the batch's first
// frame holds its sequence back until the flush, so the reader sees none of the batch and stands
// at the published tail.
TEST(ShmLogTest, AnUnfinishedBatchIsNotReadable) {
  Fixture f(64 << 10);
  auto rd = f.reader();
  ASSERT_TRUE(f.write(1, 64));
  LogWriter::Claim c;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(f.writer.try_claim(core::kFrameHeaderSize + 16, &c));
    f.writer.commit_deferred(c, core::kFlagNone, 0);  // no flush_tail(): the writer "dies" here
  }
  Drained d = drain(rd->r);
  EXPECT_EQ(d.seqs, (std::vector<std::uint64_t>{1}));
  EXPECT_TRUE(d.gaps.empty());
  EXPECT_TRUE(rd->r.caught_up());
  EXPECT_TRUE(rd->r.nothing_readable());
  // Finished, the batch comes out whole and in order.
  f.writer.flush_tail();
  d = drain(rd->r);
  EXPECT_EQ(d.seqs, (std::vector<std::uint64_t>{2, 3, 4}));
  EXPECT_TRUE(rd->r.caught_up());
}

// Batches of every size, across the ring's end (a padding frame inside the batch) and longer
// than max_frame (the tail is published inside the batch): every frame comes out once, in
// order, intact, with no gap; a plain commit inside a batch publishes what came before it.
TEST(ShmLogTest, BatchesAcrossTheRingEndComeOutWhole) {
  Fixture f(64 << 10);
  auto rd = f.reader();
  std::vector<std::uint64_t> want, got;
  std::uint64_t s = 1;
  for (std::uint32_t batch = 1; batch <= 300; batch += 7) {
    for (std::uint32_t i = 0; i < batch; ++i, ++s) {
      ASSERT_TRUE(f.write(s, 8 + static_cast<std::uint32_t>(s % 97), 0, /*deferred=*/i != batch / 2 || batch % 3 != 0));
      want.push_back(s);
    }
    f.writer.flush_tail();
    const Drained d = drain(rd->r);
    EXPECT_TRUE(d.gaps.empty()) << "batch of " << batch;
    EXPECT_TRUE(d.payload_ok) << "batch of " << batch;
    got.insert(got.end(), d.seqs.begin(), d.seqs.end());
    EXPECT_TRUE(rd->r.caught_up()) << "batch of " << batch;
  }
  EXPECT_GT(s * 64, std::uint64_t{4} * (64 << 10)) << "the batches went round the ring a few times";
  EXPECT_EQ(got, want);
}

// Frames committed past a tail never published (a writer that published each frame's sequence
// at once and was killed before its batch's tail): the reader reads them, then stands past a
// tail that never moves. caught_up() stays false; nothing_readable() says it read everything
// committed (the endpoint ends the stream there once the writer's process is gone). A claim
// never committed is not readable either.
TEST(ShmLogTest, ReadingPastATailNeverPublishedIsSeenAsTheEnd) {
  Fixture f(64 << 10);
  auto rd = f.reader();
  ASSERT_TRUE(f.write(1, 64));
  LogWriter::Claim c;
  std::byte* head = nullptr;
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(f.writer.try_claim(core::kFrameHeaderSize + 16, &c));
    if (head == nullptr) head = c.frame;
    f.writer.commit_deferred(c, core::kFlagNone, 0);  // no flush_tail(): the writer "dies" here
  }
  seq_word(head).store(2, std::memory_order_release);  // the sequence this writer holds back
  ASSERT_TRUE(f.writer.try_claim(200, &c));            // and a claim it never committed
  Drained d = drain(rd->r);
  EXPECT_EQ(d.seqs, (std::vector<std::uint64_t>{1, 2, 3}));
  EXPECT_FALSE(rd->r.caught_up());
  EXPECT_TRUE(rd->r.nothing_readable());
}

// The fuzz input regressions/shm_reader/full_log_padding.bin: the first frame rewritten to a
// padding frame as long as the whole log. A reader that accepted a padding of exactly the room
// left would skip it to the same offset one lap on - the same frame, carrying the expected
// sequence - forever. Run in a child with an alarm, so such a hang fails the test.
TEST(ShmLogTest, PaddingAsLongAsTheLogIsMalformedNotSkippedForever) {
  constexpr std::uint64_t kLog = 64 << 10;
  Fixture f(kLog);
  for (std::uint64_t s = 1; s <= 5; ++s) ASSERT_TRUE(f.write(s, 100));
  auto* h = reinterpret_cast<core::FrameHeader*>(f.seg->log());  // frame 1, at offset 0
  h->flags = core::kFlagPadding;
  h->frame_length = static_cast<std::uint32_t>(kLog);
  auto child = [&f] {
    ::alarm(20);
    auto rd = f.reader(/*at_start=*/true);
    Drained d = drain(rd->r);
    const bool ok = d.seqs == std::vector<std::uint64_t>{2, 3, 4, 5} && rd->r.malformed() == 1 && d.gaps.size() == 1 &&
                    d.gaps[0].reason == kGapMalformed && d.gaps[0].sequence == 1 && d.gaps[0].gap_count == 1;
    if (!ok) {
      std::fprintf(stderr, "delivered %zu messages, %zu gaps, malformed %llu\n", d.seqs.size(), d.gaps.size(),
                   static_cast<unsigned long long>(rd->r.malformed()));
    }
    std::_Exit(ok ? 0 : 1);
  };
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "");
}

// The same hang without any single implausible frame: a hostile writer lays plausible padding
// frames (each within max_frame and the room left, each carrying the expected sequence) around
// the whole log. One poll() skips at most kMaxPaddingsPerPoll of them and returns.
TEST(ShmLogTest, ARingOfPaddingFramesCostsEachPollABoundedAmount) {
  constexpr std::uint64_t kLog = 64 << 10;
  Fixture f(kLog);
  auto rd = f.reader();
  ASSERT_TRUE(f.write(1, 100));
  ASSERT_EQ(drain(rd->r).seqs, std::vector<std::uint64_t>{1});
  const std::uint64_t start = rd->r.position();
  const std::uint32_t max_frame = f.writer.max_frame();
  // Paddings of max_frame from the reader's position to the end of the log, one for the room
  // left there, then one from offset 0 back to the reader's position: a closed ring.
  std::uint64_t at = start;
  int laid = 0;
  do {
    const std::uint64_t len = at < start ? start - at : std::min<std::uint64_t>(max_frame, kLog - at);
    auto* h = reinterpret_cast<core::FrameHeader*>(f.seg->log() + at);
    h->frame_length = static_cast<std::uint32_t>(len);
    h->magic = core::kFrameMagic;
    h->version = core::kFrameVersion;
    h->flags = core::kFlagPadding;
    h->stream_id = f.seg->header()->layout.stream_id;
    h->session_id = f.seg->header()->layout.session_id;
    seq_word(f.seg->log() + at).store(2);  // the expected sequence: a padding carries the next one
    at = (at + len) % kLog;
    ++laid;
  } while (at != start);
  ASSERT_GT(laid, 30);
  auto child = [&rd, max_frame] {
    ::alarm(20);
    std::vector<RxDesc> buf(16);
    bool ok = true;
    for (int i = 0; i < 3 && ok; ++i) {
      const std::uint64_t before = rd->r.position();
      const std::uint32_t n = rd->r.poll(buf.data(), 16);
      const std::uint64_t moved = rd->r.position() - before;
      // At least a padding, at most the cap's worth - and never more than a few laps of work.
      ok = n == 0 && moved >= core::kFrameAlignment &&
           moved <= LogReader::kMaxPaddingsPerPoll * std::uint64_t{max_frame} && moved <= 4 * kLog;
      if (!ok) {
        std::fprintf(stderr, "poll %d: %u events, position moved %llu\n", i, n, static_cast<unsigned long long>(moved));
      }
    }
    std::_Exit(ok && rd->r.malformed() == 0 ? 0 : 1);
  };
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "");
}

TEST(ShmLogTest, TwoReadersKeepTheirOwnPositions) {
  Fixture f(64 << 10);
  auto fast = f.reader();
  auto slow = f.reader();
  for (std::uint64_t s = 1; s <= 30; ++s) ASSERT_TRUE(f.write(s, 100));
  EXPECT_EQ(drain(fast->r).seqs.size(), 30u);
  for (std::uint64_t s = 31; s <= 40; ++s) ASSERT_TRUE(f.write(s, 100));
  EXPECT_EQ(drain(fast->r).seqs.size(), 10u);
  Drained d = drain(slow->r);
  ASSERT_EQ(d.seqs.size(), 40u);
  EXPECT_EQ(d.seqs.front(), 1u);
}

}  // namespace
}  // namespace pollux::transport::shm
