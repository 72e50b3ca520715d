// What the four RDMA endpoints (RC and UD, publisher and subscriber) share: their transport,
// their completion group, whether they poll that group themselves, and a close that never
// blocks the thread driving them.
//
// Closing is a state machine. close_st() does what can be done at once (end of stream posted,
// "leaving" messages sent, connections handed back), then steps close_step_st() - the
// endpoint's own part: a publisher lingering until its subscribers acknowledged everything
// (rdma.linger_ms at most), control sends flushing - and, for an inline endpoint, waits for its
// private group's retired QPs to flush their receive buffers before the group is handed on.
//   - Poller mode: if the first step did not finish, the endpoint joins its group's closing
//     list and close_st() returns; the poller's source advances every closing endpoint from
//     its progress and housekeeping (CompletionGroup::advance_closing) - the poller keeps
//     driving every other endpoint meanwhile - and refuses to sleep until they are done.
//     RdmaTransport::close() (after the pollers stopped) finishes those still closing.
//   - Inline mode (spec.poller == -1): the application's thread closes, so close_st() advances
//     the same steps itself, waiting for completions on the group's notify fd between them.
// The endpoint's resources (QPs, receive buffers, the pool slots it holds) are released when
// the state machine finishes. Destroying an endpoint whose close is still running waits for
// it (another thread drives it: at most rdma.linger_ms plus a step), or, on the thread that
// drives it, gives up at once (what is not acknowledged by then is counted lost, as when the
// linger runs out).
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

namespace pollux::core {
class BufferPool;
}  // namespace pollux::core

namespace pollux::transport::rdma {

class CompletionGroup;
struct Conn;
class RdmaTransport;

class RdmaEndpointBase {
 public:
  // One step of the close (owning thread), after close_st() started it. Never blocks.
  // `give_up`: finish now, as if every deadline had passed. True once the close is finished:
  // the caller must not touch the endpoint afterwards (another thread may destroy it).
  bool advance_close(std::int64_t now_ns, bool give_up) noexcept;

 protected:
  RdmaEndpointBase(RdmaTransport& t, CompletionGroup* group) noexcept;
  ~RdmaEndpointBase() = default;

  // The endpoint's own close steps (see above). True when its part is done and its
  // connections are handed back.
  virtual bool close_step_st(std::int64_t now_ns, bool give_up) noexcept = 0;
  // From close_st(), once the immediate part is done: runs the first step, then hands the rest
  // to the poller (poller mode) or finishes it on this thread (inline mode).
  void begin_close(std::int64_t now_ns) noexcept;
  // From the derived destructor: returns once the close has finished (see above).
  void await_close() noexcept;
  // adopt() of an RC endpoint with `n` of its `max` connections: false when it cannot take `c`
  // (it closed, or it is full: logged, `peers` naming what it connects to); the caller retires it.
  bool can_adopt(const Conn& c, bool closed, std::uint32_t n, std::uint32_t max, std::uint32_t stream_id,
                 const char* peers) noexcept;

  RdmaTransport& t_;
  CompletionGroup* const group_;
  core::BufferPool* const pool_;  // the transport's registered pool
  const bool self_progress_;      // inline: polls its private group itself; else passive

 private:
  // Inline: the private group's retired QPs get this long to flush their receive buffers;
  // after it the group is not handed on to the next inline endpoint (it stays with the transport).
  static constexpr std::int64_t kDrainNs = 200'000'000;
  std::int64_t drain_deadline_ns_ = 0;
  bool stepped_out_ = false;  // close_step_st() returned true
  std::thread::id closer_;    // the thread that called close_st() (the owning thread)
  // Written last by the thread finishing the close, read by a destructor on another thread:
  // release/acquire (the destructor may free the endpoint once it reads true).
  std::atomic<bool> close_done_{false};
};

}  // namespace pollux::transport::rdma
