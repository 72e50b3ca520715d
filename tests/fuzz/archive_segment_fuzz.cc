// Fuzzes the record check of a recording's segments (core/archive/segment.h: check_record,
// what SegmentReader::next() runs on every record of a file another process wrote and a disk
// may have torn).
//
// The segment: a valid SegmentHeader at the start of its kSegmentHeaderSize bytes (zeros after
// the struct), then the record bytes, then maybe zeros, in a buffer of exactly that size (a
// read past the end is an ASan report). Input (formats.h, archive): u8 mode.
//  - raw (bit 0 clear): the record bytes are the rest of the input, walked from
//    kSegmentHeaderSize; with a seek (bits 1-2), also walked from an offset taken from the input
//    (near the header, any u64, or near the end).
//  - built (bit 0 set): up to 16 frames and markers described by the input, written as
//    format.h lays them out (RecordHeader {crc, length}, body, zero padding), then 0-3 zero
//    words; maybe one byte xored at a position the input picks.
//
// Invariants, on every check_record call:
//  - its answer is the format's (format.h), decided here from a copy of the bytes: kInvalid
//    for an offset below kSegmentHeaderSize or not 8-aligned; kEnd when no RecordHeader fits
//    or the header is all zeros; kRecord only for a length of 5..kMaxBodySize whose body lies
//    inside the segment, starts with kFrameMagic (length >= kFrameHeaderSize) or kMarkerMagic
//    (length == sizeof(Marker)), repeats the length in its first 4 bytes, and whose crc32c
//    (recomputed here: the 4-byte length, then the body) is the header's; kInvalid otherwise,
//    with a non-empty why;
//  - a kRecord names that offset, the body right after the header and its length, is_marker
//    per the magic; every byte of the body is read (inside the buffer);
//  - a walk advances by record_size(length), stays 8-aligned, and ends in kEnd or kInvalid;
//  - check_records (the batched check, crcs computed several at a time) returns the walk's
//    records, in runs of any size, each run ending where the walk's next record is not valid;
//    a walk from a seek offset that the first walk passed through yields the same records.
// Built segments, besides:
//  - unflipped: the walk returns every record written (offset, length, kind, body bytes) and
//    kEnd right after the last;
//  - flipped inside record i's header or body: records before i as written, then kInvalid at
//    record i - or kEnd when the flip zeroed the length field of a record whose crc is 0
//    (then the header reads as the end of the data);
//  - flipped inside a record's padding: the walk is unchanged (padding is not checked);
//  - flipped inside the zero word right after the last record: every record, then kInvalid
//    there; flipped further on: every record, then kEnd;
//  - every record the flip did not touch is accepted, as written, when checked at its offset.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <vector>

#include "core/archive/crc32c.h"
#include "core/archive/format.h"
#include "core/archive/segment.h"
#include "core/frame.h"
#include "tests/fuzz/formats.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

namespace core = pollux::core;
namespace ar = pollux::core::archive;
namespace fmt = pollux::fuzz::archive;
using pollux::fuzz::FuzzInput;
using Next = ar::SegmentReader::Next;

constexpr std::size_t kMaxBytes = 1 << 16;

const char* next_name(Next n) {
  switch (n) {
    case Next::kRecord:
      return "kRecord";
    case Next::kEnd:
      return "kEnd";
    case Next::kInvalid:
      return "kInvalid";
  }
  return "?";
}

// Exactly `n` bytes at an 8-aligned address: ASan reports a read of byte n.
class Segment {
 public:
  explicit Segment(const std::vector<std::byte>& bytes)
      : n_(bytes.size()), p_(static_cast<std::byte*>(::operator new (n_, std::align_val_t{8}))) {
    std::memcpy(p_, bytes.data(), n_);
  }
  ~Segment() { ::operator delete (p_, std::align_val_t{8}); }
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  const std::byte* data() const { return p_; }
  std::uint64_t size() const { return n_; }

 private:
  std::size_t n_;
  std::byte* p_;
};

// The segment's first kSegmentHeaderSize bytes: a valid header, zeros after it.
std::vector<std::byte> header_region(std::uint64_t segment_size) {
  ar::SegmentHeader h{};
  std::memcpy(h.magic, ar::kSegmentMagic, sizeof h.magic);
  h.version = ar::kSegmentVersion;
  h.recording_id = 0x1234;
  h.stream_id = 7;
  h.segment_size = segment_size;
  h.created_ns = 1'700'000'000'000'000'000;
  h.created_clock_ns = 1'000;
  h.header_crc = ar::crc32c(&h, sizeof h);  // computed with header_crc = 0
  std::vector<std::byte> b(ar::kSegmentHeaderSize);
  std::memcpy(b.data(), &h, sizeof h);
  return b;
}

std::uint32_t record_crc(std::uint32_t length, const std::byte* body) {
  return ar::crc32c(body, length, ar::crc32c(&length, sizeof length));
}

// The format's answer for a record at `off` (format.h), from a copy of the bytes.
Next reference(const std::byte* d, std::uint64_t n, std::uint64_t off) {
  if (off < ar::kSegmentHeaderSize || off % ar::kRecordAlign != 0) return Next::kInvalid;
  if (off > n || n - off < sizeof(ar::RecordHeader)) return Next::kEnd;
  ar::RecordHeader rh;
  std::memcpy(&rh, d + off, sizeof rh);
  if (rh.length == 0) return rh.crc == 0 ? Next::kEnd : Next::kInvalid;
  if (rh.length < 5 || rh.length > ar::kMaxBodySize || rh.length > n - off - sizeof rh) return Next::kInvalid;
  const std::byte* body = d + off + sizeof rh;
  std::uint32_t inner;
  std::memcpy(&inner, body, sizeof inner);
  const auto magic = static_cast<std::uint8_t>(body[4]);
  const bool frame_ok = magic == core::kFrameMagic && rh.length >= core::kFrameHeaderSize;
  const bool marker_ok = magic == ar::kMarkerMagic && rh.length == sizeof(ar::Marker);
  if (!frame_ok && !marker_ok) return Next::kInvalid;
  if (inner != rh.length || record_crc(rh.length, body) != rh.crc) return Next::kInvalid;
  return Next::kRecord;
}

struct Seen {
  std::uint64_t offset;
  std::uint32_t length;
  bool is_marker;
  bool operator==(const Seen&) const = default;
};

// One check_record call and its invariants.
Next check_one(const Segment& s, std::uint64_t off, ar::SegmentReader::Record* rec) {
  const std::byte* d = s.data();
  const std::uint64_t n = s.size();
  const char* why = "";
  *rec = ar::SegmentReader::Record{nullptr, 0, 0, false};
  const Next got = ar::check_record(d, n, off, rec, &why);
  const Next want = reference(d, n, off);
  FUZZ_CHECK(got == want, "check_record at %llu of %llu: %s, the format says %s (why: %s)",
             static_cast<unsigned long long>(off), static_cast<unsigned long long>(n), next_name(got), next_name(want),
             why != nullptr ? why : "(null)");
  if (got == Next::kInvalid) {
    FUZZ_CHECK(why != nullptr && why[0] != '\0', "kInvalid at %llu without a reason",
               static_cast<unsigned long long>(off));
  }
  if (got != Next::kRecord) return got;
  ar::RecordHeader rh;
  std::memcpy(&rh, d + off, sizeof rh);
  FUZZ_CHECK(rec->offset == off, "record at %llu says offset %llu", static_cast<unsigned long long>(off),
             static_cast<unsigned long long>(rec->offset));
  FUZZ_CHECK(rec->body == d + off + sizeof rh, "body at %td, expected %llu", rec->body - d,
             static_cast<unsigned long long>(off + sizeof rh));
  FUZZ_CHECK(rec->length == rh.length, "length %u, the header's %u", rec->length, rh.length);
  FUZZ_CHECK(rec->length >= 5 && rec->length <= ar::kMaxBodySize, "length %u out of range", rec->length);
  FUZZ_CHECK(off + sizeof rh + rec->length <= n, "body [%llu, +%u) beyond the segment's %llu bytes",
             static_cast<unsigned long long>(off + sizeof rh), rec->length, static_cast<unsigned long long>(n));
  std::uint32_t inner;
  std::memcpy(&inner, rec->body, sizeof inner);
  FUZZ_CHECK(inner == rec->length, "body length field %u, record length %u", inner, rec->length);
  const auto magic = static_cast<std::uint8_t>(rec->body[4]);
  FUZZ_CHECK(rec->is_marker == (magic == ar::kMarkerMagic), "is_marker %d with magic 0x%02x", rec->is_marker, magic);
  if (rec->is_marker) {
    FUZZ_CHECK(rec->length == sizeof(ar::Marker), "marker of length %u", rec->length);
  } else {
    FUZZ_CHECK(magic == core::kFrameMagic && rec->length >= core::kFrameHeaderSize,
               "frame record: magic 0x%02x length %u", magic, rec->length);
  }
  FUZZ_CHECK(record_crc(rec->length, rec->body) == rh.crc, "crc 0x%08x accepted, the body's is 0x%08x", rh.crc,
             record_crc(rec->length, rec->body));
  (void)pollux::fuzz::touch(rec->body, rec->length);
  return got;
}

struct Walk {
  std::vector<Seen> records;
  Next last;
  std::uint64_t end;  // where the last check was
};

Walk walk_single(const Segment& s, std::uint64_t from) {
  Walk w{{}, Next::kEnd, from};
  std::uint64_t off = from;
  ar::SegmentReader::Record rec{};
  for (;;) {
    const Next r = check_one(s, off, &rec);
    if (r != Next::kRecord) {
      w.last = r;
      w.end = off;
      return w;
    }
    w.records.push_back(Seen{off, rec.length, rec.is_marker});
    const std::uint64_t next = off + ar::record_size(rec.length);
    FUZZ_CHECK(next > off && next % ar::kRecordAlign == 0, "record at %llu (length %u) moves to %llu",
               static_cast<unsigned long long>(off), rec.length, static_cast<unsigned long long>(next));
    off = next;
  }
}

// check_records (the batched check SegmentReader::next runs) from `from`, in runs of at most
// `max`: the records of the single-record walk `w`, each run ending where a record is not valid.
void batches_agree(const Segment& s, std::uint64_t from, const Walk& w) {
  std::vector<ar::SegmentReader::Record> out(w.records.size() + 20);
  for (const int max : {1, 3, 16, 17, static_cast<int>(out.size())}) {
    std::uint64_t off = from;
    std::size_t i = 0;
    for (;;) {
      const int n = ar::check_records(s.data(), s.size(), off, out.data(), max);
      FUZZ_CHECK(n >= 0 && n <= max && i + static_cast<std::size_t>(n) <= w.records.size(),
                 "check_records(max %d) at %llu: %d records, %zu of the walk's %zu seen before", max,
                 static_cast<unsigned long long>(off), n, i, w.records.size());
      for (int k = 0; k < n; ++k, ++i) {
        const Seen got{out[k].offset, out[k].length, out[k].is_marker};
        FUZZ_CHECK(got == w.records[i] && out[k].body == s.data() + got.offset + sizeof(ar::RecordHeader),
                   "check_records(max %d): record %zu is {%llu, %u, %d}, the walk's {%llu, %u, %d}", max, i,
                   static_cast<unsigned long long>(got.offset), got.length, got.is_marker,
                   static_cast<unsigned long long>(w.records[i].offset), w.records[i].length, w.records[i].is_marker);
      }
      if (n == 0) break;
      off = out[n - 1].offset + ar::record_size(out[n - 1].length);
    }
    FUZZ_CHECK(i == w.records.size(), "check_records(max %d) from %llu: %zu records, the walk %zu", max,
               static_cast<unsigned long long>(from), i, w.records.size());
  }
}

Walk walk(const Segment& s, std::uint64_t from) {
  Walk w = walk_single(s, from);
  batches_agree(s, from, w);
  return w;
}

void raw_segment(std::uint8_t mode, FuzzInput& in) {
  const auto seek = static_cast<fmt::Seek>((mode >> 1) & 3);
  std::uint64_t seek_arg = 0;
  if (seek == fmt::kNearHeader) seek_arg = in.u16();
  if (seek == fmt::kRawOffset) seek_arg = in.u64();
  if (seek == fmt::kFromEnd) seek_arg = in.u8();
  const std::size_t trailing = static_cast<std::size_t>(mode >> 3) * 3;
  std::size_t got = 0;
  const std::uint8_t* rest = in.bytes(in.remaining(), &got);
  std::vector<std::byte> bytes = header_region(ar::kSegmentHeaderSize + got + trailing);
  const auto* r = reinterpret_cast<const std::byte*>(rest);
  bytes.insert(bytes.end(), r, r + got);
  bytes.resize(bytes.size() + trailing);
  const Segment s(bytes);

  const Walk first = walk(s, ar::kSegmentHeaderSize);
  FUZZ_TRACE("raw: %zu records, %s at %llu of %llu", first.records.size(), next_name(first.last),
             static_cast<unsigned long long>(first.end), static_cast<unsigned long long>(s.size()));
  if (seek == fmt::kNoSeek) return;
  std::uint64_t off = 0;
  switch (seek) {
    case fmt::kNearHeader:
      off = ar::kSegmentHeaderSize +
            static_cast<std::uint64_t>(static_cast<std::int64_t>(static_cast<std::int16_t>(seek_arg)));
      break;
    case fmt::kRawOffset:
      off = seek_arg;
      break;
    default:
      off = s.size() - std::min<std::uint64_t>(seek_arg, s.size());
      break;
  }
  FUZZ_TRACE("seek to %llu", static_cast<unsigned long long>(off));
  const Walk second = walk(s, off);
  // From a record boundary of the first walk: the rest of the first walk.
  const auto it =
      std::find_if(first.records.begin(), first.records.end(), [&](const Seen& x) { return x.offset == off; });
  if (it == first.records.end()) return;
  const std::vector<Seen> suffix(it, first.records.end());
  FUZZ_CHECK(second.records == suffix && second.last == first.last && second.end == first.end,
             "walk from record %td at %llu: %zu records then %s, the first walk had %zu then %s",
             it - first.records.begin(), static_cast<unsigned long long>(off), second.records.size(),
             next_name(second.last), suffix.size(), next_name(first.last));
}

// A record of the built segment: where it is, and where its body and padding end.
struct Built {
  Seen seen;
  std::uint32_t crc;
  std::uint64_t body_end() const { return seen.offset + sizeof(ar::RecordHeader) + seen.length; }
  std::uint64_t end() const { return seen.offset + ar::record_size(seen.length); }
};

void append_record(std::vector<std::byte>& seg, const std::vector<std::byte>& body, bool marker,
                   std::vector<Built>& built) {
  const auto length = static_cast<std::uint32_t>(body.size());
  const ar::RecordHeader rh{record_crc(length, body.data()), length};
  built.push_back(Built{Seen{seg.size(), length, marker}, rh.crc});
  const auto* h = reinterpret_cast<const std::byte*>(&rh);
  seg.insert(seg.end(), h, h + sizeof rh);
  seg.insert(seg.end(), body.begin(), body.end());
  seg.resize(built.back().end());  // zero padding
}

std::vector<std::byte> frame_body(FuzzInput& in) {
  const std::uint32_t length = core::kFrameHeaderSize + in.u16() % fmt::kMaxPayload;
  const std::uint16_t flags = in.u16();
  const std::uint32_t stream = in.u32();
  const std::uint32_t session = in.u32();
  const std::uint64_t sequence = in.u64();
  const auto ts = static_cast<std::int64_t>(in.u64());
  const std::uint8_t fill = in.u8();
  core::FrameHeader fh{};
  core::write_frame_header(&fh, length, flags, stream, session, ts);
  fh.sequence = sequence;
  std::vector<std::byte> body(length);
  std::memcpy(body.data(), &fh, sizeof fh);
  for (std::uint32_t i = sizeof fh; i < length; ++i) body[i] = static_cast<std::byte>(fill + i * 13);
  return body;
}

std::vector<std::byte> marker_body(FuzzInput& in) {
  ar::Marker m{};
  m.length = sizeof m;
  m.magic = ar::kMarkerMagic;
  m.version = ar::kMarkerVersion;
  m.kind = in.u16();
  m.stream_id = in.u32();
  m.session_id = in.u32();
  m.from_seq = in.u64();
  m.to_seq = in.u64();
  m.time_ns = static_cast<std::int64_t>(in.u64());
  m.count = in.u64();
  std::vector<std::byte> body(sizeof m);
  std::memcpy(body.data(), &m, sizeof m);
  return body;
}

void built_segment(std::uint8_t mode, FuzzInput& in) {
  const int count = 1 + ((mode >> 1) & 15);
  const bool flip = (mode & fmt::kFlip) != 0;
  const std::size_t zero_words = (mode >> 6) & 3;
  std::vector<std::byte> seg = header_region(0);
  std::vector<Built> built;
  for (int i = 0; i < count; ++i) {
    const bool marker = (in.u8() & 1) != 0;
    append_record(seg, marker ? marker_body(in) : frame_body(in), marker, built);
  }
  const std::uint64_t data_end = seg.size();
  seg.resize(seg.size() + zero_words * sizeof(ar::RecordHeader));
  const std::vector<std::byte> written = seg;  // before the flip
  std::uint64_t pos = 0;
  if (flip) {
    pos = ar::kSegmentHeaderSize + in.u32() % (seg.size() - ar::kSegmentHeaderSize);
    std::uint8_t x = in.u8();
    if (x == 0) x = 0xff;
    seg[pos] ^= static_cast<std::byte>(x);
  }
  // The segment header's size field: the bytes as built (the record check does not read it).
  const std::vector<std::byte> head = header_region(seg.size());
  std::copy(head.begin(), head.end(), seg.begin());
  const Segment s(seg);

  // What the walk must return: how many records, then what at which offset.
  std::size_t expect_records = built.size();
  Next expect_last = Next::kEnd;
  std::uint64_t expect_end = data_end;
  std::ptrdiff_t touched = -1;  // the record whose header or body the flip changed
  if (flip) {
    for (std::size_t i = 0; i < built.size(); ++i) {
      if (pos >= built[i].seen.offset && pos < built[i].body_end()) touched = static_cast<std::ptrdiff_t>(i);
    }
    if (touched >= 0) {
      const Built& b = built[static_cast<std::size_t>(touched)];
      expect_records = static_cast<std::size_t>(touched);
      expect_end = b.seen.offset;
      expect_last = Next::kInvalid;
      ar::RecordHeader rh;
      std::memcpy(&rh, s.data() + b.seen.offset, sizeof rh);
      if (rh.length == 0 && rh.crc == 0) expect_last = Next::kEnd;  // the flip zeroed the length of a crc-0 record
    } else if (pos >= data_end && pos < data_end + sizeof(ar::RecordHeader)) {
      expect_last = Next::kInvalid;  // the end's zero header is no longer zero
    }
  }
  FUZZ_TRACE("built: %zu records, %zu zero words, flip %d at %llu (record %td): expect %zu records, %s at %llu",
             built.size(), zero_words, flip, static_cast<unsigned long long>(pos), touched, expect_records,
             next_name(expect_last), static_cast<unsigned long long>(expect_end));

  const Walk w = walk(s, ar::kSegmentHeaderSize);
  FUZZ_CHECK(w.records.size() == expect_records && w.last == expect_last && w.end == expect_end,
             "walk: %zu records then %s at %llu; expected %zu then %s at %llu (flip %d at %llu)", w.records.size(),
             next_name(w.last), static_cast<unsigned long long>(w.end), expect_records, next_name(expect_last),
             static_cast<unsigned long long>(expect_end), flip, static_cast<unsigned long long>(pos));
  for (std::size_t i = 0; i < w.records.size(); ++i) {
    FUZZ_CHECK(w.records[i] == built[i].seen, "record %zu: at %llu length %u marker %d; written at %llu length %u", i,
               static_cast<unsigned long long>(w.records[i].offset), w.records[i].length, w.records[i].is_marker,
               static_cast<unsigned long long>(built[i].seen.offset), built[i].seen.length);
  }
  // Every record the flip left alone, checked at its own offset: accepted, as written.
  for (std::size_t i = 0; i < built.size(); ++i) {
    if (static_cast<std::ptrdiff_t>(i) == touched) continue;
    ar::SegmentReader::Record rec{};
    const Next r = check_one(s, built[i].seen.offset, &rec);
    FUZZ_CHECK(r == Next::kRecord && rec.length == built[i].seen.length && rec.is_marker == built[i].seen.is_marker,
               "untouched record %zu at %llu: %s", i, static_cast<unsigned long long>(built[i].seen.offset),
               next_name(r));
    const std::uint64_t body = built[i].seen.offset + sizeof(ar::RecordHeader);
    FUZZ_CHECK(std::memcmp(rec.body, written.data() + body, rec.length) == 0, "record %zu: body differs from written",
               i);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > kMaxBytes) return 0;
  FuzzInput in(data, size);
  const std::uint8_t mode = in.u8();
  if ((mode & fmt::kBuilt) == 0) {
    raw_segment(mode, in);
  } else {
    built_segment(mode, in);
  }
  return 0;
}
