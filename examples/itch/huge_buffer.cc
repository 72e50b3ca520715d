#include "itch/huge_buffer.h"

#include <sys/mman.h>

#include <cstdint>
#include <new>

namespace pollux::itch {
namespace {
constexpr std::size_t kPage = 4096;
constexpr std::size_t kHugePage = std::size_t{2} << 20;
}  // namespace

HugeBuffer::HugeBuffer(std::size_t bytes) {
  if (bytes == 0) return;
  const bool huge = bytes >= kHugePage;
  const std::size_t align = huge ? kHugePage : kPage;
  size_ = (bytes + align - 1) & ~(align - 1);
  // Over-map by one huge page and trim, so the data starts on a 2 MiB boundary (the kernel
  // backs only aligned 2 MiB ranges with a huge page).
  mapped_ = huge ? size_ + kHugePage : size_;
  void* m = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    mapped_ = size_ = 0;
    throw std::bad_alloc();
  }
  auto* p = static_cast<char*>(m);
  if (huge) {
    const auto addr = reinterpret_cast<std::uintptr_t>(p);
    const std::size_t lead = ((addr + kHugePage - 1) & ~(kHugePage - 1)) - addr;
    if (lead != 0) munmap(p, lead);
    const std::size_t tail = kHugePage - lead;
    if (tail != 0) munmap(p + lead + size_, tail);
    p += lead;
    mapped_ = size_;
    (void)madvise(p, size_, MADV_HUGEPAGE);  // a hint: without THP the pages stay 4 KiB
  }
  base_ = data_ = p;
  // Fault every page in now (a write, so the kernel allocates instead of mapping the shared
  // zero page); the contents stay zero.
  for (std::size_t off = 0; off < size_; off += kPage) static_cast<volatile char*>(data_)[off] = 0;
}

HugeBuffer::~HugeBuffer() {
  if (base_ != nullptr) munmap(base_, mapped_);
}

}  // namespace pollux::itch
