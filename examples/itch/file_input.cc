#include "itch/file_input.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "itch/messages.h"
#include "itch/reader.h"

namespace pollux::itch {
namespace {

static_assert(kLengthPrefixSize + kMaxMessageSize <= 64, "ChunkReader::kCarryRoom holds one record");

absl::Status errno_error(int err, const char* what, const std::string& path) {
  std::string msg = absl::StrCat("itch: ", what, " '", path, "': ", std::strerror(err));
  return err == ENOENT ? absl::NotFoundError(msg) : absl::UnavailableError(msg);
}

const char* file_kind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a file";
}

absl::Status not_regular(const std::string& path, mode_t mode) {
  return absl::InvalidArgumentError(absl::StrCat(
      "itch: '", path, "' is ", file_kind(mode),
      ", not a regular file: ITCH input is read from a regular file (copy a capture or a pipe to disk first)"));
}

}  // namespace

absl::StatusOr<int> open_regular_file(const std::string& path, uint64_t* size) {
  // Refused before the open where possible: opening a FIFO (blocks until a writer comes) or a
  // device (may have side effects) is not something a reader of files should do.
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return errno_error(errno, "cannot open", path);
  if (!S_ISREG(st.st_mode)) return not_regular(path, st.st_mode);
  // The path may have been replaced since: O_NONBLOCK keeps even that open from blocking,
  // and fstat checks what was opened.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return errno_error(errno, "cannot open", path);
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return errno_error(err, "cannot stat", path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return not_regular(path, st.st_mode);
  }
  if (st.st_size == 0) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat("itch: offset 0: empty file '", path, "'"));
  }
  // Reads of a regular file ignore O_NONBLOCK; cleared all the same, so none ever sees EAGAIN.
  (void)::fcntl(fd, F_SETFL, 0);
  *size = static_cast<uint64_t>(st.st_size);
  return fd;
}

absl::StatusOr<ChunkReader> ChunkReader::open(const std::string& path, size_t window) {
  ChunkReader r;
  r.path_ = path;
  absl::StatusOr<int> fd = open_regular_file(path, &r.size_);
  if (!fd.ok()) return fd.status();
  r.fd_ = *fd;
  // One sequential pass (or two): read ahead aggressively, as MADV_SEQUENTIAL does for a map.
  (void)::posix_fadvise(r.fd_, 0, 0, POSIX_FADV_SEQUENTIAL);
  r.cap_ = std::max<size_t>(window, 4096) + kCarryRoom;
  r.buf_ = std::make_unique<uint8_t[]>(r.cap_);
  if (absl::Status s = r.fill(); !s.ok()) return s;
  return r;
}

ChunkReader::ChunkReader(ChunkReader&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      size_(other.size_),
      cap_(other.cap_),
      buf_(std::move(other.buf_)),
      len_(std::exchange(other.len_, 0)),
      offset_(other.offset_) {}

ChunkReader& ChunkReader::operator=(ChunkReader&& other) noexcept {
  if (this != &other) {
    close();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
    cap_ = other.cap_;
    buf_ = std::move(other.buf_);
    len_ = std::exchange(other.len_, 0);
    offset_ = other.offset_;
  }
  return *this;
}

ChunkReader::~ChunkReader() { close(); }

void ChunkReader::close() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

absl::Status ChunkReader::advance(size_t consumed) {
  consumed = std::min(consumed, len_);
  std::memmove(buf_.get(), buf_.get() + consumed, len_ - consumed);
  len_ -= consumed;
  offset_ += consumed;
  return fill();
}

absl::Status ChunkReader::rewind() {
  len_ = 0;
  offset_ = 0;
  return fill();
}

absl::Status ChunkReader::fill() {
  const uint64_t at = offset_ + len_;
  const size_t want = static_cast<size_t>(std::min<uint64_t>(cap_ - len_, size_ - at));
  if (want == 0 && at < size_) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "itch: '%s': ChunkReader::Advance(0) with a full window at offset %d (the window is smaller than a record)",
        path_, offset_));
  }
  size_t got = 0;
  while (got < want) {
    const ssize_t n = ::pread(fd_, buf_.get() + len_ + got, want - got, static_cast<off_t>(at + got));
    if (n > 0) {
      got += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_error(errno, "cannot read", path_);
    // End of file before the size it had at Open: it was truncated (or replaced in place).
    struct stat st;
    const long long now = ::fstat(fd_, &st) == 0 ? static_cast<long long>(st.st_size) : -1;
    len_ += got;
    return absl::DataLossError(absl::StrFormat(
        "%s: input truncated at offset %d: the file has %d bytes now, %d when it was opened (it shrank while being "
        "read)",
        path_, at + got, now, size_));
  }
  len_ += got;
  return absl::OkStatus();
}

}  // namespace pollux::itch
