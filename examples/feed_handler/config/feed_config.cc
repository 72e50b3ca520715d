#include "feed_handler/config/feed_config.h"

#include <cstdint>
#include <functional>
#include <tuple>

#include <arpa/inet.h>
#include <netinet/in.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "feed_handler/config/embedded_config.h"
#include "itch/generator.h"
#include "pollux/config.h"

namespace pollux::feed {

namespace {

// The names of feed.source and feed.replay, for their keys and for source_name() / replay_name().
constexpr ConfigChoice<SourceKind> kSourceNames[] = {{"generator", SourceKind::kGenerator},
                                                     {"file", SourceKind::kFile},
                                                     {"moldudp64", SourceKind::kMoldUdp64},
                                                     {"pcap", SourceKind::kPcap}};
constexpr ConfigChoice<ReplayMode> kReplayNames[] = {{"original", ReplayMode::kOriginal},
                                                     {"speed", ReplayMode::kSpeed},
                                                     {"rate", ReplayMode::kRate},
                                                     {"max", ReplayMode::kMax}};

}  // namespace

std::string_view source_name(SourceKind s) { return choice_name(kSourceNames, s); }
std::string_view replay_name(ReplayMode r) { return choice_name(kReplayNames, r); }

std::string check_endpoint(std::string_view s, bool multicast, bool host_name) {
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

std::string check_sender(std::string_view s) {
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

std::string_view embedded_config() { return kEmbeddedFeedToml; }

std::string toml_string(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out.push_back('\\');
    out.push_back(ch);
  }
  out.push_back('"');
  return out;
}

std::string FeedConfig::partition_topic(std::uint32_t i) const { return absl::StrCat(topic, ".", i); }

namespace {

absl::Status key_error(std::string_view where, std::string_view key, std::string_view msg) {
  return absl::InvalidArgumentError(absl::StrFormat("%s: %s: %s", where, key, msg));
}

// An endpoint key: "" (unset; source = "moldudp64" checks that the lines are set) or a valid one.
std::function<std::string(const std::string&)> endpoint_check(bool multicast, bool host_name) {
  return
      [multicast, host_name](const std::string& v) { return v.empty() ? "" : check_endpoint(v, multicast, host_name); };
}

// The [feed] table: every key once, with its type, bounds, help and (in FeedConfig) default.
const ConfigTable<FeedConfig>& config_table() {
  static const ConfigTable<FeedConfig>* const table = [] {
    auto* t = new ConfigTable<FeedConfig>("feed");
    using C = FeedConfig;
    (*t).choice("source", &C::source, kSourceNames,
                "what to publish: generator (synthetic, seeded), file (a BinaryFILE; --itch FILE selects it), "
                "moldudp64 (live: an exchange's lines A and B, feed.line_a/line_b) or pcap (a capture of them, "
                "feed.pcap, replayed through the same arbiter)")
        .text("file", &C::file, "a path", "ITCH 5.0 BinaryFILE to replay when source = \"file\"")
        .integer("symbols", &C::symbols, 1, 65535, "generator: number of symbols (stock locates 1..symbols)")
        .integer("messages", &C::messages, 8, std::int64_t{1} << 40,
                 "generator: messages in total, system and directory messages included")
        .integer("seed", &C::seed, 0, INT64_MAX, "generator: seed (same seed and options, same bytes)")
        .integer("orders_per_symbol", &C::orders_per_symbol, 1, 1 << 20,
                 "generator: live orders per symbol the order flow hovers around")
        .choice("replay", &C::replay, kReplayNames,
                "pacing: original (the messages' own timestamps), speed (timestamps / speed), rate (fixed "
                "messages/s), max (as fast as possible)")
        .number("speed", &C::speed, 1e-6, 1e12,
                "replay = \"speed\": multiple of the original pace (2.0 = twice as fast)")
        .integer("rate", &C::rate, 1, 1'000'000'000,
                 "replay = \"rate\": messages per second, evenly spaced (open loop)")
        .integer("max_gap_ms", &C::max_gap_ms, 0, 3'600'000,
                 "original/speed: longer pauses between consecutive messages (after scaling) are cut to this")
        .integer("streams", &C::streams, 1, 256,
                 "partitions: message with stock locate L goes to stream L % streams, each its own topic and sequence")
        .text("topic", &C::topic, "a string", "topic prefix: partition i is published on \"<topic>.<i>\"",
              [](const std::string& v) {
                return v.empty() || v.size() > 64 ? absl::StrFormat("expected 1-64 characters, got \"%s\"", v)
                                                  : std::string();
              })
        .integer("batch_bytes", &C::batch_bytes, 0, 16 << 20,
                 "most payload bytes per Pollux message, filled with length-prefixed ITCH messages; 0 = one bare ITCH "
                 "message per Pollux message",
                 [](std::int64_t v) {
                   return v != 0 && v < 64 ? absl::StrCat("expected 0 or 64..16777216, got ", v) : std::string();
                 })
        .integer("subscribers", &C::subscribers, 1, 32,
                 "subscribers started by --role all, each rebuilding every book from every stream")
        .integer("book_threads", &C::book_threads, 1, 64,
                 "threads per subscriber building books: thread t polls the streams p with p % book_threads == t into "
                 "books of its own, merged at the end (at most feed.streams)")
        .integer("expected_orders", &C::expected_orders, 1, std::int64_t{1} << 28,
                 "live orders a subscriber's order map holds before it first grows (rehashes mid-feed); allocated and "
                 "touched at start, 48 bytes each (at least twice the generator market, symbols x orders_per_symbol)")
        .choice("subscriber_mode", &C::subscriber_mode,
                {{"process", SubscriberMode::kProcess}, {"thread", SubscriberMode::kThread}},
                "process: each subscriber is its own process (this binary, --role sub); thread: threads of the "
                "publishing process")
        .integer("progress_ms", &C::progress_ms, 0, 3'600'000, "interval of the progress lines on stderr; 0 = none")
        .integer("top", &C::top, 0, 65535,
                 "symbols listed in the summary's top-of-book table (in stock locate order; --book-out has all)")
        .integer("connect_timeout_ms", &C::connect_timeout_ms, 10, 3'600'000,
                 "how long publisher and subscribers wait for each other before giving up")
        .text("line_a", &C::line_a, "\"ADDR:PORT\"", "moldudp64: line A, the multicast group ADDR:PORT to join",
              endpoint_check(true, false))
        .text("line_b", &C::line_b, "\"ADDR:PORT\"",
              "moldudp64: line B, the multicast group ADDR:PORT to join (the same stream as A)",
              endpoint_check(true, false))
        .text("source_a", &C::source_a, "an IPv4 address (the exchange's sender)",
              "moldudp64: the IPv4 address line A's datagrams must come from (\"\" = any sender); joined "
              "source-specific where the kernel can, and every datagram from another address is dropped and counted "
              "(wrong_source)",
              check_sender)
        .text("source_b", &C::source_b, "an IPv4 address (the exchange's sender)",
              "moldudp64: the IPv4 address line B's datagrams must come from (\"\" = any sender), as feed.source_a",
              check_sender)
        .text("interface", &C::interface, "an interface name",
              "moldudp64: network interface both lines are joined on (\"\" = the one the route picks)",
              [](const std::string& v) {
                return v.size() >= 16
                           ? absl::StrFormat("expected an interface name (at most 15 characters), got \"%s\"", v)
                           : std::string();
              })
        .text("rerequest", &C::rerequest, "\"HOST:PORT\"",
              "moldudp64: re-request server HOST:PORT; \"\" = none (a gap missing on both lines is reported at once)",
              endpoint_check(false, true))
        .text("session", &C::session, "0-10 characters",
              "moldudp64: the session to follow (1-10 characters); \"\" = the first one seen, then each that follows "
              "it on both lines (docs/FEED.md: what the handler corroborates)",
              [](const std::string& v) {
                return v.size() > 10 ? absl::StrFormat("expected 0-10 characters, got \"%s\"", v) : std::string();
              })
        .integer("window", &C::window, 1024, 1 << 24,
                 "moldudp64: messages buffered behind a gap while it is recovered (a power of two, 64 bytes each); a "
                 "longer gap is reported at once",
                 [](std::int64_t v) {
                   return (v & (v - 1)) != 0 ? absl::StrCat("expected a power of two, got ", v) : std::string();
                 })
        .integer("rerequest_wait_us", &C::rerequest_wait_us, 0, 10'000'000,
                 "moldudp64: a gap one line has not reached yet is re-requested after this wait (at once when both "
                 "lines went past it)")
        .integer("rerequest_timeout_ms", &C::rerequest_timeout_ms, 1, 60'000,
                 "moldudp64: a re-request that brought nothing this long is sent again; doubled at each consecutive "
                 "retry")
        .integer("rerequest_timeout_max_ms", &C::rerequest_timeout_max_ms, 1, 600'000,
                 "moldudp64: the doubled timeout stops growing here")
        .integer("rerequest_retries", &C::rerequest_retries, 0, 100,
                 "moldudp64: consecutive re-requests that bring nothing, after the first, before the range is reported "
                 "lost (a reply that brings anything resets the count; the rest of a partly answered range is asked "
                 "for at once)")
        .integer("rerequest_max_outstanding", &C::rerequest_max_outstanding, 1, 1024,
                 "moldudp64: re-requests in flight at once (the others wait)")
        .integer("heartbeat_ms", &C::heartbeat_ms, 1, 3'600'000, "moldudp64: the exchange's heartbeat interval")
        .integer("stale_heartbeats", &C::stale_heartbeats, 1, 1000,
                 "moldudp64: the feed is stale after this many heartbeat intervals without a packet on either line")
        .integer("end_linger_ms", &C::end_linger_ms, 0, 3'600'000,
                 "moldudp64: after the end of session (every gap filled or reported), wait this long for a next "
                 "session before ending")
        .integer("rcvbuf", &C::rcvbuf, 65536, 1 << 30,
                 "moldudp64: receive buffer of each line's socket, bytes (what absorbs a burst while the handler is "
                 "busy)")
        .choice("datapath", &C::datapath, {{"socket", Datapath::kSocket}, {"xdp", Datapath::kXdp}},
                "moldudp64: how lines A and B are read: socket (kernel sockets, recvmmsg) or xdp (an AF_XDP socket "
                "on feed.interface, Pollux's XDP program taking the lines' frames before the kernel's stack; needs "
                "CAP_NET_ADMIN, CAP_BPF, CAP_NET_RAW and locked memory, docs/FEED.md); re-requests use a kernel "
                "socket either way")
        .text("xdp_mode", &C::xdp_mode, "\"auto\", \"copy\", \"zerocopy\" or \"generic\"",
              "moldudp64 with datapath = \"xdp\": auto (native XDP and zero-copy where the driver can, else the "
              "fallbacks), copy, zerocopy (an error where the driver cannot) or generic (skb mode, any interface)",
              [](const std::string& v) {
                return v == "auto" || v == "copy" || v == "zerocopy" || v == "generic"
                           ? std::string()
                           : absl::StrFormat("expected \"auto\", \"copy\", \"zerocopy\" or \"generic\", got \"%s\"", v);
              })
        .text("capture", &C::capture, "a path",
              "moldudp64: write every datagram read on line A, line B and from the re-request server to this pcap "
              "file (nanosecond, Ethernet/IPv4/UDP, the kernel's receive time); \"\" = no capture")
        .size("capture_rotate", &C::capture_rotate, 0, std::uint64_t{1} << 40,
              "moldudp64: start the next capture file (PATH.1, PATH.2, ...) before one would pass this size, bytes or "
              "\"64MiB\" (at least 64KiB); 0 = one file",
              [](std::uint64_t v) {
                return v != 0 && v < (std::uint64_t{64} << 10)
                           ? absl::StrFormat(
                                 "%d bytes would make a file of almost every datagram: 0 (one file) or at "
                                 "least 65536 (\"64KiB\")",
                                 v)
                           : std::string();
              })
        .size("capture_buffer", &C::capture_buffer, std::uint64_t{1} << 20, std::uint64_t{4} << 30,
              "moldudp64: bytes of the ring between the handler and the capture's writer thread (allocated at "
              "start); a record that finds it full is dropped and counted (capture_dropped), never the feed")
        .text("pcap", &C::pcap, "a path",
              "pcap: the capture to replay (pcap or pcapng; a rotated set is read on as PATH.1, PATH.2, ...); its "
              "datagrams to the ports of feed.line_a/line_b are lines A/B, those from the port of feed.rerequest "
              "replies")
        .choice("pcap_truncated", &C::pcap_truncated_stop, {{"error", false}, {"stop", true}},
                "pcap: a capture that ends inside a record (its writer was killed mid-write): error (refuse it, "
                "naming the record) or stop (replay every whole record before it, and say so in the summary)");
    return t;
  }();
  return *table;
}

// Checks that involve several keys; errors point at the key most likely to be wrong.
absl::Status validate_feed(const FeedConfig& c, std::string_view source) {
  auto at = [&](const std::string& key) {
    auto it = c.where.find(key);
    return it == c.where.end() ? std::string(source) : it->second;
  };
  if (c.source == SourceKind::kFile && c.file.empty()) {
    return key_error(at("feed.source"), "feed.file", "missing: source = \"file\" needs feed.file (or --itch FILE)");
  }
  if (c.source == SourceKind::kPcap) {
    if (c.pcap.empty())
      return key_error(at("feed.source"), "feed.pcap", "missing: source = \"pcap\" needs feed.pcap (the capture)");
    if (c.replay == ReplayMode::kRate) {
      return key_error(at("feed.replay"), "feed.replay",
                       "rate does not apply to a capture: its packets carry their own times (original, speed or max)");
    }
  }
  if (!c.capture.empty() && c.source != SourceKind::kMoldUdp64) {
    return key_error(at("feed.capture"), "feed.capture",
                     absl::StrFormat("only live mode captures (feed.source = \"moldudp64\"), not source = \"%s\"",
                                     source_name(c.source)));
  }
  if (c.source == SourceKind::kMoldUdp64 || c.source == SourceKind::kPcap) {
    for (const auto& [key, value] :
         {std::pair<const char*, const std::string*>{"feed.line_a", &c.line_a}, {"feed.line_b", &c.line_b}}) {
      if (value->empty()) {
        return key_error(
            at("feed.source"), key,
            absl::StrFormat("missing: source = \"%s\" needs both feed.line_a and feed.line_b%s", source_name(c.source),
                            c.source == SourceKind::kPcap ? " (their ports tell the capture's lines apart)" : ""));
      }
    }
    if (c.line_a == c.line_b) {
      return key_error(at("feed.line_b"), "feed.line_b",
                       absl::StrFormat("\"%s\" is line A too: the lines must differ", c.line_b));
    }
    if (c.rerequest_timeout_max_ms < c.rerequest_timeout_ms) {
      return key_error(at("feed.rerequest_timeout_max_ms"), "feed.rerequest_timeout_max_ms",
                       absl::StrFormat("%d is below feed.rerequest_timeout_ms (%d)", c.rerequest_timeout_max_ms,
                                       c.rerequest_timeout_ms));
    }
  }
  if (c.datapath == Datapath::kXdp) {
    if (c.source != SourceKind::kMoldUdp64) {
      return key_error(at("feed.datapath"), "feed.datapath",
                       absl::StrFormat("xdp reads live lines only (feed.source = \"moldudp64\"), not source = \"%s\"",
                                       source_name(c.source)));
    }
    if (c.interface.empty()) {
      return key_error(at("feed.datapath"), "feed.interface",
                       "missing: datapath = \"xdp\" needs the interface by name (the AF_XDP socket binds one)");
    }
  }
  // An expected sender without its line is a mistake in the other key (or a line left out).
  for (const auto& [key, sender, line_key, line] :
       {std::tuple<const char*, const std::string*, const char*, const std::string*>{"feed.source_a", &c.source_a,
                                                                                     "feed.line_a", &c.line_a},
        {"feed.source_b", &c.source_b, "feed.line_b", &c.line_b}}) {
    if (!sender->empty() && line->empty()) {
      return key_error(
          at(key), key,
          absl::StrFormat("\"%s\" is set but %s is not: the expected sender belongs to a line", *sender, line_key));
    }
  }
  if (c.book_threads > c.streams) {
    return key_error(
        at("feed.book_threads"), "feed.book_threads",
        absl::StrFormat("%d threads for %d streams: a thread owns whole streams, so at most feed.streams (%d)",
                        c.book_threads, c.streams, c.streams));
  }
  if (c.source == SourceKind::kGenerator && c.messages < itch::min_messages(c.symbols)) {
    return key_error(at("feed.messages"), "feed.messages",
                     absl::StrFormat("%d is too few for %d symbols: the generator needs at least %d (6 system events, "
                                     "R and H per symbol)",
                                     c.messages, c.symbols, itch::min_messages(c.symbols)));
  }
  return absl::OkStatus();
}

}  // namespace

std::string FeedConfig::to_toml() const { return config_table().to_toml(*this); }

absl::StatusOr<LoadedConfig> load_config(std::string_view text, std::string_view source,
                                         const std::vector<std::string>& overrides) {
  LoadedConfig out;
  absl::StatusOr<AppConfigFile> file = config_table().load(text, source, overrides, &out.feed);
  if (!file.ok()) return file.status();
  out.feed.where = std::move(file->where);
  if (absl::Status s = validate_feed(out.feed, source); !s.ok()) return s;
  out.pollux_toml = std::move(file->pollux_toml);
  out.pollux_source = std::move(file->pollux_source);
  out.pollux = std::move(file->pollux);
  return out;
}

absl::StatusOr<LoadedConfig> load_config_file(const std::string& path, const std::vector<std::string>& overrides) {
  absl::StatusOr<std::string> text = read_config_file(path);
  if (!text.ok()) return text.status();
  return load_config(*text, path, overrides);
}

}  // namespace pollux::feed
