#include "core/mapping_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>

namespace pollux::core {
namespace {

// One slot per guarded mapping. Registration and removal happen on control paths (any thread);
// the signal handler reads the table lock-free. `state` publishes the other fields:
// kFree -> kClaimed (registering thread owns the slot) -> kActive (release: fields complete).
enum : std::uint32_t { kFree = 0, kClaimed = 1, kActive = 2 };

struct Guarded {
  std::atomic<std::uint32_t> state{kFree};
  std::atomic<std::uint32_t> neutralized{0};  // 0 -> 1 (replacing) -> 2 (replaced)
  std::atomic<std::uintptr_t> begin{0};
  std::atomic<std::uintptr_t> end{0};
  std::atomic<std::atomic<std::uint64_t>*> poison{nullptr};
  std::atomic<std::uint64_t> poison_value{0};
  std::atomic<std::uint64_t> faults{0};
};

Guarded g_table[kMaxGuardedMappings];
std::atomic<int> g_high{0};  // slots [0, g_high) may be in use
std::atomic<std::uint64_t> g_total_faults{0};
struct sigaction g_previous;  // written once before our handler is installed
std::once_flag g_install_once;

// Async-signal-safe: mmap is a plain system call; the rest are lock-free atomics.
bool replace(Guarded& g) noexcept {
  std::uint32_t expect = 0;
  if (g.neutralized.compare_exchange_strong(expect, 1, std::memory_order_acq_rel)) {
    const std::uintptr_t b = g.begin.load(std::memory_order_relaxed);
    const std::uintptr_t e = g.end.load(std::memory_order_relaxed);
    // The raw system call: async-signal-safe by construction, and invisible to sanitizer
    // interceptors (TSan would take the replacement for a write racing with every concurrent
    // atomic load of the range; for the program it is not a store: the bytes become zero
    // atomically, page by page, as for a concurrent truncation).
    const long m = syscall(SYS_mmap, b, e - b, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (m == -1) {
      g.neutralized.store(0, std::memory_order_release);
      return false;
    }
    if (std::atomic<std::uint64_t>* p = g.poison.load(std::memory_order_relaxed)) {
      p->store(g.poison_value.load(std::memory_order_relaxed), std::memory_order_relaxed);
    }
    // Release pairs with the acquire loads of `neutralized` (a thread that faulted at the same
    // time spins in the handler until the new memory is in place, then retries its access).
    g.neutralized.store(2, std::memory_order_release);
    return true;
  }
  // Another thread is replacing it (1) or did (2): returning retries the access, which faults
  // again until the replacement is complete.
  return true;
}

void chain(int sig, siginfo_t* info, void* uctx) noexcept {
  const struct sigaction& prev = g_previous;
  if ((prev.sa_flags & SA_SIGINFO) != 0 && prev.sa_sigaction != nullptr) {
    prev.sa_sigaction(sig, info, uctx);
    return;
  }
  if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN && prev.sa_handler != nullptr) {
    prev.sa_handler(sig);
    return;
  }
  // Default action (SIG_IGN cannot stop a synchronous SIGBUS either: the access would retry
  // forever). A fault re-executes the instruction and dies; a SIGBUS sent by kill() is re-raised
  // and delivered with the default action once the handler returns.
  struct sigaction dfl = {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(SIGBUS, &dfl, nullptr);
  if (info == nullptr || info->si_code <= 0) raise(SIGBUS);
}

void on_sigbus(int sig, siginfo_t* info, void* uctx) {
  const int saved_errno = errno;
  if (info != nullptr && info->si_code > 0) {  // a fault, not kill()/raise()
    const std::uintptr_t a = reinterpret_cast<std::uintptr_t>(info->si_addr);
    const int n = g_high.load(std::memory_order_acquire);
    for (int i = 0; i < n; ++i) {
      Guarded& g = g_table[i];
      // Acquire pairs with the release in guard_mapping(): begin/end are complete.
      if (g.state.load(std::memory_order_acquire) != kActive) continue;
      if (a < g.begin.load(std::memory_order_relaxed) || a >= g.end.load(std::memory_order_relaxed)) continue;
      if (replace(g)) {
        g.faults.fetch_add(1, std::memory_order_relaxed);
        g_total_faults.fetch_add(1, std::memory_order_relaxed);
        errno = saved_errno;
        return;
      }
      break;  // could not replace it: behave as if it were not ours
    }
  }
  errno = saved_errno;
  chain(sig, info, uctx);
}

void install() {
  struct sigaction sa = {};
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGBUS, &sa, &g_previous);
}

}  // namespace

int guard_mapping(void* base, std::size_t len, std::atomic<std::uint64_t>* poison,
                  std::uint64_t poison_value) noexcept {
  std::call_once(g_install_once, install);
  for (int i = 0; i < kMaxGuardedMappings; ++i) {
    Guarded& g = g_table[i];
    std::uint32_t expect = kFree;
    if (!g.state.compare_exchange_strong(expect, kClaimed, std::memory_order_acq_rel)) continue;
    g.neutralized.store(0, std::memory_order_relaxed);
    g.begin.store(reinterpret_cast<std::uintptr_t>(base), std::memory_order_relaxed);
    g.end.store(reinterpret_cast<std::uintptr_t>(base) + len, std::memory_order_relaxed);
    g.poison.store(poison, std::memory_order_relaxed);
    g.poison_value.store(poison_value, std::memory_order_relaxed);
    g.faults.store(0, std::memory_order_relaxed);
    int high = g_high.load(std::memory_order_relaxed);
    while (high < i + 1 && !g_high.compare_exchange_weak(high, i + 1, std::memory_order_release)) {
    }
    // Release pairs with the handler's acquire: the range is complete before it counts.
    g.state.store(kActive, std::memory_order_release);
    return i;
  }
  return -1;
}

void unguard_mapping(int id) noexcept {
  if (id < 0 || id >= kMaxGuardedMappings) return;
  g_table[id].state.store(kFree, std::memory_order_release);
}

bool neutralize_mapping(int id) noexcept {
  if (id < 0 || id >= kMaxGuardedMappings) return false;
  Guarded& g = g_table[id];
  if (g.state.load(std::memory_order_acquire) != kActive) return false;
  if (!replace(g)) return false;
  // Wait out a replacement another thread (a handler) is making right now.
  std::uint32_t n;
  while ((n = g.neutralized.load(std::memory_order_acquire)) == 1) {
  }
  return n == 2;
}

std::uint64_t mapping_faults(int id) noexcept {
  if (id < 0 || id >= kMaxGuardedMappings) return 0;
  return g_table[id].faults.load(std::memory_order_relaxed);
}

bool mapping_neutralized(int id) noexcept {
  if (id < 0 || id >= kMaxGuardedMappings) return false;
  return g_table[id].neutralized.load(std::memory_order_acquire) == 2;
}

std::uint64_t guarded_faults_total() noexcept { return g_total_faults.load(std::memory_order_relaxed); }

}  // namespace pollux::core
