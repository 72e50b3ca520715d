// Shared-memory transport: IPC between one publisher process and any number of subscriber
// processes on one host through a broadcast log per stream (transport/shm/shm_log.h).
#pragma once

#include <memory>

#include "transport/shm/shm_log.h"
#include "transport/shm/shm_segment.h"
#include "transport/transport.h"

namespace pollux::transport::shm {

class ShmTxEndpoint final : public TxEndpoint {
 public:
  static absl::StatusOr<std::unique_ptr<ShmTxEndpoint>> open(const TransportEnv& env, const EndpointSpec& spec);
  ~ShmTxEndpoint() override;

  std::uint32_t post_st(std::span<const TxDesc> frames) noexcept override;
  std::uint32_t reap_st(std::span<std::uint32_t> freed) noexcept override;
  int housekeeping_st(std::int64_t now_ns) noexcept override;
  bool connected() const noexcept override { return writer_.subscribers() > 0; }
  std::uint32_t max_frame() const noexcept override { return writer_.max_frame(); }
  void close_st() noexcept override;
  std::string describe() const override;

  // Direct path for the inline threading mode (the application thread is the writer).
  LogWriter& writer() noexcept { return writer_; }
  void maybe_heartbeat(std::int64_t now_ns) noexcept {
    if (now_ns - last_heartbeat_ns_ > 100'000'000) {
      writer_.heartbeat(now_ns);
      last_heartbeat_ns_ = now_ns;
    }
  }

 private:
  ShmTxEndpoint() = default;
  std::unique_ptr<Segment> seg_;
  LogWriter writer_;
  core::BufferPool* pool_ = nullptr;
  std::int64_t last_heartbeat_ns_ = 0;
  std::int64_t last_reap_ns_ = 0;
  std::int64_t liveness_ns_ = 0;
  bool closed_ = false;
  // Slots copied into the log by post_st() and not yet handed back by reap_st().
  static constexpr std::uint32_t kMaxDone = 256;
  std::uint32_t done_[kMaxDone];
  std::uint32_t done_n_ = 0;
};

class ShmRxEndpoint final : public RxEndpoint {
 public:
  static absl::StatusOr<std::unique_ptr<ShmRxEndpoint>> open(const TransportEnv& env, const EndpointSpec& spec);
  ~ShmRxEndpoint() override;

  std::uint32_t poll_st(std::span<RxDesc> out) noexcept override;
  void release_st(std::span<const RxDesc> done, bool validate) noexcept override {
    for (const RxDesc& d : done) held_ -= d.kind == RxKind::kMessage;
    reader_.release(done.data(), static_cast<std::uint32_t>(done.size()), validate);
  }
  std::uint64_t safe_floor() const noexcept override { return seg_ != nullptr ? reader_.safe_floor() : 0; }
  int housekeeping_st(std::int64_t now_ns) noexcept override;
  bool connected() const noexcept override { return seg_ != nullptr && !ended_; }
  void close_st() noexcept override;
  std::string describe() const override;

  LogReader& reader() noexcept { return reader_; }
  // Last attach failure (kept for diagnostics; NotFound while no publisher exists).
  const absl::Status& attach_status() const noexcept { return attach_status_; }

 private:
  ShmRxEndpoint() = default;
  bool try_attach(bool new_session) noexcept;
  void detach() noexcept;

  std::string path_;
  std::unique_ptr<Segment> seg_;
  SubscriberSlot* slot_ = nullptr;
  LogReader reader_;
  std::int64_t liveness_ns_ = 0;
  std::int64_t next_check_ns_ = 0;
  std::uint64_t subscriber_id_ = 0;
  bool ended_ = false;          // end of stream reported for the current segment
  bool pending_end_ = false;    // to report on the next poll
  std::uint16_t end_reason_ = 0;
  bool pending_new_session_ = false;
  std::uint32_t new_session_id_ = 0;
  absl::Status attach_status_;
  bool ever_attached_ = false;
  std::uint32_t empty_polls_ = 0;
  // Messages handed out by poll_st() and not yet released: their views point into the
  // segment, so an ended stream is unmapped only once this is 0 (queued modes release late).
  std::uint64_t held_ = 0;
};

class ShmTransport final : public Transport {
 public:
  explicit ShmTransport(const TransportEnv& env) : env_(env) {}
  std::string_view name() const override { return "shm"; }
  absl::Status register_memory(core::BufferPool&) override { return absl::OkStatus(); }
  absl::StatusOr<std::unique_ptr<TxEndpoint>> open_tx(const EndpointSpec& spec) override;
  absl::StatusOr<std::unique_ptr<RxEndpoint>> open_rx(const EndpointSpec& spec) override;
  void close() override {}
  bool shared_tx_endpoint() const noexcept override { return true; }

 private:
  TransportEnv env_;
};

}  // namespace pollux::transport::shm
