// core::SendCompletionLog: the per-publisher record of traced frames' local send completions.
#include <atomic>
#include <cstdint>
#include <thread>

#include <gtest/gtest.h>

#include "core/trace.h"

namespace pollux::core {
namespace {

TEST(SendCompletionLog, UnknownSequencesAreZero) {
  SendCompletionLog log;
  EXPECT_EQ(log.find(0), 0);
  EXPECT_EQ(log.find(1), 0);
  EXPECT_EQ(log.find(12345), 0);
}

TEST(SendCompletionLog, RecordedSequenceIsFoundAndItsSlotNeighboursAreNot) {
  SendCompletionLog log;
  log.record(7, 1000);
  EXPECT_EQ(log.find(7), 1000);
  EXPECT_EQ(log.find(8), 0);
  // Same slot, different sequence: not a match.
  EXPECT_EQ(log.find(7 + SendCompletionLog::kEntries), 0);
}

TEST(SendCompletionLog, KeepsTheLatestEntriesAndEvictsOlderOnes) {
  SendCompletionLog log;
  const std::uint64_t n = 3 * SendCompletionLog::kEntries + 5;
  for (std::uint64_t s = 1; s <= n; ++s) log.record(s, static_cast<std::int64_t>(s * 10));
  for (std::uint64_t s = n - SendCompletionLog::kEntries + 1; s <= n; ++s) {
    EXPECT_EQ(log.find(s), static_cast<std::int64_t>(s * 10)) << s;
  }
  EXPECT_EQ(log.find(n - SendCompletionLog::kEntries), 0);
  EXPECT_EQ(log.find(1), 0);
}

// One writer, one reader racing it: the reader sees either "unknown" or the value recorded for
// exactly that sequence (value = f(sequence)), never a pair torn between two records.
TEST(SendCompletionLog, ConcurrentReaderNeverSeesATornPair) {
  SendCompletionLog log;
  constexpr std::uint64_t kRecords = 200000;
  std::atomic<std::uint64_t> written{0};
  std::thread writer([&] {
    for (std::uint64_t s = 1; s <= kRecords; ++s) {
      log.record(s, static_cast<std::int64_t>(s * 3 + 1));
      written.store(s, std::memory_order_release);
      if ((s & 1023) == 0) std::this_thread::yield();  // 2 cores: let the reader run
    }
  });
  std::uint64_t found = 0;
  std::uint64_t bad = 0;
  while (written.load(std::memory_order_acquire) < kRecords) {
    const std::uint64_t w = written.load(std::memory_order_acquire);
    for (std::uint64_t s = w > 8 ? w - 8 : 1; s <= w + 8; ++s) {
      const std::int64_t ns = log.find(s);
      if (ns == 0) continue;
      ++found;
      if (ns != static_cast<std::int64_t>(s * 3 + 1)) ++bad;
    }
    std::this_thread::yield();
  }
  writer.join();
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(log.find(kRecords), static_cast<std::int64_t>(kRecords * 3 + 1));
  (void)found;
}

}  // namespace
}  // namespace pollux::core
