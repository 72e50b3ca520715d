// Read-only memory mapping of a whole file (RAII).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "absl/status/statusor.h"

namespace pollux::itch {

class MappedFile {
 public:
  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  // Maps `path` with PROT_READ/MAP_PRIVATE and advises sequential access (the readers
  // stream through it once). The file must be regular and non-empty (open_regular_file in
  // file_input.h: a FIFO or a device is refused without blocking; mmap cannot map zero
  // bytes, and an empty capture is never what the caller meant: "itch: offset 0: empty file
  // '<path>'"). A mapping is only as stable as the file: if another process truncates it,
  // touching the removed pages raises SIGBUS, and its writes show through. Input that others
  // may modify is read with ChunkReader (file_input.h) instead.
  [[nodiscard]] static absl::StatusOr<MappedFile> open(const std::string& path);

  [[nodiscard]] std::span<const uint8_t> bytes() const noexcept { return {data_, size_}; }
  [[nodiscard]] size_t size() const noexcept { return size_; }

 private:
  MappedFile(const uint8_t* data, size_t size) noexcept : data_(data), size_(size) {}
  void unmap() noexcept;

  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace pollux::itch
