// Helpers of the UDP tests that run real endpoints (transport_test, wakeup_test): bounded waits,
// the counters of a context, and the environment endpoints are opened in without a context.
#pragma once

#include <fcntl.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "core/buffer_pool.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/counters.h"
#include "pollux/pollux.h"
#include "transport/transport.h"

namespace pollux::testing {

// The bound of a wait for something that must happen: far above any delay a loaded host causes,
// so that passing it means the thing never happened. A wait that ends sooner costs nothing.
inline constexpr int kWaitMs = 60000;

// Runs `step` until `done` (true) or `ms` passed (false).
template <typename F>
bool spin_until(
    F&& done, int ms, const std::function<void()>& step = [] {}) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    step();
    std::this_thread::yield();
  }
  return true;
}

// Descriptors open in this process.
inline int open_fds() {
  int n = 0;
  for (int fd = 0; fd < 4096; ++fd) n += fcntl(fd, F_GETFD) != -1;
  return n;
}

// Counter `name` of this context's counters file: in scope `scope` (exact), or summed over the
// scopes starting with `prefix` (0 when there is none).
inline std::uint64_t counter_matching(const Context& ctx, const std::string& scope, const std::string& name,
                                      bool prefix) {
  auto snap = core::read_counters_file(ctx.counters_path());
  if (!snap.ok()) return 0;
  std::uint64_t v = 0;
  for (const auto& c : snap->counters) {
    if (c.name == name && (prefix ? c.scope.rfind(scope, 0) == 0 : c.scope == scope)) v += c.value;
  }
  return v;
}
inline std::uint64_t counter(const Context& ctx, const std::string& scope, const std::string& name) {
  return counter_matching(ctx, scope, name, false);
}
inline std::uint64_t counter_sum(const Context& ctx, const std::string& prefix, const std::string& name) {
  return counter_matching(ctx, prefix, name, true);
}

// What a test opens transport endpoints in without a Context: the configuration parsed from
// `toml` (a parse error fails the test), the clock, a pool of `slots` slots without huge pages, an
// anonymous counters file `counters_name`, and the environment over them.
struct EndpointEnv {
  EndpointEnv(const std::string& toml, std::uint32_t slots, const char* counters_name) {
    auto c = core::parse_config(toml, "ep.toml");
    EXPECT_TRUE(c.ok()) << c.status();
    if (c.ok()) cfg = *c;
    core::Clock::init();
    core::PoolOptions po;
    po.slots = slots;
    po.hugepages = core::HugePages::kOff;
    pool = std::move(*core::BufferPool::create(po));
    counters = std::move(*core::CountersFile::create("", counters_name));
    env = transport::TransportEnv{&cfg, pool.get(), counters.get()};
  }

  core::Config cfg;
  std::unique_ptr<core::BufferPool> pool;
  std::unique_ptr<core::CountersFile> counters;
  transport::TransportEnv env;
};

}  // namespace pollux::testing
