// pollux-exchange: an exchange simulator for feed-handler tests. Sends an ITCH stream as
// MoldUDP64 on two multicast lines (A and B), heartbeats when idle, ends the session, and
// serves re-requests from a bounded history. Faults (drops per line, a delayed line B, a
// silent re-request server) are seeded, so a seed reproduces the same drops.
//
//   pollux-exchange --generate 100000 --line-a 239.255.0.1:26400 --line-b 239.255.0.2:26401
//     --rerequest-port 26402 --interface lo --rate 200000 --drop-b 5
//
// Single-threaded: one loop paces the sends and polls the request socket in between.
#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "itch/generator.h"
#include "itch/mapped_file.h"
#include "itch/messages.h"
#include "itch/moldudp64.h"
#include "itch/random.h"
#include "itch/reader.h"
#include "tools/common/cli.h"

ABSL_FLAG(std::string, itch, "", "ITCH 5.0 BinaryFILE to send (or --generate).");
ABSL_FLAG(uint64_t, generate, 0, "Send N generated messages instead of a file (itch/generator.h).");
ABSL_FLAG(uint32_t, symbols, 8, "Symbols of the generated stream (--generate only).");
ABSL_FLAG(std::string, line_a, "", "Line A multicast group ADDR:PORT (required).");
ABSL_FLAG(std::string, line_b, "", "Line B multicast group ADDR:PORT (required).");
ABSL_FLAG(uint32_t, rerequest_port, 0, "UDP port of the re-request server, 1..65535 (required).");
ABSL_FLAG(std::string, interface, "", "Interface name the multicast lines leave by (default: the route's).");
ABSL_FLAG(double, drop_a, 0, "Percent of line A data packets to drop, 0..100.");
ABSL_FLAG(double, drop_b, 0, "Percent of line B data packets to drop, 0..100.");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the drop decisions and of --generate.");
ABSL_FLAG(std::string, rate, "", "Messages per second, or 'max'. Default: max unless --speed is given.");
ABSL_FLAG(double, speed, 0, "Pace by the file's timestamps times X (2 = twice as fast); excludes --rate.");
ABSL_FLAG(std::string, session, "POLLUX0001", "MoldUDP64 session name (1..10 characters, space-padded).");
ABSL_FLAG(uint32_t, linger_ms, 2000, "Keep serving re-requests until none has come for this long after the end of session.");
ABSL_FLAG(uint64_t, history, 1000000, "Re-request history depth in messages (>= 1).");
ABSL_FLAG(uint64_t, request_limit, 100000, "Re-requested messages per second per requester (>= 1).");
ABSL_FLAG(uint32_t, max_requesters, 4096,
          "Requesters (address:port) rate-limited at once; a newcomer beyond them while all were active in the last second is refused (>= 1).");
ABSL_FLAG(uint32_t, delay_b_us, 0, "Send every line B packet this many microseconds after line A.");
ABSL_FLAG(bool, no_rerequest, false, "Fault: receive re-requests but never answer them.");
ABSL_FLAG(uint32_t, heartbeat_ms, 1000, "Heartbeat after this long without a packet (>= 1).");
ABSL_FLAG(uint32_t, mtu, 1400, "Packet budget in bytes (UDP payload), 72..65507.");
ABSL_FLAG(std::string, summary_json, "", "Write what was sent and served to this file at exit.");
ABSL_FLAG(uint64_t, session_change_at, 0,
          "After this many messages, end the session (end of session on both lines) and go on in --next-session, sequence numbers from 1 (0 = never).");
ABSL_FLAG(std::string, next_session, "POLLUX0002", "The session --session-change-at moves to (1..10 characters).");
ABSL_FLAG(uint64_t, pause_at, 0, "After this many messages, send only heartbeats for --pause-ms (0 = never).");
ABSL_FLAG(uint32_t, pause_ms, 1000, "Length of the --pause-at pause.");

namespace {

using pollux::itch::MessageView;
namespace mold = pollux::itch::mold;
using Clock = std::chrono::steady_clock;

constexpr int kUsage = 64;  // EX_USAGE
constexpr const char* kProg = "pollux-exchange";
constexpr const char* kFlags[] = {"itch",      "generate",       "symbols",      "line_a",      "line_b",
                                  "rerequest_port", "interface", "drop_a",       "drop_b",      "seed",
                                  "rate",      "speed",          "session",      "linger_ms",   "history",
                                  "request_limit", "max_requesters", "delay_b_us", "no_rerequest", "heartbeat_ms", "mtu",
                                  "summary_json", "session_change_at", "next_session", "pause_at", "pause_ms"};

std::string Dashed(std::string s) {
  for (char& c : s) c = c == '_' ? '-' : c;
  return s;
}

void PrintHelp() {
  std::printf(
      "usage: pollux-exchange (--itch FILE | --generate N) --line-a ADDR:PORT --line-b ADDR:PORT\n"
      "                       --rerequest-port PORT [--interface IF] [--drop-a PCT] [--drop-b PCT]\n"
      "                       [--seed N] [--rate MSG_PER_S | --rate max | --speed X] [--session NAME]\n"
      "                       [--linger-ms MS] [--history N] [--request-limit N] [--max-requesters N]\n"
      "                       [--delay-b-us US] [--no-rerequest] [--heartbeat-ms MS] [--mtu BYTES]\n"
      "                       [--summary-json FILE] [--session-change-at N [--next-session NAME]]\n"
      "                       [--pause-at N [--pause-ms MS]]\n\n"
      "Sends an ITCH 5.0 stream as MoldUDP64 on two multicast lines, then end of session (x3),\n"
      "and answers re-requests (Session, SequenceNumber, Count) from the last --history messages\n"
      "with downstream packets unicast to the requester. Drops apply to data packets only.\n\n");
  for (const char* name : kFlags) {
    const absl::CommandLineFlag* f = absl::FindCommandLineFlag(name);
    if (f == nullptr) continue;
    std::printf("  --%-16s %s (default: %s)\n", Dashed(name).c_str(), f->Help().c_str(),
                f->DefaultValue().empty() ? "\"\"" : f->DefaultValue().c_str());
  }
  std::printf("  --%-16s %s\n  %-18s %s\n", "version", "print \"pollux-exchange <version>\" and exit", "-h, --help",
              "this text");
}

[[noreturn]] void UsageError(const std::string& msg) {
  std::fprintf(stderr, "%s: %s (see --help)\n", kProg, msg.c_str());
  std::exit(kUsage);
}

// Abseil's ParseCommandLine exits 1 and wants underscores; the contract is dashes and 64.
void ParseFlags(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a.size() < 3 || a.substr(0, 2) != "--") UsageError("unexpected argument \"" + std::string(a) + "\"");
    a.remove_prefix(2);
    std::string name(a.substr(0, a.find('=')));
    const bool has_value = a.find('=') != std::string_view::npos;
    for (char& c : name) c = c == '-' ? '_' : c;
    bool known = false;
    for (const char* k : kFlags) known = known || name == k;
    absl::CommandLineFlag* f = known ? absl::FindCommandLineFlag(name) : nullptr;
    if (f == nullptr) {
      std::vector<std::string> candidates{"--help", "--version"};
      for (const char* k : kFlags) candidates.push_back("--" + Dashed(k));
      std::string m = pollux::cli::unknown_flag_message("--" + Dashed(name), candidates);
      UsageError(m.substr(0, m.rfind(" (see --help)")));
    }
    std::string value;
    if (has_value) {
      value = std::string(a.substr(a.find('=') + 1));
    } else if (f->IsOfType<bool>()) {
      value = "true";
    } else {
      if (i + 1 >= argc) UsageError("flag '--" + Dashed(name) + "' needs a value");
      value = argv[++i];
    }
    std::string err;
    if (!f->ParseFrom(value, &err)) {
      UsageError("bad value '" + value + "' for --" + Dashed(name) + ": " + err);
    }
  }
}

sockaddr_in ParseEndpoint(const std::string& flag, const std::string& s, bool multicast) {
  const size_t colon = s.rfind(':');
  sockaddr_in a{};
  a.sin_family = AF_INET;
  uint32_t port = 0;
  if (colon == std::string::npos || inet_pton(AF_INET, s.substr(0, colon).c_str(), &a.sin_addr) != 1 ||
      !absl::SimpleAtoi(s.substr(colon + 1), &port) || port == 0 || port > 65535) {
    UsageError("--" + flag + " '" + s + "' is not ADDR:PORT (IPv4, port 1..65535)");
  }
  if (multicast && !IN_MULTICAST(ntohl(a.sin_addr.s_addr))) {
    UsageError("--" + flag + " '" + s + "' is not a multicast address (224.0.0.0/4)");
  }
  a.sin_port = htons(static_cast<uint16_t>(port));
  return a;
}

// The last `depth` messages' bytes: a byte ring big enough for `depth` messages of the largest
// type (so the newest `depth` are always whole) and each message's start, allocated once.
class History {
 public:
  explicit History(uint64_t depth)
      : depth_(depth), cap_(depth * pollux::itch::kMaxMessageSize),
        bytes_(new uint8_t[cap_]), starts_(new uint64_t[depth]) {}

  void Append(std::span<const uint8_t> m) {
    starts_[next_seq_ % depth_] = pos_;
    const size_t at = pos_ % cap_, first = std::min<size_t>(m.size(), cap_ - at);
    std::memcpy(&bytes_[at], m.data(), first);
    std::memcpy(&bytes_[0], m.data() + first, m.size() - first);
    pos_ += m.size();
    ++next_seq_;
  }
  [[nodiscard]] uint64_t oldest() const { return next_seq_ > depth_ ? next_seq_ - depth_ : 1; }
  [[nodiscard]] uint64_t next() const { return next_seq_; }
  // Copies message `seq` (oldest() <= seq < next()) to out and returns its size.
  size_t Copy(uint64_t seq, uint8_t* out) const {
    const uint64_t start = starts_[seq % depth_];
    const size_t at = start % cap_;
    const size_t n = pollux::itch::MessageSize(bytes_[at]);
    const size_t first = std::min<size_t>(n, cap_ - at);
    std::memcpy(out, &bytes_[at], first);
    std::memcpy(out + first, &bytes_[0], n - first);
    return n;
  }

 private:
  uint64_t depth_;
  uint64_t cap_;
  std::unique_ptr<uint8_t[]> bytes_;
  std::unique_ptr<uint64_t[]> starts_;
  uint64_t pos_ = 0;
  uint64_t next_seq_ = 1;
};

struct Counters {
  uint64_t packets_a = 0, packets_b = 0, messages_a = 0, messages_b = 0;
  uint64_t dropped_a = 0, dropped_b = 0, heartbeats = 0, end_of_session = 0;
  // Data packets dropped on both lines: what only a re-request can recover. A run is a
  // stretch of consecutive such packets (one missing range at the receiver).
  uint64_t messages_dropped_a = 0, messages_dropped_b = 0;
  uint64_t dropped_both = 0, messages_dropped_both = 0, double_drop_runs = 0;
  uint64_t session_changes = 0, pauses = 0;
  uint64_t requests = 0, served = 0, clamped = 0, reply_packets = 0, reply_messages = 0;
  uint64_t refused_malformed = 0, refused_wrong_session = 0, refused_too_old = 0;
  uint64_t refused_beyond_sent = 0, refused_rate_limited = 0, refused_disabled = 0;
  uint64_t send_errors = 0;
};

struct Bucket {
  double tokens;
  Clock::time_point last;
};

class Exchange {
 public:
  int tx_fd = -1, req_fd = -1;
  sockaddr_in line_a{}, line_b{};
  mold::Session session;
  uint32_t mtu = 1400;
  uint32_t drop_a_ppm = 0, drop_b_ppm = 0;
  pollux::itch::Xoshiro256 rng_a{1}, rng_b{1};
  std::chrono::microseconds delay_b{0};
  bool answer = true;
  double request_limit = 100000;
  size_t max_requesters = 4096;
  std::unique_ptr<History> history;
  Counters c;
  Clock::time_point last_send = Clock::now();
  bool last_double = false;  // the previous data packet was dropped on both lines

  void Send(int fd, const sockaddr_in& to, std::span<const uint8_t> p) {
    if (::sendto(fd, p.data(), p.size(), 0, reinterpret_cast<const sockaddr*>(&to), sizeof to) < 0) ++c.send_errors;
  }

  // One data packet on both lines, each subject to its own drop draw; B may be delayed.
  void SendData(std::span<const uint8_t> p, uint16_t n) {
    last_send = Clock::now();
    const bool drop_a = drop_a_ppm != 0 && rng_a.Below(1000000) < drop_a_ppm;
    const bool drop_b = drop_b_ppm != 0 && rng_b.Below(1000000) < drop_b_ppm;
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
      Send(tx_fd, line_a, p);
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
    if (delay_b.count() == 0) {
      Send(tx_fd, line_b, p);
    } else {
      delayed_.push_back({last_send + delay_b, std::vector<uint8_t>(p.begin(), p.end())});
    }
  }

  void SendControl(std::span<const uint8_t> p) {
    last_send = Clock::now();
    Send(tx_fd, line_a, p);
    if (delay_b.count() == 0) {
      Send(tx_fd, line_b, p);
    } else {
      delayed_.push_back({last_send + delay_b, std::vector<uint8_t>(p.begin(), p.end())});
    }
  }

  void FlushDelayed(bool all) {
    const auto now = Clock::now();
    while (delayed_head_ < delayed_.size() && (all || delayed_[delayed_head_].due <= now)) {
      Send(tx_fd, line_b, delayed_[delayed_head_].bytes);
      ++delayed_head_;
    }
    if (delayed_head_ == delayed_.size()) {
      delayed_.clear();
      delayed_head_ = 0;
    }
  }
  [[nodiscard]] bool DelayedPending() const { return delayed_head_ < delayed_.size(); }

  void Heartbeat(uint64_t next_seq) {
    uint8_t buf[mold::kPacketHeaderSize];
    SendControl(mold::EncodeHeartbeat(buf, session, next_seq));
    ++c.heartbeats;
  }

  // Serves every request waiting on the socket, waiting up to timeout_ms for the first.
  void ServeRequests(int timeout_ms) {
    pollfd pfd{req_fd, POLLIN, 0};
    if (::poll(&pfd, 1, timeout_ms) <= 0) return;
    for (int burst = 0; burst < 64; ++burst) {
      uint8_t in[64];
      sockaddr_in from{};
      socklen_t fl = sizeof from;
      const ssize_t n = ::recvfrom(req_fd, in, sizeof in, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&from), &fl);
      if (n < 0) return;
      Serve(std::span<const uint8_t>(in, static_cast<size_t>(n)), from);
    }
  }

 private:
  struct Delayed {
    Clock::time_point due;
    std::vector<uint8_t> bytes;
  };
  // A test fault, not a fast path: a copy per delayed packet is fine.
  std::vector<Delayed> delayed_;
  size_t delayed_head_ = 0;
  absl::flat_hash_map<uint64_t, Bucket> buckets_;  // at most max_requesters
  std::vector<uint8_t> reply_;

  void Serve(std::span<const uint8_t> in, const sockaddr_in& from) {
    ++c.requests;
    const mold::Request r = mold::ParseRequest(in, &session);
    if (!answer) {
      ++c.refused_disabled;
      return;
    }
    if (r.error == mold::Error::kWrongSession) {
      ++c.refused_wrong_session;
      return;
    }
    if (!r.ok()) {
      ++c.refused_malformed;
      return;
    }
    if (r.sequence >= history->next()) {
      ++c.refused_beyond_sent;
      return;
    }
    if (r.sequence < history->oldest()) {
      ++c.refused_too_old;
      return;
    }
    uint64_t count = std::min<uint64_t>(r.count, history->next() - r.sequence);
    // Token bucket per requester (address and port), one second of burst.
    const uint64_t key = (uint64_t{from.sin_addr.s_addr} << 16) | from.sin_port;
    const auto now = Clock::now();
    if (buckets_.size() >= max_requesters && !buckets_.contains(key)) {
      // Bounded against a flood of (spoofed) sources: a bucket idle for a second is full
      // again, the same as a new one, so those go; if every one is busy, the newcomer is
      // refused as rate limited.
      absl::erase_if(buckets_, [now](const auto& kv) { return now - kv.second.last >= std::chrono::seconds(1); });
      if (buckets_.size() >= max_requesters) {
        ++c.refused_rate_limited;
        return;
      }
    }
    auto [it, fresh] = buckets_.try_emplace(key, Bucket{request_limit, now});
    Bucket& b = it->second;
    if (!fresh) {
      b.tokens = std::min(request_limit,
                          b.tokens + request_limit * std::chrono::duration<double>(now - b.last).count());
      b.last = now;
    }
    if (b.tokens < 1) {
      ++c.refused_rate_limited;
      return;
    }
    if (count > b.tokens) count = static_cast<uint64_t>(b.tokens);
    b.tokens -= static_cast<double>(count);
    if (count < r.count) ++c.clamped;
    ++c.served;
    std::vector<uint8_t>& buf = reply_;
    buf.resize(mtu);  // allocates on the first reply only
    uint8_t msg[pollux::itch::kMaxMessageSize];
    uint64_t seq = r.sequence;
    const uint64_t end = r.sequence + count;
    while (seq < end) {
      mold::PacketBuilder pb(buf);
      (void)pb.Begin(session, seq);
      while (seq < end) {
        const size_t n = history->Copy(seq, msg);
        if (!pb.Add({msg, n})) break;
        ++seq;
      }
      const uint16_t k = pb.count();
      Send(req_fd, from, pb.Finish());
      ++c.reply_packets;
      c.reply_messages += k;
    }
  }
};

bool WriteSummary(const std::string& path, const Counters& c, uint64_t end_seq) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return false;
  std::fprintf(f,
               "{\n  \"packets_a\": %llu,\n  \"packets_b\": %llu,\n  \"messages_a\": %llu,\n"
               "  \"messages_b\": %llu,\n  \"dropped_a\": %llu,\n  \"dropped_b\": %llu,\n"
               "  \"heartbeats\": %llu,\n  \"end_of_session_packets\": %llu,\n"
               "  \"end_of_session_sequence\": %llu,\n  \"requests\": %llu,\n"
               "  \"requests_served\": %llu,\n  \"requests_clamped\": %llu,\n"
               "  \"reply_packets\": %llu,\n  \"reply_messages\": %llu,\n"
               "  \"requests_refused\": %llu,\n  \"refused_malformed\": %llu,\n"
               "  \"refused_wrong_session\": %llu,\n  \"refused_too_old\": %llu,\n"
               "  \"refused_beyond_sent\": %llu,\n  \"refused_rate_limited\": %llu,\n"
               "  \"refused_disabled\": %llu,\n  \"send_errors\": %llu,\n"
               "  \"messages_dropped_a\": %llu,\n  \"messages_dropped_b\": %llu,\n"
               "  \"dropped_both\": %llu,\n  \"messages_dropped_both\": %llu,\n  \"double_drop_runs\": %llu,\n"
               "  \"session_changes\": %llu,\n  \"pauses\": %llu\n}\n",
               (unsigned long long)c.packets_a, (unsigned long long)c.packets_b,
               (unsigned long long)c.messages_a, (unsigned long long)c.messages_b,
               (unsigned long long)c.dropped_a, (unsigned long long)c.dropped_b,
               (unsigned long long)c.heartbeats, (unsigned long long)c.end_of_session,
               (unsigned long long)end_seq, (unsigned long long)c.requests,
               (unsigned long long)c.served, (unsigned long long)c.clamped,
               (unsigned long long)c.reply_packets, (unsigned long long)c.reply_messages,
               (unsigned long long)(c.refused_malformed + c.refused_wrong_session + c.refused_too_old +
                                    c.refused_beyond_sent + c.refused_rate_limited + c.refused_disabled),
               (unsigned long long)c.refused_malformed, (unsigned long long)c.refused_wrong_session,
               (unsigned long long)c.refused_too_old, (unsigned long long)c.refused_beyond_sent,
               (unsigned long long)c.refused_rate_limited, (unsigned long long)c.refused_disabled,
               (unsigned long long)c.send_errors, (unsigned long long)c.messages_dropped_a,
               (unsigned long long)c.messages_dropped_b, (unsigned long long)c.dropped_both,
               (unsigned long long)c.messages_dropped_both, (unsigned long long)c.double_drop_runs,
               (unsigned long long)c.session_changes, (unsigned long long)c.pauses);
  return std::fclose(f) == 0;
}

uint32_t DropPpm(const char* flag, double pct) {
  if (!(pct >= 0 && pct <= 100)) UsageError(std::string("--") + flag + " must be 0..100");
  return static_cast<uint32_t>(std::lround(pct * 10000));
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "-h" || a == "--help" || a == "-help") {
      PrintHelp();
      return 0;
    }
    if (a == "--version") {
      std::printf("%s %s\n", kProg, pollux::cli::version());
      return 0;
    }
  }
  ParseFlags(argc, argv);

  const std::string itch_path = absl::GetFlag(FLAGS_itch);
  const uint64_t generate = absl::GetFlag(FLAGS_generate);
  if (itch_path.empty() == (generate == 0)) UsageError("exactly one of --itch FILE or --generate N is required");
  for (const char* req : {"line_a", "line_b"}) {
    if (absl::FindCommandLineFlag(req)->CurrentValue().empty()) {
      UsageError("--" + Dashed(req) + " ADDR:PORT is required");
    }
  }
  const uint32_t req_port = absl::GetFlag(FLAGS_rerequest_port);
  if (req_port == 0 || req_port > 65535) UsageError("--rerequest-port PORT (1..65535) is required");
  Exchange ex;
  ex.line_a = ParseEndpoint("line-a", absl::GetFlag(FLAGS_line_a), true);
  ex.line_b = ParseEndpoint("line-b", absl::GetFlag(FLAGS_line_b), true);
  ex.drop_a_ppm = DropPpm("drop-a", absl::GetFlag(FLAGS_drop_a));
  ex.drop_b_ppm = DropPpm("drop-b", absl::GetFlag(FLAGS_drop_b));
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  // Distinct streams per line, so line B's drops do not mirror line A's.
  ex.rng_a = pollux::itch::Xoshiro256(seed * 2 + 1);
  ex.rng_b = pollux::itch::Xoshiro256(seed * 2 + 2);
  const std::string rate_s = absl::GetFlag(FLAGS_rate);
  const double speed = absl::GetFlag(FLAGS_speed);
  double rate = 0;  // 0 = as fast as possible
  if (!rate_s.empty() && rate_s != "max" && (!absl::SimpleAtod(rate_s, &rate) || !(rate > 0))) {
    UsageError("--rate '" + rate_s + "' is not a positive number of messages per second or 'max'");
  }
  if (!(speed >= 0) || std::isinf(speed)) UsageError("--speed must be a positive factor");
  if (speed > 0 && !rate_s.empty()) UsageError("--speed and --rate exclude each other");
  const std::string session_name = absl::GetFlag(FLAGS_session);
  if (session_name.empty() || session_name.size() > mold::kSessionSize) {
    UsageError("--session '" + session_name + "' must be 1..10 characters");
  }
  ex.session = mold::Session::From(session_name);
  const std::string next_name = absl::GetFlag(FLAGS_next_session);
  if (next_name.empty() || next_name.size() > mold::kSessionSize || next_name == session_name) {
    UsageError("--next-session '" + next_name + "' must be 1..10 characters and differ from --session");
  }
  const mold::Session next_session = mold::Session::From(next_name);
  const uint64_t history = absl::GetFlag(FLAGS_history);
  if (history == 0 || history > (uint64_t{1} << 28)) UsageError("--history must be 1..268435456 messages");
  const uint64_t limit = absl::GetFlag(FLAGS_request_limit);
  if (limit == 0) UsageError("--request-limit must be >= 1");
  ex.request_limit = static_cast<double>(limit);
  ex.max_requesters = absl::GetFlag(FLAGS_max_requesters);
  if (ex.max_requesters == 0) UsageError("--max-requesters must be >= 1");
  ex.mtu = absl::GetFlag(FLAGS_mtu);
  if (ex.mtu < mold::kPacketHeaderSize + mold::kBlockLengthSize + pollux::itch::kMaxMessageSize || ex.mtu > 65507) {
    UsageError("--mtu must be 72..65507");
  }
  const uint32_t hb_ms = absl::GetFlag(FLAGS_heartbeat_ms);
  if (hb_ms == 0) UsageError("--heartbeat-ms must be >= 1");
  ex.delay_b = std::chrono::microseconds(absl::GetFlag(FLAGS_delay_b_us));
  ex.answer = !absl::GetFlag(FLAGS_no_rerequest);
  const std::string iface = absl::GetFlag(FLAGS_interface);
  const std::string summary = absl::GetFlag(FLAGS_summary_json);

  // The stream: a mapped file or the generator's bytes, scanned once up front so a bad file
  // is refused before anything is sent.
  std::vector<uint8_t> generated;
  std::optional<pollux::itch::MappedFile> mapped;
  std::span<const uint8_t> stream;
  if (generate != 0) {
    pollux::itch::GeneratorOptions o;
    o.messages = generate;
    o.seed = seed;
    o.symbols = absl::GetFlag(FLAGS_symbols);
    auto g = pollux::itch::GenerateItch(o);
    if (!g.ok()) UsageError("--generate/--symbols: " + std::string(g.status().message()));
    generated = std::move(*g);
    stream = generated;
  } else {
    auto m = pollux::itch::MappedFile::Open(itch_path);
    if (!m.ok()) {
      std::fprintf(stderr, "%s: %s\n", kProg, m.status().ToString().c_str());
      return 66;  // EX_NOINPUT
    }
    mapped.emplace(std::move(*m));
    stream = mapped->bytes();
  }
  if (const auto r = pollux::itch::ForEachMessage(stream, [](MessageView) {}); !r.ok()) {
    std::fprintf(stderr, "%s: %s\n", kProg, r.ToStatus().ToString().c_str());
    return 65;  // EX_DATAERR
  }

  ex.tx_fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ex.req_fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (ex.tx_fd < 0 || ex.req_fd < 0) {
    std::fprintf(stderr, "%s: socket: %s\n", kProg, std::strerror(errno));
    return 71;  // EX_OSERR
  }
  const int one = 1, ttl = 1, sndbuf = 4 << 20;
  ::setsockopt(ex.tx_fd, IPPROTO_IP, IP_MULTICAST_LOOP, &one, sizeof one);
  ::setsockopt(ex.tx_fd, IPPROTO_IP, IP_MULTICAST_TTL, &ttl, sizeof ttl);
  ::setsockopt(ex.tx_fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
  ::setsockopt(ex.req_fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
  if (!iface.empty()) {
    ip_mreqn m{};
    m.imr_ifindex = static_cast<int>(if_nametoindex(iface.c_str()));
    if (m.imr_ifindex == 0) UsageError("--interface '" + iface + "': no such interface");
    if (::setsockopt(ex.tx_fd, IPPROTO_IP, IP_MULTICAST_IF, &m, sizeof m) != 0) {
      std::fprintf(stderr, "%s: IP_MULTICAST_IF %s: %s\n", kProg, iface.c_str(), std::strerror(errno));
      return 71;
    }
  }
  sockaddr_in rq{};
  rq.sin_family = AF_INET;
  rq.sin_addr.s_addr = htonl(INADDR_ANY);
  rq.sin_port = htons(static_cast<uint16_t>(req_port));
  if (::bind(ex.req_fd, reinterpret_cast<sockaddr*>(&rq), sizeof rq) != 0) {
    std::fprintf(stderr, "%s: bind re-request port %u: %s\n", kProg, req_port, std::strerror(errno));
    return 71;
  }
  ex.history = std::make_unique<History>(history);

  const auto hb = std::chrono::milliseconds(hb_ms);
  const auto t_start = Clock::now();
  uint64_t ts0 = 0;
  bool have_ts0 = false;
  std::vector<uint8_t> buf(ex.mtu);
  pollux::itch::MessageCursor cur(stream);
  MessageView m;
  bool have = cur.Next(&m);
  uint64_t sent = 0;   // messages sent in this session (the next is sent + 1)
  uint64_t total = 0;  // messages sent in all sessions (pacing, --session-change-at, --pause-at)
  auto t0 = t_start;
  const uint64_t change_at = absl::GetFlag(FLAGS_session_change_at);
  const uint64_t pause_at = absl::GetFlag(FLAGS_pause_at);
  const auto pause_len = std::chrono::milliseconds(absl::GetFlag(FLAGS_pause_ms));
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
    for (;;) {
      const auto now = Clock::now();
      ex.FlushDelayed(false);
      if (now >= due) break;
      if (now - ex.last_send >= hb) ex.Heartbeat(sent + 1);
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(due - now).count();
      // Wake for the next delayed line B packet too (1 ms granularity).
      const int64_t cap = ex.DelayedPending() ? 1 : hb_ms;
      ex.ServeRequests(static_cast<int>(std::min<int64_t>(left > 1 ? left - 1 : 0, cap)));
    }
    mold::PacketBuilder pb(buf);
    (void)pb.Begin(ex.session, sent + 1);
    // A packet holds consecutive messages up to the MTU; with a fixed rate only those due; it
    // ends at a session change or a pause.
    const uint64_t cut = std::min(change_at > total ? change_at : UINT64_MAX, pause_at > total ? pause_at : UINT64_MAX);
    const auto now = Clock::now();
    do {
      if (!pb.Add(m.bytes())) break;
      ex.history->Append(m.bytes());
      have = cur.Next(&m);
      if (total + pb.count() == cut) break;
      if (rate > 0 && have && t0 + std::chrono::nanoseconds(static_cast<int64_t>(
                                       static_cast<double>(total + pb.count()) * 1e9 / rate)) > now) {
        break;
      }
      if (speed > 0 && have && m.timestamp() > ts0 &&
          t0 + std::chrono::nanoseconds(static_cast<int64_t>(static_cast<double>(m.timestamp() - ts0) / speed)) > now) {
        break;
      }
    } while (have);
    const uint16_t n = pb.count();
    ex.SendData(pb.Finish(), n);
    sent += n;
    total += n;
    // A bounded look at the request socket between packets.
    ex.ServeRequests(0);
    if (total == change_at && have) {
      // End of this session on both lines, then the next one from sequence 1 with a history
      // of its own (requests for the old session are refused as another session's).
      ex.SendControl(mold::EncodeEndOfSession(eos, ex.session, sent + 1));
      ++ex.c.end_of_session;
      ex.session = next_session;
      ex.history = std::make_unique<History>(history);
      ex.last_double = false;
      sent = 0;
      ++ex.c.session_changes;
    }
    if (total == pause_at && have) {
      // Only heartbeats (and re-request answers) for a while; the pace resumes afterwards.
      const auto until = Clock::now() + pause_len;
      for (auto now2 = Clock::now(); now2 < until || ex.DelayedPending(); now2 = Clock::now()) {
        ex.FlushDelayed(now2 >= until);
        if (now2 - ex.last_send >= hb) ex.Heartbeat(sent + 1);
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - now2).count();
        ex.ServeRequests(static_cast<int>(std::clamp<int64_t>(left, 0, ex.DelayedPending() ? 1 : std::min<int64_t>(hb_ms, 50))));
      }
      t0 += pause_len;
      ++ex.c.pauses;
    }
  }
  if (!cur.result().ok()) {  // the first scan passed, so only a changed file gets here
    std::fprintf(stderr, "%s: %s\n", kProg, cur.result().ToStatus().ToString().c_str());
    return 65;
  }

  // End of session on both lines, a few times: a receiver that loses it would wait forever.
  for (int i = 0; i < 3; ++i) {
    ex.SendControl(mold::EncodeEndOfSession(eos, ex.session, sent + 1));
    ++ex.c.end_of_session;
  }
  // The linger restarts with every request: a requester still retrying after a slow start (a
  // loaded host, a sanitizer build) is answered (or refused and counted) rather than left to
  // time out against a closed port.
  const auto linger = std::chrono::milliseconds(absl::GetFlag(FLAGS_linger_ms));
  auto linger_end = Clock::now() + linger;
  uint64_t requests_seen = ex.c.requests;
  while (Clock::now() < linger_end || ex.DelayedPending()) {
    if (ex.c.requests != requests_seen) {
      requests_seen = ex.c.requests;
      linger_end = Clock::now() + linger;
    }
    ex.FlushDelayed(Clock::now() >= linger_end);
    if (Clock::now() - ex.last_send >= hb) {  // after the end, the end is the heartbeat
      ex.SendControl(mold::EncodeEndOfSession(eos, ex.session, sent + 1));
      ++ex.c.end_of_session;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(linger_end - Clock::now()).count();
    ex.ServeRequests(static_cast<int>(std::clamp<int64_t>(left, 0, ex.DelayedPending() ? 1 : 50)));
  }
  std::fprintf(stderr,
               "%s: %llu messages, A %llu packets (%llu dropped), B %llu packets (%llu dropped), "
               "%llu requests (%llu served)\n",
               kProg, (unsigned long long)sent, (unsigned long long)ex.c.packets_a,
               (unsigned long long)ex.c.dropped_a, (unsigned long long)ex.c.packets_b,
               (unsigned long long)ex.c.dropped_b, (unsigned long long)ex.c.requests,
               (unsigned long long)ex.c.served);
  if (!summary.empty() && !WriteSummary(summary, ex.c, sent + 1)) {
    std::fprintf(stderr, "%s: cannot write %s: %s\n", kProg, summary.c_str(), std::strerror(errno));
    return 73;  // EX_CANTCREAT
  }
  ::close(ex.tx_fd);
  ::close(ex.req_fd);
  return 0;
}
