// pollux-itch-gen: writes a deterministic synthetic ITCH 5.0 BinaryFILE.
//
//   pollux-itch-gen --symbols 8 --messages 1000000 --seed 1 --out day.itch
//
// Same flags => same bytes. See itch/generator.h for what the stream contains.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "common/absl_flags_cli.h"
#include "itch/generator.h"

ABSL_FLAG(std::string, out, "", "output file (required)");
ABSL_FLAG(std::uint32_t, symbols, 8, "number of symbols (stock locates 1..N), 1..65535");
ABSL_FLAG(std::uint64_t, messages, 100000, "total messages, including S x 6 and one R and one H per symbol");
ABSL_FLAG(std::uint64_t, seed, 1, "PRNG seed; the output is a pure function of the flags");
ABSL_FLAG(bool, zero_length_prefix, false, "write every 2-byte length prefix as 0, like NASDAQ's sample files");
ABSL_FLAG(std::uint32_t, orders_per_symbol, 64, "live orders per symbol the flow hovers around");

int main(int argc, char** argv) {
  constexpr const char* kProg = "pollux-itch-gen";
  pollux::examples::parse_absl_flags(
      argc, argv,
      {kProg,
       "Writes a synthetic NASDAQ TotalView-ITCH 5.0 BinaryFILE (same flags, same bytes).\n"
       "  pollux-itch-gen --out FILE [--symbols N] [--messages M] [--seed S]\n\n",
       {"out", "symbols", "messages", "seed", "zero_length_prefix", "orders_per_symbol"},
       /*dashed=*/false});
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) pollux::examples::usage_error(kProg, "--out FILE is required");
  pollux::itch::GeneratorOptions o;
  o.symbols = absl::GetFlag(FLAGS_symbols);
  o.messages = absl::GetFlag(FLAGS_messages);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.orders_per_symbol = absl::GetFlag(FLAGS_orders_per_symbol);
  o.framing = absl::GetFlag(FLAGS_zero_length_prefix) ? pollux::itch::Framing::kZeroLengthPrefix
                                                      : pollux::itch::Framing::kLengthPrefix;
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<std::vector<uint8_t>> bytes = pollux::itch::generate_itch(o);
  if (!bytes.ok()) {
    std::fprintf(stderr, "pollux-itch-gen: %s\n", bytes.status().ToString().c_str());
    return 2;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (absl::Status s = pollux::itch::write_binary_file(out, *bytes); !s.ok()) {
    std::fprintf(stderr, "pollux-itch-gen: %s\n", s.ToString().c_str());
    return 1;
  }
  std::fprintf(stderr, "pollux-itch-gen: %llu messages, %zu bytes, %u symbols, seed %llu -> %s (%.3f s)\n",
               static_cast<unsigned long long>(o.messages), bytes->size(), o.symbols,
               static_cast<unsigned long long>(o.seed), out.c_str(), secs);
  return 0;
}
