// Replaying a recording (docs/ARCHIVE.md) into a publisher: a range of a recording's messages,
// published again on any topic and transport, at the original pace, a multiple of it, or as fast
// as the publisher takes them.
//
// The replayed messages are new messages of the publisher's stream: its session, its sequences
// (from its next one), its publish time. Their payloads are the recorded ones, byte for byte,
// in recording order. Gap and resume markers in the range are counted (ReplayStatus), not
// published: the recording says which sequences it never had.
//
// Every record is checked before it is published (checksum, length, frame header, stream). At a
// record that fails, the replay stops at the last good message with an error naming the segment
// file and the offset; nothing that fails its check is ever published.
//
// A recording still being written is replayed up to where it was written when the replay gets
// there (a range whose end lies further waits for it, see ReplayOptions::to).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pollux/export.h"

namespace pollux {

class Publisher;

// Where a range starts or ends.
struct ReplayPosition {
  enum class Kind : std::uint8_t {
    kNone,      // from: the recording's first message; to: its last one
    kSequence,  // the first message whose sequence is >= sequence (from), or <= sequence (to)
    kTime,      // published at or after (from) / at or before (to) wall_ns
  } kind = Kind::kNone;
  std::uint64_t sequence = 0;
  // CLOCK_REALTIME nanoseconds. Messages carry their publisher host's pollux::now_ns(); the
  // recording's first segment recorded both clocks when it was created, which converts one to the
  // other: exact when publisher and recorder share a host (across hosts the publisher's clock is
  // another host's, and the conversion is off by their clocks' difference).
  std::int64_t wall_ns = 0;

  static ReplayPosition at_sequence(std::uint64_t s) { return {Kind::kSequence, s, 0}; }
  static ReplayPosition at_time(std::int64_t wall_ns) { return {Kind::kTime, 0, wall_ns}; }
};

struct ReplayOptions {
  std::string directory;  // the recording directory (its catalog)
  std::uint64_t recording_id = 0;
  ReplayPosition from, to;
  enum class Pace : std::uint8_t {
    kMax,       // as fast as the publisher takes them (back-pressure waits, never drops)
    kOriginal,  // the recorded spacing between publish times
    kSpeed,     // the recorded spacing divided by `speed`
  } pace = Pace::kMax;
  double speed = 1.0;  // kSpeed: > 0 (2 = twice as fast)
  // A range whose `to` lies beyond what a live recording holds waits for the recorder (true), or
  // ends at what is written when the replay gets there (false).
  bool follow = false;
};

struct ReplayStatus {
  const char* state = "replaying";  // "replaying", "done" or "failed"
  std::uint64_t messages = 0;       // published
  std::uint64_t bytes = 0;          // their payload bytes
  std::uint64_t gap_markers = 0;    // in the range: messages the recording never had
  std::uint64_t missing = 0;        // the messages those gap markers say are missing
  std::uint64_t resume_markers = 0;
  std::uint64_t back_pressured = 0;                     // offers refused (back-pressure, no subscriber yet), retried
  std::uint64_t first_sequence = 0, last_sequence = 0;  // recorded sequences of the first/last published
  std::string error;                                    // "failed": why (file and offset for damage)
};

namespace detail {
class ReplayImpl;
}

class POLLUX_API Replay {
 public:
  // Opens recording `options.recording_id` of `options.directory` and positions at `from`. The
  // publisher must outlive the Replay; one thread uses both. Errors: the directory or recording
  // does not exist, a segment cannot be read, a bad option (names which).
  static absl::StatusOr<std::unique_ptr<Replay>> start(Publisher& publisher, const ReplayOptions& options);
  ~Replay();
  Replay(const Replay&) = delete;
  Replay& operator=(const Replay&) = delete;

  // Publishes up to `limit` messages that are due (pace), stopping early at back-pressure;
  // returns how many were published. No allocation, no exception.
  int poll(int limit = 256) noexcept;
  // The range is published (or the replay failed).
  bool done() const noexcept;
  // poll() until done(), idling between polls: sleeps until the next message is due (paced,
  // 100 ms at most at a time) or yields (back-pressure, a live recording's end). `keep_going`,
  // when given, is asked after every poll and every sleep; false stops the run (done() stays
  // false). Returns the error of a failed replay.
  absl::Status run(const std::function<bool()>& keep_going = nullptr);
  // How long, at most, until poll() can publish (0: now, < 0: done).
  std::int64_t next_due_in_ns() const noexcept;
  ReplayStatus status() const;

 private:
  explicit Replay(std::unique_ptr<detail::ReplayImpl> impl);
  std::unique_ptr<detail::ReplayImpl> impl_;
};

}  // namespace pollux
