// Input formats of the structured harnesses, shared by the harnesses and the seed writer
// (make_seeds.cc), so seeds stay readable by the harness that replays them. Every format is
// a byte stream read with FuzzInput (fuzz_util.h): an operation byte (taken modulo kOpCount,
// so every byte is some operation) followed by that operation's fields.
#pragma once

#include <cstdint>

namespace pollux::fuzz {

// How a sequence number is picked (pick_seq in the harnesses): a signed 8-bit delta, then a
// base (taken modulo kBases) the delta is added to; kRaw reads a full 64-bit value instead (a
// forged datagram). The bases are the receiving window's expected / hwm / expected + window,
// or the sender log's oldest / sent / next; kOther is the window's lost_through, or a small
// absolute sequence (1 + u8).
namespace seq {
enum Base : std::uint8_t { kExpected = 0, kHwm = 1, kWindowEnd = 2, kOther = 3, kRaw = 4, kBases = 5 };
}  // namespace seq

// receive_window: u8 window choice, u64 start, then operations.
namespace window {
enum Op : std::uint8_t {
  kData = 0,       // seq, u8 payload length
  kHeartbeat = 2,  // seq next, seq oldest
  kDrain = 3,      // u8 max, flag unlimited (else seq limit)
  kNaks = 5,       // u16 time step (10 us units), u8 max ranges
  kForget = 6,     // seq, flag "the held frame" (else a wrong one)
  kSilence = 7,    // u32 time step (us): the session timed out, everything missing is lost
  kReset = 8,      // flag, seq start: a new session in this slot
  kOpCount = 9,
};
}  // namespace window

// udp_receiver: flag small window, then operations.
namespace udp {
enum Op : std::uint8_t {
  kDatagram = 0,  // flag raw: (u16 length, bytes) | described frames; then u8 (< 16: delivered twice)
  kPoll = 3,      // u8 max
  kService = 5,   // u16 time step (100 us units)
  kEvict = 6,     // u8 which held datagram
  kTime = 7,      // u32 time step (us)
  kOpCount = 8,
};
}  // namespace udp

// reliability_control: flag coalescing, then for each operation: u8 sink budget (< 32: then
// u8 datagrams the sink takes, modulo 4), the operation byte and its fields.
namespace control {
enum Op : std::uint8_t {
  kControl = 0,  // flag raw: (u16 length, bytes) | a described control message
  kService = 3,  // u16 time step (10 us units)
  kAppend = 4,   // u8 count, count x u8 payload length; then flush
  kEndOfStream = 5,
  kTime = 6,  // u32 time step (us)
  kOpCount = 7,
};
}  // namespace control

// shm_reader: u8 template, u8 patch count + patches, u8 resize (< 240: none), u8 stream
// (< 8: then u32 expected stream id), flag slot (+ u8 which), flag join at start, then steps:
// u8 op (< 32: live patches, else a poll: u8 max, flag release (+ flag validate)).
namespace shm {
enum Template : std::uint8_t { kShort = 0, kWrapped = 1, kClosed = 2, kTemplates = 3 };
inline constexpr std::uint8_t kPollStep = 32;
}  // namespace shm

// archive_segment: u8 mode. Bit 0 clear (raw): bits 1-2 a seek (kNoSeek; kNearHeader: i16,
// offset kSegmentHeaderSize + i16; kRawOffset: u64; kFromEnd: u8, offset size - u8), bits 3-7
// trailing zero bytes / 3, then the bytes after the segment header. Bit 0 set (built): bits
// 1-4 records - 1, bit 5 flip one byte, bits 6-7 zero words after the records; then per record
// u8 kind (bit 0: a marker: u16 kind, u32 stream, u32 session, u64 from, u64 to, u64 time,
// u64 count; else a frame: u16 payload (modulo kMaxPayload), u16 flags, u32 stream,
// u32 session, u64 sequence, u64 timestamp, u8 payload fill); then, flipping, u32 position
// (modulo the bytes after the header) and u8 xor (0: 0xff).
namespace archive {
enum Seek : std::uint8_t { kNoSeek = 0, kNearHeader = 1, kRawOffset = 2, kFromEnd = 3 };
inline constexpr std::uint8_t kBuilt = 1;
inline constexpr std::uint8_t kFlip = 1 << 5;
inline constexpr std::uint16_t kMaxPayload = 2048;
}  // namespace archive

}  // namespace pollux::fuzz
