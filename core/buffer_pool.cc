#include "core/buffer_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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
  p->node_ = opt.numa_node;
  const std::size_t huge_len = mapping_bytes(opt, true);

  void* mem = MAP_FAILED;
  if (opt.hugepages != HugePages::kOff) {
    mem = mmap(nullptr, huge_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
    if (mem != MAP_FAILED) {
      p->huge_ = true;
      p->bytes_ = huge_len;
    } else if (opt.hugepages == HugePages::kOn) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "pool.hugepages = \"on\" but mmap(MAP_HUGETLB, %zu bytes) failed: %s; reserve pages with "
          "`echo N > /proc/sys/vm/nr_hugepages` or set pool.hugepages = \"auto\"",
          huge_len, std::strerror(errno)));
    }
  }
  if (mem == MAP_FAILED) {
    const std::size_t len = mapping_bytes(opt, false);
    mem = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("cannot map a %zu-byte buffer pool: %s (lower pool.slots or pool.slot_size)", len,
                          std::strerror(errno)));
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
  if (count > slots_ - next_free_) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "buffer pool exhausted: an endpoint needs %u slots but only %u of %u are left; raise pool.slots "
        "or lower rings.capacity",
        count, slots_ - next_free_, slots_));
  }
  SlotRange r{next_free_, count};
  next_free_ += count;
  return r;
}

std::uint32_t BufferPool::slots_free() const {
  std::lock_guard<std::mutex> lock(mu_);
  return slots_ - next_free_;
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
                         static_cast<double>(bytes_) / (1 << 20), huge_ ? "2 MiB huge" : "4 KiB",
                         node_);
}

}  // namespace pollux::core
