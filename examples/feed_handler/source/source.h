// The feed to publish: a generated stream in memory, a BinaryFILE read window by window
// (itch::ChunkReader: pread() into a private buffer, so a file truncated during the replay
// is an error naming the offset, not a SIGBUS), both validated up front - or, live, the
// MoldUDP64 lines A and B of an exchange (live_source.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "feed_handler/config/feed_config.h"
#include "feed_handler/publish/notice.h"
#include "itch/file_input.h"
#include "itch/reader.h"
#include "pollux/idle.h"
#include "pollux/pollux.h"

namespace pollux::feed {

// What the publisher replays, a window at a time: BinaryFILE bytes (length-prefixed ITCH
// messages). A replay source (generated feed or file) is validated up front; a live source
// (live_source.h: MoldUDP64 lines A and B) hands out validated windows as packets arrive and
// may put a notice (a gap, a stale feed, a new session) before a window. The calls are per
// window, never per message.
class Source {
 public:
  virtual ~Source() = default;

  std::string description;     // for the summary
  std::uint64_t messages = 0;  // replay: counted by the validating pass (0 when live: unknown)
  double prepare_seconds = 0;  // generating or reading + validating; joining when live

  // The bytes at window_offset() of the feed (BinaryFILE framing; length prefixes may be 0).
  // A generated feed is one window; a file is read in windows whose end may cut a record.
  virtual std::span<const std::uint8_t> window() const noexcept = 0;
  virtual std::uint64_t window_offset() const noexcept = 0;
  virtual bool last_window() const noexcept = 0;
  // Next window: keeps window()[consumed, end) (a cut record) at its front. Views into the
  // current window die. An error names the file ("<path>: input truncated at offset N: ...").
  // A live source waits here for the network (running the idle hook) until it has a window
  // or a notice, the session is over (last_window()), or the stop flag is set.
  virtual absl::Status advance(std::size_t consumed) = 0;
  virtual absl::Status rewind() { return absl::OkStatus(); }
  // "<path>", "generated feed" or "moldudp64 A ... B ...": how errors name the input.
  const std::string& name() const noexcept { return name_; }

  // Live sources only (the network, or a capture of it replayed through the same arbiter).
  virtual bool live() const noexcept { return false; }
  // Reads the network (a script waits for "live: ready" to start the exchange).
  virtual bool listens() const noexcept { return live(); }
  // A notice that comes before window() (whose bytes are then empty), or null.
  virtual const Notice* notice() const noexcept { return nullptr; }
  // Receive time (Pollux Clock) of the oldest packet behind window(); 0 when not live.
  virtual std::int64_t window_rx_ns() const noexcept { return 0; }
  // While advance() waits: `hook(ctx)` runs the publishers' transport duties (inline mode),
  // `stop` ends the wait (the source then reports its last window), and `idle` says how to
  // wait: busy-spin and yield poll the sockets, the others sleep in poll() (1 ms at most).
  void set_wait_hooks(int (*hook)(void*), void* ctx, const std::atomic<bool>* stop, IdleKind idle) noexcept {
    idle_hook_ = hook;
    idle_ctx_ = ctx;
    stop_ = stop;
    idle_kind_ = idle;
  }
  // Live sources export their counters to `ctx`'s counters file (pollux-stat shows them).
  virtual void attach_counters(Context&) {}
  // Live sources: the counters for the summary (name, value), empty otherwise.
  virtual std::vector<std::pair<std::string, std::uint64_t>> live_counters() const { return {}; }
  // Live sources: what the summary says beside the counters, as (key, text): the capture's
  // files and why it stopped, what a replayed capture held besides the feed.
  virtual std::vector<std::pair<std::string, std::string>> live_notes() const { return {}; }

 protected:
  std::string name_;
  int (*idle_hook_)(void*) = nullptr;
  void* idle_ctx_ = nullptr;
  const std::atomic<bool>* stop_ = nullptr;
  IdleKind idle_kind_ = IdleKind::kYield;
};

// Generates or opens the source of `cfg` and validates every record (one pass over the
// windows), so a malformed file fails before anything is published; the source is then at
// its first window. Errors name the input: "<path>: itch: offset N: ...". A live source
// (feed.source = "moldudp64") joins its lines here; its first window is empty.
absl::StatusOr<std::unique_ptr<Source>> open_source(const FeedConfig& cfg);

// Runs `scan(window, &result)` over every window of `src`, in order, from the current one:
// `scan` frames the window (for_each_message, a MessageCursor) and returns false to stop (the
// caller knows why; scan_source then returns OK). A record cut by a window's end is carried
// into the next window; `before_advance()` runs before a window is replaced (views into it
// die then) and may stop the scan too by returning false. The first framing error comes
// back with its file offset and the input's name, an I/O error (truncation) as it is.
template <class Scan, class BeforeAdvance>
absl::Status scan_source(Source& src, Scan&& scan, BeforeAdvance&& before_advance) {
  for (;;) {
    itch::ParseResult r;
    if (!scan(src.window(), &r)) return absl::OkStatus();
    if (!src.last_window() && (r.ok() || r.error == itch::ParseError::kTruncated)) {
      if (!before_advance()) return absl::OkStatus();
      if (absl::Status s = src.advance(static_cast<std::size_t>(r.offset)); !s.ok()) return s;
      continue;
    }
    if (r.ok()) return absl::OkStatus();
    r.offset += src.window_offset();
    const absl::Status s = r.to_status();
    return absl::Status(s.code(), absl::StrCat(src.name(), ": ", s.message()));
  }
}

}  // namespace pollux::feed
