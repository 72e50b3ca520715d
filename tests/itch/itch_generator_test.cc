// The synthetic generator: determinism, framing variants, option validation, and the
// invariants the order flow promises (see itch/generator.h).
#include "itch/generator.h"

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "itch/book_set.h"
#include "itch/reader.h"
#include "tests/itch/test_util.h"

namespace pollux::itch {
namespace {

using testing::GenOptions;

TEST(ItchGeneratorTest, SameSeedSameBytesOtherSeedOtherBytes) {
  const std::vector<uint8_t> a = *generate_itch(GenOptions(5, 20'000, 1));
  const std::vector<uint8_t> b = *generate_itch(GenOptions(5, 20'000, 1));
  const std::vector<uint8_t> c = *generate_itch(GenOptions(5, 20'000, 2));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(ItchGeneratorTest, ZeroLengthFramingCarriesTheSameMessages) {
  GeneratorOptions o = GenOptions(4, 10'000, 3);
  const std::vector<uint8_t> real = *generate_itch(o);
  o.framing = Framing::kZeroLengthPrefix;
  const std::vector<uint8_t> zero = *generate_itch(o);
  ASSERT_EQ(real.size(), zero.size());
  std::vector<std::vector<uint8_t>> msgs[2];
  int i = 0;
  for (const auto* buf : {&real, &zero}) {
    ASSERT_TRUE(
        for_each_message(*buf, [&](MessageView m) { msgs[i].emplace_back(m.data(), m.data() + m.size()); }).ok());
    ++i;
  }
  EXPECT_EQ(msgs[0], msgs[1]);
  EXPECT_EQ(msgs[0].size(), o.messages);
  EXPECT_EQ(zero[0], 0);
  EXPECT_EQ(zero[1], 0);
  EXPECT_EQ(real[1], 12);  // S is first: length 12
}

TEST(ItchGeneratorTest, RejectsBadOptions) {
  EXPECT_FALSE(generate_itch(GenOptions(0, 100, 1)).ok());
  EXPECT_FALSE(generate_itch(GenOptions(70'000, 1'000'000, 1)).ok());
  absl::StatusOr<std::vector<uint8_t>> r = generate_itch(GenOptions(8, 21, 1));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "itch generator: messages must be at least 22 for 8 symbols (S x 6 + R and H per "
            "symbol), got 21");
  EXPECT_EQ(generate_itch(GenOptions(8, 22, 1))->size(), 6u * 14 + 8u * (41 + 27));
}

// Replays a stream and checks, message by message, what the generator promises.
TEST(ItchGeneratorTest, FlowInvariantsHold) {
  const GeneratorOptions o = GenOptions(12, 150'000, 77);
  const std::vector<uint8_t> bytes = *generate_itch(o);
  const std::vector<std::string> names = generated_symbols(o.symbols, o.seed);
  ASSERT_EQ(names.size(), o.symbols);
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size());

  BookSet books;
  uint64_t last_ts = 0;
  uint64_t last_ref = 0;
  uint64_t last_match = 0;
  uint64_t decreasing_ts = 0, non_increasing_ref = 0, crossed = 0, bad_locate = 0;
  std::string system_events;
  ParseResult r = for_each_message(bytes, [&](MessageView m) {
    if (m.timestamp() < last_ts) ++decreasing_ts;
    last_ts = m.timestamp();
    uint64_t new_ref = 0;
    uint64_t match = 0;
    dispatch(m, Overloaded{[&](const SystemEvent& e) { system_events.push_back(e.event_code()); },
                           [&](const StockDirectory& d) {
                             if (trim_padding(d.stock()) != names[d.stock_locate() - 1]) ++bad_locate;
                           },
                           [&](const OrderReplace& u) { new_ref = u.new_order_reference(); },
                           // The other adds' new reference, and the executions' and trades' match number.
                           [&]<class T>([[maybe_unused]] const T& v) {
                             if constexpr (std::is_same_v<T, AddOrder> || std::is_same_v<T, AddOrderMpid>) {
                               new_ref = v.order_reference();
                             } else if constexpr (std::is_same_v<T, OrderExecuted> ||
                                                  std::is_same_v<T, OrderExecutedWithPrice> ||
                                                  std::is_same_v<T, Trade>) {
                               match = v.match_number();
                             }
                           }});
    if (new_ref != 0) {
      if (new_ref <= last_ref) ++non_increasing_ref;
      last_ref = new_ref;
    }
    if (match != 0) {
      EXPECT_EQ(match, last_match + 1);
      last_match = match;
    }
    if (m.stock_locate() > o.symbols) ++bad_locate;
    books.apply(m);
    if (const OrderBook* b = books.book(m.stock_locate()); b != nullptr && b->crossed()) ++crossed;
  });
  ASSERT_TRUE(r.ok()) << r.to_status();
  EXPECT_EQ(r.messages, o.messages);
  EXPECT_EQ(system_events, "OSQMEC");
  EXPECT_EQ(decreasing_ts, 0u);
  EXPECT_EQ(non_increasing_ref, 0u);
  EXPECT_EQ(crossed, 0u);  // limit orders arrive behind the opposite best
  EXPECT_EQ(bad_locate, 0u);
  const BookStats& s = books.stats();
  EXPECT_EQ(s.unknown_execute + s.unknown_cancel + s.unknown_delete + s.unknown_replace, 0u);
  EXPECT_EQ(s.duplicate_add + s.overfill + s.bad_side + s.level_mismatch, 0u);
  // The mix: adds ~40%, deletes ~30%, the rest a few % each.
  const MessageCounts& c = books.counts();
  const double n = static_cast<double>(o.messages);
  EXPECT_NEAR((c['A'] + c['F']) / n, 0.42, 0.05);
  EXPECT_NEAR(c['D'] / n, 0.32, 0.05);
  for (const char type : {'E', 'C', 'X', 'U', 'P', 'F'}) EXPECT_GT(c[type], 0u) << type;
  EXPECT_EQ(c['R'], o.symbols);
  EXPECT_EQ(c['H'], o.symbols);
}

TEST(ItchGeneratorTest, WriteBinaryFileRoundTrips) {
  const std::vector<uint8_t> bytes = *generate_itch(GenOptions(2, 1000, 9));
  const std::string path = ::testing::TempDir() + "/gen.itch";
  ASSERT_TRUE(write_binary_file(path, bytes).ok());
  absl::StatusOr<Reader> r = Reader::open(path);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), r->data().begin(), r->data().end()));
  EXPECT_FALSE(write_binary_file("/nonexistent-dir/gen.itch", bytes).ok());
}

// pollux-itch-gen's command line (examples/common/absl_flags_cli.h): --help exits 0 and lists the flags,
// unknown flags and stray arguments are refused with exit 64 before anything is written.
using testing::Cli;
Cli RunGen(const std::string& args) { return testing::RunProgram(POLLUX_ITCH_GEN_BIN, args); }

TEST(ItchGeneratorCliTest, HelpUnknownFlagsAndStrayArguments) {
  for (const char* help : {"--help", "-h"}) {
    const Cli h = RunGen(help);
    EXPECT_EQ(h.rc, 0) << h.out;
    for (const char* flag :
         {"--out", "--symbols", "--messages", "--seed", "--zero_length_prefix", "--orders_per_symbol"}) {
      EXPECT_NE(h.out.find(flag), std::string::npos) << flag << "\n" << h.out;
    }
  }
  const Cli bogus = RunGen("--bogus");
  EXPECT_EQ(bogus.rc, 64);
  EXPECT_NE(bogus.out.find("unknown flag '--bogus'"), std::string::npos) << bogus.out;
  const Cli typo = RunGen("--mesages 10");
  EXPECT_EQ(typo.rc, 64);
  EXPECT_NE(typo.out.find("did you mean '--messages'?"), std::string::npos) << typo.out;
  const std::string out = ::testing::TempDir() + "/itch_gen_cli_" + std::to_string(getpid()) + ".itch";
  const Cli stray = RunGen("--out " + out + " --messages 100 extra");
  EXPECT_EQ(stray.rc, 64) << stray.out;
  EXPECT_NE(stray.out.find("unexpected argument 'extra'"), std::string::npos) << stray.out;
  EXPECT_FALSE(std::ifstream(out).good()) << "wrote a file despite the stray argument";
  const Cli ok = RunGen("--out " + out + " --messages 100 --symbols 3");
  EXPECT_EQ(ok.rc, 0) << ok.out;
  EXPECT_TRUE(std::ifstream(out).good());
  std::remove(out.c_str());
}

}  // namespace
}  // namespace pollux::itch
