#include "core/archive/reader.h"

#include <sys/stat.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/clock.h"
#include "core/frame.h"
#include "core/process.h"

namespace pollux::core::archive {

namespace {

// How often a follower at the end of a live recording re-reads the catalog to learn that the
// recording stopped.
constexpr std::int64_t kRefreshNs = 100'000'000;
// How often a follower at the end of a live segment looks for the next one: what a segment roll
// can add to a follower's latency.
constexpr std::int64_t kRollCheckNs = 20'000;

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// Whether `key` orders the index's frames: totals and entries never go down, so a value beyond
// `last` is beyond every frame and an entry before a value has only earlier frames before it.
bool rising(const SegmentIndex& idx, RecordingReader::Key key) {
  const auto value = [key](std::uint64_t seq, std::int64_t t) {
    return key == RecordingReader::Key::kSequence ? seq : static_cast<std::uint64_t>(t) ^ (1ull << 63);
  };
  const std::uint64_t first = value(idx.totals.first_sequence, idx.totals.first_time_ns);
  const std::uint64_t last = value(idx.totals.last_sequence, idx.totals.last_time_ns);
  if (first > last) return false;
  std::uint64_t prev = first;
  for (const IndexEntry& e : idx.entries) {
    const std::uint64_t v = value(e.sequence, e.time_ns);
    if (v < prev || v > last) return false;
    prev = v;
  }
  return true;
}

}  // namespace

absl::StatusOr<RecordingReader> RecordingReader::open(const std::string& dir, std::uint64_t id) {
  absl::StatusOr<Catalog> cat = Catalog::load(dir);
  if (!cat.ok()) return cat.status();
  const RecordingInfo* info = cat->find(id);
  if (info == nullptr) {
    return absl::NotFoundError(absl::StrCat("recording ", id, " is not in the catalog of ", dir,
                                            " (`pollux-archive list --dir ", dir, "` shows the recordings there)"));
  }
  RecordingReader r;
  r.dir_ = dir;
  r.info_ = *info;
  r.live_ = info->state == RecordingState::kRecording;
  r.segment_ = info->first_segment;
  if (r.live_ && !file_exists(segment_path(dir, id, info->first_segment))) {
    // The recorder enters a recording in the catalog (which gives it its id) before it creates
    // its first segment: an empty live recording until the file is there. This host's clocks
    // stand in for the segment's, which the recorder on this host will take.
    r.first_pending_ = true;
    r.wall_minus_clock_ns_ = wall_clock_ns() - Clock::now_ns();
    return r;
  }
  if (absl::Status s = r.open_segment(info->first_segment); !s.ok()) return s;
  const SegmentHeader& h = r.seg_->header();
  r.wall_minus_clock_ns_ = h.created_ns - h.created_clock_ns;
  return r;
}

bool RecordingReader::look_due(bool first_look) noexcept {
  const std::int64_t now = Clock::now_ns();
  if (!first_look && now < next_roll_check_ns_) return false;
  next_roll_check_ns_ = now + kRollCheckNs;
  return true;
}

bool RecordingReader::open_first() noexcept {
  // Looked for at most once per kRollCheckNs; a file that does not open yet (its header still
  // being written) is looked at again, until the recording is no longer being written.
  if (!look_due(false)) return false;
  if (!file_exists(segment_path(dir_, info_.id, info_.first_segment))) return false;
  absl::Status s = open_segment(info_.first_segment);
  if (!s.ok()) {
    refresh_live();
    if (!live_) error_ = s;
    return false;
  }
  first_pending_ = false;
  return true;
}

const std::string& RecordingReader::path() const noexcept {
  static const std::string kNone;
  return seg_ ? seg_->path() : kNone;
}

absl::Status RecordingReader::open_segment(std::uint32_t index) {
  const std::string p = segment_path(dir_, info_.id, index);
  absl::StatusOr<SegmentReader> s = SegmentReader::open(p);
  if (!s.ok()) return s.status();
  if (s->header().recording_id != info_.id || s->header().segment_index != index ||
      s->header().stream_id != info_.stream_id) {
    return absl::DataLossError(absl::StrCat(p, ": its header names recording ", s->header().recording_id, " segment ",
                                            s->header().segment_index, " stream ", s->header().stream_id,
                                            ", not recording ", info_.id, " segment ", index, " stream ",
                                            info_.stream_id, " (a file copied or renamed into place)"));
  }
  prev_ = std::move(seg_);
  seg_.emplace(std::move(*s));
  segment_ = index;
  return absl::OkStatus();
}

bool RecordingReader::next_segment_exists() const { return file_exists(segment_path(dir_, info_.id, segment_ + 1)); }

bool RecordingReader::next_segment_appeared() noexcept {
  // The first time at a segment's end it looks at once (a sealed segment is followed by the
  // next without delay); asked again at the same end, at most once per kRollCheckNs.
  return look_due(!at_end_) && next_segment_exists();
}

absl::Status RecordingReader::invalid_at_current() {
  return absl::DataLossError(absl::StrCat(seg_->path(), " at offset ", seg_->offset(), ": ", seg_->why()));
}

void RecordingReader::refresh_live() noexcept {
  if (!live_) return;
  const std::int64_t now = Clock::now_ns();
  if (now < next_refresh_ns_) return;
  next_refresh_ns_ = now + kRefreshNs;
  absl::StatusOr<Catalog> cat = Catalog::load(dir_);
  if (!cat.ok()) return;  // being replaced, or damaged: keep following; the segments decide
  const RecordingInfo* info = cat->find(info_.id);
  if (info == nullptr || info->state != RecordingState::kRecording) live_ = false;
}

bool RecordingReader::before_target(const SegmentReader::Record& rec) const noexcept {
  if (rec.is_marker) return true;
  const auto* h = reinterpret_cast<const FrameHeader*>(rec.body);
  return seek_key_ == Key::kSequence ? h->sequence < seek_value_
                                     : h->timestamp_ns < static_cast<std::int64_t>(seek_value_);
}

RecordingReader::Next RecordingReader::next(SegmentReader::Record* out) noexcept {
  if (!seeking_) return next_record(out);
  // A position not reached yet: skip what lies before it (up to the written end, like seek()).
  for (;;) {
    const Next n = next_record(out);
    if (n != Next::kRecord) return n;
    if (!before_target(*out)) {
      seeking_ = false;
      return n;
    }
  }
}

RecordingReader::Next RecordingReader::next_record(SegmentReader::Record* out) noexcept {
  if (first_pending_ && !open_first()) {
    if (!error_.ok()) return Next::kInvalid;
    refresh_live();
    at_end_ = true;
    return Next::kEnd;
  }
  // Each pass either returns or moves to the next segment; a recording cannot have more
  // segments than it has index values, and each move opens an existing file.
  for (;;) {
    SegmentReader::Next n = seg_->next(out);
    if (n == SegmentReader::Next::kEnd || n == SegmentReader::Next::kInvalid) {
      // Left by its writer (a later segment, or the recording ended): what it wrote here is all
      // visible now, so one more read decides. Still being written: wait.
      refresh_live();
      const bool left = next_segment_appeared() || !live_;
      if (!left) {
        at_end_ = true;
        return Next::kEnd;
      }
      n = seg_->next(out);
      if (n == SegmentReader::Next::kInvalid) {
        error_ = invalid_at_current();
        return Next::kInvalid;
      }
      if (n == SegmentReader::Next::kEnd) {
        if (!next_segment_exists()) {
          at_end_ = true;
          return Next::kEnd;
        }
        if (absl::Status s = open_segment(segment_ + 1); !s.ok()) {
          error_ = s;
          return Next::kInvalid;
        }
        continue;
      }
    }
    if (!out->is_marker) {
      const FrameCheck c = check_frame(out->body, out->length);
      const char* why = nullptr;
      if (c != FrameCheck::kOk) {
        why = frame_check_name(c);
      } else if (reinterpret_cast<const FrameHeader*>(out->body)->stream_id != info_.stream_id) {
        why = "a frame of another stream";
      } else if ((reinterpret_cast<const FrameHeader*>(out->body)->flags & (kFlagPadding | kFlagHeartbeat)) != 0) {
        why = "a padding or heartbeat frame (never recorded)";
      }
      if (why != nullptr) {
        seg_->seek(out->offset);
        error_ = absl::DataLossError(absl::StrCat(seg_->path(), " at offset ", out->offset, ": ", why));
        return Next::kInvalid;
      }
    }
    at_end_ = false;
    return Next::kRecord;
  }
}

absl::Status RecordingReader::seek(Key key, std::uint64_t value) {
  if (first_pending_) {  // nothing written yet: skip to the position as it is
    seeking_ = true;
    seek_key_ = key;
    seek_value_ = value;
    return absl::OkStatus();
  }
  const bool by_seq = key == Key::kSequence;
  const auto before = [&](std::uint64_t seq, std::int64_t t) {
    return by_seq ? seq < value : t < static_cast<std::int64_t>(value);
  };
  // Whole sealed segments before the target, by their index files; then the last index entry
  // before it.
  while (next_segment_exists()) {
    absl::StatusOr<SegmentIndex> idx = read_segment_index(index_path(dir_, info_.id, segment_));
    if (!idx.ok() || !rising(*idx, key)) break;
    if (idx->totals.frames == 0 || before(idx->totals.last_sequence, idx->totals.last_time_ns)) {
      if (absl::Status s = open_segment(segment_ + 1); !s.ok()) return s;
      continue;
    }
    for (auto it = idx->entries.rbegin(); it != idx->entries.rend(); ++it) {
      if (before(it->sequence, it->time_ns)) {
        seg_->seek(it->offset);
        break;
      }
    }
    break;
  }
  seek_key_ = key;
  seek_value_ = value;
  seeking_ = false;
  SegmentReader::Record rec;
  for (;;) {
    switch (next_record(&rec)) {
      case Next::kEnd:
        seeking_ = true;  // next() goes on from here
        return absl::OkStatus();
      case Next::kInvalid:
        return error_;
      case Next::kRecord:
        break;
    }
    if (rec.is_marker) continue;
    const auto* h = reinterpret_cast<const FrameHeader*>(rec.body);
    if (!before(h->sequence, h->timestamp_ns)) {
      seg_->seek(rec.offset);  // next() returns it again
      return absl::OkStatus();
    }
  }
}

}  // namespace pollux::core::archive
