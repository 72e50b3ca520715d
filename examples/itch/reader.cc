#include "itch/reader.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pollux::itch {
namespace {

// "0x5a ('Z')" for printable bytes, "0x00" otherwise, so a binary type byte never puts
// control characters into a log line.
std::string type_byte_text(uint8_t t) {
  if (t >= 0x20 && t < 0x7f) return absl::StrFormat("0x%02x ('%c')", t, t);
  return absl::StrFormat("0x%02x", t);
}

}  // namespace

absl::Status ParseResult::to_status() const {
  const std::string where = absl::StrCat("itch: offset ", offset, ": ");
  switch (error) {
    case ParseError::kNone:
      return absl::OkStatus();
    case ParseError::kUnknownType:
      return absl::InvalidArgumentError(absl::StrCat(where, "unknown message type ", type_byte_text(type)));
    case ParseError::kLengthMismatch:
      return absl::InvalidArgumentError(absl::StrCat(
          where, framed ? "length prefix " : "payload of ", length, framed ? "" : " bytes", " disagrees with the size ",
          message_size(type), " of message type '", std::string(1, static_cast<char>(type)), "'"));
    case ParseError::kTruncated:
      if (framed && available < kLengthPrefixSize) {
        return absl::DataLossError(absl::StrCat(where, "truncated length prefix: ", available, " byte(s) left"));
      }
      if (framed && available == kLengthPrefixSize) {
        return absl::DataLossError(absl::StrCat(where, "truncated record: length prefix without a message type"));
      }
      return absl::DataLossError(absl::StrCat(where, "truncated message type '",
                                              std::string(1, static_cast<char>(type)), "': needs ", message_size(type),
                                              " bytes", framed ? " after the prefix" : "", ", ",
                                              framed ? available - kLengthPrefixSize : available, " left"));
    case ParseError::kEmpty:
      return absl::InvalidArgumentError(absl::StrCat(where, "empty message"));
  }
  return absl::InternalError(absl::StrCat(where, "unknown parse error"));
}

bool MessageCursor::next(MessageView* out) noexcept {
  if (!result_.ok()) return false;
  bool got = false;
  const uint64_t start = result_.offset;
  ParseResult r = for_each_message(buf_.subspan(start), [&](MessageView m) {
    *out = m;
    got = true;
    return false;  // one message per call
  });
  if (!r.ok()) {
    r.offset += start;
    r.messages = result_.messages;
    result_ = r;
    return false;
  }
  result_.offset = start + r.offset;
  result_.messages += r.messages;
  return got;
}

ParseResult check_message(std::span<const uint8_t> msg) noexcept {
  ParseResult r;
  r.framed = false;
  if (msg.empty()) {
    r.error = ParseError::kEmpty;
    return r;
  }
  const uint8_t type = msg[0];
  const size_t want = message_size(type);
  r.type = type;
  r.length = static_cast<uint32_t>(msg.size());
  r.available = msg.size();
  if (want == 0) {
    r.error = ParseError::kUnknownType;
  } else if (msg.size() < want) {
    r.error = ParseError::kTruncated;
  } else if (msg.size() > want) {
    r.error = ParseError::kLengthMismatch;
  } else {
    r.offset = want;
    r.messages = 1;
  }
  return r;
}

absl::StatusOr<MessageView> decode_message(std::span<const uint8_t> msg) {
  const ParseResult r = check_message(msg);
  if (!r.ok()) return r.to_status();
  return MessageView(msg.data(), msg.size());
}

absl::Status wrong_type_error(char got, char want) {
  return absl::InvalidArgumentError(absl::StrCat("itch: offset 0: message type '", std::string(1, got), "' where '",
                                                 std::string(1, want), "' was expected"));
}

absl::StatusOr<Reader> Reader::open(const std::string& path) {
  absl::StatusOr<MappedFile> f = MappedFile::open(path);
  if (!f.ok()) return f.status();
  return Reader(*std::move(f));
}

}  // namespace pollux::itch
