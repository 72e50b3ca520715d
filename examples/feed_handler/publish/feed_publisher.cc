#include "feed_handler/publish/feed_publisher.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "itch/reader.h"
#include "pollux/clock.h"

namespace pollux::feed {

namespace {

// Slack after each batch buffer: the packing loop copies a fixed 64 bytes per message (one
// unrolled copy instead of a length-dependent memcpy call) and may write past the message.
constexpr std::uint32_t kCopySlack = 64;

// Offset (ns from the start of the replay) at which each message is due.
struct RateSchedule {
  std::uint64_t rate;
  std::uint64_t i = 0;
  std::int64_t first(itch::MessageView) noexcept { return 0; }
  std::int64_t next(itch::MessageView) noexcept {
    ++i;
    return static_cast<std::int64_t>(static_cast<unsigned __int128>(i) * 1'000'000'000u / rate);
  }
};

// The feed's own timestamps (ns since midnight) divided by `speed`; a pause longer than
// max_gap_ns is shortened to it, so pre-open and after-close silences do not stall a replay.
struct TimestampSchedule {
  double speed;
  std::int64_t max_gap_ns;
  std::uint64_t prev_ts = 0;
  std::int64_t t = 0;
  std::int64_t first(itch::MessageView m) noexcept {
    prev_ts = m.timestamp();
    return 0;
  }
  std::int64_t next(itch::MessageView m) noexcept {
    const std::uint64_t ts = m.timestamp();
    if (ts > prev_ts) {
      const double d = static_cast<double>(ts - prev_ts) / speed;
      t += d > static_cast<double>(max_gap_ns) ? max_gap_ns : static_cast<std::int64_t>(d);
      prev_ts = ts;
    }
    return t;
  }
};

struct NoSchedule {};

void sleep_ns(std::int64_t ns) {
  timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  nanosleep(&ts, nullptr);
}

}  // namespace

absl::StatusOr<std::unique_ptr<FeedPublisher>> FeedPublisher::open(Context& ctx, const FeedConfig& cfg, IdleKind idle) {
  std::unique_ptr<FeedPublisher> fp(new FeedPublisher(cfg, idle));
  for (std::uint32_t p = 0; p < cfg.streams; ++p) {
    absl::StatusOr<Publisher> pub = ctx.publisher(cfg.partition_topic(p));
    if (!pub.ok()) return pub.status();
    if (cfg.batch_bytes > pub->max_payload()) {
      auto it = cfg.where.find("feed.batch_bytes");
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: feed.batch_bytes: %d does not fit one Pollux message: the largest this configuration takes is %d "
          "bytes (Publisher::max_payload(): pool.slot_size - 32 in dedicated/shared threading, shm.log_size/32 - 32 "
          "in inline shm, udp.mtu - 60 over UDP); lower feed.batch_bytes or raise the limit",
          it != cfg.where.end() ? it->second : "<defaults>", cfg.batch_bytes, pub->max_payload()));
    }
    fp->pubs_.push_back(std::move(*pub));
  }
  fp->batch_bytes_ = cfg.batch_bytes;
  fp->batches_.resize(cfg.streams);
  if (cfg.batch_bytes != 0) {
    const std::size_t stride = cfg.batch_bytes + kCopySlack;
    fp->storage_.assign(stride * cfg.streams, 0);  // touched now, not on the first message
    for (std::uint32_t p = 0; p < cfg.streams; ++p) fp->batches_[p].data = fp->storage_.data() + p * stride;
  } else {
    fp->bare_storage_.resize(std::size_t{kBareBatch} * cfg.streams);
    for (std::uint32_t p = 0; p < cfg.streams; ++p) fp->batches_[p].bare = fp->bare_storage_.data() + p * kBareBatch;
  }
  return fp;
}

absl::Status FeedPublisher::wait_connected(const std::atomic<bool>& stop) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(cfg_.connect_timeout_ms);
  for (;;) {
    std::uint32_t missing = 0, first = 0;
    for (std::uint32_t p = 0; p < pubs_.size(); ++p) {
      if (!pubs_[p].is_connected() && missing++ == 0) first = p;
    }
    if (missing == 0) return absl::OkStatus();
    if (stop.load(std::memory_order_relaxed)) return absl::CancelledError("stopped while waiting for subscribers");
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::DeadlineExceededError(absl::StrFormat(
          "no subscriber on %d of %d stream(s) (first: topic \"%s\") after %d ms (feed.connect_timeout_ms)", missing,
          pubs_.size(), cfg_.partition_topic(first), cfg_.connect_timeout_ms));
    }
    if (service() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void FeedPublisher::publish() noexcept {
  if (progress_ == nullptr) return;
  progress_->messages.store(result_.messages, std::memory_order_relaxed);
  progress_->frames.store(result_.frames, std::memory_order_relaxed);
}

int FeedPublisher::service() noexcept {
  int work = 0;
  for (Publisher& p : pubs_) work += p.service();
  return work;
}

bool FeedPublisher::retry(std::uint32_t p, std::int64_t r, std::int64_t* not_connected_since) noexcept {
  if (r == kBackPressured) {
    ++result_.back_pressured;
  } else if (r == kNotConnected) {
    // Every subscriber of this stream went away mid-replay (lossy shm reports this rather
    // than back-pressure): give them the connect timeout to come back.
    const std::int64_t now = now_ns();
    if (*not_connected_since == 0) *not_connected_since = now;
    if (now - *not_connected_since > static_cast<std::int64_t>(cfg_.connect_timeout_ms) * 1'000'000) {
      status_ =
          absl::UnavailableError(absl::StrFormat("topic \"%s\": no subscriber for %d ms (feed.connect_timeout_ms)",
                                                 cfg_.partition_topic(p), cfg_.connect_timeout_ms));
      return false;
    }
  } else {
    status_ = absl::InternalError(
        absl::StrFormat("topic \"%s\": offer failed: %s", cfg_.partition_topic(p), std::string(result_name(r))));
    return false;
  }
  if (stop_->load(std::memory_order_relaxed)) {
    result_.stopped = true;
    return false;
  }
  if (r == kBackPressured) {
    backpressured_ = true;
    backpressure_idle_.idle(0);
  } else {
    idle_.idle(0);
  }
  return true;
}

bool FeedPublisher::offer(std::uint32_t p, const std::uint8_t* data, std::uint32_t len) noexcept {
  std::int64_t not_connected_since = 0;
  for (;;) {
    const std::int64_t r = pubs_[p].offer(data, len);
    if (r >= 0) [[likely]] {
      ++result_.frames;
      result_.bytes += len;
      if (backpressured_) [[unlikely]] {
        backpressured_ = false;
        backpressure_idle_.reset();
      }
      return true;
    }
    if (!retry(p, r, &not_connected_since)) return false;
  }
}

bool FeedPublisher::offer_bare(std::uint32_t p) noexcept {
  Batch& b = batches_[p];
  std::int64_t not_connected_since = 0;
  std::uint32_t done = 0;
  while (done < b.messages) {
    const std::int64_t r = pubs_[p].offer_batch({b.bare + done, b.messages - done});
    if (r > 0) [[likely]] {
      for (std::uint32_t i = done; i < done + static_cast<std::uint32_t>(r); ++i) result_.bytes += b.bare[i].size();
      done += static_cast<std::uint32_t>(r);
      result_.frames += static_cast<std::uint64_t>(r);
      if (backpressured_) [[unlikely]] {
        backpressured_ = false;
        backpressure_idle_.reset();
      }
      continue;
    }
    if (!retry(p, r == 0 ? kBackPressured : r, &not_connected_since)) {
      // Keep what was not offered at the front, so the caller's count of unsent messages holds.
      std::copy(b.bare + done, b.bare + b.messages, b.bare);
      b.messages -= done;
      return false;
    }
  }
  return true;
}

bool FeedPublisher::flush(std::uint32_t p) noexcept {
  Batch& b = batches_[p];
  if (b.messages == 0) return true;
  if (stop_->load(std::memory_order_relaxed)) [[unlikely]] {
    result_.stopped = true;
    return false;
  }
  if (batch_bytes_ != 0) {
    if (live_) {
      b.data[0] = kLiveChunkMarker;
      std::memcpy(b.data + 1, &window_rx_ns_, sizeof window_rx_ns_);  // little-endian (x86)
    }
    if (!offer(p, b.data, b.len)) return false;
  } else if (!offer_bare(p)) {
    return false;
  }
  b.len = base_len_;
  b.messages = 0;
  publish();
  return true;
}

bool FeedPublisher::flush_all() noexcept {
  for (std::uint32_t p = 0; p < batches_.size(); ++p) {
    if (!flush(p)) return false;
  }
  return true;
}

bool FeedPublisher::offer_notice(const Notice& n) noexcept {
  std::uint8_t wire[sizeof(NoticeWire)];
  encode_notice(n, wire);
  for (std::uint32_t p = 0; p < pubs_.size(); ++p) {
    if (!offer(p, wire, sizeof wire)) return false;
  }
  ++result_.notices;
  return true;
}

template <bool kPacked, bool kPaced, class Schedule>
absl::Status FeedPublisher::run(Source& src, Schedule schedule) {
  const std::uint32_t streams = static_cast<std::uint32_t>(pubs_.size());
  const std::uint8_t* end = nullptr;  // of the current window: the packing copy never reads past it
  const std::uint32_t limit = batch_bytes_;
  itch::MessageCounts& counts = result_.counts;
  std::uint64_t messages = 0;

  // The per-message path: partition, pack (or offer), count.
  auto route = [&](itch::MessageView m) noexcept -> bool {
    const std::uint32_t p = streams == 1 ? 0 : m.stock_locate() % streams;
    const std::uint32_t size = static_cast<std::uint32_t>(m.size());
    if constexpr (kPacked) {
      Batch* b = &batches_[p];
      if (b->len + 2 + size > limit) [[unlikely]] {
        result_.messages = messages;
        if (!flush(p)) return false;
      }
      std::uint8_t* d = b->data + b->len;
      d[0] = 0;
      d[1] = static_cast<std::uint8_t>(size);
      if (m.data() + kCopySlack <= end) [[likely]] {
        std::memcpy(d + 2, m.data(), kCopySlack);  // fixed size: inlined, no call
      } else {
        std::memcpy(d + 2, m.data(), size);
      }
      b->len += 2 + size;
      ++b->messages;
    } else {
      // Bare: views into the source window, offered kBareBatch at a time (and all of them
      // before the window is replaced).
      Batch* b = &batches_[p];
      b->bare[b->messages++] = {reinterpret_cast<const std::byte*>(m.data()), size};
      counts.add(m.type_byte());
      ++messages;
      if (b->messages == kBareBatch) [[unlikely]] {
        result_.messages = messages;
        return flush(p);
      }
      return true;
    }
    counts.add(m.type_byte());
    ++messages;
    return true;
  };
  // After a stop or an error: what was packed but never offered was not published.
  auto unsent = [&] {
    std::uint64_t n = 0;
    for (const Batch& b : batches_) n += b.messages;
    return n;
  };
  bool halted = false;  // an offer failed or a stop was requested: status_ says which
  // Once per window (1 MiB of a file): bare batches point into it.
  auto before_advance = [&]() noexcept {
    // Bare batches point into the window; live batches go out with what the network had.
    if (!kPacked || live_) {
      result_.messages = messages;
      if (!flush_all()) {
        halted = true;
        return false;
      }
    }
    return true;
  };

  result_.start_ns = now_ns();
  absl::Status scanned;
  if constexpr (!kPaced) {
    scanned = scan_source(
        src,
        [&](std::span<const std::uint8_t> w, itch::ParseResult* r) {
          if (live_) {
            // A notice goes out where it happened: after everything before it.
            if (const Notice* n = src.notice(); n != nullptr) {
              result_.messages = messages;
              if (!flush_all() || !offer_notice(*n)) {
                halted = true;
                return false;
              }
            }
            window_rx_ns_ = src.window_rx_ns();
          }
          end = w.data() + w.size();
          bool ok = true;
          *r = itch::for_each_message(w, [&](itch::MessageView m) { return ok = route(m); });
          if (!ok) halted = true;
          return ok;
        },
        before_advance);
  } else {
    const std::int64_t t0 = result_.start_ns;
    bool first = true;
    std::int64_t due = 0;
    scanned = scan_source(
        src,
        [&](std::span<const std::uint8_t> w, itch::ParseResult* r) {
          end = w.data() + w.size();
          itch::MessageCursor cur(w);
          itch::MessageView m;
          bool have = cur.next(&m);
          if (have) {
            due = first ? schedule.first(m) : schedule.next(m);
            first = false;
          }
          while (have) {
            const std::int64_t elapsed = now_ns() - t0;
            if (due > elapsed) {
              if (stop_->load(std::memory_order_relaxed)) {
                result_.stopped = true;
                return false;
              }
              // Far from the next message: sleep most of the way, then let the idle strategy
              // (busy-spin for the tightest schedule) cover the last millisecond.
              if (service() != 0) continue;
              if (due - elapsed > 2'000'000) {
                sleep_ns(std::min<std::int64_t>(due - elapsed - 1'000'000, 10'000'000));
              } else {
                idle_.idle(0);
              }
              continue;
            }
            const std::int64_t oldest = due;
            std::uint32_t n = 0;
            // Everything due goes out now, packed per partition; a round is capped so that a
            // replay running behind still flushes (and re-reads the clock) regularly.
            while (have && due <= elapsed && n < 4096) {
              if (!route(m)) {
                halted = true;
                return false;
              }
              ++n;
              have = cur.next(&m);
              if (have) due = schedule.next(m);
            }
            result_.messages = messages;
            if (!flush_all()) {
              halted = true;
              return false;
            }
            result_.lag.record_n(now_ns() - (t0 + oldest), n);
            idle_.reset();
          }
          *r = cur.result();
          return true;
        },
        before_advance);
  }
  if (halted) {
    result_.messages = messages - unsent();
    return status_;
  }
  if (!scanned.ok()) return scanned;
  result_.messages = messages;
  if (!flush_all()) {
    result_.messages = messages - unsent();
    return status_;
  }
  publish();
  return absl::OkStatus();
}

absl::StatusOr<ReplayResult> FeedPublisher::replay(Source& src, RoleProgress* progress, const std::atomic<bool>& stop) {
  result_ = ReplayResult{};
  progress_ = progress;
  stop_ = &stop;
  status_ = absl::OkStatus();
  if (progress_ != nullptr) progress_->state.store(RoleProgress::kReady, std::memory_order_relaxed);
  const bool packed = batch_bytes_ != 0;
  live_ = src.live();
  base_len_ = live_ && packed ? static_cast<std::uint32_t>(kLiveChunkHeader) : 0;
  for (Batch& b : batches_) b.len = base_len_;
  if (live_) {
    src.set_wait_hooks([](void* self) { return static_cast<FeedPublisher*>(self)->service(); }, this, &stop,
                       idle_.kind());
  }
  const std::int64_t cpu0 = thread_cpu_ns();
  absl::Status s;
  // Live: the network sets the pace.
  switch (live_ ? ReplayMode::kMax : cfg_.replay) {
    case ReplayMode::kMax:
      s = packed ? run<true, false>(src, NoSchedule{}) : run<false, false>(src, NoSchedule{});
      break;
    case ReplayMode::kRate:
      s = packed ? run<true, true>(src, RateSchedule{cfg_.rate}) : run<false, true>(src, RateSchedule{cfg_.rate});
      break;
    case ReplayMode::kOriginal:
    case ReplayMode::kSpeed: {
      const TimestampSchedule ts{cfg_.replay == ReplayMode::kOriginal ? 1.0 : cfg_.speed,
                                 static_cast<std::int64_t>(cfg_.max_gap_ms) * 1'000'000};
      s = packed ? run<true, true>(src, ts) : run<false, true>(src, ts);
      break;
    }
  }
  result_.end_ns = now_ns();
  result_.cpu_ns = thread_cpu_ns() - cpu0;
  if (live_ && stop.load(std::memory_order_relaxed)) result_.stopped = true;
  publish();
  if (progress_ != nullptr) {
    progress_->state.store(s.ok() ? RoleProgress::kDone : RoleProgress::kFailed, std::memory_order_relaxed);
  }
  if (!s.ok() && !result_.stopped) return s;
  return std::move(result_);
}

void FeedPublisher::close() {
  // Streams close together: a closing publisher may linger to repair its subscribers' last
  // gaps (UDP), and closing them one after another would leave the later streams silent -
  // no heartbeats - for that time. The replay is over, so no other thread uses them.
  if (pubs_.size() <= 1) {
    for (Publisher& p : pubs_) p.close();
    return;
  }
  std::vector<std::thread> closers;
  closers.reserve(pubs_.size());
  for (Publisher& p : pubs_) closers.emplace_back([&p] { p.close(); });
  for (std::thread& t : closers) t.join();
}

}  // namespace pollux::feed
