// Buffer pool: fixed-size slots in one contiguous region, so an RDMA transport registers the
// whole region once (ibv_reg_mr costs 5-20 us: never on the data path).
//
// The region is mmap'ed with 2 MiB hugepages when available (MAP_HUGETLB), else normal pages
// with MADV_HUGEPAGE; bound to a NUMA node; and pre-touched at start-up so the first message is
// not a page fault. Slots are handed out in contiguous ranges (carve()) to endpoints; each range
// is then managed by its owner thread with a SlotStack, and freed slots travel back to their
// owner through an SPSC ring, so the pool itself takes no lock on the data path. A range goes
// back to the pool (give_back(), through a SlotLease) once nothing can touch its slots: a
// process that opens and closes endpoints again and again does not use the pool up.
//
// The pool is not mlock'ed (pre-touching keeps the first message from faulting; hugepages
// are never swapped), and MAP_HUGETLB mappings are not charged to RLIMIT_MEMLOCK, so the
// locked-memory limit does not concern it: only an RDMA transport's registration pins the
// region against that limit, and it checks the limit first with an error naming it, the
// pool size and `ulimit -l` (transport/rdma/verbs_errors.h; tests/core/pool_test.cc shows a
// 16 MiB pool and a shm context working under a 64 KiB limit).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pollux::core {

enum class HugePages { kAuto, kOn, kOff };

struct PoolOptions {
  std::uint32_t slot_size = 2048;  // bytes, rounded up to 64
  std::uint32_t slots = 4096;
  HugePages hugepages = HugePages::kAuto;
  int numa_node = -1;  // -1: no binding (first touch)
};

// What a transport stores after registering the region (e.g. an ibv_mr* and its lkey).
struct PoolRegistration {
  const void* owner = nullptr;  // transport instance that registered
  void* handle = nullptr;       // transport-specific (ibv_mr*)
  std::uint32_t lkey = 0;
};

struct SlotRange {
  std::uint32_t first = 0;
  std::uint32_t count = 0;
};

// Shared ownership (std::shared_ptr) lets a SlotLease outlive the pool's owner safely; a pool
// held otherwise (a unique_ptr in a test) still works, its leases just never give back.
class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  static absl::StatusOr<std::unique_ptr<BufferPool>> create(const PoolOptions& opt);
  // Bytes create() maps for `opt`: slots x slot_size (rounded up to 64), rounded up to whole
  // 2 MiB pages when `hugepages`, else to 4 KiB: what hugepages must cover and an RDMA
  // registration pins (pollux-doctor checks both before a process starts).
  static std::size_t mapping_bytes(const PoolOptions& opt, bool hugepages) noexcept;
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  std::byte* slot(std::uint32_t index) const noexcept { return base_ + static_cast<std::size_t>(index) * slot_size_; }
  std::uint32_t index_of(const void* p) const noexcept {
    return static_cast<std::uint32_t>((static_cast<const std::byte*>(p) - base_) / slot_size_);
  }
  std::uint32_t slot_size() const noexcept { return slot_size_; }
  std::uint32_t slots() const noexcept { return slots_; }
  std::byte* base() const noexcept { return base_; }
  std::size_t bytes() const noexcept { return bytes_; }
  bool hugepages() const noexcept { return huge_; }
  int numa_node() const noexcept { return node_; }

  // Control path: reserves `count` contiguous slots for one endpoint (the lowest free run that
  // fits). ResourceExhausted with the config key to raise when no free run is long enough.
  absl::StatusOr<SlotRange> carve(std::uint32_t count);
  // Control path: returns a carved range. Only once nothing can read or write its slots any
  // more (no view handed out, no DMA in flight): use a SlotLease. A range that is not wholly
  // carved (given back twice, or never carved) is refused and counted (bad_give_backs()).
  void give_back(SlotRange r);
  std::uint32_t slots_free() const;
  std::uint32_t largest_free_run() const;
  std::uint64_t bad_give_backs() const;

  // Registration hook: a transport registers the whole region once (open time) and records
  // the result here; endpoints look it up by owner.
  void add_registration(const PoolRegistration& r);
  std::optional<PoolRegistration> registration(const void* owner) const;

  std::string describe() const;

 private:
  BufferPool() = default;
  std::byte* base_ = nullptr;
  std::size_t bytes_ = 0;
  std::uint32_t slot_size_ = 0;
  std::uint32_t slots_ = 0;
  bool huge_ = false;
  int node_ = -1;
  mutable std::mutex mu_;                        // control path only (carve, give_back, registrations)
  std::map<std::uint32_t, std::uint32_t> free_;  // first slot -> run length; disjoint, coalesced
  std::uint32_t free_count_ = 0;
  std::uint64_t bad_give_backs_ = 0;
  std::vector<PoolRegistration> regs_;
};

// A carved range, given back to its pool when the last owner lets go (hold it in a shared_ptr
// where several objects use the slots - the application's handle, the poller's channel, the
// transport endpoint that may still have them in flight). Move-only.
class SlotLease {
 public:
  SlotLease() = default;
  SlotLease(BufferPool* pool, SlotRange r)
      : pool_(pool != nullptr ? pool->weak_from_this() : std::weak_ptr<BufferPool>()), r_(r) {}
  ~SlotLease() { reset(); }
  SlotLease(SlotLease&& o) noexcept : pool_(std::move(o.pool_)), r_(o.r_) { o.r_ = {}; }
  SlotLease& operator=(SlotLease&& o) noexcept {
    if (this != &o) {
      reset();
      pool_ = std::move(o.pool_);
      r_ = o.r_;
      o.r_ = {};
    }
    return *this;
  }
  SlotLease(const SlotLease&) = delete;
  SlotLease& operator=(const SlotLease&) = delete;
  const SlotRange& range() const noexcept { return r_; }
  void reset() {
    if (r_.count != 0) {
      if (std::shared_ptr<BufferPool> p = pool_.lock()) p->give_back(r_);
    }
    r_ = {};
    pool_.reset();
  }

 private:
  std::weak_ptr<BufferPool> pool_;
  SlotRange r_;
};

// Per-owner LIFO of free slot indices (LIFO keeps recently used, cache-warm slots in use).
// Single-threaded: only the owning thread touches it.
class SlotStack {
 public:
  SlotStack() = default;
  explicit SlotStack(SlotRange r) { reset(r); }
  // Control path: the one allocation, sized for every slot of the range.
  void reset(SlotRange r) {
    free_ = std::make_unique<std::uint32_t[]>(r.count);
    cap_ = r.count;
    top_ = 0;
    for (std::uint32_t i = r.count; i-- > 0;) free_[top_++] = r.first + i;
  }
  bool pop(std::uint32_t* idx) noexcept {
    if (top_ == 0) return false;
    *idx = free_[--top_];
    return true;
  }
  // A slot returns only after it was popped, so the stack never holds more than the range;
  // the bound check keeps a caller's double release from writing past the array.
  void push(std::uint32_t idx) noexcept {
    if (__builtin_expect(top_ < cap_, 1)) free_[top_++] = idx;
  }
  std::size_t size() const noexcept { return top_; }

 private:
  std::unique_ptr<std::uint32_t[]> free_;
  std::uint32_t cap_ = 0, top_ = 0;
};

}  // namespace pollux::core
