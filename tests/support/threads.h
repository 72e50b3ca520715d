// What a test can see of another thread of its own process.
#pragma once

#include <sys/types.h>

#include <fstream>
#include <iterator>
#include <string>

namespace pollux::testing {

// True while thread `tid` of this process sleeps in the kernel (state S: an interruptible
// wait, such as a futex or epoll wait): how a test knows a waiter is really waiting.
inline bool thread_sleeping(pid_t tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/stat");
  const std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::size_t name_end = stat.rfind(')');  // the state follows the (name)
  return name_end != std::string::npos && name_end + 2 < stat.size() && stat[name_end + 2] == 'S';
}

}  // namespace pollux::testing
