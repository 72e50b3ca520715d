// pollux::Recorder (pollux/recording.h): a subscriber whose messages go to a RecordingWriter
// (core/archive), with the recording's entry in the directory's catalog kept current.
#include "pollux/recording.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <future>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "api/internal.h"
#include "core/archive/catalog.h"
#include "core/archive/segment.h"
#include "core/clock.h"
#include "core/frame.h"
#include "core/process.h"
#include "core/topology.h"
#include "pollux/context.h"
#include "pollux/subscriber.h"

namespace pollux {
namespace detail {

namespace archive = core::archive;

// How often the catalog entry is brought up to date while recording.
constexpr std::int64_t kCatalogEveryNs = 1'000'000'000;

class RecorderImpl {
 public:
  RecordingOptions o;
  std::unique_ptr<Subscriber> sub;
  std::unique_ptr<archive::RecordingWriter> writer;
  std::uint64_t id = 0;
  std::uint32_t stream_id = 0;
  int lock_fd = -1;
  bool resumed = false;
  bool stopped = false;
  bool failed_noted = false;  // the catalog says "failed"
  std::uint32_t cataloged_segment = 0;
  std::int64_t next_catalog_ns = 0;
  std::uint64_t dropped = 0;

  ~RecorderImpl() {
    if (lock_fd >= 0) ::close(lock_fd);
  }

  // The catalog entry from the writer's state.
  absl::Status update_catalog(archive::RecordingState state) {
    const archive::WriterStats& st = writer->stats();
    const std::uint32_t seg = writer->segment_index();
    const std::string err = writer->error().ok() ? "" : std::string(writer->error().message());
    auto c = archive::Catalog::update(o.directory, [&](archive::Catalog& cat) {
      archive::RecordingInfo* r = cat.find(id);
      if (r == nullptr) return absl::NotFoundError(absl::StrCat("recording ", id, " left the catalog"));
      r->state = state;
      r->last_segment = seg;
      if (prior_first_sequence != 0) {
        r->first_sequence = prior_first_sequence;
        r->first_time_ns = prior_first_time_ns;
      } else if (st.first_sequence != 0) {
        r->first_sequence = st.first_sequence;
        r->first_time_ns = st.first_time_ns;
      }
      if (st.last_sequence != 0) {
        r->last_sequence = st.last_sequence;
        r->last_time_ns = st.last_time_ns;
      }
      r->frames = base_frames + st.frames;
      r->gaps = base_gaps + gaps;
      r->bytes = base_bytes + st.bytes;
      if (state != archive::RecordingState::kRecording) r->stopped_ns = core::wall_clock_ns();
      r->error = err;
      return absl::OkStatus();
    });
    cataloged_segment = seg;
    return c.status();
  }

  std::uint64_t base_frames = 0, base_gaps = 0, base_bytes = 0;  // what the recording held at resume
  std::uint64_t prior_first_sequence = 0;
  std::int64_t prior_first_time_ns = 0;
  std::uint64_t gaps = 0;
};

}  // namespace detail

namespace {

namespace archive = core::archive;
using detail::kCatalogEveryNs;

archive::FsyncPolicy fsync_policy(RecordingOptions::Fsync f) {
  switch (f) {
    case RecordingOptions::Fsync::kInterval:
      return archive::FsyncPolicy::kInterval;
    case RecordingOptions::Fsync::kEvery:
      return archive::FsyncPolicy::kEvery;
    case RecordingOptions::Fsync::kNone:
      break;
  }
  return archive::FsyncPolicy::kNone;
}

std::string lock_path(const std::string& dir, std::uint64_t id) { return absl::StrFormat("%s/%016x.lock", dir, id); }

// An exclusive, non-blocking flock on the recording's lock file: the fd, -1 when another
// process holds it (errno EWOULDBLOCK), -2 on another error (errno).
int try_lock(const std::string& dir, std::uint64_t id) {
  const int fd = ::open(lock_path(dir, id).c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0640);
  if (fd < 0) return -2;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    ::close(fd);
    errno = e;
    return e == EWOULDBLOCK ? -1 : -2;
  }
  return fd;
}

}  // namespace

Recorder::Recorder(std::unique_ptr<detail::RecorderImpl> impl) : impl_(std::move(impl)) {}

Recorder::~Recorder() {
  if (impl_ != nullptr && !impl_->stopped) (void)stop();
}

absl::StatusOr<std::unique_ptr<Recorder>> Recorder::start(Context& ctx, const RecordingOptions& options) {
  if (options.topic.empty()) return absl::InvalidArgumentError("recording: no topic");
  if (options.directory.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("recording of ", options.topic, ": no directory"));
  }
  std::error_code ec;
  std::filesystem::create_directories(options.directory, ec);
  if (ec) {
    return absl::PermissionDeniedError(absl::StrCat("recording of ", options.topic, ": cannot create the directory ",
                                                    options.directory, ": ", ec.message()));
  }
  auto impl = std::make_unique<detail::RecorderImpl>();
  impl->o = options;
  impl->stream_id = ctx.stream_id(options.topic);
  // Subscribe first: what is published from here on is delivered to us and so recorded.
  absl::StatusOr<Subscriber> sub = ctx.live_subscriber(options.topic);
  if (!sub.ok()) return sub.status();
  impl->sub = std::make_unique<Subscriber>(std::move(*sub));

  // Resume a recording of this stream that a dead recorder left, else a new one.
  archive::RecordingInfo chosen;
  int lock_fd = -1;
  auto cat = archive::Catalog::update(options.directory, [&](archive::Catalog& c) -> absl::Status {
    for (const archive::RecordingInfo& r : c.recordings()) {
      if (r.state != archive::RecordingState::kRecording || r.stream_id != impl->stream_id ||
          r.topic != options.topic) {
        continue;
      }
      const int fd = try_lock(options.directory, r.id);
      if (fd == -1) continue;  // a live recorder writes it
      if (fd == -2) {
        return absl::PermissionDeniedError(absl::StrCat(
            "recording ", r.id, ": lock file ", lock_path(options.directory, r.id), ": ", std::strerror(errno)));
      }
      lock_fd = fd;
      chosen = r;
      impl->resumed = true;
      return absl::OkStatus();
    }
    archive::RecordingInfo& r = c.add(impl->stream_id, options.topic, options.segment_size);
    r.state = archive::RecordingState::kRecording;
    r.started_ns = core::wall_clock_ns();
    const int fd = try_lock(options.directory, r.id);
    if (fd < 0) {
      return absl::PermissionDeniedError(absl::StrCat("recording ", r.id, ": lock file ",
                                                      lock_path(options.directory, r.id), ": ", std::strerror(errno)));
    }
    lock_fd = fd;
    chosen = r;
    return absl::OkStatus();
  });
  if (!cat.ok()) {
    return absl::Status(cat.status().code(),
                        absl::StrCat("recording of ", options.topic, ": ", cat.status().message()));
  }
  impl->lock_fd = lock_fd;
  impl->id = chosen.id;
  archive::WriterOptions wo;
  wo.directory = options.directory;
  wo.recording_id = chosen.id;
  wo.stream_id = impl->stream_id;
  // A resumed recording keeps its segment size (its files were made with it).
  wo.segment_size = impl->resumed ? chosen.segment_size : options.segment_size;
  wo.fsync = fsync_policy(options.fsync);
  wo.fsync_interval_ns = static_cast<std::int64_t>(options.fsync_interval_ms) * 1'000'000;
  if (impl->resumed) {
    wo.resume = true;
    std::uint32_t last = chosen.last_segment;
    while (std::filesystem::exists(archive::segment_path(options.directory, chosen.id, last + 1))) ++last;
    // Killed before its first segment was named: nothing to resume, start it.
    wo.resume = std::filesystem::exists(archive::segment_path(options.directory, chosen.id, last));
    wo.resume_segment = last;
    impl->base_gaps = chosen.gaps;
  }
  auto w = archive::RecordingWriter::open(wo);
  if (!w.ok()) {
    // The entry says why nothing gets recorded.
    const std::string why(w.status().message());
    (void)archive::Catalog::update(options.directory, [&](archive::Catalog& c) {
      if (archive::RecordingInfo* r = c.find(chosen.id)) {
        r->state = archive::RecordingState::kFailed;
        r->error = why;
        r->stopped_ns = core::wall_clock_ns();
      }
      return absl::OkStatus();
    });
    return absl::Status(w.status().code(), absl::StrCat("recording of ", options.topic, ": ", why));
  }
  impl->writer = std::move(*w);
  // What the recording already held: counted from its files, not from the catalog (which a
  // recorder that died had last brought up to date up to a second before).
  const archive::SegmentTotals& prior = impl->writer->stats().prior;
  impl->base_frames = prior.frames;
  impl->base_bytes = prior.bytes;
  impl->prior_first_sequence = prior.first_sequence;
  impl->prior_first_time_ns = prior.first_time_ns;
  if (absl::Status s = impl->update_catalog(archive::RecordingState::kRecording); !s.ok()) return s;
  impl->next_catalog_ns = core::Clock::now_ns() + kCatalogEveryNs;
  return std::unique_ptr<Recorder>(new Recorder(std::move(impl)));
}

int Recorder::poll(int limit) noexcept {
  detail::RecorderImpl& m = *impl_;
  if (m.stopped) return 0;
  archive::RecordingWriter& w = *m.writer;
  const int n = m.sub->poll(
      [&](const Message& msg) {
        core::FrameHeader h;
        core::write_frame_header(&h, static_cast<std::uint32_t>(core::kFrameHeaderSize + msg.payload.size()), 0,
                                 msg.stream_id, msg.session_id, msg.publisher_ns);
        h.sequence = msg.sequence;
        if (!w.append_frame(h, msg.payload.data(), static_cast<std::uint32_t>(msg.payload.size()))) ++m.dropped;
      },
      [&](const Gap& g) {
        if (g.reason == GapReason::kOverrun || g.count == 0) return;  // delivered (possibly torn), not missing
        if (w.append_gap(g.session_id, g.from, g.from + g.count - 1)) ++m.gaps;
      },
      limit);
  const std::int64_t now = core::Clock::now_ns();
  if (n > 0) (void)w.flush(now);
  // The catalog: when the writer moved to another segment or stopped on an error, and once a
  // second while it records.
  const bool failed = !w.error().ok();
  if ((failed && !m.failed_noted) || w.segment_index() != m.cataloged_segment || now >= m.next_catalog_ns) {
    m.next_catalog_ns = now + kCatalogEveryNs;
    if (failed) m.failed_noted = true;
    (void)m.update_catalog(failed ? archive::RecordingState::kFailed : archive::RecordingState::kRecording);
  }
  return n;
}

absl::Status Recorder::stop() {
  detail::RecorderImpl& m = *impl_;
  if (m.stopped) return m.writer->error();
  // What the subscriber still holds.
  for (int i = 0; i < 1024 && poll(4096) > 0; ++i) {
  }
  m.stopped = true;
  const absl::Status closed = m.writer->close();
  const bool failed = !closed.ok();
  absl::Status cat = m.update_catalog(failed ? archive::RecordingState::kFailed : archive::RecordingState::kStopped);
  m.sub->close();
  if (m.lock_fd >= 0) {
    ::close(m.lock_fd);
    m.lock_fd = -1;
  }
  if (!closed.ok()) return closed;
  return cat;
}

// A recorder is no stage of the live path: it may lag the stream a little, and it must not take
// a core from the threads that are (a spinning or yielding recorder thread on a machine whose
// cores the publisher and subscribers busy-poll preempts them: p99 x25 measured on 2 vCPUs,
// docs/BENCHMARKS.md). So it drains in batches: a round in which some recorder filled its batch
// goes on at once; any other round ends in a kIdleSleep sleep, so the thread wakes at most 1,000
// times a second and the recording lags the stream by about kIdleSleep (below kBatch /
// kIdleSleep = 4M messages/s; above, it never sleeps). An inline UDP subscriber is served only
// by these polls (datagrams read, NAKs sent): 1M messages behind 5% wire loss, drained every
// 1 ms, are recorded without a loss (udp_netns_test). While a recorder waits for its publisher,
// rounds are kAttachSleep apart: attaching takes polls, and what is published before it is not
// recorded.
void Recorder::run(std::span<Recorder* const> recorders, const std::atomic<bool>& stop) {
  constexpr int kBatch = 4096;
  constexpr std::chrono::microseconds kIdleSleep{1000};  // see above
  constexpr std::chrono::microseconds kAttachSleep{50};
  while (!stop.load(std::memory_order_acquire)) {
    bool full = false, attaching = false;
    for (Recorder* r : recorders) {
      full = r->poll(kBatch) >= kBatch || full;
      attaching = attaching || !r->connected();
    }
    if (!full) std::this_thread::sleep_for(attaching ? kAttachSleep : kIdleSleep);
  }
}

bool Recorder::connected() const noexcept { return !impl_->stopped && impl_->sub->is_connected(); }

RecordingStatus Recorder::status() const {
  const detail::RecorderImpl& m = *impl_;
  const archive::WriterStats& st = m.writer->stats();
  RecordingStatus s;
  s.recording_id = m.id;
  s.stream_id = m.stream_id;
  s.topic = m.o.topic;
  s.directory = m.o.directory;
  s.state = !m.writer->error().ok() ? "failed" : m.stopped ? "stopped" : "recording";
  s.resumed = m.resumed;
  s.messages = st.frames;
  s.gaps = m.gaps;
  s.bytes = st.bytes;
  s.dropped = m.dropped;
  s.first_sequence = st.first_sequence;
  s.last_sequence = st.last_sequence;
  s.segment = m.writer->segment_index();
  if (!m.writer->error().ok()) s.error = std::string(m.writer->error().message());
  return s;
}

namespace detail {

class RecordingRunner {
 public:
  std::vector<std::unique_ptr<Recorder>> recorders;
  std::atomic<bool> stop{false};
  std::thread thread;

  void run() {
    std::vector<Recorder*> all;
    for (auto& r : recorders) all.push_back(r.get());
    Recorder::run(all, stop);
  }
};

absl::StatusOr<RecordingRunnerPtr> start_recordings(Context& ctx, const core::Config& cfg) {
  if (cfg.recordings.empty()) return RecordingRunnerPtr();
  RecordingRunnerPtr runner(new RecordingRunner());
  for (const core::RecordingConfig& rc : cfg.recordings) {
    RecordingOptions o;
    o.topic = rc.topic;
    o.directory = rc.directory;
    o.segment_size = rc.segment_size;
    o.fsync = rc.fsync == core::RecordingFsync::kEvery      ? RecordingOptions::Fsync::kEvery
              : rc.fsync == core::RecordingFsync::kInterval ? RecordingOptions::Fsync::kInterval
                                                            : RecordingOptions::Fsync::kNone;
    o.fsync_interval_ms = rc.fsync_interval_ms;
    auto r = Recorder::start(ctx, o);
    if (!r.ok()) {
      for (auto& started : runner->recorders) (void)started->stop();
      return absl::Status(r.status().code(), absl::StrCat(cfg.source, ":", rc.line, ": [[recordings]] ", rc.topic, ": ",
                                                          r.status().message()));
    }
    runner->recorders.push_back(std::move(*r));
  }
  // The thread binds itself to runtime.recording_cores before it records anything, and says
  // whether it could: a core outside this process's cpuset is an error at start, not a thread
  // left running where it was not wanted.
  std::promise<absl::Status> bound;
  std::future<absl::Status> bound_result = bound.get_future();
  runner->thread = std::thread([p = runner.get(), cores = cfg.runtime.recording_cores, &bound] {
    pthread_setname_np(pthread_self(), "pollux-record");
    absl::Status s = core::topology().pin_current_thread(cores);
    const bool ok = s.ok();
    bound.set_value(std::move(s));
    if (ok) p->run();
  });
  if (absl::Status s = bound_result.get(); !s.ok()) {
    runner.reset();  // joins the thread (it returned) and stops the recorders
    return absl::Status(s.code(), absl::StrCat(cfg.source, ": runtime.recording_cores: ", s.message()));
  }
  return runner;
}

void RecordingRunnerDeleter::operator()(RecordingRunner* r) const noexcept {
  r->stop.store(true, std::memory_order_release);
  if (r->thread.joinable()) r->thread.join();
  for (auto& rec : r->recorders) (void)rec->stop();
  delete r;
}

std::vector<RecordingStatus> stop_recordings(RecordingRunnerPtr& r) noexcept {
  std::vector<RecordingStatus> out;
  if (r == nullptr) return out;
  r->stop.store(true, std::memory_order_release);
  if (r->thread.joinable()) r->thread.join();
  for (auto& rec : r->recorders) {
    (void)rec->stop();
    out.push_back(rec->status());
  }
  r.reset();
  return out;
}

}  // namespace detail

}  // namespace pollux
