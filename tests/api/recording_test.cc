// pollux::Recorder and [[recordings]] (docs/ARCHIVE.md) over shm in one process: what the
// recording holds equals what was published, the catalog says so, a dead recorder's recording
// is resumed past its torn tail, and a full disk stops the recording with its error while the
// live subscribers keep every message.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/archive/catalog.h"
#include "core/archive/segment.h"
#include "pollux/pollux.h"
#include "tests/shm/test_util.h"
#include "tests/support/temp_dir.h"
#include "tests/support/threads.h"
#include "tests/support/udp_ports.h"

namespace pollux {
namespace {

namespace fs = std::filesystem;
namespace archive = core::archive;
using testing::unique_name;

std::string config(const std::string& name, const std::string& extra = "") {
  return absl::StrCat("[runtime]\nname = \"", name,
                      "\"\nthreading = \"inline\"\nidle = \"yield\"\ncounters = false\n[shm]\nflow_control = "
                      "\"backpressure\"\nlog_size = \"1MiB\"\n",
                      extra);
}

// Message i's payload: 8 bytes of i, then bytes following from it; 8..200 bytes long.
std::vector<std::byte> payload(std::uint64_t i) {
  std::vector<std::byte> p(8 + i * 13 % 193);
  std::memcpy(p.data(), &i, 8);
  for (std::size_t k = 8; k < p.size(); ++k) p[k] = static_cast<std::byte>((i * 7 + k) & 0xff);
  return p;
}

struct Recorded {
  std::vector<std::uint64_t> sequences;
  bool payloads_match = true;
  std::uint64_t markers = 0, resumes = 0;
  std::string invalid;
};

// Every segment of recording `id`, in order, checked against payload().
Recorded read_recording(const std::string& dir, std::uint64_t id) {
  Recorded out;
  for (std::uint32_t i = 0; fs::exists(archive::segment_path(dir, id, i)); ++i) {
    auto r = archive::SegmentReader::open(archive::segment_path(dir, id, i));
    if (!r.ok()) {
      out.invalid = std::string(r.status().message());
      return out;
    }
    archive::SegmentReader::Record rec;
    archive::SegmentReader::Next n;
    while ((n = r->next(&rec)) == archive::SegmentReader::Next::kRecord) {
      if (rec.is_marker) {
        archive::Marker m;
        std::memcpy(&m, rec.body, sizeof m);
        ++out.markers;
        out.resumes += m.kind == static_cast<std::uint16_t>(archive::MarkerKind::kResume);
        continue;
      }
      core::FrameHeader h;
      std::memcpy(&h, rec.body, sizeof h);
      out.sequences.push_back(h.sequence);
      std::uint64_t v = 0;
      const std::uint32_t len = rec.length - core::kFrameHeaderSize;
      if (len >= 8) std::memcpy(&v, rec.body + core::kFrameHeaderSize, 8);
      const std::vector<std::byte> want = payload(v);
      out.payloads_match &= len == want.size() && v == h.sequence &&
                            std::memcmp(rec.body + core::kFrameHeaderSize, want.data(), len) == 0;
    }
    if (n == archive::SegmentReader::Next::kInvalid) {
      out.invalid = absl::StrCat(r->path(), " at ", r->offset(), ": ", r->why());
      return out;
    }
  }
  return out;
}

// A recording of `topic` in `dir` with 1 MiB segments (several per test).
RecordingOptions options(const std::string& topic, const std::string& dir) {
  RecordingOptions o;
  o.topic = topic;
  o.directory = dir;
  o.segment_size = 1 << 20;
  return o;
}

void publish(Publisher& pub, std::uint64_t from, std::uint64_t to, const std::function<void()>& between) {
  for (std::uint64_t i = from; i <= to;) {
    const auto p = payload(i);
    if (pub.offer(p.data(), p.size()) >= 0) {
      ++i;
    } else {
      between();
    }
  }
}

// 1,000,000 messages over shm, a live subscriber beside the recorder: the recording holds exactly
// what the live subscriber received (every sequence once, in order, each payload the one
// published), across segment rolls.
TEST(Recording, WhatIsRecordedIsWhatWasPublishedAndTheCatalogSaysSo) {
  pollux::testing::TempDir d("pollux-rec");
  auto ctx = Context::from_string(config(unique_name("rec")), "rec.toml");
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  RecordingOptions o;
  o.topic = "quotes";
  o.directory = d.path() + "/rec";  // created
  o.segment_size = 8 << 20;
  auto rec = Recorder::start(**ctx, o);
  ASSERT_TRUE(rec.ok()) << rec.status();
  EXPECT_FALSE((*rec)->status().resumed);
  auto live = (*ctx)->subscriber("quotes");
  ASSERT_TRUE(live.ok()) << live.status();
  auto pub = (*ctx)->publisher("quotes");
  ASSERT_TRUE(pub.ok()) << pub.status();
  constexpr std::uint64_t kCount = 1'000'000;  // ~140 MB of records: 17 segments of 8 MiB
  std::uint64_t live_next = 1, live_bad = 0;
  auto poll_live = [&] {
    return live->poll(
        [&](const Message& m) {
          const std::vector<std::byte> want = payload(live_next);
          live_bad += m.sequence != live_next || m.payload.size() != want.size() ||
                      std::memcmp(m.payload.data(), want.data(), want.size()) != 0;
          live_next = m.sequence + 1;
        },
        4096);
  };
  publish(*pub, 1, kCount, [&] {
    (*rec)->poll(4096);
    poll_live();
  });
  while ((*rec)->status().messages < kCount || live_next <= kCount) {
    if ((*rec)->poll(4096) + poll_live() == 0) std::this_thread::yield();
  }
  EXPECT_EQ(live_next, kCount + 1);
  EXPECT_EQ(live_bad, 0u);
  const RecordingStatus st = (*rec)->status();
  EXPECT_STREQ(st.state, "recording");
  EXPECT_EQ(st.first_sequence, 1u);
  EXPECT_EQ(st.last_sequence, kCount);
  EXPECT_GE(st.segment, 10u);
  ASSERT_TRUE((*rec)->stop().ok());

  auto cat = archive::Catalog::load(o.directory);
  ASSERT_TRUE(cat.ok()) << cat.status();
  ASSERT_EQ(cat->recordings().size(), 1u);
  const archive::RecordingInfo& info = cat->recordings()[0];
  EXPECT_EQ(info.id, st.recording_id);
  EXPECT_EQ(info.topic, "quotes");
  EXPECT_EQ(info.stream_id, (*ctx)->stream_id("quotes"));
  EXPECT_EQ(info.state, archive::RecordingState::kStopped);
  EXPECT_EQ(info.frames, kCount);
  EXPECT_EQ(info.first_sequence, 1u);
  EXPECT_EQ(info.last_sequence, kCount);
  EXPECT_EQ(info.last_segment, st.segment);
  EXPECT_GT(info.stopped_ns, info.started_ns);

  const Recorded r = read_recording(o.directory, info.id);
  EXPECT_EQ(r.invalid, "");
  ASSERT_EQ(r.sequences.size(), kCount);
  for (std::uint64_t i = 0; i < kCount; ++i) ASSERT_EQ(r.sequences[i], i + 1);
  EXPECT_TRUE(r.payloads_match);
  EXPECT_EQ(r.markers, 0u);
}

// The recorder subscribes on the context's transport, whatever it is: here UDP multicast over
// loopback, with the publisher in its own context.
TEST(Recording, RecordsAUdpStreamLikeAnyOtherSubscriber) {
  pollux::testing::TempDir d("pollux-rec");
  const std::string head = testing::UdpTestConfigHead("inline", testing::UniqueGroup());
  const std::string streams =
      absl::StrCat("port = ", testing::UdpPortBlock::Base(),
                   "\n[[streams]]\ntopic = \"u\"\nid = 7\nudp_port = ", testing::UdpPortBlock::Base() + 1, "\n");
  auto sub_ctx = Context::from_string(head + streams, "sub.toml");
  ASSERT_TRUE(sub_ctx.ok()) << sub_ctx.status();
  auto pub_ctx = Context::from_string(head + streams, "pub.toml");
  ASSERT_TRUE(pub_ctx.ok()) << pub_ctx.status();
  const RecordingOptions o = options("u", d.path());
  auto rec = Recorder::start(**sub_ctx, o);
  ASSERT_TRUE(rec.ok()) << rec.status();
  auto pub = (*pub_ctx)->publisher("u");
  ASSERT_TRUE(pub.ok()) << pub.status();
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!pub->is_connected() && std::chrono::steady_clock::now() < end) {
    pub->service();
    (*rec)->poll();
  }
  ASSERT_TRUE(pub->is_connected()) << "the publisher never heard the recorder's subscriber";
  constexpr std::uint64_t kCount = 5000;
  publish(*pub, 1, kCount, [&] {
    pub->service();
    (*rec)->poll();
  });
  while ((*rec)->status().messages < kCount && std::chrono::steady_clock::now() < end + std::chrono::seconds(30)) {
    pub->service();
    if ((*rec)->poll() == 0) std::this_thread::yield();
  }
  ASSERT_EQ((*rec)->status().messages, kCount);
  EXPECT_EQ((*rec)->status().stream_id, 7u);
  ASSERT_TRUE((*rec)->stop().ok());
  const Recorded r = read_recording(d.path(), (*rec)->status().recording_id);
  EXPECT_EQ(r.invalid, "");
  ASSERT_EQ(r.sequences.size(), kCount);
  for (std::uint64_t i = 0; i < kCount; ++i) ASSERT_EQ(r.sequences[i], i + 1);
  EXPECT_TRUE(r.payloads_match);
}

TEST(Recording, ContextRecordingsRunOnTheirOwnThreadAndStopWithTheContext) {
  pollux::testing::TempDir d("pollux-rec");
  const std::string toml =
      config(unique_name("recctx"), absl::StrCat("[[recordings]]\ntopic = \"trades\"\ndirectory = \"", d.path(),
                                                 "\"\nsegment_size = \"1MiB\"\n"
                                                 "fsync = \"interval\"\nfsync_interval_ms = 5\n"));
  constexpr std::uint64_t kCount = 20000;
  {
    auto ctx = Context::from_string(toml, "rec.toml");
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    auto pub = (*ctx)->publisher("trades");
    ASSERT_TRUE(pub.ok()) << pub.status();
    // The recorder's subscriber holds the backpressure stream: the publisher waits for it.
    publish(*pub, 1, kCount, [] { std::this_thread::yield(); });
  }  // the context stops its recorders: what their subscribers hold is recorded
  auto cat = archive::Catalog::load(d.path());
  ASSERT_TRUE(cat.ok()) << cat.status();
  ASSERT_EQ(cat->recordings().size(), 1u);
  EXPECT_EQ(cat->recordings()[0].state, archive::RecordingState::kStopped);
  EXPECT_EQ(cat->recordings()[0].frames, kCount);
  const Recorded r = read_recording(d.path(), cat->recordings()[0].id);
  EXPECT_EQ(r.invalid, "");
  ASSERT_EQ(r.sequences.size(), kCount);
  EXPECT_TRUE(r.payloads_match);

  // A directory that cannot be made: the context fails, naming the file, line and entry.
  auto bad = Context::from_string(
      config(unique_name("recbad"),
             absl::StrCat("[[recordings]]\ntopic = \"t\"\ndirectory = \"", d.path(), "/catalog/x\"\n")),
      "bad.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("bad.toml:"), std::string::npos) << bad.status();
  EXPECT_NE(bad.status().message().find("[[recordings]] t"), std::string::npos) << bad.status();
}

// The OS CPUs thread `comm` of this process may run on ("" when no thread has that name).
std::string allowed_cpus_of_thread(const std::string& comm) {
  for (const std::filesystem::path& task : pollux::testing::threads_named(comm)) {
    std::ifstream st(task / "status");
    for (std::string line; std::getline(st, line);) {
      if (line.rfind("Cpus_allowed_list:", 0) == 0) return std::string(absl::StripAsciiWhitespace(line.substr(18)));
    }
  }
  return "";
}

TEST(Recording, TheRecordingThreadRunsOnRuntimeRecordingCoresAndACoreItCannotHaveFailsTheStart) {
  pollux::testing::TempDir d("pollux-rec");
  cpu_set_t mine;
  ASSERT_EQ(::sched_getaffinity(0, sizeof mine, &mine), 0) << std::strerror(errno);
  int last = -1;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &mine)) last = c;
  }
  ASSERT_GE(last, 0);
  auto toml = [&](const std::string& name, const std::string& cores) {
    return absl::StrCat("[runtime]\nname = \"", name,
                        "\"\nthreading = \"inline\"\ncounters = false\nrecording_cores = ", cores,
                        "\n[[recordings]]\ntopic = \"t\"\ndirectory = \"", d.path(), "\"\nsegment_size = \"1MiB\"\n");
  };
  {
    auto ctx = Context::from_string(toml(unique_name("reccpu"), absl::StrCat("[", last, "]")), "rec.toml");
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    EXPECT_EQ(allowed_cpus_of_thread("pollux-record"), std::to_string(last));
  }
  // A CPU this machine does not have: the context does not start, and says which key.
  auto bad = Context::from_string(toml(unique_name("reccpu"), "[4095]"), "bad.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("bad.toml: runtime.recording_cores"), std::string::npos) << bad.status();
  EXPECT_EQ(allowed_cpus_of_thread("pollux-record"), "") << "the refused context's recording thread is still running";
}

TEST(Recording, ADeadRecordersRecordingIsResumedPastItsTornTail) {
  pollux::testing::TempDir d("pollux-rec");
  auto ctx = Context::from_string(config(unique_name("recres")), "rec.toml");
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  auto pub = (*ctx)->publisher("q");
  ASSERT_TRUE(pub.ok());
  const RecordingOptions o = options("q", d.path());
  std::uint64_t id = 0, end = 0;
  {
    auto rec = Recorder::start(**ctx, o);
    ASSERT_TRUE(rec.ok()) << rec.status();
    publish(*pub, 1, 500, [&] { (*rec)->poll(); });
    while ((*rec)->status().messages < 500) (*rec)->poll();
    id = (*rec)->status().recording_id;
    // A crash: the catalog keeps "recording" (it is updated at most once a second while
    // recording), the lock goes with the process. Simulated by copying the files away before
    // the clean stop and putting them back after.
    const fs::path save = d.path() + "/save";
    fs::create_directory(save);
    for (const auto& e : fs::directory_iterator(d.path())) {
      if (e.is_regular_file()) fs::copy_file(e.path(), save / e.path().filename());
    }
    auto r = archive::SegmentReader::open(archive::segment_path(d.path(), id, 0));
    archive::SegmentReader::Record x;
    while (r->next(&x) == archive::SegmentReader::Next::kRecord) {
    }
    end = r->offset();
    (void)(*rec)->stop();
    for (const auto& e : fs::directory_iterator(save)) {
      fs::copy_file(e.path(), fs::path(d.path()) / e.path().filename(), fs::copy_options::overwrite_existing);
    }
    fs::remove_all(save);
  }
  // The torn write the crash left: half a record.
  {
    const int fd = ::open(archive::segment_path(d.path(), id, 0).c_str(), O_RDWR);
    const std::uint32_t torn[2] = {0xdeadbeef, 96};
    ASSERT_EQ(::pwrite(fd, torn, sizeof torn, static_cast<off_t>(end)), static_cast<ssize_t>(sizeof torn));
    ::close(fd);
  }
  auto cat = archive::Catalog::load(d.path());
  ASSERT_EQ(cat->find(id)->state, archive::RecordingState::kRecording);
  auto rec = Recorder::start(**ctx, o);
  ASSERT_TRUE(rec.ok()) << rec.status();
  EXPECT_TRUE((*rec)->status().resumed);
  EXPECT_EQ((*rec)->status().recording_id, id);
  // A second recorder of the stream while this one lives: a recording of its own.
  {
    auto other = Recorder::start(**ctx, o);
    ASSERT_TRUE(other.ok()) << other.status();
    EXPECT_NE((*other)->status().recording_id, id);
    EXPECT_FALSE((*other)->status().resumed);
  }
  publish(*pub, 501, 800, [&] { (*rec)->poll(); });
  while ((*rec)->status().messages < 300) (*rec)->poll();
  ASSERT_TRUE((*rec)->stop().ok());
  const Recorded r = read_recording(d.path(), id);
  EXPECT_EQ(r.invalid, "");
  ASSERT_EQ(r.sequences.size(), 800u);
  for (std::uint64_t i = 0; i < 800; ++i) ASSERT_EQ(r.sequences[i], i + 1);
  EXPECT_TRUE(r.payloads_match);
  EXPECT_EQ(r.resumes, 1u);
  cat = archive::Catalog::load(d.path());
  EXPECT_EQ(cat->find(id)->state, archive::RecordingState::kStopped);
  EXPECT_EQ(cat->find(id)->frames, 800u);
  EXPECT_EQ(cat->find(id)->last_sequence, 800u);
}

TEST(Recording, AFullDiskStopsTheRecordingWithItsErrorAndTheLiveSubscriberGetsEverything) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (mounts a 4 MiB tmpfs)";
  pollux::testing::TempDir d("pollux-rec");
  if (::mount("tmpfs", d.path().c_str(), "tmpfs", 0, "size=4m") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs: " << std::strerror(errno);
  }
  struct Unmount {
    std::string p;
    ~Unmount() { ::umount2(p.c_str(), MNT_DETACH); }
  } unmount{d.path()};
  auto ctx = Context::from_string(config(unique_name("recfull")), "rec.toml");
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  const RecordingOptions o = options("big", d.path());
  auto rec = Recorder::start(**ctx, o);
  ASSERT_TRUE(rec.ok()) << rec.status();
  auto live = (*ctx)->subscriber("big");
  ASSERT_TRUE(live.ok());
  auto pub = (*ctx)->publisher("big");
  ASSERT_TRUE(pub.ok());
  std::uint64_t got = 0, next = 1;
  bool in_order = true;
  const auto drain = [&] {
    (*rec)->poll();
    live->poll(
        [&](const Message& m) {
          in_order &= m.sequence == next;
          next = m.sequence + 1;
          ++got;
        },
        1024);
  };
  constexpr std::uint64_t kCount = 60000;  // ~8 MB of records: twice the file system
  publish(*pub, 1, kCount, drain);
  while (got < kCount) drain();
  EXPECT_TRUE(in_order);
  const RecordingStatus st = (*rec)->status();
  EXPECT_STREQ(st.state, "failed");
  EXPECT_NE(st.error.find("No space left on device"), std::string::npos) << st.error;
  EXPECT_GT(st.dropped, 0u);
  EXPECT_EQ(st.messages + st.dropped, kCount);
  EXPECT_FALSE((*rec)->stop().ok());
  auto cat = archive::Catalog::load(d.path());
  ASSERT_TRUE(cat.ok()) << cat.status();
  const archive::RecordingInfo* info = cat->find(st.recording_id);
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->state, archive::RecordingState::kFailed);
  EXPECT_NE(info->error.find("No space left on device"), std::string::npos) << info->error;
  // What it recorded before is intact.
  const Recorded r = read_recording(d.path(), st.recording_id);
  EXPECT_EQ(r.invalid, "");
  EXPECT_GT(r.sequences.size(), 0u);
  for (std::size_t i = 0; i < r.sequences.size(); ++i) ASSERT_EQ(r.sequences[i], i + 1);
  EXPECT_TRUE(r.payloads_match);
}

}  // namespace
}  // namespace pollux
