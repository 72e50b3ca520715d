// The inline UDP endpoints' waiter: what Subscriber::wait() and the inline runner block on.
#pragma once

#include <climits>
#include <cstdint>

#include "absl/status/status.h"
#include "core/wakeup.h"

namespace pollux::transport::udp {

// Epoll set of one inline endpoint: its socket (level-triggered: a datagram that arrived before
// the caller went to sleep still wakes it, so arming needs no "is anything pending" syscall) and
// a timerfd for the next protocol deadline (edge-triggered: an expiry wakes once, nothing to
// read). Steady state costs no syscall per arm: the timer is only re-armed when the deadline
// moves earlier or the armed one has passed; a timer that fires early only causes an empty poll.
class Waiter {
 public:
  ~Waiter();
  absl::Status open(int socket_fd);
  // Arms the timer for `deadline_ns` (core::Clock time; INT64_MAX: none needed).
  void arm(std::int64_t deadline_ns, std::int64_t now_ns) noexcept;
  int fd() const noexcept { return epfd_; }

 private:
  int epfd_ = -1;
  core::DeadlineTimer timer_;
};

}  // namespace pollux::transport::udp
