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
