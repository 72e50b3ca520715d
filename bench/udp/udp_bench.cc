// pollux-bench-udp: UDP round trips through Pollux next to a bare UDP socket ping-pong measured
// in the same run (the kernel's floor), and loopback multicast throughput.
//
//   pollux-bench-udp [--count N] [--warmup N] [--runs R] [--tput-count N] [--json FILE]
//                    [--cases bare-busy,bare-block,bare-epoll,api-busy,ep-busy,ep-block,src-busy,src-block,
//                             tput-inline,tput-dedicated]      (--help describes every flag)
//
// Ping-pong: two processes pinned to CPUs 0 and 1, 32-byte payloads over 127.0.0.1 (unicast),
// round-trip time per message into an HDR histogram.
//   bare-busy / bare-block   two connected UDP sockets; spin on recv(MSG_DONTWAIT) / block in recv
//   bare-epoll               the same, sleeping in epoll_wait on the socket, then recv (the
//                            interrupt-mode style: a poller that multiplexes sources waits so)
//   api-busy                 Pollux public API, inline mode: offer() + spin on Subscriber::poll()
//   ep-busy / ep-block       the UDP transport's data plane without the API layer (post_st /
//                            poll_st), inline endpoints (they read their own socket in poll_st);
//                            ep-block sleeps in epoll_wait(notify_fd()) after try_arm_st()
//   src-busy / src-block     the same endpoints opened on a poller (passive), driven as a poller
//                            drives them: UdpPollerSource::progress() then poll_st(); src-block
//                            sleeps in epoll_wait(source notify_fd()) after the source's try_arm()
//                            (what an interrupt-mode poller does, minus its own outer epoll)
// Throughput: 32-byte messages from a publisher process to a subscriber process over loopback
// multicast (239.255.x.y on lo, TTL 1), batched datagrams; rate measured at the subscriber
// from its first to its last message; losses (kernel drops) are repaired by NAKs and counted.
//   tput-inline              inline publisher with coalescing (65 KB datagrams) + inline subscriber
//   tput-dedicated           dedicated pollers on both sides (4 threads on the 2 CPUs)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "bench/bench_util.h"
#include "bench/open_context.h"
#include "core/buffer_pool.h"
#include "core/config.h"
#include "core/counters.h"
#include "pollux/pollux.h"
#include "tools/common/loopback_udp.h"
#include "transport/udp/udp_transport.h"

namespace {

using pollux::core::Clock;
using pollux::core::Histogram;

constexpr std::size_t kPayload = 32;

// Fixed before any fork: children must use the parent's ports and group.
int g_base_port = 0;
int g_group_id = 0;
int base_port() { return g_base_port; }

// ---- bare sockets ----------------------------------------------------------------------------

int bound_socket(int port, int peer_port, bool nonblocking) {
  const int fd = ::socket(AF_INET, SOCK_DGRAM | (nonblocking ? SOCK_NONBLOCK : 0), 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) std::abort();
  a.sin_port = htons(static_cast<std::uint16_t>(peer_port));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) std::abort();
  return fd;
}

enum class Wait { kBusy, kBlock, kEpoll };

// kEpoll: the interrupt-mode style of a poller that multiplexes sources - sleep in epoll_wait
// on the (level-triggered) socket, then read it.
void recv_one(int fd, int epfd, char* buf, Wait w) {
  for (;;) {
    if (w == Wait::kEpoll) {
      epoll_event ev;
      (void)epoll_wait(epfd, &ev, 1, -1);
    }
    const ssize_t n = ::recv(fd, buf, 2048, w == Wait::kBlock ? 0 : MSG_DONTWAIT);
    if (n > 0) return;
  }
}

int epoll_for(int fd) {
  const int ep = epoll_create1(0);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) std::abort();
  return ep;
}

Histogram bare_pingpong(Wait w, std::uint64_t count, std::uint64_t warmup) {
  const bool busy = w != Wait::kBlock;
  const int pa = base_port(), pb = base_port() + 1;
  const std::uint64_t total = count + warmup;
  int sync[2];
  if (pipe(sync) != 0) std::abort();
  const pid_t child = pollux::bench::fork_pair([&] {
    const int fd = bound_socket(pb, pa, busy);
    const int ep = epoll_for(fd);
    (void)!write(sync[1], "x", 1);
    char buf[2048];
    for (std::uint64_t i = 0; i < total; ++i) {
      recv_one(fd, ep, buf, w);
      (void)!::send(fd, buf, kPayload, 0);
    }
    return 0;
  });
  const int fd = bound_socket(pa, pb, busy);
  const int ep = epoll_for(fd);
  char c;
  if (read(sync[0], &c, 1) != 1) std::abort();
  char buf[2048] = {};
  Histogram h;
  for (std::uint64_t i = 0; i < total; ++i) {
    const std::int64_t t0 = Clock::now_ns();
    (void)!::send(fd, buf, kPayload, 0);
    recv_one(fd, ep, buf, w);
    const std::int64_t t1 = Clock::now_ns();
    if (i >= warmup) h.record(t1 - t0);
  }
  waitpid(child, nullptr, 0);
  ::close(fd);
  ::close(ep);
  close(sync[0]);
  close(sync[1]);
  return h;
}

// ---- Pollux configuration --------------------------------------------------------------------

std::string pingpong_config(const std::string& name, const std::string& idle) {
  return absl::StrFormat(R"([runtime]
name = "%s"
threading = "inline"
idle = "%s"
counters = false
%s[[streams]]
topic = "ping"
id = 1
udp_port = %d
[[streams]]
topic = "pong"
id = 2
udp_port = %d
)",
                         name, idle, pollux::tools::loopback_udp_tables(1024), base_port() + 2, base_port() + 3);
}

// ---- Pollux API ping-pong (inline, busy) -----------------------------------------------------

int api_pong(std::uint64_t total, const int* sync) {
  pollux::bench::pin(1);
  auto ctx = pollux::Context::from_string(pingpong_config("udpbench-pong", "busy-spin"), "bench");
  if (!ctx.ok()) {
    std::fprintf(stderr, "%s\n", std::string(ctx.status().message()).c_str());
    return 2;
  }
  auto sub = (*ctx)->subscriber("ping");
  auto pub = (*ctx)->publisher("pong");
  (void)!write(sync[1], "x", 1);
  std::uint64_t n = 0;
  // Wait for the parent's handshake and the first messages; then echo.
  while (n < total) {
    const int k = sub->poll(
        [&](const pollux::Message& m) {
          while (pub->offer(m.payload) < 0) pub->service();
          ++n;
        },
        16);
    if (k == 0) pub->service();
  }
  char c;
  (void)!read(sync[0], &c, 1);
  return 0;
}

Histogram api_pingpong(std::uint64_t count, std::uint64_t warmup) {
  const std::uint64_t total = count + warmup;
  int sync[2];
  if (pipe(sync) != 0) std::abort();
  const pid_t child = pollux::bench::fork_on(1);
  if (child == 0) _exit(api_pong(total, sync));
  pollux::bench::pin(0);
  auto ctx = pollux::bench::open_context(pingpong_config("udpbench-ping", "busy-spin"), "bench");
  auto pub = (*ctx)->publisher("ping");
  auto sub = (*ctx)->subscriber("pong");
  char c;
  if (read(sync[0], &c, 1) != 1) std::abort();
  // Handshake: both directions connected (status messages seen by both publishers).
  while (!pub->is_connected() || !sub->is_connected()) {
    pub->service();
    (void)sub->poll([](const pollux::Message&) {}, 16);
  }
  std::vector<std::byte> payload(kPayload, std::byte{7});
  Histogram h;
  for (std::uint64_t i = 0; i < total; ++i) {
    bool got = false;
    const std::int64_t t0 = Clock::now_ns();
    while (pub->offer(payload) < 0) pub->service();
    while (!got) (void)sub->poll([&](const pollux::Message&) { got = true; }, 1);
    const std::int64_t t1 = Clock::now_ns();
    if (i >= warmup) h.record(t1 - t0);
  }
  (void)!write(sync[1], "x", 1);
  waitpid(child, nullptr, 0);
  close(sync[0]);
  close(sync[1]);
  return h;
}

// ---- endpoint-level ping-pong (the transport's data plane) -----------------------------------

struct Side {
  Side(const std::string& name, const std::string& tx_topic, const std::string& rx_topic, bool via_source) {
    auto c = pollux::core::parse_config(pingpong_config(name, "busy-spin"), "bench");
    if (!c.ok()) std::abort();
    cfg = *c;
    Clock::init();
    pollux::core::PoolOptions po;
    po.slots = 256;
    po.hugepages = pollux::core::HugePages::kOff;
    pool = std::move(*pollux::core::BufferPool::create(po));
    counters = std::move(*pollux::core::CountersFile::create("", name));
    env = pollux::transport::TransportEnv{&cfg, pool.get(), counters.get()};
    const std::uint32_t tx_id = cfg.stream_id(tx_topic), rx_id = cfg.stream_id(rx_topic);
    if (via_source) source = std::move(*pollux::transport::udp::UdpPollerSource::create(0, counters.get()));
    const int poller = via_source ? 0 : -1;
    tx = std::move(*pollux::transport::udp::UdpTxEndpoint::open(env, {tx_id, tx_topic, cfg.find_stream(tx_id), poller},
                                                                source.get()));
    rx = std::move(*pollux::transport::udp::UdpRxEndpoint::open(env, {rx_id, rx_topic, cfg.find_stream(rx_id), poller},
                                                                source.get()));
    ep_fd = via_source ? source->notify_fd() : rx->notify_fd();
  }
  bool try_arm() { return source != nullptr ? source->try_arm() : rx->try_arm_st(); }
  void disarm() {
    if (source != nullptr) {
      source->disarm();
    } else {
      rx->disarm_st();
    }
  }
  void send(const std::byte* payload) {
    std::byte* f = pool->slot(0);
    auto* h = reinterpret_cast<pollux::core::FrameHeader*>(f);
    h->frame_length = static_cast<std::uint32_t>(pollux::core::kFrameHeaderSize + kPayload);
    h->flags = 0;
    h->timestamp_ns = 0;
    std::memcpy(f + pollux::core::kFrameHeaderSize, payload, kPayload);
    const pollux::transport::TxDesc d{0, h->frame_length, 0, 0, 0};
    while (tx->post_st({&d, 1}) != 1) {
    }
    std::uint32_t freed[8];
    (void)tx->reap_st({freed, 8});
  }
  // Waits for one message (busy: spin on poll_st; otherwise arm first and sleep in epoll_wait:
  // the socket is level-triggered, so a datagram that is already there returns at once and
  // the empty poll before sleeping - one more syscall - is not needed).
  void receive(bool busy, std::byte* out) {
    pollux::transport::RxDesc d[8];
    for (;;) {
      if (!busy && try_arm()) {
        epoll_event ev;
        (void)epoll_wait(ep_fd, &ev, 1, 10);
        disarm();
        if (source != nullptr) (void)source->housekeeping(Clock::now_ns());  // as a poller after a wakeup
      }
      if (source != nullptr) {
        // As a poller: progress every cycle, timers about once per millisecond.
        const std::int64_t now = Clock::now_ns();
        (void)source->progress(now);
        if (now >= next_timer_ns) {
          (void)source->housekeeping(now);
          next_timer_ns = now + 1'000'000;
        }
      }
      const std::uint32_t n = rx->poll_st({d, 8});
      bool got = false;
      for (std::uint32_t i = 0; i < n; ++i) {
        if (d[i].kind == pollux::transport::RxKind::kMessage) {
          std::memcpy(out, reinterpret_cast<const std::byte*>(d[i].frame) + pollux::core::kFrameHeaderSize, kPayload);
          got = true;
        }
      }
      rx->release_st({d, n}, false);
      if (got) return;
    }
  }
  void settle() {
    // Join handshake both ways: heartbeats, then status messages back.
    const std::int64_t until = Clock::now_ns() + 300'000'000;
    pollux::transport::RxDesc d[16];
    while (Clock::now_ns() < until && !(tx->connected() && rx->connected())) {
      if (source != nullptr) {
        (void)source->progress(Clock::now_ns());
        (void)source->housekeeping(Clock::now_ns());
      }
      std::uint32_t freed[8];
      (void)tx->reap_st({freed, 8});  // poller mode: the endpoint joins the source on its first call
      const std::uint32_t n = rx->poll_st({d, 16});
      rx->release_st({d, n}, false);
      tx->housekeeping_st(Clock::now_ns());
    }
  }
  pollux::core::Config cfg;
  std::unique_ptr<pollux::core::BufferPool> pool;
  std::unique_ptr<pollux::core::CountersFile> counters;
  pollux::transport::TransportEnv env;
  std::unique_ptr<pollux::transport::udp::UdpPollerSource> source;  // declared first: destroyed last
  std::unique_ptr<pollux::transport::udp::UdpTxEndpoint> tx;
  std::unique_ptr<pollux::transport::udp::UdpRxEndpoint> rx;
  int ep_fd = -1;
  std::int64_t next_timer_ns = 0;
};

Histogram ep_pingpong(bool busy, bool via_source, std::uint64_t count, std::uint64_t warmup) {
  const std::uint64_t total = count + warmup;
  int sync[2], ready[2];
  if (pipe(sync) != 0 || pipe(ready) != 0) std::abort();
  const pid_t child = pollux::bench::fork_on(1);
  if (child == 0) {
    pollux::bench::pin(1);
    Side s("udpbench-ep-pong", "pong", "ping", via_source);
    (void)!write(ready[1], "x", 1);
    s.settle();
    std::byte buf[kPayload];
    for (std::uint64_t i = 0; i < total; ++i) {
      s.receive(busy, buf);
      s.send(buf);
    }
    char c;
    (void)!read(sync[0], &c, 1);
    _exit(0);
  }
  pollux::bench::pin(0);
  Side s("udpbench-ep-ping", "ping", "pong", via_source);
  char c;
  if (read(ready[0], &c, 1) != 1) std::abort();
  s.settle();
  std::byte buf[kPayload] = {};
  Histogram h;
  for (std::uint64_t i = 0; i < total; ++i) {
    const std::int64_t t0 = Clock::now_ns();
    s.send(buf);
    s.receive(busy, buf);
    const std::int64_t t1 = Clock::now_ns();
    if (i >= warmup) h.record(t1 - t0);
  }
  (void)!write(sync[1], "x", 1);
  waitpid(child, nullptr, 0);
  for (int fd : {sync[0], sync[1], ready[0], ready[1]}) close(fd);
  return h;
}

// ---- throughput ----------------------------------------------------------------------------------

// Sized per docs/PROTOCOL.md section 5: a big socket buffer absorbs the subscriber's stalls
// (this machine is shared), and the window (1M frames, 16 MiB) and datagram buffers (1024 x 64
// KB) hold about what the socket can queue, so a repair that arrives behind a backlog still
// finds the frames after its gap.
std::string tput_config(const std::string& name, bool dedicated, int cpu) {
  const std::string group = absl::StrFormat("239.255.%d.%d", 1 + g_group_id % 200, 1 + (g_group_id / 200) % 200);
  return absl::StrFormat(R"([runtime]
name = "%s"
threading = "%s"
idle = "%s"
counters = true
%s
[rings]
capacity = 4096
burst = 256
[pool]
slots = 16384
[transport]
kind = "udp"
[udp]
address = "%s"
port = %d
interface = "lo"
ttl = 1
mtu = 65535
rx_buffers = 1024
rx_batch = 16
tx_batch = 16
socket_rcvbuf = "32MiB"
socket_sndbuf = "8MiB"
retransmit_buffer = "64MiB"
reorder_window = 1048576
coalesce_us = %d
)",
                         name, dedicated ? "dedicated" : "inline", dedicated ? "yield" : "busy-spin",
                         dedicated ? absl::StrFormat("poller_cores = [%d]", cpu) : "", group, base_port() + 4,
                         dedicated ? 0 : 100);
}

struct TputResult {
  double msgs_per_s = 0;
  std::uint64_t received = 0, lost = 0;
  std::string counters;
};

TputResult throughput(bool dedicated, std::uint64_t count) {
  int res[2], ready[2];
  if (pipe(res) != 0 || pipe(ready) != 0) std::abort();
  const pid_t child = pollux::bench::fork_on(1);
  if (child == 0) {
    pollux::bench::pin(1);
    auto ctx = pollux::Context::from_string(tput_config("udpbench-sub", dedicated, 1), "bench");
    if (!ctx.ok()) {
      std::fprintf(stderr, "%s\n", std::string(ctx.status().message()).c_str());
      _exit(2);
    }
    auto sub = (*ctx)->subscriber("tput");
    (void)!write(ready[1], "x", 1);
    std::uint64_t n = 0, lost = 0;
    std::int64_t first = 0, last = 0;
    while (n + lost < count) {
      const int k = sub->poll(
          [&](const pollux::Message&) {
            if (n++ == 0) first = Clock::now_ns();
          },
          [&](const pollux::Gap& g) { lost += g.count; }, 4096);
      if (k == 0 && dedicated) sched_yield();
    }
    last = Clock::now_ns();
    std::string counters;
    if (auto snap = pollux::core::read_counters_file((*ctx)->counters_path()); snap.ok()) {
      for (const auto& c : snap->counters) {
        if (c.scope.rfind("udp sub", 0) == 0 && c.value != 0) counters += " " + c.name + "=" + std::to_string(c.value);
      }
    }
    const std::string out = absl::StrFormat("%d %u %u%s", static_cast<long long>(last - first), n, lost, counters);
    (void)!write(res[1], out.data(), out.size());
    close(res[1]);
    // Stay until the publisher closed (its linger wants our confirmation).
    char c;
    (void)!read(ready[0], &c, 1);
    _exit(0);
  }
  pollux::bench::pin(0);
  char c;
  if (read(ready[0], &c, 1) != 1) std::abort();
  auto ctx = pollux::bench::open_context(tput_config("udpbench-pub", dedicated, 0), "bench");
  auto pub = (*ctx)->publisher("tput");
  while (!pub->is_connected()) {
    pub->service();
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  std::byte payload[kPayload] = {};
  for (std::uint64_t i = 0; i < count + count / 10;) {  // 10% extra: the subscriber stops at `count`
    std::memcpy(payload, &i, 8);
    if (pub->offer(payload, kPayload) >= 0) {
      ++i;
    } else if (dedicated) {
      sched_yield();  // back-pressured: the poller that drains the ring shares this CPU
    } else {
      pub->service();
    }
  }
  close(res[1]);
  // Keep answering NAKs until the subscriber has everything (the tail may have been dropped by
  // the kernel and need a repair).
  std::string out;
  char buf[4096];
  for (;;) {
    pollfd p{res[0], POLLIN, 0};
    if (::poll(&p, 1, 0) == 0) {
      pub->service();
      continue;
    }
    const ssize_t n = read(res[0], buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  (void)!write(ready[1], "x", 1);
  pub->close();
  waitpid(child, nullptr, 0);
  close(res[0]);
  close(ready[0]);
  close(ready[1]);
  TputResult r;
  long long ns = 0;
  unsigned long long n = 0, lost = 0;
  std::istringstream is(out);
  is >> ns >> n >> lost;
  std::getline(is, r.counters);
  r.received = n;
  r.lost = lost;
  r.msgs_per_s = ns > 0 ? static_cast<double>(n) * 1e9 / static_cast<double>(ns) : 0;
  return r;
}

}  // namespace

constexpr const char* kCases =
    R"(Cases (ping-pong: two processes pinned to CPUs 0 and 1, 32-byte payloads over 127.0.0.1):
  bare-busy / bare-block  two connected UDP sockets; spin on recv(MSG_DONTWAIT) / block in recv:
                          the kernel's floor for the busy / blocking cases
  bare-epoll              the same, sleeping in epoll_wait on the socket, then recv (how an
                          interrupt-mode poller that multiplexes sources waits): src-block's floor
  api-busy                Pollux public API, inline mode: offer() + spin on Subscriber::poll()
  ep-busy / ep-block      the UDP transport's data plane without the API layer (post_st /
                          poll_st), inline endpoints; ep-block sleeps in epoll_wait(notify_fd())
  src-busy / src-block    the same endpoints on a poller source, driven as a poller drives them
                          (UdpPollerSource::progress() then poll_st(); src-block sleeps on the
                          source's notify_fd() after try_arm())
Throughput: 32-byte messages over loopback multicast (239.255.x.y on lo, TTL 1), rate at the
subscriber; kernel drops are repaired by NAKs and counted:
  tput-inline             inline publisher with coalescing (65 KB datagrams) + inline subscriber
  tput-dedicated          dedicated pollers on both sides (4 threads on the 2 CPUs)
Floors in the JSON: api-busy, ep-busy, src-busy -> bare-busy; ep-block -> bare-block;
src-block -> bare-epoll (the ratio lines printed at the end are also JSON objects).)";

int main(int argc, char** argv) {
  std::uint64_t count = 200'000, warmup = 20'000, tput_count = 20'000'000, runs = 3;
  std::string cases =
      "bare-busy,api-busy,ep-busy,src-busy,bare-block,bare-epoll,ep-block,src-block,tput-inline,tput-dedicated";
  std::string json_path;
  pollux::bench::Cli cli("pollux-bench-udp",
                         "pollux-bench-udp: UDP round trips through Pollux next to a bare UDP socket ping-pong\n"
                         "measured in the same run (the kernel's floor), and loopback multicast throughput.\n"
                         "The default run takes about 6 minutes.");
  cli.count("--count", &count, "round trips per ping-pong case and run")
      .count("--warmup", &warmup, "round trips before the measured ones", 0)
      .count("--runs", &runs, "interleaved rounds of every case (histograms printed per run and merged)", 1, 1000)
      .count("--tput-count", &tput_count, "messages per throughput run")
      .list("--cases", &cases,
            {"bare-busy", "bare-block", "bare-epoll", "api-busy", "ep-busy", "ep-block", "src-busy", "src-block",
             "tput-inline", "tput-dedicated"},
            "cases to run, comma-separated")
      .text("--json", &json_path, "FILE",
            "also write JSON lines: one object per ping-pong case (merged over the runs: ns\n"
            "percentiles, run_p50_ns, floor and ratio), one per ratio line, one per throughput run")
      .epilog(kCases)
      .parse(argc, argv);
  g_base_port = 30000 + (getpid() % 1000) * 8;
  g_group_id = getpid();
  Clock::init();
  std::printf("machine: %s\n", pollux::bench::machine_description().c_str());
  std::printf("clock: %.1f ns per Clock::now_ns()\n", pollux::bench::clock_cost_ns());
  pollux::bench::JsonLines json(cli.program(), argc, argv);
  std::printf("ping-pong: %llu round trips after %llu warm-up, %zu-byte payload, 127.0.0.1, processes on CPUs 0/1\n",
              static_cast<unsigned long long>(count), static_cast<unsigned long long>(warmup), kPayload);
  auto want = [&](const char* c) { return ("," + cases + ",").find(std::string(",") + c + ",") != std::string::npos; };
  std::map<std::string, std::vector<Histogram>> results;
  // Interleaved runs: slow drifts of the machine affect every case alike.
  for (std::uint64_t r = 0; r < runs; ++r) {
    if (want("bare-busy")) results["bare-busy"].push_back(bare_pingpong(Wait::kBusy, count, warmup));
    if (want("api-busy")) results["api-busy"].push_back(api_pingpong(count, warmup));
    if (want("ep-busy")) results["ep-busy"].push_back(ep_pingpong(true, false, count, warmup));
    if (want("src-busy")) results["src-busy"].push_back(ep_pingpong(true, true, count, warmup));
    if (want("bare-block")) results["bare-block"].push_back(bare_pingpong(Wait::kBlock, count, warmup));
    if (want("bare-epoll")) results["bare-epoll"].push_back(bare_pingpong(Wait::kEpoll, count, warmup));
    if (want("ep-block")) results["ep-block"].push_back(ep_pingpong(false, false, count, warmup));
    if (want("src-block")) results["src-block"].push_back(ep_pingpong(false, true, count, warmup));
  }
  auto merged = [&](const std::string& k) {
    Histogram h;
    for (const Histogram& x : results[k]) h.merge(x);
    return h;
  };
  // The floor each Pollux case is held against in the JSON (the same run's bare sockets).
  auto floor_of = [](const std::string& k) -> std::string {
    if (k == "api-busy" || k == "ep-busy" || k == "src-busy") return "bare-busy";
    if (k == "ep-block") return "bare-block";
    if (k == "src-block") return "bare-epoll";
    return "";
  };
  for (const char* k :
       {"bare-busy", "api-busy", "ep-busy", "src-busy", "bare-block", "bare-epoll", "ep-block", "src-block"}) {
    if (results.count(k) == 0) continue;
    for (std::size_t r = 0; r < results[k].size(); ++r) {
      pollux::bench::print_hist(absl::StrFormat("%s run %d RTT", k, r + 1).c_str(), results[k][r]);
    }
    const Histogram all = merged(k);
    pollux::bench::print_hist(absl::StrFormat("%s all RTT", k).c_str(), all);
    std::vector<double> run_p50;
    for (const Histogram& x : results[k]) run_p50.push_back(static_cast<double>(x.percentile(50)));
    pollux::bench::JsonObject o;
    o.str("case", k)
        .num("runs", results[k].size())
        .num("payload_bytes", kPayload)
        .latency(all)
        .nums("run_p50_ns", run_p50);
    if (const std::string f = floor_of(k); !f.empty() && results.count(f) != 0) o.floor(f, merged(f), all);
    json.add(o);
  }
  auto ratio = [&](const char* a, const char* b) {
    if (results.count(a) == 0 || results.count(b) == 0) return;
    const Histogram x = merged(a), y = merged(b);
    std::printf("%-10s / %-10s  p50 %.3fx  p99 %.3fx  p99.9 %.3fx\n", a, b,
                static_cast<double>(x.percentile(50)) / static_cast<double>(y.percentile(50)),
                static_cast<double>(x.percentile(99)) / static_cast<double>(y.percentile(99)),
                static_cast<double>(x.percentile(99.9)) / static_cast<double>(y.percentile(99.9)));
    json.add(pollux::bench::JsonObject()
                 .str("ratio", std::string(a) + " / " + b)
                 .num("p50", pollux::bench::JsonObject::ratio(x.percentile(50), y.percentile(50)))
                 .num("p99", pollux::bench::JsonObject::ratio(x.percentile(99), y.percentile(99)))
                 .num("p99_9", pollux::bench::JsonObject::ratio(x.percentile(99.9), y.percentile(99.9))));
  };
  ratio("api-busy", "bare-busy");
  ratio("ep-busy", "bare-busy");
  ratio("ep-block", "bare-block");
  ratio("ep-block", "bare-epoll");
  ratio("src-busy", "ep-busy");
  ratio("src-block", "bare-epoll");
  for (const char* k : {"tput-inline", "tput-dedicated"}) {
    if (!want(k)) continue;
    for (std::uint64_t r = 0; r < runs; ++r) {
      const TputResult t = throughput(std::string(k) == "tput-dedicated", tput_count);
      std::printf("%s run %llu: %.2f M msgs/s (%llu received, %llu lost)%s\n", k,
                  static_cast<unsigned long long>(r + 1), t.msgs_per_s / 1e6,
                  static_cast<unsigned long long>(t.received), static_cast<unsigned long long>(t.lost),
                  t.counters.c_str());
      json.add(pollux::bench::JsonObject()
                   .str("case", k)
                   .num("run", r + 1)
                   .num("count", tput_count)
                   .num("payload_bytes", kPayload)
                   .num("msgs_per_s", t.msgs_per_s)
                   .num("received", t.received)
                   .num("lost", t.lost));
    }
  }
  return json.write(json_path) ? 0 : 1;
}
