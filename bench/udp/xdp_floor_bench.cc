// pollux-bench-xdp-floor: the floor of the two UDP datapaths Pollux can use between two hosts (or
// two network namespaces joined by a veth pair): AF_XDP through the project's XSK wrapper
// (transport/udp/xdp/xsk.h) and a kernel UDP socket, both busy-polled, without Pollux's transport
// on top. One process per side; bench/udp/xdp-compare.sh runs both sides in two namespaces.
//
//   ping / pong    round trips of --size-byte datagrams; ping records each RTT (core::Clock)
//   source / sink  one-way stream of --size-byte datagrams sent in batches of --batch for
//                  --seconds; sink reports messages/s received (first to last) and the losses
//
// Every datagram starts with a 16-byte header (magic, kind, sequence). Before measuring, ping and
// source send "hello" until the other side answers, so either side may start first. At the end
// they send "stop"; pong and sink also give up after --timeout-ms without traffic. In xdp mode
// the peer's MAC comes from the kernel's neighbour table (xdp::lookup_neighbour); when it has no
// entry yet, one datagram through a normal UDP socket makes the kernel resolve it.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "core/clock.h"
#include "core/histogram.h"
#include "transport/udp/xdp/frame.h"
#include "transport/udp/xdp/neighbour.h"
#include "transport/udp/xdp/xsk.h"

namespace {

namespace xdp = pollux::transport::udp::xdp;
using pollux::core::Clock;
using pollux::core::Histogram;

constexpr char kProgram[] = "pollux-bench-xdp-floor";
constexpr std::uint32_t kMagic = 0x504c5846;  // "PLXF"
constexpr std::uint32_t kMaxBatch = 64;
constexpr std::uint32_t kMaxPayload = 1472;  // one 1500-byte MTU frame

enum Kind : std::uint16_t { kData = 1, kHello = 2, kHelloAck = 3, kStop = 4, kResolve = 5 };

struct Header {
  std::uint32_t magic;
  std::uint16_t kind;
  std::uint16_t reserved;
  std::uint64_t seq;  // kData: the message's number; kStop: how many data messages were sent
};
static_assert(sizeof(Header) == 16);

struct Options {
  std::string mode = "socket";
  std::string role = "ping";
  std::string interface;
  std::string peer_addr;
  std::uint64_t port = 47000;
  std::uint64_t size = 0;  // 0: 32 for ping/pong, 64 for source/sink
  std::uint64_t count = 100000;
  std::uint64_t warmup = 10000;
  std::uint64_t seconds = 3;
  std::uint64_t batch = 32;
  std::uint64_t timeout_ms = 5000;
  std::string xsk_mode = "copy";
  bool json = false;
};

volatile std::sig_atomic_t g_stop = 0;
extern "C" void on_signal(int) { g_stop = 1; }

// A deadline checked by every wait: `ms` from now, moved forward by extend().
class Deadline {
 public:
  explicit Deadline(std::uint64_t ms) : span_(static_cast<std::int64_t>(ms) * 1'000'000) { extend(); }
  void extend() { end_ = Clock::now_ns() + span_; }
  bool passed() const { return g_stop != 0 || Clock::now_ns() > end_; }

 private:
  std::int64_t span_;
  std::int64_t end_ = 0;
};

bool read_header(const std::uint8_t* p, std::size_t len, Header* h) {
  if (len < sizeof(Header)) return false;
  std::memcpy(h, p, sizeof(Header));
  return h->magic == kMagic;
}

void write_header(std::uint8_t* p, Kind kind, std::uint64_t seq) {
  const Header h{kMagic, kind, 0, seq};
  std::memcpy(p, &h, sizeof h);
}

// The first IPv4 address of `ifname` in this network namespace (network byte order).
absl::StatusOr<std::uint32_t> interface_addr(const std::string& ifname) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return absl::InternalError(absl::StrCat("getifaddrs: ", std::strerror(errno)));
  std::uint32_t addr = 0;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr != nullptr && a->ifa_addr->sa_family == AF_INET && ifname == a->ifa_name) {
      addr = reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr;
      break;
    }
  }
  freeifaddrs(list);
  if (addr == 0) {
    return absl::NotFoundError(
        absl::StrCat("interface ", ifname, " has no IPv4 address in this network namespace (or does not exist)"));
  }
  return addr;
}

sockaddr_in sockaddr_of(std::uint32_t addr, std::uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = addr;
  a.sin_port = htons(port);
  return a;
}

// A UDP socket bound to (local, local_port) and connected to (peer, peer_port).
absl::StatusOr<int> udp_socket(std::uint32_t local, std::uint16_t local_port, std::uint32_t peer,
                               std::uint16_t peer_port) {
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  sockaddr_in a = sockaddr_of(local, local_port);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    const int e = errno;
    ::close(fd);
    return absl::InternalError(absl::StrCat("bind to port ", local_port, ": ", std::strerror(e)));
  }
  a = sockaddr_of(peer, peer_port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    const int e = errno;
    ::close(fd);
    return absl::InternalError(absl::StrCat("connect: ", std::strerror(e)));
  }
  return fd;
}

// ---- the two datapaths ------------------------------------------------------------------------
//
// Both offer send(payloads, n) (how many were queued) and poll(max, fn) (fn(payload, len) for
// each datagram from the peer; how many there were); the loops below are templates over them.

class SocketPath {
 public:
  static absl::StatusOr<std::unique_ptr<SocketPath>> open(std::uint32_t local, std::uint32_t peer, std::uint16_t port) {
    auto fd = udp_socket(local, port, peer, port);
    if (!fd.ok()) return fd.status();
    return std::unique_ptr<SocketPath>(new SocketPath(*fd));
  }
  ~SocketPath() { ::close(fd_); }
  SocketPath(const SocketPath&) = delete;
  SocketPath& operator=(const SocketPath&) = delete;

  std::uint32_t send(const std::uint8_t* const* payloads, std::uint32_t len, std::uint32_t n) {
    if (n == 1) return ::send(fd_, payloads[0], len, MSG_DONTWAIT) == static_cast<ssize_t>(len) ? 1 : 0;
    for (std::uint32_t i = 0; i < n; ++i) {
      iov_[i] = {const_cast<std::uint8_t*>(payloads[i]), len};
      msgs_[i] = {};
      msgs_[i].msg_hdr.msg_iov = &iov_[i];
      msgs_[i].msg_hdr.msg_iovlen = 1;
    }
    const int sent = ::sendmmsg(fd_, msgs_, n, MSG_DONTWAIT);
    return sent > 0 ? static_cast<std::uint32_t>(sent) : 0;
  }

  template <class F>
  std::uint32_t poll(std::uint32_t max, F&& fn) {
    if (max == 1) {
      const ssize_t r = ::recv(fd_, rx_[0], sizeof rx_[0], MSG_DONTWAIT);
      if (r <= 0) return 0;
      fn(rx_[0], static_cast<std::size_t>(r));
      return 1;
    }
    for (std::uint32_t i = 0; i < max; ++i) {
      iov_[i] = {rx_[i], sizeof rx_[i]};
      msgs_[i] = {};
      msgs_[i].msg_hdr.msg_iov = &iov_[i];
      msgs_[i].msg_hdr.msg_iovlen = 1;
    }
    const int r = ::recvmmsg(fd_, msgs_, max, MSG_DONTWAIT, nullptr);
    if (r <= 0) return 0;
    for (int i = 0; i < r; ++i) fn(rx_[i], static_cast<std::size_t>(msgs_[i].msg_len));
    return static_cast<std::uint32_t>(r);
  }

  std::string describe() const { return "kernel UDP socket"; }

 private:
  explicit SocketPath(int fd) : fd_(fd) {}
  int fd_;
  mmsghdr msgs_[kMaxBatch];
  iovec iov_[kMaxBatch];
  std::uint8_t rx_[kMaxBatch][2048];
};

// Whether this process holds what AF_XDP needs; an error naming the missing capabilities.
absl::Status check_xdp_capabilities() {
  std::ifstream status("/proc/self/status");
  std::string line;
  std::uint64_t eff = 0;
  while (std::getline(status, line)) {
    if (line.rfind("CapEff:", 0) == 0) eff = std::strtoull(line.c_str() + 7, nullptr, 16);
  }
  auto has = [eff](int cap) { return (eff >> cap & 1) != 0; };
  constexpr int kNetAdmin = 12, kNetRaw = 13, kSysAdmin = 21, kBpf = 39;
  std::string missing;
  if (!has(kNetAdmin)) missing += " CAP_NET_ADMIN";
  if (!has(kNetRaw)) missing += " CAP_NET_RAW";
  if (!has(kBpf) && !has(kSysAdmin)) missing += " CAP_BPF (or CAP_SYS_ADMIN)";
  if (missing.empty()) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat("--mode xdp attaches an XDP program and opens an AF_XDP socket: it needs CAP_NET_ADMIN, CAP_NET_RAW "
                   "and CAP_BPF (or CAP_SYS_ADMIN); missing:",
                   missing, " (run as root)"));
}

class XdpPath {
 public:
  static absl::StatusOr<std::unique_ptr<XdpPath>> open(const Options& o, std::uint32_t local, std::uint32_t peer,
                                                       std::uint16_t port) {
    if (auto caps = check_xdp_capabilities(); !caps.ok()) return caps;
    xdp::XskOptions xo;
    xo.ifname = o.interface;
    xo.queues = {0};
    xo.mode = o.xsk_mode == "auto"        ? xdp::XskMode::kAuto
              : o.xsk_mode == "copy"      ? xdp::XskMode::kCopy
              : o.xsk_mode == "zero-copy" ? xdp::XskMode::kZeroCopy
                                          : xdp::XskMode::kGeneric;
    xo.frame_count = 4096;
    xo.frame_size = 2048;
    auto xsk = xdp::Xsk::open(xo);
    if (!xsk.ok()) return xsk.status();
    std::unique_ptr<XdpPath> p(new XdpPath(std::move(*xsk)));
    if (auto s = p->xsk_->add_destination(local, htons(port)); !s.ok()) return s;
    auto mac = resolve(p->xsk_->ifindex(), local, peer, port, o.timeout_ms);
    if (!mac.ok()) return mac.status();
    auto& a = p->addressing_;
    std::memcpy(a.src_mac, p->xsk_->mac(), 6);
    std::memcpy(a.dst_mac, mac->bytes, 6);
    a.src_addr = local;
    a.dst_addr = peer;
    a.src_port = htons(port);
    a.dst_port = htons(port);
    p->peer_ = peer;
    p->port_ = htons(port);
    return p;
  }

  std::uint32_t send(const std::uint8_t* const* payloads, std::uint32_t len, std::uint32_t n) {
    for (std::uint32_t i = 0; i < n; ++i) tx_[i] = {payloads[i], len};
    xsk_->reap_completions();
    const std::uint32_t queued = xsk_->send_udp4(addressing_, 64, tx_, n);
    xsk_->reap_completions();
    return queued;
  }

  template <class F>
  std::uint32_t poll(std::uint32_t max, F&& fn) {
    const std::uint32_t n = xsk_->rx_peek(rx_, max);
    if (n == 0) return 0;
    std::uint32_t ours = 0;
    for (std::uint32_t i = 0; i < n; ++i) {
      xdp::Udp4View v;
      if (xdp::parse_udp4_frame(rx_[i].data, rx_[i].len, &v) && v.src_addr == peer_ && v.dst_port == port_) {
        fn(v.payload, v.len);
        ++ours;
      }
    }
    xsk_->rx_release();
    return ours;
  }

  std::string describe() const {
    const auto& i = xsk_->info();
    return absl::StrCat("AF_XDP on ", xsk_->ifname(), " queue 0, ", i.native ? "native" : "generic", " attach, ",
                        i.zero_copy ? "zero-copy" : "copy", " bind");
  }
  const xdp::XskInfo& info() const { return xsk_->info(); }
  const xdp::XskStats& stats() const { return xsk_->stats(); }

 private:
  explicit XdpPath(std::unique_ptr<xdp::Xsk> xsk) : xsk_(std::move(xsk)) {}

  // The peer's MAC; when the kernel has no entry, one datagram through a normal UDP socket (to
  // the peer's port: the peer's program hands it to its XSK, which ignores kResolve) makes it ARP.
  static absl::StatusOr<xdp::MacAddress> resolve(int ifindex, std::uint32_t local, std::uint32_t peer,
                                                 std::uint16_t port, std::uint64_t timeout_ms) {
    auto mac = xdp::lookup_neighbour(ifindex, peer);
    if (mac.ok() || !absl::IsNotFound(mac.status())) return mac;
    auto fd = udp_socket(local, 0, peer, port);
    if (!fd.ok()) return fd.status();
    std::uint8_t probe[sizeof(Header)];
    write_header(probe, kResolve, 0);
    const Deadline deadline(timeout_ms);
    std::int64_t next_probe = 0;
    while (!deadline.passed()) {
      if (Clock::now_ns() >= next_probe) {
        (void)!::send(*fd, probe, sizeof probe, 0);
        next_probe = Clock::now_ns() + 200'000'000;
      }
      usleep(5000);
      mac = xdp::lookup_neighbour(ifindex, peer);
      if (mac.ok() || !absl::IsNotFound(mac.status())) break;
    }
    ::close(*fd);
    if (!mac.ok() && absl::IsNotFound(mac.status())) {
      char text[INET_ADDRSTRLEN];
      inet_ntop(AF_INET, &peer, text, sizeof text);
      return absl::NotFoundError(absl::StrCat("no neighbour entry (MAC) for ", text, " after ", timeout_ms,
                                              " ms of ARP attempts: is the peer address on this link?"));
    }
    return mac;
  }

  std::unique_ptr<xdp::Xsk> xsk_;
  xdp::Udp4Addressing addressing_{};
  std::uint32_t peer_ = 0;
  std::uint16_t port_ = 0;
  xdp::TxPayload tx_[kMaxBatch];
  xdp::RxFrame rx_[kMaxBatch];
};

// ---- roles ------------------------------------------------------------------------------------

struct Result {
  bool ok = true;
  std::string error;
  Histogram rtt;
  std::uint64_t timeouts = 0;
  std::uint64_t sent = 0, received = 0, peer_sent = 0;
  bool stop_seen = false;
  double seconds = 0;
};

Result fail(std::string why) {
  Result r;
  r.ok = false;
  r.error = std::move(why);
  return r;
}

// Sends one control message, retrying while the TX path is full (bounded by `deadline`).
template <class P>
bool send_control(P& path, Kind kind, std::uint64_t seq, std::uint32_t size, const Deadline& deadline) {
  std::uint8_t buf[kMaxPayload] = {};
  write_header(buf, kind, seq);
  const std::uint8_t* p = buf;
  while (path.send(&p, size, 1) != 1) {
    if (deadline.passed()) return false;
  }
  return true;
}

// Ping and source: "hello" every 10 ms until the peer's "hello-ack".
template <class P>
bool handshake(P& path, const Options& o, std::uint32_t size) {
  const Deadline deadline(o.timeout_ms);
  while (!deadline.passed()) {
    if (!send_control(path, kHello, 0, size, deadline)) return false;
    const std::int64_t until = Clock::now_ns() + 10'000'000;
    bool acked = false;
    while (!acked && Clock::now_ns() < until) {
      path.poll(kMaxBatch, [&](const std::uint8_t* p, std::size_t len) {
        Header h;
        acked = acked || (read_header(p, len, &h) && h.kind == kHelloAck);
      });
    }
    if (acked) return true;
  }
  return false;
}

// Ping and source: "stop" (carrying how many data messages were sent) a few times, 1 ms apart.
template <class P>
void send_stop(P& path, std::uint64_t sent, std::uint32_t size, const Options& o) {
  const Deadline deadline(o.timeout_ms);
  for (int i = 0; i < 5; ++i) {
    (void)send_control(path, kStop, sent, size, deadline);
    usleep(1000);
  }
}

template <class P>
Result run_ping(P& path, const Options& o, std::uint32_t size) {
  if (!handshake(path, o, size)) return fail("no answer from the pong side (is it running with the same --port?)");
  Result r;
  std::uint8_t buf[kMaxPayload] = {};
  const std::uint8_t* p = buf;
  const std::uint64_t total = o.warmup + o.count;
  std::uint64_t seq = 0, consecutive_timeouts = 0;
  Deadline deadline(o.timeout_ms);
  for (std::uint64_t i = 0; i < total && g_stop == 0;) {
    write_header(buf, kData, ++seq);
    const std::int64_t t0 = Clock::now_ns();
    while (path.send(&p, size, 1) != 1) {
      if (deadline.passed()) return fail("cannot send: the TX path stays full");
    }
    bool echoed = false;
    deadline.extend();
    while (!echoed) {
      path.poll(1, [&](const std::uint8_t* q, std::size_t len) {
        Header h;
        echoed = echoed || (read_header(q, len, &h) && h.kind == kData && h.seq == seq);
      });
      if (!echoed && deadline.passed()) break;
    }
    if (!echoed) {
      ++r.timeouts;
      if (++consecutive_timeouts > 20) return fail("20 round trips in a row without an echo");
      continue;
    }
    consecutive_timeouts = 0;
    if (i >= o.warmup) r.rtt.record(Clock::now_ns() - t0);
    ++i;
  }
  send_stop(path, seq, size, o);
  if (g_stop != 0) return fail("interrupted");
  return r;
}

// Pong and sink: answers "hello", stops at "stop" or after --timeout-ms without traffic. Pong
// echoes every data message; sink counts them.
template <class P>
Result run_receiver(P& path, const Options& o, std::uint32_t size, bool echo) {
  Result r;
  Deadline idle(o.timeout_ms);
  std::int64_t first = 0, last = 0;
  bool started = false;
  while (!r.stop_seen) {
    const std::uint32_t n =
        path.poll(echo ? 1 : static_cast<std::uint32_t>(kMaxBatch), [&](const std::uint8_t* q, std::size_t len) {
          Header h;
          if (!read_header(q, len, &h)) return;
          if (h.kind == kData) {
            last = Clock::now_ns();
            if (r.received++ == 0) first = last;
            if (echo) {
              // Bounded by the idle deadline.
              while (path.send(&q, static_cast<std::uint32_t>(len), 1) != 1 && !idle.passed()) {
              }
            }
          } else if (h.kind == kHello) {
            send_control(path, kHelloAck, 0, size, idle);
          } else if (h.kind == kStop) {
            r.stop_seen = true;
            r.peer_sent = h.seq;
          }
        });
    if (n > 0) {
      idle.extend();
      started = true;
    } else if (idle.passed()) {
      break;
    }
  }
  if (g_stop != 0) return fail("interrupted");
  if (!started) return fail(absl::StrCat("nothing from the peer in ", o.timeout_ms, " ms"));
  r.seconds = static_cast<double>(last - first) / 1e9;
  return r;
}

template <class P>
Result run_source(P& path, const Options& o, std::uint32_t size) {
  if (!handshake(path, o, size)) return fail("no answer from the sink side (is it running with the same --port?)");
  Result r;
  const auto batch = static_cast<std::uint32_t>(o.batch);
  std::vector<std::uint8_t> bufs(static_cast<std::size_t>(batch) * size, 0);
  const std::uint8_t* ptrs[kMaxBatch];
  for (std::uint32_t i = 0; i < batch; ++i) ptrs[i] = bufs.data() + static_cast<std::size_t>(i) * size;
  const std::int64_t start = Clock::now_ns();
  const std::int64_t end = start + static_cast<std::int64_t>(o.seconds) * 1'000'000'000;
  std::int64_t now = start;
  while (now < end && g_stop == 0) {
    for (std::uint32_t i = 0; i < batch; ++i)
      write_header(bufs.data() + static_cast<std::size_t>(i) * size, kData, r.sent + i + 1);
    r.sent += path.send(ptrs, size, batch);
    now = Clock::now_ns();
  }
  r.seconds = static_cast<double>(now - start) / 1e9;
  send_stop(path, r.sent, size, o);
  if (g_stop != 0) return fail("interrupted");
  return r;
}

// ---- output -----------------------------------------------------------------------------------

int report(const Options& o, std::uint32_t size, const std::string& path_desc, const Result& r) {
  if (!r.ok) {
    std::fprintf(stderr, "%s: %s %s: %s\n", kProgram, o.mode.c_str(), o.role.c_str(), r.error.c_str());
    return 1;
  }
  pollux::bench::JsonObject j;
  j.str("program", kProgram).str("mode", o.mode).str("role", o.role).str("interface", o.interface);
  j.str("datapath", path_desc).num("size", size);
  const double rate = r.seconds > 0 ? static_cast<double>(r.received > 0 ? r.received - 1 : 0) / r.seconds : 0.0;
  const std::uint64_t lost = r.peer_sent > r.received ? r.peer_sent - r.received : 0;
  if (o.role == "ping") {
    j.latency(r.rtt).num("timeouts", r.timeouts);
  } else if (o.role == "pong") {
    j.num("echoed", r.received).flag("stop_seen", r.stop_seen);
  } else if (o.role == "source") {
    j.num("sent", r.sent).num("seconds", r.seconds).num("send_msgs_per_s", static_cast<double>(r.sent) / r.seconds);
    j.num("batch", o.batch);
  } else {
    j.num("received", r.received).num("peer_sent", r.peer_sent).num("lost", lost).flag("stop_seen", r.stop_seen);
    j.num("seconds", r.seconds).num("msgs_per_s", rate);
  }
  if (o.json) {
    std::printf("%s\n", j.text().c_str());
    return 0;
  }
  std::printf("%s %s (%s), %u-byte payloads\n", o.mode.c_str(), o.role.c_str(), path_desc.c_str(), size);
  if (o.role == "ping") {
    const Histogram& h = r.rtt;
    std::printf("RTT ns: p50 %lld  p90 %lld  p99 %lld  p99.9 %lld  max %lld  (count %llu, timeouts %llu)\n",
                static_cast<long long>(h.percentile(50)), static_cast<long long>(h.percentile(90)),
                static_cast<long long>(h.percentile(99)), static_cast<long long>(h.percentile(99.9)),
                static_cast<long long>(h.max()), static_cast<unsigned long long>(h.count()),
                static_cast<unsigned long long>(r.timeouts));
  } else if (o.role == "pong") {
    std::printf("echoed %llu%s\n", static_cast<unsigned long long>(r.received),
                r.stop_seen ? "" : " (no stop message: idle timeout)");
  } else if (o.role == "source") {
    std::printf("sent %llu in %.3f s: %.0f msgs/s (batches of %llu)\n", static_cast<unsigned long long>(r.sent),
                r.seconds, static_cast<double>(r.sent) / r.seconds, static_cast<unsigned long long>(o.batch));
  } else {
    std::printf("received %llu of %llu sent (lost %llu) in %.3f s: %.0f msgs/s%s\n",
                static_cast<unsigned long long>(r.received), static_cast<unsigned long long>(r.peer_sent),
                static_cast<unsigned long long>(lost), r.seconds, rate,
                r.stop_seen ? "" : " (no stop message: idle timeout)");
  }
  return 0;
}

template <class P>
int run_role(P& path, const Options& o, std::uint32_t size) {
  Result r;
  if (o.role == "ping") {
    r = run_ping(path, o, size);
  } else if (o.role == "source") {
    r = run_source(path, o, size);
  } else {
    r = run_receiver(path, o, size, o.role == "pong");
  }
  return report(o, size, path.describe(), r);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  pollux::bench::Cli cli(
      kProgram,
      "The floor of the AF_XDP and kernel-socket UDP datapaths between two hosts or network namespaces: one side "
      "per process (ping/pong round trips, source/sink one-way throughput), both busy-polling. "
      "bench/udp/xdp-compare.sh runs both sides over a veth pair.");
  cli.choice("--mode", &o.mode, {"socket", "xdp"},
             "datapath: a kernel UDP socket (recv/send MSG_DONTWAIT, recvmmsg/sendmmsg in batches) or AF_XDP "
             "(transport/udp/xdp/xsk.h: Pollux's XDP program + one XSK on queue 0; needs root)")
      .choice("--role", &o.role, {"ping", "pong", "source", "sink"},
              "ping: measure round trips to a pong; pong: echo; source: send one-way for --seconds; sink: count "
              "and report messages/s")
      .text("--interface", &o.interface, "IF",
            "local interface holding this side's IPv4 address (the XSK's interface in xdp mode); required")
      .text("--peer-addr", &o.peer_addr, "A.B.C.D", "the other side's IPv4 address on that link; required")
      .count("--port", &o.port, "UDP port of both sides (each binds it on its own address)", 1, 65535)
      .count("--size", &o.size, "UDP payload bytes, 16..1472; 0: 32 for ping/pong, 64 for source/sink", 0, kMaxPayload)
      .count("--count", &o.count, "ping: measured round trips", 1)
      .count("--warmup", &o.warmup, "ping: round trips before measuring", 0)
      .count("--seconds", &o.seconds, "source: how long to send", 1, 3600)
      .count("--batch", &o.batch, "source: datagrams per send call (sendmmsg / one TX ring kick)", 1, kMaxBatch)
      .count("--timeout-ms", &o.timeout_ms,
             "longest wait for the peer: the handshake, an echo (then counted as a timeout), or traffic on "
             "pong/sink before they give up",
             10, 600000)
      .choice("--xsk-mode", &o.xsk_mode, {"auto", "copy", "zero-copy", "generic"},
              "xdp mode: native attach + copy bind (copy), zero-copy falling back to copy and generic attach "
              "(auto), native + zero-copy only, or generic (skb) attach")
      .toggle("--json", &o.json, "print one JSON object instead of the text lines")
      .epilog(
          "Example, two namespaces a and b joined by veth xa (10.9.0.1) / xb (10.9.0.2):\n"
          "  ip netns exec b pollux-bench-xdp-floor --mode xdp --role pong --interface xb --peer-addr 10.9.0.1 &\n"
          "  ip netns exec a pollux-bench-xdp-floor --mode xdp --role ping --interface xa --peer-addr 10.9.0.2\n");
  cli.parse(argc, argv);
  if (o.interface.empty() || o.peer_addr.empty()) cli.fail("--interface and --peer-addr are required");
  in_addr peer{};
  if (inet_pton(AF_INET, o.peer_addr.c_str(), &peer) != 1) cli.fail("--peer-addr: not an IPv4 address: " + o.peer_addr);
  if (o.size != 0 && o.size < sizeof(Header)) cli.fail("--size: at least 16 (the benchmark's header)");
  const bool latency = o.role == "ping" || o.role == "pong";
  const auto size = static_cast<std::uint32_t>(o.size != 0 ? o.size : (latency ? 32 : 64));

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  Clock::init();

  auto local = interface_addr(o.interface);
  if (!local.ok()) {
    std::fprintf(stderr, "%s: %s\n", kProgram, std::string(local.status().message()).c_str());
    return 1;
  }
  const auto port = static_cast<std::uint16_t>(o.port);
  if (o.mode == "socket") {
    auto path = SocketPath::open(*local, peer.s_addr, port);
    if (!path.ok()) {
      std::fprintf(stderr, "%s: %s\n", kProgram, path.status().ToString().c_str());
      return 1;
    }
    return run_role(**path, o, size);
  }
  auto path = XdpPath::open(o, *local, peer.s_addr, port);
  if (!path.ok()) {
    std::fprintf(stderr, "%s: %s\n", kProgram, path.status().ToString().c_str());
    return 1;
  }
  return run_role(**path, o, size);
}
