// Shared-memory transport: IPC between one publisher process and any number of subscriber
// processes on one host through a broadcast log per stream (transport/shm/shm_log.h).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/counter_set.h"
#include "core/counters.h"
#include "transport/shm/shm_log.h"
#include "transport/shm/shm_segment.h"
#include "transport/transport.h"

namespace pollux::transport::shm {

// Segments an endpoint stopped using but another thread may still read (the application thread
// in safe_floor()/connected()): kept mapped - as zero memory, the file released - for the next
// kRetiredSegments replacements, then unmapped.
inline constexpr std::size_t kRetiredSegments = 8;

// The cross-process barrier a sleeping reader issues when the writer relies on membarrier
// (core::global_sleeper_barrier). A variable so tests can make it fail (a process where the
// barrier is unavailable must refuse to sleep); set it before opening endpoints.
inline bool (*g_sleeper_global_barrier)() noexcept = core::global_sleeper_barrier;

class ShmPollerSource;

// The shm endpoints' counters (scopes "shm pub stream N", "shm sub stream N").
#define POLLUX_SHM_TX_COUNTERS(X) \
  X(truncated, "segment_truncated", "times the stream's segment file was found truncated (a new session follows)")
#define POLLUX_SHM_RX_COUNTERS(X)                                                                             \
  X(truncated, "segment_truncated", "times the stream's segment file was found truncated (the stream ended)") \
  X(attach_errors, "attach_errors", "failed attaches to the stream's segment (each distinct failure once)")   \
  X(malformed, "malformed_frames", "frames in the log that failed validation (skipped)")                      \
  X(sleeps, "sleeps", "times the subscriber armed its wakeup to sleep (interrupt mode)")

POLLUX_COUNTER_SET(ShmTxCounterSet, POLLUX_SHM_TX_COUNTERS);
POLLUX_COUNTER_SET(ShmRxCounterSet, POLLUX_SHM_RX_COUNTERS);

// A counter set that counts with or without a counters file: the endpoints read some back
// (describe(), tests), so without a file each counter gets a cell of its own here.
template <class Set>
struct ShmCounters : Set {
  std::atomic<std::uint64_t> local[Set::kCounterCount] = {};
  void allocate(core::CountersFile* f, const std::string& scope, std::uint32_t stream) {
    std::size_t i = 0;
    Set::allocate(
        [&](std::string_view n) { return f != nullptr ? f->allocate(scope, n, stream) : core::Counter(&local[i++]); });
  }
};

class ShmTxEndpoint final : public TxEndpoint {
 public:
  static absl::StatusOr<std::unique_ptr<ShmTxEndpoint>> open(const TransportEnv& env, const EndpointSpec& spec);
  ~ShmTxEndpoint() override;

  std::uint32_t post_st(std::span<const TxDesc> frames) noexcept override;
  std::uint32_t reap_st(std::span<std::uint32_t> freed) noexcept override;
  int housekeeping_st(std::int64_t now_ns) noexcept override;
  // Any thread. Acquire pairs with the release in open()/check_segment_st(): the writer state
  // it points to is that of a complete (or retired, still mapped) segment.
  bool connected() const noexcept override {
    const WriterState* w = ws_pub_.load(std::memory_order_acquire);
    return w != nullptr && w->subscribers.load(std::memory_order_relaxed) > 0;
  }
  std::uint32_t max_frame() const noexcept override { return writer_.max_frame(); }
  void close_st() noexcept override;
  std::string describe() const override;

  // The writer, for tests and for the direct path (the application thread is the writer).
  LogWriter& writer() noexcept { return writer_; }
  bool heartbeat_due(std::int64_t now_ns) const noexcept { return now_ns - last_heartbeat_ns_ > 100'000'000; }
  // The inline writer's duties, at most every 100 ms: the heartbeat, the segment check and -
  // as a poller's housekeeping does - reaping subscribers whose process died (or, in
  // backpressure mode, untethering one stuck past shm.liveness_timeout_ms): without it a
  // dead subscriber would hold an inline publisher back, or keep it connected, for good.
  void maybe_heartbeat(std::int64_t now_ns) noexcept {
    if (heartbeat_due(now_ns)) (void)housekeeping_st(now_ns);
  }
  // Times the segment was found truncated (and replaced by a new session).
  std::uint64_t truncations() const noexcept { return truncations_; }
  // An inline offer refused: the writer's rate-limited duties (maybe_heartbeat).
  int refused_st(std::int64_t now_ns) noexcept override {
    maybe_heartbeat(now_ns);
    return 0;
  }

 private:
  ShmTxEndpoint() = default;
  // The direct path (TxDirect): the application thread writes the log. The fast offer calls
  // nothing on its way: whatever is rare (a clock update in progress, a claim that needs
  // padding or a limit refresh, not connected, too large) goes to the binding's general offer
  // before anything is written; a sleeping reader or a due heartbeat leaves through
  // offer_finish() after the commit.
  template <bool kStamp>
  static std::int64_t direct_offer(TxEndpoint* ep, const std::byte* payload, std::size_t len) noexcept;
  static ClaimResult direct_claim(TxEndpoint* ep, std::uint32_t frame_length, std::int64_t now, TxClaim* c) noexcept;
  static std::int64_t direct_commit(TxEndpoint* ep, const TxClaim& c, std::uint16_t flags, std::int64_t now,
                                    bool deferred) noexcept;
  static void direct_flush(TxEndpoint* ep, std::int64_t now) noexcept;
  static void direct_abort(TxEndpoint* ep, const TxClaim& c) noexcept;
  [[gnu::noinline, gnu::cold]] std::int64_t offer_finish(std::int64_t r, std::int64_t now, bool wake,
                                                         bool beat) noexcept;
  // The heartbeat after a commit. A stamping stream passes every commit's clock read (the check
  // is a compare); without stamps one commit in 1024 reads the clock for it.
  void commit_heartbeat(std::int64_t now) noexcept {
    if (__builtin_expect(stamp_, 1)) {
      maybe_heartbeat(now);
    } else if (__builtin_expect((++unstamped_ & 1023) == 0, 0)) {
      maybe_heartbeat(core::Clock::now_ns());
    }
  }
  // Control path, writer's thread, at most every 100 ms: a truncated segment (fstat, or a
  // SIGBUS absorbed by the guard) is replaced by a new one - a new session, which subscribers
  // report after the truncation. Returns work done.
  int check_segment_st() noexcept;
  bool recreate_st() noexcept;

  std::unique_ptr<Segment> seg_;
  std::vector<std::unique_ptr<Segment>> retired_;
  Segment::Options opt_;
  LogWriter writer_;
  std::atomic<const WriterState*> ws_pub_{nullptr};  // for connected(); null while broken
  core::BufferPool* pool_ = nullptr;
  bool stamp_ = true;            // [[streams]] publisher_timestamp: frames carry the offer's clock read
  std::uint32_t unstamped_ = 0;  // commits without a clock read (commit_heartbeat)
  std::int64_t last_heartbeat_ns_ = 0;
  std::int64_t last_reap_ns_ = 0;
  std::int64_t liveness_ns_ = 0;
  bool closed_ = false;
  bool broken_ = false;  // truncated and not yet replaced (create failed): retried
  std::uint64_t truncations_ = 0;
  ShmCounters<ShmTxCounterSet> c_;
  // Slots copied into the log by post_st() and not yet handed back by reap_st().
  static constexpr std::uint32_t kMaxDone = 256;
  std::uint32_t done_[kMaxDone];
  std::uint32_t done_n_ = 0;
};

class ShmRxEndpoint final : public RxEndpoint {
 public:
  static absl::StatusOr<std::unique_ptr<ShmRxEndpoint>> open(const TransportEnv& env, const EndpointSpec& spec);
  ~ShmRxEndpoint() override;

  std::uint32_t poll_st(std::span<RxDesc> out) noexcept override;
  void release_st(std::span<const RxDesc> done, bool validate) noexcept override {
    for (const RxDesc& d : done) held_ -= d.kind == RxKind::kMessage;
    reader_.release(done.data(), static_cast<std::uint32_t>(done.size()), validate);
  }
  // Any thread. Acquire pairs with the release in try_attach(): the segment (its header and
  // log size) is complete. A segment detached meanwhile stays mapped (retired_) - as zero
  // memory with a poisoned tail, so the floor then says "everything overwritten".
  std::uint64_t safe_floor() const noexcept override {
    const Segment* s = floor_seg_.load(std::memory_order_acquire);
    return s != nullptr ? LogReader::floor_of(*s) : 0;
  }
  int housekeeping_st(std::int64_t now_ns) noexcept override;
  // Inline mode's interrupt hooks (Subscriber::wait): the reader's half of the shm wake-up
  // protocol for this endpoint; futex_waits_st() gives the segment's wake word (shared).
  // Refuses while attached to nothing (no publisher yet, or the stream ended): no writer can
  // wake us then, and Subscriber::wait naps and polls instead.
  bool try_arm_st() noexcept override { return arm(/*wakes_without_data=*/false); }
  void disarm_st() noexcept override;
  std::uint32_t futex_waits_st(std::span<core::FutexWait> out) noexcept override;
  // Shared by try_arm_st() and the poller source: `wakes_without_data` - the caller wakes by
  // itself now and then (a poller with runtime.sleep_timer_ms > 0), so arming while there is no
  // segment to wait on is fine (the timer's housekeeping attaches).
  bool arm(bool wakes_without_data) noexcept;
  bool armed() const noexcept { return armed_; }
  // The futex word while armed (null when armed without a segment).
  std::atomic<std::uint32_t>* armed_word() const noexcept { return armed_word_; }
  std::uint32_t armed_expected() const noexcept { return armed_expected_; }
  // Successful arms, and arms refused because this process cannot pair with the writer's barrier.
  std::uint64_t sleeps() const noexcept { return sleeps_; }
  std::uint64_t unwakeable() const noexcept { return unwakeable_; }
  // Any thread. Relaxed: a hint (attached and the end not yet reported), no data depends on it.
  bool connected() const noexcept override { return live_.load(std::memory_order_relaxed); }
  void close_st() noexcept override;
  std::string describe() const override;

  LogReader& reader() noexcept { return reader_; }
  Segment* segment() const noexcept { return seg_.get(); }
  // Last attach failure (kept for diagnostics; NotFound while no publisher exists).
  const absl::Status& attach_status() const noexcept { return attach_status_; }
  std::uint64_t truncations() const noexcept { return truncations_; }

 private:
  ShmRxEndpoint() = default;
  // The direct path (RxDirect): LogReader::poll_direct on the attached segment, with poll_st()'s
  // rate-limited housekeeping on empty polls. Sets *slow (and delivers nothing) when poll_st()
  // has something to report first - an end of stream, a new session, no segment yet, the
  // poller source to join - or when the reader stops.
  static int direct_poll(RxEndpoint* ep, FrameFn on_frame, void* ctx, const void* handlers, int limit) noexcept;
  bool try_attach(bool new_session) noexcept;
  void detach() noexcept;
  int housekeeping_body(std::int64_t now_ns) noexcept;
  // direct_ok_: attached, and nothing for poll_st() to report first. The state it sums up
  // changes only in poll_st(), housekeeping_st() (attach, detach, end of stream) and
  // close_st(), each of which recomputes it on the way out: poll_direct() tests one flag.
  void update_direct() noexcept {
    direct_ok_ =
        seg_ != nullptr && !ended_ && !pending_end_ && !pending_new_session_ && (source_ == nullptr || registered_);
  }

  std::string path_;
  core::FileAccess access_;
  std::unique_ptr<Segment> seg_;
  std::vector<std::unique_ptr<Segment>> retired_;
  std::atomic<const Segment*> floor_seg_{nullptr};
  std::atomic<bool> live_{false};
  SubscriberSlot* slot_ = nullptr;
  LogReader reader_;
  std::int64_t liveness_ns_ = 0;
  std::int64_t next_check_ns_ = 0;
  std::uint64_t subscriber_id_ = 0;
  bool direct_ok_ = false;    // see update_direct(); false until the first poll_st()
  bool ended_ = false;        // end of stream reported for the current segment
  bool pending_end_ = false;  // to report on the next poll
  std::uint16_t end_reason_ = 0;
  bool pending_new_session_ = false;
  std::uint32_t new_session_id_ = 0;
  absl::Status attach_status_;
  bool ever_attached_ = false;
  std::uint32_t empty_polls_ = 0;
  // Messages handed out by poll_st() and not yet released: their views point into the
  // segment, so an ended stream is unmapped only once this is 0 (queued modes release late).
  std::uint64_t held_ = 0;
  std::uint64_t truncations_ = 0;
  ShmCounters<ShmRxCounterSet> c_;
  // Interrupt mode.
  std::uint32_t slot_index_ = 0;  // our slot: our bit in WakeState::sleepers
  bool armed_ = false;
  bool armed_bit_ = false;  // our bit is set (armed on a segment)
  std::atomic<std::uint32_t>* armed_word_ = nullptr;
  std::uint32_t armed_expected_ = 0;
  std::uint64_t sleeps_ = 0, unwakeable_ = 0;
  // Poller mode: the poller's source, which this endpoint joins on its first poll (on the
  // poller thread) and leaves on close.
  ShmPollerSource* source_ = nullptr;
  bool registered_ = false;
  friend class ShmTransport;
};

// The per-poller source (Transport::poller_source): the rx endpoints polled by that poller
// join it; progress is 0 (AppRxSource polls the logs), try_arm() arms every endpoint (refusing
// if one refuses), futex_waits() returns their segments' wake words. Poller thread only.
class ShmPollerSource final : public core::ProgressSource {
 public:
  // Endpoints one source can wait on; more, and it refuses to arm (keeps its poller polling).
  static constexpr std::uint32_t kMaxEndpoints = 32;
  explicit ShmPollerSource(bool timer_wakes) : timer_wakes_(timer_wakes) {}
  int progress(std::int64_t) noexcept override { return 0; }
  bool try_arm() noexcept override;
  void disarm() noexcept override;
  std::uint32_t futex_waits(std::span<core::FutexWait> out) noexcept override;
  std::string_view name() const noexcept override { return "shm"; }
  // Poller thread (ShmRxEndpoint::poll_st / close_st).
  void join(ShmRxEndpoint* ep) noexcept;
  void leave(ShmRxEndpoint* ep) noexcept;
  std::uint32_t endpoints() const noexcept { return n_; }
  bool timer_wakes() const noexcept { return timer_wakes_; }

 private:
  const bool timer_wakes_;  // the poller has runtime.sleep_timer_ms > 0
  ShmRxEndpoint* eps_[kMaxEndpoints] = {};
  std::uint32_t n_ = 0;
  std::uint32_t overflow_ = 0;  // endpoints that did not fit: refuse to arm while any
  std::uint32_t armed_ = 0;     // eps_[0..armed_) armed by the last try_arm()
  // Never equal to 0: waiting for 0 on it returns at once (futex_waits' answer when `out` is
  // too small - a spurious wake-up, never a lost one).
  std::atomic<std::uint32_t> never_{1};
};

class ShmTransport final : public Transport {
 public:
  explicit ShmTransport(const TransportEnv& env) : env_(env) {}
  std::string_view name() const override { return "shm"; }
  absl::Status register_memory(core::BufferPool&) override { return absl::OkStatus(); }
  absl::StatusOr<std::unique_ptr<TxEndpoint>> open_tx(const EndpointSpec& spec) override;
  absl::StatusOr<std::unique_ptr<RxEndpoint>> open_rx(const EndpointSpec& spec) override;
  void close() override {}
  bool shared_tx_endpoint() const noexcept override { return true; }
  std::string describe() const override;
  std::string stream_route(std::uint32_t) const override { return "shm"; }

  absl::StatusOr<core::ProgressSource*> poller_source(int poller) override { return source(poller); }

 private:
  ShmPollerSource* source(int poller);
  std::mutex mu_;  // sources_ (control path: context set-up, open_rx)
  std::vector<std::unique_ptr<ShmPollerSource>> sources_;
  TransportEnv env_;
};

}  // namespace pollux::transport::shm
