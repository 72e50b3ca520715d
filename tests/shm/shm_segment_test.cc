#include <fcntl.h>
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

  // Creates a valid segment file owned by a process that has exited (so it is stale).
  void write_stale_copy(const std::function<void(std::byte*)>& corrupt) {
    auto s = Segment::create(opt);
    ASSERT_TRUE(s.ok()) << s.status();
    std::ifstream in(opt.path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    s->reset();  // no unlink: only unlink() removes the file
    corrupt(reinterpret_cast<std::byte*>(bytes.data()));
    std::ofstream(opt.path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }

  std::string attach_error() {
    auto a = Segment::attach(opt.path, opt.stream_id);
    EXPECT_FALSE(a.ok());
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
  ASSERT_FALSE(a.ok());
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
  ASSERT_FALSE(a.ok());
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
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(::truncate(opt.path.c_str(), 8192), 0);
  EXPECT_NE(attach_error().find("inconsistent layout"), std::string::npos);
  ASSERT_EQ(::truncate(opt.path.c_str(), 100), 0);
  EXPECT_NE(attach_error().find("smaller than a segment header"), std::string::npos);
}

TEST_F(SegmentTest, RejectsWrongStream) {
  auto s = Segment::create(opt);
  ASSERT_TRUE(s.ok());
  auto a = Segment::attach(opt.path, 10);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("carries stream 9, expected 10"), absl::string_view::npos);
}

TEST_F(SegmentTest, SecondLivePublisherIsRefusedButAStaleOneIsReplaced) {
  // A live publisher in another process owns the stream.
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  if (child == 0) {
    auto s = Segment::create(opt);
    char c = s.ok() ? 'y' : 'n';
    (void)!write(ready[1], &c, 1);
    pause();
    _exit(0);
  }
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  ASSERT_EQ(c, 'y');
  auto second = Segment::create(opt);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(second.status().message().find("already has a live publisher"), absl::string_view::npos);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  // The owner died without cleaning up: its segment is stale and may be replaced.
  auto third = Segment::create(opt);
  ASSERT_TRUE(third.ok()) << third.status();
  close(ready[0]);
  close(ready[1]);
}

}  // namespace
}  // namespace pollux::transport::shm
