// Fuzzes the frame validator and writer of core/frame.h, which every transport uses: the shm
// log reader, the reliability protocol's frame cursor (UDP, RDMA UD) and the RDMA RC receiver
// check what another process or the network sent with core::check_frame, and every frame
// header is written by core::write_frame_header / write_frame_identity.
//
// Input: u8 mode. Mode bit 0 clear: the rest of the input is a datagram, taken as it stands.
// Set: up to 8 frames built by the writer from described fields - u16 length, u16 flags,
// u32 stream, u32 session, u64 timestamp, u8 how (bit 0: identity only, as a transport log
// takes over a publisher's frame) - each placed at the next 8-byte boundary, then the rest of
// the input appended as stray bytes.
//
// Invariants:
//  - check_frame agrees with the frame format's rules, checked here from a copy of the header
//    (too short for a header, magic, version, length below the header (and trace block of a
//    traced frame), length beyond the bytes), and names the first rule broken;
//  - FrameCursor walks the datagram frame by frame (8-byte steps), hands out only frames
//    check_frame accepts with the bytes left, never reads past the end, and reports malformed
//    exactly when it stopped before the end;
//  - the writer stores exactly the fields given (identity: never the flags, timestamp or
//    sequence; full: never the sequence), and what it wrote validates whenever the length
//    covers the header (and trace block) and fits.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "core/frame.h"
#include "tests/fuzz/fuzz_util.h"
#include "transport/reliability/wire.h"

namespace {

namespace core = pollux::core;
namespace rel = pollux::transport::reliability;
using pollux::fuzz::FuzzInput;

constexpr std::size_t kMaxBytes = 1 << 16;

// The rules, from a copy of the header (no alignment assumed).
core::FrameCheck reference(const std::byte* p, std::size_t n) {
  if (n < sizeof(core::FrameHeader)) return core::FrameCheck::kShort;
  core::FrameHeader h;
  std::memcpy(&h, p, sizeof h);
  if (h.magic != 0xA7) return core::FrameCheck::kMagic;
  if (h.version != 1) return core::FrameCheck::kVersion;
  const std::uint32_t min = 32 + ((h.flags & core::kFlagTraced) ? 64 : 0);
  if (h.frame_length < min) return core::FrameCheck::kLength;
  if (h.frame_length > n) return core::FrameCheck::kTruncated;
  return core::FrameCheck::kOk;
}

// Bytes at an 8-aligned address (the header's alignment), exactly `n` of them when n is a
// multiple of 8, so a read past the end is an ASan report.
struct Buffer {
  explicit Buffer(std::size_t bytes) : n(bytes), words(new std::uint64_t[(bytes + 7) / 8]()) {}
  std::byte* data() { return reinterpret_cast<std::byte*>(words.get()); }
  std::size_t n;
  std::unique_ptr<std::uint64_t[]> words;
};

void check_datagram(std::byte* d, std::size_t n) {
  const core::FrameCheck c = core::check_frame(d, n);
  FUZZ_CHECK(c == reference(d, n), "check_frame says %s, the rules %s (%zu bytes)", core::frame_check_name(c),
             core::frame_check_name(reference(d, n)), n);
  rel::FrameCursor cur(d, static_cast<std::uint32_t>(n));
  std::size_t off = 0;
  std::uint32_t frames = 0;
  for (const core::FrameHeader* h = cur.next(); h != nullptr; h = cur.next()) {
    FUZZ_CHECK(reinterpret_cast<const std::byte*>(h) == d + off, "frame %u at offset %td, expected %zu", frames,
               reinterpret_cast<const std::byte*>(h) - d, off);
    FUZZ_CHECK(core::check_frame(h, n - off) == core::FrameCheck::kOk,
               "cursor handed out a frame check_frame refuses: %s",
               core::frame_check_name(core::check_frame(h, n - off)));
    (void)pollux::fuzz::touch(h, h->frame_length);  // within the datagram
    off += rel::wire_size(h->frame_length);
    if (off > n) off = n;
    ++frames;
  }
  const bool stopped_early = off < n;
  FUZZ_CHECK(cur.malformed() == stopped_early, "malformed %d, stopped at %zu of %zu after %u frames", cur.malformed(),
             off, n, frames);
  if (stopped_early) {
    FUZZ_CHECK(core::check_frame(d + off, n - off) != core::FrameCheck::kOk, "cursor stopped at a valid frame (%zu)",
               off);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > kMaxBytes) return 0;
  FuzzInput in(data, size);
  const std::uint8_t mode = in.u8();
  if ((mode & 1) == 0) {
    std::size_t got = 0;
    const std::uint8_t* rest = in.bytes(in.remaining(), &got);
    Buffer b(got);
    if (got != 0) std::memcpy(b.data(), rest, got);
    check_datagram(b.data(), got);
    return 0;
  }
  std::vector<std::byte> dgram;
  const int nframes = 1 + (mode >> 1) % 8;
  for (int i = 0; i < nframes && !in.empty(); ++i) {
    const std::uint16_t length = in.u16();
    const std::uint16_t flags = in.u16();
    const std::uint32_t stream = in.u32();
    const std::uint32_t session = in.u32();
    const std::int64_t ts = static_cast<std::int64_t>(in.u64());
    const bool identity_only = (in.u8() & 1) != 0;
    // The frame in a buffer of its wire size (at least a header), prefilled with a pattern the
    // writer must leave where it writes nothing.
    const std::size_t room = std::max<std::size_t>(rel::wire_size(length), sizeof(core::FrameHeader));
    Buffer f(room);
    std::memset(f.data(), 0x5c, room);
    auto* h = reinterpret_cast<core::FrameHeader*>(f.data());
    const core::FrameHeader before = *h;
    if (identity_only) {
      core::write_frame_identity(h, length, stream, session);
    } else {
      core::write_frame_header(h, length, flags, stream, session, ts);
    }
    FUZZ_CHECK(h->frame_length == length && h->magic == core::kFrameMagic && h->version == core::kFrameVersion &&
                   h->stream_id == stream && h->session_id == session,
               "header fields not as written (frame %d)", i);
    FUZZ_CHECK(h->sequence == before.sequence, "the writer stored a sequence");
    FUZZ_CHECK(identity_only ? h->flags == before.flags && h->timestamp_ns == before.timestamp_ns
                             : h->flags == flags && h->timestamp_ns == ts,
               "flags/timestamp: identity_only %d, flags %u (given %u), ts %lld", identity_only, h->flags, flags,
               static_cast<long long>(h->timestamp_ns));
    const bool fits = length >= core::min_frame_length(h->flags) && length <= room;
    FUZZ_CHECK((core::check_frame(h, room) == core::FrameCheck::kOk) == fits,
               "written frame of length %u (flags %u, room %zu): %s", length, h->flags, room,
               core::frame_check_name(core::check_frame(h, room)));
    const auto* fb = f.data();
    dgram.insert(dgram.end(), fb, fb + room);
  }
  std::size_t got = 0;
  const std::uint8_t* rest = in.bytes(in.remaining(), &got);
  for (std::size_t i = 0; i < got; ++i) dgram.push_back(static_cast<std::byte>(rest[i]));
  Buffer b(dgram.size());
  if (!dgram.empty()) std::memcpy(b.data(), dgram.data(), dgram.size());
  check_datagram(b.data(), dgram.size());
  return 0;
}
