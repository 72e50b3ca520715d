// JSON outputs of a replay: final books and message counts (the feed handler's
// --book-out and --counts-out).
#pragma once

#include <ostream>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "itch/book_set.h"

namespace pollux::itch {

// `s` with '"' and '\\' backslash-escaped and every byte below 0x20 or from 0x7f up written
// as \u00XX: the inside of a JSON string, and printable on a terminal (no control
// character or stray UTF-8 byte gets through). Symbols are printable ASCII in practice;
// --book-out and the feed handler's summary write them with this.
std::string escape_text(std::string_view s);

// One JSON object per line per book, in stock locate order:
//   {"symbol": "ALC", "bids": [[price, shares], ...], "asks": [[price, shares], ...]}
// Levels best first (bids descending, asks ascending), prices as raw ITCH integers (4
// implied decimals), symbols trimmed of padding. Books named by R but never traded appear
// with empty sides.
void write_books_jsonl(const BookSet& books, std::ostream& out);
[[nodiscard]] absl::Status write_books_jsonl(const BookSet& books, const std::string& path);

// One JSON object of the message counts by type letter, in ASCII order of the letter,
// types never seen left out, e.g. {"A": 4997, "D": 1745, "E": 198}. Ends with a newline.
void write_counts_json(const MessageCounts& counts, std::ostream& out);
[[nodiscard]] absl::Status write_counts_json(const MessageCounts& counts, const std::string& path);

}  // namespace pollux::itch
