#include "transport/rdma/endpoint_base.h"

#include "core/clock.h"
#include "transport/rdma/completion_group.h"
#include "transport/rdma/rdma_transport.h"

namespace pollux::transport::rdma {

RdmaEndpointBase::RdmaEndpointBase(RdmaTransport& t, CompletionGroup* group) noexcept
    : t_(t), group_(group), pool_(&t.pool()), self_progress_(group->poller() < 0) {}

bool RdmaEndpointBase::advance_close(std::int64_t now_ns, bool give_up) noexcept {
  if (!stepped_out_) {
    if (!close_step_st(now_ns, give_up)) return false;
    stepped_out_ = true;
    drain_deadline_ns_ = now_ns + kDrainNs;
  }
  if (self_progress_) {
    // Inline: the private group goes to the next inline endpoint once the QPs retired into it
    // have flushed their receive buffers back (none of this endpoint's completions can then
    // reach the next owner).
    if (group_->retired_drained()) {
      t_.release_inline_group(group_);
    } else if (!give_up && now_ns < drain_deadline_ns_) {
      (void)group_->progress();
      return false;
    }
  }
  std::atomic<std::uint32_t>& finished = t_.closes_finished();
  // Release pairs with await_close()'s acquire: from here another thread may destroy `this`.
  close_done_.store(true, std::memory_order_release);
  finished.fetch_add(1, std::memory_order_release);
  finished.notify_all();
  return true;
}

void RdmaEndpointBase::begin_close(std::int64_t now_ns) noexcept {
  closer_ = std::this_thread::get_id();
  if (advance_close(now_ns, false)) return;
  CompletionGroup* g = group_;
  if (!self_progress_) {
    g->add_closing(this);  // the poller's source advances it: close_st() returns now
    return;
  }
  // Inline: the application's thread closes, so it waits here for the close to finish,
  // advancing the same steps, and between them waiting for the group's completions (1 ms at most).
  while (!advance_close(core::Clock::now_ns(), false)) g->wait_for_work(1);
}

void RdmaEndpointBase::await_close() noexcept {
  if (close_done_.load(std::memory_order_acquire)) return;
  if (std::this_thread::get_id() == closer_) {
    // Destroyed mid-close on the thread that drives the group: waiting would wait for this very
    // thread. Give up now (what is unacknowledged is counted lost, as when the linger runs out).
    group_->remove_closing(this);
    (void)advance_close(core::Clock::now_ns(), true);  // with give_up, one call finishes
    return;
  }
  // Another thread (the poller, or RdmaTransport::close() once the pollers stopped) finishes the
  // close within rdma.linger_ms plus a step. `seen` is read before close_done_: a close that
  // finishes after that read changes the counter, so the wait returns.
  std::atomic<std::uint32_t>& finished = t_.closes_finished();
  for (;;) {
    const std::uint32_t seen = finished.load(std::memory_order_acquire);
    if (close_done_.load(std::memory_order_acquire)) return;
    finished.wait(seen, std::memory_order_acquire);
  }
}

bool RdmaEndpointBase::can_adopt(const Conn& c, bool closed, std::uint32_t n, std::uint32_t max,
                                 std::uint32_t stream_id, const char* peers) noexcept {
  if (n == max) {
    t_.counters().error_log().recordf(absl::StatusCode::kResourceExhausted,
                                      "rdma: stream %u: more than %u %s; dropping %s", stream_id, max, peers, c.peer);
  }
  return !closed && n != max;
}

}  // namespace pollux::transport::rdma
