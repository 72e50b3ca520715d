#include "core/buffer_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>

#include "absl/strings/str_format.h"
#include "core/topology.h"

namespace pollux::core {
namespace {
constexpr std::size_t kHugePage = 2u << 20;
}

absl::StatusOr<std::unique_ptr<BufferPool>> BufferPool::create(const PoolOptions& opt) {
  if (opt.slot_size == 0 || opt.slots == 0) {
    return absl::InvalidArgumentError("pool.slot_size and pool.slots must be > 0");
  }
  std::unique_ptr<BufferPool> p(new BufferPool());
  p->slot_size_ = (opt.slot_size + 63u) & ~63u;
  p->slots_ = opt.slots;
  p->free_[0] = opt.slots;
  p->free_count_ = opt.slots;
  p->node_ = opt.numa_node;
  const std::size_t huge_len = mapping_bytes(opt, true);

  void* mem = MAP_FAILED;
  if (opt.hugepages != HugePages::kOff) {
    mem = mmap(nullptr, huge_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
    if (mem != MAP_FAILED) {
      p->huge_ = true;
      p->bytes_ = huge_len;
    } else if (opt.hugepages == HugePages::kOn) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("pool.hugepages = \"on\" but mmap(MAP_HUGETLB, %zu bytes) failed: %s; reserve pages with "
                          "`echo N > /proc/sys/vm/nr_hugepages` or set pool.hugepages = \"auto\"",
                          huge_len, std::strerror(errno)));
    }
  }
  if (mem == MAP_FAILED) {
    const std::size_t len = mapping_bytes(opt, false);
    mem = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "cannot map a %zu-byte buffer pool: %s (lower pool.slots or pool.slot_size)", len, std::strerror(errno)));
    }
    p->bytes_ = len;
    (void)madvise(mem, len, MADV_HUGEPAGE);  // transparent hugepages if enabled; harmless if not
  }
  p->base_ = static_cast<std::byte*>(mem);
  if (absl::Status s = topology().bind_memory(mem, p->bytes_, opt.numa_node); !s.ok()) return s;
  // Pre-touch: fault every page in now (on the bound node), not on the first message.
  const std::size_t step = p->huge_ ? kHugePage : 4096;
  for (std::size_t off = 0; off < p->bytes_; off += step) static_cast<volatile char*>(mem)[off] = 0;
  return p;
}

std::size_t BufferPool::mapping_bytes(const PoolOptions& opt, bool hugepages) noexcept {
  const std::size_t want = static_cast<std::size_t>((opt.slot_size + 63u) & ~63u) * opt.slots;
  const std::size_t page = hugepages ? kHugePage : 4096;
  return (want + page - 1) & ~(page - 1);
}

BufferPool::~BufferPool() {
  if (base_ != nullptr) munmap(base_, bytes_);
}

absl::StatusOr<SlotRange> BufferPool::carve(std::uint32_t count) {
  std::lock_guard<std::mutex> lock(mu_);
  std::uint32_t largest = 0;
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < count) {
      largest = std::max(largest, it->second);
      continue;
    }
    const SlotRange r{it->first, count};
    const std::uint32_t rest = it->second - count;
    free_.erase(it);
    if (rest != 0) free_[r.first + count] = rest;
    free_count_ -= count;
    return r;
  }
  if (free_count_ >= count) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "buffer pool exhausted: an endpoint needs %u contiguous slots but the longest free run is %u (%u of %u "
        "free, in pieces); raise pool.slots or lower rings.capacity",
        count, largest, free_count_, slots_));
  }
  return absl::ResourceExhaustedError(
      absl::StrFormat("buffer pool exhausted: an endpoint needs %u slots but only %u of %u are left; raise pool.slots "
                      "or lower rings.capacity",
                      count, free_count_, slots_));
}

void BufferPool::give_back(SlotRange r) {
  if (r.count == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  const std::uint64_t end = std::uint64_t{r.first} + r.count;
  // The range must lie in the pool and overlap no free run.
  auto next = free_.lower_bound(r.first);
  const bool overlaps_next = next != free_.end() && next->first < end;
  auto prev = next == free_.begin() ? free_.end() : std::prev(next);
  const bool overlaps_prev = prev != free_.end() && std::uint64_t{prev->first} + prev->second > r.first;
  if (end > slots_ || overlaps_next || overlaps_prev) {
    ++bad_give_backs_;
    return;
  }
  std::uint32_t first = r.first, count = r.count;
  if (prev != free_.end() && prev->first + prev->second == first) {  // joins the run before
    first = prev->first;
    count += prev->second;
    free_.erase(prev);
  }
  if (next != free_.end() && next->first == end) {  // and the run after
    count += next->second;
    free_.erase(next);
  }
  free_[first] = count;
  free_count_ += r.count;
}

std::uint32_t BufferPool::slots_free() const {
  std::lock_guard<std::mutex> lock(mu_);
  return free_count_;
}

std::uint32_t BufferPool::largest_free_run() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::uint32_t largest = 0;
  for (const auto& [first, count] : free_) largest = std::max(largest, count);
  return largest;
}

std::uint64_t BufferPool::bad_give_backs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bad_give_backs_;
}

void BufferPool::add_registration(const PoolRegistration& r) {
  std::lock_guard<std::mutex> lock(mu_);
  regs_.push_back(r);
}

std::optional<PoolRegistration> BufferPool::registration(const void* owner) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const PoolRegistration& r : regs_) {
    if (r.owner == owner) return r;
  }
  return std::nullopt;
}

std::string BufferPool::describe() const {
  return absl::StrFormat("%u slots x %u B = %.1f MiB, %s pages, node %d", slots_, slot_size_,
                         static_cast<double>(bytes_) / (1 << 20), huge_ ? "2 MiB huge" : "4 KiB", node_);
}

}  // namespace pollux::core
