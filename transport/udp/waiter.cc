#include "transport/udp/waiter.h"

#include <arpa/inet.h>
#include <linux/errqueue.h>
#include <linux/net_tstamp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/clock.h"

namespace pollux::transport::udp {

Waiter::~Waiter() {
  if (epfd_ >= 0) ::close(epfd_);
}

absl::Status Waiter::open(int data_fd) {
  epfd_ = epoll_create1(EPOLL_CLOEXEC);
  const absl::Status timer = timer_.open();
  if (epfd_ < 0 || !timer.ok()) return absl::UnavailableError(absl::StrCat("epoll/timerfd: ", std::strerror(errno)));
  data_fd_ = data_fd;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLET;  // each expiry is one edge; the count is never read
  ev.data.fd = timer_.fd();
  if (epoll_ctl(epfd_, EPOLL_CTL_ADD, timer_.fd(), &ev) != 0)
    return absl::UnavailableError(absl::StrCat("epoll_ctl: ", std::strerror(errno)));
  return absl::OkStatus();
}

bool Waiter::arm(std::int64_t deadline_ns, std::int64_t now_ns) noexcept {
  if (!data_in_set_) {
    epoll_event ev{};
    ev.events = EPOLLIN;  // level-triggered: see the class comment
    ev.data.fd = data_fd_;
    if (epoll_ctl(epfd_, EPOLL_CTL_ADD, data_fd_, &ev) != 0 && errno != EEXIST) return false;
    data_in_set_ = true;
  }
  // No deadline: nothing to wake up for but data; an armed timer can only fire early.
  timer_.arm(deadline_ns, now_ns, /*disarm=*/false);
  return true;
}

void Waiter::disarm() noexcept {
  if (!data_in_set_) return;
  (void)epoll_ctl(epfd_, EPOLL_CTL_DEL, data_fd_, nullptr);
  data_in_set_ = false;
}

}  // namespace pollux::transport::udp
