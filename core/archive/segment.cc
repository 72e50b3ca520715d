#include "core/archive/segment.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/archive/crc32c.h"
#include "core/archive/io_error.h"
#include "core/clock.h"
#include "core/process.h"

namespace pollux::core::archive {
namespace {

std::uint32_t header_crc(SegmentHeader h) {
  h.header_crc = 0;
  return crc32c(&h, sizeof h);
}

// The record crc: the length field, then the body.
std::uint32_t record_crc(std::uint32_t length, const void* body) {
  return crc32c(body, length, crc32c(&length, sizeof length));
}

constexpr char kIndexMagic[8] = {'P', 'L', 'X', 'I', 'D', 'X', '0', '1'};
struct IndexFileHeader {
  char magic[8];
  std::uint32_t count;
  std::uint32_t crc;  // crc32c of `totals`, then of the entries
  SegmentTotals totals;
};
static_assert(sizeof(IndexFileHeader) == 16 + sizeof(SegmentTotals));

// pwrite of the whole range, retried on EINTR and short writes.
bool pwrite_all(int fd, const void* data, std::size_t n, std::uint64_t off, int* err) {
  const auto* p = static_cast<const unsigned char*>(data);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(off));
    if (w < 0) {
      if (errno == EINTR) continue;
      *err = errno;
      return false;
    }
    p += w;
    n -= static_cast<std::size_t>(w);
    off += static_cast<std::uint64_t>(w);
  }
  return true;
}

// pread of up to `n` bytes, retried on EINTR and short reads: the bytes read (fewer only at the
// end of the file), or -1 with errno.
ssize_t pread_all(int fd, void* data, std::size_t n, std::uint64_t off) {
  auto* p = static_cast<unsigned char*>(data);
  std::size_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, p + got, n - got, static_cast<off_t>(off + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  return static_cast<ssize_t>(got);
}

void free_aligned(std::byte* p) { std::free(p); }

// A marker of `kind` on `stream`, stamped now; the kind's own fields are the caller's.
Marker make_marker(MarkerKind kind, std::uint32_t stream_id) {
  Marker m{};
  m.length = sizeof m;
  m.magic = kMarkerMagic;
  m.version = kMarkerVersion;
  m.kind = static_cast<std::uint16_t>(kind);
  m.stream_id = stream_id;
  m.time_ns = wall_clock_ns();
  return m;
}

}  // namespace

std::string segment_path(const std::string& dir, std::uint64_t recording_id, std::uint32_t index) {
  return absl::StrFormat("%s/%016x-%08u.seg", dir, recording_id, index);
}

std::string index_path(const std::string& dir, std::uint64_t recording_id, std::uint32_t index) {
  return absl::StrFormat("%s/%016x-%08u.idx", dir, recording_id, index);
}

// ---- reading ----------------------------------------------------------------------------------

namespace {

// What check_shape found at an offset: a record's shape, the end, damage, or a record that runs
// past the bytes at hand (the window holds less than the segment).
enum class Shape : std::uint8_t { kRecord, kEnd, kInvalid, kNeedMore };

// Everything check_record checks but the crc, which it leaves in *crc for the caller. The
// segment is `size` bytes; its bytes [origin, origin + avail) are at `data` (origin 0 and avail
// `size`: the whole segment). kNeedMore sets *need to the bytes from `offset` the check needs.
Shape check_shape(const std::byte* data, std::uint64_t origin, std::uint64_t avail, std::uint64_t size,
                  std::uint64_t offset, SegmentReader::Record* out, std::uint32_t* crc, const char** why,
                  std::uint64_t* need) noexcept {
  if (offset < kSegmentHeaderSize || offset % kRecordAlign != 0) {
    *why = "offset is not a record boundary";
    return Shape::kInvalid;
  }
  // The segment is full (written so that offset + 8 cannot wrap: an offset from an index file
  // may be anything).
  if (offset > size || size - offset < sizeof(RecordHeader)) return Shape::kEnd;
  if (offset < origin || offset - origin > avail || avail - (offset - origin) < sizeof(RecordHeader)) {
    *need = sizeof(RecordHeader);
    return Shape::kNeedMore;
  }
  const std::byte* at = data + (offset - origin);
  RecordHeader rh;
  std::memcpy(&rh, at, sizeof rh);
  if (rh.length == 0) {
    if (rh.crc != 0) {
      *why = "a record of length 0 with a non-zero crc";
      return Shape::kInvalid;
    }
    return Shape::kEnd;
  }
  if (rh.length > kMaxBodySize || rh.length > size - offset - sizeof(RecordHeader)) {
    *why = "record length beyond the segment";
    return Shape::kInvalid;
  }
  // Both bodies start with a length and a magic byte: checked before the whole body is asked
  // for, so that only a record whose first bytes agree makes the reader read (or make room for)
  // a large body.
  if (rh.length < 5) {
    *why = "record shorter than any body";
    return Shape::kInvalid;
  }
  const std::uint64_t have = avail - (offset - origin) - sizeof(RecordHeader);
  if (have < 5) {
    *need = sizeof(RecordHeader) + 5;
    return Shape::kNeedMore;
  }
  const std::byte* body = at + sizeof(RecordHeader);
  std::uint32_t inner_length;
  std::memcpy(&inner_length, body, 4);
  const auto magic = static_cast<std::uint8_t>(body[4]);
  bool marker = false;
  if (magic == kFrameMagic) {
    if (rh.length < kFrameHeaderSize) {
      *why = "frame record shorter than a frame header";
      return Shape::kInvalid;
    }
  } else if (magic == kMarkerMagic) {
    if (rh.length != sizeof(Marker)) {
      *why = "marker record of the wrong length";
      return Shape::kInvalid;
    }
    marker = true;
  } else {
    *why = "record body with an unknown magic";
    return Shape::kInvalid;
  }
  if (inner_length != rh.length) {
    *why = "record length differs from its body's";
    return Shape::kInvalid;
  }
  if (have < rh.length) {
    *need = sizeof(RecordHeader) + rh.length;
    return Shape::kNeedMore;
  }
  *crc = rh.crc;
  *out = SegmentReader::Record{body, rh.length, offset, marker};
  return Shape::kRecord;
}

SegmentReader::Next next_of(Shape s) noexcept {
  return s == Shape::kEnd ? SegmentReader::Next::kEnd : SegmentReader::Next::kInvalid;
}

// Up to `max` consecutive valid records from `offset` in bytes held as check_shape's, into
// out[0..n): the shape of each record first (which finds where the next one starts), then their
// crcs together, in chunks. *stop and *why say what ended the run when it ended before `max`
// (kNeedMore with *need; kInvalid "crc mismatch" for a crc).
int scan_records(const std::byte* data, std::uint64_t origin, std::uint64_t avail, std::uint64_t size,
                 std::uint64_t offset, SegmentReader::Record* out, int max, Shape* stop, const char** why,
                 std::uint64_t* need) noexcept {
  constexpr int kChunk = 16;
  // The walk is a chain of dependent loads (each record's length says where the next one is),
  // so a line not in cache stalls it whole: ask for the lines kPrefetchAhead on, two per record
  // (every line, for records up to 128 bytes).
  constexpr std::uint64_t kPrefetchAhead = 1536;
  std::uint32_t want[kChunk], got[kChunk], lengths[kChunk];
  const std::byte* bodies[kChunk];
  int total = 0;
  *stop = Shape::kRecord;
  while (total < max) {
    const int want_n = std::min(kChunk, max - total);
    SegmentReader::Record* const chunk = out + total;
    int n = 0;
    for (; n < want_n; ++n) {
      // (Compared without a sum that could wrap: `offset` may be anything a caller seeks to.)
      if (offset >= origin && offset - origin < avail && avail - (offset - origin) > kPrefetchAhead + 64) {
        __builtin_prefetch(data + (offset - origin) + kPrefetchAhead);
        __builtin_prefetch(data + (offset - origin) + kPrefetchAhead + 64);
      }
      const Shape sh = check_shape(data, origin, avail, size, offset, &chunk[n], &want[n], why, need);
      if (sh != Shape::kRecord) {
        *stop = sh;
        break;
      }
      lengths[n] = chunk[n].length;
      bodies[n] = chunk[n].body;
      offset += record_size(chunk[n].length);
    }
    if (n > 0) record_crcs(lengths, bodies, n, got);
    int ok = 0;
    while (ok < n && got[ok] == want[ok]) ++ok;
    total += ok;
    if (ok < n) {
      *stop = Shape::kInvalid;
      *why = "crc mismatch";
      break;
    }
    if (n < want_n) break;
  }
  return total;
}

}  // namespace

SegmentReader::Next check_record(const std::byte* data, std::uint64_t size, std::uint64_t offset,
                                 SegmentReader::Record* out, const char** why) noexcept {
  SegmentReader::Record r;
  std::uint32_t crc = 0;
  std::uint64_t need = 0;
  const Shape sh = check_shape(data, 0, size, size, offset, &r, &crc, why, &need);
  if (sh != Shape::kRecord) return next_of(sh);
  if (record_crc(r.length, r.body) != crc) {
    *why = "crc mismatch";
    return SegmentReader::Next::kInvalid;
  }
  *out = r;
  return SegmentReader::Next::kRecord;
}

int check_records(const std::byte* data, std::uint64_t size, std::uint64_t offset, SegmentReader::Record* out,
                  int max) noexcept {
  Shape stop;
  const char* why = nullptr;
  std::uint64_t need = 0;
  return scan_records(data, 0, size, size, offset, out, max, &stop, &why, &need);
}

absl::StatusOr<SegmentReader> SegmentReader::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return io_error(errno, absl::StrCat("recording segment ", path));
  SegmentReader r;
  r.fd_ = fd;  // closed by r from here on
  r.path_ = path;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const int e = errno;
    return absl::FailedPreconditionError(absl::StrCat("recording segment ", path, ": not a regular file",
                                                      e ? absl::StrCat(" (", errno_text(e), ")") : ""));
  }
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size < kSegmentHeaderSize) {
    return absl::DataLossError(absl::StrCat("recording segment ", path, ": ", size, " bytes, shorter than its header"));
  }
  r.size_ = size;
  if (pread_all(fd, &r.header_, sizeof r.header_, 0) != static_cast<ssize_t>(sizeof r.header_)) {
    return io_error(errno, absl::StrCat("recording segment ", path, ": reading its header"));
  }
  const SegmentHeader& h = r.header_;
  if (std::memcmp(h.magic, kSegmentMagic, sizeof h.magic) != 0) {
    return absl::DataLossError(absl::StrCat("recording segment ", path, ": not a Pollux segment (bad magic)"));
  }
  if (h.version != kSegmentVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("recording segment ", path, ": version ", h.version, ", this build reads ", kSegmentVersion));
  }
  if (header_crc(h) != h.header_crc) {
    return absl::DataLossError(absl::StrCat("recording segment ", path, ": header crc mismatch at offset 0"));
  }
  if (h.segment_size != size) {
    return absl::DataLossError(
        absl::StrCat("recording segment ", path, ": ", size, " bytes, its header says ", h.segment_size));
  }
  for (Window& w : r.win_) {
    w.buf = {static_cast<std::byte*>(std::aligned_alloc(64, kWindowBytes)), free_aligned};
    if (w.buf == nullptr) return absl::ResourceExhaustedError(absl::StrCat("recording segment ", path, ": no memory"));
    w.capacity = kWindowBytes;
  }
  return r;
}

SegmentReader::SegmentReader(SegmentReader&& o) noexcept { *this = std::move(o); }

SegmentReader& SegmentReader::operator=(SegmentReader&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(o.path_);
    fd_ = o.fd_;
    size_ = o.size_;
    pos_ = o.pos_;
    header_ = o.header_;
    why_ = o.why_;
    // The windows' buffers move with their records' pointers into them: those stay valid.
    for (int i = 0; i < 2; ++i) win_[i] = std::move(o.win_[i]);
    cur_ = o.cur_;
    last_handed_ = o.last_handed_;
    loads_ = o.loads_;
    end_probe_at_ = o.end_probe_at_;
    for (int i = o.ahead_head_; i < o.ahead_count_; ++i) ahead_[i] = o.ahead_[i];
    ahead_head_ = o.ahead_head_;
    ahead_count_ = o.ahead_count_;
    o.fd_ = -1;
    o.size_ = 0;
    o.ahead_head_ = o.ahead_count_ = 0;
  }
  return *this;
}

SegmentReader::~SegmentReader() {
  if (fd_ >= 0) ::close(fd_);
}

bool SegmentReader::load(std::uint64_t need) noexcept {
  // Into the buffer that does not hold the record handed out last, so the records handed out
  // since the previous load stay where they are.
  const int t = last_handed_ == 0 ? 1 : 0;
  Window& w = win_[t];
  // At a position that ended in kEnd before (a follower waiting at a live segment's end), a
  // small read: whether anything was written since. Otherwise a whole window.
  std::uint64_t want = pos_ == end_probe_at_ ? kProbeBytes : kWindowBytes;
  want = std::min(std::max(want, need), size_ - std::min(pos_, size_));
  if (want > w.capacity) {
    // A record larger than the window (bodies may be up to kMaxBodySize): the one allocation on
    // this path, once per size reached.
    std::byte* grown = static_cast<std::byte*>(std::aligned_alloc(64, align_up(want, 64)));
    if (grown == nullptr) {
      why_ = "no memory for a record larger than the read window";
      return false;
    }
    w.buf = {grown, free_aligned};
    w.capacity = align_up(want, 64);
  }
  // Fewer bytes than asked: the file is shorter than its header says, and what is there is
  // checked as such.
  const ssize_t got = pread_all(fd_, w.buf.get(), want, pos_);
  if (got < 0) {
    why_ = "the segment file could not be read";
    return false;
  }
  w.start = pos_;
  w.len = static_cast<std::uint64_t>(got);
  cur_ = t;
  ++loads_;
  return true;
}

SegmentReader::Next SegmentReader::next_slow(Record* out) noexcept {
  // A window read earlier may end before records written since: one fresh read decides.
  for (bool fresh = false;;) {
    const Window& w = win_[cur_];
    Shape stop = Shape::kNeedMore;
    const char* why = nullptr;
    std::uint64_t need = sizeof(RecordHeader);
    const int n = scan_records(w.buf.get(), w.start, w.len, size_, pos_, ahead_, kAhead, &stop, &why, &need);
    if (n > 0) {
      ahead_head_ = 0;
      ahead_count_ = n;
      return pop(out);
    }
    if (!fresh) {
      if (!load(need)) return Next::kInvalid;
      fresh = true;
      continue;
    }
    if (stop == Shape::kNeedMore) {
      why_ = "the segment file is shorter than its header says";
      return Next::kInvalid;
    }
    if (stop == Shape::kEnd) {
      end_probe_at_ = pos_;
      return Next::kEnd;
    }
    why_ = why;
    return Next::kInvalid;
  }
}

absl::StatusOr<SegmentIndex> read_segment_index(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return io_error(errno, absl::StrCat("segment index ", path));
  IndexFileHeader h{};
  SegmentIndex out;
  struct stat st {};
  bool ok =
      ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && static_cast<std::uint64_t>(st.st_size) >= sizeof h &&
      ::pread(fd, &h, sizeof h, 0) == static_cast<ssize_t>(sizeof h) &&
      std::memcmp(h.magic, kIndexMagic, sizeof h.magic) == 0 &&
      static_cast<std::uint64_t>(st.st_size) == sizeof h + static_cast<std::uint64_t>(h.count) * sizeof(IndexEntry);
  if (ok) {
    out.entries.resize(h.count);
    const std::size_t bytes = out.entries.size() * sizeof(IndexEntry);
    ok = ::pread(fd, out.entries.data(), bytes, sizeof h) == static_cast<ssize_t>(bytes) &&
         crc32c(out.entries.data(), bytes, crc32c(&h.totals, sizeof h.totals)) == h.crc;
  }
  ::close(fd);
  if (!ok) return absl::DataLossError(absl::StrCat("segment index ", path, ": damaged (header, size or crc)"));
  for (std::size_t i = 1; i < out.entries.size(); ++i) {
    if (out.entries[i].offset <= out.entries[i - 1].offset) {
      return absl::DataLossError(absl::StrCat("segment index ", path, ": entry ", i, " is out of offset order"));
    }
  }
  out.totals = h.totals;
  return out;
}

absl::StatusOr<std::vector<IndexEntry>> read_index(const std::string& path) {
  absl::StatusOr<SegmentIndex> i = read_segment_index(path);
  if (!i.ok()) return i.status();
  return std::move(i->entries);
}

// One more frame in `t`.
static void count_frame(SegmentTotals* t, const FrameHeader& f) noexcept {
  ++t->frames;
  if (t->first_sequence == 0) {
    t->first_sequence = f.sequence;
    t->first_time_ns = f.timestamp_ns;
  }
  t->last_sequence = f.sequence;
  t->last_time_ns = f.timestamp_ns;
}

SegmentTotals scan_totals(SegmentReader& r, std::vector<IndexEntry>* index) {
  SegmentTotals t;
  SegmentReader::Record rec;
  std::uint64_t next_index_at = kSegmentHeaderSize;
  r.seek(kSegmentHeaderSize);
  while (r.next(&rec) == SegmentReader::Next::kRecord) {
    t.bytes += record_size(rec.length);
    if (rec.is_marker) {
      ++t.markers;
      continue;
    }
    FrameHeader f;
    std::memcpy(&f, rec.body, sizeof f);
    count_frame(&t, f);
    if (index != nullptr && rec.offset >= next_index_at && index->size() < index->capacity()) {
      index->push_back(IndexEntry{f.sequence, f.timestamp_ns, rec.offset});
      next_index_at = rec.offset + kIndexEveryBytes;
    }
  }
  return t;
}

static void add_totals(SegmentTotals* to, const SegmentTotals& t) {
  to->frames += t.frames;
  to->markers += t.markers;
  to->bytes += t.bytes;
  if (t.first_sequence != 0 && to->first_sequence == 0) {
    to->first_sequence = t.first_sequence;
    to->first_time_ns = t.first_time_ns;
  }
  if (t.last_sequence != 0) {
    to->last_sequence = t.last_sequence;
    to->last_time_ns = t.last_time_ns;
  }
}

// ---- writing ----------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<RecordingWriter>> RecordingWriter::open(const WriterOptions& options) {
  if (options.segment_size < kMinSegmentSize || options.segment_size > kMaxSegmentSize ||
      options.segment_size % kMinSegmentSize != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "recording segment size %u: expected a multiple of 1 MiB from 1 MiB to 16 GiB", options.segment_size));
  }
  if (options.buffer_bytes < 64 * 1024 || options.buffer_bytes % 4096 != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "recording write buffer %u bytes: expected a multiple of 4 KiB, at least 64 KiB", options.buffer_bytes));
  }
  std::unique_ptr<RecordingWriter> w(new RecordingWriter());
  w->o_ = options;
  void* b = nullptr;
  if (posix_memalign(&b, 4096, options.buffer_bytes) != 0) {
    return absl::ResourceExhaustedError("recording write buffer: out of memory");
  }
  w->buf_ = std::unique_ptr<std::byte[], void (*)(std::byte*)>(static_cast<std::byte*>(b), free_aligned);
  w->index_.reserve(options.segment_size / kIndexEveryBytes + 1);
  absl::Status s = options.resume ? w->resume(options.resume_segment) : w->create_segment(0);
  if (!s.ok()) return s;
  return w;
}

RecordingWriter::~RecordingWriter() {
  if (!closed_) (void)close();
}

absl::Status RecordingWriter::create_segment(std::uint32_t index) {
  const std::string path = segment_path(o_.directory, o_.recording_id, index);
  // Made complete under a temporary name (preallocated, header written and synced), then
  // renamed into place without replacing anything: a crash mid-creation leaves at most a
  // ".tmp" file, never a segment without its header, and a segment already there (this
  // recording's earlier run, or another's) is never overwritten.
  const std::string tmp = path + ".tmp";
  ::unlink(tmp.c_str());  // a leftover of a creation that crashed
  const int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0640);
  if (fd < 0) {
    return io_error(errno, absl::StrCat("recording ", o_.recording_id, ": creating segment ", path,
                                        errno == EACCES || errno == EROFS ? " (is the directory writable?)" : ""));
  }
  const auto discard = [&](int e, const std::string& step) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return io_error(e, absl::StrCat("recording ", o_.recording_id, ": ", step, " segment ", path));
  };
  if (const int e = ::posix_fallocate(fd, 0, static_cast<off_t>(o_.segment_size)); e != 0) {
    return discard(e, absl::StrCat("preallocating ", o_.segment_size, " bytes for"));
  }
  SegmentHeader h{};
  std::memcpy(h.magic, kSegmentMagic, sizeof h.magic);
  h.version = kSegmentVersion;
  h.recording_id = o_.recording_id;
  h.stream_id = o_.stream_id;
  h.segment_index = index;
  h.segment_size = o_.segment_size;
  h.created_ns = wall_clock_ns();
  h.created_clock_ns = Clock::now_ns();
  h.header_crc = header_crc(h);
  int err = 0;
  if (!pwrite_all(fd, &h, sizeof h, 0, &err)) return discard(err, "writing the header of");
  if (::fdatasync(fd) != 0) return discard(errno, "syncing");
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) != 0) {
    return discard(errno, "naming");
  }
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
  segment_ = index;
  file_pos_ = kSegmentHeaderSize;
  writeback_from_ = kSegmentHeaderSize;
  next_index_at_ = kSegmentHeaderSize;
  index_.clear();
  seg_ = SegmentTotals{};
  dirty_ = true;
  ++stats_.segments;
  return absl::OkStatus();
}

absl::Status RecordingWriter::resume(std::uint32_t index) {
  const std::string path = segment_path(o_.directory, o_.recording_id, index);
  absl::StatusOr<SegmentReader> r = SegmentReader::open(path);
  if (!r.ok()) return r.status();
  if (r->header().recording_id != o_.recording_id || r->header().stream_id != o_.stream_id) {
    return absl::FailedPreconditionError(
        absl::StrFormat("recording %u: segment %s belongs to recording %u of stream %u", o_.recording_id, path,
                        r->header().recording_id, r->header().stream_id));
  }
  // What the sealed segments before it hold (their index files, else a scan), then this one's
  // valid records, with its index rebuilt from them, and where they end.
  for (std::uint32_t i = 0; i < index; ++i) {
    absl::StatusOr<SegmentIndex> si = read_segment_index(index_path(o_.directory, o_.recording_id, i));
    if (si.ok()) {
      add_totals(&stats_.prior, si->totals);
      continue;
    }
    absl::StatusOr<SegmentReader> sealed = SegmentReader::open(segment_path(o_.directory, o_.recording_id, i));
    if (sealed.ok()) add_totals(&stats_.prior, scan_totals(*sealed, nullptr));  // purged or damaged: skipped
  }
  index_.clear();
  seg_ = scan_totals(*r, &index_);
  next_index_at_ = index_.empty() ? kSegmentHeaderSize : index_.back().offset + kIndexEveryBytes;
  add_totals(&stats_.prior, seg_);
  const std::uint64_t end = r->offset();
  // Whatever follows the last valid record is a torn write (or zeros): find the last non-zero
  // byte and zero everything from `end`, so that no older record behind the tear can be read as
  // one written after the resume.
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return io_error(errno, absl::StrCat("recording ", o_.recording_id, ": reopening segment ", path));
  std::uint64_t last_nonzero = end;
  std::vector<std::byte> buf(1u << 20);
  for (std::uint64_t p = r->size(); p > end;) {
    const std::uint64_t chunk = std::min<std::uint64_t>(p - end, buf.size());
    const ssize_t got = pread_all(fd, buf.data(), chunk, p - chunk);
    if (got != static_cast<ssize_t>(chunk)) {
      const int e = got < 0 ? errno : EIO;
      ::close(fd);
      return io_error(e, absl::StrCat("recording ", o_.recording_id, ": reading segment ", path));
    }
    std::uint64_t k = chunk;
    while (k > 0 && buf[k - 1] == std::byte{0}) --k;
    if (k > 0) {
      last_nonzero = p - chunk + k;
      break;
    }
    p -= chunk;
  }
  if (last_nonzero > end) {
    // Punch the range out (reads as zeros), then allocate it again so a later write cannot fail
    // for space it had before.
    const auto len = static_cast<off_t>(last_nonzero - end);
    int e = 0;
    if (::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(end), len) != 0) {
      // A file system without hole punching: write the zeros.
      std::vector<std::byte> zeros(std::min<std::uint64_t>(last_nonzero - end, 1u << 20));
      for (std::uint64_t p = end; p < last_nonzero && e == 0; p += zeros.size()) {
        const std::size_t k = static_cast<std::size_t>(std::min<std::uint64_t>(zeros.size(), last_nonzero - p));
        if (!pwrite_all(fd, zeros.data(), k, p, &e)) break;
      }
    } else {
      e = ::posix_fallocate(fd, static_cast<off_t>(end), len);
    }
    if (e != 0 || ::fdatasync(fd) != 0) {
      const int err = e != 0 ? e : errno;
      ::close(fd);
      return io_error(err, absl::StrCat("recording ", o_.recording_id, ": zeroing the torn tail of ", path));
    }
    stats_.torn_bytes = last_nonzero - end;
  }
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
  segment_ = index;
  file_pos_ = end;
  writeback_from_ = end;
  ++stats_.segments;
  // The marker of the restart (in the next segment when this one is full).
  Marker m = make_marker(MarkerKind::kResume, o_.stream_id);
  m.count = stats_.torn_bytes;
  if (!put(&m, sizeof m, nullptr, 0, false) || !flush(Clock::now_ns())) return error_;
  ++stats_.markers;
  ++seg_.markers;
  return absl::OkStatus();
}

bool RecordingWriter::fail(absl::Status s) noexcept {
  if (error_.ok()) error_ = std::move(s);
  return false;
}

bool RecordingWriter::append(const void* frame, std::uint32_t length) noexcept {
  if (__builtin_expect(!error_.ok() || closed_, 0)) {
    ++stats_.dropped;
    return false;
  }
  if (__builtin_expect(length < kFrameHeaderSize || length > kMaxBodySize, 0)) return false;
  FrameHeader h;
  std::memcpy(&h, frame, sizeof h);
  if (__builtin_expect(h.frame_length != length || h.magic != kFrameMagic, 0)) return false;
  if (!put(frame, length, nullptr, 0, true)) return false;
  return note_frame(h);
}

bool RecordingWriter::append_frame(const FrameHeader& header, const void* payload, std::uint32_t payload_len) noexcept {
  if (__builtin_expect(!error_.ok() || closed_, 0)) {
    ++stats_.dropped;
    return false;
  }
  if (__builtin_expect(payload_len > kMaxBodySize - kFrameHeaderSize ||
                           header.frame_length != kFrameHeaderSize + payload_len || header.magic != kFrameMagic,
                       0)) {
    return false;
  }
  if (!put(&header, kFrameHeaderSize, payload, payload_len, true)) return false;
  return note_frame(header);
}

bool RecordingWriter::note_frame(const FrameHeader& h) noexcept {
  count_frame(&seg_, h);
  ++stats_.frames;
  if (stats_.first_sequence == 0) {
    stats_.first_sequence = h.sequence;
    stats_.first_time_ns = h.timestamp_ns;
  }
  stats_.last_sequence = h.sequence;
  stats_.last_time_ns = h.timestamp_ns;
  return true;
}

bool RecordingWriter::append_gap(std::uint32_t session_id, std::uint64_t from_seq, std::uint64_t to_seq) noexcept {
  if (!error_.ok() || closed_) return false;
  Marker m = make_marker(MarkerKind::kGap, o_.stream_id);
  m.session_id = session_id;
  m.from_seq = from_seq;
  m.to_seq = to_seq;
  m.count = to_seq >= from_seq ? to_seq - from_seq + 1 : 0;
  if (!put(&m, sizeof m, nullptr, 0, false)) return false;
  ++stats_.markers;
  ++seg_.markers;
  return true;
}

bool RecordingWriter::put(const void* a, std::uint32_t a_len, const void* b, std::uint32_t b_len,
                          bool is_frame) noexcept {
  const std::uint32_t length = a_len + b_len;
  const std::uint64_t need = record_size(length);
  // The segment's last 8 bytes stay zero: a reader always finds an end record or the end.
  if (position() + need > o_.segment_size - sizeof(RecordHeader)) {
    if (need > o_.segment_size - kSegmentHeaderSize - sizeof(RecordHeader)) {
      return fail(absl::InvalidArgumentError(
          absl::StrFormat("recording %u: a record of %u bytes does not fit a segment of %u bytes", o_.recording_id,
                          need, o_.segment_size)));
    }
    if (!roll()) return false;
  }
  const std::uint32_t crc = crc32c(b, b_len, crc32c(a, a_len, crc32c(&length, sizeof length)));
  const RecordHeader rh{crc, length};
  if (buf_len_ + need > o_.buffer_bytes) {
    if (!write_buffer()) return false;
    if (need > o_.buffer_bytes) {
      // Larger than the buffer: written directly (header, body, padding).
      int e = 0;
      const std::uint64_t at = file_pos_;
      const std::uint64_t pad = need - sizeof rh - length;
      const std::byte zeros[kRecordAlign] = {};
      if (!pwrite_all(fd_, &rh, sizeof rh, at, &e) || !pwrite_all(fd_, a, a_len, at + sizeof rh, &e) ||
          !pwrite_all(fd_, b, b_len, at + sizeof rh + a_len, &e) ||
          !pwrite_all(fd_, zeros, pad, at + sizeof rh + length, &e)) {
        return fail(io_error(e, absl::StrFormat("recording %u: writing segment %u", o_.recording_id, segment_)));
      }
      file_pos_ += need;
      stats_.bytes += need;
      seg_.bytes += need;
      dirty_ = true;
      return true;
    }
  }
  const std::uint64_t offset = position();
  if (is_frame && offset >= next_index_at_ && index_.size() < index_.capacity()) {
    FrameHeader h;
    std::memcpy(&h, a, sizeof h);
    index_.push_back(IndexEntry{h.sequence, h.timestamp_ns, offset});
    next_index_at_ = offset + kIndexEveryBytes;
  }
  std::byte* p = buf_.get() + buf_len_;
  std::memcpy(p, &rh, sizeof rh);
  std::memcpy(p + sizeof rh, a, a_len);
  if (b_len > 0) std::memcpy(p + sizeof rh + a_len, b, b_len);
  std::memset(p + sizeof rh + length, 0, need - sizeof rh - length);
  buf_len_ += static_cast<std::uint32_t>(need);
  stats_.bytes += need;
  seg_.bytes += need;
  return true;
}

bool RecordingWriter::write_buffer() noexcept {
  if (buf_len_ == 0) return true;
  int e = 0;
  if (!pwrite_all(fd_, buf_.get(), buf_len_, file_pos_, &e)) {
    // What did not go out is lost with the writer: the error says so, the frames count as dropped.
    return fail(io_error(e, absl::StrFormat("recording %u: writing segment %s", o_.recording_id,
                                            segment_path(o_.directory, o_.recording_id, segment_))));
  }
  file_pos_ += buf_len_;
  buf_len_ = 0;
  ++stats_.writes;
  dirty_ = true;
  // Start the kernel's writeback of every kWritebackBytes written (no wait): the disk works while
  // the recording goes on, instead of a whole segment's dirty pages at its seal or sync.
  if (file_pos_ - writeback_from_ >= kWritebackBytes) {
    (void)::sync_file_range(fd_, static_cast<off64_t>(writeback_from_),
                            static_cast<off64_t>(file_pos_ - writeback_from_), SYNC_FILE_RANGE_WRITE);
    writeback_from_ = file_pos_;
  }
  return true;
}

bool RecordingWriter::flush(std::int64_t now_ns) noexcept {
  if (!error_.ok()) return false;
  if (!write_buffer()) return false;
  const bool sync =
      dirty_ && (o_.fsync == FsyncPolicy::kEvery || (o_.fsync == FsyncPolicy::kInterval && now_ns >= next_sync_ns_));
  if (sync) {
    if (::fdatasync(fd_) != 0) {
      return fail(io_error(errno, absl::StrFormat("recording %u: fdatasync of segment %u", o_.recording_id, segment_)));
    }
    ++stats_.syncs;
    dirty_ = false;
    next_sync_ns_ = now_ns + o_.fsync_interval_ns;
  }
  return true;
}

bool RecordingWriter::roll() noexcept {
  if (!write_buffer()) return false;
  // The sealed segment: synced under interval and every (its successor is then created after it
  // is on disk; with none the kernel writes it back, started above) and indexed.
  if (o_.fsync != FsyncPolicy::kNone && ::fdatasync(fd_) != 0) {
    return fail(io_error(errno, absl::StrFormat("recording %u: fdatasync of segment %u", o_.recording_id, segment_)));
  }
  if (absl::Status s = write_index(); !s.ok()) return fail(std::move(s));
  if (absl::Status s = create_segment(segment_ + 1); !s.ok()) return fail(std::move(s));
  return true;
}

absl::Status RecordingWriter::write_index() {
  const std::string path = index_path(o_.directory, o_.recording_id, segment_);
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0640);
  if (fd < 0) return io_error(errno, absl::StrCat("segment index ", tmp));
  IndexFileHeader h{};
  std::memcpy(h.magic, kIndexMagic, sizeof h.magic);
  h.count = static_cast<std::uint32_t>(index_.size());
  h.totals = seg_;
  h.crc = crc32c(index_.data(), index_.size() * sizeof(IndexEntry), crc32c(&h.totals, sizeof h.totals));
  int e = 0;
  const bool ok = pwrite_all(fd, &h, sizeof h, 0, &e) &&
                  pwrite_all(fd, index_.data(), index_.size() * sizeof(IndexEntry), sizeof h, &e) &&
                  (::fdatasync(fd) == 0 || ((e = errno), false));
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = e != 0 ? e : errno;
    ::unlink(tmp.c_str());
    return io_error(err, absl::StrCat("segment index ", path));
  }
  return absl::OkStatus();
}

absl::Status RecordingWriter::close() {
  if (closed_) return error_;
  if (fd_ >= 0 && error_.ok()) {
    if (write_buffer() && ::fdatasync(fd_) != 0) fail(io_error(errno, "recording: fdatasync at close"));
    if (error_.ok()) {
      if (absl::Status s = write_index(); !s.ok()) fail(std::move(s));
    }
  }
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  closed_ = true;
  return error_;
}

}  // namespace pollux::core::archive
