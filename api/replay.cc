// pollux::Replay (pollux/replay.h): a RecordingReader (core/archive) whose frames' payloads go to
// a publisher, paced by their recorded publish times.
#include "pollux/replay.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <span>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/archive/reader.h"
#include "core/clock.h"
#include "core/frame.h"
#include "pollux/publisher.h"
#include "pollux/types.h"

namespace pollux {
namespace detail {

namespace archive = core::archive;

class ReplayImpl {
 public:
  ReplayImpl(Publisher& p, const ReplayOptions& o, archive::RecordingReader r)
      : pub(&p), opt(o), reader(std::move(r)) {}

  Publisher* pub;
  ReplayOptions opt;
  archive::RecordingReader reader;
  // The range's end on the frames' clock (kTime), and the pace's factor (ns of replay per
  // recorded ns; 0 = no pacing).
  std::int64_t to_clock_ns = 0;
  double factor = 0;
  // The frame read but not yet published (due later, or refused by back-pressure): its body lies
  // in the reader's read window, which stays as it is until the reader reads again.
  bool pending = false;
  const std::byte* payload = nullptr;
  std::uint32_t payload_len = 0;
  std::uint64_t pending_seq = 0;
  std::int64_t due_ns = 0;
  // Pace origin: the first published frame's recorded time and when it was published.
  bool origin_set = false;
  std::int64_t origin_ts = 0, origin_now = 0;
  // Pace::kMax: frames read ahead and offered together (offer_batch), [head, count) not yet
  // taken by the publisher. Their bytes lie in the reader's read windows; a batch ends after the
  // reader moves to another segment or reads its file again, so every frame of it stays where
  // it is until the batch is taken (RecordingReader::loads()).
  static constexpr int kBatch = 64;
  std::span<const std::byte> batch[kBatch];
  std::uint64_t batch_seq[kBatch];
  int head = 0, count = 0;
  bool done = false;
  absl::Status error;
  ReplayStatus st;

  void finish() {
    done = true;
    if (std::string_view(st.state) == "replaying") st.state = "done";
  }
  void fail(const absl::Status& s) {
    done = true;
    st.state = "failed";
    st.error = std::string(s.message());
    error = s;
  }
  // `count` messages, recorded sequences first..last, `bytes` of payload, were published.
  void published(std::uint64_t first, std::uint64_t last, std::uint64_t count, std::uint64_t bytes) noexcept {
    if (st.messages == 0) st.first_sequence = first;
    st.last_sequence = last;
    st.messages += count;
    st.bytes += bytes;
  }
  // The publisher's answer `r` < 0 to the message of recorded sequence `seq`: back-pressure (try
  // again later; false) or a refusal that ends the replay (true).
  bool refused(std::int64_t r, std::uint64_t seq) {
    if (r == kBackPressured || r == kNotConnected || r == 0) {
      ++st.back_pressured;
      return false;
    }
    fail(absl::FailedPreconditionError(absl::StrCat("replay: the publisher refused message ", seq,
                                                    " of the recording (", std::string(result_name(r)), ")")));
    return true;
  }
  bool past_end(const core::FrameHeader& h) const {
    switch (opt.to.kind) {
      case ReplayPosition::Kind::kNone:
        return false;
      case ReplayPosition::Kind::kSequence:
        return h.sequence > opt.to.sequence;
      case ReplayPosition::Kind::kTime:
        return h.timestamp_ns > to_clock_ns;
    }
    return false;
  }
  // Reads the next frame into `pending`; false when there is none to publish now (the end, a
  // live recording's end for now, or an error).
  bool read_next(std::int64_t now) noexcept {
    archive::SegmentReader::Record rec;
    // Markers are counted and skipped; a run of them is bounded by what the recording holds,
    // and each pass consumes one record.
    for (;;) {
      switch (reader.next(&rec)) {
        case archive::RecordingReader::Next::kInvalid:
          fail(reader.error());
          return false;
        case archive::RecordingReader::Next::kEnd:
          if (reader.finished() || !opt.follow) finish();
          return false;
        case archive::RecordingReader::Next::kRecord:
          break;
      }
      if (rec.is_marker) {
        archive::Marker m;
        std::memcpy(&m, rec.body, sizeof m);
        if (m.kind == static_cast<std::uint16_t>(archive::MarkerKind::kGap)) {
          ++st.gap_markers;
          st.missing += m.count;
        } else {
          ++st.resume_markers;
        }
        continue;
      }
      core::FrameHeader h;
      std::memcpy(&h, rec.body, sizeof h);
      if (past_end(h)) {
        finish();
        return false;
      }
      const std::uint32_t skip = core::min_frame_length(h.flags);
      payload = rec.body + skip;
      payload_len = h.frame_length - skip;
      pending_seq = h.sequence;
      if (factor == 0 || h.timestamp_ns == 0) {
        due_ns = now;
      } else {
        if (!origin_set) {
          origin_set = true;
          origin_ts = h.timestamp_ns;
          origin_now = now;
        }
        due_ns = origin_now + static_cast<std::int64_t>(static_cast<double>(h.timestamp_ns - origin_ts) * factor);
      }
      pending = true;
      return true;
    }
  }
};

}  // namespace detail

Replay::Replay(std::unique_ptr<detail::ReplayImpl> impl) : impl_(std::move(impl)) {}
Replay::~Replay() = default;

absl::StatusOr<std::unique_ptr<Replay>> Replay::start(Publisher& publisher, const ReplayOptions& o) {
  if (o.directory.empty()) return absl::InvalidArgumentError("replay: no recording directory given");
  if (o.pace == ReplayOptions::Pace::kSpeed && !(o.speed > 0 && std::isfinite(o.speed))) {
    return absl::InvalidArgumentError(absl::StrCat("replay: speed ", o.speed, " must be a positive number"));
  }
  if (o.from.kind != ReplayPosition::Kind::kNone && o.to.kind == o.from.kind &&
      (o.from.kind == ReplayPosition::Kind::kSequence ? o.to.sequence < o.from.sequence
                                                      : o.to.wall_ns < o.from.wall_ns)) {
    return absl::InvalidArgumentError("replay: the range ends before it starts (to < from)");
  }
  absl::StatusOr<core::archive::RecordingReader> r = core::archive::RecordingReader::open(o.directory, o.recording_id);
  if (!r.ok()) return r.status();
  auto impl = std::make_unique<detail::ReplayImpl>(publisher, o, std::move(*r));
  core::archive::RecordingReader& rd = impl->reader;
  const std::int64_t offset = rd.wall_minus_clock_ns();
  if (o.to.kind == ReplayPosition::Kind::kTime) impl->to_clock_ns = o.to.wall_ns - offset;
  absl::Status s;
  if (o.from.kind == ReplayPosition::Kind::kSequence) {
    s = rd.seek(core::archive::RecordingReader::Key::kSequence, o.from.sequence);
  } else if (o.from.kind == ReplayPosition::Kind::kTime) {
    s = rd.seek(core::archive::RecordingReader::Key::kTime, static_cast<std::uint64_t>(o.from.wall_ns - offset));
  }
  if (!s.ok()) return s;
  switch (o.pace) {
    case ReplayOptions::Pace::kMax:
      impl->factor = 0;
      break;
    case ReplayOptions::Pace::kOriginal:
      impl->factor = 1;
      break;
    case ReplayOptions::Pace::kSpeed:
      impl->factor = 1.0 / o.speed;
      break;
  }
  return std::unique_ptr<Replay>(new Replay(std::move(impl)));
}

int Replay::poll(int limit) noexcept {
  detail::ReplayImpl& m = *impl_;
  const std::int64_t now = core::Clock::now_ns();
  int n = 0;
  if (m.factor == 0) {
    // As fast as the publisher takes them: batches.
    while (n < limit) {
      if (m.head == m.count) {
        if (m.done) break;
        m.head = m.count = 0;
        const std::uint32_t seg = m.reader.segment();
        const std::uint64_t loads = m.reader.loads();
        while (m.count < detail::ReplayImpl::kBatch && m.count < limit - n && m.read_next(now)) {
          m.batch[m.count] = {m.payload, m.payload_len};
          m.batch_seq[m.count++] = m.pending_seq;
          m.pending = false;
          if (m.reader.segment() != seg || m.reader.loads() != loads) break;
        }
        if (m.count == 0) break;
      }
      const std::int64_t r = m.pub->offer_batch({m.batch + m.head, static_cast<std::size_t>(m.count - m.head)});
      if (r <= 0) {
        if (m.refused(r, m.batch_seq[m.head])) m.head = m.count;
        break;
      }
      std::uint64_t bytes = 0;
      for (int i = m.head; i < m.head + static_cast<int>(r); ++i) bytes += m.batch[i].size();
      m.published(m.batch_seq[m.head], m.batch_seq[m.head + static_cast<int>(r) - 1], static_cast<std::uint64_t>(r),
                  bytes);
      m.head += static_cast<int>(r);
      n += static_cast<int>(r);
      if (m.head < m.count) {
        ++m.st.back_pressured;
        break;
      }
    }
    return n;
  }
  if (m.done) return 0;
  while (n < limit) {
    if (!m.pending && !m.read_next(now)) break;
    if (m.due_ns > now) break;
    const std::int64_t r = m.pub->offer(m.payload, m.payload_len);
    if (r < 0) {
      (void)m.refused(r, m.pending_seq);
      break;
    }
    m.pending = false;
    m.published(m.pending_seq, m.pending_seq, 1, m.payload_len);
    ++n;
  }
  return n;
}

bool Replay::done() const noexcept { return impl_->done && impl_->head == impl_->count; }

std::int64_t Replay::next_due_in_ns() const noexcept {
  const detail::ReplayImpl& m = *impl_;
  if (m.done && m.head == m.count) return -1;
  if (!m.pending) return 0;
  const std::int64_t d = m.due_ns - core::Clock::now_ns();
  return d > 0 ? d : 0;
}

absl::Status Replay::run(const std::function<bool()>& keep_going) {
  int idle = 0;
  while (!done()) {
    if (keep_going && !keep_going()) break;
    if (poll() > 0) {
      idle = 0;
      continue;
    }
    impl_->pub->service();
    const std::int64_t due = next_due_in_ns();
    if (due > 100'000) {
      // Paced: sleep most of the wait (100 ms at most, so that keep_going is asked), spin the
      // last 50 us.
      std::this_thread::sleep_for(std::chrono::nanoseconds(std::min<std::int64_t>(due - 50'000, 100'000'000)));
    } else if (++idle > 64) {
      // Back-pressure or a live recording's end: let the consumer (or the recorder) run.
      std::this_thread::sleep_for(std::chrono::microseconds(idle > 1024 ? 200 : 20));
    } else {
      std::this_thread::yield();
    }
  }
  return impl_->error;
}

ReplayStatus Replay::status() const { return impl_->st; }

}  // namespace pollux
