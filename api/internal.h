// Implementation classes behind the public handles (not installed).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "api/channels.h"
#include "api/metrics.h"
#include "core/buffer_pool.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/counters.h"
#include "core/placement.h"
#include "core/poller.h"
#include "core/stream_counters.h"
#include "core/trace.h"
#include "pollux/publisher.h"
#include "pollux/recording.h"
#include "pollux/subscriber.h"
#include "transport/transport.h"

namespace pollux {
class Context;
}

namespace pollux::detail {

class ContextImpl;
class SubscriberImpl;

// Inline mode's duty call (Aeron's agent invoker): the duties of the context's inline
// subscribers that no application thread has polled yet - a shm subscriber attaching to a
// publisher that appeared, a UDP subscriber reading its publisher's setup and answering it -
// run by Publisher::service() (and a publisher's offer refused as not connected). Without it
// two inline processes that each wait for their publisher to connect before polling their
// subscriber wait for each other forever. A subscriber leaves the list for good on its
// owner's first call (poll, wait, arm, close), which may wait for a duty in progress to end;
// from then on its thread runs its duties. Shared by the context and its publishers.
struct InlineDuties {
  std::mutex mu;  // subs (control path: open; duties; rate-limited by the callers)
  std::vector<std::weak_ptr<SubscriberImpl>> subs;
  std::atomic<int> unowned{0};  // subscribers in `subs` not yet driven by their owner
  // Runs the duties of each subscriber not yet driven by its owner. Returns work done.
  int run(std::int64_t now_ns) noexcept;
};

// Per-stream, per-direction counters (scope "pub stream N topic" / "sub stream N topic"),
// declared once in core/stream_counters.h.
using StreamCounters = core::StreamCounters;

class PublisherImpl {
 public:
  enum class Mode : std::uint8_t {
    kDirect,      // inline mode, the endpoint offers a direct path (shm): frames built in its own buffer
    kInlinePost,  // inline mode on other transports: pool slot + post_st per message (untraced offers
                  // in the endpoint's buffer when it offers direct claims: UDP's send log)
    kQueued,      // dedicated/shared: pool slot + SPSC ring to the poller
  };

  std::int64_t offer(std::span<const std::byte> payload) noexcept;
  std::int64_t offer_batch(std::span<const std::span<const std::byte>> msgs) noexcept;
  std::int64_t claim(std::size_t len, Claim& c) noexcept;
  std::int64_t commit(Claim& c) noexcept;
  void abort(Claim& c) noexcept;
  int service() noexcept;
  bool connected() const noexcept;
  void close() noexcept;

  // --- set up by ContextImpl ---
  Mode mode = Mode::kDirect;
  std::atomic<bool> closed{false};
  // offer()'s fast path: kDirect, untraced and not closed - one predictable test instead of
  // five. Set by ContextImpl::open_publisher, cleared by close(). Relaxed, as `closed`: a flag,
  // no data is published through it.
  std::atomic<bool> fast_path{false};
  std::uint32_t stream_id = 0;
  std::string topic;
  bool trace = false;
  std::uint32_t trace_every = 1;
  std::uint32_t trace_countdown = 1;
  // [[streams]] publisher_timestamp: frames carry the offer's clock read. Without it offer()
  // reads no clock (the endpoint's direct path then reads one for its heartbeat every 1024
  // offers), and service() as always.
  bool stamp = true;
  std::size_t max_payload = 0;
  StreamCounters counters;
  std::shared_ptr<transport::TxEndpoint> ep;
  transport::TxEndpoint* tx = nullptr;  // ep.get()
  transport::TxDirect direct;           // ep's direct path, taken at open
  // kInlinePost / kQueued
  core::BufferPool* pool = nullptr;
  core::SlotStack free_slots;
  // The slots of free_slots, back to the pool once this handle, its channel and its endpoint
  // are all gone (each holds the lease: slots may be in a ring or in flight until then).
  std::shared_ptr<core::SlotLease> slot_lease;
  std::shared_ptr<TxChannel> channel;
  core::Poller* poller = nullptr;
  std::uint64_t offered = 0;  // kQueued/kInlinePost position: bytes of frames offered
  // Traced streams on a transport with send completions (set before the endpoint opens; the
  // endpoint's driving thread records, Publisher::send_completion_ns reads). Shared with the
  // TxChannel, so it lives as long as a poller may drive the endpoint.
  std::shared_ptr<core::SendCompletionLog> send_log;
  // Control.
  std::mutex control_mu;
  ContextImpl* ctx = nullptr;  // null once the context is gone
  // Inline modes: the context's duty call (null in queued mode) and when it last ran.
  std::shared_ptr<InlineDuties> duties;
  std::int64_t duties_ns = 0;
  // Inline modes: runs `duties` when a subscriber of the context waits for its owner's first
  // poll, at most every millisecond. Returns work done.
  int run_duties(std::int64_t now_ns) noexcept {
    if (duties == nullptr || duties->unowned.load(std::memory_order_relaxed) == 0) return 0;
    if (now_ns - duties_ns < 1'000'000) return 0;
    duties_ns = now_ns;
    return duties->run(now_ns);
  }

 private:
  // Returns the trace block to fill (or null) and the flags for this message.
  bool take_trace() noexcept {
    if (__builtin_expect(!trace, 1)) return false;
    if (--trace_countdown != 0) return false;
    trace_countdown = trace_every;
    return true;
  }
  // The offer's clock read: when stamping or tracing (the trace's offer stamp), else none.
  std::int64_t offer_clock(bool traced) const noexcept {
    return __builtin_expect(stamp || traced, 1) ? core::Clock::now_ns() : 0;
  }
  // The common case of check_state() - open, fits, connected - in one inlined test;
  // check_state() sorts out and counts the reason only when this fails.
  bool admit(std::size_t len) const noexcept {
    if (closed.load(std::memory_order_relaxed) || len > max_payload) return false;
    return tx->connected();
  }
  std::int64_t check_state(std::size_t len, bool traced) noexcept;
  std::int64_t claim_refused(transport::ClaimResult r) noexcept;
  // offer() off its fast path: every mode, tracing, and the reasons an offer fails.
  [[gnu::noinline]] std::int64_t offer_general(std::span<const std::byte> payload) noexcept;

 public:
  // offer_general() as the endpoint's direct path calls it (transport::TxBinding::general).
  static std::int64_t general_offer(void* self, const std::byte* payload, std::size_t len) noexcept;

 private:
  bool pop_slot(std::uint32_t* slot) noexcept;
  std::int64_t submit(std::uint32_t slot, std::uint32_t frame_len, std::uint16_t flags) noexcept;
};

class SubscriberImpl {
 public:
  enum class Mode : std::uint8_t { kInline, kQueued };
  int poll(const Handlers& h, int limit) noexcept;
  // poll() off its fast path (every mode; inline after the direct path stopped), with
  // `handled` messages already delivered by this call.
  [[gnu::noinline]] int poll_general(const Handlers& h, int limit, int handled) noexcept;
  // poll_general() as the endpoint's direct path calls it (transport::RxBinding::general).
  static int general_poll(void* self, const void* handlers, int limit, int handled) noexcept;
  // Blocks until poll() has something or timeout_ns passes (< 0: forever). Control of the
  // calling thread only; see Subscriber::wait().
  bool wait(std::int64_t timeout_ns) noexcept;
  bool arm() noexcept;
  void disarm() noexcept;
  int notify_fd() const noexcept;
  void report_gap(const Handlers& h, const Gap& g) noexcept;
  void flush_dropped_gap(const Handlers& h) noexcept;
  Gap pending_gap{};  // dropped views not yet reported (merged with what follows)
  bool connected() const noexcept;
  void close() noexcept;

  Mode mode = Mode::kInline;
  std::atomic<bool> closed{false};
  // poll()'s fast path: inline, owned, an endpoint with a direct poll, and not closed - one
  // predictable test instead of three. Set by take_drive(), cleared by close(). Relaxed, as
  // `closed`.
  std::atomic<bool> direct_on{false};
  std::uint32_t stream_id = 0;
  std::string topic;
  StreamCounters counters;
  std::uint64_t received = 0, lost = 0, gaps = 0;
  // kInline
  std::unique_ptr<transport::RxEndpoint> ep;
  transport::RxEndpoint* rx = nullptr;  // ep.get()
  transport::RxDirect direct;           // ep's direct path, taken at open
  // kQueued
  std::shared_ptr<RxChannel> channel;
  core::Poller* poller = nullptr;
  std::mutex control_mu;
  ContextImpl* ctx = nullptr;

  // Who drives an inline subscriber's endpoint: nobody yet (the context's duty call may run
  // its duties), the duty call right now, or its owner (the application thread that first
  // polled, waited, armed or closed it; for good). Queued subscribers are their poller's.
  static constexpr std::uint8_t kDriveFree = 0, kDriveDuties = 1, kDriveOwner = 2;
  std::atomic<std::uint8_t> drive{kDriveOwner};
  std::shared_ptr<InlineDuties> duties;  // inline: the context's duty call, to leave it
  // The owner's first call: waits for a duty in progress, then owns the endpoint (and enables
  // poll()'s direct path where the endpoint offers one).
  void take_drive() noexcept;
};

// The [[recordings]] of a context: one pollux::Recorder per entry, polled by a thread of their
// own (api/recording.cc).
class RecordingRunner;
struct RecordingRunnerDeleter {
  void operator()(RecordingRunner* r) const noexcept;  // stops it first (stop_recordings)
};
using RecordingRunnerPtr = std::unique_ptr<RecordingRunner, RecordingRunnerDeleter>;
// Starts them on `ctx` (nullptr when the configuration has none); errors name the entry.
absl::StatusOr<RecordingRunnerPtr> start_recordings(Context& ctx, const core::Config& cfg);
// Stops the thread and every recorder (what their subscribers hold is recorded first), and
// returns their final status; `r` is empty after.
std::vector<RecordingStatus> stop_recordings(RecordingRunnerPtr& r) noexcept;

class ContextImpl {
 public:
  ~ContextImpl();
  absl::Status start();
  absl::StatusOr<std::shared_ptr<PublisherImpl>> open_publisher(std::string_view topic);
  absl::StatusOr<std::shared_ptr<SubscriberImpl>> open_subscriber(std::string_view topic);
  // Called by PublisherImpl::close() (control path).
  void release_publisher(PublisherImpl* p);
  void release_subscriber(SubscriberImpl* s);
  std::string describe() const;
  std::string transport_line() const;                       // describe()'s "transport:" line
  std::string stream_route(std::uint32_t stream_id) const;  // "udp 239.255.0.1:40456"

  core::Config cfg;
  RecordingRunnerPtr recordings;  // [[recordings]]; stopped before anything else closes
  std::unique_ptr<core::CountersFile> counters;
  // [metrics] listen: serves this process's counters file (destroyed before it).
  std::unique_ptr<metrics::Server> metrics_server;
  std::unique_ptr<transport::Transport> transport;
  std::vector<PollerSlot> pollers;
  // Where the dedicated pollers run, the CPU claims that keep other processes off their cores
  // (released when the context is destroyed, after ~ContextImpl stopped the pollers) and the
  // placement warnings (also in the error log).
  core::Placement placement;

 private:
  absl::Status ensure_pool();
  PollerSlot* poller_for(std::uint32_t stream_id);
  StreamCounters make_counters(bool publisher, std::uint32_t stream_id, std::string_view topic);

  mutable std::mutex mu_;  // mutable: describe() lists the open streams
  // Shared: the slot leases of publishers (which may outlive the context) reach it weakly.
  std::shared_ptr<core::BufferPool> pool_;
  struct SharedTx {
    std::shared_ptr<transport::TxEndpoint> ep;
    core::Poller* poller = nullptr;
    int refs = 0;
  };
  std::map<std::uint32_t, SharedTx> shared_tx_;
  std::vector<std::weak_ptr<PublisherImpl>> pubs_;
  std::vector<std::weak_ptr<SubscriberImpl>> subs_;
  std::shared_ptr<InlineDuties> duties_ = std::make_shared<InlineDuties>();
  bool closed_ = false;
};

}  // namespace pollux::detail
