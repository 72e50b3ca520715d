// The catalog of a recording directory (docs/ARCHIVE.md): one entry per recording - its id,
// stream and topic, state, segments, first/last sequence and publish time, counts, and the error
// that stopped it. One binary file, "<dir>/catalog", replaced atomically: written to
// "catalog.tmp", synced, renamed over "catalog", the directory synced. Its header carries a
// crc32c of the entries; a catalog that fails it is refused at load with the file named, never
// half-read. Writers serialise their read-modify-write on an flock of "<dir>/catalog.lock";
// readers need no lock (a rename is atomic).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pollux::core::archive {

enum class RecordingState : std::uint32_t {
  kRecording = 1,  // a recorder writes it (or died writing it: its next start resumes it)
  kStopped = 2,    // closed cleanly
  kFailed = 3,     // stopped on an error (error says which): nothing more is added
};
const char* recording_state_name(RecordingState s);

struct RecordingInfo {
  std::uint64_t id = 0;
  std::uint32_t stream_id = 0;
  RecordingState state = RecordingState::kRecording;
  std::string topic;
  std::uint64_t segment_size = 0;
  std::uint32_t first_segment = 0;  // segments first_segment..last_segment exist
  std::uint32_t last_segment = 0;
  std::uint64_t first_sequence = 0, last_sequence = 0;  // as of the last catalog update
  std::int64_t first_time_ns = 0, last_time_ns = 0;     // publish times (core::Clock)
  std::uint64_t frames = 0, gaps = 0, bytes = 0;
  std::int64_t started_ns = 0, stopped_ns = 0;  // CLOCK_REALTIME; stopped 0 while recording
  std::string error;                            // kFailed: why
};

class Catalog {
 public:
  // The catalog of `dir` (none yet: an empty one). Errors name the file and what is wrong with
  // it (not a catalog, another version, a crc mismatch, truncated).
  static absl::StatusOr<Catalog> load(const std::string& dir);
  // Loads the catalog under the directory's lock, lets `change` edit it, and writes it back
  // (nothing is written when `change` fails). Returns the catalog as written.
  static absl::StatusOr<Catalog> update(const std::string& dir, const std::function<absl::Status(Catalog&)>& change);

  const std::vector<RecordingInfo>& recordings() const noexcept { return recordings_; }
  RecordingInfo* find(std::uint64_t id) noexcept;
  const RecordingInfo* find(std::uint64_t id) const noexcept;
  // A new recording with the next id (ids are never reused in a directory).
  RecordingInfo& add(std::uint32_t stream_id, const std::string& topic, std::uint64_t segment_size);
  // Removes the entry (its files are the caller's to delete).
  bool remove(std::uint64_t id) noexcept;

  static std::string path(const std::string& dir) { return dir + "/catalog"; }

 private:
  absl::Status write(const std::string& dir) const;
  std::vector<RecordingInfo> recordings_;
  std::uint64_t next_id_ = 1;
};

}  // namespace pollux::core::archive
