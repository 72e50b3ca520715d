// Writes the seed corpora of tests/fuzz/corpus/ from the product's own encoders: ITCH records
// cut from the project's fixture and written by itch::Encoder, configurations checked by
// parse_config (and the printed defaults), datagrams sent by a real ReliableSender, control
// messages sent by a real ReliableReceiver, recording segment records laid out as
// core/archive/format.h describes, wrapped in the harnesses' input formats (formats.h).
//
//   fuzz_make_seeds CORPUS_DIR ITCH_FIXTURE     (scripts/fuzz.sh --make-seeds runs it)
// Deterministic: running it again rewrites the same bytes. Also writes CORPUS_DIR/../config.dict.
#include <arpa/inet.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "core/archive/crc32c.h"
#include "core/archive/format.h"
#include "core/config.h"
#include "core/frame.h"
#include "feed_handler/source/pcap_format.h"
#include "itch/encoder.h"
#include "itch/messages.h"
#include "itch/reader.h"
#include "tests/fuzz/formats.h"
#include "transport/reliability/receiver.h"
#include "transport/reliability/sender.h"
#include "transport/reliability/wire.h"

namespace {

namespace fs = std::filesystem;
namespace itch = pollux::itch;
namespace rel = pollux::transport::reliability;
namespace core = pollux::core;
namespace fz = pollux::fuzz;

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "fuzz_make_seeds: %s\n", msg.c_str());
  std::exit(1);
}

// Little-endian byte writer matching FuzzInput.
class Out {
 public:
  Out& u8(std::uint64_t v) { return put(v, 1); }
  Out& u16(std::uint64_t v) { return put(v, 2); }
  Out& u32(std::uint64_t v) { return put(v, 4); }
  Out& u64(std::uint64_t v) { return put(v, 8); }
  Out& raw(const void* p, std::size_t n) {
    const auto* b = static_cast<const std::uint8_t*>(p);
    bytes.insert(bytes.end(), b, b + n);
    return *this;
  }
  // A sequence for pick_seq: base + delta (-128..127), or a raw 64-bit value.
  Out& seq(fz::seq::Base base, int delta) { return u8(static_cast<std::uint8_t>(delta)).u8(base); }
  Out& seq_raw(std::uint64_t v) { return u8(0).u8(fz::seq::kRaw).u64(v); }
  std::vector<std::uint8_t> bytes;

 private:
  Out& put(std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) bytes.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
    return *this;
  }
};

void write(const fs::path& p, std::span<const std::uint8_t> b) {
  fs::create_directories(p.parent_path());
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  if (!f) die("cannot write " + p.string());
  std::printf("  %s (%zu bytes)\n", p.c_str(), b.size());
}
void write(const fs::path& p, const std::string& s) {
  write(p, std::span(reinterpret_cast<const std::uint8_t*>(s.data()), s.size()));
}

// ---- itch_reader -------------------------------------------------------------------------------

void itch_seeds(const fs::path& dir, const std::string& fixture) {
  auto r = itch::Reader::open(fixture);
  if (!r.ok()) die(r.status().ToString());
  std::vector<itch::MessageView> all;
  if (absl::Status s = r->for_each([&](itch::MessageView m) { all.push_back(m); }); !s.ok()) die(s.ToString());
  auto frame = [](std::span<const itch::MessageView> ms) {
    std::vector<std::uint8_t> v;
    itch::Encoder e(&v);
    for (const itch::MessageView& m : ms) e.append_raw(m.bytes());
    return v;
  };
  write(dir / "fixture_head.itch", frame(std::span(all).first(std::min<std::size_t>(all.size(), 10))));
  if (all.size() > 2040) write(dir / "fixture_book_run.itch", frame(std::span(all).subspan(2000, 40)));
  std::vector<itch::MessageView> one_each;
  std::set<char> types;
  for (const itch::MessageView& m : all) {
    if (types.insert(m.type()).second) one_each.push_back(m);
  }
  write(dir / "fixture_one_of_each_type.itch", frame(one_each));

  // A whole order life cycle written by the encoder, with real and with zero length prefixes.
  for (const itch::Framing framing : {itch::Framing::kLengthPrefix, itch::Framing::kZeroLengthPrefix}) {
    std::vector<std::uint8_t> v;
    itch::Encoder e(&v, framing);
    itch::Header h{7, 0, 34'200'000'000'000};
    e.append_system_event(h, 'O');
    e.append_stock_directory(h, "ACME");
    e.append_stock_trading_action(h, "ACME", 'T');
    e.append_add_order(h, 1, 'B', 100, "ACME", 1'234'500);
    e.append_add_order_mpid(h, 2, 'S', 200, "ACME", 1'235'000, "MPID");
    e.append_order_executed(h, 1, 40, 900);
    e.append_order_executed_with_price(h, 2, 50, 901, 'Y', 1'234'900);
    e.append_order_cancel(h, 1, 10);
    e.append_order_replace(h, 2, 3, 120, 1'236'000);
    e.append_order_delete(h, 1);
    e.append_trade(h, 4, 'B', 300, "ACME", 1'235'500, 902);
    e.append_order_delete(h, 3);
    write(dir / (framing == itch::Framing::kLengthPrefix ? "encoder_order_life.itch"
                                                         : "encoder_order_life_zero_prefix.itch"),
          v);
  }
  std::vector<std::uint8_t> bare;
  itch::Encoder(&bare, itch::Framing::kNone).append_add_order(itch::Header{1, 2, 3}, 42, 'S', 10, "XYZ", 99);
  write(dir / "payload_add_order.bin", bare);
}

// ---- config ------------------------------------------------------------------------------------

void config_seeds(const fs::path& dir, const fs::path& dict) {
  const std::vector<std::pair<std::string, std::string>> files = {
      {"shm_backpressure.toml", R"([runtime]
threading = "dedicated"
pollers = 2
poller_cores = [2, 3]
name = "md-shm"
[pool]
slot_size = "4KiB"
slots = 4096
[shm]
log_size = "64MiB"
flow_control = "backpressure"
[[streams]]
topic = "itch.nasdaq"
id = 1
trace = true
trace_every = 100
)"},
      {"udp_multicast.toml", R"([transport]
kind = "udp"
[udp]
address = "239.1.2.3"
port = 40000
interface = "lo"
mtu = 9000
reorder_window = 65536
retransmit_buffer = "64MiB"
nak_delay_us = 50
fault_loss = 0.01
fault_reorder = 0.001
[[streams]]
topic = "a"
id = 1
udp_address = "239.1.2.4"
udp_port = 40001
[[streams]]
topic = "b"
id = 2
)"},
      {"rdma_rc.toml", R"([transport]
kind = "rdma"
[runtime]
threading = "shared"
idle = "busy-spin"
device = "mlx5_0"
[rdma]
device = "mlx5_0"
mode = "rc"
peers = ["10.0.0.2:7471", "10.0.0.3:7471"]
signal_every = 8
)"},
      {"string_forms.toml",
       "[runtime]\nname = \"md_1\"\ndevice = \"eth\\u0030\"\nshm_dir = '/dev/shm'\n"
       "[[streams]]\ntopic = \"\"\"multi\\\n  line\"\"\"\nid = 5\n"},
      {"inline_errors.toml", "[runtime]\nthreading = \"inline\"\n[shm]\nlog_size = 17592186044432\n"},
  };
  for (const auto& [name, text] : files) {
    auto c = core::parse_config(text, name);
    if (!c.ok() && name != "inline_errors.toml") die(name + " does not parse: " + c.status().ToString());
    write(dir / name, text);
  }
  auto d = core::parse_config("", "<defaults>");
  if (!d.ok()) die(d.status().ToString());
  const std::string printed = d->to_toml();
  write(dir / "defaults_printed.toml", printed);

  // The dictionary: every section and key the table knows, and the TOML punctuation.
  std::set<std::string> words = {"[",   "]",   "[[streams]]", "=", "\"", "'", "\"\"\"", "true", "false", "#",   "KiB",
                                 "MiB", "GiB", "{",           "}", ",",  ".", "\n",     "0x",   "1e9",   "inf", "nan"};
  std::string section;
  for (std::size_t at = 0; at < printed.size();) {
    std::size_t eol = printed.find('\n', at);
    if (eol == std::string::npos) eol = printed.size();
    const std::string line = printed.substr(at, eol - at);
    at = eol + 1;
    if (line.size() > 2 && line[0] == '[') words.insert(line.substr(1, line.find(']') - 1));
    const std::size_t eq = line.find(" = ");
    if (eq != std::string::npos && line[0] != '#') {
      words.insert(line.substr(0, eq));
      const std::string value = line.substr(eq + 3, line.find("  #") - eq - 3);
      if (value.size() > 2 && value[0] == '"') words.insert(value.substr(1, value.size() - 2));
    }
  }
  for (const char* w : {"dedicated", "shared", "inline",       "busy-spin",   "yield",       "backoff", "shm", "udp",
                        "rdma",      "lossy",  "backpressure", "rc",          "ud_mcast",    "auto",    "on",  "off",
                        "topic",     "id",     "trace",        "trace_every", "udp_address", "udp_port"}) {
    words.insert(w);
  }
  std::string out = "# libFuzzer dictionary for the config harness (written by fuzz_make_seeds)\n";
  for (const std::string& w : words) {
    std::string esc;
    for (char ch : w) {
      if (ch == '"' || ch == '\\') {
        esc += '\\';
        esc += ch;
      } else if (ch == '\n') {
        esc += "\\x0A";
      } else {
        esc += ch;
      }
    }
    out += "\"" + esc + "\"\n";
  }
  write(dict, out);
}

// ---- datagrams and control messages from the real protocol endpoints ---------------------------

struct Capture final : rel::DatagramSink, rel::ControlSink {
  std::uint32_t send_datagrams(std::span<const Datagram> d) noexcept override {
    for (const Datagram& g : d) datagrams.emplace_back(g.data, g.data + g.bytes);
    return static_cast<std::uint32_t>(d.size());
  }
  void send_control(const rel::PeerAddress&, const std::byte* msg, std::uint32_t len) noexcept override {
    controls.emplace_back(msg, msg + len);
  }
  std::vector<std::vector<std::byte>> datagrams, controls;
};

// A sender of stream 7 (the harnesses' stream): a heartbeat, then `frames` messages.
Capture send(std::uint32_t session, int frames, bool end) {
  rel::SenderOptions o;
  o.log.capacity = 64u << 10;
  o.log.max_datagram = 1472;
  o.log.stream_id = 7;
  o.log.session_id = session;
  rel::ReliableSender s;
  if (!s.init(o).ok()) die("sender init");
  Capture c;
  s.service(c, 1'000'000'000);  // the session's first heartbeat
  alignas(8) std::byte f[256] = {};
  for (int i = 0; i < frames; ++i) {
    for (int b = 32; b < 32 + 8 * (i % 20); ++b) f[b] = static_cast<std::byte>(i ^ b);
    if (!s.append(f, 32 + 8 * (i % 20))) die("append");
    if (i % 4 == 3) s.flush(c, 1'000'000'000);  // a few frames per datagram
  }
  s.flush(c, 1'000'000'000);
  if (end) s.send_end_of_stream(c, 1'000'000'000);
  return c;
}

void datagram_op(Out& o, const std::vector<std::byte>& d) {
  o.u8(fz::udp::kDatagram).u8(1).u16(d.size()).raw(d.data(), d.size()).u8(255);
}

void udp_seeds(const fs::path& dir) {
  {
    const Capture c = send(0x51, 24, true);
    Out o;
    o.u8(0);  // window 1024
    for (const auto& d : c.datagrams) datagram_op(o, d);
    o.u8(fz::udp::kPoll).u8(63).u8(fz::udp::kPoll).u8(63).u8(fz::udp::kService).u16(1000);
    write(dir / "in_order_then_end.bin", o.bytes);
  }
  {  // the second data datagram is lost, NAKed after a while, then repaired
    const Capture c = send(0x51, 24, false);
    Out o;
    o.u8(0);
    for (std::size_t i = 0; i < c.datagrams.size(); ++i) {
      if (i != 2) datagram_op(o, c.datagrams[i]);
    }
    o.u8(fz::udp::kPoll).u8(63).u8(fz::udp::kService).u16(50).u8(fz::udp::kService).u16(300);
    datagram_op(o, c.datagrams[2]);
    o.u8(fz::udp::kPoll).u8(63).u8(fz::udp::kService).u16(2000);
    write(dir / "loss_nak_repair.bin", o.bytes);
  }
  {  // two publishers on the stream, interleaved, one of them goes silent
    const Capture a = send(0x51, 12, false), b = send(0x52, 12, true);
    Out o;
    o.u8(1);  // window 64
    for (std::size_t i = 0; i < std::max(a.datagrams.size(), b.datagrams.size()); ++i) {
      if (i < a.datagrams.size()) datagram_op(o, a.datagrams[i]);
      if (i < b.datagrams.size()) datagram_op(o, b.datagrams[i]);
    }
    o.u8(fz::udp::kPoll)
        .u8(20)
        .u8(fz::udp::kTime)
        .u32(3'000'000)
        .u8(fz::udp::kService)
        .u16(10)
        .u8(fz::udp::kPoll)
        .u8(63);
    write(dir / "two_sessions_one_silent.bin", o.bytes);
  }
}

void control_seeds(const fs::path& dir) {
  // A receiver hears the harness's publisher (stream 7, session 0x77) with one datagram lost,
  // and answers with a status message and a NAK: those are the seeds' control datagrams.
  const Capture c = send(0x77, 20, false);
  rel::ReceiverOptions ro;
  ro.window.window = 1024;
  ro.stream_id = 7;
  ro.receiver_id = 5;
  rel::ReliableReceiver r;
  if (!r.init(ro).ok()) die("receiver init");
  Capture out;
  rel::PeerAddress from{};
  std::vector<std::vector<std::byte>> bufs = c.datagrams;  // frames are held in place
  for (std::size_t i = 0; i < bufs.size(); ++i) {
    if (i != 2) r.on_datagram(bufs[i].data(), static_cast<std::uint32_t>(bufs[i].size()), from, 0, 1'000'000'000);
  }
  r.service(1'000'000'000, out);  // status ("I am here")
  r.service(1'010'000'000, out);  // the NAK, after its random delay
  if (out.controls.size() < 2) die("the receiver sent no NAK");
  Out o;
  o.u8(0);  // no coalescing
  o.u8(255).u8(fz::control::kAppend).u8(20);
  for (int i = 0; i < 20; ++i) o.u8(8 * (i % 20));
  for (const auto& m : out.controls) o.u8(255).u8(fz::control::kControl).u8(1).u16(m.size()).raw(m.data(), m.size());
  o.u8(255)
      .u8(fz::control::kService)
      .u16(10)
      .u8(255)
      .u8(fz::control::kTime)
      .u32(2000)
      .u8(255)
      .u8(fz::control::kService)
      .u16(10);
  write(dir / "status_nak_repair.bin", o.bytes);
  // The subscriber leaves (kControlFlagLeaving), the publisher ends.
  r.close(out);
  Out e;
  e.u8(1);  // coalescing
  e.u8(255).u8(fz::control::kAppend).u8(5).u8(8).u8(16).u8(24).u8(32).u8(40);
  e.u8(255)
      .u8(fz::control::kControl)
      .u8(1)
      .u16(out.controls[0].size())
      .raw(out.controls[0].data(), out.controls[0].size());
  e.u8(255)
      .u8(fz::control::kControl)
      .u8(1)
      .u16(out.controls.back().size())
      .raw(out.controls.back().data(), out.controls.back().size());
  e.u8(3).u8(1).u8(fz::control::kService).u16(100).u8(255).u8(fz::control::kEndOfStream);
  write(dir / "status_leave_end.bin", e.bytes);
}

// ---- receive_window and shm_reader: event lists ------------------------------------------------

void window_seeds(const fs::path& dir) {
  namespace w = fz::window;
  {
    Out o;
    o.u8(2).u64(0);  // window 1024, start at 1
    for (int i = 0; i < 12; ++i) o.u8(w::kData).seq(fz::seq::kHwm, 0).u8(i);
    o.u8(w::kDrain).u8(63).u8(1);
    write(dir / "in_order.bin", o.bytes);
  }
  {
    Out o;
    o.u8(0).u64(200);  // window 64, start at 101
    o.u8(w::kData).seq(fz::seq::kHwm, 0).u8(0).u8(w::kData).seq(fz::seq::kHwm, 3).u8(0);
    o.u8(w::kNaks).u16(20).u8(8).u8(w::kData).seq(fz::seq::kExpected, 2).u8(0);
    o.u8(w::kForget).seq(fz::seq::kHwm, -1).u8(1).u8(w::kNaks).u16(300).u8(8);
    o.u8(w::kData).seq(fz::seq::kExpected, 1).u8(0).u8(w::kDrain).u8(63).u8(1);
    o.u8(w::kData).seq(fz::seq::kExpected, 3).u8(0).u8(w::kData).seq(fz::seq::kExpected, 2).u8(0);
    o.u8(w::kDrain).u8(63).u8(1);
    write(dir / "gap_nak_fill_forget.bin", o.bytes);
  }
  {
    Out o;
    o.u8(1).u64(0);  // window 128
    o.u8(w::kData).seq(fz::seq::kHwm, 0).u8(0);
    o.u8(w::kHeartbeat).seq(fz::seq::kHwm, 20).seq(fz::seq::kExpected, 0);  // a lost tail
    o.u8(w::kHeartbeat).seq(fz::seq::kHwm, 0).seq(fz::seq::kExpected, 5);   // part of it gone for good
    o.u8(w::kDrain).u8(4).u8(0).seq(fz::seq::kExpected, 10).u8(w::kNaks).u16(10).u8(30);
    o.u8(w::kSilence).u32(3'000'000).u8(w::kDrain).u8(63).u8(1);
    o.u8(w::kReset).u8(1).seq(fz::seq::kOther, 50).u8(w::kData).seq(fz::seq::kHwm, 0).u8(0).u8(w::kDrain).u8(63).u8(1);
    write(dir / "heartbeat_loss_silence_reset.bin", o.bytes);
  }
}

void shm_seeds(const fs::path& dir) {
  for (const auto& [t, name] :
       {std::pair{fz::shm::kShort, "short"}, {fz::shm::kWrapped, "wrapped"}, {fz::shm::kClosed, "closed"}}) {
    for (int join_at_start = 0; join_at_start < 2; ++join_at_start) {
      Out o;
      o.u8(t).u8(0).u8(0).u8(200).u8(1).u8(0).u8(join_at_start);
      for (int i = 0; i < 6; ++i) o.u8(200).u8(15).u8(1).u8(1);
      write(dir / (std::string(name) + (join_at_start ? "_from_start.bin" : "_live_edge.bin")), o.bytes);
    }
  }
}

// rdma_ud_source: u8 op (% 4): 0 raw header (40 bytes, u32 qpn); 1 described header (u8 sel,
// 4 bytes source, u16 id, ...; u32 qpn); 2 receive buffer (u8 source, u8 sel, datagram); 3 time
// step (u16, 100 us units) + service + poll.
void ud_source_seeds(const fs::path& dir) {
  {
    Out o;
    std::uint8_t g[40] = {};
    const std::uint8_t ip[20] = {0x45, 0, 0, 0x54, 0x12, 0x34, 0x40, 0, 1, 0x11, 0, 0, 10, 0, 0, 1, 239, 255, 77, 1};
    std::memcpy(g + 20, ip, 20);
    o.u8(0).raw(g, 40).u32(0x11);                                      // RoCEv2 IPv4, rxe-style
    o.u8(1).u8(0).u8(10).u8(0).u8(0).u8(2).u16(7).u32(0x22);           // described IPv4
    o.u8(1).u8(2).u8(10).u8(0).u8(0).u8(3).u16(8).u8(5).u32(0x33);     // IPv6 nibble in front, valid IPv4 checksum
    o.u8(1).u8(3).u8(10).u8(0).u8(0).u8(4).u16(9).u8(7).u8(5).u32(1);  // ... checksum wrong: a GRH
    o.u8(1).u8(4).u8(1).u8(2).u8(3).u8(4).u16(1);                      // a real GRH with an SGID
    for (int i = 0; i < 16; ++i) o.u8(0xa0 + i);
    o.u32(0x44);
    write(dir / "headers.bin", o.bytes);
  }
  {
    Out o;
    o.u8(2).u8(0).u8(4).u8(1);                                   // heartbeat of session 0 from source 0: join
    o.u8(2).u8(0).u8(0).u8(3).u8(1).u8(8).u8(16).u8(24).u8(32);  // 4 frames from source 0
    o.u8(2).u8(1).u8(0).u8(1).u8(1).u8(8).u8(8);                 // 2 frames of it from source 1: wrong source
    o.u8(3).u16(10);
    o.u8(2).u8(0).u8(0).u8(2).u8(0).u8(5).u8(8).u8(8).u8(8);  // 3 frames after a gap of 5: NAKed
    o.u8(3).u16(50).u8(3).u16(50);
    o.u8(2).u8(1).u8(6).u8(1);                    // session 1 joins from source 1
    o.u8(2).u8(0).u8(8).u8(1).u8(1).u8(8).u8(8);  // a header no device writes
    o.u8(3).u16(20);
    write(dir / "two_sources_two_sessions.bin", o.bytes);
  }
}

// ---- counters_reader: patches over the template counters file ----------------------------------

void counters_seeds(const fs::path& dir) {
  // Patch = u32 offset, u8 region (0 header, 1 labels, 2 values, 3 error log header, 4 entries,
  // 5 anywhere), u8 length - 1, the bytes; after the patches a flag and the truncated length.
  write(dir / "template.bin", Out().u8(0).u8(0).bytes);
  write(dir / "version_3.bin", Out().u8(1).u32(8).u8(0).u8(3).u32(3).u8(0).bytes);
  write(dir / "capacity_huge.bin", Out().u8(1).u32(24).u8(0).u8(3).u32(0x7fffffff).u8(0).bytes);
  write(dir / "log_used_beyond_capacity.bin", Out().u8(1).u32(24).u8(3).u8(3).u32(0xffffffff).u8(0).bytes);
  write(dir / "log_message_length.bin", Out().u8(1).u32(36).u8(4).u8(3).u32(0xffff).u8(0).bytes);
  write(dir / "log_offset_outside.bin", Out().u8(1).u32(128).u8(0).u8(7).u64(1ull << 40).u8(0).bytes);
  write(dir / "truncated_in_log.bin", Out().u8(0).u8(1).u32(4096 + 16 * 256 + 200).bytes);
}

// ---- arbiter: events of two lines, a server and a forger (format in arbiter_fuzz.cc) ----------

// A data packet on line `op` (0 A, 1 B, 2 replies) of `count` messages from `seq`; flags: bit 0
// altered bytes, bits 1-2 the session (0 the real one, 1 the next, 2 a forged one).
void ArbData(Out& o, int op, std::uint64_t seq, std::uint64_t count, std::uint8_t flags = 0) {
  o.u8(static_cast<std::uint64_t>(op)).u8(flags).u16(seq).u8(4).u8(count - 1);
}
void ArbControl(Out& o, bool end, int line, std::uint64_t seq, std::uint8_t session = 0) {
  o.u8(end ? 4 : 3).u8(static_cast<std::uint64_t>(line)).u8(session).u16(seq).u8(4);
}
void ArbControlRaw(Out& o, bool end, int line, std::uint64_t seq) {
  o.u8(end ? 4 : 3).u8(static_cast<std::uint64_t>(line)).u8(0).u16(0).u8(3).u64(seq).u8(0);
}
void ArbDrainedTick(Out& o, std::uint64_t us) { o.u8(6).u8(0).u8(6).u8(1).u8(6).u8(2).u8(7).u16(us); }
void ArbAnswer(Out& o, std::uint64_t k) { o.u8(8).u8(k - 1).u8(1); }

void arbiter_seeds(const fs::path& dir) {
  {  // both lines in order, then the end on both
    Out o;
    for (std::uint64_t s = 1; s <= 581; s += 20) {
      ArbData(o, 0, s, 20);
      ArbData(o, 1, s, 20);
      ArbDrainedTick(o, 100);
    }
    ArbControl(o, true, 0, 601);
    ArbControl(o, true, 1, 601);
    ArbDrainedTick(o, 60000);
    write(dir / "in_order.bin", o.bytes);
  }
  {  // losses on one line and on both, requests answered one packet of 8 at a time
    Out o;
    for (std::uint64_t s = 1; s <= 581; s += 20) {
      if (s % 60 != 21) ArbData(o, 0, s, 20);
      if (s % 100 != 41 && s % 60 != 21) ArbData(o, 1, s, 20);
      ArbDrainedTick(o, 500);
      for (int k = 0; k < 4; ++k) {
        ArbAnswer(o, 8);
        ArbDrainedTick(o, 400);
      }
    }
    ArbControl(o, true, 0, 601);
    ArbControl(o, true, 1, 601);
    for (int k = 0; k < 40; ++k) {
      ArbAnswer(o, 8);
      ArbDrainedTick(o, 2000);
    }
    write(dir / "losses.bin", o.bytes);
  }
  {  // forged single datagrams on line A among the real ones
    Out o;
    for (std::uint64_t s = 1; s <= 581; s += 20) {
      ArbData(o, 0, s, 20);
      ArbData(o, 1, s, 20);
      switch ((s / 20) % 6) {
        case 1:
          ArbControl(o, true, 0, 1);
          break;  // an end at 1
        case 2:
          ArbControlRaw(o, false, 0, 1ull << 62);
          break;  // a heartbeat at 2^62
        case 3:
          ArbData(o, 0, s + 20 + 10000, 5);
          break;  // data far ahead
        case 4:
          ArbControl(o, false, 0, 1, 2);
          break;  // another session's heartbeat
        case 5:
          ArbData(o, 0, s + 20, 3, 1);
          break;  // an altered copy of the next messages
        default:
          break;
      }
      ArbDrainedTick(o, 300);
    }
    ArbControl(o, true, 0, 601);
    ArbControl(o, true, 1, 601);
    ArbDrainedTick(o, 60000);
    write(dir / "forged.bin", o.bytes);
  }
}

// ---- pcap_frame: link type byte, then a frame (format in pcap_frame_fuzz.cc) ------------------

void pcap_frame_seeds(const fs::path& dir) {
  namespace pcap = pollux::feed::pcap;
  std::vector<std::uint8_t> mold(23, 0);
  std::memcpy(mold.data(), "TEST000001", 10);
  mold[17] = 1;  // sequence 1
  mold[19] = 1;  // one message
  mold[21] = 1;  // of 1 byte
  mold[22] = 'S';
  auto frame = [&](bool fragment, std::size_t pad) {
    std::vector<std::uint8_t> r(pcap::kRecordOverhead + mold.size());
    pcap::write_record_headers(r.data(), 1, {htonl(0x0a000001), htons(40000)}, {htonl(0xefff0001), htons(26400)},
                               mold.size(), 1);
    std::memcpy(r.data() + pcap::kRecordOverhead, mold.data(), mold.size());
    std::vector<std::uint8_t> f(r.begin() + pcap::kRecordHeaderSize, r.end());
    if (fragment) f[pcap::kEthernetHeaderSize + 6] = 0x20;
    f.resize(f.size() + pad, 0);
    return f;
  };
  auto seed = [&](const char* name, std::uint8_t link, std::vector<std::uint8_t> head,
                  const std::vector<std::uint8_t>& rest) {
    Out o;
    o.u8(link);
    head.insert(head.end(), rest.begin(), rest.end());
    o.bytes.insert(o.bytes.end(), head.begin(), head.end());
    write(dir / name, o.bytes);
  };
  const std::vector<std::uint8_t> eth = frame(false, 0);
  const std::vector<std::uint8_t> ip(eth.begin() + pcap::kEthernetHeaderSize, eth.end());
  seed("ethernet.bin", 0, {}, eth);
  std::vector<std::uint8_t> vlan(eth.begin(), eth.begin() + 12);
  vlan.insert(vlan.end(), {0x81, 0x00, 0x00, 0x64, 0x08, 0x00});
  seed("ethernet_vlan.bin", 0, vlan, ip);
  seed("sll.bin", 1, {0, 0, 0, 1, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0x08, 0x00}, ip);
  seed("sll2.bin", 2, {0x08, 0x00, 0, 0, 0, 0, 0, 2, 0, 1, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0}, ip);
  seed("raw.bin", 3, {}, ip);
  const std::vector<std::uint8_t> frag = frame(true, 0);
  seed("fragment.bin", 3, {}, std::vector<std::uint8_t>(frag.begin() + pcap::kEthernetHeaderSize, frag.end()));
  seed("padded.bin", 0, {}, frame(false, 18));
}

// ---- frame -----------------------------------------------------------------------------------
// Mode 0: a datagram as the reliability sender builds it (two data frames, a traced one, and a
// heartbeat); mode 1|k<<1: k+1 described frames for the writer (length, flags, stream,
// session, timestamp, how), the last one too short for its trace block.
void frame_seeds(const fs::path& dir) {
  auto header = [](Out& o, std::uint32_t len, std::uint16_t flags, std::uint64_t seq) {
    o.u32(len).u8(core::kFrameMagic).u8(core::kFrameVersion).u16(flags).u32(7).u32(0x77).u64(seq).u64(1'000);
  };
  Out d;
  d.u8(0);
  header(d, core::kFrameHeaderSize + 5, core::kFlagNone, 1);
  d.u8(1).u8(2).u8(3).u8(4).u8(5).u8(0).u8(0).u8(0);  // payload, padded to 8
  header(d, core::min_frame_length(core::kFlagTraced), core::kFlagTraced, 2);
  for (int i = 0; i < 64; ++i) d.u8(0);  // the trace block
  header(d, rel::kHeartbeatFrameLength, core::kFlagHeartbeat, 3);
  for (std::uint32_t i = core::kFrameHeaderSize; i < rel::wire_size(rel::kHeartbeatFrameLength); ++i) d.u8(0);
  write(dir / "datagram.bin", d.bytes);
  Out w;
  w.u8(1 | (2 << 1));
  w.u16(40).u16(core::kFlagNone).u32(7).u32(0x77).u64(5'000).u8(0);
  w.u16(96).u16(core::kFlagTraced).u32(7).u32(0x77).u64(6'000).u8(1);
  w.u16(64).u16(core::kFlagTraced).u32(7).u32(0x77).u64(7'000).u8(0);
  write(dir / "written.bin", w.bytes);
}

// ---- archive_segment ---------------------------------------------------------------------------
// Raw mode: the records after a segment header (a frame, a kGap marker, a traced frame, the
// zero header that ends them), the same walked again from a seek to the marker, a frame then
// a torn record (its header written, its body cut short by zeros), and a kResume marker seen
// from the end; built mode: three described records, unflipped and with a byte of the
// marker's body flipped.
namespace ar = pollux::core::archive;

void archive_record(Out& o, const std::vector<std::uint8_t>& body) {
  const auto length = static_cast<std::uint32_t>(body.size());
  o.u32(ar::crc32c(body.data(), length, ar::crc32c(&length, sizeof length))).u32(length).raw(body.data(), length);
  while (o.bytes.size() % ar::kRecordAlign != 0) o.u8(0);
}

std::vector<std::uint8_t> archive_frame(std::uint32_t payload, std::uint16_t flags, std::uint64_t seq) {
  Out f;
  const std::uint32_t length = core::kFrameHeaderSize + payload;
  f.u32(length).u8(core::kFrameMagic).u8(core::kFrameVersion).u16(flags).u32(7).u32(0x77).u64(seq).u64(1'000 * seq);
  for (std::uint32_t i = 0; i < payload; ++i) f.u8(i * 7 + 1);
  return f.bytes;
}

std::vector<std::uint8_t> archive_marker(ar::MarkerKind kind, std::uint64_t from, std::uint64_t to) {
  Out m;
  m.u32(sizeof(ar::Marker)).u8(ar::kMarkerMagic).u8(ar::kMarkerVersion).u16(static_cast<std::uint16_t>(kind));
  m.u32(7).u32(kind == ar::MarkerKind::kGap ? 0x77 : 0).u64(from).u64(to).u64(1'700'000'000'000'000'000);
  m.u64(kind == ar::MarkerKind::kGap ? to - from + 1 : 24);
  return m.bytes;
}

void archive_seeds(const fs::path& dir) {
  // Records are laid out after the mode byte (and seek field): written at offset 0 of their own
  // Out so that the padding is relative to the record area.
  Out recs;
  archive_record(recs, archive_frame(5, core::kFlagNone, 1));
  archive_record(recs, archive_marker(ar::MarkerKind::kGap, 2, 4));
  archive_record(recs, archive_frame(core::kFrameTraceSize + 3, core::kFlagTraced, 5));
  recs.u64(0);
  Out a;
  a.u8(fz::archive::kNoSeek).raw(recs.bytes.data(), recs.bytes.size());
  write(dir / "records.bin", a.bytes);
  Out b;  // seek to the marker: the second record
  b.u8(fz::archive::kNearHeader << 1).u16(ar::record_size(core::kFrameHeaderSize + 5));
  b.raw(recs.bytes.data(), recs.bytes.size());
  write(dir / "marker.bin", b.bytes);

  Out torn;
  archive_record(torn, archive_frame(9, core::kFlagNone, 1));
  Out cut;
  archive_record(cut, archive_frame(40, core::kFlagNone, 2));
  cut.bytes.resize(8 + 20);                 // the header and 20 bytes of the body made it to the disk
  cut.bytes.resize(cut.bytes.size() + 64);  // zeros where the rest should be
  torn.raw(cut.bytes.data(), cut.bytes.size());
  Out c;
  c.u8(fz::archive::kNoSeek | (4 << 3)).raw(torn.bytes.data(), torn.bytes.size());
  write(dir / "torn.bin", c.bytes);

  Out resume;
  archive_record(resume, archive_marker(ar::MarkerKind::kResume, 0, 0));
  resume.u64(0);
  Out e;  // seek to the last 8 bytes: the zero header after the marker
  e.u8(fz::archive::kFromEnd << 1).u8(8).raw(resume.bytes.data(), resume.bytes.size());
  write(dir / "resume_from_end.bin", e.bytes);

  auto built = [](Out& o, std::uint8_t mode) {
    o.u8(fz::archive::kBuilt | (2 << 1) | mode | (1 << 6));
    o.u8(0).u16(5).u16(core::kFlagNone).u32(7).u32(0x77).u64(1).u64(1'000).u8(3);
    o.u8(1).u16(static_cast<std::uint16_t>(ar::MarkerKind::kGap)).u32(7).u32(0x77).u64(2).u64(4).u64(5'000).u64(3);
    o.u8(0).u16(67).u16(core::kFlagTraced).u32(7).u32(0x77).u64(5).u64(6'000).u8(9);
  };
  Out f;
  built(f, 0);
  write(dir / "built.bin", f.bytes);
  Out g;
  built(g, fz::archive::kFlip);
  // The flip: byte 20 of the marker's body (after the first record: 8 + 37 bytes padded to 48).
  g.u32(48 + 8 + 20).u8(0x40);
  write(dir / "built_flip.bin", g.bytes);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR ITCH_FIXTURE\n", argv[0]);
    return 2;
  }
  const fs::path root(argv[1]);
  itch_seeds(root / "itch_reader", argv[2]);
  config_seeds(root / "config", root.parent_path() / "config.dict");
  udp_seeds(root / "udp_receiver");
  control_seeds(root / "reliability_control");
  window_seeds(root / "receive_window");
  shm_seeds(root / "shm_reader");
  ud_source_seeds(root / "rdma_ud_source");
  counters_seeds(root / "counters_reader");
  arbiter_seeds(root / "arbiter");
  pcap_frame_seeds(root / "pcap_frame");
  frame_seeds(root / "frame");
  archive_seeds(root / "archive_segment");
  return 0;
}
