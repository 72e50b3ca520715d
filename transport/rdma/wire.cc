#include "transport/rdma/wire.h"

#include <cstring>

#include "absl/strings/str_format.h"
#include "core/code_names.h"

namespace pollux::transport::rdma {

std::string_view reject_reason_name(std::uint16_t r) {
  static constexpr core::CodeName<std::uint16_t> kNames[] = {
      {kAccepted, "accepted"},
      {kRejectBadMagic, "not a Pollux peer"},
      {kRejectBadVersion, "protocol version mismatch"},
      {kRejectNoSubscriber, "no subscriber for this stream"},
      {kRejectFrameTooLarge, "frames too large for the subscriber's buffers"},
      {kRejectNoResources, "subscriber out of resources"},
  };
  return core::name_of(r, kNames, "unknown reason");
}

ConnectRequest make_request(std::uint32_t stream_id, std::uint32_t session_id, std::uint32_t max_frame) {
  return {.magic = kCmMagic,
          .version = kProtocolVersion,
          .flags = 0,
          .stream_id = stream_id,
          .session_id = session_id,
          .max_frame = max_frame,
          .reserved = 0};
}

ConnectReply make_reply(std::uint32_t stream_id, std::uint16_t status, std::uint32_t max_frame) {
  return {
      .magic = kCmMagic, .version = kProtocolVersion, .status = status, .stream_id = stream_id, .max_frame = max_frame};
}

std::uint16_t check_request(const void* data, std::size_t len, ConnectRequest* out, std::string* why) {
  // rdma_cm pads private data with zeros up to the transport's size, so len >= sizeof is the
  // check, not equality.
  if (data == nullptr || len < sizeof(ConnectRequest)) {
    *why = absl::StrFormat("connect request carries %u bytes of private data, a Pollux publisher sends %u", len,
                           sizeof(ConnectRequest));
    return kRejectBadMagic;
  }
  std::memcpy(out, data, sizeof *out);
  if (out->magic != kCmMagic) {
    *why = absl::StrFormat("connect request magic %08x is not Pollux's %08x (another application on this port?)",
                           out->magic, kCmMagic);
    return kRejectBadMagic;
  }
  if (out->version != kProtocolVersion) {
    *why = absl::StrFormat(
        "publisher speaks RDMA protocol version %u, this subscriber %u: run the same Pollux release "
        "on both ends",
        out->version, kProtocolVersion);
    return kRejectBadVersion;
  }
  if (out->stream_id == 0) {
    *why = "connect request names stream 0 (no such stream)";
    return kRejectBadMagic;
  }
  return kAccepted;
}

absl::Status check_reply(const void* data, std::size_t len, std::uint32_t stream_id, ConnectReply* out) {
  if (data == nullptr || len < sizeof(ConnectReply)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the peer answered with %u bytes of private data, not a Pollux reply (is a Pollux subscriber listening there?)",
        len));
  }
  std::memcpy(out, data, sizeof *out);
  if (out->magic != kCmMagic) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the peer's reply magic %08x is not Pollux's (another application listens on that port?)", out->magic));
  }
  if (out->version != kProtocolVersion) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the subscriber speaks RDMA protocol version %u, this publisher %u: run the same Pollux release on both ends",
        out->version, kProtocolVersion));
  }
  if (out->status != kAccepted) {
    return absl::FailedPreconditionError(
        absl::StrFormat("the subscriber rejected stream %u: %s", stream_id, reject_reason_name(out->status)));
  }
  if (out->stream_id != stream_id) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the subscriber accepted stream %u, but %u was requested", out->stream_id, stream_id));
  }
  return absl::OkStatus();
}

}  // namespace pollux::transport::rdma
