#include "core/config.h"

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
#include "core/shm_file.h"

namespace pollux::core {

namespace {

// The names of the choices, for their keys and for threading_name() / transport_name().
constexpr ConfigChoice<ThreadingMode> kThreadingNames[] = {
    {"dedicated", ThreadingMode::kDedicated}, {"shared", ThreadingMode::kShared}, {"inline", ThreadingMode::kInline}};
constexpr ConfigChoice<TransportKind> kTransportNames[] = {
    {"shm", TransportKind::kShm}, {"udp", TransportKind::kUdp}, {"rdma", TransportKind::kRdma}};

}  // namespace

std::string_view threading_name(ThreadingMode m) { return choice_name(kThreadingNames, m); }
std::string_view transport_name(TransportKind k) { return choice_name(kTransportNames, k); }

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

// ---- the tables ---------------------------------------------------------------------------------

// A key of a generic table, [[streams]] or a transport's, as the parser and to_toml() use it on
// an object of type Obj (Config, StreamConfig).
template <class Obj>
struct FieldOf {
  std::string key;
  std::string help;
  std::function<std::string(Obj&, const toml::node&)> set;
  std::function<std::string(const Obj&)> get;
};
using Field = FieldOf<Config>;
using StreamField = FieldOf<StreamConfig>;

// The key `k` of a ConfigKeys table (of static storage duration), named `name`, on the object
// `object` finds in an Obj: its type and bounds checked, then its own check.
template <class Obj>
FieldOf<Obj> key_field(std::string name, const ConfigKeys::Key& k, std::function<void*(const Obj&)> object) {
  return {std::move(name), k.help,
          [&k, object](Obj& o, const toml::node& n) {
            ConfigKeys::Value v;
            std::string e = check_key_value(k, n, &v);
            return e.empty() ? k.set(object(o), v) : e;
          },
          [&k, object](const Obj& o) { return key_value_toml(k, k.get(object(o))); }};
}

// The object itself, for a table of Obj's own members (written through only by `set`, which has
// it non-const).
template <class Obj>
void* itself(const Obj& o) {
  return const_cast<Obj*>(&o);
}

// runtime.name: it prefixes the shared-memory files, so a short plain word.
std::string check_instance_name(const std::string& s) {
  if (s.empty() || s.size() > 40 ||
      s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") != std::string::npos) {
    return absl::StrCat("expected 1-40 characters from [A-Za-z0-9_.-], got ", quote(s));
  }
  return "";
}

// [runtime.adaptive]: the controller's knobs, inside the runtime table.
ConfigTable<ControllerOptions> adaptive_table() {
  using O = ControllerOptions;
  ConfigTable<O> t("adaptive");
  t.integer("wakeup_cost_ns", &O::wakeup_cost_ns, 1, 2147483647,
            "adaptive: what one sleep + wakeup costs the next message (ns); spinning through a silence pays only when "
            "it is shorter than wakeup_cost_ns * spin_factor")
      .integer("max_spin_ns", &O::max_spin_ns, 0, 2147483647,
               "adaptive: upper bound of the spin budget after the last message (ns)")
      .integer("min_spin_ns", &O::min_spin_ns, 0, 2147483647, "adaptive: floor of a non-zero spin budget (ns)")
      .integer("dense_gap_ns", &O::dense_gap_ns, 0, 2147483647,
               "adaptive: busy mode starts when the observed inter-arrival gap quantile is at most this (ns)")
      .integer("busy_exit_gap_ns", &O::busy_exit_gap_ns, 0, 2147483647,
               "adaptive: busy mode ends when the gap quantile exceeds this (ns; >= dense_gap_ns)")
      .integer("busy_linger_ns", &O::busy_linger_ns, 0, 2147483647,
               "adaptive: busy mode ends after this much silence (ns)")
      .integer("idle_after_ns", &O::idle_after_ns, 1, 2147483647,
               "adaptive: silence after which a poller is idle and goes to interrupt mode (ns)")
      // Their bounds are ControllerOptions::validate()'s, checked with the other keys.
      .number("spin_factor", &O::spin_factor, "adaptive: spin threshold = wakeup_cost_ns * spin_factor")
      .number("spin_quantile", &O::spin_quantile,
              "adaptive: spin through a silence only if P(gap <= budget) >= this (0..1]");
  return t;
}

ConfigTable<RuntimeConfig> runtime_table() {
  using R = RuntimeConfig;
  ConfigTable<R> t("runtime");
  t.choice("threading", &R::threading, kThreadingNames,
           "dedicated: pollers on their own (pinned) cores own the transports; shared: one poller for everything; "
           "inline: no poller, the application's offer()/poll() drive the transport")
      .integer("pollers", &R::pollers, 1, 64, "number of poller threads in dedicated mode (shared mode uses 1)")
      .integer_list("poller_cores", &R::poller_cores, "an array of CPU numbers", 0, 4095,
                    "OS CPU numbers for the pollers, in order; [] = automatic (unclaimed cores on the device's NUMA "
                    "node, highest first, claimed in shm_dir so processes do not collide)")
      .integer_list("recording_cores", &R::recording_cores, "an array of CPU numbers", 0, 4095,
                    "OS CPUs the thread that runs this context's [[recordings]] may run on; [] = any. Keep it off a "
                    "busy-polling subscriber's core: on a housekeeping core, or next to a publisher")
      .choice("idle", &R::idle,
              {{"adaptive", IdleKind::kAdaptive},
               {"interrupt", IdleKind::kInterrupt},
               {"busy-spin", IdleKind::kBusySpin},
               {"yield", IdleKind::kYield},
               {"backoff", IdleKind::kBackoff}},
              "what an idle poller does: adaptive (busy-polls under load, spins briefly then sleeps on the "
              "transport's notifications when sparse, sleeps when idle), interrupt (sleeps after every empty cycle), "
              "busy-spin (lowest latency, burns the core), yield, backoff (spin, then yield, then park up to 1 ms)")
      .integer("sleep_timer_ms", &R::sleep_timer_ms, 0, 60'000,
               "adaptive/interrupt: a sleeping poller wakes at least this often to run its timers (heartbeats, "
               "liveness, retransmits); 0 = only when woken (transports that need timers while asleep arm their own: "
               "UDP and RDMA ud_mcast keep heartbeats going with a timerfd; shm then notices a dead publisher only "
               "with its next data)")
      .nested(&R::adaptive, adaptive_table())
      .boolean("poll_yield", &R::poll_yield,
               "adaptive/interrupt: an empty cycle while polling (busy or spin mode) calls sched_yield (true: "
               "application threads sharing the poller's CPU keep running; measured on 2 vCPUs: 100k msg/s p50 7 us "
               "instead of 471 us) or only a pause instruction (false: lowest latency when every poller has a core of "
               "its own)",
               "true or false")
      .text("name", &R::name, "a string", "instance name, used in shared-memory file names", check_instance_name)
      .text("shm_dir", &R::shm_dir, "a string", "directory for shared-memory files (a tmpfs)")
      .boolean("counters", &R::counters, "publish counters in <shm_dir>/pollux-<name>-<pid>.counters for pollux-stat")
      .integer("counters_capacity", &R::counters_capacity, 64, 1 << 19,
               "counter slots in that file (256 bytes each): a publication takes 8, a subscription 7 to 8 plus its "
               "transport's (shm 4, udp about 40), a poller 18; past the capacity counters still count but are not "
               "in the file (one error says so), so pollux-stat and the metrics endpoint miss them")
      .text("device", &R::device, "a string",
            "network or RDMA device (e.g. \"mlx5_0\", \"eth0\") whose NUMA node gets the pollers and the pool; \"\" "
            "= none");
  return t;
}

ConfigTable<PoolConfig> pool_table() {
  using P = PoolConfig;
  ConfigTable<P> t("pool");
  t.size("slot_size", &P::slot_size, 128, 16u << 20,
         "bytes per buffer slot: the largest frame (32-byte header + payload) a publisher can offer in "
         "dedicated/shared mode")
      .integer("slots", &P::slots, 64, 1 << 24, "buffer slots in the pool (shared by all endpoints of the context)")
      .choice("hugepages", &P::hugepages,
              {{"auto", HugePages::kAuto}, {"on", HugePages::kOn}, {"off", HugePages::kOff}},
              "auto: 2 MiB pages when reserved, else normal pages; on: fail without them; off")
      .integer("numa_node", &P::numa_node, -1, 1023, "NUMA node for the pool; -1 = the device's node, or unbound");
  return t;
}

ConfigTable<RingsConfig> rings_table() {
  using R = RingsConfig;
  ConfigTable<R> t("rings");
  t.integer("capacity", &R::capacity, 2, 1 << 20, "descriptors per application<->poller ring (power of two)",
            check_pow2)
      .integer("burst", &R::burst, 1, 256, "most descriptors a poller moves through one ring per duty cycle")
      .choice("kind", &R::kind, {{"spsc", RingKind::kSpsc}, {"boost", RingKind::kBoost}},
              "implementation of the application<->poller rings: spsc (Pollux's own, cached indices; the default) or "
              "boost (boost::lockfree::spsc_queue); bench/ring_bench.cc compares them");
  return t;
}

ConfigTable<MetricsConfig> metrics_table() {
  using M = MetricsConfig;
  ConfigTable<M> t("metrics");
  t.text("listen", &M::listen, "a string",
         "serve this process's metrics over HTTP at HOST:PORT (GET /metrics: Prometheus text or OpenMetrics; "
         "GET /: a live page; GET /api/snapshot: JSON), from a thread of its own that reads the counters file; "
         "\"\" = off. Only the address written is bound: \"127.0.0.1:9464\" or \":9464\" is loopback, \"0.0.0.0:9464\" "
         "every interface (needs runtime.counters = true)",
         check_listen_address)
      .integer("max_connections", &M::max_connections, 1, 1024,
               "open HTTP connections at most; at the limit a new connection closes the oldest (a client that holds "
               "connections open without finishing requests loses them to newer ones)")
      .integer("timeout_ms", &M::timeout_ms, 100, 600'000,
               "a request must arrive within this, and an idle keep-alive connection is closed after it");
  return t;
}

// The generic tables as one, every key named "table.key": [runtime] (with [runtime.adaptive]),
// [pool], [rings], then [transport], whose one key is a member of Config itself.
const ConfigTable<Config>& generic_table() {
  static const ConfigTable<Config> table = [] {
    ConfigTable<Config> t("");
    t.nested(&Config::runtime, runtime_table())
        .nested(&Config::pool, pool_table())
        .nested(&Config::rings, rings_table())
        .nested(&Config::metrics, metrics_table())
        .choice("transport.kind", &Config::transport, kTransportNames, "shm (processes on one host), udp, rdma");
    return t;
  }();
  return table;
}

// The generic tables, then every transport's (core/config_registry.h), each key as a Field.
std::vector<Field> make_fields() {
  std::vector<Field> table;
  for (const ConfigKeys::Key& k : generic_table().keys()) table.push_back(key_field<Config>(k.name, k, itself<Config>));
  for (const RegisteredTable& t : config_registry().tables()) {
    const std::size_t slot = &t - config_registry().tables().data();
    for (const ConfigKeys::Key& k : t.keys->keys()) {
      table.push_back(key_field<Config>(absl::StrCat(t.keys->table(), ".", k.name), k,
                                        [slot](const Config& c) { return c.tables.get(slot); }));
    }
  }
  return table;
}

const std::vector<Field>& fields() {
  static const std::vector<Field> table = make_fields();
  return table;
}

// Each [[streams]] entry's keys but kernel_timestamps (stream_fields()).
const ConfigTable<StreamConfig>& stream_table() {
  static const ConfigTable<StreamConfig> table = [] {
    using S = StreamConfig;
    ConfigTable<S> t("streams");
    t.text("topic", &S::topic, "a string", "topic name applications use", topic_error)
        .integer("id", &S::id, 1, 0x7fffffff, "stream id on the wire (1..2147483647)")
        .boolean("trace", &S::trace, "carry stage timestamps on this stream")
        .integer("trace_every", &S::trace_every, 1, 1 << 30, "trace one message in N")
        .text("udp_address", &S::udp_address, "a string", "udp: group/address of this stream (\"\" = udp.address)",
              [](const std::string& v) { return v.empty() ? std::string() : check_ipv4(v); })
        .integer("udp_port", &S::udp_port, 0, 65535, "udp: port of this stream (0 = udp.port)")
        .boolean("publisher_timestamp", &S::publisher_timestamp,
                 "stamp each message with the publisher's clock at offer (Message::publisher_ns); false: "
                 "publisher_ns is 0 and offer() reads no clock (one TSC read, ~10-15 ns, off every offer; traced "
                 "messages still stamp)")
        .text("archive_dir", &S::archive_dir, "a path",
              "late join (start other than \"live\"): the directory whose recording of this topic a subscriber "
              "reads first (\"\" = this configuration's [[recordings]] entry of the topic)")
        .size("max_catchup_bytes", &S::max_catchup_bytes, 1ull << 16, 1ull << 40,
              "late join: live messages a subscriber keeps while its replay catches up, at most (payload + 32 B "
              "each); beyond it the catch-up is abandoned, counted (fell_behind) and retried");
    return t;
  }();
  return table;
}

constexpr pollux::ConfigChoice<RecordingFsync> kFsyncNames[] = {
    {"none", RecordingFsync::kNone}, {"interval", RecordingFsync::kInterval}, {"every", RecordingFsync::kEvery}};

// Other names a [[recordings]] entry's keys are known by.
struct RecordingAlias {
  std::string_view alias, key;
};
constexpr RecordingAlias kRecordingAliases[] = {{"stream", "topic"}, {"dir", "directory"}};

// Each [[recordings]] entry's keys.
const std::vector<FieldOf<RecordingConfig>>& recording_fields() {
  static const ConfigTable<RecordingConfig> table = [] {
    using R = RecordingConfig;
    ConfigTable<R> t("recordings");
    t.text("topic", &R::topic, "a string", "the stream recorded (its topic; `stream` is another name of this key)",
           topic_error)
        .text("directory", &R::directory, "a path",
              "directory of the recording's segment files and of the catalog, created if missing (`dir` is another "
              "name of this key)")
        .size("segment_size", &R::segment_size, 1ull << 20, 16ull << 30,
              "bytes per segment file, preallocated (a multiple of 1 MiB)")
        .choice("fsync", &R::fsync, kFsyncNames,
                "none: the kernel writes back when it likes (a power failure loses what it had not); interval: "
                "fdatasync every fsync_interval_ms (loses at most that much); every: fdatasync after every write "
                "batch (loses only the batch in flight)")
        .integer("fsync_interval_ms", &R::fsync_interval_ms, 1, 3'600'000, "fsync = \"interval\": how often");
    return t;
  }();
  static const std::vector<FieldOf<RecordingConfig>> fields = [] {
    std::vector<FieldOf<RecordingConfig>> f;
    for (const ConfigKeys::Key& k : table.keys())
      f.push_back(key_field<RecordingConfig>(k.name, k, itself<RecordingConfig>));
    return f;
  }();
  return fields;
}

// kernel_timestamps: true, false or "inherit", which no ConfigTable key type takes.
StreamField kernel_timestamps_field() {
  return {"kernel_timestamps",
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
          }};
}

// start: "live", "earliest", { sequence = N } or { time = "RFC 3339" }, which no ConfigTable key
// type takes.
StreamField start_field() {
  using Start = StreamConfig::Start;
  return {"start",
          "where a subscriber of this stream starts: \"live\" (now), \"earliest\" (the recording's first message), "
          "{ sequence = N } or { time = \"2026-12-07T09:30:00Z\" } (the recording from there); anything but live "
          "reads the stream's recording, then switches to the live stream, every sequence once (docs/ARCHIVE.md)",
          [](StreamConfig& s, const toml::node& n) -> std::string {
            constexpr const char* kWant =
                "expected \"live\", \"earliest\", { sequence = N } or { time = \"RFC 3339 time\" }";
            if (n.is_string()) {
              const std::string v = *n.value<std::string>();
              if (v == "live" || v == "earliest") {
                s.start = v == "live" ? Start::kLive : Start::kEarliest;
                return "";
              }
              return absl::StrCat(kWant, ", got ", quote(v));
            }
            const toml::table* t = n.as_table();
            if (t == nullptr || t->size() != 1) return absl::StrCat(kWant, ", got ", describe(n));
            const auto entry = t->begin();
            const std::string k(entry->first.str());
            const toml::node& v = entry->second;
            if (k == "sequence") {
              const std::optional<std::int64_t> q = v.value_exact<std::int64_t>();
              if (!v.is_integer() || !q || *q < 1)
                return absl::StrCat("sequence: expected an integer >= 1, got ", describe(v));
              s.start = Start::kSequence;
              s.start_sequence = static_cast<std::uint64_t>(*q);
              return "";
            }
            if (k == "time") {
              std::int64_t ns = 0;
              const std::optional<std::string> text = v.value_exact<std::string>();
              if (!text || !parse_rfc3339(*text, &ns)) {
                return absl::StrCat("time: expected an RFC 3339 time such as \"2026-12-07T09:30:00Z\", got ",
                                    describe(v));
              }
              s.start = Start::kTime;
              s.start_time_ns = ns;
              s.start_time = *text;
              return "";
            }
            return absl::StrCat(kWant, ", got a table with ", quote(k));
          },
          [](const StreamConfig& s) -> std::string {
            switch (s.start) {
              case Start::kLive:
                return quote("live");
              case Start::kEarliest:
                return quote("earliest");
              case Start::kSequence:
                return absl::StrCat("{ sequence = ", s.start_sequence, " }");
              case Start::kTime:
                return absl::StrCat("{ time = ", quote(s.start_time), " }");
            }
            return quote("live");
          }};
}

const std::vector<StreamField>& stream_fields() {
  static const std::vector<StreamField> table = [] {
    std::vector<StreamField> t;
    for (const ConfigKeys::Key& k : stream_table().keys()) {
      t.push_back(key_field<StreamConfig>(k.name, k, itself<StreamConfig>));
      if (k.name == "udp_port") t.push_back(kernel_timestamps_field());  // printed in this place
      if (k.name == "publisher_timestamp") t.push_back(start_field());
    }
    return t;
  }();
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
    known.emplace_back("recordings");
    for (auto&& [k, v] : root) {
      const std::string section(k.str());
      if (section == "streams") {
        if (absl::Status s = parse_streams(v, cfg); !s.ok()) return s;
        continue;
      }
      if (section == "recordings") {
        if (absl::Status s = parse_recordings(v, cfg); !s.ok()) return s;
        continue;
      }
      if (sections.count(section) == 0 || !v.is_table()) {
        if (sections.count(section) != 0)
          return error(v.source(), section, absl::StrCat("expected a table [", section, "], got ", describe(v)));
        std::vector<std::string> secs(sections.begin(), sections.end());
        secs.emplace_back("streams");
        secs.emplace_back("recordings");
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

  absl::Status parse_recordings(const toml::node& v, Config* cfg) {
    const toml::array* arr = v.as_array();
    if (arr == nullptr) {
      return error(v.source(), "recordings", "expected an array of tables ([[recordings]]), got " + describe(v));
    }
    std::vector<std::string> known;
    for (const RecordingAlias& a : kRecordingAliases) known.emplace_back(a.alias);
    for (const auto& f : recording_fields()) known.emplace_back(f.key);
    std::set<std::string> topics;
    for (std::size_t i = 0; i < arr->size(); ++i) {
      const toml::node& e = *arr->get(i);
      const std::string prefix = absl::StrFormat("recordings[%d]", i);
      const toml::table* t = e.as_table();
      if (t == nullptr) return error(e.source(), prefix, "expected a table, got " + describe(e));
      RecordingConfig rc;
      rc.line = static_cast<int>(e.source().begin.line);
      std::map<std::string, std::string> given;  // canonical key -> the name it was given as
      for (auto&& [k, fv] : *t) {
        const std::string name(k.str());
        const RecordingAlias* alias = nullptr;
        for (const RecordingAlias& a : kRecordingAliases) {
          if (name == a.alias || name == a.key) alias = &a;
        }
        const std::string key = alias != nullptr ? std::string(alias->key) : name;
        const FieldOf<RecordingConfig>* f = nullptr;
        for (const auto& rf : recording_fields()) {
          if (key == rf.key) f = &rf;
        }
        if (f == nullptr) {
          return error(k.source(), prefix + "." + name, absl::StrCat("unknown key", did_you_mean(name, known)));
        }
        if (auto [it, fresh] = given.emplace(key, name); !fresh) {
          return error(k.source(), prefix + "." + name,
                       absl::StrCat("given twice, as ", it->second, " and as ", name, " (", std::string(alias->alias),
                                    " is another name of ", key, "): give one of them"));
        }
        if (std::string err = f->set(rc, fv); !err.empty()) return error(fv.source(), prefix + "." + name, err);
      }
      if (rc.topic.empty()) {
        return error(e.source(), prefix + ".topic",
                     "missing (every [[recordings]] entry names the stream's topic: topic = \"...\" or stream = "
                     "\"...\")");
      }
      if (rc.directory.empty()) {
        return error(e.source(), prefix + ".directory",
                     "missing (where the recording's files go: directory = \"...\" or dir = \"...\")");
      }
      if (rc.segment_size % (1ull << 20) != 0) {
        return error(e.source(), prefix + ".segment_size",
                     absl::StrCat(format_size(rc.segment_size), " is not a multiple of 1MiB"));
      }
      if (!topics.insert(rc.topic).second) {
        return error(e.source(), prefix + ".topic", absl::StrCat("the stream ", quote(rc.topic), " is recorded twice"));
      }
      cfg->recordings.push_back(std::move(rc));
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
    for (std::size_t i = 0; i < c.streams.size(); ++i) {
      const StreamConfig& sc = c.streams[i];
      if (sc.start != StreamConfig::Start::kLive && c.archive_dir_of(sc).empty()) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s:%d: streams[%d].start: a start other than \"live\" reads the stream's recording: set "
                            "archive_dir in this entry (the recorder's directory), or record the topic %s here with a "
                            "[[recordings]] entry",
                            source_, sc.line, i, quote(sc.topic)));
      }
    }
    for (const RegisteredTable& t : config_registry().tables()) {
      if (!t.validate) continue;
      if (ConfigIssue i = t.validate(c); !i.key.empty()) return at(i.key, i.message);
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
    if (!c.metrics.listen.empty() && !c.runtime.counters) {
      return at("metrics.listen", "the endpoint serves the counters file: it needs runtime.counters = true");
    }
    return absl::OkStatus();
  }

  std::string source_;
  std::map<std::string, int> lines_;
};

}  // namespace

bool parse_rfc3339(std::string_view text, std::int64_t* ns) {
  // YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM|-HH:MM)
  std::size_t i = 0;
  auto digits = [&](int n, int* out) {
    int v = 0;
    for (int k = 0; k < n; ++k, ++i) {
      if (i >= text.size() || !absl::ascii_isdigit(static_cast<unsigned char>(text[i]))) return false;
      v = v * 10 + (text[i] - '0');
    }
    *out = v;
    return true;
  };
  auto lit = [&](auto pred) { return i < text.size() && pred(text[i]) ? (++i, true) : false; };
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  if (!digits(4, &year) || !lit([](char c) { return c == '-'; }) || !digits(2, &month) ||
      !lit([](char c) { return c == '-'; }) || !digits(2, &day) ||
      !lit([](char c) { return c == 'T' || c == 't' || c == ' '; }) || !digits(2, &hour) ||
      !lit([](char c) { return c == ':'; }) || !digits(2, &minute) || !lit([](char c) { return c == ':'; }) ||
      !digits(2, &second)) {
    return false;
  }
  std::int64_t frac = 0;
  if (lit([](char c) { return c == '.'; })) {
    int n = 0;
    for (; i < text.size() && absl::ascii_isdigit(static_cast<unsigned char>(text[i])); ++i, ++n) {
      if (n < 9) frac = frac * 10 + (text[i] - '0');
    }
    if (n == 0) return false;
    for (; n < 9; ++n) frac *= 10;
  }
  std::int64_t offset_s = 0;
  if (lit([](char c) { return c == 'Z' || c == 'z'; })) {
  } else if (i < text.size() && (text[i] == '+' || text[i] == '-')) {
    const int sign = text[i++] == '-' ? -1 : 1;
    int oh = 0, om = 0;
    if (!digits(2, &oh) || !lit([](char c) { return c == ':'; }) || !digits(2, &om) || oh > 23 || om > 59) {
      return false;
    }
    offset_s = sign * (oh * 3600 + om * 60);
  } else {
    return false;
  }
  if (i != text.size() || month < 1 || month > 12 || hour > 23 || minute > 59 || second > 60) return false;
  static constexpr int kDays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
  if (day < 1 || day > kDays[month - 1] || (month == 2 && day == 29 && !leap)) return false;
  // Days from 1970-01-01 (Howard Hinnant's days_from_civil).
  const int y = year - (month <= 2 ? 1 : 0);
  const int era = y / 400;
  const int yoe = y - era * 400;
  const int doy = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1;
  const int doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  const std::int64_t days = static_cast<std::int64_t>(era) * 146097 + doe - 719468;
  const std::int64_t secs = days * 86400 + hour * 3600 + minute * 60 + std::min(second, 59) - offset_s;
  *ns = secs * 1'000'000'000 + frac;
  return true;
}

namespace {

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

std::string Config::archive_dir_of(const StreamConfig& s) const {
  if (!s.archive_dir.empty()) return s.archive_dir;
  for (const RecordingConfig& r : recordings) {
    if (r.topic == s.topic) return r.directory;
  }
  return "";
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
  for (const RecordingConfig& r : recordings) {
    out << "\n[[recordings]]\n";
    for (const auto& f : recording_fields()) out << f.key << " = " << f.get(r) << "  # " << f.help << "\n";
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
