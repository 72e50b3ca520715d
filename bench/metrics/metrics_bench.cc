// pollux-bench-metrics: the metrics endpoint's answer time with many streams, over HTTP on
// loopback as Prometheus asks (keep-alive GETs of /metrics, in both formats, and the page's
// /api/snapshot), from a counters file holding --streams publications and as many
// subscriptions, each with its transport counters, and a poller - the file a process with that
// many streams publishes.
//
//   pollux-bench-metrics [--streams N] [--requests N] [--json FILE]   (--help describes every flag)
//
// Reported per path: answer time (request written -> last byte read) p50/p99/max, the body's
// bytes and series. The target: under 10 ms with 1,000 streams.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "api/metrics.h"
#include "bench/bench_util.h"
#include "core/clock.h"
#include "core/counters.h"
#include "core/poller_counters.h"
#include "core/stream_counters.h"

namespace {

using pollux::core::CounterKind;
namespace metrics = pollux::detail::metrics;

// One keep-alive GET; the whole answer (headers + Content-Length bytes) or "" on failure.
std::string get(int fd, const std::string& path, const std::string& accept) {
  const std::string req = absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: bench\r\n",
                                       accept.empty() ? "" : absl::StrCat("Accept: ", accept, "\r\n"), "\r\n");
  if (::write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) return "";
  std::string out;
  std::size_t want = std::string::npos;
  char buf[1 << 16];
  while (want == std::string::npos || out.size() < want) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return "";
    out.append(buf, static_cast<std::size_t>(n));
    if (want == std::string::npos) {
      const auto end = out.find("\r\n\r\n");
      const auto cl = out.find("Content-Length: ");
      if (end != std::string::npos && cl != std::string::npos && cl < end) {
        want = end + 4 + std::strtoull(out.c_str() + cl + 16, nullptr, 10);
      }
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t streams = 1000, requests = 200;
  std::string json_path;
  pollux::bench::Cli cli("pollux-bench-metrics",
                         "pollux-bench-metrics: how long the metrics endpoint takes to answer /metrics (Prometheus\n"
                         "text and OpenMetrics) and /api/snapshot over loopback HTTP, with N publications and N\n"
                         "subscriptions (each with its transport counters) in one process's counters file.");
  cli.count("--streams", &streams, "publications, and as many subscriptions", 1, 20000)
      .count("--requests", &requests, "GETs per path (keep-alive, one after the other)", 1, 100000)
      .text("--json", &json_path, "FILE", "also write JSON lines: one object per path (p50_ms, p99_ms, max_ms, bytes)")
      .parse(argc, argv);
  pollux::core::Clock::init();
  std::printf("machine: %s\n", pollux::bench::machine_description().c_str());
  pollux::bench::JsonLines json(cli.program(), argc, argv);

  std::string dir = "/tmp/pollux-bench-metrics.XXXXXX";
  if (::mkdtemp(dir.data()) == nullptr) {
    std::fprintf(stderr, "pollux-bench-metrics: cannot make a directory in /tmp: %s\n", std::strerror(errno));
    return 1;
  }
  int status = 0;
  {
    // Stream counters (8 per publication, 7 per subscription) and 5 shm counters per stream.
    const auto capacity = static_cast<std::uint32_t>(streams * 2 * 14 + 256);
    auto file = pollux::core::CountersFile::create(dir, "bench", capacity);
    if (!file.ok()) {
      std::fprintf(stderr, "pollux-bench-metrics: %s\n", std::string(file.status().message()).c_str());
      return 1;
    }
    pollux::core::CountersFile& f = **file;
    std::vector<pollux::core::StreamCounters> sets;
    for (std::uint32_t s = 1; s <= streams; ++s) {
      const std::string topic = absl::StrCat("md.equities.", s);
      sets.push_back(pollux::core::StreamCounters::publication(f, absl::StrCat("pub stream ", s, " ", topic), s));
      sets.push_back(
          pollux::core::StreamCounters::subscription(f, absl::StrCat("sub stream ", s, " ", topic), s, false));
      for (const char* n : {"segment_truncated", "attach_errors", "malformed_frames", "sleeps"}) {
        f.allocate(absl::StrCat("shm sub stream ", s), n, s).set(s);
      }
      sets[sets.size() - 1].messages.set(s * 1000);
      sets[sets.size() - 2].messages.set(s * 1000);
    }
    pollux::core::PollerCounters poller;
    const std::uint16_t owner = f.new_owner();
    poller.allocate([&](std::string_view n) { return f.allocate("poller 0", n, 0, CounterKind::kPoller, owner); });
    std::printf("counters file: %u counters for %llu publications and %llu subscriptions\n", f.allocated(),
                static_cast<unsigned long long>(streams), static_cast<unsigned long long>(streams));

    auto collect = [&dir] {
      std::vector<pollux::core::CountersFileSnapshot> procs;
      for (const std::string& p : pollux::core::list_counters_files(dir)) {
        if (auto s = pollux::core::read_counters_file(p); s.ok()) procs.push_back(std::move(*s));
      }
      return procs;
    };
    // The server's own work, without HTTP: reading the file, and rendering what was read.
    std::printf("%-20s %10s %10s %10s\n", "in process", "p50 ms", "p99 ms", "max ms");
    for (const char* what : {"read-file", "render-text"}) {
      std::vector<double> ms;
      const auto procs = collect();
      for (std::uint64_t i = 0; i < requests; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        if (what[0] == 'r' && what[2] == 'a') {
          if (collect().empty()) status = 1;
        } else if (metrics::render(procs, metrics::Format::kPrometheus).empty()) {
          status = 1;
        }
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
      std::sort(ms.begin(), ms.end());
      const double p50 = ms[ms.size() / 2], p99 = ms[std::min(ms.size() - 1, ms.size() * 99 / 100)];
      std::printf("%-20s %10.3f %10.3f %10.3f\n", what, p50, p99, ms.back());
      json.add(pollux::bench::JsonObject()
                   .str("case", what)
                   .num("streams", streams)
                   .num("p50_ms", p50)
                   .num("p99_ms", p99)
                   .num("max_ms", ms.back()));
    }
    auto server = metrics::Server::start({"127.0.0.1:0", 4, 5000}, collect);
    if (!server.ok()) {
      std::fprintf(stderr, "pollux-bench-metrics: %s\n", std::string(server.status().message()).c_str());
      return 1;
    }
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons((*server)->port());
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      std::fprintf(stderr, "pollux-bench-metrics: connect: %s\n", std::strerror(errno));
      return 1;
    }
    struct Path {
      const char* name;
      const char* path;
      const char* accept;
    };
    const Path paths[] = {{"metrics-text", "/metrics", ""},
                          {"metrics-openmetrics", "/metrics", "application/openmetrics-text;version=1.0.0"},
                          {"snapshot-json", "/api/snapshot", ""}};
    std::printf("%-20s %10s %10s %10s %12s %8s\n", "path", "p50 ms", "p99 ms", "max ms", "bytes", "series");
    for (const Path& p : paths) {
      std::vector<double> ms;
      std::size_t bytes = 0, series = 0;
      for (std::uint64_t i = 0; i < requests + 5; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        const std::string r = get(fd, p.path, p.accept);
        const auto t1 = std::chrono::steady_clock::now();
        if (r.rfind("HTTP/1.1 200", 0) != 0) {
          std::fprintf(stderr, "pollux-bench-metrics: %s: no 200 answer\n", p.name);
          status = 1;
          break;
        }
        if (i < 5) continue;  // warm-up
        ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        bytes = r.size() - r.find("\r\n\r\n") - 4;
        series = 0;
        for (std::size_t at = r.find("\r\n\r\n"); (at = r.find('\n', at + 1)) != std::string::npos;) {
          if (at + 1 < r.size() && r[at + 1] != '#') ++series;
        }
      }
      if (ms.empty()) continue;
      std::sort(ms.begin(), ms.end());
      const double p50 = ms[ms.size() / 2], p99 = ms[std::min(ms.size() - 1, ms.size() * 99 / 100)], mx = ms.back();
      std::printf("%-20s %10.3f %10.3f %10.3f %12zu %8zu\n", p.name, p50, p99, mx, bytes, series);
      json.add(pollux::bench::JsonObject()
                   .str("case", p.name)
                   .num("streams", streams)
                   .num("requests", ms.size())
                   .num("p50_ms", p50)
                   .num("p99_ms", p99)
                   .num("max_ms", mx)
                   .num("bytes", bytes)
                   .num("series", series));
    }
    ::close(fd);
  }
  std::filesystem::remove_all(dir);
  if (!json.write(json_path)) return 1;
  return status;
}
