// Reading and writing one recording's segment files (format.h, docs/ARCHIVE.md).
//
// SegmentReader validates every record it hands out (bounds, magic, length, crc32c) and stops at
// the first one that fails: the end of the written data, a record being written (a live
// segment), or damage - it says which and where. Bytes in a segment are treated as hostile:
// another process wrote them, and a disk may have torn them.
//
// RecordingWriter appends records to a recording's segments through a write buffer (one pwrite
// per flush), preallocates each segment (posix_fallocate), rolls to the next when one is full,
// writes each sealed segment's sparse index, and syncs per its FsyncPolicy. Opened on a
// recording that already has segments, it resumes: the last segment's torn tail is zeroed and
// a kResume marker written. An I/O error (a full disk) stops it: append() returns false from
// then on and error() says why; nothing is thrown, nothing blocks longer than the write.
//
// Data path (append, append_gap, flush): no allocation, no exception; one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/archive/format.h"

namespace pollux::core::archive {

// "<dir>/<id:016x>-<index:08>.seg" and its index "....idx".
std::string segment_path(const std::string& dir, std::uint64_t recording_id, std::uint32_t index);
std::string index_path(const std::string& dir, std::uint64_t recording_id, std::uint32_t index);

class SegmentReader {
 public:
  // Opens `path` and checks its header (magic, version, crc, size). Errors name the file.
  static absl::StatusOr<SegmentReader> open(const std::string& path);
  SegmentReader(SegmentReader&& o) noexcept;
  SegmentReader& operator=(SegmentReader&& o) noexcept;
  SegmentReader(const SegmentReader&) = delete;
  SegmentReader& operator=(const SegmentReader&) = delete;
  ~SegmentReader();

  struct Record {
    // A FrameHeader or a Marker (is_marker), in the reader's read window: valid until loads()
    // has gone up by 2 since the record was returned (a load fills the one of the reader's two
    // windows that does not hold the record returned last), and across moves of the reader.
    const std::byte* body;
    std::uint32_t length;
    std::uint64_t offset;  // the record's offset in the segment
    bool is_marker;
  };
  enum class Next : std::uint8_t {
    kRecord,   // *out is the next record
    kEnd,      // no record here (zeros): the end of the written data, or of the segment
    kInvalid,  // a record that fails its checks starts here (offset(), why())
  };
  // The record at offset(), checked; advances past it. kEnd and kInvalid do not advance, so a
  // reader following a live segment calls again later (each such call reads the file once).
  Next next(Record* out) noexcept {
    if (__builtin_expect(ahead_head_ < ahead_count_, 1)) return pop(out);
    return next_slow(out);
  }
  // Where the next record is looked for.
  std::uint64_t offset() const noexcept { return pos_; }
  // Moves to `offset` (a record boundary from an index entry or an earlier offset(); checked
  // by the next next()).
  void seek(std::uint64_t offset) noexcept {
    pos_ = offset;
    ahead_head_ = ahead_count_ = 0;
    end_probe_at_ = ~std::uint64_t{0};
  }
  // Why the last next() returned kInvalid ("crc mismatch", "length 12345678 beyond the
  // segment", ...).
  const char* why() const noexcept { return why_; }
  const SegmentHeader& header() const noexcept { return header_; }
  const std::string& path() const noexcept { return path_; }
  std::uint64_t size() const noexcept { return size_; }
  // Reads of the file into a window so far (see Record::body).
  std::uint64_t loads() const noexcept { return loads_; }

 private:
  SegmentReader() = default;
  // next() when no record checked ahead is left: checks the next ones (reading the file when the
  // window has none).
  Next next_slow(Record* out) noexcept;
  // Reads the file from offset() into a window: kWindowBytes, or kProbeBytes where the last
  // next() found the end, and at least `need` bytes. False on a read error (why_).
  bool load(std::uint64_t need) noexcept;
  // Hands out the next record checked ahead (one is there).
  Next pop(Record* out) noexcept {
    *out = ahead_[ahead_head_++];
    pos_ = out->offset + record_size(out->length);
    last_handed_ = cur_;
    return Next::kRecord;
  }

  // The segment is read with pread into two windows used in turn, not mapped: the records are
  // checked in memory that stays in cache and in the page tables, where a mapping of the file
  // takes a page fault per 4 KiB on first touch - on a virtual machine with shadow paging about
  // as much time as the records' checks (docs/BENCHMARKS.md, "Replay").
  static constexpr std::uint64_t kWindowBytes = 256 * 1024;
  static constexpr std::uint64_t kProbeBytes = 4096;
  struct Window {
    std::unique_ptr<std::byte[], void (*)(std::byte*)> buf{nullptr, nullptr};  // as RecordingWriter's buffer
    std::uint64_t capacity = 0;
    std::uint64_t start = 0, len = 0;  // the file's bytes [start, start + len) are in buf
  };
  std::string path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
  std::uint64_t pos_ = kSegmentHeaderSize;
  SegmentHeader header_{};
  const char* why_ = "";
  Window win_[2];
  int cur_ = 0;           // the window records are scanned in
  int last_handed_ = -1;  // the window of the record next() returned last
  std::uint64_t loads_ = 0;
  std::uint64_t end_probe_at_ = ~std::uint64_t{0};  // where next() last returned kEnd
  // Records checked ahead of next(), [ahead_head_, ahead_count_): their crcs are computed
  // together, several times faster than one record at a time. A record stays valid once written
  // (a writer only appends), so checking it early changes nothing.
  static constexpr int kAhead = 16;
  Record ahead_[kAhead];
  int ahead_head_ = 0, ahead_count_ = 0;
};

// Checks one record at `offset` of a segment's bytes [data, data + size): kRecord with *out, kEnd
// or kInvalid with *why. What the fuzz harness runs; SegmentReader::next() runs the same checks
// (check_records) over its read window.
SegmentReader::Next check_record(const std::byte* data, std::uint64_t size, std::uint64_t offset,
                                 SegmentReader::Record* out, const char** why) noexcept;

// Checks up to `max` consecutive records from `offset` as check_record does, the crcs of several
// together (record_crcs): how many, from the first, are kRecord, in out[0..n). The record that
// ends the run (the end of the data, or one that fails) is left for check_record to report.
int check_records(const std::byte* data, std::uint64_t size, std::uint64_t offset, SegmentReader::Record* out,
                  int max) noexcept;

enum class FsyncPolicy : std::uint8_t {
  kNone,      // the kernel writes back when it likes: a power failure loses what it had not
  kInterval,  // fdatasync at the first flush after fsync_interval_ns: loses at most that much
  kEvery,     // fdatasync after every flush that wrote: loses only the flush in flight
};

struct WriterOptions {
  std::string directory;
  std::uint64_t recording_id = 0;
  std::uint32_t stream_id = 0;
  std::uint64_t segment_size = kDefaultSegmentSize;
  FsyncPolicy fsync = FsyncPolicy::kNone;
  std::int64_t fsync_interval_ns = 1'000'000'000;
  // Write buffer: records are gathered here and written with one pwrite per flush (or when full).
  std::uint32_t buffer_bytes = 1u << 20;
  // Resume at segment `resume_segment` (the catalog's last one) instead of creating segment 0.
  bool resume = false;
  std::uint32_t resume_segment = 0;
};

// What a segment holds: its records' counts and the first and last frame's sequence and time.
struct SegmentTotals {
  std::uint64_t frames = 0, markers = 0, bytes = 0;
  std::uint64_t first_sequence = 0, last_sequence = 0;
  std::int64_t first_time_ns = 0, last_time_ns = 0;
};
static_assert(sizeof(SegmentTotals) == 56);

// A sealed segment's index file: its totals and sparse entries (checked: header, crc, entries in
// offset order).
struct SegmentIndex {
  SegmentTotals totals;
  std::vector<IndexEntry> entries;
};
absl::StatusOr<SegmentIndex> read_segment_index(const std::string& path);

// The totals of the valid records of `r` from its first record (it is left after the last valid
// one); with `index`, the sparse index rebuilt into it (up to its capacity).
SegmentTotals scan_totals(SegmentReader& r, std::vector<IndexEntry>* index);

// What a writer has done (plain integers: one thread).
struct WriterStats {
  std::uint64_t frames = 0;
  std::uint64_t markers = 0;
  std::uint64_t bytes = 0;  // record bytes written, headers and padding included
  std::uint64_t writes = 0;
  std::uint64_t syncs = 0;
  std::uint64_t segments = 0;                           // created (or resumed) this run
  std::uint64_t dropped = 0;                            // frames refused after an error stopped the writer
  std::uint64_t first_sequence = 0, last_sequence = 0;  // of the frames recorded (0: none yet)
  std::int64_t first_time_ns = 0, last_time_ns = 0;     // their publish times
  std::uint64_t torn_bytes = 0;                         // resume: the torn tail zeroed
  // Resume: what the recording held before this run (its earlier segments' index totals, and
  // the resumed segment's valid records).
  SegmentTotals prior;
};

class RecordingWriter {
 public:
  // Creates segment 0 (or resumes, see WriterOptions). Errors name the directory or file and
  // the cause (an unwritable directory, no space, an existing segment where a new one should go).
  static absl::StatusOr<std::unique_ptr<RecordingWriter>> open(const WriterOptions& options);
  ~RecordingWriter();
  RecordingWriter(const RecordingWriter&) = delete;
  RecordingWriter& operator=(const RecordingWriter&) = delete;

  // Appends `frame` (length bytes, FrameHeader first) verbatim. False when the writer has
  // stopped on an error (counted in dropped) or the frame is malformed (shorter than its
  // header, its length field not `length`, or larger than kMaxBodySize: refused, not counted).
  bool append(const void* frame, std::uint32_t length) noexcept;
  // Appends the frame made of `header` (its frame_length = sizeof(FrameHeader) + payload_len)
  // and `payload`, without assembling it first.
  bool append_frame(const FrameHeader& header, const void* payload, std::uint32_t payload_len) noexcept;
  // Appends a kGap marker.
  bool append_gap(std::uint32_t session_id, std::uint64_t from_seq, std::uint64_t to_seq) noexcept;
  // Writes what is buffered (one pwrite) and syncs per the policy at `now_ns` (core::Clock).
  bool flush(std::int64_t now_ns) noexcept;
  // Flushes, syncs and writes the open segment's index. The writer accepts nothing after.
  absl::Status close();

  // OK, or why the writer stopped (it accepts nothing more; what was written before stays).
  const absl::Status& error() const noexcept { return error_; }
  const WriterStats& stats() const noexcept { return stats_; }
  std::uint32_t segment_index() const noexcept { return segment_; }
  // Where the next record goes in the open segment (after what is buffered).
  std::uint64_t position() const noexcept { return file_pos_ + buf_len_; }

 private:
  RecordingWriter() = default;
  // Writes one record whose body is `a` then `b` (b may be empty).
  bool put(const void* a, std::uint32_t a_len, const void* b, std::uint32_t b_len, bool is_frame) noexcept;
  bool note_frame(const FrameHeader& h) noexcept;
  bool write_buffer() noexcept;
  bool roll() noexcept;
  bool fail(absl::Status s) noexcept;
  absl::Status create_segment(std::uint32_t index);
  absl::Status resume(std::uint32_t index);
  absl::Status write_index();

  WriterOptions o_;
  int fd_ = -1;
  std::uint32_t segment_ = 0;
  std::uint64_t file_pos_ = 0;  // where the buffer's bytes go in the segment
  // Written bytes from here on have not been handed to the kernel's writeback yet.
  static constexpr std::uint64_t kWritebackBytes = 8u << 20;
  std::uint64_t writeback_from_ = 0;
  std::unique_ptr<std::byte[], void (*)(std::byte*)> buf_{nullptr, nullptr};
  std::uint32_t buf_len_ = 0;
  std::vector<IndexEntry> index_;
  SegmentTotals seg_;                // the open segment's records (its index file's totals)
  std::uint64_t next_index_at_ = 0;  // record offset at which the next index entry is due
  std::int64_t next_sync_ns_ = 0;
  bool dirty_ = false;  // written since the last sync
  bool closed_ = false;
  absl::Status error_;
  WriterStats stats_;
};

// A segment's index sidecar's entries (read_segment_index without the totals).
absl::StatusOr<std::vector<IndexEntry>> read_index(const std::string& path);

}  // namespace pollux::core::archive
