// pollux-test-peer: a publisher or subscriber process for the multi-process tests.
//
//   pollux-test-peer pub CONFIG TOPIC COUNT [--max-size N] [--claim] [--ready-fd F] [--timeout S]
//   pollux-test-peer sub CONFIG TOPIC COUNT [--ready-fd F] [--start-fd F] [--no-loss] [--timeout S]
//
// The publisher waits for a subscriber, offers COUNT messages whose payload starts with the
// message's 1-based index followed by a pattern derived from it, then closes the stream.
// The subscriber checks every zero-copy view (index == sequence, pattern intact, sequences
// contiguous except where a Gap accounts for the hole) until it has seen COUNT messages or
// the stream ended, prints one summary line and exits 0 only if everything checked out.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "pollux/pollux.h"
#include "tests/shm/test_util.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string role, config, topic;
  std::uint64_t count = 0;
  std::uint32_t max_size = 200;
  bool claim = false, no_loss = false;
  int ready_fd = -1, start_fd = -1;
  int timeout_s = 120;
};

void signal_fd(int fd) {
  if (fd >= 0) {
    const char c = 'r';
    (void)!write(fd, &c, 1);
  }
}

int run_pub(const Args& a, pollux::Context& ctx) {
  auto pub = ctx.publisher(a.topic);
  if (!pub.ok()) {
    std::fprintf(stderr, "pub: %s\n", std::string(pub.status().message()).c_str());
    return 2;
  }
  signal_fd(a.ready_fd);
  const auto deadline = Clock::now() + std::chrono::seconds(a.timeout_s);
  while (!pub->is_connected()) {
    if (Clock::now() > deadline) {
      std::fprintf(stderr, "pub: no subscriber within %ds\n", a.timeout_s);
      return 3;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::byte buf[65536];
  std::uint64_t retries = 0;
  for (std::uint64_t i = 1; i <= a.count; ++i) {
    const std::uint32_t len = pollux::testing::payload_len(i, a.max_size);
    for (;;) {
      std::int64_t r;
      if (a.claim) {
        pollux::Claim c;
        r = pub->claim(len, c);
        if (r >= 0) {
          pollux::testing::fill_payload(c.buffer().data(), len, i);
          r = pub->commit(c);
        }
      } else {
        pollux::testing::fill_payload(buf, len, i);
        r = pub->offer(buf, len);
      }
      if (r >= 0) break;
      if (r != pollux::kBackPressured && r != pollux::kNotConnected) {
        std::fprintf(stderr, "pub: offer failed: %s\n", std::string(pollux::result_name(r)).c_str());
        return 4;
      }
      if (++retries % 64 == 0) std::this_thread::yield();  // 2 cores: let the subscriber run
      if ((retries & 0xffff) == 0 && Clock::now() > deadline) {
        std::fprintf(stderr, "pub: stuck at message %llu\n", static_cast<unsigned long long>(i));
        return 5;
      }
    }
  }
  pub->close();
  std::printf("pub offered=%llu retries=%llu\n", static_cast<unsigned long long>(a.count),
              static_cast<unsigned long long>(retries));
  return 0;
}

int run_sub(const Args& a, pollux::Context& ctx) {
  auto sub = ctx.subscriber(a.topic);
  if (!sub.ok()) {
    std::fprintf(stderr, "sub: %s\n", std::string(sub.status().message()).c_str());
    return 2;
  }
  const auto deadline = Clock::now() + std::chrono::seconds(a.timeout_s);
  while (!sub->is_connected()) {
    // Polling drives attachment in inline mode.
    (void)sub->poll([](const pollux::Message&) {}, 1);
    if (Clock::now() > deadline) {
      std::fprintf(stderr, "sub: no publisher within %ds\n", a.timeout_s);
      return 3;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  signal_fd(a.ready_fd);
  if (a.start_fd >= 0) {
    char c;
    (void)!read(a.start_fd, &c, 1);
  }
  std::uint64_t received = 0, lost = 0, gaps = 0, bad = 0, out_of_order = 0, next = 0, last = 0;
  bool ended = false;
  std::uint64_t idle = 0;
  auto on_msg = [&](const pollux::Message& m) {
    std::uint64_t tag = 0;
    if (m.payload.size() >= 8) std::memcpy(&tag, m.payload.data(), 8);
    if (tag != m.sequence ||
        !pollux::testing::check_payload(m.payload.data(), static_cast<std::uint32_t>(m.payload.size()), tag) ||
        m.payload.size() != pollux::testing::payload_len(tag, a.max_size)) {
      ++bad;
    }
    if (next != 0 && m.sequence != next) ++out_of_order;
    next = m.sequence + 1;
    last = m.sequence;
    ++received;
  };
  auto on_gap = [&](const pollux::Gap& g) {
    ++gaps;
    if (g.reason != pollux::GapReason::kOverrun) lost += g.count;
    if (next != 0 && g.from != next && g.reason != pollux::GapReason::kOverrun) ++out_of_order;
    if (g.count != 0) next = g.from + g.count;
    std::fprintf(stderr, "sub: gap from %llu count %llu reason %d\n", static_cast<unsigned long long>(g.from),
                 static_cast<unsigned long long>(g.count), static_cast<int>(g.reason));
  };
  auto on_event = [&](const pollux::StreamEvent& e) {
    if (e.kind != pollux::StreamEventKind::kNewSession) ended = true;
  };
  while (!ended && received + lost < a.count) {
    if (sub->poll(on_msg, on_gap, on_event, 256) == 0) {
      if (++idle % 64 == 0) std::this_thread::yield();
      if ((idle & 0xffff) == 0 && Clock::now() > deadline) break;
    }
  }
  std::printf("sub received=%llu lost=%llu gaps=%llu bad=%llu out_of_order=%llu last=%llu ended=%d\n",
              static_cast<unsigned long long>(received), static_cast<unsigned long long>(lost),
              static_cast<unsigned long long>(gaps), static_cast<unsigned long long>(bad),
              static_cast<unsigned long long>(out_of_order), static_cast<unsigned long long>(last), ended ? 1 : 0);
  const bool ok = bad == 0 && out_of_order == 0 && received + lost == a.count && (!a.no_loss || lost == 0);
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
      return i + 1 < argc ? argv[++i] : (std::fprintf(stderr, "%s needs a value\n", f.c_str()), std::exit(64), nullptr);
    };
    if (f == "--max-size")
      a.max_size = static_cast<std::uint32_t>(std::atoi(next()));
    else if (f == "--claim")
      a.claim = true;
    else if (f == "--no-loss")
      a.no_loss = true;
    else if (f == "--ready-fd")
      a.ready_fd = std::atoi(next());
    else if (f == "--start-fd")
      a.start_fd = std::atoi(next());
    else if (f == "--timeout")
      a.timeout_s = std::atoi(next());
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
