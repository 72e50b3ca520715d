#include "feed_handler/output/summary.h"

#include <algorithm>
#include <sstream>
#include <type_traits>
#include <variant>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "itch/messages.h"
#include "itch/report.h"

namespace pollux::feed {

namespace {

std::string_view type_name(char t) {
  switch (t) {
    case 'S':
      return "system event";
    case 'R':
      return "stock directory";
    case 'H':
      return "stock trading action";
    case 'Y':
      return "reg SHO restriction";
    case 'L':
      return "market participant position";
    case 'V':
      return "MWCB decline level";
    case 'W':
      return "MWCB status";
    case 'K':
      return "IPO quoting period";
    case 'J':
      return "LULD auction collar";
    case 'h':
      return "operational halt";
    case 'A':
      return "add order";
    case 'F':
      return "add order (MPID)";
    case 'E':
      return "order executed";
    case 'C':
      return "order executed with price";
    case 'X':
      return "order cancel";
    case 'D':
      return "order delete";
    case 'U':
      return "order replace";
    case 'P':
      return "trade (non-cross)";
    case 'Q':
      return "cross trade";
    case 'B':
      return "broken trade";
    case 'I':
      return "NOII";
    case 'N':
      return "retail price improvement";
    case 'O':
      return "direct listing with capital raise";
  }
  return "?";
}

std::string price_text(std::uint32_t p) { return absl::StrFormat("%d.%04d", p / 10000, p % 10000); }

std::string usec_text(std::int64_t ns) { return absl::StrFormat("%.2f", static_cast<double>(ns) / 1e3); }

std::string rate_text(double per_s) {
  if (per_s >= 1e6) return absl::StrFormat("%.2f M", per_s / 1e6);
  if (per_s >= 1e3) return absl::StrFormat("%.1f k", per_s / 1e3);
  return absl::StrFormat("%.0f ", per_s);
}

std::string one_line(std::string s) {
  for (char& c : s) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return s;
}

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppendFormat(&out, "\\u%04x", static_cast<unsigned char>(c));
    } else {
      out.push_back(c);
    }
  }
  return out + "\"";
}

std::string detail_text(const SubscribeResult& r, const FeedConfig& cfg) {
  const itch::BookSet& books = *r.books;
  std::string out;
  const itch::MessageCounts& c = books.counts();
  const std::uint64_t total = c.total();
  absl::StrAppend(&out, "  messages by type:\n");
  for (char t : itch::kMessageTypes) {
    if (c[t] == 0) continue;
    absl::StrAppendFormat(&out, "    %c  %-34s %14s  %5.1f%%\n", t, type_name(t), commas(c[t]),
                          100.0 * static_cast<double>(c[t]) / static_cast<double>(total ? total : 1));
  }
  absl::StrAppendFormat(&out, "       %-34s %14s\n", "total", commas(total));

  const itch::BookStats& s = books.stats();
  std::vector<std::string> anomalies;
  auto note = [&](const char* what, std::uint64_t v) {
    if (v != 0) anomalies.push_back(absl::StrCat(what, " ", commas(v)));
  };
  note("unknown-reference executes", s.unknown_execute);
  note("cancels", s.unknown_cancel);
  note("deletes", s.unknown_delete);
  note("replaces", s.unknown_replace);
  note("duplicate adds", s.duplicate_add);
  note("overfills", s.overfill);
  note("bad sides", s.bad_side);
  note("level mismatches", s.level_mismatch);
  note("partition conflicts", s.partition_conflicts);
  absl::StrAppend(&out, "  book anomalies (counted, not fatal): ",
                  anomalies.empty() ? "none" : absl::StrJoin(anomalies, ", "), "\n");

  std::uint64_t nbooks = 0;
  books.for_each_book([&](const itch::OrderBook&) { ++nbooks; });
  const std::uint64_t shown = std::min<std::uint64_t>(nbooks, cfg.top);
  if (shown == 0) return out;
  absl::StrAppendFormat(&out, "  top of book, %s of %s books in stock locate order%s:\n", commas(shown), commas(nbooks),
                        shown < nbooks ? " (--book-out FILE writes every book, every level)" : "");
  absl::StrAppendFormat(&out, "    %6s  %-8s %12s %12s %12s %12s  %s\n", "locate", "symbol", "bid shares", "bid", "ask",
                        "ask shares", "levels bid/ask");
  std::uint64_t i = 0;
  books.for_each_book([&](const itch::OrderBook& b) {
    if (i++ >= shown) return;
    const auto bid = b.best_bid();
    const auto ask = b.best_ask();
    // Escaped as --book-out writes it: a symbol comes off the wire, and raw control bytes
    // would reach the terminal that shows the summary.
    absl::StrAppendFormat(&out, "    %6d  %-8s %12s %12s %12s %12s  %d/%d%s\n", b.stock_locate(),
                          itch::escape_text(b.symbol()), bid ? commas(bid->shares) : "-",
                          bid ? price_text(bid->price) : "-", ask ? price_text(ask->price) : "-",
                          ask ? commas(ask->shares) : "-", b.levels(itch::Side::kBuy), b.levels(itch::Side::kSell),
                          b.crossed() ? "  crossed" : "");
  });
  return out;
}

}  // namespace

std::string commas(std::uint64_t v) {
  const std::string digits = absl::StrCat(v);
  std::string out;
  out.reserve(digits.size() + digits.size() / 3);
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i != 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

std::uint64_t books_digest(const itch::BookSet& books) {
  std::ostringstream os;
  itch::write_books_jsonl(books, os);
  itch::write_counts_json(books.counts(), os);
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : os.str()) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h;
}

SubscriberReport make_report(std::uint32_t index, std::int64_t pid, const SubscribeResult& r, const FeedConfig& cfg,
                             bool detail) {
  SubscriberReport s;
  s.index = index;
  s.pid = pid;
  s.messages = r.messages;
  s.frames = r.frames;
  s.bytes = r.bytes;
  s.gaps = r.gaps;
  s.lost = r.lost;
  s.overruns = r.overruns;
  s.malformed = r.malformed;
  s.first_malformed = r.first_malformed;
  s.ended = r.ended;
  s.died = r.died;
  s.stopped = r.stopped;
  s.seconds = r.last_ns > r.first_ns ? static_cast<double>(r.last_ns - r.first_ns) / 1e9 : 0;
  s.first_ns = r.first_ns;
  s.last_ns = r.last_ns;
  s.cpu_seconds = static_cast<double>(r.cpu_ns) / 1e9;
  s.latency_count = r.latency.count();
  s.p50 = r.latency.percentile(50);
  s.p90 = r.latency.percentile(90);
  s.p99 = r.latency.percentile(99);
  s.p999 = r.latency.percentile(99.9);
  s.p9999 = r.latency.percentile(99.99);
  s.max = r.latency.max();
  s.mean = r.latency.mean();
  s.wire_count = r.wire_latency.count();
  s.wire_p50 = r.wire_latency.percentile(50);
  s.wire_p90 = r.wire_latency.percentile(90);
  s.wire_p99 = r.wire_latency.percentile(99);
  s.wire_p999 = r.wire_latency.percentile(99.9);
  s.wire_max = r.wire_latency.max();
  s.feed_gaps = r.feed_gaps;
  s.feed_lost = r.feed_lost;
  s.feed_stale = r.feed_stale;
  s.feed_sessions = r.feed_sessions;
  s.feed_conflicts = r.feed_conflicts;
  s.digest = books_digest(*r.books);
  r.books->for_each_book([&](const itch::OrderBook&) { ++s.books; });
  s.live_orders = r.books->live_orders();
  if (detail) s.detail = detail_text(r, cfg);
  return s;
}

namespace {

// One field of a subscriber report, as serialize() writes it ("key=value") and parse_report()
// reads it back; `decimals`: a double's digits after the point.
struct ReportField {
  const char* key;
  std::variant<std::uint32_t SubscriberReport::*, std::int64_t SubscriberReport::*, std::uint64_t SubscriberReport::*,
               double SubscriberReport::*, bool SubscriberReport::*, std::string SubscriberReport::*>
      member;
  int decimals = 0;
};

// In the order serialize() writes them; a field's key is its member's name.
#define POLLUX_REPORT_FIELD(name, ...) \
  ReportField { #name, &SubscriberReport::name __VA_OPT__(, ) __VA_ARGS__ }
const ReportField kReportFields[] = {POLLUX_REPORT_FIELD(index),
                                     POLLUX_REPORT_FIELD(pid),
                                     POLLUX_REPORT_FIELD(error),
                                     POLLUX_REPORT_FIELD(messages),
                                     POLLUX_REPORT_FIELD(frames),
                                     POLLUX_REPORT_FIELD(bytes),
                                     POLLUX_REPORT_FIELD(gaps),
                                     POLLUX_REPORT_FIELD(lost),
                                     POLLUX_REPORT_FIELD(overruns),
                                     POLLUX_REPORT_FIELD(malformed),
                                     POLLUX_REPORT_FIELD(first_malformed),
                                     POLLUX_REPORT_FIELD(ended),
                                     POLLUX_REPORT_FIELD(died),
                                     POLLUX_REPORT_FIELD(stopped),
                                     POLLUX_REPORT_FIELD(seconds, 9),
                                     POLLUX_REPORT_FIELD(cpu_seconds, 6),
                                     POLLUX_REPORT_FIELD(first_ns),
                                     POLLUX_REPORT_FIELD(last_ns),
                                     POLLUX_REPORT_FIELD(latency_count),
                                     POLLUX_REPORT_FIELD(p50),
                                     POLLUX_REPORT_FIELD(p90),
                                     POLLUX_REPORT_FIELD(p99),
                                     POLLUX_REPORT_FIELD(p999),
                                     POLLUX_REPORT_FIELD(p9999),
                                     POLLUX_REPORT_FIELD(max),
                                     POLLUX_REPORT_FIELD(mean, 3),
                                     POLLUX_REPORT_FIELD(wire_count),
                                     POLLUX_REPORT_FIELD(wire_p50),
                                     POLLUX_REPORT_FIELD(wire_p90),
                                     POLLUX_REPORT_FIELD(wire_p99),
                                     POLLUX_REPORT_FIELD(wire_p999),
                                     POLLUX_REPORT_FIELD(wire_max),
                                     POLLUX_REPORT_FIELD(feed_gaps),
                                     POLLUX_REPORT_FIELD(feed_lost),
                                     POLLUX_REPORT_FIELD(feed_stale),
                                     POLLUX_REPORT_FIELD(feed_sessions),
                                     POLLUX_REPORT_FIELD(feed_conflicts),
                                     POLLUX_REPORT_FIELD(digest),
                                     POLLUX_REPORT_FIELD(books),
                                     POLLUX_REPORT_FIELD(live_orders)};
#undef POLLUX_REPORT_FIELD

}  // namespace

// One "key=value" line per field, then "detail:" and the detail text up to the end. Text is kept
// to one line; a bool is 1 or 0.
std::string serialize(const SubscriberReport& r) {
  std::string out;
  for (const ReportField& f : kReportFields) {
    std::visit(
        [&](auto m) {
          using T = std::remove_cvref_t<decltype(r.*m)>;
          if constexpr (std::is_same_v<T, std::string>) {
            absl::StrAppend(&out, f.key, "=", one_line(r.*m), "\n");
          } else if constexpr (std::is_same_v<T, bool>) {
            absl::StrAppend(&out, f.key, "=", r.*m ? 1 : 0, "\n");
          } else if constexpr (std::is_same_v<T, double>) {
            absl::StrAppend(&out, f.key, "=", absl::StrFormat("%.*f", f.decimals, r.*m), "\n");
          } else {
            absl::StrAppend(&out, f.key, "=", r.*m, "\n");
          }
        },
        f.member);
  }
  absl::StrAppend(&out, "detail:\n", r.detail);
  return out;
}

absl::StatusOr<SubscriberReport> parse_report(std::string_view text) {
  SubscriberReport r;
  const std::size_t d = text.find("detail:\n");
  if (d == std::string_view::npos) return absl::DataLossError("subscriber report is incomplete (no detail section)");
  r.detail = std::string(text.substr(d + 8));
  for (absl::string_view line : absl::StrSplit(absl::string_view(text.data(), d), '\n', absl::SkipEmpty())) {
    const std::size_t eq = line.find('=');
    if (eq == absl::string_view::npos) return absl::DataLossError(absl::StrCat("bad subscriber report line: ", line));
    const absl::string_view k = line.substr(0, eq), v = line.substr(eq + 1);
    const auto f = std::find_if(std::begin(kReportFields), std::end(kReportFields),
                                [&](const ReportField& x) { return k == x.key; });
    if (f == std::end(kReportFields)) continue;  // a key this build does not know
    const bool ok = std::visit(
        [&](auto m) {
          using T = std::remove_cvref_t<decltype(r.*m)>;
          if constexpr (std::is_same_v<T, std::string>) {
            r.*m = std::string(v);
            return true;
          } else if constexpr (std::is_same_v<T, bool>) {
            r.*m = v == "1";
            return true;
          } else if constexpr (std::is_same_v<T, double>) {
            return absl::SimpleAtod(v, &(r.*m));
          } else {
            return absl::SimpleAtoi(v, &(r.*m));
          }
        },
        f->member);
    if (!ok) return absl::DataLossError(absl::StrCat("bad subscriber report value: ", line));
  }
  return r;
}

std::string format_publisher(const ReplayResult& r, std::string_view source, double prepare_seconds,
                             const FeedConfig& cfg, const ContextInfo& pc, const LiveCounterValues& live,
                             const LiveNoteValues& notes) {
  std::string out;
  const double secs = static_cast<double>(r.end_ns - r.start_ns) / 1e9;
  std::string pace;
  switch (cfg.replay) {
    case ReplayMode::kMax:
      pace = "as fast as possible";
      break;
    case ReplayMode::kRate:
      pace = absl::StrCat("fixed rate ", commas(cfg.rate), " msg/s");
      break;
    case ReplayMode::kOriginal:
      pace = absl::StrFormat("original timestamps (pauses cut to %d ms)", cfg.max_gap_ms);
      break;
    case ReplayMode::kSpeed:
      pace = absl::StrFormat("original timestamps x %g (pauses cut to %d ms)", cfg.speed, cfg.max_gap_ms);
      break;
  }
  absl::StrAppendFormat(&out, "source:     %s (ready in %.2f s)\n", source, prepare_seconds);
  absl::StrAppendFormat(&out,
                        "pollux:     transport %s, threading %s, idle %s, %s flow control, %d stream(s) \"%s.*\"\n",
                        pc.transport, pc.threading, idle_kind_name(pc.idle), pc.flow_control, cfg.streams, cfg.topic);
  absl::StrAppendFormat(
      &out, "framing:    %s\n",
      cfg.batch_bytes == 0
          ? std::string("one bare ITCH message per Pollux message")
          : absl::StrFormat("up to %d bytes of length-prefixed ITCH messages per Pollux message", cfg.batch_bytes));
  absl::StrAppendFormat(&out,
                        "publisher:  %s messages in %.3f s = %smsg/s (%.1f MB/s), %s Pollux messages (%.1f per), "
                        "%s back-pressured offers, %s%s\n",
                        commas(r.messages), secs, rate_text(secs > 0 ? static_cast<double>(r.messages) / secs : 0),
                        secs > 0 ? static_cast<double>(r.bytes) / secs / 1e6 : 0.0, commas(r.frames),
                        r.frames ? static_cast<double>(r.messages) / static_cast<double>(r.frames) : 0.0,
                        commas(r.back_pressured), pace, r.stopped ? " - STOPPED EARLY" : "");
  absl::StrAppendFormat(
      &out, "  cpu %.3f s in the replaying thread (%.0f%% of the replay; %smsg per cpu-second)\n",
      static_cast<double>(r.cpu_ns) / 1e9, secs > 0 ? 100.0 * static_cast<double>(r.cpu_ns) / 1e9 / secs : 0.0,
      rate_text(r.cpu_ns > 0 ? static_cast<double>(r.messages) / (static_cast<double>(r.cpu_ns) / 1e9) : 0));
  if (!live.empty()) {
    absl::StrAppend(&out, "live:       ");
    std::size_t col = 12;
    for (std::size_t i = 0; i < live.size(); ++i) {
      std::string item = absl::StrCat(live[i].first, " ", commas(live[i].second), i + 1 < live.size() ? ", " : "");
      if (col + item.size() > 110) {
        absl::StrAppend(&out, "\n            ");
        col = 12;
      }
      absl::StrAppend(&out, item);
      col += item.size();
    }
    absl::StrAppendFormat(&out, "\n  %s notice(s) published\n", commas(r.notices));
  }
  for (const auto& [key, text] : notes) absl::StrAppendFormat(&out, "%-11s %s\n", absl::StrCat(key, ":"), text);
  if (r.lag.count() != 0 && live.empty()) {
    absl::StrAppendFormat(
        &out, "  send lag behind schedule (us): p50 %s  p90 %s  p99 %s  p99.9 %s  p99.99 %s  max %s\n",
        usec_text(r.lag.percentile(50)), usec_text(r.lag.percentile(90)), usec_text(r.lag.percentile(99)),
        usec_text(r.lag.percentile(99.9)), usec_text(r.lag.percentile(99.99)), usec_text(r.lag.max()));
  }
  return out;
}

std::string format_subscriber(const SubscriberReport& r, bool as_fast_as_possible) {
  std::string out;
  if (!r.error.empty()) {
    absl::StrAppendFormat(&out, "subscriber %d (pid %d): FAILED: %s\n", r.index, r.pid, r.error);
    return out;
  }
  const double rate = r.seconds > 0 ? static_cast<double>(r.messages) / r.seconds : 0;
  absl::StrAppendFormat(&out,
                        "subscriber %d (pid %d): %s messages in %.3f s = %smsg/s, %s Pollux messages, "
                        "streams ended %d%s%s\n",
                        r.index, r.pid, commas(r.messages), r.seconds, rate_text(rate), commas(r.frames), r.ended,
                        r.died ? absl::StrFormat(", publisher died on %d", r.died) : "",
                        r.stopped ? " - STOPPED EARLY" : "");
  if (r.cpu_seconds > 0) {
    absl::StrAppendFormat(&out,
                          "  cpu %.3f s in the polling thread, first message to end of stream (%.0f%% of it; "
                          "%smsg per cpu-second)\n",
                          r.cpu_seconds, r.seconds > 0 ? 100.0 * r.cpu_seconds / r.seconds : 0.0,
                          rate_text(static_cast<double>(r.messages) / r.cpu_seconds));
  }
  absl::StrAppendFormat(&out, "  gaps %s (%s Pollux messages lost), overruns %s, malformed %s%s\n", commas(r.gaps),
                        commas(r.lost), commas(r.overruns), commas(r.malformed),
                        r.first_malformed.empty() ? "" : absl::StrCat(" (first: ", r.first_malformed, ")"));
  absl::StrAppendFormat(&out,
                        "  publish-to-book latency (us): p50 %s  p90 %s  p99 %s  p99.9 %s  p99.99 %s  max %s  "
                        "(mean %s, n=%s)\n",
                        usec_text(r.p50), usec_text(r.p90), usec_text(r.p99), usec_text(r.p999), usec_text(r.p9999),
                        usec_text(r.max), usec_text(static_cast<std::int64_t>(r.mean)), commas(r.latency_count));
  if (r.wire_count != 0) {
    absl::StrAppendFormat(&out, "  packet-in-to-book latency (us): p50 %s  p90 %s  p99 %s  p99.9 %s  max %s  (n=%s)\n",
                          usec_text(r.wire_p50), usec_text(r.wire_p90), usec_text(r.wire_p99), usec_text(r.wire_p999),
                          usec_text(r.wire_max), commas(r.wire_count));
  }
  if (r.feed_sessions != 0 || r.feed_gaps != 0 || r.feed_stale != 0 || r.feed_conflicts != 0) {
    absl::StrAppendFormat(&out,
                          "  live feed: %s unrecoverable gap(s) (%s messages lost upstream), stale %s, sessions %s",
                          commas(r.feed_gaps), commas(r.feed_lost), commas(r.feed_stale), commas(r.feed_sessions));
    if (r.feed_conflicts != 0) {
      absl::StrAppendFormat(&out, ", %s message(s) contradicted by a later copy", commas(r.feed_conflicts));
    }
    absl::StrAppend(&out, "\n");
  }
  if (as_fast_as_possible && r.latency_count != 0 && r.wire_count == 0) {
    absl::StrAppend(&out,
                    "    (replay = \"max\": mostly time queued behind the publisher in the transport; "
                    "replay = \"rate\" measures the pipeline)\n");
  }
  absl::StrAppendFormat(&out, "  books: %s, %s live orders, digest %016x\n", commas(r.books), commas(r.live_orders),
                        r.digest);
  out += r.detail;
  return out;
}

std::string format_agreement(const std::vector<SubscriberReport>& subs) {
  if (subs.size() < 2) return "";
  std::vector<std::uint32_t> differ;
  for (const SubscriberReport& s : subs) {
    if (s.digest != subs[0].digest) differ.push_back(s.index);
  }
  if (differ.empty()) return absl::StrFormat("all %d subscribers built identical books\n", subs.size());
  return absl::StrFormat("BOOKS DIFFER: subscriber(s) %s disagree with subscriber 0\n", absl::StrJoin(differ, ", "));
}

double end_to_end_seconds(const ReplayResult& pub, const std::vector<SubscriberReport>& subs) {
  std::int64_t last = 0;
  for (const SubscriberReport& s : subs) {
    if (!s.error.empty() || s.messages == 0) return 0;
    last = std::max(last, s.last_ns);
  }
  return last > pub.start_ns ? static_cast<double>(last - pub.start_ns) / 1e9 : 0;
}

std::string format_end_to_end(const ReplayResult& pub, const std::vector<SubscriberReport>& subs) {
  const double secs = end_to_end_seconds(pub, subs);
  if (secs <= 0) return "";
  return absl::StrFormat(
      "end to end: %s messages in %.3f s = %smsg/s (first offer to the last subscriber's last "
      "book update)\n",
      commas(pub.messages), secs, rate_text(static_cast<double>(pub.messages) / secs));
}

std::string format_summary_json(const ReplayResult* pub, const std::vector<SubscriberReport>& subs,
                                const FeedConfig& cfg, const ContextInfo& pc, const LiveCounterValues& live,
                                const LiveNoteValues& notes) {
  std::string out = "{\n";
  absl::StrAppendFormat(&out,
                        "  \"config\": {\"transport\": \"%s\", \"threading\": \"%s\", \"idle\": \"%s\", "
                        "\"flow_control\": \"%s\", \"streams\": %d, \"batch_bytes\": %d, \"replay\": \"%s\", "
                        "\"rate\": %d, \"speed\": %g},\n",
                        pc.transport, pc.threading, idle_kind_name(pc.idle), pc.flow_control, cfg.streams,
                        cfg.batch_bytes, replay_name(cfg.replay), cfg.rate, cfg.speed);
  if (pub != nullptr) {
    const double secs = static_cast<double>(pub->end_ns - pub->start_ns) / 1e9;
    absl::StrAppendFormat(
        &out,
        "  \"publisher\": {\"messages\": %d, \"frames\": %d, \"bytes\": %d, \"seconds\": %.6f, "
        "\"messages_per_s\": %.0f, \"cpu_seconds\": %.6f, \"back_pressured\": %d, \"stopped\": %s, "
        "\"lag_ns\": {\"p50\": %d, \"p90\": %d, \"p99\": %d, \"p99.9\": %d, \"p99.99\": %d, \"max\": %d}},\n",
        pub->messages, pub->frames, pub->bytes, secs, secs > 0 ? static_cast<double>(pub->messages) / secs : 0.0,
        static_cast<double>(pub->cpu_ns) / 1e9, pub->back_pressured, pub->stopped ? "true" : "false",
        pub->lag.percentile(50), pub->lag.percentile(90), pub->lag.percentile(99), pub->lag.percentile(99.9),
        pub->lag.percentile(99.99), pub->lag.max());
  }
  if (!live.empty()) {
    absl::StrAppend(&out, "  \"live\": {");
    for (std::size_t i = 0; i < live.size(); ++i) {
      absl::StrAppendFormat(&out, "%s\"%s\": %d", i ? ", " : "", live[i].first, live[i].second);
    }
    for (const auto& [key, text] : notes) absl::StrAppendFormat(&out, ", \"%s\": %s", key, json_string(text));
    absl::StrAppendFormat(&out, ", \"notices\": %d},\n", pub != nullptr ? pub->notices : 0);
  }
  if (pub != nullptr) {
    const double e2e = end_to_end_seconds(*pub, subs);
    absl::StrAppendFormat(&out, "  \"end_to_end\": {\"seconds\": %.6f, \"messages_per_s\": %.0f},\n", e2e,
                          e2e > 0 ? static_cast<double>(pub->messages) / e2e : 0.0);
  }
  absl::StrAppend(&out, "  \"subscribers\": [");
  for (std::size_t i = 0; i < subs.size(); ++i) {
    const SubscriberReport& s = subs[i];
    absl::StrAppendFormat(
        &out,
        "%s\n    {\"index\": %d, \"pid\": %d, \"error\": %s, \"messages\": %d, \"frames\": %d, "
        "\"seconds\": %.6f, \"messages_per_s\": %.0f, \"cpu_seconds\": %.6f, \"gaps\": %d, \"lost\": %d, "
        "\"overruns\": %d, \"malformed\": %d, \"streams_ended\": %d, \"publisher_died\": %d, "
        "\"latency_ns\": {\"p50\": %d, \"p90\": %d, \"p99\": %d, \"p99.9\": %d, \"p99.99\": %d, "
        "\"max\": %d, \"mean\": %.1f, \"count\": %d}, \"books\": %d, \"live_orders\": %d, "
        "\"digest\": \"%016x\", \"wire_latency_ns\": {\"p50\": %d, \"p90\": %d, \"p99\": %d, "
        "\"p99.9\": %d, \"max\": %d, \"count\": %d}, \"feed_gaps\": %d, \"feed_lost\": %d, "
        "\"feed_stale\": %d, \"feed_sessions\": %d, \"feed_conflicts\": %d}",
        i ? "," : "", s.index, s.pid, json_string(s.error), s.messages, s.frames, s.seconds,
        s.seconds > 0 ? static_cast<double>(s.messages) / s.seconds : 0.0, s.cpu_seconds, s.gaps, s.lost, s.overruns,
        s.malformed, s.ended, s.died, s.p50, s.p90, s.p99, s.p999, s.p9999, s.max, s.mean, s.latency_count, s.books,
        s.live_orders, s.digest, s.wire_p50, s.wire_p90, s.wire_p99, s.wire_p999, s.wire_max, s.wire_count, s.feed_gaps,
        s.feed_lost, s.feed_stale, s.feed_sessions, s.feed_conflicts);
  }
  absl::StrAppend(&out, "\n  ]\n}\n");
  return out;
}

}  // namespace pollux::feed
