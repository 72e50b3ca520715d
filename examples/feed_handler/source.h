// The feed to replay: a generated stream in memory, or a BinaryFILE read window by window
// (itch::ChunkReader: pread() into a private buffer, so a file truncated during the replay
// is an error naming the offset, not a SIGBUS). Validated up front.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "feed_handler/feed_config.h"
#include "itch/file_input.h"
#include "itch/reader.h"

namespace pollux::feed {

class Source {
 public:
  std::string description;     // for the summary
  std::uint64_t messages = 0;  // counted by the validating pass
  double prepare_seconds = 0;  // generating or reading + validating

  // The bytes at window_offset() of the feed (BinaryFILE framing; length prefixes may be 0).
  // A generated feed is one window; a file is read in windows whose end may cut a record.
  std::span<const std::uint8_t> window() const noexcept { return file_ ? file_->window() : generated_; }
  std::uint64_t window_offset() const noexcept { return file_ ? file_->window_offset() : 0; }
  bool last_window() const noexcept { return !file_ || file_->last(); }
  // Next window: keeps window()[consumed, end) (a cut record) at its front. Views into the
  // current window die. An error names the file ("<path>: input truncated at offset N: ...").
  absl::Status Advance(std::size_t consumed) { return file_ ? file_->Advance(consumed) : absl::OkStatus(); }
  absl::Status Rewind() { return file_ ? file_->Rewind() : absl::OkStatus(); }
  // "<path>" or "generated feed": how errors name the input.
  const std::string& name() const noexcept { return name_; }

 private:
  friend absl::StatusOr<std::unique_ptr<Source>> OpenSource(const FeedConfig& cfg);
  std::string name_;
  std::vector<std::uint8_t> generated_;
  std::optional<itch::ChunkReader> file_;
};

// Generates or opens the source of `cfg` and validates every record (one pass over the
// windows), so a malformed file fails before anything is published; the source is then at
// its first window. Errors name the input: "<path>: itch: offset N: ...".
absl::StatusOr<std::unique_ptr<Source>> OpenSource(const FeedConfig& cfg);

// Runs `scan(window, &result)` over every window of `src`, in order, from the current one:
// `scan` frames the window (ForEachMessage, a MessageCursor) and returns false to stop (the
// caller knows why; ScanSource then returns OK). A record cut by a window's end is carried
// into the next window; `before_advance()` runs before a window is replaced (views into it
// die then) and may stop the scan too by returning false. The first framing error comes
// back with its file offset and the input's name, an I/O error (truncation) as it is.
template <class Scan, class BeforeAdvance>
absl::Status ScanSource(Source& src, Scan&& scan, BeforeAdvance&& before_advance) {
  for (;;) {
    itch::ParseResult r;
    if (!scan(src.window(), &r)) return absl::OkStatus();
    if (!src.last_window() && (r.ok() || r.error == itch::ParseError::kTruncated)) {
      if (!before_advance()) return absl::OkStatus();
      if (absl::Status s = src.Advance(static_cast<std::size_t>(r.offset)); !s.ok()) return s;
      continue;
    }
    if (r.ok()) return absl::OkStatus();
    r.offset += src.window_offset();
    const absl::Status s = r.ToStatus();
    return absl::Status(s.code(), absl::StrCat(src.name(), ": ", s.message()));
  }
}

}  // namespace pollux::feed
