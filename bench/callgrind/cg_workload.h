// What the callgrind workloads of one publisher and one subscriber in one process share
// (shm_inline_cg.cc, udp_inline_cg.cc): opening them, and the measured loop.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pollux/pollux.h"

namespace pollux::bench {

// A context from `toml` with a publisher and a subscriber of topic "cg" (the subscriber first
// with `sub_first`); false, after printing why, when any of them cannot be opened.
struct CgPair {
  std::unique_ptr<Context> ctx;
  std::optional<Publisher> pub;
  std::optional<Subscriber> sub;

  bool open(const std::string& toml, const char* program, bool sub_first) {
    auto c = Context::from_string(toml, program);
    if (!c.ok()) {
      std::fprintf(stderr, "%s\n", std::string(c.status().message()).c_str());
      return false;
    }
    ctx = std::move(*c);
    absl::StatusOr<Subscriber> s = absl::UnknownError("not opened");
    if (sub_first) s = ctx->subscriber("cg");
    auto p = ctx->publisher("cg");
    if (!sub_first) s = ctx->subscriber("cg");
    if (!p.ok() || !s.ok()) {
      std::fprintf(stderr, "%s\n", std::string((p.ok() ? s.status() : p.status()).message()).c_str());
      return false;
    }
    pub.emplace(std::move(*p));
    sub.emplace(std::move(*s));
    return true;
  }
};

// `count` iterations: `empty_polls` polls that must find no message, then one offer() of `size`
// bytes and one poll() delivering it. Prints what the scripts check - every message delivered,
// no iteration needed a second call (and no empty poll found a message) - and returns the exit
// status: 0 when every byte was delivered.
// Inlined: the loop is counted under main(), as the scripts have always listed it.
[[gnu::always_inline]] inline int measure(Publisher& pub, Subscriber& sub, std::uint64_t count, std::uint64_t size,
                                          std::uint64_t empty_polls) {
  std::vector<std::byte> payload(size);
  std::uint64_t sum = 0, retries = 0;
  for (std::uint64_t i = 0; i < count; ++i) {
    for (std::uint64_t e = 0; e < empty_polls; ++e) {
      // Must find no message (an event - the publisher's session announced - may come once).
      (void)sub.poll([&](const Message&) { ++retries; }, 1);
    }
    payload[0] = static_cast<std::byte>(i);
    while (pub.offer(payload.data(), payload.size()) < 0) ++retries;
    while (sub.poll([&](const Message& m) { sum += m.payload.size(); }, 1) == 0) ++retries;
  }
  std::printf("delivered_bytes %llu retries %llu\n", static_cast<unsigned long long>(sum),
              static_cast<unsigned long long>(retries));
  return sum == count * size ? 0 : 1;
}

}  // namespace pollux::bench
