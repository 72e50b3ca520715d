// The distinct error log (core/error_log.h) and the counters file that holds it (version 2,
// core/counters.h): recording, deduplication, the bound, threads, and readers fed corrupted
// files (truncated, bad magic, unknown versions, counts and lengths out of range, random byte
// flips) - they must answer with a Status, never crash or read outside the copy.
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/counters.h"
#include "core/error_log.h"
#include "gtest/gtest.h"

namespace pollux::core {
namespace {

// An error log over a private buffer (as CountersFile does over its file).
struct Log {
  explicit Log(std::uint32_t capacity) : mem(error_log_bytes(capacity) / 8 + 1, 0) {
    log.init(mem.data(), capacity, Counter(&errors));
  }
  std::vector<std::uint64_t> mem;
  std::atomic<std::uint64_t> errors{0};
  ErrorLog log;
  absl::StatusOr<ErrorLogSnapshot> decode() const {
    return decode_error_log(reinterpret_cast<const std::byte*>(mem.data()), mem.size() * 8);
  }
};

TEST(ErrorLogTest, DistinctErrorsAreRecordedOnceWithCountAndTimes) {
  Log l(8);
  l.log.record(absl::StatusCode::kUnavailable, "rdma: stream 1: subscriber 10.0.0.2 disconnected");
  l.log.recordf(absl::StatusCode::kUnavailable, "rdma: stream %u: subscriber %s disconnected", 1u, "10.0.0.2");
  l.log.record(absl::StatusCode::kUnavailable, "rdma: stream 2: subscriber 10.0.0.2 disconnected");
  // Same message, another code: another error.
  l.log.record(absl::StatusCode::kInternal, "rdma: stream 2: subscriber 10.0.0.2 disconnected");
  auto snap = l.decode();
  ASSERT_TRUE(snap.ok()) << snap.status();
  ASSERT_EQ(snap->entries.size(), 3u);
  EXPECT_EQ(snap->entries[0].message, "rdma: stream 1: subscriber 10.0.0.2 disconnected");
  EXPECT_EQ(snap->entries[0].count, 2u);
  EXPECT_EQ(snap->entries[0].code, static_cast<std::uint32_t>(absl::StatusCode::kUnavailable));
  EXPECT_LE(snap->entries[0].first_ns, snap->entries[0].last_ns);
  EXPECT_GT(snap->entries[0].first_ns, 1'600'000'000'000'000'000)
      << "wall clock (CLOCK_REALTIME), not a monotonic clock";
  EXPECT_EQ(snap->entries[1].count, 1u);
  EXPECT_EQ(snap->entries[2].code, static_cast<std::uint32_t>(absl::StatusCode::kInternal));
  EXPECT_EQ(snap->observations, 4u);
  EXPECT_EQ(snap->dropped, 0u);
  EXPECT_EQ(l.errors.load(), 4u) << "the errors counter counts every observation";
  EXPECT_EQ(error_code_name(snap->entries[0].code), "UNAVAILABLE");
  // The in-process view agrees.
  EXPECT_EQ(l.log.entries().size(), 3u);
  EXPECT_EQ(l.log.entries()[0].count, 2u);
}

TEST(ErrorLogTest, BoundedWhenFullAndKnownErrorsStillCount) {
  Log l(4);
  for (int i = 0; i < 6; ++i) l.log.recordf(absl::StatusCode::kInternal, "error %d", i);
  l.log.record(absl::StatusCode::kInternal, "error 1");  // known: counted in its entry
  l.log.record(absl::StatusCode::kInternal, "error 5");  // not stored: dropped again
  auto snap = l.decode();
  ASSERT_TRUE(snap.ok()) << snap.status();
  ASSERT_EQ(snap->entries.size(), 4u);
  EXPECT_EQ(snap->entries[1].count, 2u);
  EXPECT_EQ(snap->dropped, 3u);
  EXPECT_EQ(snap->observations, 8u);
  EXPECT_EQ(l.errors.load(), 8u);
}

TEST(ErrorLogTest, LongMessagesAreCutNotOverflowed) {
  Log l(2);
  const std::string big(1000, 'x');
  l.log.record(absl::StatusCode::kInternal, big);
  l.log.record(absl::StatusCode::kInternal, big + "y");  // differs only past the cut: the same error
  auto snap = l.decode();
  ASSERT_TRUE(snap.ok()) << snap.status();
  ASSERT_EQ(snap->entries.size(), 1u);
  EXPECT_EQ(snap->entries[0].message.size(), kErrorMessageMax);
  EXPECT_EQ(snap->entries[0].count, 2u);
  // The word after the entries is untouched.
  EXPECT_EQ(l.mem.back(), 0u);
}

// Pollers and control threads record at once (run under TSan too): every observation is
// counted, each distinct error stored once.
TEST(ErrorLogTest, ThreadsRecordingTheSameErrorsAgree) {
  Log l(16);
  constexpr int kThreads = 4, kRounds = 2000, kDistinct = 8;
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&l, t] {
      for (int i = 0; i < kRounds; ++i)
        l.log.recordf(absl::StatusCode::kUnavailable, "peer %d lost", (i + t) % kDistinct);
    });
  }
  for (auto& t : ts) t.join();
  auto snap = l.decode();
  ASSERT_TRUE(snap.ok()) << snap.status();
  EXPECT_EQ(snap->entries.size(), static_cast<std::size_t>(kDistinct));
  std::uint64_t total = 0;
  for (const auto& e : snap->entries) total += e.count;
  EXPECT_EQ(total, static_cast<std::uint64_t>(kThreads * kRounds));
  EXPECT_EQ(snap->observations, total);
  EXPECT_EQ(l.errors.load(), total);
}

// ---- the counters file (version 2) ----------------------------------------------------------------

std::vector<std::byte> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(in)), {});
  std::vector<std::byte> out(s.size());
  std::memcpy(out.data(), s.data(), s.size());
  return out;
}

// A counters file of this process with counters and two errors; its bytes.
struct Fixture {
  Fixture() {
    auto f = CountersFile::create(::testing::TempDir(), "errlog");
    EXPECT_TRUE(f.ok()) << f.status();
    file = std::move(*f);
    file->allocate("pub stream 7 quotes", "messages", 7, CounterKind::kPublisher, file->new_owner()).add(42);
    file->error_log().record(absl::StatusCode::kUnavailable, "first");
    file->error_log().record(absl::StatusCode::kUnavailable, "first");
    file->error_log().record(absl::StatusCode::kDataLoss, "second");
    bytes = file_bytes(file->path());
  }
  std::unique_ptr<CountersFile> file;
  std::vector<std::byte> bytes;
  template <typename T>
  void put(std::vector<std::byte>& b, std::size_t off, T v) const {
    std::memcpy(b.data() + off, &v, sizeof v);
  }
  std::size_t log_offset() const { return offsetof(CountersHeader, error_log_offset); }
  std::uint64_t log_at() const {
    std::uint64_t v;
    std::memcpy(&v, bytes.data() + log_offset(), sizeof v);
    return v;
  }
  absl::StatusOr<CountersFileSnapshot> decode(const std::vector<std::byte>& b) const {
    return decode_counters_file(b.data(), b.size(), "test");
  }
};

TEST(CountersFileV2Test, ReaderSeesCountersKindsAndTheErrorLog) {
  Fixture fx;
  auto snap = read_counters_file(fx.file->path());
  ASSERT_TRUE(snap.ok()) << snap.status();
  EXPECT_TRUE(snap->alive);
  ASSERT_EQ(snap->counters.size(), 2u);
  EXPECT_EQ(snap->counters[0].name, "errors") << "slot 0: the errors counter";
  EXPECT_EQ(snap->counters[0].kind, CounterKind::kProcess);
  EXPECT_EQ(snap->counters[0].value, 3u);
  EXPECT_EQ(snap->counters[1].kind, CounterKind::kPublisher);
  EXPECT_NE(snap->counters[1].owner, 0);
  EXPECT_EQ(snap->counters[1].value, 42u);
  ASSERT_TRUE(snap->error_log_status.ok()) << snap->error_log_status;
  ASSERT_EQ(snap->errors.entries.size(), 2u);
  EXPECT_EQ(snap->errors.entries[0].count, 2u);
  EXPECT_EQ(snap->errors.entries[1].message, "second");
  EXPECT_GE(snap->snapshot_ns, snap->start_ns);
}

TEST(CountersFileV2Test, UnknownVersionsAreRefusedByName) {
  Fixture fx;
  for (std::uint32_t v : {1u, 3u}) {
    auto b = fx.bytes;
    fx.put(b, offsetof(CountersHeader, version), v);
    auto snap = fx.decode(b);
    ASSERT_FALSE(snap.ok());
    EXPECT_EQ(snap.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(snap.status().message().find(absl::StrFormat("version %u, this reader understands version 2", v)),
              absl::string_view::npos)
        << snap.status();
  }
}

TEST(CountersFileV2Test, CorruptedErrorLogLeavesTheCountersReadable) {
  Fixture fx;
  const std::size_t log = fx.log_at();
  struct Case {
    const char* what;
    std::size_t off;
    std::uint64_t value;
    int width;
    const char* expect;
  };
  const Case cases[] = {
      {"bad magic", log, 0x1234, 8, "bad magic"},
      {"unknown version", log + 8, 9, 4, "version 9"},
      {"entry size", log + 16, 128, 4, "inconsistent sizes"},
      {"capacity beyond the region", log + 20, 1000, 4, "inconsistent sizes"},
      {"capacity absurd", log + 20, 0xffffffff, 4, "inconsistent sizes"},
      {"used > capacity", log + 24, 65, 4, "entries used of a capacity"},
      {"message length", log + sizeof(ErrorLogHeader) + offsetof(ErrorEntry, message_length), 5000, 4, "malformed"},
      {"count 0", log + sizeof(ErrorLogHeader) + offsetof(ErrorEntry, count), 0, 8, "malformed"},
      {"offset outside", fx.log_offset(), 1ull << 40, 8, "not inside the file"},
      {"offset inside the labels", fx.log_offset(), 4096, 8, "not inside the file"},
      {"size beyond the end", offsetof(CountersHeader, error_log_size), 1ull << 62, 8, "not inside the file"},
  };
  for (const Case& c : cases) {
    auto b = fx.bytes;
    if (c.width == 8) {
      fx.put(b, c.off, c.value);
    } else {
      fx.put(b, c.off, static_cast<std::uint32_t>(c.value));
    }
    auto snap = fx.decode(b);
    ASSERT_TRUE(snap.ok()) << c.what << ": " << snap.status();
    EXPECT_EQ(snap->counters.size(), 2u) << c.what;
    EXPECT_FALSE(snap->error_log_status.ok()) << c.what;
    EXPECT_NE(snap->error_log_status.message().find(c.expect), absl::string_view::npos)
        << c.what << ": " << snap->error_log_status;
    EXPECT_TRUE(snap->errors.entries.empty()) << c.what;
  }
}

TEST(CountersFileV2Test, TruncatedAtEveryLengthIsAStatusNotACrash) {
  Fixture fx;
  for (std::size_t len = 0; len <= fx.bytes.size(); len += (len < 8192 ? 8 : 997)) {
    std::vector<std::byte> b(fx.bytes.begin(), fx.bytes.begin() + static_cast<std::ptrdiff_t>(len));
    auto snap = fx.decode(b);
    if (len < 4096) {
      EXPECT_FALSE(snap.ok()) << len;
      continue;
    }
    if (!snap.ok()) continue;  // cut inside the labels or values: refused
    // Accepted only with everything it reports inside the copy.
    if (len < fx.bytes.size()) {
      EXPECT_FALSE(snap->error_log_status.ok()) << len << ": the log was cut";
    }
  }
  EXPECT_TRUE(fx.decode(fx.bytes).ok());
}

TEST(CountersFileV2Test, HeaderFieldsOutOfRangeAreRefused) {
  Fixture fx;
  auto b = fx.bytes;
  fx.put(b, offsetof(CountersHeader, capacity), std::uint32_t{0x7fffffff});
  EXPECT_FALSE(fx.decode(b).ok());
  b = fx.bytes;
  fx.put(b, offsetof(CountersHeader, magic), std::uint64_t{0});
  auto s = fx.decode(b);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("bad magic"), absl::string_view::npos);
  // allocated beyond capacity: read up to the capacity only.
  b = fx.bytes;
  fx.put(b, offsetof(CountersHeader, allocated), std::uint32_t{0xffffffff});
  auto a = fx.decode(b);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->counters.size(), 2048u);
  // Unknown label kinds read as kOther; unterminated names stop at their field.
  b = fx.bytes;
  fx.put(b, 4096 + 128 + offsetof(CounterLabel, kind), std::uint16_t{999});
  std::memset(b.data() + 4096 + 128 + offsetof(CounterLabel, scope), 'A', 120);
  auto k = fx.decode(b);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->counters[1].kind, CounterKind::kOther);
  EXPECT_EQ(k->counters[1].scope.size(), 56u);
  EXPECT_EQ(k->counters[1].name.size(), 64u);
}

// Random byte flips over the whole file (deterministic seed): every answer is a Status or a
// snapshot; under ASan/UBSan, nothing reads outside the copy.
TEST(CountersFileV2Test, RandomCorruptionNeverCrashes) {
  Fixture fx;
  std::mt19937_64 rng(14);
  int accepted = 0;
  for (int round = 0; round < 3000; ++round) {
    auto b = fx.bytes;
    const int flips = 1 + static_cast<int>(rng() % 8);
    for (int i = 0; i < flips; ++i) {
      // Mostly the headers (where the sizes are), sometimes anywhere.
      const std::size_t off = rng() % 2 == 0 ? rng() % 4096 : fx.log_at() + rng() % 1024;
      b[off % b.size()] = static_cast<std::byte>(rng());
    }
    if (rng() % 4 == 0) b.resize(rng() % b.size());
    auto snap = fx.decode(b);
    if (!snap.ok()) continue;
    ++accepted;
    for (const auto& e : snap->errors.entries) {
      EXPECT_LE(e.message.size(), kErrorMessageMax);
      EXPECT_GE(e.count, 1u);
    }
  }
  EXPECT_GT(accepted, 0) << "some corruptions (counter values, messages) leave a readable file";
}

}  // namespace
}  // namespace pollux::core
