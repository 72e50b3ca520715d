// Field-by-field decoding of every ITCH 5.0 message type against hand-written bytes.
// Where the RITCH sample has the type, the bytes are copied from it.
#include "itch/messages.h"

#include <gtest/gtest.h>

#include <deque>
#include <string>
#include <vector>

#include "itch/reader.h"
#include "tests/itch/test_util.h"

namespace pollux::itch {
namespace {

using testing::Hex;

// Decodes `bytes` as a single payload and checks it is a T. Views do not own their bytes,
// so the helper keeps every buffer alive for the rest of the test program.
template <class T>
T Decode(std::vector<uint8_t> bytes) {
  static std::deque<std::vector<uint8_t>> keep;
  const std::vector<uint8_t>& kept = keep.emplace_back(std::move(bytes));
  EXPECT_EQ(kept.size(), T::kSize);
  absl::StatusOr<T> v = decode_as<T>(kept);
  EXPECT_TRUE(v.ok()) << v.status();
  return *v;
}

TEST(ItchMessagesTest, SizeTableMatchesSpecForAll23Types) {
  const std::pair<char, size_t> spec[] = {{'S', 12}, {'R', 39}, {'H', 25}, {'Y', 20}, {'L', 26}, {'V', 35},
                                          {'W', 12}, {'K', 28}, {'J', 35}, {'h', 21}, {'A', 36}, {'F', 40},
                                          {'E', 31}, {'C', 36}, {'X', 23}, {'D', 19}, {'U', 35}, {'P', 44},
                                          {'Q', 40}, {'B', 19}, {'I', 50}, {'N', 20}, {'O', 48}};
  ASSERT_EQ(std::size(spec), kMessageTypes.size());
  int known = 0;
  for (int t = 0; t < 256; ++t) {
    if (message_size(static_cast<uint8_t>(t)) != 0) ++known;
  }
  EXPECT_EQ(known, 23);
  for (const auto& [type, size] : spec) {
    EXPECT_EQ(message_size(type), size) << type;
    EXPECT_NE(kMessageTypes.find(type), std::string_view::npos) << type;
    // A payload of exactly that size with that type decodes; one byte less or more fails.
    std::vector<uint8_t> msg(size, 0);
    msg[0] = static_cast<uint8_t>(type);
    EXPECT_TRUE(decode_message(msg).ok()) << type;
    msg.push_back(0);
    EXPECT_FALSE(decode_message(msg).ok()) << type;
    msg.resize(size - 1);
    EXPECT_FALSE(decode_message(msg).ok()) << type;
  }
  EXPECT_EQ(message_size('Z'), 0u);
  EXPECT_EQ(message_size('a'), 0u);
}

TEST(ItchMessagesTest, SystemEventFromSample) {
  const auto m = Decode<SystemEvent>(Hex("53 0000 0000 0a30478f8f96 4f"));
  EXPECT_EQ(m.type(), 'S');
  EXPECT_EQ(m.stock_locate(), 0);
  EXPECT_EQ(m.tracking_number(), 0);
  EXPECT_EQ(m.timestamp(), 0x0a30478f8f96u);
  EXPECT_EQ(m.event_code(), 'O');
}

TEST(ItchMessagesTest, StockDirectoryFromSample) {
  const auto m =
      Decode<StockDirectory>(Hex("52 0001 0000 0a66a2943614 414c432020202020 4e 4e 00000064 4e 41 5a20 50 4e 4e 32 4e "
                                 "00000000 4e"));
  EXPECT_EQ(m.stock_locate(), 1);
  EXPECT_EQ(m.timestamp(), 0x0a66a2943614u);
  EXPECT_EQ(m.stock(), "ALC     ");
  EXPECT_EQ(trim_padding(m.stock()), "ALC");
  EXPECT_EQ(m.market_category(), 'N');
  EXPECT_EQ(m.financial_status_indicator(), 'N');
  EXPECT_EQ(m.round_lot_size(), 100u);
  EXPECT_EQ(m.round_lots_only(), 'N');
  EXPECT_EQ(m.issue_classification(), 'A');
  EXPECT_EQ(m.issue_sub_type(), "Z ");
  EXPECT_EQ(m.authenticity(), 'P');
  EXPECT_EQ(m.short_sale_threshold_indicator(), 'N');
  EXPECT_EQ(m.ipo_flag(), 'N');
  EXPECT_EQ(m.luld_reference_price_tier(), '2');
  EXPECT_EQ(m.etp_flag(), 'N');
  EXPECT_EQ(m.etp_leverage_factor(), 0u);
  EXPECT_EQ(m.inverse_indicator(), 'N');
}

TEST(ItchMessagesTest, StockTradingActionFromSample) {
  const auto m = Decode<StockTradingAction>(Hex("48 0001 0000 0a66ac59a569 414c432020202020 54 20 20202020"));
  EXPECT_EQ(m.stock_locate(), 1);
  EXPECT_EQ(m.timestamp(), 0x0a66ac59a569u);
  EXPECT_EQ(m.stock(), "ALC     ");
  EXPECT_EQ(m.trading_state(), 'T');
  EXPECT_EQ(m.reserved(), ' ');
  EXPECT_EQ(m.reason(), "    ");
}

TEST(ItchMessagesTest, RegShoRestriction) {
  const auto m = Decode<RegShoRestriction>(Hex("59 0005 0007 000000000001 5a5a5a5a20202020 31"));
  EXPECT_EQ(m.stock_locate(), 5);
  EXPECT_EQ(m.tracking_number(), 7);
  EXPECT_EQ(m.timestamp(), 1u);
  EXPECT_EQ(m.stock(), "ZZZZ    ");
  EXPECT_EQ(m.reg_sho_action(), '1');
}

TEST(ItchMessagesTest, MarketParticipantPosition) {
  const auto m = Decode<MarketParticipantPosition>(Hex("4c 0005 0000 000000000002 4e495445 5a5a5a5a20202020 59 4e 41"));
  EXPECT_EQ(m.mpid(), "NITE");
  EXPECT_EQ(m.stock(), "ZZZZ    ");
  EXPECT_EQ(m.primary_market_maker(), 'Y');
  EXPECT_EQ(m.market_maker_mode(), 'N');
  EXPECT_EQ(m.market_participant_state(), 'A');
}

TEST(ItchMessagesTest, MwcbDeclineLevel) {
  const auto m =
      Decode<MwcbDeclineLevel>(Hex("56 0000 0000 000000000003 0000005d21dba000 0000005543df7800 0000004a817c8000"));
  EXPECT_EQ(m.timestamp(), 3u);
  EXPECT_EQ(m.level1(), 0x0000005d21dba000u);  // 4000.00000000
  EXPECT_EQ(m.level2(), 0x0000005543df7800u);
  EXPECT_EQ(m.level3(), 0x0000004a817c8000u);
}

TEST(ItchMessagesTest, MwcbStatus) {
  const auto m = Decode<MwcbStatus>(Hex("57 0000 0000 000000000004 32"));
  EXPECT_EQ(m.breached_level(), '2');
}

TEST(ItchMessagesTest, IpoQuotingPeriodUpdate) {
  const auto m = Decode<IpoQuotingPeriodUpdate>(Hex("4b 0006 0000 000000000005 49504f5820202020 00008ca0 41 000186a0"));
  EXPECT_EQ(m.stock(), "IPOX    ");
  EXPECT_EQ(m.ipo_quotation_release_time(), 36000u);
  EXPECT_EQ(m.ipo_quotation_release_qualifier(), 'A');
  EXPECT_EQ(m.ipo_price(), 100000u);
}

TEST(ItchMessagesTest, LuldAuctionCollar) {
  const auto m =
      Decode<LuldAuctionCollar>(Hex("4a 0006 0000 000000000006 49504f5820202020 000f4240 00102ca0 000e57e0 00000003"));
  EXPECT_EQ(m.stock(), "IPOX    ");
  EXPECT_EQ(m.auction_collar_reference_price(), 1000000u);
  EXPECT_EQ(m.upper_auction_collar_price(), 1060000u);
  EXPECT_EQ(m.lower_auction_collar_price(), 940000u);
  EXPECT_EQ(m.auction_collar_extension(), 3u);
}

TEST(ItchMessagesTest, OperationalHalt) {
  const auto m = Decode<OperationalHalt>(Hex("68 0006 0000 000000000007 49504f5820202020 51 48"));
  EXPECT_EQ(m.type(), 'h');
  EXPECT_EQ(m.stock(), "IPOX    ");
  EXPECT_EQ(m.market_code(), 'Q');
  EXPECT_EQ(m.operational_halt_action(), 'H');
}

TEST(ItchMessagesTest, AddOrder) {
  const auto m =
      Decode<AddOrder>(Hex("41 0002 0003 0a1b2c3d4e5f 0000000000bc614e 42 000003e8 424f422020202020 0000cfaf"));
  EXPECT_EQ(m.stock_locate(), 2);
  EXPECT_EQ(m.tracking_number(), 3);
  EXPECT_EQ(m.timestamp(), 0x0a1b2c3d4e5fu);
  EXPECT_EQ(m.order_reference(), 12345678u);
  EXPECT_EQ(m.side(), 'B');
  EXPECT_EQ(m.shares(), 1000u);
  EXPECT_EQ(m.stock(), "BOB     ");
  EXPECT_EQ(m.price(), 53167u);
}

TEST(ItchMessagesTest, AddOrderMpid) {
  const auto m = Decode<AddOrderMpid>(
      Hex("46 0002 0000 ffffffffffff ffffffffffffffff 53 ffffffff 424f422020202020 7fffffff 4753434f"));
  EXPECT_EQ(m.timestamp(), 0xffffffffffffu);  // 48 bits, no sign extension
  EXPECT_EQ(m.order_reference(), ~uint64_t{0});
  EXPECT_EQ(m.side(), 'S');
  EXPECT_EQ(m.shares(), 0xffffffffu);
  EXPECT_EQ(m.stock(), "BOB     ");
  EXPECT_EQ(m.price(), 0x7fffffffu);
  EXPECT_EQ(m.attribution(), "GSCO");
}

TEST(ItchMessagesTest, OrderExecuted) {
  const auto m = Decode<OrderExecuted>(Hex("45 0001 0009 010203040506 0000000000000064 00000032 0000000000abcdef"));
  EXPECT_EQ(m.stock_locate(), 1);
  EXPECT_EQ(m.tracking_number(), 9);
  EXPECT_EQ(m.timestamp(), 0x010203040506u);
  EXPECT_EQ(m.order_reference(), 100u);
  EXPECT_EQ(m.executed_shares(), 50u);
  EXPECT_EQ(m.match_number(), 0xabcdefu);
}

TEST(ItchMessagesTest, OrderExecutedWithPrice) {
  const auto m = Decode<OrderExecutedWithPrice>(
      Hex("43 0001 0000 010203040506 0000000000000064 00000032 0000000000abcdf0 59 00011170"));
  EXPECT_EQ(m.order_reference(), 100u);
  EXPECT_EQ(m.executed_shares(), 50u);
  EXPECT_EQ(m.match_number(), 0xabcdf0u);
  EXPECT_EQ(m.printable(), 'Y');
  EXPECT_EQ(m.execution_price(), 70000u);
}

TEST(ItchMessagesTest, OrderCancel) {
  const auto m = Decode<OrderCancel>(Hex("58 0003 0000 000000000010 0102030405060708 0000000a"));
  EXPECT_EQ(m.stock_locate(), 3);
  EXPECT_EQ(m.timestamp(), 16u);
  EXPECT_EQ(m.order_reference(), 0x0102030405060708u);
  EXPECT_EQ(m.cancelled_shares(), 10u);
}

TEST(ItchMessagesTest, OrderDelete) {
  const auto m = Decode<OrderDelete>(Hex("44 0003 0000 000000000011 8000000000000001"));
  EXPECT_EQ(m.stock_locate(), 3);
  EXPECT_EQ(m.timestamp(), 17u);
  EXPECT_EQ(m.order_reference(), 0x8000000000000001u);
}

TEST(ItchMessagesTest, OrderReplace) {
  const auto m =
      Decode<OrderReplace>(Hex("55 0004 0000 000000000012 0000000000000064 00000000000000c8 00000064 000186a0"));
  EXPECT_EQ(m.stock_locate(), 4);
  EXPECT_EQ(m.original_order_reference(), 100u);
  EXPECT_EQ(m.new_order_reference(), 200u);
  EXPECT_EQ(m.shares(), 100u);
  EXPECT_EQ(m.price(), 100000u);
}

TEST(ItchMessagesTest, TradeFromSample) {
  const auto m =
      Decode<Trade>(Hex("50 0002 0002 1f1d2a8ff961 0000000000000000 42 000000c8 424f422020202020 0000d055 "
                        "0000000000004bf7"));
  EXPECT_EQ(m.stock_locate(), 2);
  EXPECT_EQ(m.tracking_number(), 2);
  EXPECT_EQ(m.timestamp(), 0x1f1d2a8ff961u);
  EXPECT_EQ(m.order_reference(), 0u);
  EXPECT_EQ(m.side(), 'B');
  EXPECT_EQ(m.shares(), 200u);
  EXPECT_EQ(m.stock(), "BOB     ");
  EXPECT_EQ(m.price(), 53333u);
  EXPECT_EQ(m.match_number(), 19447u);
}

TEST(ItchMessagesTest, CrossTrade) {
  const auto m = Decode<CrossTrade>(
      Hex("51 0007 0000 000000000008 00000000000186a0 4352535320202020 000f4240 0000000000000063 4f"));
  EXPECT_EQ(m.shares(), 100000u);
  EXPECT_EQ(m.stock(), "CRSS    ");
  EXPECT_EQ(m.cross_price(), 1000000u);
  EXPECT_EQ(m.match_number(), 99u);
  EXPECT_EQ(m.cross_type(), 'O');
}

TEST(ItchMessagesTest, BrokenTrade) {
  const auto m = Decode<BrokenTrade>(Hex("42 0000 0000 000000000009 0000000000000063"));
  EXPECT_EQ(m.match_number(), 99u);
}

TEST(ItchMessagesTest, Noii) {
  const auto m =
      Decode<Noii>(Hex("49 0007 0000 00000000000a 0000000000002710 00000000000003e8 42 4352535320202020 "
                       "000f4240 000f4628 000f4434 4f 4c"));
  EXPECT_EQ(m.paired_shares(), 10000u);
  EXPECT_EQ(m.imbalance_shares(), 1000u);
  EXPECT_EQ(m.imbalance_direction(), 'B');
  EXPECT_EQ(m.stock(), "CRSS    ");
  EXPECT_EQ(m.far_price(), 1000000u);
  EXPECT_EQ(m.near_price(), 1001000u);
  EXPECT_EQ(m.current_reference_price(), 1000500u);
  EXPECT_EQ(m.cross_type(), 'O');
  EXPECT_EQ(m.price_variation_indicator(), 'L');
}

TEST(ItchMessagesTest, RetailPriceImprovement) {
  const auto m = Decode<RetailPriceImprovement>(Hex("4e 0007 0000 00000000000b 4352535320202020 41"));
  EXPECT_EQ(m.stock(), "CRSS    ");
  EXPECT_EQ(m.interest_flag(), 'A');
}

TEST(ItchMessagesTest, DirectListingPriceDiscovery) {
  const auto m = Decode<DirectListingPriceDiscovery>(
      Hex("4f 0008 0000 00000000000c 444c535420202020 59 000f4240 001e8480 00155cc0 "
          "00001f6a2ac9ec00 000e4e1c 00162e90"));
  EXPECT_EQ(m.stock(), "DLST    ");
  EXPECT_EQ(m.open_eligibility_status(), 'Y');
  EXPECT_EQ(m.minimum_allowable_price(), 1000000u);
  EXPECT_EQ(m.maximum_allowable_price(), 2000000u);
  EXPECT_EQ(m.near_execution_price(), 1400000u);
  EXPECT_EQ(m.near_execution_time(), 0x00001f6a2ac9ec00u);
  EXPECT_EQ(m.lower_price_range_collar(), 937500u);
  EXPECT_EQ(m.upper_price_range_collar(), 1453712u);
}

TEST(ItchMessagesTest, DispatchCallsOnlyTheMatchingOverload) {
  struct Visitor {
    int adds = 0;
    int deletes = 0;
    uint64_t last_ref = 0;
    void operator()(const AddOrder& a) {
      ++adds;
      last_ref = a.order_reference();
    }
    void operator()(const OrderDelete& d) {
      ++deletes;
      last_ref = d.order_reference();
    }
  } v;
  const std::vector<uint8_t> add =
      Hex("41 0002 0003 0a1b2c3d4e5f 0000000000bc614e 42 000003e8 424f422020202020 0000cfaf");
  const std::vector<uint8_t> del = Hex("44 0003 0000 000000000011 0000000000000007");
  const std::vector<uint8_t> sys = Hex("53 0000 0000 0a30478f8f96 4f");
  dispatch(*decode_message(add), v);
  EXPECT_EQ(v.last_ref, 12345678u);
  dispatch(*decode_message(del), v);
  dispatch(*decode_message(sys), v);  // no overload: ignored
  EXPECT_EQ(v.adds, 1);
  EXPECT_EQ(v.deletes, 1);
  EXPECT_EQ(v.last_ref, 7u);

  // Lambdas combined with Overloaded.
  int adds = 0, deletes = 0;
  const auto lambdas = Overloaded{[&](const AddOrder&) { ++adds; }, [&](const OrderDelete&) { ++deletes; }};
  dispatch(*decode_message(add), lambdas);
  dispatch(*decode_message(sys), lambdas);
  EXPECT_EQ(adds, 1);
  EXPECT_EQ(deletes, 0);

  // A generic lambda sees every type.
  std::string seen;
  auto all = [&seen](auto m) { seen.push_back(m.type()); };
  dispatch(*decode_message(add), all);
  dispatch(*decode_message(sys), all);
  EXPECT_EQ(seen, "AS");
}

TEST(ItchMessagesTest, DecodeAsRejectsOtherType) {
  const std::vector<uint8_t> del = Hex("44 0003 0000 000000000011 0000000000000007");
  absl::StatusOr<AddOrder> a = decode_as<AddOrder>(del);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().message(), "itch: offset 0: message type 'D' where 'A' was expected");
}

TEST(ItchMessagesTest, TrimPadding) {
  EXPECT_EQ(trim_padding("ALC     "), "ALC");
  EXPECT_EQ(trim_padding("ABCDEFGH"), "ABCDEFGH");
  EXPECT_EQ(trim_padding("        "), "");
  EXPECT_EQ(trim_padding(""), "");
}

}  // namespace
}  // namespace pollux::itch
