// What the live mode sends besides ITCH: notices (a gap that cannot be recovered, a stale or
// fresh feed, a new session, a conflicting copy) and the receive time of each batch. Both
// ride in ordinary Pollux messages whose first byte tells them from the replay's payloads
// (feed_publisher.h): a BinaryFILE chunk starts with 0 (a length prefix's high byte), a bare
// ITCH message with its type letter, a live chunk with kLiveChunkMarker, a notice with
// kNoticeMarker.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>

#include "itch/endian.h"
#include "itch/moldudp64.h"

namespace pollux::feed {

// A live chunk: the marker, the receive time (Pollux Clock ns, little-endian) of the oldest
// packet behind it, then a BinaryFILE chunk.
inline constexpr std::uint8_t kLiveChunkMarker = 0xFE;
inline constexpr std::size_t kLiveChunkHeader = 9;
inline constexpr std::uint8_t kNoticeMarker = 0xFF;

// In-band events of the live mode, delivered between messages, on every partition.
struct Notice {
  // kConflict: a later copy of messages already delivered (or buffered) differs from the
  // copy that won: `from` is the first such sequence, `count` how many in that packet.
  enum Kind : std::uint8_t { kGap = 1, kStale = 2, kFresh = 3, kSession = 4, kConflict = 5 };
  Kind kind = kGap;
  itch::mold::Session session;
  std::uint64_t from = 0;   // kGap: first sequence number lost; kConflict: first contradicted
  std::uint64_t count = 0;  // kGap: messages lost; kConflict: messages contradicted
};

// Wire layout of a notice (big-endian integers, like MoldUDP64).
struct NoticeWire {
  std::uint8_t marker;  // kNoticeMarker
  std::uint8_t kind;
  char session[itch::mold::kSessionSize];
  std::uint8_t from[8];
  std::uint8_t count[8];
};
static_assert(std::is_trivially_copyable_v<NoticeWire> && alignof(NoticeWire) == 1);
static_assert(sizeof(NoticeWire) == 28 && offsetof(NoticeWire, session) == 2 && offsetof(NoticeWire, from) == 12 &&
              offsetof(NoticeWire, count) == 20);

inline void encode_notice(const Notice& n, std::uint8_t* out) noexcept {
  out[0] = kNoticeMarker;
  out[1] = n.kind;
  std::memcpy(out + offsetof(NoticeWire, session), n.session.bytes.data(), itch::mold::kSessionSize);
  itch::store_be64(out + offsetof(NoticeWire, from), n.from);
  itch::store_be64(out + offsetof(NoticeWire, count), n.count);
}

// False unless `p` is a whole notice of a known kind.
[[nodiscard]] inline bool decode_notice(std::span<const std::uint8_t> p, Notice* n) noexcept {
  if (p.size() != sizeof(NoticeWire) || p[0] != kNoticeMarker || p[1] < Notice::kGap || p[1] > Notice::kConflict) {
    return false;
  }
  n->kind = static_cast<Notice::Kind>(p[1]);
  n->session = itch::mold::Session::from_wire(reinterpret_cast<const char*>(p.data() + offsetof(NoticeWire, session)));
  n->from = itch::load_be64(p.data() + offsetof(NoticeWire, from));
  n->count = itch::load_be64(p.data() + offsetof(NoticeWire, count));
  return true;
}

}  // namespace pollux::feed
