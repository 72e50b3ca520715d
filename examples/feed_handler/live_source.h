// The live source of pollux-feed (feed.source = "moldudp64"): joins an exchange's MoldUDP64
// lines A and B, reads them and the re-request socket with recvmmsg into buffers allocated
// once, hands every datagram to the Arbiter (arbiter.h: arbitration, gaps, re-requests,
// sessions, staleness) and gives the publisher what comes out, window by window.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "feed_handler/feed_config.h"
#include "feed_handler/source.h"

namespace pollux::feed {

// Opens the sockets (joins both groups on feed.interface, resolves feed.rerequest). Errors
// name the key: "feed.line_a: join 239.1.1.1 on eth0: No such device".
absl::StatusOr<std::unique_ptr<Source>> OpenLiveSource(const FeedConfig& cfg);

}  // namespace pollux::feed
