// What a test can see of another thread of its own process.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace pollux::testing {

// True while thread `tid` of this process sleeps in the kernel (state S: an interruptible
// wait, such as a futex or epoll wait): how a test knows a waiter is really waiting.
inline bool thread_sleeping(pid_t tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/stat");
  const std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::size_t name_end = stat.rfind(')');  // the state follows the (name)
  return name_end != std::string::npos && name_end + 2 < stat.size() && stat[name_end + 2] == 'S';
}

// The /proc/self/task/<tid> directories of this process's threads named `comm` (what
// pthread_setname_np gave them: "pollux-record", a poller's name, ...).
inline std::vector<std::filesystem::path> threads_named(const std::string& comm) {
  std::vector<std::filesystem::path> out;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream c(task.path() / "comm");
    std::string name;
    std::getline(c, name);
    if (name == comm) out.push_back(task.path());
  }
  return out;
}

}  // namespace pollux::testing
