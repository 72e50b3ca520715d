// Context: one configured Pollux instance (config, buffer pool, transport, pollers).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "pollux/export.h"
#include "pollux/publisher.h"
#include "pollux/recording.h"
#include "pollux/subscriber.h"

namespace pollux {

namespace detail {
class ContextImpl;
class LateJoinImpl;
}  // namespace detail

// A counter of the application's own, kept in the context's counters file beside Pollux's
// (pollux-stat shows it under its scope). One thread writes it (add/set: a relaxed load and
// store, no locked instruction); any thread or process may read it. Valid until the Context
// is destroyed; a default-constructed one counts nothing.
class AppCounter {
 public:
  AppCounter() = default;
  void add(std::uint64_t n = 1) noexcept {
    if (v_ != nullptr) v_->store(v_->load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  void set(std::uint64_t n) noexcept {
    if (v_ != nullptr) v_->store(n, std::memory_order_relaxed);
  }
  std::uint64_t get() const noexcept { return v_ != nullptr ? v_->load(std::memory_order_relaxed) : 0; }

 private:
  friend class Context;
  explicit AppCounter(std::atomic<std::uint64_t>* v) noexcept : v_(v) {}
  std::atomic<std::uint64_t>* v_ = nullptr;
};

// A latency histogram of the application's own, kept in the context's counters file (kind
// "histogram"): fixed bucket bounds (kBoundsNs, in nanoseconds, plus +Inf), a sum and a count,
// each a counter cell. The metrics endpoint (docs/OBSERVABILITY.md) exports it as a Prometheus
// histogram in seconds; pollux-stat lists its non-zero cells. One thread records (a bucket
// search over 22 bounds and three relaxed load+store pairs, no locked instruction); any thread
// or process reads. Valid until the Context is destroyed; a default-constructed one records
// nothing. For reports inside one process, pollux::Histogram (pollux/histogram.h) is finer.
class AppHistogram {
 public:
  static constexpr std::int64_t kBoundsNs[] = {
      100,        250,        500,         1'000,       2'500,       5'000,        10'000,    25'000,
      50'000,     100'000,    250'000,     500'000,     1'000'000,   2'500'000,    5'000'000, 10'000'000,
      25'000'000, 50'000'000, 100'000'000, 250'000'000, 500'000'000, 1'000'000'000};
  static constexpr std::size_t kBuckets = sizeof(kBoundsNs) / sizeof(kBoundsNs[0]) + 1;  // + Inf

  AppHistogram() = default;
  // Records one value in nanoseconds (negative values count as 0).
  void record(std::int64_t ns) noexcept {
    if (count_ == nullptr) return;
    if (ns < 0) ns = 0;
    std::size_t i = 0;
    while (i < kBuckets - 1 && ns > kBoundsNs[i]) ++i;  // bounded: 22 compares at most
    bump(buckets_[i], 1);
    bump(sum_ns_, static_cast<std::uint64_t>(ns));
    bump(count_, 1);
  }
  std::uint64_t count() const noexcept { return count_ != nullptr ? count_->load(std::memory_order_relaxed) : 0; }

 private:
  friend class Context;
  static void bump(std::atomic<std::uint64_t>* v, std::uint64_t n) noexcept {
    v->store(v->load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  std::atomic<std::uint64_t>* buckets_[kBuckets] = {};
  std::atomic<std::uint64_t>* sum_ns_ = nullptr;
  std::atomic<std::uint64_t>* count_ = nullptr;
};

class POLLUX_API Context {
 public:
  // Loads and validates a TOML configuration (errors name file:line and key) and starts the
  // pollers. An empty string is the all-defaults configuration.
  static absl::StatusOr<std::unique_ptr<Context>> from_file(const std::string& path);
  static absl::StatusOr<std::unique_ptr<Context>> from_string(std::string_view toml,
                                                              std::string_view source_name = "<string>");
  // Stops the pollers and closes every publisher and subscriber (their calls then return
  // kClosed / 0). Publishers and subscribers may outlive the context safely.
  ~Context();

  // Opens a publisher / subscriber on a topic. Topics listed in [[streams]] use their
  // configured stream id; others get a stable id derived from the name. A [[streams]] entry's
  // `start` other than "live" makes subscriber() a late joiner (pollux/late_join.h): it reads
  // the stream's recording first, then the live stream.
  absl::StatusOr<Publisher> publisher(std::string_view topic);
  absl::StatusOr<Subscriber> subscriber(std::string_view topic);

  std::uint32_t stream_id(std::string_view topic) const;
  // Stops the recordings the configuration's [[recordings]] started (what their subscribers
  // hold is recorded first; the catalog marks them stopped, or failed with their error) and
  // returns their final status, in configuration order. The destructor does the same when this
  // was not called; a second call returns nothing.
  std::vector<RecordingStatus> stop_recordings();
  // The effective configuration as TOML (every key, with its help text).
  std::string effective_config() const;
  // What this context runs, one fact per line: the configuration's source; the threading mode
  // with its threads and how they idle (inline: no thread, the application polls); the
  // transport with what decides its behaviour (udp: the effective socket buffer); one line per
  // open stream and the transport it goes over; clock, topology, pool, pollers, counters, errors.
  std::string describe() const;
  // Path of the shared-memory counters file (empty when runtime.counters = false).
  std::string counters_path() const;
  // Allocates a counter of the application's in that file, e.g. counter("feed live",
  // "packets_a"); names longer than the file's fields (55 and 63 bytes) are cut. Control path.
  AppCounter counter(std::string_view scope, std::string_view name);
  // Allocates a latency histogram of the application's in that file, e.g. histogram("feed book",
  // "publish_to_book"); `name` is cut to 40 bytes (its cells are named "<name> le <bound_ns>",
  // "<name> le inf", "<name> sum_ns", "<name> count"). Control path.
  AppHistogram histogram(std::string_view scope, std::string_view name);

 private:
  friend class LateJoinSubscriber;    // writes to the context's error log
  friend class detail::LateJoinImpl;  // subscribes to the live stream (live_subscriber)
  friend class Recorder;              // records the live stream
  // A subscriber of the live stream, whatever the stream's `start` says.
  absl::StatusOr<Subscriber> live_subscriber(std::string_view topic);
  Context() = default;
  static absl::StatusOr<std::unique_ptr<Context>> adopt(absl::StatusOr<std::unique_ptr<detail::ContextImpl>> impl);
  std::unique_ptr<detail::ContextImpl> impl_;
};

}  // namespace pollux
