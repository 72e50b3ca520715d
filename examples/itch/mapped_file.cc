#include "itch/mapped_file.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "itch/file_input.h"

namespace pollux::itch {
namespace {

absl::Status errno_error(int err, const char* what, const std::string& path) {
  std::string msg = absl::StrCat("itch: ", what, " '", path, "': ", std::strerror(err));
  return err == ENOENT ? absl::NotFoundError(msg) : absl::UnavailableError(msg);
}

}  // namespace

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    unmap();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() { unmap(); }

void MappedFile::unmap() noexcept {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

absl::StatusOr<MappedFile> MappedFile::open(const std::string& path) {
  uint64_t size64 = 0;
  absl::StatusOr<int> fd = open_regular_file(path, &size64);
  if (!fd.ok()) return fd.status();
  const size_t size = static_cast<size_t>(size64);
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, *fd, 0);
  const int err = errno;
  ::close(*fd);  // the mapping keeps its own reference to the file
  if (p == MAP_FAILED) return errno_error(err, "cannot mmap", path);
  ::madvise(p, size, MADV_SEQUENTIAL);
  return MappedFile(static_cast<const uint8_t*>(p), size);
}

}  // namespace pollux::itch
