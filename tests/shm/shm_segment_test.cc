#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include <gtest/gtest.h>

#include "absl/strings/str_format.h"

#include "tests/shm/test_util.h"
#include "transport/shm/shm_segment.h"

namespace pollux::transport::shm {
namespace {

class SegmentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    opt.path = "/dev/shm/pollux-" + pollux::testing::unique_name("segtest") + ".log";
    opt.stream_id = 9;
    opt.session_id = 77;
    opt.log_size = 64 << 10;
    opt.subscriber_slots = 4;
  }
  void TearDown() override { ::unlink(opt.path.c_str()); }

  // A child process that creates the segment (a live publisher) and waits until killed; its
  // pid once the segment exists.
  pid_t publisher_child() {
    int ready[2];
    EXPECT_EQ(pipe(ready), 0);
    const pid_t child = fork();
    if (child == 0) {
      auto s = Segment::create(opt);
      char c = s.ok() ? 'y' : 'n';
      (void)!write(ready[1], &c, 1);
      for (;;) pause();
    }
    char c = 0;
    EXPECT_EQ(read(ready[0], &c, 1), 1);
    EXPECT_EQ(c, 'y');
    close(ready[0]);
    close(ready[1]);
    return child;
  }

  // Creates a valid segment file owned by a process that has exited (so it is stale).
  void write_stale_copy(const std::function<void(std::byte*)>& corrupt) {
    auto s = Segment::create(opt);
    ASSERT_TRUE(s.ok()) << s.status();
    std::ifstream in(opt.path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    s->reset();  // no unlink: only unlink() removes the file
    corrupt(reinterpret_cast<std::byte*>(bytes.data()));
    std::ofstream(opt.path, std::ios::binary | std::ios::trunc)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }

  std::string attach_error() {
    auto a = Segment::attach(opt.path, opt.stream_id);
    EXPECT_FALSE(a.ok()) << a.status();
    return a.ok() ? "" : std::string(a.status().message());
  }

  Segment::Options opt;
};

TEST_F(SegmentTest, CreatesMode0600AndAttachesWithValidation) {
  ::umask(0);
  auto s = Segment::create(opt);
  ASSERT_TRUE(s.ok()) << s.status();
  struct stat st;
  ASSERT_EQ(::stat(opt.path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto a = Segment::attach(opt.path, 9);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ((*a)->header()->layout.session_id, 77u);
  EXPECT_EQ((*a)->log_size(), 64u << 10);
  EXPECT_EQ((*a)->inode(), (*s)->inode());
}

TEST_F(SegmentTest, MissingSegmentIsNotFound) {
  auto a = Segment::attach(opt.path, 9);
  ASSERT_FALSE(a.ok()) << a.status();
  EXPECT_EQ(a.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SegmentTest, RejectsBadMagic) {
  write_stale_copy([](std::byte* b) { b[0] = std::byte{'X'}; });
  const std::string e = attach_error();
  EXPECT_NE(e.find("bad magic"), std::string::npos) << e;
  EXPECT_NE(e.find(opt.path), std::string::npos) << e;
}

TEST_F(SegmentTest, RejectsWrongVersion) {
  write_stale_copy([](std::byte* b) {
    std::uint32_t v = kSegmentVersion + 1;
    std::memcpy(b + offsetof(SegmentLayout, version), &v, 4);
  });
  auto a = Segment::attach(opt.path, opt.stream_id);
  ASSERT_FALSE(a.ok()) << a.status();
  EXPECT_EQ(a.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(a.status().message().find(absl::StrFormat("layout version %u, this library speaks version %u",
                                                      kSegmentVersion + 1, kSegmentVersion)),
            absl::string_view::npos)
      << a.status();
}

TEST_F(SegmentTest, RejectsInconsistentLayout) {
  write_stale_copy([](std::byte* b) {
    std::uint32_t v = 64;  // frame header size
    std::memcpy(b + offsetof(SegmentLayout, frame_header_size), &v, 4);
  });
  EXPECT_NE(attach_error().find("inconsistent layout"), std::string::npos);
}

TEST_F(SegmentTest, RejectsTruncatedFile) {
  auto s = Segment::create(opt);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(::truncate(opt.path.c_str(), 8192), 0);
  EXPECT_NE(attach_error().find("inconsistent layout"), std::string::npos);
  ASSERT_EQ(::truncate(opt.path.c_str(), 100), 0);
  EXPECT_NE(attach_error().find("smaller than a segment header"), std::string::npos);
}

TEST_F(SegmentTest, RejectsWrongStream) {
  auto s = Segment::create(opt);
  ASSERT_TRUE(s.ok()) << s.status();
  auto a = Segment::attach(opt.path, 10);
  ASSERT_FALSE(a.ok()) << a.status();
  EXPECT_NE(a.status().message().find("carries stream 9, expected 10"), absl::string_view::npos);
}

TEST_F(SegmentTest, SecondLivePublisherIsRefusedButAStaleOneIsReplaced) {
  // A live publisher in another process owns the stream.
  const pid_t child = publisher_child();
  auto second = Segment::create(opt);
  ASSERT_FALSE(second.ok()) << second.status();
  EXPECT_EQ(second.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(second.status().message().find("already has a live publisher"), absl::string_view::npos);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  // The owner died without cleaning up: its segment is stale and may be replaced.
  auto third = Segment::create(opt);
  ASSERT_TRUE(third.ok()) << third.status();
}

// A publisher killed with SIGKILL whose parent has not reaped it yet (a zombie: it
// still answers kill(pid, 0) and keeps its /proc entry and start time) refused the next
// publisher of its stream. A zombie holds no mapping and writes nothing: its segment is stale.
TEST_F(SegmentTest, AKilledPublisherNotYetReapedIsReplaced) {
  const pid_t child = publisher_child();
  ASSERT_EQ(kill(child, SIGKILL), 0);
  siginfo_t info{};
  ASSERT_EQ(waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT), 0);  // dead, left a zombie
  ASSERT_EQ(kill(child, 0), 0) << "the zombie still answers kill(pid, 0)";
  auto next = Segment::create(opt);
  EXPECT_TRUE(next.ok()) << next.status();
  waitpid(child, nullptr, 0);
}

// Attach refuses a log smaller than create's minimum (64 KiB).
TEST_F(SegmentTest, RejectsALogSmallerThanCreatesMinimum) {
  auto s = Segment::create(opt);
  ASSERT_TRUE(s.ok()) << s.status();
  std::ifstream in(opt.path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  s->reset();
  // A self-consistent segment with a 4 KiB log (max_frame 128).
  SegmentLayout l;
  std::memcpy(&l, bytes.data(), sizeof l);
  l.log_size = 4096;
  l.max_frame = 128;
  std::memcpy(bytes.data(), &l, sizeof l);
  bytes.resize(l.header_size + 4096);
  std::ofstream(opt.path, std::ios::binary | std::ios::trunc)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  EXPECT_NE(attach_error().find("inconsistent layout"), std::string::npos);
}

// Attach opens neither a link nor anything but a regular file at the path.
TEST_F(SegmentTest, RefusesSymlinksFifosAndDirectories) {
  Segment::Options real = opt;
  real.path = opt.path + ".real";
  auto s = Segment::create(real);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(::symlink(real.path.c_str(), opt.path.c_str()), 0);
  std::string e = attach_error();
  EXPECT_NE(e.find("is a symbolic link: refused"), std::string::npos) << e;
  // A publisher replaces its own stale link (rename replaces the name, never the target).
  auto pub = Segment::create(opt);
  ASSERT_TRUE(pub.ok()) << pub.status();
  struct stat st;
  ASSERT_EQ(::lstat(opt.path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_TRUE(Segment::attach(real.path, opt.stream_id).ok()) << "the link's target must be left alone";
  (*pub)->unlink();
  ASSERT_EQ(::mkfifo(opt.path.c_str(), 0600), 0);  // opening must not block
  e = attach_error();
  EXPECT_NE(e.find("is a FIFO, not a regular file"), std::string::npos) << e;
  ::unlink(opt.path.c_str());
  ASSERT_EQ(::mkdir(opt.path.c_str(), 0700), 0);
  auto a = Segment::attach(opt.path, opt.stream_id);
  EXPECT_FALSE(a.ok()) << a.status();
  ::rmdir(opt.path.c_str());
  (*s)->unlink();
}

// A world- or group-writable segment is not attached silently.
TEST_F(SegmentTest, RefusesSegmentsOthersMayWrite) {
  auto s = Segment::create(opt);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(::chmod(opt.path.c_str(), 0666), 0);
  std::string e = attach_error();
  EXPECT_NE(e.find("has mode 0666: writable by every user, refused"), std::string::npos) << e;
  ASSERT_EQ(::chmod(opt.path.c_str(), 0620), 0);
  e = attach_error();
  EXPECT_NE(e.find("writable by its group, which is not shm.group"), std::string::npos) << e;
  ASSERT_EQ(::chmod(opt.path.c_str(), 0644), 0);  // readable is fine
  auto attached = Segment::attach(opt.path, opt.stream_id);
  EXPECT_TRUE(attached.ok()) << attached.status();
}

// A segment of another uid (root attaching included) is refused, and a
// publisher is told who owns the file in its way instead of being blocked silently.
TEST_F(SegmentTest, RefusesAnotherUsersSegmentAndSaysWhoseItIs) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to chown a file to another uid";
  auto s = Segment::create(opt);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(::chown(opt.path.c_str(), 65534, 65534), 0);
  auto a = Segment::attach(opt.path, opt.stream_id);
  ASSERT_FALSE(a.ok()) << a.status();
  EXPECT_EQ(a.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(a.status().message().find("is owned by uid 65534, not by this process's uid 0: refused"),
            absl::string_view::npos)
      << a.status();
  EXPECT_NE(a.status().message().find(opt.path), absl::string_view::npos);
  auto pub = Segment::create(opt);
  ASSERT_FALSE(pub.ok()) << pub.status();
  EXPECT_EQ(pub.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(pub.status().message().find("owned by uid 65534"), absl::string_view::npos) << pub.status();
}

// shm.group: segments are created 0660 with the group, and files of that group are accepted
// from another owner and group-writable - never other-writable.
TEST_F(SegmentTest, GroupSharingAcceptsTheConfiguredGroupOnly) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to chown files";
  auto access = core::resolve_file_access("65534");
  ASSERT_TRUE(access.ok()) << access.status();
  opt.access = *access;
  auto s = Segment::create(opt);
  ASSERT_TRUE(s.ok()) << s.status();
  struct stat st;
  ASSERT_EQ(::stat(opt.path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  EXPECT_EQ(st.st_gid, 65534u);
  ASSERT_EQ(::chown(opt.path.c_str(), 65534, -1), 0);  // another member of the group created it
  auto attached = Segment::attach(opt.path, opt.stream_id, *access);
  EXPECT_TRUE(attached.ok()) << attached.status();
  EXPECT_FALSE(Segment::attach(opt.path, opt.stream_id).ok()) << "without shm.group: another user's file";
  ASSERT_EQ(::chmod(opt.path.c_str(), 0662), 0);
  auto a = Segment::attach(opt.path, opt.stream_id, *access);
  ASSERT_FALSE(a.ok()) << a.status();
  EXPECT_NE(a.status().message().find("writable by every user"), absl::string_view::npos) << a.status();
  auto no_group = core::resolve_file_access("no-such-group-pollux");
  EXPECT_FALSE(no_group.ok()) << no_group.status();
}

// A segment whose publisher_pid names a live process that is not its
// publisher (a reused pid, or a planted one) blocked every new publisher.
TEST_F(SegmentTest, LivePidWithAnotherStartTimeDoesNotBlockThePublisher) {
  auto forge = [&](int pid, std::uint64_t start) {
    auto s = Segment::create(opt);
    ASSERT_TRUE(s.ok()) << s.status();
    (*s)->header()->layout.publisher_pid = pid;
    (*s)->header()->layout.publisher_start = start;
    s->reset();  // left behind, not closed
  };
  const std::uint64_t init_start = process_start_time(1);
  ASSERT_NE(init_start, 0u) << "needs /proc";
  forge(1, init_start + 1);  // pid 1 is alive, but it is not the process that wrote this
  auto pub = Segment::create(opt);
  ASSERT_TRUE(pub.ok()) << pub.status();
  pub->reset();
  forge(1, init_start);  // as far as we can tell it IS that process: refused, and said so
  auto refused = Segment::create(opt);
  ASSERT_FALSE(refused.ok()) << refused.status();
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(refused.status().message().find("live publisher (pid 1, segment " + opt.path), absl::string_view::npos)
      << refused.status();
  EXPECT_NE(refused.status().message().find("If pid 1 is not a pollux publisher of this stream, remove"),
            absl::string_view::npos)
      << refused.status();
}

}  // namespace
}  // namespace pollux::transport::shm
