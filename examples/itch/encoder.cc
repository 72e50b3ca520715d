#include "itch/encoder.h"

#include <algorithm>
#include <cstring>

#include "itch/endian.h"
#include "itch/messages.h"

namespace pollux::itch {
namespace {

void put_alpha(uint8_t* p, std::string_view s, size_t width) {
  const size_t n = std::min(s.size(), width);
  std::memcpy(p, s.data(), n);
  std::memset(p + n, ' ', width - n);
}

// Bytes 11-35 of an Add Order ('A'), an Add Order with MPID ('F') and a Trade ('P'): the three
// lay out the order the same way.
void put_order(uint8_t* p, uint64_t order_reference, char side, uint32_t shares, std::string_view stock,
               uint32_t price) {
  store_be64(p + 11, order_reference);
  p[19] = static_cast<uint8_t>(side);
  store_be32(p + 20, shares);
  put_alpha(p + 24, stock, 8);
  store_be32(p + 32, price);
}

// Bytes 11-30 of an Order Executed ('E') and an Order Executed With Price ('C').
void put_execution(uint8_t* p, uint64_t order_reference, uint32_t shares, uint64_t match_number) {
  store_be64(p + 11, order_reference);
  store_be32(p + 19, shares);
  store_be64(p + 23, match_number);
}

}  // namespace

uint8_t* Encoder::begin(char type, const Header& h) {
  const size_t size = message_size(type);
  const size_t prefix = framing_ == Framing::kNone ? 0 : 2;
  const size_t at = out_->size();
  out_->resize(at + prefix + size);
  uint8_t* p = out_->data() + at;
  if (prefix != 0) {
    store_be16(p, framing_ == Framing::kLengthPrefix ? static_cast<uint16_t>(size) : 0);
    p += prefix;
  }
  p[0] = static_cast<uint8_t>(type);
  store_be16(p + 1, h.stock_locate);
  store_be16(p + 3, h.tracking_number);
  store_be48(p + 5, h.timestamp);
  return p;
}

void Encoder::append_system_event(const Header& h, char event_code) {
  uint8_t* p = begin('S', h);
  p[11] = static_cast<uint8_t>(event_code);
}

void Encoder::append_stock_directory(const Header& h, std::string_view stock, const StockDirectoryFields& f) {
  uint8_t* p = begin('R', h);
  put_alpha(p + 11, stock, 8);
  p[19] = static_cast<uint8_t>(f.market_category);
  p[20] = static_cast<uint8_t>(f.financial_status_indicator);
  store_be32(p + 21, f.round_lot_size);
  p[25] = static_cast<uint8_t>(f.round_lots_only);
  p[26] = static_cast<uint8_t>(f.issue_classification);
  put_alpha(p + 27, f.issue_sub_type, 2);
  p[29] = static_cast<uint8_t>(f.authenticity);
  p[30] = static_cast<uint8_t>(f.short_sale_threshold_indicator);
  p[31] = static_cast<uint8_t>(f.ipo_flag);
  p[32] = static_cast<uint8_t>(f.luld_reference_price_tier);
  p[33] = static_cast<uint8_t>(f.etp_flag);
  store_be32(p + 34, f.etp_leverage_factor);
  p[38] = static_cast<uint8_t>(f.inverse_indicator);
}

void Encoder::append_stock_trading_action(const Header& h, std::string_view stock, char trading_state,
                                          std::string_view reason) {
  uint8_t* p = begin('H', h);
  put_alpha(p + 11, stock, 8);
  p[19] = static_cast<uint8_t>(trading_state);
  p[20] = ' ';
  put_alpha(p + 21, reason, 4);
}

void Encoder::append_add_order(const Header& h, uint64_t order_reference, char side, uint32_t shares,
                               std::string_view stock, uint32_t price) {
  uint8_t* p = begin('A', h);
  put_order(p, order_reference, side, shares, stock, price);
}

void Encoder::append_add_order_mpid(const Header& h, uint64_t order_reference, char side, uint32_t shares,
                                    std::string_view stock, uint32_t price, std::string_view attribution) {
  uint8_t* p = begin('F', h);
  put_order(p, order_reference, side, shares, stock, price);
  put_alpha(p + 36, attribution, 4);
}

void Encoder::append_order_executed(const Header& h, uint64_t order_reference, uint32_t shares, uint64_t match_number) {
  uint8_t* p = begin('E', h);
  put_execution(p, order_reference, shares, match_number);
}

void Encoder::append_order_executed_with_price(const Header& h, uint64_t order_reference, uint32_t shares,
                                               uint64_t match_number, char printable, uint32_t price) {
  uint8_t* p = begin('C', h);
  put_execution(p, order_reference, shares, match_number);
  p[31] = static_cast<uint8_t>(printable);
  store_be32(p + 32, price);
}

void Encoder::append_order_cancel(const Header& h, uint64_t order_reference, uint32_t shares) {
  uint8_t* p = begin('X', h);
  store_be64(p + 11, order_reference);
  store_be32(p + 19, shares);
}

void Encoder::append_order_delete(const Header& h, uint64_t order_reference) {
  uint8_t* p = begin('D', h);
  store_be64(p + 11, order_reference);
}

void Encoder::append_order_replace(const Header& h, uint64_t original_order_reference, uint64_t new_order_reference,
                                   uint32_t shares, uint32_t price) {
  uint8_t* p = begin('U', h);
  store_be64(p + 11, original_order_reference);
  store_be64(p + 19, new_order_reference);
  store_be32(p + 27, shares);
  store_be32(p + 31, price);
}

void Encoder::append_trade(const Header& h, uint64_t order_reference, char side, uint32_t shares,
                           std::string_view stock, uint32_t price, uint64_t match_number) {
  uint8_t* p = begin('P', h);
  put_order(p, order_reference, side, shares, stock, price);
  store_be64(p + 36, match_number);
}

void Encoder::append_raw(std::span<const uint8_t> body) {
  const size_t prefix = framing_ == Framing::kNone ? 0 : 2;
  const size_t at = out_->size();
  out_->resize(at + prefix + body.size());
  uint8_t* p = out_->data() + at;
  if (prefix != 0) {
    store_be16(p, framing_ == Framing::kLengthPrefix ? static_cast<uint16_t>(body.size()) : 0);
  }
  if (!body.empty()) std::memcpy(p + prefix, body.data(), body.size());
}

}  // namespace pollux::itch
