// The workload bench/callgrind/udp-inline.sh runs under callgrind and strace: one publisher and
// one subscriber of one stream in this process and thread, inline threading, UDP unicast on
// 127.0.0.1; each iteration offers one message and polls until it is delivered. On loopback the
// datagram is in the subscriber socket's queue when sendto() returns (the kernel delivers it in
// the sender's system call), so one poll() normally delivers it; the script checks that no
// iteration needed a second offer() or poll() call ("retries 0"; a kernel that defers the
// loopback delivery to ksoftirqd on a loaded machine makes a few). Before the offer, each
// iteration makes --empty-polls polls that find nothing (default 1): what a busy-polling side
// of a ping-pong does at least once while its peer turns the message around (bench/udp
// api-busy; its bare-busy floor likewise makes at least one empty recv per round trip). Not a timing benchmark: it
// prints the sum of the delivered payload sizes, which the script checks. Per-iteration instruction and system-call
// counts come from two runs of different --count (set-up and tear-down cancel).
// --bare true runs the floor instead: the same iteration over two connected non-blocking UDP
// sockets (recv(MSG_DONTWAIT) that finds nothing, send(), recv() of the datagram), what
// bench/udp's bare-busy case does per round trip and side.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/callgrind/cg_workload.h"
#include "pollux/pollux.h"

namespace {

int connected_socket(int port, int peer_port) {
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return -1;
  a.sin_port = htons(static_cast<std::uint16_t>(peer_port));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return -1;
  return fd;
}

int run_bare(std::uint64_t count, std::uint64_t size, std::uint64_t empty_polls, int port) {
  const int tx = connected_socket(port, port + 1), rx = connected_socket(port + 1, port);
  if (tx < 0 || rx < 0) {
    std::perror("bare sockets on 127.0.0.1");
    return 1;
  }
  std::vector<char> payload(size), buf(2048);
  std::uint64_t sum = 0, retries = 0;
  for (std::uint64_t i = 0; i < count; ++i) {
    for (std::uint64_t e = 0; e < empty_polls; ++e) {
      if (::recv(rx, buf.data(), buf.size(), MSG_DONTWAIT) > 0) ++retries;  // must find nothing
    }
    payload[0] = static_cast<char>(i);
    while (::send(tx, payload.data(), payload.size(), 0) < 0) ++retries;
    ssize_t n;
    while ((n = ::recv(rx, buf.data(), buf.size(), MSG_DONTWAIT)) <= 0) ++retries;
    sum += static_cast<std::uint64_t>(n);
  }
  std::printf("delivered_bytes %llu retries %llu\n", static_cast<unsigned long long>(sum),
              static_cast<unsigned long long>(retries));
  ::close(tx);
  ::close(rx);
  return sum == count * size ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t count = 100000, size = 32, port = 0, empty_polls = 1;
  std::string counters = "true", bare = "false";
  pollux::bench::Cli cli("pollux-callgrind-udp-inline",
                         "One offer() + poll() until delivered per iteration on inline UDP over 127.0.0.1, in one "
                         "process and thread (the workload of bench/callgrind/udp-inline.sh; run it under valgrind "
                         "--tool=callgrind or strace -c).");
  cli.count("--count", &count, "iterations (one message each)")
      .count("--size", &size, "payload bytes per message", 1, 1024)
      .count("--empty-polls", &empty_polls, "polls that find nothing before each offer (a ping-pong side's spin)", 0,
             16)
      .count("--port", &port, "UDP port of the stream (0: 20000 + pid % 20000)", 0, 65535)
      .choice("--counters", &counters, {"true", "false"}, "runtime.counters (a counters file, or none)")
      .choice("--bare", &bare, {"true", "false"}, "the floor: bare UDP sockets, no Pollux (same iteration)");
  cli.parse(argc, argv);
  if (port == 0) port = 20000 + static_cast<std::uint64_t>(getpid()) % 20000;
  if (bare == "true") return run_bare(count, size, empty_polls, static_cast<int>(port));

  const std::string name = "cg-udp-" + std::to_string(getpid());
  pollux::bench::CgPair cg;
  if (!cg.open("[runtime]\nname = \"" + name +
                   "\"\nthreading = \"inline\"\nidle = \"busy-spin\"\ncounters = " + counters +
                   "\n[pool]\nslots = 1024\nhugepages = \"off\"\n[transport]\nkind = "
                   "\"udp\"\n[udp]\naddress = \"127.0.0.1\"\ninterface = \"lo\"\nport = " +
                   std::to_string(port) + "\nretransmit_buffer = \"1MiB\"\nrx_buffers = 256\n",
               "pollux-callgrind-udp-inline", true)) {
    return 1;
  }
  pollux::Publisher& pub = *cg.pub;
  pollux::Subscriber& sub = *cg.sub;
  // Join handshake: the publisher's heartbeat makes the subscriber send a status message back.
  for (int i = 0; !pub.is_connected() || !sub.is_connected(); ++i) {
    if (i > 100000) {
      std::fprintf(stderr, "publisher and subscriber never connected\n");
      return 1;
    }
    (void)sub.poll([](const pollux::Message&) {}, 16);
    (void)pub.service();
    usleep(100);
  }
  return pollux::bench::measure(pub, sub, count, size, empty_polls);
}
