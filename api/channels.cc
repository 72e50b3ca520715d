#include "api/channels.h"

#include <algorithm>

#include "core/clock.h"
#include "core/trace.h"

namespace pollux::detail {

using core::Clock;

int AppTxSource::progress(std::int64_t /*now*/) noexcept {
  int work = 0;
  std::uint32_t freed[kMaxBurst];
  for (std::size_t i = 0; i < channels_.size(); ++i) {
    TxChannel& ch = *channels_[i];
    if (ch.pending_n == ch.pending_off) {
      ch.pending_off = 0;
      ch.pending_n = ch.submit.pop_burst(ch.pending, burst_);
      std::int64_t dequeued = 0;  // read after the pop, not the cycle's `now`: the app thread may
                                  // have stamped kRingEnqueue after this cycle began
      for (std::uint32_t k = 0; k < ch.pending_n; ++k) {
        if (__builtin_expect(ch.pending[k].flags & core::kFlagTraced, 0)) {
          auto* t = reinterpret_cast<core::StageTrace*>(ch.pool->slot(ch.pending[k].slot) + core::kFrameHeaderSize);
          if (dequeued == 0) dequeued = Clock::now_ns();
          core::stamp(t, core::Stage::kPollerDequeue, dequeued);
          core::stamp(t, core::Stage::kPost, Clock::now_ns());
        }
      }
    }
    if (ch.pending_n > ch.pending_off) {
      const std::uint32_t want = ch.pending_n - ch.pending_off;
      const std::uint32_t done = ch.ep->post_st({ch.pending + ch.pending_off, want});
      ch.pending_off += done;
      ch.posted.add(done);
      if (done < want) ch.back_pressure.add();
      work += static_cast<int>(done);
    }
    // Completions. A shared endpoint (shm) completes synchronously inside post_st, so the
    // slots it hands back here are this channel's.
    const std::uint32_t nf = ch.ep->reap_st({freed, kMaxBurst});
    if (nf > 0) {
      // Cannot fail: the return ring holds as many entries as the channel has slots.
      (void)ch.returns.push_burst(freed, nf);
    }
    if (__builtin_expect(ch.closing.load(std::memory_order_acquire), 0) && ch.pending_n == ch.pending_off &&
        ch.submit.empty_approx()) {
      ch.drained.store(true, std::memory_order_release);  // pairs with the closing thread's acquire
      channels_.erase(channels_.begin() + static_cast<std::ptrdiff_t>(i));
      --i;
    }
  }
  return work;
}

// Runs after the poller announced its sleep (sleeper_barrier): a publisher that pushed before
// that is seen here; one that pushes after sees the announcement and rings (Poller::wake).
bool AppTxSource::try_arm() noexcept {
  for (auto& ch : channels_) {
    if (ch->pending_n != ch->pending_off) return false;  // back-pressured frames: keep posting
    if (!ch->submit.empty_approx()) return false;
    if (ch->closing.load(std::memory_order_acquire)) return false;
  }
  return true;
}

int AppRxSource::progress(std::int64_t /*now*/) noexcept {
  int work = 0;
  transport::RxDesc buf[kMaxBurst];
  for (std::size_t i = 0; i < channels_.size(); ++i) {
    RxChannel& ch = *channels_[i];
    const std::uint32_t nr = ch.release.pop_burst(buf, burst_);
    if (nr > 0) {
      ch.ep->release_st({buf, nr}, /*validate=*/false);  // the subscriber validated
      ch.outstanding -= nr;
      work += static_cast<int>(nr);
    }
    if (__builtin_expect(ch.closing.load(std::memory_order_acquire), 0)) {
      ch.drained.store(true, std::memory_order_release);
      channels_.erase(channels_.begin() + static_cast<std::ptrdiff_t>(i));
      --i;
      continue;
    }
    // Never hand out more than the subscriber can give back through `release`.
    const std::uint32_t room = std::min({burst_, ch.deliver.capacity() - ch.outstanding, ch.deliver.free_approx()});
    if (room == 0) continue;
    const std::uint32_t n = ch.ep->poll_st({buf, room});
    if (n == 0) continue;
    std::uint32_t msgs = 0;
    for (std::uint32_t k = 0; k < n; ++k) {
      // Only messages come back through `release`: gaps and events hold no transport resource.
      if (buf[k].kind != transport::RxKind::kMessage) continue;
      ++msgs;
      if (__builtin_expect(buf[k].frame->flags & core::kFlagTraced, 0)) {
        // Fresh reads: the cycle's `now` predates what this cycle's tx duty posted.
        // A transport that stamped its own receive (the shm reader, recvmmsg return, the recv
        // CQE) keeps it; the push to the subscriber ring is the next stage.
        buf[k].ring_ns = Clock::now_ns();
        if (buf[k].receive_ns == 0) buf[k].receive_ns = buf[k].ring_ns;
      }
    }
    (void)ch.deliver.push_burst(buf, n);  // fits: n <= room <= free space
    ch.notify_app();
    ch.outstanding += msgs;
    work += static_cast<int>(n);
  }
  return work;
}

bool AppRxSource::try_arm() noexcept {
  for (auto& ch : channels_) {
    if (!ch->release.empty_approx()) return false;
    if (ch->closing.load(std::memory_order_acquire)) return false;
    // A full deliver ring: nothing to do until the subscriber releases (which wakes us).
  }
  return true;
}

}  // namespace pollux::detail
