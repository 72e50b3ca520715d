// pollux-itch-gen: writes a deterministic synthetic ITCH 5.0 BinaryFILE.
//
//   pollux-itch-gen --symbols 8 --messages 1000000 --seed 1 --out day.itch
//
// Same flags => same bytes. See itch/generator.h for what the stream contains.
#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "itch/generator.h"

ABSL_FLAG(uint32_t, symbols, 8, "Number of symbols (stock locates 1..N), 1..65535.");
ABSL_FLAG(uint64_t, messages, 100000,
          "Total messages, including S x 6 and one R and one H per symbol.");
ABSL_FLAG(uint64_t, seed, 1, "PRNG seed; the output is a pure function of the flags.");
ABSL_FLAG(std::string, out, "", "Output file (required).");
ABSL_FLAG(bool, zero_length_prefix, false,
          "Write every 2-byte length prefix as 0, like NASDAQ's sample files.");
ABSL_FLAG(uint32_t, orders_per_symbol, 64, "Live orders per symbol the flow hovers around.");

namespace {

constexpr const char* kFlags[] = {"symbols", "messages", "seed", "out", "zero_length_prefix", "orders_per_symbol"};

// --help lists this program's flags and exits 0. Abseil's own --help matches flags by the
// source file's name (none here) and exits 1.
void PrintHelp() {
  std::printf("usage: pollux-itch-gen --out FILE [--symbols N] [--messages M] [--seed S] [--zero_length_prefix]\n"
              "                       [--orders_per_symbol K]\n\n"
              "Writes a synthetic NASDAQ TotalView-ITCH 5.0 BinaryFILE (same flags, same bytes).\n\n");
  for (const char* name : kFlags) {
    const absl::CommandLineFlag* f = absl::FindCommandLineFlag(name);
    if (f == nullptr) continue;
    std::printf("  --%-20s %s (default: %s)\n", name, f->Help().c_str(),
                f->DefaultValue().empty() ? "\"\"" : f->DefaultValue().c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--") break;
    if (a == "-h" || a == "--help" || a == "-help") {
      PrintHelp();
      return 0;
    }
  }
  absl::SetProgramUsageMessage(
      "Writes a synthetic NASDAQ TotalView-ITCH 5.0 BinaryFILE.\n"
      "  pollux-itch-gen --symbols N --messages M --seed S --out FILE");
  // Unknown flags end the program (Abseil: "Unknown command line flag"); stray words too.
  const std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() > 1) {
    std::fprintf(stderr, "pollux-itch-gen: unexpected argument \"%s\" (flags only, see --help)\n", positional[1]);
    return 2;
  }
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) {
    std::fprintf(stderr, "pollux-itch-gen: --out FILE is required (see --help)\n");
    return 2;
  }
  pollux::itch::GeneratorOptions o;
  o.symbols = absl::GetFlag(FLAGS_symbols);
  o.messages = absl::GetFlag(FLAGS_messages);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.orders_per_symbol = absl::GetFlag(FLAGS_orders_per_symbol);
  o.framing = absl::GetFlag(FLAGS_zero_length_prefix) ? pollux::itch::Framing::kZeroLengthPrefix
                                                      : pollux::itch::Framing::kLengthPrefix;
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
