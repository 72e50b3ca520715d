// Plain UDP datagrams received through an AF_XDP socket (docs/XDP.md), for an application that
// reads another protocol's datagrams (an exchange's MoldUDP64 lines, say) with Pollux's XDP
// datapath: the frames to the destinations added go to this process's socket on the interface
// instead of the kernel's stack, and come out of poll() checked (IPv4/UDP, lengths, checksums;
// what fails is counted and dropped). Multicast groups are joined through a kernel socket (IGMP)
// that never reads.
//
// Control path (open, add): may allocate, returns absl::Status errors that say the fix
// (capabilities, ulimit -l, the interface's queues, a build without AF_XDP).
// Data path (poll, pending): no allocation, no lock, one virtual call per batch; one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "pollux/export.h"

namespace pollux {

namespace detail {
class DatagramReceiverImpl;
}

struct DatagramReceiverOptions {
  std::string interface;          // the interface by name (required: the socket binds one)
  std::string xdp_mode = "auto";  // "auto", "copy", "zerocopy" (an error where the driver cannot), "generic"
  int queue = -1;                 // the RX queue the lines are steered to; -1: every RX queue
  std::uint32_t frames = 4096;    // UMEM frames of 4096 bytes (locked memory: frames * 4096)
};

// One received datagram; its bytes are valid during the callback only.
struct Datagram {
  std::span<const std::uint8_t> bytes;
  std::uint32_t line;      // add()'s id for its destination
  std::uint32_t src_addr;  // the sender, network byte order
  std::uint16_t src_port;  // network byte order
  // Receive time, ns since the epoch (CLOCK_REALTIME). kernel_time: the kernel stamped it on
  // arrival; false: the poller read its clock when it took the batch off the ring (AF_XDP frames
  // carry no kernel stamp).
  std::int64_t rx_ns;
  bool kernel_time;
};

struct DatagramReceiverStats {
  std::uint64_t frames = 0;             // frames taken off the ring
  std::uint64_t malformed = 0;          // dropped: not IPv4/UDP, lengths that do not fit, a wrong checksum
  std::uint64_t partial_checksums = 0;  // UDP checksum left to a virtual link's device (taken, as the kernel does)
  std::uint64_t unmatched = 0;          // dropped: for no destination added
  std::uint64_t kernel_dropped = 0;     // dropped by the kernel: ring full, no free frame
};

class DatagramReceiver {
 public:
  static constexpr std::uint32_t kMaxBatch = 64;

  // Attaches Pollux's XDP program to options.interface (in the calling thread's network
  // namespace) and opens the socket.
  POLLUX_API static absl::StatusOr<std::unique_ptr<DatagramReceiver>> open(const DatagramReceiverOptions& options);
  POLLUX_API ~DatagramReceiver();
  DatagramReceiver(const DatagramReceiver&) = delete;
  DatagramReceiver& operator=(const DatagramReceiver&) = delete;

  // Receives datagrams to "ADDRESS:PORT" (an IPv4 multicast group, joined on the interface, or a
  // unicast address); `source` (an IPv4 address, "" = any) makes the join source-specific where
  // the kernel can (check Datagram::src_addr where it cannot). Returns the line id.
  POLLUX_API absl::StatusOr<std::uint32_t> add(std::string_view address_port, std::string_view source = "");

  // Hands up to `max` (at most kMaxBatch) datagrams to `f(const Datagram&)`; returns how many.
  template <class F>
  std::uint32_t poll(F&& f, std::uint32_t max = 32) {
    const std::uint32_t n = peek(max);
    for (std::uint32_t i = 0; i < n; ++i) f(static_cast<const Datagram&>(batch_[i]));
    release();
    return n;
  }

  // The socket's descriptor, to sleep on (POLLIN) when pending() is false.
  POLLUX_API int fd() const noexcept;
  POLLUX_API bool pending() const noexcept;
  // Reads the kernel's drop count (a system call): not per datagram.
  POLLUX_API DatagramReceiverStats stats() noexcept;
  // "AF_XDP eth1 queue 0, copy mode (native XDP), program id 42".
  POLLUX_API std::string describe() const;

 private:
  explicit DatagramReceiver(std::unique_ptr<detail::DatagramReceiverImpl> impl);
  POLLUX_API std::uint32_t peek(std::uint32_t max) noexcept;
  POLLUX_API void release() noexcept;

  std::unique_ptr<detail::DatagramReceiverImpl> impl_;
  Datagram batch_[kMaxBatch] = {};
};

}  // namespace pollux
