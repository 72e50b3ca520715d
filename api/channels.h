// The application <-> poller rings and the two progress sources that move descriptors between
// them and the transport endpoints: AppTxSource (drain publishers' rings, post, reap) and
// AppRxSource (take releases back, poll endpoints, deliver to subscribers' rings). A poller
// drives them around its transport's own source: app-tx, transport, app-rx.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "core/buffer_pool.h"
#include "core/counters.h"
#include "core/poller.h"
#include "core/progress.h"
#include "core/ring.h"
#include "core/wakeup.h"
#include "transport/transport.h"

namespace pollux::detail {

using core::kMaxBurst;

// Publisher side of one (application thread, stream): the app pushes formatted frames (pool
// slots) into `submit`; the poller posts them and hands finished slots back on `returns`.
struct TxChannel {
  TxChannel(std::uint32_t capacity, std::uint32_t return_capacity, core::RingKind kind)
      : submit(capacity, kind), returns(return_capacity, kind) {}
  core::DescRing<transport::TxDesc> submit;
  core::DescRing<std::uint32_t> returns;
  core::SlotRange slots;
  std::shared_ptr<core::SlotLease> slot_lease;  // keeps `slots` carved while the poller may use them
  std::shared_ptr<transport::TxEndpoint> ep;
  std::shared_ptr<core::SendCompletionLog> send_log;  // the endpoint records into it (traced streams)
  std::uint32_t stream_id = 0;
  core::BufferPool* pool = nullptr;
  std::atomic<bool> closing{false};  // set by the app thread on close()
  std::atomic<bool> drained{false};  // set by the poller when closing and nothing is left
  // Poller-private.
  transport::TxDesc pending[kMaxBurst];
  std::uint32_t pending_n = 0, pending_off = 0;
  core::Counter posted, back_pressure;
};

// Subscriber side: the poller polls the endpoint and pushes events into `deliver`; the app
// hands delivered messages back on `release` so the transport can recycle them.
// An application thread that waits sleeps on the channel's doorbell (core::Doorbell, the one
// arm/sleep handshake): Subscriber::wait() on its futex word, a caller of arm() + notify_fd()
// on its eventfd; the poller rings it after a delivery only when someone sleeps (the same
// protocol as Poller::wake(), with the roles swapped). The futex saves wait() the read() an
// eventfd needs after every wakeup.
struct RxChannel {
  RxChannel(std::uint32_t capacity, core::RingKind kind) : deliver(capacity, kind), release(capacity, kind) {}
  core::DescRing<transport::RxDesc> deliver;
  core::DescRing<transport::RxDesc> release;
  std::unique_ptr<transport::RxEndpoint> ep;
  std::uint32_t stream_id = 0;
  std::atomic<bool> closing{false};
  std::atomic<bool> drained{false};
  core::Doorbell app_bell;
  std::uint32_t outstanding = 0;  // poller-private: pushed to deliver, not yet released

  // Poller thread, after pushing to `deliver` (ring_if_asleep's barrier pairs with the
  // sleeper's announce()).
  void notify_app() noexcept { (void)app_bell.ring_if_asleep(); }
};

// A poller's source over the application's channels of one direction (TxChannel or
// RxChannel); the direction's class adds progress() and try_arm().
template <class Channel>
class AppSource : public core::ProgressSource {
 public:
  AppSource(std::uint32_t burst, std::string_view name) : burst_(burst), name_(name) {}
  std::string_view name() const noexcept override { return name_; }
  void disarm() noexcept override {}
  void add(std::shared_ptr<Channel> ch) { channels_.push_back(std::move(ch)); }  // poller thread
  int housekeeping(std::int64_t now) noexcept override {
    int work = 0;
    for (auto& ch : channels_) work += ch->ep->housekeeping_st(now);
    return work;
  }

 protected:
  const std::uint32_t burst_;
  const std::string_view name_;
  std::vector<std::shared_ptr<Channel>> channels_;
};

class AppTxSource final : public AppSource<TxChannel> {
 public:
  explicit AppTxSource(std::uint32_t burst) : AppSource(burst, "app-tx") {}
  int progress(std::int64_t now) noexcept override;
  bool try_arm() noexcept override;
};

class AppRxSource final : public AppSource<RxChannel> {
 public:
  explicit AppRxSource(std::uint32_t burst) : AppSource(burst, "app-rx") {}
  int progress(std::int64_t now) noexcept override;
  bool try_arm() noexcept override;
};

// A poller with its three sources, as the context sets it up.
struct PollerSlot {
  std::unique_ptr<core::Poller> poller;
  std::unique_ptr<AppTxSource> tx;
  std::unique_ptr<AppRxSource> rx;
  core::ProgressSource* transport = nullptr;  // owned by the transport
};

}  // namespace pollux::detail
