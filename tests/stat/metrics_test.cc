// The metrics endpoint (api/metrics*.cc): a context's [metrics] endpoint and `pollux-stat --serve`
// over a shm directory, read as Prometheus, promtool, a browser and a hostile client would:
// the counters equal what was sent and received, every family follows the naming rules, the
// OpenMetrics form is negotiated by Accept, unknown paths and methods are refused, and stalled
// clients neither block others nor outlive their timeout. The real Prometheus and Chromium
// tests skip, saying why, when the package is not installed (scripts/install-deps.sh --test
// installs both).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "pollux/pollux.h"
#include "tests/latency/json_lite.h"
#include "tests/support/process.h"
#include "tests/support/status_assert.h"
#include "tests/support/temp_dir.h"

namespace pollux {
namespace {

// ---- a small HTTP client --------------------------------------------------------------------------

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Reads until the peer closes, or until `complete` says the text is whole; a 60 s guard against
// a hang (never a verdict: the caller checks what arrived).
std::string read_all(int fd, const std::function<bool(const std::string&)>& complete = nullptr) {
  std::string out;
  char buf[65536];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 1000) <= 0) continue;
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
    if (complete && complete(out)) break;
  }
  return out;
}

struct Response {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
};

Response parse_response(const std::string& raw) {
  Response r;
  const auto end = raw.find("\r\n\r\n");
  if (end == std::string::npos) return r;
  std::vector<std::string> lines = absl::StrSplit(raw.substr(0, end), "\r\n");
  if (lines.empty() || std::sscanf(lines[0].c_str(), "HTTP/1.1 %d", &r.status) != 1) return r;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const auto colon = lines[i].find(':');
    if (colon == std::string::npos) continue;
    std::string k = lines[i].substr(0, colon);
    for (char& c : k) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    r.headers[k] = lines[i].substr(colon + 2);
  }
  r.body = raw.substr(end + 4);
  return r;
}

Response request(int port, const std::string& method, const std::string& path, const std::string& extra = "") {
  const int fd = connect_to(port);
  if (fd < 0) return {};
  const std::string req =
      absl::StrCat(method, " ", path, " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n", extra, "\r\n");
  (void)!::write(fd, req.data(), req.size());
  const std::string raw = read_all(fd);
  ::close(fd);
  return parse_response(raw);
}

Response get(int port, const std::string& path, const std::string& accept = "") {
  return request(port, "GET", path, accept.empty() ? "" : absl::StrCat("Accept: ", accept, "\r\n"));
}

// ---- reading the exposition ------------------------------------------------------------------------

struct Exposition {
  std::map<std::string, std::string> type;  // family -> counter|gauge|histogram|info
  std::set<std::string> help;
  std::vector<std::pair<std::string, double>> samples;  // "name{labels}" -> value
};

Exposition parse_exposition(const std::string& text) {
  Exposition e;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) == 0) {
      std::vector<std::string> w = absl::StrSplit(line, ' ');
      if (w.size() == 4) e.type[w[2]] = w[3];
    } else if (line.rfind("# HELP ", 0) == 0) {
      std::vector<std::string> w = absl::StrSplit(line, absl::MaxSplits(' ', 3));
      if (w.size() == 4 && !w[3].empty()) e.help.insert(w[2]);
    } else if (!line.empty() && line[0] != '#') {
      const auto sp = line.rfind(' ');
      e.samples.emplace_back(line.substr(0, sp), std::strtod(line.c_str() + sp + 1, nullptr));
    }
  }
  return e;
}

// The value of the one sample whose name is `name` and whose labels include every `label`.
double sample(const Exposition& e, const std::string& name, const std::vector<std::string>& labels, int* found) {
  *found = 0;
  double v = 0;
  for (const auto& [series, value] : e.samples) {
    if (series.rfind(name + "{", 0) != 0) continue;
    bool all = true;
    for (const std::string& l : labels) all = all && series.find(l) != std::string::npos;
    if (all) {
      ++*found;
      v = value;
    }
  }
  return v;
}

// The number right after `mark`, searched from the first `anchor` on (-1: either is missing).
// Plain searches, not std::regex: libstdc++'s regex trips GCC 12's -Wmaybe-uninitialized in the
// sanitizer builds.
double number_after(const std::string& text, const std::string& anchor, const std::string& mark) {
  const auto a = text.find(anchor);
  if (a == std::string::npos) return -1;
  const auto at = text.find(mark, a);
  if (at == std::string::npos) return -1;
  return std::strtod(text.c_str() + at + mark.size(), nullptr);
}

// ---- a context with its endpoint --------------------------------------------------------------------

std::string config(const std::string& dir, const std::string& metrics) {
  return absl::StrCat("[runtime]\nname = \"mtest\"\nthreading = \"inline\"\nshm_dir = \"", dir, "\"\n", metrics,
                      "[[streams]]\ntopic = \"quotes\"\nid = 7\n");
}

// Publishes `n` messages and polls them all (inline: this thread drives both ends).
void pump(Publisher& pub, Subscriber& sub, int n, std::uint64_t* received) {
  const char payload[32] = "quote";
  int sent = 0;
  while (sent < n || sub.messages_received() < *received + static_cast<std::uint64_t>(n)) {
    if (sent < n && pub.offer(payload, sizeof payload) >= 0) ++sent;
    (void)sub.poll([](const Message&) {}, 64);
    if (sent >= n) std::this_thread::yield();
  }
  *received += static_cast<std::uint64_t>(n);
}

int endpoint_port(Context& ctx) {
  const std::string describe = ctx.describe();
  const std::string head = "metrics:   http://127.0.0.1:";
  const auto at = describe.find(head);
  return at == std::string::npos ? -1 : std::atoi(describe.c_str() + at + head.size());
}

struct Serve {
  testing::Child c;
  int port = 0;
};

Serve start_serve(const std::string& dir) {
  Serve s;
  s.c = testing::spawn({POLLUX_STAT, "--dir", dir, "--serve", "127.0.0.1:0", "--json"});
  s.c.wait_for_output([](const std::string& o) { return o.find('\n') != std::string::npos; }, 60);
  const auto p = s.c.output.find("\"port\":");
  if (p != std::string::npos) s.port = std::atoi(s.c.output.c_str() + p + 7);
  return s;
}

class MetricsTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(tmp.path().empty()); }
  // A context publishing and subscribing "quotes" in tmp, and pollux-stat --serve over tmp.
  void open_and_serve() {
    POLLUX_ASSERT_OK_DECL(c, Context::from_string(config(tmp.path(), "")));
    ctx = std::move(*c);
    POLLUX_ASSERT_OK_DECL(s, ctx->subscriber("quotes"));
    POLLUX_ASSERT_OK_DECL(p, ctx->publisher("quotes"));
    sub = std::move(*s);
    pub = std::move(*p);
    serve = start_serve(tmp.path());
    ASSERT_GT(serve.port, 0) << serve.c.output;
  }
  testing::TempDir tmp{"pollux-metrics"};
  std::unique_ptr<Context> ctx;
  Subscriber sub;
  Publisher pub;
  Serve serve;
};

TEST_F(MetricsTest, ContextEndpointCountsWhatWasSentAndReceived) {
  POLLUX_ASSERT_OK_DECL(ctx, Context::from_string(config(tmp.path(), "[metrics]\nlisten = \"127.0.0.1:0\"\n")));
  POLLUX_ASSERT_OK_DECL(sub, (*ctx)->subscriber("quotes"));
  POLLUX_ASSERT_OK_DECL(pub, (*ctx)->publisher("quotes"));
  AppHistogram h = (*ctx)->histogram("test", "publish_to_poll");
  for (int i = 0; i < 100; ++i) h.record(i * 1000);  // 0 .. 99 us
  std::uint64_t received = 0;
  pump(*pub, *sub, 1234, &received);
  const int port = endpoint_port(**ctx);
  ASSERT_GT(port, 0) << (*ctx)->describe();

  const Response r = get(port, "/metrics");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers.at("content-type"), "text/plain; version=0.0.4; charset=utf-8");
  const Exposition e = parse_exposition(r.body);
  int found = 0;
  EXPECT_EQ(sample(e, "pollux_stream_messages_total", {"topic=\"quotes\"", "direction=\"subscription\""}, &found),
            1234.0)
      << r.body;
  EXPECT_EQ(found, 1);
  EXPECT_EQ(sample(e, "pollux_stream_messages_total", {"topic=\"quotes\"", "direction=\"publication\""}, &found),
            1234.0);
  EXPECT_EQ(sample(e, "pollux_stream_bytes_total", {"topic=\"quotes\"", "direction=\"subscription\""}, &found),
            1234.0 * 32);
  EXPECT_EQ(
      sample(e, "pollux_stream_messages_total", {"transport=\"shm\"", "stream=\"7\"", "process=\"mtest\""}, &found),
      1234.0);
  EXPECT_EQ(found, 2);
  // The histogram: cumulative buckets, +Inf = count, sum in seconds.
  EXPECT_EQ(sample(e, "pollux_app_publish_to_poll_seconds_bucket", {"le=\"+Inf\""}, &found), 100.0);
  EXPECT_EQ(sample(e, "pollux_app_publish_to_poll_seconds_bucket", {"le=\"1e-05\""}, &found), 11.0);  // 0..10 us
  EXPECT_EQ(sample(e, "pollux_app_publish_to_poll_seconds_count", {"scope=\"test\""}, &found), 100.0);
  EXPECT_NEAR(sample(e, "pollux_app_publish_to_poll_seconds_sum", {"scope=\"test\""}, &found), 4950e-6, 1e-12);
  EXPECT_EQ(e.type.at("pollux_app_publish_to_poll_seconds"), "histogram");

  // Naming: pollux_ prefix everywhere; counters end in _total; every family has HELP; every
  // stream family carries the topic label.
  for (const auto& [family, type] : e.type) {
    EXPECT_EQ(family.rfind("pollux_", 0), 0u) << family;
    if (family.rfind("pollux_stream_", 0) == 0) {
      EXPECT_EQ(type, "counter") << family;  // every stream family counts
    }
    EXPECT_TRUE(e.help.count(family)) << family << " has no HELP";
    EXPECT_EQ(type == "counter", family.size() > 6 && family.substr(family.size() - 6) == "_total") << family;
  }
  int stream_series = 0, transport_series = 0;
  for (const auto& [series, v] : e.samples) {
    if (series.rfind("pollux_stream_", 0) == 0 || series.find("stream=\"") != std::string::npos) {
      ++stream_series;
      transport_series += series.rfind("pollux_transport_", 0) == 0;
      EXPECT_NE(series.find("topic=\"quotes\""), std::string::npos) << series;
    }
  }
  EXPECT_GE(stream_series, 15);    // a publication's 8 and a subscription's 7, at least
  EXPECT_GE(transport_series, 1);  // the shm transport's, with the topic of their stream
  // The poller-less inline context still shows its process counters.
  EXPECT_EQ(sample(e, "pollux_errors_total", {"process=\"mtest\""}, &found), 0.0);
  EXPECT_EQ(found, 1);

  // OpenMetrics by Accept (as Prometheus asks): counter families named without _total, # EOF.
  const Response om = get(port, "/metrics", "application/openmetrics-text;version=1.0.0,text/plain;q=0.5");
  ASSERT_EQ(om.status, 200);
  EXPECT_EQ(om.headers.at("content-type"), "application/openmetrics-text; version=1.0.0; charset=utf-8");
  EXPECT_NE(om.body.find("# TYPE pollux_stream_messages counter\n"), std::string::npos) << om.body;
  EXPECT_EQ(om.body.substr(om.body.size() - 6), "# EOF\n");

  // The rest of the surface.
  const Response page = get(port, "/");
  EXPECT_EQ(page.status, 200);
  EXPECT_NE(page.body.find("<table id=\"streams\">"), std::string::npos);
  EXPECT_EQ(page.body.find("http://"), std::string::npos) << "the page must not load anything from elsewhere";
  const Response snap = get(port, "/api/snapshot");
  ASSERT_EQ(snap.status, 200);
  std::string err;
  auto j = jsonlite::Parse(snap.body, &err);
  ASSERT_TRUE(j.has_value()) << err << snap.body;
  EXPECT_NE(snap.body.find("\"topic\":\"quotes\""), std::string::npos);
  EXPECT_EQ(get(port, "/nope").status, 404);
  EXPECT_EQ(get(port, "/metrics/../etc/passwd").status, 404);
  EXPECT_EQ(request(port, "POST", "/metrics", "Content-Length: 0\r\n").status, 405);
  const Response head = request(port, "HEAD", "/metrics");
  EXPECT_EQ(head.status, 200);
  EXPECT_TRUE(head.body.empty());
  EXPECT_EQ(request(port, "GET", "/metrics", std::string("X-Junk: ") + std::string(9000, 'a') + "\r\n").status, 400);
}

TEST_F(MetricsTest, ConfigRefusesBadAddressesNamingTheKey) {
  for (const char* bad : {"9464", "127.0.0.1:", "127.0.0.1:70000", "myhost:9464", "1.2.3:80"}) {
    auto ctx = Context::from_string(config(tmp.path(), absl::StrCat("[metrics]\nlisten = \"", bad, "\"\n")));
    ASSERT_FALSE(ctx.ok()) << bad;
    EXPECT_NE(ctx.status().message().find("metrics.listen"), std::string::npos) << ctx.status();
  }
  auto off = Context::from_string("[runtime]\ncounters = false\n[metrics]\nlisten = \":0\"\n");
  ASSERT_FALSE(off.ok());
  EXPECT_NE(off.status().message().find("runtime.counters"), std::string::npos) << off.status();
}

// A stalled client (connected, sending nothing or half a request) holds only its own
// connection: others are answered meanwhile, and at max_connections the oldest connection is
// closed to make room - so clients that hold every slot lose them to a newer request.
TEST_F(MetricsTest, StalledClientsDoNotBlockOthersAndLoseTheirSlotsAtTheLimit) {
  POLLUX_ASSERT_OK_DECL(ctx, Context::from_string(config(tmp.path(),
                                                         "[metrics]\nlisten = \"127.0.0.1:0\"\nmax_connections = "
                                                         "4\ntimeout_ms = 60000\n")));
  const int port = endpoint_port(**ctx);
  ASSERT_GT(port, 0) << (*ctx)->describe();
  std::vector<int> held;
  for (int i = 0; i < 4; ++i) {
    const int fd = connect_to(port);
    ASSERT_GE(fd, 0);
    if (i == 0) (void)!::write(fd, "GET /metr", 9);  // half a request
    held.push_back(fd);
  }
  // Four stalled connections fill every slot; a request is answered all the same, and the
  // oldest stalled connection is closed for it (connections are accepted in order) - at once,
  // not after its 60 s timeout.
  auto evicted = [&](int fd) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::string got = read_all(fd);
    return got.empty() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30);
  };
  EXPECT_EQ(get(port, "/metrics").status, 200);
  EXPECT_TRUE(evicted(held[0]));
  held.push_back(connect_to(port));  // every slot taken again
  EXPECT_EQ(get(port, "/metrics").status, 200);
  EXPECT_TRUE(evicted(held[1]));
  // The younger ones still hold their slots: one is answered when it finally asks.
  const std::string req = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  (void)!::write(held[3], req.data(), req.size());
  EXPECT_EQ(parse_response(read_all(held[3])).status, 200);
  for (int fd : held) ::close(fd);
}

// A stalled connection is closed by the server once timeout_ms passed without a request.
TEST_F(MetricsTest, StalledClientIsClosedAfterTheTimeout) {
  POLLUX_ASSERT_OK_DECL(
      ctx, Context::from_string(config(tmp.path(), "[metrics]\nlisten = \"127.0.0.1:0\"\ntimeout_ms = 200\n")));
  const int port = endpoint_port(**ctx);
  ASSERT_GT(port, 0) << (*ctx)->describe();
  const int fd = connect_to(port);
  ASSERT_GE(fd, 0);
  const std::string partial = "GET /metrics HTTP/1.1\r\nHost: x\r\n";  // never finished
  (void)!::write(fd, partial.data(), partial.size());
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(read_all(fd), "");  // EOF: closed by the server, unanswered
  // The 60 s guard of read_all did not end it: the server did.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(50));
  ::close(fd);
}

// ---- pollux-stat --serve ---------------------------------------------------------------------------------

TEST_F(MetricsTest, PolluxStatServesEveryProcessOfTheDirectoryUntilSigterm) {
  ASSERT_NO_FATAL_FAILURE(open_and_serve());
  Serve& s = serve;
  std::uint64_t received = 0;
  pump(pub, sub, 777, &received);
  const Response r = get(s.port, "/metrics");
  ASSERT_EQ(r.status, 200);
  const Exposition e = parse_exposition(r.body);
  int found = 0;
  EXPECT_EQ(sample(e, "pollux_stream_messages_total", {"topic=\"quotes\"", "direction=\"subscription\""}, &found),
            static_cast<double>(sub.messages_received()))
      << r.body;
  EXPECT_EQ(found, 1);
  EXPECT_NE(r.body.find("\npollux_metrics_processes 1\n"), std::string::npos) << r.body;
  // /api/snapshot's rate: the endpoint's samples at each request, 0 until two differ in time.
  ASSERT_EQ(get(s.port, "/api/snapshot").status, 200);
  pump(pub, sub, 300, &received);
  const Response snap = get(s.port, "/api/snapshot");
  EXPECT_GT(number_after(snap.body, "\"direction\":\"subscription\"", "\"rate\":"), 0.0) << snap.body;

  // promtool, the Prometheus project's own checker, on the text format.
  if (::access("/usr/bin/promtool", X_OK) == 0) {
    const std::string file = tmp.path() + "/metrics.txt";
    testing::write_file(file, r.body);
    const auto check = testing::RunCommand("promtool check metrics < " + file + " 2>&1", false);
    EXPECT_EQ(check.status, 0) << check.text;
    EXPECT_EQ(check.text, "") << "promtool lint findings:\n" << check.text;
  }
  s.c.signal(SIGTERM);
  EXPECT_EQ(s.c.wait(60), 0) << s.c.output;
}

TEST(MetricsCli, RefusesWhatItCannotServe) {
  for (const char* args : {"--serve", "--serve 9464", "--serve myhost:1", "--serve :1 --watch 1", "--max-connections 4",
                           "--serve :1 --timeout-ms 5"}) {
    const auto r = testing::RunCommand(absl::StrCat(POLLUX_STAT, " --dir /tmp ", args, " 2>&1"));
    EXPECT_EQ(r.status, 64) << args << ": " << r.text;
  }
}

// ---- the real Prometheus ------------------------------------------------------------------------------------

// A TCP port below the ephemeral range that nothing listens on now (Prometheus needs a number).
int free_tcp_port() {
  for (int p = 20000 + (getpid() * 7) % 9000, n = 0; n < 9000; ++n, p = 20000 + (p - 20000 + 1) % 9000) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(p));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    if (ok) return p;
  }
  return -1;
}

// What Prometheus' HTTP API answers for an instant query: the value of its one sample (-1: none).
double prometheus_value(int port, const std::string& query, std::string* raw) {
  std::string q;
  for (char c : query) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '_') {
      q += c;
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", static_cast<unsigned char>(c));
      q += buf;
    }
  }
  const Response r = get(port, "/api/v1/query?query=" + q);
  *raw = r.body;
  // {"status":"success","data":{"resultType":"vector","result":[{"metric":{...},"value":[T,"V"]}]}}
  if (r.status != 200) return -1;
  return number_after(r.body, "\"value\":[", ",\"");
}

TEST_F(MetricsTest, RealPrometheusScrapesTheCounterRisingByWhatWasSent) {
  if (::access("/usr/bin/prometheus", X_OK) != 0) {
    GTEST_SKIP() << "prometheus is not installed (Debian package prometheus; scripts/install-deps.sh --test)";
  }
  ASSERT_NO_FATAL_FAILURE(open_and_serve());
  Serve& s = serve;
  const int web = free_tcp_port();
  ASSERT_GT(web, 0);
  testing::write_file(tmp.path() + "/prometheus.yml",
                      absl::StrCat("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n"
                                   "  - job_name: pollux\n    static_configs:\n      - targets: ['127.0.0.1:",
                                   s.port, "']\n"));
  testing::SpawnOptions o;
  o.merge_stderr = true;
  testing::Child prom = testing::spawn(
      {"/usr/bin/prometheus", "--config.file=" + tmp.path() + "/prometheus.yml",
       "--storage.tsdb.path=" + tmp.path() + "/tsdb", absl::StrCat("--web.listen-address=127.0.0.1:", web)},
      o);
  const std::string query = "pollux_stream_messages_total{topic=\"quotes\",direction=\"subscription\"}";
  std::uint64_t received = 0;
  std::string raw;
  // Prometheus sees each value once it scraped after it; the waits end on the value, and only a
  // hang guard (120 s) ends them otherwise.
  auto wait_for = [&](double want) {
    double v = -1;
    for (int i = 0; i < 1200 && v != want; ++i) {
      prom.read_some(0);
      v = prometheus_value(web, query, &raw);
      if (v != want) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return v;
  };
  pump(pub, sub, 500, &received);
  const double before = wait_for(500);
  ASSERT_EQ(before, 500) << raw << "\nprometheus:\n" << prom.output;
  pump(pub, sub, 4321, &received);
  const double after = wait_for(500 + 4321);
  EXPECT_EQ(after - before, 4321) << raw << "\nprometheus:\n" << prom.output;
  // Prometheus scraped every target line without complaint.
  double up = prometheus_value(web, "up{job=\"pollux\"}", &raw);
  EXPECT_EQ(up, 1) << raw;
  prom.signal(SIGTERM);
  prom.wait(60);
  s.c.signal(SIGTERM);
  EXPECT_EQ(s.c.wait(60), 0);
}

// ---- the page in a real browser -------------------------------------------------------------------------------

TEST_F(MetricsTest, HeadlessChromiumRendersTheStreamWithItsRate) {
  if (::access("/usr/bin/chromium", X_OK) != 0) {
    GTEST_SKIP() << "chromium is not installed (Debian package chromium; scripts/install-deps.sh --test)";
  }
  ASSERT_NO_FATAL_FAILURE(open_and_serve());
  Serve& s = serve;
  // The endpoint samples the counters at every /api/snapshot request: one now, messages, then
  // the page's first fetch sees them move (the rate needs no timing), and more keep flowing.
  ASSERT_EQ(get(s.port, "/api/snapshot").status, 200);
  std::uint64_t before = 0;
  pump(pub, sub, 500, &before);
  std::atomic<bool> stop{false};
  std::thread flow([&] {
    std::uint64_t received = 0;
    while (!stop.load()) pump(pub, sub, 200, &received);  // pump() yields between polls
  });
  const std::string cmd = absl::StrCat(
      "chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --user-data-dir=", tmp.path(),
      "/chromium --virtual-time-budget=3000 --dump-dom http://127.0.0.1:", s.port, "/ 2>/dev/null");
  const auto dom = testing::RunCommand(cmd);
  stop = true;
  flow.join();
  ASSERT_EQ(dom.status, 0) << dom.text;
  // tr.stream[data-topic=quotes][data-direction=subscription] > td.rate[data-value > 0]
  const std::string row = R"(<tr class="stream" data-topic="quotes" data-direction="subscription">)";
  ASSERT_NE(dom.text.find(row), std::string::npos) << dom.text;
  EXPECT_GT(number_after(dom.text, row, R"(<td class="rate" data-value=")"), 0.0) << dom.text;
  EXPECT_NE(dom.text.find("1 process"), std::string::npos) << dom.text;
  s.c.signal(SIGTERM);
  EXPECT_EQ(s.c.wait(60), 0);
}

}  // namespace
}  // namespace pollux
