#include "feed_handler/book/feed_subscriber.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "feed_handler/publish/notice.h"
#include "itch/reader.h"
#include "pollux/clock.h"

namespace pollux::feed {

absl::StatusOr<std::unique_ptr<FeedSubscriber>> FeedSubscriber::open(Context& ctx, const FeedConfig& cfg,
                                                                     IdleKind idle) {
  std::unique_ptr<FeedSubscriber> fs(new FeedSubscriber(cfg, idle));
  for (std::uint32_t p = 0; p < cfg.streams; ++p) {
    absl::StatusOr<Subscriber> sub = ctx.subscriber(cfg.partition_topic(p));
    if (!sub.ok()) return sub.status();
    fs->subs_.push_back(std::move(*sub));
  }
  const std::uint32_t threads = std::clamp<std::uint32_t>(cfg.book_threads, 1, std::max<std::uint32_t>(cfg.streams, 1));
  fs->parts_.resize(threads);
  for (std::size_t i = 0; i < fs->subs_.size(); ++i) fs->parts_[i % threads].subs.push_back(i);
  for (std::size_t t = 0; t < threads; ++t) {
    fs->parts_[t].published_to_book = ctx.histogram(absl::StrCat("feed book ", t), "publish_to_book");
  }
  itch::BookSetOptions o;
  // Sized up front (and touched, see HugeBuffer) for feed.expected_orders, or the generator's
  // steady state (symbols x orders_per_symbol) with room to spare, so the order map does not
  // grow (allocate and rehash) mid-feed; each part holds its share of the market.
  const std::uint64_t market =
      std::max<std::uint64_t>(cfg.expected_orders, std::uint64_t{2} * cfg.symbols * cfg.orders_per_symbol);
  o.expected_orders = std::max<std::size_t>(std::size_t{1} << 16, market / threads);
  // Beyond that (a file replay's universe is not in the configuration: feed.symbols is the
  // generator's), the start-of-day Stock Directory sizes the map before the order flow.
  o.orders_per_book = cfg.orders_per_symbol;
  for (Part& part : fs->parts_) part.result.books = std::make_unique<itch::BookSet>(o);
  return fs;
}

absl::Status FeedSubscriber::run(RoleProgress* progress, const std::atomic<bool>& stop) {
  Shared shared;
  shared.progress = progress;
  shared.stop = &stop;
  absl::Status status = absl::OkStatus();
  if (parts_.size() == 1) {
    status = run_part(parts_[0], shared);
  } else {
    std::vector<absl::Status> st(parts_.size());
    std::vector<std::thread> threads;
    threads.reserve(parts_.size() - 1);
    for (std::size_t t = 1; t < parts_.size(); ++t) {
      threads.emplace_back([&, t] {
        const std::string name = absl::StrCat("pollux-books-", t);
        pthread_setname_np(pthread_self(), name.c_str());
        st[t] = run_part(parts_[t], shared);
      });
    }
    st[0] = run_part(parts_[0], shared);
    for (std::thread& th : threads) th.join();
    for (const absl::Status& s : st) {
      if (!s.ok()) {
        status = s;
        break;
      }
    }
  }
  merge();
  if (progress != nullptr) {
    progress->state.store(status.ok() ? RoleProgress::kDone : RoleProgress::kFailed, std::memory_order_release);
  }
  for (Subscriber& s : subs_) s.close();
  return status;
}

void FeedSubscriber::merge() {
  // The counters of the whole are the sums of the parts'.
  static constexpr std::uint64_t SubscribeResult::*kSummed[] = {&SubscribeResult::messages, &SubscribeResult::frames,
                                                                &SubscribeResult::bytes,    &SubscribeResult::gaps,
                                                                &SubscribeResult::lost,     &SubscribeResult::overruns};
  SubscribeResult& r = result_;
  r = std::move(parts_[0].result);
  for (std::size_t t = 1; t < parts_.size(); ++t) {
    SubscribeResult& p = parts_[t].result;
    for (std::uint64_t SubscribeResult::*m : kSummed) r.*m += p.*m;
    if (r.malformed == 0) r.first_malformed = p.first_malformed;
    r.malformed += p.malformed;
    r.ended += p.ended;
    r.died += p.died;
    r.stopped = r.stopped || p.stopped;
    if (p.first_ns != 0 && (r.first_ns == 0 || p.first_ns < r.first_ns)) r.first_ns = p.first_ns;
    r.last_ns = std::max(r.last_ns, p.last_ns);
    r.cpu_ns += p.cpu_ns;  // CPU time of every book-building thread
    r.latency.merge(p.latency);
    r.wire_latency.merge(p.wire_latency);
    // Live notices are counted on the first stream only, which part 0 owns.
    r.books->absorb(std::move(p.books));
  }
}

absl::Status FeedSubscriber::run_part(Part& part, Shared& shared) {
  SubscribeResult& r = part.result;
  itch::BookSet& books = *r.books;
  AppIdle idle(idle_kind_);
  const std::size_t n = part.subs.size();
  std::vector<std::uint8_t> ended(n, 0);
  std::size_t open = n;
  std::int64_t cpu0 = 0;
  const std::uint32_t first_stream = subs_.empty() ? 0 : subs_[0].stream_id();
  RoleProgress* const progress = shared.progress;
  // What this part has added to *progress so far (the parts share it: each adds its deltas).
  std::uint64_t shown_messages = 0, shown_frames = 0, shown_gaps = 0, shown_lost = 0;
  auto publish_progress = [&] {
    if (progress == nullptr) return;
    progress->messages.fetch_add(r.messages - shown_messages, std::memory_order_relaxed);
    progress->frames.fetch_add(r.frames - shown_frames, std::memory_order_relaxed);
    progress->gaps.fetch_add(r.gaps - shown_gaps, std::memory_order_relaxed);
    progress->lost.fetch_add(r.lost - shown_lost, std::memory_order_relaxed);
    shown_messages = r.messages;
    shown_frames = r.frames;
    shown_gaps = r.gaps;
    shown_lost = r.lost;
  };

  auto on_message = [&](const Message& msg) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(msg.payload.data());
    const std::size_t len = msg.payload.size();
    if (len == 0) return;  // carries no ITCH message (pollux-feed never sends one; others may)
    std::uint64_t applied = 0;
    std::int64_t rx_ns = 0;
    itch::ParseResult pr;
    if (p[0] == 0) {
      // A BinaryFILE chunk (the first byte is a length prefix's high byte).
      pr = books.apply_all({p, len});  // its order slots and levels prefetched a few messages ahead
      applied = pr.messages;
    } else if (p[0] == kLiveChunkMarker && len >= kLiveChunkHeader) {
      std::memcpy(&rx_ns, p + 1, sizeof rx_ns);
      pr = books.apply_all({p + kLiveChunkHeader, len - kLiveChunkHeader});
      applied = pr.messages;
    } else if (p[0] == kNoticeMarker) {
      Notice n;
      if (!decode_notice({p, len}, &n)) {
        pr.error = itch::ParseError::kUnknownType;
        pr.type = p[0];
      } else if (msg.stream_id == first_stream) {
        switch (n.kind) {
          case Notice::kGap:
            ++r.feed_gaps;
            r.feed_lost += n.count;
            break;
          case Notice::kStale:
            ++r.feed_stale;
            break;
          case Notice::kSession:
            ++r.feed_sessions;
            break;
          case Notice::kConflict:
            r.feed_conflicts += n.count;
            break;
          case Notice::kFresh:
            break;
        }
      }
    } else {
      pr = itch::check_message({p, len});
      if (pr.ok()) {
        books.apply(itch::MessageView(p, len));
        applied = 1;
      }
    }
    if (!pr.ok()) [[unlikely]] {
      if (r.malformed++ == 0) {
        r.first_malformed =
            absl::StrFormat("stream %d sequence %d: %s", msg.stream_id, msg.sequence, pr.to_status().message());
      }
    }
    const std::int64_t now = now_ns();
    r.latency.record_n(now - msg.publisher_ns, applied);
    part.published_to_book.record(now - msg.publisher_ns);
    if (rx_ns != 0) r.wire_latency.record_n(now - rx_ns, applied);
    if (r.first_ns == 0) [[unlikely]] {
      r.first_ns = now;
      cpu0 = thread_cpu_ns();
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
      if (subs_[part.subs[i]].stream_id() == ev.stream_id && !ended[i]) {
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
      if (!ended[i]) work += subs_[part.subs[i]].poll(on_message, on_gap, on_event, 256);
    }
    if (work != 0) {
      publish_progress();
      idle_rounds = 0;
      continue;
    }
    // Control checks only when idle, and only every 64th idle round.
    if ((++idle_rounds & 63) == 0) {
      if (shared.stop->load(std::memory_order_relaxed) || shared.abort.load(std::memory_order_relaxed)) {
        r.stopped = true;
        break;
      }
      if (!ready) {
        bool all = true;
        for (std::size_t i = 0; i < n && all; ++i) all = ended[i] || subs_[part.subs[i]].is_connected();
        if (all) {
          ready = true;
          // The last part to connect all its streams declares the subscriber ready.
          if (shared.ready.fetch_add(1, std::memory_order_acq_rel) + 1 == parts_.size() && progress != nullptr) {
            progress->state.store(RoleProgress::kReady, std::memory_order_release);
          }
        } else if (std::chrono::steady_clock::now() > deadline) {
          std::string missing;
          for (std::size_t i = 0; i < n; ++i) {
            if (!ended[i] && !subs_[part.subs[i]].is_connected()) {
              absl::StrAppend(&missing, missing.empty() ? "" : ", ",
                              cfg_.partition_topic(static_cast<std::uint32_t>(part.subs[i])));
            }
          }
          shared.abort.store(true, std::memory_order_relaxed);
          if (progress != nullptr) progress->state.store(RoleProgress::kFailed, std::memory_order_release);
          return absl::DeadlineExceededError(absl::StrFormat(
              "no publisher on topic(s) %s after %d ms (feed.connect_timeout_ms)", missing, cfg_.connect_timeout_ms));
        }
      }
    }
    idle.idle(0);
  }
  if (cpu0 != 0) r.cpu_ns = thread_cpu_ns() - cpu0;
  publish_progress();
  return absl::OkStatus();
}

}  // namespace pollux::feed
