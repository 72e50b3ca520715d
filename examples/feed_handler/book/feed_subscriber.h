// Subscriber role: subscribes to every partition, rebuilds every book, and measures
// publish-to-book latency. With feed.book_threads = T > 1, T threads share the work: thread t
// polls the streams p with p % T == t into a BookSet of its own (streams partition the feed by
// stock locate, so the sets are disjoint), and the sets are merged when every stream has ended.
//
// Latency is taken once per Pollux message: Clock::now_ns() after the last ITCH message of
// the frame has been applied, minus Message::publisher_ns (the publisher's clock when it
// offered the frame; Pollux's clock is calibrated host-wide, so the two processes'
// readings compare). It is recorded once for each ITCH message of the frame, so percentiles
// are per ITCH message and an upper bound for all but the frame's last one. Live batches
// (notice.h) also carry the handler's receive time: packet-in-to-book, recorded the same way.
// Live notices are counted: a gap the handler could not recover is never silent here.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "feed_handler/config/feed_config.h"
#include "feed_handler/role_progress.h"
#include "itch/book_set.h"
#include "pollux/histogram.h"
#include "pollux/pollux.h"

namespace pollux::feed {

struct SubscribeResult {
  std::uint64_t messages = 0;  // ITCH messages applied
  std::uint64_t frames = 0;    // Pollux messages received
  std::uint64_t bytes = 0;
  std::uint64_t gaps = 0;                  // Gap notifications (kOverrun ones included)
  std::uint64_t lost = 0;                  // Pollux messages lost (sum of Gap::count, kOverrun excluded)
  std::uint64_t overruns = 0;              // Pollux messages possibly torn while being applied (lossy shm)
  std::uint64_t malformed = 0;             // payloads that failed ITCH validation (not applied past the error)
  std::string first_malformed;             // the reader's error for the first of them
  std::uint32_t ended = 0;                 // streams that reported kEndOfStream
  std::uint32_t died = 0;                  // streams whose publisher vanished (kPublisherDied)
  bool stopped = false;                    // interrupted before every stream ended
  std::int64_t first_ns = 0, last_ns = 0;  // Clock after the first and the last frame
  // The polling thread's CPU time from the first frame to the end of the last stream (so it
  // includes idle polling while caught up, and until the end-of-stream notices arrive).
  std::int64_t cpu_ns = 0;
  Histogram latency;  // publish-to-book, ns, one count per ITCH message
  // Live mode (notice.h): packet-in-to-book, ns (the handler's receive time of the oldest
  // packet behind each batch to the book update), one count per ITCH message.
  Histogram wire_latency;
  // Live-mode notices, counted on the first partition (every partition gets each one).
  std::uint64_t feed_gaps = 0;       // kGap notices
  std::uint64_t feed_lost = 0;       // ITCH messages they cover: lost for good upstream
  std::uint64_t feed_stale = 0;      // kStale notices
  std::uint64_t feed_sessions = 0;   // kSession notices (the first session included)
  std::uint64_t feed_conflicts = 0;  // messages kConflict notices say a later copy contradicted
  std::unique_ptr<itch::BookSet> books;
};

class FeedSubscriber {
 public:
  static absl::StatusOr<std::unique_ptr<FeedSubscriber>> open(Context& ctx, const FeedConfig& cfg, IdleKind idle);

  // Polls every partition until each has ended (kEndOfStream or kPublisherDied) or `stop`.
  // `progress->state` turns kReady once every partition is connected to its publisher; it
  // is an error if that takes longer than feed.connect_timeout_ms.
  absl::Status run(RoleProgress* progress, const std::atomic<bool>& stop);

  SubscribeResult& result() noexcept { return result_; }

 private:
  // One book-building thread's share (feed.book_threads): the streams p with
  // p % book_threads == index, books of its own, its own counts.
  struct Part {
    std::vector<std::size_t> subs;  // indexes into subs_
    SubscribeResult result;
    // Publish-to-book per Pollux message, in the counters file for the metrics endpoint
    // (scope "feed book T": pollux_app_publish_to_book_seconds).
    AppHistogram published_to_book;
  };
  // What the parts share while they run.
  struct Shared {
    RoleProgress* progress = nullptr;
    const std::atomic<bool>* stop = nullptr;
    std::atomic<bool> abort{false};       // a part failed: the others stop too
    std::atomic<std::uint32_t> ready{0};  // parts whose streams are all connected
  };

  FeedSubscriber(const FeedConfig& cfg, IdleKind idle) : cfg_(cfg), idle_kind_(idle) {}

  absl::Status run_part(Part& part, Shared& shared);
  // Folds every part's result into result_ (books absorbed into part 0's).
  void merge();

  FeedConfig cfg_;
  IdleKind idle_kind_;
  std::vector<Subscriber> subs_;
  std::vector<Part> parts_;
  SubscribeResult result_;
};

}  // namespace pollux::feed
