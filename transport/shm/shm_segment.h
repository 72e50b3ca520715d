// Shared-memory stream segment: one file per stream under shm_dir, mode 0600, holding a
// single-writer broadcast log.
//
//   [ SegmentHeader | checkpoints | subscriber slots ]  header_size bytes (4 KiB multiple)
//   [ log: log_size bytes (power of two) of 32-byte-aligned frames ]
//
// The header starts with magic + version + layout sizes and is validated on attach; the
// publisher writes the magic last and publishes the file with rename(), so an attacher never
// sees a half-built segment.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/cache.h"
#include "core/config.h"
#include "core/frame.h"

namespace pollux::transport::shm {

inline constexpr std::uint64_t kSegmentMagic = 0x31474553584c5050ull;  // "PPLXSEG1"
inline constexpr std::uint32_t kSegmentVersion = 1;
inline constexpr std::uint32_t kCheckpoints = 16;
inline constexpr std::uint32_t kMaxSubscriberSlots = 64;

enum SubscriberState : std::uint32_t { kSlotFree = 0, kSlotActive = 1, kSlotEvicted = 2, kSlotClaiming = 3 };

// Immutable after creation (written before the magic).
struct alignas(core::kFalseSharingRange) SegmentLayout {
  std::uint64_t magic;
  std::uint32_t version;
  std::uint32_t header_size;       // offset of the log
  std::uint64_t log_size;          // power of two
  std::uint32_t frame_header_size; // sizeof(core::FrameHeader)
  std::uint32_t frame_alignment;   // core::kFrameAlignment
  std::uint32_t max_frame;         // largest frame_length (log_size / 32)
  std::uint32_t subscriber_slots;
  std::uint32_t subscriber_slot_size;
  std::uint32_t stream_id;
  std::uint32_t session_id;
  std::int32_t publisher_pid;
  std::uint32_t flow_control;      // core::FlowControl
  std::uint32_t checkpoint_count;  // kCheckpoints
  std::int64_t created_ns;         // CLOCK_REALTIME
};

// Written by the publisher on every frame (tail) or rarely (the rest).
struct alignas(core::kFalseSharingRange) WriterState {
  std::atomic<std::uint64_t> tail;        // log position after the last complete frame
  std::atomic<std::uint32_t> closed;      // 1: publisher closed the stream cleanly
  std::atomic<std::uint32_t> subscribers; // attached subscribers (they add/remove themselves)
  std::atomic<std::int64_t> heartbeat_ns; // publisher's Clock, refreshed at least every 100 ms while active
  std::atomic<std::uint64_t> next_sequence; // informational (pollux-stat)
};

struct alignas(core::kFalseSharingRange) Checkpoints {
  // pos[k]: position of the first frame that started in block k of the log (block = log/16),
  // published after that frame was complete. Lapped subscribers resume there.
  std::atomic<std::uint64_t> pos[kCheckpoints];
};

// One per subscriber, written by that subscriber (position) and read by the publisher for
// flow control; 128 bytes so subscribers never share a line.
struct alignas(core::kFalseSharingRange) SubscriberSlot {
  std::atomic<std::uint32_t> state;   // SubscriberState
  std::int32_t pid;
  std::atomic<std::uint64_t> position; // consumed up to here (released after delivery)
  std::atomic<std::int64_t> last_progress_ns;  // publisher-side bookkeeping for eviction
  std::uint64_t subscriber_id;
};

struct SegmentHeader {
  SegmentLayout layout;
  WriterState writer;
  Checkpoints checkpoints;
  // SubscriberSlot slots[layout.subscriber_slots] follow.
};
static_assert(sizeof(SegmentLayout) == 128);
static_assert(sizeof(WriterState) == 128);
static_assert(sizeof(Checkpoints) == 128);
static_assert(sizeof(SubscriberSlot) == 128);
static_assert(offsetof(SegmentHeader, writer) == 128);
static_assert(offsetof(SegmentHeader, checkpoints) == 256);
static_assert(sizeof(SegmentHeader) == 384);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);

// A mapped segment (either side). Unmaps on destruction; the creator unlinks on close().
class Segment {
 public:
  struct Options {
    std::string path;
    std::uint32_t stream_id = 0;
    std::uint32_t session_id = 0;
    std::uint64_t log_size = 1u << 24;
    std::uint32_t subscriber_slots = 32;
    core::FlowControl flow_control = core::FlowControl::kLossy;
  };
  // Publisher side: creates the file (replacing a segment whose publisher is dead or closed;
  // AlreadyExists when a live publisher owns the stream).
  static absl::StatusOr<std::unique_ptr<Segment>> create(const Options& opt);
  // Subscriber side: maps and validates an existing segment. NotFound if there is none yet;
  // FailedPrecondition/DataLoss with the reason when the header is wrong.
  static absl::StatusOr<std::unique_ptr<Segment>> attach(const std::string& path, std::uint32_t expect_stream_id);
  ~Segment();

  SegmentHeader* header() const noexcept { return header_; }
  SubscriberSlot* slot(std::uint32_t i) const noexcept {
    return reinterpret_cast<SubscriberSlot*>(reinterpret_cast<std::byte*>(header_) + sizeof(SegmentHeader)) + i;
  }
  std::byte* log() const noexcept { return log_; }
  std::uint64_t log_size() const noexcept { return log_size_; }
  const std::string& path() const noexcept { return path_; }
  std::uint64_t inode() const noexcept { return inode_; }
  // Removes the file (publisher on close); mappings stay valid.
  void unlink();

  static std::uint32_t header_bytes(std::uint32_t subscriber_slots);

 private:
  Segment() = default;
  SegmentHeader* header_ = nullptr;
  std::byte* log_ = nullptr;
  std::size_t map_len_ = 0;
  std::uint64_t log_size_ = 0;
  std::uint64_t inode_ = 0;
  std::string path_;
  bool owner_ = false;
};

std::string segment_path(const core::Config& cfg, std::uint32_t stream_id);
bool process_alive(int pid);

}  // namespace pollux::transport::shm
