// MoldUDP64 framing: hand-written wire bytes, encoder/decoder round trips, the builder's
// budget, every error path, and seeded random and mutated packets checked against a
// separately written reference decoder.
#include "itch/moldudp64.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "itch/encoder.h"
#include "itch/random.h"
#include "itch/reader.h"
#include "tests/itch/test_util.h"

namespace pollux::itch::mold {
namespace {

using testing::Hex;

const Session kSession = Session::from("SESSION01");

// "SESSION01 " in hex, as the header holds it.
constexpr const char* kSessionHex = "53455353494f4e303120";

std::vector<uint8_t> Bytes(std::span<const uint8_t> s) { return {s.begin(), s.end()}; }

std::vector<std::vector<uint8_t>> Messages(const Packet& p) {
  std::vector<std::vector<uint8_t>> out;
  for (std::span<const uint8_t> m : p) out.push_back(Bytes(m));
  return out;
}

// Bare ITCH messages of several types and sizes, from the ITCH encoder.
std::vector<std::vector<uint8_t>> ItchMessages(int n) {
  std::vector<std::vector<uint8_t>> out;
  for (int i = 0; i < n; ++i) {
    std::vector<uint8_t> m;
    Encoder e(&m, Framing::kNone);
    const Header h{static_cast<uint16_t>(1 + i % 7), 0, 34200000000000ULL + static_cast<uint64_t>(i)};
    switch (i % 4) {
      case 0:
        e.append_add_order(h, 1000 + static_cast<uint64_t>(i), 'B', 100, "AAPL", 1234500);
        break;
      case 1:
        e.append_order_executed(h, 1000, 50, 77 + static_cast<uint64_t>(i));
        break;
      case 2:
        e.append_order_delete(h, 1000 + static_cast<uint64_t>(i));
        break;
      case 3:
        e.append_system_event(h, 'O');
        break;
    }
    out.push_back(std::move(m));
  }
  return out;
}

// Header bytes of a packet with `count` and `sequence`, then `body` appended.
std::vector<uint8_t> Raw(uint64_t sequence, uint16_t count, const std::vector<uint8_t>& body = {}) {
  std::vector<uint8_t> out(kPacketHeaderSize);
  std::copy(kSession.bytes.begin(), kSession.bytes.end(), out.begin());
  store_be64(out.data() + 10, sequence);
  store_be16(out.data() + 18, count);
  testing::Append(out, body);
  return out;
}

// Exact-size heap copy, so ASan catches any read past the end.
struct Exact {
  explicit Exact(std::span<const uint8_t> b) : buf(new uint8_t[std::max<size_t>(b.size(), 1)]), size(b.size()) {
    std::copy(b.begin(), b.end(), buf.get());
  }
  std::span<const uint8_t> span() const { return {buf.get(), size}; }
  std::unique_ptr<uint8_t[]> buf;
  size_t size;
};

// The decoder's rules, written again in the plainest way (indices, no early exits shared
// with the real one), to cross-check it on random input.
struct Reference {
  Error error = Error::kNone;
  uint32_t block = 0;
  std::vector<std::pair<size_t, size_t>> blocks;  // (offset of data, length)
};
Reference Decode(std::span<const uint8_t> b) {
  Reference r;
  if (b.size() < 20) return {Error::kTooShort, 0, {}};
  uint64_t seq = 0;
  for (int i = 0; i < 8; ++i) seq = seq << 8 | b[10 + static_cast<size_t>(i)];
  const unsigned count = static_cast<unsigned>(b[18]) << 8 | b[19];
  const unsigned n = (count == 0xFFFF) ? 0 : count;
  if (seq == 0 || seq + n < seq) return {Error::kBadSequence, 0, {}};
  size_t at = 20;
  for (unsigned i = 0; i < n; ++i) {
    if (at == b.size()) return {Error::kCountOverrun, i, {}};
    if (at + 1 == b.size()) return {Error::kTruncatedBlock, i, {}};
    const size_t len = static_cast<size_t>(b[at]) << 8 | b[at + 1];
    if (len == 0) return {Error::kEmptyBlock, i, {}};
    if (at + 2 + len > b.size()) return {Error::kTruncatedBlock, i, {}};
    r.blocks.emplace_back(at + 2, len);
    at += 2 + len;
  }
  if (at != b.size()) return {Error::kTrailingBytes, n, {}};
  return r;
}

// parse_packet() agrees with the reference and every span it hands out lies inside the packet.
void CheckAgainstReference(std::span<const uint8_t> b) {
  const Packet p = parse_packet(b);
  const Reference want = Decode(b);
  ASSERT_EQ(p.error, want.error) << p.to_status();
  if (!p.ok()) {
    EXPECT_FALSE(p.to_status().ok());
    EXPECT_EQ(p.begin(), p.end());
    if (p.error != Error::kTooShort && p.error != Error::kBadSequence) {
      EXPECT_EQ(p.block, want.block);
      EXPECT_LE(p.offset, b.size());
    }
    return;
  }
  size_t i = 0;
  for (std::span<const uint8_t> m : p) {
    ASSERT_LT(i, want.blocks.size());
    ASSERT_GE(m.data(), b.data());
    ASSERT_LE(m.data() + m.size(), b.data() + b.size());
    EXPECT_EQ(static_cast<size_t>(m.data() - b.data()), want.blocks[i].first);
    EXPECT_EQ(m.size(), want.blocks[i].second);
    ++i;
  }
  EXPECT_EQ(i, want.blocks.size());
  EXPECT_EQ(i, p.messages());
}

TEST(MoldUdp64Test, DecodesHandWrittenBytes) {
  // Sequence 0x0102030405060708, two blocks: a 19-byte ITCH 'D' and a 1-byte block.
  const std::vector<uint8_t> delete_msg = Hex("44 0002 0000 0a1b2c3d4e60 0000000000bc614e");
  std::vector<uint8_t> wire = Hex(std::string(kSessionHex) + "0102030405060708 0002 0013");
  testing::Append(wire, delete_msg);
  testing::Append(wire, Hex("0001 5a"));
  const Packet p = parse_packet(wire);
  ASSERT_TRUE(p.ok()) << p.to_status();
  EXPECT_EQ(p.kind, Kind::kData);
  EXPECT_EQ(p.session, kSession);
  EXPECT_EQ(p.session.view(), "SESSION01 ");
  EXPECT_EQ(p.sequence, 0x0102030405060708ULL);
  EXPECT_EQ(p.count, 2);
  EXPECT_EQ(p.next_sequence(), 0x010203040506070aULL);
  EXPECT_EQ(Messages(p), (std::vector<std::vector<uint8_t>>{delete_msg, Hex("5a")}));
  EXPECT_TRUE(check_message(*p.begin()).ok());

  // The builder writes the same bytes.
  std::vector<uint8_t> buf(1400);
  PacketBuilder b(buf);
  ASSERT_TRUE(b.begin(kSession, 0x0102030405060708ULL));
  ASSERT_TRUE(b.add(delete_msg));
  ASSERT_TRUE(b.add(Hex("5a")));
  EXPECT_EQ(Bytes(b.finish()), wire);
}

TEST(MoldUdp64Test, SessionIsSpacePaddedOrCut) {
  EXPECT_EQ(Session::from("AB").view(), "AB        ");
  EXPECT_EQ(Session::from("").view(), "          ");
  EXPECT_EQ(Session::from("0123456789XYZ").view(), "0123456789");
  EXPECT_EQ(trim_padding(Session::from("AB").view()), "AB");
}

TEST(MoldUdp64Test, DataPacketsRoundTrip) {
  const std::vector<std::vector<uint8_t>> msgs = ItchMessages(40);
  std::vector<uint8_t> buf(1400);
  for (size_t n = 1; n <= msgs.size(); ++n) {
    PacketBuilder b(buf);
    ASSERT_TRUE(b.begin(kSession, 1000 + n));
    for (size_t i = 0; i < n; ++i) ASSERT_TRUE(b.add(msgs[i])) << n << " " << i;
    EXPECT_EQ(b.count(), n);
    EXPECT_EQ(b.next_sequence(), 1000 + 2 * n);
    const Exact packet(b.finish());
    const Packet p = parse_packet(packet.span(), kSession);
    ASSERT_TRUE(p.ok()) << p.to_status();
    EXPECT_EQ(p.kind, Kind::kData);
    EXPECT_EQ(p.sequence, 1000 + n);
    EXPECT_EQ(p.messages(), n);
    EXPECT_EQ(p.next_sequence(), 1000 + 2 * n);
    EXPECT_EQ(p.offset, packet.size);
    const std::vector<std::vector<uint8_t>> got = Messages(p);
    ASSERT_EQ(got.size(), n);
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(got[i], msgs[i]);
      EXPECT_TRUE(check_message(got[i]).ok());
    }
    size_t seen = 0;
    p.for_each([&](std::span<const uint8_t> m) { EXPECT_EQ(Bytes(m), msgs[seen++]); });
    EXPECT_EQ(seen, n);
    CheckAgainstReference(packet.span());
  }
}

TEST(MoldUdp64Test, StdByteOverloadsParseTheSame) {
  std::vector<uint8_t> buf(64);
  PacketBuilder b(buf);
  ASSERT_TRUE(b.begin(kSession, 5));
  ASSERT_TRUE(b.add(Hex("53 0000 0000 000000000001 4f")));
  const std::span<const uint8_t> packet = b.finish();
  const std::span<const std::byte> bytes = std::as_bytes(packet);
  const Packet p = parse_packet(bytes, kSession);
  ASSERT_TRUE(p.ok()) << p.to_status();
  EXPECT_EQ(p.messages(), 1);
  EXPECT_EQ(parse_packet(bytes, Session::from("OTHER")).error, Error::kWrongSession);

  std::vector<uint8_t> req(kRequestSize);
  const std::span<const uint8_t> r = encode_request(req, kSession, 5, 1);
  EXPECT_TRUE(parse_request(std::as_bytes(r)).ok());
}

TEST(MoldUdp64Test, HeartbeatAndEndOfSessionRoundTrip) {
  std::vector<uint8_t> buf(kPacketHeaderSize);
  const Exact hb(encode_heartbeat(buf, kSession, 4711));
  EXPECT_EQ(Bytes(hb.span()), Hex(std::string(kSessionHex) + "0000000000001267 0000"));
  Packet p = parse_packet(hb.span(), kSession);
  ASSERT_TRUE(p.ok()) << p.to_status();
  EXPECT_EQ(p.kind, Kind::kHeartbeat);
  EXPECT_EQ(p.sequence, 4711u);
  EXPECT_EQ(p.count, 0);
  EXPECT_EQ(p.messages(), 0);
  EXPECT_EQ(p.next_sequence(), 4711u);
  EXPECT_EQ(p.begin(), p.end());

  const Exact eos(encode_end_of_session(buf, kSession, 4711));
  EXPECT_EQ(Bytes(eos.span()), Hex(std::string(kSessionHex) + "0000000000001267 ffff"));
  p = parse_packet(eos.span(), kSession);
  ASSERT_TRUE(p.ok()) << p.to_status();
  EXPECT_EQ(p.kind, Kind::kEndOfSession);
  EXPECT_EQ(p.count, 0xFFFF);
  EXPECT_EQ(p.messages(), 0);  // 0xFFFF is a marker, not a message count
  EXPECT_EQ(p.next_sequence(), 4711u);
  EXPECT_EQ(p.begin(), p.end());

  // An empty builder packet is a heartbeat for its first sequence.
  std::vector<uint8_t> big(1400);
  PacketBuilder b(big);
  ASSERT_TRUE(b.begin(kSession, 4711));
  EXPECT_EQ(Bytes(b.finish()), Bytes(hb.span()));

  // Too small a buffer or sequence 0: nothing written.
  std::vector<uint8_t> small(kPacketHeaderSize - 1);
  EXPECT_TRUE(encode_heartbeat(small, kSession, 1).empty());
  EXPECT_TRUE(encode_end_of_session(small, kSession, 1).empty());
  EXPECT_TRUE(encode_heartbeat(buf, kSession, 0).empty());
  EXPECT_TRUE(encode_end_of_session(buf, kSession, 0).empty());
  // The largest sequence is fine for a packet without messages.
  EXPECT_TRUE(parse_packet(encode_heartbeat(buf, kSession, std::numeric_limits<uint64_t>::max())).ok());
}

TEST(MoldUdp64Test, EndOfSessionAndHeartbeatCarryNoBlocks) {
  for (const uint16_t count : {kHeartbeatCount, kEndOfSessionCount}) {
    const Packet p = parse_packet(Raw(9, count, Hex("0001 41")));
    EXPECT_EQ(p.error, Error::kTrailingBytes) << count;
    EXPECT_EQ(p.offset, 20u);
    EXPECT_EQ(p.begin(), p.end());
  }
}

TEST(MoldUdp64Test, RequestRoundTrip) {
  std::vector<uint8_t> buf(64);
  const Exact req(encode_request(buf, kSession, 0x1122334455667788ULL, 300));
  EXPECT_EQ(Bytes(req.span()), Hex(std::string(kSessionHex) + "1122334455667788 012c"));
  Request r = parse_request(req.span(), &kSession);
  ASSERT_TRUE(r.ok()) << r.to_status();
  EXPECT_EQ(r.session, kSession);
  EXPECT_EQ(r.sequence, 0x1122334455667788ULL);
  EXPECT_EQ(r.count, 300);

  const Session other = Session::from("OTHER");
  EXPECT_EQ(parse_request(req.span(), &other).error, Error::kWrongSession);
  std::vector<uint8_t> bytes = Bytes(req.span());
  for (size_t n = 0; n < kRequestSize; ++n) {
    EXPECT_EQ(parse_request(Exact({bytes.data(), n}).span()).error, Error::kTooShort) << n;
  }
  bytes.push_back(0);
  r = parse_request(Exact(bytes).span());
  EXPECT_EQ(r.error, Error::kTrailingBytes);
  EXPECT_EQ(r.to_status().message(), "moldudp64: request of 21 bytes (must be 20)");

  // Hand-written requests the encoder refuses to write.
  EXPECT_EQ(parse_request(Raw(5, 0)).error, Error::kBadRequestCount);
  EXPECT_EQ(parse_request(Raw(0, 1)).error, Error::kBadSequence);
  EXPECT_EQ(parse_request(Raw(std::numeric_limits<uint64_t>::max(), 1)).error, Error::kBadSequence);
  EXPECT_TRUE(encode_request(buf, kSession, 5, 0).empty());
  EXPECT_TRUE(encode_request(buf, kSession, 0, 1).empty());
  EXPECT_TRUE(encode_request(buf, kSession, std::numeric_limits<uint64_t>::max(), 1).empty());
  std::vector<uint8_t> small(kRequestSize - 1);
  EXPECT_TRUE(encode_request(small, kSession, 5, 1).empty());
  // The largest request that does not wrap.
  EXPECT_TRUE(parse_request(encode_request(buf, kSession, std::numeric_limits<uint64_t>::max() - 0xFFFF, 0xFFFF)).ok());
}

TEST(MoldUdp64Test, BuilderStopsAtTheBudgetAndThePacketStaysValid) {
  const std::vector<uint8_t> add = ItchMessages(1)[0];  // 36 bytes, 38 with its length
  ASSERT_EQ(add.size(), 36u);
  std::vector<uint8_t> buf(1400);
  PacketBuilder b(buf);
  ASSERT_TRUE(b.begin(kSession, 1));
  int added = 0;
  while (b.add(add)) ++added;
  EXPECT_EQ(added, (1400 - 20) / 38);  // 36
  EXPECT_EQ(b.size(), 20u + 36u * 38u);
  EXPECT_LT(b.room(), add.size());
  // Parse the buffer as it stands after the refused Add(), then Finish().
  Packet p = parse_packet({buf.data(), b.size()});
  ASSERT_TRUE(p.ok()) << p.to_status();
  EXPECT_EQ(p.messages(), 36);
  // A smaller message still fits in what is left (1400 - 1388 = 12 bytes: 10 of data).
  EXPECT_EQ(b.room(), 10u);
  EXPECT_FALSE(b.add(std::vector<uint8_t>(11, 'x')));
  EXPECT_TRUE(b.add(std::vector<uint8_t>(10, 'x')));
  EXPECT_EQ(b.room(), 0u);
  EXPECT_FALSE(b.add(std::vector<uint8_t>(1, 'x')));
  const Exact packet(b.finish());
  EXPECT_EQ(packet.size, 1400u);
  p = parse_packet(packet.span());
  ASSERT_TRUE(p.ok()) << p.to_status();
  EXPECT_EQ(p.messages(), 37);
  EXPECT_EQ(p.next_sequence(), 38u);
}

TEST(MoldUdp64Test, BuilderRefusesWhatTheDecoderWouldReject) {
  std::vector<uint8_t> buf(2 * kMaxBlockSize);
  PacketBuilder b(buf);
  EXPECT_FALSE(b.add(Hex("41")));  // no Begin()
  EXPECT_TRUE(b.finish().empty());
  EXPECT_FALSE(b.begin(kSession, 0));  // sequences start at 1
  ASSERT_TRUE(b.begin(kSession, 1));
  EXPECT_FALSE(b.add({}));  // an empty block is malformed
  EXPECT_EQ(b.reserve(0), nullptr);
  EXPECT_FALSE(b.add(std::vector<uint8_t>(kMaxBlockSize + 1, 'x')));
  EXPECT_EQ(b.count(), 0);
  // A 0xFFFF-byte block is valid when its bytes are there.
  ASSERT_TRUE(b.add(std::vector<uint8_t>(kMaxBlockSize, 'y')));
  const Exact packet(b.finish());
  const Packet p = parse_packet(packet.span());
  ASSERT_TRUE(p.ok()) << p.to_status();
  ASSERT_EQ(p.messages(), 1);
  EXPECT_EQ((*p.begin()).size(), kMaxBlockSize);

  // A header needs 20 bytes.
  std::vector<uint8_t> tiny(19);
  PacketBuilder t(tiny);
  EXPECT_FALSE(t.begin(kSession, 1));
  EXPECT_TRUE(t.finish().empty());

  // The last sequence number a packet can end on: 2^64 - 1.
  ASSERT_TRUE(b.begin(kSession, std::numeric_limits<uint64_t>::max() - 1));
  EXPECT_TRUE(b.add(Hex("41")));
  EXPECT_FALSE(b.add(Hex("41")));
  EXPECT_TRUE(parse_packet(b.finish()).ok());

  // Reserve() writes in place.
  ASSERT_TRUE(b.begin(kSession, 3));
  uint8_t* at = b.reserve(3);
  ASSERT_NE(at, nullptr);
  at[0] = 'S';
  at[1] = 'O';
  at[2] = 'K';
  const Packet q = parse_packet(b.finish());
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(Bytes(*q.begin()), Hex("534f4b"));
}

TEST(MoldUdp64Test, BuilderCapsTheCountBelowTheEndOfSessionMarker) {
  // 0xFFFE one-byte blocks: 20 + 3 * 65534 bytes.
  std::vector<uint8_t> buf(20 + 3 * (size_t{kMaxMessageCount} + 1));
  PacketBuilder b(buf);
  ASSERT_TRUE(b.begin(kSession, 1));
  const std::vector<uint8_t> one = Hex("41");
  for (int i = 0; i < kMaxMessageCount; ++i) ASSERT_TRUE(b.add(one)) << i;
  EXPECT_FALSE(b.add(one));  // room for it, but 0xFFFF would read as end of session
  const Packet p = parse_packet(b.finish());
  ASSERT_TRUE(p.ok()) << p.to_status();
  EXPECT_EQ(p.kind, Kind::kData);
  EXPECT_EQ(p.messages(), kMaxMessageCount);
}

TEST(MoldUdp64Test, EveryStrictPrefixIsRejected) {
  const std::vector<std::vector<uint8_t>> msgs = ItchMessages(6);
  std::vector<uint8_t> buf(1400);
  PacketBuilder b(buf);
  ASSERT_TRUE(b.begin(kSession, 77));
  std::vector<size_t> boundaries = {kPacketHeaderSize};  // where each block starts
  for (const auto& m : msgs) {
    ASSERT_TRUE(b.add(m));
    boundaries.push_back(b.size());
  }
  const std::vector<uint8_t> whole = Bytes(b.finish());
  ASSERT_TRUE(parse_packet(whole).ok());
  for (size_t n = 0; n < whole.size(); ++n) {
    const Exact prefix({whole.data(), n});
    const Packet p = parse_packet(prefix.span(), kSession);
    ASSERT_FALSE(p.ok()) << n;
    EXPECT_FALSE(p.to_status().ok());
    EXPECT_EQ(p.begin(), p.end());
    if (n < kPacketHeaderSize) {
      EXPECT_EQ(p.error, Error::kTooShort) << n;
    } else if (std::find(boundaries.begin(), boundaries.end(), n) != boundaries.end()) {
      EXPECT_EQ(p.error, Error::kCountOverrun) << n;
      EXPECT_EQ(p.offset, n);
    } else {
      EXPECT_EQ(p.error, Error::kTruncatedBlock) << n;
    }
    CheckAgainstReference(prefix.span());
  }
  // The same for a heartbeat: 20 bytes or nothing.
  std::vector<uint8_t> hb(kPacketHeaderSize);
  ASSERT_FALSE(encode_heartbeat(hb, kSession, 1).empty());
  for (size_t n = 0; n < hb.size(); ++n) {
    EXPECT_EQ(parse_packet(Exact({hb.data(), n}).span()).error, Error::kTooShort) << n;
  }
}

TEST(MoldUdp64Test, CountsLargerThanTheBlocksPresentOverrun) {
  const std::vector<uint8_t> body = Hex("0001 41 0002 4142 0003 414243");  // three blocks
  ASSERT_TRUE(parse_packet(Raw(1, 3, body)).ok());
  for (const uint16_t count : {uint16_t{4}, uint16_t{100}, kMaxMessageCount}) {
    const Packet p = parse_packet(Raw(1, count, body));
    EXPECT_EQ(p.error, Error::kCountOverrun) << count;
    EXPECT_EQ(p.block, 3u);
    EXPECT_EQ(p.offset, 20u + body.size());
  }
  EXPECT_EQ(parse_packet(Raw(1, 4, body)).to_status().message(),
            "moldudp64: offset 32: message count 4 overruns the packet: it ends after 3 block(s)");
  // Fewer counted than present: the rest is trailing, not ignored.
  const Packet p = parse_packet(Raw(1, 2, body));
  EXPECT_EQ(p.error, Error::kTrailingBytes);
  EXPECT_EQ(p.offset, 27u);
  EXPECT_EQ(p.to_status().message(), "moldudp64: offset 27: 5 byte(s) after the last of 2 message block(s)");
}

TEST(MoldUdp64Test, ZeroLengthBlockIsRejected) {
  for (const auto& body : {Hex("0000"), Hex("0001 41 0000 0001 41")}) {
    const uint16_t count = body.size() == 2 ? 1 : 3;
    const Packet p = parse_packet(Raw(1, count, body));
    EXPECT_EQ(p.error, Error::kEmptyBlock);
    EXPECT_EQ(p.block, body.size() == 2 ? 0u : 1u);
    EXPECT_EQ(p.offset, body.size() == 2 ? 20u : 23u);
    EXPECT_EQ(p.begin(), p.end());
  }
  EXPECT_EQ(parse_packet(Raw(1, 1, Hex("0000"))).to_status().message(), "moldudp64: offset 20: block 0: length 0");
}

TEST(MoldUdp64Test, MaxLengthBlockWithoutItsBytesIsRejected) {
  const Packet p = parse_packet(Raw(1, 1, Hex("ffff 41424344")));
  EXPECT_EQ(p.error, Error::kTruncatedBlock);
  EXPECT_EQ(p.length, 0xFFFF);
  EXPECT_EQ(p.block, 0u);
  EXPECT_EQ(p.to_status().message(), "moldudp64: offset 20: block 0: length 65535 overruns the packet (4 bytes left)");
  // One byte short of 0xFFFF, and a lone byte where a length prefix should be.
  std::vector<uint8_t> body = Hex("ffff");
  body.resize(2 + kMaxBlockSize - 1, 'z');
  EXPECT_EQ(parse_packet(Raw(1, 1, body)).error, Error::kTruncatedBlock);
  body.push_back('z');
  EXPECT_TRUE(parse_packet(Raw(1, 1, body)).ok());
  const Packet q = parse_packet(Raw(1, 2, Hex("0001 41 00")));
  EXPECT_EQ(q.error, Error::kTruncatedBlock);
  EXPECT_EQ(q.block, 1u);
  EXPECT_EQ(q.length, 0);  // no prefix to report
  EXPECT_EQ(q.to_status().message(), "moldudp64: offset 23: block 1: truncated length prefix (1 byte left)");
}

TEST(MoldUdp64Test, WrongSessionIsReported) {
  const std::vector<uint8_t> packet = Raw(1, 1, Hex("0001 41"));
  const Session other = Session::from("SESSION02");
  Packet p = parse_packet(packet, other);
  EXPECT_EQ(p.error, Error::kWrongSession);
  EXPECT_EQ(p.session, kSession);  // the session it did name
  EXPECT_EQ(p.begin(), p.end());
  EXPECT_EQ(p.to_status().message(), "moldudp64: offset 0: packet of session 'SESSION01 '");
  EXPECT_TRUE(parse_packet(packet, kSession).ok());
  EXPECT_TRUE(parse_packet(packet).ok());  // no session given: not checked
  EXPECT_TRUE(is_session(packet, kSession));
  EXPECT_FALSE(is_session(packet, other));
  EXPECT_FALSE(is_session({packet.data(), 19}, kSession));
  // Padding counts: "SESSION01" padded with NUL is another session.
  std::vector<uint8_t> nul = packet;
  nul[9] = 0;
  EXPECT_EQ(parse_packet(nul, kSession).error, Error::kWrongSession);
  EXPECT_EQ(parse_packet(nul, kSession).to_status().message(),
            "moldudp64: offset 0: packet of session 'SESSION01\\x00'");
}

TEST(MoldUdp64Test, BadSequenceNumbersAreRejected) {
  EXPECT_EQ(parse_packet(Raw(0, 1, Hex("0001 41"))).error, Error::kBadSequence);
  EXPECT_EQ(parse_packet(Raw(0, 0)).error, Error::kBadSequence);
  EXPECT_EQ(parse_packet(Raw(0, kEndOfSessionCount)).error, Error::kBadSequence);
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  EXPECT_EQ(parse_packet(Raw(kMax, 1, Hex("0001 41"))).error, Error::kBadSequence);
  EXPECT_EQ(parse_packet(Raw(kMax - 1, 2, Hex("0001 41 0001 41"))).error, Error::kBadSequence);
  EXPECT_TRUE(parse_packet(Raw(kMax - 1, 1, Hex("0001 41"))).ok());
  EXPECT_TRUE(parse_packet(Raw(kMax, kEndOfSessionCount)).ok());
}

TEST(MoldUdp64Test, ErrorNamesAreDistinct) {
  std::vector<std::string_view> names;
  for (int e = 0; e <= static_cast<int>(Error::kBadRequestCount); ++e) {
    names.push_back(error_name(static_cast<Error>(e)));
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end());
  EXPECT_EQ(error_name(Error::kCountOverrun), "count overruns packet");
}

// Random bytes: mostly rejected at the header or the first block, so half get a planted
// header (our session, a small count, a good sequence) to reach the block walk.
TEST(MoldUdp64Test, RandomPacketsNeverReadOutOfBounds) {
  Xoshiro256 rng(20261202);
  std::array<int, 16> seen{};
  std::vector<uint8_t> buf;
  for (int iter = 0; iter < 200000; ++iter) {
    buf.resize(rng.below(1501));
    for (uint8_t& c : buf) c = static_cast<uint8_t>(rng.next());
    if (buf.size() >= kPacketHeaderSize && rng.chance(512)) {
      std::copy(kSession.bytes.begin(), kSession.bytes.end(), buf.begin());
      store_be64(buf.data() + 10, 1 + rng.below(1000));
      store_be16(buf.data() + 18, static_cast<uint16_t>(rng.below(8)));
      // Small block lengths so some packets walk several blocks; half of these are then
      // cut at a block boundary with the count set to match (mostly valid packets).
      size_t end = 20;
      uint16_t blocks = 0;
      for (size_t at = 20; at + 1 < buf.size(); at += 2 + buf[at + 1]) {
        buf[at] = 0;
        if (rng.chance(16)) buf[at + 1] = 0;
        if (at + 2 + buf[at + 1] <= buf.size()) {
          end = at + 2 + buf[at + 1];
          ++blocks;
        }
      }
      if (rng.chance(512)) {
        buf.resize(end);
        store_be16(buf.data() + 18, blocks);
      }
    }
    const Exact exact(buf);
    CheckAgainstReference(exact.span());
    if (::testing::Test::HasFatalFailure()) return;
    ++seen[static_cast<size_t>(parse_packet(exact.span()).error)];
  }
  // Every outcome of the block walk was reached, valid packets included.
  for (const Error e : {Error::kNone, Error::kTooShort, Error::kCountOverrun, Error::kTruncatedBlock,
                        Error::kEmptyBlock, Error::kTrailingBytes}) {
    EXPECT_GT(seen[static_cast<size_t>(e)], 100) << error_name(e);
  }
}

TEST(MoldUdp64Test, MutatedPacketsNeverReadOutOfBounds) {
  const std::vector<std::vector<uint8_t>> msgs = ItchMessages(12);
  std::vector<uint8_t> out(1400);
  PacketBuilder b(out);
  ASSERT_TRUE(b.begin(kSession, 123456));
  std::vector<size_t> lengths;  // where each block's length prefix is
  for (const auto& m : msgs) {
    lengths.push_back(b.size());
    ASSERT_TRUE(b.add(m));
  }
  const std::vector<uint8_t> base = Bytes(b.finish());
  Xoshiro256 rng(4242);
  std::array<int, 16> seen{};
  for (int iter = 0; iter < 50000; ++iter) {
    std::vector<uint8_t> buf = base;
    const int edits = 1 + static_cast<int>(rng.below(4));
    for (int e = 0; e < edits && !buf.empty(); ++e) {
      const size_t at = rng.below(buf.size());
      switch (const std::uint64_t kind = rng.below(7)) {
        case 0:
        case 1:
        case 2:
        case 3:
        case 4:
          testing::EditBytes(buf, at, kind, rng);
          break;
        case 5: {  // the count or a length field: the fields that steer the walk
          const size_t field = rng.chance(512) ? 18 : lengths[rng.below(lengths.size())];
          if (field + 1 < buf.size()) store_be16(buf.data() + field, static_cast<uint16_t>(rng.next()));
          break;
        }
        case 6:  // a sequence number at the edges: 0, or close enough to 2^64 to wrap
          if (buf.size() >= 18) {
            store_be64(buf.data() + 10, rng.chance(256) ? 0 : std::numeric_limits<uint64_t>::max() - rng.below(16));
          }
          break;
      }
    }
    const Exact exact(buf);
    CheckAgainstReference(exact.span());
    if (::testing::Test::HasFatalFailure()) return;
    ++seen[static_cast<size_t>(parse_packet(exact.span()).error)];
  }
  for (const Error e : {Error::kNone, Error::kTooShort, Error::kCountOverrun, Error::kTruncatedBlock,
                        Error::kEmptyBlock, Error::kTrailingBytes, Error::kBadSequence}) {
    EXPECT_GT(seen[static_cast<size_t>(e)], 10) << error_name(e);
  }
}

}  // namespace
}  // namespace pollux::itch::mold
