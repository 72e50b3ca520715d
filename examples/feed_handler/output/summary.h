// The end-of-run summary: what each role reports, how a subscriber process hands its report
// to the process that prints the summary, and the text and JSON forms.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "feed_handler/book/feed_subscriber.h"
#include "feed_handler/config/feed_config.h"
#include "feed_handler/publish/feed_publisher.h"
#include "pollux/config.h"

namespace pollux::feed {

// A subscriber's outcome, reduced to what the summary needs; plain data so a subscriber
// process can send it to its parent as text (serialize / parse_report).
struct SubscriberReport {
  std::uint32_t index = 0;
  std::int64_t pid = 0;
  std::string error;  // empty when the subscriber finished normally
  std::uint64_t messages = 0, frames = 0, bytes = 0, gaps = 0, lost = 0, overruns = 0, malformed = 0;
  std::string first_malformed;
  std::uint32_t ended = 0, died = 0;
  bool stopped = false;
  double seconds = 0;                      // first to last frame
  std::int64_t first_ns = 0, last_ns = 0;  // Clock (host-wide) at the first and last frame
  double cpu_seconds = 0;                  // polling thread, first frame to end of stream
  // Publish-to-book latency, ns.
  std::uint64_t latency_count = 0;
  std::int64_t p50 = 0, p90 = 0, p99 = 0, p999 = 0, p9999 = 0, max = 0;
  double mean = 0;
  // Live mode: packet-in-to-book latency, ns (count 0 otherwise), and the notices received.
  std::uint64_t wire_count = 0;
  std::int64_t wire_p50 = 0, wire_p90 = 0, wire_p99 = 0, wire_p999 = 0, wire_max = 0;
  std::uint64_t feed_gaps = 0, feed_lost = 0, feed_stale = 0, feed_sessions = 0, feed_conflicts = 0;
  std::uint64_t digest = 0;  // FNV-1a of the books JSON lines and the counts JSON
  std::uint64_t books = 0, live_orders = 0;
  std::string detail;  // messages by type, anomalies, top of book (preformatted)
};

// Fills a report from a finished subscriber; `detail` adds the by-type table and top of book.
SubscriberReport make_report(std::uint32_t index, std::int64_t pid, const SubscribeResult& r, const FeedConfig& cfg,
                             bool detail);
std::string serialize(const SubscriberReport& r);
absl::StatusOr<SubscriberReport> parse_report(std::string_view text);

// FNV-1a over exactly what --book-out and --counts-out would write.
std::uint64_t books_digest(const itch::BookSet& books);

// The live source's counters (Source::live_counters()): empty for a replay.
using LiveCounterValues = std::vector<std::pair<std::string, std::uint64_t>>;
// What it says besides them (Source::live_notes()): (key, text), e.g. the capture's files.
using LiveNoteValues = std::vector<std::pair<std::string, std::string>>;

std::string format_publisher(const ReplayResult& r, std::string_view source, double prepare_seconds,
                             const FeedConfig& cfg, const ContextInfo& pc, const LiveCounterValues& live = {},
                             const LiveNoteValues& notes = {});
// `as_fast_as_possible`: the replay was not paced, so the latency line is mostly time spent
// queued behind the publisher, and says so.
std::string format_subscriber(const SubscriberReport& r, bool as_fast_as_possible);
// "subscribers agree" line (or the disagreement) when there is more than one.
std::string format_agreement(const std::vector<SubscriberReport>& subs);

// From the publisher's first offer to the last book update of the slowest subscriber that
// finished; 0 when unknown (the clock is host-wide, so this only holds on one host).
double end_to_end_seconds(const ReplayResult& pub, const std::vector<SubscriberReport>& subs);
std::string format_end_to_end(const ReplayResult& pub, const std::vector<SubscriberReport>& subs);

// Machine-readable summary (--summary-json): the publisher's and every subscriber's figures.
std::string format_summary_json(const ReplayResult* pub, const std::vector<SubscriberReport>& subs,
                                const FeedConfig& cfg, const ContextInfo& pc, const LiveCounterValues& live = {},
                                const LiveNoteValues& notes = {});

// 1234567 -> "1,234,567".
std::string commas(std::uint64_t v);

}  // namespace pollux::feed
