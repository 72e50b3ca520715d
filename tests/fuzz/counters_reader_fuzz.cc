// Fuzzes what pollux-stat and the metrics endpoint do with a counters file another local process
// wrote: core::decode_counters_file (core/counters.cc) and, inside it, core::decode_error_log
// (core/error_log.cc), then the endpoint's renderings of what was accepted (api/metrics.cc:
// Prometheus text, OpenMetrics, the page's JSON). Any local user can leave a file named
// pollux-*.counters in the shm directory, so every byte is hostile.
//
// Setup (once per process): the product's own writer (CountersFile::create, 16 counter slots)
// builds a file with counters of every kind and an error log with entries; its bytes are the
// template. Input: a list of patches (each aimed at the header, the labels, the values, the
// error log's header, its entries, or anywhere), then an optional truncation.
//
// Invariants (besides "no crash, no out-of-bounds access, no UB"):
//  - an accepted file reports no more counters than its slots can hold within the bytes given,
//    every scope and name within its field;
//  - an accepted error log has at most as many entries as fit in the bytes given, each with a
//    message of at most kErrorMessageMax bytes and a count of at least 1;
//  - the unpatched template decodes with everything the writer put in it;
//  - every rendered exposition line is a comment or a pollux_ sample ending in a number, label
//    values never hold a raw quote, backslash or control byte; OpenMetrics ends with # EOF; the
//    JSON holds no control byte.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "api/metrics.h"
#include "core/counters.h"
#include "core/error_log.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

namespace core = pollux::core;
using pollux::fuzz::FuzzInput;

constexpr std::uint32_t kSlots = 16;

struct Template {
  std::vector<std::byte> bytes;
  std::size_t log_offset = 0;
};

const Template& the_template() {
  static const Template t = [] {
    struct stat st;
    const std::string dir = ::stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
    auto f = core::CountersFile::create(dir, "fuzz-" + std::to_string(::getpid()), kSlots);
    FUZZ_CHECK(f.ok(), "cannot create the template counters file: %s", f.status().ToString().c_str());
    core::CountersFile& c = **f;
    const std::uint16_t pub = c.new_owner(), sub = c.new_owner(), poller = c.new_owner();
    c.allocate("pub stream 7 quotes", "messages", 7, core::CounterKind::kPublisher, pub).add(100);
    c.allocate("sub stream 7 quotes", "position", 7, core::CounterKind::kSubscriber, sub).set(61);
    c.allocate("poller 0", "mode", 0, core::CounterKind::kPoller, poller).set(2);
    c.allocate("udp pub stream 7 session 1", "position", 7, core::CounterKind::kPublisher).set(101);
    const std::uint16_t hist = c.new_owner();
    for (const char* cell : {"lat le 100", "lat le 1000000000", "lat le inf", "lat sum_ns", "lat count"}) {
      c.allocate("feed book 0", cell, 0, core::CounterKind::kHistogram, hist).set(3);
    }
    c.allocate("late join quotes", "state", 0).set(1);
    c.error_log().record(absl::StatusCode::kUnavailable, "rdma: stream 7: subscriber 10.0.0.2 disconnected");
    c.error_log().record(absl::StatusCode::kUnavailable, "rdma: stream 7: subscriber 10.0.0.2 disconnected");
    c.error_log().record(absl::StatusCode::kResourceExhausted, "placement: poller 0 runs unpinned");
    std::ifstream in(c.path(), std::ios::binary);
    std::string s((std::istreambuf_iterator<char>(in)), {});
    Template t;
    t.bytes.resize(s.size());
    std::memcpy(t.bytes.data(), s.data(), s.size());
    std::memcpy(&t.log_offset, t.bytes.data() + offsetof(core::CountersHeader, error_log_offset), sizeof t.log_offset);
    auto snap = core::decode_counters_file(t.bytes.data(), t.bytes.size(), "template");
    FUZZ_CHECK(snap.ok() && snap->counters.size() == 11 && snap->errors.entries.size() == 2 &&
                   snap->errors.entries[0].count == 2 && snap->error_log_status.ok(),
               "the template does not decode as written: %s", snap.status().ToString().c_str());
    return t;  // the file is removed with `f`
  }();
  return t;
}

std::size_t patch_offset(FuzzInput& in, const Template& t) {
  const std::uint32_t v = in.u32();
  const std::size_t size = t.bytes.size();
  switch (in.u8() % 6) {
    case 0:
      return v % sizeof(core::CountersHeader);  // header
    case 1:
      return 4096 + v % (kSlots * 128);  // labels
    case 2:
      return 4096 + kSlots * 128 + v % (kSlots * 128);  // values
    case 3:
      return t.log_offset + v % sizeof(core::ErrorLogHeader);  // error log header
    case 4:
      return t.log_offset + sizeof(core::ErrorLogHeader) + v % (3 * sizeof(core::ErrorEntry));  // entries
    default:
      return v % size;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const Template& t = the_template();
  FuzzInput in(data, size);
  std::vector<std::byte> b = t.bytes;
  const int patches = in.u8() % 16;
  for (int i = 0; i < patches && !in.empty(); ++i) {
    const std::size_t at = patch_offset(in, t);
    std::size_t got = 0;
    const std::uint8_t* src = in.bytes(1 + in.u8() % 16, &got);
    const std::size_t n = std::min(got, b.size() - std::min(at, b.size()));
    if (n != 0) std::memcpy(b.data() + at, src, n);
  }
  if (in.flag()) b.resize(in.u32() % (b.size() + 1));
  FUZZ_TRACE("%d patches, %zu bytes", patches, b.size());
  auto snap = core::decode_counters_file(b.data(), b.size(), "fuzz");
  if (!snap.ok()) return 0;
  FUZZ_CHECK(b.size() >= 4096 + 256 * snap->counters.size(), "%zu counters in %zu bytes", snap->counters.size(),
             b.size());
  for (const auto& c : snap->counters) {
    FUZZ_CHECK(c.scope.size() <= 56 && c.name.size() <= 64, "label fields %zu/%zu", c.scope.size(), c.name.size());
    (void)pollux::fuzz::touch(c.scope.data(), c.scope.size());
  }
  if (snap->error_log_status.ok()) {
    FUZZ_CHECK(snap->errors.entries.size() * sizeof(core::ErrorEntry) <= b.size(), "%zu entries in %zu bytes",
               snap->errors.entries.size(), b.size());
    FUZZ_CHECK(snap->errors.entries.size() <= snap->errors.capacity, "%zu entries, capacity %u",
               snap->errors.entries.size(), snap->errors.capacity);
    for (const auto& e : snap->errors.entries) {
      FUZZ_CHECK(e.message.size() <= core::kErrorMessageMax && e.count >= 1, "entry: %zu bytes, count %llu",
                 e.message.size(), static_cast<unsigned long long>(e.count));
      (void)pollux::fuzz::touch(e.message.data(), e.message.size());
    }
  } else {
    FUZZ_CHECK(snap->errors.entries.empty(), "entries reported from a refused log");
  }
  // The endpoint renders live processes only: this one is taken as running.
  snap->alive = true;
  namespace metrics = pollux::detail::metrics;
  const std::vector<core::CountersFileSnapshot> procs{std::move(*snap)};
  for (const metrics::Format f : {metrics::Format::kPrometheus, metrics::Format::kOpenMetrics}) {
    const std::string text = metrics::render(procs, f);
    std::size_t at = 0;
    while (at < text.size()) {
      const std::size_t end = text.find('\n', at);
      FUZZ_CHECK(end != std::string::npos, "exposition does not end with a newline");
      const std::string_view line(text.data() + at, end - at);
      at = end + 1;
      if (line.substr(0, 2) == "# ") {
        for (unsigned char ch : line) FUZZ_CHECK(ch >= 0x20 && ch < 0x7f, "byte 0x%02x in a comment line", ch);
        continue;
      }
      FUZZ_CHECK(line.substr(0, 7) == "pollux_", "sample line: %.*s", static_cast<int>(line.size()), line.data());
      const std::size_t sp = line.rfind(' ');
      FUZZ_CHECK(sp != std::string_view::npos && sp + 1 < line.size() &&
                     line.find_first_not_of("0123456789.e+-Inf", sp + 1) == std::string_view::npos,
                 "sample value: %.*s", static_cast<int>(line.size()), line.data());
      // Inside the braces: label="value" pairs, values with every quote and backslash escaped.
      const std::size_t open = line.find('{');
      if (open == std::string_view::npos || open > sp) continue;
      bool in_value = false;
      for (std::size_t i = open + 1; i < line.size(); ++i) {
        const unsigned char ch = static_cast<unsigned char>(line[i]);
        FUZZ_CHECK(ch >= 0x20 && ch < 0x7f, "control or non-ASCII byte 0x%02x in a sample", ch);
        if (!in_value && ch == '}') break;
        if (ch == '"') in_value = !in_value;
        if (in_value && ch == '\\') ++i;  // an escape: the next byte is part of it
      }
      FUZZ_CHECK(!in_value, "unterminated label value: %.*s", static_cast<int>(line.size()), line.data());
    }
    if (f == metrics::Format::kOpenMetrics) {
      FUZZ_CHECK(text.size() >= 6 && text.compare(text.size() - 6, 6, "# EOF\n") == 0, "OpenMetrics without # EOF");
    }
  }
  metrics::RateHistory rates;
  (void)metrics::render_json(procs, &rates);
  const std::string json = metrics::render_json(procs, &rates);
  for (unsigned char ch : json) FUZZ_CHECK(ch >= 0x20 || ch == '\n', "control byte 0x%02x in the JSON", ch);
  return 0;
}
