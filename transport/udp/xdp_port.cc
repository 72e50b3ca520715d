#include "transport/udp/xdp_port.h"

#include <arpa/inet.h>
#include <linux/if_xdp.h>
#include <net/if.h>
#include <pthread.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "transport/udp/rx_endpoint.h"
#include "transport/udp/xdp/frame.h"
#include "transport/udp/xdp/neighbour.h"
#include "transport/udp/xdp/preflight.h"
#include "transport/udp/xdp/xsk.h"

namespace pollux::transport::udp {
namespace {

constexpr std::uint32_t kFrameSize = 4096;
constexpr std::uint32_t kMaxBatch = 64;

// Ports by (network namespace, ifindex). Control path only.
std::mutex g_mu;
std::map<std::string, std::weak_ptr<XdpPort>>& registry() {
  static auto* r = new std::map<std::string, std::weak_ptr<XdpPort>>();
  return *r;
}

// The calling thread's network namespace (its inode), so that the same ifindex in two namespaces
// of one process (tests) are two ports.
std::string netns_key() {
  struct stat st {};
  if (::stat("/proc/thread-self/ns/net", &st) != 0) return "?";
  return absl::StrCat(st.st_dev, ":", st.st_ino);
}

// The interface's MTU (SIOCGIFMTU), -1 when unknown.
int interface_mtu(const std::string& ifname) {
  ifreq ifr{};
  std::snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname.c_str());
  const int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return -1;
  const int rc = ::ioctl(s, SIOCGIFMTU, &ifr);
  ::close(s);
  return rc == 0 ? ifr.ifr_mtu : -1;
}

xdp::XskMode xsk_mode(UdpXdpMode m) {
  switch (m) {
    case UdpXdpMode::kZeroCopy:
      return xdp::XskMode::kZeroCopy;
    case UdpXdpMode::kCopy:
      return xdp::XskMode::kCopy;
    case UdpXdpMode::kGeneric:
      return xdp::XskMode::kGeneric;
    case UdpXdpMode::kAuto:
      break;
  }
  return xdp::XskMode::kAuto;
}

}  // namespace

absl::StatusOr<std::shared_ptr<XdpPort>> XdpPort::acquire(const core::Config& cfg, const Channel& ch, const void* owner,
                                                          core::CountersFile* counters) {
  const UdpConfig& u = config(cfg);
  if (ch.ifindex == 0 || ch.iface_name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        cfg.source, ": udp.interface: udp.datapath = \"xdp\" needs an interface by name or address (got \"",
        u.interface, "\", the kernel's choice): the AF_XDP socket is bound to one interface"));
  }
  const std::string key = absl::StrCat(netns_key(), "/", ch.ifindex);
  std::unique_lock<std::mutex> lock(g_mu);
  auto& reg = registry();
  if (auto it = reg.find(key); it != reg.end()) {
    if (std::shared_ptr<XdpPort> p = it->second.lock()) {
      if (p->owner_ == owner) return p;
      const std::string msg = absl::StrCat(cfg.source, ": udp.datapath: interface ", ch.iface_name,
                                           " already has this process's AF_XDP socket, driven by ",
                                           p->inline_ ? "inline endpoints" : "another poller",
                                           ", and a queue takes one socket: open every XDP stream on ", ch.iface_name,
                                           " on the same poller (or all inline on one thread)");
      // The last reference may go with `p` (its owner closed meanwhile): its destructor takes
      // the registry's lock.
      lock.unlock();
      return absl::FailedPreconditionError(msg);
    }
  }
  // Every RX queue unless udp.xdp_queues names the ones the streams are steered to: the
  // kernel hands a frame to the socket of the queue it arrived on.
  absl::StatusOr<std::vector<std::uint32_t>> queues = xdp::select_queues(ch.iface_name, u.xdp_queues, "udp.xdp_queues");
  if (!queues.ok())
    return absl::Status(queues.status().code(), absl::StrCat(cfg.source, ": ", queues.status().message()));
  if (const int mtu = interface_mtu(ch.iface_name); mtu > 0 && u.mtu > static_cast<std::uint32_t>(mtu)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: udp.mtu: %u is larger than interface %s's MTU %d: an AF_XDP frame that large would be dropped (no "
        "fragmentation): set udp.mtu = %d",
        cfg.source, u.mtu, ch.iface_name, mtu, mtu));
  }
  const std::uint64_t umem = static_cast<std::uint64_t>(u.xdp_frames) * kFrameSize;
  if (std::string why = xdp::preflight(ch.iface_name, umem, "udp.datapath = \"socket\"", "udp.xdp_frames");
      !why.empty()) {
    return absl::PermissionDeniedError(absl::StrCat(cfg.source, ": udp.datapath: ", why));
  }
  xdp::XskOptions o;
  o.ifname = ch.iface_name;
  o.queues = *queues;
  o.mode = xsk_mode(u.xdp_mode);
  o.frame_count = u.xdp_frames;
  o.frame_size = kFrameSize;
  if (u.xdp_busy_poll) {
    o.busy_poll_us = u.busy_poll_us > 0 ? u.busy_poll_us : 50;
    o.busy_poll_budget = u.rx_batch;
  }
  auto xsk = xdp::Xsk::open(o);
  if (!xsk.ok()) {
    return absl::Status(xsk.status().code(), absl::StrCat(cfg.source, ": udp.datapath: ", xsk.status().message()));
  }
  std::shared_ptr<XdpPort> p(new XdpPort());
  p->xsk_.reset(xsk->release());
  p->ifname_ = ch.iface_name;
  p->src_addr_ = ch.iface.s_addr;
  p->rx_batch_ = std::min(u.rx_batch, kMaxBatch);
  p->partial_queues_ = queues->size() < xdp::rx_queue_count(ch.iface_name);
  p->busy_poll_ = p->xsk_->info().busy_poll;
  p->owner_ = owner;
  p->inline_ = owner == nullptr;
  p->key_ = key;
  if (counters != nullptr) {
    const std::string scope = absl::StrCat("udp xdp ", ch.iface_name);
    p->c_.allocate([&](std::string_view n) { return counters->allocate(scope, n); });
    p->counters_ = true;
  }
  reg[key] = p;
  return p;
}

void XdpPort::XskDeleter::operator()(xdp::Xsk* x) const noexcept { delete x; }

XdpPort::~XdpPort() {
  std::lock_guard<std::mutex> lock(g_mu);
  auto& reg = registry();
  if (auto it = reg.find(key_); it != reg.end() && it->second.expired()) reg.erase(it);
}

absl::Status XdpPort::add_rx(std::uint32_t addr, std::uint16_t port, UdpRxEndpoint* ep) {
  std::lock_guard<std::mutex> lock(g_mu);
  std::uint32_t free_slot = kMaxSinks;
  bool known = false;
  const std::uint32_t n = nsinks_.load(std::memory_order_relaxed);
  for (std::uint32_t i = 0; i < kMaxSinks; ++i) {
    const bool used = i < n && sinks_[i].ep.load(std::memory_order_acquire) != nullptr;
    if (!used && free_slot == kMaxSinks) free_slot = i;
    known |= used && sinks_[i].addr == addr && sinks_[i].port == port;
  }
  if (free_slot == kMaxSinks) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "AF_XDP on interface %s: %u subscribers already share this process's socket (the most it takes)", ifname_,
        kMaxSinks));
  }
  // The program's map holds one entry per destination: a second subscriber of one adds none.
  if (!known) {
    if (absl::Status st = xsk_->add_destination(addr, port); !st.ok()) return st;
  }
  Sink& s = sinks_[free_slot];
  s.addr = addr;
  s.port = port;
  s.ep.store(ep, std::memory_order_release);  // pairs with poll()'s acquire: addr and port are set
  if (free_slot >= n) nsinks_.store(free_slot + 1, std::memory_order_release);
  return absl::OkStatus();
}

void XdpPort::remove_rx(UdpRxEndpoint* ep) noexcept {
  std::lock_guard<std::mutex> lock(g_mu);
  const std::uint32_t n = nsinks_.load(std::memory_order_relaxed);
  for (std::uint32_t i = 0; i < n; ++i) {
    if (sinks_[i].ep.load(std::memory_order_relaxed) != ep) continue;
    sinks_[i].ep.store(nullptr, std::memory_order_release);
    bool still = false;
    for (std::uint32_t j = 0; j < n; ++j) {
      still |= sinks_[j].ep.load(std::memory_order_relaxed) != nullptr && sinks_[j].addr == sinks_[i].addr &&
               sinks_[j].port == sinks_[i].port;
    }
    // Back to the kernel's stack (the endpoint's socket is still open until it closes it).
    if (!still) (void)xsk_->remove_destination(sinks_[i].addr, sinks_[i].port);
    return;
  }
}

bool XdpPort::on_owner_thread() noexcept {
  if (!inline_) return true;  // a poller's source: one thread by construction
  const unsigned long self = static_cast<unsigned long>(pthread_self());
  if (__builtin_expect(owner_thread_ == self, 1)) return true;
  if (owner_thread_ == 0) {
    owner_thread_ = self;
    return true;
  }
  ++wrong_thread_;
  return false;
}

void XdpPort::drained_all(std::int64_t now_ns) noexcept {
  const std::uint32_t n = nsinks_.load(std::memory_order_acquire);
  for (std::uint32_t i = 0; i < n; ++i) {
    if (UdpRxEndpoint* ep = sinks_[i].ep.load(std::memory_order_acquire)) ep->receiver_.drained(now_ns);
  }
}

std::uint32_t XdpPort::poll(std::int64_t now_ns) noexcept {
  if (__builtin_expect(!on_owner_thread(), 0)) return 0;
  xdp::RxFrame frames[kMaxBatch];
  const std::uint32_t n = xsk_->rx_peek(frames, rx_batch_);
  const std::uint32_t nsinks = nsinks_.load(std::memory_order_acquire);
  std::uint32_t consumed = 0;
  for (; consumed < n; ++consumed) {
    const xdp::RxFrame& f = frames[consumed];
    xdp::Udp4View v;
    if (__builtin_expect(!xdp::parse_udp4_frame(f.data, f.len, &v), 0)) {
      ++rx_malformed_;
      continue;
    }
    const xdp::Checksums sums = xdp::check_udp4_checksums(f.data, v);
    if (__builtin_expect(sums != xdp::Checksums::kOk, 0)) {
      if (sums == xdp::Checksums::kBad) {
        ++rx_malformed_;
        continue;
      }
      ++rx_partial_checksums_;
    }
    // Every subscriber of the destination gets it (as every socket bound to a multicast group
    // does); none with room: leave it and the rest in the ring.
    std::uint32_t matched = 0, taken = 0;
    for (std::uint32_t i = 0; i < nsinks; ++i) {
      UdpRxEndpoint* ep = sinks_[i].ep.load(std::memory_order_acquire);  // pairs with add_rx()'s release
      if (ep == nullptr || sinks_[i].port != v.dst_port || (sinks_[i].addr != 0 && sinks_[i].addr != v.dst_addr)) {
        continue;
      }
      ++matched;
      taken += ep->xdp_datagram(v.payload, static_cast<std::uint32_t>(v.len), v.src_addr, v.src_port, now_ns);
    }
    if (__builtin_expect(matched == 0, 0)) {
      ++rx_unmatched_;
    } else if (__builtin_expect(taken < matched, 0)) {
      if (taken == 0) break;
      rx_overflow_ += matched - taken;
    }
  }
  xsk_->rx_release(consumed);
  if (consumed == n && n < rx_batch_) {
    drained_all(now_ns);  // the ring was emptied
    // A zero-copy driver that asked for a wakeup, or preferred busy polling (these calls run the
    // driver's receive processing): one non-blocking recvfrom. Copy mode never asks.
    if (n == 0) (void)xsk_->rx_kick(busy_poll_);
  }
  return consumed;
}

XdpPort::Direct XdpPort::direct_peek(const UdpRxEndpoint* ep, std::int64_t now_ns, DirectFrame* out) noexcept {
  if (__builtin_expect(!on_owner_thread(), 0)) return Direct::kEmpty;
  const std::uint32_t nsinks = nsinks_.load(std::memory_order_acquire);
  // Bounded: a burst of junk is left to the next call (or to poll()).
  for (int skipped = 0; skipped < 8; ++skipped) {
    xdp::RxFrame f;
    if (xsk_->rx_peek(&f, 1) == 0) {
      xsk_->rx_release(0);
      drained_all(now_ns);
      return Direct::kEmpty;
    }
    xdp::Udp4View v;
    const xdp::Checksums sums =
        xdp::parse_udp4_frame(f.data, f.len, &v) ? xdp::check_udp4_checksums(f.data, v) : xdp::Checksums::kBad;
    if (__builtin_expect(sums == xdp::Checksums::kBad, 0)) {
      ++rx_malformed_;
      xsk_->rx_release(1);
      continue;
    }
    std::uint32_t matched = 0;
    bool mine = false;
    for (std::uint32_t i = 0; i < nsinks; ++i) {
      const UdpRxEndpoint* s = sinks_[i].ep.load(std::memory_order_acquire);  // pairs with add_rx()'s release
      if (s == nullptr || sinks_[i].port != v.dst_port || (sinks_[i].addr != 0 && sinks_[i].addr != v.dst_addr)) {
        continue;
      }
      ++matched;
      mine |= s == ep;
    }
    if (__builtin_expect(matched == 0, 0)) {
      ++rx_unmatched_;
      xsk_->rx_release(1);
      continue;
    }
    // Read in place only where the frames are aligned as in a receive buffer (IP options or a
    // driver's own headroom can move them): otherwise the general path copies.
    const bool aligned = reinterpret_cast<std::uintptr_t>(v.payload) % xdp::Xsk::kRxPayloadAlign == 0;
    if (matched != 1 || !mine || !aligned || sums != xdp::Checksums::kOk) {
      xsk_->rx_release(0);  // poll() hands it out
      return Direct::kSlow;
    }
    *out = DirectFrame{v.payload, static_cast<std::uint32_t>(v.len), v.src_addr, v.src_port};
    return Direct::kFrame;
  }
  return Direct::kSlow;
}

void XdpPort::direct_done() noexcept { xsk_->rx_release(1); }

void XdpPort::direct_keep() noexcept { xsk_->rx_release(0); }

std::uint32_t XdpPort::send(const sockaddr_in& dest, const std::uint8_t dst_mac[6], std::uint16_t src_port,
                            std::uint8_t ttl, std::span<const reliability::DatagramSink::Datagram> d) noexcept {
  if (__builtin_expect(!on_owner_thread(), 0)) return 0;
  xsk_->reap_completions();
  xdp::Udp4Addressing a;
  std::memcpy(a.src_mac, xsk_->mac(), 6);
  std::memcpy(a.dst_mac, dst_mac, 6);
  a.src_addr = src_addr_;
  a.dst_addr = dest.sin_addr.s_addr;
  a.src_port = src_port;
  a.dst_port = dest.sin_port;
  xdp::TxPayload payloads[kMaxBatch];
  std::uint32_t total = 0;
  while (total < d.size()) {
    const std::uint32_t k = std::min<std::uint32_t>(static_cast<std::uint32_t>(d.size()) - total, kMaxBatch);
    for (std::uint32_t i = 0; i < k; ++i) payloads[i] = xdp::TxPayload{d[total + i].data, d[total + i].bytes};
    std::uint32_t sent = xsk_->send_udp4(a, ttl, payloads, k);
    if (sent < k && xsk_->reap_completions() > 0) sent += xsk_->send_udp4(a, ttl, payloads + sent, k - sent);
    total += sent;
    if (sent < k) {
      ++tx_full_;
      break;
    }
  }
  return total;
}

bool XdpPort::resolve(const sockaddr_in& dest, std::uint8_t out[6]) const noexcept {
  const std::uint32_t addr = dest.sin_addr.s_addr;
  if (IN_MULTICAST(ntohl(addr))) {
    const xdp::MacAddress m = xdp::multicast_mac(addr);
    std::memcpy(out, m.bytes, 6);
    return true;
  }
  // The route's next hop: the destination on the link, or its gateway.
  absl::StatusOr<std::uint32_t> hop = xdp::next_hop(xsk_->ifindex(), addr);
  absl::StatusOr<xdp::MacAddress> m = xdp::lookup_neighbour(xsk_->ifindex(), hop.ok() ? *hop : addr);
  if (!m.ok()) return false;
  std::memcpy(out, m->bytes, 6);
  return true;
}

int XdpPort::fd() const noexcept { return xsk_->fd(); }

bool XdpPort::rx_pending() const noexcept { return xsk_->rx_available(); }

std::uint32_t XdpPort::max_payload() const noexcept {
  return kFrameSize - static_cast<std::uint32_t>(xdp::kUdp4HeadersSize);
}

int XdpPort::mode_code() const noexcept {
  const xdp::XskInfo& i = xsk_->info();
  return i.zero_copy ? 1 : i.native ? 2 : 3;
}

std::string XdpPort::describe() const {
  const xdp::XskInfo& i = xsk_->info();
  return absl::StrCat(xsk_->describe(), i.huge_pages ? ", UMEM on 2 MiB pages" : "",
                      i.busy_poll ? ", preferred busy polling" : "",
                      i.removed_stale ? absl::StrFormat(", removed a stale program of pid %u", i.stale_pid) : "",
                      i.notes.empty() ? "" : absl::StrCat(" (", i.notes, ")"));
}

void XdpPort::publish_counters(std::int64_t now_ns) noexcept {
  if (now_ns >= next_stats_ns_) {
    next_stats_ns_ = now_ns + 100'000'000;
    kernel_dropped_ = xsk_->kernel_dropped();
  }
  if (!counters_) return;
  const XdpPort& p = *this;
  const xdp::XskStats& x = xsk_->stats();
  POLLUX_COUNTER_PUBLISH(POLLUX_UDP_XDP_COUNTERS, c_);
  (void)p;
  (void)x;
}

}  // namespace pollux::transport::udp
