// Shared-memory stream segment: one file per stream under shm_dir, mode 0600 (0660 with
// shm.group), holding a single-writer broadcast log.
//
//   [ SegmentHeader (layout | writer | checkpoints | wake) | subscriber slots ]  header_size bytes (4 KiB multiple)
//   [ log: log_size bytes (power of two) of 32-byte-aligned frames ]
//
// The header starts with magic + version + layout sizes and is validated on attach; the
// publisher reserves the whole file (posix_fallocate), builds it unnamed (O_TMPFILE), writes
// the magic last and publishes it with rename(), so an attacher never sees a half-built
// segment and a failed create leaves nothing behind. Attach opens with O_NOFOLLOW and refuses
// files of other users and files others may write (core/shm_file.h). Every layout field is
// validated once and the validated copy (Segment::layout()) is what readers and writers use
// afterwards, so a later change of the shared header cannot move them outside the mapping.
//
// The mapping is guarded against truncation (core/mapping_guard.h): a SIGBUS in it replaces
// it with zero memory and poisons the writer's tail (every view reads as overwritten);
// truncated() tells the owner on its control path.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/cache.h"
#include "core/config.h"
#include "core/frame.h"
#include "core/process.h"
#include "core/shm_file.h"
#include "transport/shm/shm_config.h"

namespace pollux::transport::shm {

inline constexpr std::uint64_t kSegmentMagic = 0x31474553584c5050ull;  // "PPLXSEG1"
// 2: publisher_start, boot_id; SubscriberSlot::start. 3: wake_flags, WakeState (interrupt mode).
inline constexpr std::uint32_t kSegmentVersion = 3;
inline constexpr std::uint32_t kCheckpoints = 16;
inline constexpr std::uint32_t kMaxSubscriberSlots = 64;
inline constexpr std::uint64_t kMinLogSize = 64u << 10;
inline constexpr std::uint64_t kMaxLogSize = 4ull << 30;
// Log positions are free-running byte counts; a writer needs centuries to pass 2^62 bytes, so a
// larger tail or checkpoint is corruption (and keeps position arithmetic far from overflow).
inline constexpr std::uint64_t kMaxLogPosition = 1ull << 62;
// The tail value a truncated (replaced) mapping is poisoned with: every position is "lapped".
inline constexpr std::uint64_t kPoisonTail = kMaxLogPosition;

enum SubscriberState : std::uint32_t { kSlotFree = 0, kSlotActive = 1, kSlotEvicted = 2, kSlotClaiming = 3 };

// Immutable after creation (written before the magic).
struct alignas(core::kFalseSharingRange) SegmentLayout {
  std::uint64_t magic;
  std::uint32_t version;
  std::uint32_t header_size;        // offset of the log
  std::uint64_t log_size;           // power of two
  std::uint32_t frame_header_size;  // sizeof(core::FrameHeader)
  std::uint32_t frame_alignment;    // core::kFrameAlignment
  std::uint32_t max_frame;          // largest frame_length (log_size / 32)
  std::uint32_t subscriber_slots;
  std::uint32_t subscriber_slot_size;
  std::uint32_t stream_id;
  std::uint32_t session_id;
  std::int32_t publisher_pid;
  std::uint32_t flow_control;      // shm::FlowControl
  std::uint32_t checkpoint_count;  // kCheckpoints
  std::int64_t created_ns;         // CLOCK_REALTIME
  // Identity of the publisher process beyond its pid, which the kernel reuses: its start time
  // (clock ticks after boot, /proc/<pid>/stat field 22) and a hash of the boot id.
  std::uint64_t publisher_start;
  std::uint64_t boot_id;
  // How the writer orders its tail store before its load of WakeState::sleepers (kWake*). A
  // reader may only sleep if it can pair with it (LogReader::arm); any value is safe to read.
  std::uint32_t wake_flags;
};

// SegmentLayout::wake_flags. Without kWakeWriterMembarrier the writer issues a full fence
// (seq_cst) after every tail store, which a sleeper pairs with its own full fence. With it the
// writer's process is registered for MEMBARRIER_CMD_GLOBAL_EXPEDITED and the writer issues only
// a compiler barrier: a sleeper must then run membarrier(GLOBAL_EXPEDITED) (or not sleep).
inline constexpr std::uint32_t kWakeWriterMembarrier = 1;

// Written by the publisher on every frame (tail) or rarely (the rest).
struct alignas(core::kFalseSharingRange) WriterState {
  std::atomic<std::uint64_t> tail;           // log position after the last complete frame
  std::atomic<std::uint32_t> closed;         // 1: publisher closed the stream cleanly
  std::atomic<std::uint32_t> subscribers;    // attached subscribers (they add/remove themselves)
  std::atomic<std::int64_t> heartbeat_ns;    // publisher's Clock, refreshed at least every 100 ms while active
  std::atomic<std::uint64_t> next_sequence;  // informational (pollux-stat)
};

struct alignas(core::kFalseSharingRange) Checkpoints {
  // pos[k]: position of the first frame that started in block k of the log (block = log/16),
  // published after that frame was complete. Lapped subscribers resume there.
  std::atomic<std::uint64_t> pos[kCheckpoints];
};

// One per subscriber, written by that subscriber (position) and read by the publisher for
// flow control; 128 bytes so subscribers never share a line.
struct alignas(core::kFalseSharingRange) SubscriberSlot {
  std::atomic<std::uint32_t> state;  // SubscriberState
  std::int32_t pid;
  std::atomic<std::uint64_t> position;         // consumed up to here (released after delivery)
  std::atomic<std::int64_t> last_progress_ns;  // publisher-side bookkeeping for eviction
  std::uint64_t subscriber_id;
  std::uint64_t start;  // start time of pid (see SegmentLayout::publisher_start)
};

// Interrupt mode (docs/ARCHITECTURE.md, "Wakeup protocol: shm"). On its own line: subscribers
// write it only when they go to sleep or wake up, the writer reads it after every tail store
// (a load that hits its cache while nobody sleeps) and writes it only to wake sleepers.
struct alignas(core::kFalseSharingRange) WakeState {
  // Bit i: the subscriber in slot i sleeps (or is about to) and wants a FUTEX_WAKE on `word`.
  // Set by that subscriber, cleared by it on wake-up and by the writer when it wakes everyone.
  std::atomic<std::uint64_t> sleepers;
  // The futex word sleepers wait on (shared futex); the writer adds 1 before each FUTEX_WAKE.
  std::atomic<std::uint32_t> word;
  std::uint32_t reserved;
};

struct SegmentHeader {
  SegmentLayout layout;
  WriterState writer;
  Checkpoints checkpoints;
  WakeState wake;
  // SubscriberSlot slots[layout.subscriber_slots] follow.
};
static_assert(sizeof(SegmentLayout) == 128);
static_assert(sizeof(WriterState) == 128);
static_assert(sizeof(Checkpoints) == 128);
static_assert(sizeof(WakeState) == 128);
static_assert(sizeof(SubscriberSlot) == 128);
static_assert(offsetof(SegmentHeader, writer) == 128);
static_assert(offsetof(SegmentHeader, checkpoints) == 256);
static_assert(offsetof(SegmentHeader, wake) == 384);
static_assert(sizeof(SegmentHeader) == 512);
static_assert(kMaxSubscriberSlots <= 64, "WakeState::sleepers has one bit per slot");
static_assert(std::atomic<std::uint32_t>::is_always_lock_free && sizeof(std::atomic<std::uint32_t>) == 4);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(offsetof(SegmentLayout, publisher_start) == 72 && offsetof(SegmentLayout, boot_id) == 80);
static_assert(offsetof(SegmentLayout, wake_flags) == 88);
static_assert(offsetof(SegmentHeader, writer) + offsetof(WriterState, tail) == 128);

// A mapped segment (either side). Unmaps on destruction; the creator unlinks on close().
class Segment {
 public:
  struct Options {
    std::string path;
    std::uint32_t stream_id = 0;
    std::uint32_t session_id = 0;
    std::uint64_t log_size = 1u << 24;
    std::uint32_t subscriber_slots = 32;
    shm::FlowControl flow_control = shm::FlowControl::kLossy;
    core::FileAccess access;  // shm.group
  };
  // Publisher side: creates the file (replacing a segment of ours whose publisher is dead or
  // closed; AlreadyExists when a live publisher owns the stream, PermissionDenied when the file
  // there belongs to someone else; ResourceExhausted when the directory is full).
  static absl::StatusOr<std::unique_ptr<Segment>> create(const Options& opt);
  // Subscriber side: maps and validates an existing segment. NotFound if there is none yet;
  // PermissionDenied/FailedPrecondition when the file is not one we may trust (owner, mode,
  // type); DataLoss/FailedPrecondition with the reason when the header is wrong.
  static absl::StatusOr<std::unique_ptr<Segment>> attach(const std::string& path, std::uint32_t expect_stream_id,
                                                         const core::FileAccess& access = {});
  ~Segment();

  SegmentHeader* header() const noexcept { return header_; }
  // The layout as validated at attach (or written at create): use this, never the shared copy.
  const SegmentLayout& layout() const noexcept { return layout_; }
  SubscriberSlot* slot(std::uint32_t i) const noexcept {
    return reinterpret_cast<SubscriberSlot*>(reinterpret_cast<std::byte*>(header_) + sizeof(SegmentHeader)) + i;
  }
  std::byte* log() const noexcept { return log_; }
  std::uint64_t log_size() const noexcept { return log_size_; }
  const std::string& path() const noexcept { return path_; }
  std::uint64_t inode() const noexcept { return inode_; }
  // Removes the file (publisher on close); mappings stay valid.
  void unlink();

  // Control path: true once the file is shorter than the mapping (fstat) or a SIGBUS was
  // absorbed in it. The mapping is then replaced by zero memory (neutralize()).
  bool truncated() const noexcept;
  // Replaces the mapping by zero-filled private memory with a poisoned tail; idempotent. The
  // addresses stay valid (views and other threads reading the header never fault).
  void neutralize() noexcept;
  // Closes the file descriptor (a retired, neutralized segment keeps only its addresses).
  void release_file() noexcept;

  static std::uint32_t header_bytes(std::uint32_t subscriber_slots);

 private:
  Segment() = default;
  void map_guard() noexcept;
  SegmentHeader* header_ = nullptr;
  std::byte* log_ = nullptr;
  std::size_t map_len_ = 0;
  std::uint64_t log_size_ = 0;
  std::uint64_t inode_ = 0;
  SegmentLayout layout_{};
  std::string path_;
  int fd_ = -1;     // kept open to fstat the size on the control path
  int guard_ = -1;  // core::guard_mapping id
  bool owner_ = false;
};

std::string segment_path(const core::Config& cfg, std::uint32_t stream_id);

// Process identity (core/process.h): a pid plus the process's start time, so a reused pid is
// not taken for the process that wrote it; zombies count as gone.
using core::boot_id_hash;
using core::process_alive;
using core::process_start_time;
using core::self_start_time;
// Checks a segment's layout as attach does (magic, version, sizes against the file's `size`).
absl::Status validate_layout(const SegmentLayout& l, std::size_t size, const std::string& path);

// pollux-stat's view of a segment: a private copy of its header, validated like attach.
struct SegmentStatus {
  struct Subscriber {
    std::uint32_t slot = 0;
    std::uint32_t state = 0;  // SubscriberState
    int pid = 0;
    bool alive = false;          // active, and its process runs
    std::uint64_t position = 0;  // log position consumed up to
  };
  std::string path;
  std::uint64_t inode = 0;
  SegmentLayout layout{};
  bool closed = false;
  bool publisher_alive = false;
  std::uint64_t tail = 0;               // the publisher's position (bytes)
  std::uint64_t next_sequence = 0;      // as of the publisher's last heartbeat (<= 100 ms old)
  std::uint32_t attached = 0;           // WriterState::subscribers
  std::vector<Subscriber> subscribers;  // slots not free
};
absl::StatusOr<SegmentStatus> read_segment_status(const std::string& path);
// Stream logs (pollux-*-stream-*.log) in dir.
std::vector<std::string> list_segment_files(const std::string& dir);
// pollux-stat --clean: removes the log at `path` when its publisher closed it or is dead and
// no live process is attached to it; true when removed.
absl::StatusOr<bool> remove_if_abandoned(const std::string& path);

// The segment's publisher is running: same boot, pid alive with the recorded start time.
bool publisher_alive(const SegmentLayout& l) noexcept;

}  // namespace pollux::transport::shm
