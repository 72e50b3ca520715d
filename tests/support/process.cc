#include "tests/support/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <utility>

namespace pollux::testing {
namespace {

int decode(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

}  // namespace

Child& Child::operator=(Child&& o) noexcept {
  if (this != &o) {
    release();
    pid = std::exchange(o.pid, -1);
    out_fd = std::exchange(o.out_fd, -1);
    output = std::move(o.output);
    eof_ = o.eof_;
    reaped_ = o.reaped_;
    killed_ = o.killed_;
    code_ = o.code_;
  }
  return *this;
}

Child::~Child() { release(); }

void Child::release() {
  kill_now();
  if (out_fd >= 0) ::close(out_fd);
  out_fd = -1;
  pid = -1;
}

bool Child::read_some(int timeout_ms) {
  if (out_fd < 0 || eof_) return false;
  pollfd p{out_fd, POLLIN, 0};
  if (::poll(&p, 1, timeout_ms) <= 0) return true;
  char buf[8192];
  const ssize_t n = ::read(out_fd, buf, sizeof buf);
  if (n > 0) {
    output.append(buf, static_cast<std::size_t>(n));
  } else if (n == 0 || errno != EINTR) {
    eof_ = true;
  }
  return !eof_;
}

bool Child::wait_for_output(const std::function<bool(const std::string&)>& done, int seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (!done(output)) {
    if (eof_ || out_fd < 0 || std::chrono::steady_clock::now() > deadline) return done(output);
    read_some(20);
  }
  return true;
}

bool Child::exited() {
  if (reaped_) return true;
  if (pid <= 0) return false;
  int status = 0;
  if (::waitpid(pid, &status, WNOHANG) != pid) return false;
  reaped_ = true;
  code_ = decode(status);
  return true;
}

int Child::wait(int seconds) {
  if (pid <= 0) return -1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (!exited()) {
    if (std::chrono::steady_clock::now() > deadline) {
      killed_ = true;
      kill_now();
      code_ = -1;
      break;
    }
    if (!read_some(50)) ::poll(nullptr, 0, 5);  // output closed: only the exit is left to see
  }
  // What is left in the pipe, without waiting for it to close: a process the child started
  // may still hold it open.
  for (pollfd p{out_fd, POLLIN, 0}; out_fd >= 0 && !eof_ && ::poll(&p, 1, 0) > 0;) read_some(0);
  return code_;
}

void Child::kill_now() {
  if (pid <= 0 || reaped_) return;
  ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  reaped_ = true;
  code_ = decode(status);
}

void Child::signal(int sig) const {
  if (pid > 0 && !reaped_) ::kill(pid, sig);
}

Child spawn(const std::vector<std::string>& argv, const SpawnOptions& o) {
  Child c;
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return c;
  int gate[2] = {-1, -1};
  if (o.before_exec && ::pipe2(gate, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    return c;
  }
  std::vector<char*> av;
  for (const std::string& s : argv) av.push_back(const_cast<char*>(s.c_str()));
  av.push_back(nullptr);
  c.pid = ::fork();
  if (c.pid == 0) {
    ::dup2(out[1], 1);
    if (o.merge_stderr) ::dup2(out[1], 2);
    for (int fd : o.keep_fds) ::fcntl(fd, F_SETFD, 0);
    if (gate[0] >= 0) {
      char ch;
      ::close(gate[1]);
      while (::read(gate[0], &ch, 1) < 0 && errno == EINTR) {
      }
    }
    ::execv(av[0], av.data());
    std::perror("execv");
    ::_exit(127);
  }
  ::close(out[1]);
  c.out_fd = out[0];
  if (gate[0] >= 0) {
    ::close(gate[0]);
    if (c.pid > 0) o.before_exec(c.pid);
    ::close(gate[1]);  // the child's read returns (0 bytes): it execs
  }
  if (c.pid < 0) {
    ::close(c.out_fd);
    c.out_fd = -1;
  }
  return c;
}

ForkResult run_forked(const std::function<std::string()>& body) {
  ForkResult r;
  int p[2];
  if (::pipe(p) != 0) return r;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(p[0]);
    const std::string out = body();
    (void)!::write(p[1], out.data(), out.size());
    ::_exit(0);
  }
  ::close(p[1]);
  char buf[4096];
  ssize_t n;
  while ((n = ::read(p[0], buf, sizeof buf)) > 0) r.out.append(buf, static_cast<std::size_t>(n));
  ::close(p[0]);
  ::waitpid(pid, &r.status, 0);
  return r;
}

long long field(const std::string& out, const std::string& key) {
  const auto p = out.find(key + "=");
  return p == std::string::npos ? -1 : std::atoll(out.c_str() + p + key.size() + 1);
}

std::string write_file(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  return path;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

CommandOutput RunCommand(const std::string& cmd, bool merge_stderr) {
  CommandOutput o;
  FILE* p = ::popen((cmd + (merge_stderr ? " 2>&1" : "")).c_str(), "r");
  if (p == nullptr) return o;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) o.text.append(buf, n);
  const int st = ::pclose(p);
  o.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return o;
}

}  // namespace pollux::testing
