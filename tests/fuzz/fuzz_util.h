// Shared helpers of the libFuzzer harnesses (tests/fuzz/README.md).
//
// FUZZ_CHECK states an invariant of the code under test; a violation prints what was expected
// and aborts, which libFuzzer (and the ctest replay driver) reports as a crash with the input
// that caused it. FuzzInput turns the fuzzer's bytes into the fields of a structured input
// (little-endian, zero once exhausted, so every byte string is a valid input).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define FUZZ_CHECK(cond, ...)                                                                        \
  do {                                                                                               \
    if (!(cond)) [[unlikely]] {                                                                      \
      std::fprintf(stderr, "\nfuzz invariant violated at %s:%d: %s\n  ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                                             \
      std::fputc('\n', stderr);                                                                      \
      std::abort();                                                                                  \
    }                                                                                                \
  } while (0)

// FUZZ_TRACE prints what a harness does, only when POLLUX_FUZZ_TRACE is set in the
// environment: for reading a crash input step by step (`POLLUX_FUZZ_TRACE=1 fuzz_x CRASH`).
#define FUZZ_TRACE(...)                            \
  do {                                             \
    if (::pollux::fuzz::tracing()) [[unlikely]] {  \
      std::fprintf(stderr, "trace: " __VA_ARGS__); \
      std::fputc('\n', stderr);                    \
    }                                              \
  } while (0)

namespace pollux::fuzz {

inline bool tracing() noexcept {
  static const bool on = std::getenv("POLLUX_FUZZ_TRACE") != nullptr;
  return on;
}

class FuzzInput {
 public:
  FuzzInput(const std::uint8_t* data, std::size_t size) noexcept : p_(data), n_(size) {}

  [[nodiscard]] bool empty() const noexcept { return n_ == 0; }
  [[nodiscard]] std::size_t remaining() const noexcept { return n_; }

  [[nodiscard]] std::uint8_t u8() noexcept { return static_cast<std::uint8_t>(take(1)); }
  [[nodiscard]] std::uint16_t u16() noexcept { return static_cast<std::uint16_t>(take(2)); }
  [[nodiscard]] std::uint32_t u32() noexcept { return static_cast<std::uint32_t>(take(4)); }
  [[nodiscard]] std::uint64_t u64() noexcept { return take(8); }
  [[nodiscard]] bool flag() noexcept { return (u8() & 1) != 0; }

  // Up to `want` bytes (fewer when the input ends); the pointer stays valid for the input's life.
  const std::uint8_t* bytes(std::size_t want, std::size_t* got) noexcept {
    const std::size_t k = want < n_ ? want : n_;
    const std::uint8_t* q = p_;
    p_ += k;
    n_ -= k;
    *got = k;
    return q;
  }

 private:
  std::uint64_t take(std::size_t k) noexcept {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < k && n_ > 0; ++i, ++p_, --n_) v |= static_cast<std::uint64_t>(*p_) << (8 * i);
    return v;
  }

  const std::uint8_t* p_;
  std::size_t n_;
};

// Folds bytes into a value the compiler cannot drop, so that every byte of a view the code
// under test hands out is really read (and an out-of-bounds view is caught by ASan or SEGV).
inline std::uint64_t touch(const void* p, std::size_t n) noexcept {
  const auto* b = static_cast<const volatile std::uint8_t*>(p);
  std::uint64_t h = 0;
  for (std::size_t i = 0; i < n; ++i) h = h * 31 + b[i];
  return h;
}

}  // namespace pollux::fuzz
