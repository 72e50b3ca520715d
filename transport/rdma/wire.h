// What the RDMA transport puts on the wire besides frames: the rdma_cm private data that opens
// an RC connection (and validates stream id and protocol version), and the constants both ends
// of a UD multicast stream must agree on. Frames themselves are core/frame.h FrameHeader +
// payload, byte for byte as the shm log stores them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "absl/status/status.h"

namespace pollux::transport::rdma {

// Bump on any change to ConnectRequest/ConnectReply, to the frame flags the RDMA transport
// interprets (heartbeat, end of stream) or to the UD layout below. A peer with another version
// is rejected with kRejectBadVersion, and both sides log which versions met.
inline constexpr std::uint16_t kProtocolVersion = 1;
inline constexpr std::uint32_t kCmMagic = 0x52584c50;  // "PLXR" little-endian

// UD: every datagram lands behind a 40-byte GRH (RoCEv2 puts the IPv4 header in its last 20
// bytes); the frame follows it in the receive buffer.
inline constexpr std::uint32_t kGrhBytes = 40;
// UD multicast datagrams carry this Q_Key; a foreign application on the same group with another
// key is filtered by the HCA.
inline constexpr std::uint32_t kUdQkey = 0x504c5831;
inline constexpr std::uint32_t kMulticastQpn = 0xffffff;

enum RejectReason : std::uint16_t {
  kAccepted = 0,
  kRejectBadMagic = 1,       // not a Pollux peer (or private data truncated)
  kRejectBadVersion = 2,     // Pollux, but another protocol version
  kRejectNoSubscriber = 3,   // nobody subscribes to this stream at that address (yet)
  kRejectFrameTooLarge = 4,  // the publisher's frames do not fit the subscriber's receive buffers
  kRejectNoResources = 5,    // the subscriber could not create a QP
};
std::string_view reject_reason_name(std::uint16_t r);

// Publisher -> subscriber, in rdma_connect()'s private data (RoCE allows 56 bytes).
struct ConnectRequest {
  std::uint32_t magic;    // kCmMagic
  std::uint16_t version;  // kProtocolVersion
  std::uint16_t flags;    // 0
  std::uint32_t stream_id;
  std::uint32_t session_id;  // the publishing endpoint's session (one per QP-owning thread)
  std::uint32_t max_frame;   // largest frame the publisher will send
  std::uint32_t reserved;
};
static_assert(sizeof(ConnectRequest) == 24);
static_assert(std::is_trivially_copyable_v<ConnectRequest>);
static_assert(offsetof(ConnectRequest, stream_id) == 8);
static_assert(offsetof(ConnectRequest, max_frame) == 16);

// Subscriber -> publisher, in rdma_accept()'s or rdma_reject()'s private data.
struct ConnectReply {
  std::uint32_t magic;    // kCmMagic
  std::uint16_t version;  // kProtocolVersion (the subscriber's, also on kRejectBadVersion)
  std::uint16_t status;   // RejectReason
  std::uint32_t stream_id;
  std::uint32_t max_frame;  // largest frame the subscriber's receive buffers hold
};
static_assert(sizeof(ConnectReply) == 16);
static_assert(std::is_trivially_copyable_v<ConnectReply>);

ConnectRequest make_request(std::uint32_t stream_id, std::uint32_t session_id, std::uint32_t max_frame);
ConnectReply make_reply(std::uint32_t stream_id, std::uint16_t status, std::uint32_t max_frame);

// Parses and validates a request; on failure returns the reason to reject with and fills
// `why` with a sentence for the subscriber's log.
std::uint16_t check_request(const void* data, std::size_t len, ConnectRequest* out, std::string* why);
// Parses a reply (accept or reject). InvalidArgument/FailedPrecondition name what is wrong and
// what to do about it.
absl::Status check_reply(const void* data, std::size_t len, std::uint32_t stream_id, ConnectReply* out);

}  // namespace pollux::transport::rdma
