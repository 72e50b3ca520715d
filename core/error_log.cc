#include "core/error_log.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "core/process.h"

namespace pollux::core {
namespace {

// Upper bound a reader accepts for a log's capacity (the writer uses 64): keeps the size
// arithmetic far from overflow whatever a hostile file says.
constexpr std::uint32_t kMaxErrorLogCapacity = 1u << 16;

std::uint64_t error_key(std::uint32_t code, std::string_view message) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the code's bytes, then the message
  for (int i = 0; i < 4; ++i) h = (h ^ ((code >> (8 * i)) & 0xff)) * 0x100000001b3ull;
  for (unsigned char c : message) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

void bump(ErrorEntry& e, std::int64_t now) noexcept {
  e.count.fetch_add(1, std::memory_order_relaxed);
  // last_ns only moves forward (two threads recording at once may arrive out of order).
  std::int64_t prev = e.last_ns.load(std::memory_order_relaxed);
  while (prev < now && !e.last_ns.compare_exchange_weak(prev, now, std::memory_order_relaxed)) {
  }
}

// The bytes of an entry as plain integers (readers decode a private copy, not live atomics).
struct RawEntry {
  std::uint64_t count;
  std::int64_t first_ns;
  std::int64_t last_ns;
  std::uint64_t key;
  std::uint32_t code;
  std::uint32_t message_length;
  char message[kErrorEntrySize - 40];
};
static_assert(sizeof(RawEntry) == sizeof(ErrorEntry));
static_assert(offsetof(RawEntry, code) == offsetof(ErrorEntry, code));
static_assert(offsetof(RawEntry, message) == offsetof(ErrorEntry, message));

struct RawHeader {
  std::uint64_t magic;
  std::uint32_t version;
  std::uint32_t header_size;
  std::uint32_t entry_size;
  std::uint32_t capacity;
  std::uint32_t used;
  std::uint32_t reserved;
  std::uint64_t observations;
  std::uint64_t dropped;
};
static_assert(offsetof(RawHeader, used) == offsetof(ErrorLogHeader, used));
static_assert(offsetof(RawHeader, dropped) == offsetof(ErrorLogHeader, dropped));

}  // namespace

void ErrorLog::init(void* region, std::uint32_t capacity, Counter errors) noexcept {
  h_ = new (region) ErrorLogHeader{};
  entries_ = reinterpret_cast<ErrorEntry*>(static_cast<std::byte*>(region) + sizeof(ErrorLogHeader));
  capacity_ = capacity;
  errors_ = errors;
  h_->version = kErrorLogVersion;
  h_->header_size = sizeof(ErrorLogHeader);
  h_->entry_size = sizeof(ErrorEntry);
  h_->capacity = capacity;
  h_->used.store(0, std::memory_order_relaxed);
  // Magic last, with release: a reader that sees it sees the sizes above.
  std::atomic_ref<std::uint64_t>(h_->magic).store(kErrorLogMagic, std::memory_order_release);
}

ErrorEntry* ErrorLog::find(std::uint32_t from, std::uint32_t to, std::uint64_t key, std::uint32_t code,
                           std::string_view message) noexcept {
  for (std::uint32_t i = from; i < to; ++i) {
    ErrorEntry& e = entries_[i];
    if (e.key == key && e.code == code && e.message_length == message.size() &&
        std::memcmp(e.message, message.data(), message.size()) == 0) {
      return &e;
    }
  }
  return nullptr;
}

void ErrorLog::record(absl::StatusCode code, std::string_view message) noexcept {
  if (h_ == nullptr) {
    if (this != &private_error_log()) private_error_log().record(code, message);
    return;
  }
  message = message.substr(0, kErrorMessageMax);
  const auto c = static_cast<std::uint32_t>(code);
  const std::uint64_t key = error_key(c, message);
  const std::int64_t now = wall_clock_ns();
  h_->observations.fetch_add(1, std::memory_order_relaxed);
  if (errors_.valid()) errors_.add_shared();
  // Acquire pairs with the release in the append below: entries under `used` are complete.
  const std::uint32_t seen = std::min(h_->used.load(std::memory_order_acquire), capacity_);
  if (ErrorEntry* e = find(0, seen, key, c, message)) {
    bump(*e, now);
    return;
  }
  std::lock_guard<std::mutex> lock(append_mu_);
  const std::uint32_t used = h_->used.load(std::memory_order_relaxed);  // only appenders write it
  if (ErrorEntry* e = find(seen, used, key, c, message)) {              // appended by another thread meanwhile
    bump(*e, now);
    return;
  }
  if (used >= capacity_) {
    h_->dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  ErrorEntry& e = entries_[used];
  e.key = key;
  e.code = c;
  e.message_length = static_cast<std::uint32_t>(message.size());
  if (!message.empty()) std::memcpy(e.message, message.data(), message.size());
  e.message[message.size()] = '\0';
  e.first_ns.store(now, std::memory_order_relaxed);
  e.last_ns.store(now, std::memory_order_relaxed);
  e.count.store(1, std::memory_order_relaxed);
  // Release pairs with the acquire loads of `used` (record() above, entries(), readers' copies).
  h_->used.store(used + 1, std::memory_order_release);
}

std::uint64_t ErrorLog::observations() const noexcept {
  return h_ != nullptr ? h_->observations.load(std::memory_order_relaxed) : 0;
}

std::vector<ErrorRecord> ErrorLog::entries() const {
  std::vector<ErrorRecord> out;
  if (h_ == nullptr) return out;
  const std::uint32_t n = std::min(h_->used.load(std::memory_order_acquire), capacity_);
  for (std::uint32_t i = 0; i < n; ++i) {
    const ErrorEntry& e = entries_[i];
    out.push_back({e.code, std::string(e.message, e.message_length), e.count.load(std::memory_order_relaxed),
                   e.first_ns.load(std::memory_order_relaxed), e.last_ns.load(std::memory_order_relaxed)});
  }
  return out;
}

absl::StatusOr<ErrorLogSnapshot> decode_error_log(const std::byte* region, std::size_t len) {
  if (region == nullptr || len < sizeof(RawHeader)) {
    return absl::DataLossError(
        absl::StrFormat("error log: %u bytes, smaller than its header (%u)", len, sizeof(RawHeader)));
  }
  RawHeader h;
  std::memcpy(&h, region, sizeof h);
  if (h.magic != kErrorLogMagic) {
    return absl::DataLossError(
        absl::StrFormat("error log: bad magic 0x%016x (expected 0x%016x)", h.magic, kErrorLogMagic));
  }
  if (h.version != kErrorLogVersion) {
    return absl::FailedPreconditionError(
        absl::StrFormat("error log: version %u, this reader understands version %u (a different pollux build wrote it)",
                        h.version, kErrorLogVersion));
  }
  if (h.header_size != sizeof(ErrorLogHeader) || h.entry_size != sizeof(ErrorEntry) || h.capacity == 0 ||
      h.capacity > kMaxErrorLogCapacity || error_log_bytes(h.capacity) > len) {
    return absl::DataLossError(
        absl::StrFormat("error log: inconsistent sizes (header %u, entry %u, capacity %u, region %u bytes)",
                        h.header_size, h.entry_size, h.capacity, len));
  }
  if (h.used > h.capacity) {
    return absl::DataLossError(absl::StrFormat("error log: %u entries used of a capacity of %u", h.used, h.capacity));
  }
  ErrorLogSnapshot out;
  out.capacity = h.capacity;
  out.observations = h.observations;
  out.dropped = h.dropped;
  for (std::uint32_t i = 0; i < h.used; ++i) {
    RawEntry e;
    std::memcpy(&e, region + sizeof(ErrorLogHeader) + std::size_t{i} * sizeof(ErrorEntry), sizeof e);
    if (e.message_length > kErrorMessageMax || e.count == 0) {
      return absl::DataLossError(absl::StrFormat("error log: entry %u is malformed (message length %u, count %u)", i,
                                                 e.message_length, e.count));
    }
    out.entries.push_back({e.code, std::string(e.message, e.message_length), e.count, e.first_ns, e.last_ns});
  }
  return out;
}

std::string error_code_name(std::uint32_t code) {
  if (code <= static_cast<std::uint32_t>(absl::StatusCode::kUnauthenticated)) {
    return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
  }
  return absl::StrFormat("code %u", code);
}

ErrorLog& private_error_log() {
  static ErrorLog* log = [] {
    constexpr std::uint32_t kCapacity = 64;
    auto* mem = new std::uint64_t[error_log_bytes(kCapacity) / 8]();  // lives as long as the process
    auto* l = new ErrorLog();
    l->init(mem, kCapacity, Counter());
    return l;
  }();
  return *log;
}

}  // namespace pollux::core
