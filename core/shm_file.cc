#include "core/shm_file.h"

#include <fcntl.h>
#include <grp.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"

namespace pollux::core {
namespace {

std::string dir_of(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string human(unsigned long long bytes) {
  if (bytes >= (1ull << 30)) return absl::StrFormat("%.1f GiB", static_cast<double>(bytes) / (1ull << 30));
  if (bytes >= (1ull << 20)) return absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / (1ull << 20));
  if (bytes >= (1ull << 10)) return absl::StrFormat("%.1f KiB", static_cast<double>(bytes) / (1ull << 10));
  return absl::StrFormat("%u bytes", bytes);
}

std::string random_suffix() {
  std::uint64_t r = 0;
  if (getrandom(&r, sizeof r, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof r)) {
    r = static_cast<std::uint64_t>(getpid()) * 0x9E3779B97F4A7C15ull ^ reinterpret_cast<std::uintptr_t>(&r);
  }
  return absl::StrFormat("%016x", r);
}

// " (owned by uid N, mode 0644)" for an existing path, "" when it cannot be read.
std::string owner_note(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return "";
  return absl::StrFormat(" (%s owned by uid %u, mode %04o)", S_ISREG(st.st_mode) ? "a file" : file_kind(st.st_mode),
                         st.st_uid, st.st_mode & 07777);
}

}  // namespace

const char* file_kind(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISLNK(m)) return "a symbolic link";
  return "a special file";
}

absl::StatusOr<FileAccess> resolve_file_access(std::string_view group_name) {
  FileAccess a;
  if (group_name.empty()) return a;
  const std::string name(group_name);
  std::vector<char> buf(16384);
  group gr;
  group* res = nullptr;
  int e;
  if (std::all_of(name.begin(), name.end(), [](char c) { return absl::ascii_isdigit(c); })) {
    e = getgrgid_r(static_cast<gid_t>(std::strtoul(name.c_str(), nullptr, 10)), &gr, buf.data(), buf.size(), &res);
  } else {
    e = getgrnam_r(name.c_str(), &gr, buf.data(), buf.size(), &res);
  }
  if (e != 0 || res == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "shm.group: no group \"%s\" on this host (getent group %s); set shm.group = \"\" to keep shared-memory "
        "files private to this user",
        name, name));
  }
  a.group = gr.gr_gid;
  a.group_name = name;
  return a;
}

absl::Status check_shared_file(const struct stat& st, const std::string& path, const FileAccess& access,
                               std::string_view what) {
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s %s is %s, not a regular file: refused (remove it; Pollux only maps files it created)", what,
                        path, file_kind(st.st_mode)));
  }
  const uid_t me = geteuid();
  const bool group_ok = access.group != FileAccess::kNoGroup && st.st_gid == access.group;
  if (st.st_uid != me && !group_ok) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "%s %s is owned by uid %u, not by this process's uid %u: refused (another user controls its contents). "
        "Remove it (as uid %u or root) if it is stale, use a private runtime.shm_dir, or share between users with "
        "shm.group (files of that group are accepted)",
        what, path, st.st_uid, me, st.st_uid));
  }
  const mode_t allowed = group_ok ? S_IWGRP : 0;
  const mode_t bad = st.st_mode & (S_IWGRP | S_IWOTH) & ~allowed;
  if (bad != 0) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "%s %s has mode %04o: writable by %s, refused (Pollux creates 0600, or 0660 with shm.group). Remove it, "
        "or chmod go-w it if you trust its contents",
        what, path, st.st_mode & 07777, (bad & S_IWOTH) != 0 ? "every user" : "its group, which is not shm.group"));
  }
  return absl::OkStatus();
}

absl::Status open_error(int err, const std::string& path, std::string_view what) {
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(absl::StrFormat("%s %s does not exist", what, path));
    case EMFILE: {
      rlimit rl{};
      getrlimit(RLIMIT_NOFILE, &rl);
      return absl::ResourceExhaustedError(absl::StrFormat(
          "cannot open %s %s: too many open files (RLIMIT_NOFILE = %u); raise the limit (ulimit -n, LimitNOFILE= "
          "in a systemd unit) or open fewer streams",
          what, path, static_cast<unsigned long long>(rl.rlim_cur)));
    }
    case ENFILE:
      return absl::ResourceExhaustedError(
          absl::StrFormat("cannot open %s %s: the system's file table is full (sysctl fs.file-max)", what, path));
    case ELOOP:
      return absl::PermissionDeniedError(absl::StrFormat(
          "%s %s is a symbolic link: refused (a link in a shared directory could point Pollux at any file); "
          "remove it",
          what, path));
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(
          absl::StrFormat("cannot create %s %s: %s (is %s full?)", what, path, std::strerror(err), dir_of(path)));
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(absl::StrFormat("cannot open %s %s: %s%s (check runtime.shm_dir)", what, path,
                                                         std::strerror(err), owner_note(path)));
    default:
      return absl::InternalError(absl::StrFormat("cannot open %s %s: %s", what, path, std::strerror(err)));
  }
}

absl::StatusOr<int> open_shared_file(const std::string& path, int flags, const FileAccess& access,
                                     std::string_view what, struct stat* st) {
  const int fd = ::open(path.c_str(), flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return open_error(errno, path, what);
  if (::fstat(fd, st) != 0) {
    const int e = errno;
    ::close(fd);
    return absl::InternalError(absl::StrFormat("%s %s: fstat: %s", what, path, std::strerror(e)));
  }
  if (absl::Status s = check_shared_file(*st, path, access, what); !s.ok()) {
    ::close(fd);
    return s;
  }
  return fd;
}

absl::Status reserve_file(int fd, std::size_t len, const std::string& path, std::string_view what) {
  int e;
  do {
    e = posix_fallocate(fd, 0, static_cast<off_t>(len));
  } while (e == EINTR);
  if (e == 0) return absl::OkStatus();
  const std::string dir = dir_of(path);
  struct statvfs vs;
  std::string space;
  if (::statvfs(dir.c_str(), &vs) == 0) {
    space = absl::StrFormat("; %s has %s free of %s", dir,
                            human(static_cast<unsigned long long>(vs.f_bavail) * vs.f_frsize),
                            human(static_cast<unsigned long long>(vs.f_blocks) * vs.f_frsize));
  }
  return absl::ResourceExhaustedError(absl::StrFormat(
      "cannot reserve %u bytes (%s) for %s %s: %s%s. Free space there (stale files of dead processes: "
      "pollux-stat --clean), enlarge the tmpfs (mount -o remount,size=...), or lower the size (shm.log_size)",
      len, human(len), what, path, std::strerror(e), space));
}

// ---- NewFile --------------------------------------------------------------------------------------

NewFile::~NewFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
}

absl::Status NewFile::create(const std::string& path, mode_t mode, gid_t group, std::string_view what) {
  path_ = path;
  what_ = std::string(what);
  const std::string dir = dir_of(path);
  fd_ = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, mode);
  unnamed_ = fd_ >= 0;
  if (fd_ < 0 && errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL) return open_error(errno, path, what);
  for (int attempt = 0; fd_ < 0 && attempt < 4; ++attempt) {
    // No O_TMPFILE on this file system: a named temporary nobody else can have prepared
    // (O_EXCL, O_NOFOLLOW: a planted file or link makes us pick another name).
    tmp_ = absl::StrFormat("%s.%d.%s.tmp", path, getpid(), random_suffix());
    fd_ = ::open(tmp_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd_ < 0) {
      const int e = errno;
      tmp_.clear();
      if (e != EEXIST) return open_error(e, path, what);
    }
  }
  if (fd_ < 0) return absl::InternalError(absl::StrFormat("cannot create a temporary file for %s %s", what, path));
  if (::fchmod(fd_, mode) != 0) {  // exact mode, whatever the umask
    return absl::InternalError(
        absl::StrFormat("cannot set mode %04o on %s %s: %s", mode, what, path, std::strerror(errno)));
  }
  if (group != FileAccess::kNoGroup && ::fchown(fd_, static_cast<uid_t>(-1), group) != 0) {
    return absl::PermissionDeniedError(
        absl::StrFormat("cannot give %s %s to group %u (shm.group): %s; this user must be a member of that group", what,
                        path, group, std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status NewFile::link_temp(std::string* name) {
  for (int attempt = 0; attempt < 4; ++attempt) {
    *name = absl::StrFormat("%s.%d.%s.tmp", path_, getpid(), random_suffix());
    // AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH; /proc/self/fd works for everyone.
    if (::linkat(fd_, "", AT_FDCWD, name->c_str(), AT_EMPTY_PATH) == 0) return absl::OkStatus();
    if (errno == EEXIST) continue;
    const std::string proc = absl::StrFormat("/proc/self/fd/%d", fd_);
    if (::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, name->c_str(), AT_SYMLINK_FOLLOW) == 0) return absl::OkStatus();
    if (errno == EEXIST) continue;
    return open_error(errno, path_, what_);
  }
  return absl::InternalError(absl::StrFormat("cannot name a temporary file for %s %s", what_, path_));
}

absl::Status NewFile::publish() {
  if (unnamed_) {
    if (absl::Status s = link_temp(&tmp_); !s.ok()) {
      tmp_.clear();
      return s;
    }
  }
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int e = errno;
    return absl::PermissionDeniedError(absl::StrFormat(
        "cannot publish %s %s: %s%s; remove the file there if it is stale, or use another runtime.shm_dir", what_,
        path_, std::strerror(e), owner_note(path_)));
  }
  tmp_.clear();
  return absl::OkStatus();
}

absl::Status NewFile::publish_exclusive() {
  if (unnamed_) {
    std::string tmp;
    if (absl::Status s = link_temp(&tmp); !s.ok()) return s;
    tmp_ = tmp;
  }
  const int r = ::link(tmp_.c_str(), path_.c_str());
  const int e = errno;
  ::unlink(tmp_.c_str());
  tmp_.clear();
  if (r == 0) return absl::OkStatus();
  if (e == EEXIST) return absl::AlreadyExistsError(absl::StrFormat("%s %s already exists", what_, path_));
  return open_error(e, path_, what_);
}

}  // namespace pollux::core
