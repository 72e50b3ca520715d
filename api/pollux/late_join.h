// Late join (docs/ARCHIVE.md): a subscriber that starts in the past. It reads a stream's
// recording (the files a Recorder writes, in this process or another one on this host) from a
// start position, then switches to the live stream, delivering every message once, in sequence
// order, across the switch - while the publisher goes on at its own rate.
//
// States (state()):
//   replaying   reading the recording; the live stream is not subscribed yet
//   catching_up the recording's written end was reached: the live stream is subscribed and its
//               messages kept (copied, bounded by max_buffered_bytes) while the recording is read
//               up to the first of them
//   merged      the recording reached the first kept live message: the kept ones are delivered
//   live        delivering the live stream directly (zero copy)
// If the live stream runs further ahead than max_buffered_bytes while catching up, the kept
// messages are dropped, the live subscription closed, fell_behind counted, the event written to
// the error log, and the subscriber goes back to replaying (memory stays bounded; it tries
// again at the recording's end).
//
// Messages come with their recorded stream, session, sequence and publish time (the live ones
// with theirs), so a handler cannot tell which side a message came from. A sequence the recording
// and the live stream both lack (the recorder lost it) is counted in missing, not delivered.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/statusor.h"
#include "pollux/export.h"
#include "pollux/replay.h"
#include "pollux/types.h"

namespace pollux {

class Context;

struct LateJoinOptions {
  std::string directory;  // where the stream is recorded (its catalog)
  enum class Start : std::uint8_t {
    kLive,      // no history: the live stream from now
    kEarliest,  // the recording's first message
    kPosition,  // `from`: a sequence or a time (ReplayPosition)
  } start = Start::kEarliest;
  ReplayPosition from;
  // Live messages kept while catching up, at most (payload and 32 bytes per message).
  std::uint64_t max_buffered_bytes = 64ull << 20;
};

struct LateJoinStatus {
  const char* state = "replaying";  // "replaying", "catching_up", "merged", "live"
  std::uint64_t recording_id = 0;
  std::uint64_t replayed = 0;     // messages delivered from the recording
  std::uint64_t buffered = 0;     // live messages kept while catching up (all time)
  std::uint64_t live = 0;         // live messages delivered (kept ones included)
  std::uint64_t duplicates = 0;   // live messages already delivered from the recording, skipped
  std::uint64_t missing = 0;      // sequences neither side had
  std::uint64_t gaps = 0;         // places where sequences were missing
  std::uint64_t fell_behind = 0;  // catch-ups abandoned: the live stream ran ahead of max_buffered_bytes
  std::uint64_t last_sequence = 0;
  std::string error;  // the recording failed its checks (file and offset); the subscriber stops
};

namespace detail {
class LateJoinImpl;
}

class POLLUX_API LateJoinSubscriber {
 public:
  // Finds the recording of `topic` in options.directory (the one being written, else the latest)
  // and positions at the start. Errors: no recording of the topic there, an unreadable catalog or
  // segment (named), a start position beyond damage.
  static absl::StatusOr<std::unique_ptr<LateJoinSubscriber>> open(Context& ctx, std::string_view topic,
                                                                  const LateJoinOptions& options);
  ~LateJoinSubscriber();
  LateJoinSubscriber(const LateJoinSubscriber&) = delete;
  LateJoinSubscriber& operator=(const LateJoinSubscriber&) = delete;

  // Delivers up to `limit` messages to on_message(const Message&); returns how many (0: nothing
  // to do now). One thread at a time.
  template <typename OnMessage>
  int poll(OnMessage&& on_message, int limit) {
    using F = std::remove_reference_t<OnMessage>;
    return poll_impl([](void* c, const Message& m) { (*static_cast<F*>(c))(m); }, &on_message, limit);
  }
  LateJoinStatus status() const;
  const char* state() const noexcept;

  // Waiting (as Subscriber's): once live, the live subscriber's. Before, the recording is a file
  // with nothing to wait on, so wait() sleeps at most 1 ms and returns true, arm() returns false
  // (poll now) and notify_fd() is -1.
  bool wait(std::int64_t timeout_us) noexcept;
  [[nodiscard]] bool arm() noexcept;
  void disarm() noexcept;
  int notify_fd() const noexcept;
  // True while history is delivered; once the live stream is subscribed, its publisher's.
  bool is_connected() const noexcept;
  std::uint32_t stream_id() const noexcept;
  std::string_view topic() const noexcept;
  // Closes the live subscription and stops reading; poll() then returns 0.
  void close() noexcept;

 private:
  friend class Subscriber;
  explicit LateJoinSubscriber(std::unique_ptr<detail::LateJoinImpl> impl);
  int poll_impl(void (*fn)(void*, const Message&), void* ctx, int limit) noexcept;
  std::unique_ptr<detail::LateJoinImpl> impl_;
};

}  // namespace pollux
