// One frozen configuration struct, built from TOML by a table of (key, default, help, type)
// entries: the generic [runtime], [pool], [rings], [transport], [[streams]] and [[recordings]] here
// (core/config.cc), each transport's own table in its folder (transport/<name>/<name>_config.h),
// added through core/config_registry.h. Every key has a documented default; unknown keys are errors; an
// error names the file, line and key:
//   feed.toml:12: runtime.threading: expected dedicated|shared|inline, got "dedicted"
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/buffer_pool.h"
#include "core/config_registry.h"
#include "core/controller.h"
#include "core/idle.h"
#include "core/ring.h"

namespace pollux::core {

enum class ThreadingMode { kDedicated, kShared, kInline };
enum class TransportKind { kShm, kUdp, kRdma };

std::string_view threading_name(ThreadingMode m);
std::string_view transport_name(TransportKind k);

struct StreamConfig {
  std::string topic;
  std::uint32_t id = 0;
  bool trace = false;             // carry stage timestamps
  std::uint32_t trace_every = 1;  // trace one message in N
  std::string udp_address;        // udp: this stream's group/address ("" = udp.address)
  std::uint32_t udp_port = 0;     // udp: this stream's port (0 = udp.port)
  int kernel_timestamps = -1;     // udp: SO_TIMESTAMPING on this stream (1/0), -1 = udp.kernel_timestamps
  bool publisher_timestamp =
      true;  // frames carry the publisher's clock at offer (Message::publisher_ns); false: 0, no clock read per offer
  // Late join (docs/ARCHIVE.md): where a subscriber of this stream starts. kLive: now; otherwise it
  // reads the stream's recording from there, then switches to the live stream.
  enum class Start : std::uint8_t { kLive, kEarliest, kSequence, kTime };
  Start start = Start::kLive;
  std::uint64_t start_sequence = 0;  // start = { sequence = N }
  std::int64_t start_time_ns = 0;    // start = { time = "RFC 3339" }: CLOCK_REALTIME nanoseconds
  std::string start_time;            // ... as written
  std::string archive_dir;           // the recording read ("" = this context's [[recordings]] entry of the topic)
  std::uint64_t max_catchup_bytes = 64ull << 20;  // live messages kept while catching up, at most
  int line = 0;                                   // where it was defined (for later diagnostics)
};

// "2026-12-07T09:30:00Z", "2026-12-07T09:30:00.123456789+01:00" (RFC 3339; 't', 'z' and a space
// for 'T' accepted) -> CLOCK_REALTIME nanoseconds. False when it is not one.
bool parse_rfc3339(std::string_view text, std::int64_t* ns);

// A [[recordings]] entry: a stream the context records to disk (docs/ARCHIVE.md).
enum class RecordingFsync : std::uint8_t { kNone, kInterval, kEvery };
struct RecordingConfig {
  std::string topic;                          // the stream recorded
  std::string directory;                      // where its segments and the catalog go
  std::uint64_t segment_size = 128ull << 20;  // bytes per segment file (1 MiB .. 16 GiB, MiB multiples)
  RecordingFsync fsync = RecordingFsync::kNone;
  std::uint32_t fsync_interval_ms = 1000;  // fsync = "interval"
  int line = 0;
};

struct RuntimeConfig {
  ThreadingMode threading = ThreadingMode::kDedicated;
  std::uint32_t pollers = 1;
  std::vector<int> poller_cores;     // empty: chosen automatically (NUMA node of `device`)
  std::vector<int> recording_cores;  // the [[recordings]] thread may run on these; empty: any
  IdleKind idle = IdleKind::kAdaptive;
  std::uint32_t sleep_timer_ms = 50;  // a sleeping poller runs its timers at least this often (0: only when woken)
  ControllerOptions adaptive;         // runtime.adaptive.*: the controller's knobs (core/controller.h)
  bool poll_yield = true;             // adaptive/interrupt: sched_yield (true) or cpu_relax on an empty polling cycle
  std::string name = "pollux";        // instance name: prefixes shm files
  std::string shm_dir = "/dev/shm";
  bool counters = true;                    // publish counters in <shm_dir>/pollux-<name>-<pid>.counters
  std::uint32_t counters_capacity = 2048;  // counter slots in that file (256 bytes each)
  std::string device;                      // network/RDMA device whose NUMA node hosts pollers and memory
};

struct PoolConfig {
  std::uint32_t slot_size = 2048;
  std::uint32_t slots = 8192;
  HugePages hugepages = HugePages::kAuto;
  int numa_node = -1;  // -1: the device's node if runtime.device is set, else unbound
};

struct RingsConfig {
  std::uint32_t capacity = 1024;    // descriptors per application<->poller ring (power of two)
  std::uint32_t burst = 32;         // max descriptors a poller moves per ring per duty cycle
  RingKind kind = RingKind::kSpsc;  // spsc (ours) or boost (boost::lockfree::spsc_queue)
};

// [metrics]: the context serves its own process's metrics over HTTP (docs/OBSERVABILITY.md).
struct MetricsConfig {
  std::string listen;                  // "HOST:PORT"; "" = no endpoint
  std::uint32_t max_connections = 16;  // at the limit a new connection closes the oldest
  std::uint32_t timeout_ms = 5000;     // a request must arrive within this; idle keep-alive ends after it
};

struct Config {
  std::string source = "<defaults>";  // file path or "<string>"
  RuntimeConfig runtime;
  MetricsConfig metrics;
  PoolConfig pool;
  RingsConfig rings;
  TransportKind transport = TransportKind::kShm;
  std::vector<StreamConfig> streams;
  std::vector<RecordingConfig> recordings;
  // The transports' tables ([shm], [udp], [rdma]; core/config_registry.h), by their type:
  // cfg.table<transport::udp::UdpConfig>() (each transport's header also has config(cfg)).
  TableValues tables;

  template <class T>
  const T& table() const {
    return *static_cast<const T*>(tables.get(TableSlot<T>::index));
  }
  template <class T>
  T& table() {
    return *static_cast<T*>(tables.get(TableSlot<T>::index));
  }

  // Stream id for a topic: the configured one, else a stable id derived from the topic name
  // (FNV-1a, high bit set so it never collides with configured ids, which must be < 2^31).
  std::uint32_t stream_id(std::string_view topic) const;
  const StreamConfig* find_stream(std::uint32_t id) const;
  // Where a late joiner of `s` reads the recording: its archive_dir, else the directory of this
  // configuration's [[recordings]] entry of its topic; "" when neither.
  std::string archive_dir_of(const StreamConfig& s) const;

  // The effective configuration as TOML, every key with its help text.
  std::string to_toml() const;
};

// `source_name` is used in error messages (the file name, or "<string>").
// Why `topic` cannot name a stream ("" when it can): a topic is 1 to kMaxTopicBytes bytes
// without control characters (it appears in counters, logs and pollux-stat's output).
inline constexpr std::size_t kMaxTopicBytes = 255;
std::string topic_error(std::string_view topic);

absl::StatusOr<Config> parse_config(std::string_view toml_text, std::string_view source_name);
// Reads `path` with read_config_file() and parses it.
absl::StatusOr<Config> load_config_file(const std::string& path);

// The largest configuration file read_config_file() takes: far above any real one, so a
// bigger file is the wrong file (a capture, a log) rather than a configuration.
inline constexpr std::size_t kMaxConfigFileBytes = std::size_t{16} << 20;

// The whole text of the configuration file `path`, for every reader of a TOML file (the
// library, pollux-feed, the tools). Only a regular file of at most kMaxConfigFileBytes is
// read: a FIFO, a directory, a device or a socket is refused before it is opened for
// reading, so one nobody writes to cannot block the caller, /dev/zero cannot fill memory
// and a directory is not taken for an empty file. Errors start with the path:
//   conf/x.toml: not a regular file: it is a FIFO (a configuration is read from a regular file)
absl::StatusOr<std::string> read_config_file(const std::string& path);

// A size given as text: bytes ("2000") or with a binary suffix ("64KiB", "16MiB", "1GiB"),
// within [lo, hi]. "" on success, else the message after "key: " (as every config error).
std::string parse_size(std::string_view text, std::uint64_t lo, std::uint64_t hi, std::uint64_t* out);
// A size for people: the largest binary unit that divides it exactly ("16MiB", "64KiB"), else
// bytes ("2000 bytes").
std::string format_size(std::uint64_t v);

// Levenshtein distance, and " (did you mean X?)" for the closest of `known` within 3 edits
// (empty when none is): for error messages about unknown keys.
std::size_t edit_distance(std::string_view a, std::string_view b);
std::string did_you_mean(std::string_view key, const std::vector<std::string>& known);

}  // namespace pollux::core
