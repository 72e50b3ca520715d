// Helpers shared by the shm tests.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "core/config.h"
#include "tests/support/payload.h"
#include "transport/shm/shm_config.h"
#include "transport/shm/shm_segment.h"

namespace pollux::testing {

// A unique instance name so concurrent test processes never share shm files.
inline std::string unique_name(const char* tag) {
  static std::atomic<int> n{0};
  return std::string(tag) + "-" + std::to_string(getpid()) + "-" + std::to_string(n++);
}

inline core::Config shm_config(const std::string& name, std::uint64_t log_size, transport::shm::FlowControl fc) {
  core::Config c;
  c.runtime.name = name;
  c.runtime.shm_dir = "/dev/shm";
  transport::shm::config(c).log_size = log_size;
  transport::shm::config(c).flow_control = fc;
  transport::shm::config(c).max_subscribers = 8;
  return c;
}

// A fresh stream segment under /dev/shm for log-level tests: 4 subscriber slots, session 0x1234.
// Null (with a test failure) if it cannot be created; the caller unlinks it.
inline std::unique_ptr<transport::shm::Segment> create_test_segment(const char* tag, std::uint64_t log_size,
                                                                    transport::shm::FlowControl fc,
                                                                    std::uint32_t stream) {
  transport::shm::Segment::Options o;
  o.path = "/dev/shm/pollux-" + unique_name(tag) + ".log";
  o.stream_id = stream;
  o.session_id = 0x1234;
  o.log_size = log_size;
  o.subscriber_slots = 4;
  o.flow_control = fc;
  auto s = transport::shm::Segment::create(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

}  // namespace pollux::testing
