// Counters kept in a shared-memory file (<shm_dir>/pollux-<name>-<pid>[-<n>].counters) so another
// process (tools/pollux-stat) can read them while this one runs, as Aeron's CnC file allows.
//
// Layout: a 4 KiB header, then `capacity` 128-byte labels, then `capacity` 128-byte values.
// Each value sits alone in its 128-byte slot because different threads (pollers, application
// threads) write different counters. A counter has exactly one writing thread, which updates it
// with a relaxed load + store (no locked instruction); readers load relaxed and may see a value
// a few updates old, never a torn one.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/shm_file.h"

namespace pollux::core {

inline constexpr std::uint64_t kCountersMagic = 0x31524e434c504c50ull;  // "PLPLCNR1" little-endian
inline constexpr std::uint32_t kCountersVersion = 1;

struct CountersHeader {
  std::uint64_t magic;
  std::uint32_t version;
  std::uint32_t header_size;   // sizeof(CountersHeader) region = 4096
  std::uint32_t label_size;    // 128
  std::uint32_t value_size;    // 128
  std::uint32_t capacity;      // number of label/value slots
  std::int32_t pid;
  std::int64_t start_ns;       // CLOCK_REALTIME at creation
  std::atomic<std::uint32_t> allocated;  // slots in use (release after a label is complete)
  std::uint32_t pad0;
  char name[64];               // instance name (runtime.name)
};
static_assert(sizeof(CountersHeader) <= 4096);

struct CounterLabel {
  std::uint32_t stream_id;     // 0 for non-stream counters
  std::uint32_t reserved;
  char scope[56];              // "pub stream 1 itch.0", "poller 0"
  char name[64];               // "messages", "bytes", "back_pressure", ...
};
static_assert(sizeof(CounterLabel) == 128);

class Counter {
 public:
  Counter() = default;
  explicit Counter(std::atomic<std::uint64_t>* v) : v_(v) {}
  // Single-writer increment: only the owning thread calls add()/set().
  void add(std::uint64_t n = 1) noexcept { v_->store(v_->load(std::memory_order_relaxed) + n, std::memory_order_relaxed); }
  void set(std::uint64_t n) noexcept { v_->store(n, std::memory_order_relaxed); }
  // For the rare counter written by several threads.
  void add_shared(std::uint64_t n = 1) noexcept { v_->fetch_add(n, std::memory_order_relaxed); }
  std::uint64_t get() const noexcept { return v_->load(std::memory_order_relaxed); }
  bool valid() const noexcept { return v_ != nullptr; }
  // The value's cell (for handing to code outside core, e.g. pollux::AppCounter).
  std::atomic<std::uint64_t>* cell() const noexcept { return v_; }

 private:
  std::atomic<std::uint64_t>* v_ = nullptr;
};

class CountersFile {
 public:
  // Creates the file (mode 0600; the space reserved, so a full tmpfs is an error here and not a
  // SIGBUS later; guarded against truncation by another process, core/mapping_guard.h). With
  // dir empty the counters live in anonymous memory only.
  static absl::StatusOr<std::unique_ptr<CountersFile>> create(std::string_view dir, std::string_view name,
                                                              std::uint32_t capacity = 2048);
  ~CountersFile();  // unmaps and unlinks the file

  // Control path. When full, returns a counter backed by a private overflow slot (still
  // counts, just not visible outside) and notes it once on stderr.
  Counter allocate(std::string_view scope, std::string_view name, std::uint32_t stream_id = 0);

  const std::string& path() const noexcept { return path_; }
  std::uint32_t allocated() const noexcept;

 private:
  CountersFile() = default;
  std::string path_;
  NewFile file_;          // until published
  std::uint64_t inode_ = 0;
  int guard_ = -1;
  std::byte* base_ = nullptr;
  std::size_t bytes_ = 0;
  std::uint32_t capacity_ = 0;
  std::mutex mu_;
  std::vector<std::unique_ptr<std::atomic<std::uint64_t>>> overflow_;
};

// Reading side (another process).
struct CounterSnapshot {
  std::string scope;
  std::string name;
  std::uint32_t stream_id;
  std::uint64_t value;
};
struct CountersFileSnapshot {
  std::string path;
  std::string name;
  int pid = 0;
  bool alive = false;
  std::int64_t start_ns = 0;
  std::vector<CounterSnapshot> counters;
};
absl::StatusOr<CountersFileSnapshot> read_counters_file(const std::string& path);
// Every pollux-*.counters file in dir.
std::vector<std::string> list_counters_files(const std::string& dir);

}  // namespace pollux::core
