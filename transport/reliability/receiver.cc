#include "transport/reliability/receiver.h"

#include <algorithm>
#include <climits>

#include "absl/strings/str_format.h"

namespace pollux::transport::reliability {

absl::Status ReliableReceiver::init(const ReceiverOptions& o) {
  opt_ = o;
  nslots_ = std::clamp<std::uint32_t>(o.max_sessions, 1, kMaxSessions);
  sessions_.reset(new Session[nslots_]);
  rng_.state = o.seed;
  for (std::uint32_t i = 0; i < nslots_; ++i) {
    if (!sessions_[i].win.init(o.window, rng_.next())) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("cannot allocate %u reorder windows of %u sequences (%u MiB each): out of memory", nslots_,
                          o.window.window, (static_cast<std::uint64_t>(o.window.window) * 16) >> 20));
    }
  }
  return absl::OkStatus();
}

ReliableReceiver::Session* ReliableReceiver::find(std::uint32_t session_id) noexcept {
  for (std::uint32_t i = 0; i < nslots_; ++i) {
    if (sessions_[i].state != State::kFree && sessions_[i].session_id == session_id) return &sessions_[i];
  }
  return nullptr;
}

ReliableReceiver::Tomb* ReliableReceiver::tomb(std::uint32_t session_id, std::int64_t now_ns) noexcept {
  for (Tomb& t : tombs_) {
    if (t.used && t.session_id == session_id && (t.died || t.until_ns > now_ns)) return &t;
  }
  return nullptr;
}

void ReliableReceiver::bury(const Session& s, std::int64_t now_ns) noexcept {
  // This session's entry, else a free or expired one, else the oldest (a death displaced before
  // it was heard again is counted: should it come back, it joins at the live position).
  Tomb* t = nullptr;
  for (Tomb& c : tombs_) {
    if (c.used && c.session_id == s.session_id) t = &c;
  }
  for (Tomb& c : tombs_) {
    if (t == nullptr && (!c.used || (!c.died && c.until_ns <= now_ns))) t = &c;
  }
  if (t == nullptr) {
    t = &tombs_[0];
    for (Tomb& c : tombs_) {
      if (c.buried_ns < t->buried_ns) t = &c;
    }
    if (t->died) ++stats_.dead_forgotten;
  }
  t->session_id = s.session_id;
  t->used = true;
  t->died = s.end_reason != 0;
  t->until_ns = now_ns + opt_.session_timeout_ns;
  t->expected = s.win.expected();
  t->buried_ns = now_ns;
  t->peer = s.peer;
}

void ReliableReceiver::resume(Session& s, std::int64_t now_ns) noexcept {
  // Everything missing when it timed out was reported lost; delivery goes on from there (a
  // session that was reported dead is announced again, at that sequence).
  if (s.state == State::kEnding) {
    s.state = State::kActive;
    s.announce = true;
    s.end_reason = 0;
  }
  s.timed_out = false;
  s.last_heard_ns = now_ns;
  s.status_now = true;  // the publisher forgot us meanwhile, likely: report at once
  new_deadline_ns_ = 0;
  timeout_due_ns_ = std::min(timeout_due_ns_, now_ns + opt_.session_timeout_ns + 1);
  ++stats_.sessions_resumed;
}

ReliableReceiver::Session* ReliableReceiver::start(std::uint32_t session_id, std::uint64_t first_seq,
                                                   const PeerAddress& from, std::int64_t now_ns) noexcept {
  for (std::uint32_t i = 0; i < nslots_; ++i) {
    Session& s = sessions_[i];
    if (s.state != State::kFree) continue;
    s.state = State::kActive;
    s.session_id = session_id;
    s.peer = from;
    s.win.reset(first_seq);  // late joiners start at the live position
    s.last_heard_ns = now_ns;
    s.next_status_ns = now_ns;
    s.end_seq = UINT64_MAX;
    s.end_since_ns = 0;
    s.announce = true;
    s.timed_out = false;
    s.status_now = true;  // tell the publisher at once that someone listens
    s.end_reason = 0;
    ++active_;
    ++stats_.sessions_started;
    timeout_due_ns_ = std::min(timeout_due_ns_, now_ns + opt_.session_timeout_ns + 1);
    return &s;
  }
  return nullptr;
}

void ReliableReceiver::refute_end(Session& s) noexcept {
  s.end_seq = UINT64_MAX;
  ++stats_.ends_refuted;
}

std::uint32_t ReliableReceiver::on_datagram(const std::byte* data, std::uint32_t len, const PeerAddress& from,
                                            std::uint32_t token, std::int64_t now_ns) noexcept {
  ++stats_.datagrams;
  now_ns_ = now_ns;
  maybe_ready_ = true;
  FrameCursor cur(data, len);
  const core::FrameHeader* f = cur.next();
  if (f == nullptr) {
    ++stats_.malformed;
    return 0;
  }
  if (f->stream_id != opt_.stream_id) {
    ++stats_.other_stream;
    return 0;
  }
  Session* s = find(f->session_id);
  if (s == nullptr) {
    if (Tomb* t = tomb(f->session_id, now_ns); t != nullptr) {
      if (!t->died) {
        ++stats_.stale_session;  // a clean end's lingering heartbeats, repairs for others
        return 0;
      }
      // A session reported dead speaks again: it resumes where delivery stood, so what it sent
      // meanwhile is repaired, or reported lost with its exact count - never dropped unseen.
      if (!(from == t->peer)) {
        ++stats_.wrong_source;
        return 0;
      }
      s = start(f->session_id, t->expected, from, now_ns);
      if (s == nullptr) {
        ++stats_.sessions_refused;  // the tomb stays: it resumes once a slot is free
        return 0;
      }
      --stats_.sessions_started;
      ++stats_.sessions_resumed;
      t->used = false;
      new_deadline_ns_ = 0;  // status_now
    }
  }
  if (s == nullptr) {
    // Join only on a heartbeat, at the next sequence it announces: a data datagram may be a
    // repair of old data multicast for another subscriber, and joining there would start a
    // late joiner in the past (possibly before what the publisher still holds). Heartbeats
    // come every udp.heartbeat_interval_us even while data flows.
    if (!(f->flags & core::kFlagHeartbeat) || (f->flags & core::kFlagEndOfStream)) {
      ++stats_.before_join;
      return 0;
    }
    if (f->sequence == 0 || f->sequence > kMaxSequence || heartbeat_body(f).oldest > f->sequence) {
      ++stats_.malformed;
      return 0;
    }
    s = start(f->session_id, f->sequence, from, now_ns);
    if (s == nullptr) {
      ++stats_.sessions_refused;
      return 0;
    }
    new_deadline_ns_ = 0;  // status_now: tell the publisher at once
  } else if (__builtin_expect(!(from == s->peer), 0)) {
    // A session's datagrams all come from one socket (the address its joining heartbeat came
    // from): anything else is a forgery or a misrouted copy. A forger must also fake the source.
    ++stats_.wrong_source;
    return 0;
  }
  if (__builtin_expect(s->timed_out, 0)) {
    // Timed out (perhaps reported dead already, its slot not yet freed): the publisher is back.
    resume(*s, now_ns);
  } else if (s->state != State::kActive) {
    ++stats_.stale_session;  // ended cleanly, not yet freed
    return 0;
  }
  s->last_heard_ns = now_ns;
  std::uint32_t stored = 0;
  for (; f != nullptr; f = cur.next()) {
    if (__builtin_expect(f->session_id != s->session_id || f->stream_id != opt_.stream_id, 0)) {
      ++stats_.malformed;  // a publisher never mixes sessions in one datagram
      break;
    }
    if (__builtin_expect(f->sequence > kMaxSequence, 0)) {
      ++stats_.malformed;  // no publisher gets there: a forgery (it would overflow window arithmetic)
      break;
    }
    if (__builtin_expect(f->flags & (core::kFlagHeartbeat | core::kFlagPadding), 0)) {
      if (f->flags & core::kFlagHeartbeat) {
        const HeartbeatBody b = heartbeat_body(f);
        if (b.oldest > f->sequence) {
          ++stats_.malformed;  // a publisher's oldest retransmittable is never beyond its next
          continue;
        }
        ++stats_.heartbeats;
        if (f->flags & core::kFlagEndOfStream) {
          // The end is believed once nothing contradicted it for confirm_ns: a closing publisher
          // only sends end-of-stream heartbeats from then on, and never data at or beyond the
          // end, so a live one refutes a forged end with its next heartbeat or frame.
          if (s->end_seq == UINT64_MAX) {
            if (f->sequence < s->win.hwm()) {
              ++stats_.ends_refuted;  // frames at or past this "end" were seen already
            } else {
              s->end_seq = f->sequence;
              s->end_since_ns = now_ns;
              s->status_now = true;  // the publisher lingers until we confirm
              new_deadline_ns_ = 0;
              end_pending_ = true;
            }
          } else if (f->sequence != s->end_seq) {
            refute_end(*s);
          }
        } else if (s->end_seq != UINT64_MAX) {
          refute_end(*s);
        }
        s->win.on_heartbeat(f->sequence, b.oldest, now_ns);
      }
      continue;
    }
    if (__builtin_expect(f->sequence >= s->end_seq, 0)) refute_end(*s);
    if (s->win.accept(f->sequence, f, token, now_ns) == ReceiveWindow::Accept::kStored) ++stored;
  }
  if (cur.malformed()) ++stats_.malformed;
  // A gap this datagram opened (a data frame past the next expected, a heartbeat's tail) is
  // NAKed at the window's deadline: the only way a datagram moves next_deadline() earlier
  // besides the status_now cases above. INT64_MAX (one compare) while nothing is missing.
  new_deadline_ns_ = std::min(new_deadline_ns_, s->win.next_nak_ns());
  return stored;
}

std::uint32_t ReliableReceiver::poll(RxDesc* out, std::uint32_t max) noexcept {
  if (!maybe_ready_) return 0;  // the last poll drained everything, and nothing came since
  std::uint32_t n = 0;
  for (std::uint32_t k = 0, i = rr_; k < nslots_ && n < max; ++k, i = i + 1 == nslots_ ? 0 : i + 1) {
    Session& s = sessions_[i];
    if (s.state != State::kActive) continue;
    if (s.announce) {
      RxDesc& d = out[n++];
      d = RxDesc{};
      d.kind = RxKind::kNewSession;
      d.session_id = s.session_id;
      d.sequence = s.win.expected();
      s.announce = false;
      if (n == max) break;
    }
    n += s.win.drain(out + n, max - n, s.session_id, s.end_seq);
    if (n == max) break;
    const bool clean_end = end_due(s);
    const bool died = s.timed_out && s.win.expected() >= s.win.lost_through() && s.win.held() == 0;
    if (clean_end || died) {
      RxDesc& d = out[n++];
      d = RxDesc{};
      d.kind = RxKind::kEndOfStream;
      d.reason = clean_end ? 0 : 1;
      d.session_id = s.session_id;
      d.sequence = s.win.expected();
      s.end_reason = d.reason;
      s.state = State::kEnding;  // service() confirms to the publisher and frees the slot
      new_deadline_ns_ = 0;
    }
  }
  if (nslots_ > 1) rr_ = rr_ + 1 == nslots_ ? 0 : rr_ + 1;
  // Fewer than asked: every session drained. Exactly as many: ask ready() - cheaper than the
  // next poll's full walk (a poll of one message at a time, a ping-pong's, would otherwise walk
  // twice per message).
  maybe_ready_ = n == max && ready();
  return n;
}

ControlHeader ReliableReceiver::control_header(const Session& s, std::uint16_t type,
                                               std::uint32_t length) const noexcept {
  ControlHeader c{};
  c.length = length;
  c.magic = kControlMagic;
  c.version = kControlVersion;
  c.type = type;
  c.stream_id = opt_.stream_id;
  c.session_id = s.session_id;
  c.receiver_id = opt_.receiver_id;
  c.position = s.win.expected();
  c.highest = s.win.hwm();
  return c;
}

void ReliableReceiver::send_status(Session& s, std::int64_t now_ns, ControlSink& sink, std::uint16_t flags) noexcept {
  ControlHeader c = control_header(s, kControlStatus, sizeof(ControlHeader));
  c.flags = flags;
  if (s.end_seq != UINT64_MAX && s.win.expected() >= s.end_seq) c.flags |= kControlFlagEndSeen;
  sink.send_control(s.peer, reinterpret_cast<const std::byte*>(&c), sizeof c);
  ++stats_.status_sent;
  s.status_now = false;
  s.next_status_ns = now_ns + opt_.status_interval_ns;
}

int ReliableReceiver::service(std::int64_t now_ns, ControlSink& sink) noexcept {
  int work = 0;
  now_ns_ = now_ns;
  maybe_ready_ = true;  // time-outs and give-ups below may make losses deliverable
  end_pending_ = false;
  std::int64_t timeout_due = INT64_MAX;
  for (std::uint32_t i = 0; i < nslots_; ++i) {
    Session& s = sessions_[i];
    if (s.state == State::kFree) continue;
    if (s.end_seq != UINT64_MAX) end_pending_ = true;
    if (s.state == State::kActive && !s.timed_out) {
      timeout_due = std::min(timeout_due, s.last_heard_ns + opt_.session_timeout_ns + 1);
    }
    if (s.state == State::kEnding) {
      if (s.end_reason == 0) send_status(s, now_ns, sink, kControlFlagLeaving);
      bury(s, now_ns);
      s.state = State::kFree;
      --active_;
      ++stats_.sessions_ended;
      ++work;
      continue;
    }
    if (s.timed_out) continue;
    // Silent in what the transport read: nothing of it between its last datagram and a moment,
    // session_timeout later, when the transport found its queue empty. Not the clock alone: a
    // subscriber that fell behind (its socket full of another stream's datagrams, its thread
    // descheduled) has the publisher's heartbeats still queued.
    if (drained_ns_ - s.last_heard_ns > opt_.session_timeout_ns) {
      // The publisher went silent: nothing missing can be repaired any more. Should it speak
      // again, the session resumes (on_datagram).
      s.timed_out = true;
      s.win.declare_lost(s.end_seq != UINT64_MAX ? s.end_seq : s.win.hwm());
      ++stats_.sessions_timed_out;
      ++work;
      continue;
    }
    if (s.status_now) {
      // Before any NAK: publishers serve NAKs only from subscribers they heard before.
      send_status(s, now_ns, sink, 0);
      ++work;
    }
    if (s.win.next_nak_ns() <= now_ns) {
      alignas(8) std::byte buf[kMaxControlLength];
      auto* ranges = reinterpret_cast<NakRange*>(buf + sizeof(ControlHeader));
      // Gaps age in read traffic only, as sessions do (a repair may wait in the socket).
      const std::uint32_t k = s.win.collect_naks(now_ns, ranges, kMaxNakRanges, drained_ns_);
      if (k > 0) {
        ControlHeader c =
            control_header(s, kControlNak, static_cast<std::uint32_t>(sizeof(ControlHeader) + k * sizeof(NakRange)));
        c.range_count = static_cast<std::uint16_t>(k);
        std::memcpy(buf, &c, sizeof c);
        sink.send_control(s.peer, buf, c.length);
        ++stats_.naks_sent;
        s.next_status_ns = now_ns + opt_.status_interval_ns;  // a NAK carries the status fields
        ++work;
      }
    }
    if (now_ns >= s.next_status_ns) {
      send_status(s, now_ns, sink, 0);
      ++work;
    }
  }
  timeout_due_ns_ = timeout_due;
  return work;
}

std::int64_t ReliableReceiver::next_deadline() const noexcept {
  std::int64_t t = INT64_MAX;
  for (std::uint32_t i = 0; i < nslots_; ++i) {
    const Session& s = sessions_[i];
    if (s.state == State::kFree) continue;
    if (s.state == State::kEnding || s.status_now) return 0;
    if (s.timed_out) continue;
    t = std::min(t, std::min(s.win.next_nak_ns(), s.next_status_ns));
    // The time-out, unless it is due by the clock but waits for the transport to drain its
    // queue (then drained() makes it due: take_new_deadline()).
    const std::int64_t due = s.last_heard_ns + opt_.session_timeout_ns + 1;
    if (due > now_ns_ || drained_ns_ >= due) t = std::min(t, due);
    // The end becomes deliverable then (once the transport saw its queue empty after it).
    if (s.end_seq != UINT64_MAX && drained_ns_ - s.end_since_ns < opt_.window.confirm_ns) {
      t = std::min(t, s.end_since_ns + opt_.window.confirm_ns);
    }
  }
  return t;
}

bool ReliableReceiver::forget(std::uint32_t session_id, std::uint64_t seq, const void* frame,
                              std::int64_t now_ns) noexcept {
  Session* s = find(session_id);
  if (s == nullptr || !s->win.forget(seq, frame, now_ns)) return false;
  maybe_ready_ = true;
  new_deadline_ns_ = std::min(new_deadline_ns_, s->win.next_nak_ns());  // NAKed again at once
  return true;
}

void ReliableReceiver::close(ControlSink& sink) noexcept {
  for (std::uint32_t i = 0; i < nslots_; ++i) {
    Session& s = sessions_[i];
    if (s.state == State::kActive && !s.timed_out) send_status(s, now_ns_, sink, kControlFlagLeaving);
  }
}

bool ReliableReceiver::ready() const noexcept {
  for (std::uint32_t i = 0; i < nslots_; ++i) {
    const Session& s = sessions_[i];
    if (s.state != State::kActive) continue;
    if (s.announce || (s.win.deliverable() && s.win.expected() < s.end_seq)) return true;
    if (end_due(s)) return true;
    if (s.timed_out && s.win.expected() >= s.win.lost_through() && s.win.held() == 0) return true;
  }
  return false;
}

std::uint32_t ReliableReceiver::held() const noexcept {
  std::uint32_t h = 0;
  for (std::uint32_t i = 0; i < nslots_; ++i) h += sessions_[i].win.held();
  return h;
}

WindowStats ReliableReceiver::window_stats() const noexcept {
  WindowStats t;
  for (std::uint32_t i = 0; i < nslots_; ++i) {
    const WindowStats& w = sessions_[i].win.stats();
    t.frames += w.frames;
    t.duplicates += w.duplicates;
    t.beyond += w.beyond;
    t.fills += w.fills;
    t.gaps_opened += w.gaps_opened;
    t.nak_ranges += w.nak_ranges;
    t.lost += w.lost;
    t.loss_reports += w.loss_reports;
    t.gaps_given_up += w.gaps_given_up;
    t.claims_refuted += w.claims_refuted;
  }
  return t;
}

ReliableReceiver::SessionInfo ReliableReceiver::session_info(std::uint32_t i) const noexcept {
  for (std::uint32_t k = 0; k < nslots_; ++k) {
    const Session& s = sessions_[k];
    if (s.state == State::kFree) continue;
    if (i-- == 0) return SessionInfo{s.session_id, s.win.expected(), s.win.hwm(), s.win.gaps(), s.win.held()};
  }
  return SessionInfo{};
}

std::uint32_t ReliableReceiver::take_in_order(const std::byte* data, std::uint32_t len, const PeerAddress& from,
                                              std::uint32_t max, std::int64_t now_ns) noexcept {
  // The checks of on_datagram(), narrowed to its common case: anything they would count,
  // refute or announce goes through on_datagram() instead.
  FrameCursor cur(data, len);
  const core::FrameHeader* f = cur.next();
  if (f == nullptr || f->stream_id != opt_.stream_id || f->flags != core::kFlagNone) return 0;
  Session* s = find(f->session_id);
  if (s == nullptr || s->state != State::kActive || s->announce || s->timed_out || s->end_seq != UINT64_MAX ||
      !(from == s->peer)) {
    return 0;
  }
  const std::uint64_t first = f->sequence;
  if (first == 0 || first > kMaxSequence) return 0;
  std::uint32_t n = 0;
  for (; f != nullptr; f = cur.next()) {
    if (n == max || f->session_id != s->session_id || f->stream_id != opt_.stream_id || f->flags != core::kFlagNone ||
        f->sequence != first + n) {
      return 0;
    }
    ++n;
  }
  if (cur.malformed() || first + n > kMaxSequence || !s->win.take_in_order(first, n)) return 0;
  ++stats_.datagrams;
  now_ns_ = now_ns;
  s->last_heard_ns = now_ns;
  return n;
}

}  // namespace pollux::transport::reliability
