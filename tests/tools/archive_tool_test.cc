// pollux-archive (tools/archive) run as a user runs it, on recordings written here with
// RecordingWriter and Catalog::update: list and info (text and JSON), verify on a clean
// recording, on a flipped byte in a middle segment (named by file and offset) and on a torn tail
// (a warning while recording, a problem once stopped), export as JSON lines, purge, and the
// command line (help, unknown flags, a missing --dir, a damaged catalog).
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/archive/catalog.h"
#include "core/archive/format.h"
#include "core/archive/segment.h"
#include "core/frame.h"
#include "pollux/pollux.h"
#include "tests/support/process.h"

namespace pollux {
namespace {

namespace fs = std::filesystem;
using namespace pollux::core;
using namespace pollux::core::archive;

constexpr std::uint32_t kStream = 5;
constexpr std::uint32_t kSession = 7;

struct ToolRun {
  int status;
  std::string out, err;
};

// Frame `seq`: its payload's length and bytes follow from seq; a traced frame carries a 64-byte
// trace block (0xEE bytes) before the payload.
std::vector<std::byte> make_frame(std::uint64_t seq, bool traced = false) {
  const std::uint32_t payload = static_cast<std::uint32_t>(8 + (seq * 37) % 300);
  const std::uint32_t head = min_frame_length(traced ? kFlagTraced : kFlagNone);
  std::vector<std::byte> f(head + payload, std::byte{0xEE});
  FrameHeader h{};
  write_frame_header(&h, static_cast<std::uint32_t>(f.size()), traced ? kFlagTraced : kFlagNone, kStream, kSession,
                     static_cast<std::int64_t>(seq) * 1000);
  h.sequence = seq;
  std::memcpy(f.data(), &h, sizeof h);
  for (std::uint32_t i = 0; i < payload; ++i) f[head + i] = static_cast<std::byte>((seq + i) & 0xff);
  return f;
}

std::string payload_hex(std::uint64_t seq) {
  const std::vector<std::byte> f = make_frame(seq);
  std::string out;
  for (std::size_t i = kFrameHeaderSize; i < f.size(); ++i) {
    absl::StrAppend(&out, absl::Hex(static_cast<unsigned>(f[i]), absl::kZeroPad2));
  }
  return out;
}

class ArchiveToolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/pollux-archive-tool-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // pollux-archive `args`: exit status, stdout and stderr apart.
  ToolRun run(const std::string& args) {
    const std::string err = dir_ + ".err";
    const testing::CommandOutput o =
        testing::RunCommand(std::string(POLLUX_ARCHIVE_BIN) + " " + args + " 2>'" + err + "'");
    std::string e = testing::read_file(err);
    std::remove(err.c_str());
    return {o.status, o.text, e};
  }

  // A recording of frames 1..frames (a gap marker after frame `gap_after` when non-zero, the
  // last frame traced when `traced_last`) in 1 MiB segments, entered in the catalog with `state`.
  // Returns its id.
  std::uint64_t record(std::uint64_t frames, RecordingState state, std::uint64_t gap_after = 0,
                       bool traced_last = false) {
    std::uint64_t id = 0;
    auto added = Catalog::update(dir_, [&](Catalog& c) {
      RecordingInfo& r = c.add(kStream, "quotes", kMinSegmentSize);
      r.started_ns = 1'700'000'000'000'000'000;
      id = r.id;
      return absl::OkStatus();
    });
    EXPECT_TRUE(added.ok()) << added.status();
    WriterOptions o;
    o.directory = dir_;
    o.recording_id = id;
    o.stream_id = kStream;
    o.segment_size = kMinSegmentSize;
    o.buffer_bytes = 64 * 1024;
    auto w = RecordingWriter::open(o);
    EXPECT_TRUE(w.ok()) << w.status();
    if (!w.ok()) return id;
    for (std::uint64_t s = 1; s <= frames; ++s) {
      const auto f = make_frame(s, traced_last && s == frames);
      EXPECT_TRUE((*w)->append(f.data(), static_cast<std::uint32_t>(f.size())));
      if (s == gap_after) {
        EXPECT_TRUE((*w)->append_gap(kSession, s + 1, s + 3));
      }
    }
    EXPECT_TRUE((*w)->close().ok());
    end_ = (*w)->position();
    const WriterStats st = (*w)->stats();
    const std::uint32_t last = (*w)->segment_index();
    auto updated = Catalog::update(dir_, [&](Catalog& c) {
      RecordingInfo* r = c.find(id);
      r->state = state;
      r->last_segment = last;
      r->first_sequence = st.first_sequence;
      r->last_sequence = st.last_sequence;
      r->first_time_ns = st.first_time_ns;
      r->last_time_ns = st.last_time_ns;
      r->frames = st.frames;
      r->gaps = gap_after != 0 ? 1 : 0;
      r->bytes = st.bytes;
      if (state != RecordingState::kRecording) r->stopped_ns = r->started_ns + 60'000'000'000;
      return absl::OkStatus();
    });
    EXPECT_TRUE(updated.ok()) << updated.status();
    return id;
  }

  // The offsets of the records of a segment, in order.
  std::vector<std::uint64_t> record_offsets(const std::string& path) {
    std::vector<std::uint64_t> out;
    auto r = SegmentReader::open(path);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return out;
    SegmentReader::Record rec;
    while (r->next(&rec) == SegmentReader::Next::kRecord) out.push_back(rec.offset);
    return out;
  }

  static void write_at(const std::string& path, const void* p, std::size_t n, std::uint64_t at) {
    const int fd = ::open(path.c_str(), O_RDWR);
    ASSERT_GE(fd, 0) << path;
    ASSERT_EQ(::pwrite(fd, p, n, static_cast<off_t>(at)), static_cast<ssize_t>(n));
    ::close(fd);
  }

  std::string d() const { return " --dir '" + dir_ + "'"; }

  std::string dir_;
  std::uint64_t end_ = 0;  // where the last recording's records end in its last segment
};

TEST_F(ArchiveToolTest, ListAndInfoShowTheCatalogAndTheSegmentFiles) {
  const std::uint64_t a = record(100, RecordingState::kStopped, 50);
  const std::uint64_t a_end = end_;
  const std::uint64_t b = record(10, RecordingState::kRecording);

  const ToolRun list = run("list" + d() + " --json");
  ASSERT_EQ(list.status, 0) << list.err;
  EXPECT_EQ(list.out.rfind("[{\"id\":1,\"stream\":5,\"topic\":\"quotes\",\"state\":\"stopped\"", 0), 0u) << list.out;
  for (const char* want : {"\"first_sequence\":1,\"last_sequence\":100", "\"frames\":100,\"messages\":100,\"gaps\":1",
                           "\"start_time\":\"2023-11-14T22:13:20.000Z\"", "\"stop_time\":\"2023-11-14T22:14:20.000Z\"",
                           "{\"id\":2,", "\"state\":\"recording\"", "\"stop_time\":null", "\"segments\":1"}) {
    EXPECT_NE(list.out.find(want), std::string::npos) << want << " not in " << list.out;
  }
  const ToolRun text = run("list" + d());
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("quotes"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("1..100"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("2023-11-14T22:13:20.000Z"), std::string::npos) << text.out;

  const ToolRun info = run(absl::StrCat("info ", a, d(), " --json"));
  ASSERT_EQ(info.status, 0) << info.err;
  const std::string seg = segment_path(dir_, a, 0);
  for (const std::string& want :
       {std::string("\"id\":1,"),
        absl::StrCat("\"segment_files\":[{\"index\":0,\"file\":\"", seg, "\",\"exists\":true"),
        absl::StrCat("\"size\":", kMinSegmentSize), absl::StrCat("\"valid_end\":", a_end),
        std::string("\"invalid\":false"), std::string("\"records\":101,\"frames\":100,\"markers\":1"),
        std::string("\"first_sequence\":1,\"last_sequence\":100"),
        std::string("\"index_file\":{\"exists\":true,\"valid\":true,\"entries\":"),
        std::string("\"totals\":{\"frames\":100,\"markers\":1,")}) {
    EXPECT_NE(info.out.find(want), std::string::npos) << want << " not in " << info.out;
  }
  const ToolRun info_text = run(absl::StrCat("info ", b, d()));
  ASSERT_EQ(info_text.status, 0) << info_text.err;
  EXPECT_NE(info_text.out.find("recording 2: stream 5, topic quotes, recording"), std::string::npos) << info_text.out;
  EXPECT_NE(info_text.out.find("10 records (10 frames, 0 markers), sequences 1..10"), std::string::npos)
      << info_text.out;

  const ToolRun missing = run("info 9" + d());
  EXPECT_EQ(missing.status, 1);
  EXPECT_NE(missing.err.find("no recording 9"), std::string::npos) << missing.err;
}

TEST_F(ArchiveToolTest, VerifyPassesOnACleanRecordingAndNamesTheFileAndOffsetOfAFlippedByte) {
  const std::uint64_t id = record(15000, RecordingState::kStopped, 7000);  // ~3 MiB: 3+ segments
  ASSERT_TRUE(fs::exists(segment_path(dir_, id, 2))) << "expected at least three segments";
  const ToolRun ok = run(absl::StrCat("verify ", id, d(), " --json"));
  EXPECT_EQ(ok.status, 0) << ok.out << ok.err;
  EXPECT_EQ(ok.out.rfind(absl::StrCat("{\"recording\":", id, ",\"ok\":true,\"segments\":"), 0), 0u) << ok.out;
  EXPECT_NE(ok.out.find("\"frames\":15000,\"markers\":1,\"problems\":[]"), std::string::npos) << ok.out;
  const ToolRun ok_text = run(absl::StrCat("verify ", id, d()));
  EXPECT_EQ(ok_text.status, 0) << ok_text.out;
  EXPECT_NE(ok_text.out.find("15000 frames, 1 markers: ok"), std::string::npos) << ok_text.out;

  // A byte in the payload of the 10th record of segment 1.
  const std::string middle = segment_path(dir_, id, 1);
  const std::vector<std::uint64_t> offsets = record_offsets(middle);
  ASSERT_GT(offsets.size(), 10u);
  const std::uint64_t at = offsets[9];
  unsigned char b = 0;
  {
    const int fd = ::open(middle.c_str(), O_RDONLY);
    ASSERT_EQ(::pread(fd, &b, 1, static_cast<off_t>(at + sizeof(RecordHeader) + kFrameHeaderSize + 3)), 1);
    ::close(fd);
  }
  b ^= 0x10;
  write_at(middle, &b, 1, at + sizeof(RecordHeader) + kFrameHeaderSize + 3);

  const ToolRun bad = run(absl::StrCat("verify ", id, d()));
  EXPECT_EQ(bad.status, 1) << bad.out;
  EXPECT_NE(bad.out.find(absl::StrCat(middle, " at offset ", at, ": crc mismatch\n")), std::string::npos) << bad.out;
  const ToolRun bad_json = run(absl::StrCat("verify ", id, d(), " --json"));
  EXPECT_EQ(bad_json.status, 1);
  EXPECT_NE(bad_json.out.find("\"ok\":false"), std::string::npos) << bad_json.out;
  EXPECT_NE(
      bad_json.out.find(absl::StrCat("{\"file\":\"", middle, "\",\"offset\":", at, ",\"what\":\"crc mismatch\"}")),
      std::string::npos)
      << bad_json.out;
  // The index entries past the damage point at records that can no longer be read.
  EXPECT_NE(bad.out.find(index_path(dir_, id, 1)), std::string::npos) << bad.out;

  // Export stops there, naming file and offset.
  const ToolRun ex = run(absl::StrCat("export ", id, d(), " --format jsonl --out '", dir_, "/out.jsonl'"));
  EXPECT_EQ(ex.status, 1);
  EXPECT_NE(ex.err.find(absl::StrCat(middle, " at offset ", at, ": crc mismatch")), std::string::npos) << ex.err;
}

TEST_F(ArchiveToolTest, VerifyFindsAMissingIndexAndSequencesGoingBack) {
  const std::uint64_t id = record(15000, RecordingState::kStopped);
  ASSERT_TRUE(fs::remove(index_path(dir_, id, 0)));
  const ToolRun r = run(absl::StrCat("verify ", id, d()));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find(absl::StrCat(index_path(dir_, id, 0), " at offset 0: missing")), std::string::npos) << r.out;

  // A second run of the writer without resume markers is impossible through the API; a frame
  // that repeats a sequence is written by hand over the end of the last segment instead.
  const std::uint64_t id2 = record(20, RecordingState::kStopped);
  const std::string seg = segment_path(dir_, id2, 0);
  const std::vector<std::uint64_t> offsets = record_offsets(seg);
  ASSERT_EQ(offsets.size(), 20u);
  std::vector<std::byte> rec(offsets[5] - offsets[4]);  // frame 5's record, verbatim
  {
    const int fd = ::open(seg.c_str(), O_RDONLY);
    ASSERT_EQ(::pread(fd, rec.data(), rec.size(), static_cast<off_t>(offsets[4])), static_cast<ssize_t>(rec.size()));
    ::close(fd);
  }
  write_at(seg, rec.data(), rec.size(), end_);
  const ToolRun back = run(absl::StrCat("verify ", id2, d()));
  EXPECT_EQ(back.status, 1) << back.out;
  EXPECT_NE(back.out.find(absl::StrCat(seg, " at offset ", end_, ": frame sequence 5 of session 7 after 20")),
            std::string::npos)
      << back.out;
  // The index written at close counted 20 frames: its totals no longer match the segment.
  EXPECT_NE(back.out.find(absl::StrCat(index_path(dir_, id2, 0), " at offset 0: its totals say 20 frames, 0 markers")),
            std::string::npos)
      << back.out;
  EXPECT_NE(back.out.find("the segment's valid records hold 21 frames, 0 markers"), std::string::npos) << back.out;
}

TEST_F(ArchiveToolTest, ATornTailWarnsWhileRecordingAndFailsOnceStopped) {
  const std::uint64_t id = record(50, RecordingState::kRecording);
  const std::string seg = segment_path(dir_, id, 0);
  const RecordHeader torn{0x12345678u, 200};  // a header whose body never landed
  write_at(seg, &torn, sizeof torn, end_);
  const ToolRun live = run(absl::StrCat("verify ", id, d()));
  EXPECT_EQ(live.status, 0) << live.out << live.err;
  EXPECT_NE(live.out.find(absl::StrCat("warning: ", seg, " at offset ", end_)), std::string::npos) << live.out;
  EXPECT_NE(live.out.find("torn tail, recovered by the next recorder start"), std::string::npos) << live.out;
  const ToolRun live_json = run(absl::StrCat("verify ", id, d(), " --json"));
  EXPECT_EQ(live_json.status, 0);
  EXPECT_NE(live_json.out.find("\"ok\":true"), std::string::npos) << live_json.out;
  EXPECT_NE(live_json.out.find("\"problems\":[],\"warnings\":[{\"file\":"), std::string::npos) << live_json.out;

  ASSERT_TRUE(Catalog::update(dir_, [&](Catalog& c) {
                c.find(id)->state = RecordingState::kStopped;
                return absl::OkStatus();
              }).ok());
  const ToolRun stopped = run(absl::StrCat("verify ", id, d()));
  EXPECT_EQ(stopped.status, 1) << stopped.out;
  EXPECT_NE(stopped.out.find(absl::StrCat(seg, " at offset ", end_, ": ")), std::string::npos) << stopped.out;
  EXPECT_EQ(stopped.out.find("warning"), std::string::npos) << stopped.out;
}

TEST_F(ArchiveToolTest, ExportWritesOneJsonLinePerRecordInOrder) {
  const std::uint64_t id = record(20, RecordingState::kStopped, 10, /*traced_last=*/true);
  const ToolRun r = run(absl::StrCat("export ", id, d(), " --format jsonl"));
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<std::string> lines;
  std::istringstream in(r.out);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 21u) << r.out;
  for (std::uint64_t s = 1; s <= 20; ++s) {
    const std::string& l = lines[s <= 10 ? s - 1 : s];
    const std::string hex =
        s == 20 ? [] {
          // The traced frame: its payload follows the 64-byte trace block.
          const std::vector<std::byte> f = make_frame(20, true);
          std::string out;
          for (std::size_t i = kFrameHeaderSize + kFrameTraceSize; i < f.size(); ++i) {
            absl::StrAppend(&out, absl::Hex(static_cast<unsigned>(f[i]), absl::kZeroPad2));
          }
          return out;
        }()
                : payload_hex(s);
    EXPECT_EQ(l, absl::StrCat("{\"type\":\"frame\",\"stream\":5,\"session\":7,\"sequence\":", s, ",\"time_ns\":",
                              s * 1000, ",\"flags\":", s == 20 ? kFlagTraced : 0, ",\"payload_hex\":\"", hex, "\"}"));
  }
  EXPECT_EQ(lines[10].rfind("{\"type\":\"gap\",\"stream\":5,\"session\":7,\"from\":11,\"to\":13,\"count\":3,", 0), 0u)
      << lines[10];

  const std::string out = dir_ + "/out.jsonl";
  const ToolRun to_file = run(absl::StrCat("export ", id, d(), " --out '", out, "' --json"));
  ASSERT_EQ(to_file.status, 0) << to_file.err;
  EXPECT_EQ(testing::read_file(out), r.out);
  EXPECT_NE(to_file.out.find("\"frames\":20,\"markers\":1"), std::string::npos) << to_file.out;

  const ToolRun bad = run(absl::StrCat("export ", id, d(), " --format csv"));
  EXPECT_EQ(bad.status, 64);
  EXPECT_EQ(bad.out, "");
  EXPECT_NE(bad.err.find("not one of jsonl, pcap, itch"), std::string::npos) << bad.err;
}

// The bytes after frame `s`'s header (and trace block) as make_frame builds them.
std::vector<std::byte> payload_of(std::uint64_t s, bool traced) {
  const std::vector<std::byte> f = make_frame(s, traced);
  return {f.begin() + min_frame_length(traced ? kFlagTraced : kFlagNone), f.end()};
}

TEST_F(ArchiveToolTest, ExportAsPcapIsWhatThePublisherSendsOverUdpAndAsItchABinaryFile) {
  const std::uint64_t id = record(20, RecordingState::kStopped, 10, /*traced_last=*/true);
  // ITCH BinaryFILE: a 2-byte big-endian length before each payload, nothing for the marker.
  const std::string itch = dir_ + "/out.itch";
  const ToolRun i = run(absl::StrCat("export ", id, d(), " --format itch --out '", itch, "' --json"));
  ASSERT_EQ(i.status, 0) << i.err;
  EXPECT_NE(i.out.find("\"format\":\"itch\",\"frames\":20,\"markers\":1"), std::string::npos) << i.out;
  {
    const std::string bytes = testing::read_file(itch);
    std::size_t at = 0;
    for (std::uint64_t s = 1; s <= 20; ++s) {
      const std::vector<std::byte> want = payload_of(s, s == 20);
      ASSERT_LE(at + 2, bytes.size());
      const std::size_t len = static_cast<unsigned char>(bytes[at]) << 8 | static_cast<unsigned char>(bytes[at + 1]);
      ASSERT_EQ(len, want.size()) << "message " << s;
      EXPECT_EQ(std::memcmp(bytes.data() + at + 2, want.data(), len), 0) << "message " << s;
      at += 2 + len;
    }
    EXPECT_EQ(at, bytes.size());
  }

  const std::string pcap = dir_ + "/out.pcap";
  const ToolRun p =
      run(absl::StrCat("export ", id, d(), " --format pcap --dst 10.1.2.3:5000 --out '", pcap, "' --json"));
  ASSERT_EQ(p.status, 0) << p.err;
  EXPECT_NE(p.out.find("\"format\":\"pcap\",\"frames\":20,\"markers\":1"), std::string::npos) << p.out;
  if (std::system("command -v tshark >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "tshark is not installed (scripts/install-deps.sh installs it): the capture is not read back";
  }
  // Wireshark's reading: 20 IPv4/UDP datagrams to 10.1.2.3:5000, good IPv4 checksums, each
  // carrying its frame verbatim (a Pollux data datagram).
  const testing::CommandOutput t = testing::RunCommand(
      "tshark -o ip.check_checksum:TRUE -r '" + pcap +
      "' -T fields -E separator=, -e ip.dst -e udp.dstport -e ip.checksum.status -e udp.payload 2>'" + dir_ +
      "/tshark.err'");
  ASSERT_EQ(t.status, 0) << t.text << testing::read_file(dir_ + "/tshark.err");
  std::vector<std::string> rows;
  std::istringstream in(t.text);
  for (std::string l; std::getline(in, l);) rows.push_back(l);
  ASSERT_EQ(rows.size(), 20u) << t.text;
  for (std::uint64_t s = 1; s <= 20; ++s) {
    std::string hex;
    for (const std::byte b : make_frame(s, s == 20)) {
      absl::StrAppend(&hex, absl::Hex(static_cast<unsigned>(b), absl::kZeroPad2));
    }
    EXPECT_EQ(rows[s - 1], absl::StrCat("10.1.2.3,5000,1,", hex)) << "frame " << s;
  }
  // The packets' times: the frames' publish times (s * 1000 ns on the recorder's clock) moved
  // onto the wall clock by the segment's clock pair, so 1 us apart.
  const testing::CommandOutput times =
      testing::RunCommand("tshark -r '" + pcap + "' -T fields -e frame.time_delta 2>/dev/null | sed -n 2p");
  EXPECT_EQ(times.text, "0.000001000\n");

  const ToolRun dst = run(absl::StrCat("export ", id, d(), " --format pcap --dst 10.1.2.3"));
  EXPECT_EQ(dst.status, 64);
  EXPECT_NE(dst.err.find("is not an IPv4 ADDRESS:PORT"), std::string::npos) << dst.err;
}

TEST_F(ArchiveToolTest, TruncateCutsAStoppedRecordingAfterASequenceAndVerifyStillPasses) {
  const std::uint64_t id = record(40000, RecordingState::kStopped, 5000);
  const std::uint64_t live = record(10, RecordingState::kRecording);
  ASSERT_TRUE(fs::exists(segment_path(dir_, id, 3)));

  const ToolRun t = run(absl::StrCat("truncate ", id, d(), " --after 12345 --json"));
  ASSERT_EQ(t.status, 0) << t.err;
  EXPECT_NE(t.out.find("\"frames_removed\":27655,"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("\"frames\":12345,\"last_sequence\":12345"), std::string::npos) << t.out;
  EXPECT_FALSE(fs::exists(segment_path(dir_, id, 3))) << "later segments deleted";
  const absl::StatusOr<Catalog> catalog = Catalog::load(dir_);
  ASSERT_TRUE(catalog.ok()) << catalog.status();
  const RecordingInfo* info = catalog->find(id);
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->last_sequence, 12345u);
  EXPECT_EQ(info->frames, 12345u);
  EXPECT_EQ(info->gaps, 1u);
  EXPECT_EQ(info->last_time_ns, 12345 * 1000);

  const ToolRun v = run(absl::StrCat("verify ", id, d()));
  EXPECT_EQ(v.status, 0) << v.out << v.err;
  const ToolRun e = run(absl::StrCat("export ", id, d()));
  ASSERT_EQ(e.status, 0) << e.err;
  std::vector<std::string> lines;
  std::istringstream in(e.out);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 12346u);  // 12,345 frames and the gap marker
  EXPECT_EQ(lines.back().rfind("{\"type\":\"frame\",\"stream\":5,\"session\":7,\"sequence\":12345,", 0), 0u)
      << lines.back();

  // Again at the same place: nothing more to cut.
  const ToolRun again = run(absl::StrCat("truncate ", id, d(), " --after 12345"));
  EXPECT_EQ(again.status, 0) << again.err;
  EXPECT_NE(again.out.find("nothing cut"), std::string::npos) << again.out;
  // A live recording is refused; --after is required.
  const ToolRun refused = run(absl::StrCat("truncate ", live, d(), " --after 3"));
  EXPECT_EQ(refused.status, 1);
  EXPECT_NE(refused.err.find("stop the recorder first"), std::string::npos) << refused.err;
  EXPECT_EQ(run(absl::StrCat("truncate ", id, d())).status, 64);
}

TEST_F(ArchiveToolTest, PurgeDeletesTheFilesAndTheEntryAndRefusesALiveRecordingWithoutForce) {
  const std::uint64_t stopped = record(15000, RecordingState::kStopped);
  const std::uint64_t live = record(10, RecordingState::kRecording);
  ASSERT_TRUE(fs::exists(segment_path(dir_, stopped, 1)));

  const ToolRun refused = run(absl::StrCat("purge ", live, d()));
  EXPECT_EQ(refused.status, 1);
  EXPECT_NE(refused.err.find("--force"), std::string::npos) << refused.err;
  EXPECT_TRUE(fs::exists(segment_path(dir_, live, 0)));
  EXPECT_NE(Catalog::load(dir_)->find(live), nullptr);

  const ToolRun p = run(absl::StrCat("purge ", stopped, d(), " --json"));
  ASSERT_EQ(p.status, 0) << p.err;
  EXPECT_NE(p.out.find("\"ok\":true"), std::string::npos) << p.out;
  EXPECT_EQ(Catalog::load(dir_)->find(stopped), nullptr);
  for (const fs::directory_entry& e : fs::directory_iterator(dir_)) {
    EXPECT_NE(e.path().filename().string().rfind(absl::StrFormat("%016x-", stopped), 0), 0u) << e.path();
  }
  EXPECT_TRUE(fs::exists(segment_path(dir_, live, 0)));

  const ToolRun forced = run(absl::StrCat("purge ", live, d(), " --force"));
  ASSERT_EQ(forced.status, 0) << forced.err;
  EXPECT_FALSE(fs::exists(segment_path(dir_, live, 0)));
  EXPECT_FALSE(fs::exists(index_path(dir_, live, 0)));
  EXPECT_TRUE(Catalog::load(dir_)->recordings().empty());
  EXPECT_EQ(run("list" + d() + " --json").out, "[]\n");
  EXPECT_EQ(run(absl::StrCat("purge ", live, d())).status, 1);
}

TEST_F(ArchiveToolTest, CommandLine) {
  const ToolRun help = run("--help");
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.out.find("--dir DIR"), std::string::npos) << help.out;
  for (const char* c : {"list", "info", "verify", "export", "purge"}) {
    const ToolRun h = run(std::string(c) + " --help");
    EXPECT_EQ(h.status, 0) << c;
    EXPECT_EQ(h.out.rfind(std::string("pollux-archive ") + c, 0), 0u) << c << ": " << h.out;
    EXPECT_NE(h.out.find("--json"), std::string::npos) << c;
    // The command's unknown flags: exit 64 with a hint.
    const std::string id = std::string(c) == "list" ? "" : " 1";
    const ToolRun u = run(std::string(c) + id + d() + " --jsno");
    EXPECT_EQ(u.status, 64) << c;
    EXPECT_NE(u.err.find("unknown flag '--jsno'; did you mean '--json'?"), std::string::npos) << c << ": " << u.err;
    // No --dir: said so, with what it is.
    const ToolRun nodir = run(std::string(c) + id);
    EXPECT_EQ(nodir.status, 64) << c;
    EXPECT_NE(nodir.err.find("--dir DIR is required"), std::string::npos) << c << ": " << nodir.err;
  }
  EXPECT_EQ(run("--no-such-flag").status, 64);
  EXPECT_EQ(run("").status, 64);
  const ToolRun bad_cmd = run("lsit" + d());
  EXPECT_EQ(bad_cmd.status, 64);
  EXPECT_NE(bad_cmd.err.find("unknown command"), std::string::npos) << bad_cmd.err;
  const ToolRun no_id = run("verify" + d());
  EXPECT_EQ(no_id.status, 64);
  EXPECT_NE(no_id.err.find("give its ID"), std::string::npos) << no_id.err;
  EXPECT_EQ(run("verify x1" + d()).status, 64);

  // A recording that is not there: said so, and nothing is written in the directory.
  const ToolRun no_such = run("purge 9" + d());
  EXPECT_EQ(no_such.status, 1);
  EXPECT_NE(no_such.err.find("no recording 9"), std::string::npos) << no_such.err;
  EXPECT_TRUE(fs::is_empty(dir_));

  // A damaged catalog: Catalog::load's message, exit 1.
  record(5, RecordingState::kStopped);
  const std::string cat = Catalog::path(dir_);
  unsigned char b = 0;
  {
    const int fd = ::open(cat.c_str(), O_RDONLY);
    ASSERT_EQ(::pread(fd, &b, 1, 100), 1);
    ::close(fd);
  }
  b ^= 1;
  write_at(cat, &b, 1, 100);
  const std::string want = std::string(Catalog::load(dir_).status().message());
  const ToolRun damaged = run("list" + d());
  EXPECT_EQ(damaged.status, 1);
  EXPECT_EQ(damaged.err, "pollux-archive: " + want + "\n");
  EXPECT_NE(damaged.err.find("crc mismatch"), std::string::npos) << damaged.err;
}

// pollux-replay, as a user runs it: a range of a recording published on a shm stream of the
// configuration's context, received here by a subscriber of the same configuration.
TEST_F(ArchiveToolTest, ReplayPublishesTheRangeToAnotherProcessAndSaysWhatItDid) {
  // A gap marker after 5000 (it says 5001..5003 were lost; the fixture records them anyway):
  // counted in the result, not published.
  const std::uint64_t id = record(20000, RecordingState::kStopped, 5000);
  const std::string cfg = dir_ + "/replay.toml";
  {
    std::ofstream f(cfg);
    f << "[runtime]\nname = \"replay-tool-" << ::getpid() << "\"\nthreading = \"inline\"\nidle = \"yield\"\n"
      << "[shm]\nflow_control = \"backpressure\"\nlog_size = \"1MiB\"\n[[streams]]\ntopic = \"replayed\"\n"
      << "id = 4242\n";
  }
  auto ctx = Context::from_file(cfg);
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  auto sub = (*ctx)->subscriber("replayed");
  ASSERT_TRUE(sub.ok()) << sub.status();
  testing::Child c =
      testing::spawn({POLLUX_REPLAY_BIN, "--config", cfg, "--dir", dir_, "--recording", std::to_string(id), "--stream",
                      "4242", "--from", "4001", "--to", "6000", "--pace", "max", "--json"});
  std::vector<std::uint64_t> got;
  bool payloads_match = true;
  // Until the replay's 2000 messages are in (the tool exits once they are published).
  while (got.size() < 2000 && !c.exited()) {
    const int n = sub->poll(
        [&](const Message& m) {
          const std::uint64_t seq = 4001 + got.size();
          const std::vector<std::byte> f = make_frame(seq);
          payloads_match &= m.payload.size() == f.size() - kFrameHeaderSize &&
                            std::memcmp(m.payload.data(), f.data() + kFrameHeaderSize, m.payload.size()) == 0;
          got.push_back(seq);
        },
        1024);
    if (n == 0) c.read_some(1);
  }
  while (sub->poll([&](const Message&) { got.push_back(0); }, 1024) > 0) {
  }
  ASSERT_EQ(c.wait(60), 0) << c.output;
  EXPECT_EQ(got.size(), 2000u);
  EXPECT_TRUE(payloads_match);
  EXPECT_NE(c.output.find("\"state\": \"done\", \"messages\": 2000,"), std::string::npos) << c.output;
  EXPECT_NE(c.output.find("\"first_sequence\": 4001, \"last_sequence\": 6000, \"gap_markers\": 1, \"missing\": 3"),
            std::string::npos)
      << c.output;

  // Errors a user makes: a recording that is not there (exit 1, says where to look), a pace
  // that is not one (64), a stream id the configuration does not have (1).
  const auto replay = [&](const std::string& args) {
    const testing::CommandOutput o = testing::RunCommand(std::string(POLLUX_REPLAY_BIN) + " --config " + cfg +
                                                         " --dir " + dir_ + " " + args + " 2>&1");
    return o;
  };
  const auto missing = replay("--recording 99 --stream replayed --wait-subscriber 0");
  EXPECT_EQ(missing.status, 1) << missing.text;
  EXPECT_NE(missing.text.find("recording 99 is not in the catalog of " + dir_), std::string::npos) << missing.text;
  const auto pace = replay(absl::StrCat("--recording ", id, " --stream replayed --pace fast"));
  EXPECT_EQ(pace.status, 64) << pace.text;
  EXPECT_NE(pace.text.find("--pace fast"), std::string::npos) << pace.text;
  const auto stream = replay(absl::StrCat("--recording ", id, " --stream 77"));
  EXPECT_EQ(stream.status, 1) << stream.text;
  EXPECT_NE(stream.text.find("no [[streams]] topic"), std::string::npos) << stream.text;
  const auto from = replay(absl::StrCat("--recording ", id, " --stream replayed --from yesterday"));
  EXPECT_EQ(from.status, 64) << from.text;
  EXPECT_NE(from.text.find("RFC 3339"), std::string::npos) << from.text;
}

// The documented service contract, from outside: pollux-recorder records the [[recordings]]
// entries of a file that names them with `stream` and `dir`; a subscriber in another process whose
// configuration says `start = "earliest"` with `archive_dir` gets the history, then the live
// stream, with no code of its own for it; SIGTERM stops the recorder with exit 0; `list --json`
// and `verify` describe the result.
TEST_F(ArchiveToolTest, RecorderServiceAndAConfiguredLateJoinerAsAUserRunsThem) {
  const std::string arch = dir_ + "/arch";
  const std::string common = absl::StrCat(
      "threading = \"inline\"\nidle = \"yield\"\n[shm]\nflow_control = \"backpressure\"\nlog_size = \"1MiB\"\n"
      "[[streams]]\ntopic = \"quotes\"\nid = 7\n");
  // One runtime.name: shm streams are shared by the processes of the same name.
  auto write = [&](const std::string& name, const std::string& body) {
    const std::string path = absl::StrCat(dir_, "/", name, ".toml");
    std::ofstream(path) << "[runtime]\nname = \"archive-contract-" << ::getpid() << "\"\n" << body;
    return path;
  };
  const std::string rec_cfg =
      write("rec", absl::StrCat(common, "[[recordings]]\nstream = \"quotes\"\ndir = \"", arch, "\"\n"));
  const std::string pub_cfg = write("pub", common);
  const std::string lj_cfg = write("lj", absl::StrCat(common, "start = \"earliest\"\narchive_dir = \"", arch, "\"\n"));

  testing::Child recorder = testing::spawn({POLLUX_RECORDER_BIN, "--config", rec_cfg, "--json"});
  auto pctx = Context::from_file(pub_cfg);
  ASSERT_TRUE(pctx.ok()) << pctx.status();
  auto pub = (*pctx)->publisher("quotes");
  ASSERT_TRUE(pub.ok()) << pub.status();
  while (!pub->is_connected() && !recorder.exited()) {  // the recorder's subscriber
    pub->service();
    recorder.read_some(1);
  }
  ASSERT_FALSE(recorder.exited()) << recorder.output;
  // Its recording is in the catalog once Recorder::start is through (it subscribes first).
  for (int i = 0; i < 2000; ++i) {
    auto cat = Catalog::load(arch);
    if (cat.ok() && !cat->recordings().empty()) break;
    ::usleep(5000);
  }
  std::uint64_t published = 0;
  auto publish = [&](std::uint64_t n) {
    for (const std::uint64_t end = published + n; published < end;) {
      const std::uint64_t v = published + 1;
      if (pub->offer(&v, sizeof v) >= 0) {
        ++published;
      } else {
        pub->service();
      }
    }
  };
  publish(1000);

  auto lctx = Context::from_file(lj_cfg);
  ASSERT_TRUE(lctx.ok()) << lctx.status();
  auto sub = (*lctx)->subscriber("quotes");
  ASSERT_TRUE(sub.ok()) << sub.status();
  ASSERT_NE(sub->late_join(), nullptr);
  std::uint64_t next = 1, bad = 0;
  auto drain = [&](std::uint64_t until) {
    for (int idle = 0; next <= until && idle < 200000;) {
      const int n = sub->poll(
          [&](const Message& m) {
            std::uint64_t v = 0;
            if (m.payload.size() == sizeof v) std::memcpy(&v, m.payload.data(), sizeof v);
            bad += m.sequence != next || v != next;
            next = m.sequence + 1;
          },
          256);
      if (n == 0) {
        ++idle;
        sub->wait(100);
        pub->service();
      } else {
        idle = 0;
      }
    }
  };
  drain(500);  // history first
  publish(1000);
  drain(2000);
  // Live once a live message follows what the recording gave (until one comes, it cannot know
  // where the live stream begins: catching_up).
  publish(10);
  drain(2010);
  EXPECT_EQ(next, 2011u);
  EXPECT_EQ(bad, 0u);
  EXPECT_STREQ(sub->late_join()->state(), "live");
  EXPECT_GT(sub->late_join()->status().replayed, 0u);

  // The recorder has every message once the publisher is gone and it has drained.
  pub->close();
  for (int i = 0; i < 2000; ++i) {
    auto cat = Catalog::load(arch);
    if (cat.ok() && !cat->recordings().empty() && cat->recordings()[0].frames == 2010) break;
    ::usleep(5000);
  }
  recorder.signal(SIGTERM);
  ASSERT_EQ(recorder.wait(60), 0) << recorder.output;
  EXPECT_NE(recorder.output.find("\"messages\": 2010"), std::string::npos) << recorder.output;
  const ToolRun list = run(" list --dir " + arch + " --json");
  ASSERT_EQ(list.status, 0) << list.err;
  for (const char* want : {"[{\"id\":1,\"stream\":7,", "\"state\":\"stopped\"", "\"first_sequence\":1,",
                           "\"last_sequence\":2010,", "\"messages\":2010,"}) {
    EXPECT_NE(list.out.find(want), std::string::npos) << want << " not in " << list.out;
  }
  const ToolRun verify = run(" verify 1 --dir " + arch);
  EXPECT_EQ(verify.status, 0) << verify.out << verify.err;
}

}  // namespace
}  // namespace pollux
