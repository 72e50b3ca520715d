// Names (or explanations) of codes - an enum's values, a protocol's status numbers - kept as a
// table next to the function that looks them up, rather than as a switch of returns.
#pragma once

#include <cstddef>
#include <string_view>

namespace pollux::core {

template <class Code>
struct CodeName {
  Code code;
  std::string_view name;
};

// The name of `code` in `table`; `unknown` when the table has none.
template <class Code, std::size_t N>
constexpr std::string_view name_of(Code code, const CodeName<Code> (&table)[N], std::string_view unknown) noexcept {
  for (const CodeName<Code>& e : table) {
    if (e.code == code) return e.name;
  }
  return unknown;
}

}  // namespace pollux::core
