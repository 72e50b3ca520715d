// Counters kept in a shared-memory file (<shm_dir>/pollux-<name>-<pid>[-<n>].counters) so another
// process (tools/pollux-stat) can read them while this one runs, as Aeron's CnC file allows.
//
// Layout (version 2; docs/ARCHITECTURE.md "Counters file"):
//   [ CountersHeader: 4 KiB ][ capacity x 128-byte labels ][ capacity x 128-byte values ]
//   [ error log: core/error_log.h, at error_log_offset, error_log_size bytes ]
// Each value sits alone in its 128-byte slot because different threads (pollers, application
// threads) write different counters. A counter has exactly one writing thread (core/counter.h);
// the `errors` counter (slot 0, scope "process") is the exception, bumped atomically by every
// ErrorLog::record(). Version 1 had no error log and no label kinds: readers refuse it by
// version, with a message naming both versions.
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
#include "core/counter.h"
#include "core/error_log.h"
#include "core/shm_file.h"

namespace pollux::core {

inline constexpr std::uint64_t kCountersMagic = 0x31524e434c504c50ull;  // "PLPLCNR1" little-endian
// 1: counters only. 2: label kind/owner, process start time and boot id, the error log region.
inline constexpr std::uint32_t kCountersVersion = 2;
inline constexpr std::uint32_t kErrorLogEntries = 64;

struct CountersHeader {
  std::uint64_t magic;
  std::uint32_t version;
  std::uint32_t header_size;  // sizeof(CountersHeader) region = 4096
  std::uint32_t label_size;   // 128
  std::uint32_t value_size;   // 128
  std::uint32_t capacity;     // number of label/value slots
  std::int32_t pid;
  std::int64_t start_ns;                 // CLOCK_REALTIME at creation
  std::atomic<std::uint32_t> allocated;  // slots in use (release after a label is complete)
  std::uint32_t pad0;
  char name[64];  // instance name (runtime.name)
  // Version 2.
  std::uint64_t pid_start;         // start time of pid (core/process.h): a reused pid is not "alive"
  std::uint64_t boot_id;           // core::boot_id_hash() at creation
  std::uint64_t error_log_offset;  // from the start of the file
  std::uint64_t error_log_size;    // bytes
};
static_assert(sizeof(CountersHeader) <= 4096);
static_assert(offsetof(CountersHeader, name) == 48 && offsetof(CountersHeader, pid_start) == 112);

// What a counter belongs to, so readers group without parsing scopes.
enum class CounterKind : std::uint16_t {
  kOther = 0,         // transport internals and the like: scope says what
  kProcess = 1,       // "process": errors
  kPublisher = 2,     // "pub stream N topic": one publisher handle
  kSubscriber = 3,    // "sub stream N topic": one subscriber handle
  kPoller = 4,        // "poller N": one poller thread and its controller
  kPollerStream = 5,  // "poller N stream S": a publisher's channel on its poller
  kHistogram = 6,     // one bucket, the sum or the count of an application's latency histogram
                      // (pollux::AppHistogram): name "<histogram> le <bound_ns>|le inf|sum_ns|count"
};

struct CounterLabel {
  std::uint32_t stream_id;  // 0 for non-stream counters
  std::uint16_t kind;       // CounterKind
  std::uint16_t owner;      // the counters of one publisher/subscriber/poller share it (0: none)
  char scope[56];           // "pub stream 1 itch.0", "poller 0"
  char name[64];            // "messages", "bytes", "back_pressure_log_full", ...
};
static_assert(sizeof(CounterLabel) == 128);

class CountersFile {
 public:
  // Creates the file (mode 0600; the space reserved, so a full tmpfs is an error here and not a
  // SIGBUS later; guarded against truncation by another process, core/mapping_guard.h). With
  // dir empty the counters live in anonymous memory only.
  static absl::StatusOr<std::unique_ptr<CountersFile>> create(std::string_view dir, std::string_view name,
                                                              std::uint32_t capacity = 2048);
  ~CountersFile();  // unmaps and unlinks the file

  // Control path. When full, returns a counter backed by a private overflow slot (still
  // counts, just not visible outside) and records that once in the error log.
  Counter allocate(std::string_view scope, std::string_view name, std::uint32_t stream_id = 0,
                   CounterKind kind = CounterKind::kOther, std::uint16_t owner = 0);
  // A fresh owner id for a group of counters (1, 2, ...; wraps after 65535 to 1).
  std::uint16_t new_owner();

  // This process's error log (in the file; any thread records).
  ErrorLog& error_log() noexcept { return error_log_; }

  const std::string& path() const noexcept { return path_; }
  std::uint32_t allocated() const noexcept;

 private:
  CountersFile() = default;
  std::string path_;
  NewFile file_;  // until published
  std::uint64_t inode_ = 0;
  int guard_ = -1;
  std::byte* base_ = nullptr;
  std::size_t bytes_ = 0;
  std::uint32_t capacity_ = 0;
  std::mutex mu_;
  std::vector<std::unique_ptr<std::atomic<std::uint64_t>>> overflow_;
  std::uint16_t next_owner_ = 0;
  ErrorLog error_log_;
};

// The error log of `f`, or the process's private one when there is no counters file.
inline ErrorLog& error_log_of(CountersFile* f) noexcept { return f != nullptr ? f->error_log() : private_error_log(); }

// Reading side (another process).
struct CounterSnapshot {
  std::string scope;
  std::string name;
  std::uint32_t stream_id;
  std::uint64_t value;
  CounterKind kind = CounterKind::kOther;  // unknown kinds read as kOther
  std::uint16_t owner = 0;
};
struct CountersFileSnapshot {
  std::string path;
  std::string name;
  int pid = 0;
  bool alive = false;
  std::int64_t start_ns = 0;     // wall clock, when the process created the file
  std::int64_t snapshot_ns = 0;  // wall clock, when this copy was taken
  std::vector<CounterSnapshot> counters;
  // The process's error log; error_log_status says why it is missing when it could not be read.
  ErrorLogSnapshot errors;
  absl::Status error_log_status;
};
absl::StatusOr<CountersFileSnapshot> read_counters_file(const std::string& path);
// As read_counters_file, from bytes already copied (tests, fuzzing).
absl::StatusOr<CountersFileSnapshot> decode_counters_file(const std::byte* data, std::size_t len,
                                                          const std::string& path);
// The pid recorded in a counters file of any version (magic checked; the pid sits at the same
// offset in versions 1 and 2): pollux-stat --clean removes the files of dead processes left by
// other builds too. DataLoss when it is not a counters file.
absl::StatusOr<int> counters_file_pid(const std::string& path);
// Every pollux-*.counters file in dir.
std::vector<std::string> list_counters_files(const std::string& dir);

}  // namespace pollux::core
