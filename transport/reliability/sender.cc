#include "transport/reliability/sender.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace pollux::transport::reliability {

absl::Status SenderLog::init(const Options& o) {
  if (o.capacity < (64u << 10) || (o.capacity & (o.capacity - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("retransmit buffer of %u bytes: expected a power of two >= 64 KiB", o.capacity));
  }
  if (o.max_datagram < 64 || o.max_datagram > o.capacity / 4) {
    return absl::InvalidArgumentError(
        absl::StrFormat("datagram size %u does not fit a retransmit buffer of %u bytes (needs 64 <= size <= buffer/4)",
                        o.max_datagram, o.capacity));
  }
  capacity_ = o.capacity;
  mask_ = capacity_ - 1;
  imask_ = capacity_ / core::kFrameHeaderSize - 1;
  max_datagram_ = o.max_datagram;
  stream_id_ = o.stream_id;
  session_id_ = o.session_id;
  if (o.memory != nullptr) {
    if (reinterpret_cast<std::uintptr_t>(o.memory) % kWireAlignment != 0) {
      return absl::InvalidArgumentError("retransmit buffer memory is not 8-byte aligned");
    }
    buf_ = Region<std::byte>();
    data_ = o.memory;
  } else {
    buf_ = Region<std::byte>(capacity_);
    data_ = buf_.get();
  }
  index_ = Region<std::uint64_t>(imask_ + 1);
  if (data_ == nullptr || !index_.ok()) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("cannot map a retransmit buffer of %u bytes (+ %u of index): out of memory", capacity_,
                        (imask_ + 1) * sizeof(std::uint64_t)));
  }
  head_ = 0;
  next_seq_ = sent_seq_ = oldest_seq_ = 1;
  pin_limit_ = kNoPin;
  return absl::OkStatus();
}

absl::Status ReliableSender::init(const SenderOptions& o) {
  opt_ = o;
  opt_.max_datagrams_per_call = std::clamp<std::uint32_t>(o.max_datagrams_per_call, 1, 1024);
  if (absl::Status s = log_.init(o.log); !s.ok()) return s;
  core::write_frame_identity(reinterpret_cast<core::FrameHeader*>(heartbeat_), kHeartbeatFrameLength, o.log.stream_id,
                             o.log.session_id);
  opt_.nak_max_range = std::max<std::uint64_t>(o.nak_max_range, 1);
  total_ = TokenBucket{o.repair_burst_total, 0};
  return absl::OkStatus();
}

std::uint32_t ReliableSender::flush(DatagramSink& sink, std::int64_t now_ns) noexcept {
  if (__builtin_expect(!announced_, 0)) {
    // A session's first datagram is its announcement (subscribers join on a heartbeat, at the
    // sequence it names): data before it would be ignored by every subscriber.
    send_heartbeat(sink, now_ns, false);
    if (!announced_) return 0;  // the socket is full: the data waits behind it
  }
  if (opt_.coalesce_ns > 0 && log_.unsent_bytes() < opt_.log.max_datagram &&
      (unsent_since_ns_ == 0 || now_ns - unsent_since_ns_ < opt_.coalesce_ns)) {
    // Not a full datagram yet and not waited long enough: O(1) per post, not a walk of the
    // pending frames.
    if (log_.has_unsent() && unsent_since_ns_ == 0) unsent_since_ns_ = now_ns;
    return 0;
  }
  if (opt_.coalesce_ns == 0 && log_.next() - log_.sent() == 1) {
    // One frame never sent (a latency-bound publisher posts one at a time): its datagram is
    // that frame, as run_at() would find, without the walk and the batch arrays.
    const SenderLog::Bytes b = log_.single_unsent();
    const DatagramSink::Datagram one{b.data, b.bytes};
    const std::uint32_t sent = sink.send_datagrams({&one, 1});
    note_sent(&one, sent, log_.next(), now_ns);
    if (sent != 1) ++stats_.send_blocked;
    return sent;
  }
  std::uint32_t total = 0;
  DatagramSink::Datagram d[64];
  std::uint64_t ends[64];
  while (log_.has_unsent() && total < opt_.max_datagrams_per_call) {
    std::uint32_t n = 0;
    std::uint64_t seq = log_.sent();
    const std::uint32_t want = std::min<std::uint32_t>(64, opt_.max_datagrams_per_call - total);
    while (n < want && seq < log_.next()) {
      const FrameRun r = log_.run_at(seq, log_.next());
      if (r.count == 0) break;
      if (opt_.coalesce_ns > 0 && seq + r.count == log_.next() &&
          (unsent_since_ns_ == 0 || now_ns - unsent_since_ns_ < opt_.coalesce_ns)) {
        break;  // a partly filled datagram: wait a little for more frames
      }
      d[n] = {r.data, r.bytes};
      seq += r.count;
      ends[n++] = seq;
    }
    if (n == 0) break;
    const std::uint32_t sent = sink.send_datagrams({d, n});
    note_sent(d, sent, sent > 0 ? ends[sent - 1] : 0, now_ns);
    total += sent;
    if (sent < n) {
      ++stats_.send_blocked;
      break;
    }
  }
  if (opt_.coalesce_ns > 0) {
    if (!log_.has_unsent()) {
      unsent_since_ns_ = 0;
    } else if (unsent_since_ns_ == 0) {
      unsent_since_ns_ = now_ns;
    }
  }
  return total;
}

void ReliableSender::note_sent(const DatagramSink::Datagram* d, std::uint32_t sent, std::uint64_t end,
                               std::int64_t now_ns) noexcept {
  for (std::uint32_t i = 0; i < sent; ++i) stats_.bytes += d[i].bytes;
  stats_.datagrams += sent;
  stats_.data_datagrams += sent;
  if (sent == 0) return;
  log_.mark_sent(end);
  last_data_ns_ = now_ns;
  data_since_heartbeat_ = true;
}

ReliableSender::Receiver* ReliableSender::find_receiver(std::uint64_t id) noexcept {
  for (std::uint32_t i = 0; i < nreceivers_; ++i) {
    if (receivers_[i].id == id) return &receivers_[i];
  }
  return nullptr;
}

ReliableSender::Receiver* ReliableSender::add_receiver(std::uint64_t id, std::int64_t now_ns) noexcept {
  std::uint32_t slot = nreceivers_;
  if (slot == kMaxReceivers) {
    // Full: replace the one heard from least recently (only diagnostics and linger use it).
    slot = 0;
    for (std::uint32_t i = 1; i < kMaxReceivers; ++i) {
      if (receivers_[i].last_ns < receivers_[slot].last_ns) slot = i;
    }
  } else {
    ++nreceivers_;
  }
  ++stats_.receivers_joined;
  receivers_[slot] = Receiver{id, 0, 0, now_ns, 0, TokenBucket{opt_.repair_burst, now_ns}};
  return &receivers_[slot];
}

void ReliableSender::on_control(const std::byte* data, std::uint32_t len, std::int64_t now_ns) noexcept {
  stats_.control_bytes += len;
  const ControlHeader* c = parse_control(data, len);
  if (c == nullptr || c->stream_id != log_.stream_id() || c->session_id != log_.session_id()) {
    ++stats_.control_malformed;  // or meant for an earlier incarnation of this publisher
    return;
  }
  if (c->flags & kControlFlagLeaving) {
    for (std::uint32_t i = 0; i < nreceivers_; ++i) {
      if (receivers_[i].id == c->receiver_id) {
        receivers_[i] = receivers_[--nreceivers_];
        ++stats_.receivers_left;
        break;
      }
    }
    return;
  }
  Receiver* r = find_receiver(c->receiver_id);
  const bool announced = r != nullptr;
  if (r == nullptr) r = add_receiver(c->receiver_id, now_ns);
  r->position = std::max(r->position, c->position);
  r->highest = std::max(r->highest, c->highest);
  r->last_ns = now_ns;
  r->flags = c->flags;
  if (c->type == kControlStatus) {
    ++stats_.status_messages;
    return;
  }
  ++stats_.naks;
  if (!announced) {
    // Served only once the subscriber was heard before (it sends a status message when it
    // joins; a lost one costs a NAK retry): a one-shot NAK from a made-up subscriber gets
    // nothing. It is registered now, so its next NAK is served.
    ++stats_.naks_unannounced;
    return;
  }
  r->bucket.refill(now_ns, opt_.repair_rate, opt_.repair_burst);
  total_.refill(now_ns, opt_.repair_rate_total, opt_.repair_burst_total);
  const NakRange* ranges = nak_ranges(c);
  for (std::uint32_t i = 0; i < c->range_count; ++i) {
    ++stats_.nak_ranges;
    std::uint64_t from = ranges[i].from;
    if (from >= log_.sent() || ranges[i].count == 0) continue;  // never "repair" what was not sent yet
    std::uint64_t count = ranges[i].count;
    if (count > opt_.nak_max_range) {
      count = opt_.nak_max_range;  // the subscriber asks for the rest again
      ++stats_.nak_ranges_capped;
    }
    const std::uint64_t to = from + std::min(count, log_.sent() - from);
    if (from < log_.oldest()) {
      // Gone from the log: say so at once (the heartbeat carries oldest()), so subscribers
      // report the gap now rather than after more NAKs.
      ++stats_.naks_unavailable;
      heartbeat_now_ = true;
      from = log_.oldest();
      if (from >= to) continue;
    }
    schedule_repair(from, to, now_ns, *r);
  }
}

std::uint64_t ReliableSender::charge(std::uint64_t from, std::uint64_t to, Receiver& r) noexcept {
  const bool limit_r = opt_.repair_rate != 0, limit_total = opt_.repair_rate_total != 0;
  if (!limit_r && !limit_total) return to;
  const std::uint64_t budget =
      std::min(limit_r ? r.bucket.tokens : UINT64_MAX, limit_total ? total_.tokens : UINT64_MAX);
  const std::uint64_t base = log_.position(from);
  const std::uint64_t bytes = log_.position(to) - base;
  std::uint64_t end = to;
  if (bytes > budget) {
    // The longest prefix the tokens pay for (positions grow with sequences): O(log range).
    std::uint64_t lo = from, hi = to;  // position(lo) - base <= budget < position(hi) - base
    while (hi - lo > 1) {
      const std::uint64_t mid = lo + (hi - lo) / 2;
      if (log_.position(mid) - base <= budget) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    end = lo;
    ++stats_.repairs_rate_limited;
    stats_.repair_bytes_refused += bytes - (log_.position(end) - base);
  }
  const std::uint64_t paid = log_.position(end) - base;
  if (limit_r) r.bucket.tokens -= paid;
  if (limit_total) total_.tokens -= paid;
  return end;
}

// Adds [from, to) minus what is already being repaired or was repaired within the linger
// time: that is the suppression that makes many subscribers missing the same datagram cost
// one repair (their NAKs arrive within the random NAK delay of each other).
void ReliableSender::schedule_repair(std::uint64_t from, std::uint64_t to, std::int64_t now_ns,
                                     Receiver& rcv) noexcept {
  // Expire lingering entries first so they do not suppress a legitimate re-request.
  for (std::uint32_t i = 0; i < nrepairs_;) {
    if (repairs_[i].linger_until != 0 && repairs_[i].linger_until <= now_ns) {
      repairs_[i] = repairs_[--nrepairs_];
    } else {
      ++i;
    }
  }
  bool suppressed = false;
  while (from < to) {
    std::uint64_t next_start = to;
    bool covered = false;
    for (std::uint32_t i = 0; i < nrepairs_; ++i) {
      const Repair& r = repairs_[i];
      if (r.from <= from && from < r.to) {
        from = r.to;
        covered = true;
        break;
      }
      if (r.from > from && r.from < next_start) next_start = r.from;
    }
    if (covered) {
      suppressed = true;
      continue;
    }
    if (nrepairs_ == kMaxRepairs) break;  // the subscriber will NAK the rest again
    const std::uint64_t paid = charge(from, next_start, rcv);
    if (paid > from) repairs_[nrepairs_++] = Repair{from, paid, 0};
    if (paid < next_start) break;  // out of tokens: the rest is refused (NAKed again later)
    from = next_start;
  }
  if (suppressed) ++stats_.naks_suppressed;
}

int ReliableSender::send_repairs(DatagramSink& sink, std::int64_t now_ns) noexcept {
  int work = 0;
  std::uint32_t budget = opt_.max_datagrams_per_call;
  DatagramSink::Datagram d[32];
  std::uint32_t counts[32];
  for (std::uint32_t i = 0; i < nrepairs_ && budget > 0; ++i) {
    Repair& r = repairs_[i];
    if (r.linger_until != 0) continue;
    if (r.from < log_.oldest()) {
      // Overwritten while queued (a burst of new data): whoever wanted it hears it via the
      // heartbeat.
      ++stats_.naks_unavailable;
      heartbeat_now_ = true;
      r.from = std::min(r.to, log_.oldest());
    }
    while (r.from < r.to && budget > 0) {
      std::uint32_t n = 0;
      std::uint64_t seq = r.from;
      while (n < 32 && n < budget && seq < r.to) {
        const FrameRun run = log_.run_at(seq, r.to);
        if (run.count == 0) break;
        d[n] = {run.data, run.bytes};
        counts[n++] = run.count;
        seq += run.count;
      }
      if (n == 0) {
        r.from = r.to;
        break;
      }
      const std::uint32_t sent = sink.send_datagrams({d, n});
      for (std::uint32_t k = 0; k < sent; ++k) {
        r.from += counts[k];
        stats_.retransmit_frames += counts[k];
        stats_.retransmit_bytes += d[k].bytes;
        stats_.bytes += d[k].bytes;
      }
      stats_.retransmit_datagrams += sent;
      stats_.datagrams += sent;
      budget -= std::min(budget, sent);
      work += static_cast<int>(sent);
      if (sent < n) {
        ++stats_.send_blocked;
        return work;  // socket full: the rest of this repair stays pending
      }
    }
    if (r.from >= r.to) r.linger_until = now_ns + std::max<std::int64_t>(opt_.retransmit_linger_ns, 1);
  }
  return work;
}

bool ReliableSender::repairs_pending() const noexcept {
  for (std::uint32_t i = 0; i < nrepairs_; ++i) {
    if (repairs_[i].linger_until == 0) return true;
  }
  return false;
}

void ReliableSender::send_heartbeat(DatagramSink& sink, std::int64_t now_ns, bool end) noexcept {
  auto* h = reinterpret_cast<core::FrameHeader*>(heartbeat_);
  ending_ = ending_ || end;
  h->flags = static_cast<std::uint16_t>(core::kFlagHeartbeat | (ending_ ? core::kFlagEndOfStream : 0));
  h->sequence = log_.sent();
  h->timestamp_ns = now_ns;
  HeartbeatBody b{};
  b.oldest = log_.oldest();
  b.receivers = nreceivers_;
  std::memcpy(heartbeat_ + core::kFrameHeaderSize, &b, sizeof b);
  const DatagramSink::Datagram d{heartbeat_, kHeartbeatFrameLength};
  if (sink.send_datagrams({&d, 1}) == 1) {
    ++stats_.heartbeats;
    ++stats_.datagrams;
    stats_.bytes += kHeartbeatFrameLength;
    last_heartbeat_ns_ = now_ns;
    data_since_heartbeat_ = false;
    heartbeat_now_ = false;
    announced_ = true;
  } else {
    ++stats_.send_blocked;
  }
}

void ReliableSender::send_end_of_stream(DatagramSink& sink, std::int64_t now_ns) noexcept {
  send_heartbeat(sink, now_ns, true);
}

int ReliableSender::service(DatagramSink& sink, std::int64_t now_ns) noexcept {
  int work = 0;
  for (std::uint32_t i = 0; i < nrepairs_;) {
    if (repairs_[i].linger_until != 0 && repairs_[i].linger_until <= now_ns) {
      repairs_[i] = repairs_[--nrepairs_];
    } else {
      ++i;
    }
  }
  if (nrepairs_ != 0) work += send_repairs(sink, now_ns);
  if (log_.has_unsent()) work += static_cast<int>(flush(sink, now_ns));
  if (heartbeat_now_ || now_ns - last_heartbeat_ns_ >= opt_.heartbeat_interval_ns ||
      (data_since_heartbeat_ && now_ns - last_data_ns_ >= opt_.tail_heartbeat_ns)) {
    send_heartbeat(sink, now_ns, false);
    ++work;
  }
  for (std::uint32_t i = 0; i < nreceivers_;) {
    if (now_ns - receivers_[i].last_ns > opt_.receiver_timeout_ns) {
      receivers_[i] = receivers_[--nreceivers_];
      ++stats_.receivers_timed_out;
      ++work;
    } else {
      ++i;
    }
  }
  return work;
}

bool ReliableSender::all_caught_up() const noexcept {
  for (std::uint32_t i = 0; i < nreceivers_; ++i) {
    const Receiver& r = receivers_[i];
    if (!(r.flags & kControlFlagEndSeen) && r.position < log_.sent()) return false;
  }
  return !log_.has_unsent();
}

std::int64_t ReliableSender::next_deadline(std::int64_t now_ns) const noexcept {
  if (heartbeat_now_ || repairs_pending()) return now_ns;
  if (log_.has_unsent())
    return opt_.coalesce_ns > 0 && unsent_since_ns_ != 0 ? unsent_since_ns_ + opt_.coalesce_ns : now_ns;
  std::int64_t t = last_heartbeat_ns_ + opt_.heartbeat_interval_ns;
  if (data_since_heartbeat_) t = std::min(t, last_data_ns_ + opt_.tail_heartbeat_ns);
  return t;
}

}  // namespace pollux::transport::reliability
