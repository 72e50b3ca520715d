#include "feed_handler/source/capture.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pollux::feed {

namespace {

// The writer's batch: whole records taken off the ring and written with one write(2). Holds
// at least one record of the largest datagram.
constexpr std::size_t kBatchBytes = 4u << 20;
static_assert(kBatchBytes >= pcap::kRecordOverhead + pcap::kMaxUdpPayload);
// The writer sleeps this long when the ring is empty: at 10 Gb/s that is 1.25 MB of ring.
constexpr auto kIdleSleep = std::chrono::milliseconds(1);

std::int64_t realtime_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

CaptureWriter::CaptureWriter(Options o)
    : o_(std::move(o)), ring_(static_cast<std::size_t>(o_.buffer_bytes)), buf_(kBatchBytes) {
  // Pages of the ring and the batch are touched now, not by the handler's first pass.
  {
    std::vector<std::uint8_t> zeros(1u << 20, 0);
    for (std::uint64_t done = 0; done < o_.buffer_bytes; done += zeros.size()) {
      const std::size_t n = ring_.push(zeros.data(), zeros.size());
      while (ring_.pop(buf_.data(), buf_.size()) != 0) {
      }
      if (n == 0) break;
    }
  }
  // An earlier capture to the same path leaves its rotated files: they are not this one's.
  for (std::uint64_t k = 1; ::unlink(pcap::rotated_name(o_.path, k).c_str()) == 0; ++k) {
  }
  if (!open_file(0)) return;
  writer_ = std::thread([this] { run(); });
}

CaptureWriter::~CaptureWriter() { stop(); }

void CaptureWriter::fail(std::string what) {
  error_ = std::move(what);
  failed_.store(true, std::memory_order_release);  // pairs with the acquire in stop()'s reader
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  std::fprintf(stderr, "pollux-feed: capture stopped: %s (the feed goes on)\n", error_.c_str());
}

bool CaptureWriter::close_file() {
  if (fd_ < 0) return true;
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc == 0) return true;
  fail(absl::StrFormat("%s: close: %s", pcap::rotated_name(o_.path, file_index_), std::strerror(errno)));
  return false;
}

bool CaptureWriter::open_file(std::uint64_t index) {
  if (!close_file()) return false;
  const std::string name = pcap::rotated_name(o_.path, index);
  // O_NONBLOCK for the open only: a FIFO nobody reads fails at once (ENXIO) rather than hold
  // the handler's start; writes then block the writer thread alone, as a slow disk would.
  const int fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NONBLOCK, 0644);
  if (fd < 0) {
    const int err = errno;
    fail(absl::StrFormat("feed.capture: cannot open %s for writing: %s%s", name, std::strerror(err),
                         err == ENXIO ? " (a FIFO with no reader)" : ""));
    return false;
  }
  if (const int flags = ::fcntl(fd, F_GETFL); flags >= 0) (void)::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  fd_ = fd;
  file_index_ = index;
  file_bytes_ = 0;
  files_.fetch_add(1, std::memory_order_relaxed);
  std::uint8_t header[pcap::kFileHeaderSize];
  pcap::write_file_header(header);
  return write_all(header, sizeof header);
}

bool CaptureWriter::write_all(const std::uint8_t* p, std::size_t n) {
  while (n != 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = w < 0 ? errno : EIO;
      fail(absl::StrFormat("%s: write failed after %d bytes: %s", pcap::rotated_name(o_.path, file_index_), file_bytes_,
                           std::strerror(err)));
      return false;
    }
    p += w;
    n -= static_cast<std::size_t>(w);
    file_bytes_ += static_cast<std::uint64_t>(w);
    bytes_.fetch_add(static_cast<std::uint64_t>(w), std::memory_order_relaxed);
  }
  return true;
}

void CaptureWriter::record(std::int64_t ts_ns, const pcap::Endpoint& src, const pcap::Endpoint& dst,
                           std::span<const std::uint8_t> payload) noexcept {
  if (failed_.load(std::memory_order_relaxed)) return;  // stopped: nothing more is kept
  if (payload.size() > pcap::kMaxUdpPayload) payload = payload.first(pcap::kMaxUdpPayload);
  if (ring_.write_available() < pcap::kRecordOverhead + payload.size()) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (ts_ns < 0) {
    ts_ns = realtime_ns();
    no_kernel_time_.fetch_add(1, std::memory_order_relaxed);
  }
  std::uint8_t headers[pcap::kRecordOverhead];
  pcap::write_record_headers(headers, ts_ns, src, dst, payload.size(), ip_id_++);
  // Two pushes of one record: the writer takes only whole records (it reads the length from
  // the record header and waits for the rest), so it may see the first push alone.
  ring_.push(headers, sizeof headers);
  ring_.push(payload.data(), payload.size());
}

void CaptureWriter::run() {
  // A FIFO whose reader went away: write() fails with EPIPE and the capture stops, rather than
  // SIGPIPE ending the process (the signal goes to the writing thread, where it is blocked).
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
  std::size_t have = 0;
  for (;;) {
    // Read before popping: everything pushed before stop() is in this round's pop or an earlier one.
    const bool stopping = stopping_.load(std::memory_order_acquire);
    const std::size_t n = ring_.pop(buf_.data() + have, buf_.size() - have);
    have += n;
    std::size_t off = 0, run = 0, run_records = 0;  // [run, off): whole records not written yet
    auto flush = [&] {
      if (off > run && !failed_.load(std::memory_order_relaxed) && write_all(buf_.data() + run, off - run)) {
        records_.fetch_add(run_records, std::memory_order_relaxed);
      }
      run = off;
      run_records = 0;
    };
    while (have - off >= pcap::kRecordHeaderSize) {
      std::uint32_t incl = 0;
      std::memcpy(&incl, buf_.data() + off + 8, sizeof incl);
      const std::size_t rec = pcap::kRecordHeaderSize + incl;
      if (have - off < rec) break;
      // The file is full: what is pending goes to it, the record starts the next file.
      const std::uint64_t pending = file_bytes_ + (off - run);
      if (o_.rotate_bytes != 0 && pending + rec > o_.rotate_bytes && pending > pcap::kFileHeaderSize &&
          !failed_.load(std::memory_order_relaxed)) {
        flush();
        if (!failed_.load(std::memory_order_relaxed)) (void)open_file(file_index_ + 1);
      }
      off += rec;
      ++run_records;
    }
    flush();
    std::memmove(buf_.data(), buf_.data() + off, have - off);
    have -= off;
    if (n == 0) {
      if (stopping) break;
      std::this_thread::sleep_for(kIdleSleep);
    }
  }
  (void)close_file();
}

void CaptureWriter::stop() {
  if (stopped_) return;
  stopped_ = true;
  stopping_.store(true, std::memory_order_release);  // pairs with the acquire in run()
  if (writer_.joinable()) writer_.join();
}

CaptureWriter::Stats CaptureWriter::stats() const noexcept {
  Stats s;
  s.records = records_.load(std::memory_order_relaxed);
  s.bytes = bytes_.load(std::memory_order_relaxed);
  s.dropped = dropped_.load(std::memory_order_relaxed);
  s.files = files_.load(std::memory_order_relaxed);
  s.no_kernel_time = no_kernel_time_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace pollux::feed
