#include "feed_handler/feed_config.h"

#include <algorithm>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include <toml++/toml.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/config.h"
#include "feed_handler/embedded_config.h"
#include "itch/generator.h"
#include "tools/common/config_override.h"

namespace pollux::feed {

std::string_view SourceName(SourceKind s) { return s == SourceKind::kGenerator ? "generator" : "file"; }

std::string_view ReplayName(ReplayMode r) {
  switch (r) {
    case ReplayMode::kOriginal: return "original";
    case ReplayMode::kSpeed: return "speed";
    case ReplayMode::kRate: return "rate";
    case ReplayMode::kMax: return "max";
  }
  return "?";
}

std::string_view EmbeddedConfig() { return kEmbeddedFeedToml; }

std::string TomlString(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out.push_back('\\');
    out.push_back(ch);
  }
  out.push_back('"');
  return out;
}

std::string FeedConfig::Topic(std::uint32_t i) const { return absl::StrCat(topic, ".", i); }

namespace {

// ---- value helpers: "" on success, else the message that follows "key: " -------------------

std::string Describe(const toml::node& n) {
  if (const toml::value<std::string>* s = n.as_string()) return absl::StrFormat("\"%s\"", s->get());
  if (n.is_integer()) return absl::StrCat(*n.value<std::int64_t>());
  if (n.is_floating_point()) return absl::StrCat(*n.value<double>());
  if (n.is_boolean()) return *n.value<bool>() ? "true" : "false";
  if (n.is_table()) return "a table";
  if (n.is_array()) return "an array";
  return "a date/time";
}

template <typename T>
std::string WantInt(const toml::node& n, std::int64_t lo, std::int64_t hi, T* out) {
  if (!n.is_integer()) return absl::StrCat("expected an integer, got ", Describe(n));
  const std::int64_t v = *n.value<std::int64_t>();
  if (v < lo || v > hi) return absl::StrFormat("expected %d..%d, got %d", lo, hi, v);
  *out = static_cast<T>(v);
  return "";
}

// Integers are converted here: toml++'s value<double>() is empty for one beyond 2^53.
std::string WantDouble(const toml::node& n, double lo, double hi, double* out) {
  double v;
  if (n.is_floating_point()) {
    v = *n.value<double>();
  } else if (n.is_integer()) {
    v = static_cast<double>(*n.value<std::int64_t>());
  } else {
    return absl::StrCat("expected a number, got ", Describe(n));
  }
  if (!(v >= lo && v <= hi)) return absl::StrFormat("expected %g..%g, got %s", lo, hi, Describe(n));
  *out = v;
  return "";
}

template <typename E>
std::string WantEnum(const toml::node& n, std::initializer_list<std::pair<const char*, E>> choices, E* out) {
  std::vector<std::string> names;
  for (const auto& c : choices) names.emplace_back(c.first);
  if (const toml::value<std::string>* v = n.as_string()) {
    const std::string& s = v->get();
    for (const auto& c : choices) {
      if (s == c.first) {
        *out = c.second;
        return "";
      }
    }
  }
  return absl::StrFormat("expected %s, got %s", absl::StrJoin(names, "|"), Describe(n));
}

std::string Quote(std::string_view s) { return absl::StrFormat("\"%s\"", s); }

// ---- the [feed] table ------------------------------------------------------------------------

struct Field {
  const char* key;  // without the "feed." prefix
  const char* help;
  std::function<std::string(FeedConfig&, const toml::node&)> set;
  std::function<std::string(const FeedConfig&)> get;
};

const std::vector<Field>& Fields() {
  static const std::vector<Field> table = {
      {"source", "what to replay: generator (synthetic, seeded) or file (a BinaryFILE; --itch FILE selects it)",
       [](FeedConfig& c, const toml::node& n) {
         return WantEnum<SourceKind>(n, {{"generator", SourceKind::kGenerator}, {"file", SourceKind::kFile}}, &c.source);
       },
       [](const FeedConfig& c) { return Quote(SourceName(c.source)); }},
      {"file", "ITCH 5.0 BinaryFILE to replay when source = \"file\"",
       [](FeedConfig& c, const toml::node& n) -> std::string {
         const toml::value<std::string>* s = n.as_string();
         if (s == nullptr) return absl::StrCat("expected a path, got ", Describe(n));
         c.file = s->get();
         return "";
       },
       [](const FeedConfig& c) { return Quote(c.file); }},
      {"symbols", "generator: number of symbols (stock locates 1..symbols)",
       [](FeedConfig& c, const toml::node& n) { return WantInt(n, 1, 65535, &c.symbols); },
       [](const FeedConfig& c) { return absl::StrCat(c.symbols); }},
      {"messages", "generator: messages in total, system and directory messages included",
       [](FeedConfig& c, const toml::node& n) { return WantInt(n, 8, std::int64_t{1} << 40, &c.messages); },
       [](const FeedConfig& c) { return absl::StrCat(c.messages); }},
      {"seed", "generator: seed (same seed and options, same bytes)",
       [](FeedConfig& c, const toml::node& n) { return WantInt(n, 0, INT64_MAX, &c.seed); },
       [](const FeedConfig& c) { return absl::StrCat(c.seed); }},
      {"orders_per_symbol", "generator: live orders per symbol the order flow hovers around",
       [](FeedConfig& c, const toml::node& n) { return WantInt(n, 1, 1 << 20, &c.orders_per_symbol); },
       [](const FeedConfig& c) { return absl::StrCat(c.orders_per_symbol); }},
      {"replay", "pacing: original (the messages' own timestamps), speed (timestamps / speed), rate (fixed messages/s), max (as fast as possible)",
       [](FeedConfig& c, const toml::node& n) {
         return WantEnum<ReplayMode>(n, {{"original", ReplayMode::kOriginal}, {"speed", ReplayMode::kSpeed},
                                         {"rate", ReplayMode::kRate}, {"max", ReplayMode::kMax}}, &c.replay);
       },
       [](const FeedConfig& c) { return Quote(ReplayName(c.replay)); }},
      {"speed", "replay = \"speed\": multiple of the original pace (2.0 = twice as fast)",
       [](FeedConfig& c, const toml::node& n) { return WantDouble(n, 1e-6, 1e12, &c.speed); },
       [](const FeedConfig& c) { return absl::StrFormat("%g", c.speed); }},
      {"rate", "replay = \"rate\": messages per second, evenly spaced (open loop)",
       [](FeedConfig& c, const toml::node& n) { return WantInt(n, 1, 1'000'000'000, &c.rate); },
       [](const FeedConfig& c) { return absl::StrCat(c.rate); }},
      {"max_gap_ms", "original/speed: longer pauses between consecutive messages (after scaling) are cut to this",
       [](FeedConfig& c, const toml::node& n) { return WantInt(n, 0, 3'600'000, &c.max_gap_ms); },
       [](const FeedConfig& c) { return absl::StrCat(c.max_gap_ms); }},
      {"streams", "partitions: message with stock locate L goes to stream L % streams, each its own topic and sequence",
       [](FeedConfig& c, const toml::node& n) { return WantInt(n, 1, 256, &c.streams); },
       [](const FeedConfig& c) { return absl::StrCat(c.streams); }},
      {"topic", "topic prefix: partition i is published on \"<topic>.<i>\"",
       [](FeedConfig& c, const toml::node& n) -> std::string {
         const toml::value<std::string>* v = n.as_string();
         if (v == nullptr) return absl::StrCat("expected a string, got ", Describe(n));
         const std::string& s = v->get();
         if (s.empty() || s.size() > 64) return absl::StrCat("expected 1-64 characters, got ", Describe(n));
         c.topic = s;
         return "";
       },
       [](const FeedConfig& c) { return Quote(c.topic); }},
      {"batch_bytes", "most payload bytes per Pollux message, filled with length-prefixed ITCH messages; 0 = one bare ITCH message per Pollux message",
       [](FeedConfig& c, const toml::node& n) -> std::string {
         std::uint32_t v = 0;
         if (auto e = WantInt(n, 0, 16 << 20, &v); !e.empty()) return e;
         if (v != 0 && v < 64) return absl::StrCat("expected 0 or 64..16777216, got ", v);
         c.batch_bytes = v;
         return "";
       },
       [](const FeedConfig& c) { return absl::StrCat(c.batch_bytes); }},
      {"subscribers", "subscribers started by --role all, each rebuilding every book from every stream",
       [](FeedConfig& c, const toml::node& n) { return WantInt(n, 1, 32, &c.subscribers); },
       [](const FeedConfig& c) { return absl::StrCat(c.subscribers); }},
      {"subscriber_mode", "process: each subscriber is its own process (this binary, --role sub); thread: threads of the publishing process",
       [](FeedConfig& c, const toml::node& n) {
         return WantEnum<SubscriberMode>(n, {{"process", SubscriberMode::kProcess}, {"thread", SubscriberMode::kThread}},
                                         &c.subscriber_mode);
       },
       [](const FeedConfig& c) { return Quote(c.subscriber_mode == SubscriberMode::kProcess ? "process" : "thread"); }},
      {"progress_ms", "interval of the progress lines on stderr; 0 = none",
       [](FeedConfig& c, const toml::node& n) { return WantInt(n, 0, 3'600'000, &c.progress_ms); },
       [](const FeedConfig& c) { return absl::StrCat(c.progress_ms); }},
      {"top", "symbols listed in the summary's top-of-book table (in stock locate order; --book-out has all)",
       [](FeedConfig& c, const toml::node& n) { return WantInt(n, 0, 65535, &c.top); },
       [](const FeedConfig& c) { return absl::StrCat(c.top); }},
      {"connect_timeout_ms", "how long publisher and subscribers wait for each other before giving up",
       [](FeedConfig& c, const toml::node& n) { return WantInt(n, 10, 3'600'000, &c.connect_timeout_ms); },
       [](const FeedConfig& c) { return absl::StrCat(c.connect_timeout_ms); }},
  };
  return table;
}

std::string DidYouMean(std::string_view key) {
  std::vector<std::string> known;
  for (const Field& f : Fields()) known.push_back(absl::StrCat("feed.", f.key));
  return pollux::core::did_you_mean(key, known);
}

const Field* FindField(std::string_view name) {
  for (const Field& f : Fields()) {
    if (name == f.key) return &f;
  }
  return nullptr;
}

absl::Status Error(std::string_view where, std::string_view key, std::string_view msg) {
  return absl::InvalidArgumentError(absl::StrFormat("%s: %s: %s", where, key, msg));
}

std::string Where(std::string_view source, const toml::source_region& r) {
  return absl::StrFormat("%s:%d", source, r.begin.line);
}

absl::StatusOr<toml::table> ParseToml(std::string_view text, std::string_view source) {
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrFormat("%s:%d:%d: TOML syntax error: %s", source, e.source().begin.line,
                                                      e.source().begin.column, e.description()));
  }
}

// Sets one [feed] key from a TOML node; `where` is how errors locate it.
absl::Status SetFeedKey(FeedConfig* cfg, std::string_view name, const toml::node& v, const std::string& where) {
  const std::string full = absl::StrCat("feed.", std::string(name));
  const Field* f = FindField(name);
  if (f == nullptr) return Error(where, full, absl::StrCat("unknown key", DidYouMean(full)));
  if (std::string e = f->set(*cfg, v); !e.empty()) return Error(where, full, e);
  cfg->where[full] = where;
  return absl::OkStatus();
}

// Checks that involve several keys; errors point at the key most likely to be wrong.
absl::Status ValidateFeed(const FeedConfig& c, std::string_view source) {
  auto at = [&](const std::string& key) {
    auto it = c.where.find(key);
    return it == c.where.end() ? std::string(source) : it->second;
  };
  if (c.source == SourceKind::kFile && c.file.empty()) {
    return Error(at("feed.source"), "feed.file", "missing: source = \"file\" needs feed.file (or --itch FILE)");
  }
  if (c.source == SourceKind::kGenerator && c.messages < itch::MinMessages(c.symbols)) {
    return Error(at("feed.messages"), "feed.messages",
                 absl::StrFormat("%d is too few for %d symbols: the generator needs at least %d (6 system events, "
                                 "R and H per symbol)",
                                 c.messages, c.symbols, itch::MinMessages(c.symbols)));
  }
  return absl::OkStatus();
}

}  // namespace

std::string FeedConfig::ToToml() const {
  std::string out = "[feed]\n";
  for (const Field& f : Fields()) absl::StrAppend(&out, f.key, " = ", f.get(*this), "  # ", f.help, "\n");
  return out;
}

absl::StatusOr<LoadedConfig> LoadConfig(std::string_view text, std::string_view source,
                                        const std::vector<std::string>& overrides) {
  absl::StatusOr<toml::table> parsed = ParseToml(text, source);
  if (!parsed.ok()) return parsed.status();
  toml::table& root = *parsed;
  LoadedConfig out;

  // Lines of the document that belong to [feed]: its header and every key/value (a value may
  // span lines). TOML allows nothing else on those lines, so blanking them removes exactly the
  // table and leaves every other line where it was.
  std::set<std::int64_t> feed_lines;
  if (toml::node* f = root.get("feed")) {
    const toml::table* t = f->as_table();
    if (t == nullptr) {
      return Error(Where(source, f->source()), "feed", absl::StrCat("expected a table [feed], got ", Describe(*f)));
    }
    for (auto&& [k, v] : *t) {
      if (absl::Status s = SetFeedKey(&out.feed, k.str(), v, Where(source, v.source())); !s.ok()) return s;
      for (auto l = k.source().begin.line; l <= v.source().end.line; ++l) feed_lines.insert(l);
    }
    // The header line ([feed]), or for an inline table (feed = {...}) the lines it spans.
    for (auto l = f->source().begin.line; l <= f->source().end.line; ++l) feed_lines.insert(l);
  }
  std::string pollux_text;
  pollux_text.reserve(text.size());
  std::int64_t line = 1;
  for (std::size_t pos = 0; pos < text.size(); ++line) {
    std::size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    if (feed_lines.count(line) == 0) pollux_text.append(text.substr(pos, nl - pos));
    pollux_text.push_back('\n');
    pos = nl + 1;
  }

  // Pollux's part is checked as written first, so its errors name the user's lines.
  absl::StatusOr<core::Config> pc = core::parse_config(pollux_text, source);
  if (!pc.ok()) return pc.status();
  out.pollux = *pc;
  out.pollux_toml = std::move(pollux_text);
  out.pollux_source = std::string(source);

  // Overrides: [feed] keys through the table above; Pollux keys by editing the parsed document
  // and handing Pollux the re-serialised text (whose line numbers are then the rewritten ones).
  bool pollux_overridden = false;
  root.erase("feed");
  for (const std::string& o : overrides) {
    absl::StatusOr<tools::ConfigOverride> ov =
        tools::ParseOverride(o, "--set", "feed.messages=1000000, runtime.threading=shared");
    if (!ov.ok()) return ov.status();
    if (ov->section == "feed") {
      if (absl::Status s = SetFeedKey(&out.feed, ov->key, ov->value(), "--set"); !s.ok()) return s;
      continue;
    }
    if (absl::Status s = tools::ApplyOverride(root, *ov, "--set"); !s.ok()) return s;
    pollux_overridden = true;
  }
  if (absl::Status s = ValidateFeed(out.feed, source); !s.ok()) return s;
  if (pollux_overridden) {
    std::ostringstream os;
    os << toml::toml_formatter(root);
    out.pollux_toml = os.str();
    out.pollux_source = absl::StrCat(std::string(source), " + --set");
    pc = core::parse_config(out.pollux_toml, out.pollux_source);
    if (!pc.ok()) return pc.status();
    out.pollux = *pc;
  }
  return out;
}

absl::StatusOr<LoadedConfig> LoadConfigFile(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrFormat("%s: cannot open config file: %s", path, std::strerror(errno)));
  std::stringstream ss;
  ss << f.rdbuf();
  return LoadConfig(ss.str(), path, overrides);
}

}  // namespace pollux::feed
