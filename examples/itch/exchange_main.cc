// pollux-exchange: an exchange simulator for feed-handler tests. Sends an ITCH stream as
// MoldUDP64 on two multicast lines (A and B), heartbeats when idle, ends the session, and
// serves re-requests from a bounded history. Faults (drops per line, a delayed line B, a
// silent re-request server) are seeded, so a seed reproduces the same drops.
//
//   pollux-exchange --generate 100000 --line-a 239.255.0.1:26400 --line-b 239.255.0.2:26401
//     --rerequest-port 26402 --interface lo --rate 200000 --drop-b 5
//
// Two threads. The main thread paces the lines (data, heartbeats, end of session); the server
// thread answers re-requests. They share the history ring and the current session under one
// mutex, held per packet built on either side, so serving never holds a line up for longer
// than the copy of one packet. The server's counters are its own, read after it is joined.
//
// MoldUDP64 has no authentication: whoever can send a datagram to the re-request port is a
// requester. What bounds the harm an unknown source can do: --allow (who is answered at all),
// one reply per request bounded in packets (--reply-mode, --max-reply-packets), no resending
// of what this requester was sent moments ago (--dup-window-ms), and a budget of messages per
// second per source address (--request-limit) in a table that cannot grow (--max-requesters).
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/absl_flags_cli.h"
#include "itch/endian.h"
#include "itch/file_input.h"
#include "itch/generator.h"
#include "itch/messages.h"
#include "itch/moldudp64.h"
#include "itch/random.h"
#include "itch/reader.h"

ABSL_FLAG(std::string, itch, "", "ITCH 5.0 BinaryFILE to send (or --generate); a regular file, read with pread.");
ABSL_FLAG(uint64_t, generate, 0, "Send N generated messages instead of a file (itch/generator.h).");
ABSL_FLAG(uint32_t, symbols, 8, "Symbols of the generated stream (--generate only).");
ABSL_FLAG(std::string, line_a, "", "Line A multicast group ADDR:PORT (required).");
ABSL_FLAG(std::string, line_b, "", "Line B multicast group ADDR:PORT (required).");
ABSL_FLAG(uint32_t, rerequest_port, 0, "UDP port of the re-request server, 1..65535 (required).");
ABSL_FLAG(std::string, interface, "",
          "Interface the multicast lines leave by, with its IPv4 address as their source (default: the route's).");
ABSL_FLAG(double, drop_a, 0, "Percent of line A data packets to drop, 0..100.");
ABSL_FLAG(double, drop_b, 0, "Percent of line B data packets to drop, 0..100.");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the drop decisions and of --generate.");
ABSL_FLAG(std::string, rate, "", "Messages per second, or 'max'. Default: max unless --speed is given.");
ABSL_FLAG(double, speed, 0, "Pace by the file's timestamps times X (2 = twice as fast); excludes --rate.");
ABSL_FLAG(std::string, session, "POLLUX0001", "MoldUDP64 session name (1..10 characters, space-padded).");
ABSL_FLAG(uint32_t, linger_ms, 2000,
          "After the end of session, keep serving until no valid request has come for this long.");
ABSL_FLAG(uint64_t, history, 1000000, "Re-request history depth in messages (>= 1).");
ABSL_FLAG(std::string, reply_mode, "multi",
          "multi: a request is answered with up to --max-reply-packets packets; single: with exactly one packet "
          "(as many of the requested messages as fit --reply-mtu).");
ABSL_FLAG(uint32_t, max_reply_packets, 8, "Packets per request at most in --reply-mode multi, 1..65535.");
ABSL_FLAG(uint32_t, dup_window_ms, 10,
          "What was sent to a requester (address and port) this recently is not sent to it again (0 = off).");
ABSL_FLAG(std::string, allow, "connected",
          "Who is answered: comma-separated IPv4 CIDRs or addresses, 'connected' (the networks of this host's "
          "interfaces, loopback included) and/or 'any'.");
ABSL_FLAG(uint64_t, request_limit, 100000, "Re-requested messages per second per requester address (>= 1).");
ABSL_FLAG(
    uint32_t, max_requesters, 4096,
    "Requester addresses with a budget at once; when full, the least recently active one is forgotten (1..1048576).");
ABSL_FLAG(uint32_t, delay_b_us, 0, "Send every line B packet this many microseconds after line A.");
ABSL_FLAG(bool, no_rerequest, false, "Fault: receive re-requests but never answer them.");
ABSL_FLAG(uint32_t, serve_delay_ms, 0,
          "Fault: the server waits this long before answering each valid request (a slow server; the lines go on).");
ABSL_FLAG(uint32_t, heartbeat_ms, 1000, "Heartbeat after this long without a packet (>= 1).");
ABSL_FLAG(uint32_t, mtu, 1400, "Packet budget of the lines in bytes (UDP payload), 72..65507.");
ABSL_FLAG(uint32_t, reply_mtu, 0,
          "Packet budget of re-request replies in bytes, 72..65507 (0 = --mtu; a reply path can be narrower than "
          "the lines).");
ABSL_FLAG(std::string, summary_json, "", "Write what was sent and served to this file at exit.");
ABSL_FLAG(uint64_t, session_change_at, 0,
          "After this many messages, end the session (end of session on both lines) and go on in --next-session, "
          "sequence numbers from 1 (0 = never).");
ABSL_FLAG(std::string, next_session, "POLLUX0002", "The session --session-change-at moves to (1..10 characters).");
ABSL_FLAG(uint64_t, pause_at, 0, "After this many messages, send only heartbeats for --pause-ms (0 = never).");
ABSL_FLAG(uint32_t, pause_ms, 1000, "Length of the --pause-at pause.");

namespace {

using pollux::itch::MessageView;
namespace mold = pollux::itch::mold;
using Clock = std::chrono::steady_clock;

constexpr int kDataErr = 65;  // EX_DATAERR
constexpr const char* kProg = "pollux-exchange";
constexpr const char* kFlags[] = {"itch",
                                  "generate",
                                  "symbols",
                                  "line_a",
                                  "line_b",
                                  "rerequest_port",
                                  "interface",
                                  "drop_a",
                                  "drop_b",
                                  "seed",
                                  "rate",
                                  "speed",
                                  "session",
                                  "linger_ms",
                                  "history",
                                  "reply_mode",
                                  "max_reply_packets",
                                  "dup_window_ms",
                                  "allow",
                                  "request_limit",
                                  "max_requesters",
                                  "delay_b_us",
                                  "no_rerequest",
                                  "serve_delay_ms",
                                  "heartbeat_ms",
                                  "mtu",
                                  "reply_mtu",
                                  "summary_json",
                                  "session_change_at",
                                  "next_session",
                                  "pause_at",
                                  "pause_ms"};

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}
// The clock of the kernel's receive timestamps (SO_TIMESTAMPNS).
int64_t realtime_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

constexpr char kHelp[] =
    "usage: pollux-exchange (--itch FILE | --generate N) --line-a ADDR:PORT --line-b ADDR:PORT\n"
    "                       --rerequest-port PORT [--interface IF] [--drop-a PCT] [--drop-b PCT]\n"
    "                       [--seed N] [--rate MSG_PER_S | --rate max | --speed X] [--session NAME]\n"
    "                       [--linger-ms MS] [--history N] [--reply-mode multi|single]\n"
    "                       [--max-reply-packets N] [--dup-window-ms MS] [--allow LIST]\n"
    "                       [--request-limit N] [--max-requesters N] [--delay-b-us US] [--no-rerequest]\n"
    "                       [--serve-delay-ms MS]\n"
    "                       [--heartbeat-ms MS] [--mtu BYTES] [--reply-mtu BYTES] [--summary-json FILE]\n"
    "                       [--session-change-at N [--next-session NAME]] [--pause-at N [--pause-ms MS]]\n\n"
    "Sends an ITCH 5.0 stream as MoldUDP64 on two multicast lines, then end of session (x3),\n"
    "and answers re-requests (Session, SequenceNumber, Count) from the last --history messages\n"
    "with downstream packets unicast to the requester. Drops apply to data packets only.\n"
    "MoldUDP64 has no authentication: --allow and the per-address budget are the controls.\n"
    "A 20-byte request is answered with at most --reply-mtu bytes (single) or --max-reply-packets\n"
    "x --reply-mtu bytes (multi), and only to an allowed source address.\n\n";

[[noreturn]] void bad_usage(const std::string& msg) { pollux::examples::usage_error(kProg, msg); }

sockaddr_in parse_endpoint(const std::string& flag, const std::string& s, bool multicast) {
  const size_t colon = s.rfind(':');
  sockaddr_in a{};
  a.sin_family = AF_INET;
  uint32_t port = 0;
  if (colon == std::string::npos || inet_pton(AF_INET, s.substr(0, colon).c_str(), &a.sin_addr) != 1 ||
      !absl::SimpleAtoi(s.substr(colon + 1), &port) || port == 0 || port > 65535) {
    bad_usage("--" + flag + " '" + s + "' is not ADDR:PORT (IPv4, port 1..65535)");
  }
  if (multicast && !IN_MULTICAST(ntohl(a.sin_addr.s_addr))) {
    bad_usage("--" + flag + " '" + s + "' is not a multicast address (224.0.0.0/4)");
  }
  a.sin_port = htons(static_cast<uint16_t>(port));
  return a;
}

std::string addr_text(in_addr a) {
  char buf[INET_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET, &a, buf, sizeof buf);
  return buf;
}

// The source addresses answered: networks (address and mask, host byte order), or any.
class AllowList {
 public:
  // "connected", "any", "10.0.0.0/8", "192.168.1.7", ... comma-separated.
  static AllowList parse(const std::string& spec) {
    AllowList l;
    for (absl::string_view raw : absl::StrSplit(spec, ',')) {
      const std::string item(absl::StripAsciiWhitespace(raw));
      if (item == "any") {
        l.any_ = true;
      } else if (item == "connected") {
        l.add_connected();
      } else {
        const size_t slash = item.find('/');
        in_addr a{};
        uint32_t bits = 32;
        if (item.empty() || inet_pton(AF_INET, item.substr(0, slash).c_str(), &a) != 1 ||
            (slash != std::string::npos && (!absl::SimpleAtoi(item.substr(slash + 1), &bits) || bits > 32))) {
          bad_usage("--allow: '" + item + "' is not an IPv4 CIDR (ADDR/BITS), an address, 'connected' or 'any'");
        }
        const uint32_t mask = bits == 0 ? 0 : ~uint32_t{0} << (32 - bits);
        l.nets_.push_back({ntohl(a.s_addr) & mask, mask});
      }
    }
    if (!l.any_ && l.nets_.empty()) bad_usage("--allow '" + spec + "' allows nobody");
    return l;
  }
  [[nodiscard]] bool allows(in_addr a) const noexcept {
    if (any_) return true;
    const uint32_t h = ntohl(a.s_addr);
    for (const Net& n : nets_) {
      if ((h & n.mask) == n.net) return true;
    }
    return false;
  }

 private:
  struct Net {
    uint32_t net, mask;
  };
  // The networks of this host's interfaces as they are at start (an address added later is
  // not in the list until a restart).
  void add_connected() {
    ifaddrs* ifs = nullptr;
    if (::getifaddrs(&ifs) != 0) {
      std::fprintf(stderr, "%s: --allow connected: getifaddrs: %s\n", kProg, std::strerror(errno));
      std::exit(71);
    }
    for (const ifaddrs* i = ifs; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr == nullptr || i->ifa_netmask == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
      const uint32_t addr = ntohl(reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr);
      const uint32_t mask = ntohl(reinterpret_cast<const sockaddr_in*>(i->ifa_netmask)->sin_addr.s_addr);
      const Net n{addr & mask, mask};
      if (std::none_of(nets_.begin(), nets_.end(), [&](const Net& o) { return o.net == n.net && o.mask == n.mask; })) {
        nets_.push_back(n);
      }
    }
    ::freeifaddrs(ifs);
  }

  bool any_ = false;
  std::vector<Net> nets_;
};

// The first IPv4 address of interface `name`, if it has one.
std::optional<in_addr> interface_address(const std::string& name) {
  ifaddrs* ifs = nullptr;
  if (::getifaddrs(&ifs) != 0) return std::nullopt;
  std::optional<in_addr> out;
  for (const ifaddrs* i = ifs; i != nullptr && !out; i = i->ifa_next) {
    if (i->ifa_addr != nullptr && i->ifa_addr->sa_family == AF_INET && name == i->ifa_name) {
      out = reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr;
    }
  }
  ::freeifaddrs(ifs);
  return out;
}

// The last `depth` messages' bytes: a byte ring big enough for `depth` messages of the largest
// type (so the newest `depth` are always whole) and each message's start, allocated once.
class History {
 public:
  explicit History(uint64_t depth)
      : depth_(depth),
        cap_(depth * pollux::itch::kMaxMessageSize),
        bytes_(new uint8_t[cap_]),
        starts_(new uint64_t[depth]) {}

  // Empty again, from sequence 1 (a new session).
  void reset() noexcept {
    pos_ = 0;
    next_seq_ = 1;
  }
  void append(std::span<const uint8_t> m) noexcept {
    starts_[next_seq_ % depth_] = pos_;
    const size_t at = pos_ % cap_, first = std::min<size_t>(m.size(), cap_ - at);
    std::memcpy(&bytes_[at], m.data(), first);
    std::memcpy(&bytes_[0], m.data() + first, m.size() - first);
    pos_ += m.size();
    ++next_seq_;
  }
  // Every message of a packet PacketBuilder wrote (valid by construction: no checks).
  void append_packet(std::span<const uint8_t> p) noexcept {
    for (size_t off = mold::kPacketHeaderSize; off + mold::kBlockLengthSize <= p.size();) {
      const size_t n = pollux::itch::load_be16(p.data() + off);
      append(p.subspan(off + mold::kBlockLengthSize, n));
      off += mold::kBlockLengthSize + n;
    }
  }
  [[nodiscard]] uint64_t oldest() const noexcept { return next_seq_ > depth_ ? next_seq_ - depth_ : 1; }
  [[nodiscard]] uint64_t next() const noexcept { return next_seq_; }
  // Size of message `seq` (oldest() <= seq < next()).
  [[nodiscard]] size_t size_of(uint64_t seq) const noexcept {
    return pollux::itch::message_size(bytes_[starts_[seq % depth_] % cap_]);
  }
  // Copies message `seq` (oldest() <= seq < next()) to out (size_of(seq) bytes).
  void copy(uint64_t seq, uint8_t* out) const noexcept {
    const size_t at = starts_[seq % depth_] % cap_;
    const size_t n = pollux::itch::message_size(bytes_[at]);
    const size_t first = std::min<size_t>(n, cap_ - at);
    std::memcpy(out, &bytes_[at], first);
    std::memcpy(out + first, &bytes_[0], n - first);
  }

 private:
  uint64_t depth_;
  uint64_t cap_;
  std::unique_ptr<uint8_t[]> bytes_;
  std::unique_ptr<uint64_t[]> starts_;
  uint64_t pos_ = 0;
  uint64_t next_seq_ = 1;
};

// What the line sender and the server share. The sender holds `mu` to append one packet's
// messages or to change the session; the server holds it to build one reply packet.
struct Shared {
  std::mutex mu;
  std::unique_ptr<History> history;  // guarded by mu (the pointer never changes once serving)
  mold::Session session;             // guarded by mu
  uint64_t generation = 0;           // guarded by mu: bumped at every session change
};

// The line sender's counters (main thread only).
struct LineCounters {
  uint64_t packets_a = 0, packets_b = 0, messages_a = 0, messages_b = 0;
  uint64_t dropped_a = 0, dropped_b = 0, heartbeats = 0, end_of_session = 0;
  // Data packets dropped on both lines: what only a re-request can recover. A run is a
  // stretch of consecutive such packets (one missing range at the receiver).
  uint64_t messages_dropped_a = 0, messages_dropped_b = 0;
  uint64_t dropped_both = 0, messages_dropped_both = 0, double_drop_runs = 0;
  uint64_t session_changes = 0, pauses = 0;
  uint64_t send_errors = 0;
};

// The server's counters (server thread only; read after it is joined).
struct ServerCounters {
  uint64_t requests = 0, served = 0, clamped = 0, reply_packets = 0, reply_messages = 0;
  uint64_t refused_malformed = 0, refused_wrong_session = 0, refused_too_old = 0;
  uint64_t refused_beyond_sent = 0, refused_rate_limited = 0, refused_disabled = 0, refused_not_allowed = 0;
  uint64_t requests_duplicate = 0, messages_duplicate = 0;
  uint64_t request_bytes_in = 0, reply_bytes_out = 0;
  uint64_t requesters_evicted = 0;
  uint64_t send_errors = 0;
  [[nodiscard]] uint64_t refused() const {
    return refused_malformed + refused_wrong_session + refused_too_old + refused_beyond_sent + refused_rate_limited +
           refused_disabled + refused_not_allowed;
  }
};

// Token buckets of --request-limit messages a second (one second of burst), one per source
// address, in a table of at most `max` entries allocated up front. A full table forgets its
// least recently active address to make room: nobody is ever locked out, and a forgotten
// address that comes back starts with a new (full) bucket.
class Budgets {
 public:
  Budgets(size_t max, double limit) : limit_(limit), nodes_(max) { index_.reserve(max * 2); }

  // The tokens of `addr` refilled up to `now_ns`; the address becomes the most recently
  // active. `*evicted` is set when another address was forgotten to make room.
  double& tokens_for(uint32_t addr, int64_t now_ns, bool* evicted) {
    *evicted = false;
    uint32_t i;
    if (const auto it = index_.find(addr); it != index_.end()) {
      i = it->second;
      Node& n = nodes_[i];
      n.tokens = std::min(limit_, n.tokens + limit_ * static_cast<double>(now_ns - n.last_ns) * 1e-9);
      unlink(i);
    } else {
      if (used_ < nodes_.size()) {
        i = static_cast<uint32_t>(used_++);
      } else {
        i = tail_;
        unlink(i);
        index_.erase(nodes_[i].addr);
        *evicted = true;
      }
      nodes_[i].addr = addr;
      nodes_[i].tokens = limit_;
      index_.emplace(addr, i);
    }
    nodes_[i].last_ns = now_ns;
    push_front(i);
    return nodes_[i].tokens;
  }

 private:
  static constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
  struct Node {
    uint32_t addr = 0;
    uint32_t prev = kNone, next = kNone;  // towards the most / least recently active
    double tokens = 0;
    int64_t last_ns = 0;
  };
  void unlink(uint32_t i) noexcept {
    Node& n = nodes_[i];
    (n.prev == kNone ? head_ : nodes_[n.prev].next) = n.next;
    (n.next == kNone ? tail_ : nodes_[n.next].prev) = n.prev;
    n.prev = n.next = kNone;
  }
  void push_front(uint32_t i) noexcept {
    nodes_[i].next = head_;
    nodes_[i].prev = kNone;
    if (head_ != kNone) nodes_[head_].prev = i;
    head_ = i;
    if (tail_ == kNone) tail_ = i;
  }

  double limit_;
  std::vector<Node> nodes_;
  size_t used_ = 0;
  uint32_t head_ = kNone, tail_ = kNone;
  absl::flat_hash_map<uint32_t, uint32_t> index_;  // address -> node
};

// The ranges recently sent to each requester, so that a request repeating them (a retry while
// the reply is still in flight, or a client re-requesting "the rest" after every packet of a
// multi-packet reply) is not answered with them again. A ring of the last kCapacity ranges,
// in time order: memory is fixed whatever the request rate; a range pushed out early (more
// than kCapacity replies within the window) is simply served again, within the budget.
// Times are CLOCK_REALTIME, the clock of the requests' kernel receive timestamps.
class SentRing {
 public:
  static constexpr size_t kCapacity = 4096;
  struct Range {
    uint64_t from, to;  // [from, to)
  };

  SentRing() : entries_(kCapacity), hits_(kCapacity) {}

  void add(uint32_t addr, uint16_t port, uint64_t generation, uint64_t from, uint64_t to, int64_t now_ns) {
    entries_[next_ % kCapacity] = Entry{now_ns, from, to, generation, addr, port};
    ++next_;
  }

  // Writes to `out` (room for kCapacity + 1) the parts of [from, to) not sent to
  // (addr, port) in `generation` at or after `since_ns`, in order; returns how many.
  size_t unsent(uint32_t addr, uint16_t port, uint64_t generation, uint64_t from, uint64_t to, int64_t since_ns,
                Range* out) {
    size_t nh = 0;
    for (uint64_t k = next_; k > 0 && next_ - k < kCapacity; --k) {
      const Entry& e = entries_[(k - 1) % kCapacity];
      if (e.t_ns < since_ns) break;  // older ones are older still
      if (e.addr == addr && e.port == port && e.generation == generation && e.from < to && e.to > from) {
        hits_[nh++] = {std::max(e.from, from), std::min(e.to, to)};
      }
    }
    std::sort(hits_.begin(), hits_.begin() + static_cast<std::ptrdiff_t>(nh),
              [](const Range& a, const Range& b) { return a.from < b.from; });
    size_t n = 0;
    uint64_t at = from;
    for (size_t i = 0; i < nh; ++i) {
      if (hits_[i].from > at) out[n++] = {at, hits_[i].from};
      at = std::max(at, hits_[i].to);
    }
    if (at < to) out[n++] = {at, to};
    return n;
  }

 private:
  struct Entry {
    int64_t t_ns = 0;
    uint64_t from = 0, to = 0, generation = 0;
    uint32_t addr = 0;
    uint16_t port = 0;
  };
  std::vector<Entry> entries_;
  std::vector<Range> hits_;  // scratch of unsent()
  uint64_t next_ = 0;        // entries ever added
};

struct ServerOptions {
  bool answer = true;
  int64_t serve_delay_ns = 0;  // a fault: a slow server
  bool single = false;
  uint32_t max_packets = 8;
  uint32_t mtu = 1400;
  int64_t dup_window_ns = 10'000'000;
  double request_limit = 100000;
  size_t max_requesters = 4096;
  AllowList allow;
};

// The re-request server: its own thread, its own socket, its own counters.
class Server {
 public:
  Server(int fd, Shared& shared, ServerOptions o)
      : fd_(fd),
        sh_(shared),
        o_(std::move(o)),
        budgets_(o_.max_requesters, o_.request_limit),
        reply_(o_.mtu),
        pieces_(SentRing::kCapacity + 1) {}

  [[nodiscard]] bool start() {
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake_fd_ < 0) return false;
    thread_ = std::thread([this] { run(); });
    return true;
  }
  // Stops the thread (requests still queued are not answered) and joins it; counters() may be
  // read afterwards.
  void stop() {
    if (!thread_.joinable()) return;
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof one);
    thread_.join();
    ::close(wake_fd_);
  }
  [[nodiscard]] const ServerCounters& counters() const { return c_; }
  // When the last valid request came (steady clock ns; INT64_MIN: none yet). A valid request
  // is well formed, of the current session, within what was sent and from an allowed source.
  [[nodiscard]] int64_t last_valid_ns() const noexcept {
    return last_valid_ns_.load(std::memory_order_relaxed);  // a time, not a publication
  }

 private:
  void run() {
    pollfd p[2] = {{fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    for (;;) {
      if (::poll(p, 2, -1) < 0 && errno != EINTR) break;
      if (p[1].revents != 0) break;
      // A bounded burst per wakeup, then the wake descriptor is looked at again.
      for (int burst = 0; burst < 64; ++burst) {
        uint8_t in[64];
        sockaddr_in from{};
        iovec iov{in, sizeof in};
        alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(in_pktinfo)) + CMSG_SPACE(sizeof(timespec))];
        msghdr mh{};
        mh.msg_name = &from;
        mh.msg_namelen = sizeof from;
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        mh.msg_control = cbuf;
        mh.msg_controllen = sizeof cbuf;
        // MSG_TRUNC: the datagram's real length, for the byte count (the bytes are cut to 64).
        const ssize_t n = ::recvmsg(fd_, &mh, MSG_DONTWAIT | MSG_TRUNC);
        if (n < 0) break;
        bool have_local = false;
        in_pktinfo local{};
        int64_t arrived_ns = 0;
        for (cmsghdr* cm = CMSG_FIRSTHDR(&mh); cm != nullptr; cm = CMSG_NXTHDR(&mh, cm)) {
          if (cm->cmsg_level == IPPROTO_IP && cm->cmsg_type == IP_PKTINFO) {
            std::memcpy(&local, CMSG_DATA(cm), sizeof local);
            have_local = true;
          } else if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMPNS) {
            timespec ts{};
            std::memcpy(&ts, CMSG_DATA(cm), sizeof ts);
            arrived_ns = int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
          }
        }
        if (arrived_ns == 0) arrived_ns = realtime_ns();
        serve(std::span<const uint8_t>(in, std::min<size_t>(static_cast<size_t>(n), sizeof in)),
              static_cast<uint64_t>(n), from, have_local ? &local : nullptr, arrived_ns);
      }
    }
  }

  // Sends one reply packet from the local address the request arrived on (`local`), so a
  // requester whose socket is connected to that address accepts it on a multi-homed host.
  void send_reply(std::span<const uint8_t> p, const sockaddr_in& to, const in_pktinfo* local) {
    iovec iov{const_cast<uint8_t*>(p.data()), p.size()};
    msghdr mh{};
    mh.msg_name = const_cast<sockaddr_in*>(&to);
    mh.msg_namelen = sizeof to;
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(in_pktinfo))] = {};
    if (local != nullptr) {
      mh.msg_control = cbuf;
      mh.msg_controllen = sizeof cbuf;
      cmsghdr* cm = CMSG_FIRSTHDR(&mh);
      cm->cmsg_level = IPPROTO_IP;
      cm->cmsg_type = IP_PKTINFO;
      cm->cmsg_len = CMSG_LEN(sizeof(in_pktinfo));
      in_pktinfo pi{};
      pi.ipi_spec_dst = local->ipi_spec_dst;  // the source; the route picks the interface
      std::memcpy(CMSG_DATA(cm), &pi, sizeof pi);
    }
    if (::sendmsg(fd_, &mh, 0) < 0) {
      ++c_.send_errors;
      return;
    }
    c_.reply_bytes_out += p.size();
  }

  // `arrived_ns`: when the kernel received the request (CLOCK_REALTIME).
  void serve(std::span<const uint8_t> in, uint64_t size, const sockaddr_in& from, const in_pktinfo* local,
             int64_t arrived_ns) {
    ++c_.requests;
    c_.request_bytes_in += size;
    if (!o_.allow.allows(from.sin_addr)) {  // no reply, nothing else looked at
      ++c_.refused_not_allowed;
      return;
    }
    const int64_t now = steady_ns();
    mold::Session session;
    uint64_t generation, oldest, next;
    {
      std::lock_guard<std::mutex> l(sh_.mu);
      session = sh_.session;
      generation = sh_.generation;
      oldest = sh_.history->oldest();
      next = sh_.history->next();
    }
    const mold::Request r = mold::parse_request(in, &session);
    const bool valid = r.ok() && r.sequence < next && r.sequence >= oldest;
    if (valid) last_valid_ns_.store(now, std::memory_order_relaxed);
    if (valid && o_.serve_delay_ns > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(o_.serve_delay_ns));
    if (!o_.answer) {
      ++c_.refused_disabled;
      return;
    }
    if (r.error == mold::Error::kWrongSession) {
      ++c_.refused_wrong_session;
      return;
    }
    if (!r.ok()) {
      ++c_.refused_malformed;
      return;
    }
    if (r.sequence >= next) {
      ++c_.refused_beyond_sent;
      return;
    }
    if (r.sequence < oldest) {
      ++c_.refused_too_old;
      return;
    }
    const uint64_t end = std::min<uint64_t>(r.sequence + r.count, next);  // past the end: clamped
    const uint32_t addr = from.sin_addr.s_addr;
    // What this requester (address and port) was sent less than the window before the request
    // arrived - or after, while it waited in the socket - is not sent again. From the arrival,
    // not from now: a backlog here must not turn the requester's "rest of the gap" into resends.
    size_t np = 1;
    pieces_[0] = {r.sequence, end};
    if (o_.dup_window_ns > 0) {
      np =
          ring_.unsent(addr, from.sin_port, generation, r.sequence, end, arrived_ns - o_.dup_window_ns, pieces_.data());
    }
    uint64_t unsent = 0;
    for (size_t i = 0; i < np; ++i) unsent += pieces_[i].to - pieces_[i].from;
    const uint64_t duplicate = (end - r.sequence) - unsent;
    if (duplicate > 0) {
      ++c_.requests_duplicate;
      c_.messages_duplicate += duplicate;
    }
    if (np == 0) return;  // all of it was just sent: not answered
    // One budget per source address, whatever its ports.
    bool evicted = false;
    double& tokens = budgets_.tokens_for(ntohl(addr), now, &evicted);
    if (evicted) ++c_.requesters_evicted;
    if (tokens < 1) {
      ++c_.refused_rate_limited;
      return;
    }
    uint64_t budget = static_cast<uint64_t>(tokens);
    uint32_t packets = o_.single ? 1 : o_.max_packets;
    uint64_t sent = 0;
    bool stop = false;
    for (size_t i = 0; i < np && packets > 0 && budget > 0 && !stop; ++i) {
      const uint64_t first = pieces_[i].from;
      const uint64_t last = std::min(pieces_[i].to, first + budget);
      uint64_t seq = first;
      while (seq < last && packets > 0) {
        mold::PacketBuilder pb(reply_);
        {
          // One packet's copy under the lock: the line sender waits at most this long.
          std::lock_guard<std::mutex> l(sh_.mu);
          // A new session, or the history moved past `seq` since the request came: stop here.
          if (sh_.generation != generation || seq < sh_.history->oldest()) {
            stop = true;
            break;
          }
          (void)pb.begin(session, seq);
          while (seq < last) {
            uint8_t* at = pb.reserve(sh_.history->size_of(seq));
            if (at == nullptr) break;
            sh_.history->copy(seq, at);
            ++seq;
          }
        }
        const uint16_t k = pb.count();
        send_reply(pb.finish(), from, local);
        ++c_.reply_packets;
        c_.reply_messages += k;
        --packets;
      }
      if (seq > first) {
        ring_.add(addr, from.sin_port, generation, first, seq, realtime_ns());
        sent += seq - first;
        budget -= seq - first;
      }
    }
    tokens -= static_cast<double>(sent);
    if (sent == 0) {  // a new session, or the history moved past the start, since it came
      ++c_.refused_too_old;
      return;
    }
    ++c_.served;
    if (sent + duplicate < r.count) ++c_.clamped;
  }

  int fd_;
  int wake_fd_ = -1;
  Shared& sh_;
  ServerOptions o_;
  ServerCounters c_;
  Budgets budgets_;
  SentRing ring_;
  std::vector<uint8_t> reply_;
  std::vector<SentRing::Range> pieces_;
  std::atomic<int64_t> last_valid_ns_{std::numeric_limits<int64_t>::min()};
  std::thread thread_;
};

// The line sender: both multicast lines, their drops and line B's delay (main thread only).
class Lines {
 public:
  int fd = -1;
  sockaddr_in line_a{}, line_b{};
  uint32_t drop_a_ppm = 0, drop_b_ppm = 0;
  pollux::itch::Xoshiro256 rng_a{1}, rng_b{1};
  std::chrono::microseconds delay_b{0};
  LineCounters c;
  Clock::time_point last_send = Clock::now();
  bool last_double = false;  // the previous data packet was dropped on both lines

  void send(const sockaddr_in& to, std::span<const uint8_t> p) {
    if (::sendto(fd, p.data(), p.size(), 0, reinterpret_cast<const sockaddr*>(&to), sizeof to) < 0) ++c.send_errors;
  }

  // One data packet on both lines, each subject to its own drop draw; B may be delayed.
  void send_data(std::span<const uint8_t> p, uint16_t n) {
    last_send = Clock::now();
    const bool drop_a = drop_a_ppm != 0 && rng_a.below(1000000) < drop_a_ppm;
    const bool drop_b = drop_b_ppm != 0 && rng_b.below(1000000) < drop_b_ppm;
    if (drop_a && drop_b) {
      ++c.dropped_both;
      c.messages_dropped_both += n;
      if (!last_double) ++c.double_drop_runs;
    }
    last_double = drop_a && drop_b;
    if (drop_a) {
      ++c.dropped_a;
      c.messages_dropped_a += n;
    } else {
      send(line_a, p);
      ++c.packets_a;
      c.messages_a += n;
    }
    if (drop_b) {
      ++c.dropped_b;
      c.messages_dropped_b += n;
      return;
    }
    ++c.packets_b;
    c.messages_b += n;
    send_b(p);
  }

  void send_control(std::span<const uint8_t> p) {
    last_send = Clock::now();
    send(line_a, p);
    send_b(p);
  }

  void flush_delayed(bool all) {
    const auto now = Clock::now();
    while (delayed_head_ < delayed_.size() && (all || delayed_[delayed_head_].due <= now)) {
      send(line_b, delayed_[delayed_head_].bytes);
      ++delayed_head_;
    }
    if (delayed_head_ == delayed_.size()) {
      delayed_.clear();
      delayed_head_ = 0;
    }
  }
  [[nodiscard]] bool delayed_pending() const { return delayed_head_ < delayed_.size(); }
  // When the next delayed line B packet is due (max() if none).
  [[nodiscard]] Clock::time_point next_delayed() const {
    return delayed_pending() ? delayed_[delayed_head_].due : Clock::time_point::max();
  }

 private:
  void send_b(std::span<const uint8_t> p) {
    if (delay_b.count() == 0) {
      send(line_b, p);
    } else {
      delayed_.push_back({last_send + delay_b, std::vector<uint8_t>(p.begin(), p.end())});
    }
  }
  struct Delayed {
    Clock::time_point due;
    std::vector<uint8_t> bytes;
  };
  // A test fault, not a fast path: a copy per delayed packet is fine.
  std::vector<Delayed> delayed_;
  size_t delayed_head_ = 0;
};

// The messages to send, from the generator's bytes or from a file read with pread (a file
// that shrinks while it is sent is an error naming the offset, never a SIGBUS).
class Input {
 public:
  explicit Input(std::vector<uint8_t> generated) : generated_(std::move(generated)), cur_(generated_) {}
  explicit Input(pollux::itch::ChunkReader file) : file_(std::move(file)), cur_(file_->window()) {}

  // The next message (valid until the next call), or false at the end or on an error
  // (status() then says which).
  bool next(MessageView* m) {
    for (;;) {
      if (cur_.next(m)) return true;
      pollux::itch::ParseResult r = cur_.result();
      if (file_ && !file_->last() && (r.ok() || r.error == pollux::itch::ParseError::kTruncated)) {
        // The window ends inside a record (or exactly at one): read on behind what was used.
        if (absl::Status s = file_->advance(static_cast<size_t>(r.offset)); !s.ok()) {
          status_ = s;
          return false;
        }
        cur_ = pollux::itch::MessageCursor(file_->window());
        continue;
      }
      if (!r.ok()) {
        if (file_) r.offset += file_->window_offset();
        const absl::Status s = r.to_status();
        status_ = file_ ? absl::Status(s.code(), file_->path() + ": " + std::string(s.message())) : s;
      }
      return false;
    }
  }
  [[nodiscard]] const absl::Status& status() const { return status_; }
  [[nodiscard]] absl::Status rewind() {
    status_ = absl::OkStatus();
    if (file_) {
      if (absl::Status s = file_->rewind(); !s.ok()) return s;
      cur_ = pollux::itch::MessageCursor(file_->window());
    } else {
      cur_ = pollux::itch::MessageCursor(generated_);
    }
    return absl::OkStatus();
  }

 private:
  std::vector<uint8_t> generated_;
  std::optional<pollux::itch::ChunkReader> file_;
  pollux::itch::MessageCursor cur_;
  absl::Status status_;
};

struct SessionStat {
  std::string name;
  uint64_t messages = 0;
};

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    if (static_cast<unsigned char>(ch) < 0x20) continue;
    out += ch;
  }
  return out + "\"";
}

bool write_summary(const std::string& path, const LineCounters& c, const ServerCounters& s, uint64_t end_seq,
                   const char* reply_mode, const std::vector<SessionStat>& sessions) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return false;
  uint64_t total = 0;
  for (const SessionStat& st : sessions) total += st.messages;
  using ull = unsigned long long;
  std::fprintf(f,
               "{\n  \"messages\": %llu,\n  \"sessions\": %llu,\n"
               "  \"packets_a\": %llu,\n  \"packets_b\": %llu,\n  \"messages_a\": %llu,\n"
               "  \"messages_b\": %llu,\n  \"dropped_a\": %llu,\n  \"dropped_b\": %llu,\n"
               "  \"heartbeats\": %llu,\n  \"end_of_session_packets\": %llu,\n"
               "  \"end_of_session_sequence\": %llu,\n  \"reply_mode\": \"%s\",\n  \"requests\": %llu,\n"
               "  \"requests_served\": %llu,\n  \"requests_clamped\": %llu,\n"
               "  \"requests_duplicate\": %llu,\n  \"messages_duplicate\": %llu,\n"
               "  \"reply_packets\": %llu,\n  \"reply_messages\": %llu,\n"
               "  \"request_bytes_in\": %llu,\n  \"reply_bytes_out\": %llu,\n"
               "  \"requests_refused\": %llu,\n  \"refused_malformed\": %llu,\n"
               "  \"refused_wrong_session\": %llu,\n  \"refused_too_old\": %llu,\n"
               "  \"refused_beyond_sent\": %llu,\n  \"refused_rate_limited\": %llu,\n"
               "  \"refused_disabled\": %llu,\n  \"refused_not_allowed\": %llu,\n"
               "  \"requesters_evicted\": %llu,\n  \"send_errors\": %llu,\n"
               "  \"messages_dropped_a\": %llu,\n  \"messages_dropped_b\": %llu,\n"
               "  \"dropped_both\": %llu,\n  \"messages_dropped_both\": %llu,\n  \"double_drop_runs\": %llu,\n"
               "  \"session_changes\": %llu,\n  \"pauses\": %llu,\n  \"session_list\": [",
               (ull)total, (ull)sessions.size(), (ull)c.packets_a, (ull)c.packets_b, (ull)c.messages_a,
               (ull)c.messages_b, (ull)c.dropped_a, (ull)c.dropped_b, (ull)c.heartbeats, (ull)c.end_of_session,
               (ull)end_seq, reply_mode, (ull)s.requests, (ull)s.served, (ull)s.clamped, (ull)s.requests_duplicate,
               (ull)s.messages_duplicate, (ull)s.reply_packets, (ull)s.reply_messages, (ull)s.request_bytes_in,
               (ull)s.reply_bytes_out, (ull)s.refused(), (ull)s.refused_malformed, (ull)s.refused_wrong_session,
               (ull)s.refused_too_old, (ull)s.refused_beyond_sent, (ull)s.refused_rate_limited, (ull)s.refused_disabled,
               (ull)s.refused_not_allowed, (ull)s.requesters_evicted, (ull)(c.send_errors + s.send_errors),
               (ull)c.messages_dropped_a, (ull)c.messages_dropped_b, (ull)c.dropped_both, (ull)c.messages_dropped_both,
               (ull)c.double_drop_runs, (ull)c.session_changes, (ull)c.pauses);
  // Last, so that a reader looking for the first "messages" key finds the total.
  for (size_t i = 0; i < sessions.size(); ++i) {
    std::fprintf(f, "%s\n    {\"name\": %s, \"messages\": %llu}", i == 0 ? "" : ",",
                 json_string(sessions[i].name).c_str(), (ull)sessions[i].messages);
  }
  std::fprintf(f, "\n  ]\n}\n");
  return std::fclose(f) == 0;
}

uint32_t drop_ppm(const char* flag, double pct) {
  if (!(pct >= 0 && pct <= 100)) bad_usage(std::string("--") + flag + " must be 0..100");
  return static_cast<uint32_t>(std::lround(pct * 10000));
}

}  // namespace

int main(int argc, char** argv) {
  pollux::examples::parse_absl_flags(argc, argv, {kProg, kHelp, {std::begin(kFlags), std::end(kFlags)}});

  const std::string itch_path = absl::GetFlag(FLAGS_itch);
  const uint64_t generate = absl::GetFlag(FLAGS_generate);
  if (itch_path.empty() == (generate == 0)) bad_usage("exactly one of --itch FILE or --generate N is required");
  for (const char* req : {"line_a", "line_b"}) {
    if (absl::FindCommandLineFlag(req)->CurrentValue().empty()) {
      bad_usage("--" + pollux::examples::dashed(req) + " ADDR:PORT is required");
    }
  }
  const uint32_t req_port = absl::GetFlag(FLAGS_rerequest_port);
  if (req_port == 0 || req_port > 65535) bad_usage("--rerequest-port PORT (1..65535) is required");
  Lines lines;
  lines.line_a = parse_endpoint("line-a", absl::GetFlag(FLAGS_line_a), true);
  lines.line_b = parse_endpoint("line-b", absl::GetFlag(FLAGS_line_b), true);
  lines.drop_a_ppm = drop_ppm("drop-a", absl::GetFlag(FLAGS_drop_a));
  lines.drop_b_ppm = drop_ppm("drop-b", absl::GetFlag(FLAGS_drop_b));
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  // Distinct streams per line, so line B's drops do not mirror line A's.
  lines.rng_a = pollux::itch::Xoshiro256(seed * 2 + 1);
  lines.rng_b = pollux::itch::Xoshiro256(seed * 2 + 2);
  const std::string rate_s = absl::GetFlag(FLAGS_rate);
  const double speed = absl::GetFlag(FLAGS_speed);
  double rate = 0;  // 0 = as fast as possible
  if (!rate_s.empty() && rate_s != "max" && (!absl::SimpleAtod(rate_s, &rate) || !(rate > 0))) {
    bad_usage("--rate '" + rate_s + "' is not a positive number of messages per second or 'max'");
  }
  if (!(speed >= 0) || std::isinf(speed)) bad_usage("--speed must be a positive factor");
  if (speed > 0 && !rate_s.empty()) bad_usage("--speed and --rate exclude each other");
  const std::string session_name = absl::GetFlag(FLAGS_session);
  if (session_name.empty() || session_name.size() > mold::kSessionSize) {
    bad_usage("--session '" + session_name + "' must be 1..10 characters");
  }
  const std::string next_name = absl::GetFlag(FLAGS_next_session);
  if (next_name.empty() || next_name.size() > mold::kSessionSize || next_name == session_name) {
    bad_usage("--next-session '" + next_name + "' must be 1..10 characters and differ from --session");
  }
  const mold::Session next_session = mold::Session::from(next_name);
  const uint64_t history = absl::GetFlag(FLAGS_history);
  if (history == 0 || history > (uint64_t{1} << 28)) bad_usage("--history must be 1..268435456 messages");
  ServerOptions so;
  const uint64_t limit = absl::GetFlag(FLAGS_request_limit);
  if (limit == 0) bad_usage("--request-limit must be >= 1");
  so.request_limit = static_cast<double>(limit);
  so.max_requesters = absl::GetFlag(FLAGS_max_requesters);
  if (so.max_requesters == 0 || so.max_requesters > (1u << 20)) bad_usage("--max-requesters must be 1..1048576");
  const std::string reply_mode = absl::GetFlag(FLAGS_reply_mode);
  if (reply_mode != "multi" && reply_mode != "single") {
    bad_usage("--reply-mode '" + reply_mode + "' is neither 'multi' nor 'single'");
  }
  so.single = reply_mode == "single";
  so.max_packets = absl::GetFlag(FLAGS_max_reply_packets);
  if (so.max_packets == 0 || so.max_packets > 65535) bad_usage("--max-reply-packets must be 1..65535");
  const uint32_t dup_ms = absl::GetFlag(FLAGS_dup_window_ms);
  if (dup_ms > 60000) bad_usage("--dup-window-ms must be 0..60000");
  so.dup_window_ns = int64_t{dup_ms} * 1'000'000;
  so.allow = AllowList::parse(absl::GetFlag(FLAGS_allow));
  const uint32_t mtu = absl::GetFlag(FLAGS_mtu);
  if (mtu < mold::kPacketHeaderSize + mold::kBlockLengthSize + pollux::itch::kMaxMessageSize || mtu > 65507) {
    bad_usage("--mtu must be 72..65507");
  }
  const uint32_t reply_mtu = absl::GetFlag(FLAGS_reply_mtu);
  if (reply_mtu != 0 && (reply_mtu < mold::kPacketHeaderSize + mold::kBlockLengthSize + pollux::itch::kMaxMessageSize ||
                         reply_mtu > 65507)) {
    bad_usage("--reply-mtu must be 0 (= --mtu) or 72..65507");
  }
  so.mtu = reply_mtu != 0 ? reply_mtu : mtu;
  const uint32_t hb_ms = absl::GetFlag(FLAGS_heartbeat_ms);
  if (hb_ms == 0) bad_usage("--heartbeat-ms must be >= 1");
  lines.delay_b = std::chrono::microseconds(absl::GetFlag(FLAGS_delay_b_us));
  so.answer = !absl::GetFlag(FLAGS_no_rerequest);
  so.serve_delay_ns = int64_t{absl::GetFlag(FLAGS_serve_delay_ms)} * 1'000'000;
  const std::string iface = absl::GetFlag(FLAGS_interface);
  const std::string summary = absl::GetFlag(FLAGS_summary_json);
  std::optional<in_addr> iface_addr;
  int iface_index = 0;
  if (!iface.empty()) {
    iface_index = static_cast<int>(if_nametoindex(iface.c_str()));
    if (iface_index == 0) bad_usage("--interface '" + iface + "': no such interface");
    iface_addr = interface_address(iface);
    if (!iface_addr)
      bad_usage("--interface '" + iface +
                "' has no IPv4 address to send the lines from: assign one, or leave --interface out "
                "(the route's interface)");
  }

  // The stream: the generator's bytes, or a regular file read with pread (a FIFO, a directory
  // or a device is refused here without blocking). Validated whole before anything is sent.
  std::optional<Input> input;
  if (generate != 0) {
    pollux::itch::GeneratorOptions o;
    o.messages = generate;
    o.seed = seed;
    o.symbols = absl::GetFlag(FLAGS_symbols);
    auto g = pollux::itch::generate_itch(o);
    if (!g.ok()) bad_usage("--generate/--symbols: " + std::string(g.status().message()));
    input.emplace(std::move(*g));
  } else {
    auto f = pollux::itch::ChunkReader::open(itch_path);
    if (!f.ok()) {
      std::fprintf(stderr, "%s: %s\n", kProg, f.status().ToString().c_str());
      return f.status().code() == absl::StatusCode::kDataLoss ? kDataErr : 66;  // EX_NOINPUT
    }
    input.emplace(std::move(*f));
  }
  {
    MessageView m;
    while (input->next(&m)) {
    }
    absl::Status s = input->status();
    if (s.ok()) s = input->rewind();
    if (!s.ok()) {
      std::fprintf(stderr, "%s: %s\n", kProg, s.ToString().c_str());
      return kDataErr;
    }
  }

  lines.fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  const int req_fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (lines.fd < 0 || req_fd < 0) {
    std::fprintf(stderr, "%s: socket: %s\n", kProg, std::strerror(errno));
    return 71;  // EX_OSERR
  }
  const int one = 1, ttl = 1, sndbuf = 4 << 20, rcvbuf = 4 << 20;
  ::setsockopt(lines.fd, IPPROTO_IP, IP_MULTICAST_LOOP, &one, sizeof one);
  ::setsockopt(lines.fd, IPPROTO_IP, IP_MULTICAST_TTL, &ttl, sizeof ttl);
  ::setsockopt(lines.fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
  ::setsockopt(req_fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
  // Room for a burst of requests while the server thread is not scheduled.
  if (::setsockopt(req_fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf) != 0) {
    ::setsockopt(req_fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  }
  // The local address each request arrived on, to answer from it, and when it arrived.
  if (::setsockopt(req_fd, IPPROTO_IP, IP_PKTINFO, &one, sizeof one) != 0 ||
      ::setsockopt(req_fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one) != 0) {
    std::fprintf(stderr, "%s: IP_PKTINFO/SO_TIMESTAMPNS: %s\n", kProg, std::strerror(errno));
    return 71;
  }
  if (iface_addr) {
    // The interface by index and its address as the packets' source: by index alone the
    // kernel picks the source from the route to the group (another interface's address).
    ip_mreqn m{};
    m.imr_ifindex = iface_index;
    m.imr_address = *iface_addr;
    if (::setsockopt(lines.fd, IPPROTO_IP, IP_MULTICAST_IF, &m, sizeof m) != 0) {
      std::fprintf(stderr, "%s: IP_MULTICAST_IF %s: %s\n", kProg, iface.c_str(), std::strerror(errno));
      return 71;
    }
    sockaddr_in src{};
    src.sin_family = AF_INET;
    src.sin_addr = *iface_addr;
    if (::bind(lines.fd, reinterpret_cast<sockaddr*>(&src), sizeof src) != 0) {
      std::fprintf(stderr, "%s: bind the lines' socket to %s (%s): %s\n", kProg, addr_text(*iface_addr).c_str(),
                   iface.c_str(), std::strerror(errno));
      return 71;
    }
  }
  sockaddr_in rq{};
  rq.sin_family = AF_INET;
  rq.sin_addr.s_addr = htonl(INADDR_ANY);
  rq.sin_port = htons(static_cast<uint16_t>(req_port));
  if (::bind(req_fd, reinterpret_cast<sockaddr*>(&rq), sizeof rq) != 0) {
    std::fprintf(stderr, "%s: bind re-request port %u: %s\n", kProg, req_port, std::strerror(errno));
    return 71;
  }

  Shared shared;
  shared.history = std::make_unique<History>(history);
  shared.session = mold::Session::from(session_name);
  mold::Session session = shared.session;  // the line sender's copy (it is the only writer)
  std::vector<SessionStat> sessions;
  sessions.reserve(2);
  sessions.push_back({session_name, 0});
  Server server(req_fd, shared, std::move(so));
  if (!server.start()) {
    std::fprintf(stderr, "%s: eventfd: %s\n", kProg, std::strerror(errno));
    return 71;
  }

  const auto hb = std::chrono::milliseconds(hb_ms);
  // Waits until `due`, sending heartbeats (`next_seq`) and delayed line B packets meanwhile.
  // It sleeps until 1 ms before and spins (yielding) the rest, for a pace finer than the
  // sleep's granularity.
  auto wait_until = [&](Clock::time_point due, uint64_t next_seq) {
    for (;;) {
      lines.flush_delayed(false);
      auto now = Clock::now();
      if (now >= due) return;
      if (now - lines.last_send >= hb) {
        uint8_t b[mold::kPacketHeaderSize];
        lines.send_control(mold::encode_heartbeat(b, session, next_seq));
        ++lines.c.heartbeats;
      }
      const auto wake = std::min({due, lines.last_send + hb, lines.next_delayed()});
      now = Clock::now();
      if (wake - now > std::chrono::milliseconds(2)) {
        std::this_thread::sleep_until(wake - std::chrono::milliseconds(1));
      } else {
        std::this_thread::yield();
      }
    }
  };

  const auto t_start = Clock::now();
  lines.last_send = t_start;  // the first heartbeat is due a heartbeat interval from here
  uint64_t ts0 = 0;
  bool have_ts0 = false;
  std::vector<uint8_t> buf(mtu);
  MessageView m;
  bool have = input->next(&m);
  uint64_t sent = 0;   // messages sent in this session (the next is sent + 1)
  uint64_t total = 0;  // messages sent in all sessions (pacing, --session-change-at, --pause-at)
  auto t0 = t_start;
  const uint64_t change_at = absl::GetFlag(FLAGS_session_change_at);
  const uint64_t pause_at = absl::GetFlag(FLAGS_pause_at);
  const uint32_t pause_ms = absl::GetFlag(FLAGS_pause_ms);
  const auto pause_len = std::chrono::milliseconds(pause_ms);
  uint8_t eos[mold::kPacketHeaderSize];
  while (have) {
    // Pace by the packet's first message: its index (fixed rate) or its timestamp (--speed).
    Clock::time_point due = Clock::time_point::min();
    if (rate > 0) {
      due = t0 + std::chrono::nanoseconds(static_cast<int64_t>(static_cast<double>(total) * 1e9 / rate));
    } else if (speed > 0) {
      if (!have_ts0) {
        ts0 = m.timestamp();
        have_ts0 = true;
      }
      const double dt = m.timestamp() >= ts0 ? static_cast<double>(m.timestamp() - ts0) / speed : 0;
      due = t0 + std::chrono::nanoseconds(static_cast<int64_t>(dt));
    }
    wait_until(due, sent + 1);
    mold::PacketBuilder pb(buf);
    (void)pb.begin(session, sent + 1);
    // A packet holds consecutive messages up to the MTU; with a fixed rate only those due; it
    // ends at a session change or a pause.
    const uint64_t cut = std::min(change_at > total ? change_at : UINT64_MAX, pause_at > total ? pause_at : UINT64_MAX);
    const auto now = Clock::now();
    do {
      if (!pb.add(m.bytes())) break;
      have = input->next(&m);  // the bytes are in the packet: the view may die
      if (total + pb.count() == cut) break;
      if (rate > 0 && have &&
          t0 + std::chrono::nanoseconds(static_cast<int64_t>(static_cast<double>(total + pb.count()) * 1e9 / rate)) >
              now) {
        break;
      }
      if (speed > 0 && have && m.timestamp() > ts0 &&
          t0 + std::chrono::nanoseconds(static_cast<int64_t>(static_cast<double>(m.timestamp() - ts0) / speed)) > now) {
        break;
      }
    } while (have);
    const uint16_t n = pb.count();
    const std::span<const uint8_t> packet = pb.finish();
    {
      // In the history before it is on a line: a gap a receiver sees is already servable.
      std::lock_guard<std::mutex> l(shared.mu);
      shared.history->append_packet(packet);
    }
    lines.send_data(packet, n);
    sent += n;
    total += n;
    sessions.back().messages += n;
    if (!have) break;
    if (total == change_at) {
      // End of this session on both lines, then the next one from sequence 1 with a history
      // of its own (requests for the old session are refused as another session's).
      lines.send_control(mold::encode_end_of_session(eos, session, sent + 1));
      ++lines.c.end_of_session;
      session = next_session;
      {
        std::lock_guard<std::mutex> l(shared.mu);
        shared.session = next_session;
        shared.history->reset();
        ++shared.generation;
      }
      sessions.push_back({next_name, 0});
      lines.last_double = false;
      sent = 0;
      ++lines.c.session_changes;
    }
    if (total == pause_at) {
      // Only heartbeats (requests are answered all along); the pace resumes afterwards.
      std::fprintf(stderr, "%s: pause at message %llu for %u ms\n", kProg, (unsigned long long)total, pause_ms);
      std::fflush(stderr);
      wait_until(Clock::now() + pause_len, sent + 1);
      t0 += pause_len;
      ++lines.c.pauses;
    }
  }
  // A file that shrank while it was sent: end the session where it stopped (receivers see
  // the end rather than a silent line) and exit 65 without lingering.
  const absl::Status input_status = input->status();
  if (!input_status.ok()) {
    std::fprintf(stderr, "%s: %s\n", kProg, std::string(input_status.message()).c_str());
    std::fflush(stderr);
  }

  // End of session on both lines, a few times: a receiver that loses it would wait forever.
  for (int i = 0; i < 3; ++i) {
    lines.send_control(mold::encode_end_of_session(eos, session, sent + 1));
    ++lines.c.end_of_session;
  }
  // Serving goes on until no valid request has come for --linger-ms: a requester still
  // retrying after a slow start (a loaded host, a sanitizer build) is answered rather than
  // left to time out against a closed port, and junk cannot keep the exchange alive.
  const auto linger = std::chrono::milliseconds(input_status.ok() ? absl::GetFlag(FLAGS_linger_ms) : 0);
  const auto ended = Clock::now();
  for (;;) {
    const int64_t lv = server.last_valid_ns();
    const auto last_valid = lv == std::numeric_limits<int64_t>::min()
                                ? ended
                                : std::max(ended, Clock::time_point(std::chrono::nanoseconds(lv)));
    const auto linger_end = last_valid + linger;
    auto now = Clock::now();
    lines.flush_delayed(now >= linger_end);
    if (now >= linger_end && !lines.delayed_pending()) break;
    if (now - lines.last_send >= hb) {  // after the end, the end is the heartbeat
      lines.send_control(mold::encode_end_of_session(eos, session, sent + 1));
      ++lines.c.end_of_session;
    }
    const auto wake =
        std::min({linger_end, lines.last_send + hb, lines.next_delayed(), now + std::chrono::milliseconds(50)});
    std::this_thread::sleep_until(wake);
  }
  server.stop();
  const ServerCounters& sc = server.counters();
  const LineCounters& lc = lines.c;
  std::string per_session;
  for (const SessionStat& s : sessions) {
    per_session += (per_session.empty() ? "" : ", ") + s.name + " " + std::to_string(s.messages);
  }
  std::fprintf(stderr,
               "%s: %llu messages in %zu session%s (%s), A %llu packets (%llu dropped), B %llu packets (%llu dropped), "
               "%llu requests (%llu served, %llu duplicate, %llu refused)\n",
               kProg, (unsigned long long)total, sessions.size(), sessions.size() == 1 ? "" : "s", per_session.c_str(),
               (unsigned long long)lc.packets_a, (unsigned long long)lc.dropped_a, (unsigned long long)lc.packets_b,
               (unsigned long long)lc.dropped_b, (unsigned long long)sc.requests, (unsigned long long)sc.served,
               (unsigned long long)sc.requests_duplicate, (unsigned long long)sc.refused());
  if (!summary.empty() && !write_summary(summary, lc, sc, sent + 1, reply_mode.c_str(), sessions)) {
    std::fprintf(stderr, "%s: cannot write %s: %s\n", kProg, summary.c_str(), std::strerror(errno));
    return 73;  // EX_CANTCREAT
  }
  ::close(lines.fd);
  ::close(req_fd);
  return input_status.ok() ? 0 : kDataErr;
}
