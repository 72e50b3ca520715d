// Zero-filled memory for the book's large flat tables (the order map's slots), mapped so that
// the kernel can back it with 2 MiB pages.
//
// Why: at a realistic universe (8,000 symbols, ~0.5-0.8M live orders) the order map is tens of
// MB read at random, one probe per message. On 4 KiB pages almost every probe also misses the
// TLB (thousands of pages against a second-level TLB of ~1.5-2k entries), and the page walk
// is a dependent memory access of its own. A buffer of 2 MiB or more is therefore aligned to
// 2 MiB and advised MADV_HUGEPAGE (transparent huge pages: "madvise" or "always" in
// /sys/kernel/mm/transparent_hugepage/enabled; with "never" it is an ordinary mapping).
// Every page is touched when the buffer is made, so page faults happen there and not on the
// first messages. Smaller buffers are ordinary page-aligned mappings.
#pragma once

#include <cstddef>
#include <utility>

namespace pollux::itch {

class HugeBuffer {
 public:
  HugeBuffer() = default;
  // `bytes` of zeros (rounded up to whole pages). Throws std::bad_alloc if the mapping fails,
  // as operator new would.
  explicit HugeBuffer(std::size_t bytes);
  ~HugeBuffer();
  HugeBuffer(HugeBuffer&& o) noexcept
      : base_(std::exchange(o.base_, nullptr)),
        data_(std::exchange(o.data_, nullptr)),
        mapped_(std::exchange(o.mapped_, 0)),
        size_(std::exchange(o.size_, 0)) {}
  HugeBuffer& operator=(HugeBuffer&& o) noexcept {
    HugeBuffer tmp(std::move(o));
    std::swap(base_, tmp.base_);
    std::swap(data_, tmp.data_);
    std::swap(mapped_, tmp.mapped_);
    std::swap(size_, tmp.size_);
    return *this;
  }

  [[nodiscard]] void* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  void* base_ = nullptr;  // the mapping (data_ rounded down to its start)
  void* data_ = nullptr;
  std::size_t mapped_ = 0;
  std::size_t size_ = 0;
};

}  // namespace pollux::itch
