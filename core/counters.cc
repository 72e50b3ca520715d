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
#include "absl/strings/str_format.h"

namespace pollux::core {
namespace {
constexpr std::size_t kHeaderRegion = 4096;
constexpr std::size_t kSlot = 128;

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
    ::unlink(f->path_.c_str());  // a stale file from a dead process with our pid
    int fd = ::open(f->path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
      return absl::PermissionDeniedError(absl::StrFormat(
          "cannot create counters file %s: %s (set runtime.shm_dir to a writable tmpfs, or "
          "runtime.counters = false)",
          f->path_, std::strerror(errno)));
    }
    if (ftruncate(fd, static_cast<off_t>(f->bytes_)) != 0) {
      const int e = errno;
      ::close(fd);
      ::unlink(f->path_.c_str());
      return absl::ResourceExhaustedError(
          absl::StrFormat("cannot size counters file %s: %s", f->path_, std::strerror(e)));
    }
    mem = mmap(nullptr, f->bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (mem == MAP_FAILED) {
      ::unlink(f->path_.c_str());
      return absl::ResourceExhaustedError(absl::StrFormat("cannot map %s: %s", f->path_, std::strerror(errno)));
    }
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
  return f;
}

CountersFile::~CountersFile() {
  if (base_ != nullptr) munmap(base_, bytes_);
  if (!path_.empty()) ::unlink(path_.c_str());
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
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrFormat("%s: %s", path, std::strerror(errno)));
  struct stat st;
  if (fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) < kHeaderRegion) {
    ::close(fd);
    return absl::DataLossError(absl::StrFormat("%s: too small to be a counters file", path));
  }
  const std::size_t len = static_cast<std::size_t>(st.st_size);
  void* mem = mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (mem == MAP_FAILED) return absl::InternalError(absl::StrFormat("%s: mmap: %s", path, std::strerror(errno)));
  auto* base = static_cast<const std::byte*>(mem);
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
  if (!bad.ok()) {
    munmap(mem, len);
    return bad;
  }
  out.pid = h->pid;
  out.alive = kill(h->pid, 0) == 0 || errno == EPERM;
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
  munmap(mem, len);
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
