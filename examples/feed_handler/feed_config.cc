#include "feed_handler/feed_config.h"

#include <algorithm>
#include <functional>
#include <set>
#include <sstream>
#include <tuple>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <toml++/toml.h>

#include "absl/strings/numbers.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/config.h"
#include "feed_handler/embedded_config.h"
#include "itch/generator.h"
#include "tools/common/config_override.h"

namespace pollux::feed {

std::string_view SourceName(SourceKind s) {
  switch (s) {
    case SourceKind::kGenerator:
      return "generator";
    case SourceKind::kFile:
      return "file";
    case SourceKind::kMoldUdp64:
      return "moldudp64";
    case SourceKind::kPcap:
      return "pcap";
  }
  return "?";
}

std::string CheckEndpoint(std::string_view s, bool multicast, bool host_name) {
  const std::size_t colon = s.rfind(':');
  std::uint32_t port = 0;
  if (colon == std::string_view::npos || colon == 0 || !absl::SimpleAtoi(std::string(s.substr(colon + 1)), &port) ||
      port == 0 || port > 65535) {
    return absl::StrFormat("expected %s:PORT (port 1..65535), got \"%s\"", host_name ? "HOST" : "ADDR", s);
  }
  in_addr a{};
  const std::string host(s.substr(0, colon));
  if (inet_pton(AF_INET, host.c_str(), &a) != 1) {
    if (host_name) return "";
    return absl::StrFormat("expected an IPv4 address before the port, got \"%s\"", s);
  }
  if (multicast && !IN_MULTICAST(ntohl(a.s_addr))) {
    return absl::StrFormat("\"%s\" is not a multicast group (224.0.0.0/4)", s);
  }
  return "";
}

std::string CheckSender(std::string_view s) {
  if (s.empty()) return "";
  in_addr a{};
  if (inet_pton(AF_INET, std::string(s).c_str(), &a) != 1) {
    return absl::StrFormat("expected an IPv4 address (the exchange's sender, e.g. \"10.0.0.1\"), got \"%s\"", s);
  }
  const std::uint32_t h = ntohl(a.s_addr);
  if (h == INADDR_ANY || h == INADDR_BROADCAST || IN_MULTICAST(h)) {
    return absl::StrFormat("\"%s\" cannot send a datagram: expected the unicast address of the exchange's sender", s);
  }
  return "";
}

std::string_view ReplayName(ReplayMode r) {
  switch (r) {
    case ReplayMode::kOriginal:
      return "original";
    case ReplayMode::kSpeed:
      return "speed";
    case ReplayMode::kRate:
      return "rate";
    case ReplayMode::kMax:
      return "max";
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

std::string WantEndpoint(const toml::node& n, bool multicast, bool host_name, std::string* out) {
  const toml::value<std::string>* v = n.as_string();
  if (v == nullptr) return absl::StrCat("expected \"", host_name ? "HOST" : "ADDR", ":PORT\", got ", Describe(n));
  if (v->get().empty()) {  // unset (source = "moldudp64" checks that the lines are set)
    out->clear();
    return "";
  }
  if (std::string e = CheckEndpoint(v->get(), multicast, host_name); !e.empty()) return e;
  *out = v->get();
  return "";
}

// An expected sender: an IPv4 unicast address, or "" (any sender).
std::string WantSender(const toml::node& n, std::string* out) {
  const toml::value<std::string>* v = n.as_string();
  if (v == nullptr) return absl::StrCat("expected an IPv4 address (the exchange's sender), got ", Describe(n));
  if (std::string e = CheckSender(v->get()); !e.empty()) return e;
  *out = v->get();
  return "";
}

std::string WantPath(const toml::node& n, std::string* out) {
  const toml::value<std::string>* v = n.as_string();
  if (v == nullptr) return absl::StrCat("expected a path, got ", Describe(n));
  *out = v->get();
  return "";
}

// Bytes as an integer or a string with a binary suffix ("64MiB"), as Pollux's own sizes.
std::string WantSize(const toml::node& n, std::uint64_t lo, std::uint64_t hi, std::uint64_t* out) {
  if (n.is_string()) return core::parse_size(n.as_string()->get(), lo, hi, out);
  return WantInt(n, static_cast<std::int64_t>(lo), static_cast<std::int64_t>(hi), out);
}

// ---- the [feed] table ------------------------------------------------------------------------

struct Field {
  const char* key;  // without the "feed." prefix
  const char* help;
  std::function<std::string(FeedConfig&, const toml::node&)> set;
  std::function<std::string(const FeedConfig&)> get;
};

const std::vector<Field>& Fields() {
  static const std::vector<Field> table = {
      {"source",
       "what to publish: generator (synthetic, seeded), file (a BinaryFILE; --itch FILE selects it), moldudp64 (live: "
       "an exchange's lines A and B, feed.line_a/line_b) or pcap (a capture of them, feed.pcap, replayed through the "
       "same arbiter)",
       [](FeedConfig& c, const toml::node& n) {
         return WantEnum<SourceKind>(n,
                                     {{"generator", SourceKind::kGenerator},
                                      {"file", SourceKind::kFile},
                                      {"moldudp64", SourceKind::kMoldUdp64},
                                      {"pcap", SourceKind::kPcap}},
                                     &c.source);
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
      {"replay",
       "pacing: original (the messages' own timestamps), speed (timestamps / speed), rate (fixed messages/s), max (as "
       "fast as possible)",
       [](FeedConfig& c, const toml::node& n) {
         return WantEnum<ReplayMode>(n,
                                     {{"original", ReplayMode::kOriginal},
                                      {"speed", ReplayMode::kSpeed},
                                      {"rate", ReplayMode::kRate},
                                      {"max", ReplayMode::kMax}},
                                     &c.replay);
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
      {"batch_bytes",
       "most payload bytes per Pollux message, filled with length-prefixed ITCH messages; 0 = one bare ITCH message "
       "per Pollux message",
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
      {"book_threads",
       "threads per subscriber building books: thread t polls the streams p with p % book_threads == t into books of "
       "its own, merged at the end (at most feed.streams)",
       [](FeedConfig& c, const toml::node& n) { return WantInt(n, 1, 64, &c.book_threads); },
       [](const FeedConfig& c) { return absl::StrCat(c.book_threads); }},
      {"expected_orders",
       "live orders a subscriber's order map holds before it first grows (rehashes mid-feed); allocated and touched at "
       "start, 48 bytes each (at least twice the generator market, symbols x orders_per_symbol)",
       [](FeedConfig& c, const toml::node& n) { return WantInt(n, 1, std::int64_t{1} << 28, &c.expected_orders); },
       [](const FeedConfig& c) { return absl::StrCat(c.expected_orders); }},
      {"subscriber_mode",
       "process: each subscriber is its own process (this binary, --role sub); thread: threads of the publishing "
       "process",
       [](FeedConfig& c, const toml::node& n) {
         return WantEnum<SubscriberMode>(
             n, {{"process", SubscriberMode::kProcess}, {"thread", SubscriberMode::kThread}}, &c.subscriber_mode);
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
      {"line_a", "moldudp64: line A, the multicast group ADDR:PORT to join",
       [](FeedConfig& c, const toml::node& n) { return WantEndpoint(n, true, false, &c.line_a); },
       [](const FeedConfig& c) { return Quote(c.line_a); }},
      {"line_b", "moldudp64: line B, the multicast group ADDR:PORT to join (the same stream as A)",
       [](FeedConfig& c, const toml::node& n) { return WantEndpoint(n, true, false, &c.line_b); },
       [](const FeedConfig& c) { return Quote(c.line_b); }},
      {"source_a",
       "moldudp64: the IPv4 address line A's datagrams must come from (\"\" = any sender); joined source-specific "
       "where the kernel can, and every datagram from another address is dropped and counted (wrong_source)",
       [](FeedConfig& c, const toml::node& n) { return WantSender(n, &c.source_a); },
       [](const FeedConfig& c) { return Quote(c.source_a); }},
      {"source_b",
       "moldudp64: the IPv4 address line B's datagrams must come from (\"\" = any sender), as feed.source_a",
       [](FeedConfig& c, const toml::node& n) { return WantSender(n, &c.source_b); },
       [](const FeedConfig& c) { return Quote(c.source_b); }},
      {"interface", "moldudp64: network interface both lines are joined on (\"\" = the one the route picks)",
       [](FeedConfig& c, const toml::node& n) -> std::string {
         const toml::value<std::string>* v = n.as_string();
         if (v == nullptr) return absl::StrCat("expected an interface name, got ", Describe(n));
         if (v->get().size() >= 16)
           return absl::StrCat("expected an interface name (at most 15 characters), got ", Describe(n));
         c.interface = v->get();
         return "";
       },
       [](const FeedConfig& c) { return Quote(c.interface); }},
      {"rerequest",
       "moldudp64: re-request server HOST:PORT; \"\" = none (a gap missing on both lines is reported at once)",
       [](FeedConfig& c, const toml::node& n) { return WantEndpoint(n, false, true, &c.rerequest); },
       [](const FeedConfig& c) { return Quote(c.rerequest); }},
      {"session",
       "moldudp64: the session to follow (1-10 characters); \"\" = the first one seen, then each that follows it on "
       "both lines (docs/FEED.md: what the handler corroborates)",
       [](FeedConfig& c, const toml::node& n) -> std::string {
         const toml::value<std::string>* v = n.as_string();
         if (v == nullptr || v->get().size() > 10) return absl::StrCat("expected 0-10 characters, got ", Describe(n));
         c.session = v->get();
         return "";
       },
       [](const FeedConfig& c) { return Quote(c.session); }},
      {"window",
       "moldudp64: messages buffered behind a gap while it is recovered (a power of two, 64 bytes each); a longer gap "
       "is reported at once",
       [](FeedConfig& c, const toml::node& n) -> std::string {
         std::uint32_t v = 0;
         if (auto e = WantInt(n, 1024, 1 << 24, &v); !e.empty()) return e;
         if ((v & (v - 1)) != 0) return absl::StrCat("expected a power of two, got ", v);
         c.window = v;
         return "";
       },
       [](const FeedConfig& c) { return absl::StrCat(c.window); }},
      {"rerequest_wait_us",
       "moldudp64: a gap one line has not reached yet is re-requested after this wait (at once when both lines went "
       "past it)",
       [](FeedConfig& c, const toml::node& n) { return WantInt(n, 0, 10'000'000, &c.rerequest_wait_us); },
       [](const FeedConfig& c) { return absl::StrCat(c.rerequest_wait_us); }},
      {"rerequest_timeout_ms",
       "moldudp64: a re-request that brought nothing this long is sent again; doubled at each consecutive retry",
       [](FeedConfig& c, const toml::node& n) { return WantInt(n, 1, 60'000, &c.rerequest_timeout_ms); },
       [](const FeedConfig& c) { return absl::StrCat(c.rerequest_timeout_ms); }},
      {"rerequest_timeout_max_ms", "moldudp64: the doubled timeout stops growing here",
       [](FeedConfig& c, const toml::node& n) { return WantInt(n, 1, 600'000, &c.rerequest_timeout_max_ms); },
       [](const FeedConfig& c) { return absl::StrCat(c.rerequest_timeout_max_ms); }},
      {"rerequest_retries",
       "moldudp64: consecutive re-requests that bring nothing, after the first, before the range is reported lost (a "
       "reply that brings anything resets the count; the rest of a partly answered range is asked for at once)",
       [](FeedConfig& c, const toml::node& n) { return WantInt(n, 0, 100, &c.rerequest_retries); },
       [](const FeedConfig& c) { return absl::StrCat(c.rerequest_retries); }},
      {"rerequest_max_outstanding", "moldudp64: re-requests in flight at once (the others wait)",
       [](FeedConfig& c, const toml::node& n) { return WantInt(n, 1, 1024, &c.rerequest_max_outstanding); },
       [](const FeedConfig& c) { return absl::StrCat(c.rerequest_max_outstanding); }},
      {"heartbeat_ms", "moldudp64: the exchange's heartbeat interval",
       [](FeedConfig& c, const toml::node& n) { return WantInt(n, 1, 3'600'000, &c.heartbeat_ms); },
       [](const FeedConfig& c) { return absl::StrCat(c.heartbeat_ms); }},
      {"stale_heartbeats",
       "moldudp64: the feed is stale after this many heartbeat intervals without a packet on either line",
       [](FeedConfig& c, const toml::node& n) { return WantInt(n, 1, 1000, &c.stale_heartbeats); },
       [](const FeedConfig& c) { return absl::StrCat(c.stale_heartbeats); }},
      {"end_linger_ms",
       "moldudp64: after the end of session (every gap filled or reported), wait this long for a next session before "
       "ending",
       [](FeedConfig& c, const toml::node& n) { return WantInt(n, 0, 3'600'000, &c.end_linger_ms); },
       [](const FeedConfig& c) { return absl::StrCat(c.end_linger_ms); }},
      {"rcvbuf",
       "moldudp64: receive buffer of each line's socket, bytes (what absorbs a burst while the handler is busy)",
       [](FeedConfig& c, const toml::node& n) { return WantInt(n, 65536, 1 << 30, &c.rcvbuf); },
       [](const FeedConfig& c) { return absl::StrCat(c.rcvbuf); }},
      {"capture",
       "moldudp64: write every datagram read on line A, line B and from the re-request server to this pcap file "
       "(nanosecond, Ethernet/IPv4/UDP, the kernel's receive time); \"\" = no capture",
       [](FeedConfig& c, const toml::node& n) { return WantPath(n, &c.capture); },
       [](const FeedConfig& c) { return TomlString(c.capture); }},
      {"capture_rotate",
       "moldudp64: start the next capture file (PATH.1, PATH.2, ...) before one would pass this size, bytes or "
       "\"64MiB\" (at least 64KiB); 0 = one file",
       [](FeedConfig& c, const toml::node& n) {
         std::uint64_t v = 0;
         if (std::string e = WantSize(n, 0, std::uint64_t{1} << 40, &v); !e.empty()) return e;
         if (v != 0 && v < (std::uint64_t{64} << 10)) {
           return absl::StrFormat(
               "%d bytes would make a file of almost every datagram: 0 (one file) or at least 65536 (\"64KiB\")", v);
         }
         c.capture_rotate = v;
         return std::string();
       },
       [](const FeedConfig& c) { return absl::StrCat(c.capture_rotate); }},
      {"capture_buffer",
       "moldudp64: bytes of the ring between the handler and the capture's writer thread (allocated at start); a "
       "record that finds it full is dropped and counted (capture_dropped), never the feed",
       [](FeedConfig& c, const toml::node& n) {
         return WantSize(n, std::uint64_t{1} << 20, std::uint64_t{4} << 30, &c.capture_buffer);
       },
       [](const FeedConfig& c) { return absl::StrCat(c.capture_buffer); }},
      {"pcap",
       "pcap: the capture to replay (pcap or pcapng; a rotated set is read on as PATH.1, PATH.2, ...); its datagrams "
       "to the ports of feed.line_a/line_b are lines A/B, those from the port of feed.rerequest replies",
       [](FeedConfig& c, const toml::node& n) { return WantPath(n, &c.pcap); },
       [](const FeedConfig& c) { return TomlString(c.pcap); }},
      {"pcap_truncated",
       "pcap: a capture that ends inside a record (its writer was killed mid-write): error (refuse it, naming the "
       "record) or stop (replay every whole record before it, and say so in the summary)",
       [](FeedConfig& c, const toml::node& n) {
         return WantEnum<bool>(n, {{"error", false}, {"stop", true}}, &c.pcap_truncated_stop);
       },
       [](const FeedConfig& c) { return Quote(c.pcap_truncated_stop ? "stop" : "error"); }},
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
  if (c.source == SourceKind::kPcap) {
    if (c.pcap.empty())
      return Error(at("feed.source"), "feed.pcap", "missing: source = \"pcap\" needs feed.pcap (the capture)");
    if (c.replay == ReplayMode::kRate) {
      return Error(at("feed.replay"), "feed.replay",
                   "rate does not apply to a capture: its packets carry their own times (original, speed or max)");
    }
  }
  if (!c.capture.empty() && c.source != SourceKind::kMoldUdp64) {
    return Error(at("feed.capture"), "feed.capture",
                 absl::StrFormat("only live mode captures (feed.source = \"moldudp64\"), not source = \"%s\"",
                                 SourceName(c.source)));
  }
  if (c.source == SourceKind::kMoldUdp64 || c.source == SourceKind::kPcap) {
    for (const auto& [key, value] :
         {std::pair<const char*, const std::string*>{"feed.line_a", &c.line_a}, {"feed.line_b", &c.line_b}}) {
      if (value->empty()) {
        return Error(
            at("feed.source"), key,
            absl::StrFormat("missing: source = \"%s\" needs both feed.line_a and feed.line_b%s", SourceName(c.source),
                            c.source == SourceKind::kPcap ? " (their ports tell the capture's lines apart)" : ""));
      }
    }
    if (c.line_a == c.line_b) {
      return Error(at("feed.line_b"), "feed.line_b",
                   absl::StrFormat("\"%s\" is line A too: the lines must differ", c.line_b));
    }
    if (c.rerequest_timeout_max_ms < c.rerequest_timeout_ms) {
      return Error(at("feed.rerequest_timeout_max_ms"), "feed.rerequest_timeout_max_ms",
                   absl::StrFormat("%d is below feed.rerequest_timeout_ms (%d)", c.rerequest_timeout_max_ms,
                                   c.rerequest_timeout_ms));
    }
  }
  // An expected sender without its line is a mistake in the other key (or a line left out).
  for (const auto& [key, sender, line_key, line] :
       {std::tuple<const char*, const std::string*, const char*, const std::string*>{"feed.source_a", &c.source_a,
                                                                                     "feed.line_a", &c.line_a},
        {"feed.source_b", &c.source_b, "feed.line_b", &c.line_b}}) {
    if (!sender->empty() && line->empty()) {
      return Error(
          at(key), key,
          absl::StrFormat("\"%s\" is set but %s is not: the expected sender belongs to a line", *sender, line_key));
    }
  }
  if (c.book_threads > c.streams) {
    return Error(at("feed.book_threads"), "feed.book_threads",
                 absl::StrFormat("%d threads for %d streams: a thread owns whole streams, so at most feed.streams (%d)",
                                 c.book_threads, c.streams, c.streams));
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
  absl::StatusOr<std::string> text = core::read_config_file(path);
  if (!text.ok()) return text.status();
  return LoadConfig(*text, path, overrides);
}

}  // namespace pollux::feed
