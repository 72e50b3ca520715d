// Fuzzes what a shm subscriber does with a segment another local process wrote: Segment::attach
// (transport/shm/shm_segment.cc) validates the file, then LogReader (transport/shm/shm_log.h)
// reads every frame. A hostile or broken publisher controls every byte of the file and may keep
// changing them while we read.
//
// Setup (once per process): the product's own writer (Segment::create + LogWriter) builds
// three valid segments - a short stream, a stream that wrapped the log (padding frames,
// checkpoints in use, traced frames) and a closed one - and their bytes are kept as templates.
// Input: which template, patches applied to the file before attach (to the layout, the writer
// state, the checkpoints, the subscriber slots, frame headers, or anywhere), a file size
// change, attach options, then a list of reader steps: poll, release, and patches applied to
// the live mapping between polls.
//
// Invariants (besides "no crash, no out-of-bounds access, no UB"):
//  - attach accepts only a file whose size matches its layout, and rejects with a Status;
//  - every message is a frame inside the log: [frame, frame + length) within the mapping, a
//    header's worth at least and at most max_frame bytes, of this stream and session, of the
//    sequence the descriptor says; its token is the position after it; a traced frame is long
//    enough for its trace block;
//  - message sequences strictly increase; a poll returns at most what was asked.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/frame.h"
#include "core/trace.h"
#include "tests/fuzz/formats.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/rx_names.h"
#include "transport/shm/shm_config.h"
#include "transport/shm/shm_log.h"
#include "transport/shm/shm_segment.h"
#include "transport/transport.h"

namespace {

using namespace pollux::fuzz::rx_names;  // NOLINT(google-build-using-namespace)
namespace shm = pollux::transport::shm;

constexpr std::uint32_t kStream = 9;
constexpr std::uint32_t kSession = 0xabcd;
constexpr std::uint64_t kLogSize = 64u << 10;  // the smallest log create() accepts

struct Template {
  std::vector<std::byte> bytes;
  std::uint32_t header_size = 0;
};

std::string scratch_path() {
  struct stat st;
  const std::string dir = ::stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
  return dir + "/pollux-fuzz-shm-" + std::to_string(::getpid()) + ".log";
}

// A segment written by the real writer: `frames` messages of varying sizes (every 5th traced).
Template make_template(int frames, bool close) {
  shm::Segment::Options o;
  o.path = scratch_path();
  o.stream_id = kStream;
  o.session_id = kSession;
  o.log_size = kLogSize;
  o.subscriber_slots = 4;
  auto seg = shm::Segment::create(o);
  FUZZ_CHECK(seg.ok(), "cannot create the template segment: %s", seg.status().ToString().c_str());
  shm::LogWriter w;
  w.init(seg->get(), shm::FlowControl::kLossy);
  for (int i = 0; i < frames; ++i) {
    const bool traced = i % 5 == 4;
    const std::uint32_t payload = 8 + static_cast<std::uint32_t>((i * 37) % 700);
    const std::uint32_t len = core::kFrameHeaderSize + (traced ? sizeof(core::StageTrace) : 0) + payload;
    shm::LogWriter::Claim c;
    FUZZ_CHECK(w.try_claim(len, &c), "lossy claim failed");
    for (std::uint32_t b = core::kFrameHeaderSize; b < len; ++b) c.frame[b] = static_cast<std::byte>(i + b);
    w.commit(c, traced ? core::kFlagTraced : core::kFlagNone, 1000 + i);
  }
  w.heartbeat(1);
  if (close) w.close();
  Template t;
  t.header_size = (*seg)->header()->layout.header_size;
  const auto* p = reinterpret_cast<const std::byte*>((*seg)->header());
  t.bytes.assign(p, p + t.header_size + kLogSize);
  (*seg)->unlink();
  return t;
}

const std::vector<Template>& templates() {
  static const std::vector<Template> t = [] {
    std::vector<Template> v(pollux::fuzz::shm::kTemplates);
    v[pollux::fuzz::shm::kShort] = make_template(6, false);
    v[pollux::fuzz::shm::kWrapped] = make_template(400, false);
    v[pollux::fuzz::shm::kClosed] = make_template(40, true);
    return v;
  }();
  return t;
}

// Where a patch lands: a region of the segment picked by the input.
std::size_t patch_offset(FuzzInput& in, std::size_t size, std::uint32_t header_size) {
  const std::uint32_t v = in.u32();
  switch (in.u8() % 6) {
    case 0:
      return v % sizeof(shm::SegmentLayout);  // layout
    case 1:
      return offsetof(shm::SegmentHeader, writer) + v % sizeof(shm::WriterState);  // tail, closed...
    case 2:
      return offsetof(shm::SegmentHeader, checkpoints) + v % sizeof(shm::Checkpoints);
    case 3:
      return sizeof(shm::SegmentHeader) + v % (4 * sizeof(shm::SubscriberSlot));  // slots
    case 4:
      return header_size + (v * core::kFrameAlignment + in.u8() % 32) % (size - header_size);  // a frame header
    default:
      return v % size;
  }
}

void apply_patches(FuzzInput& in, std::byte* base, std::size_t size, std::uint32_t header_size, int count) {
  for (int i = 0; i < count && !in.empty(); ++i) {
    const std::size_t at = size > header_size ? patch_offset(in, size, header_size) : in.u32() % (size + 1);
    std::size_t got = 0;
    const std::uint8_t* src = in.bytes(1 + in.u8() % 16, &got);
    const std::size_t n = std::min(got, size - std::min(at, size));
    if (n != 0) std::memcpy(base + at, src, n);
  }
}

bool write_file(const std::string& path, const std::vector<std::byte>& bytes) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  (void)::fchmod(fd, 0600);
  const bool ok = ::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size());
  ::close(fd);
  return ok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = scratch_path();
  const std::vector<Template>& ts = templates();
  FuzzInput in(data, size);
  const Template& t = ts[in.u8() % ts.size()];

  // The file as the hostile publisher left it.
  std::vector<std::byte> image = t.bytes;
  apply_patches(in, image.data(), image.size(), t.header_size, in.u8() % 16);
  const std::uint8_t resize = in.u8();
  if (resize >= 240) image.resize(resize == 255 ? in.u16() : image.size() + (resize - 247) * 8);
  const std::uint32_t expect_stream = in.u8() < 8 ? in.u32() : kStream;
  FUZZ_CHECK(write_file(path, image), "cannot write %s", path.c_str());
  auto seg = shm::Segment::attach(path, expect_stream);
  ::unlink(path.c_str());
  if (!seg.ok()) return 0;
  shm::Segment& s = **seg;
  const shm::SegmentLayout l = s.header()->layout;  // a copy: live patches may rewrite the mapped one
  FUZZ_CHECK(image.size() == l.header_size + l.log_size && s.log_size() == l.log_size &&
                 s.log() == reinterpret_cast<std::byte*>(s.header()) + l.header_size,
             "attached a %zu-byte file with header %u + log %llu", image.size(), l.header_size,
             static_cast<unsigned long long>(l.log_size));
  const std::uint64_t log_size = s.log_size();
  const std::uint32_t max_frame = l.max_frame;
  const std::uint32_t stream = l.stream_id, session = l.session_id;

  shm::LogReader reader;
  shm::SubscriberSlot* slot = in.flag() ? s.slot(in.u8() % l.subscriber_slots) : nullptr;
  if (!reader.init(&s, slot, in.flag())) return 0;  // a corrupt tail: the subscriber reports it, reads nothing

  RxDesc out[64];
  std::uint64_t last_seq = 0;
  for (int step = 0; step < 64 && !in.empty(); ++step) {
    const std::uint8_t op = in.u8();
    if (op < pollux::fuzz::shm::kPollStep) {  // the other process writes while we read
      apply_patches(in, reinterpret_cast<std::byte*>(s.header()), l.header_size + log_size, l.header_size, 1 + op % 4);
      continue;
    }
    const std::uint32_t max = 1 + in.u8() % 64;
    const std::uint32_t n = reader.poll(out, max);
    FUZZ_CHECK(n <= max, "poll returned %u > %u", n, max);
    for (std::uint32_t i = 0; i < n; ++i) {
      const RxDesc& d = out[i];
      FUZZ_CHECK(d.session_id == session, "event of session %u in a segment of session %u", d.session_id, session);
      if (d.kind != RxKind::kMessage) continue;
      const auto* f = reinterpret_cast<const std::byte*>(d.frame);
      const std::ptrdiff_t at = f - s.log();
      FUZZ_CHECK(at >= 0 && static_cast<std::uint64_t>(at) < log_size && d.length >= core::kFrameHeaderSize &&
                     d.length <= max_frame && d.length <= log_size - static_cast<std::uint64_t>(at),
                 "message of %u bytes at log offset %td (log %llu bytes, max frame %u)", d.length, at,
                 static_cast<unsigned long long>(log_size), max_frame);
      FUZZ_CHECK(d.token >= d.length && ((d.token - core::align_up(d.length, core::kFrameAlignment)) &
                                         (log_size - 1)) == static_cast<std::uint64_t>(at),
                 "token %llu does not follow the frame at offset %td", static_cast<unsigned long long>(d.token), at);
      FUZZ_CHECK(d.sequence > last_seq, "message sequence %llu after %llu", static_cast<unsigned long long>(d.sequence),
                 static_cast<unsigned long long>(last_seq));
      last_seq = d.sequence;
      // Nothing writes between poll() and these checks: the header is the one the reader accepted.
      core::FrameHeader h;
      std::memcpy(&h, f, sizeof h);
      FUZZ_CHECK(h.frame_length == d.length && h.stream_id == stream && h.session_id == session &&
                     h.sequence == d.sequence && h.magic == core::kFrameMagic && !(h.flags & core::kFlagPadding),
                 "message descriptor disagrees with its frame header (length %u/%u, sequence %llu/%llu, flags 0x%x)",
                 h.frame_length, d.length, static_cast<unsigned long long>(h.sequence),
                 static_cast<unsigned long long>(d.sequence), h.flags);
      FUZZ_CHECK(!(h.flags & core::kFlagTraced) || d.length >= core::kFrameHeaderSize + sizeof(core::StageTrace),
                 "traced frame of %u bytes delivered: shorter than header + trace block (%zu)", d.length,
                 core::kFrameHeaderSize + sizeof(core::StageTrace));
      (void)pollux::fuzz::touch(f, d.length);
    }
    if (in.flag()) reader.release(out, n, in.flag());
    (void)reader.safe_floor();
    (void)reader.caught_up();
  }
  return 0;
}
