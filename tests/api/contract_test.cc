// The API's contract, one suite over every transport (shm, UDP on loopback; RDMA RC and UD
// multicast in the Soft-RoCE VM: this file built again as rdma_contract_test, see
// tests/rdma/CMakeLists.txt) and every threading mode (inline, dedicated, shared), written on
// the public API only - as a user would.
//
// Each case states one rule of docs/API-CONTRACT.md; where a transport cannot honour it, the
// case says so by name (the documented difference), never silently.
//
// Verdicts never hang on the scheduler: a wait is bounded far above anything a loaded 2-core
// host causes and fails with what it saw; timeouts the rules are about (liveness, session
// timeouts) are set short where a case is about them and long everywhere else. Ports are below
// the kernel's ephemeral range, per test process.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "pollux/pollux.h"
#include "tests/support/process.h"
#include "tests/support/threads.h"

namespace pollux {
namespace {

using Clock = std::chrono::steady_clock;

struct Mode {
  const char* transport;  // "shm" | "udp" | "rdma_rc" | "rdma_ud"
  const char* threading;  // "inline" | "dedicated" | "shared"
};

void PrintTo(const Mode& m, std::ostream* os) { *os << m.transport << "/" << m.threading; }

std::string Name(const ::testing::TestParamInfo<Mode>& i) {
  return absl::StrCat(i.param.transport, "_", i.param.threading);
}

// Per test process: a port block below the kernel's ephemeral range (UDP; rdma_cm listen
// ports on RDMA), a multicast group, and a runtime name (shm file names).
std::uint32_t BasePort() { return 21000 + static_cast<std::uint32_t>(getpid() % 340) * 32; }
std::string Group() { return absl::StrFormat("239.255.%d.%d", 100 + getpid() % 100, 1 + (getpid() / 100) % 200); }

// Lines a case adds to one transport's table (e.g. shm: "flow_control = \"lossy\"").
struct Extra {
  std::string shm, udp, rdma;
  std::uint32_t pool_slots = 0;  // [pool] slots (0: the default; RDMA: 4096)
};

// Every transport's liveness time at 1 s (shm.liveness_timeout_ms, udp.session_timeout_ms,
// rdma.liveness_timeout_ms), and `shm` besides.
Extra OneSecondLiveness(const std::string& shm = "") {
  return {.shm = shm + (shm.empty() ? "" : "\n") + "liveness_timeout_ms = 1000",
          .udp = "session_timeout_ms = 1000",
          .rdma = "liveness_timeout_ms = 1000",
          .pool_slots = 0};
}

// A case's configurations. One host runs both sides of shm and UDP with one configuration;
// RDMA (the Soft-RoCE VM: rxe0 = 10.0.0.1, rxe1 = 10.0.0.2) has publishers on rxe0 and
// subscribers on rxe1, and an RC subscriber's context listens where the publisher's connects.
// `a` and `b` are two applications that each publish to the other (both tables in one).
struct Configs {
  std::string pub, sub, a, b;
};

class Contract : public ::testing::TestWithParam<Mode> {
 protected:
  bool shm() const { return transport() == "shm"; }
  bool udp() const { return transport() == "udp"; }
  bool rdma_rc() const { return transport() == "rdma_rc"; }
  bool rdma_ud() const { return transport() == "rdma_ud"; }
  std::string transport() const { return GetParam().transport; }
  bool inline_mode() const { return std::strcmp(GetParam().threading, "inline") == 0; }

  // The configurations of this case: `port_offset` keeps cases apart (0..15; RC's two-way
  // case also takes port_offset + 16).
  Configs Config(int port_offset, const Extra& extra = {}) const {
    const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
    const std::uint32_t port = BasePort() + static_cast<std::uint32_t>(port_offset);
    auto runtime = [&](const char* side) {
      return absl::StrFormat(
          "[runtime]\nname = \"ct%d-%d%s\"\nthreading = \"%s\"\nidle = \"yield\"\ncounters = false\n", getpid(),
          static_cast<int>(std::hash<std::string>{}(t->name()) % 100000), side, GetParam().threading);
    };
    const std::string pool =
        absl::StrFormat("[pool]\nslots = %u\nhugepages = \"off\"\n", extra.pool_slots != 0 ? extra.pool_slots : 4096);
    if (shm() || udp()) {
      const std::string one = runtime("") + (extra.pool_slots != 0 ? pool : "") +
                              absl::StrFormat(R"([transport]
kind = "%s"
[shm]
%s
[udp]
address = "%s"
port = %u
interface = "lo"
ttl = 1
status_interval_ms = 20
heartbeat_interval_us = 2000
linger_ms = 200
%s
)",
                                              transport(), extra.shm, Group(), port, extra.udp);
      return {one, one, one, one};
    }
    // RDMA: "listen" and "peer" are empty where a side has none.
    auto rdma = [&](const char* side, const char* device, const std::string& listen, const std::string& peer) {
      std::string c = runtime(side) + pool + "[transport]\nkind = \"rdma\"\n[rdma]\n";
      c += absl::StrFormat("device = \"%s\"\ngid_index = 1\nmode = \"%s\"\n", device, rdma_rc() ? "rc" : "ud_mcast");
      if (rdma_rc()) {
        if (!listen.empty()) c += "listen_port = " + listen + "\n";
        if (!peer.empty()) c += "peers = [\"" + peer + "\"]\nreconnect_ms = 50\n";
      } else {
        c += absl::StrFormat("multicast_group = \"%s\"\nheartbeat_ms = 20\n", Group());
      }
      return c + extra.rdma + "\n";
    };
    const std::string p = std::to_string(port), p2 = std::to_string(port + 16);
    return {rdma("p", "rxe0", "", "10.0.0.2:" + p), rdma("s", "rxe1", p, ""), rdma("a", "rxe0", p2, "10.0.0.2:" + p),
            rdma("b", "rxe1", p, "10.0.0.1:" + p2)};
  }
  std::string ConfigFile(const std::string& text) const {
    char tmpl[] = "/tmp/pollux-contract-XXXXXX.toml";
    const int fd = mkstemps(tmpl, 5);
    EXPECT_GE(fd, 0);
    ::close(fd);
    std::ofstream(tmpl) << text;
    files_.push_back(tmpl);
    return tmpl;
  }
  void SetUp() override {
    if ((rdma_rc() || rdma_ud()) && ::access("/sys/class/infiniband/rxe1", F_OK) != 0) {
      GTEST_SKIP() << "needs rxe0/rxe1: runs in the Soft-RoCE VM (tests/rdma/run-in-vm.sh)";
    }
  }
  void TearDown() override {
    for (const std::string& f : files_) ::unlink(f.c_str());
  }

 private:
  mutable std::vector<std::string> files_;
};

// What a subscriber saw, in order: 'N' new session, 'E' end of stream, 'D' publisher died,
// 'T' segment truncated, 'M' a message (runs of messages collapse to one 'M'), 'G' a gap.
struct Seen {
  std::string trace;
  std::vector<std::uint64_t> values;  // the 8-byte payloads, in order
  std::uint64_t lost = 0;
  void Message(const pollux::Message& m) {
    if (trace.empty() || trace.back() != 'M') trace += 'M';
    std::uint64_t v = 0;
    std::memcpy(&v, m.payload.data(), std::min<std::size_t>(sizeof v, m.payload.size()));
    values.push_back(v);
  }
  void Event(const StreamEvent& e) {
    static constexpr char kCode[] = {'E', 'D', 'N', 'T'};
    trace += kCode[static_cast<int>(e.kind)];
  }
  void GapSeen(const Gap& g) {
    trace += 'G';
    if (g.reason != GapReason::kOverrun) lost += g.count;
  }
};

int Drain(Subscriber& s, Seen& seen) {
  return s.poll([&](const Message& m) { seen.Message(m); }, [&](const Gap& g) { seen.GapSeen(g); },
                [&](const StreamEvent& e) { seen.Event(e); }, 256);
}

// A publisher's and a subscriber's context (cfg.pub, cfg.sub) with one stream between them,
// connected: the subscriber received the first message (value 1); `next` is the next value.
struct Pair {
  std::unique_ptr<Context> pctx, sctx;
  std::optional<Publisher> pub;
  std::optional<Subscriber> sub;
  Seen seen;
  std::uint64_t next = 1;

  // One turn of both sides: the publisher's duties, then what the subscriber has.
  void Pump() {
    (void)pub->service();
    Drain(*sub, seen);
  }
  // Offers `next`; true if taken. A refusal must be kBackPressured (the publisher is serviced).
  bool OfferNext() {
    const std::int64_t r = pub->offer(&next, sizeof next);
    if (r >= 0) {
      ++next;
      return true;
    }
    EXPECT_EQ(r, kBackPressured) << result_name(r);
    (void)pub->service();
    return false;
  }
};

// Runs `step` until `done` or `seconds` pass; true when done.
bool Until(const std::function<bool()>& done, const std::function<void()>& step, int seconds = 60) {
  const auto end = Clock::now() + std::chrono::seconds(seconds);
  while (!done()) {
    if (Clock::now() > end) return false;
    step();
    std::this_thread::yield();
  }
  return true;
}

// `made` into `out`, asserting it was made (a context, a publisher, a subscriber).
template <typename T, typename Out>
void Keep(absl::StatusOr<T> made, Out& out) {
  ASSERT_TRUE(made.ok()) << made.status();
  out = std::move(*made);
}

// The publisher's and the subscriber's context (no stream yet).
void OpenContexts(const Configs& cfg, Pair& p) {
  ASSERT_NO_FATAL_FAILURE(Keep(Context::from_string(cfg.pub, "pub.toml"), p.pctx));
  ASSERT_NO_FATAL_FAILURE(Keep(Context::from_string(cfg.sub, "sub.toml"), p.sctx));
}

// One side alone: the publisher's context (cfg.pub) and a publisher on `topic`.
void OpenPublisherSide(const Configs& cfg, const std::string& topic, Pair& p) {
  ASSERT_NO_FATAL_FAILURE(Keep(Context::from_string(cfg.pub, "pub.toml"), p.pctx));
  ASSERT_NO_FATAL_FAILURE(Keep(p.pctx->publisher(topic), p.pub));
}

// One side alone: the subscriber's context (cfg.sub) and a subscriber on `topic`.
void OpenSubscriberSide(const Configs& cfg, const std::string& topic, Pair& p) {
  ASSERT_NO_FATAL_FAILURE(Keep(Context::from_string(cfg.sub, "sub.toml"), p.sctx));
  ASSERT_NO_FATAL_FAILURE(Keep(p.sctx->subscriber(topic), p.sub));
}

// Both contexts, then a subscriber and a publisher on `topic` (nothing offered).
void OpenEndpoints(const Configs& cfg, const std::string& topic, Pair& p) {
  ASSERT_NO_FATAL_FAILURE(OpenContexts(cfg, p));
  ASSERT_NO_FATAL_FAILURE(Keep(p.sctx->subscriber(topic), p.sub));
  ASSERT_NO_FATAL_FAILURE(Keep(p.pctx->publisher(topic), p.pub));
}

// A subscriber that stopped reading reads again: until every message sent (values 1..sent) was
// received or reported lost.
void ReadAgain(Pair& p, std::uint64_t sent) {
  ASSERT_TRUE(Until([&] { return p.seen.values.size() + p.seen.lost >= sent; }, [&] { p.Pump(); }))
      << "received " << p.seen.values.size() << " lost " << p.seen.lost << " of " << sent << ": " << p.seen.trace;
}

// OpenEndpoints, then until the publisher is connected (what the subscriber sees meanwhile is
// in p.seen).
void OpenConnected(const Configs& cfg, const std::string& topic, Pair& p) {
  ASSERT_NO_FATAL_FAILURE(OpenEndpoints(cfg, topic, p));
  ASSERT_TRUE(Until([&] { return p.pub->is_connected(); }, [&] { p.Pump(); }))
      << "never connected; the subscriber saw " << p.seen.trace;
}

void OpenAndDeliverOne(const Configs& cfg, const std::string& topic, Pair& p) {
  ASSERT_NO_FATAL_FAILURE(OpenEndpoints(cfg, topic, p));
  ASSERT_TRUE(Until([&] { return !p.seen.values.empty(); },
                    [&] {
                      if (p.pub->offer(&p.next, sizeof p.next) >= 0) ++p.next;
                      p.Pump();
                    }));
}

// A pair whose subscriber stops reading after the first message (OpenAndDeliverOne) while the
// publisher offers the next values, then reads again (ReadAgain).
struct StoppedReader {
  Pair pair;
  std::uint64_t refused = 0;           // offers refused (kBackPressured) while it did not read
  std::uint64_t refused_in_a_row = 0;  // ... the last ones in a row
  std::uint64_t sent = 0;              // messages sent in all: values 1..sent

  const Seen& seen() const { return pair.seen; }

  // Offers until `enough` or `seconds` pass; `enough` is given the messages sent while the
  // subscriber did not read.
  void Run(const Configs& cfg, const std::string& topic, const std::function<bool(std::uint64_t unread)>& enough,
           int seconds = 60) {
    ASSERT_NO_FATAL_FAILURE(OpenAndDeliverOne(cfg, topic, pair));
    const std::uint64_t first_unread = pair.next;
    ASSERT_TRUE(Until([&] { return enough(pair.next - first_unread); },
                      [&] {
                        const bool taken = pair.OfferNext();
                        refused += taken ? 0 : 1;
                        refused_in_a_row = taken ? 0 : refused_in_a_row + 1;
                      },
                      seconds))
        << "still offering after " << pair.next - 1 << " messages sent, " << refused << " offers refused";
    sent = pair.next - 1;
    ASSERT_NO_FATAL_FAILURE(ReadAgain(pair, sent));
  }
};

// ---- connection, order, payloads --------------------------------------------------------------

// Either side may start first; once connected every message arrives once, in order, after
// exactly one kNewSession (the first session is announced like any later one).
TEST_P(Contract, EitherStartOrderConnectsAndDeliversInOrderAfterOneNewSession) {
  for (int pub_first = 0; pub_first < 2; ++pub_first) {
    SCOPED_TRACE(pub_first ? "publisher first" : "subscriber first");
    const Configs cfg = Config(pub_first);
    Pair pair;
    ASSERT_NO_FATAL_FAILURE(OpenContexts(cfg, pair));
    absl::StatusOr<Publisher> pub = absl::UnknownError("not opened");
    absl::StatusOr<Subscriber> sub = absl::UnknownError("not opened");
    if (pub_first) {
      pub = pair.pctx->publisher("orders");
      sub = pair.sctx->subscriber("orders");
    } else {
      sub = pair.sctx->subscriber("orders");
      pub = pair.pctx->publisher("orders");
    }
    ASSERT_TRUE(pub.ok()) << pub.status();
    ASSERT_TRUE(sub.ok()) << sub.status();
    Seen seen;
    ASSERT_TRUE(Until([&] { return pub->is_connected(); },
                      [&] {
                        (void)pub->service();
                        Drain(*sub, seen);
                      }))
        << "never connected; subscriber saw " << seen.trace;
    // 300 messages: single offers, zero-copy claims and batches of 10.
    std::uint64_t next = 1;
    ASSERT_TRUE(Until([&] { return next > 300; },
                      [&] {
                        std::int64_t r;
                        if (next <= 100) {
                          r = pub->offer(&next, sizeof next);
                          if (r >= 0) ++next;
                        } else if (next <= 200) {
                          Claim c;
                          r = pub->claim(sizeof next, c);
                          if (r >= 0) {
                            std::memcpy(c.buffer().data(), &next, sizeof next);
                            r = pub->commit(c);
                            EXPECT_GE(r, 0) << result_name(r);
                            ++next;
                          }
                        } else {
                          std::uint64_t v[10];
                          std::span<const std::byte> m[10];
                          for (int i = 0; i < 10; ++i) {
                            v[i] = next + static_cast<std::uint64_t>(i);
                            m[i] = std::as_bytes(std::span(&v[i], 1));
                          }
                          r = pub->offer_batch(std::span(m, 10));
                          if (r > 0) next += static_cast<std::uint64_t>(r);
                        }
                        if (r < 0) {
                          EXPECT_EQ(r, kBackPressured) << result_name(r);
                        }
                        Drain(*sub, seen);
                      }))
        << "sent " << next - 1;
    ASSERT_TRUE(Until([&] { return seen.values.size() >= 300; },
                      [&] {
                        (void)pub->service();
                        Drain(*sub, seen);
                      }))
        << "received " << seen.values.size() << " of 300: " << seen.trace;
    for (std::uint64_t i = 0; i < 300; ++i) ASSERT_EQ(seen.values[i], i + 1) << "at " << i;
    EXPECT_EQ(seen.trace, "NM") << "one new session, then the messages";
    EXPECT_EQ(sub->messages_received(), 300u);
    EXPECT_EQ(sub->messages_lost(), 0u);
  }
}

// max_payload() bytes go through; one byte more is refused with kMessageTooLarge, not sent;
// an empty payload is delivered as an empty message.
TEST_P(Contract, MaxPayloadGoesThroughOneByteMoreIsRefusedAndEmptyIsAMessage) {
  Pair pair;
  ASSERT_NO_FATAL_FAILURE(OpenConnected(Config(2), "big", pair));
  auto& [pctx, sctx, pub, sub, seen, next] = pair;
  const std::size_t max = pub->max_payload();
  ASSERT_GT(max, 8u);
  std::vector<std::byte> big(max + 1, std::byte{0x5a});
  EXPECT_EQ(pub->offer(std::span<const std::byte>(big.data(), max + 1)), kMessageTooLarge);
  std::size_t got = 0;
  std::int64_t r = kBackPressured;
  ASSERT_TRUE(Until([&] { return r >= 0; }, [&] { r = pub->offer(std::span<const std::byte>(big.data(), max)); }));
  ASSERT_TRUE(Until([&] { return got != 0; },
                    [&] {
                      (void)pub->service();
                      sub->poll([&](const Message& m) { got = m.payload.size(); }, 16);
                    }));
  EXPECT_EQ(got, max);
  // An empty payload is a message too.
  std::size_t empty = 0;
  bool got_empty = false;
  r = kBackPressured;
  ASSERT_TRUE(Until([&] { return r >= 0; }, [&] { r = pub->offer(nullptr, 0); }));
  ASSERT_TRUE(Until([&] { return got_empty; },
                    [&] {
                      (void)pub->service();
                      sub->poll(
                          [&](const Message& m) {
                            empty = m.payload.size();
                            got_empty = true;
                          },
                          16);
                    }));
  EXPECT_EQ(empty, 0u);
}

// ---- end of stream, new sessions ---------------------------------------------------------------

// close() ends the stream (kEndOfStream after the last message); a publisher opened again on
// the topic is a new session, announced before its first message.
TEST_P(Contract, CloseEndsTheStreamAndAReopenIsANewSession) {
  const Configs cfg = Config(3);
  Pair pair;
  ASSERT_NO_FATAL_FAILURE(OpenContexts(cfg, pair));
  auto sub = pair.sctx->subscriber("s");
  ASSERT_TRUE(sub.ok()) << sub.status();
  Seen seen;
  for (std::uint64_t round = 1; round <= 2; ++round) {
    auto pub = pair.pctx->publisher("s");
    ASSERT_TRUE(pub.ok()) << pub.status();
    ASSERT_TRUE(Until([&] { return pub->is_connected(); },
                      [&] {
                        (void)pub->service();
                        Drain(*sub, seen);
                      }))
        << "round " << round << ": " << seen.trace;
    std::uint64_t v = round;
    std::int64_t r = kBackPressured;
    ASSERT_TRUE(Until([&] { return r >= 0; },
                      [&] {
                        r = pub->offer(&v, sizeof v);
                        Drain(*sub, seen);
                      }));
    pub->close();
    ASSERT_TRUE(Until([&] { return std::count(seen.trace.begin(), seen.trace.end(), 'E') == static_cast<long>(round); },
                      [&] { Drain(*sub, seen); }))
        << "round " << round << ": " << seen.trace;
  }
  EXPECT_EQ(seen.trace, "NMENME");
  EXPECT_EQ(seen.values, (std::vector<std::uint64_t>{1, 2}));
}

// ---- waiting -----------------------------------------------------------------------------------

// wait() returns true once a message is there to poll (every mode: an eventfd, a socket or
// the shm futex), however long the publisher took.
TEST_P(Contract, WaitWakesWhenAMessageArrives) {
  Pair pair;
  ASSERT_NO_FATAL_FAILURE(OpenConnected(Config(4), "w", pair));
  auto& [pctx, sctx, pub, sub, seen, next] = pair;
  Drain(*sub, seen);
  std::atomic<bool> woke{false};
  std::atomic<pid_t> waiter_tid{0};
  std::thread waiter([&] {
    waiter_tid = ::gettid();
    // Bounded far above any scheduling delay: the verdict is the wake-up, not its latency.
    // Woken by the message sent after it slept (42): anything still on its way from the
    // connection (a late event) is drained and waited past.
    for (int i = 0; i < 60 && !woke; ++i) {
      if (sub->wait(1'000'000) && Drain(*sub, seen) > 0 &&
          std::find(seen.values.begin(), seen.values.end(), 42u) != seen.values.end()) {
        woke = true;
      }
    }
  });
  // The message comes once the waiter sleeps in wait().
  EXPECT_TRUE(Until([&] { return waiter_tid != 0 && testing::thread_sleeping(waiter_tid); }, [] {}))
      << "wait() never slept";
  std::uint64_t v = 42;
  std::int64_t r = kBackPressured;
  const auto end = Clock::now() + std::chrono::seconds(60);
  while (r < 0 && Clock::now() < end) r = pub->offer(&v, sizeof v);
  while (!woke && Clock::now() < end) {
    (void)pub->service();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  waiter.join();
  EXPECT_TRUE(woke) << seen.trace;
}

// ---- flow control ------------------------------------------------------------------------------

// A subscriber that stops reading never holds a lossy publisher back for good (shm with
// flow_control = "lossy"; UDP has no other mode): every offer goes through - kBackPressured can
// still come, transiently, in dedicated/shared threading when the ring to the poller is full
// (the poller is behind, not the subscriber) or a UDP socket buffer is - and the subscriber,
// when it reads again, learns exactly what it lost: received + lost = sent.
TEST_P(Contract, ASubscriberThatStopsReadingNeverHoldsALossyPublisherBack) {
  if (rdma_rc())
    GTEST_SKIP() << "RDMA RC has no lossy mode: it is reliable (documented difference; its rule is "
                    "ASubscriberThatStopsReadingHoldsABackpressurePublisherAndLosesNothing)";
  // Liveness times far above the case's length: a subscriber that stops reading in inline mode
  // sends no status either, and being forgotten as dead is another case's rule.
  const Configs cfg = Config(8, {.shm = "flow_control = \"lossy\"\nlog_size = \"64KiB\"",
                                 .udp = "session_timeout_ms = 600000",
                                 .rdma = "liveness_timeout_ms = 600000",
                                 .pool_slots = 0});
  // The subscriber stops reading; 20,000 more messages (a 64 KiB log laps ~30 times).
  StoppedReader r;
  ASSERT_NO_FATAL_FAILURE(r.Run(cfg, "l", [](std::uint64_t unread) { return unread >= 20'000; }));
  std::printf(
      "%s/%s: %llu sent while the subscriber did not read (%llu offers back-pressured), %zu received, %llu "
      "reported lost\n",
      GetParam().transport, GetParam().threading, static_cast<unsigned long long>(r.sent),
      static_cast<unsigned long long>(r.refused), r.seen().values.size(),
      static_cast<unsigned long long>(r.seen().lost));
  EXPECT_EQ(r.seen().values.size() + r.seen().lost, r.sent);
  for (std::size_t i = 1; i < r.seen().values.size(); ++i) {
    ASSERT_LT(r.seen().values[i - 1], r.seen().values[i]) << "order";
  }
  if (shm() && inline_mode()) {
    EXPECT_EQ(r.refused, 0u) << "inline lossy shm writes the log itself: it never waits";
  }
}

// A subscriber that stops reading holds a reliable publisher back (shm with flow_control =
// "backpressure"; RDMA RC, always): offers are refused with kBackPressured - nothing is
// overwritten or dropped - and when it reads again it gets every message, in order, none lost.
// UDP and RDMA UD multicast have no such mode (a documented difference): their rule is
// ASubscriberThatStopsReadingNeverHoldsALossyPublisherBack.
TEST_P(Contract, ASubscriberThatStopsReadingHoldsABackpressurePublisherAndLosesNothing) {
  if (udp() || rdma_ud()) {
    GTEST_SKIP() << transport() << " has no back-pressure mode: a subscriber that stops reading never holds the "
                 << "publisher (documented difference)";
  }
  // A stuck subscriber is untethered after the liveness time: far above this case's length.
  const Configs cfg =
      Config(9, {.shm = "flow_control = \"backpressure\"\nlog_size = \"64KiB\"\nliveness_timeout_ms = 600000",
                 .udp = "",
                 .rdma = "",
                 .pool_slots = 0});
  // The subscriber stops reading: offers until 20,000 in a row are refused (with service()
  // between them), so whatever sits between the two - rings, pollers, queues - is full.
  StoppedReader r;
  ASSERT_NO_FATAL_FAILURE(r.Run(
      cfg, "h", [&r](std::uint64_t) { return r.refused_in_a_row >= 20'000; }, 120));
  std::printf("%s/%s: held back after %llu messages the subscriber did not read; all received\n", GetParam().transport,
              GetParam().threading, static_cast<unsigned long long>(r.sent));
  EXPECT_EQ(r.seen().lost, 0u);
  EXPECT_EQ(r.seen().trace, "NM");
  ASSERT_EQ(r.seen().values.size(), r.sent);
  for (std::uint64_t i = 0; i < r.sent; ++i) ASSERT_EQ(r.seen().values[i], i + 1) << "at " << i;
}

// ---- another process dies ----------------------------------------------------------------------

// pollux-test-peer (tests/support) as a child process: a publisher offering an 8-byte counter
// every millisecond, or a subscriber; either keeps going until it is killed.
struct Peer {
  testing::Child c;
  Peer(const std::string& role, const std::string& config_file, const std::string& topic) {
    std::vector<std::string> argv = {POLLUX_TEST_PEER, role, "--config", config_file, "--topic", topic, "--size", "8"};
    if (role == "pub") argv.insert(argv.end(), {"--rate", "1000"});
    c = testing::spawn(argv);
  }
  // True once the child printed `word` (reads what is there; never blocks).
  bool Said(const std::string& word) {
    c.read_some(0);
    return c.output.find(word) != std::string::npos;
  }
  void Kill() { c.kill_now(); }
};

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A subscriber process killed (SIGKILL: it closes nothing) is noticed by its publisher within
// the transport's liveness time (shm.liveness_timeout_ms, udp.session_timeout_ms; here 1 s) -
// in every threading mode, inline included, where the publisher's own thread does it - and
// the stream goes on: a backpressure publisher is not held back by it, a new subscriber receives.
TEST_P(Contract, AKilledSubscriberIsForgottenWithinTheLivenessTimeAndTheStreamGoesOn) {
  const Configs cfg = Config(6, OneSecondLiveness("flow_control = \"backpressure\""));
  const std::string file = ConfigFile(cfg.sub);
  Pair pair;
  ASSERT_NO_FATAL_FAILURE(OpenPublisherSide(cfg, "d", pair));
  auto& pub = pair.pub;
  Peer child("sub", file, "d");
  ASSERT_GT(child.c.pid, 0);
  std::uint64_t v = 1;
  auto offer = [&] {
    if (pub->offer(&v, sizeof v) >= 0) ++v;
    (void)pub->service();
  };
  ASSERT_TRUE(Until([&] { return child.Said("first session="); }, offer)) << "child: " << child.c.output;
  child.Kill();
  const auto killed = Clock::now();
  ASSERT_TRUE(Until([&] { return !pub->is_connected(); }, offer)) << "the dead subscriber is never forgotten";
  const double forgotten = Since(killed);
  std::printf("%s/%s: subscriber killed, forgotten by its publisher after %.2f s (liveness 1 s)\n",
              GetParam().transport, GetParam().threading, forgotten);
  EXPECT_LT(forgotten, 1.0 + 5.0) << "the liveness time, with slack for a loaded host";
  ASSERT_NO_FATAL_FAILURE(OpenSubscriberSide(cfg, "d", pair));
  const Seen& seen = pair.seen;
  ASSERT_TRUE(Until([&] { return seen.values.size() >= 10; },
                    [&] {
                      offer();
                      Drain(*pair.sub, pair.seen);
                    }))
      << "a new subscriber received " << seen.values.size() << ": " << seen.trace;
}

// A publisher process killed is reported to its subscribers as kPublisherDied within the
// liveness time, and a publisher that starts again is a new session, announced.
TEST_P(Contract, AKilledPublisherIsReportedAndARestartIsANewSession) {
  const Configs cfg = Config(7, OneSecondLiveness());
  const std::string file = ConfigFile(cfg.pub);
  Pair pair;
  ASSERT_NO_FATAL_FAILURE(OpenSubscriberSide(cfg, "p", pair));
  auto& sub = pair.sub;
  Seen& seen = pair.seen;
  Clock::time_point killed;
  {
    Peer child("pub", file, "p");
    ASSERT_GT(child.c.pid, 0);
    ASSERT_TRUE(Until([&] { return seen.values.size() >= 5; }, [&] { Drain(*sub, seen); }))
        << "nothing from the publisher process: " << seen.trace << " child: " << child.c.output;
    child.Kill();
    killed = Clock::now();
  }
  ASSERT_TRUE(Until([&] { return seen.trace.find('D') != std::string::npos; }, [&] { Drain(*sub, seen); }))
      << "the death is never reported: " << seen.trace;
  const double reported = Since(killed);
  std::printf("%s/%s: publisher killed, reported after %.2f s (liveness 1 s)\n", GetParam().transport,
              GetParam().threading, reported);
  EXPECT_LT(reported, 1.0 + 5.0);
  ASSERT_NO_FATAL_FAILURE(OpenPublisherSide(cfg, "p", pair));
  pair.next = 1000;
  const std::size_t before = seen.values.size();
  ASSERT_TRUE(Until([&] { return seen.values.size() > before; },
                    [&] {
                      if (pair.pub->offer(&pair.next, sizeof pair.next) >= 0) ++pair.next;
                      pair.Pump();
                    }))
      << seen.trace;
  EXPECT_EQ(seen.trace, "NMDNM") << "a session, its death, the next session";
}

// ---- errors ------------------------------------------------------------------------------------

// What a user gets wrong gets a clear answer: a topic that cannot name a stream is refused with
// InvalidArgument naming it; a closed publisher answers kClosed to every call, a closed
// subscriber polls nothing and does not wait; the same once their context is destroyed.
TEST_P(Contract, MistakesGetAClearAnswer) {
  Pair pair;
  ASSERT_NO_FATAL_FAILURE(OpenConnected(Config(10), "e", pair));
  auto& [pctx, sctx, pub, sub, seen, next] = pair;
  for (const std::string& bad : {std::string(), std::string("a\nb"), std::string("a\0b", 3), std::string(256, 't')}) {
    auto p = pctx->publisher(bad);
    ASSERT_FALSE(p.ok()) << "publisher on a topic of " << bad.size() << " bytes";
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << p.status();
    EXPECT_NE(p.status().message().find("topic"), std::string_view::npos) << p.status();
    auto s = sctx->subscriber(bad);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << s.status();
  }
  EXPECT_TRUE(pctx->publisher(std::string(255, 't')).ok()) << "255 bytes is a topic";

  std::uint64_t v = 1;
  auto every_call_is_closed = [&](Publisher& p) {
    EXPECT_TRUE(p.is_closed());
    EXPECT_FALSE(p.is_connected());
    EXPECT_EQ(p.offer(&v, sizeof v), kClosed);
    Claim c;
    EXPECT_EQ(p.claim(sizeof v, c), kClosed);
    std::span<const std::byte> m[1] = {std::as_bytes(std::span(&v, 1))};
    EXPECT_EQ(p.offer_batch(std::span(m, 1)), kClosed);
    (void)p.service();
  };
  pub->close();
  every_call_is_closed(*pub);
  pub->close();  // twice is harmless
  sub->close();
  EXPECT_EQ(Drain(*sub, seen), 0);
  EXPECT_FALSE(sub->wait(1000));

  // Destroying the context closes what it opened; the handles stay safe to call.
  auto pub2 = pctx->publisher("e2");
  ASSERT_TRUE(pub2.ok()) << pub2.status();
  auto sub2 = sctx->subscriber("e2");
  ASSERT_TRUE(sub2.ok()) << sub2.status();
  pctx.reset();
  sctx.reset();
  every_call_is_closed(*pub2);
  EXPECT_EQ(Drain(*sub2, seen), 0);
  EXPECT_FALSE(sub2->wait(1000));
  EXPECT_FALSE(sub2->is_connected());
}

// ---- resources ---------------------------------------------------------------------------------

// A long-running process opens and closes streams all day: what a closed publisher or
// subscriber held (pool slots, rings, sockets, queue pairs) comes back. 12 rounds of a
// publisher and a subscriber, each delivering a message, in a pool that holds about three
// publishers' slots at once.
TEST_P(Contract, OpeningAndClosingAgainAndAgainUsesNothingUp) {
  const Configs cfg = Config(11, {.shm = "", .udp = "", .rdma = "", .pool_slots = 4096});
  Pair pair;
  ASSERT_NO_FATAL_FAILURE(OpenContexts(cfg, pair));
  for (std::uint64_t round = 1; round <= 12; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    auto sub = pair.sctx->subscriber("again");
    ASSERT_TRUE(sub.ok()) << sub.status();
    auto pub = pair.pctx->publisher("again");
    ASSERT_TRUE(pub.ok()) << pub.status();
    Seen seen;
    std::int64_t r = kNotConnected;
    ASSERT_TRUE(Until([&] { return !seen.values.empty() && seen.values.back() == round; },
                      [&] {
                        if (r < 0) r = pub->offer(&round, sizeof round);
                        (void)pub->service();
                        Drain(*sub, seen);
                      }))
        << "offer " << result_name(r) << ", seen " << seen.trace;
    sub->close();
    pub->close();
  }
}

// ---- the duty call -----------------------------------------------------------------------------

// Two applications (here two threads with a context each), each of which waits for its own
// publisher to connect - calling only Publisher::service(), as its documentation says - before
// it polls its subscriber, whose publisher is the other's. In inline mode nothing else runs
// the subscribers' side (attaching, answering the publisher): service() does, until their
// first poll. Every mode connects both ways and delivers.
TEST_P(Contract, ApplicationsThatWaitForTheirPublisherBeforePollingConnect) {
  const Configs cfg = Config(5);
  std::atomic<int> failures{0}, received{0};
  std::string why[2];
  auto side = [&](int i, const char* in, const char* out) {
    auto ctx = Context::from_string(i == 0 ? cfg.a : cfg.b, i == 0 ? "a.toml" : "b.toml");
    if (!ctx.ok()) {
      why[i] = std::string(ctx.status().message());
      ++failures;
      return;
    }
    auto sub = (*ctx)->subscriber(in);
    auto pub = (*ctx)->publisher(out);
    if (!sub.ok() || !pub.ok()) {
      why[i] = std::string((sub.ok() ? pub.status() : sub.status()).message());
      ++failures;
      return;
    }
    if (!Until([&] { return pub->is_connected(); }, [&] { (void)pub->service(); })) {
      why[i] = "its publisher never connected";
      ++failures;
      return;
    }
    std::uint64_t v = 7 + static_cast<std::uint64_t>(i);
    std::int64_t r = kBackPressured;
    std::uint64_t got = 0;
    if (!Until([&] { return r >= 0 && got != 0; },
               [&] {
                 if (r < 0) r = pub->offer(&v, sizeof v);
                 (void)pub->service();
                 sub->poll([&](const Message& m) { std::memcpy(&got, m.payload.data(), sizeof got); }, 16);
               })) {
      why[i] = absl::StrCat("offer ", std::string(result_name(r)), ", received ", got);
      ++failures;
      return;
    }
    if (got != 8 - static_cast<std::uint64_t>(i)) {
      why[i] = absl::StrCat("received ", got);
      ++failures;
      return;
    }
    ++received;
    // Stay until the other side received too (closing would end its stream early).
    (void)Until([&] { return received == 2 || failures != 0; },
                [&] {
                  (void)pub->service();
                  sub->poll([](const Message&) {}, 16);
                });
  };
  std::thread a(side, 0, "b2a", "a2b");
  std::thread b(side, 1, "a2b", "b2a");
  a.join();
  b.join();
  EXPECT_EQ(failures, 0) << "a: " << why[0] << "; b: " << why[1];
}

#ifdef POLLUX_CONTRACT_RDMA
INSTANTIATE_TEST_SUITE_P(Rdma, Contract,
                         ::testing::Values(Mode{"rdma_rc", "inline"}, Mode{"rdma_rc", "dedicated"},
                                           Mode{"rdma_rc", "shared"}, Mode{"rdma_ud", "inline"},
                                           Mode{"rdma_ud", "dedicated"}, Mode{"rdma_ud", "shared"}),
                         Name);
#else
INSTANTIATE_TEST_SUITE_P(Every, Contract,
                         ::testing::Values(Mode{"shm", "inline"}, Mode{"shm", "dedicated"}, Mode{"shm", "shared"},
                                           Mode{"udp", "inline"}, Mode{"udp", "dedicated"}, Mode{"udp", "shared"}),
                         Name);
#endif

}  // namespace
}  // namespace pollux
