// Sequence tracking on the receive side: turns the per-(stream, session) sequence numbers the
// publisher's endpoint stamps into "deliver", "report a gap first" or "drop (old/duplicate)".
// RC delivers in order and never loses, so there a gap means a bug or a reconnect; UD multicast
// loses under load, and this is what makes the loss visible. Pure and single-threaded (owned by
// the receiving endpoint), so it is unit-tested on the host.
#pragma once

#include <array>
#include <cstdint>

namespace pollux::transport::rdma {

struct SequenceStep {
  std::uint64_t gap_from = 0;   // first missing sequence
  std::uint64_t gap_count = 0;  // 0: nothing missing
  bool stale = false;           // older than what was already seen: drop it
};

class SequenceTracker {
 public:
  bool started() const noexcept { return next_ != 0; }
  std::uint64_t next() const noexcept { return next_; }

  // The first frame or heartbeat of a session sets the baseline: a subscriber that joins late
  // is not told about what went before it joined (Aeron's late-join rule).
  void start(std::uint64_t next) noexcept { next_ = next == 0 ? 1 : next; }

  // A data frame with sequence `seq`.
  SequenceStep on_frame(std::uint64_t seq) noexcept {
    SequenceStep s;
    if (next_ == 0) next_ = seq;
    if (seq < next_) {
      s.stale = true;
      return s;
    }
    if (seq > next_) {
      s.gap_from = next_;
      s.gap_count = seq - next_;
    }
    next_ = seq + 1;
    return s;
  }

  // A heartbeat or end-of-stream frame saying the publisher's next sequence is `next`: anything
  // below it not yet seen is lost (this is how loss at the tail of a burst becomes visible).
  SequenceStep on_next(std::uint64_t next) noexcept {
    SequenceStep s;
    if (next_ == 0) {
      start(next);
      return s;
    }
    if (next > next_) {
      s.gap_from = next_;
      s.gap_count = next - next_;
      next_ = next;
    }
    return s;
  }

 private:
  std::uint64_t next_ = 0;  // 0: no baseline yet
};

// The sessions one UD subscriber hears on its stream (a publisher restart or a second publishing
// thread is a new session). Fixed capacity, no allocation: when full, the session heard from
// least recently is forgotten (its tracker restarts if it comes back).
template <std::size_t N>
class SessionTable {
 public:
  struct Entry {
    std::uint32_t session_id = 0;  // 0 = free
    bool ended = false;
    bool announced = false;  // kNewSession delivered
    std::int64_t last_heard_ns = 0;
    SequenceTracker seq;
  };

  // Returns the entry for `session_id`, creating it (and setting *created) when new.
  Entry* find_or_add(std::uint32_t session_id, std::int64_t now_ns, bool* created) noexcept {
    *created = false;
    Entry* victim = &entries_[0];
    for (Entry& e : entries_) {
      if (e.session_id == session_id) return &e;
      if (e.session_id == 0) {
        if (victim->session_id != 0) victim = &e;
      } else if (victim->session_id != 0 && e.last_heard_ns < victim->last_heard_ns) {
        victim = &e;
      }
    }
    *victim = Entry{};
    victim->session_id = session_id;
    victim->last_heard_ns = now_ns;
    *created = true;
    return victim;
  }

  std::array<Entry, N>& entries() noexcept { return entries_; }

 private:
  std::array<Entry, N> entries_{};
};

}  // namespace pollux::transport::rdma
