// The value checks of every configuration table: Pollux's own (core/config.cc) and an
// application's (pollux/config.h, api/config.cc), so a key of either is checked, worded and
// printed the same way. Each want_* returns "" on success, else the message that follows
// "file:line: key: " in the error, and leaves *out alone on failure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <toml++/toml.h>

#include "pollux/config.h"

namespace pollux::core {

// A value as an error message shows it: "\"text\"", 42, 2.5, true, "a table", ...
std::string describe(const toml::node& n);

// An integer in [lo, hi].
std::string want_int(const toml::node& n, std::int64_t lo, std::int64_t hi, std::int64_t* out);

// A number in [lo, hi]: a float or an integer (converted here: toml++ gives no double for an
// integer beyond 2^53).
// A float or an integer as a double; false for any other type.
bool node_number(const toml::node& n, double* out);
std::string want_number(const toml::node& n, double lo, double hi, double* out);

// Bytes in [lo, hi]: an integer or a string with a binary suffix ("64KiB", "16MiB", "1GiB";
// parse_size() in core/config.h).
std::string want_size(const toml::node& n, std::uint64_t lo, std::uint64_t hi, std::uint64_t* out);

std::string want_bool(const toml::node& n, bool* out);
std::string want_string(const toml::node& n, std::string* out);

// One of `names`: *index is its position. The error lists them: "expected a|b|c, got \"d\"".
std::string want_choice(const toml::node& n, const std::vector<std::string>& names, std::size_t* index);

// One of `choices` (by name), as want_choice().
template <typename E>
std::string want_enum(const toml::node& n, std::initializer_list<std::pair<const char*, E>> choices, E* out) {
  std::vector<std::string> names;
  for (auto& c : choices) names.emplace_back(c.first);
  std::size_t i = 0;
  if (std::string e = want_choice(n, names, &i); !e.empty()) return e;
  *out = std::data(choices)[i].second;
  return "";
}

// A TOML basic string: quotes, backslashes and control characters escaped, so that what
// to_toml() prints parses back to the same value (found by tests/fuzz/config_fuzz.cc).
std::string quote(std::string_view s);

// A size as a configuration writes it: the largest binary unit that divides it exactly, as the
// string want_size() parses ("16MiB", "64KiB", "1GiB"); bytes when none does (2000, 0).
std::string size_toml(std::uint64_t v);

// "" when `v` is a power of two, else "expected a power of two, got <v>".
std::string check_pow2(std::uint64_t v);
// "" when `s` is a dotted-quad IPv4 address, else "expected an IPv4 address like ..., got ...".
std::string check_ipv4(const std::string& s);

// A listening address written "HOST:PORT": HOST an IPv4 address, "[IPv6]", "localhost" or empty
// (= 127.0.0.1, loopback); PORT 0-65535 (0: a free port, which the server reports). Only the address written is bound:
// a non-loopback HOST (0.0.0.0, an interface's address) is the user's explicit choice.
struct ListenAddress {
  std::string host;  // numeric: "127.0.0.1", "::1", "0.0.0.0"
  std::uint16_t port = 0;
  bool loopback = false;
};
// The address, or "" in *error with what is wrong.
ListenAddress parse_listen_address(std::string_view s, std::string* error);
// "" when parse_listen_address accepts `s` (or `s` is empty: off), else the message.
std::string check_listen_address(const std::string& s);

// A key of a ConfigKeys table (pollux/config.h: an application's, or a transport's): the checks
// of its type and bounds into *v ("" or the message), and its value as TOML.
std::string check_key_value(const ConfigKeys::Key& k, const toml::node& n, ConfigKeys::Value* v);
std::string key_value_toml(const ConfigKeys::Key& k, const ConfigKeys::Value& v);

}  // namespace pollux::core
