// pollux-feed's packet capture (feed.capture): every datagram the live handler reads, as a
// pcap record (libpcap's nanosecond format, Ethernet/IPv4/UDP rebuilt around it, the kernel's
// receive time), written to disk by a thread of its own.
//
// The handler's thread only copies a record into a single-producer ring (Boost.Lockfree
// spsc_queue of bytes, sized once) and never waits: when the ring has no room the record is
// dropped and counted (capture_dropped), never the feed. The writer thread takes whole
// records off the ring in batches and writes them with write(2); with a rotation size the
// capture goes on in PATH.1, PATH.2, ... (each a complete pcap file, as tcpdump -C). A file
// that cannot be opened or written (a bad path, a full disk) stops the capture: the error is
// kept for the summary, printed once on stderr, and the feed goes on.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <boost/lockfree/spsc_queue.hpp>

#include "feed_handler/source/pcap_format.h"

namespace pollux::feed {

class CaptureWriter {
 public:
  struct Options {
    std::string path;
    std::uint64_t rotate_bytes = 0;          // 0: one file
    std::uint64_t buffer_bytes = 64u << 20;  // the ring between the handler and the writer
  };
  struct Stats {
    std::uint64_t records = 0;         // written to a file
    std::uint64_t bytes = 0;           // file bytes written (headers included)
    std::uint64_t dropped = 0;         // records the ring had no room for
    std::uint64_t files = 0;           // files opened
    std::uint64_t no_kernel_time = 0;  // records stamped with the handler's clock (no kernel time came)
  };

  // Opens PATH and starts the writer. Never fails: a path that cannot be written leaves the
  // capture stopped with error() set (the feed goes on). Removes PATH.1, PATH.2, ... left by
  // an earlier capture to the same path, so a rotated set is always one capture.
  explicit CaptureWriter(Options o);
  ~CaptureWriter();
  CaptureWriter(const CaptureWriter&) = delete;
  CaptureWriter& operator=(const CaptureWriter&) = delete;

  // Handler thread only. `ts_ns`: receive time, ns since the epoch (-1: none came; the
  // handler's realtime clock is used and counted). Copies the datagram into the ring or
  // counts it dropped; never blocks, never allocates.
  void record(std::int64_t ts_ns, const pcap::Endpoint& src, const pcap::Endpoint& dst,
              std::span<const std::uint8_t> payload) noexcept;

  // Writes what the ring holds, stops the writer and closes the file. Idempotent.
  void stop();

  // Safe from any thread while running (counters are relaxed atomics).
  Stats stats() const noexcept;
  // Why the capture stopped, "" while it has not (any thread: error_ is written once, before
  // failed_ is set with release).
  std::string error() const { return failed_.load(std::memory_order_acquire) ? error_ : std::string(); }
  const std::string& path() const noexcept { return o_.path; }

 private:
  void run();
  bool open_file(std::uint64_t index);                   // false: error_ set
  bool close_file();                                     // false: error_ set
  bool write_all(const std::uint8_t* p, std::size_t n);  // false: error_ set
  void fail(std::string what);

  Options o_;
  boost::lockfree::spsc_queue<std::uint8_t> ring_;
  std::vector<std::uint8_t> buf_;  // the writer's batch
  int fd_ = -1;
  std::uint64_t file_index_ = 0, file_bytes_ = 0;
  std::uint16_t ip_id_ = 0;
  std::string error_;
  // failed_: set by whichever thread found the error, after error_ (release); the handler
  // reads it relaxed (it only stops recording) and stop() after the join.
  std::atomic<bool> failed_{false};
  std::atomic<bool> stopping_{false};  // stop() -> writer: drain and end (release/acquire)
  std::atomic<std::uint64_t> records_{0}, bytes_{0}, dropped_{0}, files_{0}, no_kernel_time_{0};
  std::thread writer_;
  bool stopped_ = false;
};

}  // namespace pollux::feed
