// Reading a BinaryFILE from disk safely: the input must be a regular, non-empty file (checked
// without blocking on a FIFO or a device), and ChunkReader reads it with pread() into a
// private buffer, window by window, so that
//   - a file truncated while it is read is an error naming the offset, never a SIGBUS (the
//     fate of a mapping whose pages the kernel removed);
//   - the bytes a caller validated are the bytes it uses: nobody else can change them;
//   - memory stays one window (1 MiB by default) whatever the size of the file.
// MappedFile (mapped_file.h) maps the whole file instead: faster to set up, for files that
// nobody modifies while they are read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pollux::itch {

// Opens `path` read-only if it is a regular, non-empty file and returns the descriptor
// (close-on-exec) with the file's size in `*size`. The type is checked with stat() before
// the open and fstat() after it, and the open uses O_NONBLOCK, so a FIFO without a writer or
// a device never blocks the caller. Errors:
//   itch: cannot open '<path>': No such file or directory              (NotFound)
//   itch: '<path>' is a FIFO, not a regular file: ...                  (InvalidArgument)
//   itch: offset 0: empty file '<path>'                                (InvalidArgument)
[[nodiscard]] absl::StatusOr<int> open_regular_file(const std::string& path, uint64_t* size);

// Sequential reader of a BinaryFILE in windows of whole bytes (not whole records): a scan
// over window() stops at a record the window's end cuts (kTruncated with the window not
// last()); advance(offset of that record) keeps its bytes and reads on behind them.
//
//   absl::StatusOr<ChunkReader> in = ChunkReader::open(path);
//   for (;;) {
//     ParseResult r = for_each_message(in->window(), f);
//     if (!in->last() && (r.ok() || r.error == ParseError::kTruncated)) {
//       if (absl::Status s = in->advance(r.offset); !s.ok()) return s;  // views into window() die here
//       continue;
//     }
//     r.offset += in->window_offset();  // a file offset
//     ...
//   }
//
// The file's size is taken at Open: bytes appended later are not read; a file that has
// become shorter than that when a window is read is an error (DataLoss):
//   <path>: input truncated at offset N: the file has M bytes now, S when it was opened
class ChunkReader {
 public:
  static constexpr size_t kDefaultWindow = size_t{1} << 20;

  // Opens `path` (open_regular_file) and reads the first window; `window` >= 4096 bytes.
  [[nodiscard]] static absl::StatusOr<ChunkReader> open(const std::string& path, size_t window = kDefaultWindow);

  ChunkReader(ChunkReader&& other) noexcept;
  ChunkReader& operator=(ChunkReader&& other) noexcept;
  ChunkReader(const ChunkReader&) = delete;
  ChunkReader& operator=(const ChunkReader&) = delete;
  ~ChunkReader();

  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  [[nodiscard]] uint64_t size() const noexcept { return size_; }

  // The bytes at file offsets [window_offset(), window_offset() + window().size()).
  [[nodiscard]] std::span<const uint8_t> window() const noexcept { return {buf_.get(), len_}; }
  [[nodiscard]] uint64_t window_offset() const noexcept { return offset_; }
  // True when the window reaches the end of the file (as sized at Open).
  [[nodiscard]] bool last() const noexcept { return offset_ + len_ == size_; }

  // Drops window()[0, consumed) (consumed <= window().size()), keeps the rest at the front
  // and fills the window from the file behind it. Views into the old window are invalid.
  [[nodiscard]] absl::Status advance(size_t consumed);
  // Back to the start of the file, e.g. for a second pass after validating the first.
  [[nodiscard]] absl::Status rewind();

 private:
  ChunkReader() = default;
  // Room for the record a window's end cut (prefix + the largest message), so a Fill after
  // an Advance past every whole record reads a full window_.
  static constexpr size_t kCarryRoom = 64;

  absl::Status fill();  // fills buf_ from the file behind the len_ bytes already there
  void close() noexcept;

  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
  size_t cap_ = 0;  // buf_ bytes: window + kCarryRoom
  std::unique_ptr<uint8_t[]> buf_;
  size_t len_ = 0;       // valid bytes in buf_
  uint64_t offset_ = 0;  // file offset of buf_[0]
};

}  // namespace pollux::itch
