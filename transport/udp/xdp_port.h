// The UDP transport's AF_XDP datapath (udp.datapath = "xdp", docs/XDP.md): one AF_XDP socket
// (xdp::Xsk) per interface and owner, shared by the owner's endpoints on that interface.
//
// Owner: the poller's UdpPollerSource for endpoints opened on a poller, or "inline" for the
// endpoints the application's thread drives itself. A queue takes one socket, so a second owner
// on the same interface (another poller, or inline endpoints next to poller ones) is refused at
// open with the fix; inline endpoints sharing a port must be driven by one thread (the first one
// that uses the port: any other is refused on the data path and counted in xdp_wrong_thread).
//
// Receive: poll() takes a batch off the RX ring, checks each frame (IPv4/UDP, lengths, checksums:
// xdp::check_udp4_checksums),
// and copies its payload into a free buffer of every subscriber endpoint registered for its
// destination (address, port), which then handles it as a datagram read from a socket. A frame
// none of its subscribers has room for stays in the ring (back-pressure, as a full socket buffer);
// one some of them have no room for is dropped for those (counted; they NAK it).
// Transmit: send() builds Ethernet/IPv4/UDP frames in the UMEM (xdp::Xsk::send_udp4). The
// kernel sockets stay: subscribers join multicast groups (IGMP) and send NAKs and status messages
// through theirs; publishers receive NAKs and status messages on theirs (only data destinations
// are in the XDP program's map) and send through it while a unicast destination's MAC is unknown,
// which also makes the kernel resolve it.
#pragma once

#include <netinet/in.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/config.h"
#include "core/counter_set.h"
#include "core/counters.h"
#include "transport/reliability/sender.h"
#include "transport/udp/udp_socket.h"

namespace pollux::transport::udp {

class UdpRxEndpoint;
namespace xdp {
class Xsk;
}

// What one port counts (scope "udp xdp IFNAME"). Publish names: `p` (the port), `x` (its Xsk
// statistics).
#define POLLUX_UDP_XDP_COUNTERS(X)                                                                                     \
  X(mode, "xdp_mode", "AF_XDP mode in use: 1 zero-copy, 2 copy (native XDP), 3 generic (skb) XDP", p.mode_code())      \
  X(rx_frames, "xdp_rx_frames", "frames taken off the AF_XDP RX ring", x.rx_frames)                                    \
  X(rx_malformed, "xdp_rx_malformed",                                                                                  \
    "frames dropped: not an unfragmented IPv4/UDP datagram whose lengths fit the frame, or a wrong IPv4/UDP checksum", \
    p.rx_malformed_)                                                                                                   \
  X(rx_partial_checksums, "xdp_rx_partial_checksums",                                                                  \
    "datagrams whose UDP checksum a virtual link left to a device that never computed it (taken, as the kernel does)", \
    p.rx_partial_checksums_)                                                                                           \
  X(rx_unmatched, "xdp_rx_unmatched", "datagrams for a destination no subscriber of this process has (dropped)",       \
    p.rx_unmatched_)                                                                                                   \
  X(rx_overflow, "xdp_rx_overflow",                                                                                    \
    "datagrams dropped for a subscriber with no free buffer while another subscriber took them (repaired by NAK)",     \
    p.rx_overflow_)                                                                                                    \
  X(rx_kernel_dropped, "xdp_rx_kernel_dropped",                                                                        \
    "frames the kernel dropped: RX ring full, no fill-ring frame, or invalid (XDP_STATISTICS)", p.kernel_dropped_)     \
  X(tx_frames, "xdp_tx_frames", "frames put on the AF_XDP TX ring", x.tx_frames)                                       \
  X(tx_kicks, "xdp_tx_kicks", "sendto() kicks the TX ring's need_wakeup flag asked for", x.tx_kicks)                   \
  X(rx_kicks, "xdp_rx_kicks", "recvfrom() kicks: the fill ring's need_wakeup, or preferred busy polling",              \
    x.rx_wakeups)                                                                                                      \
  X(tx_full, "xdp_tx_full", "sends that found no free UMEM frame or TX ring slot (the rest retried later)",            \
    p.tx_full_)                                                                                                        \
  X(wrong_thread, "xdp_wrong_thread", "data-path calls refused: a second thread drove inline endpoints of one port",   \
    p.wrong_thread_)

class XdpPort {
 public:
  // The port of `ch`'s interface for `owner` (a UdpPollerSource, or null: inline), opened on first
  // use in the calling thread's network namespace. Errors name the interface, the cause and the
  // fix (capabilities, ulimit -l, ethtool -L / udp.xdp_queues, another owner).
  static absl::StatusOr<std::shared_ptr<XdpPort>> acquire(const core::Config& cfg, const Channel& ch, const void* owner,
                                                          core::CountersFile* counters);
  ~XdpPort();
  XdpPort(const XdpPort&) = delete;
  XdpPort& operator=(const XdpPort&) = delete;

  // Control path. Frames to (addr, port) (network byte order; addr 0 = any) go to `ep`.
  absl::Status add_rx(std::uint32_t addr, std::uint16_t port, UdpRxEndpoint* ep);
  void remove_rx(UdpRxEndpoint* ep) noexcept;

  // Data path (the owner's thread). Reads up to one batch of frames and hands each to its
  // subscribers; returns the frames taken off the ring. When it leaves the ring empty, every
  // subscriber is told it drained (ReliableReceiver::drained).
  std::uint32_t poll(std::int64_t now_ns) noexcept;
  // Inline direct path (UdpRxEndpoint::poll_direct): the next frame in the ring when it is a
  // valid datagram for `ep` alone (kFrame), left in the ring (its payload is valid until
  // direct_done()). Malformed and unmatched frames before it are counted and given back. When the ring is
  // empty (kEmpty; the subscribers are told they drained) or the next frame needs poll() (kSlow: another
  // subscriber's, or a partial checksum): nothing is taken then.
  enum class Direct : std::uint8_t { kEmpty, kFrame, kSlow };
  struct DirectFrame {
    const std::uint8_t* payload;
    std::uint32_t len;
    std::uint32_t src_addr;  // network byte order
    std::uint16_t src_port;
  };
  Direct direct_peek(const UdpRxEndpoint* ep, std::int64_t now_ns, DirectFrame* out) noexcept;
  // Gives the frame direct_peek() returned back to the fill ring (done), or leaves it first in
  // the RX ring (keep: the subscriber had no room for it).
  void direct_done() noexcept;
  void direct_keep() noexcept;

  // Sends `d` to `dest` (a MAC known: see resolve()); returns how many went out (fewer: UMEM
  // frames or ring slots ran out; retry after completions come back).
  std::uint32_t send(const sockaddr_in& dest, const std::uint8_t dst_mac[6], std::uint16_t src_port, std::uint8_t ttl,
                     std::span<const reliability::DatagramSink::Datagram> d) noexcept;
  // The MAC frames to `dest` go to: the multicast mapping, or the kernel's neighbour table entry
  // (false: none yet; send through the kernel socket, which resolves it, and ask again later).
  // Control path cost (a netlink dump for unicast): call it at open and from timers, not per send.
  bool resolve(const sockaddr_in& dest, std::uint8_t out[6]) const noexcept;

  int fd() const noexcept;
  // Some RX queues of the interface have no AF_XDP socket (udp.xdp_queues lists fewer): the
  // stream's frames that arrive there reach the kernel's socket.
  bool partial_queues() const noexcept { return partial_queues_; }
  // Frames waiting in the RX ring (a sleep must not be armed on them).
  bool rx_pending() const noexcept;
  std::uint32_t max_payload() const noexcept;
  const std::string& ifname() const noexcept { return ifname_; }
  // "AF_XDP eth0 queues 0-3, copy mode (native XDP), program id 42, 4096 frames ..."
  std::string describe() const;
  // Publishes the counters; reads the kernel's drop statistics (a syscall) at most every 100 ms.
  void publish_counters(std::int64_t now_ns) noexcept;
  int mode_code() const noexcept;

 private:
  XdpPort() = default;
  bool on_owner_thread() noexcept;
  void drained_all(std::int64_t now_ns) noexcept;

  // The subscribers, in a fixed table the data path reads without a lock: add_rx() (any thread,
  // under the registry's mutex) writes addr and port, then publishes ep with a release store that
  // poll()'s acquire load pairs with; remove_rx() runs on the thread that drives the port (the
  // endpoint's close), so no poll() is using the entry when it is cleared.
  static constexpr std::uint32_t kMaxSinks = 32;
  struct Sink {
    std::uint32_t addr = 0;  // network byte order; 0 = any
    std::uint16_t port = 0;  // network byte order
    std::atomic<UdpRxEndpoint*> ep{nullptr};
  };
  Sink sinks_[kMaxSinks];
  std::atomic<std::uint32_t> nsinks_{0};  // entries [0, nsinks_) may be in use (release/acquire as ep)
  // Deleted where the socket's class is defined (a build without AF_XDP has none to delete).
  struct XskDeleter {
    void operator()(xdp::Xsk* x) const noexcept;
  };
  std::unique_ptr<xdp::Xsk, XskDeleter> xsk_;
  std::string ifname_;
  std::uint32_t src_addr_ = 0;  // the interface's IPv4 address (network byte order)
  std::uint32_t rx_batch_ = 32;
  bool partial_queues_ = false;
  bool busy_poll_ = false;  // preferred busy polling accepted: empty polls kick the driver
  const void* owner_ = nullptr;
  bool inline_ = false;
  unsigned long owner_thread_ = 0;  // inline: the thread that drives it (pthread_t; 0 = not yet)
  std::string key_;                 // the registry's key (network namespace + ifindex)
  std::uint64_t rx_malformed_ = 0, rx_unmatched_ = 0, rx_overflow_ = 0, tx_full_ = 0, wrong_thread_ = 0;
  std::uint64_t kernel_dropped_ = 0, rx_partial_checksums_ = 0;
  std::int64_t next_stats_ns_ = 0;
  POLLUX_COUNTER_SET(Counters, POLLUX_UDP_XDP_COUNTERS);
  Counters c_;
  bool counters_ = false;
};

}  // namespace pollux::transport::udp
