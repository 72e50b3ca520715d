// Counters files rendered for Prometheus (text format 0.0.4 and OpenMetrics 1.0) and as the live
// page's JSON. Names and help come from the tables the counters are declared in
// (core/stream_counters.h, core/poller_counters.h, core::transport_counter_help()).
#include "api/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/counter_help.h"
#include "core/poller_counters.h"
#include "core/stream_counters.h"
#include "pollux/context.h"
#include "pollux/idle.h"

namespace pollux::detail::metrics {
namespace {

using core::CounterKind;
using core::CountersFileSnapshot;
using core::CounterSnapshot;

constexpr std::string_view kLateJoinScope = "late join ";
constexpr const char* kModeNames[] = {"busy", "spin", "interrupt"};
constexpr const char* kLateJoinStates[] = {"replaying", "catching_up", "merged", "live"};

// A label value as both formats want it: backslash, double quote and newline escaped; bytes that
// are not printable ASCII (names come from files any local user may write) as \xNN text.
std::string label_value(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c >= 0x7f) {
      absl::StrAppendFormat(&out, "\\\\x%02x", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

// A metric name part: [a-zA-Z0-9_], anything else as '_'.
std::string name_part(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) c = '_';
  }
  return out;
}

// Nanoseconds as seconds, exactly ("1.250000000").
std::string ns_as_seconds(std::uint64_t ns) {
  return absl::StrFormat("%u.%09u", ns / 1'000'000'000u, ns % 1'000'000'000u);
}

enum class Type { kCounter, kGauge, kHistogram, kInfo };

// One family: its type, help and series, written as they come (callers merge equal label sets
// before: each series appears once).
struct Family {
  std::string name;
  Type type = Type::kCounter;
  std::string help;
  std::string body;
};

class Builder {
 public:
  Family& get(const std::string& family, Type type, std::string_view help) {
    auto [it, fresh] = families_.try_emplace(family);
    if (fresh) {
      it->second.name = family;
      it->second.type = type;
      it->second.help = std::string(help);
      order_.push_back(&it->second);
    }
    return it->second;
  }
  // One series: `labels` without braces (a="b",c="d"; empty: none).
  static void sample(Family& f, std::string_view labels, std::uint64_t value, bool seconds_from_ns = false) {
    f.body += f.name;
    if (!labels.empty()) {
      f.body += '{';
      f.body += labels;
      f.body += '}';
    }
    f.body += ' ';
    if (seconds_from_ns) {
      f.body += ns_as_seconds(value);
    } else {
      char digits[24];
      const auto end = std::to_chars(digits, digits + sizeof digits, value).ptr;
      f.body.append(digits, end);
    }
    f.body += '\n';
  }
  void sample(const std::string& family, Type type, std::string_view help, std::string_view labels, std::uint64_t value,
              bool seconds_from_ns = false) {
    sample(get(family, type, help), labels, value, seconds_from_ns);
  }

  std::string write(Format fmt) const {
    const bool om = fmt == Format::kOpenMetrics;
    std::size_t size = 16;
    for (const Family* f : order_) size += f->body.size() + 2 * f->name.size() + f->help.size() + 32;
    std::string out;
    out.reserve(size);
    for (const Family* f : order_) {
      // OpenMetrics names a counter family without _total and an info family without _info.
      std::string_view meta = f->name;
      const char* type = "gauge";
      switch (f->type) {
        case Type::kCounter:
          type = "counter";
          if (om) meta.remove_suffix(6);
          break;
        case Type::kGauge:
          break;
        case Type::kHistogram:
          type = "histogram";
          break;
        case Type::kInfo:
          if (om) {
            type = "info";
            meta.remove_suffix(5);
          }
          break;
      }
      out.append("# HELP ").append(meta).append(" ").append(help_text(f->help, om));
      out.append("\n# TYPE ").append(meta).append(" ").append(type).append("\n");
      out += f->body;
    }
    if (om) out += "# EOF\n";
    return out;
  }

 private:
  static std::string help_text(std::string_view h, bool om) {
    std::string out;
    for (char c : h) {
      if (c == '\\') {
        out += "\\\\";
      } else if (c == '\n') {
        out += "\\n";
      } else if (c == '"' && om) {
        out += "\\\"";
      } else if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) {
        absl::StrAppendFormat(&out, "\\\\x%02x", static_cast<unsigned char>(c));  // names from files
      } else {
        out += c;
      }
    }
    return out;
  }
  std::map<std::string, Family, std::less<>> families_;
  std::vector<const Family*> order_;
};

// Families by a counter's own name within one category (stream, poller, transport), so that a
// family name is composed once per render, not once per series.
class FamilyCache {
 public:
  template <class MakeFamily>
  Family& get(std::string_view counter, MakeFamily&& make) {
    auto it = cache_.find(counter);
    if (it != cache_.end()) return *it->second;
    Family& f = make();
    cache_.emplace(std::string(counter), &f);
    return f;
  }

 private:
  std::map<std::string, Family*, std::less<>> cache_;
};

std::string_view first_word(std::string_view s) { return s.substr(0, s.find(' ')); }

bool is_transport_word(std::string_view w) { return w == "shm" || w == "udp" || w == "rdma" || w == "xdp"; }

// "pub stream 7 quotes" -> "quotes".
std::string topic_of(std::string_view scope) {
  for (int words = 0; words < 3 && !scope.empty(); ++words) {
    const auto sp = scope.find(' ');
    scope = sp == std::string_view::npos ? std::string_view() : scope.substr(sp + 1);
  }
  return std::string(scope);
}

std::string_view help_of(std::span<const core::CounterInfo> table, std::string_view name) {
  for (const core::CounterInfo& c : table) {
    if (c.name == name) return c.help;
  }
  return {};
}

// Transport counters that hold a level, not a count.
bool transport_gauge(std::string_view name) {
  return name == "position" || name == "receivers" || name == "xdp_mode" || name == "closing_endpoints";
}

// A counter name as a family name part: "time_busy_ns" -> ("time_busy_seconds", true).
std::pair<std::string, bool> unit_name(std::string_view name) {
  if (name.size() > 3 && name.substr(name.size() - 3) == "_ns") {
    return {absl::StrCat(name_part(name.substr(0, name.size() - 3)), "_seconds"), true};
  }
  return {name_part(name), false};
}

// One process's counters, grouped: the handles of one topic and direction together (stream,
// scope), a poller's by its scope, a histogram's by its owner; the rest merged by (scope, name,
// stream) - equal label sets are one series.
struct Grouped {
  std::map<std::uint32_t, std::string> transport_of_stream;      // first word of a transport scope
  std::map<std::uint32_t, std::string> topic_of_stream;          // from the handles' scopes
  using Key = std::tuple<int, std::uint32_t, std::string_view>;  // kind, stream or owner, scope
  std::map<Key, std::vector<const CounterSnapshot*>> groups;
  std::vector<std::pair<const CounterSnapshot*, std::uint64_t>> other;  // merged value
};

Grouped group(const CountersFileSnapshot& p) {
  Grouped g;
  std::vector<const CounterSnapshot*> other;
  other.reserve(p.counters.size());
  // A group's counters are allocated one after the other: the map is looked up once per run.
  std::vector<const CounterSnapshot*>* run = nullptr;
  const CounterSnapshot* run_head = nullptr;
  for (const CounterSnapshot& c : p.counters) {
    const bool handle = c.kind == CounterKind::kPublisher || c.kind == CounterKind::kSubscriber;
    if (c.owner != 0 && (handle || c.kind == CounterKind::kPoller || c.kind == CounterKind::kHistogram)) {
      if (run == nullptr || run_head->kind != c.kind || run_head->owner != c.owner || run_head->scope != c.scope) {
        const std::uint32_t id = c.kind == CounterKind::kHistogram ? c.owner : handle ? c.stream_id : 0;
        run = &g.groups[{static_cast<int>(c.kind), id, c.scope}];
        run_head = &c;
        if (handle) g.topic_of_stream.try_emplace(c.stream_id, topic_of(c.scope));
      }
      run->push_back(&c);
      continue;
    }
    run = nullptr;
    if (c.kind == CounterKind::kOther && c.stream_id != 0) {
      const std::string_view w = first_word(c.scope);
      if (is_transport_word(w)) g.transport_of_stream.emplace(c.stream_id, std::string(w));
    }
    other.push_back(&c);
  }
  auto key = [](const CounterSnapshot* c) { return std::tie(c->scope, c->name, c->stream_id); };
  std::stable_sort(other.begin(), other.end(), [&](auto* a, auto* b) { return key(a) < key(b); });
  for (const CounterSnapshot* c : other) {
    if (!g.other.empty() && key(g.other.back().first) == key(c)) {
      g.other.back().second += c->value;
    } else {
      g.other.emplace_back(c, c->value);
    }
  }
  return g;
}

// A group's counters by name, the handles' values merged: summed, or the larger for `gauge`.
std::vector<std::pair<std::string_view, std::uint64_t>> merged(const std::vector<const CounterSnapshot*>& cells,
                                                               bool (*gauge)(std::string_view)) {
  std::vector<std::pair<std::string_view, std::uint64_t>> out;
  for (const CounterSnapshot* c : cells) {
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& e) { return e.first == c->name; });
    if (it == out.end()) {
      out.emplace_back(c->name, c->value);
    } else {
      it->second = gauge(c->name) ? std::max(it->second, c->value) : it->second + c->value;
    }
  }
  return out;
}

bool stream_gauge(std::string_view name) { return name == core::StreamCounters::names::position; }

// A histogram's cells: buckets in bound order (+Inf last), sum and count.
struct HistogramCells {
  std::string scope, name;
  std::uint64_t buckets[AppHistogram::kBuckets] = {};
  std::uint64_t sum_ns = 0;
  std::uint64_t total() const {
    std::uint64_t n = 0;
    for (std::uint64_t b : buckets) n += b;
    return n;
  }
  // The value below which `q` of the recorded values lie, interpolated within its bucket
  // (as Prometheus' histogram_quantile does); the last finite bound when it is in +Inf.
  double quantile_s(double q) const {
    const std::uint64_t n = total();
    if (n == 0) return 0;
    const double rank = q * static_cast<double>(n);
    double cum = 0;
    for (std::size_t i = 0; i < AppHistogram::kBuckets; ++i) {
      const double next = cum + static_cast<double>(buckets[i]);
      if (next >= rank && buckets[i] != 0) {
        if (i == AppHistogram::kBuckets - 1) return static_cast<double>(AppHistogram::kBoundsNs[i - 1]) / 1e9;
        const double lo = i == 0 ? 0 : static_cast<double>(AppHistogram::kBoundsNs[i - 1]);
        const double hi = static_cast<double>(AppHistogram::kBoundsNs[i]);
        return (lo + (hi - lo) * (rank - cum) / static_cast<double>(buckets[i])) / 1e9;
      }
      cum = next;
    }
    return 0;
  }
};

// The cells of one histogram group; false when they are not a histogram's (a damaged file).
bool read_histogram(const std::vector<const CounterSnapshot*>& cells, HistogramCells* h) {
  if (cells.empty()) return false;
  const std::string& first = cells.front()->name;
  const auto sp = first.rfind(" le ");
  if (sp == std::string::npos) return false;
  h->scope = cells.front()->scope;
  h->name = first.substr(0, sp);
  const std::string prefix = h->name + " ";
  for (const CounterSnapshot* c : cells) {
    if (c->name.compare(0, prefix.size(), prefix) != 0) return false;
    const std::string_view cell = std::string_view(c->name).substr(prefix.size());
    if (cell == "sum_ns") {
      h->sum_ns = c->value;
    } else if (cell == "le inf") {
      h->buckets[AppHistogram::kBuckets - 1] = c->value;
    } else if (cell.substr(0, 3) == "le ") {
      const std::string bound(cell.substr(3));
      for (std::size_t i = 0; i + 1 < AppHistogram::kBuckets; ++i) {
        if (bound == absl::StrCat(AppHistogram::kBoundsNs[i])) h->buckets[i] = c->value;
      }
    }
  }
  return true;
}

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      absl::StrAppendFormat(&out, "\\u%04x", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
  return out;
}

std::string process_labels(const CountersFileSnapshot& p) {
  return absl::StrCat("process=\"", label_value(p.name), "\",pid=\"", p.pid, "\"");
}

}  // namespace

std::string_view content_type(Format f) noexcept {
  return f == Format::kOpenMetrics ? "application/openmetrics-text; version=1.0.0; charset=utf-8"
                                   : "text/plain; version=0.0.4; charset=utf-8";
}

Format negotiate(std::string_view accept) noexcept {
  return accept.find("application/openmetrics-text") != std::string_view::npos ? Format::kOpenMetrics
                                                                               : Format::kPrometheus;
}

std::string render(const std::vector<CountersFileSnapshot>& procs, Format fmt) {
  Builder b;
  const auto transport_help = core::transport_counter_help();
  FamilyCache stream_families, poller_families, transport_families;
  std::uint64_t live = 0;
  for (const CountersFileSnapshot& p : procs) {
    if (!p.alive) continue;
    ++live;
    const std::string proc = process_labels(p);
    const Grouped g = group(p);
    b.sample("pollux_process_start_time_seconds", Type::kGauge,
             "when the process created its counters file, in seconds since the Unix epoch", proc,
             static_cast<std::uint64_t>(std::max<std::int64_t>(p.start_ns, 0)), true);
    b.sample("pollux_error_log_distinct_errors", Type::kGauge,
             "distinct errors in the process's error log (pollux-stat --errors lists them)", proc,
             p.errors.entries.size());
    std::map<std::pair<std::string, std::string>, HistogramCells> histograms;  // (scope, name): merged
    std::string labels;
    for (const auto& [key, cells] : g.groups) {
      const auto kind = static_cast<CounterKind>(std::get<0>(key));
      const CounterSnapshot& head = *cells.front();
      if (kind == CounterKind::kPublisher || kind == CounterKind::kSubscriber) {
        const bool pub = kind == CounterKind::kPublisher;
        auto t = g.transport_of_stream.find(head.stream_id);
        labels = absl::StrCat(proc, ",stream=\"", head.stream_id, "\",topic=\"", label_value(topic_of(head.scope)),
                              "\",direction=\"", pub ? "publication" : "subscription", "\",transport=\"",
                              t == g.transport_of_stream.end() ? "unknown" : t->second, "\"");
        for (const auto& [name, value] : merged(cells, stream_gauge)) {
          Family& f = stream_families.get(name, [&, name = name]() -> Family& {
            const std::string_view help = help_of(core::StreamCounters::kCounterTable, name);
            return stream_gauge(name)
                       ? b.get("pollux_subscription_position", Type::kGauge, help)
                       : b.get(absl::StrCat("pollux_stream_", name_part(name), "_total"), Type::kCounter, help);
          });
          Builder::sample(f, labels, value);
        }
      } else if (kind == CounterKind::kPoller) {
        const std::string poller = head.scope.size() > 7 ? head.scope.substr(7) : head.scope;
        labels = absl::StrCat(proc, ",poller=\"", label_value(poller), "\"");
        std::uint64_t tid = 0, idle = 0;
        std::string cpu = "";
        for (const CounterSnapshot* c : cells) {
          using N = core::PollerCounters::names;
          const std::string_view help = help_of(core::PollerCounters::kCounterTable, c->name);
          if (c->name == N::thread_id) {
            tid = c->value;
          } else if (c->name == N::idle_strategy) {
            idle = c->value;
          } else if (c->name == N::pinned_cpu) {
            cpu = absl::StrCat(c->value);
          } else if (c->name == N::mode) {
            b.sample("pollux_poller_mode", Type::kGauge, help, labels, c->value);
            for (std::uint64_t m = 0; m < 3; ++m) {
              b.sample("pollux_poller_state", Type::kGauge,
                       "1 for the controller's mode now (busy, spin or interrupt = asleep), 0 for the others",
                       absl::StrCat(labels, ",state=\"", kModeNames[m], "\""), c->value == m ? 1 : 0);
            }
          } else if (c->name == N::spin_budget_ns) {
            b.sample("pollux_poller_spin_budget_seconds", Type::kGauge, help, labels, c->value, true);
          } else {
            const auto [n, ns] = unit_name(c->name);
            Family& f = poller_families.get(c->name, [&, n = n]() -> Family& {
              return b.get(absl::StrCat("pollux_poller_", n, "_total"), Type::kCounter, help);
            });
            Builder::sample(f, labels, c->value, ns);
          }
        }
        // The counter holds an IdleKind; a value no build writes (a hostile file) reads "unknown".
        const std::string idle_name = idle <= static_cast<std::uint64_t>(IdleKind::kAdaptive)
                                          ? std::string(idle_kind_name(static_cast<IdleKind>(idle)))
                                          : std::string("unknown");
        b.sample("pollux_poller_info", Type::kInfo,
                 "the poller thread: kernel tid, pinned core (\"\" when not pinned) and idle strategy",
                 absl::StrCat(labels, ",thread_id=\"", tid, "\",cpu=\"", cpu, "\",idle=\"", idle_name, "\""), 1);
      } else if (kind == CounterKind::kHistogram) {
        HistogramCells h;
        if (!read_histogram(cells, &h)) continue;
        auto [it, fresh] = histograms.try_emplace({h.scope, h.name}, h);
        if (!fresh) {
          for (std::size_t i = 0; i < AppHistogram::kBuckets; ++i) it->second.buckets[i] += h.buckets[i];
          it->second.sum_ns += h.sum_ns;
        }
      }
    }
    for (const auto& [id, h] : histograms) {
      const std::string family = absl::StrCat("pollux_app_", name_part(h.name), "_seconds");
      Family& f = b.get(family, Type::kHistogram,
                        absl::StrCat("the application's latency histogram \"", h.name, "\" (pollux::AppHistogram)"));
      labels = absl::StrCat(proc, ",scope=\"", label_value(h.scope), "\"");
      std::uint64_t cum = 0;
      for (std::size_t i = 0; i < AppHistogram::kBuckets; ++i) {
        cum += h.buckets[i];
        const std::string le = i + 1 < AppHistogram::kBuckets
                                   ? absl::StrFormat("%g", static_cast<double>(AppHistogram::kBoundsNs[i]) / 1e9)
                                   : std::string("+Inf");
        absl::StrAppend(&f.body, family, "_bucket{", labels, ",le=\"", le, "\"} ", cum, "\n");
      }
      absl::StrAppend(&f.body, family, "_sum{", labels, "} ", ns_as_seconds(h.sum_ns), "\n", family, "_count{", labels,
                      "} ", cum, "\n");
    }
    for (const auto& [c, value] : g.other) {
      if (c->kind == CounterKind::kProcess) {
        if (c->name == "errors") {
          b.sample("pollux_errors_total", Type::kCounter,
                   "errors the process recorded in its error log (each occurrence)", proc, value);
        }
        continue;
      }
      const std::string_view scope = c->scope;
      if (scope.substr(0, kLateJoinScope.size()) == kLateJoinScope) {
        labels = absl::StrCat(proc, ",topic=\"", label_value(scope.substr(kLateJoinScope.size())), "\"");
        if (c->name == "state") {
          for (std::uint64_t s = 0; s < 4; ++s) {
            b.sample("pollux_late_join_state", Type::kGauge,
                     "1 for the late joiner's state now (replaying, catching_up, merged, live), 0 for the others",
                     absl::StrCat(labels, ",state=\"", kLateJoinStates[s], "\""), value == s ? 1 : 0);
          }
        } else {
          b.sample(absl::StrCat("pollux_late_join_", name_part(c->name), "_total"), Type::kCounter,
                   absl::StrCat("late joiner: messages ", c->name, " (docs/ARCHIVE.md, late join)"), labels, value);
        }
        continue;
      }
      const std::string_view word = first_word(scope);
      const std::string_view help = help_of(transport_help, c->name);
      if (is_transport_word(word) && !help.empty()) {
        labels = absl::StrCat(proc, ",transport=\"", std::string(word), "\",scope=\"", label_value(scope), "\"");
        if (c->stream_id != 0) {
          absl::StrAppend(&labels, ",stream=\"", c->stream_id, "\"");
          auto t = g.topic_of_stream.find(c->stream_id);
          if (t != g.topic_of_stream.end()) absl::StrAppend(&labels, ",topic=\"", label_value(t->second), "\"");
        }
        // (A structured binding is not captured: clang 14, the fuzz build's compiler, refuses it.)
        Family& f = transport_families.get(c->name, [&, name = std::string_view(c->name)]() -> Family& {
          return transport_gauge(name)
                     ? b.get(absl::StrCat("pollux_transport_", name_part(name)), Type::kGauge, help)
                     : b.get(absl::StrCat("pollux_transport_", name_part(name), "_total"), Type::kCounter, help);
        });
        Builder::sample(f, labels, value);
        continue;
      }
      // The application's own counters (Context::counter): their meaning is the application's.
      b.sample("pollux_app_value", Type::kGauge,
               "a counter of the application's own (Context::counter), by its scope and name",
               absl::StrCat(proc, ",scope=\"", label_value(scope), "\",name=\"", label_value(c->name), "\""), value);
    }
  }
  b.sample("pollux_metrics_processes", Type::kGauge, "running Pollux processes whose counters this endpoint serves", "",
           live);
  return b.write(fmt);
}

double RateHistory::rate(const std::string& key, std::int64_t t_ns, std::uint64_t messages) {
  Series& s = series_[key];
  s.seen = true;
  if (!s.samples.empty() && t_ns <= s.samples.back().t_ns) return 0;                  // not later: nothing new
  if (!s.samples.empty() && messages < s.samples.back().messages) s.samples.clear();  // a new handle
  s.samples.push_back({t_ns, messages});
  // Older than the window, as long as two samples stay.
  std::size_t drop = 0;
  while (s.samples.size() - drop > 2 && t_ns - s.samples[drop].t_ns > kWindowNs) ++drop;
  s.samples.erase(s.samples.begin(), s.samples.begin() + static_cast<std::ptrdiff_t>(drop));
  if (s.samples.size() < 2) return 0;
  const Sample& first = s.samples.front();
  return static_cast<double>(messages - first.messages) * 1e9 / static_cast<double>(t_ns - first.t_ns);
}

void RateHistory::end_round() {
  for (auto it = series_.begin(); it != series_.end();) {
    if (!it->second.seen) {
      it = series_.erase(it);
    } else {
      it->second.seen = false;
      ++it;
    }
  }
}

std::string render_json(const std::vector<CountersFileSnapshot>& procs, RateHistory* rates) {
  std::int64_t now = 0;
  for (const CountersFileSnapshot& p : procs) now = std::max(now, p.snapshot_ns);
  std::string out = absl::StrCat("{\"snapshot_ns\":", now, ",\"processes\":[");
  bool first_proc = true;
  for (const CountersFileSnapshot& p : procs) {
    if (!p.alive) continue;
    absl::StrAppend(&out, first_proc ? "" : ",", "{\"name\":", json_string(p.name), ",\"pid\":", p.pid,
                    ",\"snapshot_ns\":", p.snapshot_ns);
    first_proc = false;
    const Grouped g = group(p);
    std::uint64_t errors = 0;
    std::map<std::uint32_t, std::uint64_t> naks;  // stream -> NAKs sent and received
    for (const auto& [c, value] : g.other) {
      if (c->kind == CounterKind::kProcess && c->name == "errors") errors = value;
      if (c->stream_id != 0 && (c->name == "naks_sent" || c->name == "naks_received")) naks[c->stream_id] += value;
    }
    absl::StrAppend(&out, ",\"errors\":", errors);
    std::string streams, pollers, histograms;
    for (const auto& [key, cells] : g.groups) {
      const auto kind = static_cast<CounterKind>(std::get<0>(key));
      const CounterSnapshot& head = *cells.front();
      if (kind == CounterKind::kPublisher || kind == CounterKind::kSubscriber) {
        auto t = g.transport_of_stream.find(head.stream_id);
        auto n = naks.find(head.stream_id);
        const char* direction = kind == CounterKind::kPublisher ? "publication" : "subscription";
        absl::StrAppend(&streams, streams.empty() ? "" : ",", "{\"topic\":", json_string(topic_of(head.scope)),
                        ",\"stream\":", head.stream_id, ",\"direction\":\"", direction, "\",\"transport\":\"",
                        t == g.transport_of_stream.end() ? "unknown" : t->second,
                        "\",\"naks\":", n == naks.end() ? 0 : n->second, ",\"counters\":{");
        bool first = true;
        std::uint64_t messages = 0;
        for (const auto& [name, value] : merged(cells, stream_gauge)) {
          absl::StrAppend(&streams, first ? "" : ",", json_string(name), ":", value);
          if (name == core::StreamCounters::names::messages) messages = value;
          first = false;
        }
        streams += "}";
        if (rates != nullptr) {
          const std::string key =
              absl::StrCat(p.path, "|", p.pid, "|", direction, "|", head.stream_id, "|", head.scope);
          absl::StrAppendFormat(&streams, ",\"rate\":%.1f", rates->rate(key, p.snapshot_ns, messages));
        }
        streams += "}";
      } else if (kind == CounterKind::kPoller) {
        absl::StrAppend(&pollers, pollers.empty() ? "" : ",",
                        "{\"poller\":", json_string(head.scope.size() > 7 ? head.scope.substr(7) : head.scope),
                        ",\"counters\":{");
        bool first = true;
        for (const CounterSnapshot* c : cells) {
          absl::StrAppend(&pollers, first ? "" : ",", json_string(c->name), ":", c->value);
          first = false;
        }
        pollers += "}}";
      } else if (kind == CounterKind::kHistogram) {
        HistogramCells h;
        if (!read_histogram(cells, &h)) continue;
        absl::StrAppendFormat(&histograms,
                              "%s{\"scope\":%s,\"name\":%s,\"count\":%u,\"sum_s\":%s,\"p50_s\":%.9f,\"p90_s\":%.9f,"
                              "\"p99_s\":%.9f,\"p999_s\":%.9f}",
                              histograms.empty() ? "" : ",", json_string(h.scope), json_string(h.name), h.total(),
                              ns_as_seconds(h.sum_ns), h.quantile_s(0.5), h.quantile_s(0.9), h.quantile_s(0.99),
                              h.quantile_s(0.999));
      }
    }
    absl::StrAppend(&out, ",\"streams\":[", streams, "],\"pollers\":[", pollers, "],\"histograms\":[", histograms,
                    "]}");
  }
  out += "]}\n";
  if (rates != nullptr) rates->end_round();
  return out;
}

}  // namespace pollux::detail::metrics
