#include "itch/report.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pollux::itch {
namespace {

void write_json_string(std::string_view s, std::ostream& out) { out << '"' << escape_text(s) << '"'; }

void write_side(const OrderBook& book, Side side, std::ostream& out) {
  out << '[';
  bool first = true;
  for (const PriceLevel& l : book.depth(side)) {
    if (!first) out << ", ";
    first = false;
    out << '[' << l.price << ", " << l.shares << ']';
  }
  out << ']';
}

template <class Fn>
absl::Status write_to_path(const std::string& path, Fn&& fn) {
  std::ofstream f(path, std::ios::out | std::ios::trunc);
  if (!f) {
    return absl::UnavailableError(absl::StrCat("itch: cannot create '", path, "': ", std::strerror(errno)));
  }
  fn(f);
  f.flush();
  if (!f) {
    return absl::UnavailableError(absl::StrCat("itch: cannot write '", path, "': ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

std::string escape_text(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) {
      absl::StrAppendFormat(&out, "\\u%04x", static_cast<unsigned char>(c));
    } else {
      out.push_back(c);
    }
  }
  return out;
}

void write_books_jsonl(const BookSet& books, std::ostream& out) {
  books.for_each_book([&out](const OrderBook& book) {
    out << "{\"symbol\": ";
    write_json_string(book.symbol(), out);
    out << ", \"bids\": ";
    write_side(book, Side::kBuy, out);
    out << ", \"asks\": ";
    write_side(book, Side::kSell, out);
    out << "}\n";
  });
}

absl::Status write_books_jsonl(const BookSet& books, const std::string& path) {
  return write_to_path(path, [&books](std::ostream& out) { write_books_jsonl(books, out); });
}

void write_counts_json(const MessageCounts& counts, std::ostream& out) {
  out << '{';
  bool first = true;
  for (int t = 0; t < 256; ++t) {
    const char c = static_cast<char>(t);
    if (counts[c] == 0) continue;
    if (!first) out << ", ";
    first = false;
    write_json_string(std::string_view(&c, 1), out);
    out << ": " << counts[c];
  }
  out << "}\n";
}

absl::Status write_counts_json(const MessageCounts& counts, const std::string& path) {
  return write_to_path(path, [&counts](std::ostream& out) { write_counts_json(counts, out); });
}

}  // namespace pollux::itch
