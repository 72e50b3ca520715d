// Loss, duplication and reordering of datagrams with configured probabilities, deterministic
// for a seed (Aeron's loss generators, applied per datagram). A transport wraps its receive
// path with it (and its send path for loss): the reliability protocol must turn whatever comes
// out into the exact, ordered stream, which is what the tests check.
//
// Reordering is a delay line: a delayed datagram is released after 1..max_delay further
// datagrams went through, or by flush() when traffic stops (the caller's idle path), so nothing
// is held forever. Datagrams are opaque 32-bit handles (the transport's buffer indices).
#pragma once

#include <cstdint>

#include "transport/reliability/wire.h"

namespace pollux::transport::reliability {

struct FaultOptions {
  double loss = 0;       // probability a datagram is dropped
  double duplicate = 0;  // ... delivered twice
  double reorder = 0;    // ... delayed behind 1..max_delay later ones
  std::uint32_t max_delay = 8;
  std::uint64_t seed = 1;
  bool enabled() const noexcept { return loss > 0 || duplicate > 0 || reorder > 0; }
};

struct FaultStats {
  std::uint64_t seen = 0, dropped = 0, duplicated = 0, delayed = 0;
};

class FaultInjector {
 public:
  enum class Action : std::uint8_t { kPass, kDrop, kDuplicate, kDelay };
  static constexpr std::uint32_t kMaxDelayed = 64;

  explicit FaultInjector(const FaultOptions& o = {}) noexcept : opt_(o), rng_{o.seed} {
    if (opt_.max_delay == 0) opt_.max_delay = 1;
  }

  bool enabled() const noexcept { return opt_.enabled(); }

  // What to do with the next datagram. kDelay means: call delay(handle).
  Action decide() noexcept {
    ++stats_.seen;
    double u = rng_.uniform();
    if (u < opt_.loss) {
      ++stats_.dropped;
      return Action::kDrop;
    }
    u -= opt_.loss;
    if (u < opt_.duplicate) {
      ++stats_.duplicated;
      return Action::kDuplicate;
    }
    u -= opt_.duplicate;
    if (u < opt_.reorder && ndelayed_ < kMaxDelayed) {
      ++stats_.delayed;
      return Action::kDelay;
    }
    return Action::kPass;
  }

  void delay(std::uint32_t handle) noexcept {
    delayed_[ndelayed_++] = Delayed{handle, 1 + static_cast<std::uint32_t>(rng_.below(opt_.max_delay))};
  }

  // Call once per datagram that went through (passed or duplicated): writes the handles whose
  // delay is over to `out` (room for kMaxDelayed), returns their number.
  std::uint32_t tick(std::uint32_t* out) noexcept {
    std::uint32_t n = 0;
    for (std::uint32_t i = 0; i < ndelayed_;) {
      if (--delayed_[i].countdown == 0) {
        out[n++] = delayed_[i].handle;
        delayed_[i] = delayed_[--ndelayed_];
      } else {
        ++i;
      }
    }
    return n;
  }

  // One arrival (token) through the injector, for a receiver with the injector on:
  // deliver(token, times) processes it (times 2: duplicated), drop(token) frees it, a delayed
  // token is kept here; tokens whose delay ended are delivered after it.
  template <class Deliver, class Drop>
  void admit(std::uint32_t token, Deliver&& deliver, Drop&& drop) noexcept {
    std::uint32_t released[kMaxDelayed];
    const Action a = decide();
    const std::uint32_t nrel = tick(released);  // datagrams delayed behind earlier arrivals
    if (a == Action::kDrop) {
      drop(token);
    } else if (a == Action::kDelay) {
      delay(token);
    } else {
      deliver(token, a == Action::kDuplicate ? 2 : 1);
    }
    for (std::uint32_t j = 0; j < nrel; ++j) deliver(released[j], 1);
  }

  // Releases every delayed datagram (traffic stopped).
  std::uint32_t flush(std::uint32_t* out) noexcept {
    const std::uint32_t n = ndelayed_;
    for (std::uint32_t i = 0; i < n; ++i) out[i] = delayed_[i].handle;
    ndelayed_ = 0;
    return n;
  }

  // The receiver's timers: once traffic stopped (`idle_ns`, since the last arrival, above a
  // millisecond) the delayed datagrams go in through deliver(token, 1) rather than wait forever.
  // Returns how many.
  template <class Deliver>
  std::uint32_t flush_if_idle(std::int64_t idle_ns, Deliver&& deliver) noexcept {
    if (ndelayed_ == 0 || idle_ns <= 1'000'000) return 0;
    std::uint32_t released[kMaxDelayed];
    const std::uint32_t n = flush(released);
    for (std::uint32_t j = 0; j < n; ++j) deliver(released[j], 1);
    return n;
  }

  std::uint32_t delayed() const noexcept { return ndelayed_; }
  const FaultStats& stats() const noexcept { return stats_; }

 private:
  struct Delayed {
    std::uint32_t handle;
    std::uint32_t countdown;
  };
  FaultOptions opt_;
  SplitMix64 rng_;
  Delayed delayed_[kMaxDelayed];
  std::uint32_t ndelayed_ = 0;
  FaultStats stats_;
};

}  // namespace pollux::transport::reliability
