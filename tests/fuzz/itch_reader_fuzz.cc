// Fuzzes the ITCH 5.0 BinaryFILE reader (examples/itch/reader.h) and what the feed handler
// builds on it: for_each_message, the pull-style MessageCursor, typed dispatch (visit_messages),
// single-message decoding (check_message / decode_message / decode_as) and the order books
// (BookSet::apply_all). The input is the file's bytes.
//
// Invariants (besides "no crash, no out-of-bounds read, no UB"):
//  - every view lies inside the input, has its type's size and follows the previous record;
//  - ok means the whole buffer was consumed; an error names the offset after the last good
//    record, and its Status says so ("itch: offset N: ...");
//  - the cursor yields exactly the messages for_each_message does and ends with the same result;
//  - stopping early (callback returns false) is ok and ends right after that message;
//  - BookSet applies the same records and its level books agree with its order map.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "itch/book_set.h"
#include "itch/messages.h"
#include "itch/reader.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using pollux::fuzz::touch;
namespace itch = pollux::itch;

bool same_result(const itch::ParseResult& a, const itch::ParseResult& b) {
  return a.error == b.error && a.offset == b.offset && a.messages == b.messages;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> buf(data, size);

  // 1. for_each_message: record every view and check it against the framing.
  std::vector<itch::MessageView> seen;
  std::uint64_t off = 0;
  const itch::ParseResult r = itch::for_each_message(buf, [&](itch::MessageView m) {
    FUZZ_CHECK(m.data() == data + off + itch::kLengthPrefixSize, "view at %p, expected record at offset %llu",
               static_cast<const void*>(m.data()), static_cast<unsigned long long>(off));
    FUZZ_CHECK(m.size() != 0 && m.size() == itch::message_size(m.type_byte()), "view of %zu bytes for type 0x%02x",
               m.size(), m.type_byte());
    FUZZ_CHECK(off + itch::kLengthPrefixSize + m.size() <= size, "view ends past the buffer");
    const std::uint16_t prefix = itch::load_be16(data + off);
    FUZZ_CHECK(prefix == 0 || prefix == m.size(), "prefix %u accepted for a %zu-byte message", prefix, m.size());
    (void)touch(m.data(), m.size());
    off += itch::kLengthPrefixSize + m.size();
    seen.push_back(m);
  });
  FUZZ_CHECK(r.messages == seen.size(), "result says %llu messages, callback saw %zu",
             static_cast<unsigned long long>(r.messages), seen.size());
  FUZZ_CHECK(r.offset == off, "result offset %llu, last record ended at %llu",
             static_cast<unsigned long long>(r.offset), static_cast<unsigned long long>(off));
  if (r.ok()) {
    FUZZ_CHECK(off == size, "ok, but %llu of %zu bytes consumed", static_cast<unsigned long long>(off), size);
  } else {
    FUZZ_CHECK(off < size, "error at offset %llu with nothing left", static_cast<unsigned long long>(off));
    const absl::Status s = r.to_status();
    const std::string want = "itch: offset " + std::to_string(r.offset) + ": ";
    FUZZ_CHECK(!s.ok() && s.message().substr(0, want.size()) == want, "status \"%s\" does not start with \"%s\"",
               std::string(s.message()).c_str(), want.c_str());
  }

  // 2. The cursor agrees with for_each_message, message for message.
  itch::MessageCursor cur(buf);
  std::size_t k = 0;
  for (itch::MessageView m; cur.next(&m); ++k) {
    FUZZ_CHECK(k < seen.size(), "cursor yields a message #%zu that ForEachMessage did not", k);
    FUZZ_CHECK(m.data() == seen[k].data() && m.size() == seen[k].size(), "cursor message #%zu differs", k);
  }
  FUZZ_CHECK(k == seen.size(), "cursor yields %zu messages, ForEachMessage %zu", k, seen.size());
  FUZZ_CHECK(same_result(cur.result(), r),
             "cursor ends with (error %d, offset %llu, messages %llu), ForEachMessage with (%d, %llu, %llu)",
             static_cast<int>(cur.result().error), static_cast<unsigned long long>(cur.result().offset),
             static_cast<unsigned long long>(cur.result().messages), static_cast<int>(r.error),
             static_cast<unsigned long long>(r.offset), static_cast<unsigned long long>(r.messages));

  // 3. Stopping early is ok and ends right after the message the callback refused more after.
  if (!seen.empty()) {
    const std::size_t stop = seen.size() / 2;
    std::size_t calls = 0;
    const itch::ParseResult e = itch::for_each_message(buf, [&](itch::MessageView) { return calls++ < stop; });
    const std::uint64_t end = static_cast<std::uint64_t>(seen[stop].data() - data) + seen[stop].size();
    FUZZ_CHECK(e.ok() && e.offset == end && e.messages == stop + 1,
               "stop after message #%zu: (error %d, offset %llu, messages %llu), expected ok at %llu", stop,
               static_cast<int>(e.error), static_cast<unsigned long long>(e.offset),
               static_cast<unsigned long long>(e.messages), static_cast<unsigned long long>(end));
  }

  // 4. Typed dispatch hands out a view of the right type for every message.
  std::size_t visited = 0;
  const itch::ParseResult v = itch::visit_messages(buf, [&](auto view) {
    using View = decltype(view);
    FUZZ_CHECK(view.type() == View::kType, "dispatch gave a '%c' view for a '%c' message", View::kType, view.type());
    (void)touch(view.data(), View::kSize);
    (void)view.timestamp();
    ++visited;
  });
  FUZZ_CHECK(same_result(v, r) && visited == seen.size(), "VisitMessages disagrees with ForEachMessage");

  // 5. The whole input as one unframed payload.
  const itch::ParseResult one = itch::check_message(buf);
  const absl::StatusOr<itch::MessageView> dm = itch::decode_message(buf);
  FUZZ_CHECK(one.ok() == dm.ok(), "CheckMessage and DecodeMessage disagree");
  if (one.ok()) {
    FUZZ_CHECK(size == itch::message_size(data[0]), "payload of %zu bytes accepted as '%c'", size, data[0]);
    FUZZ_CHECK(dm->data() == data && dm->size() == size, "DecodeMessage view differs from the payload");
  } else {
    FUZZ_CHECK(!one.to_status().ok() && !dm.status().ok(), "a rejected payload with an ok status");
  }
  const absl::StatusOr<itch::AddOrder> add = itch::decode_as<itch::AddOrder>(buf);
  FUZZ_CHECK(add.ok() == (one.ok() && data[0] == 'A'), "DecodeAs<AddOrder> accepted the wrong payload");
  if (add.ok()) (void)add->price();

  // 6. The order books the feed handler keeps (small map, so growth is exercised).
  itch::BookSetOptions bo;
  bo.expected_orders = 8;
  bo.levels_per_side = 2;
  itch::BookSet books(bo);
  const itch::ParseResult b = books.apply_all(buf);
  FUZZ_CHECK(same_result(b, r), "BookSet::ApplyAll disagrees with ForEachMessage");
  FUZZ_CHECK(books.counts().total() == seen.size(), "BookSet counted %llu messages of %zu",
             static_cast<unsigned long long>(books.counts().total()), seen.size());
  FUZZ_CHECK(books.stats().level_mismatch == 0, "order map and level books disagreed %llu time(s)",
             static_cast<unsigned long long>(books.stats().level_mismatch));
  std::uint64_t resting = 0;
  books.for_each_book([&](const itch::OrderBook& book) {
    for (const itch::Side side : {itch::Side::kBuy, itch::Side::kSell}) {
      for (const itch::PriceLevel& l : book.depth(side)) {
        FUZZ_CHECK(l.orders > 0, "empty level kept at price %u", l.price);
        resting += l.orders;
      }
    }
  });
  FUZZ_CHECK(resting == books.live_orders(), "levels hold %llu orders, the order map %zu",
             static_cast<unsigned long long>(resting), books.live_orders());
  return 0;
}
