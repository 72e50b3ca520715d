// Counter sets declared once (core/counter_set.h): the fields, the table, allocation and
// publish() all come from one X-macro list, and what lands in the counters file is what the
// table says.
#include "core/counter_set.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "core/counters.h"
#include "core/poller_counters.h"
#include "core/stream_counters.h"

namespace pollux::core {
namespace {

// A set mixing both forms: `hits` is updated by its owner, the others copied by publish().
#define TEST_COUNTERS(X)                        \
  X(hits, "hits", "bumped by the owner")        \
  X(sent, "datagrams_sent", "copied", src.sent) \
  X(both, "sum", "an expression", src.a + src.b)

struct Source {
  std::uint64_t sent = 0, a = 0, b = 0;
};

struct TestCounters {
  POLLUX_COUNTER_FIELDS(TEST_COUNTERS)
  POLLUX_COUNTER_TABLE(TEST_COUNTERS)
  POLLUX_COUNTER_NAMES(TEST_COUNTERS)
  void publish(const Source& src) noexcept { POLLUX_COUNTER_PUBLISH(TEST_COUNTERS, *this); }
};
static_assert(TestCounters::kCounterCount == 3);
static_assert(sizeof(TestCounters) == 3 * sizeof(Counter));
static_assert(TestCounters::names::sent == "datagrams_sent");
static_assert(TestCounters::kCounterTable[2].name == "sum" && TestCounters::kCounterTable[2].help == "an expression");

// name -> (value, kind, owner) of one scope in a counters file.
struct Read {
  std::uint64_t value;
  CounterKind kind;
  std::uint16_t owner;
};
std::map<std::string, Read> read_scope(const CountersFile& f, const std::string& scope) {
  auto snap = read_counters_file(f.path());
  EXPECT_TRUE(snap.ok()) << snap.status();
  std::map<std::string, Read> out;
  if (!snap.ok()) return out;
  for (const CounterSnapshot& c : snap->counters) {
    if (c.scope == scope) out[c.name] = {c.value, c.kind, c.owner};
  }
  return out;
}

TEST(CounterSet, AllocatesEveryEntryUnderItsNameAndPublishCopiesTheValuedOnes) {
  auto f = CountersFile::create(::testing::TempDir(), "counter-set");
  ASSERT_TRUE(f.ok()) << f.status();
  TestCounters c;
  std::vector<std::string> asked;
  POLLUX_COUNTER_ALLOCATE(TEST_COUNTERS, c, [&](std::string_view n) {
    asked.emplace_back(n);
    return (*f)->allocate("test scope", n, 7);
  });
  EXPECT_EQ(asked, (std::vector<std::string>{"hits", "datagrams_sent", "sum"}));  // table order
  ASSERT_TRUE(c.hits.valid() && c.sent.valid() && c.both.valid());
  c.hits.add(5);
  c.publish(Source{11, 2, 3});
  c.publish(Source{12, 4, 3});  // set, not added
  const auto v = read_scope(**f, "test scope");
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v.at("hits").value, 5u);  // publish() leaves the owner's counters alone
  EXPECT_EQ(v.at("datagrams_sent").value, 12u);
  EXPECT_EQ(v.at("sum").value, 7u);
}

// The same list declared as a whole set: allocate() asks for every entry, in table order.
POLLUX_COUNTER_SET(DeclaredSet, TEST_COUNTERS);
static_assert(DeclaredSet::kCounterCount == 3 && DeclaredSet::names::both == "sum");

TEST(CounterSet, ADeclaredSetAllocatesEveryEntryInTableOrder) {
  auto f = CountersFile::create(::testing::TempDir(), "declared-set");
  ASSERT_TRUE(f.ok()) << f.status();
  DeclaredSet c;
  std::vector<std::string> asked;
  c.allocate([&](std::string_view n) {
    asked.emplace_back(n);
    return (*f)->allocate("declared", n, 1);
  });
  EXPECT_EQ(asked, (std::vector<std::string>{"hits", "datagrams_sent", "sum"}));
  c.sent.add(4);
  EXPECT_EQ(read_scope(**f, "declared").at("datagrams_sent").value, 4u);
}

TEST(CounterSet, StreamCountersOfEachDirectionGetTheirOwnNamesKindAndOwner) {
  auto f = CountersFile::create(::testing::TempDir(), "stream-counters");
  ASSERT_TRUE(f.ok()) << f.status();
  StreamCounters pub = StreamCounters::publication(**f, "pub stream 3 t", 3);
  StreamCounters sub = StreamCounters::subscription(**f, "sub stream 3 t", 3, /*position=*/false);
  StreamCounters sub_pos = StreamCounters::subscription(**f, "sub stream 4 t", 4, /*position=*/true);
  pub.bp_no_slot.add(2);
  sub.lost.add(9);
  sub_pos.position.set(42);

  const auto p = read_scope(**f, "pub stream 3 t");
  EXPECT_EQ(p.size(), 8u);
  EXPECT_EQ(p.at(std::string(StreamCounters::names::bp_no_slot)).value, 2u);
  EXPECT_EQ(p.count("messages_lost"), 0u);
  for (const auto& [name, r] : p) EXPECT_EQ(r.kind, CounterKind::kPublisher) << name;

  const auto s = read_scope(**f, "sub stream 3 t");
  EXPECT_EQ(s.size(), 7u);
  EXPECT_EQ(s.at("messages_lost").value, 9u);
  EXPECT_EQ(s.count("position"), 0u);  // a shm subscriber's position is in its segment
  EXPECT_FALSE(sub.position.valid());
  for (const auto& [name, r] : s) EXPECT_EQ(r.kind, CounterKind::kSubscriber) << name;
  EXPECT_NE(s.begin()->second.owner, p.begin()->second.owner);

  const auto sp = read_scope(**f, "sub stream 4 t");
  EXPECT_EQ(sp.size(), 8u);
  EXPECT_EQ(sp.at("position").value, 42u);
}

TEST(CounterSet, TableNamesAreUniqueWithinASet) {
  auto unique = [](const auto& table) {
    std::map<std::string_view, int> seen;
    for (const CounterInfo& c : table) {
      EXPECT_FALSE(c.help.empty()) << c.name;
      if (++seen[c.name] > 1) return false;
    }
    return true;
  };
  EXPECT_TRUE(unique(PollerCounters::kCounterTable));
  EXPECT_TRUE(unique(StreamCounters::kCounterTable));
}

}  // namespace
}  // namespace pollux::core
