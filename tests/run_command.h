// Running a command of ours from a test (through the shell) and collecting what it printed:
// for the tests that check a binary's command line, text and JSON output.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace pollux::testing {

struct CommandOutput {
  int status = -1;   // exit status, -1 when it did not exit normally
  std::string text;  // stdout (and stderr with merge_stderr)
};

inline CommandOutput RunCommand(const std::string& cmd, bool merge_stderr = false) {
  CommandOutput o;
  FILE* p = popen((cmd + (merge_stderr ? " 2>&1" : "")).c_str(), "r");
  if (p == nullptr) return o;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) o.text.append(buf, n);
  const int st = pclose(p);
  o.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return o;
}

}  // namespace pollux::testing
