// Sleep/wake primitives shared by the poller, the application-side waits and the transports:
// eventfd doorbells, futex waits (one word, or several with futex_waitv), and the asymmetric
// barrier of the "announce you sleep, then re-check" protocol.
//
// The protocol (a Dekker pair, as in seastar's reactor and io_uring's SQ_NEED_WAKEUP):
//   sleeper: store sleeping = 1; sleeper_barrier(); if (work visible) cancel; else wait.
//   waker:   publish work (release store); waker_barrier(); if (sleeping) wake.
// Each side's store must be ordered before its own load (store->load: the only reordering
// x86 allows, and the one liburing #541 was about). The waker is the hot path (every offer),
// so when the kernel has membarrier the sleeper pays: sleeper_barrier() is
// membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED), which runs a full barrier on every CPU
// currently running a thread of this process, and waker_barrier() is only a compiler
// barrier. Without membarrier, both sides use a full fence (seq_cst).
// Across processes (shm), the waker's process registers for MEMBARRIER_CMD_GLOBAL_EXPEDITED
// and the sleeper issues it (global_sleeper_barrier()).
#pragma once

#include <atomic>
#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/progress.h"

namespace pollux::core {

namespace wakeup_detail {
// Set once at start-up (init_membarrier()), read on every waker_barrier().
extern std::atomic<bool> g_private_membarrier;
}  // namespace wakeup_detail

// Registers this process for the expedited membarrier commands (private and global). Safe to
// call repeatedly; returns whether MEMBARRIER_CMD_PRIVATE_EXPEDITED is usable.
bool init_membarrier() noexcept;
// Whether this process is registered for MEMBARRIER_CMD_GLOBAL_EXPEDITED (so another
// process's global_sleeper_barrier() covers this process's threads).
bool global_membarrier_registered() noexcept;

// The sleeper's side: full barrier on every CPU running a thread of this process (or a
// seq_cst fence if membarrier is unavailable). Pairs with waker_barrier().
void sleeper_barrier() noexcept;
// The sleeper's side across processes: full barrier on every CPU running a thread of any
// process registered for global expedited membarrier. Returns false if unavailable (then the
// caller must not rely on the waker's compiler-only barrier).
bool global_sleeper_barrier() noexcept;

// The waker's side, on the hot path: a compiler barrier when the sleeper uses membarrier,
// else a full fence. Pairs with sleeper_barrier().
inline void waker_barrier() noexcept {
  if (__builtin_expect(wakeup_detail::g_private_membarrier.load(std::memory_order_relaxed), 1)) {
    std::atomic_signal_fence(std::memory_order_seq_cst);
  } else {
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
}

// The waker's side across processes (the shm log's writer, whose readers sleep). The waker
// picks its half at setup and tells its sleepers (the segment's wake flags): registered for
// MEMBARRIER_CMD_GLOBAL_EXPEDITED (full_fence = false), a compiler barrier, and every sleeper
// must run global_sleeper_barrier(); otherwise a seq_cst fence on both sides.
inline void cross_process_waker_barrier(bool full_fence) noexcept {
  if (__builtin_expect(full_fence, 0)) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
  } else {
    std::atomic_signal_fence(std::memory_order_seq_cst);
  }
}
// The sleeper's side across processes, paired with cross_process_waker_barrier(): `global`
// issues the global expedited membarrier (core::global_sleeper_barrier, or a test's stand-in).
// False: the waker relies on membarrier and this process cannot issue it - the sleeper must not
// sleep (its re-check could miss the waker's store).
inline bool cross_process_sleeper_barrier(bool waker_uses_membarrier, bool (*global)() noexcept) noexcept {
  if (waker_uses_membarrier) return global();
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return true;
}

// A non-blocking eventfd (EFD_NONBLOCK | EFD_CLOEXEC) used as a doorbell.
class EventFd {
 public:
  static absl::StatusOr<EventFd> create();
  EventFd() = default;
  EventFd(EventFd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  EventFd& operator=(EventFd&& o) noexcept;
  EventFd(const EventFd&) = delete;
  EventFd& operator=(const EventFd&) = delete;
  ~EventFd();
  int fd() const noexcept { return fd_; }
  void signal() noexcept;  // adds 1 (never blocks: the counter cannot overflow in practice)
  bool drain() noexcept;   // resets to 0; true if it was signalled
 private:
  int fd_ = -1;
};

// The arm/sleep handshake of one sleeper in this process and the threads that make work for it
// (a poller and whoever feeds its rings; an application thread and the poller filling its
// delivery ring). The sleeper waits either on fd() (with other fds, epoll) or on word() (with
// other futex words, futex_waitv):
//   const std::uint32_t seen = bell.snapshot();  // before the announcement
//   bell.announce(Doorbell::kFutex);             // or kFd
//   if (work is visible, or a source refused to arm) { bell.withdraw(); poll again; }
//   else { wait until word() != seen, or fd() is readable; bell.withdraw(); drain_fd() if it was }
// A waker publishes its work (a release store), then calls ring_if_asleep(). announce() and
// ring_if_asleep() are the two halves of the Dekker pair above: either the sleeper's re-check
// sees the work, or the waker sees the announcement and rings the way it names.
class Doorbell {
 public:
  static constexpr std::uint32_t kAwake = 0, kFd = 1, kFutex = 2;

  // Control path: creates the eventfd; ResourceExhausted when it cannot.
  absl::Status init();
  int fd() const noexcept { return fd_.fd(); }
  std::atomic<std::uint32_t>* word() noexcept { return &word_; }

  // Sleeper. Acquire pairs with ring()'s release increment: a ring after this load changes the
  // word, so a futex wait on (word(), snapshot()) returns at once instead of missing it.
  std::uint32_t snapshot() const noexcept { return word_.load(std::memory_order_acquire); }
  // Relaxed store, then sleeper_barrier(): the store is ordered before the re-check's loads.
  // Pairs with ring_if_asleep()'s waker_barrier().
  void announce(std::uint32_t how) noexcept {
    sleeping_.store(how, std::memory_order_relaxed);
    sleeper_barrier();
  }
  // Relaxed: a waker that still sees the announcement rings once more, harmlessly.
  void withdraw() noexcept { sleeping_.store(kAwake, std::memory_order_relaxed); }
  // After an fd wait that found fd() readable: resets the count (else the fd stays readable).
  bool drain_fd() noexcept { return fd_.drain(); }

  // Control path (stopping a sleeper): rings the fd and the futex word whether or not the
  // sleeper announced itself - it may announce right after a ring_if_asleep() missed it.
  void ring_both_ways() noexcept {
    ring(kFd);
    ring(kFutex);
  }

  // Waker, on the hot path (every offer that feeds a sleeping poller's ring): the waker's
  // barrier orders the caller's publishing store before the load of the announcement. Returns
  // whether it rang (the sleeper had announced itself).
  bool ring_if_asleep() noexcept {
    waker_barrier();
    const std::uint32_t how = sleeping_.load(std::memory_order_relaxed);
    if (__builtin_expect(how == kAwake, 1)) return false;
    ring(how);
    return true;
  }

 private:
  [[gnu::cold, gnu::noinline]] void ring(std::uint32_t how) noexcept;

  std::atomic<std::uint32_t> sleeping_{kAwake};
  std::atomic<std::uint32_t> word_{0};
  EventFd fd_;
};

// A timerfd armed for a sleeper's next deadline (a transport's protocol timers). Steady state
// costs no syscall per arm: the timer is re-armed only when the deadline moves earlier or the
// armed one has passed; a timer that fires early only costs an empty wake-up.
class DeadlineTimer {
 public:
  DeadlineTimer() = default;
  DeadlineTimer(const DeadlineTimer&) = delete;
  DeadlineTimer& operator=(const DeadlineTimer&) = delete;
  ~DeadlineTimer();
  // Control path: creates the timerfd (CLOCK_MONOTONIC, non-blocking, close-on-exec).
  absl::Status open();
  int fd() const noexcept { return fd_; }
  // When the armed timer fires (INT64_MAX: not armed).
  std::int64_t armed_ns() const noexcept { return armed_ns_; }
  // Arms for `deadline_ns` (core::Clock time; at least 1 us from now). INT64_MAX: no deadline -
  // disarm = true stops a running timer (which also drops an expiry nobody read), false leaves
  // it (it can only fire early).
  void arm(std::int64_t deadline_ns, std::int64_t now_ns, bool disarm) noexcept;
  // The owner read an expiry (or knows the timer fired): not armed any more.
  void fired() noexcept { armed_ns_ = INT64_MAX; }

 private:
  int fd_ = -1;
  std::int64_t armed_ns_ = INT64_MAX;
};

// Sets timerfd `fd` to fire once in `rel_ns` (> 0), or stops it (rel_ns <= 0); either way an
// expiry not yet read is dropped. False when timerfd_settime failed.
bool set_timer(int fd, std::int64_t rel_ns) noexcept;

// futex(2) wrappers. timeout_ns < 0: wait forever; otherwise a relative timeout.
// Returns 0 when woken or the value differed, ETIMEDOUT, or EINTR.
int futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected, bool shared, std::int64_t timeout_ns) noexcept;
int futex_wake(std::atomic<std::uint32_t>* word, int count, bool shared) noexcept;
// Waits until any word differs from its expected value or is woken (futex_waitv, Linux 5.16).
// Falls back to futex_wait when there is exactly one word. Returns 0, ETIMEDOUT, EINTR, or
// ENOSYS (no futex_waitv and more than one word: the caller must not sleep).
int futex_wait_any(std::span<const FutexWait> waits, std::int64_t timeout_ns) noexcept;
bool have_futex_waitv() noexcept;

}  // namespace pollux::core
