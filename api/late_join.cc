// pollux::LateJoinSubscriber (pollux/late_join.h): a RecordingReader (core/archive) followed by a
// live Subscriber, merged by (session, sequence).
#include "pollux/late_join.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "api/internal.h"
#include "core/archive/catalog.h"
#include "core/archive/reader.h"
#include "core/frame.h"
#include "pollux/context.h"
#include "pollux/subscriber.h"

namespace pollux {
namespace detail {

namespace archive = core::archive;

class LateJoinImpl {
 public:
  enum class State : std::uint8_t { kReplaying, kCatchingUp, kMerged, kLive };

  LateJoinImpl(Context& c, std::string t, const LateJoinOptions& o, std::optional<archive::RecordingReader> r)
      : ctx(&c), topic(std::move(t)), opt(o), reader(std::move(r)) {}

  Context* ctx;
  std::string topic;
  LateJoinOptions opt;
  std::optional<archive::RecordingReader> reader;
  std::optional<Subscriber> sub;
  core::ErrorLog* errors = nullptr;
  State state = State::kReplaying;
  LateJoinStatus st;
  // In the context's counters file, scope "late join <topic>" (pollux-stat shows them): state is
  // 0 replaying, 1 catching_up, 2 merged, 3 live.
  AppCounter c_state, c_replayed, c_buffered, c_live, c_duplicates, c_missing, c_fell_behind;

  void make_counters() {
    const std::string scope = "late join " + topic;
    c_state = ctx->counter(scope, "state");
    c_replayed = ctx->counter(scope, "replayed");
    c_buffered = ctx->counter(scope, "buffered");
    c_live = ctx->counter(scope, "live");
    c_duplicates = ctx->counter(scope, "duplicates");
    c_missing = ctx->counter(scope, "missing");
    c_fell_behind = ctx->counter(scope, "fell_behind");
  }
  void publish_counters() noexcept {
    c_state.set(static_cast<std::uint64_t>(state));
    c_replayed.set(st.replayed);
    c_buffered.set(st.buffered);
    c_live.set(st.live);
    c_duplicates.set(st.duplicates);
    c_missing.set(st.missing);
    c_fell_behind.set(st.fell_behind);
  }

  // The last delivered message's identity: what comes next must follow it.
  bool have_last = false;
  std::uint32_t last_session = 0;
  std::uint64_t last_seq = 0;

  // Live messages kept while catching up: their bytes in `arena`, in arrival order.
  struct Kept {
    std::uint32_t stream_id, session_id;
    std::uint64_t sequence;
    std::int64_t publisher_ns;
    std::uint64_t offset;
    std::uint32_t length;
  };
  std::vector<std::byte> arena;
  std::vector<Kept> kept;
  std::size_t kept_next = 0;  // merged: the next kept message to deliver
  bool overflow = false;

  // Delivers `m` unless it was delivered already; counts what neither side had.
  bool deliver(void (*fn)(void*, const Message&), void* c, const Message& m, bool from_live) {
    if (have_last && m.session_id == last_session) {
      if (m.sequence <= last_seq) {
        ++st.duplicates;
        return false;
      }
      if (m.sequence != last_seq + 1) {
        st.missing += m.sequence - last_seq - 1;
        ++st.gaps;
      }
    }
    have_last = true;
    last_session = m.session_id;
    last_seq = m.sequence;
    st.last_sequence = m.sequence;
    ++(from_live ? st.live : st.replayed);
    fn(c, m);
    return true;
  }

  absl::Status subscribe_live() {
    absl::StatusOr<Subscriber> s = ctx->live_subscriber(topic);
    if (!s.ok()) return s.status();
    sub.emplace(std::move(*s));
    return absl::OkStatus();
  }

  void keep_live(int limit) {
    sub->poll(
        [&](const Message& m) {
          if (overflow) return;
          const std::uint64_t need = m.payload.size() + sizeof(core::FrameHeader);
          if (arena.size() + kept.size() * sizeof(core::FrameHeader) + need > opt.max_buffered_bytes) {
            overflow = true;
            return;
          }
          kept.push_back({m.stream_id, m.session_id, m.sequence, m.publisher_ns, arena.size(),
                          static_cast<std::uint32_t>(m.payload.size())});
          arena.insert(arena.end(), m.payload.begin(), m.payload.end());
          ++st.buffered;
        },
        limit);
  }

  // Catching up took more memory than allowed: start over from the recording's end.
  void fall_back() {
    ++st.fell_behind;
    if (errors != nullptr) {
      errors->record(absl::StatusCode::kResourceExhausted,
                     absl::StrCat("late join of ", topic, ": the live stream ran more than ", opt.max_buffered_bytes,
                                  " bytes ahead of the recording while catching up; replaying on and trying again"));
    }
    sub->close();
    sub.reset();
    kept.clear();
    arena.clear();
    overflow = false;
    state = State::kReplaying;
  }

  // The recorded frame `body` as a Message.
  static Message message_of(const std::byte* body) {
    core::FrameHeader h;
    std::memcpy(&h, body, sizeof h);
    const std::uint32_t skip = core::min_frame_length(h.flags);
    Message m;
    m.payload = {body + skip, h.frame_length - skip};
    m.stream_id = h.stream_id;
    m.session_id = h.session_id;
    m.sequence = h.sequence;
    m.publisher_ns = h.timestamp_ns;
    m.trace = nullptr;
    return m;
  }

  int poll(void (*fn)(void*, const Message&), void* c, int limit) noexcept {
    const int n = poll_once(fn, c, limit);
    publish_counters();
    return n;
  }
  int poll_once(void (*fn)(void*, const Message&), void* c, int limit) noexcept;

  std::uint32_t stream_id = 0;
  bool closed = false;
};

int LateJoinImpl::poll_once(void (*fn)(void*, const Message&), void* c, int limit) noexcept {
  int n = 0;
  if (closed) return 0;
  if (state == State::kLive) {
    return sub->poll(
        [&](const Message& m) {
          if (deliver(fn, c, m, true)) ++n;
        },
        limit);
  }
  if (state == State::kCatchingUp) {
    // A quarter of the budget for the live stream, all of it for the recording: the recording
    // is read faster than live messages are taken, so it catches up with a publisher that
    // back-pressure paces by its slowest consumer; a lossy one that outruns it overflows the
    // bound instead.
    keep_live(limit / 4 + 1);
    if (overflow) {
      fall_back();
      return 0;
    }
  }
  if (state == State::kMerged) {
    for (; kept_next < kept.size() && n < limit; ++kept_next) {
      const Kept& k = kept[kept_next];
      Message m;
      m.payload = {arena.data() + k.offset, k.length};
      m.stream_id = k.stream_id;
      m.session_id = k.session_id;
      m.sequence = k.sequence;
      m.publisher_ns = k.publisher_ns;
      m.trace = nullptr;
      n += deliver(fn, c, m, true) ? 1 : 0;
    }
    if (kept_next == kept.size()) {
      kept = {};
      arena = {};
      state = State::kLive;
    }
    return n;
  }
  // Replaying or catching up: the recording, bounded by `limit` records.
  archive::SegmentReader::Record rec;
  for (int i = 0; i < limit; ++i) {
    const archive::RecordingReader::Next r = reader->next(&rec);
    if (r == archive::RecordingReader::Next::kInvalid) {
      st.error = std::string(reader->error().message());
      if (errors != nullptr) {
        errors->record(absl::StatusCode::kDataLoss, absl::StrCat("late join of ", topic, ": ", st.error));
      }
      // Damage ends the history: what comes next is the live stream.
      if (state == State::kReplaying && !subscribe_live().ok()) return n;
      state = State::kLive;
      return n;
    }
    if (r == archive::RecordingReader::Next::kEnd) {
      if (state == State::kReplaying) {
        // The recording's written end: from here the live stream is kept too.
        if (!subscribe_live().ok()) return n;
        state = State::kCatchingUp;
        return n;
      }
      // Catching up at the recording's end: switch when the recording holds everything before
      // the first kept message, or when nothing more will be recorded.
      if (!kept.empty()) {
        const Kept& first = kept.front();
        const bool follows = have_last && last_session == first.session_id && last_seq + 1 >= first.sequence;
        if (follows || reader->finished()) state = State::kMerged;
      } else if (reader->finished()) {
        kept.clear();
        state = State::kLive;
      }
      return n;
    }
    if (rec.is_marker) continue;
    const Message m = message_of(rec.body);
    if (state == State::kCatchingUp && !kept.empty() && kept.front().session_id == m.session_id &&
        m.sequence >= kept.front().sequence) {
      state = State::kMerged;  // the kept live messages take over from here
      return n;
    }
    n += deliver(fn, c, m, false) ? 1 : 0;
  }
  return n;
}

}  // namespace detail

LateJoinSubscriber::LateJoinSubscriber(std::unique_ptr<detail::LateJoinImpl> impl) : impl_(std::move(impl)) {}
LateJoinSubscriber::~LateJoinSubscriber() = default;

absl::StatusOr<std::unique_ptr<LateJoinSubscriber>> LateJoinSubscriber::open(Context& ctx, std::string_view topic,
                                                                             const LateJoinOptions& o) {
  namespace archive = core::archive;
  std::optional<archive::RecordingReader> reader;
  std::uint64_t id = 0;
  if (o.start != LateJoinOptions::Start::kLive) {
    if (o.directory.empty()) return absl::InvalidArgumentError("late join: no recording directory given");
    absl::StatusOr<archive::Catalog> cat = archive::Catalog::load(o.directory);
    if (!cat.ok()) return cat.status();
    // The recording being written, else the latest one.
    for (const archive::RecordingInfo& r : cat->recordings()) {
      if (r.topic != topic) continue;
      const archive::RecordingInfo* best = id ? cat->find(id) : nullptr;
      if (best == nullptr || (r.state == archive::RecordingState::kRecording) ||
          (best->state != archive::RecordingState::kRecording && r.id > best->id)) {
        id = r.id;
      }
    }
    if (id == 0) {
      return absl::NotFoundError(absl::StrCat("late join: ", o.directory, " has no recording of ", std::string(topic),
                                              " (a [[recordings]] entry with topic = \"", std::string(topic),
                                              "\" makes one)"));
    }
    absl::StatusOr<archive::RecordingReader> r = archive::RecordingReader::open(o.directory, id);
    if (!r.ok()) return r.status();
    if (o.start == LateJoinOptions::Start::kPosition) {
      absl::Status s;
      if (o.from.kind == ReplayPosition::Kind::kSequence) {
        s = r->seek(archive::RecordingReader::Key::kSequence, o.from.sequence);
      } else if (o.from.kind == ReplayPosition::Kind::kTime) {
        s = r->seek(archive::RecordingReader::Key::kTime,
                    static_cast<std::uint64_t>(o.from.wall_ns - r->wall_minus_clock_ns()));
      }
      if (!s.ok()) return s;
    }
    reader.emplace(std::move(*r));
  }
  auto impl = std::make_unique<detail::LateJoinImpl>(ctx, std::string(topic), o, std::move(reader));
  impl->st.recording_id = id;
  impl->stream_id = ctx.stream_id(topic);
  impl->errors = &core::error_log_of(ctx.impl_->counters.get());
  impl->make_counters();
  if (o.start == LateJoinOptions::Start::kLive) {
    if (absl::Status s = impl->subscribe_live(); !s.ok()) return s;
    impl->state = detail::LateJoinImpl::State::kLive;
  }
  return std::unique_ptr<LateJoinSubscriber>(new LateJoinSubscriber(std::move(impl)));
}

bool LateJoinSubscriber::wait(std::int64_t timeout_us) noexcept {
  if (impl_->closed) return false;
  if (impl_->state == detail::LateJoinImpl::State::kLive) return impl_->sub->wait(timeout_us);
  if (timeout_us == 0) return true;
  std::this_thread::sleep_for(
      std::chrono::microseconds(timeout_us < 0 ? 1000 : std::min<std::int64_t>(timeout_us, 1000)));
  return true;
}
bool LateJoinSubscriber::arm() noexcept {
  return impl_->state == detail::LateJoinImpl::State::kLive && !impl_->closed && impl_->sub->arm();
}
void LateJoinSubscriber::disarm() noexcept {
  if (impl_->state == detail::LateJoinImpl::State::kLive) impl_->sub->disarm();
}
int LateJoinSubscriber::notify_fd() const noexcept {
  return impl_->state == detail::LateJoinImpl::State::kLive ? impl_->sub->notify_fd() : -1;
}
bool LateJoinSubscriber::is_connected() const noexcept {
  if (impl_->closed) return false;
  return impl_->sub.has_value() ? impl_->sub->is_connected() : true;
}
std::uint32_t LateJoinSubscriber::stream_id() const noexcept { return impl_->stream_id; }
std::string_view LateJoinSubscriber::topic() const noexcept { return impl_->topic; }
void LateJoinSubscriber::close() noexcept {
  impl_->closed = true;
  if (impl_->sub.has_value()) impl_->sub->close();
}

int LateJoinSubscriber::poll_impl(void (*fn)(void*, const Message&), void* ctx, int limit) noexcept {
  return impl_->poll(fn, ctx, limit);
}

const char* LateJoinSubscriber::state() const noexcept {
  switch (impl_->state) {
    case detail::LateJoinImpl::State::kReplaying:
      return "replaying";
    case detail::LateJoinImpl::State::kCatchingUp:
      return "catching_up";
    case detail::LateJoinImpl::State::kMerged:
      return "merged";
    case detail::LateJoinImpl::State::kLive:
      return "live";
  }
  return "live";
}

LateJoinStatus LateJoinSubscriber::status() const {
  LateJoinStatus s = impl_->st;
  s.state = state();
  return s;
}

}  // namespace pollux
