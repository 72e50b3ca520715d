// The metrics endpoint (docs/OBSERVABILITY.md): the counters files of Pollux processes rendered
// as Prometheus text / OpenMetrics and as JSON for the live page, served over HTTP by a thread
// of its own. It reads copies of the counters files only (core::read_counters_file): it never
// touches a poller, a ring or a transport, so a slow scrape cannot slow the data path.
// Used by a context with [metrics] listen (its own process) and by `pollux-stat --serve` (every
// process of a shm directory).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/counters.h"

namespace pollux::detail::metrics {

enum class Format { kPrometheus, kOpenMetrics };

// Content-Type of each format.
std::string_view content_type(Format f) noexcept;
// The format an Accept header asks for: OpenMetrics when it names application/openmetrics-text,
// else the Prometheus text format (0.0.4).
Format negotiate(std::string_view accept) noexcept;

// Every counter of every live process in `procs` (files of dead processes are left out: their
// values stopped), as families named pollux_*; counters end in _total, times are in seconds.
// Series with equal labels (two handles of one topic in a process) are summed (counters) or
// maxed (gauges), so every series appears once.
std::string render(const std::vector<core::CountersFileSnapshot>& procs, Format f);
// Message rates from the snapshots an endpoint took: per stream handle group, its (time, messages)
// of the last kWindowNs, so a rate is known from the first request of a client that arrives
// while others (or earlier requests) sampled. One thread uses it (the server's).
class RateHistory {
 public:
  static constexpr std::int64_t kWindowNs = 10'000'000'000;
  // Records (t_ns, messages) for `key` and returns messages per second over the window (the two
  // latest samples at least); 0 until two samples apart in time.
  double rate(const std::string& key, std::int64_t t_ns, std::uint64_t messages);
  // Forgets the keys no sample was recorded for since the last call.
  void end_round();

 private:
  struct Sample {
    std::int64_t t_ns;
    std::uint64_t messages;
  };
  struct Series {
    std::vector<Sample> samples;  // oldest first
    bool seen = false;
  };
  std::map<std::string, Series, std::less<>> series_;
};

// The live page's data: per process its streams (counters, NAKs and, with `rates`, "rate": the
// messages per second over the last 10 s of snapshots), pollers (controller state, time per
// mode) and histograms (percentiles), with the snapshot's wall-clock time.
std::string render_json(const std::vector<core::CountersFileSnapshot>& procs, RateHistory* rates = nullptr);
// The live page (one self-contained HTML document: no external script, style or font).
std::string_view page_html() noexcept;

struct ServerOptions {
  std::string listen;  // "HOST:PORT" (core::parse_listen_address); port 0: a free port
  std::uint32_t max_connections = 16;
  std::uint32_t timeout_ms = 5000;
};

// One HTTP/1.1 server on a thread of its own (Boost.Beast over one Asio io_context: every
// connection is asynchronous, so a slow or stalled client holds nothing but its own socket until
// its timeout). GET/HEAD /metrics, / and /api/snapshot; 404 for any other path, 405 for other
// methods; request headers are limited to 8 KiB and a request body is refused; connections past
// max_connections the oldest connection is closed to make room (a client holding connections
// open without finishing requests loses them to newer ones).
class Server {
 public:
  using Collect = std::function<std::vector<core::CountersFileSnapshot>()>;
  // Binds and starts serving; InvalidArgument for a bad address, Unavailable when the bind fails.
  static absl::StatusOr<std::unique_ptr<Server>> start(const ServerOptions& options, Collect collect);
  ~Server();  // stops accepting, closes every connection, joins the thread
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // "http://127.0.0.1:9464/" (the bound port when 0 was asked for).
  const std::string& url() const noexcept;
  std::uint16_t port() const noexcept;

  struct Impl;

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace pollux::detail::metrics
