// Recording a stream to disk (docs/ARCHIVE.md). A Recorder subscribes to a topic on a context,
// like any subscriber on any transport, and writes every message it is delivered - its stream,
// session, sequence, publish time and payload, as the frame the publisher sent - to fixed-size
// segment files in a directory, with a checksum per record, a sparse index per segment and the
// directory's catalog. A gap its subscriber reports (a lossy stream that lapped it, a network
// loss that could not be repaired) is recorded as a gap marker, never silently.
//
// A recording whose recorder died (its catalog state still "recording") is resumed by the next
// Recorder of the same topic in that directory: the torn tail is found by its checksums and
// zeroed, a resume marker written, and the recording goes on. A live recorder's recording is
// refused to a second one (an flock per recording).
//
// A context whose configuration has [[recordings]] runs one Recorder per entry on a thread of
// its own; `pollux-recorder --config FILE` is such a context as a service.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pollux/export.h"

namespace pollux {

class Context;

struct RecordingOptions {
  std::string topic;
  std::string directory;  // created if missing
  std::uint64_t segment_size = 128ull << 20;
  enum class Fsync : std::uint8_t { kNone, kInterval, kEvery } fsync = Fsync::kNone;
  std::uint32_t fsync_interval_ms = 1000;
};

struct RecordingStatus {
  std::uint64_t recording_id = 0;
  std::uint32_t stream_id = 0;
  std::string topic;
  std::string directory;
  const char* state = "recording";  // "recording", "stopped" or "failed"
  bool resumed = false;             // continued a recording its earlier recorder left
  std::uint64_t messages = 0;       // recorded by this recorder
  std::uint64_t gaps = 0;           // gap markers written (messages the subscriber never got)
  std::uint64_t bytes = 0;          // record bytes written
  std::uint64_t dropped = 0;        // messages not recorded after an error stopped the recording
  std::uint64_t first_sequence = 0, last_sequence = 0;
  std::uint32_t segment = 0;  // the segment being written
  std::string error;          // "failed": why (the disk is full, ...)
};

namespace detail {
class RecorderImpl;
}

class POLLUX_API Recorder {
 public:
  // Subscribes to `options.topic` on `ctx` and opens (or resumes) its recording in
  // `options.directory`. Errors name the directory or file and the cause.
  static absl::StatusOr<std::unique_ptr<Recorder>> start(Context& ctx, const RecordingOptions& options);
  ~Recorder();  // stop()
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // Takes up to `limit` messages from the subscriber, records them and writes the batch out
  // (syncing per the fsync policy); returns how many it took. One thread at a time. After an
  // error (status().error) messages are still taken, so the live stream never waits on a dead
  // recording, and counted as dropped.
  int poll(int limit = 1024) noexcept;
  // Records what the subscriber still holds, syncs, marks the recording stopped in the catalog
  // and closes the subscriber. Returns the recording's error, if it had one.
  absl::Status stop();
  RecordingStatus status() const;
  // True while a publisher of the stream is attached to the recorder's subscriber (what it
  // publishes is recorded). A recorder started before its publisher records from the moment
  // this turns true, which takes polls.
  bool connected() const noexcept;

  // Drives `recorders` until `stop` is set, the way a context's [[recordings]] thread does: in
  // batches of 4,096, a round that filled no batch followed by a 1 ms sleep (50 us while one
  // waits for its publisher), so the thread does not compete for a core with the live path; the
  // recordings lag the stream by about 1 ms. Call it on a thread of its own.
  static void run(std::span<Recorder* const> recorders, const std::atomic<bool>& stop);

 private:
  explicit Recorder(std::unique_ptr<detail::RecorderImpl> impl);
  std::unique_ptr<detail::RecorderImpl> impl_;
};

}  // namespace pollux
