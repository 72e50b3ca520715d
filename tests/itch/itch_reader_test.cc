// BinaryFILE framing: files, buffers, cursor, single-message decoding, every error path,
// the committed fixture, the shared RITCH sample (when present) and a mutation fuzz.
#include "itch/reader.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "itch/book_set.h"
#include "itch/encoder.h"
#include "itch/generator.h"
#include "itch/random.h"
#include "tests/itch/test_util.h"

#ifndef POLLUX_ITCH_SAMPLE_FILE
#define POLLUX_ITCH_SAMPLE_FILE ""
#endif
#ifndef POLLUX_ITCH_FIXTURE_FILE
#define POLLUX_ITCH_FIXTURE_FILE ""
#endif

namespace pollux::itch {
namespace {

using testing::Append;
using testing::Framed;
using testing::Hex;

// The fixture in tests/data was written by
//   pollux-itch-gen --symbols 3 --messages 5000 --seed 42 --out itch_gen_s3_m5000_seed42.itch
GeneratorOptions FixtureOptions() {
  GeneratorOptions o = testing::GenOptions(3, 5000, 42);
  return o;
}

const std::vector<uint8_t> kAdd =
    Hex("41 0002 0003 0a1b2c3d4e5f 0000000000bc614e 42 000003e8 424f422020202020 0000cfaf");
const std::vector<uint8_t> kDelete = Hex("44 0002 0000 0a1b2c3d4e60 0000000000bc614e");

std::string CountsString(std::span<const uint8_t> bytes) {
  BookSet books;
  ParseResult r = for_each_message(bytes, [&books](MessageView m) { books.apply(m); });
  EXPECT_TRUE(r.ok()) << r.to_status();
  std::string out;
  for (const char t : kMessageTypes) {
    if (books.counts()[t] != 0) absl::StrAppend(&out, std::string(1, t), books.counts()[t], " ");
  }
  return out;
}

std::string WriteTemp(const std::string& name, const std::vector<uint8_t>& bytes) {
  const std::string path = ::testing::TempDir() + "/" + name;
  EXPECT_TRUE(write_binary_file(path, bytes).ok());
  return path;
}

TEST(ItchReaderTest, ZeroAndRealLengthPrefixesReadTheSame) {
  std::vector<uint8_t> real = Framed(kAdd);
  Append(real, Framed(kDelete));
  std::vector<uint8_t> zero = Framed(kAdd, 0);
  Append(zero, Framed(kDelete, 0));
  for (const auto* buf : {&real, &zero}) {
    std::string types;
    std::vector<size_t> sizes;
    ParseResult r = for_each_message(*buf, [&](MessageView m) {
      types.push_back(m.type());
      sizes.push_back(m.size());
    });
    ASSERT_TRUE(r.ok()) << r.to_status();
    EXPECT_EQ(types, "AD");
    EXPECT_EQ(sizes, (std::vector<size_t>{36, 19}));
    EXPECT_EQ(r.messages, 2u);
    EXPECT_EQ(r.offset, buf->size());
  }
}

TEST(ItchReaderTest, ViewsPointIntoTheBufferWithoutCopies) {
  const std::vector<uint8_t> buf = Framed(kAdd);
  ParseResult r = for_each_message(buf, [&](MessageView m) {
    EXPECT_EQ(m.data(), buf.data() + 2);
    EXPECT_EQ(m.as<AddOrder>().order_reference(), 12345678u);
  });
  EXPECT_TRUE(r.ok());
}

TEST(ItchReaderTest, EmptyBufferHasNoMessages) {
  int calls = 0;
  ParseResult r = for_each_message(std::span<const uint8_t>(), [&](MessageView) { ++calls; });
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(r.messages, 0u);
}

TEST(ItchReaderTest, UnknownTypeNamesOffsetAndByte) {
  std::vector<uint8_t> buf = Framed(kAdd);  // 38 bytes
  std::vector<uint8_t> bad = kDelete;
  bad[0] = 'Z';
  Append(buf, Framed(bad));
  int calls = 0;
  ParseResult r = for_each_message(buf, [&](MessageView) { ++calls; });
  EXPECT_EQ(calls, 1);  // the good message before the bad one is delivered
  EXPECT_EQ(r.error, ParseError::kUnknownType);
  EXPECT_EQ(r.offset, 38u);
  EXPECT_EQ(r.messages, 1u);
  EXPECT_EQ(r.to_status().message(), "itch: offset 38: unknown message type 0x5a ('Z')");
  EXPECT_EQ(r.to_status().code(), absl::StatusCode::kInvalidArgument);

  bad[0] = 0x00;  // non-printable bytes are shown in hex only
  std::vector<uint8_t> buf2 = Framed(bad, 0);
  EXPECT_EQ(for_each_message(buf2, [](MessageView) {}).to_status().message(),
            "itch: offset 0: unknown message type 0x00");
}

TEST(ItchReaderTest, UnknownTypeIsAnErrorEvenWithALengthPrefix) {
  // A reader could skip an unknown record using its length, but that would hide a feed
  // version mismatch: it is rejected.
  std::vector<uint8_t> body(20, 0);
  body[0] = 'Z';
  std::vector<uint8_t> buf = Framed(body);
  EXPECT_EQ(for_each_message(buf, [](MessageView) {}).error, ParseError::kUnknownType);
}

TEST(ItchReaderTest, InconsistentNonZeroLength) {
  std::vector<uint8_t> buf = Framed(kDelete);  // 21 bytes
  Append(buf, Framed(kAdd, 30));
  ParseResult r = for_each_message(buf, [](MessageView) {});
  EXPECT_EQ(r.error, ParseError::kLengthMismatch);
  EXPECT_EQ(r.offset, 21u);
  EXPECT_EQ(r.to_status().message(),
            "itch: offset 21: length prefix 30 disagrees with the size 36 of message type 'A'");
}

TEST(ItchReaderTest, TruncatedBody) {
  std::vector<uint8_t> buf = Framed(kAdd);
  std::vector<uint8_t> cut(kAdd.begin(), kAdd.begin() + 10);
  Append(buf, Framed(cut, 0));
  ParseResult r = for_each_message(buf, [](MessageView) {});
  EXPECT_EQ(r.error, ParseError::kTruncated);
  EXPECT_EQ(r.offset, 38u);
  EXPECT_EQ(r.messages, 1u);
  EXPECT_EQ(r.to_status().message(),
            "itch: offset 38: truncated message type 'A': needs 36 bytes after the prefix, 10 left");
  EXPECT_EQ(r.to_status().code(), absl::StatusCode::kDataLoss);
}

TEST(ItchReaderTest, TruncatedPrefix) {
  std::vector<uint8_t> buf = Framed(kAdd);
  buf.push_back(0);
  ParseResult r = for_each_message(buf, [](MessageView) {});
  EXPECT_EQ(r.error, ParseError::kTruncated);
  EXPECT_EQ(r.offset, 38u);
  EXPECT_EQ(r.to_status().message(), "itch: offset 38: truncated length prefix: 1 byte(s) left");

  buf.push_back(0);
  r = for_each_message(buf, [](MessageView) {});
  EXPECT_EQ(r.offset, 38u);
  EXPECT_EQ(r.to_status().message(), "itch: offset 38: truncated record: length prefix without a message type");
}

TEST(ItchReaderTest, CallbackReturningFalseStopsEarly) {
  std::vector<uint8_t> buf = Framed(kAdd);
  Append(buf, Framed(kDelete));
  Append(buf, Framed(kAdd));
  int calls = 0;
  ParseResult r = for_each_message(buf, [&](MessageView) { return ++calls < 2; });
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(r.messages, 2u);
  EXPECT_EQ(r.offset, 38u + 21u);
}

TEST(ItchReaderTest, CursorMatchesForEachAndStopsAtTheError) {
  std::vector<uint8_t> buf = Framed(kAdd);
  Append(buf, Framed(kDelete, 0));
  Append(buf, Framed(kAdd, 35));  // bad length at offset 59
  MessageCursor c(buf);
  std::string types;
  for (MessageView m; c.next(&m);) types.push_back(m.type());
  EXPECT_EQ(types, "AD");
  EXPECT_EQ(c.result().error, ParseError::kLengthMismatch);
  EXPECT_EQ(c.result().offset, 59u);
  EXPECT_EQ(c.result().messages, 2u);
  MessageView m;
  EXPECT_FALSE(c.next(&m));  // stays stopped

  MessageCursor good(std::span<const uint8_t>(buf.data(), 59));
  int n = 0;
  while (good.next(&m)) ++n;
  EXPECT_EQ(n, 2);
  EXPECT_TRUE(good.result().ok());
  EXPECT_EQ(good.offset(), 59u);
}

// Stray trailing bytes after good records (committed vectors, tests/data/itch/README.md):
// every way of reading hands out all seven messages, then reports the same truncated tail.
// A callback that stops at the last good message gets an ok result, as documented.
std::vector<uint8_t> ReadVector(const std::string& name) {
  std::ifstream f(std::string(POLLUX_ITCH_VECTORS_DIR) + "/" + name, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

TEST(ItchReaderTest, StrayTrailingBytesNeverCostTheLastGoodMessage) {
  struct Vector {
    const char* file;
    size_t stray;
    const char* error;
  };
  for (const Vector& v :
       {Vector{"seven_good.itch", 0, ""},
        Vector{"seven_good_then_1_stray_byte.itch", 1, "itch: offset 218: truncated length prefix: 1 byte(s) left"},
        Vector{"seven_good_then_2_stray_bytes.itch", 2,
               "itch: offset 218: truncated record: length prefix without a message type"}}) {
    SCOPED_TRACE(v.file);
    const std::vector<uint8_t> buf = ReadVector(v.file);
    ASSERT_EQ(buf.size(), 218 + v.stray);

    std::string plain;
    const ParseResult all = for_each_message(buf, [&](MessageView m) { plain.push_back(m.type()); });
    EXPECT_EQ(plain, "SRRRHHH");
    EXPECT_EQ(all.messages, 7u);
    EXPECT_EQ(all.to_status().message(), v.error);
    if (v.stray != 0) {
      EXPECT_EQ(all.error, ParseError::kTruncated);
      EXPECT_EQ(all.offset, 218u);
      EXPECT_EQ(all.available, v.stray);
    }

    std::string until_true;
    const ParseResult r_true = for_each_message(buf, [&](MessageView m) {
      until_true.push_back(m.type());
      return true;
    });
    EXPECT_EQ(until_true, "SRRRHHH");
    EXPECT_EQ(r_true.error, all.error);
    EXPECT_EQ(r_true.offset, all.offset);
    EXPECT_EQ(r_true.messages, 7u);

    // Stopping at the seventh message: ok, and the offset is where the next record starts.
    int calls = 0;
    const ParseResult stopped = for_each_message(buf, [&](MessageView) { return ++calls < 7; });
    EXPECT_TRUE(stopped.ok()) << stopped.to_status();
    EXPECT_EQ(calls, 7);
    EXPECT_EQ(stopped.messages, 7u);
    EXPECT_EQ(stopped.offset, 218u);

    MessageCursor c(buf);
    std::string pulled;
    for (MessageView m; c.next(&m);) pulled.push_back(m.type());
    EXPECT_EQ(pulled, "SRRRHHH");
    EXPECT_EQ(c.result().error, all.error);
    EXPECT_EQ(c.result().offset, all.offset);
    EXPECT_EQ(c.result().messages, all.messages);
    EXPECT_EQ(c.result().available, all.available);
    EXPECT_EQ(c.result().to_status().message(), v.error);
  }
}

TEST(ItchReaderTest, DecodeSingleMessageErrors) {
  EXPECT_EQ(decode_message(std::span<const uint8_t>()).status().message(), "itch: offset 0: empty message");
  std::vector<uint8_t> z = kAdd;
  z[0] = 'Z';
  EXPECT_EQ(decode_message(z).status().message(), "itch: offset 0: unknown message type 0x5a ('Z')");
  std::vector<uint8_t> longer = kAdd;
  longer.push_back(0);
  EXPECT_EQ(decode_message(longer).status().message(),
            "itch: offset 0: payload of 37 bytes disagrees with the size 36 of message type 'A'");
  std::vector<uint8_t> shorter(kAdd.begin(), kAdd.begin() + 10);
  EXPECT_EQ(decode_message(shorter).status().message(),
            "itch: offset 0: truncated message type 'A': needs 36 bytes, 10 left");
  absl::StatusOr<MessageView> ok = decode_message(kAdd);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->type(), 'A');
  EXPECT_EQ(ok->stock_locate(), 2);
  EXPECT_EQ(ok->tracking_number(), 3);
  EXPECT_EQ(ok->timestamp(), 0x0a1b2c3d4e5fu);
  EXPECT_TRUE(check_message(kAdd).ok());
}

TEST(ItchReaderTest, OpenReportsMissingAndEmptyFiles) {
  absl::StatusOr<Reader> missing = Reader::open(::testing::TempDir() + "/no_such_file.itch");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);

  const std::string empty = WriteTemp("empty.itch", {});
  absl::StatusOr<Reader> r = Reader::open(empty);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), absl::StrCat("itch: offset 0: empty file '", empty, "'"));
}

TEST(ItchReaderTest, OpenMapsAFileAndReportsItsErrors) {
  std::vector<uint8_t> bytes = Framed(kAdd);
  Append(bytes, Framed(kDelete));
  bytes.push_back(0x00);
  const std::string path = WriteTemp("tail.itch", bytes);
  absl::StatusOr<Reader> r = Reader::open(path);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->data().size(), bytes.size());
  int calls = 0;
  absl::Status s = r->for_each([&](MessageView) { ++calls; });
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(s.message(), "itch: offset 59: truncated length prefix: 1 byte(s) left");

  Reader moved = *std::move(r);  // views survive a move of the Reader
  int adds = 0;
  EXPECT_FALSE(moved.visit([&](const AddOrder& a) { adds += a.shares() == 1000; }).ok());
  EXPECT_EQ(adds, 1);
}

TEST(ItchReaderTest, FixtureStillMatchesTheGenerator) {
  absl::StatusOr<Reader> r = Reader::open(POLLUX_ITCH_FIXTURE_FILE);
  ASSERT_TRUE(r.ok()) << r.status();
  absl::StatusOr<std::vector<uint8_t>> gen = generate_itch(FixtureOptions());
  ASSERT_TRUE(gen.ok());
  ASSERT_EQ(r->data().size(), gen->size());
  EXPECT_TRUE(std::equal(gen->begin(), gen->end(), r->data().begin()))
      << "the generator's output changed: regenerate tests/data/itch_gen_s3_m5000_seed42.itch "
         "and check why";
  // Pinned so a generator change is noticed even if someone regenerates the fixture.
  EXPECT_EQ(CountsString(r->data()), "S6 R3 H3 A2050 F66 E395 C54 X346 D1592 U341 P144 ");
  EXPECT_EQ(r->data().size(), 157'370u);
}

TEST(ItchReaderTest, SharedSampleMatchesItsReadme) {
  const std::string path = POLLUX_ITCH_SAMPLE_FILE;
  if (path.empty() || !std::filesystem::exists(path)) {
    GTEST_SKIP() << "RITCH sample not present at '" << path << "'";
  }
  absl::StatusOr<Reader> r = Reader::open(path);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->data().size(), 465'048u);
  BookSet books;
  ASSERT_TRUE(r->for_each([&books](MessageView m) { books.apply(m); }).ok());
  const MessageCounts& c = books.counts();
  const std::pair<char, uint64_t> want[] = {{'S', 6},   {'R', 3},  {'H', 3},    {'A', 4997}, {'F', 3},
                                            {'E', 198}, {'X', 45}, {'D', 1745}, {'P', 5000}, {'U', 12}};
  for (const auto& [type, count] : want) EXPECT_EQ(c[type], count) << type;
  EXPECT_EQ(c.total(), 12'012u);
}

// Random byte mutations, insertions, deletions and truncations of a valid stream: the
// scan never crashes or reads out of bounds (run under ASan to check the latter), and
// every outcome is OK over the whole buffer or an error at an offset inside it. Messages
// that do pass validation are fed to a BookSet, which must tolerate their nonsense.
TEST(ItchReaderTest, FuzzMutationsNeverCrashAndErrorsStayInBounds) {
  GeneratorOptions o = testing::GenOptions(4, 400, 7);
  const std::vector<uint8_t> base = *generate_itch(o);
  Xoshiro256 rng(12345);
  int errors = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    std::vector<uint8_t> buf = base;
    const int edits = 1 + static_cast<int>(rng.below(4));
    for (int e = 0; e < edits && !buf.empty(); ++e) {
      const size_t at = rng.below(buf.size());
      testing::EditBytes(buf, at, rng.below(5), rng);
    }
    // Exact-size copy so ASan catches a read past the end.
    std::unique_ptr<uint8_t[]> exact(new uint8_t[buf.size() + 1]);
    std::copy(buf.begin(), buf.end(), exact.get());
    std::span<const uint8_t> span(exact.get(), buf.size());
    BookSet books;
    uint64_t seen = 0;
    ParseResult r = for_each_message(span, [&](MessageView m) {
      ASSERT_EQ(m.size(), message_size(m.type_byte()));
      ASSERT_GE(m.data(), span.data());
      ASSERT_LE(m.data() + m.size(), span.data() + span.size());
      books.apply(m);
      ++seen;
    });
    EXPECT_EQ(r.messages, seen);
    if (r.ok()) {
      EXPECT_EQ(r.offset, span.size());
    } else {
      ++errors;
      EXPECT_LT(r.offset, span.size()) << "iteration " << iter;
      const std::string msg(r.to_status().message());
      EXPECT_EQ(msg.rfind(absl::StrCat("itch: offset ", r.offset, ": "), 0), 0u) << msg;
    }
    // Single-message decoding of an arbitrary slice never crashes either.
    const size_t from = span.empty() ? 0 : rng.below(span.size());
    const size_t len = rng.below(kMaxMessageSize + 2);
    const ParseResult one = check_message(span.subspan(from, std::min(len, span.size() - from)));
    if (!one.ok()) {
      EXPECT_EQ(one.offset, 0u);
    }
  }
  EXPECT_GT(errors, 1000);  // the mutations do hit the error paths
}

}  // namespace
}  // namespace pollux::itch
