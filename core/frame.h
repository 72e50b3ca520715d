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

constexpr std::uint64_t align_up(std::uint64_t v, std::uint64_t a) { return (v + a - 1) & ~(a - 1); }

}  // namespace pollux::core
