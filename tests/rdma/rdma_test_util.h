// Helpers shared by the RDMA tests that run inside the Soft-RoCE VM (tests/rdma/README.md):
// rxe0 = 10.0.0.1 (publishers), rxe1 = 10.0.0.2 (subscribers), GID index 1 = RoCEv2 IPv4.
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "core/buffer_pool.h"
#include "core/config.h"
#include "core/counters.h"
#include "core/trace.h"
#include "pollux/pollux.h"
#include "transport/transport.h"

namespace pollux::rdmatest {

inline bool in_vm() { return access("/sys/class/infiniband/rxe1", F_OK) == 0; }

#define POLLUX_REQUIRE_RXE()                                                                \
  do {                                                                                      \
    if (!::pollux::rdmatest::in_vm())                                                       \
      GTEST_SKIP() << "needs rxe0/rxe1: run in the Soft-RoCE VM (tests/rdma/run-in-vm.sh)"; \
  } while (0)

// A fresh rdma_cm port per test (a listener's port is free again at once, but fresh ports keep
// one test's stragglers away from the next).
inline int next_port() {
  static std::atomic<int> p{7500 + static_cast<int>(getpid() % 200) * 10};
  return p++;
}

inline std::string unique_name(const char* tag) {
  static std::atomic<int> n{0};
  return std::string(tag) + "-" + std::to_string(getpid()) + "-" + std::to_string(n++);
}

// [runtime] + [pool] + [transport] + [rdma] for one context.
inline std::string rdma_config(const std::string& threading, const std::string& device, const std::string& rdma_extra,
                               const std::string& runtime_extra = "", const std::string& mode = "rc") {
  return "[runtime]\nname = \"" + unique_name("rdma") + "\"\nthreading = \"" + threading + "\"\nidle = \"yield\"\n" +
         runtime_extra + "[pool]\nslots = 4096\nhugepages = \"off\"\n" +
         "[transport]\nkind = \"rdma\"\n[rdma]\ndevice = \"" + device + "\"\ngid_index = 1\nmode = \"" + mode + "\"\n" +
         rdma_extra;
}
inline std::string sub_config(const std::string& threading, int port, const std::string& extra = "",
                              const std::string& runtime_extra = "") {
  return rdma_config(threading, "rxe1", "listen_port = " + std::to_string(port) + "\n" + extra, runtime_extra);
}
inline std::string pub_config(const std::string& threading, int port, const std::string& extra = "",
                              const std::string& runtime_extra = "") {
  return rdma_config(threading, "rxe0",
                     "peers = [\"10.0.0.2:" + std::to_string(port) + "\"]\nreconnect_ms = 50\n" + extra, runtime_extra);
}

inline std::unique_ptr<Context> make(const std::string& toml) {
  auto c = Context::from_string(toml, "test.toml");
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

template <typename Pred>
bool wait_for(Pred p, int seconds = 30) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (!p()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

// Polls `sub` and services `pub` until the publisher is connected (inline: what connects a UD
// publisher, a subscriber's status, is read in service()).
inline void wait_connected(Publisher& pub, Subscriber& sub) {
  ASSERT_TRUE(wait_for([&] {
    (void)sub.poll([](const Message&) {}, 1);
    (void)pub.service();
    return pub.is_connected();
  })) << "publisher never connected";
}

// Two contexts (subscriber, publisher) with a subscriber and a publisher of `topic`, connected.
struct ConnectedPair {
  std::unique_ptr<Context> sub_ctx, pub_ctx;
  absl::StatusOr<Subscriber> sub = absl::UnknownError("not opened");
  absl::StatusOr<Publisher> pub = absl::UnknownError("not opened");

  void open(const std::string& sub_toml, const std::string& pub_toml, const std::string& topic = "md") {
    sub_ctx = make(sub_toml);
    pub_ctx = make(pub_toml);
    ASSERT_TRUE(sub_ctx && pub_ctx);
    sub = sub_ctx->subscriber(topic);
    pub = pub_ctx->publisher(topic);
    ASSERT_TRUE(sub.ok() && pub.ok()) << sub.status() << pub.status();
    wait_connected(*pub, *sub);
  }
};

// The sum of the counters named `name` whose scope starts with `scope_prefix` ("" = any) in the
// counters file at `path` (several endpoints' counters of one name add up); ~0 when the file
// cannot be read.
inline std::uint64_t counter_sum(const std::string& path, const std::string& name,
                                 const std::string& scope_prefix = "") {
  auto snap = core::read_counters_file(path);
  if (!snap.ok()) return ~0ull;
  std::uint64_t v = 0;
  for (const auto& c : snap->counters) {
    if (c.name == name && c.scope.rfind(scope_prefix, 0) == 0) v += c.value;
  }
  return v;
}

// A transport without a Context (transport-level tests: endpoints used directly).
struct RawTransport {
  core::Config cfg;
  std::unique_ptr<core::CountersFile> counters;
  std::unique_ptr<core::BufferPool> pool;
  std::unique_ptr<transport::Transport> t;
  ~RawTransport() {
    if (t != nullptr) t->close();
  }
};

// counters_dir: where the counters file goes ("" = anonymous memory, not readable by path).
inline absl::Status open_raw(const std::string& toml, RawTransport* r, const std::string& counters_dir = "") {
  auto cfg = core::parse_config(toml, "raw.toml");
  if (!cfg.ok()) return cfg.status();
  r->cfg = *cfg;
  auto cf = core::CountersFile::create(counters_dir, r->cfg.runtime.name);
  if (!cf.ok()) return cf.status();
  r->counters = std::move(*cf);
  core::PoolOptions o;
  o.slot_size = r->cfg.pool.slot_size;
  o.slots = r->cfg.pool.slots;
  o.hugepages = core::HugePages::kOff;
  auto p = core::BufferPool::create(o);
  if (!p.ok()) return p.status();
  r->pool = std::move(*p);
  auto t = transport::make_transport({&r->cfg, r->pool.get(), r->counters.get()});
  if (!t.ok()) return t.status();
  r->t = std::move(*t);
  return r->t->register_memory(*r->pool);
}

// A publisher and a subscriber of stream 7, both inline, each on a raw transport of its own
// (rxe0 -> rxe1), connected, and 64 of the publisher's pool slots to format frames in. The
// publisher records its traced sends into `log`; its counters file is under /tmp (readable by
// path). Members go in reverse order: the endpoints before the log and the transports.
struct RawPair {
  RawTransport pub, sub;
  core::SendCompletionLog log;
  std::unique_ptr<transport::TxEndpoint> tx;
  std::unique_ptr<transport::RxEndpoint> rx;
  core::SlotRange slots;
};

inline void open_pair(RawPair* p, const std::string& extra = "") {
  const int port = next_port();
  ASSERT_TRUE(open_raw(sub_config("inline", port, extra), &p->sub).ok());
  ASSERT_TRUE(open_raw(pub_config("inline", port, extra), &p->pub, "/tmp").ok());
  auto rx = p->sub.t->open_rx({7, "raw", nullptr, -1});
  ASSERT_TRUE(rx.ok()) << rx.status();
  p->rx = std::move(*rx);
  transport::EndpointSpec spec{7, "raw", nullptr, -1};
  spec.send_log = &p->log;
  auto tx = p->pub.t->open_tx(spec);
  ASSERT_TRUE(tx.ok()) << tx.status();
  p->tx = std::move(*tx);
  auto r = p->pub.pool->carve(64);
  ASSERT_TRUE(r.ok());
  p->slots = *r;
  transport::RxDesc ev[8];
  ASSERT_TRUE(wait_for([&] {
    (void)p->rx->poll_st(ev);
    return p->tx->connected();
  }));
}

}  // namespace pollux::rdmatest
