// pollux-bench-capture: how fast pollux-feed's capture (feed.capture) takes records and where
// its writer starts to drop. Offers records of --bytes payload bytes to a CaptureWriter at
// --rate records/s (or as fast as the caller can: --rate max) for --seconds, writing to --out
// (a file on the disk to measure; removed afterwards), and reports per step: records offered,
// written and dropped, the caller's cost per record (what the feed handler's thread pays) and
// the writer's throughput. Several rates in one run: --rate 200000,1000000,max.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "feed_handler/source/capture.h"
#include "tools/common/cli.h"

int main(int argc, char** argv) {
  std::string out = "/tmp/pollux-bench-capture.pcap", rates = "100000,400000,1000000,max";
  std::uint64_t bytes = 1400, buffer_mib = 64;
  double seconds = 2;
  pollux::cli::Parser cli(
      "pollux-bench-capture",
      "Offers records to pollux-feed's capture writer at given rates and reports what it\n"
      "writes and drops.\n"
      "  pollux-bench-capture [--out FILE] [--rate LIST] [--bytes N] [--seconds S] [--buffer-mib N]");
  cli.text("--out", &out, "FILE", "capture file to write (removed at the end, with PATH.1...)")
      .text("--rate", &rates, "LIST", "comma-separated records/s to try, or max (as fast as the caller can)")
      .count("--bytes", &bytes, "payload bytes per record (a MoldUDP64 datagram's size)", 1, 65507)
      .real("--seconds", &seconds, "S", "seconds per rate", 0.1, 600)
      .count("--buffer-mib", &buffer_mib, "ring between the caller and the writer, MiB (feed.capture_buffer)", 1, 4096)
      .parse(argc, argv);
  std::vector<std::uint8_t> payload(bytes, 0x5a);
  std::printf("%-10s %12s %12s %12s %10s %12s %10s\n", "rate", "offered", "written", "dropped", "ns/record",
              "MB/s written", "dropped %");
  for (const std::string& r : std::vector<std::string>(absl::StrSplit(rates, ','))) {
    double rate = 0;
    const bool max = r == "max";
    if (!max && (!absl::SimpleAtod(r, &rate) || rate <= 0))
      return pollux::cli::usage_error("pollux-bench-capture", "--rate: expected numbers or max (see --help)");
    pollux::feed::CaptureWriter w({out, 0, buffer_mib << 20});
    const pollux::feed::pcap::Endpoint src{0x0100000a, 0x409c}, dst{0x0100ffef, 0x2067};
    const auto t0 = std::chrono::steady_clock::now();
    const auto end = t0 + std::chrono::duration<double>(seconds);
    std::uint64_t offered = 0;
    double caller_ns = 0;
    for (auto now = t0; now < end; now = std::chrono::steady_clock::now()) {
      const double due = max ? 0 : static_cast<double>(offered) / rate;
      if (!max && std::chrono::duration<double>(now - t0).count() < due) {
        if (due - std::chrono::duration<double>(now - t0).count() > 200e-6)
          std::this_thread::sleep_for(std::chrono::microseconds(100));
        continue;
      }
      // A burst of 32, as a recvmmsg hands the handler.
      const auto c0 = std::chrono::steady_clock::now();
      for (int i = 0; i < 32; ++i)
        w.record(1'765'000'000'000'000'000 + static_cast<std::int64_t>(offered + i), src, dst, payload);
      caller_ns += std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - c0).count();
      offered += 32;
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    w.stop();
    const auto st = w.stats();
    std::printf("%-10s %12llu %12llu %12llu %10.1f %12.1f %10.2f%s\n", r.c_str(),
                static_cast<unsigned long long>(offered), static_cast<unsigned long long>(st.records),
                static_cast<unsigned long long>(st.dropped), caller_ns / static_cast<double>(offered),
                static_cast<double>(st.bytes) / secs / 1e6,
                100.0 * static_cast<double>(st.dropped) / static_cast<double>(offered),
                w.error().empty() ? "" : ("  error: " + w.error()).c_str());
    for (std::uint64_t k = 0; k <= st.files; ++k)
      ::unlink(k == 0 ? out.c_str() : (out + "." + std::to_string(k)).c_str());
  }
  return 0;
}
