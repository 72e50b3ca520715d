// pollux-bench-record: how fast a recording is written and read back (core/archive), next to the
// disk's sequential write bandwidth measured in the same run.
//
//   pollux-bench-record [--dir DIR] [--count N] [--large-count N] [--flush-every N] [--segment-mib N]
//                       [--runs R] [--cases record-32,record-1k,disk-seq,replay,crc] [--keep]
//                       [--json FILE]      (--help describes every flag)
//
// Cases (one thread, the caller's core):
//   record-32   RecordingWriter::append_frame of --count frames with 32-byte payloads (a
//               FrameHeader and the payload), FsyncPolicy::kNone, flush() every --flush-every
//               frames (a Recorder's poll batch), --segment-mib segments. Rate over the appends
//               and flushes ("unsynced"), and with close() included ("synced": its fdatasync and
//               index write). Rolling to a new segment syncs the sealed one whatever the policy;
//               the appends that rolled are timed apart (roll_s) and a rate without them given.
//   record-1k   the same with 1 KiB payloads, --large-count frames.
//   disk-seq    the floor of record-1k: a file of the same size written in the same directory
//               with 1 MiB sequential pwrites, then fdatasync; MB/s without and with the sync.
//               Twice: a plain file, and one preallocated first (posix_fallocate, timed) as the
//               writer preallocates its segments. record-1k is held against the faster of the
//               two synced to synced (both durable on disk) and, for reference, unsynced to
//               unsynced (mostly the page cache's copy speed).
//   replay      SegmentReader::next over every segment record-32 wrote (each record's bounds,
//               magic and crc32c checked), from the page cache: the read side of a replay alone,
//               nothing delivered to a subscriber.
//   replay-shm  pollux::Replay at Pace::kMax of that recording into a shm subscriber on a second
//               thread, until the subscriber has every message.
//   crc         crc32c over a 64 KiB buffer (hardware instruction and the portable table), and
//               the per-record pattern of a 32-byte frame (length field, header, payload).
// MB are 10^6 bytes; a record's bytes are its header, body and padding as written to the file.
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "core/archive/catalog.h"
#include "core/archive/crc32c.h"
#include "core/archive/format.h"
#include "core/archive/segment.h"
#include "core/clock.h"
#include "core/frame.h"
#include "core/topology.h"
#include "pollux/pollux.h"

namespace {

namespace archive = pollux::core::archive;
using pollux::core::Clock;
using pollux::core::FrameHeader;
using pollux::core::kFrameHeaderSize;

// The issue's targets.
constexpr double kTargetRecordMsgsPerS = 10e6;
constexpr double kTargetDiskFraction = 0.80;
constexpr double kTargetReplayMsgsPerS = 20e6;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The calling thread's CPU time (user and system), s: on a shared machine the wall time also
// counts the time other processes held the CPU.
double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct RecordResult {
  std::uint64_t frames = 0, bytes = 0, segments = 0, writes = 0, rolls = 0;
  double append_s = 0;  // appends and flushes, the rolls among them
  double roll_s = 0;    // the appends that rolled to a new segment
  double close_s = 0;   // close(): the last flush, its fdatasync, the index
  double cpu_s = 0;     // this thread's CPU time over append_s
  std::string error;
};

// Appends `count` frames of `payload` bytes to a new recording `id` in `dir`.
RecordResult record(const std::string& dir, std::uint64_t id, std::uint64_t count, std::uint32_t payload,
                    std::uint64_t flush_every, std::uint64_t segment_size) {
  RecordResult r;
  archive::WriterOptions o;
  o.directory = dir;
  o.recording_id = id;
  o.stream_id = 1;
  o.segment_size = segment_size;
  o.fsync = archive::FsyncPolicy::kNone;
  absl::StatusOr<std::unique_ptr<archive::RecordingWriter>> opened = archive::RecordingWriter::open(o);
  if (!opened.ok()) {
    r.error = std::string(opened.status().message());
    return r;
  }
  archive::RecordingWriter& w = **opened;
  std::vector<std::byte> body(payload);
  for (std::uint32_t i = 0; i < payload; ++i) body[i] = static_cast<std::byte>(i * 7 + 1);
  FrameHeader h{};
  h.frame_length = kFrameHeaderSize + payload;
  h.magic = pollux::core::kFrameMagic;
  h.version = pollux::core::kFrameVersion;
  h.stream_id = 1;
  h.session_id = 7;
  const std::int64_t t_base = Clock::now_ns();
  const std::uint64_t need = archive::record_size(kFrameHeaderSize + payload);
  const std::uint64_t roll_at = segment_size - sizeof(archive::RecordHeader);
  bool ok = true;
  const double c0 = thread_cpu_s();
  const auto t0 = std::chrono::steady_clock::now();
  for (std::uint64_t i = 0; i < count && ok; ++i) {
    h.sequence = i + 1;
    h.timestamp_ns = t_base + static_cast<std::int64_t>(i);
    if (__builtin_expect(w.position() + need > roll_at, 0)) {
      // This append seals the segment and creates the next: timed apart.
      const auto tr = std::chrono::steady_clock::now();
      ok = w.append_frame(h, body.data(), payload);
      r.roll_s += seconds_since(tr);
      ++r.rolls;
    } else {
      ok = w.append_frame(h, body.data(), payload);
    }
    if ((i + 1) % flush_every == 0) ok = ok && w.flush(Clock::now_ns());
  }
  ok = ok && w.flush(Clock::now_ns());
  r.append_s = seconds_since(t0);
  r.cpu_s = thread_cpu_s() - c0;
  const auto tc = std::chrono::steady_clock::now();
  const absl::Status closed = w.close();
  r.close_s = seconds_since(tc);
  if (!ok || !closed.ok()) r.error = std::string(w.error().ok() ? closed.message() : w.error().message());
  if (r.error.empty() && !ok) r.error = "a frame was refused";
  r.frames = w.stats().frames;
  r.bytes = w.stats().bytes;
  r.segments = w.stats().segments;
  r.writes = w.stats().writes;
  return r;
}

struct DiskResult {
  std::uint64_t bytes = 0;
  double write_s = 0, sync_s = 0, cpu_s = 0;  // cpu_s: this thread's, over write_s
  std::string error;
};

// Writes `bytes` to a new file in `dir` with `chunk`-byte sequential
// pwrites, then fdatasync; the file is removed. With `prealloc` the file is first given its size
// with posix_fallocate (timed), as the writer does each segment.
DiskResult disk_seq(const std::string& dir, std::uint64_t bytes, std::uint64_t chunk, bool prealloc) {
  DiskResult r;
  const std::string path = dir + "/disk-seq.dat";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0640);
  if (fd < 0) {
    r.error = path + ": " + std::strerror(errno);
    return r;
  }
  void* mem = nullptr;
  if (posix_memalign(&mem, 4096, chunk) != 0) {
    ::close(fd);
    ::unlink(path.c_str());
    r.error = "out of memory";
    return r;
  }
  std::unique_ptr<void, void (*)(void*)> buf(mem, std::free);
  std::memset(buf.get(), 0x5a, chunk);
  const double c0 = thread_cpu_s();
  const auto t0 = std::chrono::steady_clock::now();
  std::uint64_t off = 0;
  if (prealloc) {
    if (const int e = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes)); e != 0) {
      r.error = path + ": posix_fallocate: " + std::strerror(e);
      off = bytes;
    }
  }
  while (off < bytes) {
    const ssize_t w =
        ::pwrite(fd, buf.get(), static_cast<std::size_t>(std::min(chunk, bytes - off)), static_cast<off_t>(off));
    if (w <= 0) {
      if (w < 0 && errno == EINTR) continue;
      r.error = path + ": pwrite: " + std::strerror(errno);
      break;
    }
    off += static_cast<std::uint64_t>(w);
  }
  r.write_s = seconds_since(t0);
  r.cpu_s = thread_cpu_s() - c0;
  const auto ts = std::chrono::steady_clock::now();
  if (r.error.empty() && ::fdatasync(fd) != 0) r.error = path + ": fdatasync: " + std::strerror(errno);
  r.sync_s = seconds_since(ts);
  r.bytes = off;
  ::close(fd);
  ::unlink(path.c_str());
  return r;
}

struct ReplayResult {
  std::uint64_t frames = 0, bytes = 0;
  std::uint64_t back_pressured = 0;  // replay-shm: offers the full log refused (the subscriber was behind)
  std::uint64_t empty_polls = 0;     // replay-shm: the subscriber's polls that found nothing (it waited)
  double seconds = 0, cpu_s = 0;
  std::string error;
};

// Reads every record of recording `id`'s `segments` segments in `dir`, checking that the frames
// are 1, 2, ... `expect` in order.
ReplayResult replay(const std::string& dir, std::uint64_t id, std::uint64_t segments, std::uint64_t expect) {
  ReplayResult r;
  std::uint64_t next_seq = 1;
  const double c0 = thread_cpu_s();
  const auto t0 = std::chrono::steady_clock::now();
  for (std::uint32_t s = 0; s < segments && r.error.empty(); ++s) {
    absl::StatusOr<archive::SegmentReader> reader = archive::SegmentReader::open(archive::segment_path(dir, id, s));
    if (!reader.ok()) {
      r.error = std::string(reader.status().message());
      break;
    }
    archive::SegmentReader::Record rec;
    archive::SegmentReader::Next n;
    while ((n = reader->next(&rec)) == archive::SegmentReader::Next::kRecord) {
      if (rec.is_marker) continue;
      std::uint64_t seq;
      std::memcpy(&seq, rec.body + offsetof(FrameHeader, sequence), sizeof seq);
      if (__builtin_expect(seq != next_seq, 0)) {
        r.error = "frame " + std::to_string(seq) + " where " + std::to_string(next_seq) + " was expected";
        break;
      }
      ++next_seq;
      r.bytes += archive::record_size(rec.length);
    }
    if (n == archive::SegmentReader::Next::kInvalid) {
      r.error = reader->path() + ": " + reader->why() + " at offset " + std::to_string(reader->offset());
    }
  }
  r.seconds = seconds_since(t0);
  r.cpu_s = thread_cpu_s() - c0;
  r.frames = next_seq - 1;
  if (r.error.empty() && r.frames != expect) {
    r.error = std::to_string(r.frames) + " frames read, " + std::to_string(expect) + " written";
  }
  return r;
}

// The calling thread's CPU affinity, given back when this goes out of scope (a case pins the
// main thread; the cases after it run where it ran before).
class AffinityRestore {
 public:
  AffinityRestore() {
    CPU_ZERO(&saved_);
    ok_ = ::sched_getaffinity(0, sizeof saved_, &saved_) == 0;
  }
  ~AffinityRestore() {
    if (ok_) (void)::sched_setaffinity(0, sizeof saved_, &saved_);
  }
  AffinityRestore(const AffinityRestore&) = delete;
  AffinityRestore& operator=(const AffinityRestore&) = delete;

 private:
  cpu_set_t saved_;
  bool ok_ = false;
};

// Pins the calling thread to `cpu` (-1: leaves it); a failure becomes the run's error.
void pin_to(int cpu, std::string* error) {
  if (cpu < 0) return;
  absl::Status s = pollux::core::topology().pin_current_thread(cpu);
  if (!s.ok() && error->empty()) *error = std::string(s.message());
}

// pollux::Replay at Pace::kMax of recording `id` into a shm subscriber on another thread (inline
// threading, back-pressure flow control): the time until the subscriber has every message. The
// subscriber checks that every payload has the recorded length.
ReplayResult replay_shm(const std::string& dir, std::uint64_t id, std::uint64_t expect, std::uint32_t payload,
                        int replay_cpu, int subscriber_cpu, std::uint64_t run) {
  ReplayResult r;
  const AffinityRestore restore;  // this thread replays, maybe pinned
  std::string pin_error;
  const std::string name = "bench-replay-" + std::to_string(::getpid()) + "-" + std::to_string(run);
  auto ctx = pollux::Context::from_string("[runtime]\nname = \"" + name +
                                              "\"\nthreading = \"inline\"\nidle = \"yield\"\n"
                                              "[shm]\nflow_control = \"backpressure\"\nlog_size = \"16MiB\"\n",
                                          "replay-shm.toml");
  if (!ctx.ok()) {
    r.error = std::string(ctx.status().message());
    return r;
  }
  auto sub = (*ctx)->subscriber("replayed");
  auto pub = (*ctx)->publisher("replayed");
  if (!sub.ok() || !pub.ok()) {
    r.error = std::string((sub.ok() ? pub.status() : sub.status()).message());
    return r;
  }
  while (!pub->is_connected()) pub->service();
  pollux::ReplayOptions o;
  o.directory = dir;
  o.recording_id = id;
  auto replay = pollux::Replay::start(*pub, o);
  if (!replay.ok()) {
    r.error = std::string(replay.status().message());
    return r;
  }
  std::uint64_t got = 0, bad = 0;
  std::thread consumer([&] {
    pin_to(subscriber_cpu, &pin_error);
    int idle = 0;
    while (got < expect) {
      const int n = sub->poll(
          [&](const pollux::Message& m) {
            ++got;
            bad += m.payload.size() != payload;
          },
          4096);
      if (n > 0) {
        idle = 0;
      } else {
        ++r.empty_polls;
        if (++idle > 64) std::this_thread::yield();
      }
    }
  });
  pin_to(replay_cpu, &pin_error);
  const double c0 = thread_cpu_s();
  const auto t0 = std::chrono::steady_clock::now();
  int idle = 0;
  while (!(*replay)->done()) {
    if ((*replay)->poll(1024) > 0) {
      idle = 0;
    } else if (++idle > 64) {
      std::this_thread::yield();
    }
  }
  r.cpu_s = thread_cpu_s() - c0;
  consumer.join();
  r.seconds = seconds_since(t0);
  if (!pin_error.empty()) {
    r.error = "--replay-cores: " + pin_error;
    return r;
  }
  const pollux::ReplayStatus st = (*replay)->status();
  r.frames = st.messages;
  r.bytes = st.bytes;
  r.back_pressured = st.back_pressured;
  if (!st.error.empty()) {
    r.error = st.error;
  } else if (st.messages != expect || bad != 0) {
    r.error = std::to_string(st.messages) + " replayed, " + std::to_string(expect) + " recorded, " +
              std::to_string(bad) + " of another length";
  }
  return r;
}

// Live latency over shm (inline threading, back-pressure), with the stream recorded or not. When
// `attached`, a pollux::Recorder runs on a thread of its own driven by Recorder::run (what a
// context's [[recordings]] thread runs); the publisher starts once the recorder is attached, so
// it has every message. A publisher on this thread offers `count` 32-byte messages at `rate` per
// second (open loop, busy-waiting for each one's time). A subscriber on a second thread
// busy-polls and records now_ns() - publisher_ns of each.
struct LatencyResult {
  pollux::Histogram h;
  std::uint64_t recorded = 0;
  std::string error;
};
// `waker` (not attached): a thread that only sleeps 1 ms at a time, as Recorder::run does between
// rounds - what the recorder's thread costs the live path by being scheduled, without its work.
constexpr std::int64_t kSleepSlackNs = 60'000;  // a sleep's wakeup comes up to ~60 us late here
// Where live_latency's threads run: OS CPUs, -1 = unpinned.
struct LatencyCores {
  int publisher = -1, subscriber = -1, recorder = -1;
};

LatencyResult live_latency(const std::string& dir, std::uint64_t count, std::uint64_t rate, bool attached, bool waker,
                           bool sleep_publisher, const LatencyCores& cores, std::uint64_t run) {
  LatencyResult r;
  const AffinityRestore restore;  // this thread publishes, maybe pinned
  std::string pin_error;
  const std::string name = absl::StrCat("bench-live-", ::getpid(), "-", run, attached ? "-rec" : "");
  const std::string rec_dir = absl::StrCat(dir, "/live-", run);
  auto ctx =
      pollux::Context::from_string(absl::StrCat("[runtime]\nname = \"", name,
                                                "\"\nthreading = \"inline\"\nidle = \"busy-spin\"\n"
                                                "[shm]\nflow_control = \"backpressure\"\nlog_size = \"16MiB\"\n"),
                                   "live-latency.toml");
  if (!ctx.ok()) {
    r.error = std::string(ctx.status().message());
    return r;
  }
  std::unique_ptr<pollux::Recorder> rec;
  if (attached) {
    pollux::RecordingOptions o;
    o.topic = "live";
    o.directory = rec_dir;
    auto started = pollux::Recorder::start(**ctx, o);
    if (!started.ok()) {
      r.error = std::string(started.status().message());
      return r;
    }
    rec = std::move(*started);
  }
  auto sub = (*ctx)->subscriber("live");
  auto pub = (*ctx)->publisher("live");
  if (!sub.ok() || !pub.ok()) {
    r.error = std::string((sub.ok() ? pub.status() : sub.status()).message());
    return r;
  }
  while (!pub->is_connected()) pub->service();
  std::atomic<bool> stop{false};
  std::thread recorder;
  if (rec) {
    while (!rec->connected()) rec->poll();
    recorder = std::thread([&] {
      pin_to(cores.recorder, &pin_error);
      pollux::Recorder* const all[] = {rec.get()};
      pollux::Recorder::run(all, stop);
    });
  } else if (waker) {
    recorder = std::thread([&] {
      pin_to(cores.recorder, &pin_error);
      while (!stop.load(std::memory_order_acquire)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
  }
  std::thread consumer([&] {
    pin_to(cores.subscriber, &pin_error);
    std::uint64_t n = 0;
    while (n < count) {
      n += static_cast<std::uint64_t>(
          sub->poll([&](const pollux::Message& m) { r.h.record(pollux::now_ns() - m.publisher_ns); }, 256));
    }
  });
  pin_to(cores.publisher, &pin_error);
  const std::byte payload[32] = {};
  const std::int64_t gap = 1'000'000'000 / static_cast<std::int64_t>(rate);
  std::int64_t due = pollux::now_ns();
  for (std::uint64_t i = 0; i < count; ++i) {
    due += gap;
    // --latency-sleep: the publisher sleeps until shortly before each message's time (a live path
    // that leaves its core idle part of the time, as a feed handler waiting on the network does).
    if (sleep_publisher && due - pollux::now_ns() > kSleepSlackNs) {
      std::this_thread::sleep_for(std::chrono::nanoseconds(due - pollux::now_ns() - kSleepSlackNs));
    }
    while (pollux::now_ns() < due) {
    }
    while (pub->offer(payload, sizeof payload) < 0) {
    }
  }
  consumer.join();
  stop.store(true, std::memory_order_release);
  if (recorder.joinable()) recorder.join();
  if (rec) {
    (void)rec->stop();
    r.recorded = rec->status().messages;
  }
  std::error_code ec;
  std::filesystem::remove_all(rec_dir, ec);
  if (!pin_error.empty() && r.error.empty()) r.error = "--latency-cores: " + pin_error;
  return r;
}

// Late-join catch-up: a recording of `history` 32-byte messages (written with RecordingWriter, left
// in state "recording" so that a Recorder resumes it), a Recorder on its own thread, a publisher
// thread publishing at `rate` messages/s (1 ms batches) into the same stream, and a
// LateJoinSubscriber from the earliest message on this thread: how long until it is live, and
// its delivery rate while replaying.
struct CatchUpResult {
  double seconds = 0;  // open to live
  std::uint64_t replayed = 0, live = 0, published = 0;
  std::string error;
};
CatchUpResult catch_up(const std::string& dir, std::uint64_t history, std::uint64_t rate, std::uint64_t run) {
  CatchUpResult r;
  auto ctx =
      pollux::Context::from_string(absl::StrCat("[runtime]\nname = \"bench-catchup-", ::getpid(), "-", run,
                                                "\"\nthreading = \"inline\"\nidle = \"yield\"\n"
                                                "[shm]\nflow_control = \"backpressure\"\nlog_size = \"16MiB\"\n"),
                                   "catch-up.toml");
  if (!ctx.ok()) {
    r.error = std::string(ctx.status().message());
    return r;
  }
  const std::string rec_dir = absl::StrCat(dir, "/catchup-", run);
  std::filesystem::create_directories(rec_dir);
  const std::uint32_t stream = (*ctx)->stream_id("catchup");
  std::uint64_t id = 0;
  auto added = archive::Catalog::update(rec_dir, [&](archive::Catalog& c) {
    archive::RecordingInfo& info = c.add(stream, "catchup", 128ull << 20);
    info.state = archive::RecordingState::kRecording;
    id = info.id;
    return absl::OkStatus();
  });
  if (!added.ok()) {
    r.error = std::string(added.status().message());
    return r;
  }
  {
    archive::WriterOptions o;
    o.directory = rec_dir;
    o.recording_id = id;
    o.stream_id = stream;
    auto w = archive::RecordingWriter::open(o);
    if (!w.ok()) {
      r.error = std::string(w.status().message());
      return r;
    }
    const std::byte body[32] = {};
    FrameHeader h{};
    const std::int64_t t0 = Clock::now_ns() - static_cast<std::int64_t>(history) * 1000;
    for (std::uint64_t i = 1; i <= history; ++i) {
      pollux::core::write_frame_header(&h, kFrameHeaderSize + 32, 0, stream, 0x5eed, t0 + static_cast<std::int64_t>(i));
      h.sequence = i;
      (*w)->append_frame(h, body, 32);
      if (i % 4096 == 0) (*w)->flush(Clock::now_ns());
    }
    const std::uint32_t last = (*w)->segment_index();
    if (absl::Status s = (*w)->close(); !s.ok()) {
      r.error = std::string(s.message());
      return r;
    }
    (void)archive::Catalog::update(rec_dir, [&](archive::Catalog& c) {
      c.find(id)->last_segment = last;
      return absl::OkStatus();
    });
  }
  pollux::RecordingOptions ro;
  ro.topic = "catchup";
  ro.directory = rec_dir;
  auto rec = pollux::Recorder::start(**ctx, ro);
  if (!rec.ok()) {
    r.error = std::string(rec.status().message());
    return r;
  }
  auto pub = (*ctx)->publisher("catchup");
  if (!pub.ok()) {
    r.error = std::string(pub.status().message());
    return r;
  }
  while (!pub->is_connected()) pub->service();
  std::atomic<bool> stop{false};
  std::thread recorder([&] {
    while (!stop.load(std::memory_order_acquire)) {
      if ((*rec)->poll(4096) == 0) std::this_thread::yield();
    }
  });
  std::atomic<std::uint64_t> published{0};
  std::thread publisher([&] {
    const std::byte body[32] = {};
    const std::uint64_t per_ms = std::max<std::uint64_t>(1, rate / 1000);
    auto next = std::chrono::steady_clock::now();
    while (!stop.load(std::memory_order_acquire)) {
      for (std::uint64_t k = 0; k < per_ms; ++k) {
        while (pub->offer(body, sizeof body) < 0 && !stop.load(std::memory_order_acquire)) std::this_thread::yield();
      }
      published.fetch_add(per_ms, std::memory_order_relaxed);
      next += std::chrono::milliseconds(1);
      std::this_thread::sleep_until(next);
    }
  });
  pollux::LateJoinOptions lo;
  lo.directory = rec_dir;
  const auto t0 = std::chrono::steady_clock::now();
  auto join = pollux::LateJoinSubscriber::open(**ctx, "catchup", lo);
  if (!join.ok()) {
    r.error = std::string(join.status().message());
  } else {
    std::uint64_t n = 0;
    while (std::string_view((*join)->state()) != "live") {
      if ((*join)->poll([&](const pollux::Message&) { ++n; }, 4096) == 0) std::this_thread::yield();
    }
    r.seconds = seconds_since(t0);
    const pollux::LateJoinStatus st = (*join)->status();
    r.replayed = st.replayed;
    r.live = st.live;
  }
  r.published = published.load();
  stop.store(true, std::memory_order_release);
  publisher.join();
  recorder.join();
  (void)(*rec)->stop();
  std::error_code ec;
  std::filesystem::remove_all(rec_dir, ec);
  return r;
}

// Bytes/s of `crc` over a 64 KiB buffer, for at least `seconds`.
template <class F>
double crc_rate(F crc, double seconds) {
  std::vector<unsigned char> buf(64 * 1024);
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<unsigned char>(i * 131 + 7);
  std::uint32_t c = 0;
  std::uint64_t bytes = 0;
  const auto t0 = std::chrono::steady_clock::now();
  double s = 0;
  do {
    for (int k = 0; k < 64; ++k) c = crc(buf.data(), buf.size(), c);
    bytes += 64 * buf.size();
    s = seconds_since(t0);
  } while (s < seconds);
  asm volatile("" : : "r"(c));
  return static_cast<double>(bytes) / s;
}

// Records/s of the writer's crc pattern for a 32-byte frame: the length field, the 32-byte
// header, the 32-byte payload, chained.
double crc_record_rate(double seconds) {
  unsigned char frame[64];
  for (int i = 0; i < 64; ++i) frame[i] = static_cast<unsigned char>(i * 13 + 3);
  std::uint32_t length = 64, c = 0;
  std::uint64_t n = 0;
  const auto t0 = std::chrono::steady_clock::now();
  double s = 0;
  do {
    for (int k = 0; k < 4096; ++k) {
      c = archive::crc32c(frame + 32, 32, archive::crc32c(frame, 32, archive::crc32c(&length, sizeof length, c)));
      asm volatile("" : "+r"(c));
    }
    n += 4096;
    s = seconds_since(t0);
  } while (s < seconds);
  return static_cast<double>(n) / s;
}

constexpr char kCases[] = R"(Cases (one thread; MB = 10^6 bytes, a record's bytes as written: header, body, padding):
  record-32   RecordingWriter::append_frame, 32-byte payloads, FsyncPolicy::kNone, flush() every
              --flush-every frames; rate without close() ("unsynced") and with it ("synced":
              the last fdatasync and the index). Each segment roll fdatasyncs the sealed segment
              whatever the policy: those appends are timed apart (roll_s). Target >= 10M msg/s.
  record-1k   the same with 1 KiB payloads and --large-count frames. Target >= 80% of disk-seq.
  disk-seq    a file of record-1k's size in the same directory, 1 MiB sequential pwrites, then
              fdatasync: MB/s without and with the sync; a plain file, then a preallocated one
              (posix_fallocate, timed, as the writer's segments). record-1k is compared with the
              faster synced to synced (both durable), unsynced to unsynced for reference.
  replay      SegmentReader::next over record-32's segments (each record checked: bounds, magic,
              length, crc32c), page cache warm: the read side of a replay alone, nothing
              delivered to a subscriber.
  replay-shm  pollux::Replay (Pace::kMax) of record-32's recording into a shm subscriber on a
              second thread (inline threading, back-pressure): until the subscriber has every
              message. Target >= 20M msg/s.
  live-latency  shm (inline, back-pressure) one-way latency of --latency-count 32-byte messages at
              --latency-rate per second, with a Recorder of the stream on its own thread (as a
              context's [[recordings]] runs it: Recorder::run), without, and with a thread that only
              sleeps 1 ms at a time ("waker": the recorder thread's scheduling cost without its
              work), interleaved --runs times. Targets (attached / detached): p50 within 5%, p99
              within 20%.
  catch-up    a LateJoinSubscriber from the earliest of --catchup-history recorded messages while a
              publisher adds --catchup-rate per second (a Recorder records them into the same
              recording): seconds until it is live, and its rate while replaying.
  crc         crc32c bytes/s over a 64 KiB buffer, hardware instruction and portable table;
              records/s of the writer's crc calls for a 32-byte frame.
Files go to a fresh directory made under --dir (default /tmp), removed at the end (--keep keeps it).)";

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t count = 20'000'000, large_count = 1'000'000, flush_every = 256, segment_mib = 128, runs = 1;
  std::uint64_t chunk_kib = 1024, latency_count = 200'000, latency_rate = 100'000;
  std::uint64_t catchup_history = 10'000'000, catchup_rate = 1'000'000;
  double crc_seconds = 0.5;
  std::string dir = "/tmp", cases = "record-32,replay,replay-shm,record-1k,disk-seq,crc", json_path;
  bool keep = false, latency_sleep = false;
  std::string latency_cores_text, replay_cores_text;
  LatencyCores latency_cores;
  pollux::bench::Cli cli("pollux-bench-record",
                         "pollux-bench-record: recording throughput (RecordingWriter) and replay read rate\n"
                         "(SegmentReader), next to the disk's sequential write bandwidth and crc32c's speed\n"
                         "measured in the same run. The default run writes about 4.6 GB and takes 10-30 s.");
  cli.text("--dir", &dir, "DIR", "file system to measure: a fresh directory is made in DIR and removed at the end")
      .count("--count", &count, "frames of record-32 (and read back by replay)")
      .count("--large-count", &large_count, "frames of record-1k (disk-seq writes as many bytes)")
      .count("--flush-every", &flush_every, "frames between flush() calls (a Recorder's poll batch)", 1, 1u << 20)
      .count("--segment-mib", &segment_mib, "segment size, MiB", 1, 16384)
      .count("--chunk-kib", &chunk_kib, "disk-seq's pwrite size, KiB", 4, 1u << 20)
      .count("--runs", &runs, "rounds of every case, interleaved", 1, 100)
      .real("--crc-seconds", &crc_seconds, "S", "seconds per crc measurement", 0.01, 60)
      .count("--latency-count", &latency_count, "live-latency: messages per run")
      .count("--latency-rate", &latency_rate, "live-latency: messages per second (open loop)", 1, 10'000'000)
      .toggle("--latency-sleep", &latency_sleep,
              "live-latency: the publisher sleeps until 60 us before each message's time instead of spinning "
              "(use with a rate below ~10,000/s)")
      .text("--replay-cores", &replay_cores_text, "R,S",
            "replay-shm: OS CPUs of the replaying thread and of the subscriber (-1 = unpinned); default: both "
            "unpinned")
      .text("--latency-cores", &latency_cores_text, "P,S,R",
            "live-latency: OS CPUs of the publisher, the subscriber and the recorder (or waker) threads, e.g. 0,1,0 "
            "(the recorder on the publisher's core, where runtime.recording_cores would put it; -1 = unpinned); "
            "default: all unpinned")
      .count("--catchup-history", &catchup_history, "catch-up: messages recorded before the late joiner opens")
      .count("--catchup-rate", &catchup_rate, "catch-up: the live publisher's messages per second", 1000, 10'000'000)
      .list("--cases", &cases,
            {"record-32", "replay", "replay-shm", "record-1k", "disk-seq", "live-latency", "catch-up", "crc"},
            "cases to run, comma-separated")
      .toggle("--keep", &keep, "keep the directory and its recordings (its path is printed)")
      .text("--json", &json_path, "FILE",
            "also write JSON lines: one object per case and run (msgs_per_s, mb_per_s, ...), one\n"
            "per comparison with a target (\"ratio\" lines)")
      .epilog(kCases)
      .parse(argc, argv);
  auto want = [&](const char* c) { return ("," + cases + ",").find(std::string(",") + c + ",") != std::string::npos; };
  int replay_cores[2] = {-1, -1};
  // --replay-cores R,S and --latency-cores P,S,R: CPU numbers, -1 = unpinned.
  auto parse_cpus = [](const std::string& text, std::initializer_list<int*> slots) {
    std::size_t k = 0;
    bool ok = true;
    for (absl::string_view part : absl::StrSplit(text, ',')) {
      int* const slot = k < slots.size() ? slots.begin()[k] : nullptr;
      ok = ok && slot != nullptr && absl::SimpleAtoi(part, slot) && *slot >= -1 && *slot < CPU_SETSIZE;
      ++k;
    }
    return ok && k == slots.size();
  };
  if (!replay_cores_text.empty() && !parse_cpus(replay_cores_text, {&replay_cores[0], &replay_cores[1]})) {
    std::fprintf(stderr, "pollux-bench-record: --replay-cores wants two CPU numbers R,S (-1 = unpinned), not '%s'\n",
                 replay_cores_text.c_str());
    return 2;
  }
  if (!latency_cores_text.empty() &&
      !parse_cpus(latency_cores_text, {&latency_cores.publisher, &latency_cores.subscriber, &latency_cores.recorder})) {
    std::fprintf(stderr,
                 "pollux-bench-record: --latency-cores wants three CPU numbers P,S,R (-1 = unpinned), not '%s'\n",
                 latency_cores_text.c_str());
    return 2;
  }
  Clock::init();
  std::printf("machine: %s\n", pollux::bench::machine_description().c_str());
  pollux::bench::JsonLines json(cli.program(), argc, argv);

  std::string work = dir + "/pollux-bench-record.XXXXXX";
  if (::mkdtemp(work.data()) == nullptr) {
    std::fprintf(stderr, "pollux-bench-record: cannot make a directory in %s: %s\n", dir.c_str(), std::strerror(errno));
    return 1;
  }
  std::printf("directory: %s; flush every %llu frames, %llu MiB segments, FsyncPolicy::kNone\n", work.c_str(),
              static_cast<unsigned long long>(flush_every), static_cast<unsigned long long>(segment_mib));
  std::printf("crc32c: %s\n", archive::crc32c_hardware() ? "hardware (SSE4.2)" : "portable table");
  const std::uint64_t segment_size = segment_mib << 20;
  int status = 0;
  auto failed = [&](const char* what, const std::string& why) {
    std::fprintf(stderr, "pollux-bench-record: %s: %s\n", what, why.c_str());
    status = 1;
  };
  auto record_case = [&](const char* name, std::uint32_t payload, std::uint64_t n, std::uint64_t run,
                         RecordResult* out) {
    // In the catalog, so that a Replay finds it (ids are the catalog's, 1, 2, ...).
    std::uint64_t id = 0;
    absl::StatusOr<archive::Catalog> added = archive::Catalog::update(work, [&](archive::Catalog& c) {
      id = c.add(1, name, segment_size).id;
      return absl::OkStatus();
    });
    if (!added.ok()) {
      failed(name, std::string(added.status().message()));
      return std::uint64_t{0};
    }
    const RecordResult r = record(work, id, n, payload, flush_every, segment_size);
    if (!r.error.empty()) {
      failed(name, r.error);
      return std::uint64_t{0};
    }
    (void)archive::Catalog::update(work, [&](archive::Catalog& c) {
      archive::RecordingInfo* info = c.find(id);
      info->state = archive::RecordingState::kStopped;
      info->last_segment = static_cast<std::uint32_t>(r.segments - 1);
      info->frames = r.frames;
      return absl::OkStatus();
    });
    const auto frames = static_cast<double>(r.frames), mb = static_cast<double>(r.bytes) / 1e6;
    const double synced_s = r.append_s + r.close_s, unrolled_s = r.append_s - r.roll_s;
    std::printf(
        "%-9s run %llu: %llu frames, %.1f MB in %llu segments (%llu pwrites)\n"
        "    unsynced %7.2f M msg/s %8.1f MB/s (%.3f s; %llu rolls %.3f s; without them %.2f M msg/s)\n"
        "    synced   %7.2f M msg/s %8.1f MB/s (close %.3f s)\n"
        "    cpu      %7.2f M msg/s per CPU-second (%.3f s of this thread's CPU time over the unsynced part)\n",
        name, static_cast<unsigned long long>(run), static_cast<unsigned long long>(r.frames), mb,
        static_cast<unsigned long long>(r.segments), static_cast<unsigned long long>(r.writes),
        frames / r.append_s / 1e6, mb / r.append_s, r.append_s, static_cast<unsigned long long>(r.rolls), r.roll_s,
        frames / unrolled_s / 1e6, frames / synced_s / 1e6, mb / synced_s, r.close_s, frames / r.cpu_s / 1e6, r.cpu_s);
    json.add(pollux::bench::JsonObject()
                 .str("case", name)
                 .num("run", run)
                 .num("count", r.frames)
                 .num("payload_bytes", payload)
                 .num("flush_every", flush_every)
                 .num("segment_bytes", segment_size)
                 .num("record_bytes", r.bytes)
                 .num("segments", r.segments)
                 .num("writes", r.writes)
                 .num("rolls", r.rolls)
                 .num("append_s", r.append_s)
                 .num("roll_s", r.roll_s)
                 .num("close_s", r.close_s)
                 .num("cpu_s", r.cpu_s)
                 .num("msgs_per_cpu_s", frames / r.cpu_s)
                 .num("msgs_per_s", frames / r.append_s)
                 .num("mb_per_s", mb / r.append_s)
                 .num("msgs_per_s_without_rolls", frames / unrolled_s)
                 .num("msgs_per_s_synced", frames / synced_s)
                 .num("mb_per_s_synced", mb / synced_s));
    *out = r;
    return id;
  };

  for (std::uint64_t run = 1; run <= runs && status == 0; ++run) {
    if (want("record-32") || want("replay") || want("replay-shm")) {
      RecordResult r;
      const std::uint64_t id = record_case("record-32", 32, count, run, &r);
      if (id != 0) {
        const double rate = static_cast<double>(r.frames) / r.append_s;
        const bool met = rate >= kTargetRecordMsgsPerS;
        std::printf("    target >= %.0fM msg/s (unsynced): %s\n", kTargetRecordMsgsPerS / 1e6, met ? "met" : "MISSED");
        json.add(pollux::bench::JsonObject()
                     .str("ratio", "record-32 msgs_per_s / target")
                     .num("run", run)
                     .num("value", rate / kTargetRecordMsgsPerS)
                     .num("target_msgs_per_s", kTargetRecordMsgsPerS)
                     .flag("met", met));
      }
      if (id != 0 && want("replay")) {
        const ReplayResult p = replay(work, id, r.segments, r.frames);
        if (!p.error.empty()) {
          failed("replay", p.error);
        } else {
          const double rate = static_cast<double>(p.frames) / p.seconds;
          std::printf(
              "replay    run %llu: %llu frames in %.3f s: %7.2f M msg/s %8.1f MB/s (read side alone)\n"
              "    cpu      %7.2f M msg/s per CPU-second (%.3f s)\n",
              static_cast<unsigned long long>(run), static_cast<unsigned long long>(p.frames), p.seconds, rate / 1e6,
              static_cast<double>(p.bytes) / p.seconds / 1e6, static_cast<double>(p.frames) / p.cpu_s / 1e6, p.cpu_s);
          json.add(pollux::bench::JsonObject()
                       .str("case", "replay")
                       .num("run", run)
                       .num("count", p.frames)
                       .num("payload_bytes", 32)
                       .num("record_bytes", p.bytes)
                       .num("seconds", p.seconds)
                       .num("cpu_s", p.cpu_s)
                       .num("msgs_per_cpu_s", static_cast<double>(p.frames) / p.cpu_s)
                       .num("msgs_per_s", rate)
                       .num("mb_per_s", static_cast<double>(p.bytes) / p.seconds / 1e6)
                       .num("target_msgs_per_s", kTargetReplayMsgsPerS)
                       .flag("target_met", rate >= kTargetReplayMsgsPerS));
        }
      }
      if (id != 0 && want("replay-shm")) {
        const ReplayResult p = replay_shm(work, id, r.frames, 32, replay_cores[0], replay_cores[1], run);
        if (!p.error.empty()) {
          failed("replay-shm", p.error);
        } else {
          const double rate = static_cast<double>(p.frames) / p.seconds;
          std::printf(
              "replay-shm run %llu: %llu messages in %.3f s: %7.2f M msg/s into a shm subscriber (target >= %.0fM: "
              "%s)\n    cpu      %7.2f M msg/s per CPU-second of the replaying thread (%.3f s); the log was full %llu "
              "times, the subscriber found it empty %llu times\n",
              static_cast<unsigned long long>(run), static_cast<unsigned long long>(p.frames), p.seconds, rate / 1e6,
              kTargetReplayMsgsPerS / 1e6, rate >= kTargetReplayMsgsPerS ? "met" : "MISSED",
              static_cast<double>(p.frames) / p.cpu_s / 1e6, p.cpu_s, static_cast<unsigned long long>(p.back_pressured),
              static_cast<unsigned long long>(p.empty_polls));
          json.add(pollux::bench::JsonObject()
                       .str("case", "replay-shm")
                       .num("run", run)
                       .num("count", p.frames)
                       .num("payload_bytes", 32)
                       .num("seconds", p.seconds)
                       .num("cpu_s", p.cpu_s)
                       .num("msgs_per_s", rate)
                       .num("log_full", p.back_pressured)
                       .num("subscriber_empty_polls", p.empty_polls)
                       .num("target_msgs_per_s", kTargetReplayMsgsPerS)
                       .flag("target_met", rate >= kTargetReplayMsgsPerS));
        }
      }
      if (id != 0 && !keep) {
        for (std::uint32_t s = 0; s < r.segments; ++s) {
          ::unlink(archive::segment_path(work, id, s).c_str());
          ::unlink(archive::index_path(work, id, s).c_str());
        }
      }
    }
    // record-1k and its floor, interleaved: the floor first when the run is odd. The floor is
    // measured twice, into a plain file and into a preallocated one (as the writer's segments
    // are); record-1k is held against the faster of the two (synced).
    RecordResult big;
    DiskResult disk[2];
    bool have_big = false;
    const std::uint64_t big_bytes = large_count * archive::record_size(kFrameHeaderSize + 1024);
    auto run_disk = [&] {
      for (int prealloc = 0; prealloc < 2; ++prealloc) {
        DiskResult& d = disk[prealloc];
        d = disk_seq(work, std::max<std::uint64_t>(have_big ? big.bytes : big_bytes, chunk_kib << 10), chunk_kib << 10,
                     prealloc != 0);
        if (!d.error.empty()) {
          failed("disk-seq", d.error);
          return;
        }
        const double mb = static_cast<double>(d.bytes) / 1e6;
        std::printf(
            "disk-seq  run %llu: %.1f MB, %llu KiB pwrites%s\n"
            "    unsynced %8.1f MB/s (%.3f s; %.3f s of this thread's CPU time)\n"
            "    synced   %8.1f MB/s (fdatasync %.3f s)\n",
            static_cast<unsigned long long>(run), mb, static_cast<unsigned long long>(chunk_kib),
            prealloc != 0 ? ", file preallocated (posix_fallocate, timed)" : "", mb / d.write_s, d.write_s, d.cpu_s,
            mb / (d.write_s + d.sync_s), d.sync_s);
        json.add(pollux::bench::JsonObject()
                     .str("case", "disk-seq")
                     .num("run", run)
                     .flag("preallocated", prealloc != 0)
                     .num("bytes", d.bytes)
                     .num("chunk_bytes", chunk_kib << 10)
                     .num("write_s", d.write_s)
                     .num("sync_s", d.sync_s)
                     .num("cpu_s", d.cpu_s)
                     .num("mb_per_s", mb / d.write_s)
                     .num("mb_per_s_synced", mb / (d.write_s + d.sync_s)));
      }
    };
    if (want("disk-seq") && run % 2 == 1) run_disk();
    if (want("record-1k")) {
      const std::uint64_t id = record_case("record-1k", 1024, large_count, run, &big);
      have_big = id != 0;
      if (have_big && !keep) {
        for (std::uint32_t s = 0; s < big.segments; ++s) {
          ::unlink(archive::segment_path(work, id, s).c_str());
          ::unlink(archive::index_path(work, id, s).c_str());
        }
      }
    }
    if (want("disk-seq") && run % 2 == 0) run_disk();
    if (have_big && want("disk-seq") && disk[0].bytes > 0 && disk[1].bytes > 0) {
      auto synced_mb_s = [](const DiskResult& d) { return static_cast<double>(d.bytes) / (d.write_s + d.sync_s); };
      const DiskResult& d = synced_mb_s(disk[1]) > synced_mb_s(disk[0]) ? disk[1] : disk[0];
      const auto mb_big = static_cast<double>(big.bytes) / 1e6, mb_disk = static_cast<double>(d.bytes) / 1e6;
      const double synced = (mb_big / (big.append_s + big.close_s)) / (mb_disk / (d.write_s + d.sync_s));
      const double unsynced = (mb_big / big.append_s) / (mb_disk / d.write_s);
      const bool met = synced >= kTargetDiskFraction;
      const char* which = &d == &disk[1] ? "preallocated" : "plain";
      std::printf("record-1k / disk-seq (%s, the faster synced): synced %.3f (target >= %.2f: %s), unsynced %.3f\n",
                  which, synced, kTargetDiskFraction, met ? "met" : "MISSED", unsynced);
      json.add(pollux::bench::JsonObject()
                   .str("ratio", "record-1k / disk-seq")
                   .num("run", run)
                   .str("floor", which)
                   .num("synced", synced)
                   .num("unsynced", unsynced)
                   .num("target", kTargetDiskFraction)
                   .str("compared", "synced")
                   .flag("met", met));
    }
  }
  if (want("catch-up") && status == 0) {
    for (std::uint64_t run = 1; run <= runs && status == 0; ++run) {
      const CatchUpResult c = catch_up(work, catchup_history, catchup_rate, run);
      if (!c.error.empty()) {
        failed("catch-up", c.error);
        break;
      }
      std::printf(
          "catch-up  run %llu: %llu recorded + live at %llu/s: live after %.3f s (%llu replayed, %llu live "
          "before the switch; %.2f M msg/s while replaying; %llu published meanwhile)\n",
          static_cast<unsigned long long>(run), static_cast<unsigned long long>(catchup_history),
          static_cast<unsigned long long>(catchup_rate), c.seconds, static_cast<unsigned long long>(c.replayed),
          static_cast<unsigned long long>(c.live), static_cast<double>(c.replayed) / c.seconds / 1e6,
          static_cast<unsigned long long>(c.published));
      json.add(pollux::bench::JsonObject()
                   .str("case", "catch-up")
                   .num("run", run)
                   .num("history", catchup_history)
                   .num("rate", catchup_rate)
                   .num("seconds_to_live", c.seconds)
                   .num("replayed", c.replayed)
                   .num("published", c.published)
                   .num("replay_msgs_per_s", static_cast<double>(c.replayed) / c.seconds));
    }
  }
  if (want("live-latency") && status == 0) {
    // Detached, waker and attached interleaved (the order rotating), `runs` times each.
    static constexpr const char* kModes[] = {"detached", "waker", "attached"};
    pollux::Histogram all[3];
    for (std::uint64_t run = 1; run <= runs && status == 0; ++run) {
      for (int k = 0; k < 3 && status == 0; ++k) {
        const int mode = static_cast<int>((run + static_cast<std::uint64_t>(k)) % 3);
        const bool attached = mode == 2;
        LatencyResult l =
            live_latency(work, latency_count, latency_rate, attached, mode == 1, latency_sleep, latency_cores, run);
        if (!l.error.empty()) {
          failed("live-latency", l.error);
          break;
        }
        if (attached && l.recorded != latency_count) {
          failed("live-latency", absl::StrCat("the recorder recorded ", l.recorded, " of ", latency_count));
        }
        std::printf("live-latency run %llu %-9s p50 %6lld ns  p99 %7lld ns  p99.9 %7lld ns  max %8lld ns%s\n",
                    static_cast<unsigned long long>(run), kModes[mode], static_cast<long long>(l.h.percentile(50)),
                    static_cast<long long>(l.h.percentile(99)), static_cast<long long>(l.h.percentile(99.9)),
                    static_cast<long long>(l.h.max()),
                    attached ? absl::StrCat(" (", l.recorded, " recorded)").c_str() : "");
        json.add(pollux::bench::JsonObject()
                     .str("case", "live-latency")
                     .num("run", run)
                     .str("mode", kModes[mode])
                     .flag("recorder_attached", attached)
                     .num("count", latency_count)
                     .num("rate", latency_rate)
                     .flag("publisher_sleeps", latency_sleep)
                     .num("p50_ns", l.h.percentile(50))
                     .num("p99_ns", l.h.percentile(99))
                     .num("p999_ns", l.h.percentile(99.9))
                     .num("max_ns", l.h.max()));
        all[mode].merge(l.h);
      }
    }
    auto ratio = [&](int a, int b, const char* name, bool target) {
      if (all[a].count() == 0 || all[b].count() == 0) return;
      const double p50 = static_cast<double>(all[a].percentile(50)) / static_cast<double>(all[b].percentile(50));
      const double p99 = static_cast<double>(all[a].percentile(99)) / static_cast<double>(all[b].percentile(99));
      if (target) {
        std::printf("live-latency %s (all runs): p50 %.3f (target <= 1.05: %s), p99 %.3f (target <= 1.20: %s)\n", name,
                    p50, p50 <= 1.05 ? "met" : "MISSED", p99, p99 <= 1.20 ? "met" : "MISSED");
      } else {
        std::printf("live-latency %s (all runs): p50 %.3f, p99 %.3f\n", name, p50, p99);
      }
      pollux::bench::JsonObject o;
      o.str("ratio", absl::StrCat("live-latency ", name)).num("p50", p50).num("p99", p99);
      if (target) o.flag("p50_met", p50 <= 1.05).flag("p99_met", p99 <= 1.20);
      json.add(o);
    };
    ratio(2, 0, "attached / detached", true);
    ratio(1, 0, "waker / detached", false);
    ratio(2, 1, "attached / waker", false);
  }
  if (want("crc") && status == 0) {
    const double hw = archive::crc32c_hardware() ? crc_rate(archive::crc32c, crc_seconds) : 0;
    const double sw = crc_rate(archive::crc32c_portable, crc_seconds);
    const double per_record = crc_record_rate(crc_seconds);
    std::printf(
        "crc32c 64 KiB: hardware %.2f GB/s, portable %.2f GB/s; 32-byte frame's record crc: %.1f ns (%.1f M/s)\n",
        hw / 1e9, sw / 1e9, 1e9 / per_record, per_record / 1e6);
    json.add(pollux::bench::JsonObject()
                 .str("case", "crc")
                 .flag("hardware", archive::crc32c_hardware())
                 .num("hardware_bytes_per_s", hw)
                 .num("portable_bytes_per_s", sw)
                 .num("record32_crcs_per_s", per_record));
  }
  if (keep) {
    std::printf("kept %s\n", work.c_str());
  } else {
    std::error_code ec;
    std::filesystem::remove_all(work, ec);
  }
  if (!json.write(json_path)) return 1;
  return status;
}
