#include "transport/shm/shm_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/mapping_guard.h"
#include "core/wakeup.h"
#include "transport/shm/shm_config.h"

namespace pollux::transport::shm {

std::string segment_path(const core::Config& cfg, std::uint32_t stream_id) {
  return absl::StrFormat("%s/pollux-%s-stream-%u.log", cfg.runtime.shm_dir, cfg.runtime.name, stream_id);
}

bool publisher_alive(const SegmentLayout& l) noexcept {
  return core::process_alive_since_boot(l.publisher_pid, l.publisher_start, l.boot_id);
}

std::uint32_t Segment::header_bytes(std::uint32_t subscriber_slots) {
  const std::size_t raw = sizeof(SegmentHeader) + sizeof(SubscriberSlot) * subscriber_slots;
  return static_cast<std::uint32_t>((raw + 4095) & ~std::size_t{4095});
}

Segment::~Segment() {
  if (guard_ >= 0) core::unguard_mapping(guard_);
  if (header_ != nullptr) munmap(header_, map_len_);
  if (fd_ >= 0) ::close(fd_);
}

void Segment::map_guard() noexcept {
  guard_ = core::guard_mapping(header_, map_len_, &header_->writer.tail, kPoisonTail);
}

bool Segment::truncated() const noexcept {
  if (guard_ >= 0 && (core::mapping_faults(guard_) != 0 || core::mapping_neutralized(guard_))) return true;
  struct stat st;
  return fd_ >= 0 && ::fstat(fd_, &st) == 0 && static_cast<std::uint64_t>(st.st_size) < map_len_;
}

void Segment::neutralize() noexcept {
  if (guard_ >= 0 && core::neutralize_mapping(guard_)) return;
  if (guard_ >= 0 && core::mapping_neutralized(guard_)) return;
  // Not guarded (table full): replace it here the same way.
  if (mmap(header_, map_len_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED) {
    header_->writer.tail.store(kPoisonTail, std::memory_order_relaxed);
  }
}

void Segment::release_file() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Segment::unlink() {
  if (owner_ && !path_.empty()) {
    // Only remove the file if it is still ours (a new publisher may have replaced it).
    struct stat st;
    if (::lstat(path_.c_str(), &st) == 0 && static_cast<std::uint64_t>(st.st_ino) == inode_) ::unlink(path_.c_str());
    owner_ = false;
  }
}

namespace {

bool ours(const struct stat& st, const core::FileAccess& access) {
  return st.st_uid == geteuid() || (access.group != core::FileAccess::kNoGroup && st.st_gid == access.group);
}

// May a new publisher replace whatever is at opt.path?
absl::Status check_existing(const Segment::Options& opt) {
  struct stat lst;
  if (::lstat(opt.path.c_str(), &lst) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return core::open_error(errno, opt.path, "shm segment");
  }
  auto existing = Segment::attach(opt.path, opt.stream_id, opt.access);
  if (existing.ok()) {
    const SegmentLayout& l = (*existing)->layout();
    const SegmentHeader* h = (*existing)->header();
    if (h->writer.closed.load(std::memory_order_acquire) == 0 && l.publisher_pid != getpid() && publisher_alive(l)) {
      return absl::AlreadyExistsError(absl::StrFormat(
          "stream %u already has a live publisher (pid %d, segment %s, owned by uid %u); a shm stream has one "
          "publisher process (use several threads in dedicated mode, or another stream id). If pid %d is not a "
          "pollux publisher of this stream, remove %s",
          opt.stream_id, l.publisher_pid, opt.path, lst.st_uid, l.publisher_pid, opt.path));
    }
    return absl::OkStatus();  // closed, or its publisher is gone (a reused pid does not count)
  }
  // Too many open files and the like: creating would fail the same way.
  if (absl::IsResourceExhausted(existing.status())) return existing.status();
  // Garbage, another layout version, a link, a file others may write: replace it if it is ours
  // (rename replaces the name, never follows it). Another user's file is theirs to remove.
  if (ours(lst, opt.access)) return absl::OkStatus();
  return existing.status();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Segment>> Segment::create(const Options& opt) {
  if ((opt.log_size & (opt.log_size - 1)) != 0 || opt.log_size < kMinLogSize || opt.log_size > kMaxLogSize) {
    return absl::InvalidArgumentError(
        absl::StrFormat("shm.log_size must be a power of two in 64KiB..4GiB, got %u", opt.log_size));
  }
  if (opt.subscriber_slots == 0 || opt.subscriber_slots > kMaxSubscriberSlots) {
    return absl::InvalidArgumentError(absl::StrFormat("shm.max_subscribers must be 1..%u", kMaxSubscriberSlots));
  }
  if (absl::Status s = check_existing(opt); !s.ok()) return s;

  std::unique_ptr<Segment> seg(new Segment());
  const std::uint32_t hdr = header_bytes(opt.subscriber_slots);
  seg->map_len_ = hdr + opt.log_size;
  seg->log_size_ = opt.log_size;
  seg->path_ = opt.path;
  // Unnamed until complete: a failure (or a crash) below leaves no file behind.
  core::NewFile file;
  if (absl::Status s = file.create(opt.path, opt.access.shared_mode(), opt.access.group, "shm segment"); !s.ok()) {
    return s;
  }
  // tmpfs allocates pages on first touch: without a reservation a full /dev/shm raises SIGBUS
  // in the pre-touch below (or later in the data path) instead of failing here.
  if (absl::Status s = core::reserve_file(file.fd(), seg->map_len_, opt.path, "shm segment"); !s.ok()) return s;
  void* mem = mmap(nullptr, seg->map_len_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, file.fd(), 0);
  if (mem == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("cannot map shm segment %s (%u bytes): %s", opt.path, seg->map_len_, std::strerror(errno)));
  }
  seg->header_ = static_cast<SegmentHeader*>(mem);
  struct stat st;
  if (::fstat(file.fd(), &st) != 0) {
    return absl::InternalError(absl::StrFormat("%s: fstat: %s", opt.path, std::strerror(errno)));
  }
  // A file system that rounds sizes (hugetlbfs grows the file to whole huge pages when it is
  // mapped) leaves a file no reader accepts - its size is part of the layout they check: say so
  // here, to the side that chose the directory, rather than let every subscriber fail to attach.
  if (static_cast<std::uint64_t>(st.st_size) != seg->map_len_) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "shm segment %s: its file system made the file %u bytes, not %u (hugetlbfs rounds sizes up to its "
        "page size), and subscribers would reject it; set runtime.shm_dir to a tmpfs such as /dev/shm",
        opt.path, static_cast<std::uint64_t>(st.st_size), seg->map_len_));
  }
  seg->log_ = static_cast<std::byte*>(mem) + hdr;
  seg->map_guard();
  seg->inode_ = static_cast<std::uint64_t>(st.st_ino);
  // The file is fresh (zero-filled); fill the layout, magic last.
  SegmentLayout& l = seg->header_->layout;
  l.version = kSegmentVersion;
  l.header_size = hdr;
  l.log_size = opt.log_size;
  l.frame_header_size = core::kFrameHeaderSize;
  l.frame_alignment = core::kFrameAlignment;
  l.max_frame = static_cast<std::uint32_t>(opt.log_size / 32);
  l.subscriber_slots = opt.subscriber_slots;
  l.subscriber_slot_size = sizeof(SubscriberSlot);
  l.stream_id = opt.stream_id;
  l.session_id = opt.session_id;
  l.publisher_pid = getpid();
  l.flow_control = static_cast<std::uint32_t>(opt.flow_control);
  l.checkpoint_count = kCheckpoints;
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  l.created_ns = ts.tv_sec * 1'000'000'000ll + ts.tv_nsec;
  l.publisher_start = self_start_time();
  l.boot_id = boot_id_hash();
  // The writer's half of interrupt mode (shm_log.h, LogWriter::publish_tail): registered for the
  // global expedited membarrier, this process lets sleepers pay for the store->load barrier;
  // otherwise its writer fences after every tail store. Fixed for the segment's lifetime.
  (void)core::init_membarrier();
  l.wake_flags = core::global_membarrier_registered() ? kWakeWriterMembarrier : 0u;
  // Pre-touch the log so the first lap does not fault page by page (MAP_POPULATE did the
  // mapping; writing makes the pages dirty and resident in this process's page tables).
  for (std::uint64_t off = 0; off < opt.log_size; off += 4096) seg->log_[off] = std::byte{0};
  seg->layout_ = l;
  seg->layout_.magic = kSegmentMagic;
  // Release: an attacher that acquire-loads the magic sees the complete layout.
  std::atomic_ref<std::uint64_t>(l.magic).store(kSegmentMagic, std::memory_order_release);
  // Atomically replace any previous segment: its subscribers keep their mapping of the old
  // inode and notice the change (closed flag / dead pid / new inode) on their liveness check.
  if (absl::Status s = file.publish(); !s.ok()) return s;
  seg->fd_ = file.release_fd();
  seg->owner_ = true;
  return seg;
}

absl::Status validate_layout(const SegmentLayout& l, std::size_t size, const std::string& path) {
  if (l.magic != kSegmentMagic) {
    return absl::DataLossError(
        absl::StrFormat("shm segment %s: bad magic 0x%016x (expected 0x%016x): not a pollux segment, or corrupted",
                        path, l.magic, kSegmentMagic));
  }
  if (l.version != kSegmentVersion) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "shm segment %s: layout version %u, this library speaks version %u (publisher and subscriber built from "
        "different pollux versions?)",
        path, l.version, kSegmentVersion));
  }
  const bool pow2 = l.log_size != 0 && (l.log_size & (l.log_size - 1)) == 0;
  if (l.frame_header_size != core::kFrameHeaderSize || l.frame_alignment != core::kFrameAlignment || !pow2 ||
      l.log_size < kMinLogSize || l.log_size > kMaxLogSize || l.subscriber_slot_size != sizeof(SubscriberSlot) ||
      l.subscriber_slots == 0 || l.subscriber_slots > kMaxSubscriberSlots ||
      l.header_size != Segment::header_bytes(l.subscriber_slots) || l.max_frame != l.log_size / 32 ||
      l.checkpoint_count != kCheckpoints ||
      l.flow_control > static_cast<std::uint32_t>(shm::FlowControl::kBackpressure) || l.publisher_pid <= 0 ||
      static_cast<std::uint64_t>(size) != l.header_size + l.log_size) {
    return absl::DataLossError(absl::StrFormat(
        "shm segment %s: inconsistent layout (frame header %u, alignment %u, log %u, header %u, slots %u x %u, flow "
        "control %u, pid %d, file %u bytes): corrupted or written by an incompatible build",
        path, l.frame_header_size, l.frame_alignment, l.log_size, l.header_size, l.subscriber_slots,
        l.subscriber_slot_size, l.flow_control, l.publisher_pid, size));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Segment>> Segment::attach(const std::string& path, std::uint32_t expect_stream_id,
                                                         const core::FileAccess& access) {
  struct stat st;
  auto opened = core::open_shared_file(path, O_RDWR, access, "shm segment", &st);
  if (!opened.ok()) {
    if (absl::IsNotFound(opened.status())) return absl::NotFoundError(absl::StrFormat("%s: no publisher yet", path));
    return opened.status();
  }
  const int fd = *opened;
  const std::size_t size = static_cast<std::size_t>(st.st_size);
  auto bad = [&](absl::Status s) {
    ::close(fd);
    return s;
  };
  if (size < sizeof(SegmentHeader)) {
    return bad(absl::DataLossError(absl::StrFormat(
        "shm segment %s is %u bytes, smaller than a segment header (%u): not a pollux segment or truncated", path, size,
        sizeof(SegmentHeader))));
  }
  SegmentLayout l;
  if (pread(fd, &l, sizeof l, 0) != static_cast<ssize_t>(sizeof l)) {
    return bad(absl::DataLossError(absl::StrFormat("%s: cannot read the segment header", path)));
  }
  if (absl::Status s = validate_layout(l, size, path); !s.ok()) return bad(s);
  if (l.stream_id != expect_stream_id) {
    return bad(absl::FailedPreconditionError(
        absl::StrFormat("shm segment %s carries stream %u, expected %u", path, l.stream_id, expect_stream_id)));
  }
  void* mem = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (mem == MAP_FAILED) {
    return bad(absl::ResourceExhaustedError(absl::StrFormat("cannot map %s: %s", path, std::strerror(errno))));
  }
  std::unique_ptr<Segment> seg(new Segment());
  seg->header_ = static_cast<SegmentHeader*>(mem);
  seg->log_ = static_cast<std::byte*>(mem) + l.header_size;
  seg->map_len_ = size;
  seg->log_size_ = l.log_size;
  seg->inode_ = static_cast<std::uint64_t>(st.st_ino);
  seg->layout_ = l;
  seg->path_ = path;
  seg->fd_ = fd;
  // Truncated between fstat and here: the guard turns the faults into zeros, truncated() says so.
  seg->map_guard();
  return seg;
}

absl::StatusOr<SegmentStatus> read_segment_status(const std::string& path) {
  // A diagnostic read of a file anyone may have left: no link followed, no FIFO opened for long,
  // a private copy of the header (never a mapping: no SIGBUS if it is truncated meanwhile).
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return core::open_error(errno, path, "shm segment");
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::FailedPreconditionError(absl::StrFormat("%s: not a regular file", path));
  }
  std::vector<std::uint64_t> copy(Segment::header_bytes(kMaxSubscriberSlots) / 8);
  const ssize_t n = ::pread(fd, copy.data(), copy.size() * 8, 0);
  ::close(fd);
  auto* base = reinterpret_cast<const std::byte*>(copy.data());
  if (n < static_cast<ssize_t>(sizeof(SegmentHeader))) {
    return absl::DataLossError(absl::StrFormat("shm segment %s: shorter than a segment header", path));
  }
  SegmentStatus out;
  out.path = path;
  out.inode = static_cast<std::uint64_t>(st.st_ino);
  std::memcpy(&out.layout, base, sizeof out.layout);
  if (absl::Status s = validate_layout(out.layout, static_cast<std::size_t>(st.st_size), path); !s.ok()) return s;
  if (static_cast<std::size_t>(n) < out.layout.header_size) {
    return absl::DataLossError(absl::StrFormat("shm segment %s: header cut short", path));
  }
  // WriterState and the slots as plain values from the copy (the offsets are static_asserted).
  struct RawWriter {
    std::uint64_t tail;
    std::uint32_t closed, subscribers;
    std::int64_t heartbeat_ns;
    std::uint64_t next_sequence;
  } w;
  std::memcpy(&w, base + offsetof(SegmentHeader, writer), sizeof w);
  out.tail = w.tail;
  out.closed = w.closed != 0;
  out.attached = w.subscribers;
  out.next_sequence = w.next_sequence;
  out.publisher_alive = publisher_alive(out.layout);
  for (std::uint32_t i = 0; i < out.layout.subscriber_slots; ++i) {
    struct RawSlot {
      std::uint32_t state;
      std::int32_t pid;
      std::uint64_t position;
      std::int64_t last_progress_ns;
      std::uint64_t subscriber_id;
      std::uint64_t start;
    } sl;
    std::memcpy(&sl, base + sizeof(SegmentHeader) + std::size_t{i} * sizeof(SubscriberSlot), sizeof sl);
    if (sl.state == kSlotFree) continue;
    SegmentStatus::Subscriber sub;
    sub.slot = i;
    sub.state = sl.state;
    sub.pid = sl.pid;
    sub.position = sl.position;
    sub.alive = sl.state == kSlotActive && process_alive(sl.pid, sl.start);
    out.subscribers.push_back(sub);
  }
  return out;
}

std::vector<std::string> list_segment_files(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string_view n(e->d_name);
      if (n.starts_with("pollux-") && n.ends_with(".log") && n.find("-stream-") != std::string_view::npos) {
        out.push_back(dir + "/" + std::string(n));
      }
    }
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

absl::StatusOr<bool> remove_if_abandoned(const std::string& path) {
  auto st = read_segment_status(path);
  if (!st.ok()) return st.status();
  if (!st->closed && st->publisher_alive) return false;
  for (const auto& s : st->subscribers) {
    if (s.alive) return false;  // a live subscriber still maps it (it detaches on its own)
  }
  // Only the file we examined: a new publisher may have replaced it since (rename over it).
  struct stat now;
  if (::lstat(path.c_str(), &now) != 0 || static_cast<std::uint64_t>(now.st_ino) != st->inode) return false;
  if (::unlink(path.c_str()) != 0) return core::open_error(errno, path, "shm segment");
  return true;
}

}  // namespace pollux::transport::shm
