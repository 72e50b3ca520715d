#include "pollux/config.h"

#include <set>
#include <sstream>

#include <toml++/toml.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/config.h"
#include "core/config_override.h"
#include "core/config_values.h"
#include "transport/transport.h"

namespace pollux {

absl::StatusOr<std::string> read_config_file(const std::string& path) { return core::read_config_file(path); }

absl::StatusOr<ContextInfo> check_config(std::string_view toml, std::string_view source_name) {
  absl::StatusOr<core::Config> c = core::parse_config(toml, source_name);
  if (!c.ok()) return c.status();
  ContextInfo info;
  info.source = std::string(source_name);
  info.threading = std::string(core::threading_name(c->runtime.threading));
  info.transport = std::string(core::transport_name(c->transport));
  info.idle = c->runtime.idle;
  info.flow_control = std::string(transport::flow_control_name(*c));
  info.effective_config = c->to_toml();
  return info;
}

namespace {

absl::Status key_error(std::string_view where, std::string_view key, std::string_view msg) {
  return absl::InvalidArgumentError(absl::StrFormat("%s: %s: %s", where, key, msg));
}

std::string line_of(std::string_view source, const toml::source_region& r) {
  return absl::StrFormat("%s:%d", source, r.begin.line);
}

absl::StatusOr<toml::table> parse_toml(std::string_view text, std::string_view source) {
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrFormat("%s:%d:%d: TOML syntax error: %s", source, e.source().begin.line,
                                                      e.source().begin.column, e.description()));
  }
}

// Sets one key of the table from a TOML value; `where` locates it in errors and is recorded.
absl::Status set_key(const ConfigKeys& table, void* obj, std::string_view name, const toml::node& n,
                     const std::string& where, std::map<std::string, std::string>* wheres) {
  const std::string full = absl::StrCat(table.table(), ".", std::string(name));
  const ConfigKeys::Key* key = nullptr;
  std::vector<std::string> known;
  for (const ConfigKeys::Key& k : table.keys()) {
    if (k.name == name) key = &k;
    known.push_back(absl::StrCat(table.table(), ".", k.name));
  }
  if (key == nullptr) return key_error(where, full, absl::StrCat("unknown key", core::did_you_mean(full, known)));
  ConfigKeys::Value v;
  std::string e = core::check_key_value(*key, n, &v);
  if (e.empty()) e = key->set(obj, v);
  if (!e.empty()) return key_error(where, full, e);
  (*wheres)[full] = where;
  return absl::OkStatus();
}

}  // namespace

std::string ConfigKeys::to_toml_of(const void* obj) const {
  std::string out = absl::StrCat("[", table_, "]\n");
  for (const Key& k : keys_)
    absl::StrAppend(&out, k.name, " = ", core::key_value_toml(k, k.get(obj)), "  # ", k.help, "\n");
  return out;
}

absl::StatusOr<AppConfigFile> ConfigKeys::load_into(void* obj, std::string_view text, std::string_view source,
                                                    const std::vector<std::string>& overrides) const {
  absl::StatusOr<toml::table> parsed = parse_toml(text, source);
  if (!parsed.ok()) return parsed.status();
  toml::table& root = *parsed;
  AppConfigFile out;

  // Lines of the document that belong to the table: its header and every key/value (a value
  // may span lines). TOML allows nothing else on those lines, so blanking them removes exactly
  // the table and leaves every other line where it was.
  std::set<std::int64_t> own_lines;
  if (toml::node* t = root.get(table_)) {
    const toml::table* tt = t->as_table();
    if (tt == nullptr) {
      return key_error(line_of(source, t->source()), table_,
                       absl::StrCat("expected a table [", table_, "], got ", core::describe(*t)));
    }
    for (auto&& [k, v] : *tt) {
      if (absl::Status s = set_key(*this, obj, k.str(), v, line_of(source, v.source()), &out.where); !s.ok()) return s;
      for (auto l = k.source().begin.line; l <= v.source().end.line; ++l) own_lines.insert(l);
    }
    // The header line ([name]), or for an inline table (name = {...}) the lines it spans.
    for (auto l = t->source().begin.line; l <= t->source().end.line; ++l) own_lines.insert(l);
  }
  std::string pollux_text;
  pollux_text.reserve(text.size());
  std::int64_t line = 1;
  for (std::size_t pos = 0; pos < text.size(); ++line) {
    std::size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    if (own_lines.count(line) == 0) pollux_text.append(text.substr(pos, nl - pos));
    pollux_text.push_back('\n');
    pos = nl + 1;
  }

  // Pollux's part is checked as written first, so its errors name the user's lines.
  absl::StatusOr<ContextInfo> info = check_config(pollux_text, source);
  if (!info.ok()) return info.status();
  out.pollux = *std::move(info);
  out.pollux_toml = std::move(pollux_text);
  out.pollux_source = std::string(source);

  // Overrides: the table's keys as above; Pollux's by editing the parsed document and handing
  // Pollux the re-serialised text (whose line numbers are then the rewritten ones).
  bool pollux_overridden = false;
  root.erase(table_);
  const std::string example = absl::StrCat(table_, ".key=value, runtime.threading=shared");
  for (const std::string& o : overrides) {
    absl::StatusOr<core::ConfigOverride> ov = core::parse_override(o, "--set", example);
    if (!ov.ok()) return ov.status();
    if (ov->section == table_) {
      if (absl::Status s = set_key(*this, obj, ov->key, ov->value(), "--set", &out.where); !s.ok()) return s;
      continue;
    }
    if (absl::Status s = core::apply_override(root, *ov, "--set"); !s.ok()) return s;
    pollux_overridden = true;
  }
  if (pollux_overridden) {
    std::ostringstream os;
    os << toml::toml_formatter(root);
    out.pollux_toml = os.str();
    out.pollux_source = absl::StrCat(std::string(source), " + --set");
    info = check_config(out.pollux_toml, out.pollux_source);
    if (!info.ok()) return info.status();
    out.pollux = *std::move(info);
  }
  return out;
}

}  // namespace pollux
