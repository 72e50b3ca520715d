#include "core/config_override.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pollux::core {

namespace {
std::string kind_of(const toml::node& n) {
  if (n.is_table()) return "a table";
  if (n.is_array_of_tables()) return "an array of tables";
  if (n.is_array()) return "an array";
  return "a value";
}
}  // namespace

absl::StatusOr<ConfigOverride> parse_override(std::string_view text, std::string_view flag, std::string_view example) {
  const std::string o(text);
  const std::size_t eq = o.find('=');
  const std::string path = o.substr(0, eq);
  const std::size_t dot = path.find('.');
  if (eq == std::string::npos || dot == std::string::npos || dot == 0 || dot + 1 == path.size()) {
    return absl::InvalidArgumentError(absl::StrFormat("%s %s: expected section.key=value (e.g. %s)", flag, o, example));
  }
  ConfigOverride out;
  out.section = path.substr(0, dot);
  out.key = path.substr(dot + 1);
  const std::string value = o.substr(eq + 1);
  try {
    out.holder = toml::parse(std::string_view("v = " + value), std::string_view(flag));
  } catch (const toml::parse_error&) {
    out.holder.clear();
    out.holder.insert("v", value);
  }
  return out;
}

absl::Status apply_override(toml::table& root, const ConfigOverride& o, std::string_view flag) {
  toml::node* sec = root.get(o.section);
  if (sec == nullptr) {
    root.insert(o.section, toml::table{});
    sec = root.get(o.section);
  }
  if (!sec->is_table()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %s: cannot override keys of %s from the command line", flag, o.section, kind_of(*sec)));
  }
  sec->as_table()->insert_or_assign(o.key, o.value());
  return absl::OkStatus();
}

}  // namespace pollux::core
