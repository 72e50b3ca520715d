// Configuration for an application beside Pollux's own: what a configuration sets up (checked
// without starting it), and a table of the application's own in the same TOML file, read by
// the machinery of Pollux's tables. An application's [feed] table then behaves as [runtime]
// does: every key declared once with its type, bounds, default and help; unknown keys refused
// with a suggestion; sizes written as 16777216 or "16MiB"; every error located the same way,
//   feed.toml:12: feed.streams: expected 1..256, got 0
// and the effective table printed as TOML with each key's help.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "pollux/export.h"
#include "pollux/idle.h"

namespace pollux {

// The whole text of the configuration file `path`, read as Context::from_file reads it: only a
// regular file of reasonable size (a FIFO, a directory or a device is refused before it is
// opened, so reading cannot block). Errors start with the path.
POLLUX_API absl::StatusOr<std::string> read_config_file(const std::string& path);

// What a Pollux configuration sets up, for an application that adapts to it (its own loops
// idle as the pollers do) or reports it.
struct ContextInfo {
  std::string source;                   // the configuration's source name (a file, "<string>", ...)
  std::string threading;                // runtime.threading: "dedicated", "shared" or "inline"
  std::string transport;                // transport.kind: "shm", "udp" or "rdma"
  IdleKind idle = IdleKind::kAdaptive;  // runtime.idle
  std::string flow_control;             // shm.flow_control: "lossy" or "backpressure"
  std::string effective_config;         // every key as TOML with its help (Context::effective_config())
};

// Checks `toml` exactly as Context::from_string would (the same errors) and says what it sets
// up, starting nothing: no poller, no shared memory, no socket.
POLLUX_API absl::StatusOr<ContextInfo> check_config(std::string_view toml, std::string_view source_name = "<string>");

// A configuration file read for an application with a table of its own (ConfigTable::load).
struct AppConfigFile {
  // Pollux's part: the file with the application's table blanked line for line (so Pollux's
  // errors name the lines as written), for Context::from_string(pollux_toml, pollux_source).
  // With --set overrides of Pollux keys it is the file re-written with them, and the source
  // says so ("feed.toml + --set").
  std::string pollux_toml;
  std::string pollux_source;
  ContextInfo pollux;
  // Where each key of the application's table was set ("table.key" -> "file:line", or "--set"),
  // for errors found after loading (a check across keys, a resource that fails to open).
  std::map<std::string, std::string> where;
};

// The untyped half of ConfigTable<T>: the keys and the machinery, on the object as void*.
class POLLUX_API ConfigKeys {
 public:
  enum class Type { kInteger, kSize, kNumber, kText, kChoice, kBool, kTextList, kIntegerList };
  // A key's value once its type and bounds are checked (the member of its type).
  struct Value {
    std::int64_t integer = 0;
    std::uint64_t size = 0;
    double number = 0;
    std::string text;
    std::size_t choice = 0;  // index into Key::choices
    bool boolean = false;
    std::vector<std::string> texts;      // kTextList
    std::vector<std::int64_t> integers;  // kIntegerList
  };
  struct Key {
    std::string name;
    std::string help;
    Type type = Type::kInteger;
    std::int64_t int_min = 0, int_max = 0;  // kInteger, and each element of a kIntegerList
    std::uint64_t size_min = 0, size_max = 0;
    double number_min = 0, number_max = 0;
    // kText, kTextList, kIntegerList, kNumber and kBool (optional): what a value of another type (or
    // out of bounds) is told to be
    std::string expected;
    std::vector<std::string> choices;  // kChoice
    std::size_t max_items = 0;         // kTextList, kIntegerList: most elements
    std::string items;                 // kTextList: what the elements are called ("peers") when too many
    std::function<std::string(const std::string&)> item_check;  // kTextList: "" or why an element is refused
    std::function<std::string(void* obj, const Value& v)> set;  // "" or why `v` is refused
    std::function<Value(const void* obj)> get;
  };

  explicit ConfigKeys(std::string table) : table_(std::move(table)) {}
  const std::string& table() const noexcept { return table_; }
  const std::vector<Key>& keys() const noexcept { return keys_; }

 protected:
  absl::StatusOr<AppConfigFile> load_into(void* obj, std::string_view toml, std::string_view source,
                                          const std::vector<std::string>& overrides) const;
  std::string to_toml_of(const void* obj) const;
  void add(Key k) { keys_.push_back(std::move(k)); }

 private:
  std::string table_;
  std::vector<Key> keys_;
};

// A choice key's names and the values they stand for: declared once, as an array, for the key
// (ConfigTable::choice) and for whatever prints the value (choice_name):
//   constexpr pollux::ConfigChoice<Replay> kReplayNames[] = {{"max", Replay::kMax}, {"rate", Replay::kRate}};
template <typename E>
using ConfigChoice = std::pair<const char*, E>;

// The name of `value` in `choices`; "?" when none stands for it.
template <typename E, std::size_t N>
constexpr std::string_view choice_name(const ConfigChoice<E> (&choices)[N], E value) {
  for (const auto& [name, e] : choices) {
    if (e == value) return name;
  }
  return "?";
}

// An application's table [name] of a Pollux configuration file, read into a struct T whose
// members hold the defaults. Declare each key once, in the order to print them:
//   pollux::ConfigTable<FeedConfig> t("feed");
//   t.integer("streams", &FeedConfig::streams, 1, 256, "partitions by stock locate")
//    .choice("replay", &FeedConfig::replay, {{"max", Replay::kMax}, {"rate", Replay::kRate}}, "pacing")
//    .size("capture_buffer", &FeedConfig::capture_buffer, 1 << 20, 4ull << 30, "bytes of the ring");
// A key's optional `check` refuses a value its type and bounds allow ("" = fine, else the message
// after "file:line: table.key: "). Control path: nothing here is meant for a hot loop.
template <typename T>
class ConfigTable : public ConfigKeys {
 public:
  using ConfigKeys::ConfigKeys;

  // An integer in [min, max], stored in an integer member of any width.
  template <typename F>
  ConfigTable& integer(const char* name, F T::*field, std::int64_t min, std::int64_t max, const char* help,
                       std::function<std::string(std::int64_t)> check = nullptr) {
    return bind(bounded(name, help, Type::kInteger, &Key::int_min, &Key::int_max, min, max), field, &Value::integer,
                std::move(check));
  }

  // Bytes in [min, max]: 16777216 or "16MiB" ("KiB", "MiB", "GiB"); printed in the largest unit
  // that divides it. Stored in an unsigned member of any width that holds `max`.
  template <typename F>
  ConfigTable& size(const char* name, F T::*field, std::uint64_t min, std::uint64_t max, const char* help,
                    std::function<std::string(std::uint64_t)> check = nullptr) {
    return bind(bounded(name, help, Type::kSize, &Key::size_min, &Key::size_max, min, max), field, &Value::size,
                std::move(check));
  }

  // A number in [min, max] (an integer is taken too). `expected` (optional) words the error of
  // a value that is not one or is out of bounds: "expected <expected>, got 2".
  ConfigTable& number(const char* name, double T::*field, double min, double max, const char* help,
                      const char* expected = "") {
    Key k = bounded(name, help, Type::kNumber, &Key::number_min, &Key::number_max, min, max);
    k.expected = expected;
    return bind(std::move(k), field, &Value::number, nullptr);
  }

  // Any number (an integer is taken too), NaN and the infinities included: for a key whose bounds
  // a check across keys enforces with its own message.
  ConfigTable& number(const char* name, double T::*field, const char* help) {
    return number(name, field, -std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity(), help);
  }

  // A string. `expected` completes "expected ..., got 3" for a value that is not one ("a path",
  // "\"ADDR:PORT\"").
  ConfigTable& text(const char* name, std::string T::*field, const char* expected, const char* help,
                    std::function<std::string(const std::string&)> check = nullptr) {
    Key k = base(name, help, Type::kText);
    k.expected = expected;
    return bind(std::move(k), field, &Value::text, std::move(check));
  }

  // true or false. `expected` (optional) words the error of another value: "expected <expected>,
  // got 1" (by default "expected true|false, got 1").
  ConfigTable& boolean(const char* name, bool T::*field, const char* help, const char* expected = "") {
    Key k = base(name, help, Type::kBool);
    k.expected = expected;
    return bind(std::move(k), field, &Value::boolean, nullptr);
  }

  // An array of at most `max_items` strings, each passing `check` ("" = fine); `expected` words
  // what a value of another type is told to be, `items` what the elements are called.
  ConfigTable& text_list(const char* name, std::vector<std::string> T::*field, const char* expected,
                         std::size_t max_items, const char* items, const char* help,
                         std::function<std::string(const std::string&)> check = nullptr) {
    Key k = base(name, help, Type::kTextList);
    k.expected = expected;
    k.max_items = max_items;
    k.items = items;
    k.item_check = std::move(check);
    return bind(std::move(k), field, &Value::texts, nullptr);
  }

  // An array of integers, each in [min, max], stored in a vector of any integer type; `expected`
  // words what a value of another type is told to be. Printed as [1, 2, 3].
  template <typename F>
  ConfigTable& integer_list(const char* name, std::vector<F> T::*field, const char* expected, std::int64_t min,
                            std::int64_t max, const char* help) {
    Key k = bounded(name, help, Type::kIntegerList, &Key::int_min, &Key::int_max, min, max);
    k.expected = expected;
    k.max_items = static_cast<std::size_t>(-1);
    k.set = [field](void* o, const Value& v) {
      std::vector<F>& out = static_cast<T*>(o)->*field;
      out.clear();
      for (const std::int64_t i : v.integers) out.push_back(static_cast<F>(i));
      return std::string();
    };
    k.get = [field](const void* o) {
      Value v;
      for (const F i : static_cast<const T*>(o)->*field) v.integers.push_back(static_cast<std::int64_t>(i));
      return v;
    };
    add(std::move(k));
    return *this;
  }

  // One of `choices`, each a name and the value it stands for (an enum, a bool).
  template <typename E>
  ConfigTable& choice(const char* name, E T::*field, std::initializer_list<ConfigChoice<E>> choices, const char* help) {
    return choice_of(name, field, choices.begin(), choices.end(), help);
  }
  // The same, from choices declared once as an array (ConfigChoice).
  template <typename E, std::size_t N>
  ConfigTable& choice(const char* name, E T::*field, const ConfigChoice<E> (&choices)[N], const char* help) {
    return choice_of(name, field, choices, choices + N, help);
  }

  // Every key of `sub`, a table of the member `member`, as keys of this one named
  // "<sub's name>.<key>", in sub's order: e.g. [runtime.adaptive] inside the runtime table,
  //   runtime.nested(&RuntimeConfig::adaptive, adaptive)   // adaptive.wakeup_cost_ns, ...
  // which a file sets as adaptive.x = 1 under [runtime], or under [runtime.adaptive]. The keys
  // are copied: `sub` need not outlive this table.
  template <typename S>
  ConfigTable& nested(S T::*member, const ConfigTable<S>& sub) {
    for (Key k : sub.keys()) {
      k.name = sub.table() + "." + k.name;
      k.set = [member, set = std::move(k.set)](void* o, const Value& v) {
        return set(&(static_cast<T*>(o)->*member), v);
      };
      k.get = [member, get = std::move(k.get)](const void* o) { return get(&(static_cast<const T*>(o)->*member)); };
      add(std::move(k));
    }
    return *this;
  }

  // Reads `toml` (source name `source` in errors): the table's keys into *out (which holds the
  // defaults), the rest checked by Pollux (check_config), then `overrides` ("table.key=value" or
  // any Pollux key, the value in TOML or a bare word taken as a string) applied in order.
  // Errors: "<source>:<line>: <table>.<key>: <message>" (an override's: "--set: ..."), a TOML
  // syntax error "<source>:<line>:<column>: TOML syntax error: ...", or Pollux's own.
  absl::StatusOr<AppConfigFile> load(std::string_view toml, std::string_view source,
                                     const std::vector<std::string>& overrides, T* out) const {
    return load_into(out, toml, source, overrides);
  }

  // The table as TOML: "[name]" then every key "key = value  # help", in declaration order.
  // What it prints, load() reads back to the same values.
  std::string to_toml(const T& obj) const { return to_toml_of(&obj); }

 private:
  static Key base(const char* name, const char* help, Type type) {
    Key k;
    k.name = name;
    k.help = help;
    k.type = type;
    return k;
  }

  // A key whose value lies in [min, max], the bounds kept in the Key members `lo` and `hi`.
  template <typename B>
  static Key bounded(const char* name, const char* help, Type type, B Key::*lo, B Key::*hi, B min, B max) {
    Key k = base(name, help, type);
    k.*lo = min;
    k.*hi = max;
    return k;
  }

  template <typename E, typename It>
  ConfigTable& choice_of(const char* name, E T::*field, It first, It last, const char* help) {
    Key k = base(name, help, Type::kChoice);
    std::vector<E> values;
    for (It c = first; c != last; ++c) {
      k.choices.emplace_back(c->first);
      values.push_back(c->second);
    }
    k.set = [field, values](void* o, const Value& v) {
      static_cast<T*>(o)->*field = values[v.choice];
      return std::string();
    };
    k.get = [field, values](const void* o) {
      Value v;
      for (std::size_t i = 0; i < values.size(); ++i) {
        if (values[i] == static_cast<const T*>(o)->*field) v.choice = i;
      }
      return v;
    };
    add(std::move(k));
    return *this;
  }

  // Adds `k` with its accessors: the member `field` of T read from and written to the member
  // `slot` of Value (converted when their types differ), after `check` (a std::function taking
  // the value, or nullptr for none) accepts it.
  template <typename F, typename M, typename C>
  ConfigTable& bind(Key k, F T::*field, M Value::*slot, C check) {
    k.set = [field, slot, check = std::move(check)](void* o, const Value& v) {
      if constexpr (!std::is_null_pointer_v<C>) {
        if (check) {
          if (std::string e = check(v.*slot); !e.empty()) return e;
        }
      }
      static_cast<T*>(o)->*field = static_cast<F>(v.*slot);
      return std::string();
    };
    k.get = [field, slot](const void* o) {
      Value v;
      v.*slot = static_cast<M>(static_cast<const T*>(o)->*field);
      return v;
    };
    add(std::move(k));
    return *this;
  }
};

}  // namespace pollux
