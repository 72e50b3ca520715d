// The workload bench/callgrind/book.sh runs under callgrind with a simulated cache: a generated
// ITCH feed (--symbols, --messages, seed 1) applied to a BookSet through BookSet::apply_all, in
// two parts: the first --warm messages bring the market to its steady state (the books and the
// order map fill up from empty), then MeasuredApply() applies the rest. The script collects
// only inside MeasuredApply (--toggle-collect), so instructions and cache misses per message
// are those of a full market, without the generator's or the warm-up's. Not a timing
// benchmark: it prints what was applied (the script checks it).
#include <cstdio>
#include <span>
#include <vector>

#include "bench/bench_util.h"
#include "itch/book_set.h"
#include "itch/generator.h"
#include "itch/reader.h"

namespace {

// Out of line and named, so callgrind can switch collection on for exactly this call.
[[gnu::noinline]] pollux::itch::ParseResult MeasuredApply(pollux::itch::BookSet& books,
                                                          std::span<const uint8_t> bytes) {
  return books.apply_all(bytes);
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t symbols = 8000, messages = 4'000'000, warm = 3'000'000;
  pollux::bench::Cli cli("pollux-callgrind-book",
                         "Applies a generated ITCH feed to a BookSet (BookSet::ApplyAll): --warm messages, then\n"
                         "the rest in MeasuredApply() (the workload of bench/callgrind/book.sh; run it under\n"
                         "valgrind --tool=callgrind --toggle-collect=*MeasuredApply*).");
  cli.count("--symbols", &symbols, "symbols (books) of the generated feed", 1, 65535)
      .count("--messages", &messages, "messages generated (seed 1)", 1000)
      .count("--warm", &warm, "messages applied before the measured part", 0);
  cli.parse(argc, argv);
  if (warm >= messages) {
    std::fprintf(stderr, "pollux-callgrind-book: --warm (%llu) must be below --messages (%llu)\n",
                 static_cast<unsigned long long>(warm), static_cast<unsigned long long>(messages));
    return pollux::bench::Cli::kUsageExit;
  }
  pollux::itch::GeneratorOptions g;
  g.symbols = static_cast<std::uint32_t>(symbols);
  g.messages = messages;
  g.seed = 1;
  auto bytes = pollux::itch::generate_itch(g);
  if (!bytes.ok()) {
    std::fprintf(stderr, "pollux-callgrind-book: %s\n", std::string(bytes.status().message()).c_str());
    return 1;
  }
  // Byte offset of message number `warm` (each record: 2-byte length + message).
  std::size_t split = 0;
  for (std::uint64_t i = 0; i < warm; ++i) split += 2 + ((std::size_t{(*bytes)[split]} << 8) | (*bytes)[split + 1]);
  pollux::itch::BookSetOptions o;
  o.expected_orders = std::size_t{2} * g.orders_per_symbol * g.symbols;  // as pollux-feed's subscriber sizes it
  o.expected_symbols = g.symbols;
  pollux::itch::BookSet books(o);
  const std::span<const uint8_t> all(*bytes);
  const auto r1 = books.apply_all(all.first(split));
  const auto r2 = MeasuredApply(books, all.subspan(split));
  if (!r1.ok() || !r2.ok()) {
    std::fprintf(stderr, "pollux-callgrind-book: the feed did not parse\n");
    return 1;
  }
  std::printf("measured_messages %llu live_orders %zu level_mismatch %llu\n",
              static_cast<unsigned long long>(r2.messages), books.live_orders(),
              static_cast<unsigned long long>(books.stats().level_mismatch));
  return 0;
}
