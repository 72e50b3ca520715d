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
#include "core/process.h"

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
  const std::size_t error_log_offset = kHeaderRegion + 2 * kSlot * capacity;
  f->bytes_ = error_log_offset + error_log_bytes(kErrorLogEntries);
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
    if (absl::Status s = f->file_.create(f->path_, 0600, FileAccess::kNoGroup, "counters file"); !s.ok())
      return hint(s);
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
  h->start_ns = wall_clock_ns();
  h->allocated.store(0, std::memory_order_relaxed);
  copy_str(h->name, sizeof h->name, name);
  h->pid_start = self_start_time();
  h->boot_id = boot_id_hash();
  h->error_log_offset = error_log_offset;
  h->error_log_size = error_log_bytes(kErrorLogEntries);
  // Slot 0: the errors counter, bumped by every ErrorLog::record() (from any thread).
  f->error_log_.init(f->base_ + error_log_offset, kErrorLogEntries,
                     f->allocate("process", "errors", 0, CounterKind::kProcess));
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

Counter CountersFile::allocate(std::string_view scope, std::string_view name, std::uint32_t stream_id, CounterKind kind,
                               std::uint16_t owner) {
  std::unique_lock<std::mutex> lock(mu_);
  auto* h = reinterpret_cast<CountersHeader*>(base_);
  const std::uint32_t i = h->allocated.load(std::memory_order_relaxed);
  if (i >= capacity_) {
    const bool first = overflow_.empty();
    overflow_.push_back(std::make_unique<std::atomic<std::uint64_t>>(0));
    Counter c(overflow_.back().get());
    lock.unlock();
    if (first) {
      error_log_.recordf(
          absl::StatusCode::kResourceExhausted,
          "counters file %s is full (%u counters): further counters are private (not shown by pollux-stat "
          "or the metrics endpoint); raise runtime.counters_capacity",
          path_.empty() ? "<private>" : path_, capacity_);
    }
    return c;
  }
  auto* label = reinterpret_cast<CounterLabel*>(base_ + kHeaderRegion + kSlot * i);
  label->stream_id = stream_id;
  label->kind = static_cast<std::uint16_t>(kind);
  label->owner = owner;
  copy_str(label->scope, sizeof label->scope, scope);
  copy_str(label->name, sizeof label->name, name);
  auto* v = reinterpret_cast<std::atomic<std::uint64_t>*>(base_ + kHeaderRegion + kSlot * capacity_ + kSlot * i);
  v->store(0, std::memory_order_relaxed);
  // Release pairs with the reader's acquire of `allocated`: label i is complete when counted.
  h->allocated.store(i + 1, std::memory_order_release);
  return Counter(v);
}

std::uint16_t CountersFile::new_owner() {
  std::lock_guard<std::mutex> lock(mu_);
  if (++next_owner_ == 0) next_owner_ = 1;
  return next_owner_;
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
    return absl::DataLossError(absl::StrFormat("%s: not a regular file of %u..%u bytes: not a counters file", path,
                                               kHeaderRegion, kMaxCountersFile));
  }
  // Only what the decoder reads is copied - the header, the labels and values of the allocated
  // slots, the error log - into a buffer laid out as the file (the rest is never touched, so a
  // file sized for many more counters than it holds costs what it holds). Not zeroed: every
  // byte the decoder reads was written by a read() here.
  const auto size = static_cast<std::size_t>(st.st_size);
  auto copy = std::make_unique_for_overwrite<std::uint64_t[]>((size + 7) / 8);
  auto* buf = reinterpret_cast<char*>(copy.get());
  auto read_at = [&](std::size_t off, std::size_t n) {  // false when the file gave less
    std::size_t got = 0;
    while (got < n) {
      const ssize_t r = ::pread(fd, buf + off + got, n - got, static_cast<off_t>(off + got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      got += static_cast<std::size_t>(r);
    }
    return true;
  };
  std::size_t len = size;
  bool whole = false;
  if (!read_at(0, kHeaderRegion)) {
    whole = true;
  } else {
    auto field = [&](auto* v, std::size_t offset) { std::memcpy(v, buf + offset, sizeof *v); };
    std::uint32_t header_size, label_size, value_size, capacity, allocated;
    std::uint64_t log_offset, log_size;
    field(&header_size, offsetof(CountersHeader, header_size));
    field(&label_size, offsetof(CountersHeader, label_size));
    field(&value_size, offsetof(CountersHeader, value_size));
    field(&capacity, offsetof(CountersHeader, capacity));
    field(&allocated, offsetof(CountersHeader, allocated));
    field(&log_offset, offsetof(CountersHeader, error_log_offset));
    field(&log_size, offsetof(CountersHeader, error_log_size));
    const std::uint64_t cap = capacity, n = std::min<std::uint64_t>(allocated, cap);
    const std::uint64_t slots_end = kHeaderRegion + 2 * kSlot * cap;
    if (header_size != kHeaderRegion || label_size != kSlot || value_size != kSlot || slots_end > size ||
        log_offset < slots_end || log_offset > size || log_size > size - log_offset) {
      whole = true;  // the decoder says what is wrong
    } else if (!read_at(kHeaderRegion, n * kSlot) || !read_at(kHeaderRegion + cap * kSlot, n * kSlot) ||
               !read_at(log_offset, log_size)) {
      ::close(fd);
      return absl::DataLossError(absl::StrFormat("%s: shrank while it was read (its process may be exiting)", path));
    }
  }
  if (whole) {
    len = 0;
    while (len < size) {
      const ssize_t r = ::pread(fd, buf + len, size - len, static_cast<off_t>(len));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;  // shrank while we read: parse what we have
      len += static_cast<std::size_t>(r);
    }
  }
  ::close(fd);
  return decode_counters_file(reinterpret_cast<const std::byte*>(copy.get()), len, path);
}

absl::StatusOr<CountersFileSnapshot> decode_counters_file(const std::byte* base, std::size_t len,
                                                          const std::string& path) {
  if (len < kHeaderRegion) return absl::DataLossError(absl::StrFormat("%s: too small to be a counters file", path));
  // The header's fields as plain values (the bytes are a private copy; never trusted).
  struct RawHeader {
    std::uint64_t magic;
    std::uint32_t version, header_size, label_size, value_size, capacity;
    std::int32_t pid;
    std::int64_t start_ns;
    std::uint32_t allocated, pad0;
    char name[64];
    std::uint64_t pid_start, boot_id, error_log_offset, error_log_size;
  } h;
  static_assert(offsetof(RawHeader, allocated) == offsetof(CountersHeader, allocated));
  static_assert(offsetof(RawHeader, error_log_size) == offsetof(CountersHeader, error_log_size));
  std::memcpy(&h, base, sizeof h);
  CountersFileSnapshot out;
  out.path = path;
  out.snapshot_ns = wall_clock_ns();
  if (h.magic != kCountersMagic) {
    return absl::DataLossError(
        absl::StrFormat("%s: bad magic (not a pollux counters file, or still being created)", path));
  }
  if (h.version != kCountersVersion) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: counters file version %u, this reader understands version %u (written by a %s pollux build: use "
        "that build's pollux-stat)",
        path, h.version, kCountersVersion, h.version < kCountersVersion ? "older" : "newer"));
  }
  const std::uint64_t slots_end = kHeaderRegion + 2 * kSlot * static_cast<std::uint64_t>(h.capacity);
  if (h.header_size != kHeaderRegion || h.label_size != kSlot || h.value_size != kSlot || slots_end > len) {
    return absl::DataLossError(absl::StrFormat("%s: inconsistent layout sizes", path));
  }
  out.pid = h.pid;
  out.alive = process_alive_since_boot(h.pid, h.pid_start, h.boot_id);
  out.start_ns = h.start_ns;
  out.name.assign(h.name, strnlen(h.name, sizeof h.name));
  const std::uint32_t n = std::min(h.allocated, h.capacity);
  for (std::uint32_t i = 0; i < n; ++i) {
    CounterLabel label;
    std::memcpy(&label, base + kHeaderRegion + kSlot * i, sizeof label);
    std::uint64_t value;
    std::memcpy(&value, base + kHeaderRegion + kSlot * h.capacity + kSlot * i, sizeof value);
    const auto kind = label.kind <= static_cast<std::uint16_t>(CounterKind::kHistogram)
                          ? static_cast<CounterKind>(label.kind)
                          : CounterKind::kOther;
    out.counters.push_back({std::string(label.scope, strnlen(label.scope, sizeof label.scope)),
                            std::string(label.name, strnlen(label.name, sizeof label.name)), label.stream_id, value,
                            kind, label.owner});
  }
  // The error log: its own magic and version, inside the file (a bad one leaves the counters).
  if (h.error_log_offset < slots_end || h.error_log_offset > len || h.error_log_size > len - h.error_log_offset ||
      h.error_log_offset % 8 != 0) {
    out.error_log_status = absl::DataLossError(
        absl::StrFormat("%s: error log region [%u, +%u) is not inside the file (%u bytes) after the counters", path,
                        h.error_log_offset, h.error_log_size, len));
  } else {
    auto log = decode_error_log(base + h.error_log_offset, h.error_log_size);
    if (log.ok()) {
      out.errors = std::move(*log);
    } else {
      out.error_log_status = absl::Status(log.status().code(), absl::StrCat(path, ": ", log.status().message()));
    }
  }
  return out;
}

absl::StatusOr<int> counters_file_pid(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return open_error(errno, path, "counters file");
  struct stat st;
  struct {
    std::uint64_t magic;
    std::uint32_t version, header_size, label_size, value_size, capacity;
    std::int32_t pid;
  } h{};
  static_assert(sizeof h == offsetof(CountersHeader, start_ns));
  const bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ::pread(fd, &h, sizeof h, 0) == sizeof h;
  ::close(fd);
  if (!ok || h.magic != kCountersMagic || h.pid <= 0) {
    return absl::DataLossError(absl::StrFormat("%s: not a pollux counters file", path));
  }
  return h.pid;
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
