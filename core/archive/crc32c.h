// CRC-32C (Castagnoli), the checksum of every record, segment header and catalog of a
// recording (docs/ARCHIVE.md). The SSE4.2 crc32 instruction where the CPU has it (checked once),
// Boost.CRC's table otherwise: the same values either way.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pollux::core::archive {

// CRC-32C of `n` bytes continuing from `crc` (0 to start): crc32c(a + b) ==
// crc32c(b, n_b, crc32c(a, n_a)).
std::uint32_t crc32c(const void* data, std::size_t n, std::uint32_t crc = 0) noexcept;

// The crc of each of `n` records (format.h's RecordHeader::crc: crc32c of the 4-byte length,
// continued over the body): out[i] for lengths[i] bytes at bodies[i]. With the instruction, four
// records' chains run interleaved (each crc32 step waits ~3 cycles for the previous one of its
// chain, so one chain per record leaves the unit idle two cycles in three).
void record_crcs(const std::uint32_t* lengths, const std::byte* const* bodies, int n, std::uint32_t* out) noexcept;

// The table path alone (tests compare it with the instruction's).
std::uint32_t crc32c_portable(const void* data, std::size_t n, std::uint32_t crc = 0) noexcept;

// Whether crc32c() uses the CPU's instruction (for benchmarks and doctor-style reports).
bool crc32c_hardware() noexcept;

}  // namespace pollux::core::archive
