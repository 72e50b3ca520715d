// Packet captures for pollux-feed: the frame format both ways (pcap_format.h), the capture
// writer (capture.h: records read back with libpcap, rotation, a ring that drops when the
// disk does not keep up, files that cannot be written), and the replay of captures through
// pollux-feed (feed.source = "pcap") built here as tcpdump and the handler write them -
// Ethernet, VLAN, Linux cooked SLL and SLL2, raw IPv4, micro- and nanosecond precision, a
// rotated set - each compared book for book with a replay of the same ITCH file. Hostile
// captures: truncated, foreign link type, cut by the snaplen, garbage, a missing file.
//
// No root and no network: the captures are made in the test. (The live capture on a real
// network, read by tshark's dissector and replayed, is in feed_live_test.)
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <pcap/pcap.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "feed_handler/source/capture.h"
#include "feed_handler/source/pcap_format.h"
#include "itch/generator.h"
#include "itch/moldudp64.h"
#include "itch/reader.h"
#include "tests/feed/feed_process.h"

namespace {

using pollux::feed::CaptureWriter;
using pollux::feedtest::FeedProcess;
namespace pcap = pollux::feed::pcap;
namespace mold = pollux::itch::mold;

std::string g_dir;

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

long long JsonNum(const std::string& json, const std::string& key) {
  const std::string k = "\"" + key + "\": ";
  const std::size_t p = json.find(k);
  return p == std::string::npos ? -1 : std::atoll(json.c_str() + p + k.size());
}

pcap::Endpoint Ep(const char* addr, std::uint16_t port) {
  in_addr a{};
  inet_pton(AF_INET, addr, &a);
  return {a.s_addr, htons(port)};
}

class TempDir : public ::testing::Environment {
 public:
  void SetUp() override {
    char tmpl[] = "/tmp/pollux-feed-pcap-XXXXXX";
    g_dir = mkdtemp(tmpl);
  }
  void TearDown() override { std::system(("rm -rf " + g_dir).c_str()); }
};
const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new TempDir);

// ---- frames ----------------------------------------------------------------------------------

TEST(PcapFrame, ARebuiltFrameDecodesToTheSameDatagramWithAValidChecksumAndTheGroupsMac) {
  std::vector<std::uint8_t> payload(300);
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<std::uint8_t>(i * 7);
  std::vector<std::uint8_t> rec(pcap::kRecordOverhead + payload.size());
  const pcap::Endpoint src = Ep("10.1.2.3", 40000), dst = Ep("239.255.129.7", 26400);
  pcap::write_record_headers(rec.data(), 1'700'000'000'123'456'789, src, dst, payload.size(), 42);
  std::memcpy(rec.data() + pcap::kRecordOverhead, payload.data(), payload.size());
  std::uint32_t sec, nsec, incl, orig;
  std::memcpy(&sec, rec.data(), 4);
  std::memcpy(&nsec, rec.data() + 4, 4);
  std::memcpy(&incl, rec.data() + 8, 4);
  std::memcpy(&orig, rec.data() + 12, 4);
  EXPECT_EQ(sec, 1'700'000'000u);
  EXPECT_EQ(nsec, 123'456'789u);
  EXPECT_EQ(incl, pcap::kFrameHeadersSize + payload.size());
  EXPECT_EQ(orig, incl);
  const std::uint8_t* eth = rec.data() + pcap::kRecordHeaderSize;
  const std::uint8_t mac[6] = {0x01, 0x00, 0x5e, 0x7f, 129 - 128 + 128, 7};  // 239.255.129.7 -> 01:00:5e:7f:81:07
  EXPECT_EQ(std::memcmp(eth, mac, 6), 0);
  // The header checksum verifies: the sum over the header with it is 0xffff (inverted: 0).
  EXPECT_EQ(pcap::ipv4_checksum({eth + 14, 20}), 0);
  pcap::Datagram d;
  ASSERT_EQ(pcap::decode_frame(pcap::LinkType::kEthernet, {eth, incl}, &d), pcap::FrameKind::kUdp);
  EXPECT_EQ(d.src.addr, src.addr);
  EXPECT_EQ(d.src.port, src.port);
  EXPECT_EQ(d.dst.addr, dst.addr);
  EXPECT_EQ(d.dst.port, dst.port);
  ASSERT_EQ(d.payload.size(), payload.size());
  EXPECT_EQ(std::memcmp(d.payload.data(), payload.data(), payload.size()), 0);
  // A unicast destination has no known MAC: zeros.
  pcap::write_record_headers(rec.data(), 0, src, Ep("10.1.2.4", 5), payload.size(), 1);
  EXPECT_EQ(std::memcmp(rec.data() + pcap::kRecordHeaderSize, std::string(6, '\0').data(), 6), 0);
}

// The frame of `payload` from src to dst under each link layer a replay reads.
std::vector<std::uint8_t> Frame(pcap::LinkType link, const pcap::Endpoint& src, const pcap::Endpoint& dst,
                                std::span<const std::uint8_t> payload, bool vlan = false) {
  std::vector<std::uint8_t> eth_ip(pcap::kRecordOverhead);
  pcap::write_record_headers(eth_ip.data(), 0, src, dst, payload.size(), 9);
  eth_ip.insert(eth_ip.end(), payload.begin(), payload.end());
  const std::span<const std::uint8_t> ip(eth_ip.data() + pcap::kRecordHeaderSize + 14,
                                         eth_ip.size() - pcap::kRecordHeaderSize - 14);
  std::vector<std::uint8_t> out;
  out.reserve(32 + ip.size());
  switch (link) {
    case pcap::LinkType::kEthernet: {
      const std::uint8_t* macs = eth_ip.data() + pcap::kRecordHeaderSize;
      std::vector<std::uint8_t> head(macs, macs + 12);
      if (vlan) {  // 802.1Q, VLAN 100
        head.push_back(0x81);
        head.push_back(0x00);
        head.push_back(0x00);
        head.push_back(0x64);
      }
      head.push_back(0x08);
      head.push_back(0x00);
      out = std::move(head);
      break;
    }
    case pcap::LinkType::kSll:  // packet type, ARPHRD, address length, address (8), protocol
      out = {0, 0, 0, 1, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0x08, 0x00};
      break;
    case pcap::LinkType::kSll2:  // protocol, reserved, ifindex, ARPHRD, packet type, addr len, addr (8)
      out = {0x08, 0x00, 0, 0, 0, 0, 0, 2, 0, 1, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0};
      break;
    case pcap::LinkType::kRawIpv4:
      break;
  }
  out.insert(out.end(), ip.begin(), ip.end());
  return out;
}

TEST(PcapFrame, EveryLinkLayerAReplayReadsGivesTheDatagramAndEveryPrefixIsRefusedNotRead) {
  const std::vector<std::uint8_t> payload(100, 0xab);
  const pcap::Endpoint src = Ep("10.0.0.1", 1000), dst = Ep("239.1.1.1", 2000);
  for (const auto& [link, vlan] : {std::pair{pcap::LinkType::kEthernet, false},
                                   {pcap::LinkType::kEthernet, true},
                                   {pcap::LinkType::kSll, false},
                                   {pcap::LinkType::kSll2, false},
                                   {pcap::LinkType::kRawIpv4, false}}) {
    const std::vector<std::uint8_t> f = Frame(link, src, dst, payload, vlan);
    pcap::Datagram d;
    ASSERT_EQ(pcap::decode_frame(link, f, &d), pcap::FrameKind::kUdp) << static_cast<int>(link) << vlan;
    EXPECT_EQ(d.payload.size(), payload.size());
    EXPECT_EQ(d.dst.port, dst.port);
    // Ethernet pads a short frame: trailing bytes beyond the IP length are not payload.
    std::vector<std::uint8_t> padded = f;
    padded.insert(padded.end(), 18, 0);
    ASSERT_EQ(pcap::decode_frame(link, padded, &d), pcap::FrameKind::kUdp);
    EXPECT_EQ(d.payload.size(), payload.size());
    // Every strict prefix is refused (cut inside a header, or shorter than the IP length says).
    for (std::size_t n = 0; n < f.size(); ++n) {
      const std::vector<std::uint8_t> cut(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(n));
      EXPECT_EQ(pcap::decode_frame(link, cut, &d), pcap::FrameKind::kMalformed) << n;
    }
  }
}

TEST(PcapFrame, FragmentsOtherProtocolsAndLyingLengthsAreToldApart) {
  const std::vector<std::uint8_t> payload(64, 1);
  const std::vector<std::uint8_t> f = Frame(pcap::LinkType::kRawIpv4, Ep("10.0.0.1", 1), Ep("10.0.0.2", 2), payload);
  pcap::Datagram d;
  std::vector<std::uint8_t> g = f;
  g[6] = 0x20;  // more fragments
  EXPECT_EQ(pcap::decode_frame(pcap::LinkType::kRawIpv4, g, &d), pcap::FrameKind::kFragment);
  g = f;
  g[7] = 0x10;  // an offset
  EXPECT_EQ(pcap::decode_frame(pcap::LinkType::kRawIpv4, g, &d), pcap::FrameKind::kFragment);
  g = f;
  g[9] = 6;  // TCP
  EXPECT_EQ(pcap::decode_frame(pcap::LinkType::kRawIpv4, g, &d), pcap::FrameKind::kOther);
  g = f;
  g[0] = 0x60;  // IPv6
  EXPECT_EQ(pcap::decode_frame(pcap::LinkType::kRawIpv4, g, &d), pcap::FrameKind::kOther);
  g = f;
  g[0] = 0x44;  // IHL 4 (16 bytes): below the minimum
  EXPECT_EQ(pcap::decode_frame(pcap::LinkType::kRawIpv4, g, &d), pcap::FrameKind::kMalformed);
  g = f;
  g[0] = 0x4f;  // IHL 15 (60 bytes): options past the UDP header, UDP header then cut
  EXPECT_NE(pcap::decode_frame(pcap::LinkType::kRawIpv4, g, &d), pcap::FrameKind::kUdp);
  g = f;
  g[20 + 4] = 0xff;  // UDP length beyond the packet
  EXPECT_EQ(pcap::decode_frame(pcap::LinkType::kRawIpv4, g, &d), pcap::FrameKind::kMalformed);
  g = f;
  g[20 + 4] = 0;
  g[20 + 5] = 7;  // UDP length below its header
  EXPECT_EQ(pcap::decode_frame(pcap::LinkType::kRawIpv4, g, &d), pcap::FrameKind::kMalformed);
  g = f;
  g[2] = 0xff;  // IP total length beyond the frame
  EXPECT_EQ(pcap::decode_frame(pcap::LinkType::kRawIpv4, g, &d), pcap::FrameKind::kMalformed);
  const std::vector<std::uint8_t> arp = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0x08, 0x06, 0, 1};
  EXPECT_EQ(pcap::decode_frame(pcap::LinkType::kEthernet, arp, &d), pcap::FrameKind::kOther);
}

// ---- the writer ------------------------------------------------------------------------------

struct ReadBack {
  std::string error;
  int link = -1;
  std::vector<std::int64_t> ts;
  std::vector<std::vector<std::uint8_t>> payloads;
};
ReadBack ReadWithLibpcap(const std::string& path) {
  ReadBack r;
  char err[PCAP_ERRBUF_SIZE];
  pcap_t* p = pcap_open_offline_with_tstamp_precision(path.c_str(), PCAP_TSTAMP_PRECISION_NANO, err);
  if (p == nullptr) {
    r.error = err;
    return r;
  }
  r.link = pcap_datalink(p);
  pcap_pkthdr* h;
  const u_char* data;
  int rc;
  while ((rc = pcap_next_ex(p, &h, &data)) == 1) {
    pcap::Datagram d;
    if (pcap::decode_frame(pcap::LinkType::kEthernet, {data, h->caplen}, &d) != pcap::FrameKind::kUdp) {
      r.error = "a frame does not decode";
      break;
    }
    r.ts.push_back(std::int64_t{h->ts.tv_sec} * 1'000'000'000 + h->ts.tv_usec);
    r.payloads.emplace_back(d.payload.begin(), d.payload.end());
  }
  if (rc == PCAP_ERROR) r.error = pcap_geterr(p);
  pcap_close(p);
  return r;
}

std::vector<std::uint8_t> Payload(std::size_t i) {
  std::vector<std::uint8_t> p(20 + i % 1400);
  for (std::size_t j = 0; j < p.size(); ++j) p[j] = static_cast<std::uint8_t>(i + j);
  return p;
}

TEST(CaptureWriter, EveryRecordIsReadBackByLibpcapWithItsTimeAndBytes) {
  const std::string path = g_dir + "/w1.pcap";
  CaptureWriter w({path, 0, 1u << 20});
  constexpr std::size_t kN = 5000;
  for (std::size_t i = 0; i < kN; ++i) {
    const std::vector<std::uint8_t> p = Payload(i);
    w.record(1'000'000'000'000 + static_cast<std::int64_t>(i) * 1001, Ep("10.0.0.1", 9), Ep("239.0.0.1", 10), p);
    if (i % 100 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));  // the writer keeps up
  }
  w.stop();
  EXPECT_EQ(w.error(), "");
  const CaptureWriter::Stats st = w.stats();
  EXPECT_EQ(st.records + st.dropped, kN);
  EXPECT_EQ(st.files, 1u);
  EXPECT_EQ(static_cast<off_t>(st.bytes), [&] {
    struct stat s {};
    stat(path.c_str(), &s);
    return s.st_size;
  }());
  const ReadBack r = ReadWithLibpcap(path);
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.link, DLT_EN10MB);
  ASSERT_EQ(r.payloads.size(), st.records);
  EXPECT_EQ(st.dropped, 0u) << "1 MiB of ring with the writer given time";
  for (std::size_t i = 0; i < r.payloads.size(); ++i) {
    ASSERT_EQ(r.payloads[i], Payload(i)) << i;
    ASSERT_EQ(r.ts[i], 1'000'000'000'000 + static_cast<std::int64_t>(i) * 1001) << i;
  }
}

TEST(CaptureWriter, RotationWritesWholePcapFilesNoLargerThanTheLimitAndRemovesAnEarlierSet) {
  const std::string path = g_dir + "/rot.pcap";
  std::ofstream(path + ".7") << "left by an earlier capture";
  std::ofstream(path + ".1") << "left by an earlier capture";
  constexpr std::uint64_t kLimit = 64 * 1024;
  CaptureWriter w({path, kLimit, 1u << 20});
  EXPECT_NE(access((path + ".1").c_str(), F_OK), 0) << "an earlier set's files are not this capture's";
  constexpr std::size_t kN = 600;
  for (std::size_t i = 0; i < kN; ++i) {
    w.record(static_cast<std::int64_t>(i), Ep("10.0.0.1", 9), Ep("239.0.0.1", 10), Payload(i));
    if (i % 50 == 0) std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  w.stop();
  const CaptureWriter::Stats st = w.stats();
  ASSERT_EQ(st.dropped, 0u);
  ASSERT_GT(st.files, 3u);
  std::size_t total = 0;
  for (std::uint64_t k = 0; k < st.files; ++k) {
    const std::string f = k == 0 ? path : absl::StrCat(path, ".", k);
    struct stat s {};
    ASSERT_EQ(stat(f.c_str(), &s), 0) << f;
    EXPECT_LE(static_cast<std::uint64_t>(s.st_size), kLimit) << f;
    const ReadBack r = ReadWithLibpcap(f);
    ASSERT_EQ(r.error, "") << f;
    for (std::size_t i = 0; i < r.payloads.size(); ++i) ASSERT_EQ(r.payloads[i], Payload(total + i)) << f << " " << i;
    total += r.payloads.size();
  }
  EXPECT_EQ(total, kN);
  EXPECT_NE(access(absl::StrCat(path, ".", st.files).c_str(), F_OK), 0);
  // The stale ".7" is beyond a gap (".2" .. ".6" did not exist): left alone, and not read as
  // part of the set, which ends at the first missing number.
}

TEST(CaptureWriter, AWriterThatCannotKeepUpDropsRecordsAndCountsThemNeverBlocksTheCaller) {
  // The file is a FIFO nobody reads: the writer blocks in write() once the pipe is full, so
  // the ring fills and further records are dropped - the caller never waits.
  const std::string path = g_dir + "/stuck.fifo";
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  const int hold = open(path.c_str(), O_RDWR | O_NONBLOCK);  // a reader that never reads
  ASSERT_GE(hold, 0);
  constexpr std::size_t kN = 20000;  // 20,000 x ~1 KiB: far more than pipe + batch + 1 MiB ring
  CaptureWriter w({path, 0, 1u << 20});
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::uint8_t> p(1000, 7);
  for (std::size_t i = 0; i < kN; ++i)
    w.record(static_cast<std::int64_t>(i), Ep("10.0.0.1", 9), Ep("239.0.0.1", 10), p);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const CaptureWriter::Stats mid = w.stats();
  std::printf("%zu records offered in %.3f s with the writer stuck: %llu dropped\n", kN, secs,
              static_cast<unsigned long long>(mid.dropped));
  EXPECT_GT(mid.dropped, kN / 2);
  // Unstick it: read the pipe until the writer has written everything and stopped.
  std::atomic<bool> stopped{false};
  std::thread drain([&] {
    std::vector<char> buf(1 << 16);
    for (;;) {
      const ssize_t n = read(hold, buf.data(), buf.size());
      if (n > 0) continue;
      if (stopped.load()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  w.stop();
  stopped.store(true);
  drain.join();
  close(hold);
  const CaptureWriter::Stats st = w.stats();
  EXPECT_EQ(st.records + st.dropped, kN);
  EXPECT_EQ(w.error(), "");
}

TEST(CaptureWriter, AFileThatCannotBeOpenedOrWrittenStopsTheCaptureWithAClearError) {
  {
    CaptureWriter w({g_dir + "/no/such/dir/x.pcap", 0, 1u << 20});
    w.record(1, Ep("10.0.0.1", 9), Ep("239.0.0.1", 10), Payload(1));
    w.stop();
    EXPECT_NE(w.error().find("cannot open " + g_dir + "/no/such/dir/x.pcap for writing: No such file or directory"),
              std::string::npos)
        << w.error();
    EXPECT_EQ(w.stats().records, 0u);
  }
  {
    // A FIFO nobody reads: refused at once, not a start that hangs.
    const std::string fifo = g_dir + "/noreader.fifo";
    ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
    CaptureWriter w({fifo, 0, 1u << 20});
    w.stop();
    EXPECT_NE(w.error().find("cannot open " + fifo + " for writing: No such device or address (a FIFO with no reader)"),
              std::string::npos)
        << w.error();
  }
  {
    // A FIFO whose reader goes away: the capture stops with EPIPE, the process lives on.
    const std::string fifo = g_dir + "/reader_leaves.fifo";
    ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
    const int reader = open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
    ASSERT_GE(reader, 0);
    CaptureWriter w({fifo, 0, 1u << 20});
    close(reader);
    for (int i = 0; i < 100 && w.error().empty(); ++i) {
      w.record(i, Ep("10.0.0.1", 9), Ep("239.0.0.1", 10), Payload(1));
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    w.stop();
    EXPECT_NE(w.error().find("Broken pipe"), std::string::npos) << w.error();
  }
  {
    // A full disk: /dev/full refuses every write with ENOSPC.
    CaptureWriter w({"/dev/full", 0, 1u << 20});
    w.record(1, Ep("10.0.0.1", 9), Ep("239.0.0.1", 10), Payload(1));
    w.stop();
    EXPECT_NE(w.error().find("/dev/full: write failed after 0 bytes: No space left on device"), std::string::npos)
        << w.error();
  }
}

TEST(CaptureWriter, ADiskThatFillsUpMidCaptureStopsItTheFileHoldsWholeRecords) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to mount a small tmpfs";
  const std::string mnt = g_dir + "/small";
  ASSERT_EQ(mkdir(mnt.c_str(), 0700), 0);
  if (mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=256k") != 0)
    GTEST_SKIP() << "cannot mount tmpfs: " << std::strerror(errno);
  const std::string path = mnt + "/x.pcap";
  std::string error;
  std::uint64_t records = 0;
  {
    CaptureWriter w({path, 0, 1u << 20});
    for (std::size_t i = 0; i < 2000; ++i) {
      w.record(static_cast<std::int64_t>(i), Ep("10.0.0.1", 9), Ep("239.0.0.1", 10), Payload(i));
      if (i % 20 == 0) std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
    w.stop();
    error = w.error();
    records = w.stats().records;
  }
  EXPECT_NE(error.find("No space left on device"), std::string::npos) << error;
  EXPECT_GT(records, 0u);
  // What is in the file before the failure reads back (libpcap stops at the cut record).
  const ReadBack r = ReadWithLibpcap(path);
  EXPECT_GE(r.payloads.size(), records - 1);
  umount(mnt.c_str());
}

// ---- replay through pollux-feed ---------------------------------------------------------------

constexpr const char* kGroupA = "239.255.70.1";
constexpr const char* kGroupB = "239.255.70.2";
constexpr std::uint16_t kPortA = 26400, kPortB = 26401, kPortServer = 26402;

struct Feed {
  std::string itch_path;
  std::vector<std::vector<std::uint8_t>> packets;  // MoldUDP64 data packets, in sequence order
  std::vector<std::uint64_t> first_seq;
  std::uint64_t messages = 0;
};

// A generated feed, its BinaryFILE on disk and its MoldUDP64 packets (up to 1400 bytes).
const Feed& TheFeed() {
  static Feed f = [] {
    Feed out;
    pollux::itch::GeneratorOptions o;
    o.symbols = 40;
    o.messages = 300'000;  // ~9 MB of output: a max-pace replay hands out many batches of it
    o.seed = 11;
    absl::StatusOr<std::vector<std::uint8_t>> g = pollux::itch::generate_itch(o);
    EXPECT_TRUE(g.ok());
    out.itch_path = g_dir + "/feed.itch";
    std::ofstream(out.itch_path, std::ios::binary)
        .write(reinterpret_cast<const char*>(g->data()), static_cast<std::streamsize>(g->size()));
    const mold::Session session = mold::Session::from("TEST000001");
    std::vector<std::uint8_t> buf(1400);
    mold::PacketBuilder b(buf);
    std::uint64_t seq = 1;
    bool open = false;
    auto flush = [&] {
      const std::span<const std::uint8_t> p = b.finish();
      out.packets.emplace_back(p.begin(), p.end());
      out.first_seq.push_back(seq);
      seq += b.count();
      open = false;
    };
    (void)pollux::itch::for_each_message(*g, [&](pollux::itch::MessageView m) {
      if (!open) {
        (void)b.begin(session, seq);
        open = true;
      }
      if (!b.add(m.bytes())) {
        const std::uint16_t n = b.count();
        flush();
        (void)b.begin(session, seq);
        open = true;
        (void)n;
        (void)b.add(m.bytes());
      }
      ++out.messages;
    });
    if (open) flush();
    // The end of session carries the next sequence.
    std::vector<std::uint8_t> end(20);
    (void)mold::encode_end_of_session(end, session, seq);
    out.packets.push_back(end);
    out.first_seq.push_back(seq);
    return out;
  }();
  return f;
}

const std::string& ReferenceBooks() {
  static std::string books = [] {
    const std::string out = g_dir + "/ref.books";
    FeedProcess p({"--itch", TheFeed().itch_path, "--quiet", "--set", "feed.subscriber_mode=\"thread\"", "--set",
                   absl::StrFormat("runtime.name=\"pcapref%d\"", getpid()), "--book-out", out});
    EXPECT_EQ(p.Wait(120), 0) << p.output();
    const std::string b = Slurp(out);
    EXPECT_GT(std::count(b.begin(), b.end(), '\n'), 30) << "a book per symbol";
    return b;
  }();
  return books;
}

// How a capture is written.
struct Style {
  int dlt = DLT_EN10MB;
  pcap::LinkType link = pcap::LinkType::kEthernet;
  bool vlan = false;
  bool nano = true;
  int snaplen = 262144;
};

// A capture of the feed as a handler's host sees it: line A misses every 7th data packet,
// line B every 11th, so every 77th is missing on both and comes back from the server
// (source port kPortServer) 1 ms later; the handler's own requests, an ARP frame and an IPv6
// frame are mixed in (skipped), and one IPv4 fragment (skipped too). Lines alternate A, B, as
// the exchange sends them, 10 us apart. Ends of session on both lines at the end.
struct Built {
  std::size_t other = 0, fragments = 0, replies = 0;
};
// `other_feed`: before every 13th data packet, another feed's datagram to line A's port on
// another group - valid MoldUDP64 of the same session and sequence carrying other messages (the
// next packet's), which would corrupt the books if it were taken as line A's.
Built WriteCapture(const std::string& path, const Style& s, std::size_t cut_record = 0, bool other_feed = false) {
  Built b;
  const Feed& f = TheFeed();
  pcap_t* dead = pcap_open_dead_with_tstamp_precision(
      s.dlt, s.snaplen, s.nano ? PCAP_TSTAMP_PRECISION_NANO : PCAP_TSTAMP_PRECISION_MICRO);
  pcap_dumper_t* out = pcap_dump_open(dead, path.c_str());
  EXPECT_NE(out, nullptr) << pcap_geterr(dead);
  std::int64_t t = 1'765'000'000'000'000'000;
  std::size_t record = 0;
  auto dump = [&](const std::vector<std::uint8_t>& frame) {
    ++record;
    pcap_pkthdr h{};
    h.ts.tv_sec = t / 1'000'000'000;
    h.ts.tv_usec = s.nano ? t % 1'000'000'000 : (t % 1'000'000'000) / 1000;
    h.len = static_cast<bpf_u_int32>(frame.size());
    h.caplen = std::min<bpf_u_int32>(h.len, static_cast<bpf_u_int32>(s.snaplen));
    if (record == cut_record) h.caplen = h.len / 2;
    pcap_dump(reinterpret_cast<u_char*>(out), &h, frame.data());
  };
  const pcap::Endpoint exchange = Ep("10.0.0.1", 40000), server = Ep("10.0.0.1", kPortServer);
  const pcap::Endpoint handler = Ep("10.0.0.2", 51234);
  std::vector<std::size_t> pending_replies;
  const std::vector<std::uint8_t> arp = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 1, 2, 3, 4,  5, 0x08, 0x06,
                                         0,    1,    8,    0,    6,    4,    0, 1, 0, 1, 2,  3, 4,    5,
                                         10,   0,    0,    1,    0,    0,    0, 0, 0, 0, 10, 0, 0,    2};
  for (std::size_t i = 0; i < f.packets.size(); ++i) {
    const bool data = i + 1 < f.packets.size();
    const bool miss_a = data && i % 7 == 3, miss_b = data && i % 11 == 3;
    if (other_feed && data && i % 13 == 5 && i + 2 < f.packets.size()) {
      std::vector<std::uint8_t> fake = f.packets[i + 1];
      for (int k = 0; k < 8; ++k) fake[10 + k] = static_cast<std::uint8_t>(f.first_seq[i] >> (56 - 8 * k));
      dump(Frame(s.link, exchange, Ep("239.255.70.9", kPortA), fake, s.vlan));
      ++b.other;
    }
    if (!miss_a) dump(Frame(s.link, exchange, Ep(kGroupA, kPortA), f.packets[i], s.vlan));
    t += 10'000;
    if (!miss_b) dump(Frame(s.link, exchange, Ep(kGroupB, kPortB), f.packets[i], s.vlan));
    t += 10'000;
    if (miss_a && miss_b) {
      // The handler asks (its request is in the capture: skipped), the server answers.
      std::vector<std::uint8_t> req(20);
      (void)mold::encode_request(req, mold::Session::from("TEST000001"), f.first_seq[i], 1);
      dump(Frame(s.link, handler, server, req, s.vlan));
      ++b.other;
      pending_replies.push_back(i);
    }
    if (i % 500 == 0) {
      if (s.link == pcap::LinkType::kEthernet) {
        dump(arp);
        ++b.other;
      }
      std::vector<std::uint8_t> v6 = Frame(s.link, exchange, Ep(kGroupA, kPortA), f.packets[0], s.vlan);
      const std::size_t ip = v6.size() - (20 + 8 + f.packets[0].size());
      v6[ip] = 0x60;
      dump(v6);
      ++b.other;
    }
    if (i == 100) {
      std::vector<std::uint8_t> frag = Frame(s.link, exchange, Ep(kGroupA, kPortA), f.packets[5], s.vlan);
      const std::size_t ip = frag.size() - (20 + 8 + f.packets[5].size());
      frag[ip + 6] = 0x20;  // more fragments: the first piece of a datagram
      dump(frag);
      ++b.fragments;
    }
    // Replies 1 ms of capture time later (about 50 packets on).
    if (!pending_replies.empty() && pending_replies.front() + 50 <= i) {
      const std::size_t r = pending_replies.front();
      pending_replies.erase(pending_replies.begin());
      dump(Frame(s.link, server, handler, f.packets[r], s.vlan));
      ++b.replies;
    }
  }
  for (std::size_t r : pending_replies) {
    dump(Frame(s.link, server, handler, f.packets[r], s.vlan));
    ++b.replies;
  }
  // Two more ends of session (the exchange sends three).
  for (int k = 0; k < 2; ++k) {
    dump(Frame(s.link, exchange, Ep(kGroupA, kPortA), f.packets.back(), s.vlan));
    dump(Frame(s.link, exchange, Ep(kGroupB, kPortB), f.packets.back(), s.vlan));
  }
  pcap_dump_close(out);
  pcap_close(dead);
  return b;
}

using Replay = pollux::feedtest::PcapReplay;
// `extra`: more --set values.
Replay RunReplay(const std::string& pcap_path, const std::vector<std::string>& extra = {}) {
  static int n = 0;
  std::vector<std::string> sets = {absl::StrFormat("feed.line_a=%s:%d", kGroupA, kPortA),
                                   absl::StrFormat("feed.line_b=%s:%d", kGroupB, kPortB),
                                   absl::StrFormat("feed.rerequest=10.0.0.1:%d", kPortServer),
                                   absl::StrFormat("runtime.name=\"pcapt%d-%d\"", getpid(), n),
                                   // A window of a few replies' worth (~2,000 messages wait behind a gap
                                   // here): what the arbiter cannot deliver must not pile up unseen.
                                   "feed.window=8192"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return pollux::feedtest::RunPcapReplay(pcap_path, absl::StrCat(g_dir, "/replay", n++), sets);
}

void ExpectTheWholeFeed(const Replay& r, const Built& b) {
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(r.books == ReferenceBooks()) << "books differ from the file replay's\n" << r.out;
  EXPECT_EQ(JsonNum(r.json, "messages_unrecoverable"), 0) << r.json;
  EXPECT_EQ(JsonNum(r.json, "malformed"), 0) << r.json;
  EXPECT_EQ(JsonNum(r.json, "replay_packets"), static_cast<long long>(b.replies)) << r.json;
  EXPECT_EQ(JsonNum(r.json, "messages_recovered"), [&] {
    long long n = 0;
    const Feed& f = TheFeed();
    for (std::size_t i = 0; i + 1 < f.packets.size(); ++i) {
      if (i % 7 == 3 && i % 11 == 3) n += f.first_seq[i + 1] - f.first_seq[i];
    }
    return n;
  }()) << r.json;
  EXPECT_EQ(JsonNum(r.json, "pcap_skipped"), static_cast<long long>(b.other)) << r.json;
  EXPECT_EQ(JsonNum(r.json, "pcap_fragments"), static_cast<long long>(b.fragments)) << r.json;
  EXPECT_EQ(JsonNum(r.json, "pcap_malformed"), 0) << r.json;
}

TEST(PcapReplay, EveryLinkLayerAndPrecisionTcpdumpWritesGivesTheFileReplaysBooks) {
  for (const Style& s : {Style{DLT_EN10MB, pcap::LinkType::kEthernet, false, true},
                         Style{DLT_EN10MB, pcap::LinkType::kEthernet, true, false},
                         Style{DLT_LINUX_SLL, pcap::LinkType::kSll, false, false},
                         Style{DLT_LINUX_SLL2, pcap::LinkType::kSll2, false, true},
                         Style{DLT_RAW, pcap::LinkType::kRawIpv4, false, false}}) {
    SCOPED_TRACE(absl::StrFormat("dlt %d vlan %d nano %d", s.dlt, s.vlan, s.nano));
    const std::string path = absl::StrFormat("%s/style_%d_%d_%d.pcap", g_dir, s.dlt, s.vlan, s.nano);
    const Built b = WriteCapture(path, s);
    ExpectTheWholeFeed(RunReplay(path), b);
  }
}

TEST(PcapReplay, AHandlersOwnCaptureFormatAndARotatedSetReplayWhole) {
  // The capture writer's own files (Ethernet, nanoseconds), rotated every 256 KiB: the replay
  // of PATH reads PATH.1, PATH.2, ... on.
  const std::string src = g_dir + "/for_rotation.pcap";
  const Built b = WriteCapture(src, Style{});
  const std::string path = g_dir + "/rotated.pcap";
  std::uint64_t files = 0;
  {
    CaptureWriter w({path, 256 * 1024, 64u << 20});
    char err[PCAP_ERRBUF_SIZE];
    pcap_t* p = pcap_open_offline_with_tstamp_precision(src.c_str(), PCAP_TSTAMP_PRECISION_NANO, err);
    ASSERT_NE(p, nullptr) << err;
    pcap_pkthdr* h;
    const u_char* data;
    while (pcap_next_ex(p, &h, &data) == 1) {
      pcap::Datagram d;
      if (pcap::decode_frame(pcap::LinkType::kEthernet, {data, h->caplen}, &d) != pcap::FrameKind::kUdp) continue;
      w.record(std::int64_t{h->ts.tv_sec} * 1'000'000'000 + h->ts.tv_usec, d.src, d.dst, d.payload);
    }
    pcap_close(p);
    w.stop();
    ASSERT_EQ(w.stats().dropped, 0u);
    files = w.stats().files;
  }
  ASSERT_GT(files, 3u);
  // Only the UDP datagrams were recorded again: the handler's requests are the other traffic.
  const Built udp_only{b.replies, 0, b.replies};
  const Replay r = RunReplay(path);
  ExpectTheWholeFeed(r, udp_only);
  EXPECT_EQ(JsonNum(r.json, "pcap_files"), static_cast<long long>(files)) << r.json;
}

TEST(PcapReplay, APcapngFileAsWiresharkWritesItGivesTheSameBooks) {
  if (std::system("command -v editcap >/dev/null 2>&1") != 0) GTEST_SKIP() << "editcap (Wireshark) is not installed";
  const std::string path = g_dir + "/for_pcapng.pcap";
  const Built b = WriteCapture(path, Style{DLT_LINUX_SLL2, pcap::LinkType::kSll2, false, true});
  ASSERT_EQ(std::system(("editcap -F pcapng " + path + " " + path + "ng").c_str()), 0);
  ExpectTheWholeFeed(RunReplay(path + "ng"), b);
}

TEST(PcapReplay, AnotherFeedOnALinesPortButAnotherGroupIsNotTheLine) {
  const std::string path = g_dir + "/other_feed.pcap";
  const Built b = WriteCapture(path, Style{}, 0, true);
  ExpectTheWholeFeed(RunReplay(path), b);
  // Replies count only from the server's address: the same datagrams from another host are
  // other traffic (the live socket, connected to the server, never gets them).
  const Replay r = RunReplay(path, {"feed.rerequest=10.0.0.77:26402"});
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(JsonNum(r.json, "replay_packets"), 0) << r.json;
  EXPECT_EQ(JsonNum(r.json, "pcap_skipped"), static_cast<long long>(b.other + b.replies)) << r.json;
}

TEST(PcapReplay, ACaptureWithoutADatagramOfTheLinesIsAnErrorNotAnEmptyReplay) {
  const std::string path = g_dir + "/other_ports.pcap";
  (void)WriteCapture(path, Style{});
  const Replay r = RunReplay(path, {"feed.line_a=239.255.70.1:9000", "feed.line_b=239.255.70.2:9001"});
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("is a datagram to line A (feed.line_a 239.255.70.1:9000) or line B"), std::string::npos)
      << r.out;
  // An empty capture (a header, no record) says the same.
  const std::string empty = g_dir + "/empty.pcap";
  pcap_t* dead = pcap_open_dead(DLT_EN10MB, 65535);
  pcap_dump_close(pcap_dump_open(dead, empty.c_str()));
  pcap_close(dead);
  const Replay e = RunReplay(empty);
  EXPECT_EQ(e.rc, 2) << e.out;
  EXPECT_NE(e.out.find("none of its 0 records"), std::string::npos) << e.out;
}

TEST(PcapReplay, OriginalPaceTakesTheCapturesTimeAndGivesTheSameBooks) {
  const std::string path = g_dir + "/paced.pcap";
  const Built b = WriteCapture(path, Style{});
  const auto t0 = std::chrono::steady_clock::now();
  const Replay r = RunReplay(path, {"feed.replay=original"});
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ExpectTheWholeFeed(r, b);
  // About 20 us per data packet of capture time: the replay cannot have been faster.
  const double capture_secs = static_cast<double>(TheFeed().packets.size()) * 20e-6;
  EXPECT_GE(secs, capture_secs) << r.out;
}

TEST(PcapReplay, APacketCutByTheSnaplenIsCountedNotParsedAndNamedInTheSummary) {
  const std::string path = g_dir + "/cut.pcap";
  // Record 5 is line A's second data packet (records: A1, B1, ARP, IPv6, A2...): line B has it too.
  const Built b = WriteCapture(path, Style{}, 5);
  const Replay r = RunReplay(path);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(r.books == ReferenceBooks()) << r.out;
  EXPECT_EQ(JsonNum(r.json, "pcap_cut"), 1) << r.json;
  EXPECT_NE(r.out.find(path + " record 5 ("), std::string::npos) << r.out;
  (void)b;
}

TEST(PcapReplay, HostileCapturesAreRefusedBeforeAnythingStartsNamingFileAndRecord) {
  const std::string good = g_dir + "/good.pcap";
  (void)WriteCapture(good, Style{});
  const std::string data = Slurp(good);
  {  // truncated inside a record
    const std::string path = g_dir + "/truncated.pcap";
    std::ofstream(path, std::ios::binary) << data.substr(0, data.size() - 5);  // inside the last record
    const Replay r = RunReplay(path);
    EXPECT_EQ(r.rc, 2) << r.out;
    EXPECT_NE(r.out.find(path + ": record "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("truncated"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("--set feed.pcap_truncated=stop replays the records before it"), std::string::npos) << r.out;
    // A capture whose writer was killed mid-record: replayed up to the cut when asked.
    const Replay s = RunReplay(path, {"feed.pcap_truncated=stop"});
    EXPECT_EQ(s.rc, 0) << s.out;
    EXPECT_NE(s.out.find("the replay stops before it (feed.pcap_truncated = stop)"), std::string::npos) << s.out;
    EXPECT_GT(JsonNum(s.json, "messages"), 250'000) << s.json;
    // Cut in a file that is not the last of the set: an error whatever the setting.
    const std::string set = g_dir + "/cutset.pcap";
    std::ofstream(set, std::ios::binary) << data.substr(0, data.size() - 5);
    std::ofstream(set + ".1", std::ios::binary) << data;
    const Replay t = RunReplay(set, {"feed.pcap_truncated=stop"});
    EXPECT_EQ(t.rc, 2) << t.out;
    EXPECT_NE(t.out.find(set + ": record "), std::string::npos) << t.out;
  }
  {  // only part of the file header
    const std::string path = g_dir + "/header.pcap";
    std::ofstream(path, std::ios::binary) << data.substr(0, 10);
    const Replay r = RunReplay(path);
    EXPECT_EQ(r.rc, 2) << r.out;
    EXPECT_NE(r.out.find(path), std::string::npos) << r.out;
  }
  {  // not a capture at all
    const std::string path = g_dir + "/garbage.pcap";
    std::ofstream(path, std::ios::binary) << std::string(4096, 'x');
    const Replay r = RunReplay(path);
    EXPECT_EQ(r.rc, 2) << r.out;
    EXPECT_NE(r.out.find("unknown file format"), std::string::npos) << r.out;
  }
  {  // a link type the replay does not read
    const std::string path = g_dir + "/wifi.pcap";
    pcap_t* dead = pcap_open_dead(DLT_IEEE802_11, 65535);
    pcap_dumper_t* out = pcap_dump_open(dead, path.c_str());
    pcap_dump_close(out);
    pcap_close(dead);
    const Replay r = RunReplay(path);
    EXPECT_EQ(r.rc, 2) << r.out;
    EXPECT_NE(r.out.find("link type 105 (IEEE802_11)"), std::string::npos) << r.out;
  }
  {  // missing; a directory
    Replay r = RunReplay(g_dir + "/none.pcap");
    EXPECT_EQ(r.rc, 2) << r.out;
    EXPECT_NE(r.out.find("cannot open " + g_dir + "/none.pcap: No such file or directory"), std::string::npos) << r.out;
    r = RunReplay(g_dir);
    EXPECT_EQ(r.rc, 2) << r.out;
    EXPECT_NE(r.out.find("is not a regular file"), std::string::npos) << r.out;
  }
}

TEST(PcapReplay, ConfigurationMistakesAreNamed) {
  FeedProcess a({"--set", "feed.source=pcap", "--set", "feed.line_a=239.1.1.1:1", "--set", "feed.line_b=239.1.1.2:2"});
  EXPECT_EQ(a.Wait(60), 2);
  EXPECT_NE(a.output().find("feed.pcap: missing"), std::string::npos) << a.output();
  FeedProcess b({"--set", "feed.source=pcap", "--set", "feed.pcap=x.pcap"});
  EXPECT_EQ(b.Wait(60), 2);
  EXPECT_NE(b.output().find("feed.line_a: missing"), std::string::npos) << b.output();
  FeedProcess c({"--set", "feed.source=pcap", "--set", "feed.pcap=x.pcap", "--set", "feed.line_a=239.1.1.1:1", "--set",
                 "feed.line_b=239.1.1.2:2", "--set", "feed.replay=rate"});
  EXPECT_EQ(c.Wait(60), 2);
  EXPECT_NE(c.output().find("feed.replay: rate does not apply to a capture"), std::string::npos) << c.output();
  FeedProcess d({"--set", "feed.capture=/tmp/x.pcap"});
  EXPECT_EQ(d.Wait(60), 2);
  EXPECT_NE(d.output().find("feed.capture: only live mode captures"), std::string::npos) << d.output();
  FeedProcess e({"--set", "feed.capture_rotate=\"12XB\""});
  EXPECT_EQ(e.Wait(60), 2);
  EXPECT_NE(e.output().find("feed.capture_rotate: expected a size"), std::string::npos) << e.output();
  FeedProcess f({"--set", "feed.capture_rotate=1000"});
  EXPECT_EQ(f.Wait(60), 2);
  EXPECT_NE(f.output().find("feed.capture_rotate: 1000 bytes would make a file of almost every datagram"),
            std::string::npos)
      << f.output();
}

}  // namespace
