// Wire formats of the NAK-based reliability protocol (docs/PROTOCOL.md), shared by every
// datagram transport: UDP unicast/multicast today, RDMA UD multicast next. Nothing here knows
// about sockets or verbs.
//
// Publisher -> subscribers: datagrams that are a run of frames (core/frame.h FrameHeader +
// payload), each padded to kWireAlignment. Data frames carry (stream, session, sequence); a
// frame flagged kFlagHeartbeat carries no application payload but a HeartbeatBody, and its
// header sequence is the next sequence the publisher will send (so a lost tail shows as a gap).
// Subscribers -> publisher: one ControlHeader (status or NAK) + NakRange[range_count].
//
// The two are told apart by byte 4 (FrameHeader::magic vs ControlHeader::magic). Little-endian,
// like core/frame.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/frame.h"
#include "core/trace.h"

namespace pollux::transport::reliability {

// Frames in a datagram start on 8-byte boundaries: the widest header field is 8 bytes, so
// zero-copy views stay naturally aligned, and small market-data messages (20-60 bytes) waste
// at most 7 bytes each instead of up to 31 with the shm log's 32-byte alignment.
inline constexpr std::uint32_t kWireAlignment = 8;
inline constexpr std::uint32_t wire_size(std::uint32_t frame_length) {
  return (frame_length + kWireAlignment - 1) & ~(kWireAlignment - 1);
}

// ---- publisher -> subscribers ------------------------------------------------------------------

// Payload of a heartbeat frame (FrameHeader::flags has kFlagHeartbeat; kFlagEndOfStream too
// when the publisher closes). FrameHeader::sequence = the next sequence to be sent.
struct HeartbeatBody {
  std::uint64_t oldest;     // oldest sequence the publisher can still retransmit (== next when none)
  std::uint32_t receivers;  // subscribers the publisher currently hears from (diagnostics)
  std::uint32_t reserved;
};
static_assert(sizeof(HeartbeatBody) == 16);
static_assert(offsetof(HeartbeatBody, oldest) == 0);
static_assert(offsetof(HeartbeatBody, receivers) == 8);
inline constexpr std::uint32_t kHeartbeatFrameLength = core::kFrameHeaderSize + sizeof(HeartbeatBody);
static_assert(kHeartbeatFrameLength % kWireAlignment == 0);

// ---- subscribers -> publisher ------------------------------------------------------------------

inline constexpr std::uint8_t kControlMagic = 0xC7;  // FrameHeader uses 0xA7 at the same offset
inline constexpr std::uint8_t kControlVersion = 1;

enum ControlType : std::uint16_t {
  kControlStatus = 1,  // "I am here, I have everything below `position`" (no ranges)
  kControlNak = 2,     // please retransmit these ranges (also carries the status fields)
};

enum ControlFlags : std::uint16_t {
  kControlFlagNone = 0,
  kControlFlagEndSeen = 1u << 0,  // the subscriber saw end-of-stream and delivered everything before it
  kControlFlagLeaving = 1u << 1,  // the subscriber is closing: forget it now
};

struct ControlHeader {
  std::uint32_t length;  // whole message: sizeof(ControlHeader) + range_count * sizeof(NakRange)
  std::uint8_t magic;    // kControlMagic
  std::uint8_t version;  // kControlVersion
  std::uint16_t type;    // ControlType
  std::uint32_t stream_id;
  std::uint32_t session_id;   // the publisher session this is about
  std::uint64_t receiver_id;  // random per subscriber endpoint
  std::uint64_t position;     // every sequence below this was delivered or reported lost
  std::uint64_t highest;      // highest sequence seen + 1
  std::uint16_t range_count;  // NakRange entries that follow (kControlNak)
  std::uint16_t flags;        // ControlFlags
  std::uint32_t reserved;
};
static_assert(sizeof(ControlHeader) == 48);
static_assert(std::is_trivially_copyable_v<ControlHeader>);
static_assert(offsetof(ControlHeader, length) == 0);
static_assert(offsetof(ControlHeader, magic) == offsetof(core::FrameHeader, magic));
static_assert(offsetof(ControlHeader, version) == 5);
static_assert(offsetof(ControlHeader, type) == 6);
static_assert(offsetof(ControlHeader, stream_id) == 8);
static_assert(offsetof(ControlHeader, session_id) == 12);
static_assert(offsetof(ControlHeader, receiver_id) == 16);
static_assert(offsetof(ControlHeader, position) == 24);
static_assert(offsetof(ControlHeader, highest) == 32);
static_assert(offsetof(ControlHeader, range_count) == 40);
static_assert(offsetof(ControlHeader, flags) == 42);

struct NakRange {
  std::uint64_t from;   // first missing sequence
  std::uint64_t count;  // number of consecutive missing sequences
};
static_assert(sizeof(NakRange) == 16);

// A NAK fits in the smallest datagram any IPv4 path must carry (576 - 28 bytes).
inline constexpr std::uint32_t kMaxNakRanges = 30;
inline constexpr std::uint32_t kMaxControlLength = sizeof(ControlHeader) + kMaxNakRanges * sizeof(NakRange);
static_assert(kMaxControlLength <= 548);

// ---- parsing helpers ---------------------------------------------------------------------------

inline bool is_control(const std::byte* p, std::uint32_t len) noexcept {
  return len >= sizeof(ControlHeader) && static_cast<std::uint8_t>(p[4]) == kControlMagic;
}

// Validates a control message in place; returns null if malformed. `p` must be 8-aligned.
inline const ControlHeader* parse_control(const std::byte* p, std::uint32_t len) noexcept {
  if (!is_control(p, len)) return nullptr;
  const auto* h = reinterpret_cast<const ControlHeader*>(p);
  if (h->version != kControlVersion || h->length > len || h->range_count > kMaxNakRanges ||
      h->length != sizeof(ControlHeader) + h->range_count * sizeof(NakRange) ||
      (h->type != kControlStatus && h->type != kControlNak)) {
    return nullptr;
  }
  return h;
}

inline const NakRange* nak_ranges(const ControlHeader* h) noexcept {
  return reinterpret_cast<const NakRange*>(reinterpret_cast<const std::byte*>(h) + sizeof(ControlHeader));
}

// Walks the frames of a data datagram. next() returns null at the end or at the first frame
// that does not fit / does not look like a frame (the rest of the datagram is ignored and
// counted as malformed by the caller: a valid publisher never produces it).
class FrameCursor {
 public:
  FrameCursor(const std::byte* data, std::uint32_t len) noexcept : p_(data), end_(data + len) {}

  const core::FrameHeader* next() noexcept {
    // A traced frame must hold its trace block (core::check_frame): the subscriber takes the
    // payload after it. Bytes left that are too few for a header are malformed, none are the end.
    const core::FrameCheck c = core::check_frame(p_, static_cast<std::size_t>(end_ - p_));
    if (c != core::FrameCheck::kOk) {
      malformed_ = c != core::FrameCheck::kShort || p_ != end_;
      return nullptr;
    }
    const auto* h = reinterpret_cast<const core::FrameHeader*>(p_);
    const std::ptrdiff_t step = wire_size(h->frame_length);
    p_ = step > end_ - p_ ? end_ : p_ + step;
    return h;
  }
  bool malformed() const noexcept { return malformed_; }

 private:
  const std::byte* p_;
  const std::byte* end_;
  bool malformed_ = false;
};

inline HeartbeatBody heartbeat_body(const core::FrameHeader* h) noexcept {
  HeartbeatBody b{};
  if (h->frame_length >= kHeartbeatFrameLength) {
    std::memcpy(&b, reinterpret_cast<const std::byte*>(h) + core::kFrameHeaderSize, sizeof b);
  } else {
    b.oldest = 0;  // an old-style heartbeat without a body: nothing known about the window
  }
  return b;
}

// Opaque address of a peer as the transport knows it (sockaddr_in, or an RDMA AH + QPN): the
// reliability layer only stores and hands it back.
struct PeerAddress {
  alignas(8) std::byte bytes[32];
  std::uint32_t length = 0;
  std::uint32_t reserved = 0;
  bool operator==(const PeerAddress& o) const noexcept {
    if (length != o.length) return false;
    // A sockaddr_in (UDP: every datagram's source is compared): a fixed-size compare, inlined.
    if (length == 16) return std::memcmp(bytes, o.bytes, 16) == 0;
    return std::memcmp(bytes, o.bytes, length) == 0;
  }
};

// SplitMix64: the protocol's only randomness (NAK back-off jitter, receiver ids in tests, the
// fault injector), deterministic for a given seed.
struct SplitMix64 {
  std::uint64_t state;
  std::uint64_t next() noexcept {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, bound) (bound > 0); the modulo bias is irrelevant at these magnitudes.
  std::uint64_t below(std::uint64_t bound) noexcept { return next() % bound; }
  // Uniform in [0, 1).
  double uniform() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
};

}  // namespace pollux::transport::reliability
