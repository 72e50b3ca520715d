// A small strict JSON reader for the tests (RFC 8259 values; no comments, no trailing commas):
// enough to check the schema of pollux-latency --json without a JSON library (CI has none).
#pragma once

#include <cctype>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pollux::jsonlite {

struct Value {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  bool b = false;
  double num = 0;
  std::string str;
  std::vector<Value> arr;
  std::vector<std::pair<std::string, Value>> obj;  // in document order

  bool is_null() const { return type == Type::kNull; }
  bool is_number() const { return type == Type::kNumber; }
  bool is_string() const { return type == Type::kString; }
  bool is_array() const { return type == Type::kArray; }
  bool is_object() const { return type == Type::kObject; }
  bool is_bool() const { return type == Type::kBool; }
  // Member `k` of an object, or nullptr.
  const Value* get(std::string_view k) const {
    if (type != Type::kObject) return nullptr;
    for (const auto& [key, v] : obj) {
      if (key == k) return &v;
    }
    return nullptr;
  }
};

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  // The document's one value, or nullopt (error() says where) on any syntax error or trailing text.
  std::optional<Value> parse() {
    Value v;
    if (!value(&v, 0)) return std::nullopt;
    ws();
    if (i_ != s_.size()) return fail("trailing characters");
    return v;
  }
  const std::string& error() const { return err_; }

 private:
  std::nullopt_t fail(const char* what) {
    if (err_.empty()) err_ = std::string(what) + " at offset " + std::to_string(i_);
    return std::nullopt;
  }
  bool bad(const char* what) {
    fail(what);
    return false;
  }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t')) ++i_;
  }
  bool lit(std::string_view w) {
    if (s_.substr(i_, w.size()) != w) return false;
    i_ += w.size();
    return true;
  }
  bool value(Value* v, int depth) {
    if (depth > 64) return bad("nesting too deep");
    ws();
    if (i_ >= s_.size()) return bad("unexpected end");
    const char c = s_[i_];
    if (c == '{') return object(v, depth);
    if (c == '[') return array(v, depth);
    if (c == '"') {
      v->type = Value::Type::kString;
      return string(&v->str);
    }
    if (lit("true")) {
      v->type = Value::Type::kBool;
      v->b = true;
      return true;
    }
    if (lit("false")) {
      v->type = Value::Type::kBool;
      return true;
    }
    if (lit("null")) return true;
    return number(v);
  }
  bool number(Value* v) {
    const std::size_t start = i_;
    if (i_ < s_.size() && s_[i_] == '-') ++i_;
    if (i_ >= s_.size() || !std::isdigit(static_cast<unsigned char>(s_[i_]))) return bad("bad value");
    if (s_[i_] == '0') {
      ++i_;
    } else {
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
    }
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      if (i_ >= s_.size() || !std::isdigit(static_cast<unsigned char>(s_[i_]))) return bad("bad fraction");
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (i_ >= s_.size() || !std::isdigit(static_cast<unsigned char>(s_[i_]))) return bad("bad exponent");
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
    }
    v->type = Value::Type::kNumber;
    v->num = std::strtod(std::string(s_.substr(start, i_ - start)).c_str(), nullptr);
    return true;
  }
  bool string(std::string* out) {
    ++i_;  // opening quote
    while (i_ < s_.size()) {
      const char c = s_[i_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return bad("control character in string");
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (i_ >= s_.size()) break;
      const char e = s_[i_++];
      // The one-character escapes, and the characters they stand for at the same index.
      static constexpr std::string_view kEscapes = "\"\\/bfnrt", kMeanings = "\"\\/\b\f\n\r\t";
      if (const std::size_t k = kEscapes.find(e); k != std::string_view::npos) {
        out->push_back(kMeanings[k]);
      } else if (e == 'u') {
        if (i_ + 4 > s_.size()) return bad("short \\u escape");
        for (int d = 0; d < 4; ++d) {
          if (!std::isxdigit(static_cast<unsigned char>(s_[i_ + d]))) return bad("bad \\u escape");
        }
        const long cp = std::strtol(std::string(s_.substr(i_, 4)).c_str(), nullptr, 16);
        i_ += 4;
        out->push_back(cp < 0x80 ? static_cast<char>(cp) : '?');
      } else {
        return bad("bad escape");
      }
    }
    return bad("unterminated string");
  }
  // Consumes `c` when it is the next character.
  bool eat(char c) {
    if (i_ >= s_.size() || s_[i_] != c) return false;
    ++i_;
    return true;
  }
  // Starts a container of `type` at its opening bracket; true when `close` follows at once (empty).
  bool opens_empty(Value* v, Value::Type type, char close) {
    v->type = type;
    ++i_;
    ws();
    return eat(close);
  }
  bool array(Value* v, int depth) {
    if (opens_empty(v, Value::Type::kArray, ']')) return true;
    for (;;) {
      Value e;
      if (!value(&e, depth + 1)) return false;
      v->arr.push_back(std::move(e));
      ws();
      if (eat(',')) continue;
      if (eat(']')) return true;
      return bad("expected , or ]");
    }
  }
  bool object(Value* v, int depth) {
    if (opens_empty(v, Value::Type::kObject, '}')) return true;
    for (;;) {
      ws();
      if (i_ >= s_.size() || s_[i_] != '"') return bad("expected a member name");
      std::string k;
      if (!string(&k)) return false;
      ws();
      if (!eat(':')) return bad("expected :");
      Value e;
      if (!value(&e, depth + 1)) return false;
      v->obj.emplace_back(std::move(k), std::move(e));
      ws();
      if (eat(',')) continue;
      if (eat('}')) return true;
      return bad("expected , or }");
    }
  }

  std::string_view s_;
  std::size_t i_ = 0;
  std::string err_;
};

inline std::optional<Value> Parse(std::string_view text, std::string* error = nullptr) {
  Parser p(text);
  std::optional<Value> v = p.parse();
  if (!v && error != nullptr) *error = p.error();
  return v;
}

}  // namespace pollux::jsonlite
