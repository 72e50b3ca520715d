// Programs run by a test: a child process whose output is collected through a pipe (Child,
// spawn, wait_child), and a shell command run to completion (RunCommand). Every wait is
// bounded, and the bound only fails a test whose process never gets there: waits poll the
// pipe until a condition holds, never sleep for a fixed time.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace pollux::testing {

// A running program. Its stdout (and with SpawnOptions::merge_stderr its stderr) accumulates
// in `output` as the waits below read the pipe. Move-only: the destructor kills (SIGKILL) and
// reaps a child still running, so a failed assertion never leaves a process behind.
class Child {
 public:
  Child() = default;
  Child(Child&& o) noexcept { *this = std::move(o); }
  Child& operator=(Child&& o) noexcept;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child();

  pid_t pid = -1;      // -1 when it could not be started
  int out_fd = -1;     // our end of its output pipe (a test may poll it itself)
  std::string output;  // what it printed so far

  // Appends what arrives within `timeout_ms` (0: what is there now). False once the child
  // closed its output.
  bool read_some(int timeout_ms);
  // Reads until `done(output)` holds (true), or the child closed its output or `seconds`
  // passed (then whatever `done` says).
  bool wait_for_output(const std::function<bool(const std::string&)>& done, int seconds);
  // Reaps the child if it has exited (never blocks); true once it has.
  bool exited();
  // Reads the rest of the output and reaps the child, killing it after `seconds`. Returns the
  // exit status, 128 + the signal that ended it, or -1 when it had to be killed.
  int wait(int seconds);
  // SIGKILL and reap at once (a process that dies without closing anything).
  void kill_now();
  void signal(int sig) const;
  // The exit status wait() or exited() found (-1 before, or after a kill on timeout).
  int exit_code() const { return code_; }
  bool killed_after_timeout() const { return killed_; }

 private:
  void release();

  bool eof_ = false, reaped_ = false, killed_ = false;
  int code_ = -1;
};

struct SpawnOptions {
  std::vector<int> keep_fds;  // stay open in the child (their close-on-exec flag is cleared)
  bool merge_stderr = false;  // the child's stderr goes to the same pipe as its stdout
  // Runs here with the child's pid while the child waits to exec: what it sets up (a socket
  // holding a port derived from the pid, say) is in place before the program starts.
  std::function<void(pid_t)> before_exec;
};

// Starts argv[0] (a path) with `argv`.
Child spawn(const std::vector<std::string>& argv, const SpawnOptions& o);
inline Child spawn(const std::vector<std::string>& argv, const std::vector<int>& keep_fds = {}) {
  SpawnOptions o;
  o.keep_fds = keep_fds;
  return spawn(argv, o);
}
inline int wait_child(Child& c, int seconds) { return c.wait(seconds); }

// Runs `body` in a forked child (no exec): what it returned, and how the child ended (a
// waitpid status: a child killed by a signal shows as such).
struct ForkResult {
  int status = 0;
  std::string out;
};
ForkResult run_forked(const std::function<std::string()>& body);

// Value of the first "key=123" in a program's output (-1: none).
long long field(const std::string& out, const std::string& key);

std::string write_file(const std::string& path, const std::string& text);
// The whole file ("" when it cannot be read).
std::string read_file(const std::string& path);

// A shell command run to completion (for the tests of a binary's command line, text and JSON).
struct CommandOutput {
  int status = -1;   // exit status, -1 when it did not exit normally
  std::string text;  // stdout (and stderr with merge_stderr)
};
CommandOutput RunCommand(const std::string& cmd, bool merge_stderr = false);

}  // namespace pollux::testing
