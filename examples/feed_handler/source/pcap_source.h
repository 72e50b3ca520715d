// The replay of a packet capture (feed.source = "pcap"): the datagrams of lines A and B and
// the re-request server's replies, read from a pcap or pcapng file (libpcap: pollux-feed's
// own captures, tcpdump's, Wireshark's), go through the same arbiter and on to the same
// publisher and books as in live mode, so a live day is reproduced from its capture.
//
// - Which datagrams: what the live handler's sockets would have been given. Those sent to the
//   group and port of feed.line_a / feed.line_b are lines A / B (another group on a line's port
//   is another feed); those from feed.rerequest's port (and address, when it is an IPv4
//   literal) are replies; with feed.source_a/source_b set, a line datagram from another
//   sender is dropped and counted (wrong_source) as live. Everything else (the handler's own
//   requests, ARP, other traffic) is skipped and counted.
// - Time: the arbiter runs on the capture's clock. Each packet is handed over at its
//   timestamp (never moving backwards: a file in reading order, such as the handler's own,
//   may step back between lines) and between packets the clock advances in polling rounds of
//   1 ms, each reading every line "empty" and running the arbiter's timers - what the live
//   handler did at least every millisecond. So re-request waits, timeouts, staleness and the
//   end of session behave as they did live, whatever the replay's pace.
// - Pace: feed.replay = max (as fast as the subscribers take it), original (the capture's own
//   times) or speed (those divided by feed.speed); a pause longer than feed.max_gap_ms is cut
//   to it, as for a BinaryFILE.
// - The whole capture is read once before anything is published: a file that cannot be
//   opened, a foreign link type or a truncated record is an error naming the file and the
//   record number (exit 2, nothing started). A packet cut by the capture's snaplen is counted
//   (pcap_cut) and not parsed; the summary names the first one.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "feed_handler/config/feed_config.h"
#include "feed_handler/source/source.h"

namespace pollux::feed {

absl::StatusOr<std::unique_ptr<Source>> open_pcap_source(const FeedConfig& cfg);

}  // namespace pollux::feed
