#include "tools/doctor/report.h"

#include <algorithm>

#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/common/output.h"

namespace pollux::doctor {

std::string_view verdict_name(Verdict v) {
  // Indexed by Verdict, in its order.
  static constexpr std::string_view kNames[] = {"ok", "info", "warn", "fail"};
  static_assert(std::size(kNames) == static_cast<std::size_t>(Verdict::kFail) + 1);
  const auto i = static_cast<std::size_t>(v);
  return i < std::size(kNames) ? kNames[i] : "?";
}

void Report::add(std::string area, std::string name, Verdict v, std::string value, std::string hint) {
  checks_.push_back({std::move(area), std::move(name), v, std::move(value), std::move(hint)});
}

int Report::count(Verdict v) const {
  return static_cast<int>(
      std::count_if(checks_.begin(), checks_.end(), [v](const Check& c) { return c.verdict == v; }));
}

std::string Report::text() const {
  std::size_t width = 0;
  for (const Check& c : checks_) width = std::max(width, c.area.size() + 1 + c.name.size());
  std::string out;
  for (const Check& c : checks_) {
    absl::StrAppendFormat(&out, "[%-4s] %-*s  %s\n", verdict_name(c.verdict), static_cast<int>(width),
                          absl::StrCat(c.area, " ", c.name), c.value);
    if (!c.hint.empty()) absl::StrAppendFormat(&out, "       %*s  -> %s\n", static_cast<int>(width), "", c.hint);
  }
  absl::StrAppendFormat(&out, "%d ok, %d info, %d warn, %d fail\n", count(Verdict::kOk), count(Verdict::kInfo),
                        count(Verdict::kWarn), count(Verdict::kFail));
  return out;
}

std::string Report::json(std::string_view config_source, std::string_view version) const {
  using tools::json_string;
  std::string out = "{\"checks\":[";
  for (std::size_t i = 0; i < checks_.size(); ++i) {
    const Check& c = checks_[i];
    absl::StrAppend(&out, i ? "," : "", "{\"area\":", json_string(c.area), ",\"name\":", json_string(c.name),
                    ",\"verdict\":", json_string(verdict_name(c.verdict)), ",\"value\":", json_string(c.value),
                    ",\"hint\":", json_string(c.hint), "}");
  }
  absl::StrAppendFormat(&out,
                        "],\"summary\":{\"ok\":%d,\"info\":%d,\"warn\":%d,\"fail\":%d,\"exit_status\":%d,"
                        "\"config\":%s,\"version\":%s}}\n",
                        count(Verdict::kOk), count(Verdict::kInfo), count(Verdict::kWarn), count(Verdict::kFail),
                        exit_status(), json_string(config_source), json_string(version));
  return out;
}

}  // namespace pollux::doctor
