// A progress source: what a poller (or an inline application thread) drives once per duty
// cycle. Each transport gives each poller ONE source that progresses all the endpoints opened
// on that poller (RDMA: one poll of the shared CQ; UDP: the poller's sockets; shm: the logs of
// its subscriptions), so "may this poller sleep?" is asked in one place per transport. The
// application-side rings (api/) are sources too.
//
// Interrupt mode follows seastar's pollfn (try_enter_interrupt_mode / exit_interrupt_mode) and
// UCX's ucp_worker_arm (UCS_ERR_BUSY when events are pending):
//   1. the poller announces that it is about to sleep (Poller: sleeping flag + barrier),
//   2. calls try_arm() on every source; a source arms its notification (ibv_req_notify_cq,
//      the futex "reader sleeps" flag in a shm segment, ...), then re-checks for work that
//      arrived before the arm took effect, and returns false if there is any - or if it has
//      no way to wake the poller at all (the default below: a source that cannot be woken
//      keeps its poller polling),
//   3. if any source refused, the poller disarms the ones it armed (in reverse order) and
//      keeps polling; otherwise it waits on the union of notify_fd()s (epoll) or of the
//      futex words from futex_waits() (futex_waitv), then disarms every source.
// A source that armed but has nothing to wait on (e.g. no endpoints yet) is fine: the
// poller still wakes for its own doorbell (new commands, application rings) and its timer.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <string_view>

namespace pollux::core {

// One futex word to wait on while armed: the wait returns once *word != expected (or on a
// FUTEX_WAKE). `shared`: the word lives in memory shared with another process (shm segment),
// so the wait must not use FUTEX_PRIVATE_FLAG.
struct FutexWait {
  std::atomic<std::uint32_t>* word;
  std::uint32_t expected;
  bool shared;
};

class ProgressSource {
 public:
  virtual ~ProgressSource() = default;
  // One bounded burst of work (poll a CQ, read sockets, read logs, drain rings). Returns the
  // number of work items done (0 = nothing to do). Called every duty cycle.
  virtual int progress(std::int64_t now_ns) noexcept = 0;
  // Timers (heartbeats, liveness, retransmits, lingering closes). Called about once per
  // millisecond while polling, and after every wakeup. Returns work done.
  virtual int housekeeping(std::int64_t /*now_ns*/) noexcept { return 0; }
  // See the protocol above. Default: cannot be woken, so never lets the poller sleep.
  virtual bool try_arm() noexcept { return false; }
  // Undoes try_arm() (after a wakeup, or when another source refused). Idempotent.
  virtual void disarm() noexcept {}
  // A stable fd (created with the source, never replaced) that becomes readable when an armed
  // source has work; -1 if the source wakes through futex words instead (or never needs to).
  virtual int notify_fd() const noexcept { return -1; }
  // While armed: appends the futex words to wait on (shm) to `out`; returns how many were
  // written. Each `expected` must be the word's value read in try_arm() BEFORE its re-check
  // for work (a notification after the re-check then changes the word and the wait returns at
  // once); reading it here instead loses exactly that wakeup. A source with more words than
  // `out` holds must refuse to arm, or return a word that already differs.
  virtual std::uint32_t futex_waits(std::span<FutexWait> /*out*/) noexcept { return 0; }
  // For counters and diagnostics ("shm", "udp", "rdma", "app-tx", "app-rx").
  virtual std::string_view name() const noexcept = 0;
};

}  // namespace pollux::core
