// A broadcast log for the log-level tests (shm_log_test, shm_direct_test): a fresh segment and
// its writer, driven step by step by the test thread, and readers with their own mapping and
// slot, as subscriber processes would have.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <memory>

#include <gtest/gtest.h>

#include "core/frame.h"
#include "tests/shm/test_util.h"
#include "transport/shm/shm_config.h"
#include "transport/shm/shm_log.h"
#include "transport/shm/shm_segment.h"

namespace pollux::transport::shm {

struct LogFixture {
  LogFixture(const char* tag, std::uint64_t log_size, shm::FlowControl fc, std::uint32_t stream) {
    seg = pollux::testing::create_test_segment(tag, log_size, fc, stream);
    writer.init(seg.get(), fc);
  }
  ~LogFixture() { seg->unlink(); }

  struct Reader {
    std::unique_ptr<Segment> seg;
    LogReader r;
    SubscriberSlot* slot;
  };
  // The next slot, active; the reader starts at the oldest message (at_start) or the newest.
  std::unique_ptr<Reader> reader(bool at_start = false) {
    auto rd = std::make_unique<Reader>();
    auto s = Segment::attach(seg->path(), seg->header()->layout.stream_id);
    EXPECT_TRUE(s.ok()) << s.status();
    rd->seg = std::move(*s);
    rd->slot = rd->seg->slot(nslots++);
    rd->slot->pid = getpid();
    EXPECT_TRUE(rd->r.init(rd->seg.get(), rd->slot, at_start));
    rd->slot->state.store(kSlotActive);
    rd->seg->header()->writer.subscribers.fetch_add(1);
    return rd;
  }

  // Message s with payload.h's payload of `len` bytes (after a zeroed trace block if traced);
  // `deferred`: committed as part of a batch (commit_deferred; flush_tail() ends the batch).
  bool write(std::uint64_t s, std::uint32_t len, std::uint16_t flags = 0, bool deferred = false) {
    LogWriter::Claim c;
    const std::uint32_t extra = (flags & core::kFlagTraced) ? sizeof(core::StageTrace) : 0;
    if (!writer.try_claim(core::kFrameHeaderSize + extra + len, &c)) return false;
    std::memset(c.frame + core::kFrameHeaderSize, 0, extra);
    pollux::testing::fill_payload(c.frame + core::kFrameHeaderSize + extra, len, s);
    if (deferred) {
      writer.commit_deferred(c, flags, static_cast<std::int64_t>(s));
    } else {
      writer.commit(c, flags, static_cast<std::int64_t>(s));
    }
    return true;
  }

  std::unique_ptr<Segment> seg;
  LogWriter writer;
  std::uint32_t nslots = 0;
};

}  // namespace pollux::transport::shm
