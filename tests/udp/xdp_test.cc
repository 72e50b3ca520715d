// AF_XDP pieces of the UDP transport (transport/udp/xdp): the XDP program, the socket wrapper and
// the frame builder, over a veth pair between two network namespaces the test creates (A and B,
// named after the test process, deleted at the end). A normal UDP socket in A sends to B, where
// the XSK must receive exactly the datagrams to its destination while others still reach B's
// stack; the XSK sends frames a normal socket in A must receive byte-exact. Needs root and
// `ip netns`; skipped with the reason otherwise. Every wait is bounded and no verdict is a time.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pollux/context.h"
#include "pollux/datagram.h"
#include "pollux/publisher.h"
#include "pollux/subscriber.h"
#include "tests/support/netns.h"
#include "transport/udp/xdp/frame.h"
#include "transport/udp/xdp/neighbour.h"
#include "transport/udp/xdp/preflight.h"
#include "transport/udp/xdp/xsk.h"

namespace {

namespace xdp = pollux::transport::udp::xdp;
using pollux::testing::shell_status;

constexpr const char* kAddrA = "10.231.0.1";
constexpr const char* kAddrB = "10.231.0.2";
constexpr const char* kIfA = "xa0";
constexpr const char* kIfB = "xb0";
// A second pair with four queues each way (veth spreads a sender's flows over its TX queues, and
// each TX queue feeds the peer's RX queue of the same number).
constexpr const char* kAddrA4 = "10.231.4.1";
constexpr const char* kAddrB4 = "10.231.4.2";
constexpr const char* kIfA4 = "xa4";
constexpr const char* kIfB4 = "xb4";
constexpr int kQueues4 = 4;
constexpr std::uint16_t kXskPort = 42001;              // B: redirected to the XSK
constexpr std::uint16_t kStackPort = 42002;            // B: not in the filter, a normal socket
constexpr std::uint16_t kPeerPort = 42003;             // A: receives the XSK's transmissions
constexpr auto kWaitLimit = std::chrono::seconds(10);  // bound of every wait (never a verdict)

std::string g_ns_a;
std::string g_ns_b;
std::string g_skip;
int g_fd_a = -1;
int g_fd_b = -1;
int g_fd_home = -1;
std::uint8_t g_mac_a[6];

std::uint32_t ip4(const char* text) {
  in_addr a{};
  inet_pton(AF_INET, text, &a);
  return a.s_addr;
}

// Runs `fn` with the calling thread in the network namespace `fd`, then comes back to B (where
// the tests live: the XSK, its interface and libxdp's netlink calls belong there).
template <typename Fn>
auto in_netns(int fd, Fn fn) {
  setns(fd, CLONE_NEWNET);
  struct Back {
    ~Back() { setns(g_fd_b, CLONE_NEWNET); }
  } back;
  return fn();
}

bool read_mac(const char* ifname, std::uint8_t mac[6]) {
  ifreq ifr{};
  std::snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname);
  const int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  const bool ok = s >= 0 && ioctl(s, SIOCGIFHWADDR, &ifr) == 0;
  if (s >= 0) close(s);
  if (ok) std::memcpy(mac, ifr.ifr_hwaddr.sa_data, 6);
  return ok;
}

std::string mac_text(const std::uint8_t m[6]) {
  char buf[18];
  std::snprintf(buf, sizeof(buf), "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
  return buf;
}

// A file descriptor closed at the end of its scope (a failed assertion leaves no bound port).
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  Fd(Fd&& o) noexcept : fd(o.fd) { o.fd = -1; }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
  operator int() const { return fd; }
};

// A UDP socket bound to addr:port, with a receive timeout (the bound of a blocking receive).
int udp_socket(const char* addr, std::uint16_t port) {
  const int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = ip4(addr);
  timeval tv{};
  tv.tv_sec = std::chrono::duration_cast<std::chrono::seconds>(kWaitLimit).count();
  setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (bind(s, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    close(s);
    return -1;
  }
  return s;
}

bool send_to(int s, const char* addr, std::uint16_t port, const std::string& payload) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = ip4(addr);
  return sendto(s, payload.data(), payload.size(), 0, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) ==
         static_cast<ssize_t>(payload.size());
}

std::string payload(const char* what, int i) {
  // Lengths vary (1..~300 bytes) so that a length error shows.
  return absl::StrCat(what, "-", i, "-", std::string(static_cast<std::size_t>(i * 37 % 300), 'a' + i % 26));
}

std::string setup_namespaces() {
  if (geteuid() != 0) return "needs root (network namespaces, XDP programs, AF_XDP sockets)";
  if (shell_status("ip netns list") != 0) return "`ip netns` is unavailable (install iproute2)";
  const int probe = socket(AF_XDP, SOCK_RAW | SOCK_CLOEXEC, 0);
  if (probe < 0) return absl::StrCat("AF_XDP sockets are unavailable: ", std::strerror(errno));
  close(probe);
  g_ns_a = absl::StrCat("pxdpa", getpid());
  g_ns_b = absl::StrCat("pxdpb", getpid());
  const std::vector<std::string> cmds = {
      "ip netns add " + g_ns_a,
      "ip netns add " + g_ns_b,
      // Both ends are created inside the namespaces: nothing appears in the host's.
      absl::StrCat("ip -n ", g_ns_a, " link add ", kIfA, " type veth peer name ", kIfB, " netns ", g_ns_b),
      absl::StrCat("ip -n ", g_ns_a, " addr add ", kAddrA, "/24 dev ", kIfA),
      absl::StrCat("ip -n ", g_ns_b, " addr add ", kAddrB, "/24 dev ", kIfB),
      absl::StrCat("ip -n ", g_ns_a, " link set ", kIfA, " up"),
      absl::StrCat("ip -n ", g_ns_b, " link set ", kIfB, " up"),
      absl::StrCat("ip -n ", g_ns_a, " link add ", kIfA4, " numtxqueues ", kQueues4, " numrxqueues ", kQueues4,
                   " type veth peer name ", kIfB4, " numtxqueues ", kQueues4, " numrxqueues ", kQueues4, " netns ",
                   g_ns_b),
      absl::StrCat("ip -n ", g_ns_a, " addr add ", kAddrA4, "/24 dev ", kIfA4),
      absl::StrCat("ip -n ", g_ns_b, " addr add ", kAddrB4, "/24 dev ", kIfB4),
      absl::StrCat("ip -n ", g_ns_a, " link set ", kIfA4, " up"),
      absl::StrCat("ip -n ", g_ns_b, " link set ", kIfB4, " up"),
  };
  for (const std::string& cmd : cmds) {
    if (shell_status(cmd) != 0) return "could not create the namespaces and veth pair: `" + cmd + "` failed";
  }
  g_fd_home = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  g_fd_a = open(("/run/netns/" + g_ns_a).c_str(), O_RDONLY | O_CLOEXEC);
  g_fd_b = open(("/run/netns/" + g_ns_b).c_str(), O_RDONLY | O_CLOEXEC);
  if (g_fd_home < 0 || g_fd_a < 0 || g_fd_b < 0) return "could not open the namespaces' files";
  // Permanent neighbour entries both ways: no ARP round trip in front of the first datagrams.
  std::uint8_t mac_b[6];
  if (setns(g_fd_a, CLONE_NEWNET) != 0 || !read_mac(kIfA, g_mac_a) || setns(g_fd_b, CLONE_NEWNET) != 0 ||
      !read_mac(kIfB, mac_b)) {
    return "could not enter the namespaces or read the veth MAC addresses";
  }
  std::uint8_t mac_a4[6], mac_b4[6];
  if (!read_mac(kIfB4, mac_b4) || setns(g_fd_a, CLONE_NEWNET) != 0 || !read_mac(kIfA4, mac_a4) ||
      setns(g_fd_b, CLONE_NEWNET) != 0) {
    return "could not read the four-queue veth MAC addresses";
  }
  if (shell_status(absl::StrCat("ip -n ", g_ns_a, " neigh replace ", kAddrB4, " lladdr ", mac_text(mac_b4), " dev ",
                                kIfA4, " nud permanent")) != 0 ||
      shell_status(absl::StrCat("ip -n ", g_ns_b, " neigh replace ", kAddrA4, " lladdr ", mac_text(mac_a4), " dev ",
                                kIfB4, " nud permanent")) != 0) {
    return "could not add the four-queue pair's neighbour entries";
  }
  if (shell_status(absl::StrCat("ip -n ", g_ns_a, " neigh replace ", kAddrB, " lladdr ", mac_text(mac_b), " dev ", kIfA,
                                " nud permanent")) != 0 ||
      shell_status(absl::StrCat("ip -n ", g_ns_b, " neigh replace ", kAddrA, " lladdr ", mac_text(g_mac_a), " dev ",
                                kIfB, " nud permanent")) != 0) {
    return "could not add the neighbour entries";
  }
  return "";
}

class XdpEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { g_skip = setup_namespaces(); }
  void TearDown() override {
    if (g_fd_home >= 0) setns(g_fd_home, CLONE_NEWNET);
    for (int* fd : {&g_fd_a, &g_fd_b, &g_fd_home}) {
      if (*fd >= 0) close(*fd);
      *fd = -1;
    }
    if (!g_ns_a.empty()) shell_status("ip netns del " + g_ns_a);
    if (!g_ns_b.empty()) shell_status("ip netns del " + g_ns_b);
  }
};

const ::testing::Environment* const g_env = ::testing::AddGlobalTestEnvironment(new XdpEnvironment);

#define SKIP_UNLESS_READY()                      \
  do {                                           \
    if (!g_skip.empty()) GTEST_SKIP() << g_skip; \
  } while (0)

absl::StatusOr<std::unique_ptr<xdp::Xsk>> open_b(xdp::XskMode mode) {
  xdp::XskOptions options;
  options.ifname = kIfB;
  options.queues = {0};
  options.mode = mode;
  options.frame_count = 256;
  options.frame_size = 2048;
  return xdp::Xsk::open(options);
}

// Receives frames on `xsk` until `want` arrived or the wait limit passed; their UDP views (the
// payload copied).
struct Received {
  xdp::Udp4View view;
  std::string payload;
};
std::vector<Received> receive(xdp::Xsk& xsk, std::size_t want) {
  std::vector<Received> got;
  const auto end = std::chrono::steady_clock::now() + kWaitLimit;
  xdp::RxFrame frames[32];
  while (got.size() < want && std::chrono::steady_clock::now() < end) {
    xsk.rx_wait(100);
    const std::uint32_t n = xsk.rx_peek(frames, 32);
    for (std::uint32_t i = 0; i < n; ++i) {
      Received r{};
      if (xdp::parse_udp4_frame(frames[i].data, frames[i].len, &r.view)) {
        r.payload.assign(reinterpret_cast<const char*>(r.view.payload), r.view.len);
      }
      got.push_back(r);
    }
    xsk.rx_release();
  }
  return got;
}

// Frames from B's XSK port kXskPort to A's socket on kPeerPort.
xdp::Udp4Addressing to_peer(const xdp::Xsk& xsk) {
  xdp::Udp4Addressing a{};
  std::memcpy(a.src_mac, xsk.mac(), 6);
  std::memcpy(a.dst_mac, g_mac_a, 6);
  a.src_addr = ip4(kAddrB);
  a.dst_addr = ip4(kAddrA);
  a.src_port = htons(kXskPort);
  a.dst_port = htons(kPeerPort);
  return a;
}

// Frames: no root, no namespace.
TEST(XdpFrameTest, Ipv4HeaderChecksumOfAKnownHeader) {
  // The example header of the IPv4 checksum's usual worked example: checksum 0xb861.
  const std::uint8_t header[20] = {0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11,
                                   0x00, 0x00, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7};
  EXPECT_EQ(xdp::internet_checksum(header, sizeof(header)), 0xb861);
}

TEST(XdpFrameTest, BuiltFramesParseBackWithValidChecksums) {
  xdp::Udp4Addressing a{{0x02, 0, 0, 0, 0, 1}, {0x02, 0, 0, 0, 0, 2}, ip4("10.1.2.3"),
                        ip4("10.4.5.6"),       htons(1234),           htons(5678)};
  for (const std::size_t len : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1400}}) {
    SCOPED_TRACE(len);
    std::string body;
    for (std::size_t i = 0; i < len; ++i) body.push_back(static_cast<char>('a' + i % 26));
    std::uint8_t frame[2048];
    const std::size_t n = xdp::build_udp4_frame(frame, sizeof(frame), a, 64, body.data(), len);
    ASSERT_EQ(n, xdp::kUdp4HeadersSize + len);
    EXPECT_EQ(std::memcmp(frame, a.dst_mac, 6), 0);
    EXPECT_EQ(std::memcmp(frame + 6, a.src_mac, 6), 0);
    const std::uint8_t* ip = frame + xdp::kEthHeaderSize;
    EXPECT_EQ(ip[8], 64);  // TTL
    // A header with its checksum in place sums to 0.
    EXPECT_EQ(xdp::internet_checksum(ip, xdp::kIpv4HeaderSize), 0);
    // UDP: pseudo header + UDP header + payload sums to 0 as well.
    std::vector<std::uint8_t> pseudo(ip + 12, ip + 20);
    pseudo.insert(pseudo.end(), {0, 17, static_cast<std::uint8_t>((8 + len) >> 8), static_cast<std::uint8_t>(8 + len)});
    pseudo.insert(pseudo.end(), ip + 20, ip + 20 + 8 + len);
    EXPECT_EQ(xdp::internet_checksum(pseudo.data(), pseudo.size()), 0);
    xdp::Udp4View v{};
    ASSERT_TRUE(xdp::parse_udp4_frame(frame, n, &v));
    EXPECT_EQ(v.src_addr, a.src_addr);
    EXPECT_EQ(v.dst_addr, a.dst_addr);
    EXPECT_EQ(v.src_port, a.src_port);
    EXPECT_EQ(v.dst_port, a.dst_port);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(v.payload), v.len), body);
    // Truncated by one byte: not a datagram.
    EXPECT_FALSE(xdp::parse_udp4_frame(frame, n - 1, &v));
  }
}

TEST(XdpFrameTest, ParseRejectsFragmentsAndHonoursIpOptions) {
  xdp::Udp4Addressing a{{0x02, 0, 0, 0, 0, 1}, {0x02, 0, 0, 0, 0, 2}, ip4("10.1.2.3"),
                        ip4("10.4.5.6"),       htons(1234),           htons(5678)};
  std::uint8_t frame[256];
  const std::size_t n = xdp::build_udp4_frame(frame, sizeof(frame), a, 64, "abcd", 4);
  xdp::Udp4View v{};
  std::uint8_t fragment[256];
  std::memcpy(fragment, frame, n);
  fragment[xdp::kEthHeaderSize + 6] |= 0x20;  // more fragments
  EXPECT_FALSE(xdp::parse_udp4_frame(fragment, n, &v));
  // The same datagram with 4 bytes of IP options (ihl 6): the UDP header moves.
  std::uint8_t with_options[256];
  std::memcpy(with_options, frame, xdp::kEthHeaderSize + xdp::kIpv4HeaderSize);
  std::memset(with_options + xdp::kEthHeaderSize + xdp::kIpv4HeaderSize, 1, 4);  // NOPs
  std::memcpy(with_options + xdp::kEthHeaderSize + xdp::kIpv4HeaderSize + 4,
              frame + xdp::kEthHeaderSize + xdp::kIpv4HeaderSize, n - xdp::kEthHeaderSize - xdp::kIpv4HeaderSize);
  with_options[xdp::kEthHeaderSize] = 0x46;
  with_options[xdp::kEthHeaderSize + 3] += 4;  // total length (< 256: no carry)
  ASSERT_TRUE(xdp::parse_udp4_frame(with_options, n + 4, &v));
  EXPECT_EQ(v.dst_port, a.dst_port);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(v.payload), v.len), "abcd");
  // Does not fit: 0, nothing claimed written.
  EXPECT_EQ(xdp::build_udp4_frame(frame, xdp::kUdp4HeadersSize + 3, a, 64, "abcd", 4), 0u);
}

TEST(XdpFrameTest, MulticastMacKeepsTheLow23BitsOfTheGroup) {
  const std::uint8_t want[6] = {0x01, 0x00, 0x5e, 0x01, 0x02, 0x03};
  EXPECT_EQ(std::memcmp(xdp::multicast_mac(ip4("239.1.2.3")).bytes, want, 6), 0);
  // The group's 24th bit from the bottom does not reach the MAC.
  EXPECT_EQ(std::memcmp(xdp::multicast_mac(ip4("239.129.2.3")).bytes, want, 6), 0);
}

TEST(XdpNeighbourTest, FindsThePeersEntryAndReportsAMissingOne) {
  SKIP_UNLESS_READY();
  const int ifindex = static_cast<int>(if_nametoindex(kIfB));
  auto mac = xdp::lookup_neighbour(ifindex, ip4(kAddrA));
  ASSERT_TRUE(mac.ok()) << mac.status();
  EXPECT_EQ(mac_text(mac->bytes), mac_text(g_mac_a));
  auto missing = xdp::lookup_neighbour(ifindex, ip4("10.231.0.99"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound) << missing.status();
}

// A routed destination's next hop is its gateway (whose neighbour entry gives the MAC); one on the
// link is itself.
TEST(XdpNeighbourTest, NextHopIsTheGatewayOfARoutedDestination) {
  SKIP_UNLESS_READY();
  ASSERT_EQ(shell_status(absl::StrCat("ip -n ", g_ns_b, " route replace 192.0.2.0/24 via ", kAddrA, " dev ", kIfB)), 0);
  const int ifindex = static_cast<int>(if_nametoindex(kIfB));
  auto routed = xdp::next_hop(ifindex, ip4("192.0.2.7"));
  ASSERT_TRUE(routed.ok()) << routed.status();
  EXPECT_EQ(*routed, ip4(kAddrA));
  auto on_link = xdp::next_hop(ifindex, ip4("10.231.0.99"));
  ASSERT_TRUE(on_link.ok()) << on_link.status();
  EXPECT_EQ(*on_link, ip4("10.231.0.99"));
  (void)shell_status(absl::StrCat("ip -n ", g_ns_b, " route del 192.0.2.0/24"));
}

// The UDP transport with udp.datapath = "xdp": two subscribers (two ports of one group) on one
// poller share its AF_XDP port on xb0; a publisher in A sends through a socket. Both receive every
// message in order; after the first closes (it had registered the port's fd in the poller's epoll
// set: the second takes it over), the second keeps receiving, with the poller sleeping between
// bursts (idle "adaptive", no timer wakeups: sleep_timer_ms = 0 and status messages once a
// minute, so only that fd wakes it in time).
TEST(XdpTransportTest, SubscribersShareOnePortOnAPollerAndTheLastKeepsItAfterTheFirstCloses) {
  SKIP_UNLESS_READY();
  const auto toml = [](const char* iface, const char* threading, const char* extra) {
    return absl::StrCat(
        "[runtime]\nthreading = \"", threading,
        "\"\npollers = 1\nidle = \"adaptive\"\nsleep_timer_ms = 0\ncounters = false\nname = \"xdp-share\"\n"
        "[transport]\nkind = \"udp\"\n[udp]\naddress = \"239.255.91.1\"\nport = 42101\n"
        "interface = \"",
        iface, "\"\nsession_timeout_ms = 60000\nstatus_interval_ms = 60000\nlinger_ms = 0\n", extra,
        "\n[[streams]]\ntopic = \"a\"\nid = 1\nudp_port = 42101\n"
        "[[streams]]\ntopic = \"b\"\nid = 2\nudp_port = 42102\n");
  };
  auto sctx = pollux::Context::from_string(toml(kIfB, "dedicated", "datapath = \"xdp\"\nxdp_frames = 256"), "sub.toml");
  ASSERT_TRUE(sctx.ok()) << sctx.status();
  auto sub_a = (*sctx)->subscriber("a");
  ASSERT_TRUE(sub_a.ok()) << sub_a.status();
  auto sub_b = (*sctx)->subscriber("b");
  ASSERT_TRUE(sub_b.ok()) << sub_b.status();
  // The publisher's context in A.
  auto pctx = in_netns(g_fd_a, [&] { return pollux::Context::from_string(toml(kIfA, "inline", ""), "pub.toml"); });
  ASSERT_TRUE(pctx.ok()) << pctx.status();
  // Its sockets are made in A too (a socket keeps the namespace it was made in).
  auto pub_a = in_netns(g_fd_a, [&] { return (*pctx)->publisher("a"); });
  ASSERT_TRUE(pub_a.ok()) << pub_a.status();
  auto pub_b = in_netns(g_fd_a, [&] { return (*pctx)->publisher("b"); });
  ASSERT_TRUE(pub_b.ok()) << pub_b.status();

  struct Got {
    std::uint64_t messages = 0, next = 1;
    bool in_order = true;
  };
  Got got_a, got_b;
  const auto drain = [](pollux::Subscriber& s, Got& g) {
    return s.poll(
        [&](const pollux::Message& m) {
          std::uint64_t v;
          std::memcpy(&v, m.payload.data(), 8);
          g.in_order &= v == g.next && m.sequence == g.next;
          g.next = v + 1;
          ++g.messages;
        },
        256);
  };
  const auto until = [](const std::function<bool()>& done, const std::function<void()>& step) {
    const auto end = std::chrono::steady_clock::now() + kWaitLimit;
    while (!done() && std::chrono::steady_clock::now() < end) {
      step();
      std::this_thread::yield();
    }
    return done();
  };
  ASSERT_TRUE(until([&] { return pub_a->is_connected() && pub_b->is_connected(); },
                    [&] {
                      pub_a->service();
                      pub_b->service();
                      drain(*sub_a, got_a);
                      drain(*sub_b, got_b);
                    }))
      << "the publishers never heard the XDP subscribers";
  std::uint64_t sent_a = 0, sent_b = 0;
  const auto send = [&](pollux::Publisher& p, std::uint64_t& sent, std::uint64_t n) {
    for (const std::uint64_t end = sent + n; sent < end;) {
      const std::uint64_t v[4] = {sent + 1, 0, 0, 0};
      if (p.offer(v, sizeof v) >= 0) ++sent;
    }
  };
  send(*pub_a, sent_a, 2000);
  send(*pub_b, sent_b, 2000);
  EXPECT_TRUE(until([&] { return got_a.messages == sent_a && got_b.messages == sent_b; },
                    [&] {
                      pub_a->service();
                      pub_b->service();
                      drain(*sub_a, got_a);
                      drain(*sub_b, got_b);
                    }))
      << "a " << got_a.messages << " of " << sent_a << ", b " << got_b.messages << " of " << sent_b;
  EXPECT_TRUE(got_a.in_order);
  sub_a->close();  // on the poller: the port's registration moves to b if a had it
  for (int burst = 0; burst < 5; ++burst) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the adaptive poller goes to sleep
    send(*pub_b, sent_b, 400);
    EXPECT_TRUE(until([&] { return got_b.messages == sent_b; },
                      [&] {
                        pub_b->service();
                        drain(*sub_b, got_b);
                      }))
        << "burst " << burst << ": b " << got_b.messages << " of " << sent_b;
  }
  EXPECT_EQ(got_b.messages, 4000u);
  EXPECT_TRUE(got_b.in_order);
}

TEST(XdpTransportTest, EveryQueueByDefaultAndAQueueLeftOutOfXdpQueuesIsReadFromTheSocket) {
  SKIP_UNLESS_READY();
  // Eight streams, each its own publisher socket (its own flow, so its own TX queue in A and RX
  // queue in B): with four queues, some land off queue 0.
  constexpr int kStreams = 8;
  constexpr std::uint64_t kCount = 500;
  const auto toml = [](const char* iface, const char* threading, const char* extra) {
    std::string t =
        absl::StrCat("[runtime]\nthreading = \"", threading,
                     "\"\npollers = 1\nidle = \"adaptive\"\ncounters = false\nname = \"xdp-queues\"\n"
                     "[transport]\nkind = \"udp\"\n[udp]\naddress = \"239.255.91.4\"\nport = 42201\ninterface = \"",
                     iface, "\"\nsession_timeout_ms = 60000\nlinger_ms = 0\n", extra, "\n");
    for (int i = 0; i < kStreams; ++i) {
      absl::StrAppend(&t, "[[streams]]\ntopic = \"s", i, "\"\nid = ", i + 1, "\nudp_port = ", 42201 + i, "\n");
    }
    return t;
  };
  for (const char* queues : {"", "xdp_queues = [0]"}) {
    SCOPED_TRACE(*queues ? queues : "every queue");
    auto sctx = pollux::Context::from_string(
        toml(kIfB4, "dedicated", absl::StrCat("datapath = \"xdp\"\nxdp_frames = 512\n", queues).c_str()), "sub.toml");
    ASSERT_TRUE(sctx.ok()) << sctx.status();
    auto pctx = in_netns(g_fd_a, [&] { return pollux::Context::from_string(toml(kIfA4, "inline", ""), "pub.toml"); });
    ASSERT_TRUE(pctx.ok()) << pctx.status();
    std::vector<pollux::Subscriber> subs;
    std::vector<pollux::Publisher> pubs;
    for (int i = 0; i < kStreams; ++i) {
      const std::string topic = absl::StrCat("s", i);
      auto sub = (*sctx)->subscriber(topic);
      ASSERT_TRUE(sub.ok()) << sub.status();
      subs.push_back(std::move(*sub));
      auto pub = in_netns(g_fd_a, [&] { return (*pctx)->publisher(topic); });
      ASSERT_TRUE(pub.ok()) << pub.status();
      pubs.push_back(std::move(*pub));
    }
    std::vector<std::uint64_t> got(kStreams, 0);
    bool in_order = true;
    const auto step = [&] {
      for (int i = 0; i < kStreams; ++i) {
        pubs[static_cast<std::size_t>(i)].service();
        subs[static_cast<std::size_t>(i)].poll(
            [&](const pollux::Message& m) {
              in_order &= m.sequence == got[static_cast<std::size_t>(i)] + 1;
              ++got[static_cast<std::size_t>(i)];
            },
            256);
      }
    };
    const auto until = [&](const std::function<bool()>& done) {
      const auto end = std::chrono::steady_clock::now() + kWaitLimit;
      while (!done() && std::chrono::steady_clock::now() < end) {
        step();
        std::this_thread::yield();
      }
      return done();
    };
    ASSERT_TRUE(until([&] {
      for (const auto& p : pubs) {
        if (!p.is_connected()) return false;
      }
      return true;
    })) << "the publishers never heard the XDP subscribers";
    for (std::uint64_t k = 0; k < kCount; ++k) {
      for (auto& p : pubs) {
        const std::uint64_t v[2] = {k, 0};
        while (p.offer(v, sizeof v) < 0) step();
      }
    }
    const bool all = until([&] {
      for (const std::uint64_t g : got) {
        if (g != kCount) return false;
      }
      return true;
    });
    std::string counts;
    for (const std::uint64_t g : got) absl::StrAppend(&counts, " ", g);
    EXPECT_TRUE(all) << "received per stream:" << counts << " of " << kCount;
    EXPECT_TRUE(in_order);
  }
}

const char* mode_name(xdp::XskMode mode) { return mode == xdp::XskMode::kGeneric ? "generic" : "native"; }

// Copy mode, attached natively (kCopy) or generically (kGeneric).
class XdpCopyTest : public ::testing::TestWithParam<xdp::XskMode> {};

TEST_P(XdpCopyTest, ReceivesExactlyTheDatagramsToItsDestination) {
  SKIP_UNLESS_READY();
  auto xsk = open_b(GetParam());
  ASSERT_TRUE(xsk.ok()) << xsk.status();
  EXPECT_EQ((*xsk)->info().native, GetParam() != xdp::XskMode::kGeneric);
  EXPECT_FALSE((*xsk)->info().zero_copy);
  ASSERT_TRUE((*xsk)->add_destination(ip4(kAddrB), htons(kXskPort)).ok());
  const Fd stack(udp_socket(kAddrB, kStackPort));
  ASSERT_GE(stack, 0);
  const Fd sender(in_netns(g_fd_a, [] { return udp_socket(kAddrA, 0); }));
  ASSERT_GE(sender, 0);

  constexpr int kCount = 40;
  for (int i = 0; i < kCount; ++i) ASSERT_TRUE(send_to(sender, kAddrB, kXskPort, payload("to-xsk", i)));
  const std::vector<Received> got = receive(**xsk, kCount);
  ASSERT_EQ(got.size(), static_cast<std::size_t>(kCount));
  for (int i = 0; i < kCount; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(got[i].view.dst_addr, ip4(kAddrB));
    EXPECT_EQ(got[i].view.dst_port, htons(kXskPort));
    EXPECT_EQ(got[i].view.src_addr, ip4(kAddrA));
    EXPECT_EQ(got[i].payload, payload("to-xsk", i));
  }

  // Another port is not redirected: B's stack gets it (XDP_PASS), and the XSK nothing more.
  ASSERT_TRUE(send_to(sender, kAddrB, kStackPort, "to-the-stack"));
  char buf[64];
  const ssize_t n = recv(stack, buf, sizeof(buf), 0);
  EXPECT_EQ(std::string(buf, n > 0 ? static_cast<std::size_t>(n) : 0), "to-the-stack");
  xdp::RxFrame frame;
  EXPECT_EQ((*xsk)->rx_peek(&frame, 1), 0u);
  (*xsk)->rx_release();
  EXPECT_EQ((*xsk)->stats().rx_frames, static_cast<std::uint64_t>(kCount));

  // Removed from the filter: the same destination goes to the stack again.
  ASSERT_TRUE((*xsk)->remove_destination(ip4(kAddrB), htons(kXskPort)).ok());
  const Fd late(udp_socket(kAddrB, kXskPort));
  ASSERT_GE(late, 0);
  ASSERT_TRUE(send_to(sender, kAddrB, kXskPort, "after-remove"));
  const ssize_t m = recv(late, buf, sizeof(buf), 0);
  EXPECT_EQ(std::string(buf, m > 0 ? static_cast<std::size_t>(m) : 0), "after-remove");
}

TEST_P(XdpCopyTest, TransmitsFramesAPeerSocketReceivesByteExact) {
  SKIP_UNLESS_READY();
  auto xsk = open_b(GetParam());
  ASSERT_TRUE(xsk.ok()) << xsk.status();
  const Fd peer(in_netns(g_fd_a, [] { return udp_socket(kAddrA, kPeerPort); }));
  ASSERT_GE(peer, 0);

  const xdp::Udp4Addressing addressing = to_peer(**xsk);
  // More than the 128 TX frames (256 frames, half transmit): completions must be reaped. Sent
  // in batches, each received before the next is sent, so the peer's socket buffer never fills.
  constexpr int kCount = 300;
  constexpr std::uint32_t kBatch = 16;
  std::vector<std::string> sent;
  for (int i = 0; i < kCount; ++i) sent.push_back(payload("from-xsk", i));
  int done = 0;
  while (done < kCount) {
    xdp::TxPayload batch[kBatch];
    std::uint32_t k = 0;
    for (; k < kBatch && done + static_cast<int>(k) < kCount; ++k) {
      const std::string& p = sent[static_cast<std::size_t>(done) + k];
      batch[k] = xdp::TxPayload{p.data(), static_cast<std::uint32_t>(p.size())};
    }
    (*xsk)->reap_completions();
    const std::uint32_t queued = (*xsk)->send_udp4(addressing, 64, batch, k);
    ASSERT_GT(queued, 0u) << "no TX frame or ring slot free at datagram " << done;
    for (std::uint32_t j = 0; j < queued; ++j, ++done) {
      SCOPED_TRACE(done);
      char buf[2048];
      sockaddr_in from{};
      socklen_t from_len = sizeof(from);
      const ssize_t n = recvfrom(peer, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&from), &from_len);
      ASSERT_GT(n, 0) << "nothing within the wait limit";
      EXPECT_EQ(std::string(buf, static_cast<std::size_t>(n)), sent[static_cast<std::size_t>(done)]);
      EXPECT_EQ(from.sin_addr.s_addr, ip4(kAddrB));
      EXPECT_EQ(from.sin_port, htons(kXskPort));
    }
  }
  // Every frame comes back through the completion ring.
  const auto reap_end = std::chrono::steady_clock::now() + kWaitLimit;
  while ((*xsk)->tx_in_flight() > 0 && std::chrono::steady_clock::now() < reap_end) {
    if ((*xsk)->reap_completions() == 0) usleep(1000);
  }
  EXPECT_EQ((*xsk)->tx_in_flight(), 0u);
  EXPECT_EQ((*xsk)->stats().tx_completions, static_cast<std::uint64_t>(kCount));
  EXPECT_EQ((*xsk)->stats().tx_kick_errors, 0u);
}

TEST_P(XdpCopyTest, OneSendOfMoreFramesThanTheKernelTakesPerKickSendsThemAll) {
  SKIP_UNLESS_READY();
  auto xsk = open_b(GetParam());
  ASSERT_TRUE(xsk.ok()) << xsk.status();
  const Fd peer(in_netns(g_fd_a, [] { return udp_socket(kAddrA, kPeerPort); }));
  ASSERT_GE(peer, 0);
  const int rcvbuf = 4 << 20;
  setsockopt(peer, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);

  const xdp::Udp4Addressing addressing = to_peer(**xsk);
  // The kernel transmits at most 32 frames per kick in copy mode: 100 in one call, and no call
  // after it, must all reach the peer.
  constexpr std::uint32_t kCount = 100;
  std::vector<std::string> sent;
  std::vector<xdp::TxPayload> batch;
  for (std::uint32_t i = 0; i < kCount; ++i) sent.push_back(absl::StrCat("burst-", i));
  for (const std::string& p : sent) batch.push_back(xdp::TxPayload{p.data(), static_cast<std::uint32_t>(p.size())});
  ASSERT_EQ((*xsk)->send_udp4(addressing, 64, batch.data(), kCount), kCount);
  for (std::uint32_t i = 0; i < kCount; ++i) {
    char buf[256];
    const ssize_t n = recv(peer, buf, sizeof(buf), 0);
    ASSERT_GT(n, 0) << "datagram " << i << " of " << kCount << " never came (" << (*xsk)->stats().tx_kicks << " kicks)";
    EXPECT_EQ(std::string(buf, static_cast<std::size_t>(n)), sent[i]);
  }
  EXPECT_EQ((*xsk)->stats().tx_kick_errors, 0u);
  EXPECT_GE((*xsk)->stats().tx_kicks, 4u) << "one kick per 32 frames at least";
}

INSTANTIATE_TEST_SUITE_P(Attach, XdpCopyTest, ::testing::Values(xdp::XskMode::kCopy, xdp::XskMode::kGeneric),
                         [](const ::testing::TestParamInfo<xdp::XskMode>& p) { return mode_name(p.param); });

TEST(XdpQueuesTest, EveryRxQueueHasASocketAndTheFramesOfEachAreReceived) {
  SKIP_UNLESS_READY();
  // The interface's queue count comes from the driver in this thread's namespace (sysfs shows
  // the host's here: no `ip netns exec`).
  EXPECT_EQ(xdp::rx_queue_count(kIfB4), static_cast<std::uint32_t>(kQueues4));
  absl::StatusOr<std::vector<std::uint32_t>> queues = xdp::select_queues(kIfB4, {}, "test");
  ASSERT_TRUE(queues.ok()) << queues.status();
  ASSERT_EQ(*queues, (std::vector<std::uint32_t>{0, 1, 2, 3}));
  const auto wrong = xdp::select_queues(kIfB4, {4}, "udp.xdp_queues");
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("udp.xdp_queues: interface xb4 has 4 RX queues (0..3), not queue 4"),
            std::string::npos)
      << wrong.status();
  EXPECT_FALSE(xdp::select_queues(kIfB4, {1, 1}, "udp.xdp_queues").ok());

  xdp::XskOptions options;
  options.ifname = kIfB4;
  options.queues = *queues;
  options.mode = xdp::XskMode::kCopy;
  // 256 receive frames per queue: room for all 128 datagrams should the flows' hashes put them
  // on one queue (they are read only after all were sent).
  options.frame_count = 2048;
  options.frame_size = 2048;
  auto xsk = xdp::Xsk::open(options);
  ASSERT_TRUE(xsk.ok()) << xsk.status();
  EXPECT_NE((*xsk)->describe().find("AF_XDP xb4 queues 0-3, copy mode (native XDP)"), std::string::npos)
      << (*xsk)->describe();
  ASSERT_TRUE((*xsk)->add_destination(0, htons(kXskPort)).ok());

  // Sixteen senders (sixteen flows, spread over A's four TX queues), eight datagrams each.
  constexpr int kSenders = 16, kEach = 8;
  std::vector<std::string> want;
  {
    std::vector<Fd> senders;
    for (int i = 0; i < kSenders; ++i) {
      senders.emplace_back(in_netns(g_fd_a, [] { return udp_socket(kAddrA4, 0); }));
      ASSERT_GE(senders.back(), 0);
    }
    for (int j = 0; j < kEach; ++j) {
      for (int i = 0; i < kSenders; ++i) {
        want.push_back(absl::StrCat("q-", i, "-", j));
        ASSERT_TRUE(send_to(senders[static_cast<std::size_t>(i)], kAddrB4, kXskPort, want.back()));
      }
    }
  }
  std::vector<std::string> got;
  std::vector<int> per_queue(kQueues4, 0);
  const auto end = std::chrono::steady_clock::now() + kWaitLimit;
  xdp::RxFrame frames[32];
  while (got.size() < want.size() && std::chrono::steady_clock::now() < end) {
    (*xsk)->rx_wait(100);
    const std::uint32_t n = (*xsk)->rx_peek(frames, 32);
    for (std::uint32_t i = 0; i < n; ++i) {
      xdp::Udp4View v{};
      ASSERT_TRUE(xdp::parse_udp4_frame(frames[i].data, frames[i].len, &v));
      got.emplace_back(reinterpret_cast<const char*>(v.payload), v.len);
      ++per_queue[(*xsk)->last_rx_queue()];
    }
    (*xsk)->rx_release();
  }
  std::sort(want.begin(), want.end());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, want);
  int queues_used = 0;
  for (const int n : per_queue) queues_used += n > 0 ? 1 : 0;
  EXPECT_GE(queues_used, 2) << "frames per queue: " << per_queue[0] << " " << per_queue[1] << " " << per_queue[2] << " "
                            << per_queue[3];
  EXPECT_EQ((*xsk)->kernel_dropped(), 0u);
}

TEST(XdpModeTest, ZeroCopyOnVethIsAClearErrorAndAutoFallsBackToCopy) {
  SKIP_UNLESS_READY();
  auto zc = open_b(xdp::XskMode::kZeroCopy);
  const bool zero_copy_works = zc.ok();
  if (zc.ok()) {
    // A kernel whose veth does zero-copy: then the socket must say so.
    EXPECT_TRUE((*zc)->info().zero_copy);
  } else {
    EXPECT_EQ(zc.status().code(), absl::StatusCode::kUnimplemented) << zc.status();
    const std::string message(zc.status().message());
    EXPECT_NE(message.find(kIfB), std::string::npos) << message;
    EXPECT_NE(message.find("zero-copy"), std::string::npos) << message;
    EXPECT_NE(message.find(std::strerror(EOPNOTSUPP)), std::string::npos) << message;
    // The failed open left nothing attached.
    auto attached = xdp::attached_pollux_program(static_cast<int>(if_nametoindex(kIfB)));
    ASSERT_TRUE(attached.ok()) << attached.status();
    EXPECT_EQ(*attached, 0u);
  }
  zc = absl::UnknownError("closed");
  auto automatic = open_b(xdp::XskMode::kAuto);
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  EXPECT_TRUE((*automatic)->info().native);
  EXPECT_EQ((*automatic)->info().zero_copy, zero_copy_works);
}

TEST(XdpStaleTest, AProgramLeftByAKilledProcessIsRemovedByTheNextOpen) {
  SKIP_UNLESS_READY();
  const int ifindex = static_cast<int>(if_nametoindex(kIfB));
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // In B (the forking thread's namespace): attach, report the program's id, wait to be killed.
    close(ready[0]);
    auto xsk = open_b(xdp::XskMode::kCopy);
    const std::uint32_t id = xsk.ok() ? (*xsk)->info().prog_id : 0;
    if (write(ready[1], &id, sizeof(id)) != sizeof(id)) _exit(1);
    for (;;) pause();
  }
  close(ready[1]);
  std::uint32_t child_prog = 0;
  const bool reported = read(ready[0], &child_prog, sizeof(child_prog)) == sizeof(child_prog);
  close(ready[0]);
  if (!reported || child_prog == 0) {
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    FAIL() << "the child could not open the XSK";
  }

  // The owner record names the child, alive.
  auto owner = xdp::pollux_program_owner(ifindex);
  ASSERT_TRUE(owner.ok()) << owner.status();
  EXPECT_EQ(owner->prog_id, child_prog);
  EXPECT_EQ(owner->pid, static_cast<std::uint32_t>(child));
  EXPECT_TRUE(owner->alive);

  // While the owner lives, its program is refused, not taken over.
  auto refused = open_b(xdp::XskMode::kCopy);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_NE(std::string(refused.status().message()).find(absl::StrCat("live process ", child)), std::string::npos)
      << refused.status();

  kill(child, SIGKILL);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  // The kernel keeps a program attached through netlink after its process died.
  auto attached = xdp::attached_pollux_program(ifindex);
  ASSERT_TRUE(attached.ok()) << attached.status();
  EXPECT_EQ(*attached, child_prog);
  owner = xdp::pollux_program_owner(ifindex);
  ASSERT_TRUE(owner.ok()) << owner.status();
  EXPECT_EQ(owner->prog_id, child_prog);
  EXPECT_EQ(owner->pid, static_cast<std::uint32_t>(child));
  EXPECT_FALSE(owner->alive);

  {
    auto xsk = open_b(xdp::XskMode::kCopy);
    ASSERT_TRUE(xsk.ok()) << xsk.status();
    EXPECT_TRUE((*xsk)->info().removed_stale);
    EXPECT_EQ((*xsk)->info().stale_pid, static_cast<std::uint32_t>(child));
    EXPECT_NE((*xsk)->info().prog_id, child_prog);
    attached = xdp::attached_pollux_program(ifindex);
    ASSERT_TRUE(attached.ok()) << attached.status();
    EXPECT_EQ(*attached, (*xsk)->info().prog_id);
  }
  // Closed: nothing left on the interface.
  attached = xdp::attached_pollux_program(ifindex);
  ASSERT_TRUE(attached.ok()) << attached.status();
  EXPECT_EQ(*attached, 0u);
  owner = xdp::pollux_program_owner(ifindex);
  ASSERT_TRUE(owner.ok()) << owner.status();
  EXPECT_EQ(owner->prog_id, 0u);
}

}  // namespace

// pollux::DatagramReceiver (the public API over the same socket): datagrams of its two lines, a
// unicast destination and a multicast group joined on B, come out with their line, sender and
// bytes; a frame with a wrong UDP checksum (written raw on A's link) is counted and never handed
// out, as the kernel would drop it before a socket.
TEST(XdpDatagramReceiverTest, HandsOutItsLinesDatagramsAndDropsABadChecksum) {
  SKIP_UNLESS_READY();
  constexpr const char* kGroup = "239.255.231.1";
  constexpr std::uint16_t kGroupPort = 42004;
  pollux::DatagramReceiverOptions o;
  o.interface = kIfB;
  o.xdp_mode = "copy";
  o.frames = 256;
  auto rx = pollux::DatagramReceiver::open(o);
  ASSERT_TRUE(rx.ok()) << rx.status();
  EXPECT_NE((*rx)->describe().find("copy mode (native XDP)"), std::string::npos) << (*rx)->describe();
  auto unicast = (*rx)->add(absl::StrCat(kAddrB, ":", kXskPort));
  ASSERT_TRUE(unicast.ok()) << unicast.status();
  auto group = (*rx)->add(absl::StrCat(kGroup, ":", kGroupPort), kAddrA);
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_NE(*unicast, *group);
  EXPECT_FALSE((*rx)->add("239.255.231.1").ok());

  const Fd sender(in_netns(g_fd_a, [] { return udp_socket(kAddrA, 0); }));
  ASSERT_GE(sender, 0);
  in_addr ifaddr{ip4(kAddrA)};
  ASSERT_EQ(setsockopt(sender, IPPROTO_IP, IP_MULTICAST_IF, &ifaddr, sizeof ifaddr), 0);
  constexpr int kCount = 20;
  for (int i = 0; i < kCount; ++i) {
    ASSERT_TRUE(send_to(sender, kAddrB, kXskPort, payload("unicast", i)));
    ASSERT_TRUE(send_to(sender, kGroup, kGroupPort, payload("group", i)));
  }
  // A frame to the unicast line whose UDP checksum is wrong: built right, one payload byte changed.
  std::uint8_t mac_b[6];
  ASSERT_TRUE(read_mac(kIfB, mac_b));
  xdp::Udp4Addressing a{};
  std::memcpy(a.src_mac, g_mac_a, 6);
  std::memcpy(a.dst_mac, mac_b, 6);
  a.src_addr = ip4(kAddrA);
  a.dst_addr = ip4(kAddrB);
  a.src_port = htons(kPeerPort);
  a.dst_port = htons(kXskPort);
  std::uint8_t frame[256];
  const std::string bad = "corrupted-on-the-way";
  const std::size_t len = xdp::build_udp4_frame(frame, sizeof frame, a, 64, bad.data(), bad.size());
  ASSERT_GT(len, 0u);
  frame[len - 1] ^= 0x20;
  const bool sent_raw = in_netns(g_fd_a, [&] {
    const int s = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
    sockaddr_ll to{};
    to.sll_family = AF_PACKET;
    to.sll_ifindex = static_cast<int>(if_nametoindex(kIfA));
    to.sll_halen = 6;
    std::memcpy(to.sll_addr, mac_b, 6);
    const bool ok =
        s >= 0 && sendto(s, frame, len, 0, reinterpret_cast<sockaddr*>(&to), sizeof to) == static_cast<ssize_t>(len);
    if (s >= 0) close(s);
    return ok;
  });
  ASSERT_TRUE(sent_raw);

  std::vector<std::string> by_line[2];
  std::uint64_t wrong_sender = 0, kernel_time = 0;
  const auto end = std::chrono::steady_clock::now() + kWaitLimit;
  while (by_line[0].size() + by_line[1].size() < 2 * kCount || (*rx)->stats().frames < 2 * kCount + 1) {
    if (std::chrono::steady_clock::now() >= end) break;
    pollfd p{(*rx)->fd(), POLLIN, 0};
    ::poll(&p, 1, 100);
    (*rx)->poll([&](const pollux::Datagram& d) {
      wrong_sender += d.src_addr != ip4(kAddrA);
      kernel_time += d.kernel_time;
      if (d.line < 2) by_line[d.line].emplace_back(reinterpret_cast<const char*>(d.bytes.data()), d.bytes.size());
    });
  }
  ASSERT_EQ(by_line[*unicast].size(), static_cast<std::size_t>(kCount));
  ASSERT_EQ(by_line[*group].size(), static_cast<std::size_t>(kCount));
  for (int i = 0; i < kCount; ++i) {
    EXPECT_EQ(by_line[*unicast][i], payload("unicast", i));
    EXPECT_EQ(by_line[*group][i], payload("group", i));
  }
  EXPECT_EQ(wrong_sender, 0u);
  EXPECT_EQ(kernel_time, 0u);  // AF_XDP frames carry no kernel receive time
  const pollux::DatagramReceiverStats st = (*rx)->stats();
  EXPECT_EQ(st.frames, static_cast<std::uint64_t>(2 * kCount + 1));
  EXPECT_EQ(st.malformed, 1u);
  EXPECT_EQ(st.unmatched, 0u);
}
