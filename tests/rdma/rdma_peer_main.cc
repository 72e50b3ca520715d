// pollux-rdma-peer: a publisher or subscriber process for the RDMA tests in the Soft-RoCE VM
// (tests/rdma/rdma_ipc_test.cc) and for trying the transport by hand.
//
//   pollux-rdma-peer pub CONFIG TOPIC COUNT [--threads N] [--start-fd F] [--ready-fd F]
//                        [--max-size N] [--rate MSGS_PER_S] [--until-killed] [--timeout S]
//   pollux-rdma-peer sub CONFIG TOPIC COUNT [--sessions N] [--ready-fd F] [--signal-after N]
//                        [--no-loss] [--require-complete] [--late-join] [--timeout S]
//                        [--stall-after N --stall-ms MS]
//
// Each publishing thread has its own Publisher (so its own endpoint, QP and session) and offers
// COUNT messages whose payload starts with the message's 1-based index, followed by a pattern
// derived from it. With --until-killed it keeps offering (and prints "pub: connected" /
// "pub: disconnected" when that changes) until it is killed.
//
// The subscriber checks every view - the pattern matches the index, and per session the index
// and the sequence advance together (a Gap must account for every hole) - until it has seen
// SESSIONS sessions, each complete (COUNT messages delivered or reported lost) or ended (with
// --require-complete: complete, ended or not), and every session starting at sequence 1 (unless
// --late-join: the subscriber started mid-stream). With --stall-after it stops polling for
// --stall-ms once it has seen N messages (a subscriber that falls behind). It prints one summary
// line, then this process's RDMA counters ("counters: name=value ..."), and exits 0 only if
// everything checked out.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "core/counters.h"
#include "pollux/pollux.h"
#include "tests/shm/test_util.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string role, config, topic;
  std::uint64_t count = 0;
  std::uint64_t stall_after = 0, stall_ms = 0;
  std::uint32_t max_size = 200, threads = 1, sessions = 1;
  std::uint64_t rate = 0, signal_after = 0;
  bool no_loss = false, until_killed = false, require_complete = false, late_join = false;
  int ready_fd = -1, start_fd = -1;
  int timeout_s = 300;
};

// This process's counters whose scope starts with `prefix`, as one "counters: name=value ..."
// line (several endpoints' counters of one name are summed).
void print_counters(const pollux::Context& ctx, const std::string& prefix) {
  if (ctx.counters_path().empty()) return;
  auto snap = pollux::core::read_counters_file(ctx.counters_path());
  if (!snap.ok()) return;
  std::map<std::string, std::uint64_t> sum;
  for (const auto& c : snap->counters) {
    if (c.scope.rfind(prefix, 0) == 0) sum[c.name] += c.value;
  }
  std::string out = "counters:";
  for (const auto& [name, v] : sum) out += " " + name + "=" + std::to_string(v);
  std::printf("%s\n", out.c_str());
}

void signal_fd(int fd) {
  if (fd >= 0) {
    const char c = 'r';
    (void)!write(fd, &c, 1);
  }
}

int run_pub(const Args& a, pollux::Context& ctx) {
  std::vector<pollux::Publisher> pubs;
  for (std::uint32_t t = 0; t < a.threads; ++t) {
    auto p = ctx.publisher(a.topic);
    if (!p.ok()) {
      std::fprintf(stderr, "pub: %s\n", std::string(p.status().message()).c_str());
      return 2;
    }
    pubs.push_back(std::move(*p));
  }
  signal_fd(a.ready_fd);
  if (a.start_fd >= 0) {
    char c;
    (void)!read(a.start_fd, &c, 1);
  }
  const auto deadline = Clock::now() + std::chrono::seconds(a.timeout_s);
  std::atomic<int> failed{0};
  std::atomic<std::uint64_t> retries{0};
  auto body = [&](pollux::Publisher& pub) {
    std::vector<std::byte> buf(65536);
    bool was_connected = false;
    const auto start = Clock::now();
    for (std::uint64_t i = 1; a.until_killed || i <= a.count; ++i) {
      const std::uint32_t len = pollux::testing::payload_len(i, a.max_size);
      pollux::testing::fill_payload(buf.data(), len, i);
      if (a.rate != 0) {
        const auto due = start + std::chrono::nanoseconds(static_cast<std::int64_t>(i * 1'000'000'000ull / a.rate));
        while (Clock::now() < due) std::this_thread::yield();
      }
      std::uint64_t spins = 0;
      for (;;) {
        const std::int64_t r = pub.offer(buf.data(), len);
        const bool conn = r != pollux::kNotConnected;
        if (a.until_killed && conn != was_connected) {
          std::printf("pub: %s\n", conn ? "connected" : "disconnected");
          std::fflush(stdout);
          was_connected = conn;
        }
        if (r >= 0) break;
        if (r != pollux::kBackPressured && r != pollux::kNotConnected) {
          std::fprintf(stderr, "pub: offer failed: %s\n", std::string(pollux::result_name(r)).c_str());
          failed = 1;
          return;
        }
        retries.fetch_add(1, std::memory_order_relaxed);
        if (++spins % 64 == 0) std::this_thread::yield();  // 2 vCPUs: let the others run
        if (r == pollux::kNotConnected) std::this_thread::sleep_for(std::chrono::microseconds(200));
        if ((spins & 0xfff) == 0 && !a.until_killed && Clock::now() > deadline) {
          std::fprintf(stderr, "pub: stuck at message %llu\n", static_cast<unsigned long long>(i));
          failed = 1;
          return;
        }
      }
    }
  };
  std::vector<std::thread> th;
  for (std::uint32_t t = 1; t < a.threads; ++t) th.emplace_back([&, t] { body(pubs[t]); });
  body(pubs[0]);
  for (auto& t : th) t.join();
  for (auto& p : pubs) p.close();
  std::printf("pub threads=%u offered=%llu retries=%llu\n", a.threads, static_cast<unsigned long long>(a.count),
              static_cast<unsigned long long>(retries.load()));
  print_counters(ctx, "rdma tx");
  return failed.load() != 0 ? 4 : 0;
}

struct SessionStats {
  std::uint64_t received = 0, lost = 0, gaps = 0, bad = 0, out_of_order = 0;
  std::int64_t offset = 0;  // index - sequence (constant within a session)
  std::uint64_t next = 0;   // next expected sequence
  std::uint64_t first = 0;  // first sequence seen (delivered or in a gap)
  bool ended = false, died = false;
  int order = 0;
};

int run_sub(const Args& a, pollux::Context& ctx) {
  auto sub = ctx.subscriber(a.topic);
  if (!sub.ok()) {
    std::fprintf(stderr, "sub: %s\n", std::string(sub.status().message()).c_str());
    return 2;
  }
  const auto deadline = Clock::now() + std::chrono::seconds(a.timeout_s);
  std::map<std::uint32_t, SessionStats> sessions;
  int order = 0;
  std::uint64_t total = 0;
  bool signalled = a.signal_after == 0;
  auto stats = [&](std::uint32_t session) -> SessionStats& {
    auto [it, created] = sessions.try_emplace(session);
    if (created) it->second.order = order++;
    return it->second;
  };
  auto on_msg = [&](const pollux::Message& m) {
    SessionStats& s = stats(m.session_id);
    std::uint64_t tag = 0;
    if (m.payload.size() >= 8) std::memcpy(&tag, m.payload.data(), 8);
    if (!pollux::testing::check_payload(m.payload.data(), static_cast<std::uint32_t>(m.payload.size()), tag) ||
        m.payload.size() != pollux::testing::payload_len(tag, a.max_size)) {
      ++s.bad;
    }
    const std::int64_t off = static_cast<std::int64_t>(tag) - static_cast<std::int64_t>(m.sequence);
    if (s.received + s.lost == 0) {
      s.offset = off;
      s.first = m.sequence;
    }
    if (off != s.offset || (s.next != 0 && m.sequence != s.next)) ++s.out_of_order;
    s.next = m.sequence + 1;
    ++s.received;
    ++total;
  };
  auto on_gap = [&](const pollux::Gap& g) {
    SessionStats& s = stats(g.session_id);
    ++s.gaps;
    s.lost += g.count;
    if (s.next != 0 && g.from != s.next) ++s.out_of_order;
    if (s.next == 0 && s.received == 0) {
      s.offset = 0;  // lost from the start: index == sequence
      s.first = g.from;
    }
    s.next = g.from + g.count;
    std::fprintf(stderr, "sub: session %08x gap from %llu count %llu reason %d\n", g.session_id,
                 static_cast<unsigned long long>(g.from), static_cast<unsigned long long>(g.count),
                 static_cast<int>(g.reason));
  };
  auto on_event = [&](const pollux::StreamEvent& e) {
    if (e.kind == pollux::StreamEventKind::kNewSession) {
      (void)stats(e.session_id);
      return;
    }
    SessionStats& s = stats(e.session_id);
    s.ended = true;
    s.died = e.kind == pollux::StreamEventKind::kPublisherDied;
    std::fprintf(stderr, "sub: session %08x %s after %llu messages\n", e.session_id,
                 s.died ? "publisher died" : "ended", static_cast<unsigned long long>(s.received));
  };
  auto done = [&] {
    if (sessions.size() < a.sessions) return false;
    for (auto& [id, s] : sessions) {
      if (!s.ended && s.received + s.lost < a.count) return false;
    }
    return true;
  };
  // Ready once a publisher is attached (RC: connected; UD: a heartbeat was heard).
  while (!sub->is_connected() && a.ready_fd >= 0 && a.signal_after == 0) {
    (void)sub->poll(on_msg, on_gap, on_event, 64);
    if (Clock::now() > deadline) {
      std::fprintf(stderr, "sub: no publisher within %ds\n", a.timeout_s);
      return 3;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  if (a.signal_after == 0) signal_fd(a.ready_fd);
  std::uint64_t idle = 0;
  bool stalled = a.stall_after == 0;
  while (!done()) {
    if (!stalled && total >= a.stall_after) {
      stalled = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(a.stall_ms));
    }
    if (sub->poll(on_msg, on_gap, on_event, 256) == 0) {
      if (++idle % 64 == 0) std::this_thread::yield();
      if ((idle & 0xffff) == 0 && Clock::now() > deadline) break;
    }
    if (!signalled && total >= a.signal_after) {
      signalled = true;
      signal_fd(a.ready_fd);
    }
  }
  std::uint64_t received = 0, lost = 0, gaps = 0, bad = 0, ooo = 0, ended = 0, died = 0, complete = 0, late = 0;
  bool ok = sessions.size() >= a.sessions;
  std::string lines;
  for (auto& [id, s] : sessions) {
    received += s.received;
    lost += s.lost;
    gaps += s.gaps;
    bad += s.bad;
    ooo += s.out_of_order;
    ended += s.ended;
    died += s.died;
    late += s.first != 1;  // joined after sequence 1 (or the first frames vanished without a gap)
    // >=: a subscriber of a stream that goes on stops after COUNT, within one poll burst.
    const bool full = s.received + s.lost >= a.count;
    complete += full;
    char line[256];
    std::snprintf(line, sizeof line,
                  "  session %08x order %d: %llu received, %llu lost, %llu gaps, ended %d, died %d\n", id, s.order,
                  static_cast<unsigned long long>(s.received), static_cast<unsigned long long>(s.lost),
                  static_cast<unsigned long long>(s.gaps), s.ended ? 1 : 0, s.died ? 1 : 0);
    lines += line;
    if (!full && (!s.ended || a.require_complete)) ok = false;
  }
  std::printf(
      "sub sessions=%zu complete=%llu received=%llu lost=%llu gaps=%llu bad=%llu out_of_order=%llu ended=%llu "
      "died=%llu late_start=%llu\n",
      sessions.size(), static_cast<unsigned long long>(complete), static_cast<unsigned long long>(received),
      static_cast<unsigned long long>(lost), static_cast<unsigned long long>(gaps),
      static_cast<unsigned long long>(bad), static_cast<unsigned long long>(ooo),
      static_cast<unsigned long long>(ended), static_cast<unsigned long long>(died),
      static_cast<unsigned long long>(late));
  std::fputs(lines.c_str(), stdout);  // after the summary line: tests parse its key=value fields
  print_counters(ctx, "rdma rx");
  ok = ok && bad == 0 && ooo == 0 && (!a.no_loss || lost == 0) && (a.late_join || late == 0);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s pub|sub CONFIG TOPIC COUNT [options]\n", argv[0]);
    return 64;
  }
  Args a;
  a.role = argv[1];
  a.config = argv[2];
  a.topic = argv[3];
  a.count = std::strtoull(argv[4], nullptr, 10);
  for (int i = 5; i < argc; ++i) {
    const std::string f = argv[i];
    auto next = [&] {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", f.c_str());
        std::exit(64);
      }
      return argv[++i];
    };
    if (f == "--max-size")
      a.max_size = static_cast<std::uint32_t>(std::atoi(next()));
    else if (f == "--threads")
      a.threads = static_cast<std::uint32_t>(std::atoi(next()));
    else if (f == "--sessions")
      a.sessions = static_cast<std::uint32_t>(std::atoi(next()));
    else if (f == "--rate")
      a.rate = std::strtoull(next(), nullptr, 10);
    else if (f == "--signal-after")
      a.signal_after = std::strtoull(next(), nullptr, 10);
    else if (f == "--no-loss")
      a.no_loss = true;
    else if (f == "--require-complete")
      a.require_complete = true;
    else if (f == "--late-join")
      a.late_join = true;
    else if (f == "--until-killed")
      a.until_killed = true;
    else if (f == "--ready-fd")
      a.ready_fd = std::atoi(next());
    else if (f == "--start-fd")
      a.start_fd = std::atoi(next());
    else if (f == "--timeout")
      a.timeout_s = std::atoi(next());
    else if (f == "--stall-after")
      a.stall_after = std::strtoull(next(), nullptr, 10);
    else if (f == "--stall-ms")
      a.stall_ms = std::strtoull(next(), nullptr, 10);
    else {
      std::fprintf(stderr, "unknown option %s\n", f.c_str());
      return 64;
    }
  }
  auto ctx = pollux::Context::from_file(a.config);
  if (!ctx.ok()) {
    std::fprintf(stderr, "%s\n", std::string(ctx.status().message()).c_str());
    return 2;
  }
  const int rc = a.role == "pub" ? run_pub(a, **ctx) : run_sub(a, **ctx);
  std::fflush(stdout);
  return rc;
}
