// fork/exec helpers for the multi-process tests.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace pollux::testing {

struct Child {
  pid_t pid = -1;
  int out_fd = -1;  // child's stdout
  std::string output;
};

// Starts `argv` with stdout captured; fds in `keep` stay open in the child.
inline Child spawn(const std::vector<std::string>& argv, const std::vector<int>& keep = {}) {
  int out[2];
  if (pipe(out) != 0) return {};
  Child c;
  c.pid = fork();
  if (c.pid == 0) {
    dup2(out[1], 1);
    close(out[0]);
    close(out[1]);
    for (int fd : keep) fcntl(fd, F_SETFD, 0);
    std::vector<char*> av;
    for (const std::string& s : argv) av.push_back(const_cast<char*>(s.c_str()));
    av.push_back(nullptr);
    execv(av[0], av.data());
    std::perror("execv");
    _exit(127);
  }
  close(out[1]);
  c.out_fd = out[0];
  return c;
}

// Waits up to `seconds`, collecting stdout; kills the child on timeout. Returns the exit code
// (or 128 + signal, or -1 on timeout).
inline int wait_child(Child& c, int seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  char buf[4096];
  for (;;) {
    pollfd p{c.out_fd, POLLIN, 0};
    if (::poll(&p, 1, 50) > 0) {
      const ssize_t n = read(c.out_fd, buf, sizeof buf);
      if (n > 0) {
        c.output.append(buf, static_cast<std::size_t>(n));
        continue;
      }
    }
    int status;
    if (waitpid(c.pid, &status, WNOHANG) == c.pid) {
      ssize_t n;
      while ((n = read(c.out_fd, buf, sizeof buf)) > 0) c.output.append(buf, static_cast<std::size_t>(n));
      close(c.out_fd);
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    if (std::chrono::steady_clock::now() > deadline) {
      kill(c.pid, SIGKILL);
      waitpid(c.pid, nullptr, 0);
      close(c.out_fd);
      return -1;
    }
  }
}

inline std::string write_file(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  return path;
}

// The whole file ("" when it cannot be read).
inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Value of "key=123" in a summary line.
inline long long field(const std::string& out, const std::string& key) {
  const auto p = out.find(key + "=");
  return p == std::string::npos ? -1 : std::atoll(out.c_str() + p + key.size() + 1);
}

}  // namespace pollux::testing
