// The poller: a thread that drives progress sources (core/progress.h) - the application
// rings (api/channels.h) and one source per transport - once per duty cycle, in the order
// they were added, and decides after each cycle whether to poll again or sleep:
//   commands -> sources in order (api tx, transport, api rx) -> timers (~1 ms) -> idle decision.
// The clock is read once per cycle. With runtime.idle = "adaptive" or "interrupt" a poller
// sleeps by arming every source (all must agree) and blocking on epoll (the sources'
// notify_fd()s plus its own eventfd doorbell) or on futex words (shm) plus its own futex
// doorbell. Any thread that hands a poller work calls wake() after publishing it: free while
// the poller polls (a compiler barrier and one load), a syscall only when it sleeps.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "core/config.h"
#include "core/controller.h"
#include "core/counters.h"
#include "core/idle.h"
#include "core/poller_counters.h"
#include "core/progress.h"
#include "core/wakeup.h"

namespace boost::lockfree {
template <typename T, typename... Options>
class queue;
}

namespace pollux::core {

inline constexpr std::uint32_t kMaxBurst = 256;

class Poller {
 public:
  Poller(int index, const Config& cfg, CountersFile* counters);
  ~Poller();
  Poller(const Poller&) = delete;
  Poller& operator=(const Poller&) = delete;

  // One duty cycle (commands, sources, timers); returns the work done.
  int do_work() noexcept;
  void on_close() noexcept;

  // Control path. start() spawns the thread (pinned to `cpu` if >= 0), named "pollux-poll-N".
  absl::Status start(IdleKind idle, int cpu);
  void stop();
  // Runs fn on the poller thread (or here if the poller is not running) and waits for it. fn
  // must not block: the poller drives every other stream meanwhile.
  void run_on_poller(const std::function<void()>& fn);

  // Poller thread (inside run_on_poller) or before start(). Sources are driven in the order
  // added; a source stays owned by its creator, who removes it before destroying it.
  void add_source(ProgressSource* s);
  void remove_source(ProgressSource* s);

  // Any thread, after making work for this poller visible (a release store into a ring the
  // poller reads). Pairs with the announcement in sleep() (core::Doorbell): either the poller's
  // re-check after announcing its sleep sees the work, or this call sees the announcement and rings.
  void wake() noexcept {
    if (__builtin_expect(bell_.ring_if_asleep(), 0)) c_.doorbells.add_shared();
  }

  int index() const noexcept { return index_; }
  int cpu() const noexcept { return cpu_; }
  std::uint32_t burst() const noexcept { return burst_; }
  // The poller's kernel thread id (for /proc/self/task/TID/stat), 0 before start().
  int tid() const noexcept { return tid_.load(std::memory_order_acquire); }

 private:
  template <typename I>
  void run_static(I idle) noexcept;
  void run_sleeping(IdleKind kind) noexcept;
  enum class Slept { kRefused, kEvent, kTimeout };
  // Arms every source and waits; kRefused (having undone everything) when a source refused
  // or there was pending work.
  Slept sleep() noexcept;
  void publish_mode(const PollController& ctl, std::int64_t now) noexcept;
  int timers(std::int64_t now) noexcept;
  void run_commands() noexcept;

  const int index_;
  const std::uint32_t burst_;
  const std::int64_t sleep_timer_ns_;
  const ControllerOptions ctl_opts_;
  const bool poll_yield_;
  std::int64_t now_ = 0;  // the current cycle's clock reading
  int cpu_ = -1;
  std::vector<ProgressSource*> sources_;
  std::int64_t next_timer_ns_ = 0;

  struct Command {
    std::function<void()> fn;
    std::promise<void> done;
  };
  // Multi-producer command queue (control path: any thread; consumer: the poller).
  std::unique_ptr<boost::lockfree::queue<Command*>> cmds_;
  std::atomic<std::uint32_t> ncmds_{0};
  std::atomic<bool> running_{false};
  std::atomic<int> tid_{0};
  std::thread thread_;

  // Sleeping: what the poller waits on, and how wakers reach it.
  Doorbell bell_;  // the poller's sleep announcement and how wakers ring it (core/wakeup.h)
  int epfd_ = -1;
  int fd_sources_ = 0;  // sources with a notify_fd() in the epoll set

  PollerCounters c_;
  CountersFile* counters_ = nullptr;
  std::uint16_t owner_ = 0;
};

}  // namespace pollux::core
