// One frozen configuration struct, built from TOML by a table of (key, default, help, type)
// entries (core/config.cc). Every key has a documented default; unknown keys are errors; an
// error names the file, line and key:
//   feed.toml:12: runtime.threading: expected dedicated|shared|inline, got "dedicted"
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/buffer_pool.h"
#include "core/idle.h"

namespace pollux::core {

enum class ThreadingMode { kDedicated, kShared, kInline };
enum class TransportKind { kShm, kUdp, kRdma };
enum class FlowControl { kLossy, kBackpressure };

std::string_view threading_name(ThreadingMode m);
std::string_view transport_name(TransportKind k);
std::string_view flow_control_name(FlowControl f);

struct StreamConfig {
  std::string topic;
  std::uint32_t id = 0;
  bool trace = false;            // carry stage timestamps
  std::uint32_t trace_every = 1; // trace one message in N
  int line = 0;                  // where it was defined (for later diagnostics)
};

struct RuntimeConfig {
  ThreadingMode threading = ThreadingMode::kDedicated;
  std::uint32_t pollers = 1;
  std::vector<int> poller_cores;   // empty: chosen automatically (NUMA node of `device`)
  IdleKind idle = IdleKind::kBackoff;
  std::string name = "pollux";     // instance name: prefixes shm files
  std::string shm_dir = "/dev/shm";
  bool counters = true;            // publish counters in <shm_dir>/pollux-<name>-<pid>.counters
  std::string device;              // network/RDMA device whose NUMA node hosts pollers and memory
};

struct PoolConfig {
  std::uint32_t slot_size = 2048;
  std::uint32_t slots = 8192;
  HugePages hugepages = HugePages::kAuto;
  int numa_node = -1;  // -1: the device's node if runtime.device is set, else unbound
};

struct RingsConfig {
  std::uint32_t capacity = 1024;  // descriptors per application<->poller ring (power of two)
  std::uint32_t burst = 32;       // max descriptors a poller moves per ring per duty cycle
};

struct ShmConfig {
  std::uint64_t log_size = 16u << 20;  // bytes per stream log (power of two, >= 64 KiB)
  FlowControl flow_control = FlowControl::kLossy;
  std::uint32_t max_subscribers = 32;
  std::uint32_t liveness_timeout_ms = 2000;  // publisher considered dead after this silence
};

struct Config {
  std::string source = "<defaults>";  // file path or "<string>"
  RuntimeConfig runtime;
  PoolConfig pool;
  RingsConfig rings;
  TransportKind transport = TransportKind::kShm;
  ShmConfig shm;
  std::vector<StreamConfig> streams;

  // Stream id for a topic: the configured one, else a stable id derived from the topic name
  // (FNV-1a, high bit set so it never collides with configured ids, which must be < 2^31).
  std::uint32_t stream_id(std::string_view topic) const;
  const StreamConfig* find_stream(std::uint32_t id) const;

  // The effective configuration as TOML, every key with its help text.
  std::string to_toml() const;
};

// `source_name` is used in error messages (the file name, or "<string>").
absl::StatusOr<Config> parse_config(std::string_view toml_text, std::string_view source_name);
absl::StatusOr<Config> load_config_file(const std::string& path);

}  // namespace pollux::core
