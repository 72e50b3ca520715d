// pollux-test-mold-send: sends single MoldUDP64 datagrams, the way someone else on the segment
// could: a heartbeat or an end of session with any sequence, any session's name, or data taken
// from an ITCH file (its bytes altered on request) at any sequence. The live tests forge a
// line's traffic with it while the exchange pauses.
//
//   pollux-test-mold-send --to 239.255.78.1:27700 --interface eth0 --session POLLUX0001 --end 1
//   pollux-test-mold-send --to ... --session POLLUX0001 --data 15001 --itch FILE --from 15001 --alter
#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/numbers.h"
#include "itch/moldudp64.h"
#include "itch/reader.h"

namespace {

namespace mold = pollux::itch::mold;

constexpr const char* kUsage =
    "usage: pollux-test-mold-send --to ADDR:PORT [--interface IF] --session NAME\n"
    "         (--heartbeat SEQ | --end SEQ | --data SEQ --itch FILE --from K [--count C] [--alter])\n"
    "         [--repeat N]\n\n"
    "Sends one MoldUDP64 downstream datagram (N with --repeat) to a group or host, as anyone on\n"
    "the segment could (tests forge a line's traffic with it).\n\n"
    "  --to ADDR:PORT     destination (a multicast group: TTL 1, sent by --interface)\n"
    "  --interface IF     interface multicast leaves by (default: the route's)\n"
    "  --session NAME     session name written in the header (1..10 characters)\n"
    "  --heartbeat SEQ    a heartbeat announcing SEQ as the next sequence\n"
    "  --end SEQ          an end of session at SEQ\n"
    "  --data SEQ         a data packet whose first message is numbered SEQ, holding ...\n"
    "  --itch FILE        ... messages of this BinaryFILE,\n"
    "  --from K           ... from its K-th message (1-based),\n"
    "  --count C          ... C of them (default 1)\n"
    "  --alter            flip the last byte of each message (still valid ITCH, another value)\n"
    "  --repeat N         send it N times (default 1)\n"
    "  -h, --help         this text\n";

[[noreturn]] void Usage(const std::string& msg) {
  std::fprintf(stderr, "pollux-test-mold-send: %s (see --help)\n", msg.c_str());
  std::exit(64);
}

std::uint64_t Number(const std::string& flag, const std::string& v) {
  std::uint64_t n = 0;
  if (!absl::SimpleAtoi(v, &n)) Usage(flag + ": expected a number, got \"" + v + "\"");
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  std::string to, iface, session, itch;
  std::uint64_t seq = 0, from = 0, count = 1, repeat = 1;
  enum { kNone, kHeartbeat, kEnd, kData } kind = kNone;
  bool alter = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (a == "--alter") {
      alter = true;
      continue;
    }
    if (i + 1 >= argc) Usage("unknown flag or missing value: " + a);
    const std::string v = argv[++i];
    if (a == "--to")
      to = v;
    else if (a == "--interface")
      iface = v;
    else if (a == "--session")
      session = v;
    else if (a == "--itch")
      itch = v;
    else if (a == "--from")
      from = Number(a, v);
    else if (a == "--count")
      count = Number(a, v);
    else if (a == "--repeat")
      repeat = Number(a, v);
    else if (a == "--heartbeat")
      kind = kHeartbeat, seq = Number(a, v);
    else if (a == "--end")
      kind = kEnd, seq = Number(a, v);
    else if (a == "--data")
      kind = kData, seq = Number(a, v);
    else
      Usage("unknown flag " + a);
  }
  if (kind == kNone) Usage("one of --heartbeat, --end or --data is required");
  if (session.empty() || session.size() > mold::kSessionSize) Usage("--session NAME (1..10 characters) is required");
  const std::size_t colon = to.rfind(':');
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  std::uint64_t port = 0;
  if (colon == std::string::npos || inet_pton(AF_INET, to.substr(0, colon).c_str(), &dst.sin_addr) != 1 ||
      !absl::SimpleAtoi(to.substr(colon + 1), &port) || port == 0 || port > 65535) {
    Usage("--to ADDR:PORT is required (IPv4)");
  }
  dst.sin_port = htons(static_cast<std::uint16_t>(port));
  const mold::Session s = mold::Session::from(session);

  std::vector<std::uint8_t> buf(65536);
  std::span<const std::uint8_t> packet;
  if (kind == kHeartbeat) packet = mold::encode_heartbeat(buf, s, seq);
  if (kind == kEnd) packet = mold::encode_end_of_session(buf, s, seq);
  if (kind == kData) {
    if (itch.empty() || from == 0 || count == 0) Usage("--data needs --itch FILE and --from K (>= 1)");
    std::ifstream in(itch, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "pollux-test-mold-send: cannot open %s\n", itch.c_str());
      return 66;
    }
    const std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<std::vector<std::uint8_t>> msgs;
    std::uint64_t k = 0;
    (void)pollux::itch::for_each_message(bytes, [&](pollux::itch::MessageView m) {
      ++k;
      if (k >= from && k < from + count) msgs.emplace_back(m.bytes().begin(), m.bytes().end());
    });
    if (msgs.size() != count)
      Usage("--itch FILE has no messages " + std::to_string(from) + ".." + std::to_string(from + count - 1));
    mold::PacketBuilder b(buf);
    if (!b.begin(s, seq)) Usage("--data: bad sequence");
    for (std::vector<std::uint8_t>& m : msgs) {
      if (alter) m.back() ^= 0x01;
      if (!b.add(m)) Usage("--count: the messages do not fit one datagram");
    }
    packet = b.finish();
  }
  if (packet.empty()) Usage("the packet could not be encoded (sequence 0?)");

  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    std::perror("pollux-test-mold-send: socket");
    return 71;
  }
  const int ttl = 1, loop = 1;
  ::setsockopt(fd, IPPROTO_IP, IP_MULTICAST_TTL, &ttl, sizeof ttl);
  ::setsockopt(fd, IPPROTO_IP, IP_MULTICAST_LOOP, &loop, sizeof loop);
  if (!iface.empty()) {
    ip_mreqn m{};
    m.imr_ifindex = static_cast<int>(if_nametoindex(iface.c_str()));
    if (m.imr_ifindex == 0) Usage("--interface " + iface + ": no such interface");
    if (::setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &m, sizeof m) != 0) {
      std::perror("pollux-test-mold-send: IP_MULTICAST_IF");
      return 71;
    }
  }
  for (std::uint64_t i = 0; i < repeat; ++i) {
    if (::sendto(fd, packet.data(), packet.size(), 0, reinterpret_cast<const sockaddr*>(&dst), sizeof dst) < 0) {
      std::fprintf(stderr, "pollux-test-mold-send: sendto %s: %s\n", to.c_str(), std::strerror(errno));
      return 71;
    }
  }
  ::close(fd);
  return 0;
}
