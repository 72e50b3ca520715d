// The live mode's per-packet path allocates nothing once it is running: arbitration, the
// window, gap ranges, re-requests, notices and the output are all sized at construction
// (examples/feed_handler/arbiter/arbiter.h). The probe (tests/data_path_probe.h) counts malloc & co.
// made by this thread while a steady stream with losses on both lines, duplicates and
// replies goes through.
#include <gtest/gtest.h>

#include <vector>

#include "feed_handler/arbiter/arbiter.h"
#include "itch/generator.h"
#include "itch/moldudp64.h"
#include "itch/reader.h"
#include "tests/support/data_path_probe.h"

namespace pollux::feed {
namespace {

namespace mold = itch::mold;

TEST(ArbiterAlloc, SteadyStateWithLossesDuplicatesAndRepliesAllocatesNothing) {
  itch::GeneratorOptions g;
  g.messages = 60'000;
  g.symbols = 8;
  const std::vector<std::uint8_t> feed = *itch::generate_itch(g);
  std::vector<std::span<const std::uint8_t>> msgs;
  (void)itch::for_each_message(feed, [&](itch::MessageView m) { msgs.push_back(m.bytes()); });
  const mold::Session s = mold::Session::from("ALLOC");
  // Every packet built before counting: 10 messages each.
  std::vector<std::vector<std::uint8_t>> packets;
  for (std::uint64_t seq = 1; seq + 10 <= msgs.size(); seq += 10) {
    std::vector<std::uint8_t> buf(1400);
    mold::PacketBuilder b(buf);
    EXPECT_TRUE(b.begin(s, seq));
    for (std::uint64_t i = 0; i < 10; ++i) EXPECT_TRUE(b.add(msgs[seq + i - 1]));
    buf.resize(b.finish().size());
    packets.push_back(std::move(buf));
  }
  ArbiterOptions o;
  o.window = 1u << 12;
  Arbiter a(o);
  std::vector<RerequestOut> pending;
  pending.reserve(64);
  std::uint64_t delivered = 0;
  auto step = [&](std::size_t i, std::int64_t now) {
    // Line A loses every 7th packet, line B every 11th: every 77th is lost on both.
    if (i % 7 != 3) (void)a.on_packet(Line::kA, packets[i], now);
    if (i % 11 != 3) (void)a.on_packet(Line::kB, packets[i], now);
    a.line_drained(Line::kA, now);
    a.line_drained(Line::kB, now);
    a.tick(now);
    for (const RerequestOut& r : a.requests()) pending.push_back(r);
    a.clear_requests();
    for (const RerequestOut& r : pending) {
      const std::size_t k = (r.sequence - 1) / 10;  // the original packet answers it
      (void)a.on_packet(Line::kReplay, packets[k], now);
    }
    pending.clear();
    Arbiter::Piece p;
    while (a.next(&p)) {
      if (p.notice == nullptr) delivered += itch::for_each_message(p.bytes, [](itch::MessageView) {}).messages;
    }
    a.reset_output();
  };
  const std::size_t warm = packets.size() / 4;
  for (std::size_t i = 0; i < warm; ++i) step(i, static_cast<std::int64_t>(i) * 1000);
  g_allocs = 0;
  g_counting = true;
  for (std::size_t i = warm; i < packets.size(); ++i) step(i, static_cast<std::int64_t>(i) * 1000);
  g_counting = false;
  EXPECT_EQ(g_allocs, 0);
  EXPECT_EQ(delivered, packets.size() * 10);
  EXPECT_GT(a.counter(LiveCounter::kMessagesRecovered), 0u);
  EXPECT_EQ(a.counter(LiveCounter::kMessagesUnrecoverable), 0u);
}

}  // namespace
}  // namespace pollux::feed
