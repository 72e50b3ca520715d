// pollux-feed configuration: one TOML file holds Pollux's own tables and a [feed] table.
//
// [feed] is an application table of Pollux's configuration machinery (pollux/config.h): every
// key declared once with its type, bounds, default and help, checked and worded as Pollux's own
// tables (file:line: feed.key: message, did-you-mean for unknown keys, sizes like "64MiB"), and
// Pollux gets the rest of the text with the [feed] lines blanked, so its own errors keep their
// line numbers. Command-line overrides (--set key=value) go through the same checks; the checks
// across keys are here.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "pollux/config.h"

namespace pollux::feed {

enum class SourceKind { kGenerator, kFile, kMoldUdp64, kPcap };
enum class ReplayMode { kOriginal, kSpeed, kRate, kMax };
enum class SubscriberMode { kProcess, kThread };
enum class Datapath { kSocket, kXdp };

std::string_view source_name(SourceKind s);
std::string_view replay_name(ReplayMode r);

struct FeedConfig {
  SourceKind source = SourceKind::kGenerator;
  std::string file;             // BinaryFILE to replay when source = "file"
  std::uint32_t symbols = 100;  // generator
  std::uint64_t messages = 5'000'000;
  std::uint64_t seed = 1;
  std::uint32_t orders_per_symbol = 64;
  ReplayMode replay = ReplayMode::kMax;
  double speed = 1.0;                // replay = "speed"
  std::uint64_t rate = 1'000'000;    // replay = "rate", messages per second
  std::uint32_t max_gap_ms = 100;    // original/speed: longest pause between two messages
  std::uint32_t streams = 4;         // partitions by stock locate
  std::string topic = "itch";        // topics are "<topic>.<partition>"
  std::uint32_t batch_bytes = 8000;  // 0: one bare ITCH message per Pollux message
  std::uint32_t subscribers = 1;
  std::uint32_t book_threads = 1;            // threads per subscriber, each owning streams p % book_threads
  std::uint64_t expected_orders = 1u << 20;  // live orders a subscriber's map holds before growing
  SubscriberMode subscriber_mode = SubscriberMode::kProcess;
  std::uint32_t progress_ms = 1000;  // 0: no progress lines
  std::uint32_t top = 20;            // top-of-book lines in the summary
  std::uint32_t connect_timeout_ms = 10'000;

  // source = "moldudp64" (live mode, docs/FEED.md "Live mode").
  std::string line_a, line_b;       // multicast ADDR:PORT of lines A and B
  std::string source_a, source_b;   // expected IPv4 sender of each line ("" = any sender)
  std::string interface;            // joined on this interface ("" = the route's)
  std::string rerequest;            // re-request server HOST:PORT ("" = none: gaps are reported)
  std::string session;              // session to follow ("" = the first seen, then its successors)
  std::uint32_t window = 1u << 18;  // messages buffered behind a gap (a power of two)
  std::uint32_t rerequest_wait_us = 1000;
  std::uint32_t rerequest_timeout_ms = 20;
  std::uint32_t rerequest_timeout_max_ms = 500;
  std::uint32_t rerequest_retries = 3;
  std::uint32_t rerequest_max_outstanding = 8;
  std::uint32_t heartbeat_ms = 1000;
  std::uint32_t stale_heartbeats = 3;
  std::uint32_t end_linger_ms = 100;
  std::uint32_t rcvbuf = 16u << 20;          // SO_RCVBUF of each line's socket, bytes
  Datapath datapath = Datapath::kSocket;     // how lines A and B are read: kernel sockets or AF_XDP
  std::string xdp_mode = "auto";             // datapath = "xdp": "auto", "copy", "zerocopy", "generic"
  std::string capture;                       // live: pcap file of every datagram read ("" = none)
  std::uint64_t capture_rotate = 0;          // live: a new capture file past this many bytes (0 = one file)
  std::uint64_t capture_buffer = 64u << 20;  // live: the ring between the handler and the capture's writer

  // source = "pcap": a capture (one file, or PATH, PATH.1, ... as feed.capture_rotate writes
  // them) replayed through the same arbiter, classified by the live keys' ports.
  std::string pcap;
  bool pcap_truncated_stop = false;  // a capture cut inside its last record: replay up to it (else an error)

  // Where each key was set ("file:line"), for errors found after parsing.
  std::map<std::string, std::string> where;

  // Topic of partition `i` (0 <= i < streams).
  std::string partition_topic(std::uint32_t i) const;
  // The [feed] table as TOML, every key with its help text.
  std::string to_toml() const;
};

struct LoadedConfig {
  FeedConfig feed;
  std::string pollux_toml;    // for pollux::Context::from_string
  std::string pollux_source;  // its source name (errors start with it)
  ContextInfo pollux;         // what Pollux will make of pollux_toml (threading, idle, ...)
};

// "ADDR:PORT" (IPv4 literal, port 1..65535; a multicast group when `multicast`) or
// "HOST:PORT" (any host name): "" when it parses, else what is wrong with it.
std::string check_endpoint(std::string_view s, bool multicast, bool host_name);

// An expected sender (feed.source_a/source_b): "" when `s` is empty or an IPv4 unicast
// address, else what is wrong with it.
std::string check_sender(std::string_view s);

// `s` as a TOML basic string (quoted, escaped), for building overrides such as --itch.
std::string toml_string(std::string_view s);

// Splits and validates `text` (source name `source` in errors), then applies `overrides`
// ("section.key=value", value in TOML syntax or a bare word taken as a string). Pollux's
// part is checked by Pollux's own parser here too, so every configuration error surfaces
// before anything starts.
absl::StatusOr<LoadedConfig> load_config(std::string_view text, std::string_view source,
                                         const std::vector<std::string>& overrides = {});
absl::StatusOr<LoadedConfig> load_config_file(const std::string& path, const std::vector<std::string>& overrides = {});

// The built-in default (examples/feed_handler/config/feed.toml) and its source name.
std::string_view embedded_config();
inline constexpr std::string_view kEmbeddedConfigName = "<embedded feed.toml>";

}  // namespace pollux::feed
