// pollux-udp-peer: the publisher and subscriber processes of the UDP namespace tests
// (udp_netns_test.cc runs them with `ip netns exec`). Inline threading: the process's only
// thread drives its endpoint. Output is line-oriented "key=value" text the test parses.
//
//   pollux-udp-peer pub --config F --topic T --count N [--rate MSGS_PER_S] [--go-file PATH]
//       waits until a subscriber is connected (and PATH exists), offers N messages (0 = until
//       SIGTERM) whose payload starts with their 1-based index, prints "sent=K" every 10000,
//       closes (lingering for the subscribers) and prints a summary with its counters.
//   pollux-udp-peer sub --config F --topic T [--expect N] [--until-end] [--state PATH] [--timeout S]
//       checks every session is delivered in order without duplicates (payload index ==
//       sequence), prints "joined", "first", "progress=K", "end" lines and a summary; exits when
//       N messages (+ reported losses) of one session arrived, or at end of stream with
//       --until-end. --state keeps the last delivered (session, sequence) in a small mapped file
//       so a restarted subscriber reports exactly what it missed ("resume missed=M").
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
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

namespace {

volatile sig_atomic_t g_stop = 0;
void on_term(int) { g_stop = 1; }

std::map<std::string, std::string> parse_args(int argc, char** argv, int from) {
  std::map<std::string, std::string> a;
  for (int i = from; i < argc; ++i) {
    const std::string k(argv[i]);
    if (k.rfind("--", 0) != 0) continue;
    // Constructed, not assigned from a literal: GCC 12 reports a bogus -Wrestrict there.
    std::string v(i + 1 < argc && std::strncmp(argv[i + 1], "--", 2) != 0 ? argv[++i] : "1");
    a.emplace(k.substr(2), std::move(v));
  }
  return a;
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Counters of this process whose scope starts with `scope_prefix`, as " name=value" pairs.
std::string counters(const pollux::Context& ctx, const std::string& scope_prefix) {
  std::string out;
  if (ctx.counters_path().empty()) return out;
  auto snap = pollux::core::read_counters_file(ctx.counters_path());
  if (!snap.ok()) return out;
  for (const auto& c : snap->counters) {
    if (c.scope.rfind(scope_prefix, 0) == 0) out += " " + c.name + "=" + std::to_string(c.value);
  }
  return out;
}

struct State {  // mapped: survives SIGKILL of the process
  std::uint32_t session;
  std::uint32_t pad;
  std::uint64_t last_seq;
};

int run_pub(const std::map<std::string, std::string>& a) {
  auto ctx = pollux::Context::from_file(a.at("config"));
  if (!ctx.ok()) {
    std::fprintf(stderr, "pub: %s\n", std::string(ctx.status().message()).c_str());
    return 2;
  }
  auto pub = (*ctx)->publisher(a.at("topic"));
  if (!pub.ok()) {
    std::fprintf(stderr, "pub: %s\n", std::string(pub.status().message()).c_str());
    return 2;
  }
  const std::uint64_t count = a.count("count") ? std::strtoull(a.at("count").c_str(), nullptr, 10) : 0;
  const double rate = a.count("rate") ? std::atof(a.at("rate").c_str()) : 0;
  const std::string go = a.count("go-file") ? a.at("go-file") : "";
  while (!g_stop && (!pub->is_connected() || (!go.empty() && access(go.c_str(), F_OK) != 0))) {
    pub->service();
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  std::printf("connected pid=%d\n", getpid());
  std::fflush(stdout);
  const std::int64_t start = now_ns();
  const std::uint64_t pid = static_cast<std::uint64_t>(getpid());  // a syscall: not per message
  std::uint64_t sent = 0, bp = 0;
  while (!g_stop && (count == 0 || sent < count)) {
    if (rate > 0) {
      const std::int64_t due = start + static_cast<std::int64_t>(static_cast<double>(sent) * 1e9 / rate);
      while (now_ns() < due && !g_stop) {
        if (pub->service() == 0) std::this_thread::yield();
      }
    }
    std::uint64_t payload[4] = {sent + 1, pid, 0, 0};
    const std::int64_t rc = pub->offer(payload, sizeof payload);
    if (rc >= 0) {
      ++sent;
      if (sent % 10000 == 0) {
        std::printf("sent=%llu\n", static_cast<unsigned long long>(sent));
        std::fflush(stdout);
      }
    } else if (rc == pollux::kBackPressured) {
      ++bp;
      pub->service();
      std::this_thread::yield();
    } else if (rc == pollux::kNotConnected) {
      // Every subscriber went away (or timed out): keep the session alive and wait.
      pub->service();
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    } else {
      std::fprintf(stderr, "pub: offer: %s\n", std::string(pollux::result_name(rc)).c_str());
      return 3;
    }
  }
  const double secs = static_cast<double>(now_ns() - start) / 1e9;
  const std::string before = counters(**ctx, "udp pub");
  pub->close();  // lingers until the subscribers confirmed the end (or udp.linger_ms)
  std::printf("pub done sent=%llu back_pressured=%llu seconds=%.3f%s\n", static_cast<unsigned long long>(sent),
              static_cast<unsigned long long>(bp), secs, counters(**ctx, "udp pub").c_str());
  (void)before;
  std::fflush(stdout);
  return 0;
}

int run_sub(const std::map<std::string, std::string>& a) {
  auto ctx = pollux::Context::from_file(a.at("config"));
  if (!ctx.ok()) {
    std::fprintf(stderr, "sub: %s\n", std::string(ctx.status().message()).c_str());
    return 2;
  }
  auto sub = (*ctx)->subscriber(a.at("topic"));
  if (!sub.ok()) {
    std::fprintf(stderr, "sub: %s\n", std::string(sub.status().message()).c_str());
    return 2;
  }
  const std::uint64_t expect = a.count("expect") ? std::strtoull(a.at("expect").c_str(), nullptr, 10) : 0;
  const bool until_end = a.count("until-end") != 0;
  const int timeout_s = a.count("timeout") ? std::atoi(a.at("timeout").c_str()) : 120;
  State* state = nullptr;
  State prev{};
  if (a.count("state")) {
    const int fd = ::open(a.at("state").c_str(), O_RDWR | O_CREAT, 0600);
    if (fd < 0 || ftruncate(fd, sizeof(State)) != 0) return 2;
    state = static_cast<State*>(mmap(nullptr, sizeof(State), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    ::close(fd);
    if (state == MAP_FAILED) return 2;
    prev = *state;
    if (prev.session != 0) {
      std::printf("previous session=%08x last=%llu\n", prev.session, static_cast<unsigned long long>(prev.last_seq));
    }
  }
  std::uint64_t received = 0, lost = 0, gaps = 0, order_errors = 0, sessions = 0, ends = 0, died = 0;
  struct Track {
    std::uint64_t next = 0, received = 0, lost = 0;
    bool first = true;
  };
  std::map<std::uint32_t, Track> tracks;  // per publisher session: sessions interleave across a restart
  bool done = false;
  const std::int64_t deadline = now_ns() + static_cast<std::int64_t>(timeout_s) * 1'000'000'000;
  std::uint32_t last_joined = 0;
  // Spin, then yield, then sleep up to 100 us: three busy processes share two cores in the
  // tests, and a subscriber that never sleeps starves the others (and the kernel's softirqs).
  pollux::core::BackoffIdle idle;
  idle.max_spins = 100;
  idle.max_yields = 20;
  idle.max_park_ns = 100'000;
  while (!done && !g_stop) {
    const int n = sub->poll(
        [&](const pollux::Message& m) {
          std::uint64_t tag;
          std::memcpy(&tag, m.payload.data(), 8);
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
              std::printf("resume missed=%llu from=%llu to=%llu\n",
                          static_cast<unsigned long long>(m.sequence - prev.last_seq - 1),
                          static_cast<unsigned long long>(prev.last_seq + 1),
                          static_cast<unsigned long long>(m.sequence - 1));
            }
            std::fflush(stdout);
          } else if (m.sequence != t.next) {
            ++order_errors;
          }
          if (tag != m.sequence) ++order_errors;
          t.next = m.sequence + 1;
          ++t.received;
          ++received;
          if (state != nullptr) {
            state->session = m.session_id;
            state->last_seq = m.sequence;
          }
          if (received % 10000 == 0) {
            std::printf("progress=%llu\n", static_cast<unsigned long long>(received));
            std::fflush(stdout);
          }
          if (expect != 0 && t.received + t.lost >= expect) done = true;
        },
        [&](const pollux::Gap& g) {
          Track& t = tracks[g.session_id];
          if (!t.first && g.from != t.next) ++order_errors;
          ++gaps;
          lost += g.count;
          t.lost += g.count;
          t.next = g.from + g.count;
          std::printf("gap session=%08x from=%llu count=%llu reason=%d\n", g.session_id,
                      static_cast<unsigned long long>(g.from), static_cast<unsigned long long>(g.count),
                      static_cast<int>(g.reason));
          std::fflush(stdout);
          if (expect != 0 && t.received + t.lost >= expect) done = true;
        },
        [&](const pollux::StreamEvent& e) {
          if (e.kind == pollux::StreamEventKind::kNewSession) {
            ++sessions;
            tracks[e.session_id] = Track{};
            last_joined = e.session_id;
            std::printf("joined session=%08x\n", e.session_id);
          } else {
            ++ends;
            if (e.kind == pollux::StreamEventKind::kPublisherDied) ++died;
            std::printf("end session=%08x kind=%s\n", e.session_id,
                        e.kind == pollux::StreamEventKind::kEndOfStream ? "closed" : "died");
            if (until_end && e.session_id == last_joined) done = true;
          }
          std::fflush(stdout);
        },
        256);
    if (n == 0 && now_ns() > deadline) {
      std::printf("timeout\n");
      break;
    }
    idle.idle(n);
  }
  for (const auto& [id, t] : tracks) {
    std::printf("session=%08x received=%llu lost=%llu next=%llu\n", id, static_cast<unsigned long long>(t.received),
                static_cast<unsigned long long>(t.lost), static_cast<unsigned long long>(t.next));
  }
  std::printf("sub done received=%llu lost=%llu gaps=%llu order_errors=%llu sessions=%llu ends=%llu died=%llu%s\n",
              static_cast<unsigned long long>(received), static_cast<unsigned long long>(lost),
              static_cast<unsigned long long>(gaps), static_cast<unsigned long long>(order_errors),
              static_cast<unsigned long long>(sessions), static_cast<unsigned long long>(ends),
              static_cast<unsigned long long>(died), counters(**ctx, "udp sub").c_str());
  std::fflush(stdout);
  return done ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s pub|sub --config FILE --topic T ...\n", argv[0]);
    return 2;
  }
  signal(SIGTERM, on_term);
  signal(SIGINT, on_term);
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const auto a = parse_args(argc, argv, 2);
  if (!a.count("config") || !a.count("topic")) {
    std::fprintf(stderr, "--config and --topic are required\n");
    return 2;
  }
  const std::string role = argv[1];
  if (role == "pub") return run_pub(a);
  if (role == "sub") return run_sub(a);
  std::fprintf(stderr, "unknown role %s\n", role.c_str());
  return 2;
}
