// Zero-copy views of the 23 NASDAQ TotalView-ITCH 5.0 message types.
//
// A view is one `const uint8_t*` pointing at the message type byte; every accessor does a
// big-endian load at the field's offset from the ITCH 5.0 specification (section 1.3 and
// 4.x). Views never copy and never validate: build them through the reader (reader.h),
// which checks type and size first, or from a MessageView whose type() you switched on.
//
// Conventions (from the spec): prices are uint32 with 4 implied decimals (price() ==
// 1234500 means $123.45), except the MWCB levels (V), which are uint64 with 8 decimals;
// stock symbols are 8 bytes, left-justified and space-padded (trim_padding() strips them);
// timestamps are nanoseconds since midnight.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>

#include "itch/endian.h"

namespace pollux::itch {

// Every type letter of ITCH 5.0, in specification order.
inline constexpr std::string_view kMessageTypes = "SRHYLVWKJhAFECXDUPQBINO";

// Bytes before the type-specific fields: type, stock locate, tracking number, timestamp.
inline constexpr size_t kHeaderSize = 11;
inline constexpr size_t kMaxMessageSize = 50;  // 'I', the NOII message
inline constexpr size_t kStockSize = 8;

namespace detail {
inline constexpr std::array<uint8_t, 256> kMessageSizes = [] {
  std::array<uint8_t, 256> s{};
  s['S'] = 12;
  s['R'] = 39;
  s['H'] = 25;
  s['Y'] = 20;
  s['L'] = 26;
  s['V'] = 35;
  s['W'] = 12;
  s['K'] = 28;
  s['J'] = 35;
  s['h'] = 21;
  s['A'] = 36;
  s['F'] = 40;
  s['E'] = 31;
  s['C'] = 36;
  s['X'] = 23;
  s['D'] = 19;
  s['U'] = 35;
  s['P'] = 44;
  s['Q'] = 40;
  s['B'] = 19;
  s['I'] = 50;
  s['N'] = 20;
  s['O'] = 48;
  return s;
}();
}  // namespace detail

// Size of a message of type `type` without the BinaryFILE length prefix; 0 if `type` is
// not an ITCH 5.0 message type. A table lookup, so it is cheap on the framing hot path.
[[nodiscard]] constexpr size_t message_size(uint8_t type) noexcept { return detail::kMessageSizes[type]; }
[[nodiscard]] constexpr size_t message_size(char type) noexcept { return message_size(static_cast<uint8_t>(type)); }

// Strips the trailing spaces ITCH uses to pad alpha fields such as the stock symbol.
[[nodiscard]] constexpr std::string_view trim_padding(std::string_view s) noexcept {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\0')) s.remove_suffix(1);
  return s;
}

// A validated message of any type: what the framing layer hands out. Switch on type() and
// convert with As<T>(), or let dispatch() (below) do the switch.
class MessageView {
 public:
  constexpr MessageView() noexcept = default;
  constexpr MessageView(const uint8_t* data, size_t size) noexcept : data_(data), size_(static_cast<uint32_t>(size)) {}

  [[nodiscard]] char type() const noexcept { return static_cast<char>(data_[0]); }
  [[nodiscard]] uint8_t type_byte() const noexcept { return data_[0]; }
  [[nodiscard]] const uint8_t* data() const noexcept { return data_; }
  [[nodiscard]] size_t size() const noexcept { return size_; }
  [[nodiscard]] std::span<const uint8_t> bytes() const noexcept { return {data_, size_}; }

  // Every ITCH 5.0 message starts with these three fields.
  [[nodiscard]] uint16_t stock_locate() const noexcept { return load_be16(data_ + 1); }
  [[nodiscard]] uint16_t tracking_number() const noexcept { return load_be16(data_ + 3); }
  [[nodiscard]] uint64_t timestamp() const noexcept { return load_be48(data_ + 5); }

  // The typed view. Precondition: type() == T::kType (not checked: this is the hot path).
  template <class T>
  [[nodiscard]] T as() const noexcept {
    return T(data_);
  }

 private:
  const uint8_t* data_ = nullptr;
  uint32_t size_ = 0;
};

namespace detail {

// Common header fields and typed field loads shared by every typed view.
class ViewBase {
 public:
  constexpr explicit ViewBase(const uint8_t* data) noexcept : data_(data) {}

  [[nodiscard]] const uint8_t* data() const noexcept { return data_; }
  [[nodiscard]] char type() const noexcept { return static_cast<char>(data_[0]); }
  [[nodiscard]] uint16_t stock_locate() const noexcept { return load_be16(data_ + 1); }
  [[nodiscard]] uint16_t tracking_number() const noexcept { return load_be16(data_ + 3); }
  [[nodiscard]] uint64_t timestamp() const noexcept { return load_be48(data_ + 5); }

 protected:
  [[nodiscard]] char char_at(size_t off) const noexcept { return static_cast<char>(data_[off]); }
  [[nodiscard]] uint16_t u16(size_t off) const noexcept { return load_be16(data_ + off); }
  [[nodiscard]] uint32_t u32(size_t off) const noexcept { return load_be32(data_ + off); }
  [[nodiscard]] uint64_t u64(size_t off) const noexcept { return load_be64(data_ + off); }
  [[nodiscard]] std::string_view alpha(size_t off, size_t n) const noexcept {
    return {reinterpret_cast<const char*>(data_ + off), n};
  }

 private:
  const uint8_t* data_;
};

}  // namespace detail

// Each view declares kType and kSize (wire size without the length prefix) so generic
// code and static_asserts can check the table above against the field layout.
#define POLLUX_ITCH_VIEW(Name, letter, bytes) \
  static constexpr char kType = letter;       \
  static constexpr size_t kSize = bytes;      \
  constexpr explicit Name(const uint8_t* data) noexcept : ViewBase(data) {}

// 'S' System Event (4.1).
class SystemEvent : public detail::ViewBase {
 public:
  POLLUX_ITCH_VIEW(SystemEvent, 'S', 12)
  // 'O' start of messages, 'S' start of system hours, 'Q' start of market hours,
  // 'M' end of market hours, 'E' end of system hours, 'C' end of messages.
  [[nodiscard]] char event_code() const noexcept { return char_at(11); }
};

// 'R' Stock Directory (4.2.1).
class StockDirectory : public detail::ViewBase {
 public:
  POLLUX_ITCH_VIEW(StockDirectory, 'R', 39)
  [[nodiscard]] std::string_view stock() const noexcept { return alpha(11, 8); }
  [[nodiscard]] char market_category() const noexcept { return char_at(19); }
  [[nodiscard]] char financial_status_indicator() const noexcept { return char_at(20); }
  [[nodiscard]] uint32_t round_lot_size() const noexcept { return u32(21); }
  [[nodiscard]] char round_lots_only() const noexcept { return char_at(25); }
  [[nodiscard]] char issue_classification() const noexcept { return char_at(26); }
  [[nodiscard]] std::string_view issue_sub_type() const noexcept { return alpha(27, 2); }
  [[nodiscard]] char authenticity() const noexcept { return char_at(29); }
  [[nodiscard]] char short_sale_threshold_indicator() const noexcept { return char_at(30); }
  [[nodiscard]] char ipo_flag() const noexcept { return char_at(31); }
  [[nodiscard]] char luld_reference_price_tier() const noexcept { return char_at(32); }
  [[nodiscard]] char etp_flag() const noexcept { return char_at(33); }
  [[nodiscard]] uint32_t etp_leverage_factor() const noexcept { return u32(34); }
  [[nodiscard]] char inverse_indicator() const noexcept { return char_at(38); }
};

// 'H' Stock Trading Action (4.2.2).
class StockTradingAction : public detail::ViewBase {
 public:
  POLLUX_ITCH_VIEW(StockTradingAction, 'H', 25)
  [[nodiscard]] std::string_view stock() const noexcept { return alpha(11, 8); }
  // 'H' halted, 'P' paused, 'Q' quotation only, 'T' trading.
  [[nodiscard]] char trading_state() const noexcept { return char_at(19); }
  [[nodiscard]] char reserved() const noexcept { return char_at(20); }
  [[nodiscard]] std::string_view reason() const noexcept { return alpha(21, 4); }
};

// 'Y' Reg SHO Short Sale Price Test Restricted Indicator (4.2.3).
class RegShoRestriction : public detail::ViewBase {
 public:
  POLLUX_ITCH_VIEW(RegShoRestriction, 'Y', 20)
  [[nodiscard]] std::string_view stock() const noexcept { return alpha(11, 8); }
  [[nodiscard]] char reg_sho_action() const noexcept { return char_at(19); }
};

// 'L' Market Participant Position (4.2.4).
class MarketParticipantPosition : public detail::ViewBase {
 public:
  POLLUX_ITCH_VIEW(MarketParticipantPosition, 'L', 26)
  [[nodiscard]] std::string_view mpid() const noexcept { return alpha(11, 4); }
  [[nodiscard]] std::string_view stock() const noexcept { return alpha(15, 8); }
  [[nodiscard]] char primary_market_maker() const noexcept { return char_at(23); }
  [[nodiscard]] char market_maker_mode() const noexcept { return char_at(24); }
  [[nodiscard]] char market_participant_state() const noexcept { return char_at(25); }
};

// 'V' MWCB Decline Level (4.2.5.1). Levels are uint64 with 8 implied decimals.
class MwcbDeclineLevel : public detail::ViewBase {
 public:
  POLLUX_ITCH_VIEW(MwcbDeclineLevel, 'V', 35)
  [[nodiscard]] uint64_t level1() const noexcept { return u64(11); }
  [[nodiscard]] uint64_t level2() const noexcept { return u64(19); }
  [[nodiscard]] uint64_t level3() const noexcept { return u64(27); }
};

// 'W' MWCB Status (4.2.5.2).
class MwcbStatus : public detail::ViewBase {
 public:
  POLLUX_ITCH_VIEW(MwcbStatus, 'W', 12)
  [[nodiscard]] char breached_level() const noexcept { return char_at(11); }
};

// 'K' IPO Quoting Period Update (4.2.6).
class IpoQuotingPeriodUpdate : public detail::ViewBase {
 public:
  POLLUX_ITCH_VIEW(IpoQuotingPeriodUpdate, 'K', 28)
  [[nodiscard]] std::string_view stock() const noexcept { return alpha(11, 8); }
  // Seconds since midnight.
  [[nodiscard]] uint32_t ipo_quotation_release_time() const noexcept { return u32(19); }
  [[nodiscard]] char ipo_quotation_release_qualifier() const noexcept { return char_at(23); }
  [[nodiscard]] uint32_t ipo_price() const noexcept { return u32(24); }
};

// 'J' LULD Auction Collar (4.2.7).
class LuldAuctionCollar : public detail::ViewBase {
 public:
  POLLUX_ITCH_VIEW(LuldAuctionCollar, 'J', 35)
  [[nodiscard]] std::string_view stock() const noexcept { return alpha(11, 8); }
  [[nodiscard]] uint32_t auction_collar_reference_price() const noexcept { return u32(19); }
  [[nodiscard]] uint32_t upper_auction_collar_price() const noexcept { return u32(23); }
  [[nodiscard]] uint32_t lower_auction_collar_price() const noexcept { return u32(27); }
  [[nodiscard]] uint32_t auction_collar_extension() const noexcept { return u32(31); }
};

// 'h' Operational Halt (4.2.8).
class OperationalHalt : public detail::ViewBase {
 public:
  POLLUX_ITCH_VIEW(OperationalHalt, 'h', 21)
  [[nodiscard]] std::string_view stock() const noexcept { return alpha(11, 8); }
  [[nodiscard]] char market_code() const noexcept { return char_at(19); }
  [[nodiscard]] char operational_halt_action() const noexcept { return char_at(20); }
};

// 'A' Add Order, no MPID attribution (4.3.1).
class AddOrder : public detail::ViewBase {
 public:
  POLLUX_ITCH_VIEW(AddOrder, 'A', 36)
  [[nodiscard]] uint64_t order_reference() const noexcept { return u64(11); }
  // 'B' buy, 'S' sell.
  [[nodiscard]] char side() const noexcept { return char_at(19); }
  [[nodiscard]] uint32_t shares() const noexcept { return u32(20); }
  [[nodiscard]] std::string_view stock() const noexcept { return alpha(24, 8); }
  [[nodiscard]] uint32_t price() const noexcept { return u32(32); }
};

// 'F' Add Order with MPID attribution (4.3.2): an 'A' plus the attribution.
class AddOrderMpid : public detail::ViewBase {
 public:
  POLLUX_ITCH_VIEW(AddOrderMpid, 'F', 40)
  [[nodiscard]] uint64_t order_reference() const noexcept { return u64(11); }
  [[nodiscard]] char side() const noexcept { return char_at(19); }
  [[nodiscard]] uint32_t shares() const noexcept { return u32(20); }
  [[nodiscard]] std::string_view stock() const noexcept { return alpha(24, 8); }
  [[nodiscard]] uint32_t price() const noexcept { return u32(32); }
  [[nodiscard]] std::string_view attribution() const noexcept { return alpha(36, 4); }
};

// 'E' Order Executed (4.4.1): executed at the order's displayed price.
class OrderExecuted : public detail::ViewBase {
 public:
  POLLUX_ITCH_VIEW(OrderExecuted, 'E', 31)
  [[nodiscard]] uint64_t order_reference() const noexcept { return u64(11); }
  [[nodiscard]] uint32_t executed_shares() const noexcept { return u32(19); }
  [[nodiscard]] uint64_t match_number() const noexcept { return u64(23); }
};

// 'C' Order Executed With Price (4.4.2): executed at a price other than the displayed one.
class OrderExecutedWithPrice : public detail::ViewBase {
 public:
  POLLUX_ITCH_VIEW(OrderExecutedWithPrice, 'C', 36)
  [[nodiscard]] uint64_t order_reference() const noexcept { return u64(11); }
  [[nodiscard]] uint32_t executed_shares() const noexcept { return u32(19); }
  [[nodiscard]] uint64_t match_number() const noexcept { return u64(23); }
  [[nodiscard]] char printable() const noexcept { return char_at(31); }
  [[nodiscard]] uint32_t execution_price() const noexcept { return u32(32); }
};

// 'X' Order Cancel (4.4.3): partial cancellation.
class OrderCancel : public detail::ViewBase {
 public:
  POLLUX_ITCH_VIEW(OrderCancel, 'X', 23)
  [[nodiscard]] uint64_t order_reference() const noexcept { return u64(11); }
  [[nodiscard]] uint32_t cancelled_shares() const noexcept { return u32(19); }
};

// 'D' Order Delete (4.4.4).
class OrderDelete : public detail::ViewBase {
 public:
  POLLUX_ITCH_VIEW(OrderDelete, 'D', 19)
  [[nodiscard]] uint64_t order_reference() const noexcept { return u64(11); }
};

// 'U' Order Replace (4.4.5): cancel-replace under a new reference, same side.
class OrderReplace : public detail::ViewBase {
 public:
  POLLUX_ITCH_VIEW(OrderReplace, 'U', 35)
  [[nodiscard]] uint64_t original_order_reference() const noexcept { return u64(11); }
  [[nodiscard]] uint64_t new_order_reference() const noexcept { return u64(19); }
  [[nodiscard]] uint32_t shares() const noexcept { return u32(27); }
  [[nodiscard]] uint32_t price() const noexcept { return u32(31); }
};

// 'P' Trade, non-cross (4.5.1): execution of a non-displayed order.
class Trade : public detail::ViewBase {
 public:
  POLLUX_ITCH_VIEW(Trade, 'P', 44)
  [[nodiscard]] uint64_t order_reference() const noexcept { return u64(11); }
  [[nodiscard]] char side() const noexcept { return char_at(19); }
  [[nodiscard]] uint32_t shares() const noexcept { return u32(20); }
  [[nodiscard]] std::string_view stock() const noexcept { return alpha(24, 8); }
  [[nodiscard]] uint32_t price() const noexcept { return u32(32); }
  [[nodiscard]] uint64_t match_number() const noexcept { return u64(36); }
};

// 'Q' Cross Trade (4.5.2).
class CrossTrade : public detail::ViewBase {
 public:
  POLLUX_ITCH_VIEW(CrossTrade, 'Q', 40)
  [[nodiscard]] uint64_t shares() const noexcept { return u64(11); }
  [[nodiscard]] std::string_view stock() const noexcept { return alpha(19, 8); }
  [[nodiscard]] uint32_t cross_price() const noexcept { return u32(27); }
  [[nodiscard]] uint64_t match_number() const noexcept { return u64(31); }
  [[nodiscard]] char cross_type() const noexcept { return char_at(39); }
};

// 'B' Broken Trade / Order Execution (4.5.3).
class BrokenTrade : public detail::ViewBase {
 public:
  POLLUX_ITCH_VIEW(BrokenTrade, 'B', 19)
  [[nodiscard]] uint64_t match_number() const noexcept { return u64(11); }
};

// 'I' Net Order Imbalance Indicator (4.6).
class Noii : public detail::ViewBase {
 public:
  POLLUX_ITCH_VIEW(Noii, 'I', 50)
  [[nodiscard]] uint64_t paired_shares() const noexcept { return u64(11); }
  [[nodiscard]] uint64_t imbalance_shares() const noexcept { return u64(19); }
  [[nodiscard]] char imbalance_direction() const noexcept { return char_at(27); }
  [[nodiscard]] std::string_view stock() const noexcept { return alpha(28, 8); }
  [[nodiscard]] uint32_t far_price() const noexcept { return u32(36); }
  [[nodiscard]] uint32_t near_price() const noexcept { return u32(40); }
  [[nodiscard]] uint32_t current_reference_price() const noexcept { return u32(44); }
  [[nodiscard]] char cross_type() const noexcept { return char_at(48); }
  [[nodiscard]] char price_variation_indicator() const noexcept { return char_at(49); }
};

// 'N' Retail Price Improvement Indicator (4.7).
class RetailPriceImprovement : public detail::ViewBase {
 public:
  POLLUX_ITCH_VIEW(RetailPriceImprovement, 'N', 20)
  [[nodiscard]] std::string_view stock() const noexcept { return alpha(11, 8); }
  [[nodiscard]] char interest_flag() const noexcept { return char_at(19); }
};

// 'O' Direct Listing with Capital Raise Price Discovery (4.8).
class DirectListingPriceDiscovery : public detail::ViewBase {
 public:
  POLLUX_ITCH_VIEW(DirectListingPriceDiscovery, 'O', 48)
  [[nodiscard]] std::string_view stock() const noexcept { return alpha(11, 8); }
  [[nodiscard]] char open_eligibility_status() const noexcept { return char_at(19); }
  [[nodiscard]] uint32_t minimum_allowable_price() const noexcept { return u32(20); }
  [[nodiscard]] uint32_t maximum_allowable_price() const noexcept { return u32(24); }
  [[nodiscard]] uint32_t near_execution_price() const noexcept { return u32(28); }
  [[nodiscard]] uint64_t near_execution_time() const noexcept { return u64(32); }
  [[nodiscard]] uint32_t lower_price_range_collar() const noexcept { return u32(40); }
  [[nodiscard]] uint32_t upper_price_range_collar() const noexcept { return u32(44); }
};

#undef POLLUX_ITCH_VIEW

// All typed views, in kMessageTypes order.
template <class... T>
struct ViewList {};
using AllViews =
    ViewList<SystemEvent, StockDirectory, StockTradingAction, RegShoRestriction, MarketParticipantPosition,
             MwcbDeclineLevel, MwcbStatus, IpoQuotingPeriodUpdate, LuldAuctionCollar, OperationalHalt, AddOrder,
             AddOrderMpid, OrderExecuted, OrderExecutedWithPrice, OrderCancel, OrderDelete, OrderReplace, Trade,
             CrossTrade, BrokenTrade, Noii, RetailPriceImprovement, DirectListingPriceDiscovery>;

namespace detail {
template <class... T>
constexpr bool views_match_table(ViewList<T...>) {
  return ((sizeof...(T) == kMessageTypes.size()) && ... &&
          (message_size(T::kType) == T::kSize && sizeof(T) == sizeof(const uint8_t*)));
}
static_assert(views_match_table(AllViews{}), "view kSize disagrees with the size table");

template <class T, class V>
inline void call_if_invocable(V& v, const uint8_t* p) {
  if constexpr (std::is_invocable_v<V&, T>) v(T(p));
}
}  // namespace detail

// Builds a visitor from lambdas: dispatch(m, Overloaded{[](const AddOrder&) {...}, ...}).
template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

// Calls `v(TypedView)` for the message's type if `v` accepts that view type; types it
// does not accept are ignored, so a visitor can handle just the messages it cares about
// (an overload set of lambdas, or a class with operator() overloads). Precondition: `m`
// came from the reader, i.e. its type is valid.
template <class Visitor>
inline void dispatch(MessageView m, Visitor&& v) {
  const uint8_t* p = m.data();
  switch (m.type()) {
    case 'S':
      detail::call_if_invocable<SystemEvent>(v, p);
      break;
    case 'R':
      detail::call_if_invocable<StockDirectory>(v, p);
      break;
    case 'H':
      detail::call_if_invocable<StockTradingAction>(v, p);
      break;
    case 'Y':
      detail::call_if_invocable<RegShoRestriction>(v, p);
      break;
    case 'L':
      detail::call_if_invocable<MarketParticipantPosition>(v, p);
      break;
    case 'V':
      detail::call_if_invocable<MwcbDeclineLevel>(v, p);
      break;
    case 'W':
      detail::call_if_invocable<MwcbStatus>(v, p);
      break;
    case 'K':
      detail::call_if_invocable<IpoQuotingPeriodUpdate>(v, p);
      break;
    case 'J':
      detail::call_if_invocable<LuldAuctionCollar>(v, p);
      break;
    case 'h':
      detail::call_if_invocable<OperationalHalt>(v, p);
      break;
    case 'A':
      detail::call_if_invocable<AddOrder>(v, p);
      break;
    case 'F':
      detail::call_if_invocable<AddOrderMpid>(v, p);
      break;
    case 'E':
      detail::call_if_invocable<OrderExecuted>(v, p);
      break;
    case 'C':
      detail::call_if_invocable<OrderExecutedWithPrice>(v, p);
      break;
    case 'X':
      detail::call_if_invocable<OrderCancel>(v, p);
      break;
    case 'D':
      detail::call_if_invocable<OrderDelete>(v, p);
      break;
    case 'U':
      detail::call_if_invocable<OrderReplace>(v, p);
      break;
    case 'P':
      detail::call_if_invocable<Trade>(v, p);
      break;
    case 'Q':
      detail::call_if_invocable<CrossTrade>(v, p);
      break;
    case 'B':
      detail::call_if_invocable<BrokenTrade>(v, p);
      break;
    case 'I':
      detail::call_if_invocable<Noii>(v, p);
      break;
    case 'N':
      detail::call_if_invocable<RetailPriceImprovement>(v, p);
      break;
    case 'O':
      detail::call_if_invocable<DirectListingPriceDiscovery>(v, p);
      break;
    default:
      break;  // unreachable for validated messages
  }
}

}  // namespace pollux::itch
