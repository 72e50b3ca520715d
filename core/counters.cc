#include "core/counters.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/mapping_guard.h"

namespace pollux::core {
namespace {
constexpr std::size_t kHeaderRegion = 4096;
constexpr std::size_t kSlot = 128;
constexpr std::size_t kMaxCountersFile = 256u << 20;

void copy_str(char* dst, std::size_t cap, std::string_view s) {
  const std::size_t n = std::min(cap - 1, s.size());
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}
}  // namespace

absl::StatusOr<std::unique_ptr<CountersFile>> CountersFile::create(std::string_view dir, std::string_view name,
                                                                   std::uint32_t capacity) {
  std::unique_ptr<CountersFile> f(new CountersFile());
  f->capacity_ = capacity;
  f->bytes_ = kHeaderRegion + 2 * kSlot * capacity;
  void* mem;
  if (dir.empty()) {
    mem = mmap(nullptr, f->bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return absl::ResourceExhaustedError("cannot map counters memory");
  } else {
    // One file per context: several contexts in one process must not share (or truncate)
    // each other's file.
    static std::atomic<int> instance{0};
    const int n = instance.fetch_add(1, std::memory_order_relaxed);
    f->path_ = n == 0 ? absl::StrFormat("%s/pollux-%s-%d.counters", dir, name, getpid())
                      : absl::StrFormat("%s/pollux-%s-%d-%d.counters", dir, name, getpid(), n);
    auto hint = [](absl::Status s) {
      return absl::Status(s.code(), absl::StrCat(s.message(), " (or set runtime.counters = false)"));
    };
    // Built unnamed and renamed into place once complete (replacing a stale file of a dead
    // process that had our pid): a failure leaves nothing behind, a reader never sees half a file.
    if (absl::Status s = f->file_.create(f->path_, 0600, FileAccess::kNoGroup, "counters file"); !s.ok()) return hint(s);
    // tmpfs: reserve the pages now, or writing the header below raises SIGBUS on a full /dev/shm.
    if (absl::Status s = reserve_file(f->file_.fd(), f->bytes_, f->path_, "counters file"); !s.ok()) return hint(s);
    mem = mmap(nullptr, f->bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, f->file_.fd(), 0);
    if (mem == MAP_FAILED) {
      return absl::ResourceExhaustedError(absl::StrFormat("cannot map %s: %s", f->path_, std::strerror(errno)));
    }
    // A process truncating the file must not kill this one in Counter::add(): the counters then
    // continue in private memory (pollux-stat no longer sees them).
    f->guard_ = guard_mapping(mem, f->bytes_);
  }
  f->base_ = static_cast<std::byte*>(mem);
  auto* h = new (f->base_) CountersHeader{};
  h->version = kCountersVersion;
  h->header_size = kHeaderRegion;
  h->label_size = kSlot;
  h->value_size = kSlot;
  h->capacity = capacity;
  h->pid = getpid();
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  h->start_ns = ts.tv_sec * 1'000'000'000ll + ts.tv_nsec;
  h->allocated.store(0, std::memory_order_relaxed);
  copy_str(h->name, sizeof h->name, name);
  // Magic last, with release: a reader that sees the magic sees a complete header.
  std::atomic_ref<std::uint64_t>(h->magic).store(kCountersMagic, std::memory_order_release);
  if (!f->path_.empty()) {
    if (absl::Status s = f->file_.publish(); !s.ok()) {
      f->path_.clear();  // nothing of ours to unlink
      return s;
    }
    struct stat st;
    if (::fstat(f->file_.fd(), &st) == 0) f->inode_ = static_cast<std::uint64_t>(st.st_ino);
    ::close(f->file_.release_fd());
  }
  return f;
}

CountersFile::~CountersFile() {
  if (guard_ >= 0) unguard_mapping(guard_);
  if (base_ != nullptr) munmap(base_, bytes_);
  // Only our own file (a process reusing our pid may have replaced a stale one).
  struct stat st;
  if (!path_.empty() && ::lstat(path_.c_str(), &st) == 0 && static_cast<std::uint64_t>(st.st_ino) == inode_) {
    ::unlink(path_.c_str());
  }
}

Counter CountersFile::allocate(std::string_view scope, std::string_view name, std::uint32_t stream_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto* h = reinterpret_cast<CountersHeader*>(base_);
  const std::uint32_t i = h->allocated.load(std::memory_order_relaxed);
  if (i >= capacity_) {
    if (overflow_.empty()) {
      std::fprintf(stderr, "pollux: counters file %s is full (%u counters); further counters are private\n",
                   path_.c_str(), capacity_);
    }
    overflow_.push_back(std::make_unique<std::atomic<std::uint64_t>>(0));
    return Counter(overflow_.back().get());
  }
  auto* label = reinterpret_cast<CounterLabel*>(base_ + kHeaderRegion + kSlot * i);
  label->stream_id = stream_id;
  copy_str(label->scope, sizeof label->scope, scope);
  copy_str(label->name, sizeof label->name, name);
  auto* v = reinterpret_cast<std::atomic<std::uint64_t>*>(base_ + kHeaderRegion + kSlot * capacity_ + kSlot * i);
  v->store(0, std::memory_order_relaxed);
  // Release pairs with the reader's acquire of `allocated`: label i is complete when counted.
  h->allocated.store(i + 1, std::memory_order_release);
  return Counter(v);
}

std::uint32_t CountersFile::allocated() const noexcept {
  return reinterpret_cast<const CountersHeader*>(base_)->allocated.load(std::memory_order_acquire);
}

absl::StatusOr<CountersFileSnapshot> read_counters_file(const std::string& path) {
  // Any user may leave a file named like ours: never follow a link, never block on a FIFO, and
  // copy the file instead of mapping it (a mapping faults with SIGBUS if it is truncated while
  // we read it).
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrFormat("%s: %s", path, std::strerror(errno)));
    return open_error(errno, path, "counters file");
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<std::size_t>(st.st_size) < kHeaderRegion ||
      static_cast<std::size_t>(st.st_size) > kMaxCountersFile) {
    ::close(fd);
    return absl::DataLossError(absl::StrFormat(
        "%s: not a regular file of %u..%u bytes: not a counters file", path, kHeaderRegion, kMaxCountersFile));
  }
  std::vector<std::uint64_t> copy((static_cast<std::size_t>(st.st_size) + 7) / 8);
  std::size_t len = 0;
  while (len < static_cast<std::size_t>(st.st_size)) {
    const ssize_t r = ::pread(fd, reinterpret_cast<char*>(copy.data()) + len, static_cast<std::size_t>(st.st_size) - len,
                              static_cast<off_t>(len));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;  // shrank while we read: parse what we have
    len += static_cast<std::size_t>(r);
  }
  ::close(fd);
  if (len < kHeaderRegion) return absl::DataLossError(absl::StrFormat("%s: too small to be a counters file", path));
  auto* base = reinterpret_cast<const std::byte*>(copy.data());
  const auto* h = reinterpret_cast<const CountersHeader*>(base);
  CountersFileSnapshot out;
  out.path = path;
  absl::Status bad;
  if (std::atomic_ref<const std::uint64_t>(h->magic).load(std::memory_order_acquire) != kCountersMagic) {
    bad = absl::DataLossError(absl::StrFormat("%s: bad magic (not a pollux counters file, or still being created)", path));
  } else if (h->version != kCountersVersion) {
    bad = absl::FailedPreconditionError(absl::StrFormat("%s: version %u, this reader understands %u", path,
                                                        h->version, kCountersVersion));
  } else if (h->header_size != kHeaderRegion || h->label_size != kSlot || h->value_size != kSlot ||
             kHeaderRegion + 2 * kSlot * static_cast<std::size_t>(h->capacity) > len) {
    bad = absl::DataLossError(absl::StrFormat("%s: inconsistent layout sizes", path));
  }
  if (!bad.ok()) return bad;
  out.pid = h->pid;
  out.alive = h->pid > 0 && (kill(h->pid, 0) == 0 || errno == EPERM);
  out.start_ns = h->start_ns;
  out.name.assign(h->name, strnlen(h->name, sizeof h->name));
  const std::uint32_t n = std::min(h->allocated.load(std::memory_order_acquire), h->capacity);
  for (std::uint32_t i = 0; i < n; ++i) {
    const auto* label = reinterpret_cast<const CounterLabel*>(base + kHeaderRegion + kSlot * i);
    const auto* v = reinterpret_cast<const std::atomic<std::uint64_t>*>(base + kHeaderRegion +
                                                                        kSlot * h->capacity + kSlot * i);
    out.counters.push_back({std::string(label->scope, strnlen(label->scope, sizeof label->scope)),
                            std::string(label->name, strnlen(label->name, sizeof label->name)),
                            label->stream_id, v->load(std::memory_order_relaxed)});
  }
  return out;
}

std::vector<std::string> list_counters_files(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string_view n(e->d_name);
      if (n.starts_with("pollux-") && n.ends_with(".counters")) out.push_back(dir + "/" + std::string(n));
    }
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace pollux::core
