// pollux-replay: publishes a range of a recording (docs/ARCHIVE.md) on a stream of a context made
// from --config FILE, on whatever transport the configuration gives that stream, at the original
// pace, a multiple of it, or as fast as the subscribers take it (pollux::Replay).
//
//   pollux-replay --config FILE --dir DIR --recording ID --stream N|TOPIC
//                 [--from SEQ|TIME] [--to SEQ|TIME] [--pace original|speed=X|max] [--follow]
//                 [--wait-subscriber S] [--json] [--progress]
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "core/config.h"
#include "pollux/pollux.h"
#include "tools/common/cli.h"
#include "tools/common/output.h"

namespace {

constexpr char kProgram[] = "pollux-replay";
volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

// SEQ (digits) or TIME (RFC 3339, "2026-12-07T09:30:00.5Z" or with an offset).
bool parse_position(const std::string& s, pollux::ReplayPosition* out, std::string* why) {
  std::uint64_t seq = 0;
  if (!s.empty() && s.find_first_not_of("0123456789") == std::string::npos) {
    if (!absl::SimpleAtoi(s, &seq)) {
      *why = "a sequence beyond 2^64";
      return false;
    }
    *out = pollux::ReplayPosition::at_sequence(seq);
    return true;
  }
  absl::Time t;
  std::string err;
  if (!absl::ParseTime(absl::RFC3339_full, s, &t, &err)) {
    *why = absl::StrCat("neither a sequence nor an RFC 3339 time like 2026-12-07T09:30:00.250Z (", err, ")");
    return false;
  }
  *out = pollux::ReplayPosition::at_time(absl::ToUnixNanos(t));
  return true;
}

std::string status_json(std::uint64_t id, const std::string& topic, const pollux::ReplayStatus& s, double seconds) {
  using pollux::tools::json_string;
  return absl::StrFormat(
      "{\"recording\": %u, \"topic\": %s, \"state\": %s, \"messages\": %u, \"bytes\": %u, \"first_sequence\": %u, "
      "\"last_sequence\": %u, \"gap_markers\": %u, \"missing\": %u, \"resume_markers\": %u, \"back_pressured\": %u, "
      "\"seconds\": %.6f, \"messages_per_second\": %.0f, \"error\": %s}",
      id, json_string(topic), json_string(s.state), s.messages, s.bytes, s.first_sequence, s.last_sequence,
      s.gap_markers, s.missing, s.resume_markers, s.back_pressured, seconds,
      seconds > 0 ? static_cast<double>(s.messages) / seconds : 0.0, s.error.empty() ? "null" : json_string(s.error));
}

}  // namespace

int main(int argc, char** argv) {
  std::string config, dir, stream, from, to, pace = "max";
  std::uint64_t id = 0, wait_s = 10;
  bool follow = false, json = false, progress = false;
  pollux::cli::Parser p(
      kProgram,
      "Publishes a range of recording ID (from the catalog in DIR) on a stream of the configuration's context, on "
      "whatever transport the configuration gives it. The messages are new messages of that stream (its session and "
      "sequences) carrying the recorded payloads byte for byte, in recording order. Every record is checked before "
      "it is published: at a damaged one the replay stops there with an error naming the segment file and offset.");
  p.text("--config", &config, "FILE", "the configuration (TOML) whose context publishes")
      .text("--dir", &dir, "DIR", "the recording directory (its catalog; `pollux-archive list --dir DIR`)")
      .count("--recording", &id, "the recording's id", 1)
      .text("--stream", &stream, "N|TOPIC", "the stream to publish on: a topic, or a stream id the configuration has")
      .text("--from", &from, "SEQ|TIME",
            "start at the first message whose sequence is >= SEQ, or published at or after TIME (RFC 3339, e.g. "
            "2026-12-07T09:30:00.250Z); default: the first")
      .text("--to", &to, "SEQ|TIME", "end after the last message whose sequence is <= SEQ or published by TIME")
      .text("--pace", &pace, "original|speed=X|max",
            "the recorded spacing, that spacing divided by X, or as fast as the subscribers take them")
      .toggle("--follow", &follow, "a recording still being written: wait for what --to asks (or forever without --to)")
      .count("--wait-subscriber", &wait_s, "seconds to wait for a subscriber before giving up (0: none needed)", 0,
             86400)
      .toggle("--progress", &progress, "print messages published every second on stderr")
      .toggle("--json", &json, "the result as one JSON object")
      .epilog(
          "Exit status: 0 the range was published, 1 an error (the recording or a segment cannot be read, damage "
          "met: the message names the file and offset, no subscriber came), 64 bad command line.\n");
  p.parse(argc, argv);
  if (config.empty()) p.fail("--config is required");
  if (dir.empty()) p.fail("--dir is required");
  if (id == 0) p.fail("--recording is required");
  if (stream.empty()) p.fail("--stream is required");

  pollux::ReplayOptions o;
  o.directory = dir;
  o.recording_id = id;
  o.follow = follow;
  std::string why;
  if (!from.empty() && !parse_position(from, &o.from, &why)) p.fail(absl::StrCat("--from ", from, ": ", why));
  if (!to.empty() && !parse_position(to, &o.to, &why)) p.fail(absl::StrCat("--to ", to, ": ", why));
  if (pace == "max") {
    o.pace = pollux::ReplayOptions::Pace::kMax;
  } else if (pace == "original") {
    o.pace = pollux::ReplayOptions::Pace::kOriginal;
  } else if (pace.rfind("speed=", 0) == 0 && absl::SimpleAtod(pace.substr(6), &o.speed) && o.speed > 0 &&
             o.speed < 1e9) {
    o.pace = pollux::ReplayOptions::Pace::kSpeed;
  } else {
    p.fail(absl::StrCat("--pace ", pace, ": expected original, max or speed=X with X > 0 (speed=2 is twice as fast)"));
  }

  auto cfg = pollux::core::load_config_file(config);
  if (!cfg.ok()) {
    std::fprintf(stderr, "%s: %s\n", kProgram, std::string(cfg.status().message()).c_str());
    return 1;
  }
  // A stream id names the configured topic that has it.
  std::string topic = stream;
  if (stream.find_first_not_of("0123456789") == std::string::npos) {
    topic.clear();
    for (const pollux::core::StreamConfig& s : cfg->streams) {
      if (std::to_string(cfg->stream_id(s.topic)) == stream) topic = s.topic;
    }
    if (topic.empty()) {
      std::fprintf(stderr, "%s: --stream %s: no [[streams]] topic of %s has stream id %s (name the topic instead)\n",
                   kProgram, stream.c_str(), config.c_str(), stream.c_str());
      return 1;
    }
  }

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  auto ctx = pollux::Context::from_file(config);
  if (!ctx.ok()) {
    std::fprintf(stderr, "%s: %s\n", kProgram, std::string(ctx.status().message()).c_str());
    return 1;
  }
  auto pub = (*ctx)->publisher(topic);
  if (!pub.ok()) {
    std::fprintf(stderr, "%s: %s\n", kProgram, std::string(pub.status().message()).c_str());
    return 1;
  }
  auto replay = pollux::Replay::start(*pub, o);
  if (!replay.ok()) {
    std::fprintf(stderr, "%s: %s\n", kProgram, std::string(replay.status().message()).c_str());
    return 1;
  }
  if (wait_s > 0) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(wait_s);
    while (!pub->is_connected() && !g_stop) {
      if (std::chrono::steady_clock::now() >= give_up) {
        std::fprintf(stderr,
                     "%s: no subscriber of %s connected within %llu s (start one, or raise --wait-subscriber)\n",
                     kProgram, topic.c_str(), static_cast<unsigned long long>(wait_s));
        return 1;
      }
      pub->service();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  pollux::Replay& r = **replay;
  const auto t0 = std::chrono::steady_clock::now();
  auto last_progress = t0;
  (void)r.run([&] {
    if (progress && std::chrono::steady_clock::now() - last_progress >= std::chrono::seconds(1)) {
      last_progress = std::chrono::steady_clock::now();
      const pollux::ReplayStatus s = r.status();
      std::fprintf(stderr, "%s: %llu messages published, last recorded sequence %llu\n", kProgram,
                   static_cast<unsigned long long>(s.messages), static_cast<unsigned long long>(s.last_sequence));
    }
    return !g_stop;
  });  // its error is in status()
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  pub->close();  // flushes what the poller still holds
  pollux::ReplayStatus s = r.status();
  if (g_stop && !r.done()) {
    s.state = "failed";
    s.error = "interrupted (SIGINT or SIGTERM)";
  }
  if (json) {
    std::printf("%s\n", status_json(id, topic, s, seconds).c_str());
  } else {
    std::printf(
        "recording %llu -> %s: %s, %llu messages (recorded sequences %llu..%llu, %llu bytes) in %.3f s; %llu gap "
        "markers (%llu messages missing), %llu resume markers%s%s\n",
        static_cast<unsigned long long>(id), topic.c_str(), s.state, static_cast<unsigned long long>(s.messages),
        static_cast<unsigned long long>(s.first_sequence), static_cast<unsigned long long>(s.last_sequence),
        static_cast<unsigned long long>(s.bytes), seconds, static_cast<unsigned long long>(s.gap_markers),
        static_cast<unsigned long long>(s.missing), static_cast<unsigned long long>(s.resume_markers),
        s.error.empty() ? "" : ": ", s.error.c_str());
  }
  if (!s.error.empty()) std::fprintf(stderr, "%s: %s\n", kProgram, s.error.c_str());
  return std::string_view(s.state) == "done" ? 0 : 1;
}
