// Wire frame header shared by every transport: the shm log stores frames in this layout and the
// network transports send the same bytes, so a frame can move between transports without
// re-encoding. Little-endian (all supported hosts are x86-64/aarch64 little-endian).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace pollux::core {

inline constexpr std::uint8_t kFrameMagic = 0xA7;     // first byte a reader checks
inline constexpr std::uint8_t kFrameVersion = 1;      // bump on any layout change
inline constexpr std::uint32_t kFrameAlignment = 32;  // frames start on 32-byte boundaries

// Frame flags (FrameHeader::flags).
enum FrameFlags : std::uint16_t {
  kFlagNone = 0,
  kFlagPadding = 1u << 0,     // filler up to the end of a ring; no payload for the application
  kFlagTraced = 1u << 1,      // a StageTrace block follows the header, before the payload
  kFlagHeartbeat = 1u << 2,   // liveness only (network transports), no payload
  kFlagEndOfStream = 1u << 3  // publisher closed the stream cleanly
};

// 32 bytes, naturally aligned fields, no padding: the layout is part of the wire protocol.
struct FrameHeader {
  std::uint32_t frame_length;  // header + optional trace block + payload, unaligned length
  std::uint8_t magic;          // kFrameMagic
  std::uint8_t version;        // kFrameVersion
  std::uint16_t flags;         // FrameFlags
  std::uint32_t stream_id;     // stream (topic) the frame belongs to
  std::uint32_t session_id;    // publisher incarnation; changes when a publisher restarts
  std::uint64_t sequence;      // per (stream, session), starts at 1, +1 per frame; 0 = empty slot
  std::int64_t timestamp_ns;   // publisher clock (core::Clock) when the message was offered
};
static_assert(sizeof(FrameHeader) == 32);
static_assert(std::is_trivially_copyable_v<FrameHeader>);
static_assert(offsetof(FrameHeader, frame_length) == 0);
static_assert(offsetof(FrameHeader, magic) == 4);
static_assert(offsetof(FrameHeader, version) == 5);
static_assert(offsetof(FrameHeader, flags) == 6);
static_assert(offsetof(FrameHeader, stream_id) == 8);
static_assert(offsetof(FrameHeader, session_id) == 12);
static_assert(offsetof(FrameHeader, sequence) == 16);
static_assert(offsetof(FrameHeader, timestamp_ns) == 24);

inline constexpr std::uint32_t kFrameHeaderSize = sizeof(FrameHeader);
// The StageTrace block of a traced frame (core/trace.h): 64 bytes after the header.
inline constexpr std::uint32_t kFrameTraceSize = 64;

constexpr std::uint64_t align_up(std::uint64_t v, std::uint64_t a) { return (v + a - 1) & ~(a - 1); }

// Shortest valid frame with these flags: the header, plus the trace block of a traced frame (a
// shorter one would make the payload length after the block wrap around).
constexpr std::uint32_t min_frame_length(std::uint16_t flags) noexcept {
  return kFrameHeaderSize + ((flags & kFlagTraced) != 0 ? kFrameTraceSize : 0u);
}

// ---- the frame writer -------------------------------------------------------------------------
// Every frame header is written here. Plain stores, inline: what writing the fields by hand
// costs. The sequence is not written: each writer stores it itself, last - a plain store, or in
// the shm log a release store that readers pair with an acquire load of the same word (the
// fields written here are then visible to a reader that saw the sequence).

// The fields a transport's writer owns when it takes over a frame (length, magic, version,
// stream, session); the flags and the timestamp stay the publisher's.
inline void write_frame_identity(FrameHeader* h, std::uint32_t frame_length, std::uint32_t stream_id,
                                 std::uint32_t session_id) noexcept {
  h->frame_length = frame_length;
  h->magic = kFrameMagic;
  h->version = kFrameVersion;
  h->stream_id = stream_id;
  h->session_id = session_id;
}

// Every field but the sequence.
inline void write_frame_header(FrameHeader* h, std::uint32_t frame_length, std::uint16_t flags, std::uint32_t stream_id,
                               std::uint32_t session_id, std::int64_t timestamp_ns) noexcept {
  write_frame_identity(h, frame_length, stream_id, session_id);
  h->flags = flags;
  h->timestamp_ns = timestamp_ns;
}

// ---- the frame validator ----------------------------------------------------------------------
// What a reader checks before it trusts a frame from another process or the network; a
// transport adds what only it knows (its stream and session, its largest frame, its alignment).
enum class FrameCheck : std::uint8_t {
  kOk,
  kShort,      // fewer bytes than a header
  kMagic,      // not kFrameMagic
  kVersion,    // not kFrameVersion
  kLength,     // frame_length below min_frame_length(flags)
  kTruncated,  // frame_length beyond the bytes there are
};

// `p` holds `avail` bytes (at least the header's alignment, 8). Inline: a handful of compares.
inline FrameCheck check_frame(const void* p, std::size_t avail) noexcept {
  if (avail < kFrameHeaderSize) return FrameCheck::kShort;
  const auto* h = static_cast<const FrameHeader*>(p);
  // One test of both bytes (a single 16-bit compare); which one is wrong only when one is.
  if (__builtin_expect(h->magic != kFrameMagic || h->version != kFrameVersion, 0)) {
    return h->magic != kFrameMagic ? FrameCheck::kMagic : FrameCheck::kVersion;
  }
  if (h->frame_length < min_frame_length(h->flags)) return FrameCheck::kLength;
  if (h->frame_length > avail) return FrameCheck::kTruncated;
  return FrameCheck::kOk;
}

inline const char* frame_check_name(FrameCheck c) noexcept {
  switch (c) {
    case FrameCheck::kOk:
      return "ok";
    case FrameCheck::kShort:
      return "shorter than a frame header";
    case FrameCheck::kMagic:
      return "bad magic";
    case FrameCheck::kVersion:
      return "unknown frame version";
    case FrameCheck::kLength:
      return "frame_length below the header (and trace block)";
    case FrameCheck::kTruncated:
      return "frame_length beyond the bytes received";
  }
  return "?";
}

}  // namespace pollux::core
