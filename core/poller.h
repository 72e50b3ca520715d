// The poller: an agent that owns transport endpoints and moves descriptors between them and
// the application threads' SPSC rings. Its duty cycle has a fixed order and a cap per duty:
// commands -> tx (drain app rings, post, reap completions) -> rx (releases, poll, deliver) ->
// timers. The clock is read once per cycle.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/buffer_pool.h"
#include "core/config.h"
#include "core/counters.h"
#include "core/ring.h"
#include "transport/transport.h"

namespace pollux::core {

inline constexpr std::uint32_t kMaxBurst = 256;

// Publisher side of one (application thread, stream): the app pushes formatted frames (pool
// slots) into `submit`; the poller posts them and hands finished slots back on `returns`.
struct TxChannel {
  TxChannel(std::uint32_t capacity, std::uint32_t return_capacity) : submit(capacity), returns(return_capacity) {}
  DescRing<transport::TxDesc> submit;
  DescRing<std::uint32_t> returns;
  SlotRange slots;
  std::shared_ptr<transport::TxEndpoint> ep;
  std::uint32_t stream_id = 0;
  BufferPool* pool = nullptr;
  std::atomic<bool> closing{false};  // set by the app thread on close()
  std::atomic<bool> drained{false};  // set by the poller when closing and nothing is left
  // Poller-private.
  transport::TxDesc pending[kMaxBurst];
  std::uint32_t pending_n = 0, pending_off = 0;
  Counter posted, back_pressure;
};

// Subscriber side: the poller polls the endpoint and pushes events into `deliver`; the app
// hands delivered messages back on `release` so the transport can recycle them.
struct RxChannel {
  explicit RxChannel(std::uint32_t capacity) : deliver(capacity), release(capacity) {}
  DescRing<transport::RxDesc> deliver;
  DescRing<transport::RxDesc> release;
  std::unique_ptr<transport::RxEndpoint> ep;
  std::uint32_t stream_id = 0;
  std::atomic<bool> closing{false};
  std::atomic<bool> drained{false};
  std::uint32_t outstanding = 0;  // poller-private: pushed to deliver, not yet released
};

class Poller {
 public:
  Poller(int index, const Config& cfg, CountersFile* counters);
  ~Poller();
  Poller(const Poller&) = delete;
  Poller& operator=(const Poller&) = delete;

  // Agent interface.
  int do_work() noexcept;
  void on_close() noexcept;

  // Control path. start() spawns the thread (pinned to `cpu` if >= 0).
  absl::Status start(IdleKind idle, int cpu);
  void stop();
  // Runs fn on the poller thread (or inline if the poller is not running) and waits.
  void run_on_poller(const std::function<void()>& fn);

  void add_tx(std::shared_ptr<TxChannel> ch);  // poller thread
  void add_rx(std::shared_ptr<RxChannel> ch);  // poller thread
  int index() const noexcept { return index_; }
  int cpu() const noexcept { return cpu_; }

 private:
  int tx_duty(std::int64_t now) noexcept;
  int rx_duty(std::int64_t now) noexcept;
  int timers(std::int64_t now) noexcept;
  void run_commands() noexcept;

  const int index_;
  const std::uint32_t burst_;
  int cpu_ = -1;
  std::vector<std::shared_ptr<TxChannel>> tx_;
  std::vector<std::shared_ptr<RxChannel>> rx_;
  std::int64_t next_timer_ns_ = 0;

  struct Command {
    std::function<void()> fn;
    std::promise<void>* done;
  };
  std::mutex cmd_mu_;
  std::vector<Command> cmds_;
  std::atomic<bool> has_cmds_{false};
  std::atomic<bool> running_{false};
  std::thread thread_;

  Counter c_cycles_, c_work_, c_idle_, c_mode_switches_;
};

}  // namespace pollux::core
