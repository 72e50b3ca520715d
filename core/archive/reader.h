// Reading one recording in order, across its segments (docs/ARCHIVE.md): what replay and late
// join read. Every record is checked (SegmentReader); a frame also passes core::check_frame and
// must belong to the recording's stream.
//
// A recording a recorder still writes is followed: at the end of the written data of the last
// segment, next() says kEnd and the caller asks again later; when the recorder has rolled to the
// next segment, the reader moves on. A record that fails its checks in a segment the recorder has
// left (a later segment exists, or the recording is no longer being written) is damage: kInvalid,
// and error() names the file and offset. In the segment being written the same bytes may be a
// write in flight, so there it is kEnd until the segment is left.
//
// Positions: a sequence (the first frame whose sequence is at least it) or a publish time (the
// first frame published at or after it, on the publisher's core::Clock). Sealed segments' index
// files let seek() skip whole segments and jump inside one, when their sequences and times only
// rise (a recording of one publisher session); otherwise it scans.
//
// next(): no allocation on the way through a segment (records larger than the read window
// excepted, once per size); a segment is read with pread in 256 KiB windows, and opening the
// next one is a few syscalls. A record's bytes stay valid until loads() has gone up by 2 since
// it was returned and across one move to the next segment (the one left stays open until the
// reader leaves the next one): a caller may hold the records of a batch that ends when loads()
// or segment() changes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/archive/catalog.h"
#include "core/archive/segment.h"

namespace pollux::core::archive {

class RecordingReader {
 public:
  // Recording `id` of the catalog in `dir`, positioned at its first record. Errors name the
  // directory, the id, or the segment file that cannot be opened. A recording being written
  // whose first segment is not there yet (the recorder has just entered it in the catalog) opens
  // as an empty live recording.
  static absl::StatusOr<RecordingReader> open(const std::string& dir, std::uint64_t id);

  RecordingReader(RecordingReader&&) noexcept = default;
  RecordingReader& operator=(RecordingReader&&) noexcept = default;

  // Moves to the first frame whose sequence is >= `sequence` (kSequence) or whose publish time is
  // >= `time_ns` (kTime). Records before it are skipped, not returned. When a live recording has
  // none yet, the reader stays at its end and next() goes on skipping what comes before the
  // position as it is written. A damaged record met on the way is the error (file and offset).
  enum class Key : std::uint8_t { kSequence, kTime };
  absl::Status seek(Key key, std::uint64_t value);

  enum class Next : std::uint8_t { kRecord, kEnd, kInvalid };
  // The next checked record (a frame or a marker); kEnd: nothing more has been written yet (a
  // live recording) or ever (a finished one: finished() says which); kInvalid: error().
  Next next(SegmentReader::Record* out) noexcept;

  // A record's body stays valid until loads() has gone up by 2 since next() returned it (the
  // current segment's reads, SegmentReader::Record), and across one move to the next segment
  // (the segment left last is kept open).
  std::uint64_t loads() const noexcept { return seg_ ? seg_->loads() : 0; }

  // Whether the recording can grow (its catalog state is "recording"): read again after kEnd.
  // Refreshed from the catalog at most once per `refresh_ns` by next() at kEnd.
  bool live() const noexcept { return live_; }
  // kEnd and the recording is not being written: nothing more will come.
  bool finished() const noexcept { return at_end_ && !live_; }
  // The damage next() returned kInvalid for: "<file> at offset N: why".
  const absl::Status& error() const noexcept { return error_; }

  const RecordingInfo& info() const noexcept { return info_; }
  std::uint32_t segment() const noexcept { return segment_; }
  std::uint64_t offset() const noexcept { return seg_ ? seg_->offset() : 0; }
  const std::string& path() const noexcept;
  // CLOCK_REALTIME minus core::Clock, as the first segment's creation recorded them: converts a
  // wall-clock time to the clock frames are stamped with (exact when the publisher and the
  // recorder share a host; across hosts their clocks are not comparable).
  std::int64_t wall_minus_clock_ns() const noexcept { return wall_minus_clock_ns_; }

 private:
  RecordingReader() = default;
  absl::Status open_segment(std::uint32_t index);
  bool next_segment_exists() const;
  // next_segment_exists(), asked again at the same written end (at_end_) at most once per
  // kRollCheckNs (false in between): a follower there asks on every poll, each answer a stat().
  bool next_segment_appeared() noexcept;
  // A live recording whose first segment the recorder has not created yet (first_pending_):
  // opens it once it is there; false until then.
  bool open_first() noexcept;
  bool first_pending_ = false;
  // Whether to look at the files again now: a first look always, a repeated one at most once per
  // kRollCheckNs (each look is a stat()).
  bool look_due(bool first_look) noexcept;
  std::int64_t next_roll_check_ns_ = 0;
  absl::Status invalid_at_current();
  void refresh_live() noexcept;

  std::string dir_;
  RecordingInfo info_;
  std::optional<SegmentReader> seg_;
  std::optional<SegmentReader> prev_;  // the segment left last, its read windows kept
  std::uint32_t segment_ = 0;
  bool live_ = false;
  bool at_end_ = false;
  std::int64_t next_refresh_ns_ = 0;
  std::int64_t wall_minus_clock_ns_ = 0;
  absl::Status error_;
  // A seek() that reached the end before its position: next() skips records until a frame at or
  // past it.
  bool seeking_ = false;
  Key seek_key_ = Key::kSequence;
  std::uint64_t seek_value_ = 0;
  bool before_target(const SegmentReader::Record& rec) const noexcept;
  Next next_record(SegmentReader::Record* out) noexcept;
};

}  // namespace pollux::core::archive
