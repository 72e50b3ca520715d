// Files Pollux shares through runtime.shm_dir (stream segments, counters, the clock
// calibration): who may share them and how they are created and opened without trusting
// whatever another local user left at the path.
//
// Policy (shm.group): without a group, a file is created 0600 and only a regular file owned by
// this process's effective uid, with no group/other write permission, is opened. With
// shm.group = "name", segments are created 0660 with that group, and a file whose group is that
// group may also be owned by another uid and be group-writable (never other-writable). Root gets
// no exemption: a file of another uid is refused unless the group allows it. Symbolic links are
// never followed (O_NOFOLLOW), FIFOs and devices are refused before they are read (O_NONBLOCK).
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pollux::core {

struct FileAccess {
  static constexpr gid_t kNoGroup = static_cast<gid_t>(-1);
  gid_t group = kNoGroup;  // shm.group resolved
  std::string group_name;  // for messages
  // Mode of files that others attach to (segments): 0600, or 0660 with a group.
  mode_t shared_mode() const noexcept { return group == kNoGroup ? 0600 : 0660; }
};

// Resolves shm.group ("" = none). InvalidArgument naming the key when the group does not exist.
absl::StatusOr<FileAccess> resolve_file_access(std::string_view group_name);

// What a file of mode `m` is, with its article ("a FIFO", "a directory", "a socket", ...), for
// an error that refuses a file that is not a regular one.
const char* file_kind(mode_t m);

// Checks an open file's fstat against the policy; the error names `what`, the path, the owner
// uid or the mode, and what to do.
absl::Status check_shared_file(const struct stat& st, const std::string& path, const FileAccess& access,
                               std::string_view what);

// Opens an existing file with O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | `flags` and checks it
// (check_shared_file). NotFound when it does not exist; the caller owns the returned fd.
absl::StatusOr<int> open_shared_file(const std::string& path, int flags, const FileAccess& access,
                                     std::string_view what, struct stat* st);

// Status for a failed open/create of `path` with errno `err`: EMFILE/ENFILE are
// ResourceExhausted naming RLIMIT_NOFILE, ELOOP names the symlink, EACCES/EPERM the owner.
absl::Status open_error(int err, const std::string& path, std::string_view what);

// Reserves `len` bytes of `fd` (posix_fallocate): on tmpfs ftruncate reserves nothing and the
// first touch of a page that does not fit raises SIGBUS. ResourceExhausted names the path, the
// size and the free space of the directory.
absl::Status reserve_file(int fd, std::size_t len, const std::string& path, std::string_view what);

// A file being created in the directory of `path`: unnamed (O_TMPFILE) until publish() gives it
// its final name atomically (rename over any previous file), so a failure or a crash before
// that leaves nothing behind. Falls back to a named, O_EXCL temporary where O_TMPFILE is not
// supported. The destructor closes and removes anything not published.
class NewFile {
 public:
  NewFile() = default;
  NewFile(const NewFile&) = delete;
  NewFile& operator=(const NewFile&) = delete;
  ~NewFile();
  // Creates it with exactly `mode` (umask ignored) and, unless kNoGroup, the group.
  absl::Status create(const std::string& path, mode_t mode, gid_t group, std::string_view what);
  int fd() const noexcept { return fd_; }
  // Renames it to `path` (replacing what is there). The fd stays open; release_fd() takes it.
  absl::Status publish();
  // Gives it its name only if nothing has that name yet (AlreadyExists otherwise).
  absl::Status publish_exclusive();
  int release_fd() noexcept {
    const int f = fd_;
    fd_ = -1;
    return f;
  }

 private:
  absl::Status link_temp(std::string* name);
  std::string path_, tmp_;
  std::string what_;
  int fd_ = -1;
  bool unnamed_ = false;
};

}  // namespace pollux::core
