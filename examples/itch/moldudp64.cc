#include "itch/moldudp64.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace pollux::itch::mold {
namespace {

// The session with other bytes than printable ASCII escaped, so a hostile header cannot
// put control characters into a log line.
std::string printable(const Session& s) {
  std::string out;
  for (const char c : s.bytes) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f && c != '\\') {
      out.push_back(c);
    } else {
      absl::StrAppend(&out, "\\x", absl::Hex(u, absl::kZeroPad2));
    }
  }
  return out;
}

}  // namespace

std::string_view error_name(Error e) noexcept {
  switch (e) {
    case Error::kNone:
      return "ok";
    case Error::kTooShort:
      return "too short for header";
    case Error::kWrongSession:
      return "wrong session";
    case Error::kBadSequence:
      return "bad sequence number";
    case Error::kCountOverrun:
      return "count overruns packet";
    case Error::kTruncatedBlock:
      return "truncated block";
    case Error::kEmptyBlock:
      return "empty block";
    case Error::kTrailingBytes:
      return "trailing bytes";
    case Error::kBadRequestCount:
      return "bad requested count";
  }
  return "unknown error";
}

absl::Status Packet::to_status() const {
  const std::string where = absl::StrCat("moldudp64: offset ", offset, ": ");
  const uint32_t left = size - offset;
  switch (error) {
    case Error::kNone:
      return absl::OkStatus();
    case Error::kTooShort:
      return absl::DataLossError(absl::StrCat(where, "packet of ", size, " bytes is shorter than the 20-byte header"));
    case Error::kWrongSession:
      return absl::InvalidArgumentError(absl::StrCat(where, "packet of session '", printable(session), "'"));
    case Error::kBadSequence:
      return absl::InvalidArgumentError(
          absl::StrCat(where, "sequence number ", sequence, " with ", messages(), " message(s) is invalid"));
    case Error::kCountOverrun:
      return absl::DataLossError(
          absl::StrCat(where, "message count ", count, " overruns the packet: it ends after ", block, " block(s)"));
    case Error::kTruncatedBlock:
      if (left < kBlockLengthSize) {
        return absl::DataLossError(
            absl::StrCat(where, "block ", block, ": truncated length prefix (", left, " byte left)"));
      }
      return absl::DataLossError(absl::StrCat(where, "block ", block, ": length ", length, " overruns the packet (",
                                              left - kBlockLengthSize, " bytes left)"));
    case Error::kEmptyBlock:
      return absl::InvalidArgumentError(absl::StrCat(where, "block ", block, ": length 0"));
    case Error::kTrailingBytes:
      return absl::InvalidArgumentError(
          absl::StrCat(where, left, " byte(s) after the last of ", messages(), " message block(s)"));
    case Error::kBadRequestCount:
      break;
  }
  return absl::InternalError(absl::StrCat(where, std::string(error_name(error))));
}

absl::Status Request::to_status() const {
  switch (error) {
    case Error::kNone:
      return absl::OkStatus();
    case Error::kTooShort:
    case Error::kTrailingBytes:
      return absl::InvalidArgumentError(absl::StrCat("moldudp64: request of ", size, " bytes (must be 20)"));
    case Error::kWrongSession:
      return absl::InvalidArgumentError(absl::StrCat("moldudp64: request for session '", printable(session), "'"));
    case Error::kBadRequestCount:
      return absl::InvalidArgumentError("moldudp64: request for 0 messages");
    case Error::kBadSequence:
      return absl::InvalidArgumentError(
          absl::StrCat("moldudp64: request for ", count, " message(s) from sequence ", sequence));
    case Error::kCountOverrun:
    case Error::kTruncatedBlock:
    case Error::kEmptyBlock:
      break;
  }
  return absl::InternalError(absl::StrCat("moldudp64: request: ", std::string(error_name(error))));
}

}  // namespace pollux::itch::mold
