// The configuration keys of the NAK reliability protocol (docs/PROTOCOL.md) that [udp] and
// [rdma] (ud_mcast) share: the same names, bounds and meaning, declared once for both tables,
// each group added where its table prints it. A transport's config struct C holds them as
// members of the same names. `mode` begins each help ("ud_mcast" for RDMA, whose other modes do
// not use them: "ud_mcast: ..."); "" for UDP, which always does.
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/str_format.h"
#include "core/config_registry.h"
#include "core/config_values.h"
#include "pollux/config.h"

namespace pollux::transport::reliability {

// "<mode>: <help>", or `help` alone without a mode.
inline std::string mode_help(const std::string& mode, const std::string& help) {
  return mode.empty() ? help : mode + ": " + help;
}

// How a subscriber holds a gap and NAKs it: reorder_window, max_sessions, nak_delay_us,
// nak_retry_us, nak_retry_max_us, nak_give_up_ms. `reorder_window_note` ends reorder_window's
// help; `nak_delay_help` is nak_delay_us's.
template <class C>
ConfigTable<C>& add_gap_keys(ConfigTable<C>& t, const std::string& mode, const std::string& reorder_window_note,
                             const std::string& nak_delay_help) {
  return t
      .integer("reorder_window", &C::reorder_window, 256, 1 << 24,
               mode_help(mode,
                         "sequences a subscriber can hold ahead of a gap while it is repaired (power of two); 16 "
                         "bytes each per session" +
                             reorder_window_note)
                   .c_str(),
               core::check_pow2)
      .integer("max_sessions", &C::max_sessions, 1, 64,
               mode_help(mode,
                         "publisher sessions (publishers, or restarts of one) a subscriber follows at once on one "
                         "stream")
                   .c_str())
      .integer("nak_delay_us", &C::nak_delay_us, 0, 1'000'000, mode_help(mode, nak_delay_help).c_str())
      .integer("nak_retry_us", &C::nak_retry_us, 10, 10'000'000,
               mode_help(mode, "an unrepaired gap is NAKed again after this, doubling per attempt").c_str())
      .integer("nak_retry_max_us", &C::nak_retry_max_us, 10, 60'000'000,
               mode_help(mode, "longest interval between two NAKs of one gap").c_str())
      .integer(
          "nak_give_up_ms", &C::nak_give_up_ms, 1, 3'600'000,
          mode_help(mode, "a gap still unrepaired after this (while the publisher is alive) is reported lost").c_str());
}

// What a publisher repairs: nak_max_range, repair_rate, repair_burst, repair_rate_total.
// `rate_floor` is what repair_rate must stay above ("the stream's rate"); repair_burst takes at
// least `min_burst` bytes, `burst_note` (", at least ...") saying why.
template <class C>
ConfigTable<C>& add_repair_keys(ConfigTable<C>& t, const std::string& mode, const std::string& rate_floor,
                                std::uint64_t min_burst, const std::string& burst_note) {
  const std::string& table = t.table();
  return t
      .integer("nak_max_range", &C::nak_max_range, 1, 1 << 24,
               mode_help(mode,
                         "most sequences one NAK range may ask a publisher for (a larger range is cut; the "
                         "subscriber asks for the rest again)")
                   .c_str())
      .size("repair_rate", &C::repair_rate, 0, 1ull << 40,
            mode_help(mode,
                      "repair bytes per second a publisher sends on behalf of one subscriber (token bucket; 0 = "
                      "unlimited): bounds what forged NAKs can make it send. Keep it above " +
                          rate_floor + ", or a subscriber that fell behind cannot catch up while the stream runs")
                .c_str())
      .size("repair_burst", &C::repair_burst, min_burst, 1ull << 36,
            mode_help(mode, absl::StrFormat("repair bytes a publisher sends for one subscriber at once (the bucket of "
                                            "%s.repair_rate%s; the bucket of %s.repair_rate_total holds 4x this)",
                                            table, burst_note, table))
                .c_str())
      .size("repair_rate_total", &C::repair_rate_total, 0, 1ull << 40,
            mode_help(mode,
                      "repair bytes per second a publisher sends in all, whoever asks (token bucket; 0 = unlimited)")
                .c_str());
}

// The faults injected on received datagrams, for tests: fault_loss (`loss_help`),
// fault_duplicate, fault_reorder. `testing` begins the helps ("testing").
template <class C>
ConfigTable<C>& add_fault_keys(ConfigTable<C>& t, const std::string& testing, const std::string& loss_help) {
  constexpr const char* kProbability = "a probability 0.0..1.0";
  return t.number("fault_loss", &C::fault_loss, 0, 1, (testing + ": " + loss_help).c_str(), kProbability)
      .number("fault_duplicate", &C::fault_duplicate, 0, 1,
              (testing + ": probability that a received datagram is delivered twice").c_str(), kProbability)
      .number("fault_reorder", &C::fault_reorder, 0, 1,
              (testing + ": probability that a received datagram is held back behind 1..8 later ones").c_str(),
              kProbability);
}

// What the shared keys need of each other (a transport checks it when it uses them).
template <class C>
core::ConfigIssue check_keys(const C& c, const std::string& table) {
  if (c.nak_retry_us > c.nak_retry_max_us) {
    return {table + ".nak_retry_us",
            absl::StrFormat("%u is above %s.nak_retry_max_us (%u)", c.nak_retry_us, table, c.nak_retry_max_us)};
  }
  if (c.fault_loss + c.fault_duplicate + c.fault_reorder > 1.0) {
    return {table + ".fault_loss", table + ".fault_loss + fault_duplicate + fault_reorder must not exceed 1"};
  }
  return {};
}

}  // namespace pollux::transport::reliability
