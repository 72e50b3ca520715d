// Publisher role: replays a BinaryFILE over Pollux, partitioned by stock locate.
//
// Wire format (what a subscriber receives in Message::payload), chosen per run by
// feed.batch_bytes:
//   - batch_bytes = 0: one bare ITCH message (type byte first, no length prefix) per
//     Pollux message - the plain pub/sub mapping;
//   - batch_bytes > 0: a BinaryFILE chunk - up to batch_bytes of ITCH messages, each with
//     its 2-byte big-endian length prefix - per Pollux message. This is what reaches 10M+
//     messages/s: the per-frame costs (clock read, header, sequence, flow control) are paid
//     once per batch instead of once per 19..50-byte message.
// The two are told apart by the first byte: a length prefix's high byte is 0 (ITCH messages
// are < 256 bytes), a type byte never is. A live source (feed.source = "moldudp64") adds two
// more (notice.h): batches start with kLiveChunkMarker and the packets' receive time, and
// notices (a gap that cannot be recovered, a stale or fresh feed, a new session) go to every
// partition where they happen in the stream. Live batches are flushed after every window
// (what the network had), so nothing waits for a batch to fill. Partition p (topic "<topic>.<p>") carries exactly
// the messages with stock_locate % streams == p, in feed order, so every book sees its own
// messages in order; system events (locate 0) go to partition 0.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "feed_handler/config/feed_config.h"
#include "feed_handler/role_progress.h"
#include "feed_handler/source/source.h"
#include "itch/book_set.h"
#include "pollux/histogram.h"
#include "pollux/pollux.h"

namespace pollux::feed {

struct ReplayResult {
  std::uint64_t messages = 0;        // ITCH messages published
  std::uint64_t frames = 0;          // Pollux messages
  std::uint64_t bytes = 0;           // payload bytes
  std::uint64_t back_pressured = 0;  // offers retried after kBackPressured
  std::uint64_t notices = 0;         // live: notices published (each on every partition)
  std::int64_t start_ns = 0, end_ns = 0;
  std::int64_t cpu_ns = 0;     // the replaying thread's CPU time over the replay
  bool stopped = false;        // interrupted before the end of the source
  itch::MessageCounts counts;  // by type, as published
  // Paced modes: how late each message was offered against its schedule (upper bound: per
  // flush round, the round's oldest message). A publisher that cannot keep up shows here.
  Histogram lag;
};

class FeedPublisher {
 public:
  // Opens one Pollux publisher per partition. Fails, naming feed.batch_bytes, when a batch
  // cannot fit one Pollux message (Publisher::max_payload()).
  static absl::StatusOr<std::unique_ptr<FeedPublisher>> open(Context& ctx, const FeedConfig& cfg, IdleKind idle);

  // Waits until every partition has a subscriber, up to feed.connect_timeout_ms (or `stop`).
  absl::Status wait_connected(const std::atomic<bool>& stop);

  // Replays `src` (validated, at its first window) at the configured pace. `progress` gets
  // the running totals; `stop` (set by another thread) ends the replay early, with the result
  // so far. Errors: an offer that failed, or the source's (a file truncated while it is
  // replayed: "<path>: input truncated at offset N: ...", framing that changed since the
  // validating pass).
  absl::StatusOr<ReplayResult> replay(Source& src, RoleProgress* progress, const std::atomic<bool>& stop);

  // Runs the publishers' transport duties while this thread has nothing to offer (inline
  // mode: heartbeats, status from subscribers, repairs; see Publisher::service()).
  int service() noexcept;

  // Ends every stream (subscribers get kEndOfStream once they have read everything).
  void close();

  std::uint32_t streams() const noexcept { return static_cast<std::uint32_t>(pubs_.size()); }

 private:
  // What waits to be offered on one partition: packed bytes (batch_bytes > 0), or views of
  // bare messages in the source for one offer_batch() call.
  struct Batch {
    std::uint8_t* data = nullptr;
    std::uint32_t len = 0;
    std::uint32_t messages = 0;
    std::span<const std::byte>* bare = nullptr;
  };
  static constexpr std::uint32_t kBareBatch = 64;

  FeedPublisher(const FeedConfig& cfg, IdleKind idle) : cfg_(cfg), idle_(idle) {}

  template <bool kPacked, bool kPaced, class Schedule>
  absl::Status run(Source& src, Schedule schedule);

  // Offers what partition `p` has pending, retrying while back-pressured. False on a fatal
  // result or a stop request (status_ says which).
  bool offer(std::uint32_t p, const std::uint8_t* data, std::uint32_t len) noexcept;
  bool offer_bare(std::uint32_t p) noexcept;
  // After a failed attempt: true to retry (after idling), false to give up.
  bool retry(std::uint32_t p, std::int64_t r, std::int64_t* not_connected_since) noexcept;
  bool flush(std::uint32_t p) noexcept;
  bool flush_all() noexcept;
  bool offer_notice(const Notice& n) noexcept;
  void publish() noexcept;  // progress counters

  FeedConfig cfg_;
  AppIdle idle_;
  // Back-pressure waits park instead of idling with runtime.idle: the publisher is ahead of
  // the slowest subscriber by a whole log (milliseconds of feed), and spinning or yielding
  // there takes the CPU that subscriber needs whenever the two share a core.
  BackoffIdle backpressure_idle_ = [] {
    BackoffIdle b;
    b.max_spins = 100;
    b.max_yields = 10;
    b.max_park_ns = 200'000;
    return b;
  }();
  bool backpressured_ = false;
  std::vector<Publisher> pubs_;
  std::vector<Batch> batches_;
  std::vector<std::uint8_t> storage_;
  std::vector<std::span<const std::byte>> bare_storage_;
  std::uint32_t batch_bytes_ = 0;
  bool live_ = false;
  std::uint32_t base_len_ = 0;     // live packed batches: room for the live chunk header
  std::int64_t window_rx_ns_ = 0;  // live: receive time behind the current window
  ReplayResult result_;
  RoleProgress* progress_ = nullptr;
  const std::atomic<bool>* stop_ = nullptr;
  absl::Status status_;
};

}  // namespace pollux::feed
