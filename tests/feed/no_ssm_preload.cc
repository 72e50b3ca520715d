// LD_PRELOAD'ed into pollux-feed by feed_live_test: the process then sees a kernel without
// source-specific multicast - a source-specific join (MCAST_JOIN_SOURCE_GROUP or
// IP_ADD_SOURCE_MEMBERSHIP) fails with ENOPROTOOPT, as where the kernel lacks it - so the test
// can check the handler's fallback: an any-source join, and every datagram's sender checked
// by the handler itself. Every other setsockopt() is libc's.
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>

extern "C" int setsockopt(int fd, int level, int name, const void* value, socklen_t len) {
  if (level == IPPROTO_IP && (name == MCAST_JOIN_SOURCE_GROUP || name == IP_ADD_SOURCE_MEMBERSHIP)) {
    errno = ENOPROTOOPT;
    return -1;
  }
  using Fn = int (*)(int, int, int, const void*, socklen_t);
  static const Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "setsockopt"));
  if (real == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  return real(fd, level, name, value, len);
}
