// Buffer pool: fixed-size slots in one contiguous region, so an RDMA transport registers the
// whole region once (ibv_reg_mr costs 5-20 us: never on the data path).
//
// The region is mmap'ed with 2 MiB hugepages when available (MAP_HUGETLB), else normal pages
// with MADV_HUGEPAGE; bound to a NUMA node; and pre-touched at start-up so the first message is
// not a page fault. Slots are handed out in contiguous ranges (carve()) to endpoints; each range
// is then managed by its owner thread with a SlotStack, and freed slots travel back to their
// owner through an SPSC ring, so the pool itself takes no lock on the data path.
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
  int numa_node = -1;              // -1: no binding (first touch)
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

class BufferPool {
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

  // Control path: reserves `count` contiguous slots for one endpoint. ResourceExhausted with
  // the config key to raise when the pool is used up.
  absl::StatusOr<SlotRange> carve(std::uint32_t count);
  std::uint32_t slots_free() const;

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
  mutable std::mutex mu_;  // control path only (carve, registrations)
  std::uint32_t next_free_ = 0;
  std::vector<PoolRegistration> regs_;
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
