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
  if (timerfd_ >= 0) ::close(timerfd_);
  if (epfd_ >= 0) ::close(epfd_);
}

absl::Status Waiter::open(int socket_fd) {
  epfd_ = epoll_create1(EPOLL_CLOEXEC);
  timerfd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (epfd_ < 0 || timerfd_ < 0) return absl::UnavailableError(absl::StrCat("epoll/timerfd: ", std::strerror(errno)));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = socket_fd;
  if (epoll_ctl(epfd_, EPOLL_CTL_ADD, socket_fd, &ev) != 0)
    return absl::UnavailableError(absl::StrCat("epoll_ctl: ", std::strerror(errno)));
  ev.events = EPOLLIN | EPOLLET;  // each expiry is one edge; the count is never read
  ev.data.fd = timerfd_;
  if (epoll_ctl(epfd_, EPOLL_CTL_ADD, timerfd_, &ev) != 0)
    return absl::UnavailableError(absl::StrCat("epoll_ctl: ", std::strerror(errno)));
  return absl::OkStatus();
}

void Waiter::arm(std::int64_t deadline_ns, std::int64_t now_ns) noexcept {
  if (armed_ns_ > now_ns && armed_ns_ <= deadline_ns) return;  // fires in time (maybe early: harmless)
  if (deadline_ns == INT64_MAX) return;                        // nothing to wake up for but data
  itimerspec t{};
  const std::int64_t rel = std::max<std::int64_t>(deadline_ns - now_ns, 1'000);
  t.it_value.tv_sec = rel / 1'000'000'000;
  t.it_value.tv_nsec = rel % 1'000'000'000;
  (void)timerfd_settime(timerfd_, 0, &t, nullptr);
  armed_ns_ = now_ns + rel;
}

}  // namespace pollux::transport::udp
