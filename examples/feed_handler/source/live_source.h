// The sources of pollux-feed that go through the Arbiter (arbiter.h: arbitration, gaps,
// re-requests, sessions, staleness): the live one (feed.source = "moldudp64"), which joins
// an exchange's MoldUDP64 lines A and B and reads them with recvmmsg (feed.datapath =
// "socket") or through an AF_XDP socket (pollux::DatagramReceiver, feed.datapath = "xdp"), and
// the re-request socket with recvmmsg, and the replay of a packet capture (feed.source = "pcap", pcap_source.h), which
// hands the arbiter the same datagrams from a file. Both give the publisher what comes out,
// window by window.
#pragma once

#include <netinet/in.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "feed_handler/arbiter/arbiter.h"
#include "feed_handler/config/feed_config.h"
#include "feed_handler/source/source.h"

namespace pollux::feed {

// "HOST:PORT" of a [feed] key (an IPv4 literal, or a name resolved with getaddrinfo); errors
// name `key`.
absl::StatusOr<sockaddr_in> parse_endpoint(const std::string& key, const std::string& s);

// The arbiter's settings from [feed]; `output_bytes` is what a polling round may deliver.
ArbiterOptions live_arbiter_options(const FeedConfig& c, std::size_t output_bytes);

// What the two arbitrated sources share: the arbiter, its output handed out as windows and
// notices, and its counters (plus the source's own, extra_names()/extra_values()) in the
// Pollux counters file (scope "feed live") and the summary.
class ArbiterSource : public Source {
 public:
  ArbiterSource(const FeedConfig& cfg, std::size_t output_bytes);

  std::span<const std::uint8_t> window() const noexcept override { return window_; }
  std::uint64_t window_offset() const noexcept override { return offset_; }
  bool last_window() const noexcept override { return last_; }
  bool live() const noexcept override { return true; }
  const Notice* notice() const noexcept override { return notice_; }
  std::int64_t window_rx_ns() const noexcept override { return rx_ns_; }
  void attach_counters(Context& ctx) override;
  std::vector<std::pair<std::string, std::uint64_t>> live_counters() const override;

 protected:
  static constexpr std::size_t kMaxExtra = 10;
  // The source's own counters, after the arbiter's (names live as long as the program).
  virtual std::span<const char* const> extra_names() const noexcept { return {}; }
  virtual void extra_values(std::uint64_t* /*out: extra_names().size()*/) const noexcept {}

  // Starts advance(): the previous window is consumed.
  void begin_advance(std::size_t consumed) noexcept {
    offset_ += consumed;
    window_ = {};
    notice_ = nullptr;
  }
  // The next piece of output as the window (true), or false with the output buffer reset.
  // `rx_ns` overrides the piece's receive time when not 0.
  bool take_piece(std::int64_t rx_ns = 0) noexcept;
  // The last window: nothing more comes.
  void finish() noexcept {
    publish_counters();
    last_ = true;
  }
  void publish_counters() noexcept;

  FeedConfig cfg_;
  Arbiter arb_;

 private:
  std::array<AppCounter, kLiveCounterCount> cells_{};
  std::array<AppCounter, kMaxExtra> extra_cells_{};
  bool attached_ = false;
  std::span<const std::uint8_t> window_;
  const Notice* notice_ = nullptr;
  std::int64_t rx_ns_ = 0;
  std::uint64_t offset_ = 0;
  bool last_ = false;
};

// Makes an S (an ArbiterSource) for `cfg` and opens it (S::open()), timing it for the summary.
template <class S>
absl::StatusOr<std::unique_ptr<Source>> open_timed(const FeedConfig& cfg) {
  const auto t0 = std::chrono::steady_clock::now();
  auto src = std::make_unique<S>(cfg);
  if (absl::Status s = src->open(); !s.ok()) return s;
  src->prepare_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return std::unique_ptr<Source>(std::move(src));
}

// Opens the sockets (joins both groups on feed.interface, resolves feed.rerequest) and, with
// feed.capture, starts the capture. Errors name the key: "feed.line_a: join 239.1.1.1 on
// eth0: No such device".
absl::StatusOr<std::unique_ptr<Source>> open_live_source(const FeedConfig& cfg);

}  // namespace pollux::feed
