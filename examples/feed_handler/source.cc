#include "feed_handler/source.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "itch/generator.h"

namespace pollux::feed {

absl::StatusOr<std::unique_ptr<Source>> OpenSource(const FeedConfig& cfg) {
  const auto t0 = std::chrono::steady_clock::now();
  auto src = std::make_unique<Source>();
  if (cfg.source == SourceKind::kGenerator) {
    itch::GeneratorOptions o;
    o.symbols = cfg.symbols;
    o.messages = cfg.messages;
    o.seed = cfg.seed;
    o.orders_per_symbol = cfg.orders_per_symbol;
    absl::StatusOr<std::vector<std::uint8_t>> g = itch::GenerateItch(o);
    if (!g.ok()) return g.status();
    src->generated = std::move(*g);
    src->data = src->generated;
    src->description = absl::StrFormat("generator: %d symbols, seed %d, %d orders per symbol", cfg.symbols, cfg.seed,
                                       cfg.orders_per_symbol);
  } else {
    absl::StatusOr<itch::Reader> r = itch::Reader::Open(cfg.file);
    if (!r.ok()) return r.status();  // already names the path
    src->reader.emplace(std::move(*r));
    src->data = src->reader->data();
    src->description = absl::StrFormat("file %s (%d bytes)", cfg.file, src->data.size());
  }
  // One validating pass (a few ns a message): the replay can then trust the framing, and the
  // progress line knows the total.
  const itch::ParseResult r = itch::ForEachMessage(src->data, [](itch::MessageView) {});
  if (!r.ok()) {
    const std::string name = cfg.source == SourceKind::kFile ? cfg.file : "generated feed";
    return absl::Status(r.ToStatus().code(), absl::StrCat(name, ": ", r.ToStatus().message()));
  }
  src->messages = r.messages;
  src->prepare_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return src;
}

}  // namespace pollux::feed
