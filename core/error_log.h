// A distinct error log in shared memory, after Aeron's (aeron_distinct_error_log.c, read by
// ErrorStat): errors met where nobody can be told - on poller threads, in a transport's timers,
// while closing - are recorded once per distinct (code, message) with a count and the wall-clock
// times of the first and last observation, so another process (tools/pollux-stat --errors) can
// read them while this one runs, and stderr stays quiet.
//
// Layout (inside the counters file, core/counters.h, at CountersHeader::error_log_offset):
//   [ ErrorLogHeader: 128 bytes, magic + version + sizes ][ capacity x ErrorEntry (512 bytes) ]
// An entry is written completely and then published by a release store of `used` (the reader
// acquire-loads `used` and reads only entries below it); afterwards only its count and last_ns
// change (relaxed atomics). The log is bounded: once `capacity` distinct errors are recorded,
// further distinct ones are counted in `dropped` (and in `observations`), never stored.
//
// Writers are threads of the owning process. record() allocates nothing: a known error costs a
// scan of the published entries (compare key, then bytes) and two relaxed atomic updates; the
// first occurrence of a distinct error takes a mutex for the append (a copy of at most 512 bytes), as
// Aeron's does. Readers treat the region as hostile input (another local user may have written
// the file): every size, index and length is checked before use.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "core/counter.h"

namespace pollux::core {

inline constexpr std::uint64_t kErrorLogMagic = 0x314c5252454c5850ull;  // "PXLERRL1" little-endian
inline constexpr std::uint32_t kErrorLogVersion = 1;
inline constexpr std::uint32_t kErrorEntrySize = 512;
inline constexpr std::uint32_t kErrorMessageMax = 471;  // bytes; longer messages are cut

struct ErrorLogHeader {
  std::uint64_t magic;
  std::uint32_t version;
  std::uint32_t header_size;        // sizeof(ErrorLogHeader)
  std::uint32_t entry_size;         // sizeof(ErrorEntry)
  std::uint32_t capacity;           // entries
  std::atomic<std::uint32_t> used;  // entries published (release after an entry is complete)
  std::uint32_t reserved;
  std::atomic<std::uint64_t> observations;  // every record() call
  std::atomic<std::uint64_t> dropped;       // observations of distinct errors that did not fit
  std::uint8_t pad[128 - 48];
};
static_assert(sizeof(ErrorLogHeader) == 128);

struct ErrorEntry {
  std::atomic<std::uint64_t> count;    // observations (>= 1 once published)
  std::atomic<std::int64_t> first_ns;  // CLOCK_REALTIME of the first observation
  std::atomic<std::int64_t> last_ns;   // and of the latest
  std::uint64_t key;                   // hash of code + message (a fast first compare)
  std::uint32_t code;                  // absl::StatusCode, or an errno value (see ErrorCode)
  std::uint32_t message_length;        // <= kErrorMessageMax
  char message[kErrorEntrySize - 40];  // message_length bytes, then '\0'
};
static_assert(sizeof(ErrorEntry) == kErrorEntrySize);
static_assert(sizeof(ErrorEntry::message) > kErrorMessageMax);

// Bytes of a log with `capacity` entries.
constexpr std::size_t error_log_bytes(std::uint32_t capacity) {
  return sizeof(ErrorLogHeader) + std::size_t{capacity} * sizeof(ErrorEntry);
}

// A decoded entry (reader side, and ErrorLog::entries()).
struct ErrorRecord {
  std::uint32_t code = 0;
  std::string message;
  std::uint64_t count = 0;
  std::int64_t first_ns = 0, last_ns = 0;
};

class ErrorLog {
 public:
  ErrorLog() = default;
  ErrorLog(const ErrorLog&) = delete;
  ErrorLog& operator=(const ErrorLog&) = delete;

  // Control path: formats `region` (error_log_bytes(capacity) bytes, zero-filled, 8-aligned) as
  // an empty log; the magic is stored last (release). `errors` (may be invalid) is bumped by
  // every record().
  void init(void* region, std::uint32_t capacity, Counter errors) noexcept;
  bool valid() const noexcept { return h_ != nullptr; }

  // Any thread of this process. Records one observation of (code, message); never allocates,
  // never fails (a full log counts the observation as dropped).
  void record(absl::StatusCode code, std::string_view message) noexcept;
  void record(const absl::Status& s) noexcept {
    record(s.code(), std::string_view(s.message().data(), s.message().size()));
  }
  // printf-style (absl::FormatSpec: checked at compile time), formatted into a stack buffer.
  template <typename... Args>
  void recordf(absl::StatusCode code, const absl::FormatSpec<Args...>& fmt, const Args&... args) noexcept {
    char buf[kErrorMessageMax + 1];
    const int n = absl::SNPrintF(buf, sizeof buf, fmt, args...);
    record(code,
           std::string_view(buf, n < 0 ? 0 : std::min<std::size_t>(static_cast<std::size_t>(n), kErrorMessageMax)));
  }

  std::uint64_t observations() const noexcept;
  // Control path (describe(), tests): the entries recorded so far.
  std::vector<ErrorRecord> entries() const;

 private:
  ErrorEntry* find(std::uint32_t from, std::uint32_t to, std::uint64_t key, std::uint32_t code,
                   std::string_view message) noexcept;
  ErrorLogHeader* h_ = nullptr;
  ErrorEntry* entries_ = nullptr;
  std::uint32_t capacity_ = 0;
  Counter errors_;
  std::mutex append_mu_;  // first occurrences only
};

struct ErrorLogSnapshot {
  std::uint32_t capacity = 0;
  std::uint64_t observations = 0;
  std::uint64_t dropped = 0;
  std::vector<ErrorRecord> entries;
};
// Decodes an error log from a private copy of its bytes (never a live mapping: the caller
// copied the file). DataLoss / FailedPrecondition naming what is wrong when the region is not a
// valid log of a known version.
absl::StatusOr<ErrorLogSnapshot> decode_error_log(const std::byte* region, std::size_t len);

// Name of an absl::StatusCode value for people ("UNAVAILABLE"), or "code N".
std::string error_code_name(std::uint32_t code);

// The log of processes or objects without a counters file (transports opened without one, in
// tests): private memory, 64 entries, never seen by pollux-stat.
ErrorLog& private_error_log();

}  // namespace pollux::core
