#include "core/poller.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"
#include "core/agent.h"
#include "core/clock.h"
#include "core/topology.h"
#include "core/trace.h"

namespace pollux::core {

Poller::Poller(int index, const Config& cfg, CountersFile* counters)
    : index_(index), burst_(std::min(cfg.rings.burst, kMaxBurst)) {
  const std::string scope = absl::StrFormat("poller %d", index);
  c_cycles_ = counters->allocate(scope, "duty_cycles");
  c_work_ = counters->allocate(scope, "work_items");
  c_idle_ = counters->allocate(scope, "idle_cycles");
  c_mode_switches_ = counters->allocate(scope, "mode_switches");
}

Poller::~Poller() { stop(); }

absl::Status Poller::start(IdleKind idle, int cpu) {
  cpu_ = cpu;
  running_.store(true, std::memory_order_release);
  std::promise<absl::Status> started;
  auto fut = started.get_future();
  thread_ = std::thread([this, idle, cpu, &started] {
    absl::Status pin = cpu >= 0 ? topology().pin_current_thread(cpu) : absl::OkStatus();
    started.set_value(pin);
    if (!pin.ok()) return;
    switch (idle) {
      case IdleKind::kBusySpin: AgentRunner<Poller, BusySpinIdle>(*this, {}, running_).run(); break;
      case IdleKind::kYield: AgentRunner<Poller, YieldIdle>(*this, {}, running_).run(); break;
      case IdleKind::kBackoff: AgentRunner<Poller, BackoffIdle>(*this, {}, running_).run(); break;
    }
  });
  absl::Status s = fut.get();
  if (!s.ok()) {
    thread_.join();
    running_.store(false, std::memory_order_release);
  }
  return s;
}

void Poller::stop() {
  if (!thread_.joinable()) return;
  running_.store(false, std::memory_order_release);  // pairs with AgentRunner's acquire
  thread_.join();
}

void Poller::run_on_poller(const std::function<void()>& fn) {
  if (!thread_.joinable() || !running_.load(std::memory_order_acquire)) {
    fn();
    return;
  }
  std::promise<void> done;
  auto fut = done.get_future();
  {
    std::lock_guard<std::mutex> lock(cmd_mu_);
    cmds_.push_back({fn, &done});
  }
  // Release pairs with the poller's acquire in do_work(): the command is queued first.
  has_cmds_.store(true, std::memory_order_release);
  fut.wait();
}

void Poller::run_commands() noexcept {
  std::vector<Command> cmds;
  {
    std::lock_guard<std::mutex> lock(cmd_mu_);
    cmds.swap(cmds_);
    has_cmds_.store(false, std::memory_order_relaxed);
  }
  for (Command& c : cmds) {
    c.fn();
    c.done->set_value();
  }
}

void Poller::add_tx(std::shared_ptr<TxChannel> ch) { tx_.push_back(std::move(ch)); }
void Poller::add_rx(std::shared_ptr<RxChannel> ch) { rx_.push_back(std::move(ch)); }

int Poller::do_work() noexcept {
  if (has_cmds_.load(std::memory_order_acquire)) run_commands();
  const std::int64_t now = Clock::now_ns();  // once per cycle
  int work = tx_duty(now);
  work += rx_duty(now);
  work += timers(now);
  c_cycles_.add();
  if (work > 0) {
    c_work_.add(static_cast<std::uint64_t>(work));
  } else {
    c_idle_.add();
  }
  return work;
}

int Poller::tx_duty(std::int64_t /*now*/) noexcept {
  int work = 0;
  std::uint32_t freed[kMaxBurst];
  for (std::size_t i = 0; i < tx_.size(); ++i) {
    TxChannel& ch = *tx_[i];
    if (ch.pending_n == ch.pending_off) {
      ch.pending_off = 0;
      ch.pending_n = ch.submit.pop_burst(ch.pending, burst_);
      std::int64_t dequeued = 0;  // read after the pop, not the cycle's `now`: the app thread may
                                  // have stamped kRingEnqueue after this cycle began
      for (std::uint32_t k = 0; k < ch.pending_n; ++k) {
        if (__builtin_expect(ch.pending[k].flags & kFlagTraced, 0)) {
          auto* t = reinterpret_cast<StageTrace*>(ch.pool->slot(ch.pending[k].slot) + kFrameHeaderSize);
          if (dequeued == 0) dequeued = Clock::now_ns();
          stamp(t, Stage::kPollerDequeue, dequeued);
          stamp(t, Stage::kPost, Clock::now_ns());
        }
      }
    }
    if (ch.pending_n > ch.pending_off) {
      const std::uint32_t want = ch.pending_n - ch.pending_off;
      const std::uint32_t done = ch.ep->post_st({ch.pending + ch.pending_off, want});
      ch.pending_off += done;
      ch.posted.add(done);
      if (done < want) ch.back_pressure.add();
      work += static_cast<int>(done);
    }
    // Completions. A shared endpoint (shm) completes synchronously inside post_st, so the
    // slots it hands back here are this channel's.
    const std::uint32_t nf = ch.ep->reap_st({freed, kMaxBurst});
    if (nf > 0) {
      // Cannot fail: the return ring holds as many entries as the channel has slots.
      (void)ch.returns.push_burst(freed, nf);
    }
    if (__builtin_expect(ch.closing.load(std::memory_order_acquire), 0) && ch.pending_n == ch.pending_off &&
        ch.submit.empty_approx()) {
      ch.drained.store(true, std::memory_order_release);  // pairs with the closing thread's acquire
      tx_.erase(tx_.begin() + static_cast<std::ptrdiff_t>(i));
      --i;
    }
  }
  return work;
}

int Poller::rx_duty(std::int64_t /*now*/) noexcept {
  int work = 0;
  transport::RxDesc buf[kMaxBurst];
  for (std::size_t i = 0; i < rx_.size(); ++i) {
    RxChannel& ch = *rx_[i];
    const std::uint32_t nr = ch.release.pop_burst(buf, burst_);
    if (nr > 0) {
      ch.ep->release_st({buf, nr}, /*validate=*/false);  // the subscriber validated
      ch.outstanding -= nr;
      work += static_cast<int>(nr);
    }
    if (__builtin_expect(ch.closing.load(std::memory_order_acquire), 0)) {
      ch.drained.store(true, std::memory_order_release);
      rx_.erase(rx_.begin() + static_cast<std::ptrdiff_t>(i));
      --i;
      continue;
    }
    // Never hand out more than the subscriber can give back through `release`.
    const std::uint32_t room =
        std::min({burst_, ch.deliver.capacity() - ch.outstanding, ch.deliver.free_approx()});
    if (room == 0) continue;
    const std::uint32_t n = ch.ep->poll_st({buf, room});
    if (n == 0) continue;
    std::uint32_t msgs = 0;
    for (std::uint32_t k = 0; k < n; ++k) {
      // Only messages come back through `release`: gaps and events hold no transport resource.
      if (buf[k].kind != transport::RxKind::kMessage) continue;
      ++msgs;
      if (__builtin_expect(buf[k].frame->flags & kFlagTraced, 0)) {
        // Fresh reads: the cycle's `now` predates what this cycle's tx duty posted.
        buf[k].receive_ns = Clock::now_ns();
        buf[k].ring_ns = buf[k].receive_ns;
      }
    }
    (void)ch.deliver.push_burst(buf, n);  // fits: n <= room <= free space
    ch.outstanding += msgs;
    work += static_cast<int>(n);
  }
  return work;
}

int Poller::timers(std::int64_t now) noexcept {
  if (now < next_timer_ns_) return 0;
  next_timer_ns_ = now + 1'000'000;  // 1 ms
  int work = 0;
  for (auto& ch : tx_) work += ch->ep->housekeeping_st(now);
  for (auto& ch : rx_) work += ch->ep->housekeeping_st(now);
  return work;
}

void Poller::on_close() noexcept {
  // Endpoints are closed by their owners (context/publisher close) through run_on_poller or,
  // once the thread has stopped, directly; nothing to flush here beyond pending commands.
  if (has_cmds_.load(std::memory_order_acquire)) run_commands();
}

}  // namespace pollux::core
