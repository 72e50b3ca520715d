// The UDP transport's progress source for one poller.
#pragma once

#include <climits>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/counter_set.h"
#include "core/counters.h"
#include "core/progress.h"
#include "core/wakeup.h"
#include "transport/udp/tx_core.h"

namespace pollux::transport::udp {

class UdpRxEndpoint;
class UdpTxEndpoint;

// The counters of one poller's UDP source (scope "udp poller N").
#define POLLUX_UDP_POLLER_COUNTERS(X)                                                                      \
  X(epoll_waits, "epoll_waits", "epoll_wait rounds over the poller's sockets")                             \
  X(lingers, "lingering_closes", "publisher closes that lingered with the poller for end confirmations")   \
  X(linger_timeouts, "linger_timeouts", "lingering closes that ended unconfirmed (udp.linger_ms ran out)") \
  X(arm_refused, "arm_refused", "sleeps refused: frames queued in user space or a protocol deadline due")

// The progress source of one poller (Transport::poller_source): one epoll set over the sockets
// of every endpoint opened on that poller, lingering publisher sockets, and one timerfd.
// Poller thread only (endpoints attach themselves on their first data-plane call, which the
// poller makes; close_st() runs there too).
//
// progress(): with exactly one subscriber socket, reads it directly (one recvfrom/recvmmsg per
// cycle, as an inline endpoint does); otherwise one epoll_wait(0) round over the whole set and
// a burst read of each ready socket. Publisher sockets (NAKs, status messages) and the timerfd
// are also swept at least every kSweepNs and in every housekeeping().
// AF_XDP ports are read directly every cycle and join the set only from try_arm() to disarm():
// a descriptor in an epoll set runs the set's wake-up callback in the kernel for every frame the
// ring takes and every transmit completion (see Waiter), which a polling thread need not pay.
// try_arm(): the sockets are level-triggered in the set, so a datagram that arrives at any
// time keeps notify_fd() readable and nothing needs re-checking after the arm; the source
// refuses when frames are queued in user space (deliverable but not yet polled, delayed by the
// fault injector) or a protocol deadline is due, and otherwise sets the timerfd to the earliest
// deadline (heartbeat, NAK, status, linger) so the poller wakes for it.
class UdpPollerSource final : public core::ProgressSource {
 public:
  static absl::StatusOr<std::unique_ptr<UdpPollerSource>> create(int poller, core::CountersFile* counters);
  ~UdpPollerSource() override;

  int progress(std::int64_t now_ns) noexcept override;
  int housekeeping(std::int64_t now_ns) noexcept override;
  bool try_arm() noexcept override;
  // Takes the AF_XDP ports out of the set again (level-triggered sockets stay; an early timer
  // only costs an empty cycle); the poller may have slept: the next progress() sweeps every
  // socket (a publisher's NAK may be what woke it), not just the subscriber it reads directly.
  void disarm() noexcept override;
  int notify_fd() const noexcept override { return epfd_; }
  std::string_view name() const noexcept override { return "udp"; }

  // Control path (the application thread, after the poller stopped): serves every lingering
  // close to its end (confirmations or deadline), blocking. Called by UdpTransport::close().
  void finish_lingers() noexcept;

  // Diagnostics and tests.
  std::uint64_t epoll_waits() const noexcept { return epoll_waits_; }
  std::uint32_t members() const noexcept { return static_cast<std::uint32_t>(members_.size()); }
  std::uint32_t lingering() const noexcept { return nlinger_; }
  std::uint64_t lingers_timed_out() const noexcept { return linger_timeouts_; }

  // Endpoint side (poller thread).
  void attach(UdpRxEndpoint* ep) noexcept;
  void attach(UdpTxEndpoint* ep) noexcept;
  void detach(const void* ep) noexcept;
  // Takes over a closing publisher's socket and sender until `deadline_ns`.
  void linger(const UdpTxEndpoint* ep, std::unique_ptr<TxCore> core, std::int64_t deadline_ns,
              std::int64_t now_ns) noexcept;

  // Publishers sweep their sockets for control messages at least this often while polling.
  static constexpr std::int64_t kSweepNs = 250'000;

 private:
  struct Member {
    UdpRxEndpoint* rx = nullptr;
    UdpTxEndpoint* tx = nullptr;
    std::unique_ptr<TxCore> linger;  // a closed publisher's state, lingering
    std::int64_t linger_deadline_ns = 0, last_end_ns = 0;
    std::uint64_t ready_sweep = 0;  // the last sweep (epoll_waits_) that found its socket readable
    int fd = -1;
    bool in_set = false;  // armed_only(): added by try_arm(), not yet removed by disarm()
    // An AF_XDP port's registration (the member that holds it): in the set only while armed.
    bool armed_only() const noexcept;
  };
  UdpPollerSource() = default;
  void add(std::unique_ptr<Member> m) noexcept;
  // One epoll_wait round; `complete` (if given): every ready socket was reported.
  int sweep(std::int64_t now_ns, bool* complete = nullptr) noexcept;
  int dispatch(Member* m, std::int64_t now_ns) noexcept;
  // Returns true when the linger is over (the member must be removed).
  bool linger_step(Member& m, std::int64_t now_ns) noexcept;
  void remove_at(std::size_t i) noexcept;
  // try_arm(): adds the armed-only registrations; false if one could not be added (none is left).
  bool add_armed_only() noexcept;
  void recount() noexcept;

  int epfd_ = -1;
  core::DeadlineTimer timer_;  // the earliest protocol deadline while the poller sleeps
  // progress() runs housekeeping() once now reaches this: the armed timer's deadline, or one
  // try_arm() found due. Pollers run timers only every ~1 ms and after a timer wakeup; a
  // deadline that woke us through the timerfd (an epoll event) is served here at once.
  std::int64_t service_ns_ = INT64_MAX;
  std::int64_t last_service_ns_ = 0;  // the last housekeeping()
  static constexpr std::int64_t kMinServiceNs = 50'000;
  std::vector<std::unique_ptr<Member>> members_;
  UdpRxEndpoint* single_rx_ = nullptr;  // the only member, a subscriber: read directly
  bool xdp_rx_only_ = false;            // several subscribers, all on AF_XDP ports: read the rings directly
  std::uint32_t nlinger_ = 0;
  std::int64_t next_sweep_ns_ = 0;
  std::uint64_t epoll_waits_ = 0, linger_timeouts_ = 0, lingers_ = 0;
  POLLUX_COUNTER_SET(Counters, POLLUX_UDP_POLLER_COUNTERS);
  Counters c_;
};

}  // namespace pollux::transport::udp
