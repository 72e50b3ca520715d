// The publisher's send log, which is also its retransmit buffer: a byte ring of frames in
// sequence order, plus an index from sequence to position.
//
// post copies each frame into the log once (the pool slot goes back to the application at
// once), and datagrams are sent straight from the log as runs of contiguous frames, so a
// retransmission re-sends the very bytes of the original: no second copy, no re-encoding. The
// log never blocks on subscribers: old frames are overwritten (and reported as unrecoverable
// to whoever NAKs them later). It only refuses a frame when that would overwrite frames not
// yet sent even once, i.e. when the transport below cannot keep up (back-pressure).
//
// Transport-agnostic: UDP sends runs with sendmmsg; RDMA UD multicast posts them as send work
// requests whose scatter-gather entry points into the log, which then lives in memory the NIC
// can read (Options::memory: slots carved from the registered buffer pool). A posted work
// request reads the log's bytes until it completes, later than the post: the transport pins the
// oldest bytes still being read (set_pinned) and append() never overwrites them.
// Single-threaded (the endpoint's owner).
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <new>

#include "absl/status/status.h"
#include "core/frame.h"
#include "transport/reliability/region.h"
#include "transport/reliability/wire.h"

namespace pollux::transport::reliability {

// A run of consecutive frames that is sent as one datagram.
struct FrameRun {
  const std::byte* data = nullptr;
  std::uint32_t bytes = 0;
  std::uint32_t count = 0;      // frames
  std::uint64_t first_seq = 0;  // sequence of the first frame
};

class SenderLog {
 public:
  struct Options {
    std::uint64_t capacity = 16u << 20;  // bytes, power of two
    std::uint32_t max_datagram = 1472;   // largest run (bytes); also the largest frame
    std::uint32_t stream_id = 0;
    std::uint32_t session_id = 0;
    // Caller-owned ring memory of `capacity` bytes (8-aligned, already pre-touched), e.g. pool
    // slots registered with the NIC; it must outlive the log. Null: the log maps its own.
    std::byte* memory = nullptr;
  };
  // set_pinned(kNoPin): nothing is being read by the transport.
  static constexpr std::uint64_t kNoPin = UINT64_MAX;

  SenderLog() = default;
  SenderLog(const SenderLog&) = delete;
  SenderLog& operator=(const SenderLog&) = delete;

  // Allocates and pre-touches the ring (unless Options::memory gives it) and the index
  // (capacity / 32 entries: a frame is at least a 32-byte header). InvalidArgument on a bad
  // capacity.
  absl::Status init(const Options& o);

  // Copies a frame (header + payload, `length` bytes, length <= max_frame()) into the log and
  // stamps its header: magic, version, length, stream, session and the next sequence. Returns
  // false (nothing changed) when the log is full of unsent frames, or when the write would
  // overwrite pinned bytes (set_pinned).
  [[nodiscard]] bool append(const std::byte* frame, std::uint32_t length) noexcept {
    std::byte* dst = claim(length);
    if (dst == nullptr) return false;
    std::memcpy(dst, frame, length);
    commit(length);
    return true;
  }

  // append() in two steps, for a writer that builds the frame in place (no copy): claim() the
  // room for a frame of `length` bytes (null = back-pressure, as append()), write the frame
  // there, then commit() the same length before any other call on the log. commit() sets
  // the header fields the log owns, as append() does.
  [[nodiscard]] std::byte* claim(std::uint32_t length) noexcept {
    const std::uint32_t wl = wire_size(length);
    std::uint64_t pos = head_;
    const std::uint64_t off = pos & mask_;
    if (off + wl > capacity_) pos += capacity_ - off;  // never split a frame: skip to the ring's start
    const std::uint64_t end = pos + wl;
    if (__builtin_expect(end > pin_limit_, 0)) return nullptr;
    if (!reclaim(end)) return nullptr;
    claim_pos_ = pos;
    return data_ + (pos & mask_);
  }
  void commit(std::uint32_t length) noexcept {
    const std::uint32_t wl = wire_size(length);
    const std::uint64_t pos = claim_pos_;
    std::byte* dst = data_ + (pos & mask_);
    if (wl != length) std::memset(dst + length, 0, wl - length);  // no stale bytes on the wire
    auto* h = reinterpret_cast<core::FrameHeader*>(dst);
    core::write_frame_identity(h, length, stream_id_, session_id_);  // flags and timestamp: the publisher's
    h->sequence = next_seq_;
    index_[next_seq_ & imask_] = pos;
    head_ = pos + wl;
    ++next_seq_;
  }

  FrameRun run_at(std::uint64_t seq, std::uint64_t limit) const noexcept {
    FrameRun r;
    if (seq < oldest_seq_ || seq >= limit || limit > next_seq_) return r;
    const std::uint64_t start = index_[seq & imask_];
    std::uint64_t cur = start;
    std::uint64_t s = seq;
    while (s < limit && index_[s & imask_] == cur) {
      // Contiguous positions are contiguous bytes only up to the ring's end: a frame that starts
      // exactly there is at offset 0 of the ring, and begins the next datagram.
      if (cur != start && (cur & mask_) == 0) break;
      const auto* h = reinterpret_cast<const core::FrameHeader*>(data_ + (cur & mask_));
      const std::uint32_t wl = wire_size(h->frame_length);
      if (cur + wl - start > max_datagram_) break;
      cur += wl;
      ++s;
    }
    r.data = data_ + (start & mask_);
    r.bytes = static_cast<std::uint32_t>(cur - start);
    r.count = static_cast<std::uint32_t>(s - seq);
    r.first_seq = seq;
    return r;
  }

  // The datagram of the one frame never sent (next() - sent() == 1): what
  // run_at(sent(), next()) returns then - a frame always fits a datagram and never wraps.
  struct Bytes {
    const std::byte* data;
    std::uint32_t bytes;
  };
  Bytes single_unsent() const noexcept {
    const std::byte* p = data_ + (index_[sent_seq_ & imask_] & mask_);
    return {p, wire_size(reinterpret_cast<const core::FrameHeader*>(p)->frame_length)};
  }

  // The next datagram never sent (count == 0: everything was sent).
  FrameRun next_unsent() const noexcept { return run_at(sent_seq_, next_seq_); }
  // Frames up to `seq` (exclusive) went out at least once.
  void mark_sent(std::uint64_t seq) noexcept {
    if (seq > sent_seq_) sent_seq_ = seq;
  }

  // Byte position of frame `seq` in the ring's history (oldest() <= seq <= next(); next():
  // the end of the newest frame): [a, b) spans position(b) - position(a) bytes on the wire,
  // padding at a ring wrap included. O(1).
  std::uint64_t position(std::uint64_t seq) const noexcept { return seq >= next_seq_ ? head_ : index_[seq & imask_]; }
  // History position of a byte of the ring that holds a frame of the log now (a datagram that
  // run_at()/single_unsent() returned, before the next append): the unique position congruent
  // to its offset within the last `capacity` bytes written.
  std::uint64_t position_of(const std::byte* p) const noexcept {
    const std::uint64_t back = (head_ - static_cast<std::uint64_t>(p - data_)) & mask_;
    return head_ - (back == 0 ? capacity_ : back);
  }
  // True when `p` points into the ring (a datagram of the log, not e.g. a heartbeat).
  bool contains(const std::byte* p) const noexcept {
    const auto a = reinterpret_cast<std::uintptr_t>(p), base = reinterpret_cast<std::uintptr_t>(data_);
    return a - base < capacity_;  // one compare; a below base wraps to a huge offset
  }
  // Bytes from history position `pos` on are still read by the transport (kNoPin: none): until
  // a later call moves it, append() refuses a frame that would overwrite them.
  void set_pinned(std::uint64_t pos) noexcept { pin_limit_ = pos >= kNoPin - capacity_ ? kNoPin : pos + capacity_; }

  std::uint64_t next() const noexcept { return next_seq_; }      // sequence the next append gets
  std::uint64_t sent() const noexcept { return sent_seq_; }      // first sequence never sent
  std::uint64_t oldest() const noexcept { return oldest_seq_; }  // oldest retransmittable
  bool has_unsent() const noexcept { return sent_seq_ != next_seq_; }
  // Bytes of frames never sent (padding at a ring wrap included): O(1), for coalescing.
  std::uint64_t unsent_bytes() const noexcept { return has_unsent() ? head_ - index_[sent_seq_ & imask_] : 0; }
  std::uint32_t max_frame() const noexcept { return max_datagram_ & ~(kWireAlignment - 1); }
  std::uint64_t capacity() const noexcept { return capacity_; }
  std::uint32_t session_id() const noexcept { return session_id_; }
  std::uint32_t stream_id() const noexcept { return stream_id_; }

 private:
  // Forgets the oldest frames that a write ending at `end` would overwrite (and any beyond the
  // index's reach). False when one of them was never sent.
  bool reclaim(std::uint64_t end) noexcept {
    while (oldest_seq_ < next_seq_ &&
           (index_[oldest_seq_ & imask_] + capacity_ < end || next_seq_ - oldest_seq_ > imask_)) {
      if (oldest_seq_ >= sent_seq_) return false;
      ++oldest_seq_;
    }
    return true;
  }

  Region<std::byte> buf_;      // the ring, when the log maps its own (Options::memory null)
  std::byte* data_ = nullptr;  // the ring: buf_ or Options::memory
  Region<std::uint64_t> index_;
  std::uint64_t capacity_ = 0, mask_ = 0, imask_ = 0;
  std::uint32_t max_datagram_ = 0, stream_id_ = 0, session_id_ = 0;
  std::uint64_t head_ = 0;       // byte position after the newest frame
  std::uint64_t claim_pos_ = 0;  // where the last claim() put its frame
  std::uint64_t next_seq_ = 1;   // sequences start at 1 (0 means "none" in FrameHeader)
  std::uint64_t sent_seq_ = 1;
  std::uint64_t oldest_seq_ = 1;
  std::uint64_t pin_limit_ = kNoPin;  // set_pinned(): appends end at or below this
};

}  // namespace pollux::transport::reliability
