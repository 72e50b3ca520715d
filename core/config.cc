#include "core/config.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include <toml++/toml.h>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/config_values.h"

namespace pollux::core {

std::string_view threading_name(ThreadingMode m) {
  switch (m) {
    case ThreadingMode::kDedicated:
      return "dedicated";
    case ThreadingMode::kShared:
      return "shared";
    case ThreadingMode::kInline:
      return "inline";
  }
  return "?";
}
std::string_view transport_name(TransportKind k) {
  switch (k) {
    case TransportKind::kShm:
      return "shm";
    case TransportKind::kUdp:
      return "udp";
    case TransportKind::kRdma:
      return "rdma";
  }
  return "?";
}
std::string_view flow_control_name(FlowControl f) { return f == FlowControl::kLossy ? "lossy" : "backpressure"; }
std::string_view rdma_mode_name(RdmaMode m) { return m == RdmaMode::kRc ? "rc" : "ud_mcast"; }

// A string whose value does not fit in 64 bits (digits alone, or after the suffix's
// multiplication) is an error of its own: it must never wrap into a small, valid size.
std::string parse_size(std::string_view text, std::uint64_t lo, std::uint64_t hi, std::uint64_t* out) {
  std::uint64_t v = 0;
  const std::string quoted = absl::StrCat("\"", std::string(text), "\"");
  {
    std::string s = absl::AsciiStrToLower(std::string(text));
    std::uint64_t mult = 1;
    for (auto [suffix, m] : {std::pair{"kib", 1ull << 10}, {"mib", 1ull << 20}, {"gib", 1ull << 30}, {"b", 1ull}}) {
      if (s.size() > std::strlen(suffix) && s.compare(s.size() - std::strlen(suffix), std::string::npos, suffix) == 0) {
        s.resize(s.size() - std::strlen(suffix));
        mult = m;
        break;
      }
    }
    const absl::string_view digits = absl::StripAsciiWhitespace(s);
    const auto too_large = [&] {
      return absl::StrFormat("%s does not fit in 64 bits; expected %u..%u bytes", quoted, lo, hi);
    };
    if (!absl::SimpleAtoi(digits, &v)) {
      if (!digits.empty() && digits.find_first_not_of("0123456789") == absl::string_view::npos) return too_large();
      return absl::StrCat("expected a size like 16777216 or \"16MiB\", got ", quoted);
    }
    if (v > std::numeric_limits<std::uint64_t>::max() / mult) return too_large();
    v *= mult;
  }
  if (v < lo || v > hi) return absl::StrFormat("expected %u..%u bytes, got %u", lo, hi, v);
  *out = v;
  return "";
}

std::string format_size(std::uint64_t v) {
  for (auto [suffix, shift] : {std::pair{"GiB", 30}, {"MiB", 20}, {"KiB", 10}}) {
    if (v != 0 && v % (std::uint64_t{1} << shift) == 0) return absl::StrCat(v >> shift, suffix);
  }
  return absl::StrCat(v, " bytes");
}

namespace {

// Smallest frame on the wire (a bare 32-byte header): bounds the frames per datagram.
constexpr std::uint32_t kFrameHeaderSizeForConfig = 32;

bool is_pow2(std::uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

// Dotted-quad IPv4 ("10.0.0.2"); returns false on anything else.
bool parse_ipv4(std::string_view s, std::uint32_t* host_order) {
  std::uint32_t v = 0;
  int parts = 0;
  std::size_t i = 0;
  while (parts < 4) {
    std::size_t j = i;
    std::uint32_t octet = 0;
    while (j < s.size() && s[j] >= '0' && s[j] <= '9' && j - i < 3)
      octet = octet * 10 + static_cast<std::uint32_t>(s[j++] - '0');
    if (j == i || octet > 255) return false;
    v = (v << 8) | octet;
    ++parts;
    i = j;
    if (parts < 4) {
      if (i >= s.size() || s[i] != '.') return false;
      ++i;
    }
  }
  if (i != s.size()) return false;
  *host_order = v;
  return true;
}

// "ip:port" with a dotted-quad IPv4 address (rdma_cm peers).
std::string check_ip_port(const std::string& s) {
  const std::size_t colon = s.rfind(':');
  std::uint32_t ip;
  std::uint32_t port = 0;
  if (colon == std::string::npos || !parse_ipv4(std::string_view(s).substr(0, colon), &ip) ||
      !absl::SimpleAtoi(s.substr(colon + 1), &port) || port == 0 || port > 65535) {
    return absl::StrFormat("expected \"a.b.c.d:port\" (IPv4 address and port 1..65535), got \"%s\"", s);
  }
  return "";
}

template <typename T>
std::string want_uint(const toml::node& n, std::int64_t lo, std::int64_t hi, T* out) {
  std::int64_t v;
  auto e = want_int(n, lo, hi, &v);
  if (e.empty()) *out = static_cast<T>(v);
  return e;
}

// A probability 0..1 (integers 0 and 1 accepted too).
std::string want_probability(const toml::node& n, double* out) {
  double v;
  if (!node_number(n, &v)) return absl::StrCat("expected a probability 0.0..1.0, got ", describe(n));
  if (!(v >= 0 && v <= 1)) return absl::StrCat("expected a probability 0.0..1.0, got ", v);
  *out = v;
  return "";
}

// A dotted-quad IPv4 address; sets *multicast when it is in 224.0.0.0/4.
std::string want_ipv4(const toml::node& n, std::string* out, bool* multicast = nullptr) {
  std::string s;
  if (auto e = want_string(n, &s); !e.empty()) return e;
  in_addr a{};
  if (inet_pton(AF_INET, s.c_str(), &a) != 1)
    return absl::StrFormat("expected an IPv4 address like \"239.255.0.1\", got \"%s\"", s);
  if (multicast != nullptr) *multicast = (ntohl(a.s_addr) >> 28) == 0xE;
  *out = s;
  return "";
}

// ---- the table ----------------------------------------------------------------------------------

struct Field {
  const char* key;
  const char* help;
  std::function<std::string(Config&, const toml::node&)> set;
  std::function<std::string(const Config&)> get;
};

const std::vector<Field>& fields() {
  static const std::vector<Field> table = {
      // [runtime]
      {"runtime.threading",
       "dedicated: pollers on their own (pinned) cores own the transports; shared: one poller for "
       "everything; inline: no poller, the application's offer()/poll() drive the transport",
       [](Config& c, const toml::node& n) {
         return want_enum<ThreadingMode>(n,
                                         {{"dedicated", ThreadingMode::kDedicated},
                                          {"shared", ThreadingMode::kShared},
                                          {"inline", ThreadingMode::kInline}},
                                         &c.runtime.threading);
       },
       [](const Config& c) { return quote(threading_name(c.runtime.threading)); }},
      {"runtime.pollers", "number of poller threads in dedicated mode (shared mode uses 1)",
       [](Config& c, const toml::node& n) {
         std::int64_t v;
         auto e = want_int(n, 1, 64, &v);
         if (e.empty()) c.runtime.pollers = static_cast<std::uint32_t>(v);
         return e;
       },
       [](const Config& c) { return absl::StrCat(c.runtime.pollers); }},
      {"runtime.poller_cores",
       "OS CPU numbers for the pollers, in order; [] = automatic (unclaimed cores on the device's NUMA node, highest "
       "first, claimed in shm_dir so processes do not collide)",
       [](Config& c, const toml::node& n) -> std::string {
         const toml::array* a = n.as_array();
         if (a == nullptr) return absl::StrCat("expected an array of CPU numbers, got ", describe(n));
         c.runtime.poller_cores.clear();
         for (std::size_t i = 0; i < a->size(); ++i) {
           std::int64_t v;
           if (auto err = want_int(*a->get(i), 0, 4095, &v); !err.empty())
             return absl::StrCat("element ", i, ": ", err);
           c.runtime.poller_cores.push_back(static_cast<int>(v));
         }
         return "";
       },
       [](const Config& c) { return absl::StrCat("[", absl::StrJoin(c.runtime.poller_cores, ", "), "]"); }},
      {"runtime.idle",
       "what an idle poller does: adaptive (busy-polls under load, spins briefly then sleeps on the transport's "
       "notifications when sparse, sleeps when idle), interrupt (sleeps after every empty cycle), busy-spin (lowest "
       "latency, burns the core), yield, backoff (spin, then yield, then park up to 1 ms)",
       [](Config& c, const toml::node& n) {
         return want_enum<IdleKind>(n,
                                    {{"adaptive", IdleKind::kAdaptive},
                                     {"interrupt", IdleKind::kInterrupt},
                                     {"busy-spin", IdleKind::kBusySpin},
                                     {"yield", IdleKind::kYield},
                                     {"backoff", IdleKind::kBackoff}},
                                    &c.runtime.idle);
       },
       [](const Config& c) { return quote(idle_kind_name(c.runtime.idle)); }},
      {"runtime.sleep_timer_ms",
       "adaptive/interrupt: a sleeping poller wakes at least this often to run its timers (heartbeats, liveness, "
       "retransmits); 0 = only when woken (transports that need timers while asleep arm their own: UDP and RDMA "
       "ud_mcast keep heartbeats going with a timerfd; shm then notices a dead publisher only with its next data)",
       [](Config& c, const toml::node& n) {
         std::int64_t v;
         auto e = want_int(n, 0, 60'000, &v);
         if (e.empty()) c.runtime.sleep_timer_ms = static_cast<std::uint32_t>(v);
         return e;
       },
       [](const Config& c) { return absl::StrCat(c.runtime.sleep_timer_ms); }},
      {"runtime.adaptive.wakeup_cost_ns",
       "adaptive: what one sleep + wakeup costs the next message (ns); spinning through a silence pays only when it is "
       "shorter than wakeup_cost_ns * spin_factor",
       [](Config& c, const toml::node& n) {
         std::int64_t v;
         auto e = want_int(n, 1, 2147483647, &v);
         if (e.empty()) c.runtime.adaptive.wakeup_cost_ns = v;
         return e;
       },
       [](const Config& c) { return absl::StrCat(c.runtime.adaptive.wakeup_cost_ns); }},
      {"runtime.adaptive.max_spin_ns", "adaptive: upper bound of the spin budget after the last message (ns)",
       [](Config& c, const toml::node& n) {
         std::int64_t v;
         auto e = want_int(n, 0, 2147483647, &v);
         if (e.empty()) c.runtime.adaptive.max_spin_ns = v;
         return e;
       },
       [](const Config& c) { return absl::StrCat(c.runtime.adaptive.max_spin_ns); }},
      {"runtime.adaptive.min_spin_ns", "adaptive: floor of a non-zero spin budget (ns)",
       [](Config& c, const toml::node& n) {
         std::int64_t v;
         auto e = want_int(n, 0, 2147483647, &v);
         if (e.empty()) c.runtime.adaptive.min_spin_ns = v;
         return e;
       },
       [](const Config& c) { return absl::StrCat(c.runtime.adaptive.min_spin_ns); }},
      {"runtime.adaptive.dense_gap_ns",
       "adaptive: busy mode starts when the observed inter-arrival gap quantile is at most this (ns)",
       [](Config& c, const toml::node& n) {
         std::int64_t v;
         auto e = want_int(n, 0, 2147483647, &v);
         if (e.empty()) c.runtime.adaptive.dense_gap_ns = v;
         return e;
       },
       [](const Config& c) { return absl::StrCat(c.runtime.adaptive.dense_gap_ns); }},
      {"runtime.adaptive.busy_exit_gap_ns",
       "adaptive: busy mode ends when the gap quantile exceeds this (ns; >= dense_gap_ns)",
       [](Config& c, const toml::node& n) {
         std::int64_t v;
         auto e = want_int(n, 0, 2147483647, &v);
         if (e.empty()) c.runtime.adaptive.busy_exit_gap_ns = v;
         return e;
       },
       [](const Config& c) { return absl::StrCat(c.runtime.adaptive.busy_exit_gap_ns); }},
      {"runtime.adaptive.busy_linger_ns", "adaptive: busy mode ends after this much silence (ns)",
       [](Config& c, const toml::node& n) {
         std::int64_t v;
         auto e = want_int(n, 0, 2147483647, &v);
         if (e.empty()) c.runtime.adaptive.busy_linger_ns = v;
         return e;
       },
       [](const Config& c) { return absl::StrCat(c.runtime.adaptive.busy_linger_ns); }},
      {"runtime.adaptive.idle_after_ns",
       "adaptive: silence after which a poller is idle and goes to interrupt mode (ns)",
       [](Config& c, const toml::node& n) {
         std::int64_t v;
         auto e = want_int(n, 1, 2147483647, &v);
         if (e.empty()) c.runtime.adaptive.idle_after_ns = v;
         return e;
       },
       [](const Config& c) { return absl::StrCat(c.runtime.adaptive.idle_after_ns); }},
      {"runtime.adaptive.spin_factor", "adaptive: spin threshold = wakeup_cost_ns * spin_factor",
       [](Config& c, const toml::node& n) -> std::string {
         if (!n.is_number()) return absl::StrCat("expected a number, got ", describe(n));
         c.runtime.adaptive.spin_factor =
             n.is_floating_point() ? *n.value<double>() : static_cast<double>(*n.value<std::int64_t>());
         return "";
       },
       [](const Config& c) { return absl::StrCat(c.runtime.adaptive.spin_factor); }},
      {"runtime.adaptive.spin_quantile", "adaptive: spin through a silence only if P(gap <= budget) >= this (0..1]",
       [](Config& c, const toml::node& n) -> std::string {
         if (!n.is_number()) return absl::StrCat("expected a number, got ", describe(n));
         c.runtime.adaptive.spin_quantile =
             n.is_floating_point() ? *n.value<double>() : static_cast<double>(*n.value<std::int64_t>());
         return "";
       },
       [](const Config& c) { return absl::StrCat(c.runtime.adaptive.spin_quantile); }},
      {"runtime.poll_yield",
       "adaptive/interrupt: an empty cycle while polling (busy or spin mode) calls sched_yield (true: application "
       "threads sharing the poller's CPU keep running; measured on 2 vCPUs: 100k msg/s p50 7 us instead of 471 us) or "
       "only a pause instruction (false: lowest latency when every poller has a core of its own)",
       [](Config& c, const toml::node& n) -> std::string {
         if (!n.is_boolean()) return absl::StrCat("expected true or false, got ", describe(n));
         c.runtime.poll_yield = *n.value<bool>();
         return "";
       },
       [](const Config& c) { return std::string(c.runtime.poll_yield ? "true" : "false"); }},
      {"runtime.name", "instance name, used in shared-memory file names",
       [](Config& c, const toml::node& n) -> std::string {
         std::string s;
         if (auto e = want_string(n, &s); !e.empty()) return e;
         if (s.empty() || s.size() > 40 ||
             s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") !=
                 std::string::npos) {
           return absl::StrCat("expected 1-40 characters from [A-Za-z0-9_.-], got ", quote(s));
         }
         c.runtime.name = s;
         return "";
       },
       [](const Config& c) { return quote(c.runtime.name); }},
      {"runtime.shm_dir", "directory for shared-memory files (a tmpfs)",
       [](Config& c, const toml::node& n) { return want_string(n, &c.runtime.shm_dir); },
       [](const Config& c) { return quote(c.runtime.shm_dir); }},
      {"runtime.counters", "publish counters in <shm_dir>/pollux-<name>-<pid>.counters for pollux-stat",
       [](Config& c, const toml::node& n) { return want_bool(n, &c.runtime.counters); },
       [](const Config& c) { return std::string(c.runtime.counters ? "true" : "false"); }},
      {"runtime.device",
       "network or RDMA device (e.g. \"mlx5_0\", \"eth0\") whose NUMA node gets the pollers and the pool; \"\" = none",
       [](Config& c, const toml::node& n) { return want_string(n, &c.runtime.device); },
       [](const Config& c) { return quote(c.runtime.device); }},
      // [pool]
      {"pool.slot_size",
       "bytes per buffer slot: the largest frame (32-byte header + payload) a publisher can offer in dedicated/shared "
       "mode",
       [](Config& c, const toml::node& n) {
         std::uint64_t v;
         auto e = want_size(n, 128, 16u << 20, &v);
         if (e.empty()) c.pool.slot_size = static_cast<std::uint32_t>(v);
         return e;
       },
       [](const Config& c) { return size_toml(c.pool.slot_size); }},
      {"pool.slots", "buffer slots in the pool (shared by all endpoints of the context)",
       [](Config& c, const toml::node& n) {
         std::int64_t v;
         auto e = want_int(n, 64, 1 << 24, &v);
         if (e.empty()) c.pool.slots = static_cast<std::uint32_t>(v);
         return e;
       },
       [](const Config& c) { return absl::StrCat(c.pool.slots); }},
      {"pool.hugepages", "auto: 2 MiB pages when reserved, else normal pages; on: fail without them; off",
       [](Config& c, const toml::node& n) {
         return want_enum<HugePages>(n, {{"auto", HugePages::kAuto}, {"on", HugePages::kOn}, {"off", HugePages::kOff}},
                                     &c.pool.hugepages);
       },
       [](const Config& c) {
         return quote(c.pool.hugepages == HugePages::kAuto ? "auto"
                      : c.pool.hugepages == HugePages::kOn ? "on"
                                                           : "off");
       }},
      {"pool.numa_node", "NUMA node for the pool; -1 = the device's node, or unbound",
       [](Config& c, const toml::node& n) {
         std::int64_t v;
         auto e = want_int(n, -1, 1023, &v);
         if (e.empty()) c.pool.numa_node = static_cast<int>(v);
         return e;
       },
       [](const Config& c) { return absl::StrCat(c.pool.numa_node); }},
      // [rings]
      {"rings.capacity", "descriptors per application<->poller ring (power of two)",
       [](Config& c, const toml::node& n) -> std::string {
         std::int64_t v;
         if (auto e = want_int(n, 2, 1 << 20, &v); !e.empty()) return e;
         if (!is_pow2(static_cast<std::uint64_t>(v))) return absl::StrCat("expected a power of two, got ", v);
         c.rings.capacity = static_cast<std::uint32_t>(v);
         return "";
       },
       [](const Config& c) { return absl::StrCat(c.rings.capacity); }},
      {"rings.burst", "most descriptors a poller moves through one ring per duty cycle",
       [](Config& c, const toml::node& n) {
         std::int64_t v;
         auto e = want_int(n, 1, 256, &v);
         if (e.empty()) c.rings.burst = static_cast<std::uint32_t>(v);
         return e;
       },
       [](const Config& c) { return absl::StrCat(c.rings.burst); }},
      {"rings.kind",
       "implementation of the application<->poller rings: spsc (Pollux's own, cached indices; the default) or boost "
       "(boost::lockfree::spsc_queue); bench/ring_bench.cc compares them",
       [](Config& c, const toml::node& n) {
         return want_enum<RingKind>(n, {{"spsc", RingKind::kSpsc}, {"boost", RingKind::kBoost}}, &c.rings.kind);
       },
       [](const Config& c) { return quote(ring_kind_name(c.rings.kind)); }},
      // [transport]
      {"transport.kind", "shm (processes on one host), udp, rdma",
       [](Config& c, const toml::node& n) {
         return want_enum<TransportKind>(
             n, {{"shm", TransportKind::kShm}, {"udp", TransportKind::kUdp}, {"rdma", TransportKind::kRdma}},
             &c.transport);
       },
       [](const Config& c) { return quote(transport_name(c.transport)); }},
      // [shm]
      {"shm.log_size",
       "bytes of each stream's broadcast log (power of two, 64KiB..4GiB); the largest message is log_size/32",
       [](Config& c, const toml::node& n) -> std::string {
         std::uint64_t v;
         if (auto e = want_size(n, 64u << 10, 4ull << 30, &v); !e.empty()) return e;
         if (!is_pow2(v)) return absl::StrCat("expected a power of two, got ", v);
         c.shm.log_size = v;
         return "";
       },
       [](const Config& c) { return size_toml(c.shm.log_size); }},
      {"shm.flow_control",
       "lossy: the publisher never waits, a lapped subscriber gets a gap report; backpressure: offer() returns "
       "kBackPressured while the slowest live subscriber is a whole log behind",
       [](Config& c, const toml::node& n) {
         return want_enum<FlowControl>(
             n, {{"lossy", FlowControl::kLossy}, {"backpressure", FlowControl::kBackpressure}}, &c.shm.flow_control);
       },
       [](const Config& c) { return quote(flow_control_name(c.shm.flow_control)); }},
      {"shm.max_subscribers", "subscriber slots per stream log",
       [](Config& c, const toml::node& n) {
         std::int64_t v;
         auto e = want_int(n, 1, 64, &v);
         if (e.empty()) c.shm.max_subscribers = static_cast<std::uint32_t>(v);
         return e;
       },
       [](const Config& c) { return absl::StrCat(c.shm.max_subscribers); }},
      {"shm.liveness_timeout_ms",
       "a publisher or subscriber silent (no heartbeat, process gone) this long is considered dead",
       [](Config& c, const toml::node& n) {
         std::int64_t v;
         auto e = want_int(n, 10, 3'600'000, &v);
         if (e.empty()) c.shm.liveness_timeout_ms = static_cast<std::uint32_t>(v);
         return e;
       },
       [](const Config& c) { return absl::StrCat(c.shm.liveness_timeout_ms); }},
      {"shm.group",
       "\"\": segments are 0600 and only files of this user are attached; a group name (or gid): segments are created "
       "0660 with that group and files of that group (any owner, group-writable) are attached too; never files others "
       "may write",
       [](Config& c, const toml::node& n) { return want_string(n, &c.shm.group); },
       [](const Config& c) { return quote(c.shm.group); }},
      // [rdma]
      {"rdma.device",
       "RDMA device (e.g. \"mlx5_0\", \"rxe0\"), or \"auto\": runtime.device if it names one, else the first device "
       "with an active port; its NUMA node gets the pollers and the pool",
       [](Config& c, const toml::node& n) -> std::string {
         if (auto e = want_string(n, &c.rdma.device); !e.empty()) return e;
         if (c.rdma.device.empty()) return "expected a device name or \"auto\", got \"\"";
         return "";
       },
       [](const Config& c) { return quote(c.rdma.device); }},
      {"rdma.port", "device port number (1-based)",
       [](Config& c, const toml::node& n) { return want_uint(n, 1, 255, &c.rdma.port); },
       [](const Config& c) { return absl::StrCat(c.rdma.port); }},
      {"rdma.gid_index", "GID table index (ibv_devinfo -v, `show_gids`); -1 = the port's RoCEv2 IPv4-mapped GID",
       [](Config& c, const toml::node& n) { return want_uint(n, -1, 4095, &c.rdma.gid_index); },
       [](const Config& c) { return absl::StrCat(c.rdma.gid_index); }},
      {"rdma.mode",
       "rc: reliable connection per (publisher thread, subscriber) via rdma_cm; ud_mcast: datagrams to "
       "rdma.multicast_group, lost ones repaired by NAK over unicast UD (loss beyond rdma.retransmit_buffer reported "
       "as exact gaps)",
       [](Config& c, const toml::node& n) {
         return want_enum<RdmaMode>(n, {{"rc", RdmaMode::kRc}, {"ud_mcast", RdmaMode::kUdMulticast}}, &c.rdma.mode);
       },
       [](const Config& c) { return quote(rdma_mode_name(c.rdma.mode)); }},
      {"rdma.listen_port",
       "rc: port (rdma_cm, TCP port space) on the device's IPv4 address where subscribers accept publishers",
       [](Config& c, const toml::node& n) { return want_uint(n, 1, 65535, &c.rdma.listen_port); },
       [](const Config& c) { return absl::StrCat(c.rdma.listen_port); }},
      {"rdma.peers",
       "rc: subscribers every publisher connects to, as [\"a.b.c.d:port\", ...] (their device address and "
       "rdma.listen_port)",
       [](Config& c, const toml::node& n) -> std::string {
         const toml::array* a = n.as_array();
         if (a == nullptr) return absl::StrCat("expected an array of \"a.b.c.d:port\" strings, got ", describe(n));
         if (a->size() > 64) return absl::StrCat("at most 64 peers, got ", a->size());
         c.rdma.peers.clear();
         for (std::size_t i = 0; i < a->size(); ++i) {
           std::string s;
           if (auto err = want_string(*a->get(i), &s); !err.empty()) return absl::StrCat("element ", i, ": ", err);
           if (auto err = check_ip_port(s); !err.empty()) return absl::StrCat("element ", i, ": ", err);
           c.rdma.peers.push_back(s);
         }
         return "";
       },
       [](const Config& c) {
         std::vector<std::string> q;
         for (const std::string& p : c.rdma.peers) q.push_back(quote(p));
         return absl::StrCat("[", absl::StrJoin(q, ", "), "]");
       }},
      {"rdma.multicast_group",
       "ud_mcast: IPv4 multicast group (224.0.0.0/4) all streams are sent to; subscribers filter by stream id",
       [](Config& c, const toml::node& n) -> std::string {
         std::string s;
         if (auto e = want_string(n, &s); !e.empty()) return e;
         std::uint32_t ip;
         if (!parse_ipv4(s, &ip) || (ip >> 28) != 0xE)
           return absl::StrFormat("expected an IPv4 multicast address (224.0.0.0 - 239.255.255.255), got \"%s\"", s);
         c.rdma.multicast_group = s;
         return "";
       },
       [](const Config& c) { return quote(c.rdma.multicast_group); }},
      {"rdma.inline_threshold",
       "frames up to this many bytes are copied into the work request (inline: no DMA read of the buffer); capped by "
       "the QP's max_inline_data; 0 = never",
       [](Config& c, const toml::node& n) { return want_uint(n, 0, 4096, &c.rdma.inline_threshold); },
       [](const Config& c) { return absl::StrCat(c.rdma.inline_threshold); }},
      {"rdma.send_queue_depth", "work requests per send queue (one QP per publisher and subscriber)",
       [](Config& c, const toml::node& n) { return want_uint(n, 16, 32768, &c.rdma.send_queue_depth); },
       [](const Config& c) { return absl::StrCat(c.rdma.send_queue_depth); }},
      {"rdma.recv_queue_depth",
       "receive buffers (pool slots) per poller's shared receive queue, or per QP without an SRQ; keep it above "
       "rings.capacity, or a subscriber holding a full ring leaves none posted (RC then stalls on RNR retries, UD "
       "drops)",
       [](Config& c, const toml::node& n) { return want_uint(n, 16, 65536, &c.rdma.recv_queue_depth); },
       [](const Config& c) { return absl::StrCat(c.rdma.recv_queue_depth); }},
      {"rdma.cq_depth", "completion queue entries per poller (inline mode: per endpoint); grown when QPs need more",
       [](Config& c, const toml::node& n) { return want_uint(n, 64, 1 << 22, &c.rdma.cq_depth); },
       [](const Config& c) { return absl::StrCat(c.rdma.cq_depth); }},
      {"rdma.signal_every", "request a completion for one send in N (selective signalling); the rest complete silently",
       [](Config& c, const toml::node& n) { return want_uint(n, 1, 4096, &c.rdma.signal_every); },
       [](const Config& c) { return absl::StrCat(c.rdma.signal_every); }},
      {"rdma.post_batch",
       "most send work requests chained into one ibv_post_send, i.e. one doorbell (per QP); a burst of more frames "
       "takes several; 1 = one doorbell per message (for A/B measurements); 64 = every burst (up to 64 frames per post "
       "call) in one",
       [](Config& c, const toml::node& n) { return want_uint(n, 1, 64, &c.rdma.post_batch); },
       [](const Config& c) { return absl::StrCat(c.rdma.post_batch); }},
      {"rdma.recv_batch", "released receive buffers are re-posted in batches of this many (one post call each)",
       [](Config& c, const toml::node& n) { return want_uint(n, 1, 1024, &c.rdma.recv_batch); },
       [](const Config& c) { return absl::StrCat(c.rdma.recv_batch); }},
      {"rdma.srq",
       "shared receive queue per poller: auto (when the device has SRQs), on (fail without), off (a receive queue per "
       "QP)",
       [](Config& c, const toml::node& n) {
         return want_enum<RdmaSrq>(n, {{"auto", RdmaSrq::kAuto}, {"on", RdmaSrq::kOn}, {"off", RdmaSrq::kOff}},
                                   &c.rdma.srq);
       },
       [](const Config& c) {
         return quote(c.rdma.srq == RdmaSrq::kAuto ? "auto" : c.rdma.srq == RdmaSrq::kOn ? "on" : "off");
       }},
      {"rdma.mlx5dv",
       "auto: mlx5 direct-verbs send path (BlueFlame, pre-built WQEs) when mlx5dv_is_supported(); off: plain verbs "
       "everywhere",
       [](Config& c, const toml::node& n) {
         return want_enum<RdmaMlx5>(n, {{"auto", RdmaMlx5::kAuto}, {"off", RdmaMlx5::kOff}}, &c.rdma.mlx5dv);
       },
       [](const Config& c) { return quote(c.rdma.mlx5dv == RdmaMlx5::kAuto ? "auto" : "off"); }},
      {"rdma.cq_moderation_count",
       "interrupt moderation (ibv_modify_cq): raise a completion event after this many CQEs; 0 with cq_moderation_usec "
       "0 = off",
       [](Config& c, const toml::node& n) { return want_uint(n, 0, 65535, &c.rdma.cq_moderation_count); },
       [](const Config& c) { return absl::StrCat(c.rdma.cq_moderation_count); }},
      {"rdma.cq_moderation_usec", "interrupt moderation: or after this many microseconds",
       [](Config& c, const toml::node& n) { return want_uint(n, 0, 65535, &c.rdma.cq_moderation_usec); },
       [](const Config& c) { return absl::StrCat(c.rdma.cq_moderation_usec); }},
      {"rdma.heartbeat_ms",
       "ud_mcast: publishers send a heartbeat (with the next sequence, so tail loss shows as a gap) this often when "
       "idle",
       [](Config& c, const toml::node& n) { return want_uint(n, 1, 60'000, &c.rdma.heartbeat_ms); },
       [](const Config& c) { return absl::StrCat(c.rdma.heartbeat_ms); }},
      {"rdma.liveness_timeout_ms", "ud_mcast: a publisher silent this long is reported dead (end of stream)",
       [](Config& c, const toml::node& n) { return want_uint(n, 10, 3'600'000, &c.rdma.liveness_timeout_ms); },
       [](const Config& c) { return absl::StrCat(c.rdma.liveness_timeout_ms); }},
      {"rdma.reconnect_ms", "rc: a publisher retries an unreachable, rejecting or lost subscriber this often",
       [](Config& c, const toml::node& n) { return want_uint(n, 10, 600'000, &c.rdma.reconnect_ms); },
       [](const Config& c) { return absl::StrCat(c.rdma.reconnect_ms); }},
      {"rdma.connect_timeout_ms", "rc: rdma_cm address and route resolution timeout",
       [](Config& c, const toml::node& n) { return want_uint(n, 10, 600'000, &c.rdma.connect_timeout_ms); },
       [](const Config& c) { return absl::StrCat(c.rdma.connect_timeout_ms); }},
      {"rdma.rnr_timeout_us",
       "rc: when a subscriber has no receive buffer posted (it is not polling yet, or holds them all), the publisher's "
       "NIC sends again after this long (the subscriber QP's RNR timer, rounded up to the next of the 32 values "
       "InfiniBand can encode, 10 us .. 655360 us); publishers retry forever, so this is how long a stalled stream "
       "waits once buffers are back",
       [](Config& c, const toml::node& n) { return want_uint(n, 10, 655'360, &c.rdma.rnr_timeout_us); },
       [](const Config& c) { return absl::StrCat(c.rdma.rnr_timeout_us); }},
      {"rdma.retransmit_buffer",
       "ud_mcast: bytes of sent frames each publisher keeps for repairs (power of two, 64KiB..1GiB), carved from the "
       "registered buffer pool (ceil(bytes / pool.slot_size) slots per publisher); a subscriber that falls further "
       "behind gets an exact, unrecoverable gap",
       [](Config& c, const toml::node& n) -> std::string {
         std::uint64_t v;
         if (auto e = want_size(n, 64u << 10, 1ull << 30, &v); !e.empty()) return e;
         if (!is_pow2(v)) return absl::StrCat("expected a power of two, got ", v);
         c.rdma.retransmit_buffer = v;
         return "";
       },
       [](const Config& c) { return size_toml(c.rdma.retransmit_buffer); }},
      {"rdma.reorder_window",
       "ud_mcast: sequences a subscriber can hold ahead of a gap while it is repaired (power of two); 16 bytes each "
       "per session; frames held also hold their receive buffers (rdma.recv_queue_depth)",
       [](Config& c, const toml::node& n) -> std::string {
         std::int64_t v;
         if (auto e = want_int(n, 256, 1 << 24, &v); !e.empty()) return e;
         if (!is_pow2(static_cast<std::uint64_t>(v))) return absl::StrCat("expected a power of two, got ", v);
         c.rdma.reorder_window = static_cast<std::uint32_t>(v);
         return "";
       },
       [](const Config& c) { return absl::StrCat(c.rdma.reorder_window); }},
      {"rdma.max_sessions",
       "ud_mcast: publisher sessions (publishers, or restarts of one) a subscriber follows at once on one stream",
       [](Config& c, const toml::node& n) { return want_uint(n, 1, 64, &c.rdma.max_sessions); },
       [](const Config& c) { return absl::StrCat(c.rdma.max_sessions); }},
      {"rdma.nak_delay_us",
       "ud_mcast: a subscriber NAKs a new gap after a random delay in [0, this] (reordered datagrams fill it "
       "meanwhile; subscribers missing the same datagram spread their NAKs and the publisher repairs once)",
       [](Config& c, const toml::node& n) { return want_uint(n, 0, 1'000'000, &c.rdma.nak_delay_us); },
       [](const Config& c) { return absl::StrCat(c.rdma.nak_delay_us); }},
      {"rdma.nak_retry_us", "ud_mcast: an unrepaired gap is NAKed again after this, doubling per attempt",
       [](Config& c, const toml::node& n) { return want_uint(n, 10, 10'000'000, &c.rdma.nak_retry_us); },
       [](const Config& c) { return absl::StrCat(c.rdma.nak_retry_us); }},
      {"rdma.nak_retry_max_us", "ud_mcast: longest interval between two NAKs of one gap",
       [](Config& c, const toml::node& n) { return want_uint(n, 10, 60'000'000, &c.rdma.nak_retry_max_us); },
       [](const Config& c) { return absl::StrCat(c.rdma.nak_retry_max_us); }},
      {"rdma.nak_give_up_ms",
       "ud_mcast: a gap still unrepaired after this (while the publisher is alive) is reported lost",
       [](Config& c, const toml::node& n) { return want_uint(n, 1, 3'600'000, &c.rdma.nak_give_up_ms); },
       [](const Config& c) { return absl::StrCat(c.rdma.nak_give_up_ms); }},
      {"rdma.status_interval_ms",
       "ud_mcast: subscribers send a status message (position) to each publisher this often, unicast to its UD QP; a "
       "publisher is connected while it hears one within rdma.liveness_timeout_ms",
       [](Config& c, const toml::node& n) { return want_uint(n, 1, 60'000, &c.rdma.status_interval_ms); },
       [](const Config& c) { return absl::StrCat(c.rdma.status_interval_ms); }},
      {"rdma.nak_max_range",
       "ud_mcast: most sequences one NAK range may ask a publisher for (a larger range is cut; the subscriber asks for "
       "the rest again)",
       [](Config& c, const toml::node& n) { return want_uint(n, 1, 1 << 24, &c.rdma.nak_max_range); },
       [](const Config& c) { return absl::StrCat(c.rdma.nak_max_range); }},
      {"rdma.repair_rate",
       "ud_mcast: repair bytes per second a publisher sends on behalf of one subscriber (token bucket; 0 = unlimited): "
       "bounds what forged NAKs can make it send. Keep it above twice the stream's rate, or a subscriber that fell "
       "behind cannot catch up while the stream runs",
       [](Config& c, const toml::node& n) { return want_size(n, 0, 1ull << 40, &c.rdma.repair_rate); },
       [](const Config& c) { return size_toml(c.rdma.repair_rate); }},
      {"rdma.repair_burst",
       "ud_mcast: repair bytes a publisher sends for one subscriber at once (the bucket of rdma.repair_rate, at least "
       "one 4 KiB datagram; the bucket of rdma.repair_rate_total holds 4x this)",
       [](Config& c, const toml::node& n) { return want_size(n, 4096, 1ull << 36, &c.rdma.repair_burst); },
       [](const Config& c) { return size_toml(c.rdma.repair_burst); }},
      {"rdma.repair_rate_total",
       "ud_mcast: repair bytes per second a publisher sends in all, whoever asks (token bucket; 0 = unlimited)",
       [](Config& c, const toml::node& n) { return want_size(n, 0, 1ull << 40, &c.rdma.repair_rate_total); },
       [](const Config& c) { return size_toml(c.rdma.repair_rate_total); }},
      {"rdma.linger_ms",
       "Publisher::close() waits up to this long for its subscribers to have everything (0 = close at once). rc: until "
       "every frame and the end of stream are acknowledged; ud_mcast: repairing until every known subscriber confirmed "
       "the end of stream. Frames still unacknowledged then are lost and logged. It runs on the endpoint's thread (its "
       "poller, which meanwhile serves nothing else)",
       [](Config& c, const toml::node& n) { return want_uint(n, 0, 600'000, &c.rdma.linger_ms); },
       [](const Config& c) { return absl::StrCat(c.rdma.linger_ms); }},
      {"rdma.fault_loss",
       "ud_mcast testing: probability that a datagram a subscriber received is dropped before the protocol sees it "
       "(the loss interceptor)",
       [](Config& c, const toml::node& n) { return want_probability(n, &c.rdma.fault_loss); },
       [](const Config& c) { return absl::StrCat(c.rdma.fault_loss); }},
      {"rdma.fault_duplicate", "ud_mcast testing: probability that a received datagram is delivered twice",
       [](Config& c, const toml::node& n) { return want_probability(n, &c.rdma.fault_duplicate); },
       [](const Config& c) { return absl::StrCat(c.rdma.fault_duplicate); }},
      {"rdma.fault_reorder",
       "ud_mcast testing: probability that a received datagram is held back behind 1..8 later ones",
       [](Config& c, const toml::node& n) { return want_probability(n, &c.rdma.fault_reorder); },
       [](const Config& c) { return absl::StrCat(c.rdma.fault_reorder); }},
      {"rdma.fault_seed", "ud_mcast testing: seed of the loss interceptor (same seed, same faults)",
       [](Config& c, const toml::node& n) { return want_uint(n, 0, INT64_MAX, &c.rdma.fault_seed); },
       [](const Config& c) { return absl::StrCat(c.rdma.fault_seed); }},
      // [udp]
      {"udp.address",
       "multicast group (224.0.0.0/4: every subscriber joins it) or unicast IPv4 address (the subscriber's) the "
       "publishers send to; [[streams]] udp_address overrides it per stream",
       [](Config& c, const toml::node& n) { return want_ipv4(n, &c.udp.address); },
       [](const Config& c) { return quote(c.udp.address); }},
      {"udp.port",
       "UDP port of the data (subscribers bind it; publishers send from an ephemeral port that receives NAKs); "
       "[[streams]] udp_port overrides it per stream",
       [](Config& c, const toml::node& n) { return want_uint(n, 1, 65535, &c.udp.port); },
       [](const Config& c) { return absl::StrCat(c.udp.port); }},
      {"udp.interface",
       "local interface for multicast (sending and joining) and the address subscribers bind for unicast: a name "
       "(\"eth0\") or an IPv4 address; \"\" = the kernel's routing choice. The default keeps traffic on this host",
       [](Config& c, const toml::node& n) { return want_string(n, &c.udp.interface); },
       [](const Config& c) { return quote(c.udp.interface); }},
      {"udp.ttl", "multicast TTL (1 = never routed beyond the local subnet)",
       [](Config& c, const toml::node& n) { return want_uint(n, 0, 255, &c.udp.ttl); },
       [](const Config& c) { return absl::StrCat(c.udp.ttl); }},
      {"udp.loopback", "deliver multicast to subscribers on the publishing host too (IP_MULTICAST_LOOP)",
       [](Config& c, const toml::node& n) { return want_bool(n, &c.udp.loopback); },
       [](const Config& c) { return std::string(c.udp.loopback ? "true" : "false"); }},
      {"udp.mtu",
       "IP MTU of the path (576..65535): a datagram carries up to mtu - 28 bytes of frames; the largest message is mtu "
       "- 60 bytes (no fragmentation)",
       [](Config& c, const toml::node& n) { return want_uint(n, 576, 65535, &c.udp.mtu); },
       [](const Config& c) { return absl::StrCat(c.udp.mtu); }},
      {"udp.tx_batch", "most datagrams per sendmmsg call",
       [](Config& c, const toml::node& n) { return want_uint(n, 1, 1024, &c.udp.tx_batch); },
       [](const Config& c) { return absl::StrCat(c.udp.tx_batch); }},
      {"udp.rx_batch", "most datagrams per recvmmsg call (the batch adapts between 1 and this to the traffic)",
       [](Config& c, const toml::node& n) { return want_uint(n, 1, 1024, &c.udp.rx_batch); },
       [](const Config& c) { return absl::StrCat(c.udp.rx_batch); }},
      {"udp.rx_buffers",
       "datagram buffers per subscriber (each mtu - 28 bytes, rounded up to 64): frames are delivered from them "
       "without a copy",
       [](Config& c, const toml::node& n) { return want_uint(n, 16, 1 << 20, &c.udp.rx_buffers); },
       [](const Config& c) { return absl::StrCat(c.udp.rx_buffers); }},
      {"udp.busy_poll_us",
       "SO_BUSY_POLL on subscriber sockets in microseconds (0 = off; needs CAP_NET_ADMIN to raise above "
       "net.core.busy_read; refused is reported, not fatal)",
       [](Config& c, const toml::node& n) { return want_uint(n, 0, 1'000'000, &c.udp.busy_poll_us); },
       [](const Config& c) { return absl::StrCat(c.udp.busy_poll_us); }},
      {"udp.kernel_timestamps",
       "stage tracing with the kernel's software timestamps (SO_TIMESTAMPING): publishers of traced streams ask for "
       "the TX timestamp of each datagram carrying a traced frame (Publisher::send_completion_ns), subscriber sockets "
       "take every datagram's receive timestamp (StageTimes::kKernelRx). Costs: the kernel's TX timestamp work on the "
       "traced message's path (~1 us per send on loopback here), a control buffer per received datagram and the host's "
       "global packet timestamping",
       [](Config& c, const toml::node& n) { return want_bool(n, &c.udp.kernel_timestamps); },
       [](const Config& c) { return std::string(c.udp.kernel_timestamps ? "true" : "false"); }},
      {"udp.socket_rcvbuf",
       "SO_RCVBUF of subscriber sockets (the kernel caps it at net.core.rmem_max; the effective size is in describe())",
       [](Config& c, const toml::node& n) { return want_size(n, 4096, 1ull << 31, &c.udp.socket_rcvbuf); },
       [](const Config& c) { return size_toml(c.udp.socket_rcvbuf); }},
      {"udp.socket_sndbuf", "SO_SNDBUF of publisher sockets (capped at net.core.wmem_max)",
       [](Config& c, const toml::node& n) { return want_size(n, 4096, 1ull << 31, &c.udp.socket_sndbuf); },
       [](const Config& c) { return size_toml(c.udp.socket_sndbuf); }},
      {"udp.retransmit_buffer",
       "bytes of sent frames each publisher keeps for repairs (power of two, 64KiB..4GiB); a subscriber that falls "
       "further behind gets an unrecoverable gap",
       [](Config& c, const toml::node& n) -> std::string {
         std::uint64_t v;
         if (auto e = want_size(n, 64u << 10, 4ull << 30, &v); !e.empty()) return e;
         if (!is_pow2(v)) return absl::StrCat("expected a power of two, got ", v);
         c.udp.retransmit_buffer = v;
         return "";
       },
       [](const Config& c) { return size_toml(c.udp.retransmit_buffer); }},
      {"udp.reorder_window",
       "sequences a subscriber can hold ahead of a gap while it is repaired (power of two); 16 bytes each per session",
       [](Config& c, const toml::node& n) -> std::string {
         std::int64_t v;
         if (auto e = want_int(n, 256, 1 << 24, &v); !e.empty()) return e;
         if (!is_pow2(static_cast<std::uint64_t>(v))) return absl::StrCat("expected a power of two, got ", v);
         c.udp.reorder_window = static_cast<std::uint32_t>(v);
         return "";
       },
       [](const Config& c) { return absl::StrCat(c.udp.reorder_window); }},
      {"udp.max_sessions",
       "publisher sessions (publishers, or restarts of one) a subscriber follows at once on one stream",
       [](Config& c, const toml::node& n) { return want_uint(n, 1, 64, &c.udp.max_sessions); },
       [](const Config& c) { return absl::StrCat(c.udp.max_sessions); }},
      {"udp.nak_delay_us",
       "a subscriber NAKs a new gap after a random delay in [0, this]: reordered datagrams fill it meanwhile, and many "
       "subscribers missing the same datagram spread their NAKs (the publisher repairs once)",
       [](Config& c, const toml::node& n) { return want_uint(n, 0, 1'000'000, &c.udp.nak_delay_us); },
       [](const Config& c) { return absl::StrCat(c.udp.nak_delay_us); }},
      {"udp.nak_retry_us", "an unrepaired gap is NAKed again after this, doubling per attempt",
       [](Config& c, const toml::node& n) { return want_uint(n, 10, 10'000'000, &c.udp.nak_retry_us); },
       [](const Config& c) { return absl::StrCat(c.udp.nak_retry_us); }},
      {"udp.nak_retry_max_us", "longest interval between two NAKs of one gap",
       [](Config& c, const toml::node& n) { return want_uint(n, 10, 60'000'000, &c.udp.nak_retry_max_us); },
       [](const Config& c) { return absl::StrCat(c.udp.nak_retry_max_us); }},
      {"udp.nak_give_up_ms", "a gap still unrepaired after this (while the publisher is alive) is reported lost",
       [](Config& c, const toml::node& n) { return want_uint(n, 1, 3'600'000, &c.udp.nak_give_up_ms); },
       [](const Config& c) { return absl::StrCat(c.udp.nak_give_up_ms); }},
      {"udp.retransmit_linger_us",
       "after repairing a range the publisher ignores further NAKs for it this long (they were sent before the repair "
       "arrived)",
       [](Config& c, const toml::node& n) { return want_uint(n, 0, 10'000'000, &c.udp.retransmit_linger_us); },
       [](const Config& c) { return absl::StrCat(c.udp.retransmit_linger_us); }},
      {"udp.heartbeat_interval_us",
       "an idle publisher sends a heartbeat (next sequence, oldest repairable) this often; one also follows 1 ms after "
       "the last data",
       [](Config& c, const toml::node& n) { return want_uint(n, 100, 10'000'000, &c.udp.heartbeat_interval_us); },
       [](const Config& c) { return absl::StrCat(c.udp.heartbeat_interval_us); }},
      {"udp.status_interval_ms",
       "subscribers send a status message (position) to each publisher this often; publishers count subscribers by "
       "them",
       [](Config& c, const toml::node& n) { return want_uint(n, 1, 60'000, &c.udp.status_interval_ms); },
       [](const Config& c) { return absl::StrCat(c.udp.status_interval_ms); }},
      {"udp.session_timeout_ms",
       "a publisher silent this long is reported dead (end of stream); a subscriber silent this long is forgotten by "
       "the publisher (offer() returns kNotConnected with none left)",
       [](Config& c, const toml::node& n) { return want_uint(n, 10, 3'600'000, &c.udp.session_timeout_ms); },
       [](const Config& c) { return absl::StrCat(c.udp.session_timeout_ms); }},
      {"udp.linger_ms",
       "Publisher::close() keeps repairing for up to this long until every known subscriber confirmed the end of "
       "stream (0 = close at once)",
       [](Config& c, const toml::node& n) { return want_uint(n, 0, 600'000, &c.udp.linger_ms); },
       [](const Config& c) { return absl::StrCat(c.udp.linger_ms); }},
      {"udp.coalesce_us",
       "0: every post sends at once (lowest latency); > 0: a partly filled datagram waits up to this long for more "
       "frames (fewer, fuller datagrams; inline publishers must keep calling offer() or service())",
       [](Config& c, const toml::node& n) { return want_uint(n, 0, 1'000'000, &c.udp.coalesce_us); },
       [](const Config& c) { return absl::StrCat(c.udp.coalesce_us); }},
      {"udp.nak_max_range",
       "most sequences one NAK range may ask a publisher for (a larger range is cut; the subscriber asks for the rest "
       "again)",
       [](Config& c, const toml::node& n) { return want_uint(n, 1, 1 << 24, &c.udp.nak_max_range); },
       [](const Config& c) { return absl::StrCat(c.udp.nak_max_range); }},
      {"udp.repair_rate",
       "repair bytes per second a publisher sends on behalf of one subscriber (token bucket; 0 = unlimited): bounds "
       "what forged NAKs can make it send. Keep it above the stream's rate, or a subscriber that fell behind cannot "
       "catch up while the stream runs",
       [](Config& c, const toml::node& n) { return want_size(n, 0, 1ull << 40, &c.udp.repair_rate); },
       [](const Config& c) { return size_toml(c.udp.repair_rate); }},
      {"udp.repair_burst",
       "repair bytes a publisher sends for one subscriber at once (the bucket of udp.repair_rate; the bucket of "
       "udp.repair_rate_total holds 4x this)",
       [](Config& c, const toml::node& n) { return want_size(n, 1024, 1ull << 36, &c.udp.repair_burst); },
       [](const Config& c) { return size_toml(c.udp.repair_burst); }},
      {"udp.repair_rate_total",
       "repair bytes per second a publisher sends in all, whoever asks (token bucket; 0 = unlimited)",
       [](Config& c, const toml::node& n) { return want_size(n, 0, 1ull << 40, &c.udp.repair_rate_total); },
       [](const Config& c) { return size_toml(c.udp.repair_rate_total); }},
      {"udp.fault_loss", "testing: probability that a received datagram is dropped before the protocol sees it",
       [](Config& c, const toml::node& n) { return want_probability(n, &c.udp.fault_loss); },
       [](const Config& c) { return absl::StrCat(c.udp.fault_loss); }},
      {"udp.fault_duplicate", "testing: probability that a received datagram is delivered twice",
       [](Config& c, const toml::node& n) { return want_probability(n, &c.udp.fault_duplicate); },
       [](const Config& c) { return absl::StrCat(c.udp.fault_duplicate); }},
      {"udp.fault_reorder", "testing: probability that a received datagram is held back behind 1..8 later ones",
       [](Config& c, const toml::node& n) { return want_probability(n, &c.udp.fault_reorder); },
       [](const Config& c) { return absl::StrCat(c.udp.fault_reorder); }},
      {"udp.fault_tx_loss", "testing: probability that a datagram is not sent (loss every subscriber sees)",
       [](Config& c, const toml::node& n) { return want_probability(n, &c.udp.fault_tx_loss); },
       [](const Config& c) { return absl::StrCat(c.udp.fault_tx_loss); }},
      {"udp.fault_seed", "testing: seed of the fault injector (same seed, same faults)",
       [](Config& c, const toml::node& n) { return want_uint(n, 0, INT64_MAX, &c.udp.fault_seed); },
       [](const Config& c) { return absl::StrCat(c.udp.fault_seed); }},
  };
  return table;
}

struct StreamField {
  const char* key;
  const char* help;
  std::function<std::string(StreamConfig&, const toml::node&)> set;
  std::function<std::string(const StreamConfig&)> get;
};

const std::vector<StreamField>& stream_fields() {
  static const std::vector<StreamField> table = {
      {"topic", "topic name applications use",
       [](StreamConfig& s, const toml::node& n) -> std::string {
         if (auto e = want_string(n, &s.topic); !e.empty()) return e;
         return topic_error(s.topic);
       },
       [](const StreamConfig& s) { return quote(s.topic); }},
      {"id", "stream id on the wire (1..2147483647)",
       [](StreamConfig& s, const toml::node& n) {
         std::int64_t v;
         auto e = want_int(n, 1, 0x7fffffff, &v);
         if (e.empty()) s.id = static_cast<std::uint32_t>(v);
         return e;
       },
       [](const StreamConfig& s) { return absl::StrCat(s.id); }},
      {"trace", "carry stage timestamps on this stream",
       [](StreamConfig& s, const toml::node& n) { return want_bool(n, &s.trace); },
       [](const StreamConfig& s) { return std::string(s.trace ? "true" : "false"); }},
      {"trace_every", "trace one message in N",
       [](StreamConfig& s, const toml::node& n) {
         std::int64_t v;
         auto e = want_int(n, 1, 1 << 30, &v);
         if (e.empty()) s.trace_every = static_cast<std::uint32_t>(v);
         return e;
       },
       [](const StreamConfig& s) { return absl::StrCat(s.trace_every); }},
      {"udp_address", "udp: group/address of this stream (\"\" = udp.address)",
       [](StreamConfig& s, const toml::node& n) -> std::string {
         std::string v;
         if (n.is_string() && n.value<std::string>()->empty()) {
           s.udp_address.clear();
           return "";
         }
         if (auto e = want_ipv4(n, &v); !e.empty()) return e;
         s.udp_address = v;
         return "";
       },
       [](const StreamConfig& s) { return quote(s.udp_address); }},
      {"udp_port", "udp: port of this stream (0 = udp.port)",
       [](StreamConfig& s, const toml::node& n) { return want_uint(n, 0, 65535, &s.udp_port); },
       [](const StreamConfig& s) { return absl::StrCat(s.udp_port); }},
      {"kernel_timestamps",
       "udp: the kernel's software TX/RX timestamps on this stream (true/false), or \"inherit\" = "
       "udp.kernel_timestamps",
       [](StreamConfig& s, const toml::node& n) -> std::string {
         if (n.is_string() && *n.value<std::string>() == "inherit") {
           s.kernel_timestamps = -1;
           return "";
         }
         bool v = false;
         if (auto e = want_bool(n, &v); !e.empty()) return "expected true, false or \"inherit\"";
         s.kernel_timestamps = v ? 1 : 0;
         return "";
       },
       [](const StreamConfig& s) {
         return s.kernel_timestamps < 0 ? quote("inherit") : std::string(s.kernel_timestamps ? "true" : "false");
       }},
      {"publisher_timestamp",
       "stamp each message with the publisher's clock at offer (Message::publisher_ns); false: publisher_ns is 0 "
       "and offer() reads no clock (one TSC read, ~10-15 ns, off every offer; traced messages still stamp)",
       [](StreamConfig& s, const toml::node& n) { return want_bool(n, &s.publisher_timestamp); },
       [](const StreamConfig& s) { return std::string(s.publisher_timestamp ? "true" : "false"); }},
  };
  return table;
}

// The last dot-separated part of a key: "transport.kind" -> "kind".
std::string_view last_part(std::string_view key) {
  const auto dot = key.rfind('.');
  return dot == std::string_view::npos ? key : key.substr(dot + 1);
}

// " (did you mean transport.kind? ...)" for a key written in the wrong table: the keys of other
// tables with the same name (`kind` at the top level or under [runtime] -> transport.kind). When
// several tables have one (rings.kind, transport.kind), those that accept `value` come first
// (`kind = "udp"` is a transport, not a ring); when `value` is a table, its name is looked for
// among the sub-tables ([adaptive] -> [runtime.adaptive]). `here` (the key as written, e.g.
// "runtime.kind") is never suggested. Empty when no other table has such a key.
std::string same_name_elsewhere(std::string_view here, std::string_view name, const toml::node& value) {
  std::vector<std::string> fits, others;
  if (value.is_table()) {
    std::set<std::string> tables;
    for (const Field& f : fields()) {
      std::string_view k(f.key);
      for (auto dot = k.find('.'); dot != std::string_view::npos; dot = k.find('.', dot + 1)) {
        const std::string_view table = k.substr(0, dot);
        if (last_part(table) == name && table != here) tables.insert(std::string(table));
      }
    }
    if (tables.empty()) return "";
    std::string list;
    for (const std::string& t : tables) absl::StrAppend(&list, list.empty() ? "" : " or ", "[", t, "]");
    return absl::StrFormat(" (did you mean %s?)", list);
  }
  for (const Field& f : fields()) {
    if (last_part(f.key) != name || here == f.key) continue;
    Config scratch;
    (f.set(scratch, value).empty() ? fits : others).emplace_back(f.key);
  }
  for (const StreamField& f : stream_fields()) {
    if (name != f.key || here.rfind("streams[", 0) == 0) continue;
    StreamConfig scratch;
    (f.set(scratch, value).empty() ? fits : others).push_back(absl::StrCat("[[streams]] ", f.key));
  }
  const std::vector<std::string>& pick = fits.empty() ? others : fits;
  if (pick.empty()) return "";
  if (pick.size() > 1) return absl::StrFormat(" (did you mean %s?)", absl::StrJoin(pick, " or "));
  const std::string& k = pick.front();
  if (k.rfind("[[streams]] ", 0) == 0) {
    return absl::StrFormat(" (did you mean %s? %s is a key of each [[streams]] entry)", k, name);
  }
  const std::string table = k.substr(0, k.rfind('.'));
  return absl::StrFormat(" (did you mean %s? %s belongs in the [%s] table)", k, name, table);
}

class Parser {
 public:
  explicit Parser(std::string_view source) : source_(source) {}

  absl::Status error(const toml::source_region& where, std::string_view key, std::string_view msg) const {
    return absl::InvalidArgumentError(absl::StrFormat("%s:%d: %s: %s", source_, where.begin.line, key, msg));
  }

  absl::Status run(const toml::table& root, Config* cfg) {
    std::map<std::string, const Field*> by_key;
    std::vector<std::string> known;
    std::set<std::string> sections;
    for (const Field& f : fields()) {
      by_key[f.key] = &f;
      known.emplace_back(f.key);
      std::string k(f.key);
      sections.insert(k.substr(0, k.find('.')));
    }
    known.emplace_back("streams");
    for (auto&& [k, v] : root) {
      const std::string section(k.str());
      if (section == "streams") {
        if (absl::Status s = parse_streams(v, cfg); !s.ok()) return s;
        continue;
      }
      if (sections.count(section) == 0 || !v.is_table()) {
        if (sections.count(section) != 0)
          return error(v.source(), section, absl::StrCat("expected a table [", section, "], got ", describe(v)));
        std::vector<std::string> secs(sections.begin(), sections.end());
        secs.emplace_back("streams");
        std::string hint = same_name_elsewhere(section, section, v);
        if (hint.empty()) hint = did_you_mean(section, secs);
        return error(k.source(), section, absl::StrCat("unknown key", hint));
      }
      if (absl::Status s = run_table(section, *v.as_table(), by_key, known, cfg); !s.ok()) return s;
    }
    return validate(*cfg);
  }

 private:
  // The keys of one table; a sub-table (runtime.adaptive) is walked when keys with its prefix
  // exist, so `[runtime.adaptive]` and `adaptive.x = 1` inside [runtime] both work.
  absl::Status run_table(const std::string& prefix, const toml::table& t,
                         const std::map<std::string, const Field*>& by_key, const std::vector<std::string>& known,
                         Config* cfg) {
    for (auto&& [k2, v2] : t) {
      const std::string full = prefix + "." + std::string(k2.str());
      auto it = by_key.find(full);
      if (it == by_key.end() && v2.is_table()) {
        auto sub = by_key.lower_bound(full + ".");
        if (sub != by_key.end() && sub->first.rfind(full + ".", 0) == 0) {
          if (absl::Status s = run_table(full, *v2.as_table(), by_key, known, cfg); !s.ok()) return s;
          continue;
        }
      }
      if (it == by_key.end()) {
        std::string hint = same_name_elsewhere(full, k2.str(), v2);
        if (hint.empty()) hint = did_you_mean(full, known);
        return error(k2.source(), full, absl::StrCat("unknown key", hint));
      }
      if (std::string e = it->second->set(*cfg, v2); !e.empty()) return error(v2.source(), full, e);
      lines_[full] = static_cast<int>(v2.source().begin.line);
    }
    return absl::OkStatus();
  }

  absl::Status parse_streams(const toml::node& v, Config* cfg) {
    const toml::array* arr = v.as_array();
    if (arr == nullptr)
      return error(v.source(), "streams", "expected an array of tables ([[streams]]), got " + describe(v));
    std::vector<std::string> known;
    for (const StreamField& f : stream_fields()) known.emplace_back(f.key);
    std::set<std::uint32_t> ids;
    std::set<std::string> topics;
    for (std::size_t i = 0; i < arr->size(); ++i) {
      const toml::node& e = *arr->get(i);
      const std::string prefix = absl::StrFormat("streams[%d]", i);
      const toml::table* t = e.as_table();
      if (t == nullptr) return error(e.source(), prefix, "expected a table, got " + describe(e));
      StreamConfig sc;
      sc.line = static_cast<int>(e.source().begin.line);
      for (auto&& [k, fv] : *t) {
        const std::string name(k.str());
        const StreamField* f = nullptr;
        for (const StreamField& sf : stream_fields()) {
          if (name == sf.key) f = &sf;
        }
        if (f == nullptr) {
          std::string hint = same_name_elsewhere(prefix + "." + name, name, fv);
          if (hint.empty()) hint = did_you_mean(name, known);
          return error(k.source(), prefix + "." + name, absl::StrCat("unknown key", hint));
        }
        if (std::string err = f->set(sc, fv); !err.empty()) return error(fv.source(), prefix + "." + name, err);
      }
      if (sc.topic.empty())
        return error(e.source(), prefix + ".topic", "missing (every [[streams]] entry needs a topic)");
      if (sc.id == 0) return error(e.source(), prefix + ".id", "missing (every [[streams]] entry needs an id)");
      if (!ids.insert(sc.id).second)
        return error(e.source(), prefix + ".id", absl::StrCat("duplicate stream id ", sc.id));
      if (!topics.insert(sc.topic).second)
        return error(e.source(), prefix + ".topic", absl::StrCat("duplicate topic ", quote(sc.topic)));
      cfg->streams.push_back(std::move(sc));
    }
    return absl::OkStatus();
  }

  absl::Status at(std::string_view key, std::string_view msg) const {
    auto it = lines_.find(std::string(key));
    const int line = it == lines_.end() ? 0 : it->second;
    if (line == 0) return absl::InvalidArgumentError(absl::StrFormat("%s: %s: %s", source_, key, msg));
    return absl::InvalidArgumentError(absl::StrFormat("%s:%d: %s: %s", source_, line, key, msg));
  }

  absl::Status validate(const Config& c) const {
    if (c.shm.log_size / 32 < c.pool.slot_size && c.transport == TransportKind::kShm) {
      return at("pool.slot_size",
                absl::StrFormat(
                    "%u is larger than shm.log_size/32 = %u: frames that big do not fit the log; raise shm.log_size",
                    c.pool.slot_size, c.shm.log_size / 32));
    }
    if (c.rdma.signal_every > c.rdma.send_queue_depth / 2) {
      return at("rdma.signal_every",
                absl::StrFormat("%u is more than half of rdma.send_queue_depth (%u): the send queue "
                                "would fill before a completion frees it; lower it or raise the depth",
                                c.rdma.signal_every, c.rdma.send_queue_depth));
    }
    if (c.rdma.recv_batch > c.rdma.recv_queue_depth / 2) {
      return at("rdma.recv_batch",
                absl::StrFormat("%u is more than half of rdma.recv_queue_depth (%u): too few buffers "
                                "would stay posted; lower it or raise the depth",
                                c.rdma.recv_batch, c.rdma.recv_queue_depth));
    }
    if (c.transport == TransportKind::kRdma && c.rdma.mode == RdmaMode::kUdMulticast) {
      if (c.rdma.nak_retry_us > c.rdma.nak_retry_max_us) {
        return at("rdma.nak_retry_us", absl::StrFormat("%u is above rdma.nak_retry_max_us (%u)", c.rdma.nak_retry_us,
                                                       c.rdma.nak_retry_max_us));
      }
      if (c.rdma.fault_loss + c.rdma.fault_duplicate + c.rdma.fault_reorder > 1.0) {
        return at("rdma.fault_loss", "rdma.fault_loss + fault_duplicate + fault_reorder must not exceed 1");
      }
      if (c.rdma.retransmit_buffer / c.pool.slot_size > c.pool.slots / 2) {
        return at("rdma.retransmit_buffer",
                  absl::StrFormat(
                      "%u bytes take %u of the pool's %u slots of %u bytes: a publisher's retransmit buffer "
                      "is carved from the pool and leaves too little for its rings; raise pool.slots or "
                      "lower rdma.retransmit_buffer",
                      c.rdma.retransmit_buffer, (c.rdma.retransmit_buffer + c.pool.slot_size - 1) / c.pool.slot_size,
                      c.pool.slots, c.pool.slot_size));
      }
    }
    if (c.transport == TransportKind::kUdp) {
      const std::uint32_t datagram = c.udp.mtu - 28;
      if (c.udp.reorder_window < 2 * (datagram / kFrameHeaderSizeForConfig)) {
        return at("udp.reorder_window",
                  absl::StrFormat("%u cannot hold two datagrams of %u bytes (up to %u frames each); raise it to at "
                                  "least %u or lower udp.mtu",
                                  c.udp.reorder_window, datagram, datagram / kFrameHeaderSizeForConfig,
                                  2 * (datagram / kFrameHeaderSizeForConfig)));
      }
      if (c.udp.retransmit_buffer < 4ull * datagram) {
        return at("udp.retransmit_buffer",
                  absl::StrFormat("%u bytes hold fewer than 4 datagrams of %u bytes (udp.mtu %u); raise it",
                                  c.udp.retransmit_buffer, datagram, c.udp.mtu));
      }
      if (c.udp.repair_burst < datagram) {
        return at(
            "udp.repair_burst",
            absl::StrFormat(
                "%u bytes are less than one datagram of %u bytes (udp.mtu %u): no repair could ever be sent; raise it",
                c.udp.repair_burst, datagram, c.udp.mtu));
      }
      if (c.udp.nak_retry_us > c.udp.nak_retry_max_us) {
        return at("udp.nak_retry_us",
                  absl::StrFormat("%u is above udp.nak_retry_max_us (%u)", c.udp.nak_retry_us, c.udp.nak_retry_max_us));
      }
      if (c.udp.fault_loss + c.udp.fault_duplicate + c.udp.fault_reorder > 1.0) {
        return at("udp.fault_loss", "udp.fault_loss + fault_duplicate + fault_reorder must not exceed 1");
      }
    }
    if (absl::Status a = c.runtime.adaptive.validate(); !a.ok()) {
      // The message names the field as runtime.adaptive.<field>; point at that key's line.
      std::string key = "runtime.adaptive";
      const std::string m(a.message());
      if (auto p = m.find("runtime.adaptive."); p != std::string::npos) {
        auto end = m.find_first_of(" :", p);
        key = m.substr(p, end == std::string::npos ? std::string::npos : end - p);
      }
      const auto colon = m.find(": ");
      return at(key, colon == std::string::npos ? m : m.substr(colon + 2));
    }
    if (c.runtime.threading == ThreadingMode::kDedicated && !c.runtime.poller_cores.empty() &&
        c.runtime.poller_cores.size() < c.runtime.pollers) {
      return at("runtime.poller_cores",
                absl::StrFormat("lists %d core(s) for %d pollers", c.runtime.poller_cores.size(), c.runtime.pollers));
    }
    return absl::OkStatus();
  }

  std::string source_;
  std::map<std::string, int> lines_;
};

std::uint32_t fnv1a(std::string_view s) {
  std::uint32_t h = 2166136261u;
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 16777619u;
  }
  return h;
}

}  // namespace

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string did_you_mean(std::string_view key, const std::vector<std::string>& known) {
  std::string best;
  std::size_t best_d = 4;
  for (const std::string& k : known) {
    const std::size_t d = edit_distance(key, k);
    if (d < best_d) {
      best_d = d;
      best = k;
    }
  }
  return best.empty() ? "" : absl::StrFormat(" (did you mean %s?)", best);
}

std::string topic_error(std::string_view topic) {
  if (topic.empty()) return "expected a non-empty topic";
  if (topic.size() > kMaxTopicBytes) {
    return absl::StrCat("a topic is at most ", kMaxTopicBytes, " bytes; this one has ", topic.size());
  }
  for (std::size_t i = 0; i < topic.size(); ++i) {
    const auto c = static_cast<unsigned char>(topic[i]);
    if (c < 0x20 || c == 0x7f) {
      return absl::StrFormat("a topic has no control characters; this one has byte 0x%02x at offset %d", c, i);
    }
  }
  return "";
}

std::uint32_t Config::stream_id(std::string_view topic) const {
  for (const StreamConfig& s : streams) {
    if (s.topic == topic) return s.id;
  }
  return fnv1a(topic) | 0x80000000u;
}

const StreamConfig* Config::find_stream(std::uint32_t id) const {
  for (const StreamConfig& s : streams) {
    if (s.id == id) return &s;
  }
  return nullptr;
}

std::string Config::to_toml() const {
  std::ostringstream out;
  out << "# effective pollux configuration (source: " << source << ")\n";
  std::string section;
  for (const Field& f : fields()) {
    const std::string key(f.key);
    const std::string sec = key.substr(0, key.find('.'));
    if (sec != section) {
      out << (section.empty() ? "" : "\n") << "[" << sec << "]\n";
      section = sec;
    }
    out << key.substr(key.find('.') + 1) << " = " << f.get(*this) << "  # " << f.help << "\n";
  }
  for (const StreamConfig& s : streams) {
    out << "\n[[streams]]\n";
    for (const StreamField& f : stream_fields()) out << f.key << " = " << f.get(s) << "  # " << f.help << "\n";
  }
  return out.str();
}

absl::StatusOr<Config> parse_config(std::string_view toml_text, std::string_view source_name) {
  Config cfg;
  cfg.source = std::string(source_name);
  toml::table root;
  try {
    root = toml::parse(toml_text, source_name);
  } catch (const toml::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrFormat("%s:%d:%d: TOML syntax error: %s", source_name,
                                                      e.source().begin.line, e.source().begin.column, e.description()));
  }
  Parser p(source_name);
  if (absl::Status s = p.run(root, &cfg); !s.ok()) return s;
  return cfg;
}

namespace {

const char* file_kind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a file";
}

absl::Status not_regular(const std::string& path, mode_t mode) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s: not a regular file: it is %s (a configuration is read from a regular file)", path, file_kind(mode)));
}

// `size`: how big the file is, e.g. "20971520 bytes".
absl::Status too_big(const std::string& path, const std::string& size) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s: config file too large: %s, more than the %d MiB a configuration may have (is it the right file?)", path,
      size, kMaxConfigFileBytes >> 20));
}

absl::Status open_error(const std::string& path, const char* what, int err) {
  const std::string msg = absl::StrFormat("%s: cannot %s config file: %s", path, what, std::strerror(err));
  return err == ENOENT ? absl::NotFoundError(msg) : absl::UnavailableError(msg);
}

}  // namespace

absl::StatusOr<std::string> read_config_file(const std::string& path) {
  // The type is checked before the open: opening a FIFO for reading blocks until a writer
  // comes, and opening a device may have effects of its own.
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return open_error(path, "open", errno);
  if (!S_ISREG(st.st_mode)) return not_regular(path, st.st_mode);
  if (static_cast<std::uint64_t>(st.st_size) > kMaxConfigFileBytes) {
    return too_big(path, absl::StrCat(st.st_size, " bytes"));
  }
  // The path may have been replaced since: O_NONBLOCK keeps even that open from blocking,
  // and fstat checks what was opened.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return open_error(path, "open", errno);
  absl::Status status;
  std::string text;
  if (::fstat(fd, &st) != 0) {
    status = open_error(path, "stat", errno);
  } else if (!S_ISREG(st.st_mode)) {
    status = not_regular(path, st.st_mode);
  } else {
    // Read to the end, not to st_size (a file in /proc says 0), but never past the cap: a
    // file that grows while it is read is cut off there and refused.
    text.resize(std::min<std::uint64_t>(static_cast<std::uint64_t>(st.st_size), kMaxConfigFileBytes) + 1);
    std::size_t got = 0;
    for (;;) {
      if (got == text.size()) {
        if (text.size() > kMaxConfigFileBytes) break;
        text.resize(std::min(2 * text.size(), kMaxConfigFileBytes + 1));
      }
      const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
      if (n > 0) {
        got += static_cast<std::size_t>(n);
      } else if (n == 0) {
        break;
      } else if (errno != EINTR) {
        status = open_error(path, "read", errno);
        break;
      }
    }
    if (status.ok() && got > kMaxConfigFileBytes)
      status = too_big(path, absl::StrCat("over ", kMaxConfigFileBytes, " bytes"));
    text.resize(got);
  }
  ::close(fd);
  if (!status.ok()) return status;
  return text;
}

absl::StatusOr<Config> load_config_file(const std::string& path) {
  absl::StatusOr<std::string> text = read_config_file(path);
  if (!text.ok()) return text.status();
  return parse_config(*text, path);
}

}  // namespace pollux::core
