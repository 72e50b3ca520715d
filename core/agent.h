// Agents and their runner (Aeron's AgentRunner, as a concept + template so the loop inlines).
//
// An agent does a bounded amount of work per do_work() call and returns how much it did; the
// runner hands that count to an idle strategy, which decides whether to spin, yield or park.
#pragma once

#include <atomic>
#include <concepts>
#include <cstdint>
#include <string_view>
#include <thread>

#include "core/idle.h"

namespace pollux::core {

template <typename A>
concept Agent = requires(A a) {
  { a.do_work() } noexcept -> std::convertible_to<int>;
  { a.on_close() } noexcept;
};

// Runs `agent` until `running` becomes false (the flag lives with the owner, so stopping
// never races with the runner's construction).
template <Agent A, IdleStrategy I>
class AgentRunner {
 public:
  AgentRunner(A& agent, I idle, const std::atomic<bool>& running) : agent_(agent), idle_(idle), running_(running) {}

  // Nothing escapes: do_work() and on_close() are noexcept.
  void run() noexcept {
    // Acquire pairs with the owner's release store of false: the owner's writes before
    // stopping are visible to on_close().
    while (running_.load(std::memory_order_acquire)) {
      idle_.idle(agent_.do_work());
    }
    agent_.on_close();
  }
  const I& idle_strategy() const noexcept { return idle_; }

 private:
  A& agent_;
  I idle_;
  const std::atomic<bool>& running_;
};

}  // namespace pollux::core
