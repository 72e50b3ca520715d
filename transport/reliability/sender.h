// Publisher side of the reliability protocol (docs/PROTOCOL.md): the send log (which doubles as
// the bounded retransmit buffer), heartbeats, the table of subscribers heard from, and NAK
// servicing with suppression (one repair per loss, however many subscribers NAK it).
//
// Transport-agnostic: frames come in through append(), datagrams go out through a
// DatagramSink (one virtual call per batch of datagrams), control messages from subscribers
// come in through on_control(). The clock is the caller's. Single-threaded.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "transport/reliability/sender_log.h"
#include "transport/reliability/wire.h"

namespace pollux::transport::reliability {

// Where a sender's datagrams go (UDP: sendmmsg to the group; RDMA UD: a post of send WRs).
class DatagramSink {
 public:
  struct Datagram {
    const std::byte* data;
    std::uint32_t bytes;
  };
  virtual ~DatagramSink() = default;
  // Sends `d` in order with one doorbell/syscall where possible; returns how many went out
  // (the rest would block: the caller retries later).
  virtual std::uint32_t send_datagrams(std::span<const Datagram> d) noexcept = 0;
};

// A closing publisher that lingers for its subscribers' end confirmations repeats its
// end-of-stream heartbeat this often (UDP and RDMA UD alike).
inline constexpr std::int64_t kEndResendNs = 5'000'000;

struct SenderOptions {
  SenderLog::Options log;
  std::int64_t heartbeat_interval_ns = 10'000'000;   // idle heartbeat period
  std::int64_t tail_heartbeat_ns = 1'000'000;        // heartbeat this long after the last data
  std::int64_t receiver_timeout_ns = 2'000'000'000;  // a subscriber silent this long is forgotten
  std::int64_t retransmit_linger_ns = 1'000'000;     // NAKs for a range repaired this recently are ignored
  std::uint32_t max_datagrams_per_call = 64;         // bounds the work of flush()/service()
  std::int64_t coalesce_ns = 0;                      // > 0: a partly filled last datagram waits this long
  // NAK service limits (docs/PROTOCOL.md, "Trust model"): a NAK range asks for at most this
  // many sequences; repairs are paid from a token bucket (bytes) per subscriber and one for
  // all of them, charged when scheduled. A rate of 0 is unlimited.
  std::uint64_t nak_max_range = 16384;
  std::uint64_t repair_rate = 64ull << 20;         // bytes/s per subscriber
  std::uint64_t repair_burst = 1ull << 20;         // bytes (what a subscriber can get at once)
  std::uint64_t repair_rate_total = 256ull << 20;  // bytes/s, all subscribers together
  std::uint64_t repair_burst_total = 4ull << 20;   // bytes
};

struct SenderStats {
  std::uint64_t datagrams = 0, bytes = 0;  // everything sent (data, repairs, heartbeats)
  std::uint64_t data_datagrams = 0;        // first transmissions
  std::uint64_t heartbeats = 0;
  std::uint64_t send_blocked = 0;  // the sink took fewer datagrams than offered
  std::uint64_t naks = 0, nak_ranges = 0;
  std::uint64_t naks_suppressed = 0;   // ranges (or parts) already being repaired
  std::uint64_t naks_unavailable = 0;  // ranges (or parts) older than the log holds
  std::uint64_t retransmit_frames = 0, retransmit_datagrams = 0;
  std::uint64_t status_messages = 0;
  std::uint64_t control_malformed = 0;     // not a control message of this stream/session
  std::uint64_t control_bytes = 0;         // bytes of every control datagram received
  std::uint64_t retransmit_bytes = 0;      // bytes of repair datagrams sent
  std::uint64_t naks_unannounced = 0;      // NAKs from a subscriber not heard before: not served
  std::uint64_t nak_ranges_capped = 0;     // ranges cut to nak_max_range
  std::uint64_t repairs_rate_limited = 0;  // ranges (or parts) refused for want of tokens
  std::uint64_t repair_bytes_refused = 0;  // bytes of them
  std::uint64_t receivers_joined = 0, receivers_left = 0, receivers_timed_out = 0;
};

class ReliableSender {
 public:
  static constexpr std::uint32_t kMaxReceivers = 64;
  static constexpr std::uint32_t kMaxRepairs = 64;

  absl::Status init(const SenderOptions& o);

  // Data path -----------------------------------------------------------------------------------
  // Copies a frame into the log (it gets the next sequence); false = back-pressure.
  [[nodiscard]] bool append(const std::byte* frame, std::uint32_t length) noexcept {
    return log_.append(frame, length);
  }
  // append() in place (SenderLog::claim/commit): room for a frame of `length` bytes (null =
  // back-pressure); the caller writes the frame there and commits the same length.
  [[nodiscard]] std::byte* claim(std::uint32_t length) noexcept { return log_.claim(length); }
  void commit(std::uint32_t length) noexcept { log_.commit(length); }
  // Sends frames never sent, as runs packed up to the datagram size (with coalescing, a partly
  // filled last datagram only once it waited coalesce_ns). Returns datagrams sent.
  std::uint32_t flush(DatagramSink& sink, std::int64_t now_ns) noexcept;

  // Control path (still hot-ish: called for every control datagram) ------------------------------
  // A datagram a subscriber sent us. Schedules repairs, updates the subscriber table; a NAK for
  // data the log no longer holds triggers an immediate heartbeat carrying log.oldest().
  void on_control(const std::byte* data, std::uint32_t len, std::int64_t now_ns) noexcept;

  // Timers: repairs, heartbeats, subscriber time-outs. Returns work done.
  int service(DatagramSink& sink, std::int64_t now_ns) noexcept;

  // Sends an end-of-stream heartbeat (call on close, possibly repeatedly while lingering).
  // Every heartbeat after it carries end of stream too: subscribers take a plain heartbeat
  // after an end as proof that the end was forged.
  void send_end_of_stream(DatagramSink& sink, std::int64_t now_ns) noexcept;

  // Subscribers heard from within receiver_timeout.
  std::uint32_t receivers() const noexcept { return nreceivers_; }
  bool connected() const noexcept { return nreceivers_ > 0; }
  // Every known subscriber confirmed everything sent (or saw the end of stream).
  bool all_caught_up() const noexcept;
  // Repairs scheduled and not yet sent.
  bool repairs_pending() const noexcept;
  // When service() next has something to do (heartbeat or repair).
  std::int64_t next_deadline(std::int64_t now_ns) const noexcept;

  const SenderLog& log() const noexcept { return log_; }
  // The transport still reads the log from this history position on (SenderLog::set_pinned).
  void set_pinned(std::uint64_t pos) noexcept { log_.set_pinned(pos); }
  const SenderStats& stats() const noexcept { return stats_; }

 private:
  // After sink.send_datagrams of d[0..n): the first `sent` went out, the last of them ending
  // before sequence `end` - counters, the log's sent mark, the heartbeat timer.
  void note_sent(const DatagramSink::Datagram* d, std::uint32_t sent, std::uint64_t end, std::int64_t now_ns) noexcept;
  // Bytes of repair one may still cause, refilled at `rate` per second up to `burst`.
  struct TokenBucket {
    std::uint64_t tokens;
    std::int64_t last_ns;
    void refill(std::int64_t now_ns, std::uint64_t rate, std::uint64_t burst) noexcept {
      if (now_ns > last_ns) {
        // Seconds since the last refill, capped: no overflow, and a full bucket after 1000 s anyway.
        const double add = static_cast<double>(rate) *
                           static_cast<double>(std::min<std::int64_t>(now_ns - last_ns, 1'000'000'000'000)) * 1e-9;
        tokens = add >= static_cast<double>(burst - std::min(tokens, burst)) ? burst
                                                                             : tokens + static_cast<std::uint64_t>(add);
        last_ns = now_ns;
      }
    }
  };
  struct Receiver {
    std::uint64_t id;
    std::uint64_t position;
    std::uint64_t highest;
    std::int64_t last_ns;
    std::uint16_t flags;
    TokenBucket bucket;
  };
  struct Repair {
    std::uint64_t from, to;     // [from, to)
    std::int64_t linger_until;  // 0 while pending (not fully sent yet)
  };

  void schedule_repair(std::uint64_t from, std::uint64_t to, std::int64_t now_ns, Receiver& r) noexcept;
  // Pays for repairing [from, to) from r's and the total bucket; returns the end of what they
  // afford (from: nothing).
  std::uint64_t charge(std::uint64_t from, std::uint64_t to, Receiver& r) noexcept;
  int send_repairs(DatagramSink& sink, std::int64_t now_ns) noexcept;
  void send_heartbeat(DatagramSink& sink, std::int64_t now_ns, bool end) noexcept;
  Receiver* find_receiver(std::uint64_t id) noexcept;
  Receiver* add_receiver(std::uint64_t id, std::int64_t now_ns) noexcept;

  SenderOptions opt_;
  SenderLog log_;
  SenderStats stats_;
  Receiver receivers_[kMaxReceivers] = {};
  std::uint32_t nreceivers_ = 0;
  Repair repairs_[kMaxRepairs] = {};
  std::uint32_t nrepairs_ = 0;
  TokenBucket total_{};
  std::int64_t last_heartbeat_ns_ = 0;
  std::int64_t last_data_ns_ = 0;
  bool data_since_heartbeat_ = false;
  std::int64_t unsent_since_ns_ = 0;  // coalescing: when a partial datagram started waiting
  // Nothing is sent before the owner first calls service() or flush(): that announces the
  // session (a transport must not announce a session its owner does not service yet - the
  // subscribers would time it out, docs/PROTOCOL.md section 2).
  bool heartbeat_now_ = true;
  bool announced_ = false;  // the first heartbeat went out
  bool ending_ = false;     // send_end_of_stream() was called
  alignas(8) std::byte heartbeat_[kHeartbeatFrameLength] = {};
};

}  // namespace pollux::transport::reliability
