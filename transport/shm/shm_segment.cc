#include "transport/shm/shm_segment.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include "absl/strings/str_format.h"

namespace pollux::transport::shm {

std::string segment_path(const core::Config& cfg, std::uint32_t stream_id) {
  return absl::StrFormat("%s/pollux-%s-stream-%u.log", cfg.runtime.shm_dir, cfg.runtime.name, stream_id);
}

bool process_alive(int pid) { return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM); }

std::uint32_t Segment::header_bytes(std::uint32_t subscriber_slots) {
  const std::size_t raw = sizeof(SegmentHeader) + sizeof(SubscriberSlot) * subscriber_slots;
  return static_cast<std::uint32_t>((raw + 4095) & ~std::size_t{4095});
}

Segment::~Segment() {
  if (header_ != nullptr) munmap(header_, map_len_);
}

void Segment::unlink() {
  if (owner_ && !path_.empty()) {
    // Only remove the file if it is still ours (a new publisher may have replaced it).
    struct stat st;
    if (::stat(path_.c_str(), &st) == 0 && static_cast<std::uint64_t>(st.st_ino) == inode_) ::unlink(path_.c_str());
    owner_ = false;
  }
}

namespace {

absl::Status check_existing(const std::string& path, std::uint32_t stream_id) {
  auto existing = Segment::attach(path, stream_id);
  if (!existing.ok()) return absl::OkStatus();  // absent or unreadable garbage: replace it
  const SegmentHeader* h = (*existing)->header();
  if (h->writer.closed.load(std::memory_order_acquire) == 0 && h->layout.publisher_pid != getpid() &&
      process_alive(h->layout.publisher_pid)) {
    return absl::AlreadyExistsError(absl::StrFormat(
        "stream %u already has a live publisher (pid %d, segment %s); a shm stream has one publisher "
        "process (use several threads in dedicated mode, or another stream id)",
        stream_id, h->layout.publisher_pid, path));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Segment>> Segment::create(const Options& opt) {
  if ((opt.log_size & (opt.log_size - 1)) != 0 || opt.log_size < (64u << 10)) {
    return absl::InvalidArgumentError(absl::StrFormat("shm.log_size must be a power of two >= 64KiB, got %u", opt.log_size));
  }
  if (opt.subscriber_slots == 0 || opt.subscriber_slots > kMaxSubscriberSlots) {
    return absl::InvalidArgumentError(absl::StrFormat("shm.max_subscribers must be 1..%u", kMaxSubscriberSlots));
  }
  if (absl::Status s = check_existing(opt.path, opt.stream_id); !s.ok()) return s;

  std::unique_ptr<Segment> seg(new Segment());
  const std::uint32_t hdr = header_bytes(opt.subscriber_slots);
  seg->map_len_ = hdr + opt.log_size;
  seg->log_size_ = opt.log_size;
  seg->path_ = opt.path;
  const std::string tmp = absl::StrFormat("%s.%d.tmp", opt.path, getpid());
  int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::PermissionDeniedError(absl::StrFormat("cannot create shm segment %s: %s (check runtime.shm_dir)",
                                                       tmp, std::strerror(errno)));
  }
  (void)fchmod(fd, 0600);  // independent of the umask
  if (ftruncate(fd, static_cast<off_t>(seg->map_len_)) != 0) {
    const int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return absl::ResourceExhaustedError(absl::StrFormat("cannot size shm segment %s to %u bytes: %s (is %s full?)",
                                                        tmp, seg->map_len_, std::strerror(e), opt.path));
  }
  void* mem = mmap(nullptr, seg->map_len_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  struct stat st;
  fstat(fd, &st);
  ::close(fd);
  if (mem == MAP_FAILED) {
    ::unlink(tmp.c_str());
    return absl::ResourceExhaustedError(absl::StrFormat("cannot map %s: %s", tmp, std::strerror(errno)));
  }
  seg->inode_ = static_cast<std::uint64_t>(st.st_ino);
  seg->header_ = static_cast<SegmentHeader*>(mem);
  seg->log_ = static_cast<std::byte*>(mem) + hdr;
  seg->owner_ = true;
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
  // Pre-touch the log so the first lap does not fault page by page (MAP_POPULATE did the
  // mapping; writing makes the pages dirty and resident in this process's page tables).
  for (std::uint64_t off = 0; off < opt.log_size; off += 4096) seg->log_[off] = std::byte{0};
  // Release: an attacher that acquire-loads the magic sees the complete layout.
  std::atomic_ref<std::uint64_t>(l.magic).store(kSegmentMagic, std::memory_order_release);
  // Atomically replace any previous segment: its subscribers keep their mapping of the old
  // inode and notice the change (closed flag / dead pid / new inode) on their liveness check.
  if (::rename(tmp.c_str(), opt.path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    return absl::PermissionDeniedError(absl::StrFormat("cannot publish shm segment %s: %s", opt.path, std::strerror(e)));
  }
  return seg;
}

absl::StatusOr<std::unique_ptr<Segment>> Segment::attach(const std::string& path, std::uint32_t expect_stream_id) {
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrFormat("%s: no publisher yet", path));
    return absl::PermissionDeniedError(absl::StrFormat("cannot open shm segment %s: %s", path, std::strerror(errno)));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    return absl::InternalError(absl::StrFormat("%s: fstat: %s", path, std::strerror(errno)));
  }
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
  if (l.magic != kSegmentMagic) {
    return bad(absl::DataLossError(absl::StrFormat(
        "shm segment %s: bad magic 0x%016x (expected 0x%016x): not a pollux segment, or corrupted", path, l.magic,
        kSegmentMagic)));
  }
  if (l.version != kSegmentVersion) {
    return bad(absl::FailedPreconditionError(absl::StrFormat(
        "shm segment %s: layout version %u, this library speaks version %u (publisher and subscriber built from "
        "different pollux versions?)",
        path, l.version, kSegmentVersion)));
  }
  const bool pow2 = l.log_size != 0 && (l.log_size & (l.log_size - 1)) == 0;
  if (l.frame_header_size != core::kFrameHeaderSize || l.frame_alignment != core::kFrameAlignment || !pow2 ||
      l.subscriber_slot_size != sizeof(SubscriberSlot) || l.subscriber_slots == 0 ||
      l.subscriber_slots > kMaxSubscriberSlots || l.header_size != header_bytes(l.subscriber_slots) ||
      l.max_frame != l.log_size / 32 || l.checkpoint_count != kCheckpoints ||
      static_cast<std::uint64_t>(size) != l.header_size + l.log_size) {
    return bad(absl::DataLossError(absl::StrFormat(
        "shm segment %s: inconsistent layout (frame header %u, alignment %u, log %u, header %u, slots %u x %u, file "
        "%u bytes): corrupted or written by an incompatible build",
        path, l.frame_header_size, l.frame_alignment, l.log_size, l.header_size, l.subscriber_slots,
        l.subscriber_slot_size, size)));
  }
  if (l.stream_id != expect_stream_id) {
    return bad(absl::FailedPreconditionError(
        absl::StrFormat("shm segment %s carries stream %u, expected %u", path, l.stream_id, expect_stream_id)));
  }
  void* mem = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (mem == MAP_FAILED) return absl::ResourceExhaustedError(absl::StrFormat("cannot map %s: %s", path, std::strerror(errno)));
  std::unique_ptr<Segment> seg(new Segment());
  seg->header_ = static_cast<SegmentHeader*>(mem);
  seg->log_ = static_cast<std::byte*>(mem) + l.header_size;
  seg->map_len_ = size;
  seg->log_size_ = l.log_size;
  seg->inode_ = static_cast<std::uint64_t>(st.st_ino);
  seg->path_ = path;
  return seg;
}

}  // namespace pollux::transport::shm
