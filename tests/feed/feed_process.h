// build/bin/pollux-feed (or another program) as a child process of a test: its stdout and stderr (interleaved) are
// collected through a pipe, every wait is bounded (the process is killed when the bound
// passes, and the test then fails on killed_after_timeout()), and signals can be sent while
// it runs. Nothing here sleeps for a fixed time: waits poll the pipe until a condition holds.
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace pollux::feedtest {

class FeedProcess {
 public:
  // Runs `bin` (by default build/bin/pollux-feed) with `args`. `before_exec`, if given, runs in
  // this process with the child's pid while the child waits to exec: what it sets up (a socket
  // holding a port computed from the pid, say) is in place before the program starts.
  explicit FeedProcess(const std::vector<std::string>& args, const std::string& bin = POLLUX_FEED_BIN,
                       const std::function<void(pid_t)>& before_exec = {}) {
    int fds[2];
    if (pipe(fds) != 0) return;
    int gate[2] = {-1, -1};
    if (before_exec && pipe(gate) != 0) return;
    std::vector<std::string> argv = {bin};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> av;
    for (std::string& s : argv) av.push_back(s.data());
    av.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], 1);
      dup2(fds[1], 2);
      close(fds[0]);
      close(fds[1]);
      if (gate[0] >= 0) {
        close(gate[1]);
        char c;
        while (read(gate[0], &c, 1) < 0 && errno == EINTR) {
        }
        close(gate[0]);
      }
      execv(av[0], av.data());
      _exit(127);
    }
    close(fds[1]);
    fd_ = fds[0];
    if (gate[0] >= 0) {
      close(gate[0]);
      if (pid_ > 0) before_exec(pid_);
      close(gate[1]);  // the child's read returns (0 bytes): it execs
    }
  }
  FeedProcess(const FeedProcess&) = delete;
  FeedProcess& operator=(const FeedProcess&) = delete;
  ~FeedProcess() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      Reap();
    }
    if (fd_ >= 0) close(fd_);
  }

  // Reads output until `done(output())` holds (true), or the process closed its output or
  // `seconds` passed (false).
  bool WaitForOutput(const std::function<bool(const std::string&)>& done, int seconds) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (!done(out_)) {
      if (eof_ || std::chrono::steady_clock::now() > deadline) return done(out_);
      ReadSome(100);
    }
    return true;
  }

  void Signal(int sig) const {
    if (pid_ > 0 && !reaped_) kill(pid_, sig);
  }

  // Reads the rest of the output and reaps the process, killing it after `seconds`.
  // Returns the exit status, or 128 + the signal that ended it.
  int Wait(int seconds) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (!eof_) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid_, SIGKILL);
        killed_ = true;
        out_ += "\n[test: killed after timeout]\n";
        break;
      }
      ReadSome(100);
    }
    Reap();
    return WIFEXITED(status_) ? WEXITSTATUS(status_) : 128 + WTERMSIG(status_);
  }

  const std::string& output() const { return out_; }
  bool killed_after_timeout() const { return killed_; }
  pid_t pid() const { return pid_; }

 private:
  void ReadSome(int timeout_ms) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) return;
    char buf[4096];
    const ssize_t n = read(fd_, buf, sizeof buf);
    if (n > 0) {
      out_.append(buf, static_cast<std::size_t>(n));
    } else if (n == 0) {
      eof_ = true;
    }
  }
  void Reap() {
    if (reaped_ || pid_ <= 0) return;
    waitpid(pid_, &status_, 0);
    reaped_ = true;
  }

  pid_t pid_ = -1;
  int fd_ = -1;
  std::string out_;
  bool eof_ = false;
  bool killed_ = false;
  bool reaped_ = false;
  int status_ = 0;
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
  auto slurp = [](const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  r.json = slurp(out + ".json");
  r.books = slurp(out + ".books");
  return r;
}

}  // namespace pollux::feedtest
