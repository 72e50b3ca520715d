#include "core/wakeup.h"

#include <errno.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/clock.h"

namespace pollux::core {

namespace wakeup_detail {
std::atomic<bool> g_private_membarrier{false};
}  // namespace wakeup_detail

namespace {
std::atomic<int> g_membarrier_state{0};  // 0 = not tried, 1 = tried
std::atomic<bool> g_global_membarrier{false};
std::atomic<int> g_waitv{-1};  // -1 unknown, 0 no, 1 yes

long membarrier(int cmd, unsigned flags) { return syscall(__NR_membarrier, cmd, flags, 0); }

timespec rel_timespec(std::int64_t ns) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(ns % 1'000'000'000);
  return ts;
}
}  // namespace

bool init_membarrier() noexcept {
  int expected = 0;
  if (g_membarrier_state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    const long cmds = membarrier(MEMBARRIER_CMD_QUERY, 0);
    if (cmds > 0) {
      if ((cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0 &&
          membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0) == 0) {
        // Release: a waker that sees true also sees the registration done.
        wakeup_detail::g_private_membarrier.store(true, std::memory_order_release);
      }
      if ((cmds & MEMBARRIER_CMD_GLOBAL_EXPEDITED) != 0 &&
          membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0) == 0) {
        g_global_membarrier.store(true, std::memory_order_release);
      }
    }
  }
  return wakeup_detail::g_private_membarrier.load(std::memory_order_acquire);
}

bool global_membarrier_registered() noexcept { return g_global_membarrier.load(std::memory_order_acquire); }

void sleeper_barrier() noexcept {
  // Pairs with waker_barrier(): with membarrier, every thread of this process that runs right
  // now executes a full barrier, so a waker's earlier store is visible to our next loads, or
  // its later load of the sleeping flag sees our store.
  if (wakeup_detail::g_private_membarrier.load(std::memory_order_relaxed) &&
      membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0) == 0) {
    return;
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

bool global_sleeper_barrier() noexcept {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return g_global_membarrier.load(std::memory_order_relaxed) && membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0) == 0;
}

absl::StatusOr<EventFd> EventFd::create() {
  EventFd e;
  e.fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (e.fd_ < 0) return absl::ResourceExhaustedError(absl::StrCat("eventfd: ", std::strerror(errno)));
  return e;
}

EventFd& EventFd::operator=(EventFd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

EventFd::~EventFd() {
  if (fd_ >= 0) close(fd_);
}

void EventFd::signal() noexcept {
  const std::uint64_t one = 1;
  (void)!write(fd_, &one, sizeof one);
}

bool EventFd::drain() noexcept {
  std::uint64_t v = 0;
  return read(fd_, &v, sizeof v) == static_cast<ssize_t>(sizeof v) && v != 0;
}

absl::Status Doorbell::init() {
  auto e = EventFd::create();
  if (!e.ok()) return e.status();
  fd_ = std::move(*e);
  return absl::OkStatus();
}

void Doorbell::ring(std::uint32_t how) noexcept {
  if (how == kFutex) {
    // Release pairs with the sleeper's acquire snapshot(): the word changes after the work was
    // published, so a sleeper that has not blocked yet sees a different value and returns.
    word_.fetch_add(1, std::memory_order_release);
    (void)futex_wake(&word_, 1, /*shared=*/false);
  } else {
    fd_.signal();
  }
}

bool set_timer(int fd, std::int64_t rel_ns) noexcept {
  itimerspec t{};  // all zero: stops the timer
  if (rel_ns > 0) {
    t.it_value.tv_sec = static_cast<time_t>(rel_ns / 1'000'000'000);
    t.it_value.tv_nsec = static_cast<long>(rel_ns % 1'000'000'000);
  }
  return timerfd_settime(fd, 0, &t, nullptr) == 0;
}

DeadlineTimer::~DeadlineTimer() {
  if (fd_ >= 0) close(fd_);
}

absl::Status DeadlineTimer::open() {
  fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (fd_ < 0) return absl::ResourceExhaustedError(absl::StrCat("timerfd_create: ", std::strerror(errno)));
  return absl::OkStatus();
}

void DeadlineTimer::arm(std::int64_t deadline_ns, std::int64_t now_ns, bool disarm) noexcept {
  if (armed_ns_ > now_ns && armed_ns_ <= deadline_ns) return;  // fires in time (maybe early: harmless)
  if (deadline_ns == INT64_MAX) {
    if (!disarm || armed_ns_ == INT64_MAX) return;
    armed_ns_ = INT64_MAX;
    (void)set_timer(fd_, 0);
    return;
  }
  const std::int64_t rel = std::max<std::int64_t>(deadline_ns - now_ns, 1'000);
  (void)set_timer(fd_, rel);  // re-arming also clears a pending expiry
  armed_ns_ = now_ns + rel;
}

int futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected, bool shared,
               std::int64_t timeout_ns) noexcept {
  timespec ts = rel_timespec(timeout_ns < 0 ? 0 : timeout_ns);
  const int op = FUTEX_WAIT | (shared ? 0 : FUTEX_PRIVATE_FLAG);
  const long r = syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), op, expected,
                         timeout_ns < 0 ? nullptr : &ts, nullptr, 0);
  if (r == 0) return 0;
  if (errno == EAGAIN) return 0;  // the value already differed
  return errno;
}

int futex_wake(std::atomic<std::uint32_t>* word, int count, bool shared) noexcept {
  const int op = FUTEX_WAKE | (shared ? 0 : FUTEX_PRIVATE_FLAG);
  const long r = syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), op, count, nullptr, nullptr, 0);
  return r < 0 ? -errno : static_cast<int>(r);
}

bool have_futex_waitv() noexcept {
  int v = g_waitv.load(std::memory_order_relaxed);
  if (v < 0) {
    // A zero-length vector: EINVAL when the syscall exists, ENOSYS when it does not.
    const long r = syscall(SYS_futex_waitv, nullptr, 0, 0, nullptr, CLOCK_MONOTONIC);
    v = (r < 0 && errno == ENOSYS) ? 0 : 1;
    g_waitv.store(v, std::memory_order_relaxed);
  }
  return v == 1;
}

int futex_wait_any(std::span<const FutexWait> waits, std::int64_t timeout_ns) noexcept {
  if (waits.empty()) return EINVAL;
  if (waits.size() == 1) return futex_wait(waits[0].word, waits[0].expected, waits[0].shared, timeout_ns);
  if (waits.size() > FUTEX_WAITV_MAX || !have_futex_waitv()) return ENOSYS;
  futex_waitv v[FUTEX_WAITV_MAX];
  for (std::size_t i = 0; i < waits.size(); ++i) {
    std::memset(&v[i], 0, sizeof v[i]);
    v[i].val = waits[i].expected;
    v[i].uaddr = reinterpret_cast<std::uintptr_t>(waits[i].word);
    v[i].flags = FUTEX_32 | (waits[i].shared ? 0 : FUTEX_PRIVATE_FLAG);  // per-waiter flags of futex_waitv
  }
  timespec abs{};
  if (timeout_ns >= 0) {
    // futex_waitv takes an absolute timeout on the given clock.
    clock_gettime(CLOCK_MONOTONIC, &abs);
    const std::int64_t t = abs.tv_sec * 1'000'000'000LL + abs.tv_nsec + timeout_ns;
    abs = rel_timespec(t);
  }
  const long r = syscall(SYS_futex_waitv, v, static_cast<unsigned>(waits.size()), 0, timeout_ns < 0 ? nullptr : &abs,
                         CLOCK_MONOTONIC);
  if (r >= 0) return 0;
  if (errno == EAGAIN) return 0;
  return errno;
}

}  // namespace pollux::core
