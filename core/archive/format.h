// The on-disk layout of a recording (docs/ARCHIVE.md). Little-endian, naturally aligned fields.
//
// A recording is a directory's series of segment files, "<id:016x>-<index:08>.seg", each
// preallocated to its segment size:
//
//   offset 0      SegmentHeader (kSegmentHeaderSize bytes reserved, the struct first)
//   offset 4096   records, back to back, each 8-byte aligned:
//                   RecordHeader {crc, length}   crc32c of the length field and the body
//                   body (length bytes)          a frame as the publisher wrote it (FrameHeader
//                                                first), or a Marker
//                   zeros up to the next multiple of 8
//   then          zeros: a RecordHeader whose length is 0 ends the written data
//
// A record is valid when its length fits the segment and a body, its body starts with a known
// magic (core::kFrameMagic or kMarkerMagic) whose length field equals the record's length, and
// its crc matches. The first invalid record ends what can be read: what a crash tore (the write
// that was in flight) is found there, and recovery zeroes from it to the end of the file before
// writing again, so nothing older behind it can ever be read as new.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/frame.h"

namespace pollux::core::archive {

inline constexpr char kSegmentMagic[8] = {'P', 'L', 'X', 'S', 'E', 'G', '0', '1'};
inline constexpr std::uint32_t kSegmentVersion = 1;
inline constexpr std::uint32_t kSegmentHeaderSize = 4096;
inline constexpr std::uint32_t kRecordAlign = 8;
// Segment sizes: a multiple of 1 MiB from 1 MiB to 16 GiB.
inline constexpr std::uint64_t kMinSegmentSize = 1ull << 20;
inline constexpr std::uint64_t kMaxSegmentSize = 16ull << 30;
inline constexpr std::uint64_t kDefaultSegmentSize = 128ull << 20;
// The largest record body: a frame of the largest stream log's largest message (log_size / 32
// with 4 GiB logs) is far smaller than any segment; bodies above this are damage.
inline constexpr std::uint32_t kMaxBodySize = 128u << 20;

struct SegmentHeader {
  char magic[8];               // kSegmentMagic
  std::uint32_t version;       // kSegmentVersion
  std::uint32_t header_crc;    // crc32c of this struct with header_crc = 0
  std::uint64_t recording_id;  // the catalog's id
  std::uint32_t stream_id;
  std::uint32_t segment_index;    // 0, 1, ... in recording order
  std::uint64_t segment_size;     // the file's size as created
  std::int64_t created_ns;        // CLOCK_REALTIME at creation
  std::int64_t created_clock_ns;  // core::Clock at the same moment (frames' timestamps are on it)
  std::uint64_t reserved[3];
};
static_assert(sizeof(SegmentHeader) == 80);
static_assert(std::is_trivially_copyable_v<SegmentHeader>);

struct RecordHeader {
  std::uint32_t crc;     // crc32c(&length, 4) continued over the body
  std::uint32_t length;  // body bytes, unpadded; 0 = no record here (end of written data)
};
static_assert(sizeof(RecordHeader) == kRecordAlign);

// A record that is not a frame. It starts like a FrameHeader (length, magic, version) so that
// one check of the body's first bytes tells the two apart.
inline constexpr std::uint8_t kMarkerMagic = 0xB5;
inline constexpr std::uint8_t kMarkerVersion = 1;
enum class MarkerKind : std::uint16_t {
  // The recorder lost frames from..to (inclusive) of session `session_id` (a lossy stream lapped
  // it, or the transport reported them lost): they are not in the recording.
  kGap = 1,
  // The recorder restarted (after a crash: `count` bytes of a torn tail were dropped at this
  // offset): frames of the sessions it recorded may be missing between what precedes this
  // marker and what follows it; each session's next frame tells from where.
  kResume = 2,
};
struct Marker {
  std::uint32_t length;  // sizeof(Marker)
  std::uint8_t magic;    // kMarkerMagic
  std::uint8_t version;  // kMarkerVersion
  std::uint16_t kind;    // MarkerKind
  std::uint32_t stream_id;
  std::uint32_t session_id;  // kGap: the session; kResume: 0
  std::uint64_t from_seq;    // kGap: first missing; kResume: 0
  std::uint64_t to_seq;      // kGap: last missing; kResume: 0
  std::int64_t time_ns;      // CLOCK_REALTIME when written
  std::uint64_t count;       // kGap: frames missing; kResume: torn bytes dropped
};
static_assert(sizeof(Marker) == 48);
static_assert(std::is_trivially_copyable_v<Marker>);

// Bytes a record with a `body`-byte body takes in a segment.
constexpr std::uint64_t record_size(std::uint64_t body) noexcept {
  return align_up(sizeof(RecordHeader) + body, kRecordAlign);
}

// The sparse index (a segment's "<...>.idx" sidecar, written when the segment is sealed; the
// open segment's is in memory, rebuilt by scanning after a restart): an entry every
// kIndexEveryBytes of records, for the first frame at or after that point.
inline constexpr std::uint64_t kIndexEveryBytes = 64 * 1024;
struct IndexEntry {
  std::uint64_t sequence;  // the frame's sequence
  std::int64_t time_ns;    // its publish time (FrameHeader::timestamp_ns)
  std::uint64_t offset;    // its record's offset in the segment
};
static_assert(sizeof(IndexEntry) == 24);

}  // namespace pollux::core::archive
