#include "core/archive/crc32c.h"

#include <algorithm>
#include <cstring>

#include "boost/crc.hpp"

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace pollux::core::archive {
namespace {

// Reflected CRC-32C, initial value and final XOR 0xFFFFFFFF (RFC 3720's iSCSI CRC).
using Crc32cTable = boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true>;

std::uint32_t reverse_bits(std::uint32_t v) noexcept {
  std::uint32_t r = 0;
  for (int i = 0; i < 32; ++i, v >>= 1) r = (r << 1) | (v & 1u);
  return r;
}

std::uint32_t crc32c_table(const void* data, std::size_t n, std::uint32_t crc) noexcept {
  // Boost keeps the register un-finalised and, for a reflected CRC, takes its initial value
  // unreflected: feed it the finalised value back un-XORed and bit-reversed (a continued crc
  // then equals the crc of the whole, as the instruction's does).
  Crc32cTable c(reverse_bits(crc ^ 0xFFFFFFFFu));
  c.process_bytes(data, n);
  return c.checksum();
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) std::uint32_t crc32c_sse42(const void* data, std::size_t n,
                                                             std::uint32_t crc) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t c = crc ^ 0xFFFFFFFFu;
  for (; n >= 8; n -= 8, p += 8) {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
  }
  auto c32 = static_cast<std::uint32_t>(c);
  if (n >= 4) {
    std::uint32_t v;
    std::memcpy(&v, p, 4);
    c32 = _mm_crc32_u32(c32, v);
    n -= 4;
    p += 4;
  }
  for (; n > 0; --n, ++p) c32 = _mm_crc32_u8(c32, *p);
  return c32 ^ 0xFFFFFFFFu;
}

__attribute__((target("sse4.2"))) void record_crcs_sse42(const std::uint32_t* lengths, const std::byte* const* bodies,
                                                         int n, std::uint32_t* out) noexcept {
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    const auto* p0 = reinterpret_cast<const unsigned char*>(bodies[i]);
    const auto* p1 = reinterpret_cast<const unsigned char*>(bodies[i + 1]);
    const auto* p2 = reinterpret_cast<const unsigned char*>(bodies[i + 2]);
    const auto* p3 = reinterpret_cast<const unsigned char*>(bodies[i + 3]);
    std::uint64_t c0 = _mm_crc32_u32(0xFFFFFFFFu, lengths[i]);
    std::uint64_t c1 = _mm_crc32_u32(0xFFFFFFFFu, lengths[i + 1]);
    std::uint64_t c2 = _mm_crc32_u32(0xFFFFFFFFu, lengths[i + 2]);
    std::uint64_t c3 = _mm_crc32_u32(0xFFFFFFFFu, lengths[i + 3]);
    // The 8-byte words all four bodies have, interleaved; each body's rest on its own.
    const std::size_t common =
        std::min(std::min(lengths[i], lengths[i + 1]), std::min(lengths[i + 2], lengths[i + 3])) / 8;
    for (std::size_t k = 0; k < common; ++k) {
      std::uint64_t v0, v1, v2, v3;
      std::memcpy(&v0, p0 + 8 * k, 8);
      std::memcpy(&v1, p1 + 8 * k, 8);
      std::memcpy(&v2, p2 + 8 * k, 8);
      std::memcpy(&v3, p3 + 8 * k, 8);
      c0 = _mm_crc32_u64(c0, v0);
      c1 = _mm_crc32_u64(c1, v1);
      c2 = _mm_crc32_u64(c2, v2);
      c3 = _mm_crc32_u64(c3, v3);
    }
    const std::size_t done = 8 * common;
    // crc32c_sse42 takes and returns finalised values: un-finalise the register going in.
    out[i] = crc32c_sse42(p0 + done, lengths[i] - done, static_cast<std::uint32_t>(c0) ^ 0xFFFFFFFFu);
    out[i + 1] = crc32c_sse42(p1 + done, lengths[i + 1] - done, static_cast<std::uint32_t>(c1) ^ 0xFFFFFFFFu);
    out[i + 2] = crc32c_sse42(p2 + done, lengths[i + 2] - done, static_cast<std::uint32_t>(c2) ^ 0xFFFFFFFFu);
    out[i + 3] = crc32c_sse42(p3 + done, lengths[i + 3] - done, static_cast<std::uint32_t>(c3) ^ 0xFFFFFFFFu);
  }
  for (; i < n; ++i) {
    out[i] = crc32c_sse42(bodies[i], lengths[i], crc32c_sse42(&lengths[i], sizeof lengths[i], 0));
  }
}

const bool kHaveSse42 = __builtin_cpu_supports("sse4.2");
#endif

}  // namespace

std::uint32_t crc32c(const void* data, std::size_t n, std::uint32_t crc) noexcept {
#if defined(__x86_64__)
  if (__builtin_expect(kHaveSse42, 1)) return crc32c_sse42(data, n, crc);
#endif
  return crc32c_table(data, n, crc);
}

void record_crcs(const std::uint32_t* lengths, const std::byte* const* bodies, int n, std::uint32_t* out) noexcept {
#if defined(__x86_64__)
  if (__builtin_expect(kHaveSse42, 1)) {
    record_crcs_sse42(lengths, bodies, n, out);
    return;
  }
#endif
  for (int i = 0; i < n; ++i)
    out[i] = crc32c_table(bodies[i], lengths[i], crc32c_table(&lengths[i], sizeof lengths[i], 0));
}

std::uint32_t crc32c_portable(const void* data, std::size_t n, std::uint32_t crc) noexcept {
  return crc32c_table(data, n, crc);
}

bool crc32c_hardware() noexcept {
#if defined(__x86_64__)
  return kHaveSse42;
#else
  return false;
#endif
}

}  // namespace pollux::core::archive
