#include "transport/shm/shm_transport.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/clock.h"
#include "core/copy.h"
#include "core/random_id.h"
#include "core/wakeup.h"
#include "transport/shm/shm_config.h"

namespace pollux::transport::shm {
namespace {

// Keeps `old` mapped (as zero memory, its file released) for a while: another thread may still
// be reading its header through a pointer it loaded before the switch.
void retire(std::vector<std::unique_ptr<Segment>>& retired, std::unique_ptr<Segment> old) {
  if (old == nullptr) return;
  old->neutralize();
  old->release_file();
  if (retired.size() >= kRetiredSegments) retired.erase(retired.begin());
  retired.push_back(std::move(old));
}

}  // namespace

int LogWriter::reap_subscribers(std::int64_t now_ns, std::int64_t stall_ns) noexcept {
  int changed = 0;
  const bool blocked = bp_events_ != seen_bp_events_;
  seen_bp_events_ = bp_events_;
  for (std::uint32_t i = 0; i < slots_; ++i) {
    SubscriberSlot* s = seg_->slot(i);
    const std::uint32_t st = s->state.load(std::memory_order_acquire);
    if (st != kSlotActive && st != kSlotEvicted) continue;
    if (!process_alive(s->pid, s->start)) {
      std::uint32_t expect = st;
      if (s->state.compare_exchange_strong(expect, kSlotFree, std::memory_order_acq_rel)) {
        ws_->subscribers.fetch_sub(1, std::memory_order_relaxed);
        ++changed;
      }
      continue;
    }
    if (!backpressure_ || st != kSlotActive) continue;
    const std::uint64_t p = s->position.load(std::memory_order_acquire);
    if (p != seen_pos_[i] || seen_ns_[i] == 0) {
      seen_pos_[i] = p;
      seen_ns_[i] = now_ns;
    } else if (blocked && now_ns - seen_ns_[i] > stall_ns && p + size_ - margin_ < pos_ + 2 * max_frame_) {
      // Live but stuck for longer than the liveness timeout while holding the writer back:
      // untether it (Aeron's untethered subscriber). It will be lapped and told what it lost.
      std::uint32_t expect = kSlotActive;
      if (s->state.compare_exchange_strong(expect, kSlotEvicted, std::memory_order_acq_rel)) {
        ++evictions_;
        ++changed;
        seen_ns_[i] = 0;
      }
    }
  }
  if (changed) limit_ = 0;  // force a refresh on the next claim
  return changed;
}

// ---- publisher endpoint ------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<ShmTxEndpoint>> ShmTxEndpoint::open(const TransportEnv& env, const EndpointSpec& spec) {
  const core::Config& cfg = *env.config;
  auto access = core::resolve_file_access(shm::config(cfg).group);
  if (!access.ok()) return absl::InvalidArgumentError(absl::StrCat(cfg.source, ": ", access.status().message()));
  Segment::Options o;
  o.path = segment_path(cfg, spec.stream_id);
  o.stream_id = spec.stream_id;
  o.session_id = core::random_id32();
  o.log_size = shm::config(cfg).log_size;
  o.subscriber_slots = shm::config(cfg).max_subscribers;
  o.flow_control = shm::config(cfg).flow_control;
  o.access = *access;
  auto seg = Segment::create(o);
  if (!seg.ok()) return seg.status();
  std::unique_ptr<ShmTxEndpoint> ep(new ShmTxEndpoint());
  ep->opt_ = o;
  ep->seg_ = std::move(*seg);
  ep->writer_.init(ep->seg_.get(), shm::config(cfg).flow_control);
  // Release pairs with connected()'s acquire.
  ep->ws_pub_.store(&ep->seg_->header()->writer, std::memory_order_release);
  ep->pool_ = env.pool;
  ep->stream_id_ = spec.stream_id;
  ep->session_id_ = o.session_id;
  ep->stamp_ = spec.stream == nullptr || spec.stream->publisher_timestamp;
  ep->direct_.offer = ep->stamp_ ? &ShmTxEndpoint::direct_offer<true> : &ShmTxEndpoint::direct_offer<false>;
  ep->direct_.claim = &ShmTxEndpoint::direct_claim;
  ep->direct_.commit = &ShmTxEndpoint::direct_commit;
  ep->direct_.flush = &ShmTxEndpoint::direct_flush;
  ep->direct_.abort = &ShmTxEndpoint::direct_abort;
  ep->direct_.traced = true;
  ep->liveness_ns_ = static_cast<std::int64_t>(shm::config(cfg).liveness_timeout_ms) * 1'000'000;
  ep->c_.allocate(env.counters, absl::StrFormat("shm pub stream %u", spec.stream_id), spec.stream_id);
  ep->writer_.heartbeat(core::Clock::now_ns());
  return ep;
}

int ShmTxEndpoint::check_segment_st() noexcept {
  if (closed_ || seg_ == nullptr) return 0;
  if (!broken_) {
    if (!seg_->truncated()) return 0;
    // Someone truncated our file: every page of it may be gone. The guard already replaced the
    // mapping if we touched a lost page; make sure it is, then start a new session.
    seg_->neutralize();
    broken_ = true;
    ++truncations_;
    c_.truncated.add();
    ws_pub_.store(nullptr, std::memory_order_release);  // offer() -> kNotConnected until replaced
  }
  return recreate_st() ? 1 : 0;
}

bool ShmTxEndpoint::recreate_st() noexcept {
  Segment::Options o = opt_;
  o.session_id = core::random_id32();
  auto seg = Segment::create(o);
  if (!seg.ok()) return false;  // e.g. /dev/shm full: retried on the next check
  std::unique_ptr<Segment> old = std::move(seg_);
  seg_ = std::move(*seg);
  writer_.init(seg_.get(), o.flow_control);
  session_id_ = o.session_id;
  writer_.heartbeat(core::Clock::now_ns());
  // Release pairs with connected()'s acquire: the new writer state is initialised.
  ws_pub_.store(&seg_->header()->writer, std::memory_order_release);
  retire(retired_, std::move(old));
  broken_ = false;
  return true;
}

ShmTxEndpoint::~ShmTxEndpoint() { close_st(); }

std::uint32_t ShmTxEndpoint::post_st(std::span<const TxDesc> frames) noexcept {
  std::uint32_t n = 0;
  for (const TxDesc& d : frames) {
    if (done_n_ == kMaxDone || d.length > writer_.max_frame()) break;
    LogWriter::Claim c;
    if (!writer_.try_claim(d.length, &c)) break;  // back-pressured: the rest stay queued
    const std::byte* src = pool_->slot(d.slot);
    const auto* sh = reinterpret_cast<const core::FrameHeader*>(src);
    std::memcpy(c.frame + core::kFrameHeaderSize, src + core::kFrameHeaderSize, d.length - core::kFrameHeaderSize);
    writer_.commit(c, sh->flags, sh->timestamp_ns);
    done_[done_n_++] = d.slot;
    ++n;
  }
  return n;
}

std::uint32_t ShmTxEndpoint::reap_st(std::span<std::uint32_t> freed) noexcept {
  // The log holds its own copy, so a slot is free as soon as post_st() copied it.
  const std::uint32_t n = std::min<std::uint32_t>(done_n_, static_cast<std::uint32_t>(freed.size()));
  std::memcpy(freed.data(), done_, n * sizeof(std::uint32_t));
  std::memmove(done_, done_ + n, (done_n_ - n) * sizeof(std::uint32_t));
  done_n_ -= n;
  return n;
}

int ShmTxEndpoint::housekeeping_st(std::int64_t now_ns) noexcept {
  int work = 0;
  if (now_ns - last_heartbeat_ns_ > 100'000'000) {
    writer_.heartbeat(now_ns);
    last_heartbeat_ns_ = now_ns;
    ++work;
    work += check_segment_st();
  }
  if (now_ns - last_reap_ns_ > liveness_ns_ / 4) {
    last_reap_ns_ = now_ns;
    work += writer_.reap_subscribers(now_ns, liveness_ns_);
  }
  return work;
}

void ShmTxEndpoint::close_st() noexcept {
  if (closed_ || seg_ == nullptr) return;
  closed_ = true;
  writer_.heartbeat(core::Clock::now_ns());
  writer_.close();
  seg_->unlink();
}

std::string ShmTxEndpoint::describe() const {
  return absl::StrFormat("shm publisher stream %u session %08x log %s (%u KiB), %u subscriber(s)", stream_id_,
                         session_id_, seg_->path(), seg_->log_size() >> 10, writer_.subscribers());
}

// ---- subscriber endpoint -----------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<ShmRxEndpoint>> ShmRxEndpoint::open(const TransportEnv& env, const EndpointSpec& spec) {
  const core::Config& cfg = *env.config;
  auto access = core::resolve_file_access(shm::config(cfg).group);
  if (!access.ok()) return absl::InvalidArgumentError(absl::StrCat(cfg.source, ": ", access.status().message()));
  std::unique_ptr<ShmRxEndpoint> ep(new ShmRxEndpoint());
  ep->path_ = segment_path(cfg, spec.stream_id);
  ep->access_ = *access;
  ep->stream_id_ = spec.stream_id;
  ep->direct_.poll = &ShmRxEndpoint::direct_poll;
  ep->liveness_ns_ = static_cast<std::int64_t>(shm::config(cfg).liveness_timeout_ms) * 1'000'000;
  ep->subscriber_id_ = (static_cast<std::uint64_t>(getpid()) << 32) | core::random_id32();
  const std::string scope = absl::StrFormat("shm sub stream %u", spec.stream_id);
  ep->c_.allocate(env.counters, scope, spec.stream_id);
  // A sleeping reader may have to issue membarrier(GLOBAL_EXPEDITED) (when the writer relies on
  // it); core::global_sleeper_barrier() needs this process's registration attempt first.
  (void)core::init_membarrier();
  if (!ep->try_attach(false)) {
    // No publisher yet is normal (we attach when it appears); a segment that exists but is
    // corrupted, of another version or unreadable is an error the user must see now.
    if (!absl::IsNotFound(ep->attach_status_) && !absl::IsUnavailable(ep->attach_status_)) return ep->attach_status_;
  }
  return ep;
}

ShmRxEndpoint::~ShmRxEndpoint() { close_st(); }

bool ShmRxEndpoint::try_attach(bool new_session) noexcept {
  auto seg = Segment::attach(path_, stream_id_, access_);
  if (!seg.ok()) {
    // Counted once per distinct failure, not once per retry.
    if (!absl::IsNotFound(seg.status()) && seg.status() != attach_status_) c_.attach_errors.add();
    attach_status_ = seg.status();
    return false;
  }
  SegmentHeader* h = (*seg)->header();
  const SegmentLayout& l = (*seg)->layout();
  const bool closed = h->writer.closed.load(std::memory_order_acquire) != 0;
  if (closed || !publisher_alive(l)) {
    attach_status_ = absl::UnavailableError(absl::StrFormat("%s: publisher pid %d has %s; waiting for a new one", path_,
                                                            l.publisher_pid, closed ? "closed the stream" : "exited"));
    return false;
  }
  SubscriberSlot* slot = nullptr;
  for (std::uint32_t i = 0; i < l.subscriber_slots && slot == nullptr; ++i) {
    std::uint32_t expect = kSlotFree;
    if ((*seg)->slot(i)->state.compare_exchange_strong(expect, kSlotClaiming, std::memory_order_acq_rel)) {
      slot = (*seg)->slot(i);
    }
  }
  if (slot == nullptr) {
    attach_status_ = absl::ResourceExhaustedError(
        absl::StrFormat("%s: all %u subscriber slots are in use (raise shm.max_subscribers at the publisher)", path_,
                        l.subscriber_slots));
    return false;
  }
  slot->pid = getpid();
  slot->start = self_start_time();
  slot->subscriber_id = subscriber_id_;
  if (!reader_.init(seg->get(), slot, new_session)) {
    const std::uint64_t tail = h->writer.tail.load(std::memory_order_relaxed);
    slot->state.store(kSlotFree, std::memory_order_release);
    const absl::Status s = absl::DataLossError(absl::StrFormat(
        "shm segment %s: writer tail %u is not a frame position (32-byte aligned, below 2^62): corrupted; the "
        "publisher (pid %d) must recreate it",
        path_, tail, l.publisher_pid));
    if (s != attach_status_) c_.attach_errors.add();
    attach_status_ = s;
    return false;
  }
  seg_ = std::move(*seg);
  slot_ = slot;
  slot_index_ = static_cast<std::uint32_t>(slot - seg_->slot(0));
  // A previous holder of the slot (dead, its slot reaped) may have left our bit set: clear it
  // (it would only cost the writer a wake-up). Relaxed: as LogReader::disarm.
  h->wake.sleepers.fetch_and(~(std::uint64_t{1} << slot_index_), std::memory_order_relaxed);
  // Release pairs with the writer's acquire in refresh_limit()/reap_subscribers(): pid and
  // position are set before the slot counts.
  slot_->state.store(kSlotActive, std::memory_order_release);
  h->writer.subscribers.fetch_add(1, std::memory_order_relaxed);
  attach_status_ = absl::OkStatus();
  ended_ = false;
  // Every session is announced before its first message, the first one too (as UDP and RDMA
  // do): code that resets its state on kNewSession behaves the same on every transport.
  // (`new_session` only says where to start reading: a later session from its start.)
  pending_new_session_ = true;
  new_session_id_ = l.session_id;
  ever_attached_ = true;
  // Release pairs with safe_floor()'s acquire on other threads: the segment is complete.
  floor_seg_.store(seg_.get(), std::memory_order_release);
  live_.store(true, std::memory_order_relaxed);
  return true;
}

void ShmRxEndpoint::detach() noexcept {
  disarm_st();
  if (seg_ == nullptr) return;
  std::uint32_t st = slot_->state.load(std::memory_order_relaxed);
  // The writer may have freed our slot already if it thought us dead; only undo our own claim.
  if ((st == kSlotActive || st == kSlotEvicted) &&
      slot_->state.compare_exchange_strong(st, kSlotFree, std::memory_order_acq_rel)) {
    seg_->header()->writer.subscribers.fetch_sub(1, std::memory_order_relaxed);
  }
  slot_ = nullptr;
  live_.store(false, std::memory_order_relaxed);
  floor_seg_.store(nullptr, std::memory_order_release);
  // Another thread may have loaded floor_seg_ just before: keep the mapping for a while.
  retire(retired_, std::move(seg_));
}

std::uint32_t ShmRxEndpoint::poll_st(std::span<RxDesc> out) noexcept {
  // Poller mode: join the poller's source on the poller thread (the first poll runs there).
  if (__builtin_expect(source_ != nullptr && !registered_, 0)) {
    source_->join(this);
    registered_ = true;
  }
  std::uint32_t n = 0;
  const std::uint32_t max = static_cast<std::uint32_t>(out.size());
  if (pending_end_ && n < max) {
    RxDesc& d = out[n++];
    d = RxDesc{};
    d.kind = RxKind::kEndOfStream;
    d.reason = end_reason_;
    d.session_id = reader_.session_id();
    pending_end_ = false;
    ended_ = true;
    live_.store(false, std::memory_order_relaxed);
  }
  if (pending_new_session_ && n < max) {
    RxDesc& d = out[n++];
    d = RxDesc{};
    d.kind = RxKind::kNewSession;
    d.session_id = new_session_id_;
    pending_new_session_ = false;
  }
  if (seg_ != nullptr && !ended_ && !pending_end_) {
    const std::uint32_t got = reader_.poll(out.data() + n, max - n);
    for (std::uint32_t k = n; k < n + got; ++k) held_ += out[k].kind == RxKind::kMessage;
    n += got;
  }
  if (n == 0 && (++empty_polls_ & 63) == 0) housekeeping_st(core::Clock::now_ns());  // rate-limited inside
  update_direct();
  return n;
}

int ShmRxEndpoint::housekeeping_st(std::int64_t now_ns) noexcept {
  const int r = housekeeping_body(now_ns);
  update_direct();
  return r;
}

int ShmRxEndpoint::housekeeping_body(std::int64_t now_ns) noexcept {
  if (now_ns < next_check_ns_) return 0;
  next_check_ns_ = now_ns + std::min<std::int64_t>(liveness_ns_ / 4, 50'000'000);
  if (seg_ == nullptr) return try_attach(ever_attached_) ? 1 : 0;
  c_.malformed.set(reader_.malformed());
  SegmentHeader* h = seg_->header();
  struct stat st;
  const bool replaced = ::stat(path_.c_str(), &st) == 0 && static_cast<std::uint64_t>(st.st_ino) != seg_->inode();
  if (ended_) {
    // The stream ended: drop the old segment and wait for a new publisher (new session) -
    // once the application has released every view into it.
    if (held_ != 0) return 0;
    detach();
    return try_attach(true) ? 1 : 0;
  }
  if (pending_end_) return 0;
  if (seg_->truncated()) {
    // The file was cut under us (fstat, or the guard absorbed a SIGBUS): what it held is gone.
    // Make the mapping zero memory with a poisoned tail (views still out read as overwritten)
    // and end the stream; a new segment at the path is a new session.
    seg_->neutralize();
    ++truncations_;
    c_.truncated.add();
    attach_status_ = absl::DataLossError(absl::StrFormat(
        "shm segment %s was truncated while in use (by another process: check who writes to %s); the stream ended, "
        "waiting for the publisher's new segment",
        path_, path_));
    pending_end_ = true;
    end_reason_ = kEndTruncated;
    return 1;
  }
  const bool closed = h->writer.closed.load(std::memory_order_acquire) != 0;
  const bool dead = !closed && !publisher_alive(seg_->layout());
  // A publisher killed between committing a frame and publishing the tail (a batch's tail is
  // published later) leaves this reader past a tail that never moves: for a dead one, having
  // read everything it committed is the end too.
  if ((closed || dead || replaced) && (reader_.caught_up() || (dead && reader_.nothing_readable()))) {
    pending_end_ = true;
    end_reason_ = closed ? kEndClosed : kEndPublisherDied;
    return 1;
  }
  if (replaced && !closed && !dead) {
    // A new publisher replaced the file while the old one still looked alive (pid reuse is
    // the only way): treat the old stream as ended.
    pending_end_ = true;
    end_reason_ = kEndPublisherDied;
    return 1;
  }
  return 0;
}

void ShmRxEndpoint::close_st() noexcept {
  detach();
  if (registered_) {
    source_->leave(this);  // the poller thread (Context closes poller endpoints there)
    registered_ = false;
  }
  direct_ok_ = false;
}

// ---- interrupt mode: the reader's half (shm_log.h, LogReader::arm) ------------------------------

bool ShmRxEndpoint::arm(bool wakes_without_data) noexcept {
  if (armed_) return true;
  // Events the next poll must deliver (the end of the stream, a new session): do not sleep.
  if (pending_end_ || pending_new_session_) return false;
  if (seg_ == nullptr || ended_) {
    // No writer to wake us: only a caller with a timer may sleep (its housekeeping attaches).
    if (!wakes_without_data) return false;
    armed_ = true;
    armed_word_ = nullptr;
    return true;
  }
  std::atomic<std::uint32_t>* word = nullptr;
  std::uint32_t expected = 0;
  if (!reader_.arm(slot_index_, g_sleeper_global_barrier, &word, &expected)) {
    // Either readable, or this process cannot pair with the writer's compiler-only barrier.
    // Tell the two apart only for the statistics (cold: we just found no data, or cannot sleep).
    if (reader_.idle_at_edge()) ++unwakeable_;
    return false;
  }
  armed_ = true;
  armed_bit_ = true;
  armed_word_ = word;
  armed_expected_ = expected;
  ++sleeps_;
  c_.sleeps.add();
  return true;
}

void ShmRxEndpoint::disarm_st() noexcept {
  if (!armed_) return;
  armed_ = false;
  if (armed_bit_ && seg_ != nullptr) reader_.disarm(slot_index_);
  armed_bit_ = false;
  armed_word_ = nullptr;
}

std::uint32_t ShmRxEndpoint::futex_waits_st(std::span<core::FutexWait> out) noexcept {
  if (!armed_ || armed_word_ == nullptr || out.empty()) return 0;
  out[0] = core::FutexWait{armed_word_, armed_expected_, /*shared=*/true};
  return 1;
}

// ---- the poller's source -------------------------------------------------------------------------

void ShmPollerSource::join(ShmRxEndpoint* ep) noexcept {
  if (n_ == kMaxEndpoints) {
    ++overflow_;  // cannot wait on it: this poller will not sleep while it is open
    return;
  }
  eps_[n_++] = ep;
}

void ShmPollerSource::leave(ShmRxEndpoint* ep) noexcept {
  for (std::uint32_t i = 0; i < n_; ++i) {
    if (eps_[i] != ep) continue;
    eps_[i] = eps_[--n_];
    eps_[n_] = nullptr;
    armed_ = 0;  // never between try_arm() and disarm(): commands run inside do_work()
    return;
  }
  if (overflow_ > 0) --overflow_;
}

bool ShmPollerSource::try_arm() noexcept {
  armed_ = 0;
  if (overflow_ != 0) return false;
  for (; armed_ < n_; ++armed_) {
    if (!eps_[armed_]->arm(timer_wakes_)) {
      disarm();
      return false;
    }
  }
  return true;
}

void ShmPollerSource::disarm() noexcept {
  for (std::uint32_t i = armed_; i-- > 0;) eps_[i]->disarm_st();
  armed_ = 0;
}

std::uint32_t ShmPollerSource::futex_waits(std::span<core::FutexWait> out) noexcept {
  std::uint32_t k = 0;
  for (std::uint32_t i = 0; i < armed_; ++i) {
    std::atomic<std::uint32_t>* w = eps_[i]->armed_word();
    if (w == nullptr) continue;
    if (k == out.size()) {
      // More words than the poller can wait on: make the wait return at once (a spurious
      // wake-up, then another attempt) rather than sleep deaf to a segment.
      if (out.empty()) return 0;
      out[0] = core::FutexWait{&never_, 0, /*shared=*/false};
      return 1;
    }
    out[k++] = core::FutexWait{w, eps_[i]->armed_expected(), /*shared=*/true};
  }
  return k;
}

// ---- direct paths -------------------------------------------------------------------------------

template <bool kStamp>
std::int64_t ShmTxEndpoint::direct_offer(TxEndpoint* ep, const std::byte* payload, std::size_t len) noexcept {
  auto* const self = static_cast<ShmTxEndpoint*>(ep);
  LogWriter& w = self->writer_;
  const TxBinding& b = self->binding_;
  if (__builtin_expect(len > w.max_frame() - core::kFrameHeaderSize || !self->connected(), 0)) {
    return b.general(b.caller, payload, len);
  }
  std::int64_t now = 0;
  if (kStamp && __builtin_expect(!core::Clock::try_now_ns(&now), 0)) return b.general(b.caller, payload, len);
  LogWriter::Claim c;
  if (__builtin_expect(!w.try_claim_fast(static_cast<std::uint32_t>(core::kFrameHeaderSize + len), &c), 0)) {
    return b.general(b.caller, payload, len);
  }
  core::copy_payload(c.frame + core::kFrameHeaderSize, payload, len);
  const bool wake = w.commit_no_wake(c, core::kFlagNone, now);
  // After the commit: the counters' stores need not precede the frame's (their readers poll).
  b.messages->add();
  b.bytes->add(len);
  const auto r = static_cast<std::int64_t>(c.position + c.aligned);  // == w.position()
  // commit_heartbeat()'s test, the call left to offer_finish().
  const bool beat = kStamp ? self->heartbeat_due(now) : (++self->unstamped_ & 1023) == 0;
  if (__builtin_expect(wake, 0)) return self->offer_finish(r, now, true, beat);
  if (__builtin_expect(beat, 0)) return self->offer_finish(r, now, false, true);
  return r;
}
template std::int64_t ShmTxEndpoint::direct_offer<true>(TxEndpoint*, const std::byte*, std::size_t) noexcept;
template std::int64_t ShmTxEndpoint::direct_offer<false>(TxEndpoint*, const std::byte*, std::size_t) noexcept;

// After a fast-path commit: wake the sleeping readers (before a heartbeat's segment check may
// replace the segment they sleep on), then the heartbeat. Returns `r`.
std::int64_t ShmTxEndpoint::offer_finish(std::int64_t r, std::int64_t now, bool wake, bool beat) noexcept {
  if (wake) writer_.wake();
  if (beat) maybe_heartbeat(stamp_ ? now : core::Clock::now_ns());
  return r;
}

ClaimResult ShmTxEndpoint::direct_claim(TxEndpoint* ep, std::uint32_t frame_length, std::int64_t now,
                                        TxClaim* c) noexcept {
  auto* const self = static_cast<ShmTxEndpoint*>(ep);
  LogWriter::Claim lc;
  if (!self->writer_.try_claim(frame_length, &lc)) {
    // The slowest subscriber holds the log: if its process died, only this thread's duties
    // free its slot (there is no poller), so a publisher retrying offer() recovers by itself.
    self->maybe_heartbeat(now != 0 ? now : core::Clock::now_ns());
    return ClaimResult::kLogFull;
  }
  *c = TxClaim{lc.frame, lc.position, lc.length, lc.aligned};
  return ClaimResult::kClaimed;
}

std::int64_t ShmTxEndpoint::direct_commit(TxEndpoint* ep, const TxClaim& c, std::uint16_t flags, std::int64_t now,
                                          bool deferred) noexcept {
  auto* const self = static_cast<ShmTxEndpoint*>(ep);
  LogWriter& w = self->writer_;
  const LogWriter::Claim lc{c.frame, c.position, c.frame_length, c.aligned};
  if (deferred) {
    w.commit_deferred(lc, flags, now);
  } else {
    w.commit(lc, flags, now);
    self->commit_heartbeat(now);
  }
  return static_cast<std::int64_t>(w.position());
}

void ShmTxEndpoint::direct_flush(TxEndpoint* ep, std::int64_t now) noexcept {
  auto* const self = static_cast<ShmTxEndpoint*>(ep);
  self->writer_.flush_tail();
  self->commit_heartbeat(now);
}

void ShmTxEndpoint::direct_abort(TxEndpoint* ep, const TxClaim& c) noexcept {
  static_cast<ShmTxEndpoint*>(ep)->writer_.abort({c.frame, c.position, c.frame_length, c.aligned});
}

int ShmRxEndpoint::direct_poll(RxEndpoint* ep, FrameFn on_frame, void* ctx, const void* handlers, int limit) noexcept {
  auto* const self = static_cast<ShmRxEndpoint*>(ep);
  const RxBinding& b = self->binding_;
  if (__builtin_expect(!self->direct_ok_ || limit <= 0, 0)) return b.general(b.caller, handlers, limit, 0);
  bool slow = false;
  std::uint64_t bytes = 0;
  auto deliver = [&](const core::FrameHeader* f, std::uint32_t len) {
    bytes += len - core::kFrameHeaderSize;  // before the call: the frame need not survive it
    on_frame(ctx, f, len);
  };
  // Chunks of at most kMaxDirect (the reader's deferred-check list); one in the common case.
  const auto lim = static_cast<std::uint32_t>(limit);
  std::uint32_t n = 0;
  do {
    const std::uint32_t want = std::min<std::uint32_t>(LogReader::kMaxDirect, lim - n);
    const std::uint32_t k = self->reader_.poll_direct(want, deliver, &slow);
    n += k;
    if (slow || k < want) break;
  } while (n < lim);
  if (n != 0) {
    b.count(n, bytes, self->reader_.expected_sequence() - 1);
  } else if (!slow && (++self->empty_polls_ & 63) == 0) {
    self->housekeeping_st(core::Clock::now_ns());  // as poll_st()
  }
  if (__builtin_expect(!slow, 1)) return static_cast<int>(n);
  return b.general(b.caller, handlers, limit, static_cast<int>(n));
}

std::string ShmTransport::describe() const {
  const core::Config& c = *env_.config;
  return absl::StrFormat("shm (every stream): a %s log per stream in %s, flow control %s",
                         core::format_size(shm::config(c).log_size), c.runtime.shm_dir,
                         shm::flow_control_name(shm::config(c).flow_control));
}

ShmPollerSource* ShmTransport::source(int poller) {
  std::lock_guard<std::mutex> lock(mu_);
  const bool timer = env_.config != nullptr && env_.config->runtime.sleep_timer_ms > 0;
  while (sources_.size() <= static_cast<std::size_t>(poller)) {
    sources_.push_back(std::make_unique<ShmPollerSource>(timer));
  }
  return sources_[static_cast<std::size_t>(poller)].get();
}

std::string ShmRxEndpoint::describe() const {
  if (seg_ == nullptr) return absl::StrFormat("shm subscriber stream %u (%s)", stream_id_, attach_status_.ToString());
  return absl::StrFormat("shm subscriber stream %u session %08x log %s position %u", stream_id_, reader_.session_id(),
                         path_, reader_.position());
}

absl::StatusOr<std::unique_ptr<TxEndpoint>> ShmTransport::open_tx(const EndpointSpec& spec) {
  auto ep = ShmTxEndpoint::open(env_, spec);
  if (!ep.ok()) return ep.status();
  return std::unique_ptr<TxEndpoint>(std::move(*ep));
}

absl::StatusOr<std::unique_ptr<RxEndpoint>> ShmTransport::open_rx(const EndpointSpec& spec) {
  auto ep = ShmRxEndpoint::open(env_, spec);
  if (!ep.ok()) return ep.status();
  if (spec.poller >= 0) (*ep)->source_ = source(spec.poller);
  return std::unique_ptr<RxEndpoint>(std::move(*ep));
}

}  // namespace pollux::transport::shm
