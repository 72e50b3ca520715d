#include "feed_handler/source/source.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "feed_handler/source/live_source.h"
#include "feed_handler/source/pcap_source.h"
#include "itch/generator.h"

namespace pollux::feed {

namespace {

// A generated feed (one window) or a file read in windows.
class ReplaySource final : public Source {
 public:
  std::span<const std::uint8_t> window() const noexcept override { return file_ ? file_->window() : generated_; }
  std::uint64_t window_offset() const noexcept override { return file_ ? file_->window_offset() : 0; }
  bool last_window() const noexcept override { return !file_ || file_->last(); }
  absl::Status advance(std::size_t consumed) override { return file_ ? file_->advance(consumed) : absl::OkStatus(); }
  absl::Status rewind() override { return file_ ? file_->rewind() : absl::OkStatus(); }

  std::vector<std::uint8_t> generated_;
  std::optional<itch::ChunkReader> file_;
  void set_name(std::string n) { name_ = std::move(n); }
};

}  // namespace

absl::StatusOr<std::unique_ptr<Source>> open_source(const FeedConfig& cfg) {
  if (cfg.source == SourceKind::kMoldUdp64) return open_live_source(cfg);
  if (cfg.source == SourceKind::kPcap) return open_pcap_source(cfg);
  const auto t0 = std::chrono::steady_clock::now();
  auto src = std::make_unique<ReplaySource>();
  if (cfg.source == SourceKind::kGenerator) {
    itch::GeneratorOptions o;
    o.symbols = cfg.symbols;
    o.messages = cfg.messages;
    o.seed = cfg.seed;
    o.orders_per_symbol = cfg.orders_per_symbol;
    absl::StatusOr<std::vector<std::uint8_t>> g = itch::generate_itch(o);
    if (!g.ok()) return g.status();
    src->generated_ = std::move(*g);
    src->set_name("generated feed");
    src->description = absl::StrFormat("generator: %d symbols, seed %d, %d orders per symbol", cfg.symbols, cfg.seed,
                                       cfg.orders_per_symbol);
  } else {
    absl::StatusOr<itch::ChunkReader> f = itch::ChunkReader::open(cfg.file);
    if (!f.ok()) return f.status();  // already names the path
    src->description = absl::StrFormat("file %s (%d bytes)", cfg.file, f->size());
    src->file_.emplace(std::move(*f));
    src->set_name(cfg.file);
  }
  // One validating pass (a few ns a message): the replay can then expect the framing to
  // hold (it checks it again: a file can change between the passes), and the progress line
  // knows the total.
  std::uint64_t messages = 0;
  absl::Status s = scan_source(
      *src,
      [&](std::span<const std::uint8_t> w, itch::ParseResult* r) {
        *r = itch::for_each_message(w, [](itch::MessageView) {});
        messages += r->messages;
        return true;
      },
      [] { return true; });
  if (s.ok()) s = src->rewind();
  if (!s.ok()) return s;
  src->messages = messages;
  src->prepare_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return std::unique_ptr<Source>(std::move(src));
}

}  // namespace pollux::feed
