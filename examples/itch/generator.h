// Deterministic synthetic ITCH 5.0 feed.
//
// The stream looks like a (small) trading day: S 'O', a Stock Directory (R) and a Trading
// Action (H, 'T') per symbol, S 'S', S 'Q', then the order flow, then S 'M', S 'E', S 'C'.
// The order flow is a mix of adds (A, ~3% of them F), executions (E, some C), partial
// cancels (X), deletes (D), replaces (U) and non-displayed trades (P) that stays
// consistent: E/C/X/D/U only name live orders, executed or cancelled shares never exceed
// what is left, a replace retires the old reference and opens a new one on the same side,
// references only grow, and timestamps never decrease. Prices sit a few ticks either side
// of a per-symbol random-walk mid; as the mid moves, older orders can end up crossing.
//
// Same options => same bytes, on every platform (random.h explains why).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "itch/encoder.h"

namespace pollux::itch {

struct GeneratorOptions {
  uint32_t symbols = 8;         // 1..65535; symbol i gets stock locate i + 1
  uint64_t messages = 100'000;  // total, including the 2 * symbols + 6 preamble/trailer
  uint64_t seed = 1;
  Framing framing = Framing::kLengthPrefix;
  uint32_t orders_per_symbol = 64;  // live orders per symbol the flow hovers around
};

// The smallest `messages` value for `symbols`: S x 6 plus R and H per symbol.
[[nodiscard]] constexpr uint64_t min_messages(uint32_t symbols) noexcept {
  return 6 + 2 * static_cast<uint64_t>(symbols);
}

// InvalidArgument naming the offending option, or OK.
[[nodiscard]] absl::Status validate_options(const GeneratorOptions& options);

// The whole stream, framed as options.framing says. Roughly 30 bytes per message; about
// 50-100 ns per message on the project's 2-core VM.
[[nodiscard]] absl::StatusOr<std::vector<uint8_t>> generate_itch(const GeneratorOptions& options);

// The symbol names the generator assigns (index i is stock locate i + 1); a pure function
// of (symbols, seed).
[[nodiscard]] std::vector<std::string> generated_symbols(uint32_t symbols, uint64_t seed);

// Writes `bytes` to `path` (truncating), reporting errno text on failure.
[[nodiscard]] absl::Status write_binary_file(const std::string& path, std::span<const uint8_t> bytes);

}  // namespace pollux::itch
