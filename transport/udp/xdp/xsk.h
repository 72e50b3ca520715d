// AF_XDP sockets (XSKs) on the RX queues of one interface, sharing one UMEM, with Pollux's XDP
// program (pollux_xdp.bpf.c, embedded in the library) attached to the interface. docs/XDP.md.
// Every bound queue has its socket, fill ring and RX ring (the kernel redirects a frame to the
// socket of the queue it arrived on); the first queue's socket also transmits.
//
// Control path (open, add/remove_destination, close): may allocate, returns absl::Status.
// Data path (rx_peek/rx_release, send_udp4, reap_completions): no allocation, no exception, no
// lock; one thread at a time (the poller that owns the socket).
//
// The destination MAC is the caller's (neighbour.h looks it up).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "transport/udp/xdp/frame.h"

namespace pollux::transport::udp::xdp {

// How the program is attached and the socket bound.
//   kAuto      native (driver) attach, generic when native fails; zero-copy bind, copy when the
//              driver has no zero-copy support (EOPNOTSUPP)
//   kCopy      native attach, copy bind
//   kZeroCopy  native attach, zero-copy bind (an error where the driver cannot)
//   kGeneric   generic (skb) attach, copy bind: any interface, slowest
enum class XskMode { kAuto, kCopy, kZeroCopy, kGeneric };

// XskOptions::frame_size's default.
inline constexpr std::uint32_t kDefaultFrameSize = 4096;

struct XskOptions {
  std::string ifname;
  // The RX queues to bind, each once (select_queues() in preflight.h picks them for a config).
  std::vector<std::uint32_t> queues = {0};
  XskMode mode = XskMode::kAuto;
  // UMEM frames (a power of two, >= 16): half receive, shared out among the queues' fill rings
  // (at least 8 each), half transmit.
  std::uint32_t frame_count = 4096;
  // Bytes per frame: 2048 or 4096 (aligned chunk mode needs a power of two).
  std::uint32_t frame_size = kDefaultFrameSize;
  // SO_PREFER_BUSY_POLL with SO_BUSY_POLL = busy_poll_us and SO_BUSY_POLL_BUDGET = busy_poll_budget
  // on the socket (0: not set). Drivers without NAPI busy polling ignore them; refused is noted in
  // XskInfo::notes, not an error.
  std::uint32_t busy_poll_us = 0;
  std::uint32_t busy_poll_budget = 0;
};

// What open() ended up with.
struct XskInfo {
  bool native = false;          // native (driver) attach; false: generic (skb)
  bool zero_copy = false;       // the kernel reports XDP_OPTIONS_ZEROCOPY
  bool removed_stale = false;   // a program left by a dead process was detached first
  std::uint32_t stale_pid = 0;  // that process (0 when none)
  std::uint32_t prog_id = 0;    // the attached program's kernel id
  bool huge_pages = false;      // the UMEM is backed by 2 MiB pages
  bool busy_poll = false;       // the busy-poll options were accepted
  std::string notes;            // what was refused, not fatal
};

// A received frame: the Ethernet frame in the UMEM, valid until rx_release().
struct RxFrame {
  const std::uint8_t* data;
  std::uint32_t len;
};

// A datagram to send: its payload (copied into a UMEM frame by send_udp4).
struct TxPayload {
  const void* data;
  std::uint32_t len;
};

// Counters of the data path (plain integers: one thread).
struct XskStats {
  std::uint64_t rx_frames = 0;
  std::uint64_t tx_frames = 0;
  std::uint64_t tx_completions = 0;
  std::uint64_t tx_kicks = 0;
  std::uint64_t tx_kick_errors = 0;   // sendto() failures other than EAGAIN/EBUSY/ENOBUFS
  std::uint64_t tx_kick_retries = 0;  // kicks again because the kernel left frames in the TX ring
  std::uint64_t rx_wakeups = 0;
};

class Xsk {
 public:
  // UMEM headroom of received frames: see open(). With it, the payload of an IPv4/UDP datagram
  // without IP options starts on a kRxPayloadAlign boundary (anything else may not: check).
  static constexpr std::uint32_t kRxHeadroom = 6;
  static constexpr std::uint32_t kRxPayloadAlign = 8;

  // Attaches the program to `options.ifname` (in the calling thread's network namespace), creates
  // the UMEM and a socket on each of `options.queues`, and fills the fill rings. A Pollux program left on
  // the interface by a process that no longer exists is detached first; one a live process owns
  // is an error (FailedPrecondition). Errors name the interface and the step that failed.
  static absl::StatusOr<std::unique_ptr<Xsk>> open(const XskOptions& options);

  // Detaches the program, closes the socket, frees the UMEM.
  ~Xsk();
  Xsk(const Xsk&) = delete;
  Xsk& operator=(const Xsk&) = delete;

  // Redirects IPv4/UDP datagrams to (addr, port) (network byte order; addr 0: any address) to
  // the sockets of the interface's queues.
  absl::Status add_destination(std::uint32_t addr, std::uint16_t port);
  absl::Status remove_destination(std::uint32_t addr, std::uint16_t port);

  // Receive: up to `max` frames of one queue into `out` (the queues take turns); returns how
  // many. They stay valid (and the ring entries taken) until rx_release(), which gives them all
  // back to that queue's fill ring in one batch. Call rx_release() before the next rx_peek().
  std::uint32_t rx_peek(RxFrame* out, std::uint32_t max);
  void rx_release() { rx_release(rx_peeked_); }
  // Whether frames wait in the RX ring (reads the kernel's producer index; no syscall).
  bool rx_available() const;
  // Kicks the kernel's receive side (recvfrom, non-blocking) when the fill ring asks for it
  // (need_wakeup: a zero-copy driver that went to sleep), or always with `always` (preferred busy
  // polling: these calls are what run the driver's NAPI). Returns whether it kicked.
  bool rx_kick(bool always);
  // Gives back the first `consumed` frames of the last rx_peek(); the others stay in the RX ring
  // and come first in the next rx_peek() (which starts at their queue).
  void rx_release(std::uint32_t consumed);
  // Blocks up to `timeout_ms` for received frames (poll); false on timeout. Kicks the kernel
  // first when the fill ring asks for a wakeup.
  bool rx_wait(int timeout_ms);

  // Transmit: builds one frame per payload (headers from `addressing`, TTL `ttl`) in free UMEM
  // frames, submits them to the TX ring and kicks the kernel (sendto) only when the ring's
  // need_wakeup flag asks for it; in copy mode the kernel transmits inside that call, so it sets
  // the flag every time, and takes at most 32 frames per call (EAGAIN when it left some): the
  // frames go in chunks of 32, a kick each, and a chunk the kernel left frames of is kicked
  // again (a bounded number of times). Returns how many were queued: fewer than `n` when frames
  // or ring slots run out (reap_completions() frees them) or a payload does not fit in a frame
  // (that one and the rest are not sent).
  std::uint32_t send_udp4(const Udp4Addressing& addressing, std::uint8_t ttl, const TxPayload* payloads,
                          std::uint32_t n);
  // Takes completed transmissions off the completion ring, freeing their frames; returns how many.
  std::uint32_t reap_completions();
  // Frames sent and not yet completed.
  std::uint32_t tx_in_flight() const { return tx_frames_ - tx_free_count_; }

  const XskInfo& info() const { return info_; }
  const XskStats& stats() const { return stats_; }
  // Readable while a frame waits in any RX ring (level-triggered): the socket itself with one
  // queue, an epoll set of the sockets with several.
  int fd() const;
  // The bound queues, in open order, and a label for them ("queue 0", "queues 0-3", "queues 1,5").
  const std::vector<std::uint32_t>& queues() const { return queues_; }
  // The queue the frames of the last rx_peek() arrived on.
  std::uint32_t last_rx_queue() const { return queues_[rx_queue_]; }
  std::string queues_label() const;
  // "AF_XDP eth0 queues 0-3, copy mode (native XDP), program id 42".
  std::string describe() const;
  // What the kernel dropped on every socket (XDP_STATISTICS: RX ring full, no fill-ring frame,
  // invalid descriptors). A system call per socket: control-path rate.
  std::uint64_t kernel_dropped() const;
  int ifindex() const { return ifindex_; }
  const std::string& ifname() const { return ifname_; }
  // The interface's MAC address (the source of frames sent).
  const std::uint8_t* mac() const { return mac_; }

 private:
  struct Impl;
  explicit Xsk(std::unique_ptr<Impl> impl);
  void close();

  std::unique_ptr<Impl> impl_;
  std::string ifname_;
  int ifindex_ = 0;
  std::uint8_t mac_[6] = {};
  XskInfo info_;
  XskStats stats_;
  std::uint8_t* umem_area_ = nullptr;
  std::uint32_t frame_size_ = 0;
  std::uint32_t tx_frames_ = 0;
  std::uint64_t* tx_free_ = nullptr;  // stack of free TX frame addresses (owned by impl_)
  std::uint32_t tx_free_count_ = 0;
  std::uint32_t rx_peeked_ = 0;
  std::uint32_t rx_peek_index_ = 0;
  std::uint32_t rx_queue_ = 0;  // the queue (index into queues_) of the last rx_peek()
  std::uint32_t rx_next_ = 0;   // where the next rx_peek() starts
  std::vector<std::uint32_t> queues_;
};

// Whether Pollux's program (by name) is attached to `ifindex`, and its kernel id (0: none).
absl::StatusOr<std::uint32_t> attached_pollux_program(int ifindex);

// Pollux's program on `ifindex` and the process its owner map records (what open() reads to
// tell a stale program from a live one; pollux-doctor reports it).
struct PolluxProgramOwner {
  std::uint32_t prog_id = 0;  // 0: no Pollux program attached
  std::uint32_t pid = 0;      // 0: the program has no readable owner record
  bool alive = false;         // that process (pid and /proc start time) still exists
};
absl::StatusOr<PolluxProgramOwner> pollux_program_owner(int ifindex);

}  // namespace pollux::transport::udp::xdp
