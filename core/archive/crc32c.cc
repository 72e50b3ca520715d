#include "core/archive/crc32c.h"

#include <cstring>

#include "boost/crc.hpp"

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace pollux::core::archive {
namespace {

// Reflected CRC-32C, initial value and final XOR 0xFFFFFFFF (RFC 3720's iSCSI CRC).
using Crc32cTable = boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true>;

std::uint32_t crc32c_table(const void* data, std::size_t n, std::uint32_t crc) noexcept {
  // Boost keeps the register un-finalised: feed it the finalised value back un-XORed.
  Crc32cTable c(crc ^ 0xFFFFFFFFu);
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

const bool kHaveSse42 = __builtin_cpu_supports("sse4.2");
#endif

}  // namespace

std::uint32_t crc32c(const void* data, std::size_t n, std::uint32_t crc) noexcept {
#if defined(__x86_64__)
  if (__builtin_expect(kHaveSse42, 1)) return crc32c_sse42(data, n, crc);
#endif
  return crc32c_table(data, n, crc);
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
