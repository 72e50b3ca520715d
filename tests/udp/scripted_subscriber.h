// Test helpers: a SubscriberImpl in inline mode driven by an RxEndpoint that hands out scripted
// descriptors - for checking what the subscriber does with whatever a transport gives it
// (transport_test's malformed-frame defence, timestamps_test's kernel-stamp flag).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "api/internal.h"
#include "core/counters.h"
#include "transport/transport.h"

namespace pollux::test {

// Returns `script` in order over its polls; records what the subscriber released.
class ScriptedRx final : public transport::RxEndpoint {
 public:
  std::vector<transport::RxDesc> script;
  std::vector<transport::RxDesc> released;
  std::uint32_t poll_st(std::span<transport::RxDesc> out) noexcept override {
    const std::uint32_t n = static_cast<std::uint32_t>(std::min(out.size(), script.size()));
    std::copy(script.begin(), script.begin() + n, out.begin());
    script.erase(script.begin(), script.begin() + n);
    return n;
  }
  void release_st(std::span<const transport::RxDesc> done, bool) noexcept override {
    released.insert(released.end(), done.begin(), done.end());
  }
  int housekeeping_st(std::int64_t) noexcept override { return 0; }
  bool connected() const noexcept override { return true; }
  void close_st() noexcept override {}
  std::string describe() const override { return "scripted"; }
};

// An inline subscriber of `stream_id` whose counters live in `f` (each its own slot).
inline void init_inline_subscriber(detail::SubscriberImpl& sub, core::CountersFile& f, std::uint32_t stream_id) {
  sub.mode = detail::SubscriberImpl::Mode::kInline;
  sub.stream_id = stream_id;
  for (auto* c : {&sub.counters.messages, &sub.counters.bytes, &sub.counters.gaps, &sub.counters.lost,
                  &sub.counters.overruns, &sub.counters.events, &sub.counters.malformed}) {
    *c = f.allocate("sub", "c", stream_id);
  }
}

}  // namespace pollux::test
