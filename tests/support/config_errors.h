// The configuration tests' tables of refused inputs: each case is a TOML text and the exact
// message its parser must give, checked through one loop so a failure names the input.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <string_view>

namespace pollux::testing {

struct ConfigErrorCase {
  std::string_view toml;
  std::string_view error;
};

// error_of(toml) returns the parser's message for a text it must refuse (and fails the test
// when the text is accepted).
template <class ErrorOf>
void expect_config_errors(const ErrorOf& error_of, std::initializer_list<ConfigErrorCase> cases) {
  for (const ConfigErrorCase& c : cases) EXPECT_EQ(error_of(c.toml), c.error) << "for:\n" << c.toml;
}

}  // namespace pollux::testing
