// ITCH 5.0 readers: BinaryFILE framing over a memory-mapped file or an in-memory buffer,
// and single-message decoding for payloads that carry one message without a prefix.
//
// BinaryFILE framing: each message is preceded by a 2-byte big-endian length. A length of
// 0 (as in NASDAQ's sample files) means "use the fixed size of the message type". Every
// record is validated before the caller sees it:
//   - the type byte must be one of the 23 ITCH 5.0 types,
//   - a non-zero length must equal the type's size,
//   - the whole record must fit in the buffer.
// The first violation stops the scan and is reported with the byte offset at which the
// offending record starts (its length prefix), e.g.
//   itch: offset 4711: unknown message type 0x5a ('Z')
//   itch: offset 96: length prefix 30 disagrees with the size 36 of message type 'A'
//   itch: offset 465040: truncated message type 'A': needs 36 bytes after the prefix, 6 left
//   itch: offset 465047: truncated length prefix: 1 byte(s) left
// Nothing is ever skipped silently and malformed input never reads out of bounds.
//
// Hot path: for_each_message/visit_messages are templates that inline the caller's callback;
// the per-message work is one table lookup, three compares and the callback. Errors are
// returned as a plain ParseResult (no allocation); to_status() builds the message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "itch/endian.h"
#include "itch/mapped_file.h"
#include "itch/messages.h"

namespace pollux::itch {

inline constexpr size_t kLengthPrefixSize = 2;

enum class ParseError : uint8_t {
  kNone = 0,
  kUnknownType,     // type byte is not an ITCH 5.0 message type
  kLengthMismatch,  // non-zero length prefix (or payload size) != size of the type
  kTruncated,       // the buffer ends inside a record (prefix or body)
  kEmpty,           // nothing to decode (empty file or empty payload)
};

// Outcome of a scan or a single-message decode. Plain data so the hot path can return it.
struct ParseResult {
  ParseError error = ParseError::kNone;
  // On error: offset of the offending record (its length prefix; for single-message
  // decoding, offset 0 is the type byte). On success: bytes consumed.
  uint64_t offset = 0;
  uint64_t messages = 0;   // messages handed to the callback
  uint8_t type = 0;        // the offending type byte (kUnknownType, kLengthMismatch, kTruncated)
  uint32_t length = 0;     // the length prefix / payload size (kLengthMismatch)
  uint64_t available = 0;  // bytes left in the buffer at `offset` (kTruncated)
  bool framed = true;      // false for single-message decoding (no length prefix)

  [[nodiscard]] bool ok() const noexcept { return error == ParseError::kNone; }
  // OkStatus() or InvalidArgument / DataLoss with the message documented above.
  [[nodiscard]] absl::Status to_status() const;
};

namespace detail {
[[nodiscard]] inline ParseResult fail(ParseError e, uint64_t offset, uint64_t messages, uint8_t type, uint32_t length,
                                      uint64_t available) {
  return ParseResult{.error = e,
                     .offset = offset,
                     .messages = messages,
                     .type = type,
                     .length = length,
                     .available = available,
                     .framed = true};
}
[[nodiscard]] inline ParseResult done(uint64_t offset, uint64_t messages) {
  ParseResult r;
  r.offset = offset;
  r.messages = messages;
  return r;
}
}  // namespace detail

// Scans BinaryFILE records in `buf` and calls `f(MessageView)` for each valid message, in
// order. If `f` returns bool, returning false stops the scan early (result is ok and
// `offset` is where the next record starts, whatever the bytes there hold). An empty buffer
// holds no messages and is ok. On an error, `f` has seen every message before it.
template <class F>
[[nodiscard]] inline ParseResult for_each_message(std::span<const uint8_t> buf, F&& f) {
  const uint8_t* const data = buf.data();
  const uint64_t size = buf.size();
  uint64_t off = 0;
  uint64_t n = 0;
  // Three bytes (prefix + type) are needed to learn the record size; the body is checked
  // against what is left once the size is known.
  while (size - off >= kLengthPrefixSize + 1) {
    const uint16_t len = load_be16(data + off);
    const uint8_t type = data[off + kLengthPrefixSize];
    const uint32_t want = static_cast<uint32_t>(message_size(type));
    if (want == 0) [[unlikely]] {
      return detail::fail(ParseError::kUnknownType, off, n, type, len, size - off);
    }
    if (len != 0 && len != want) [[unlikely]] {
      return detail::fail(ParseError::kLengthMismatch, off, n, type, len, size - off);
    }
    if (want > size - off - kLengthPrefixSize) [[unlikely]] {
      return detail::fail(ParseError::kTruncated, off, n, type, len, size - off);
    }
    const MessageView m(data + off + kLengthPrefixSize, want);
    off += kLengthPrefixSize + want;
    ++n;
    if constexpr (std::is_same_v<std::invoke_result_t<F&, MessageView>, bool>) {
      // A stop is ok whatever follows: the bytes after this record are not looked at (a
      // cursor resumes there and reports them then), so a message before a damaged tail
      // is never dropped.
      if (!f(m)) return detail::done(off, n);
    } else {
      f(m);
    }
  }
  if (off < size) [[unlikely]] {
    // 1 or 2 stray bytes: a cut-off length prefix, or a prefix with no type byte.
    return detail::fail(ParseError::kTruncated, off, n, 0, 0, size - off);
  }
  return detail::done(off, n);
}

// for_each_message with typed dispatch: calls `v(TypedView)` for every message whose view
// type `v` accepts (see Dispatch in messages.h).
template <class Visitor>
[[nodiscard]] inline ParseResult visit_messages(std::span<const uint8_t> buf, Visitor&& v) {
  return for_each_message(buf, [&v](MessageView m) { dispatch(m, v); });
}

// Pull-style iteration over BinaryFILE records, for callers that cannot hand over a
// callback (e.g. a feed handler that publishes one message per poller duty cycle).
//   MessageCursor c(buf);
//   for (MessageView m; c.next(&m);) { ... }
//   if (!c.result().ok()) return c.result().to_status();
class MessageCursor {
 public:
  MessageCursor() = default;
  explicit MessageCursor(std::span<const uint8_t> buf) noexcept : buf_(buf) {}

  // Stores the next valid message in `*out` and returns true; returns false at the end
  // of the buffer or at the first malformed record (then result() names it).
  [[nodiscard]] bool next(MessageView* out) noexcept;

  // Bytes consumed and messages returned so far, or the error that stopped the cursor.
  [[nodiscard]] const ParseResult& result() const noexcept { return result_; }
  [[nodiscard]] uint64_t offset() const noexcept { return result_.offset; }

 private:
  std::span<const uint8_t> buf_;
  ParseResult result_;
};

// Validates one message without a length prefix (a pub/sub payload): the first byte must be
// a known type and the payload exactly that type's size. Never allocates.
[[nodiscard]] ParseResult check_message(std::span<const uint8_t> msg) noexcept;

// check_message, then the view. Errors name offset 0, e.g.
//   itch: offset 0: payload of 30 bytes disagrees with the size 36 of message type 'A'
[[nodiscard]] absl::StatusOr<MessageView> decode_message(std::span<const uint8_t> msg);

// The status decode_as returns when a payload holds another (valid) type.
[[nodiscard]] absl::Status wrong_type_error(char got, char want);

// Decodes a payload that must hold a message of type T::kType.
template <class T>
[[nodiscard]] absl::StatusOr<T> decode_as(std::span<const uint8_t> msg) {
  absl::StatusOr<MessageView> m = decode_message(msg);
  if (!m.ok()) return m.status();
  if (m->type() != T::kType) return wrong_type_error(m->type(), T::kType);
  return T(m->data());
}

// A BinaryFILE: memory-mapped when opened from a path, or a view of a caller's buffer.
// Movable, not copyable; views handed out stay valid while the Reader lives.
class Reader {
 public:
  // Maps `path` read-only. Errors: the file cannot be opened or mapped (errno text), or it
  // is empty ("itch: offset 0: empty file '<path>'").
  [[nodiscard]] static absl::StatusOr<Reader> open(const std::string& path);

  // Reads `buf` in place; the caller keeps it alive.
  explicit Reader(std::span<const uint8_t> buf) noexcept : data_(buf) {}

  [[nodiscard]] std::span<const uint8_t> data() const noexcept { return data_; }

  // See for_each_message / visit_messages; these return the status form.
  template <class F>
  [[nodiscard]] absl::Status for_each(F&& f) const {
    return for_each_message(data_, std::forward<F>(f)).to_status();
  }
  template <class Visitor>
  [[nodiscard]] absl::Status visit(Visitor&& v) const {
    return visit_messages(data_, std::forward<Visitor>(v)).to_status();
  }
  [[nodiscard]] MessageCursor cursor() const noexcept { return MessageCursor(data_); }

 private:
  explicit Reader(MappedFile file) noexcept : file_(std::move(file)), data_(file_.bytes()) {}

  MappedFile file_;
  std::span<const uint8_t> data_;
};

}  // namespace pollux::itch
