// A small streaming JSON writer for the tools' --json output (nested objects and arrays; the
// benchmarks' flat JSON-lines objects, bench/bench_util.h's JsonObject, use its quote()).
// Strings are escaped to plain ASCII: quotes, backslashes, control characters and every byte
// >= 0x7f become \uXXXX (tools/common/output.h's json_string passes UTF-8 through), so names
// read from files another user may have written - pollux-stat reads nothing else - cannot carry
// terminal escapes or invalid UTF-8 into the document.
#pragma once

#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace pollux::tools {

class JsonOut {
 public:
  JsonOut& begin_object() { return open('{'); }
  JsonOut& end_object() { return close('}'); }
  JsonOut& begin_array() { return open('['); }
  JsonOut& end_array() { return close(']'); }
  JsonOut& key(std::string_view k) {
    value_prefix();
    out_ += quote(k);
    out_ += ':';
    after_key_ = true;
    return *this;
  }
  JsonOut& str(std::string_view v) {
    value_prefix();
    out_ += quote(v);
    return *this;
  }
  JsonOut& num(std::uint64_t v) { return raw(std::to_string(v)); }
  JsonOut& num(std::int64_t v) { return raw(std::to_string(v)); }
  JsonOut& num(int v) { return raw(std::to_string(v)); }
  JsonOut& num(std::uint32_t v) { return raw(std::to_string(v)); }
  JsonOut& num(double v) {
    if (!std::isfinite(v)) return null();  // JSON has no NaN or infinity
    char b[40];
    std::snprintf(b, sizeof b, "%.6g", v);
    return raw(b);
  }
  JsonOut& boolean(bool v) { return raw(v ? "true" : "false"); }
  JsonOut& null() { return raw("null"); }
  // key + value in one call.
  template <typename T>
  JsonOut& field(std::string_view k, const T& v) {
    key(k);
    if constexpr (std::is_same_v<T, bool>) {
      return boolean(v);
    } else if constexpr (std::is_convertible_v<T, std::string_view>) {
      return str(v);
    } else {
      return num(v);
    }
  }
  const std::string& text() const { return out_; }

  static std::string quote(std::string_view s) {
    std::string q = "\"";
    for (const char ch : s) {
      const auto c = static_cast<unsigned char>(ch);
      if (c == '"' || c == '\\') {
        q += '\\';
        q += ch;
      } else if (c < 0x20 || c >= 0x7f) {
        char e[8];
        std::snprintf(e, sizeof e, "\\u%04x", c);
        q += e;
      } else {
        q += ch;
      }
    }
    return q + "\"";
  }

 private:
  JsonOut& raw(std::string_view v) {
    value_prefix();
    out_ += v;
    return *this;
  }
  JsonOut& open(char c) {
    value_prefix();
    out_ += c;
    first_.push_back(true);
    return *this;
  }
  JsonOut& close(char c) {
    out_ += c;
    if (!first_.empty()) first_.pop_back();
    return *this;
  }
  // A comma before every value of an array and every key of an object but the first.
  void value_prefix() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (!first_.empty()) {
      if (!first_.back()) out_ += ',';
      first_.back() = false;
    }
  }
  std::string out_;
  std::vector<bool> first_;
  bool after_key_ = false;
};

}  // namespace pollux::tools
