// build/bin/pollux-feed (or another program) as a child process of a test, run by
// testing::spawn (tests/support/process.h): its stdout and stderr (interleaved) are collected
// through a pipe, every wait is bounded (the process is killed when the bound passes, and the
// test then fails on killed_after_timeout()), and signals can be sent while it runs. Nothing
// here sleeps for a fixed time: waits poll the pipe until a condition holds.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "tests/support/process.h"

namespace pollux::feedtest {

class FeedProcess {
 public:
  // Runs `bin` (by default build/bin/pollux-feed) with `args`. `before_exec`, if given, runs in
  // this process with the child's pid while the child waits to exec: what it sets up (a socket
  // holding a port computed from the pid, say) is in place before the program starts.
  explicit FeedProcess(const std::vector<std::string>& args, const std::string& bin = POLLUX_FEED_BIN,
                       const std::function<void(pid_t)>& before_exec = {}) {
    std::vector<std::string> argv = {bin};
    argv.insert(argv.end(), args.begin(), args.end());
    testing::SpawnOptions o;
    o.merge_stderr = true;
    o.before_exec = before_exec;
    child_ = testing::spawn(argv, o);
  }
  FeedProcess(const FeedProcess&) = delete;
  FeedProcess& operator=(const FeedProcess&) = delete;

  // Reads output until `done(output())` holds (true), or the process closed its output or
  // `seconds` passed (false).
  bool WaitForOutput(const std::function<bool(const std::string&)>& done, int seconds) {
    return child_.wait_for_output(done, seconds);
  }

  void Signal(int sig) const { child_.signal(sig); }

  // Reads the rest of the output (until the process closes it) and reaps the process, killing
  // it after `seconds` (the output then ends with a line saying so). Returns the exit status,
  // or 128 + the signal that ended it (SIGKILL after a timeout).
  int Wait(int seconds) {
    child_.wait_for_output([](const std::string&) { return false; }, seconds);
    if (child_.read_some(0)) {  // the output is still open: the bound passed
      child_.kill_now();
      killed_ = true;
      child_.output += "\n[test: killed after timeout]\n";
      return child_.exit_code();
    }
    // Closed: the process is exiting (bounded all the same, should it linger).
    return child_.wait(seconds);
  }

  const std::string& output() const { return child_.output; }
  bool killed_after_timeout() const { return killed_ || child_.killed_after_timeout(); }
  pid_t pid() const { return child_.pid; }

 private:
  testing::Child child_;
  bool killed_ = false;
};

// pollux-feed replaying the capture `pcap` (feed.source = "pcap", one subscriber thread) with
// `sets` (--set values: the lines, the server, runtime.name...), writing `out`.books and
// `out`.json: its exit status, its output and those two files.
struct PcapReplay {
  int rc = -1;
  std::string out, json, books;
};
inline PcapReplay RunPcapReplay(const std::string& pcap, const std::string& out, const std::vector<std::string>& sets) {
  std::vector<std::string> args = {"--quiet",
                                   "--set",
                                   "feed.source=pcap",
                                   "--set",
                                   "feed.pcap=" + pcap,
                                   "--set",
                                   "feed.subscriber_mode=\"thread\"",
                                   "--book-out",
                                   out + ".books",
                                   "--summary-json",
                                   out + ".json"};
  for (const std::string& s : sets) {
    args.push_back("--set");
    args.push_back(s);
  }
  FeedProcess p(args);
  PcapReplay r;
  r.rc = p.Wait(300);
  r.out = p.output();
  r.json = testing::read_file(out + ".json");
  r.books = testing::read_file(out + ".books");
  return r;
}

}  // namespace pollux::feedtest
