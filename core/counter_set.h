// A counter set declared once. A set is an X-macro list with one entry per counter:
//   X(field, "name", "help")          a counter its owner updates itself (add/set), or
//   X(field, "name", "help", value)   a counter publish() copies from `value`, an expression
//                                     over the variables of the publish() that expands the list.
// Everything else is generated from that list, so a counter cannot be declared and never
// allocated, allocated under a second name, or left out of publish():
//   POLLUX_COUNTER_FIELDS(LIST)          the core::Counter members, one per entry
//   POLLUX_COUNTER_TABLE(LIST)           kCounterTable (name and help of each, in allocation order)
//                                        and kCounterCount, for readers and documentation
//   POLLUX_COUNTER_NAMES(LIST)           struct names { static constexpr std::string_view field = "name"; }
//                                        so a reader (pollux-stat) spells a name through the table
//   POLLUX_COUNTER_ALLOCATE(LIST, obj, alloc)  obj.field = alloc("name") for each entry, in table order
//   POLLUX_COUNTER_PUBLISH(LIST, obj)    obj.field.set(value) for each entry of the second form
// A set is usually a struct of its own, declared with
//   POLLUX_COUNTER_SET(Name, LIST)       struct Name { POLLUX_COUNTER_MEMBERS(LIST) }, checked to hold
//                                        nothing but the set's counters
//   POLLUX_COUNTER_MEMBERS(LIST)         the fields, table and names above and allocate(alloc), which
//                                        allocates them all (for a struct that adds its own methods;
//                                        POLLUX_COUNTER_SET_CHECK(Name, LIST) after it)
// Names are what pollux-stat, tests and scripts read: changing one is an interface change.
#pragma once

#include <cstddef>
#include <string_view>

#include "core/counter.h"

namespace pollux::core {

// One counter of a set: its name in the counters file and what it counts.
struct CounterInfo {
  std::string_view name;
  std::string_view help;
};

}  // namespace pollux::core

#define POLLUX_COUNTER_FIELD_(field, name, help, ...) ::pollux::core::Counter field;
#define POLLUX_COUNTER_INFO_(field, name, help, ...) ::pollux::core::CounterInfo{name, help},
#define POLLUX_COUNTER_NAME_(field, name, help, ...) static constexpr std::string_view field = name;
#define POLLUX_COUNTER_ALLOC_(field, name, help, ...) \
  pollux_counter_obj_.field = pollux_counter_alloc_(std::string_view(name));
#define POLLUX_COUNTER_SET_(field, name, help, ...) __VA_OPT__(pollux_counter_obj_.field.set(__VA_ARGS__);)

#define POLLUX_COUNTER_FIELDS(LIST) LIST(POLLUX_COUNTER_FIELD_)
#define POLLUX_COUNTER_TABLE(LIST)                                                             \
  static constexpr ::pollux::core::CounterInfo kCounterTable[] = {LIST(POLLUX_COUNTER_INFO_)}; \
  static constexpr std::size_t kCounterCount = sizeof(kCounterTable) / sizeof(kCounterTable[0]);
#define POLLUX_COUNTER_NAMES(LIST) \
  struct names {                   \
    LIST(POLLUX_COUNTER_NAME_)     \
  };
// `obj`: the object holding the fields. `alloc`: a callable taking the name (std::string_view) and returning the
// core::Counter, e.g.
// [&](std::string_view n) { return file.allocate(scope, n, stream_id); }.
#define POLLUX_COUNTER_ALLOCATE(LIST, obj, alloc) \
  do {                                            \
    auto& pollux_counter_obj_ = (obj);            \
    auto&& pollux_counter_alloc_ = (alloc);       \
    LIST(POLLUX_COUNTER_ALLOC_)                   \
  } while (0)
#define POLLUX_COUNTER_PUBLISH(LIST, obj) \
  do {                                    \
    auto& pollux_counter_obj_ = (obj);    \
    LIST(POLLUX_COUNTER_SET_)             \
  } while (0)
#define POLLUX_COUNTER_MEMBERS(LIST)             \
  POLLUX_COUNTER_FIELDS(LIST)                    \
  POLLUX_COUNTER_TABLE(LIST)                     \
  POLLUX_COUNTER_NAMES(LIST)                     \
  template <class PolluxCounterAlloc>            \
  void allocate(PolluxCounterAlloc&& alloc) {    \
    POLLUX_COUNTER_ALLOCATE(LIST, *this, alloc); \
  }
#define POLLUX_COUNTER_SET_CHECK(Name, LIST)                                           \
  static_assert(sizeof(Name) == Name::kCounterCount * sizeof(::pollux::core::Counter), \
                "every counter of " #Name " is in " #LIST)
#define POLLUX_COUNTER_SET(Name, LIST) \
  struct Name {                        \
    POLLUX_COUNTER_MEMBERS(LIST)       \
  };                                   \
  POLLUX_COUNTER_SET_CHECK(Name, LIST)
