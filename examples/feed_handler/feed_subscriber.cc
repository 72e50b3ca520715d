#include "feed_handler/feed_subscriber.h"

#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/clock.h"
#include "feed_handler/notice.h"
#include "itch/reader.h"

namespace pollux::feed {

using core::Clock;

absl::StatusOr<std::unique_ptr<FeedSubscriber>> FeedSubscriber::Open(Context& ctx, const FeedConfig& cfg,
                                                                     core::IdleKind idle) {
  std::unique_ptr<FeedSubscriber> fs(new FeedSubscriber(cfg, idle));
  for (std::uint32_t p = 0; p < cfg.streams; ++p) {
    absl::StatusOr<Subscriber> sub = ctx.subscriber(cfg.Topic(p));
    if (!sub.ok()) return sub.status();
    fs->subs_.push_back(std::move(*sub));
  }
  itch::BookSetOptions o;
  // Sized for the generator's steady state (symbols x orders_per_symbol) or a busy real
  // feed, so the order map rarely grows (and allocates) mid-replay.
  o.expected_orders = std::max<std::size_t>(std::size_t{1} << 16,
                                            std::size_t{2} * cfg.symbols * cfg.orders_per_symbol);
  // A file replay's universe is not in the configuration (feed.symbols is the generator's):
  // size the map from the start-of-day Stock Directory instead, before the order flow.
  o.orders_per_book = cfg.orders_per_symbol;
  fs->result_.books = std::make_unique<itch::BookSet>(o);
  return fs;
}

absl::Status FeedSubscriber::Run(RoleProgress* progress, const std::atomic<bool>& stop) {
  SubscribeResult& r = result_;
  itch::BookSet& books = *r.books;
  const std::size_t n = subs_.size();
  std::vector<std::uint8_t> ended(n, 0);
  std::size_t open = n;
  std::int64_t cpu0 = 0;
  const std::uint32_t first_stream = n != 0 ? subs_[0].stream_id() : 0;

  auto on_message = [&](const Message& msg) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(msg.payload.data());
    const std::size_t len = msg.payload.size();
    if (len == 0) return;  // carries no ITCH message (pollux-feed never sends one; others may)
    std::uint64_t applied = 0;
    std::int64_t rx_ns = 0;
    itch::ParseResult pr;
    if (p[0] == 0) {
      // A BinaryFILE chunk (the first byte is a length prefix's high byte).
      pr = books.ApplyAll({p, len});  // its order slots and levels prefetched a few messages ahead
      applied = pr.messages;
    } else if (p[0] == kLiveChunkMarker && len >= kLiveChunkHeader) {
      std::memcpy(&rx_ns, p + 1, sizeof rx_ns);
      pr = books.ApplyAll({p + kLiveChunkHeader, len - kLiveChunkHeader});
      applied = pr.messages;
    } else if (p[0] == kNoticeMarker) {
      Notice n;
      if (!DecodeNotice({p, len}, &n)) {
        pr.error = itch::ParseError::kUnknownType;
        pr.type = p[0];
      } else if (msg.stream_id == first_stream) {
        switch (n.kind) {
          case Notice::kGap:
            ++r.feed_gaps;
            r.feed_lost += n.count;
            break;
          case Notice::kStale: ++r.feed_stale; break;
          case Notice::kSession: ++r.feed_sessions; break;
          case Notice::kFresh: break;
        }
      }
    } else {
      pr = itch::CheckMessage({p, len});
      if (pr.ok()) {
        books.Apply(itch::MessageView(p, len));
        applied = 1;
      }
    }
    if (!pr.ok()) [[unlikely]] {
      if (r.malformed++ == 0) {
        r.first_malformed = absl::StrFormat("stream %d sequence %d: %s", msg.stream_id, msg.sequence,
                                            pr.ToStatus().message());
      }
    }
    const std::int64_t now = Clock::now_ns();
    r.latency.record_n(now - msg.publisher_ns, applied);
    if (rx_ns != 0) r.wire_latency.record_n(now - rx_ns, applied);
    if (r.first_ns == 0) [[unlikely]] {
      r.first_ns = now;
      cpu0 = ThreadCpuNs();
    }
    r.last_ns = now;
    r.messages += applied;
    r.bytes += len;
    ++r.frames;
  };
  auto on_gap = [&](const Gap& g) {
    ++r.gaps;
    if (g.reason == GapReason::kOverrun) {
      r.overruns += g.count;
    } else {
      r.lost += g.count;
    }
  };
  auto on_event = [&](const StreamEvent& ev) {
    if (ev.kind != StreamEventKind::kEndOfStream && ev.kind != StreamEventKind::kPublisherDied) return;
    for (std::size_t i = 0; i < n; ++i) {
      if (subs_[i].stream_id() == ev.stream_id && !ended[i]) {
        ended[i] = 1;
        --open;
        ++(ev.kind == StreamEventKind::kEndOfStream ? r.ended : r.died);
      }
    }
  };

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(cfg_.connect_timeout_ms);
  bool ready = false;
  std::uint32_t idle_rounds = 0;
  while (open > 0) {
    int work = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (!ended[i]) work += subs_[i].poll(on_message, on_gap, on_event, 256);
    }
    if (work != 0) {
      if (progress != nullptr) {
        progress->messages.store(r.messages, std::memory_order_relaxed);
        progress->frames.store(r.frames, std::memory_order_relaxed);
        progress->gaps.store(r.gaps, std::memory_order_relaxed);
        progress->lost.store(r.lost, std::memory_order_relaxed);
      }
      idle_rounds = 0;
      continue;
    }
    // Control checks only when idle, and only every 64th idle round.
    if ((++idle_rounds & 63) == 0) {
      if (stop.load(std::memory_order_relaxed)) {
        r.stopped = true;
        break;
      }
      if (!ready) {
        bool all = true;
        for (std::size_t i = 0; i < n && all; ++i) all = ended[i] || subs_[i].is_connected();
        if (all) {
          ready = true;
          if (progress != nullptr) progress->state.store(RoleProgress::kReady, std::memory_order_release);
        } else if (std::chrono::steady_clock::now() > deadline) {
          std::string missing;
          for (std::size_t i = 0; i < n; ++i) {
            if (!ended[i] && !subs_[i].is_connected()) absl::StrAppend(&missing, missing.empty() ? "" : ", ", cfg_.Topic(static_cast<std::uint32_t>(i)));
          }
          if (progress != nullptr) progress->state.store(RoleProgress::kFailed, std::memory_order_release);
          return absl::DeadlineExceededError(absl::StrFormat(
              "no publisher on topic(s) %s after %d ms (feed.connect_timeout_ms)", missing, cfg_.connect_timeout_ms));
        }
      }
    }
    idle_.idle(0);
  }
  if (cpu0 != 0) r.cpu_ns = ThreadCpuNs() - cpu0;
  if (progress != nullptr) {
    progress->messages.store(r.messages, std::memory_order_relaxed);
    progress->frames.store(r.frames, std::memory_order_relaxed);
    progress->gaps.store(r.gaps, std::memory_order_relaxed);
    progress->lost.store(r.lost, std::memory_order_relaxed);
    progress->state.store(RoleProgress::kDone, std::memory_order_release);
  }
  for (Subscriber& s : subs_) s.close();
  return absl::OkStatus();
}

}  // namespace pollux::feed
