#include "core/poller.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <boost/lockfree/queue.hpp>
#include <cstring>

#include "absl/strings/str_format.h"
#include "core/clock.h"
#include "core/topology.h"

namespace pollux::core {

namespace {
constexpr std::int64_t kTimerPeriodNs = 1'000'000;  // timers while polling: every 1 ms
constexpr std::uint32_t kMaxFutexWaits = 64;
}  // namespace

Poller::Poller(int index, const Config& cfg, CountersFile* counters)
    : index_(index),
      burst_(std::min(cfg.rings.burst, kMaxBurst)),
      sleep_timer_ns_(static_cast<std::int64_t>(cfg.runtime.sleep_timer_ms) * 1'000'000),
      ctl_opts_(cfg.runtime.adaptive),
      poll_yield_(cfg.runtime.poll_yield),
      cmds_(std::make_unique<boost::lockfree::queue<Command*>>(64)) {
  const std::string scope = absl::StrFormat("poller %d", index);
  counters_ = counters;
  owner_ = counters->new_owner();
  auto alloc = [&](std::string_view name) { return counters->allocate(scope, name, 0, CounterKind::kPoller, owner_); };
  POLLUX_COUNTER_ALLOCATE(POLLUX_POLLER_COUNTERS, c_, alloc);
  init_membarrier();
  (void)bell_.init();  // start() reports a missing eventfd
  epfd_ = epoll_create1(EPOLL_CLOEXEC);
  if (epfd_ >= 0 && bell_.fd() >= 0) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = nullptr;
    (void)epoll_ctl(epfd_, EPOLL_CTL_ADD, bell_.fd(), &ev);
  }
}

Poller::~Poller() {
  stop();
  Command* c;
  while (cmds_->pop(c)) {
    c->fn();
    c->done.set_value();
  }
  if (epfd_ >= 0) close(epfd_);
}

absl::Status Poller::start(IdleKind idle, int cpu) {
  if (epfd_ < 0 || bell_.fd() < 0) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("poller %d: cannot create its epoll set or eventfd: %s", index_, std::strerror(errno)));
  }
  cpu_ = cpu;
  running_.store(true, std::memory_order_release);
  std::promise<absl::Status> started;
  auto fut = started.get_future();
  thread_ = std::thread([this, idle, cpu, &started] {
    const std::string name = absl::StrFormat("pollux-poll-%d", index_);
    pthread_setname_np(pthread_self(), name.c_str());
    tid_.store(static_cast<int>(syscall(SYS_gettid)), std::memory_order_release);
    absl::Status pin = cpu >= 0 ? topology().pin_current_thread(cpu) : absl::OkStatus();
    started.set_value(pin);
    if (!pin.ok()) return;
    switch (idle) {
      case IdleKind::kBusySpin:
        run_static(BusySpinIdle{});
        break;
      case IdleKind::kYield:
        run_static(YieldIdle{});
        break;
      case IdleKind::kBackoff:
        run_static(BackoffIdle{});
        break;
      case IdleKind::kInterrupt:
      case IdleKind::kAdaptive:
        run_sleeping(idle);
        break;
    }
    on_close();
  });
  absl::Status s = fut.get();
  if (s.ok()) {
    c_.thread_id.set(static_cast<std::uint64_t>(tid_.load(std::memory_order_acquire)));  // stored before `started`
    c_.idle_strategy.set(
        static_cast<std::uint64_t>(idle));  // pollux-stat: a controller runs only for adaptive/interrupt
    if (cpu >= 0) {                         // present only when pinned
      POLLUX_COUNTER_ALLOCATE(POLLUX_POLLER_PINNED_COUNTERS, c_, [&](std::string_view n) {
        return counters_->allocate(absl::StrFormat("poller %d", index_), n, 0, CounterKind::kPoller, owner_);
      });
      c_.pinned_cpu.set(static_cast<std::uint64_t>(cpu));
    }
  }
  if (!s.ok()) {
    thread_.join();
    running_.store(false, std::memory_order_release);
  }
  return s;
}

void Poller::stop() {
  if (!thread_.joinable()) return;
  running_.store(false, std::memory_order_release);  // pairs with the run loops' acquire
  wake();
  // A poller asleep on a futex of its own doorbell or in epoll is woken above; ring anyway in
  // case it announced its sleep after our check (it re-checks running_ before sleeping).
  bell_.ring_both_ways();
  c_.doorbells.add_shared(2);
  thread_.join();
}

void Poller::run_on_poller(const std::function<void()>& fn) {
  if (!thread_.joinable() || !running_.load(std::memory_order_acquire)) {
    fn();
    return;
  }
  Command c{fn, {}};
  auto fut = c.done.get_future();
  // The queue pushes the pointer with release semantics; the counter below pairs with the
  // acquire load in do_work() and is what makes a sleeping poller's re-check see the command.
  while (!cmds_->push(&c)) std::this_thread::yield();
  ncmds_.fetch_add(1, std::memory_order_release);
  wake();
  fut.wait();
}

void Poller::run_commands() noexcept {
  Command* c;
  while (cmds_->pop(c)) {
    ncmds_.fetch_sub(1, std::memory_order_relaxed);
    c->fn();
    c->done.set_value();
  }
}

void Poller::add_source(ProgressSource* s) {
  sources_.push_back(s);
  if (const int fd = s->notify_fd(); fd >= 0) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = s;
    if (epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) == 0) ++fd_sources_;
  }
}

void Poller::remove_source(ProgressSource* s) {
  auto it = std::find(sources_.begin(), sources_.end(), s);
  if (it == sources_.end()) return;
  sources_.erase(it);
  if (const int fd = s->notify_fd(); fd >= 0) {
    if (epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr) == 0) --fd_sources_;
  }
}

int Poller::do_work() noexcept {
  // Acquire pairs with run_on_poller's release increment.
  if (ncmds_.load(std::memory_order_acquire) != 0) run_commands();
  const std::int64_t now = Clock::now_ns();  // once per cycle
  now_ = now;
  int work = 0;
  for (ProgressSource* s : sources_) work += s->progress(now);
  work += timers(now);
  c_.cycles.add();
  if (work > 0) {
    c_.work.add(static_cast<std::uint64_t>(work));
  } else {
    c_.idle.add();
  }
  return work;
}

int Poller::timers(std::int64_t now) noexcept {
  if (now < next_timer_ns_) return 0;
  next_timer_ns_ = now + kTimerPeriodNs;
  Clock::maintain(now);  // at most once a second does anything
  int work = 0;
  for (ProgressSource* s : sources_) work += s->housekeeping(now);
  return work;
}

template <typename I>
void Poller::run_static(I idle) noexcept {
  // Acquire pairs with stop()'s release store.
  while (running_.load(std::memory_order_acquire)) idle.idle(do_work());
}

void Poller::run_sleeping(IdleKind kind) noexcept {
  ControllerOptions o = ctl_opts_;
  o.policy = kind == IdleKind::kInterrupt ? IdleKind::kInterrupt : IdleKind::kAdaptive;
  PollController ctl(o, Clock::now_ns());
  std::uint32_t publish_countdown = 0;
  // Acquire pairs with stop()'s release store.
  while (running_.load(std::memory_order_acquire)) {
    const int work = do_work();
    if (ctl.on_cycle(now_, work) == PollAction::kPoll) {
      // Empty cycle while polling: give the CPU to a runnable application thread if there is
      // one (returns at once otherwise), or just pause (runtime.poll_yield = false).
      if (work == 0) {
        if (poll_yield_) {
          sched_yield();
        } else {
          cpu_relax();
        }
      }
      if (++publish_countdown == 4096) {
        publish_countdown = 0;
        publish_mode(ctl, now_);
      }
      continue;
    }
    publish_mode(ctl, now_);
    switch (sleep()) {
      case Slept::kRefused:
        ctl.on_arm_refused(now_);
        break;
      case Slept::kEvent:
        ctl.on_wakeup(Clock::now_ns(), true);
        break;
      case Slept::kTimeout:
        ctl.on_wakeup(Clock::now_ns(), false);
        break;
    }
  }
  publish_mode(ctl, Clock::now_ns());
}

void Poller::publish_mode(const PollController& ctl, std::int64_t now) noexcept {
  const ControllerCounters& k = ctl.counters();
  POLLUX_COUNTER_PUBLISH(POLLUX_POLLER_COUNTERS, c_);
}

Poller::Slept Poller::sleep() noexcept {
  FutexWait waits[kMaxFutexWaits];
  std::uint32_t nwaits = 0;
  // Snapshot the futex doorbell before announcing the sleep (core::Doorbell).
  const std::uint32_t bell = bell_.snapshot();
  // The announcement: the kind is fixed now (futex if any source needs futex words, else
  // epoll); a source's futex words are only known once armed, so announce epoll first when
  // there are fd sources, futex otherwise.
  const std::uint32_t how = fd_sources_ > 0 ? Doorbell::kFd : Doorbell::kFutex;
  bell_.announce(how);  // pairs with wake()'s ring_if_asleep(): the announcement -> the re-checks below
  std::size_t armed = 0;
  bool ok = running_.load(std::memory_order_acquire) && ncmds_.load(std::memory_order_acquire) == 0;
  for (; ok && armed < sources_.size(); ++armed) {
    if (!sources_[armed]->try_arm()) {
      ok = false;
      break;
    }
    nwaits += sources_[armed]->futex_waits({waits + nwaits, kMaxFutexWaits - 1 - nwaits});
  }
  // Epoll and futex words cannot be waited on together: a poller has one transport, so this
  // only happens with a source that is misconfigured; keep polling rather than miss a wakeup.
  if (ok && nwaits > 0 && how == Doorbell::kFd) ok = false;
  if (!ok) {
    for (std::size_t i = armed; i-- > 0;) sources_[i]->disarm();
    bell_.withdraw();
    c_.arm_refused.add();
    return Slept::kRefused;
  }
  c_.sleeps.add();
  const std::int64_t timeout = sleep_timer_ns_ > 0 ? sleep_timer_ns_ : -1;
  bool by_event;
  bool bell_fd_ready = false;  // only then is there an eventfd count to consume
  if (how == Doorbell::kFutex) {
    // A ring bumps the futex word, never the eventfd, while we announce kFutex.
    waits[nwaits++] = FutexWait{bell_.word(), bell, false};
    by_event = futex_wait_any({waits, nwaits}, timeout) != ETIMEDOUT;
  } else {
    epoll_event evs[16];
    timespec ts{static_cast<time_t>(timeout / 1'000'000'000), static_cast<long>(timeout % 1'000'000'000)};
    const int n = epoll_pwait2(epfd_, evs, 16, timeout < 0 ? nullptr : &ts, nullptr);
    by_event = n != 0;
    // The doorbell is the one member registered with data.ptr == nullptr (constructor). An
    // error return (EINTR) reads it anyway: a leftover count would keep the set readable.
    for (int i = 0; i < n; ++i) bell_fd_ready |= evs[i].data.ptr == nullptr;
    bell_fd_ready |= n < 0;
  }
  bell_.withdraw();
  for (std::size_t i = sources_.size(); i-- > 0;) sources_[i]->disarm();
  // Saves a read() syscall on every wakeup not caused by the doorbell (data, timers).
  if (bell_fd_ready) (void)bell_.drain_fd();
  next_timer_ns_ = 0;  // run the timers right after every wakeup (core/progress.h promises it)
  return by_event ? Slept::kEvent : Slept::kTimeout;
}

void Poller::on_close() noexcept {
  // Endpoints are closed by their owners (context/publisher close) through run_on_poller or,
  // once the thread has stopped, directly; nothing to flush here beyond pending commands.
  if (ncmds_.load(std::memory_order_acquire) != 0) run_commands();
}

}  // namespace pollux::core
