// The inline UDP endpoints' waiter: what Subscriber::wait() and the inline runner block on.
#pragma once

#include <climits>
#include <cstdint>

#include "absl/status/status.h"
#include "core/wakeup.h"

namespace pollux::transport::udp {

// Epoll set of one inline endpoint: its data descriptor (the socket, or the AF_XDP port's;
// level-triggered: a datagram that arrived before the caller went to sleep still wakes it, so
// arming needs no "is anything pending" check) and a timerfd for the next protocol deadline
// (edge-triggered: an expiry wakes once, nothing to read). The timer is only re-armed when the
// deadline moves earlier or the armed one has passed; a timer that fires early only causes an
// empty poll.
//
// The data descriptor is in the set only between arm() and disarm(). While a descriptor is in
// an epoll set, every datagram (every frame an AF_XDP ring takes, and every transmit completion
// of the port's sends) runs the set's wake-up callback under a lock with interrupts off: 11% of
// a busy-polling AF_XDP pong's CPU time, 0.4 us of each one-way trip (docs/BENCHMARKS.md, "The
// epoll registration"). A thread that polls never pays it; one that sleeps pays two
// epoll_ctl calls per sleep. Adding a descriptor that is already readable makes the set
// readable at once, so nothing that arrived before arm() is missed.
class Waiter {
 public:
  ~Waiter();
  absl::Status open(int data_fd);
  // Puts the data descriptor in the set and arms the timer for `deadline_ns` (core::Clock time;
  // INT64_MAX: none needed). False: the descriptor could not be added (the caller must not
  // sleep on fd()).
  [[nodiscard]] bool arm(std::int64_t deadline_ns, std::int64_t now_ns) noexcept;
  // Takes the data descriptor out of the set again. Idempotent.
  void disarm() noexcept;
  int fd() const noexcept { return epfd_; }

 private:
  int epfd_ = -1;
  int data_fd_ = -1;
  bool data_in_set_ = false;
  core::DeadlineTimer timer_;
};

}  // namespace pollux::transport::udp
