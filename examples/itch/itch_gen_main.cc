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

#include "itch/generator.h"
#include "tools/common/cli.h"

int main(int argc, char** argv) {
  std::uint64_t symbols = 8, messages = 100000, seed = 1, orders_per_symbol = 64;
  std::string out;
  bool zero_length_prefix = false;
  pollux::cli::Parser cli("pollux-itch-gen",
                          "Writes a synthetic NASDAQ TotalView-ITCH 5.0 BinaryFILE (same flags, same bytes).\n"
                          "  pollux-itch-gen --out FILE [--symbols N] [--messages M] [--seed S]");
  cli.text("--out", &out, "FILE", "output file (required)")
      .count("--symbols", &symbols, "number of symbols (stock locates 1..N), 1..65535", 0, UINT32_MAX)
      .count("--messages", &messages, "total messages, including S x 6 and one R and one H per symbol", 0)
      .count("--seed", &seed, "PRNG seed; the output is a pure function of the flags", 0)
      .toggle("--zero_length_prefix", &zero_length_prefix,
              "write every 2-byte length prefix as 0, like NASDAQ's sample files")
      .count("--orders_per_symbol", &orders_per_symbol, "live orders per symbol the flow hovers around", 0, UINT32_MAX)
      .parse(argc, argv);
  if (out.empty()) cli.fail("--out FILE is required");
  pollux::itch::GeneratorOptions o;
  o.symbols = static_cast<std::uint32_t>(symbols);
  o.messages = messages;
  o.seed = seed;
  o.orders_per_symbol = static_cast<std::uint32_t>(orders_per_symbol);
  o.framing = zero_length_prefix ? pollux::itch::Framing::kZeroLengthPrefix : pollux::itch::Framing::kLengthPrefix;
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<std::vector<uint8_t>> bytes = pollux::itch::GenerateItch(o);
  if (!bytes.ok()) {
    std::fprintf(stderr, "pollux-itch-gen: %s\n", bytes.status().ToString().c_str());
    return 2;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (absl::Status s = pollux::itch::WriteBinaryFile(out, *bytes); !s.ok()) {
    std::fprintf(stderr, "pollux-itch-gen: %s\n", s.ToString().c_str());
    return 1;
  }
  std::fprintf(stderr, "pollux-itch-gen: %llu messages, %zu bytes, %u symbols, seed %llu -> %s (%.3f s)\n",
               static_cast<unsigned long long>(o.messages), bytes->size(), o.symbols,
               static_cast<unsigned long long>(o.seed), out.c_str(), secs);
  return 0;
}
