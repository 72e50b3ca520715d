// Small deterministic PRNGs for the generator and the tests.
//
// std:: distributions are implementation-defined, so a seeded stream built on them could
// change with the libstdc++ version and break the committed test fixture. These engines
// and the bounded draw below are fully specified here, so a seed means the same bytes on
// every platform.
#pragma once

#include <cstdint>

namespace pollux::itch {

// SplitMix64 (Steele, Lea, Flood 2014): used to expand a 64-bit seed into xoshiro state.
class SplitMix64 {
 public:
  explicit constexpr SplitMix64(uint64_t seed) noexcept : state_(seed) {}
  constexpr uint64_t next() noexcept {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

 private:
  uint64_t state_;
};

// xoshiro256** 1.0 (Blackman, Vigna 2018).
class Xoshiro256 {
 public:
  explicit constexpr Xoshiro256(uint64_t seed) noexcept {
    SplitMix64 sm(seed);
    for (uint64_t& w : s_) w = sm.next();
  }

  constexpr uint64_t next() noexcept {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, n) for n >= 1, by multiply-shift (Lemire). The bias is below 2^-32 for
  // the n used here, which does not matter for synthetic data and keeps it branch-free.
  constexpr uint64_t below(uint64_t n) noexcept {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(next()) * n) >> 64);
  }

  // True with probability `num / 1024`.
  constexpr bool chance(uint32_t num) noexcept { return (next() >> 54) < num; }

 private:
  static constexpr uint64_t rotl(uint64_t x, int k) noexcept { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4]{};
};

}  // namespace pollux::itch
