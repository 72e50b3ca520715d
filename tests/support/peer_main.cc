// pollux-test-peer: the other process of the multi-process tests (shm, UDP namespaces, the API
// contract, pollux-doctor, pollux-stat), written on the public API. Options are "--key value"
// (a flag alone means "1"); output is line-oriented "key=value" text the tests parse.
//
//   pollux-test-peer pub --config F --topic T [--count N] [--size N | --max-size N] [--claim]
//                        [--rate MSGS_PER_S] [--go-file PATH] [--ready-fd F] [--counters SCOPE]
//                        [--timeout S]
//       Prints "ready" once its publisher is open (and writes a byte to --ready-fd), waits for
//       a subscriber (and for PATH to exist), prints "connected pid=P", then offers N messages
//       (0: until SIGTERM or SIGKILL) at most RATE a second. Message i (from 1) carries
//       payload.h's payload: --size bytes, or a length derived from i below --max-size (200).
//       Prints "sent=K" every 10000, closes (lingering for the subscribers where the transport
//       does), and prints "pub done sent=N back_pressured=B seconds=S" followed by this
//       process's counters whose scope starts with SCOPE. Gives up (exit 3) when no subscriber
//       came, or no message could be offered, for --timeout seconds (120).
//   pollux-test-peer sub --config F --topic T [--count N] [--until-end] [--no-loss] [--size N |
//                        --max-size N] [--ready-fd F] [--start-fd F] [--state PATH]
//                        [--counters SCOPE] [--timeout S]
//       Prints "ready" once its subscriber is open; with --ready-fd waits until it is connected
//       and writes a byte there, with --start-fd then waits for a byte from there. Checks every
//       message (payload intact, payload index == sequence, per session in order with every
//       hole accounted for by a Gap) and prints "joined", "first", "gap", "end", "progress=K"
//       lines. Stops when one session delivered N messages (+ reported losses), with
//       --until-end when the last session that joined ended, or after --timeout seconds (120)
//       without a message. Prints "sub done received= lost= gaps= bad= order_errors=
//       sessions= ends= died= last=" (+ counters), then a line per session. --state keeps the
//       last delivered (session, sequence) in a small mapped file, so that a restarted
//       subscriber reports exactly what it missed ("resume missed=M from=A to=B"). Exits 0 when
//       it stopped on its condition and every check held (and nothing was lost, --no-loss).
//   pollux-test-peer stat --dir D --role demo|udp|pub|sub [--hold-fd F] [--port P]
//       A process with known counters, positions and errors for pollux-stat (peer_stat.cc).
#include "tests/support/peer.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>

#include "core/counters.h"
#include "core/idle.h"
#include "pollux/pollux.h"
#include "tests/support/payload.h"

namespace pollux::testing::peer {
namespace {

using Clock = std::chrono::steady_clock;

volatile sig_atomic_t g_stop = 0;
void on_term(int) { g_stop = 1; }

void signal_fd(int fd) {
  if (fd >= 0) {
    const char c = 'r';
    (void)!::write(fd, &c, 1);
  }
}

// Counters of this process whose scope starts with `scope_prefix`, as " name=value" pairs.
std::string counters(const Context& ctx, const std::string& scope_prefix) {
  std::string out;
  if (scope_prefix.empty() || ctx.counters_path().empty()) return out;
  auto snap = core::read_counters_file(ctx.counters_path());
  if (!snap.ok()) return out;
  for (const auto& c : snap->counters) {
    if (c.scope.rfind(scope_prefix, 0) == 0) out += " " + c.name + "=" + std::to_string(c.value);
  }
  return out;
}

// The payload length of message i.
struct Sizes {
  explicit Sizes(const Args& a)
      : fixed(static_cast<std::uint32_t>(a.num("size", 0))), max(static_cast<std::uint32_t>(a.num("max-size", 200))) {}
  std::uint32_t of(std::uint64_t i) const { return fixed != 0 ? fixed : payload_len(i, max); }
  std::uint32_t fixed, max;
};

int run_pub(const Args& a) {
  const auto ctx = must(Context::from_file(a.str("config")), "pub: context");
  Publisher pub = must(ctx->publisher(a.str("topic")), "pub");
  const std::uint64_t count = a.num("count", 0);
  const double rate = static_cast<double>(a.num("rate", 0));
  const std::string go = a.str("go-file");
  const bool claim = a.has("claim");
  const Sizes sizes(a);
  const auto patience = std::chrono::seconds(a.num("timeout", 120));
  std::printf("ready\n");
  signal_fd(static_cast<int>(a.num("ready-fd", -1)));
  auto deadline = Clock::now() + patience;
  while (!g_stop && (!pub.is_connected() || (!go.empty() && ::access(go.c_str(), F_OK) != 0))) {
    (void)pub.service();
    if (Clock::now() > deadline) {
      std::fprintf(stderr, "pub: no subscriber within %llds\n", static_cast<long long>(patience.count()));
      return 3;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  std::printf("connected pid=%d\n", ::getpid());
  const auto start = Clock::now();
  std::uint64_t sent = 0, bp = 0, retries = 0;
  static std::byte buf[65536];
  deadline = Clock::now() + patience;
  while (!g_stop && (count == 0 || sent < count)) {
    const std::uint64_t i = sent + 1;
    if (rate > 0) {
      const auto due =
          start + std::chrono::nanoseconds(static_cast<std::int64_t>(static_cast<double>(sent) * 1e9 / rate));
      // Sleeps when the next message is far off (a slow stream need not burn a core).
      while (!g_stop && Clock::now() < due) {
        if (pub.service() != 0) continue;
        if (due - Clock::now() > std::chrono::microseconds(200)) {
          std::this_thread::sleep_for(std::chrono::microseconds(100));
        } else {
          std::this_thread::yield();
        }
      }
    }
    const std::uint32_t len = sizes.of(i);
    std::int64_t r;
    if (claim) {
      Claim c;
      r = pub.claim(len, c);
      if (r >= 0) {
        fill_payload(c.buffer().data(), len, i);
        r = pub.commit(c);
      }
    } else {
      fill_payload(buf, len, i);
      r = pub.offer(buf, len);
    }
    if (r >= 0) {
      ++sent;
      deadline = Clock::now() + patience;
      if (sent % 10000 == 0) std::printf("sent=%llu\n", static_cast<unsigned long long>(sent));
      continue;
    }
    if (r != kBackPressured && r != kNotConnected) {
      std::fprintf(stderr, "pub: offer: %s\n", std::string(result_name(r)).c_str());
      return 4;
    }
    if (r == kBackPressured) ++bp;
    (void)pub.service();
    if (r == kNotConnected) {
      // Every subscriber went away (or timed out): keep the session alive and wait.
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    } else if (++retries % 64 == 0) {
      std::this_thread::yield();  // 2 cores: let the subscriber run
    }
    if ((retries & 0xffff) == 0 && Clock::now() > deadline) {
      std::fprintf(stderr, "pub: stuck at message %llu\n", static_cast<unsigned long long>(i));
      return 3;
    }
  }
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  pub.close();  // lingers until the subscribers confirmed the end (or the transport's linger time)
  std::printf("pub done sent=%llu back_pressured=%llu seconds=%.3f%s\n", static_cast<unsigned long long>(sent),
              static_cast<unsigned long long>(bp), secs, counters(*ctx, a.str("counters")).c_str());
  return 0;
}

struct State {  // mapped: survives SIGKILL of the process
  std::uint32_t session;
  std::uint32_t pad;
  std::uint64_t last_seq;
};

State* map_state(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT, 0600);
  if (fd < 0 || ::ftruncate(fd, sizeof(State)) != 0) std::exit(2);
  void* m = ::mmap(nullptr, sizeof(State), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) std::exit(2);
  return static_cast<State*>(m);
}

int run_sub(const Args& a) {
  const auto ctx = must(Context::from_file(a.str("config")), "sub: context");
  Subscriber sub = must(ctx->subscriber(a.str("topic")), "sub");
  const std::uint64_t count = a.num("count", 0);
  const bool until_end = a.has("until-end"), no_loss = a.has("no-loss");
  const Sizes sizes(a);
  const auto patience = std::chrono::seconds(a.num("timeout", 120));
  State* state = a.has("state") ? map_state(a.str("state")) : nullptr;
  const State prev = state != nullptr ? *state : State{};
  if (prev.session != 0) {
    std::printf("previous session=%08x last=%llu\n", prev.session, static_cast<unsigned long long>(prev.last_seq));
  }
  std::printf("ready\n");

  struct Track {
    std::uint64_t next = 0, received = 0, lost = 0;
    bool first = true;
  };
  std::map<std::uint32_t, Track> tracks;  // per publisher session: sessions interleave across a restart
  std::uint64_t received = 0, lost = 0, gaps = 0, bad = 0, order_errors = 0, sessions = 0, ends = 0, died = 0, last = 0;
  std::uint32_t last_joined = 0;
  bool done = false;
  auto reached = [&](const Track& t) {
    if (count != 0 && t.received + t.lost >= count) done = true;
  };
  auto on_message = [&](const Message& m) {
    std::uint64_t tag = 0;
    if (m.payload.size() >= 8) std::memcpy(&tag, m.payload.data(), 8);
    const auto len = static_cast<std::uint32_t>(m.payload.size());
    if (tag != m.sequence || len != sizes.of(tag) || !check_payload(m.payload.data(), len, tag)) ++bad;
    auto it = tracks.find(m.session_id);
    if (it == tracks.end()) {
      ++order_errors;  // a message before its session's kNewSession event
      it = tracks.emplace(m.session_id, Track{}).first;
    }
    Track& t = it->second;
    if (t.first) {
      t.first = false;
      std::printf("first session=%08x seq=%llu\n", m.session_id, static_cast<unsigned long long>(m.sequence));
      if (prev.session == m.session_id) {
        std::printf(
            "resume missed=%llu from=%llu to=%llu\n", static_cast<unsigned long long>(m.sequence - prev.last_seq - 1),
            static_cast<unsigned long long>(prev.last_seq + 1), static_cast<unsigned long long>(m.sequence - 1));
      }
    } else if (m.sequence != t.next) {
      ++order_errors;
    }
    t.next = m.sequence + 1;
    last = m.sequence;
    ++t.received;
    ++received;
    if (state != nullptr) {
      state->session = m.session_id;
      state->last_seq = m.sequence;
    }
    if (received % 10000 == 0) std::printf("progress=%llu\n", static_cast<unsigned long long>(received));
    reached(t);
  };
  auto on_gap = [&](const Gap& g) {
    Track& t = tracks[g.session_id];
    ++gaps;
    // An overrun gap reports where the reader lapped, not messages it can account for.
    if (g.reason != GapReason::kOverrun) {
      if (!t.first && g.from != t.next) ++order_errors;
      lost += g.count;
      t.lost += g.count;
    }
    if (g.count != 0) t.next = g.from + g.count;
    std::printf("gap session=%08x from=%llu count=%llu reason=%d\n", g.session_id,
                static_cast<unsigned long long>(g.from), static_cast<unsigned long long>(g.count),
                static_cast<int>(g.reason));
    reached(t);
  };
  auto on_event = [&](const StreamEvent& e) {
    if (e.kind == StreamEventKind::kNewSession) {
      ++sessions;
      tracks[e.session_id] = Track{};
      last_joined = e.session_id;
      std::printf("joined session=%08x\n", e.session_id);
      return;
    }
    ++ends;
    if (e.kind == StreamEventKind::kPublisherDied) ++died;
    std::printf("end session=%08x kind=%s\n", e.session_id,
                e.kind == StreamEventKind::kEndOfStream ? "closed" : "died");
    if (until_end && e.session_id == last_joined) done = true;
  };

  auto deadline = Clock::now() + patience;
  if (a.has("ready-fd")) {
    while (!sub.is_connected()) {
      // One message at a time: a test that holds the subscriber back (--start-fd) finds it
      // has read at most one before it is told to start.
      if (sub.poll(on_message, on_gap, on_event, 1) == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
      if (Clock::now() > deadline) {
        std::fprintf(stderr, "sub: no publisher within %llds\n", static_cast<long long>(patience.count()));
        return 3;
      }
    }
    signal_fd(static_cast<int>(a.num("ready-fd", -1)));
  }
  if (a.has("start-fd")) {
    char c;
    (void)!::read(static_cast<int>(a.num("start-fd", -1)), &c, 1);
  }
  // Spin, then yield, then sleep up to 100 us: three busy processes share two cores in the
  // tests, and a subscriber that never sleeps starves the others (and the kernel's softirqs).
  core::BackoffIdle idle;
  idle.max_spins = 100;
  idle.max_yields = 20;
  idle.max_park_ns = 100'000;
  deadline = Clock::now() + patience;
  while (!done && !g_stop) {
    const int n = sub.poll(on_message, on_gap, on_event, 256);
    if (n != 0) {
      deadline = Clock::now() + patience;
    } else if (Clock::now() > deadline) {
      std::printf("timeout\n");
      break;
    }
    idle.idle(n);
  }
  std::printf(
      "sub done received=%llu lost=%llu gaps=%llu bad=%llu order_errors=%llu sessions=%llu ends=%llu died=%llu "
      "last=%llu%s\n",
      static_cast<unsigned long long>(received), static_cast<unsigned long long>(lost),
      static_cast<unsigned long long>(gaps), static_cast<unsigned long long>(bad),
      static_cast<unsigned long long>(order_errors), static_cast<unsigned long long>(sessions),
      static_cast<unsigned long long>(ends), static_cast<unsigned long long>(died),
      static_cast<unsigned long long>(last), counters(*ctx, a.str("counters")).c_str());
  for (const auto& [id, t] : tracks) {  // after the summary line: tests read its fields first
    std::printf("session=%08x received=%llu lost=%llu next=%llu\n", id, static_cast<unsigned long long>(t.received),
                static_cast<unsigned long long>(t.lost), static_cast<unsigned long long>(t.next));
  }
  return done && bad == 0 && order_errors == 0 && (!no_loss || lost == 0) ? 0 : 1;
}

}  // namespace

void fail(const std::string& what) {
  std::printf("error: %s\n", what.c_str());
  std::fflush(stdout);
  std::exit(2);
}

Args::Args(int argc, char** argv, int from) {
  for (int i = from; i < argc; ++i) {
    const std::string k(argv[i]);
    if (k.rfind("--", 0) != 0) {
      std::fprintf(stderr, "unexpected argument %s\n", k.c_str());
      std::exit(64);
    }
    // Constructed, not assigned from a literal: GCC 12 reports a bogus -Wrestrict there.
    std::string v(i + 1 < argc && std::strncmp(argv[i + 1], "--", 2) != 0 ? argv[++i] : "1");
    values_.emplace(k.substr(2), std::move(v));
  }
}

std::string Args::str(const std::string& key) const {
  const auto it = values_.find(key);
  return it == values_.end() ? "" : it->second;
}

std::int64_t Args::num(const std::string& key, std::int64_t otherwise) const {
  const auto it = values_.find(key);
  return it == values_.end() ? otherwise : std::strtoll(it->second.c_str(), nullptr, 10);
}

}  // namespace pollux::testing::peer

namespace {

constexpr const char* kUsage =
    "pollux-test-peer: the other process of Pollux's multi-process tests, on the public API.\n"
    "\n"
    "  pollux-test-peer pub --config F --topic T [--count N] [--size N | --max-size N] [--claim]\n"
    "                       [--rate MSGS_PER_S] [--go-file PATH] [--ready-fd F] [--counters SCOPE] [--timeout S]\n"
    "      Waits for a subscriber, offers N messages (0: until SIGTERM) at most RATE a second, prints\n"
    "      \"pub done sent=N back_pressured=B seconds=S\" and the counters whose scope starts with SCOPE.\n"
    "  pollux-test-peer sub --config F --topic T [--count N] [--until-end] [--no-loss] [--size N |\n"
    "                       --max-size N] [--ready-fd F] [--start-fd F] [--state PATH] [--counters SCOPE]\n"
    "                       [--timeout S]\n"
    "      Checks every message (payload, order, gaps accounted for) and prints \"sub done received=...\".\n"
    "  pollux-test-peer stat --dir D --role demo|udp|pub|sub [--hold-fd F] [--port P]\n"
    "      A process with known counters, positions and errors for pollux-stat.\n"
    "\n"
    "Output is line-oriented key=value text; tests/support/peer_main.cc describes every line.\n";

// The options each role takes: anything else is a typo the run would silently ignore.
bool known_options(const std::string& role, int argc, char** argv) {
  static const char* const kPub[] = {"config", "topic",   "count",    "size",     "max-size", "claim",
                                     "rate",   "go-file", "ready-fd", "counters", "timeout"};
  static const char* const kSub[] = {"config",   "topic",    "count",    "until-end", "no-loss",  "size",
                                     "max-size", "ready-fd", "start-fd", "state",     "counters", "timeout"};
  static const char* const kStat[] = {"dir", "role", "hold-fd", "port"};
  for (int i = 2; i < argc; ++i) {
    if (std::strncmp(argv[i], "--", 2) != 0) continue;
    const std::string k(argv[i] + 2);
    bool ok = false;
    if (role == "pub") {
      for (const char* o : kPub) ok |= k == o;
    } else if (role == "sub") {
      for (const char* o : kSub) ok |= k == o;
    } else {
      for (const char* o : kStat) ok |= k == o;
    }
    if (!ok) {
      std::fprintf(stderr, "pollux-test-peer %s: unknown option --%s (--help lists them)\n", role.c_str(), k.c_str());
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  using pollux::testing::peer::Args;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::fputs(kUsage, stdout);
      return 0;
    }
  }
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s pub|sub|stat --key value ... (--help)\n", argv[0]);
    return 64;
  }
  if (std::strcmp(argv[1], "pub") != 0 && std::strcmp(argv[1], "sub") != 0 && std::strcmp(argv[1], "stat") != 0) {
    std::fprintf(stderr, "unknown role %s (pub, sub or stat; --help)\n", argv[1]);
    return 64;
  }
  if (!known_options(argv[1], argc, argv)) return 64;
  ::signal(SIGTERM, pollux::testing::peer::on_term);
  ::signal(SIGINT, pollux::testing::peer::on_term);
  ::setvbuf(stdout, nullptr, _IOLBF, 0);  // the tests read the lines as they come
  const std::string role = argv[1];
  const Args a(argc, argv, 2);
  if (role == "stat") return pollux::testing::peer::run_stat(a);
  if (!a.has("config") || !a.has("topic")) {
    std::fprintf(stderr, "--config and --topic are required\n");
    return 64;
  }
  if (role == "pub") return pollux::testing::peer::run_pub(a);
  if (role == "sub") return pollux::testing::peer::run_sub(a);
  std::fprintf(stderr, "unknown role %s\n", role.c_str());
  return 64;
}
