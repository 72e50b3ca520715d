#include "core/process.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace pollux::core {
namespace {

// Reads /proc/<pid>/stat into buf; returns a pointer just past the ")" that ends the command
// name (which may hold spaces and ')'), or null.
const char* read_stat(int pid, char* buf, std::size_t cap) noexcept {
  if (pid <= 0) return nullptr;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nullptr;
  const ssize_t n = ::read(fd, buf, cap - 1);
  ::close(fd);
  if (n <= 0) return nullptr;
  buf[n] = '\0';
  const char* p = std::strrchr(buf, ')');
  return p != nullptr ? p + 1 : nullptr;
}

}  // namespace

std::uint64_t process_start_time(int pid) noexcept {
  char buf[1024];
  const char* p = read_stat(pid, buf, sizeof buf);
  if (p == nullptr) return 0;
  // Fields counted from the last ')': " state(3) ppid(4) ... starttime(22)".
  int field = 2;
  for (; *p != '\0'; ++p) {
    if (*p == ' ' && ++field == 22) return std::strtoull(p + 1, nullptr, 10);
  }
  return 0;
}

std::uint64_t self_start_time() noexcept {
  static std::atomic<std::uint64_t> cached{0};
  static std::atomic<int> cached_pid{0};
  const int me = getpid();
  if (cached_pid.load(std::memory_order_acquire) != me) {
    cached.store(process_start_time(me), std::memory_order_relaxed);
    cached_pid.store(me, std::memory_order_release);  // pairs with the acquire above
  }
  return cached.load(std::memory_order_relaxed);
}

std::uint64_t boot_id_hash() noexcept {
  static const std::uint64_t h = [] {
    char buf[64] = {};
    const int fd = ::open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return std::uint64_t{0};
    const ssize_t n = ::read(fd, buf, sizeof buf - 1);
    ::close(fd);
    std::uint64_t v = 0xcbf29ce484222325ull;  // FNV-1a
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] == '\n') break;
      v = (v ^ static_cast<unsigned char>(buf[i])) * 0x100000001b3ull;
    }
    return n > 0 ? v : std::uint64_t{0};
  }();
  return h;
}

bool process_alive(int pid, std::uint64_t start) noexcept {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno != EPERM) return false;
  char buf[1024];
  const char* p = read_stat(pid, buf, sizeof buf);
  if (p == nullptr) return true;  // no /proc (or hidepid): the pid alone decides
  // State (field 3): Z (zombie) and X (dead) hold nothing any more - no mapping, no lock - and
  // count as gone. A killed child whose parent has not waited for it stays a zombie for as
  // long as the parent likes (a new publisher must not be refused after a kill -9).
  const char state = p[0] == ' ' ? p[1] : '\0';
  if (state == 'Z' || state == 'X' || state == 'x') return false;
  if (start == 0) return true;
  const std::uint64_t now = process_start_time(pid);
  return now == 0 || now == start;
}

bool process_alive_since_boot(int pid, std::uint64_t start, std::uint64_t boot) noexcept {
  const std::uint64_t here = boot_id_hash();
  if (boot != 0 && here != 0 && boot != here) return false;  // written before a reboot
  return process_alive(pid, start);
}

std::string process_name(int pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/comm", pid);
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  char buf[64];
  const ssize_t n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  if (n <= 0) return "";
  std::string s(buf, static_cast<std::size_t>(n));
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
  return s;
}

std::int64_t wall_clock_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

std::string format_wall_clock(std::int64_t ns) {
  const time_t secs = static_cast<time_t>(ns / 1'000'000'000);
  const int ms = static_cast<int>((ns % 1'000'000'000) / 1'000'000);
  tm t{};
  if (ns < 0 || gmtime_r(&secs, &t) == nullptr) return "?";
  char buf[96];  // room for any int the compiler can imagine in each field
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", t.tm_year + 1900, t.tm_mon + 1, t.tm_mday,
                t.tm_hour, t.tm_min, t.tm_sec, ms);
  return buf;
}

}  // namespace pollux::core
