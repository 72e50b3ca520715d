// pollux-recorder: records streams to disk as a service (docs/ARCHIVE.md). A context made from
// --config FILE, whose [[recordings]] entries each run a pollux::Recorder; it runs until SIGINT
// or SIGTERM, then stops the recorders (what their subscribers hold is recorded, the catalog
// says "stopped") and prints each recording's status.
//
//   pollux-recorder --config FILE [--status-every S] [--json]
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>

#include "absl/strings/str_format.h"
#include "core/archive/catalog.h"
#include "core/config.h"
#include "pollux/pollux.h"
#include "tools/common/cli.h"
#include "tools/common/output.h"

namespace {

volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

std::string status_json(const pollux::RecordingStatus& s) {
  using pollux::tools::json_string;
  return absl::StrFormat(
      "{\"recording\": %u, \"topic\": %s, \"stream\": %u, \"directory\": %s, \"state\": %s, \"resumed\": %s, "
      "\"messages\": %u, \"gaps\": %u, \"bytes\": %u, \"dropped\": %u, \"first_sequence\": %u, "
      "\"last_sequence\": %u, \"segment\": %u, \"error\": %s}",
      s.recording_id, json_string(s.topic), s.stream_id, json_string(s.directory), json_string(s.state),
      s.resumed ? "true" : "false", s.messages, s.gaps, s.bytes, s.dropped, s.first_sequence, s.last_sequence,
      s.segment, s.error.empty() ? "null" : json_string(s.error));
}

std::string status_line(const pollux::RecordingStatus& s) {
  return absl::StrFormat(
      "recording %u (%s, stream %u) in %s: %s%s, %u messages (sequences %u..%u), %u gaps, %u bytes, segment %u%s%s",
      s.recording_id, s.topic, s.stream_id, s.directory, s.state, s.resumed ? " (resumed)" : "", s.messages,
      s.first_sequence, s.last_sequence, s.gaps, s.bytes, s.segment,
      s.dropped ? absl::StrFormat(", %u dropped", s.dropped) : "", s.error.empty() ? "" : ": " + s.error);
}

}  // namespace

int main(int argc, char** argv) {
  std::string config;
  std::uint64_t status_every = 0;
  bool json = false;
  pollux::cli::Parser p(
      "pollux-recorder",
      "Records the streams a configuration's [[recordings]] name (topic, directory, segment_size, fsync) to disk, "
      "subscribing on the configuration's transport like any subscriber, until SIGINT or SIGTERM; then stops the "
      "recordings (the catalog marks them stopped) and prints their status. A recording a killed recorder left is "
      "resumed: its torn tail is cut and a resume marker written. pollux-archive lists, verifies and exports "
      "recordings.");
  p.text("--config", &config, "FILE", "the configuration (TOML) with at least one [[recordings]] entry")
      .count("--status-every", &status_every, "print every recording's status every S seconds (0: only at the end)", 0,
             86400)
      .toggle("--json", &json, "the final status as one JSON object: {\"recordings\": [...]}")
      .epilog(
          "Exit status: 0 stopped cleanly, 1 a recording could not start or ended in error (the message says which "
          "and why), 64 bad command line.\n");
  p.parse(argc, argv);
  if (config.empty()) p.fail("--config is required");

  auto cfg = pollux::core::load_config_file(config);
  if (!cfg.ok()) {
    std::fprintf(stderr, "pollux-recorder: %s\n", std::string(cfg.status().message()).c_str());
    return 1;
  }
  if (cfg->recordings.empty()) {
    std::fprintf(stderr,
                 "pollux-recorder: %s has no [[recordings]] entry: add one (topic = \"...\", directory = \"...\")\n",
                 config.c_str());
    return 1;
  }
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  // The context runs the recordings; their status is read from the directories' catalogs
  // while it runs (the recorders live on the context's own thread).
  auto ctx = pollux::Context::from_file(config);
  if (!ctx.ok()) {
    std::fprintf(stderr, "pollux-recorder: %s\n", std::string(ctx.status().message()).c_str());
    return 1;
  }
  std::fprintf(stderr, "pollux-recorder: recording %zu stream(s) from %s; SIGINT or SIGTERM stops\n",
               cfg->recordings.size(), config.c_str());
  auto last_status = std::chrono::steady_clock::now();
  while (!g_stop) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (status_every > 0 && std::chrono::steady_clock::now() - last_status >= std::chrono::seconds(status_every)) {
      last_status = std::chrono::steady_clock::now();
      for (const pollux::core::RecordingConfig& rc : cfg->recordings) {
        auto cat = pollux::core::archive::Catalog::load(rc.directory);
        if (!cat.ok()) continue;
        for (const auto& r : cat->recordings()) {
          if (r.topic != rc.topic || r.state != pollux::core::archive::RecordingState::kRecording) continue;
          std::fprintf(stderr, "pollux-recorder: recording %llu (%s): %llu messages, last sequence %llu, segment %u\n",
                       static_cast<unsigned long long>(r.id), r.topic.c_str(),
                       static_cast<unsigned long long>(r.frames), static_cast<unsigned long long>(r.last_sequence),
                       r.last_segment);
        }
      }
    }
  }
  std::vector<pollux::RecordingStatus> finals = (*ctx)->stop_recordings();
  bool failed = false;
  if (json) std::printf("{\"recordings\": [");
  for (std::size_t i = 0; i < finals.size(); ++i) {
    failed |= std::string(finals[i].state) == "failed";
    if (json) {
      std::printf("%s%s", i ? ", " : "", status_json(finals[i]).c_str());
    } else {
      std::printf("%s\n", status_line(finals[i]).c_str());
    }
  }
  if (json) std::printf("]}\n");
  return failed ? 1 : 0;
}
