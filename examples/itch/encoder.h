// Writes ITCH 5.0 messages, framed as BinaryFILE (or bare, one message per payload).
//
// Used by the synthetic generator and by tests that need well-formed input; the decoders
// in messages.h are tested against hand-written bytes, not against this encoder, so a
// layout mistake cannot cancel itself out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace pollux::itch {

// The three fields every message starts with.
struct Header {
  uint16_t stock_locate = 0;
  uint16_t tracking_number = 0;
  uint64_t timestamp = 0;  // ns since midnight; only the low 48 bits are written
};

// Stock Directory fields other than the symbol, defaulted to a plain NASDAQ common stock.
struct StockDirectoryFields {
  char market_category = 'Q';
  char financial_status_indicator = 'N';
  uint32_t round_lot_size = 100;
  char round_lots_only = 'N';
  char issue_classification = 'C';
  std::string_view issue_sub_type = "Z";
  char authenticity = 'P';
  char short_sale_threshold_indicator = 'N';
  char ipo_flag = 'N';
  char luld_reference_price_tier = '2';
  char etp_flag = 'N';
  uint32_t etp_leverage_factor = 0;
  char inverse_indicator = 'N';
};

enum class Framing : uint8_t {
  kLengthPrefix,      // BinaryFILE with the real 2-byte length (NASDAQ's current files)
  kZeroLengthPrefix,  // BinaryFILE with every length 0 (like the RITCH sample file)
  kNone,              // no prefix: messages back to back; use for single-message payloads
};

// Appends encoded messages to a caller-owned vector. Text fields are left-justified and
// space-padded (or cut) to their wire width.
class Encoder {
 public:
  explicit Encoder(std::vector<uint8_t>* out, Framing framing = Framing::kLengthPrefix) noexcept
      : out_(out), framing_(framing) {}

  void append_system_event(const Header& h, char event_code);
  void append_stock_directory(const Header& h, std::string_view stock, const StockDirectoryFields& f = {});
  void append_stock_trading_action(const Header& h, std::string_view stock, char trading_state,
                                   std::string_view reason = "");
  void append_add_order(const Header& h, uint64_t order_reference, char side, uint32_t shares, std::string_view stock,
                        uint32_t price);
  void append_add_order_mpid(const Header& h, uint64_t order_reference, char side, uint32_t shares,
                             std::string_view stock, uint32_t price, std::string_view attribution);
  void append_order_executed(const Header& h, uint64_t order_reference, uint32_t shares, uint64_t match_number);
  void append_order_executed_with_price(const Header& h, uint64_t order_reference, uint32_t shares,
                                        uint64_t match_number, char printable, uint32_t price);
  void append_order_cancel(const Header& h, uint64_t order_reference, uint32_t shares);
  void append_order_delete(const Header& h, uint64_t order_reference);
  void append_order_replace(const Header& h, uint64_t original_order_reference, uint64_t new_order_reference,
                            uint32_t shares, uint32_t price);
  void append_trade(const Header& h, uint64_t order_reference, char side, uint32_t shares, std::string_view stock,
                    uint32_t price, uint64_t match_number);
  // Any message given as its bytes (type byte first), framed like the others; the length
  // prefix is body.size(), so this can also write deliberately inconsistent records.
  void append_raw(std::span<const uint8_t> body);

  [[nodiscard]] Framing framing() const noexcept { return framing_; }

 private:
  // Grows the output by the framed size of `type`, writes the prefix and the header, and
  // returns a pointer to the message's first byte (the type).
  uint8_t* begin(char type, const Header& h);

  std::vector<uint8_t>* out_;
  Framing framing_;
};

}  // namespace pollux::itch
