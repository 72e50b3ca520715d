// Recordings on disk (core/archive): the checksum, segments written and read back across rolls,
// damage found where it is, a torn tail recovered, the catalog's atomic replacement and its
// checks, a full disk, and a writer killed with SIGKILL at random points (fsync = every: nothing
// it reported synced is lost, and every restart reads back clean).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/archive/catalog.h"
#include "core/archive/crc32c.h"
#include "core/archive/format.h"
#include "core/archive/segment.h"
#include "core/frame.h"
#include "tests/support/temp_dir.h"

namespace {

namespace fs = std::filesystem;
using namespace pollux::core;
using namespace pollux::core::archive;

// Frame `seq` of session 7: its payload's length and bytes follow from seq.
std::vector<std::byte> make_frame(std::uint64_t seq) {
  const std::uint32_t payload = static_cast<std::uint32_t>(8 + (seq * 37) % 300);
  std::vector<std::byte> f(kFrameHeaderSize + payload);
  FrameHeader h{};
  write_frame_header(&h, static_cast<std::uint32_t>(f.size()), 0, 5, 7, static_cast<std::int64_t>(seq) * 1000);
  h.sequence = seq;
  std::memcpy(f.data(), &h, sizeof h);
  for (std::uint32_t i = 0; i < payload; ++i) f[kFrameHeaderSize + i] = static_cast<std::byte>((seq + i) & 0xff);
  return f;
}

struct ReadBack {
  std::vector<std::uint64_t> sequences;  // frames, in order
  std::vector<Marker> markers;
  bool frames_intact = true;
  std::string invalid;  // "<file> at <offset>: <why>" when a segment stopped on damage
};

// Every segment of recording `id` from segment 0, in order, until one is missing.
ReadBack read_all(const std::string& dir, std::uint64_t id) {
  ReadBack out;
  for (std::uint32_t i = 0;; ++i) {
    const std::string p = segment_path(dir, id, i);
    if (!fs::exists(p)) break;
    auto r = SegmentReader::open(p);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) break;
    SegmentReader::Record rec;
    SegmentReader::Next n;
    while ((n = r->next(&rec)) == SegmentReader::Next::kRecord) {
      if (rec.is_marker) {
        Marker m;
        std::memcpy(&m, rec.body, sizeof m);
        out.markers.push_back(m);
        continue;
      }
      FrameHeader h;
      std::memcpy(&h, rec.body, sizeof h);
      out.sequences.push_back(h.sequence);
      const std::vector<std::byte> want = make_frame(h.sequence);
      out.frames_intact &= rec.length == want.size() && std::memcmp(rec.body, want.data(), want.size()) == 0;
    }
    if (n == SegmentReader::Next::kInvalid) {
      out.invalid = absl::StrCat(p, " at ", r->offset(), ": ", r->why());
      break;
    }
  }
  return out;
}

WriterOptions options(const std::string& dir, std::uint64_t id) {
  WriterOptions o;
  o.directory = dir;
  o.recording_id = id;
  o.stream_id = 5;
  o.segment_size = kMinSegmentSize;
  o.buffer_bytes = 64 * 1024;
  return o;
}

TEST(ArchiveCrc, KnownValueAndTheInstructionAgreesWithTheTable) {
  const char* check = "123456789";
  EXPECT_EQ(crc32c(check, 9), 0xE3069283u);  // the CRC-32C check value (RFC 3720)
  EXPECT_EQ(crc32c_portable(check, 9), 0xE3069283u);
  std::mt19937_64 rng(1);
  std::vector<unsigned char> data(4099);
  for (auto& b : data) b = static_cast<unsigned char>(rng());
  for (std::size_t n : {0ul, 1ul, 7ul, 8ul, 9ul, 63ul, 4099ul}) {
    EXPECT_EQ(crc32c(data.data(), n), crc32c_portable(data.data(), n)) << n;
  }
  // Continuation: crc(a + b) from crc(a).
  EXPECT_EQ(crc32c(data.data() + 100, 3999, crc32c(data.data(), 100)), crc32c(data.data(), 4099));
  // The table continues a crc as the instruction does (a recording written on one machine reads
  // on the other).
  EXPECT_EQ(crc32c_portable(data.data() + 100, 3999, crc32c_portable(data.data(), 100)), crc32c(data.data(), 4099));
}

TEST(ArchiveCrc, RecordCrcsComputedTogetherEqualEachRecordsOwn) {
  std::mt19937_64 rng(2);
  std::vector<std::byte> data(64 * 1024);
  for (auto& b : data) b = static_cast<std::byte>(rng());
  // Runs of 1 to 11 records (whole groups of four and the rest), bodies of 0 to 300 bytes at
  // any alignment, lengths equal and unequal within a group.
  for (int run = 0; run < 200; ++run) {
    const int n = 1 + run % 11;
    std::uint32_t lengths[11], got[11];
    const std::byte* bodies[11];
    for (int i = 0; i < n; ++i) {
      lengths[i] = run % 3 == 0 ? 64 : static_cast<std::uint32_t>(rng() % 301);
      bodies[i] = data.data() + rng() % (data.size() - 301);
    }
    record_crcs(lengths, bodies, n, got);
    for (int i = 0; i < n; ++i) {
      const std::uint32_t want = crc32c(bodies[i], lengths[i], crc32c(&lengths[i], sizeof lengths[i]));
      ASSERT_EQ(got[i], want) << "run " << run << " record " << i << " of " << n << ", length " << lengths[i];
      ASSERT_EQ(want, crc32c_portable(bodies[i], lengths[i], crc32c_portable(&lengths[i], sizeof lengths[i])));
    }
  }
}

TEST(ArchiveSegments, FramesAndMarkersComeBackInOrderAcrossSegmentsWithTheirIndexes) {
  pollux::testing::TempDir d("pollux-archive");
  auto w = RecordingWriter::open(options(d.path(), 3));
  ASSERT_TRUE(w.ok()) << w.status();
  constexpr std::uint64_t kFrames = 20000;  // ~4 MiB of records: several 1 MiB segments
  for (std::uint64_t s = 1; s <= kFrames; ++s) {
    const auto f = make_frame(s);
    ASSERT_TRUE((*w)->append(f.data(), static_cast<std::uint32_t>(f.size()))) << (*w)->error();
    if (s == 5000) {
      ASSERT_TRUE((*w)->append_gap(7, 5001, 5003));
    }
    if (s % 100 == 0) {
      ASSERT_TRUE((*w)->flush(0));
    }
  }
  ASSERT_TRUE((*w)->close().ok());
  const std::uint32_t last = (*w)->segment_index();
  EXPECT_GE(last, 3u);
  EXPECT_EQ((*w)->stats().frames, kFrames);
  EXPECT_EQ((*w)->stats().first_sequence, 1u);
  EXPECT_EQ((*w)->stats().last_sequence, kFrames);

  const ReadBack rb = read_all(d.path(), 3);
  EXPECT_EQ(rb.invalid, "");
  ASSERT_EQ(rb.sequences.size(), kFrames);  // (read before the resume below adds its marker)
  for (std::uint64_t i = 0; i < kFrames; ++i) ASSERT_EQ(rb.sequences[i], i + 1);
  EXPECT_TRUE(rb.frames_intact);
  ASSERT_EQ(rb.markers.size(), 1u);
  EXPECT_EQ(rb.markers[0].kind, static_cast<std::uint16_t>(MarkerKind::kGap));
  EXPECT_EQ(rb.markers[0].from_seq, 5001u);
  EXPECT_EQ(rb.markers[0].to_seq, 5003u);
  EXPECT_EQ(rb.markers[0].count, 3u);

  // Each sealed segment's index file: its totals add up to the recording, and a resume counts
  // the same from the files.
  SegmentTotals sum;
  for (std::uint32_t i = 0; i <= last; ++i) {
    auto si = read_segment_index(index_path(d.path(), 3, i));
    ASSERT_TRUE(si.ok()) << si.status();
    sum.frames += si->totals.frames;
    sum.markers += si->totals.markers;
    sum.bytes += si->totals.bytes;
    if (i == 0) {
      EXPECT_EQ(si->totals.first_sequence, 1u);
    }
    if (i == last) {
      EXPECT_EQ(si->totals.last_sequence, kFrames);
    }
  }
  EXPECT_EQ(sum.frames, kFrames);
  EXPECT_EQ(sum.markers, 1u);
  EXPECT_EQ(sum.bytes, (*w)->stats().bytes);
  {
    WriterOptions o = options(d.path(), 3);
    o.resume = true;
    o.resume_segment = last;
    auto again = RecordingWriter::open(o);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ((*again)->stats().prior.frames, kFrames);
    EXPECT_EQ((*again)->stats().prior.first_sequence, 1u);
    EXPECT_EQ((*again)->stats().prior.last_sequence, kFrames);
    ASSERT_TRUE((*again)->close().ok());
  }
  // Each segment's index: entries in order, each at a frame whose sequence and time it holds.
  for (std::uint32_t i = 0; i <= last; ++i) {
    auto idx = read_index(index_path(d.path(), 3, i));
    ASSERT_TRUE(idx.ok()) << idx.status();
    ASSERT_FALSE(idx->empty());
    auto r = SegmentReader::open(segment_path(d.path(), 3, i));
    ASSERT_TRUE(r.ok());
    for (const IndexEntry& e : *idx) {
      r->seek(e.offset);
      SegmentReader::Record rec;
      ASSERT_EQ(r->next(&rec), SegmentReader::Next::kRecord) << r->why();
      FrameHeader h;
      std::memcpy(&h, rec.body, sizeof h);
      EXPECT_EQ(h.sequence, e.sequence);
      EXPECT_EQ(h.timestamp_ns, e.time_ns);
    }
  }
}

// The reader reads a segment through 256 KiB windows: records larger than a window, records
// across a window's end, and records written after the reader found the end (a live segment:
// it reads the file again at each next()) all come back as written.
TEST(ArchiveSegments, RecordsLargerThanTheReadWindowAndRecordsWrittenWhileReadingComeBackAsWritten) {
  pollux::testing::TempDir d("pollux-archive");
  WriterOptions o = options(d.path(), 4);
  o.segment_size = 8ull << 20;
  o.buffer_bytes = 1u << 20;
  auto frame = [](std::uint64_t seq) {
    // Every seventh frame 300 KiB (more than a window), the others 8-1,000 bytes.
    const std::uint32_t payload = seq % 7 == 0 ? 300u * 1024 : static_cast<std::uint32_t>(8 + (seq * 131) % 993);
    std::vector<std::byte> f(kFrameHeaderSize + payload);
    FrameHeader h{};
    write_frame_header(&h, static_cast<std::uint32_t>(f.size()), 0, 5, 7, static_cast<std::int64_t>(seq));
    h.sequence = seq;
    std::memcpy(f.data(), &h, sizeof h);
    for (std::uint32_t i = 0; i < payload; ++i) f[kFrameHeaderSize + i] = static_cast<std::byte>((seq * 3 + i) & 0xff);
    return f;
  };
  auto w = RecordingWriter::open(o);
  ASSERT_TRUE(w.ok()) << w.status();
  std::uint64_t written = 0;
  auto write = [&](std::uint64_t n) {
    for (std::uint64_t i = 0; i < n; ++i) {
      const auto f = frame(++written);
      ASSERT_TRUE((*w)->append(f.data(), static_cast<std::uint32_t>(f.size()))) << (*w)->error();
    }
    ASSERT_TRUE((*w)->flush(0)) << (*w)->error();
    ASSERT_EQ((*w)->segment_index(), 0u) << "the test wants one segment";
  };
  auto r = SegmentReader::open(segment_path(d.path(), 4, 0));
  ASSERT_TRUE(r.ok()) << r.status();
  std::uint64_t read = 0;
  auto read_to_end = [&] {
    SegmentReader::Record rec;
    SegmentReader::Next n;
    while ((n = r->next(&rec)) == SegmentReader::Next::kRecord) {
      const auto want = frame(++read);
      ASSERT_FALSE(rec.is_marker);
      ASSERT_EQ(rec.length, want.size()) << "frame " << read;
      ASSERT_EQ(std::memcmp(rec.body, want.data(), want.size()), 0) << "frame " << read;
    }
    ASSERT_EQ(n, SegmentReader::Next::kEnd) << r->why() << " at " << r->offset();
  };
  // Nothing yet, then batches written while the reader waits at the end (small ones: the reader
  // reads a little at the end, and then a whole window, or a record's size, when more is there).
  read_to_end();
  EXPECT_EQ(read, 0u);
  for (const std::uint64_t batch : {1ull, 6ull, 1ull, 20ull, 3ull}) {
    write(batch);
    read_to_end();
    ASSERT_EQ(read, written);
  }
  read_to_end();  // at the end again: still the end
  EXPECT_EQ(read, written);
  EXPECT_GT(r->loads(), 5u);
}

TEST(ArchiveSegments, AFlippedByteIsFoundAtItsRecordAndNothingAfterItIsHandedOut) {
  pollux::testing::TempDir d("pollux-archive");
  auto w = RecordingWriter::open(options(d.path(), 1));
  ASSERT_TRUE(w.ok()) << w.status();
  std::vector<std::uint64_t> offsets;
  for (std::uint64_t s = 1; s <= 100; ++s) {
    offsets.push_back((*w)->position());
    const auto f = make_frame(s);
    ASSERT_TRUE((*w)->append(f.data(), static_cast<std::uint32_t>(f.size())));
  }
  ASSERT_TRUE((*w)->close().ok());
  const std::string p = segment_path(d.path(), 1, 0);
  // A byte in frame 60's payload.
  {
    const int fd = ::open(p.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    unsigned char b;
    const off_t at = static_cast<off_t>(offsets[59] + sizeof(RecordHeader) + kFrameHeaderSize + 3);
    ASSERT_EQ(::pread(fd, &b, 1, at), 1);
    b ^= 0x10;
    ASSERT_EQ(::pwrite(fd, &b, 1, at), 1);
    ::close(fd);
  }
  const ReadBack rb = read_all(d.path(), 1);
  EXPECT_EQ(rb.sequences.size(), 59u);
  EXPECT_TRUE(rb.frames_intact);
  EXPECT_EQ(rb.invalid, absl::StrCat(p, " at ", offsets[59], ": crc mismatch"));
  // A damaged segment header is refused at open, naming the file.
  {
    const int fd = ::open(p.c_str(), O_RDWR);
    const unsigned char junk = 0x5a;
    ASSERT_EQ(::pwrite(fd, &junk, 1, 20), 1);
    ::close(fd);
  }
  auto r = SegmentReader::open(p);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(p), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("header crc mismatch"), std::string::npos) << r.status();
}

TEST(ArchiveSegments, ResumeZeroesATornTailSoNoOlderRecordBehindItReappears) {
  pollux::testing::TempDir d("pollux-archive");
  std::uint64_t end = 0;
  std::vector<std::byte> old_record;
  {
    auto w = RecordingWriter::open(options(d.path(), 2));
    ASSERT_TRUE(w.ok());
    for (std::uint64_t s = 1; s <= 50; ++s) {
      const auto f = make_frame(s);
      ASSERT_TRUE((*w)->append(f.data(), static_cast<std::uint32_t>(f.size())));
    }
    ASSERT_TRUE((*w)->close().ok());
    end = (*w)->position();
  }
  const std::string p = segment_path(d.path(), 2, 0);
  // A torn write after the last record: a record header whose body never landed, then (as a
  // reordered page write would leave it) an intact record of an earlier frame further on.
  {
    auto r = SegmentReader::open(p);
    ASSERT_TRUE(r.ok());
    SegmentReader::Record rec;
    ASSERT_EQ(r->next(&rec), SegmentReader::Next::kRecord);
    // The whole record: its header (just before the body) and its padding.
    const std::byte* start = rec.body - sizeof(RecordHeader);
    old_record.assign(start, start + sizeof(RecordHeader) + rec.length);
    old_record.resize(record_size(rec.length));
  }
  {
    const int fd = ::open(p.c_str(), O_RDWR);
    const RecordHeader torn{0x12345678u, 200};
    ASSERT_EQ(::pwrite(fd, &torn, sizeof torn, static_cast<off_t>(end)), static_cast<ssize_t>(sizeof torn));
    ASSERT_EQ(::pwrite(fd, old_record.data(), old_record.size(), static_cast<off_t>(end + 8192)),
              static_cast<ssize_t>(old_record.size()));
    ::close(fd);
  }
  ReadBack before = read_all(d.path(), 2);
  EXPECT_EQ(before.sequences.size(), 50u);
  EXPECT_NE(before.invalid.find("record body with an unknown magic"), std::string::npos) << before.invalid;

  WriterOptions o = options(d.path(), 2);
  o.resume = true;
  o.resume_segment = 0;
  auto w = RecordingWriter::open(o);
  ASSERT_TRUE(w.ok()) << w.status();
  // Up to the last non-zero byte (the old record's padding is zeros).
  const std::uint64_t torn = (*w)->stats().torn_bytes;
  EXPECT_GT(torn, 8192 + old_record.size() - kRecordAlign);
  EXPECT_LE(torn, 8192 + old_record.size());
  for (std::uint64_t s = 51; s <= 60; ++s) {
    const auto f = make_frame(s);
    ASSERT_TRUE((*w)->append(f.data(), static_cast<std::uint32_t>(f.size())));
  }
  ASSERT_TRUE((*w)->close().ok());
  const ReadBack after = read_all(d.path(), 2);
  EXPECT_EQ(after.invalid, "");
  ASSERT_EQ(after.sequences.size(), 60u);
  for (std::uint64_t i = 0; i < 60; ++i) EXPECT_EQ(after.sequences[i], i + 1);
  ASSERT_EQ(after.markers.size(), 1u);
  EXPECT_EQ(after.markers[0].kind, static_cast<std::uint16_t>(MarkerKind::kResume));
  EXPECT_EQ(after.markers[0].count, torn);
}

TEST(ArchiveCatalog, UpdatesAreAtomicAndADamagedCatalogIsRefusedNamingTheFile) {
  pollux::testing::TempDir d("pollux-archive");
  auto c = Catalog::update(d.path(), [](Catalog& cat) {
    RecordingInfo& r = cat.add(5, "quotes", kDefaultSegmentSize);
    r.first_sequence = 1;
    r.last_sequence = 99;
    cat.add(6, "trades", kDefaultSegmentSize).state = RecordingState::kStopped;
    return absl::OkStatus();
  });
  ASSERT_TRUE(c.ok()) << c.status();
  auto loaded = Catalog::load(d.path());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->recordings().size(), 2u);
  EXPECT_EQ(loaded->recordings()[0].id, 1u);
  EXPECT_EQ(loaded->recordings()[0].topic, "quotes");
  EXPECT_EQ(loaded->recordings()[0].last_sequence, 99u);
  EXPECT_EQ(loaded->recordings()[1].state, RecordingState::kStopped);
  // A failed change writes nothing.
  auto refused = Catalog::update(d.path(), [](Catalog& cat) {
    cat.add(7, "x", kDefaultSegmentSize);
    return absl::InternalError("no");
  });
  EXPECT_FALSE(refused.ok());
  EXPECT_EQ(Catalog::load(d.path())->recordings().size(), 2u);
  // Ids are not reused after a removal.
  ASSERT_TRUE(Catalog::update(d.path(), [](Catalog& cat) {
                cat.remove(2);
                EXPECT_EQ(cat.add(8, "y", kDefaultSegmentSize).id, 3u);
                return absl::OkStatus();
              }).ok());
  EXPECT_FALSE(fs::exists(Catalog::path(d.path()) + ".tmp"));
  // One flipped byte anywhere in an entry: refused with the file named.
  const std::string p = Catalog::path(d.path());
  const int fd = ::open(p.c_str(), O_RDWR);
  unsigned char b;
  ASSERT_EQ(::pread(fd, &b, 1, 100), 1);
  b ^= 1;
  ASSERT_EQ(::pwrite(fd, &b, 1, 100), 1);
  ::close(fd);
  auto bad = Catalog::load(d.path());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(p), std::string::npos) << bad.status();
  EXPECT_NE(bad.status().message().find("crc mismatch"), std::string::npos) << bad.status();
  // Not a directory / no directory: a clear error.
  EXPECT_FALSE(Catalog::load(p).ok());
  EXPECT_FALSE(Catalog::load(d.path() + "/missing").ok());
  auto no_dir = RecordingWriter::open(options(d.path() + "/missing", 1));
  ASSERT_FALSE(no_dir.ok());
  EXPECT_NE(no_dir.status().message().find("No such file or directory"), std::string::npos) << no_dir.status();
}

TEST(ArchiveSegments, AFullDiskStopsTheWriterWithTheErrorAndKeepsWhatWasWritten) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (mounts a 3 MiB tmpfs)";
  pollux::testing::TempDir d("pollux-archive");
  if (::mount("tmpfs", d.path().c_str(), "tmpfs", 0, "size=3m") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs: " << std::strerror(errno);
  }
  struct Unmount {
    std::string p;
    ~Unmount() { ::umount2(p.c_str(), MNT_DETACH); }
  } unmount{d.path()};
  auto w = RecordingWriter::open(options(d.path(), 9));
  ASSERT_TRUE(w.ok()) << w.status();
  std::uint64_t s = 1;
  for (; s <= 100000; ++s) {
    const auto f = make_frame(s);
    if (!(*w)->append(f.data(), static_cast<std::uint32_t>(f.size())) || !(*w)->flush(0)) break;
  }
  ASSERT_LT(s, 100000u) << "a 3 MiB file system never filled";
  EXPECT_EQ((*w)->error().code(), absl::StatusCode::kResourceExhausted) << (*w)->error();
  EXPECT_NE((*w)->error().message().find("No space left on device"), std::string::npos) << (*w)->error();
  const auto f = make_frame(s + 1);
  EXPECT_FALSE((*w)->append(f.data(), static_cast<std::uint32_t>(f.size())));
  EXPECT_GE((*w)->stats().dropped, 1u);
  // Frames 1 .. s - 1 were each appended and flushed: all there, and they read back.
  (void)(*w)->close();
  const ReadBack rb = read_all(d.path(), 9);
  EXPECT_EQ(rb.invalid, "");
  EXPECT_EQ(rb.sequences.size(), s - 1) << "flushed records missing";
  for (std::size_t i = 0; i < rb.sequences.size(); ++i) ASSERT_EQ(rb.sequences[i], i + 1);
}

// A child appends frames with fsync = every and, after each flush, writes the last sequence it
// flushed (and so synced) to a pipe; it is killed with SIGKILL after a random delay. The parent
// then resumes the recording as a restarted recorder would: every frame up to the last one
// reported must be there, in order, the rest of the segment clean.
TEST(ArchiveCrash, KilledMidWriteTwentyTimesEveryRestartRecoversAndLosesNothingSynced) {
  pollux::testing::TempDir d("pollux-archive");
  std::mt19937 rng(20261207);
  std::uint64_t resumes = 0, checked = 0;
  // The last segment on disk, and the first sequence not yet in the recording.
  const auto last_segment = [&] {
    std::uint32_t last = 0;
    while (fs::exists(segment_path(d.path(), 4, last + 1))) ++last;
    return last;
  };
  std::uint64_t next = 1;
  for (int round = 0; round < 20; ++round) {
    SCOPED_TRACE(round);
    const bool resume = fs::exists(segment_path(d.path(), 4, 0));
    const std::uint32_t segment = resume ? last_segment() : 0;
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(fds[0]);
      WriterOptions o = options(d.path(), 4);
      o.fsync = FsyncPolicy::kEvery;
      o.resume = resume;
      o.resume_segment = segment;
      auto w = RecordingWriter::open(o);
      if (!w.ok()) _exit(3);
      for (std::uint64_t s = next;; ++s) {
        const auto f = make_frame(s);
        if (!(*w)->append(f.data(), static_cast<std::uint32_t>(f.size()))) _exit(4);
        if (s % 7 == 0) {
          if (!(*w)->flush(0)) _exit(5);
          if (::write(fds[1], &s, sizeof s) != static_cast<ssize_t>(sizeof s)) _exit(6);
        }
      }
    }
    ::close(fds[1]);
    // The child's first report (or the end of the pipe, should it fail), then a random moment
    // of its writing.
    std::uint64_t synced = 0, got;
    if (::read(fds[0], &got, sizeof got) == static_cast<ssize_t>(sizeof got)) synced = got;
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 20000));
    ::kill(pid, SIGKILL);
    int st = 0;
    ::waitpid(pid, &st, 0);
    ASSERT_TRUE(WIFSIGNALED(st)) << "the writer exited on its own with " << WEXITSTATUS(st);
    while (::read(fds[0], &got, sizeof got) == static_cast<ssize_t>(sizeof got)) synced = got;
    ::close(fds[0]);
    ASSERT_GT(synced, 0u) << "the writer never reported a flush";
    // A restart: resume in this process, check everything, close cleanly for the next child.
    WriterOptions o = options(d.path(), 4);
    o.resume = true;
    o.resume_segment = last_segment();
    auto w = RecordingWriter::open(o);
    ASSERT_TRUE(w.ok()) << w.status();
    ++resumes;
    ASSERT_TRUE((*w)->close().ok());
    const ReadBack rb = read_all(d.path(), 4);
    ASSERT_EQ(rb.invalid, "");
    ASSERT_TRUE(rb.frames_intact);
    // Everything every child reported synced is there (sequences 1 .. synced, each once, in
    // order); anything after it came from a write that was not yet reported.
    ASSERT_GE(rb.sequences.size(), synced);
    for (std::uint64_t i = 0; i < rb.sequences.size(); ++i) ASSERT_EQ(rb.sequences[i], i + 1);
    ++checked;
    next = rb.sequences.size() + 1;
  }
  EXPECT_EQ(resumes, 20u);
  EXPECT_EQ(checked, 20u);
}

}  // namespace
