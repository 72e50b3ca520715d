// Large, long-lived buffers of the reliability layer (send log, its index, receive windows,
// datagram buffers): anonymous memory with transparent huge pages requested, pre-touched at
// creation so the first messages do not page-fault (and with 2 MiB pages there are 512x fewer
// faults to take: a 128 MiB retransmit buffer costs ~2 s of 4 KiB faults on some VMs).
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstring>
#include <utility>

namespace pollux::transport::reliability {

template <typename T>
class Region {
 public:
  Region() = default;
  // `count` zeroed elements. On failure (no memory) the region is empty: check ok().
  explicit Region(std::size_t count) {
    const std::size_t bytes = (count * sizeof(T) + kHuge - 1) & ~(kHuge - 1);
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return;
    (void)::madvise(p, bytes, MADV_HUGEPAGE);  // best effort (THP "madvise" mode)
    std::memset(p, 0, bytes);                  // pre-touch
    p_ = static_cast<T*>(p);
    count_ = count;
    bytes_ = bytes;
  }
  ~Region() { reset(); }
  Region(Region&& o) noexcept { *this = std::move(o); }
  Region& operator=(Region&& o) noexcept {
    if (this != &o) {
      reset();
      p_ = std::exchange(o.p_, nullptr);
      count_ = std::exchange(o.count_, 0);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  bool ok() const noexcept { return p_ != nullptr; }
  T* get() const noexcept { return p_; }
  T& operator[](std::size_t i) const noexcept { return p_[i]; }
  std::size_t size() const noexcept { return count_; }

 private:
  static constexpr std::size_t kHuge = 2u << 20;
  void reset() noexcept {
    if (p_ != nullptr) ::munmap(p_, bytes_);
    p_ = nullptr;
  }
  T* p_ = nullptr;
  std::size_t count_ = 0, bytes_ = 0;
};

}  // namespace pollux::transport::reliability
