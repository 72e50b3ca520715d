// Reading BinaryFILEs from disk (itch/file_input.h): only regular, non-empty files, refused
// without blocking otherwise; ChunkReader's windows give exactly what one pass over the whole
// buffer gives (messages, errors, offsets), and a file that shrinks under it is an error.
#include "itch/file_input.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "itch/reader.h"

namespace pollux::itch {
namespace {

std::vector<uint8_t> ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "/pollux_file_input_" + std::to_string(getpid()) + "_" + name;
}

std::string CopyToTemp(const std::string& from, const std::string& name) {
  const std::string to = TempPath(name);
  std::filesystem::copy_file(from, to, std::filesystem::copy_options::overwrite_existing);
  return to;
}

struct Scan {
  std::vector<uint64_t> offsets;  // file offset of each message's type byte
  std::string types;
  ParseResult result;  // offsets are file offsets
  absl::Status io;
};

// The documented loop over a ChunkReader's windows.
Scan ScanWindows(ChunkReader& in) {
  Scan s;
  for (;;) {
    const uint8_t* base = in.window().data();
    const uint64_t at = in.window_offset();
    ParseResult r = for_each_message(in.window(), [&](MessageView m) {
      s.offsets.push_back(at + static_cast<uint64_t>(m.data() - base));
      s.types.push_back(m.type());
    });
    s.result.messages += r.messages;
    if (!in.last() && (r.ok() || r.error == ParseError::kTruncated)) {
      s.io = in.advance(r.offset);
      if (!s.io.ok()) return s;
      continue;
    }
    const uint64_t total = s.result.messages;
    s.result = r;
    s.result.offset += at;
    s.result.messages = total;
    return s;
  }
}

Scan ScanBuffer(std::span<const uint8_t> buf) {
  Scan s;
  s.result = for_each_message(buf, [&](MessageView m) {
    s.offsets.push_back(static_cast<uint64_t>(m.data() - buf.data()));
    s.types.push_back(m.type());
  });
  return s;
}

TEST(ItchFileInputTest, WindowsGiveWhatOnePassGives) {
  const std::string path = POLLUX_ITCH_FIXTURE_FILE;
  const std::vector<uint8_t> bytes = ReadAll(path);
  ASSERT_GT(bytes.size(), 100'000u);
  const Scan want = ScanBuffer(bytes);
  ASSERT_TRUE(want.result.ok());
  for (const size_t window : {size_t{4096}, size_t{4097}, size_t{65536}, ChunkReader::kDefaultWindow}) {
    SCOPED_TRACE(window);
    absl::StatusOr<ChunkReader> in = ChunkReader::open(path, window);
    ASSERT_TRUE(in.ok()) << in.status();
    EXPECT_EQ(in->size(), bytes.size());
    const Scan got = ScanWindows(*in);
    ASSERT_TRUE(got.io.ok()) << got.io;
    EXPECT_TRUE(got.result.ok()) << got.result.to_status();
    EXPECT_EQ(got.result.messages, want.offsets.size());
    EXPECT_EQ(got.offsets, want.offsets);
    EXPECT_EQ(got.types, want.types);
    // A second pass after rewind reads the same.
    ASSERT_TRUE(in->rewind().ok());
    EXPECT_EQ(ScanWindows(*in).offsets, want.offsets);
  }
}

TEST(ItchFileInputTest, StrayTrailingBytesAreReportedLikeOnePass) {
  for (const char* name : {"seven_good_then_1_stray_byte.itch", "seven_good_then_2_stray_bytes.itch"}) {
    SCOPED_TRACE(name);
    const std::string path = std::string(POLLUX_ITCH_VECTORS_DIR) + "/" + name;
    const Scan want = ScanBuffer(ReadAll(path));
    absl::StatusOr<ChunkReader> in = ChunkReader::open(path, 4096);
    ASSERT_TRUE(in.ok()) << in.status();
    const Scan got = ScanWindows(*in);
    EXPECT_EQ(got.types, "SRRRHHH");
    EXPECT_EQ(got.result.error, ParseError::kTruncated);
    EXPECT_EQ(got.result.offset, want.result.offset);
    EXPECT_EQ(got.result.messages, 7u);
    EXPECT_EQ(got.result.to_status(), want.result.to_status());
  }
}

// A record cut by a window's end and then by the end of the file: the error is at the
// record's file offset, as in one pass.
TEST(ItchFileInputTest, TruncatedLastRecordAcrossAWindowIsAtItsFileOffset) {
  std::vector<uint8_t> bytes = ReadAll(POLLUX_ITCH_FIXTURE_FILE);
  ASSERT_GT(bytes.size(), 5u);
  bytes.erase(bytes.end() - 5, bytes.end());  // (resize() trips a bogus GCC 12 -Wstringop-overflow here)
  const std::string path = TempPath("cut.itch");
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  const Scan want = ScanBuffer(bytes);
  ASSERT_EQ(want.result.error, ParseError::kTruncated);
  absl::StatusOr<ChunkReader> in = ChunkReader::open(path, 4096);
  ASSERT_TRUE(in.ok()) << in.status();
  const Scan got = ScanWindows(*in);
  EXPECT_EQ(got.offsets, want.offsets);
  EXPECT_EQ(got.result.to_status(), want.result.to_status());
  std::remove(path.c_str());
}

TEST(ItchFileInputTest, FileThatShrinksWhileReadIsAnError) {
  const std::string path = CopyToTemp(POLLUX_ITCH_FIXTURE_FILE, "shrinks.itch");
  const std::vector<uint8_t> bytes = ReadAll(path);
  const Scan whole = ScanBuffer(bytes);
  absl::StatusOr<ChunkReader> in = ChunkReader::open(path, 4096);
  ASSERT_TRUE(in.ok()) << in.status();
  ASSERT_EQ(truncate(path.c_str(), 10'000), 0);  // the first window (4160 bytes) is already read
  const Scan got = ScanWindows(*in);
  ASSERT_FALSE(got.io.ok());
  EXPECT_EQ(got.io.code(), absl::StatusCode::kDataLoss);
  // Reads stop where the file now ends: the window that would have crossed 10,000 bytes.
  const uint64_t stop = in->window_offset() + in->window().size();
  EXPECT_EQ(stop, 10'000u);
  EXPECT_EQ(std::string(got.io.message()),
            absl::StrCat(path, ": input truncated at offset 10000: the file has 10000 bytes now, ", bytes.size(),
                         " when it was opened (it shrank while being read)"));
  // What was delivered before is exactly the original's messages that lie before the window.
  ASSERT_LE(got.offsets.size(), whole.offsets.size());
  EXPECT_GT(got.offsets.size(), 0u);
  EXPECT_TRUE(std::equal(got.offsets.begin(), got.offsets.end(), whole.offsets.begin()));
  EXPECT_LT(got.offsets.back(), 10'000u);
  std::remove(path.c_str());
}

TEST(ItchFileInputTest, FileThatGrowsIsReadAsItWasOpened) {
  const std::string path = CopyToTemp(POLLUX_ITCH_FIXTURE_FILE, "grows.itch");
  const std::vector<uint8_t> bytes = ReadAll(path);
  absl::StatusOr<ChunkReader> in = ChunkReader::open(path, 4096);
  ASSERT_TRUE(in.ok()) << in.status();
  std::ofstream(path, std::ios::binary | std::ios::app) << "garbage appended later";
  const Scan got = ScanWindows(*in);
  EXPECT_TRUE(got.io.ok()) << got.io;
  EXPECT_TRUE(got.result.ok()) << got.result.to_status();
  EXPECT_EQ(got.offsets, ScanBuffer(bytes).offsets);
  std::remove(path.c_str());
}

// Opening a FIFO for reading blocks until a writer comes; none ever does here. Every opener
// must refuse it at once (ctest's timeout would end a hang; the test would then fail).
TEST(ItchFileInputTest, NonRegularFilesAreRefusedWithoutBlocking) {
  const std::string fifo = TempPath("fifo.itch");
  ::unlink(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::string dir = TempPath("dir.itch");
  std::filesystem::create_directory(dir);
  struct Case {
    std::string path, kind;
  };
  for (const Case& c : {Case{fifo, "a FIFO"}, Case{dir, "a directory"}, Case{"/dev/null", "a character device"}}) {
    SCOPED_TRACE(c.path);
    const std::string want = absl::StrCat(
        "itch: '", c.path, "' is ", c.kind,
        ", not a regular file: ITCH input is read from a regular file (copy a capture or a pipe to disk first)");
    uint64_t size = 0;
    absl::StatusOr<int> fd = open_regular_file(c.path, &size);
    ASSERT_FALSE(fd.ok());
    EXPECT_EQ(fd.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(fd.status().message(), want);
    absl::StatusOr<ChunkReader> cr = ChunkReader::open(c.path);
    ASSERT_FALSE(cr.ok());
    EXPECT_EQ(cr.status().message(), want);
    absl::StatusOr<Reader> mr = Reader::open(c.path);
    ASSERT_FALSE(mr.ok());
    EXPECT_EQ(mr.status().message(), want);
  }
  ::unlink(fifo.c_str());
  std::filesystem::remove(dir);
}

TEST(ItchFileInputTest, MissingAndEmptyFiles) {
  absl::StatusOr<ChunkReader> missing = ChunkReader::open(TempPath("no_such.itch"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("No such file or directory"), absl::string_view::npos);
  const std::string empty = TempPath("empty.itch");
  std::ofstream(empty).close();
  absl::StatusOr<ChunkReader> e = ChunkReader::open(empty);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().message(), absl::StrCat("itch: offset 0: empty file '", empty, "'"));
  std::remove(empty.c_str());
}

}  // namespace
}  // namespace pollux::itch
