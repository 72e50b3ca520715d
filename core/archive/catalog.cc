#include "core/archive/catalog.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "core/archive/crc32c.h"
#include "core/archive/io_error.h"

namespace pollux::core::archive {
namespace {

constexpr char kCatalogMagic[8] = {'P', 'L', 'X', 'C', 'A', 'T', '0', '1'};
constexpr std::uint32_t kCatalogVersion = 1;
constexpr std::uint32_t kMaxRecordings = 1u << 20;

struct FileHeader {
  char magic[8];
  std::uint32_t version;
  std::uint32_t count;
  std::uint32_t entry_size;
  std::uint32_t crc;  // crc32c of next_id and the entries
  std::uint64_t next_id;
};
static_assert(sizeof(FileHeader) == 32);

struct Entry {
  std::uint64_t id;
  std::uint32_t stream_id;
  std::uint32_t state;
  std::uint64_t segment_size;
  std::uint32_t first_segment;
  std::uint32_t last_segment;
  std::uint64_t first_sequence, last_sequence;
  std::int64_t first_time_ns, last_time_ns;
  std::uint64_t frames, gaps, bytes;
  std::int64_t started_ns, stopped_ns;
  char topic[128];
  char error[256];
};
static_assert(std::is_trivially_copyable_v<Entry>);
static_assert(sizeof(Entry) % 8 == 0);

void copy_text(char* dst, std::size_t cap, const std::string& src) {
  std::memset(dst, 0, cap);
  std::memcpy(dst, src.data(), std::min(src.size(), cap - 1));
}

std::string read_text(const char* src, std::size_t cap) { return std::string(src, strnlen(src, cap)); }

bool valid_state(std::uint32_t s) { return s >= 1 && s <= 3; }

}  // namespace

const char* recording_state_name(RecordingState s) {
  switch (s) {
    case RecordingState::kRecording:
      return "recording";
    case RecordingState::kStopped:
      return "stopped";
    case RecordingState::kFailed:
      return "failed";
  }
  return "?";
}

absl::StatusOr<Catalog> Catalog::load(const std::string& dir) {
  const std::string p = path(dir);
  Catalog c;
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) {
      struct stat st {};
      if (::stat(dir.c_str(), &st) != 0) return io_error(errno, absl::StrCat("recording directory ", dir));
      if (!S_ISDIR(st.st_mode)) return absl::FailedPreconditionError(absl::StrCat(dir, ": not a directory"));
      return c;
    }
    return io_error(errno, absl::StrCat("recording catalog ", p));
  }
  struct stat st {};
  FileHeader h{};
  std::string what;
  std::vector<Entry> entries;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    what = "not a regular file";
  } else if (static_cast<std::uint64_t>(st.st_size) < sizeof h ||
             ::pread(fd, &h, sizeof h, 0) != static_cast<ssize_t>(sizeof h)) {
    what = "truncated (shorter than its header)";
  } else if (std::memcmp(h.magic, kCatalogMagic, sizeof h.magic) != 0) {
    what = "not a Pollux recording catalog (bad magic)";
  } else if (h.version != kCatalogVersion || h.entry_size != sizeof(Entry)) {
    what = absl::StrCat("version ", h.version, " (entries of ", h.entry_size, " bytes); this build reads version ",
                        kCatalogVersion);
  } else if (h.count > kMaxRecordings ||
             static_cast<std::uint64_t>(st.st_size) != sizeof h + static_cast<std::uint64_t>(h.count) * sizeof(Entry)) {
    what = absl::StrCat("size ", st.st_size, " does not match its ", h.count, " entries");
  } else {
    entries.resize(h.count);
    const std::size_t bytes = entries.size() * sizeof(Entry);
    if (::pread(fd, entries.data(), bytes, sizeof h) != static_cast<ssize_t>(bytes)) {
      what = "truncated";
    } else if (crc32c(entries.data(), bytes, crc32c(&h.next_id, sizeof h.next_id)) != h.crc) {
      what = "crc mismatch (damaged)";
    }
  }
  ::close(fd);
  if (!what.empty()) {
    return absl::DataLossError(absl::StrCat("recording catalog ", p, ": ", what,
                                            ". The segment files beside it are separate and keep their records, each "
                                            "with its checksum, but Pollux does not rebuild a catalog from them: "
                                            "restore the catalog from a copy, or move the directory aside and record "
                                            "into a new one"));
  }
  c.next_id_ = h.next_id;
  for (const Entry& e : entries) {
    if (!valid_state(e.state) || e.id == 0 || e.id >= h.next_id || e.last_segment < e.first_segment) {
      return absl::DataLossError(absl::StrCat("recording catalog ", p, ": entry ", e.id, " is inconsistent"));
    }
    RecordingInfo r;
    r.id = e.id;
    r.stream_id = e.stream_id;
    r.state = static_cast<RecordingState>(e.state);
    r.topic = read_text(e.topic, sizeof e.topic);
    r.segment_size = e.segment_size;
    r.first_segment = e.first_segment;
    r.last_segment = e.last_segment;
    r.first_sequence = e.first_sequence;
    r.last_sequence = e.last_sequence;
    r.first_time_ns = e.first_time_ns;
    r.last_time_ns = e.last_time_ns;
    r.frames = e.frames;
    r.gaps = e.gaps;
    r.bytes = e.bytes;
    r.started_ns = e.started_ns;
    r.stopped_ns = e.stopped_ns;
    r.error = read_text(e.error, sizeof e.error);
    c.recordings_.push_back(std::move(r));
  }
  return c;
}

absl::Status Catalog::write(const std::string& dir) const {
  std::vector<Entry> entries(recordings_.size());
  for (std::size_t i = 0; i < recordings_.size(); ++i) {
    const RecordingInfo& r = recordings_[i];
    Entry& e = entries[i];
    std::memset(&e, 0, sizeof e);
    e.id = r.id;
    e.stream_id = r.stream_id;
    e.state = static_cast<std::uint32_t>(r.state);
    e.segment_size = r.segment_size;
    e.first_segment = r.first_segment;
    e.last_segment = r.last_segment;
    e.first_sequence = r.first_sequence;
    e.last_sequence = r.last_sequence;
    e.first_time_ns = r.first_time_ns;
    e.last_time_ns = r.last_time_ns;
    e.frames = r.frames;
    e.gaps = r.gaps;
    e.bytes = r.bytes;
    e.started_ns = r.started_ns;
    e.stopped_ns = r.stopped_ns;
    copy_text(e.topic, sizeof e.topic, r.topic);
    copy_text(e.error, sizeof e.error, r.error);
  }
  FileHeader h{};
  std::memcpy(h.magic, kCatalogMagic, sizeof h.magic);
  h.version = kCatalogVersion;
  h.count = static_cast<std::uint32_t>(entries.size());
  h.entry_size = sizeof(Entry);
  h.next_id = next_id_;
  const std::size_t bytes = entries.size() * sizeof(Entry);
  h.crc = crc32c(entries.data(), bytes, crc32c(&h.next_id, sizeof h.next_id));
  const std::string p = path(dir);
  const std::string tmp = p + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0640);
  if (fd < 0) return io_error(errno, absl::StrCat("recording catalog ", tmp));
  bool ok = ::pwrite(fd, &h, sizeof h, 0) == static_cast<ssize_t>(sizeof h);
  if (ok && bytes > 0) ok = ::pwrite(fd, entries.data(), bytes, sizeof h) == static_cast<ssize_t>(bytes);
  if (ok) ok = ::fsync(fd) == 0;
  const int e = errno;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), p.c_str()) != 0) {
    const int err = ok ? errno : e;
    ::unlink(tmp.c_str());
    return io_error(err, absl::StrCat("recording catalog ", p, ": writing"));
  }
  // The rename itself made durable.
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
  return absl::OkStatus();
}

absl::StatusOr<Catalog> Catalog::update(const std::string& dir, const std::function<absl::Status(Catalog&)>& change) {
  const std::string lock_path = dir + "/catalog.lock";
  const int lfd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0640);
  if (lfd < 0) {
    return io_error(errno, absl::StrCat("recording directory ", dir, ": catalog lock ", lock_path,
                                        errno == EACCES || errno == EROFS ? " (is the directory writable?)" : ""));
  }
  while (::flock(lfd, LOCK_EX) != 0) {
    if (errno != EINTR) {
      const int e = errno;
      ::close(lfd);
      return io_error(e, absl::StrCat("recording catalog lock ", lock_path));
    }
  }
  absl::StatusOr<Catalog> c = load(dir);
  absl::Status s = c.ok() ? change(*c) : c.status();
  if (s.ok()) s = c->write(dir);
  ::close(lfd);  // releases the lock
  if (!s.ok()) return s;
  return c;
}

RecordingInfo* Catalog::find(std::uint64_t id) noexcept {
  for (RecordingInfo& r : recordings_) {
    if (r.id == id) return &r;
  }
  return nullptr;
}

const RecordingInfo* Catalog::find(std::uint64_t id) const noexcept {
  for (const RecordingInfo& r : recordings_) {
    if (r.id == id) return &r;
  }
  return nullptr;
}

RecordingInfo& Catalog::add(std::uint32_t stream_id, const std::string& topic, std::uint64_t segment_size) {
  RecordingInfo r;
  r.id = next_id_++;
  r.stream_id = stream_id;
  r.topic = topic;
  r.segment_size = segment_size;
  recordings_.push_back(std::move(r));
  return recordings_.back();
}

bool Catalog::remove(std::uint64_t id) noexcept {
  for (auto it = recordings_.begin(); it != recordings_.end(); ++it) {
    if (it->id == id) {
      recordings_.erase(it);
      return true;
    }
  }
  return false;
}

}  // namespace pollux::core::archive
