// pollux-doctor's findings: one Check per line of the report, each with a verdict and, when
// there is something to do, a hint that says what. Printed as text or as one JSON object:
//   {"checks":[{"area","name","verdict","value","hint"}...],
//    "summary":{"ok","info","warn","fail","exit_status","config","version"}}
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pollux::doctor {

// ok: as Pollux wants it. info: a fact, nothing to change. warn: Pollux works, latency or
// jitter suffers; the hint says how to fix it. fail: Pollux will not start (or not work) as
// configured here. Any fail makes the exit status 1.
enum class Verdict { kOk, kInfo, kWarn, kFail };
std::string_view verdict_name(Verdict v);

struct Check {
  std::string area;  // cpu, memory, net, rdma, process
  std::string name;  // e.g. "isolcpus", "eth0 irqs", "rxe0 port 1"
  Verdict verdict = Verdict::kInfo;
  std::string value;  // what was found
  std::string hint;   // what to do ("" when nothing)
};

class Report {
 public:
  void add(std::string area, std::string name, Verdict v, std::string value, std::string hint = "");
  const std::vector<Check>& checks() const noexcept { return checks_; }
  int count(Verdict v) const;
  int exit_status() const { return count(Verdict::kFail) > 0 ? 1 : 0; }

  // Human-readable: one line per check ("[warn] cpu isolcpus  value"), the hint indented
  // under it, then the counts.
  std::string text() const;
  // The JSON object of the header comment (one line, then a newline).
  std::string json(std::string_view config_source, std::string_view version) const;

 private:
  std::vector<Check> checks_;
};

}  // namespace pollux::doctor
