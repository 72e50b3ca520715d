// pollux-archive: the recordings of a recording directory (core/archive, docs/ARCHIVE.md) from the
// command line - list the catalog, show what a recording's segment files hold, verify every record,
// sequence and index entry, export the records as JSON lines, purge a recording.
//
//   pollux-archive list|info|verify|export|purge [ID] --dir DIR [--json] [...]
//
// Segment files are read through SegmentReader, which checks every record (bounds, magic, length,
// crc32c) before handing it out: their bytes are treated as hostile. Names from the catalog are
// printed with control characters escaped.
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <netinet/in.h>
#include <pcap/pcap.h>
#include <sys/stat.h>

#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/archive/catalog.h"
#include "core/archive/format.h"
#include "core/archive/segment.h"
#include "core/frame.h"
#include "tools/common/cli.h"
#include "tools/common/json_out.h"
#include "tools/common/output.h"

namespace {

namespace fs = std::filesystem;
namespace ar = pollux::core::archive;
using pollux::tools::JsonOut;
using pollux::tools::printable;

constexpr char kProgram[] = "pollux-archive";

constexpr char kHelp[] =
    R"(Lists, inspects, verifies, exports and purges the recordings of a recording directory: its
catalog and, per recording, the segment files "<id:016x>-<index:08>.seg" with the ".idx" index
of each sealed segment.

Usage: pollux-archive COMMAND [ID] --dir DIR [options]

Commands (each has its own --help):
  list      one line per recording of the catalog
  info      a recording's catalog entry and what each of its segment files holds
  verify    checks every record, frame sequence and index entry of a recording
  export    writes a recording's records as JSON lines, a packet capture or an ITCH file
  truncate  cuts a stopped recording after a sequence
  purge     deletes a recording's files and its catalog entry

Options:
  --dir DIR      the recording directory (required by every command)
  --json         JSON instead of text
  --version      print the version
  -h, --help     this text; after a command, that command's help

Exit status: 0 done (verify: everything holds), 1 an error or (verify) a problem found, each
named on stderr or in the report, 64 bad command line.
)";

constexpr char kListHelp[] = R"(pollux-archive list --dir DIR [--json]

One line per recording of DIR's catalog: id, stream, topic, state, segments, first..last
sequence, frames, gap markers, bytes, start and stop time (ISO-8601 UTC).

Options:
  --dir DIR      the recording directory (required)
  --json         an array of objects, one per recording: id, stream (its id), topic, state,
                 segment_size, first_segment, last_segment, segments, first_sequence,
                 last_sequence, first_time_ns, last_time_ns, frames (= messages), messages,
                 gaps, bytes, start_time, stop_time, started_ns, stopped_ns, error
  --version      print the version
  -h, --help     this text
)";

constexpr char kInfoHelp[] = R"(pollux-archive info ID --dir DIR [--json]

Recording ID's catalog entry, and what its segment files say: per segment its index, size, the
header's creation time, how far its valid records go (offset, and why they end there), its
record, frame and marker counts, the first and last sequence in it, and whether its .idx index
exists and is valid.

Options:
  --dir DIR      the recording directory (required)
  --json         one object: the catalog entry with a "segment_files" array
  --version      print the version
  -h, --help     this text
)";

constexpr char kVerifyHelp[] = R"(pollux-archive verify ID --dir DIR [--json]

Reads every segment of recording ID (from the catalog's first segment to the last one there is)
and checks: every record (bounds, magic, length, crc), every frame's header and stream, that
frame sequences per session never go backwards (a resume marker allows it), that every index
entry points at a record boundary holding a frame with its sequence and time, that every sealed
segment (all but the last) has a valid index, and that an index's totals (frames, markers, bytes,
first and last sequence and time) are what its segment holds. Each problem is reported as
"<file> at offset N: what is wrong".

An invalid record in the last segment of a recording still in state "recording" is the live
write in progress or a crash's torn tail: a warning (the next recorder start recovers it), not
a problem. Anywhere else it is a problem.

Options:
  --dir DIR      the recording directory (required)
  --json         {"recording":ID,"ok":bool,"segments":N,"frames":N,"markers":N,
                  "problems":[{"file":..,"offset":N,"what":..}],"warnings":[...]}
  --version      print the version
  -h, --help     this text

Exit status: 0 everything holds (warnings allowed), 1 a problem found or an error, 64 bad
command line.
)";

constexpr char kExportHelp[] = R"(pollux-archive export ID --dir DIR [--format jsonl|pcap|itch] [--out FILE]
                      [--dst ADDR:PORT] [--json]

Writes recording ID's records in order.
  jsonl  one JSON object per record:
    {"type":"frame","stream":S,"session":X,"sequence":N,"time_ns":T,"flags":F,"payload_hex":".."}
        (the payload: the bytes after the frame header and, for a traced frame, its trace block)
    {"type":"gap","stream":S,"session":X,"from":A,"to":B,"count":N,"time_ns":T}
    {"type":"resume","stream":S,"torn_bytes":N,"time_ns":T}
  pcap   a packet capture (libpcap format, nanosecond timestamps, Ethernet) with one IPv4/UDP
         datagram per frame, from 192.0.2.1:40000 to --dst: the frame verbatim, which is a
         Pollux data datagram (docs/PROTOCOL.md) - what the publisher would have sent over UDP.
         Each packet's time is the frame's publish time, converted to wall-clock time with the
         clocks the segment recorded at its creation. Markers are not packets (counted).
  itch   the payloads as an ITCH 5.0 BinaryFILE: each one behind a 2-byte big-endian length, as
         NASDAQ's files are (for a stream whose messages are ITCH messages, such as the sample
         feed handler's). Markers are skipped (counted).
An invalid record stops the export with an error naming its file and offset (exit 1); what
precedes it has been written. So does a frame the format cannot carry (larger than a UDP
datagram, or than ITCH's 2-byte length), naming its sequence.

Options:
  --dir DIR      the recording directory (required)
  --format FMT   jsonl (the default), pcap or itch
  --out FILE     write to FILE instead of stdout
  --dst A:P      pcap: the datagrams' IPv4 destination (default 239.255.0.1:40456)
  --json         with --out: the summary on stdout as JSON
  --version      print the version
  -h, --help     this text
)";

constexpr char kTruncateHelp[] = R"(pollux-archive truncate ID --dir DIR --after SEQ [--json]

Cuts recording ID after its frame of sequence SEQ: from the first frame whose sequence is above
SEQ (in recording order), every record is removed - the segment holding it is zeroed from there
and the later segments are deleted - and the catalog entry is brought up to date (last sequence
and time, frames, gaps, bytes, last segment). A recording in state "recording" (a recorder
writes it, or died writing it) is refused: stop the recorder first. The records are read and
checked up to the cut before anything changes; damage before it is an error and nothing is cut.

Crash safety: the later segments are deleted first, last one first, then the cut segment is
zeroed and synced, then the catalog replaced. Interrupted at any point, the recording reads as a
prefix of what it was (possibly longer than asked), and the catalog is brought up to date by
running the same command again.

Options:
  --dir DIR      the recording directory (required)
  --after SEQ    the last sequence to keep (required)
  --json         the result as one JSON object
  --version      print the version
  -h, --help     this text
)";

constexpr char kPurgeHelp[] = R"(pollux-archive purge ID --dir DIR [--force] [--json]

Removes recording ID's catalog entry and deletes its segment and index files. A recording in
state "recording" (a recorder writes it, or died writing it) is refused unless --force.

Options:
  --dir DIR      the recording directory (required)
  --force        purge a recording in state "recording" too
  --json         the result as one JSON object
  --version      print the version
  -h, --help     this text
)";

struct Command {
  const char* name;
  const char* help;
  bool takes_id;
  bool export_flags;
  bool force_flag;
  bool after_flag = false;
};
constexpr Command kCommands[] = {
    {"list", kListHelp, false, false, false},    {"info", kInfoHelp, true, false, false},
    {"verify", kVerifyHelp, true, false, false}, {"export", kExportHelp, true, true, false},
    {"purge", kPurgeHelp, true, false, true},    {"truncate", kTruncateHelp, true, false, false, true},
};

struct Args {
  const Command* command = nullptr;
  std::string dir;
  bool json = false;
  bool force = false;
  std::string format = "jsonl";
  std::string out;
  std::uint32_t dst_addr = 0;  // network byte order
  std::uint16_t dst_port = 0;  // host byte order
  bool has_after = false;
  std::uint64_t after = 0;
  bool has_id = false;
  std::uint64_t id = 0;
};

std::string g_usage_program;  // "pollux-archive <command>", for usage errors

[[noreturn]] void usage_fail(const std::string& message) {
  std::fprintf(stderr, "%s: %s (see %s --help)\n", g_usage_program.c_str(), message.c_str(), g_usage_program.c_str());
  std::exit(pollux::cli::kUsageExit);
}

// "pollux-archive: <message>" on stderr; exit status 1.
int error(const std::string& message) {
  std::fprintf(stderr, "%s: %s\n", kProgram, message.c_str());
  return 1;
}

bool parse_id(const std::string& s, std::uint64_t* id) {
  if (s.empty() || s.size() > 19) return false;
  std::uint64_t v = 0;
  for (const char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  *id = v;
  return true;
}

// The command's flags and ID (argv[0] is the command's name). Exits 64 on a bad command line.
Args parse_command(const Command& c, int argc, char** argv) {
  Args a;
  a.command = &c;
  g_usage_program = absl::StrCat(kProgram, " ", c.name);
  pollux::cli::FlagReader f(argc, argv, usage_fail);
  while (f.next()) {
    const std::string& flag = f.flag();
    if (flag == "--dir") {
      a.dir = f.value();
      if (a.dir.empty()) usage_fail("--dir: empty value");
    } else if (flag == "--json") {
      f.no_value();
      a.json = true;
    } else if (flag == "--force" && c.force_flag) {
      f.no_value();
      a.force = true;
    } else if (flag == "--format" && c.export_flags) {
      a.format = f.value();
    } else if (flag == "--after" && c.after_flag) {
      const std::string v = f.value();
      if (!absl::SimpleAtoi(v, &a.after)) usage_fail(absl::StrCat("--after: \"", printable(v), "\" is not a sequence"));
      a.has_after = true;
    } else if (flag == "--dst" && c.export_flags) {
      const std::string v = f.value();
      const std::size_t colon = v.rfind(':');
      std::uint32_t port = 0;
      in_addr addr{};
      if (colon == std::string::npos || ::inet_pton(AF_INET, v.substr(0, colon).c_str(), &addr) != 1 ||
          !absl::SimpleAtoi(v.substr(colon + 1), &port) || port == 0 || port > 65535) {
        usage_fail(absl::StrCat("--dst: \"", printable(v), "\" is not an IPv4 ADDRESS:PORT (e.g. 239.255.0.1:40456)"));
      }
      a.dst_addr = addr.s_addr;
      a.dst_port = static_cast<std::uint16_t>(port);
    } else if (flag == "--out" && c.export_flags) {
      a.out = f.value();
      if (a.out.empty()) usage_fail("--out: empty value");
    } else if (!flag.empty() && flag[0] == '-') {
      std::exit(pollux::cli::unknown_flag(g_usage_program, f.raw(), c.help));
    } else if (c.takes_id && !a.has_id) {
      if (!parse_id(flag, &a.id)) {
        usage_fail(absl::StrCat("\"", printable(flag), "\" is not a recording id (a number: `", kProgram,
                                " list --dir DIR` shows them)"));
      }
      a.has_id = true;
    } else {
      usage_fail(absl::StrCat("unexpected argument \"", printable(flag), "\""));
    }
  }
  if (a.dir.empty()) usage_fail("--dir DIR is required: the recording directory (the one holding \"catalog\")");
  if (c.takes_id && !a.has_id) {
    usage_fail(absl::StrCat("which recording? give its ID (`", kProgram, " list --dir ", a.dir, "` shows them)"));
  }
  if (c.after_flag && !a.has_after) usage_fail("--after SEQ is required: the last sequence to keep");
  if (c.export_flags) {
    if (a.format != "jsonl" && a.format != "pcap" && a.format != "itch") {
      usage_fail(absl::StrCat("--format: \"", printable(a.format), "\" is not one of jsonl, pcap, itch"));
    }
    if (a.dst_addr == 0) {
      in_addr addr{};
      ::inet_pton(AF_INET, "239.255.0.1", &addr);
      a.dst_addr = addr.s_addr;
    }
    if (a.dst_port == 0) a.dst_port = 40456;
  }
  return a;
}

// ---- shared ------------------------------------------------------------------------------------

// CLOCK_REALTIME nanoseconds as ISO-8601 UTC with milliseconds ("" for 0: not set).
std::string iso_utc(std::int64_t ns) {
  if (ns == 0) return "";
  std::int64_t s = ns / 1'000'000'000;
  std::int64_t frac = ns % 1'000'000'000;
  if (frac < 0) {
    frac += 1'000'000'000;
    --s;
  }
  const std::time_t t = static_cast<std::time_t>(s);
  std::tm tm{};
  if (::gmtime_r(&t, &tm) == nullptr) return absl::StrCat(ns, " ns");
  char b[40];
  std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%S", &tm);
  return absl::StrFormat("%s.%03dZ", b, frac / 1'000'000);
}

// An ISO time, or null when not set.
void time_field(JsonOut& j, std::string_view key, std::int64_t ns) {
  j.key(key);
  if (ns == 0) {
    j.null();
  } else {
    j.str(iso_utc(ns));
  }
}

std::optional<ar::Catalog> load_catalog(const std::string& dir) {
  absl::StatusOr<ar::Catalog> c = ar::Catalog::load(dir);
  if (!c.ok()) {
    error(std::string(c.status().message()));
    return std::nullopt;
  }
  return std::move(*c);
}

// Recording `id` of `cat`, or null after saying it is not there.
const ar::RecordingInfo* find_recording(const ar::Catalog& cat, const Args& a) {
  const ar::RecordingInfo* r = cat.find(a.id);
  if (r == nullptr) {
    error(absl::StrCat("no recording ", a.id, " in the catalog of ", a.dir, " (`", kProgram, " list --dir ", a.dir,
                       "` shows the recordings there)"));
  }
  return r;
}

// The last segment to read: the catalog's last one, or a later one a recorder rolled to before
// its next catalog update; lower when the catalog's last ones are gone.
std::uint32_t last_segment(const std::string& dir, const ar::RecordingInfo& r) {
  std::uint32_t last = std::max(r.first_segment, r.last_segment);
  while (fs::exists(ar::segment_path(dir, r.id, last + 1))) ++last;
  while (last > r.first_segment && !fs::exists(ar::segment_path(dir, r.id, last))) --last;
  return last;
}

// A SegmentReader::open error without the "recording segment <path>: " its message starts with
// (the path is reported beside it).
std::string open_error(const absl::Status& s, const std::string& path) {
  std::string m(s.message());
  const std::string prefix = absl::StrCat("recording segment ", path, ": ");
  if (m.rfind(prefix, 0) == 0) m.erase(0, prefix.size());
  return m;
}

std::string missing_segment(const ar::RecordingInfo& r) {
  return absl::StrCat("missing (the catalog lists segments ", r.first_segment, "..", r.last_segment, ")");
}

void recording_fields(JsonOut& j, const ar::RecordingInfo& r) {
  j.field("id", r.id)
      .field("stream", r.stream_id)
      .field("topic", r.topic)
      .field("state", ar::recording_state_name(r.state))
      .field("segment_size", r.segment_size)
      .field("first_segment", r.first_segment)
      .field("last_segment", r.last_segment)
      .field("segments", r.last_segment - r.first_segment + 1)
      .field("first_sequence", r.first_sequence)
      .field("last_sequence", r.last_sequence)
      .field("first_time_ns", r.first_time_ns)
      .field("last_time_ns", r.last_time_ns)
      .field("frames", r.frames)
      .field("messages", r.frames)  // the same count under the name a subscriber's counters use
      .field("gaps", r.gaps)
      .field("bytes", r.bytes);
  time_field(j, "start_time", r.started_ns);
  time_field(j, "stop_time", r.stopped_ns);
  j.field("started_ns", r.started_ns).field("stopped_ns", r.stopped_ns).field("error", r.error);
}

// ---- list --------------------------------------------------------------------------------------

int run_list(const Args& a) {
  const std::optional<ar::Catalog> cat = load_catalog(a.dir);
  if (!cat) return 1;
  if (a.json) {
    JsonOut j;
    j.begin_array();
    for (const ar::RecordingInfo& r : cat->recordings()) {
      j.begin_object();
      recording_fields(j, r);
      j.end_object();
    }
    j.end_array();
    std::printf("%s\n", j.text().c_str());
    return 0;
  }
  if (cat->recordings().empty()) {
    std::printf("no recordings in %s\n", a.dir.c_str());
    return 0;
  }
  std::printf("%-6s %-7s %-20s %-10s %-9s %-23s %-10s %-5s %-12s %-24s %s\n", "ID", "STREAM", "TOPIC", "STATE",
              "SEGMENTS", "SEQUENCES", "FRAMES", "GAPS", "BYTES", "STARTED", "STOPPED");
  for (const ar::RecordingInfo& r : cat->recordings()) {
    const std::string stopped = r.stopped_ns == 0 ? "-" : iso_utc(r.stopped_ns);
    std::printf("%-6s %-7u %-20s %-10s %-9s %-23s %-10s %-5s %-12s %-24s %s\n", absl::StrCat(r.id).c_str(), r.stream_id,
                printable(r.topic).c_str(), ar::recording_state_name(r.state),
                absl::StrCat(r.first_segment, "..", r.last_segment).c_str(),
                absl::StrCat(r.first_sequence, "..", r.last_sequence).c_str(), absl::StrCat(r.frames).c_str(),
                absl::StrCat(r.gaps).c_str(), absl::StrCat(r.bytes).c_str(),
                r.started_ns == 0 ? "-" : iso_utc(r.started_ns).c_str(), stopped.c_str());
    if (!r.error.empty()) std::printf("       error: %s\n", printable(r.error).c_str());
  }
  return 0;
}

// ---- info --------------------------------------------------------------------------------------

struct SegmentSummary {
  std::uint32_t index = 0;
  std::string path;
  bool exists = false;
  std::string open_error;  // the file is there but not a readable segment
  std::uint64_t size = 0;
  std::int64_t created_ns = 0;
  std::uint64_t valid_end = 0;  // where the valid records end
  std::string end;              // "end of the written data" or the invalid record's why
  bool invalid = false;
  ar::SegmentTotals totals;  // of the valid records
  bool index_exists = false, index_valid = false;
  std::uint64_t index_entries = 0;
  ar::SegmentTotals index_totals;  // what the index file says the segment holds
  std::string index_error;
};

SegmentSummary summarize_segment(const std::string& dir, const ar::RecordingInfo& r, std::uint32_t i) {
  SegmentSummary s;
  s.index = i;
  s.path = ar::segment_path(dir, r.id, i);
  s.exists = fs::exists(s.path);
  const std::string ip = ar::index_path(dir, r.id, i);
  s.index_exists = fs::exists(ip);
  if (s.index_exists) {
    absl::StatusOr<ar::SegmentIndex> idx = ar::read_segment_index(ip);
    s.index_valid = idx.ok();
    if (idx.ok()) {
      s.index_entries = idx->entries.size();
      s.index_totals = idx->totals;
    } else {
      s.index_error = std::string(idx.status().message());
    }
  }
  if (!s.exists) return s;
  absl::StatusOr<ar::SegmentReader> rd = ar::SegmentReader::open(s.path);
  if (!rd.ok()) {
    s.open_error = open_error(rd.status(), s.path);
    return s;
  }
  s.size = rd->size();
  s.created_ns = rd->header().created_ns;
  s.totals = ar::scan_totals(*rd, nullptr);
  s.valid_end = rd->offset();
  // The reader stays at the first record it did not hand out: asked again, it says why.
  ar::SegmentReader::Record rec;
  s.invalid = rd->next(&rec) == ar::SegmentReader::Next::kInvalid;
  s.end = s.invalid ? rd->why() : "end of the written data";
  return s;
}

void totals_fields(JsonOut& j, const ar::SegmentTotals& t) {
  j.field("frames", t.frames)
      .field("markers", t.markers)
      .field("bytes", t.bytes)
      .field("first_sequence", t.first_sequence)
      .field("last_sequence", t.last_sequence)
      .field("first_time_ns", t.first_time_ns)
      .field("last_time_ns", t.last_time_ns);
}

int run_info(const Args& a) {
  const std::optional<ar::Catalog> cat = load_catalog(a.dir);
  if (!cat) return 1;
  const ar::RecordingInfo* r = find_recording(*cat, a);
  if (r == nullptr) return 1;
  std::vector<SegmentSummary> segs;
  const std::uint32_t last = last_segment(a.dir, *r);
  for (std::uint32_t i = r->first_segment; i <= last; ++i) segs.push_back(summarize_segment(a.dir, *r, i));

  if (a.json) {
    JsonOut j;
    j.begin_object();
    recording_fields(j, *r);
    j.key("segment_files").begin_array();
    for (const SegmentSummary& s : segs) {
      j.begin_object().field("index", s.index).field("file", s.path).field("exists", s.exists);
      if (!s.open_error.empty()) j.field("error", s.open_error);
      if (s.exists && s.open_error.empty()) {
        j.field("size", s.size);
        time_field(j, "created", s.created_ns);
        j.field("created_ns", s.created_ns)
            .field("valid_end", s.valid_end)
            .field("invalid", s.invalid)
            .field("end", s.end)
            .field("records", s.totals.frames + s.totals.markers);
        totals_fields(j, s.totals);
      }
      j.key("index_file").begin_object().field("exists", s.index_exists).field("valid", s.index_valid);
      if (s.index_valid) {
        j.field("entries", s.index_entries).key("totals").begin_object();
        totals_fields(j, s.index_totals);
        j.end_object();
      }
      if (!s.index_error.empty()) j.field("error", s.index_error);
      j.end_object().end_object();
    }
    j.end_array().end_object();
    std::printf("%s\n", j.text().c_str());
    return 0;
  }

  std::printf("recording %" PRIu64 ": stream %u, topic %s, %s\n", r->id, r->stream_id, printable(r->topic).c_str(),
              ar::recording_state_name(r->state));
  if (!r->error.empty()) std::printf("  error:      %s\n", printable(r->error).c_str());
  std::printf("  segments:   %u..%u of %" PRIu64 " bytes each\n", r->first_segment, r->last_segment, r->segment_size);
  std::printf("  sequences:  %" PRIu64 "..%" PRIu64 " (publish times %" PRId64 "..%" PRId64 " ns)\n", r->first_sequence,
              r->last_sequence, r->first_time_ns, r->last_time_ns);
  std::printf("  frames:     %" PRIu64 ", gaps %" PRIu64 ", bytes %" PRIu64 "\n", r->frames, r->gaps, r->bytes);
  std::printf("  started:    %s\n", r->started_ns == 0 ? "-" : iso_utc(r->started_ns).c_str());
  std::printf("  stopped:    %s\n", r->stopped_ns == 0 ? "-" : iso_utc(r->stopped_ns).c_str());
  std::printf("  (catalog as of its last update; the segment files now:)\n");
  for (const SegmentSummary& s : segs) {
    std::printf("  segment %u: %s\n", s.index, s.path.c_str());
    if (!s.exists) {
      std::printf("    %s\n", missing_segment(*r).c_str());
    } else if (!s.open_error.empty()) {
      std::printf("    unreadable: %s\n", s.open_error.c_str());
    } else {
      std::printf("    size %" PRIu64 ", created %s\n", s.size, iso_utc(s.created_ns).c_str());
      std::printf("    %" PRIu64 " records (%" PRIu64 " frames, %" PRIu64 " markers), sequences %" PRIu64 "..%" PRIu64
                  "\n",
                  s.totals.frames + s.totals.markers, s.totals.frames, s.totals.markers, s.totals.first_sequence,
                  s.totals.last_sequence);
      std::printf("    valid records end at offset %" PRIu64 ": %s%s\n", s.valid_end,
                  s.invalid ? "invalid record, " : "", s.end.c_str());
    }
    if (!s.index_exists) {
      std::printf("    index: none\n");
    } else if (s.index_valid) {
      std::printf("    index: valid, %" PRIu64 " entries; says %" PRIu64 " frames, %" PRIu64
                  " markers, sequences %" PRIu64 "..%" PRIu64 "\n",
                  s.index_entries, s.index_totals.frames, s.index_totals.markers, s.index_totals.first_sequence,
                  s.index_totals.last_sequence);
    } else {
      std::printf("    index: invalid: %s\n", s.index_error.c_str());
    }
  }
  return 0;
}

// ---- verify ------------------------------------------------------------------------------------

struct Finding {
  std::string file;
  std::uint64_t offset;
  std::string what;
};

struct Verification {
  std::vector<Finding> problems, warnings;
  std::uint64_t segments = 0, frames = 0, markers = 0;
  std::map<std::uint32_t, std::uint64_t> last_sequence;  // per session, since the last kResume
};

// The index entries of a segment, checked as its records are read in offset order.
struct IndexCheck {
  std::string path;
  std::vector<ar::IndexEntry> entries;
  std::size_t next = 0;
};

bool same_totals(const ar::SegmentTotals& a, const ar::SegmentTotals& b) {
  return a.frames == b.frames && a.markers == b.markers && a.bytes == b.bytes && a.first_sequence == b.first_sequence &&
         a.last_sequence == b.last_sequence && a.first_time_ns == b.first_time_ns && a.last_time_ns == b.last_time_ns;
}

std::string describe(const ar::SegmentTotals& t) {
  return absl::StrCat(t.frames, " frames, ", t.markers, " markers, ", t.bytes, " bytes, sequences ", t.first_sequence,
                      "..", t.last_sequence, ", times ", t.first_time_ns, "..", t.last_time_ns, " ns");
}

void verify_frame(const ar::RecordingInfo& r, const std::string& path, const ar::SegmentReader::Record& rec,
                  IndexCheck& idx, bool at_index, Verification& v) {
  ++v.frames;
  pollux::core::FrameHeader h;
  std::memcpy(&h, rec.body, sizeof h);
  if (const auto c = pollux::core::check_frame(rec.body, rec.length); c != pollux::core::FrameCheck::kOk) {
    v.problems.push_back({path, rec.offset, absl::StrCat("frame: ", pollux::core::frame_check_name(c))});
  }
  if (h.stream_id != r.stream_id) {
    v.problems.push_back(
        {path, rec.offset, absl::StrCat("frame of stream ", h.stream_id, " in a recording of stream ", r.stream_id)});
  }
  const auto [it, first] = v.last_sequence.try_emplace(h.session_id, h.sequence);
  if (!first) {
    if (h.sequence <= it->second) {
      v.problems.push_back({path, rec.offset,
                            absl::StrCat("frame sequence ", h.sequence, " of session ", h.session_id, " after ",
                                         it->second, ": goes back with no resume marker between")});
    }
    it->second = h.sequence;
  }
  if (at_index) {
    const ar::IndexEntry& e = idx.entries[idx.next];
    if (e.sequence != h.sequence || e.time_ns != h.timestamp_ns) {
      v.problems.push_back(
          {idx.path, rec.offset,
           absl::StrCat("index entry ", idx.next, " says sequence ", e.sequence, " time ", e.time_ns,
                        " ns; the frame there has sequence ", h.sequence, " time ", h.timestamp_ns, " ns")});
    }
  }
}

void verify_segment(const std::string& dir, const ar::RecordingInfo& r, std::uint32_t i, bool last, Verification& v) {
  const std::string path = ar::segment_path(dir, r.id, i);
  if (!fs::exists(path)) {
    v.problems.push_back({path, 0, missing_segment(r)});
    return;
  }
  absl::StatusOr<ar::SegmentReader> rd = ar::SegmentReader::open(path);
  if (!rd.ok()) {
    v.problems.push_back({path, 0, open_error(rd.status(), path)});
    return;
  }
  ++v.segments;
  const ar::SegmentHeader& h = rd->header();
  if (h.recording_id != r.id || h.segment_index != i || h.stream_id != r.stream_id) {
    v.problems.push_back(
        {path, 0,
         absl::StrCat("header says recording ", h.recording_id, " segment ", h.segment_index, " stream ", h.stream_id,
                      "; expected recording ", r.id, " segment ", i, " stream ", r.stream_id)});
  }
  IndexCheck idx;
  idx.path = ar::index_path(dir, r.id, i);
  std::optional<ar::SegmentTotals> index_totals;
  if (fs::exists(idx.path)) {
    absl::StatusOr<ar::SegmentIndex> e = ar::read_segment_index(idx.path);
    if (e.ok()) {
      idx.entries = std::move(e->entries);
      index_totals = e->totals;
    } else {
      v.problems.push_back({idx.path, 0, std::string(e.status().message())});
    }
  } else if (!last) {
    v.problems.push_back({idx.path, 0, "missing: every sealed segment (all but the last) has an index"});
  }

  ar::SegmentReader::Record rec;
  ar::SegmentReader::Next n;
  while ((n = rd->next(&rec)) == ar::SegmentReader::Next::kRecord) {
    for (; idx.next < idx.entries.size() && idx.entries[idx.next].offset < rec.offset; ++idx.next) {
      const ar::IndexEntry& e = idx.entries[idx.next];
      v.problems.push_back({idx.path, e.offset,
                            absl::StrCat("index entry ", idx.next, " (sequence ", e.sequence,
                                         "): no record of the segment starts at this offset")});
    }
    const bool at_index = idx.next < idx.entries.size() && idx.entries[idx.next].offset == rec.offset;
    if (rec.is_marker) {
      ++v.markers;
      ar::Marker m;
      std::memcpy(&m, rec.body, sizeof m);
      if (m.kind == static_cast<std::uint16_t>(ar::MarkerKind::kResume)) v.last_sequence.clear();
      if (at_index) {
        v.problems.push_back(
            {idx.path, rec.offset, absl::StrCat("index entry ", idx.next, " points at a marker, not a frame")});
      }
    } else {
      verify_frame(r, path, rec, idx, at_index, v);
    }
    if (at_index) ++idx.next;
  }
  if (n == ar::SegmentReader::Next::kInvalid) {
    if (last && r.state == ar::RecordingState::kRecording) {
      v.warnings.push_back(
          {path, rd->offset(), absl::StrCat(rd->why(), ": torn tail, recovered by the next recorder start")});
    } else {
      v.problems.push_back({path, rd->offset(), rd->why()});
    }
  }
  for (; idx.next < idx.entries.size(); ++idx.next) {
    const ar::IndexEntry& e = idx.entries[idx.next];
    v.problems.push_back(
        {idx.path, e.offset,
         absl::StrCat("index entry ", idx.next, " (sequence ", e.sequence,
                      ") points past the segment's valid records (they end at offset ", rd->offset(), ")")});
  }
  // What the valid records hold, counted as the writer counts them for its index (a second pass).
  const ar::SegmentTotals seen = index_totals ? ar::scan_totals(*rd, nullptr) : ar::SegmentTotals{};
  if (index_totals && !same_totals(*index_totals, seen)) {
    v.problems.push_back({idx.path, 0,
                          absl::StrCat("its totals say ", describe(*index_totals),
                                       "; the segment's valid records hold ", describe(seen))});
  }
}

void findings_json(JsonOut& j, std::string_view key, const std::vector<Finding>& fs) {
  j.key(key).begin_array();
  for (const Finding& f : fs)
    j.begin_object().field("file", f.file).field("offset", f.offset).field("what", f.what).end_object();
  j.end_array();
}

int run_verify(const Args& a) {
  const std::optional<ar::Catalog> cat = load_catalog(a.dir);
  if (!cat) return 1;
  const ar::RecordingInfo* r = find_recording(*cat, a);
  if (r == nullptr) return 1;
  Verification v;
  const std::uint32_t last = last_segment(a.dir, *r);
  for (std::uint32_t i = r->first_segment; i <= last; ++i) verify_segment(a.dir, *r, i, i == last, v);
  const bool ok = v.problems.empty();
  if (a.json) {
    JsonOut j;
    j.begin_object()
        .field("recording", r->id)
        .field("ok", ok)
        .field("segments", v.segments)
        .field("frames", v.frames)
        .field("markers", v.markers);
    findings_json(j, "problems", v.problems);
    findings_json(j, "warnings", v.warnings);
    j.end_object();
    std::printf("%s\n", j.text().c_str());
  } else {
    for (const Finding& f : v.problems) {
      std::printf("%s at offset %" PRIu64 ": %s\n", f.file.c_str(), f.offset, f.what.c_str());
    }
    for (const Finding& f : v.warnings) {
      std::printf("warning: %s at offset %" PRIu64 ": %s\n", f.file.c_str(), f.offset, f.what.c_str());
    }
    std::printf("recording %" PRIu64 ": %" PRIu64 " segments, %" PRIu64 " frames, %" PRIu64 " markers: %s\n", r->id,
                v.segments, v.frames, v.markers,
                ok ? "ok" : absl::StrCat(v.problems.size(), v.problems.size() == 1 ? " problem" : " problems").c_str());
  }
  return ok ? 0 : 1;
}

// ---- export ------------------------------------------------------------------------------------

void append_hex(std::string& out, const std::byte* p, std::size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  for (std::size_t i = 0; i < n; ++i) {
    const auto b = static_cast<unsigned>(p[i]);
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
}

// One JSON line for a record (into `line`, cleared first).
void record_json(const ar::SegmentReader::Record& rec, std::string& line) {
  line.clear();
  if (rec.is_marker) {
    ar::Marker m;
    std::memcpy(&m, rec.body, sizeof m);
    if (m.kind == static_cast<std::uint16_t>(ar::MarkerKind::kGap)) {
      absl::StrAppendFormat(&line,
                            "{\"type\":\"gap\",\"stream\":%u,\"session\":%u,\"from\":%u,\"to\":%u,\"count\":%u,"
                            "\"time_ns\":%d}\n",
                            m.stream_id, m.session_id, m.from_seq, m.to_seq, m.count, m.time_ns);
    } else if (m.kind == static_cast<std::uint16_t>(ar::MarkerKind::kResume)) {
      absl::StrAppendFormat(&line, "{\"type\":\"resume\",\"stream\":%u,\"torn_bytes\":%u,\"time_ns\":%d}\n",
                            m.stream_id, m.count, m.time_ns);
    } else {
      absl::StrAppendFormat(&line, "{\"type\":\"marker\",\"kind\":%u,\"stream\":%u,\"time_ns\":%d}\n", m.kind,
                            m.stream_id, m.time_ns);
    }
    return;
  }
  pollux::core::FrameHeader h;
  std::memcpy(&h, rec.body, sizeof h);
  absl::StrAppendFormat(&line,
                        "{\"type\":\"frame\",\"stream\":%u,\"session\":%u,\"sequence\":%u,\"time_ns\":%d,\"flags\":%u,"
                        "\"payload_hex\":\"",
                        h.stream_id, h.session_id, h.sequence, h.timestamp_ns, h.flags);
  // A traced frame shorter than its trace block has no payload (verify reports it).
  const std::uint32_t skip = std::min(rec.length, pollux::core::min_frame_length(h.flags));
  append_hex(line, rec.body + skip, rec.length - skip);
  line += "\"}\n";
}

// Where export writes records: one format each. Not a hot path (a file's worth of records, once).
class ExportSink {
 public:
  virtual ~ExportSink() = default;
  // False stops the export; error() says why.
  virtual bool record(const ar::SegmentReader::Record& rec, std::int64_t wall_minus_clock_ns) = 0;
  // Flushes and closes; false when a write failed.
  virtual bool finish() = 0;
  const std::string& error() const { return error_; }

 protected:
  std::string error_;
};

// jsonl and itch: a stdio stream.
class FileSink : public ExportSink {
 public:
  FileSink(std::FILE* out, bool owned, bool itch) : out_(out), owned_(owned), itch_(itch) {}
  bool record(const ar::SegmentReader::Record& rec, std::int64_t) override {
    if (!itch_) {
      record_json(rec, line_);
      return std::fwrite(line_.data(), 1, line_.size(), out_) == line_.size() || write_failed();
    }
    if (rec.is_marker) return true;
    pollux::core::FrameHeader h;
    std::memcpy(&h, rec.body, sizeof h);
    const std::uint32_t skip = std::min(rec.length, pollux::core::min_frame_length(h.flags));
    const std::uint32_t len = rec.length - skip;
    if (len > 0xffff) {
      error_ = absl::StrCat("message ", h.sequence, ": a payload of ", len,
                            " bytes does not fit ITCH's 2-byte length; the export stops here");
      return false;
    }
    const unsigned char be[2] = {static_cast<unsigned char>(len >> 8), static_cast<unsigned char>(len & 0xff)};
    return (std::fwrite(be, 1, 2, out_) == 2 && std::fwrite(rec.body + skip, 1, len, out_) == len) || write_failed();
  }
  bool finish() override {
    const bool failed = std::ferror(out_) != 0;
    const bool closed = owned_ ? std::fclose(out_) == 0 : std::fflush(out_) == 0;
    return !failed && closed;
  }

 private:
  bool write_failed() {
    error_ = absl::StrCat("write failed: ", std::strerror(errno));
    return false;
  }
  std::FILE* out_;
  bool owned_;
  bool itch_;
  std::string line_;
};

// pcap: libpcap's dump file with nanosecond timestamps, one Ethernet/IPv4/UDP packet per frame.
class PcapSink : public ExportSink {
 public:
  static constexpr std::uint32_t kMaxUdpPayload = 65535 - 20 - 8;

  PcapSink(pcap_t* p, pcap_dumper_t* d, std::uint32_t dst_addr, std::uint16_t dst_port)
      : p_(p), d_(d), dst_addr_(dst_addr), dst_port_(dst_port) {}
  ~PcapSink() override {
    if (d_ != nullptr) pcap_dump_close(d_);
    pcap_close(p_);
  }
  bool record(const ar::SegmentReader::Record& rec, std::int64_t wall_minus_clock_ns) override {
    if (rec.is_marker) return true;
    pollux::core::FrameHeader h;
    std::memcpy(&h, rec.body, sizeof h);
    if (rec.length > kMaxUdpPayload) {
      error_ = absl::StrCat("message ", h.sequence, ": a frame of ", rec.length,
                            " bytes is larger than a UDP datagram (", kMaxUdpPayload, "); the export stops here");
      return false;
    }
    constexpr std::size_t kHeaders = 14 + 20 + 8;
    packet_.assign(kHeaders + rec.length, 0);
    std::uint8_t* e = packet_.data();
    // Ethernet: a multicast group's MAC (01:00:5e + its low 23 bits), else a locally administered
    // one; source 02:00:00:00:00:01; IPv4.
    const auto* dst = reinterpret_cast<const std::uint8_t*>(&dst_addr_);
    if ((dst[0] & 0xf0) == 0xe0) {
      const std::uint8_t mac[6] = {0x01, 0x00, 0x5e, static_cast<std::uint8_t>(dst[1] & 0x7f), dst[2], dst[3]};
      std::memcpy(e, mac, 6);
    } else {
      const std::uint8_t mac[6] = {0x02, 0x00, 0x00, 0x00, 0x00, 0x02};
      std::memcpy(e, mac, 6);
    }
    const std::uint8_t src_mac[6] = {0x02, 0x00, 0x00, 0x00, 0x00, 0x01};
    std::memcpy(e + 6, src_mac, 6);
    e[12] = 0x08;
    e[13] = 0x00;
    std::uint8_t* ip = e + 14;
    const std::uint16_t total = static_cast<std::uint16_t>(20 + 8 + rec.length);
    ip[0] = 0x45;
    ip[2] = static_cast<std::uint8_t>(total >> 8);
    ip[3] = static_cast<std::uint8_t>(total);
    ip[4] = static_cast<std::uint8_t>(h.sequence >> 8);  // identification
    ip[5] = static_cast<std::uint8_t>(h.sequence);
    ip[6] = 0x40;  // DF
    ip[8] = 64;    // TTL
    ip[9] = 17;    // UDP
    const std::uint8_t src_ip[4] = {192, 0, 2, 1};
    std::memcpy(ip + 12, src_ip, 4);
    std::memcpy(ip + 16, &dst_addr_, 4);
    std::uint32_t sum = 0;
    for (int i = 0; i < 20; i += 2) sum += static_cast<std::uint32_t>(ip[i] << 8 | ip[i + 1]);
    while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
    ip[10] = static_cast<std::uint8_t>(~sum >> 8);
    ip[11] = static_cast<std::uint8_t>(~sum);
    std::uint8_t* udp = ip + 20;
    udp[0] = 40000 >> 8;
    udp[1] = 40000 & 0xff;
    udp[2] = static_cast<std::uint8_t>(dst_port_ >> 8);
    udp[3] = static_cast<std::uint8_t>(dst_port_);
    const std::uint16_t ulen = static_cast<std::uint16_t>(8 + rec.length);
    udp[4] = static_cast<std::uint8_t>(ulen >> 8);
    udp[5] = static_cast<std::uint8_t>(ulen);
    // UDP checksum 0: none (valid over IPv4).
    std::memcpy(udp + 8, rec.body, rec.length);
    const std::int64_t wall = h.timestamp_ns + wall_minus_clock_ns;
    pcap_pkthdr ph{};
    ph.ts.tv_sec = wall / 1'000'000'000;
    ph.ts.tv_usec = wall % 1'000'000'000;  // nanoseconds: the dump is opened with nanosecond precision
    ph.caplen = ph.len = static_cast<bpf_u_int32>(packet_.size());
    pcap_dump(reinterpret_cast<u_char*>(d_), &ph, packet_.data());
    if (std::ferror(pcap_dump_file(d_)) != 0) {
      error_ = absl::StrCat("write failed: ", std::strerror(errno));
      return false;
    }
    return true;
  }
  bool finish() override {
    const bool ok = pcap_dump_flush(d_) == 0 && std::ferror(pcap_dump_file(d_)) == 0;
    pcap_dump_close(d_);
    d_ = nullptr;
    return ok;
  }

 private:
  pcap_t* p_;
  pcap_dumper_t* d_;
  std::uint32_t dst_addr_;
  std::uint16_t dst_port_;
  std::vector<std::uint8_t> packet_;
};

// The sink for `a.format`, writing to --out or stdout; nullptr after printing why not.
std::unique_ptr<ExportSink> open_sink(const Args& a) {
  const std::string where = a.out.empty() ? "stdout" : a.out;
  if (a.format == "pcap") {
    pcap_t* p = pcap_open_dead_with_tstamp_precision(DLT_EN10MB, 262144, PCAP_TSTAMP_PRECISION_NANO);
    if (p == nullptr) {
      error("pcap: libpcap could not make a capture handle");
      return nullptr;
    }
    pcap_dumper_t* d = a.out.empty() ? pcap_dump_fopen(p, stdout) : pcap_dump_open(p, a.out.c_str());
    if (d == nullptr) {
      error(absl::StrCat(where, ": ", pcap_geterr(p), " (check the path)"));
      pcap_close(p);
      return nullptr;
    }
    return std::make_unique<PcapSink>(p, d, a.dst_addr, a.dst_port);
  }
  std::FILE* out = stdout;
  if (!a.out.empty()) {
    out = std::fopen(a.out.c_str(), a.format == "itch" ? "wb" : "w");
    if (out == nullptr) {
      error(absl::StrCat(a.out, ": ", std::strerror(errno), " (check the path)"));
      return nullptr;
    }
  }
  return std::make_unique<FileSink>(out, !a.out.empty(), a.format == "itch");
}

int run_export(const Args& a) {
  const std::optional<ar::Catalog> cat = load_catalog(a.dir);
  if (!cat) return 1;
  const ar::RecordingInfo* r = find_recording(*cat, a);
  if (r == nullptr) return 1;
  std::unique_ptr<ExportSink> sink = open_sink(a);
  if (sink == nullptr) return 1;
  std::uint64_t frames = 0, markers = 0;
  int status = 0;
  bool write_failed = false;
  const std::uint32_t last = last_segment(a.dir, *r);
  for (std::uint32_t i = r->first_segment; i <= last && status == 0 && !write_failed; ++i) {
    const std::string path = ar::segment_path(a.dir, r->id, i);
    if (!fs::exists(path)) {
      status = error(absl::StrCat(path, ": ", missing_segment(*r), "; the records before it were exported"));
      break;
    }
    absl::StatusOr<ar::SegmentReader> rd = ar::SegmentReader::open(path);
    if (!rd.ok()) {
      status = error(absl::StrCat(rd.status().message(), "; the records before it were exported"));
      break;
    }
    const std::int64_t wall_minus_clock = rd->header().created_ns - rd->header().created_clock_ns;
    ar::SegmentReader::Record rec;
    ar::SegmentReader::Next n;
    while ((n = rd->next(&rec)) == ar::SegmentReader::Next::kRecord) {
      if (!sink->record(rec, wall_minus_clock)) {
        write_failed = sink->error().rfind("write failed", 0) == 0;
        if (!write_failed) status = error(sink->error());
        break;
      }
      ++(rec.is_marker ? markers : frames);
    }
    if (n == ar::SegmentReader::Next::kInvalid) {
      status = error(absl::StrCat(path, " at offset ", rd->offset(), ": ", rd->why(),
                                  "; the export stops here (the records before it were exported; `", kProgram,
                                  " verify ", r->id, " --dir ", a.dir, "` checks the whole recording)"));
    }
  }
  if (!sink->finish() || write_failed) {
    return error(absl::StrCat(a.out.empty() ? "stdout" : a.out, ": write failed: ", std::strerror(errno)));
  }
  if (!a.out.empty()) {
    if (a.json) {
      JsonOut j;
      j.begin_object()
          .field("recording", r->id)
          .field("ok", status == 0)
          .field("format", a.format)
          .field("frames", frames)
          .field("markers", markers)
          .field("out", a.out)
          .end_object();
      std::printf("%s\n", j.text().c_str());
    } else {
      std::printf("recording %" PRIu64 ": %" PRIu64 " frames and %" PRIu64 " markers read, written to %s as %s\n",
                  r->id, frames, markers, a.out.c_str(), a.format.c_str());
    }
  }
  return status;
}

// ---- truncate ----------------------------------------------------------------------------------

// What a recording's segments first..last hold: counted from the records (each checked).
struct Recount {
  std::uint64_t frames = 0, gaps = 0, bytes = 0, last_sequence = 0;
  std::int64_t last_time_ns = 0;
  std::string invalid;  // "<file> at offset N: why"
};

Recount recount(const std::string& dir, const ar::RecordingInfo& r, std::uint32_t last) {
  Recount c;
  for (std::uint32_t i = r.first_segment; i <= last; ++i) {
    absl::StatusOr<ar::SegmentReader> rd = ar::SegmentReader::open(ar::segment_path(dir, r.id, i));
    if (!rd.ok()) {
      c.invalid = std::string(rd.status().message());
      return c;
    }
    ar::SegmentReader::Record rec;
    ar::SegmentReader::Next n;
    while ((n = rd->next(&rec)) == ar::SegmentReader::Next::kRecord) {
      c.bytes += ar::record_size(rec.length);
      if (rec.is_marker) {
        ar::Marker m;
        std::memcpy(&m, rec.body, sizeof m);
        c.gaps += m.kind == static_cast<std::uint16_t>(ar::MarkerKind::kGap);
        continue;
      }
      pollux::core::FrameHeader h;
      std::memcpy(&h, rec.body, sizeof h);
      ++c.frames;
      c.last_sequence = h.sequence;
      c.last_time_ns = h.timestamp_ns;
    }
    if (n == ar::SegmentReader::Next::kInvalid) {
      c.invalid = absl::StrCat(rd->path(), " at offset ", rd->offset(), ": ", rd->why());
      return c;
    }
  }
  return c;
}

// Zeroes [from, size) of `path` (a hole where the file system has them, else written zeros) and
// syncs it.
absl::Status zero_tail(const std::string& path, std::uint64_t from, std::uint64_t size) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat(path, ": ", std::strerror(errno)));
  int rc = from < size ? ::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(from),
                                     static_cast<off_t>(size - from))
                       : 0;
  if (rc != 0) {
    static const std::vector<char> zeros(1 << 20, 0);
    rc = 0;
    for (std::uint64_t at = from; at < size && rc == 0;) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(zeros.size(), size - at));
      const ssize_t w = ::pwrite(fd, zeros.data(), n, static_cast<off_t>(at));
      if (w <= 0) rc = -1;
      at += w > 0 ? static_cast<std::uint64_t>(w) : 0;
    }
  }
  if (rc == 0) rc = ::fdatasync(fd);
  const int e = errno;
  ::close(fd);
  if (rc != 0) return absl::InternalError(absl::StrCat(path, ": zeroing from offset ", from, ": ", std::strerror(e)));
  return absl::OkStatus();
}

int run_truncate(const Args& a) {
  const std::optional<ar::Catalog> cat = load_catalog(a.dir);
  if (!cat) return 1;
  const ar::RecordingInfo* found = find_recording(*cat, a);
  if (found == nullptr) return 1;
  const ar::RecordingInfo r = *found;
  if (r.state == ar::RecordingState::kRecording) {
    return error(absl::StrCat("recording ", a.id,
                              " is in state \"recording\": a recorder writes it (or died writing it ",
                              "and resumes it at its next start); stop the recorder first"));
  }
  // The cut: the first frame above --after, every record before it checked.
  const std::uint32_t last = last_segment(a.dir, r);
  std::optional<std::pair<std::uint32_t, std::uint64_t>> cut;
  std::uint64_t removed = 0;
  for (std::uint32_t i = r.first_segment; i <= last; ++i) {
    const std::string path = ar::segment_path(a.dir, r.id, i);
    absl::StatusOr<ar::SegmentReader> rd = ar::SegmentReader::open(path);
    if (!rd.ok()) return error(absl::StrCat(rd.status().message(), "; nothing was cut"));
    ar::SegmentReader::Record rec;
    ar::SegmentReader::Next n;
    while ((n = rd->next(&rec)) == ar::SegmentReader::Next::kRecord) {
      if (rec.is_marker) continue;
      pollux::core::FrameHeader h;
      std::memcpy(&h, rec.body, sizeof h);
      if (!cut && h.sequence > a.after) cut.emplace(i, rec.offset);
      if (cut) ++removed;
    }
    if (n == ar::SegmentReader::Next::kInvalid && !cut) {
      return error(absl::StrCat(path, " at offset ", rd->offset(), ": ", rd->why(), "; nothing was cut (`", kProgram,
                                " verify ", r.id, " --dir ", a.dir, "` reports the recording's damage)"));
    }
  }
  std::uint64_t deleted = 0;
  if (cut) {
    for (std::uint32_t i = last; i > cut->first; --i) {
      for (const std::string& f : {ar::segment_path(a.dir, r.id, i), ar::index_path(a.dir, r.id, i)}) {
        std::error_code ec;
        if (fs::remove(f, ec)) {
          deleted += f.ends_with(".seg");
        } else if (ec) {
          return error(absl::StrCat("could not delete ", f, ": ", ec.message(), "; the recording now ends in it"));
        }
      }
    }
    const std::string path = ar::segment_path(a.dir, r.id, cut->first);
    std::error_code ec;
    const std::uintmax_t size = fs::file_size(path, ec);
    if (ec) return error(absl::StrCat(path, ": ", ec.message()));
    if (absl::Status s = zero_tail(path, cut->second, size); !s.ok()) return error(std::string(s.message()));
    // Its index described what was cut: the last segment needs none.
    fs::remove(ar::index_path(a.dir, r.id, cut->first), ec);
  }
  const std::uint32_t new_last = cut ? cut->first : last;
  const Recount c = recount(a.dir, r, new_last);
  if (!c.invalid.empty()) return error(absl::StrCat(c.invalid, " (after the cut)"));
  absl::StatusOr<ar::Catalog> updated = ar::Catalog::update(a.dir, [&](ar::Catalog& cc) -> absl::Status {
    ar::RecordingInfo* e = cc.find(a.id);
    if (e == nullptr) return absl::NotFoundError(absl::StrCat("recording ", a.id, " was removed meanwhile"));
    e->last_segment = new_last;
    e->frames = c.frames;
    e->gaps = c.gaps;
    e->bytes = c.bytes;
    e->last_sequence = c.last_sequence;
    e->last_time_ns = c.last_time_ns;
    if (c.frames == 0) e->first_sequence = e->first_time_ns = 0;
    return absl::OkStatus();
  });
  if (!updated.ok()) return error(std::string(updated.status().message()));
  if (a.json) {
    JsonOut j;
    j.begin_object()
        .field("recording", a.id)
        .field("ok", true)
        .field("frames_removed", removed)
        .field("segments_deleted", deleted)
        .field("frames", c.frames)
        .field("last_sequence", c.last_sequence)
        .end_object();
    std::printf("%s\n", j.text().c_str());
  } else if (!cut) {
    std::printf("recording %" PRIu64 ": no frame after sequence %" PRIu64 ", nothing cut (%" PRIu64 " frames)\n", a.id,
                a.after, c.frames);
  } else {
    std::printf("recording %" PRIu64 " cut after sequence %" PRIu64 ": %" PRIu64 " frames removed, %" PRIu64
                " segments deleted; %" PRIu64 " frames remain, the last %" PRIu64 "\n",
                a.id, a.after, removed, deleted, c.frames, c.last_sequence);
  }
  return 0;
}

// ---- purge -------------------------------------------------------------------------------------

int run_purge(const Args& a) {
  // Read first, so that a wrong id or directory changes nothing there (not even the lock file).
  {
    const std::optional<ar::Catalog> cat = load_catalog(a.dir);
    if (!cat || find_recording(*cat, a) == nullptr) return 1;
  }
  ar::RecordingInfo purged;
  // The check and the removal under the catalog's lock: a recorder cannot start this recording
  // in between.
  absl::StatusOr<ar::Catalog> cat = ar::Catalog::update(a.dir, [&](ar::Catalog& c) -> absl::Status {
    const ar::RecordingInfo* r = c.find(a.id);
    if (r == nullptr)
      return absl::NotFoundError(absl::StrCat("recording ", a.id, " was just removed by another purge"));
    if (r->state == ar::RecordingState::kRecording && !a.force) {
      return absl::FailedPreconditionError(
          absl::StrCat("recording ", a.id, " is in state \"recording\": a recorder writes it (or died writing it and ",
                       "resumes it at its next start); stop the recorder first, or pass --force to delete it anyway"));
    }
    purged = *r;
    c.remove(a.id);
    return absl::OkStatus();
  });
  if (!cat.ok()) return error(std::string(cat.status().message()));

  // Every file of the recording, whatever the catalog's segment range says: its segments, their
  // indexes, and what an interrupted segment creation left (".tmp").
  const std::string prefix = absl::StrFormat("%016x-", a.id);
  std::uint64_t files = 0, bytes = 0;
  std::vector<std::string> failures;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(a.dir, ec)) {
    const std::string name = e.path().filename().string();
    const bool ours =
        name.rfind(prefix, 0) == 0 && (name.ends_with(".seg") || name.ends_with(".idx") || name.ends_with(".tmp"));
    if (!ours) continue;
    std::error_code size_ec;
    const std::uintmax_t size = fs::file_size(e.path(), size_ec);
    std::error_code rm_ec;
    if (fs::remove(e.path(), rm_ec)) {
      ++files;
      if (!size_ec) bytes += size;
    } else if (rm_ec) {
      failures.push_back(absl::StrCat(e.path().string(), ": ", rm_ec.message()));
    }
  }
  if (ec) failures.push_back(absl::StrCat(a.dir, ": ", ec.message()));
  for (const std::string& f : failures) error(absl::StrCat("could not delete ", f, " (delete it by hand)"));

  if (a.json) {
    JsonOut j;
    j.begin_object()
        .field("recording", a.id)
        .field("ok", failures.empty())
        .field("files", files)
        .field("bytes", bytes)
        .field("state", ar::recording_state_name(purged.state))
        .end_object();
    std::printf("%s\n", j.text().c_str());
  } else {
    std::printf("recording %" PRIu64 " (%s, %s) purged: catalog entry removed, %" PRIu64 " files (%" PRIu64
                " bytes) deleted\n",
                a.id, printable(purged.topic).c_str(), ar::recording_state_name(purged.state), files, bytes);
  }
  return failures.empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    return pollux::cli::usage_error(kProgram, "which command? list, info, verify, export or purge (see --help)");
  }
  const std::string first = argv[1];
  const Command* command = nullptr;
  for (const Command& c : kCommands) {
    if (first == c.name) command = &c;
  }
  if (command == nullptr) {
    if (const int rc = pollux::cli::handle_standard_flags(argc, argv, kProgram, kHelp); rc >= 0) return rc;
    if (!first.empty() && first[0] == '-') {
      if (first == "--dir" || first.rfind("--dir=", 0) == 0 || first == "--json") {
        return pollux::cli::usage_error(
            kProgram, absl::StrCat("the command comes first: ", kProgram, " list|info|verify|export|purge [ID] ",
                                   "--dir DIR ... (see --help)"));
      }
      return pollux::cli::unknown_flag(kProgram, printable(first), kHelp);
    }
    return pollux::cli::usage_error(
        kProgram, absl::StrCat("unknown command \"", printable(first),
                               "\": the commands are list, info, verify, export and purge (see --help)"));
  }
  // --help or --version after the command: the command's help.
  if (const int rc = pollux::cli::handle_standard_flags(argc - 1, argv + 1, kProgram, command->help); rc >= 0) {
    return rc;
  }
  const Args a = parse_command(*command, argc - 1, argv + 1);
  const std::string_view name = command->name;
  if (name == "list") return run_list(a);
  if (name == "info") return run_info(a);
  if (name == "verify") return run_verify(a);
  if (name == "export") return run_export(a);
  if (name == "truncate") return run_truncate(a);
  return run_purge(a);
}
