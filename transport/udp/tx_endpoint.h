// The UDP publisher endpoint: the data plane of one stream's publisher (udp_transport.h
// describes who drives it in poller and inline mode).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "transport/transport.h"
#include "transport/udp/tx_core.h"
#include "transport/udp/waiter.h"

namespace pollux::transport::udp {

class UdpPollerSource;

class UdpTxEndpoint final : public TxEndpoint {
 public:
  static absl::StatusOr<std::unique_ptr<UdpTxEndpoint>> open(const TransportEnv& env, const EndpointSpec& spec,
                                                             UdpPollerSource* source = nullptr);
  ~UdpTxEndpoint() override;

  std::uint32_t post_st(std::span<const TxDesc> frames) noexcept override;
  std::uint32_t reap_st(std::span<std::uint32_t> freed) noexcept override;
  // Inline mode, the publisher's direct path (Publisher::offer on the application thread): the
  // frame is built in place in the send log - no pool slot, no copy, nothing to reap.
  // claim_direct(): room for a frame of `length` bytes (null: back-pressure, or a length
  // post_st() would drop); the caller writes the whole frame there (header fields the log owns
  // are set by commit) and calls commit_direct(), which sends it as post_st() would.
  std::byte* claim_direct(std::uint32_t length) noexcept {
    if (__builtin_expect(core_ == nullptr || length > max_frame_ || length < core::kFrameHeaderSize, 0)) return nullptr;
    return core_->sender.claim(length);
  }
  // now_ns: the caller's clock reading of this offer (0: none, read here).
  void commit_direct(std::uint32_t length, std::int64_t now_ns) noexcept;
  // Poller mode: 0 (the source runs the protocol timers).
  int housekeeping_st(std::int64_t now_ns) noexcept override;
  // Inline mode only (poller mode: false / -1, the poller's source arms instead).
  bool try_arm_st() noexcept override;
  void disarm_st() noexcept override { waiter_.disarm(); }
  int notify_fd() const noexcept override { return waiter_.fd(); }
  // Any thread (Publisher::is_connected() / offer() on the application thread in queued
  // modes): a relaxed flag the owner thread refreshes; nothing is published through it.
  bool connected() const noexcept override { return connected_.load(std::memory_order_relaxed); }
  std::uint32_t max_frame() const noexcept override { return max_frame_; }
  // Inline mode: lingers here (up to udp.linger_ms) for the subscribers' end confirmations.
  // Poller mode: returns at once; the poller's source lingers with the socket.
  void close_st() noexcept override;
  std::string describe() const override;

  // Valid until close_st() in poller mode (the state then moves to the source).
  const reliability::ReliableSender& sender() const noexcept { return core_->sender; }
  const SocketInfo& socket_info() const noexcept { return core_->sock; }

 private:
  friend class UdpPollerSource;
  UdpTxEndpoint() = default;
  // The direct path (TxDirect, inline mode): claim_direct() / commit_direct() with the header
  // written at commit. Untraced frames only (traced ones take a pool slot and post_st()).
  static ClaimResult direct_claim(TxEndpoint* ep, std::uint32_t frame_length, std::int64_t now, TxClaim* c) noexcept;
  static std::int64_t direct_commit(TxEndpoint* ep, const TxClaim& c, std::uint16_t flags, std::int64_t now,
                                    bool deferred) noexcept;
  void attach() noexcept;
  // Poller mode, called by the source: the socket is readable / the timers.
  int on_readable(std::int64_t now_ns) noexcept;
  int service(std::int64_t now_ns) noexcept;

  std::unique_ptr<TxCore> core_;
  UdpPollerSource* source_ = nullptr;  // poller mode; null inline
  bool attached_ = false;              // poller mode: in the source's epoll set
  Waiter waiter_;                      // inline mode
  core::BufferPool* pool_ = nullptr;
  std::uint32_t max_frame_ = 0;
  std::int64_t linger_ns_ = 0;
  std::int64_t next_service_ns_ = 0;
  std::uint32_t reaps_ = 0;
  bool closed_ = false;
  std::atomic<bool> connected_{false};  // sender.connected(), refreshed by the owner thread
  // Slots copied into the log and not yet handed back by reap_st().
  std::unique_ptr<std::uint32_t[]> done_;
  std::uint32_t done_n_ = 0, done_cap_ = 0;
};

}  // namespace pollux::transport::udp
