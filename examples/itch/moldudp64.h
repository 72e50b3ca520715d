// MoldUDP64 1.00: NASDAQ's framing for ITCH over UDP. Encoder and validating decoder.
//
// Wire format (every integer big-endian, no alignment):
//   downstream packet = 20-byte header + MessageCount message blocks
//     header  = Session char[10] (space-padded) | SequenceNumber u64 | MessageCount u16
//     block   = Length u16 | Length bytes (one ITCH message, type byte first)
//   SequenceNumber is the number of the first message in the packet (sessions start at 1).
//   MessageCount 0      = heartbeat: no blocks, SequenceNumber is the next expected message.
//   MessageCount 0xFFFF = end of session: no blocks, SequenceNumber as for a heartbeat.
//   request packet (unicast to the re-request server) = Session[10] | SequenceNumber u64 |
//     RequestedMessageCount u16, exactly 20 bytes; the reply is ordinary downstream packets.
//
// Every byte is hostile. parse_packet() checks the header, then walks every block against the
// bytes actually present before anything is handed out, so a packet is accepted whole or
// not at all (a receiver that applied half of a damaged packet would lose its place in the
// sequence). Rules beyond the spec's layout, each with its own error:
//   - a block of length 0 is malformed: an ITCH message is never empty, and MoldUDP64 gives
//     an empty block no meaning (BinaryFILE's "0 = the type's size" does not apply here);
//   - a block of length 0xFFFF is fine when its 65535 bytes are there (they never are in a
//     UDP datagram of an Ethernet MTU, but the limit is the packet, not a guess);
//   - heartbeats and end-of-session packets carry no bytes after the header;
//   - SequenceNumber 0 is never valid, and SequenceNumber + MessageCount must not wrap;
//   - bytes after the last counted block are an error, not padding.
// The encoder never writes a packet the decoder would reject.
//
// Hot path: parse_packet(), PacketBuilder and the block iterator are inline, noexcept and never
// allocate; to_status() (error path only) builds the message text.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <span>
#include <string_view>
#include <type_traits>

#include "absl/status/status.h"
#include "itch/endian.h"

namespace pollux::itch::mold {

inline constexpr size_t kSessionSize = 10;
inline constexpr size_t kPacketHeaderSize = 20;
inline constexpr size_t kRequestSize = 20;
inline constexpr size_t kBlockLengthSize = 2;
inline constexpr uint16_t kHeartbeatCount = 0;
inline constexpr uint16_t kEndOfSessionCount = 0xFFFF;
// The largest MessageCount of a data packet (0xFFFF is the end-of-session marker).
inline constexpr uint16_t kMaxMessageCount = 0xFFFE;
inline constexpr size_t kMaxBlockSize = 0xFFFF;

// Wire layouts. Byte arrays only, so the structs have alignment 1 and no padding without a
// packed attribute; the asserts pin every offset to the spec. Fields are read and written
// with the endian.h helpers, never as integers, so no unaligned access is possible.
struct PacketHeaderWire {
  char session[kSessionSize];
  uint8_t sequence_number[8];
  uint8_t message_count[2];
};
struct RequestWire {
  char session[kSessionSize];
  uint8_t sequence_number[8];
  uint8_t requested_message_count[2];
};
static_assert(std::is_standard_layout_v<PacketHeaderWire> && std::is_trivially_copyable_v<PacketHeaderWire>);
static_assert(sizeof(PacketHeaderWire) == kPacketHeaderSize && alignof(PacketHeaderWire) == 1);
static_assert(offsetof(PacketHeaderWire, session) == 0);
static_assert(offsetof(PacketHeaderWire, sequence_number) == 10);
static_assert(offsetof(PacketHeaderWire, message_count) == 18);
static_assert(std::is_standard_layout_v<RequestWire> && std::is_trivially_copyable_v<RequestWire>);
static_assert(sizeof(RequestWire) == kRequestSize && alignof(RequestWire) == 1);
static_assert(offsetof(RequestWire, session) == 0);
static_assert(offsetof(RequestWire, sequence_number) == 10);
static_assert(offsetof(RequestWire, requested_message_count) == 18);

// The 10 session bytes exactly as on the wire (compared byte for byte, padding included).
struct Session {
  std::array<char, kSessionSize> bytes{' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};

  // Left-justified and space-padded, or cut to 10 characters (like encoder.h's text fields).
  [[nodiscard]] static constexpr Session from(std::string_view name) noexcept {
    Session s;
    for (size_t i = 0; i < kSessionSize && i < name.size(); ++i) s.bytes[i] = name[i];
    return s;
  }
  [[nodiscard]] static Session from_wire(const char* p) noexcept {
    Session s;
    std::memcpy(s.bytes.data(), p, kSessionSize);
    return s;
  }
  // All 10 bytes; trim_padding() (messages.h) strips the spaces.
  [[nodiscard]] constexpr std::string_view view() const noexcept { return {bytes.data(), bytes.size()}; }
  friend constexpr bool operator==(const Session&, const Session&) = default;
};

enum class Kind : uint8_t {
  kData,          // MessageCount 1..0xFFFE
  kHeartbeat,     // MessageCount 0
  kEndOfSession,  // MessageCount 0xFFFF
};

enum class Error : uint8_t {
  kNone = 0,
  kTooShort,         // fewer than 20 bytes: no complete header
  kWrongSession,     // the header names another session than the expected one
  kBadSequence,      // SequenceNumber 0, or SequenceNumber + count wraps past 2^64 - 1
  kCountOverrun,     // MessageCount promises more blocks than the packet holds
  kTruncatedBlock,   // the packet ends inside a block (its length prefix or its body)
  kEmptyBlock,       // a block of length 0
  kTrailingBytes,    // bytes after the last counted block (or after a request / heartbeat)
  kBadRequestCount,  // a request for 0 messages
};

// "count overruns packet" etc.; stable text for logs and counters.
[[nodiscard]] std::string_view error_name(Error e) noexcept;

// Iterates the message blocks of a validated packet; each element is one message's bytes.
// Only Packet hands these out, after parse_packet() checked every length, so the walk needs no
// checks of its own.
class BlockIterator {
 public:
  using iterator_concept = std::input_iterator_tag;
  using value_type = std::span<const uint8_t>;
  using difference_type = std::ptrdiff_t;

  BlockIterator() = default;

  [[nodiscard]] value_type operator*() const noexcept { return {p_ + kBlockLengthSize, load_be16(p_)}; }
  BlockIterator& operator++() noexcept {
    p_ += kBlockLengthSize + load_be16(p_);
    --left_;
    return *this;
  }
  BlockIterator operator++(int) noexcept {
    BlockIterator t = *this;
    ++*this;
    return t;
  }
  friend bool operator==(const BlockIterator& a, std::default_sentinel_t) noexcept { return a.left_ == 0; }
  friend bool operator==(const BlockIterator& a, const BlockIterator& b) noexcept { return a.left_ == b.left_; }

 private:
  friend class Packet;
  BlockIterator(const uint8_t* p, uint32_t left) noexcept : p_(p), left_(left) {}

  const uint8_t* p_ = nullptr;
  uint32_t left_ = 0;
};
static_assert(std::input_iterator<BlockIterator>);

// A parsed downstream packet. When ok(), session/sequence/count describe it and begin()..
// end() walks its messages (none for heartbeats and end of session). Otherwise `error`
// names the first problem, `offset` the byte where it starts (the block's length prefix)
// and `block` its 0-based index; iteration then yields nothing.
class Packet {
 public:
  Error error = Error::kNone;
  Kind kind = Kind::kHeartbeat;
  Session session;        // valid unless kTooShort
  uint64_t sequence = 0;  // the header's SequenceNumber (unless kTooShort)
  uint16_t count = 0;     // the header's MessageCount as sent (0xFFFF for end of session)
  uint32_t offset = 0;    // error position; on success the packet size
  uint32_t block = 0;     // error: index of the offending block
  uint16_t length = 0;    // error: that block's length prefix (0 if it has none)
  uint32_t size = 0;      // bytes given to parse_packet()

  [[nodiscard]] bool ok() const noexcept { return error == Error::kNone; }
  // Messages carried: `count` for data packets, 0 for heartbeats and end of session.
  [[nodiscard]] uint16_t messages() const noexcept { return kind == Kind::kData ? count : uint16_t{0}; }
  // The sequence number the receiver expects after this packet.
  [[nodiscard]] uint64_t next_sequence() const noexcept { return sequence + messages(); }

  [[nodiscard]] BlockIterator begin() const noexcept {
    return ok() ? BlockIterator(blocks_, messages()) : BlockIterator();
  }
  [[nodiscard]] std::default_sentinel_t end() const noexcept { return {}; }

  // Calls f(std::span<const uint8_t>) for every message, in order; nothing unless ok().
  template <class F>
  void for_each(F&& f) const {
    for (BlockIterator it = begin(); it != end(); ++it) f(*it);
  }

  // OkStatus(), or InvalidArgument/DataLoss naming the offset, e.g.
  //   moldudp64: offset 64: block 2: length 300 overruns the packet (11 bytes left)
  [[nodiscard]] absl::Status to_status() const;

 private:
  friend Packet parse_packet(std::span<const uint8_t> packet, const Session* expected) noexcept;
  const uint8_t* blocks_ = nullptr;
};

namespace detail {
// The 20 bytes a downstream packet and a request both start with (session, sequence number, a
// count: PacketHeaderWire and RequestWire lay them out alike) into a Packet or a Request `r`.
// Sets r.size to packet.size() (clamped: a datagram is far below 4 GiB, so a huge span cannot
// wrap the 32-bit offsets); a packet shorter than kMinSize is kTooShort and nothing is read.
template <size_t kMinSize, typename Parsed>
[[nodiscard]] inline bool read20(std::span<const uint8_t> packet, Parsed& r) noexcept {
  static_assert(kMinSize >= kPacketHeaderSize, "the 20 bytes are read once the size is checked");
  const size_t size = packet.size();
  r.size = static_cast<uint32_t>(std::min<size_t>(size, std::numeric_limits<uint32_t>::max()));
  if (size < kMinSize) {
    r.error = Error::kTooShort;
    return false;
  }
  const uint8_t* const p = packet.data();
  r.session = Session::from_wire(reinterpret_cast<const char*>(p));
  r.sequence = load_be64(p + offsetof(PacketHeaderWire, sequence_number));
  r.count = load_be16(p + offsetof(PacketHeaderWire, message_count));
  return true;
}
}  // namespace detail

// Parses and validates one downstream packet (the whole datagram). With `expected`, a
// header naming another session is kWrongSession (the body is then not looked at).
[[nodiscard]] inline Packet parse_packet(std::span<const uint8_t> packet, const Session* expected = nullptr) noexcept {
  Packet r;
  if (!detail::read20<kPacketHeaderSize>(packet, r)) return r;
  const size_t size = packet.size();
  const uint8_t* const p = packet.data();
  r.kind = r.count == kHeartbeatCount      ? Kind::kHeartbeat
           : r.count == kEndOfSessionCount ? Kind::kEndOfSession
                                           : Kind::kData;
  if (expected != nullptr && r.session != *expected) {
    r.error = Error::kWrongSession;
    return r;
  }
  if (r.sequence == 0 || r.sequence > std::numeric_limits<uint64_t>::max() - r.messages()) {
    r.error = Error::kBadSequence;
    return r;
  }
  // Each block takes at least 3 bytes (length >= 1), so this walk is bounded by the packet
  // size whatever the count says.
  size_t off = kPacketHeaderSize;
  const uint32_t n = r.messages();
  for (uint32_t i = 0; i < n; ++i) {
    const size_t left = size - off;
    Error e = Error::kNone;
    uint16_t len = 0;
    if (left == 0) {
      e = Error::kCountOverrun;
    } else if (left < kBlockLengthSize) {
      e = Error::kTruncatedBlock;
    } else {
      len = load_be16(p + off);
      if (len == 0) {
        e = Error::kEmptyBlock;
      } else if (len > left - kBlockLengthSize) {
        e = Error::kTruncatedBlock;
      } else {
        off += kBlockLengthSize + len;
        continue;
      }
    }
    r.error = e;
    r.offset = static_cast<uint32_t>(off);
    r.block = i;
    r.length = len;
    return r;
  }
  if (off != size) {
    r.error = Error::kTrailingBytes;
    r.offset = static_cast<uint32_t>(off);
    r.block = n;
    return r;
  }
  r.offset = static_cast<uint32_t>(size);
  r.blocks_ = p + kPacketHeaderSize;
  return r;
}

[[nodiscard]] inline Packet parse_packet(std::span<const uint8_t> packet, const Session& expected) noexcept {
  return parse_packet(packet, &expected);
}

// Pollux payloads are std::byte.
[[nodiscard]] inline Packet parse_packet(std::span<const std::byte> packet,
                                         const Session* expected = nullptr) noexcept {
  return parse_packet({reinterpret_cast<const uint8_t*>(packet.data()), packet.size()}, expected);
}
[[nodiscard]] inline Packet parse_packet(std::span<const std::byte> packet, const Session& expected) noexcept {
  return parse_packet(packet, &expected);
}

// True if `packet` has a complete header naming `expected` (nothing else is checked): a
// cheap filter before parse_packet() on a socket shared by several sessions.
[[nodiscard]] inline bool is_session(std::span<const uint8_t> packet, const Session& expected) noexcept {
  return packet.size() >= kPacketHeaderSize && std::memcmp(packet.data(), expected.bytes.data(), kSessionSize) == 0;
}

// A parsed re-request packet.
struct Request {
  Error error = Error::kNone;
  Session session;
  uint64_t sequence = 0;  // first message wanted
  uint16_t count = 0;     // RequestedMessageCount
  uint32_t size = 0;

  [[nodiscard]] bool ok() const noexcept { return error == Error::kNone; }
  [[nodiscard]] absl::Status to_status() const;
};

// A request must be exactly 20 bytes, ask for at least one message, start at sequence 1 or
// later and not wrap. With `expected`, another session is kWrongSession.
[[nodiscard]] inline Request parse_request(std::span<const uint8_t> packet,
                                           const Session* expected = nullptr) noexcept {
  Request r;
  if (!detail::read20<kRequestSize>(packet, r)) return r;
  if (packet.size() != kRequestSize) {
    r.error = Error::kTrailingBytes;
  } else if (expected != nullptr && r.session != *expected) {
    r.error = Error::kWrongSession;
  } else if (r.count == 0) {
    r.error = Error::kBadRequestCount;
  } else if (r.sequence == 0 || r.sequence > std::numeric_limits<uint64_t>::max() - r.count) {
    r.error = Error::kBadSequence;
  }
  return r;
}
[[nodiscard]] inline Request parse_request(std::span<const std::byte> packet,
                                           const Session* expected = nullptr) noexcept {
  return parse_request({reinterpret_cast<const uint8_t*>(packet.data()), packet.size()}, expected);
}

// Builds one downstream packet in a caller's buffer; buffer.size() is the budget (the MTU
// payload, e.g. 1400). The header's count is rewritten on every add(), so the bytes in the
// buffer are a valid packet after any call, including a refused add().
//   PacketBuilder b(buf);
//   if (!b.begin(session, next_seq)) ...;
//   while (have_message && b.add(msg)) ...;
//   send(b.finish());
class PacketBuilder {
 public:
  explicit PacketBuilder(std::span<uint8_t> buffer) noexcept : buf_(buffer) {}

  // Starts a packet whose first message is `first_sequence`. False (nothing written) if the
  // buffer cannot hold a header or first_sequence is 0.
  [[nodiscard]] bool begin(const Session& session, uint64_t first_sequence) noexcept {
    started_ = false;
    if (buf_.size() < kPacketHeaderSize || first_sequence == 0) return false;
    std::memcpy(buf_.data(), session.bytes.data(), kSessionSize);
    store_be64(buf_.data() + offsetof(PacketHeaderWire, sequence_number), first_sequence);
    first_ = first_sequence;
    count_ = 0;
    size_ = kPacketHeaderSize;
    started_ = true;
    store_count();
    return true;
  }

  // Reserves a block of `length` bytes and returns where to write the message, or nullptr
  // (packet unchanged) if it would not fit, length is 0, the packet already holds
  // kMaxMessageCount messages, the sequence would wrap, or begin() has not succeeded.
  [[nodiscard]] uint8_t* reserve(size_t length) noexcept {
    if (!started_ || length == 0 || length > kMaxBlockSize || count_ >= kMaxMessageCount ||
        count_ >= std::numeric_limits<uint64_t>::max() - first_ || kBlockLengthSize + length > buf_.size() - size_) {
      return nullptr;
    }
    uint8_t* const at = buf_.data() + size_;
    store_be16(at, static_cast<uint16_t>(length));
    size_ += kBlockLengthSize + length;
    ++count_;
    store_count();
    return at + kBlockLengthSize;
  }

  // Copies one message into the packet; false (packet unchanged) as for reserve().
  [[nodiscard]] bool add(std::span<const uint8_t> message) noexcept {
    uint8_t* const at = reserve(message.size());
    if (at == nullptr) return false;
    std::memcpy(at, message.data(), message.size());
    return true;
  }

  // The packet so far (a heartbeat for `first_sequence` if nothing was added); empty if
  // begin() has not succeeded. The builder can begin() again afterwards.
  [[nodiscard]] std::span<const uint8_t> finish() noexcept {
    if (!started_) return {};
    started_ = false;
    return {buf_.data(), size_};
  }

  [[nodiscard]] uint16_t count() const noexcept { return count_; }
  [[nodiscard]] size_t size() const noexcept { return size_; }
  [[nodiscard]] size_t capacity() const noexcept { return buf_.size(); }
  // The largest message the next add() can take (0 if none fits).
  [[nodiscard]] size_t room() const noexcept {
    if (!started_ || buf_.size() - size_ <= kBlockLengthSize) return 0;
    return std::min(buf_.size() - size_ - kBlockLengthSize, kMaxBlockSize);
  }
  // The sequence number of the message after the last one added.
  [[nodiscard]] uint64_t next_sequence() const noexcept { return first_ + count_; }

 private:
  void store_count() noexcept { store_be16(buf_.data() + offsetof(PacketHeaderWire, message_count), count_); }

  std::span<uint8_t> buf_;
  uint64_t first_ = 0;
  size_t size_ = 0;
  uint16_t count_ = 0;
  bool started_ = false;
};

namespace detail {
[[nodiscard]] inline std::span<const uint8_t> write20(std::span<uint8_t> out, const Session& session, uint64_t seq,
                                                      uint16_t count) noexcept {
  if (out.size() < kPacketHeaderSize) return {};
  std::memcpy(out.data(), session.bytes.data(), kSessionSize);
  store_be64(out.data() + offsetof(PacketHeaderWire, sequence_number), seq);
  store_be16(out.data() + offsetof(PacketHeaderWire, message_count), count);
  return {out.data(), kPacketHeaderSize};
}
}  // namespace detail

// Each writes a 20-byte packet at the start of `out` and returns it; empty if `out` is
// shorter than 20 bytes or the packet would be invalid (sequence 0, wrapping, count 0).
[[nodiscard]] inline std::span<const uint8_t> encode_heartbeat(std::span<uint8_t> out, const Session& session,
                                                               uint64_t next_sequence) noexcept {
  if (next_sequence == 0) return {};
  return detail::write20(out, session, next_sequence, kHeartbeatCount);
}
[[nodiscard]] inline std::span<const uint8_t> encode_end_of_session(std::span<uint8_t> out, const Session& session,
                                                                    uint64_t next_sequence) noexcept {
  if (next_sequence == 0) return {};
  return detail::write20(out, session, next_sequence, kEndOfSessionCount);
}
[[nodiscard]] inline std::span<const uint8_t> encode_request(std::span<uint8_t> out, const Session& session,
                                                             uint64_t sequence, uint16_t count) noexcept {
  if (sequence == 0 || count == 0 || sequence > std::numeric_limits<uint64_t>::max() - count) {
    return {};
  }
  return detail::write20(out, session, sequence, count);
}

}  // namespace pollux::itch::mold
