#include "core/config_values.h"

#include <arpa/inet.h>

#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/config.h"

namespace pollux::core {

std::string describe(const toml::node& n) {
  if (auto s = n.value<std::string>(); s && n.is_string()) return absl::StrFormat("\"%s\"", *s);
  if (n.is_integer()) return absl::StrCat(*n.value<std::int64_t>());
  if (n.is_floating_point()) return absl::StrCat(*n.value<double>());
  if (n.is_boolean()) return *n.value<bool>() ? "true" : "false";
  if (n.is_table()) return "a table";
  if (n.is_array()) return "an array";
  return "a date/time";
}

std::string want_int(const toml::node& n, std::int64_t lo, std::int64_t hi, std::int64_t* out) {
  if (!n.is_integer()) return absl::StrCat("expected an integer, got ", describe(n));
  const std::int64_t v = *n.value<std::int64_t>();
  if (v < lo || v > hi) return absl::StrFormat("expected %d..%d, got %d", lo, hi, v);
  *out = v;
  return "";
}

std::string want_size(const toml::node& n, std::uint64_t lo, std::uint64_t hi, std::uint64_t* out) {
  if (n.is_integer()) {
    const std::int64_t i = *n.value<std::int64_t>();
    if (i < 0) return absl::StrCat("expected a size, got ", i);
    const auto v = static_cast<std::uint64_t>(i);
    if (v < lo || v > hi) return absl::StrFormat("expected %u..%u bytes, got %u", lo, hi, v);
    *out = v;
    return "";
  }
  if (n.is_string()) return parse_size(*n.value<std::string>(), lo, hi, out);
  return absl::StrCat("expected a size like 16777216 or \"16MiB\", got ", describe(n));
}

bool node_number(const toml::node& n, double* out) {
  if (n.is_floating_point()) {
    *out = *n.value<double>();
  } else if (n.is_integer()) {
    *out = static_cast<double>(*n.value<std::int64_t>());
  } else {
    return false;
  }
  return true;
}

std::string want_number(const toml::node& n, double lo, double hi, double* out) {
  double v;
  if (!node_number(n, &v)) return absl::StrCat("expected a number, got ", describe(n));
  if (!(v >= lo && v <= hi)) return absl::StrFormat("expected %g..%g, got %s", lo, hi, describe(n));
  *out = v;
  return "";
}

std::string want_bool(const toml::node& n, bool* out) {
  if (!n.is_boolean()) return absl::StrCat("expected true|false, got ", describe(n));
  *out = *n.value<bool>();
  return "";
}

std::string want_string(const toml::node& n, std::string* out) {
  if (!n.is_string()) return absl::StrCat("expected a string, got ", describe(n));
  *out = *n.value<std::string>();
  return "";
}

std::string want_choice(const toml::node& n, const std::vector<std::string>& names, std::size_t* index) {
  if (n.is_string()) {
    const std::string s = *n.value<std::string>();
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (s == names[i]) {
        *index = i;
        return "";
      }
    }
  }
  return absl::StrFormat("expected %s, got %s", absl::StrJoin(names, "|"), describe(n));
}

std::string quote(std::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (u < 0x20 || u == 0x7f) {
      out += absl::StrFormat("\\u%04X", u);
    } else {
      out += ch;
    }
  }
  out += '"';
  return out;
}

std::string size_toml(std::uint64_t v) {
  for (auto [suffix, shift] : {std::pair{"GiB", 30}, {"MiB", 20}, {"KiB", 10}}) {
    if (v != 0 && v % (std::uint64_t{1} << shift) == 0) return absl::StrCat("\"", v >> shift, suffix, "\"");
  }
  return absl::StrCat(v);
}

std::string check_pow2(std::uint64_t v) {
  if (v != 0 && (v & (v - 1)) == 0) return "";
  return absl::StrCat("expected a power of two, got ", v);
}

ListenAddress parse_listen_address(std::string_view s, std::string* error) {
  ListenAddress a;
  const auto colon = s.rfind(':');
  if (colon == std::string_view::npos) {
    *error = absl::StrCat("expected HOST:PORT (e.g. \"127.0.0.1:9464\"), got ", quote(s));
    return a;
  }
  std::string_view host = s.substr(0, colon);
  const std::string_view port = s.substr(colon + 1);
  unsigned long p = 0;
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string_view::npos ||
      (p = std::stoul(std::string(port))) > 65535) {
    *error = absl::StrCat("expected a port 0-65535 after the last ':' (0: a free port), got ", quote(s));
    return a;
  }
  a.port = static_cast<std::uint16_t>(p);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.empty() || host == "localhost") host = "127.0.0.1";
  a.host = std::string(host);
  in_addr v4{};
  in6_addr v6{};
  if (inet_pton(AF_INET, a.host.c_str(), &v4) == 1) {
    a.loopback = (ntohl(v4.s_addr) >> 24) == 127;
  } else if (inet_pton(AF_INET6, a.host.c_str(), &v6) == 1) {
    a.loopback = IN6_IS_ADDR_LOOPBACK(&v6);
  } else {
    *error = absl::StrCat("expected a numeric IPv4 address, [IPv6 address], localhost or nothing before the port, got ",
                          quote(s));
    return a;
  }
  error->clear();
  return a;
}

std::string check_listen_address(const std::string& s) {
  if (s.empty()) return "";
  std::string e;
  (void)parse_listen_address(s, &e);
  return e;
}

std::string check_ipv4(const std::string& s) {
  in_addr a{};
  if (inet_pton(AF_INET, s.c_str(), &a) == 1) return "";
  return absl::StrFormat("expected an IPv4 address like \"239.255.0.1\", got \"%s\"", s);
}

namespace {

// A kTextList or kIntegerList value: an array of at most k.max_items elements, each read by
// `element` ("" or why it is refused, told with the element's index).
template <typename Element>
std::string check_list(const ConfigKeys::Key& k, const toml::node& n, Element element) {
  const toml::array* a = n.as_array();
  if (a == nullptr) return absl::StrCat("expected ", k.expected, ", got ", describe(n));
  if (a->size() > k.max_items) return absl::StrCat("at most ", k.max_items, " ", k.items, ", got ", a->size());
  for (std::size_t i = 0; i < a->size(); ++i) {
    if (std::string e = element(*a->get(i)); !e.empty()) return absl::StrCat("element ", i, ": ", e);
  }
  return "";
}

}  // namespace

std::string check_key_value(const ConfigKeys::Key& k, const toml::node& n, ConfigKeys::Value* v) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  switch (k.type) {
    case ConfigKeys::Type::kInteger:
      return want_int(n, k.int_min, k.int_max, &v->integer);
    case ConfigKeys::Type::kSize:
      return want_size(n, k.size_min, k.size_max, &v->size);
    case ConfigKeys::Type::kNumber: {
      double d;
      if (k.number_min == -kInf && k.number_max == kInf) {  // any number, NaN included
        if (!node_number(n, &d)) return absl::StrCat("expected a number, got ", describe(n));
        v->number = d;
        return "";
      }
      if (k.expected.empty()) return want_number(n, k.number_min, k.number_max, &v->number);
      if (!node_number(n, &d)) return absl::StrCat("expected ", k.expected, ", got ", describe(n));
      if (!(d >= k.number_min && d <= k.number_max)) return absl::StrCat("expected ", k.expected, ", got ", d);
      v->number = d;
      return "";
    }
    case ConfigKeys::Type::kText:
      if (!n.is_string()) return absl::StrCat("expected ", k.expected, ", got ", describe(n));
      v->text = *n.value<std::string>();
      return "";
    case ConfigKeys::Type::kChoice:
      return want_choice(n, k.choices, &v->choice);
    case ConfigKeys::Type::kBool:
      if (!k.expected.empty() && !n.is_boolean()) return absl::StrCat("expected ", k.expected, ", got ", describe(n));
      return want_bool(n, &v->boolean);
    case ConfigKeys::Type::kTextList:
      v->texts.clear();
      return check_list(k, n, [&](const toml::node& e) {
        std::string s;
        std::string err = want_string(e, &s);
        if (err.empty() && k.item_check) err = k.item_check(s);
        if (err.empty()) v->texts.push_back(std::move(s));
        return err;
      });
    case ConfigKeys::Type::kIntegerList:
      v->integers.clear();
      return check_list(k, n, [&](const toml::node& e) {
        std::int64_t i;
        std::string err = want_int(e, k.int_min, k.int_max, &i);
        if (err.empty()) v->integers.push_back(i);
        return err;
      });
  }
  return "unknown key type";
}

std::string key_value_toml(const ConfigKeys::Key& k, const ConfigKeys::Value& v) {
  switch (k.type) {
    case ConfigKeys::Type::kInteger:
      return absl::StrCat(v.integer);
    case ConfigKeys::Type::kSize:
      return size_toml(v.size);
    case ConfigKeys::Type::kNumber:
      return absl::StrFormat("%g", v.number);
    case ConfigKeys::Type::kText:
      return quote(v.text);
    case ConfigKeys::Type::kChoice:
      return quote(k.choices[v.choice]);
    case ConfigKeys::Type::kBool:
      return v.boolean ? "true" : "false";
    case ConfigKeys::Type::kTextList: {
      std::vector<std::string> q;
      for (const std::string& t : v.texts) q.push_back(quote(t));
      return absl::StrCat("[", absl::StrJoin(q, ", "), "]");
    }
    case ConfigKeys::Type::kIntegerList:
      return absl::StrCat("[", absl::StrJoin(v.integers, ", "), "]");
  }
  return "";
}

}  // namespace pollux::core
