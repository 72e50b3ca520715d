// pollux-feed configuration: [feed] keys are validated by the feed handler with Pollux's
// error format (file:line: key: message), everything else still by Pollux's own parser, and
// splitting the two keeps Pollux's line numbers.
#include <unistd.h>

#include <atomic>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_format.h"
#include "feed_handler/config/feed_config.h"
#include "feed_handler/publish/feed_publisher.h"
#include "pollux/pollux.h"
#include "tests/support/config_errors.h"
#include "tests/support/status_assert.h"

namespace pollux::feed {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string ErrorOf(std::string_view toml, const std::vector<std::string>& overrides = {}) {
  absl::StatusOr<LoadedConfig> c = load_config(toml, "x.toml", overrides);
  EXPECT_FALSE(c.ok()) << "accepted:\n" << toml;
  return c.ok() ? "" : std::string(c.status().message());
}

// A live-mode [feed] table (source = "moldudp64") on lines 239.1.1.1:26400 and
// 239.1.1.2:`line_b_port`, its lines 1 to 4, then `more` keys from line 5.
absl::StatusOr<LoadedConfig> LoadLive(const std::string& line_b_port, const std::string& more) {
  return load_config("[feed]\nsource = \"moldudp64\"\nline_a = \"239.1.1.1:26400\"\nline_b = \"239.1.1.2:" +
                         line_b_port + "\"\n" + more,
                     "x.toml");
}

void ExpectErrors(std::initializer_list<testing::ConfigErrorCase> cases) {
  testing::expect_config_errors([](std::string_view toml) { return ErrorOf(toml); }, cases);
}

TEST(FeedConfig, EmbeddedDefaultLoads) {
  absl::StatusOr<LoadedConfig> c = load_config(embedded_config(), kEmbeddedConfigName);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->feed.source, SourceKind::kGenerator);
  EXPECT_EQ(c->feed.replay, ReplayMode::kMax);
  EXPECT_EQ(c->feed.streams, 4u);
  EXPECT_EQ(c->pollux.transport, "shm");
  EXPECT_EQ(c->pollux.flow_control, "backpressure");
  EXPECT_EQ(c->pollux_toml.find("\n[feed]"), std::string::npos);
  EXPECT_EQ(c->pollux_toml.find("\nsymbols"), std::string::npos);
  EXPECT_EQ(c->feed.partition_topic(3), "itch.3");
}

TEST(FeedConfig, ValuesAndWhere) {
  absl::StatusOr<LoadedConfig> c = load_config(R"([feed]
source = "file"
file = "/data/day.itch"
replay = "speed"
speed = 2.5
rate = 250_000
streams = 8
batch_bytes = 0
subscribers = 3
subscriber_mode = "thread"
)",
                                               "x.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->feed.source, SourceKind::kFile);
  EXPECT_EQ(c->feed.file, "/data/day.itch");
  EXPECT_EQ(c->feed.replay, ReplayMode::kSpeed);
  EXPECT_DOUBLE_EQ(c->feed.speed, 2.5);
  EXPECT_EQ(c->feed.rate, 250'000u);
  EXPECT_EQ(c->feed.streams, 8u);
  EXPECT_EQ(c->feed.batch_bytes, 0u);
  EXPECT_EQ(c->feed.subscribers, 3u);
  EXPECT_EQ(c->feed.subscriber_mode, SubscriberMode::kThread);
  EXPECT_EQ(c->feed.where.at("feed.streams"), "x.toml:7");
}

TEST(FeedConfig, UnknownKeyNamesFileLineKeyWithSuggestion) {
  EXPECT_EQ(ErrorOf("[runtime]\nthreading = \"inline\"\n\n[feed]\nsymbols = 3\nsymbolz = 4\n"),
            "x.toml:6: feed.symbolz: unknown key (did you mean feed.symbols?)");
}

TEST(FeedConfig, TypeRangeAndEnumErrors) {
  ExpectErrors({
      {"[feed]\nmessages = \"many\"\n", "x.toml:2: feed.messages: expected an integer, got \"many\""},
      {"[feed]\n\nstreams = 0\n", "x.toml:3: feed.streams: expected 1..256, got 0"},
      {"[feed]\nreplay = \"fast\"\n", "x.toml:2: feed.replay: expected original|speed|rate|max, got \"fast\""},
      {"[feed]\nspeed = -1.0\n", "x.toml:2: feed.speed: expected 1e-06..1e+12, got -1"},
      {"[feed]\nbatch_bytes = 10\n", "x.toml:2: feed.batch_bytes: expected 0 or 64..16777216, got 10"},
      {"[feed]\nsubscriber_mode = true\n", "x.toml:2: feed.subscriber_mode: expected process|thread, got true"},
      {"feed = 3\n", "x.toml:1: feed: expected a table [feed], got 3"},
  });
}

// An integer for a number key is converted exactly or refused: toml++ gives no double for an
// integer beyond 2^53, and dereferencing that empty optional would read garbage (the
// class of bug: a numeric conversion that does not check).
TEST(FeedConfig, NumberKeysTakeAnyIntegerWithoutUndefinedConversions) {
  ExpectErrors({
      {"[feed]\nspeed = 9007199254740993\n", "x.toml:2: feed.speed: expected 1e-06..1e+12, got 9007199254740993"},
      {"[feed]\nspeed = -9223372036854775808\n",
       "x.toml:2: feed.speed: expected 1e-06..1e+12, got -9223372036854775808"},
      {"[feed]\nspeed = 0\n", "x.toml:2: feed.speed: expected 1e-06..1e+12, got 0"},
      {"[feed]\nspeed = nan\n", "x.toml:2: feed.speed: expected 1e-06..1e+12, got nan"},
      {"[feed]\nmessages = 1099511627777\n", "x.toml:2: feed.messages: expected 8..1099511627776, got 1099511627777"},
      {"[feed]\nrate = 4294967297\n", "x.toml:2: feed.rate: expected 1..1000000000, got 4294967297"},
  });
  absl::StatusOr<LoadedConfig> c = load_config("[feed]\nreplay = \"speed\"\nspeed = 1_000_000_000_000\n", "x.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->feed.speed, 1e12);
}

TEST(FeedConfig, CrossKeyErrorsPointAtTheKey) {
  EXPECT_EQ(ErrorOf("[feed]\nsymbols = 2\nsource = \"file\"\n"),
            "x.toml:3: feed.file: missing: source = \"file\" needs feed.file (or --itch FILE)");
  EXPECT_THAT(ErrorOf("[feed]\nsymbols = 100\nmessages = 50\n"),
              StartsWith("x.toml:3: feed.messages: 50 is too few for 100 symbols"));
  ExpectErrors({
      {"[feed]\nstreams = 2\nbook_threads = 3\n",
       "x.toml:3: feed.book_threads: 3 threads for 2 streams: a thread owns whole streams, so at most "
       "feed.streams (2)"},
      {"[feed]\nexpected_orders = 0\n", "x.toml:2: feed.expected_orders: expected 1..268435456, got 0"},
  });
}

// Live mode keys (feed.source = "moldudp64"): each value checked where it is set, naming the
// file, line and key; the lines are required together and must differ.
TEST(FeedConfig, LiveKeysAreCheckedWithFileLineAndKey) {
  POLLUX_ASSERT_OK_DECL(
      c, LoadLive("26401", "rerequest = \"exchange.example:26402\"\ninterface = \"eth0\"\nwindow = 4096\n"));
  EXPECT_EQ(c->feed.source, SourceKind::kMoldUdp64);
  EXPECT_EQ(c->feed.rerequest, "exchange.example:26402");
  EXPECT_EQ(c->feed.window, 4096u);
  ExpectErrors({
      {"[feed]\nsource = \"moldudp64\"\nline_a = \"10.0.0.1:26400\"\n",
       "x.toml:3: feed.line_a: \"10.0.0.1:26400\" is not a multicast group (224.0.0.0/4)"},
      {"[feed]\n\nline_b = \"239.1.1.2\"\n",
       "x.toml:3: feed.line_b: expected ADDR:PORT (port 1..65535), got \"239.1.1.2\""},
      {"[feed]\nline_a = \"host:1\"\n",
       "x.toml:2: feed.line_a: expected an IPv4 address before the port, got \"host:1\""},
      {"[feed]\nrerequest = \"exchange:0\"\n",
       "x.toml:2: feed.rerequest: expected HOST:PORT (port 1..65535), got \"exchange:0\""},
      {"[feed]\nwindow = 5000\n", "x.toml:2: feed.window: expected a power of two, got 5000"},
      {"[feed]\nsession = \"ELEVENCHARS\"\n", "x.toml:2: feed.session: expected 0-10 characters, got \"ELEVENCHARS\""},
      {"[feed]\nsource = \"moldudp64\"\nline_a = \"239.1.1.1:1\"\n",
       "x.toml:2: feed.line_b: missing: source = \"moldudp64\" needs both feed.line_a and feed.line_b"},
      {"[feed]\nsource = \"moldudp64\"\nline_a = \"239.1.1.1:1\"\nline_b = \"239.1.1.1:1\"\n",
       "x.toml:4: feed.line_b: \"239.1.1.1:1\" is line A too: the lines must differ"},
  });
  EXPECT_EQ(ErrorOf("", {"feed.source=moldudp64", "feed.line_a=239.1.1.1:1", "feed.line_b=239.1.1.2:1",
                         "feed.rerequest_timeout_ms=100", "feed.rerequest_timeout_max_ms=50"}),
            "--set: feed.rerequest_timeout_max_ms: 50 is below feed.rerequest_timeout_ms (100)");
}

// feed.datapath: "socket" by default; "xdp" (with feed.xdp_mode) for live lines on a named
// interface only.
TEST(FeedConfig, DatapathXdpNeedsLiveLinesOnANamedInterface) {
  POLLUX_ASSERT_OK_DECL(c, LoadLive("26401", ""));
  EXPECT_EQ(c->feed.datapath, Datapath::kSocket);
  POLLUX_ASSERT_OK_DECL(x, LoadLive("26401", "interface = \"eth1\"\ndatapath = \"xdp\"\nxdp_mode = \"generic\"\n"));
  EXPECT_EQ(x->feed.datapath, Datapath::kXdp);
  EXPECT_EQ(x->feed.xdp_mode, "generic");
  EXPECT_THAT(x->feed.to_toml(), HasSubstr("datapath = \"xdp\"  # moldudp64: how lines A and B are read"));
  ExpectErrors({
      {"[feed]\ndatapath = \"af_xdp\"\n", "x.toml:2: feed.datapath: expected socket|xdp, got \"af_xdp\""},
      {"[feed]\nxdp_mode = \"fast\"\n",
       "x.toml:2: feed.xdp_mode: expected \"auto\", \"copy\", \"zerocopy\" or \"generic\", got \"fast\""},
      {"[feed]\nsource = \"moldudp64\"\nline_a = \"239.1.1.1:1\"\nline_b = \"239.1.1.2:1\"\ndatapath = \"xdp\"\n",
       "x.toml:5: feed.interface: missing: datapath = \"xdp\" needs the interface by name (the AF_XDP socket binds "
       "one)"},
      {"[feed]\ndatapath = \"xdp\"\ninterface = \"eth0\"\n",
       "x.toml:2: feed.datapath: xdp reads live lines only (feed.source = \"moldudp64\"), not source = \"generator\""},
  });
}

// The expected senders of the lines (feed.source_a/source_b): an IPv4 unicast address or "",
// each set only with its line.
TEST(FeedConfig, ExpectedSendersAreAddressesOfALine) {
  POLLUX_ASSERT_OK_DECL(c, LoadLive("26400", "source_a = \"10.0.0.1\"\nsource_b = \"10.0.0.2\"\n"));
  EXPECT_EQ(c->feed.source_a, "10.0.0.1");
  EXPECT_EQ(c->feed.source_b, "10.0.0.2");
  EXPECT_EQ(c->feed.where.at("feed.source_b"), "x.toml:6");
  EXPECT_THAT(c->feed.to_toml(), HasSubstr("source_a = \"10.0.0.1\"  # moldudp64: the IPv4 address line A's"));
  // Unset by default: any sender.
  c = load_config("[feed]\nsource = \"moldudp64\"\nline_a = \"239.1.1.1:1\"\nline_b = \"239.1.1.2:1\"\n", "x.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->feed.source_a, "");
  EXPECT_EQ(c->feed.source_b, "");

  ExpectErrors({
      {"[feed]\nline_a = \"239.1.1.1:1\"\nsource_a = \"exchange.example\"\n",
       "x.toml:3: feed.source_a: expected an IPv4 address (the exchange's sender, e.g. \"10.0.0.1\"), got "
       "\"exchange.example\""},
      {"[feed]\nline_b = \"239.1.1.2:1\"\nsource_b = \"10.0.0.1:26400\"\n",
       "x.toml:3: feed.source_b: expected an IPv4 address (the exchange's sender, e.g. \"10.0.0.1\"), got "
       "\"10.0.0.1:26400\""},
      {"[feed]\nsource_a = 10\n", "x.toml:2: feed.source_a: expected an IPv4 address (the exchange's sender), got 10"},
  });
  for (const char* bad : {"239.1.1.1", "0.0.0.0", "255.255.255.255"}) {
    EXPECT_EQ(ErrorOf(absl::StrFormat("[feed]\nline_a = \"239.1.1.1:1\"\nsource_a = \"%s\"\n", bad)),
              absl::StrFormat("x.toml:3: feed.source_a: \"%s\" cannot send a datagram: expected the unicast address "
                              "of the exchange's sender",
                              bad));
  }
  // A sender without its line: in the file, and through --set.
  EXPECT_EQ(ErrorOf("[feed]\nsource_a = \"10.0.0.1\"\n"),
            "x.toml:2: feed.source_a: \"10.0.0.1\" is set but feed.line_a is not: the expected sender belongs to a "
            "line");
  EXPECT_EQ(ErrorOf("", {"feed.line_a=239.1.1.1:1", "feed.source_b=10.0.0.2"}),
            "--set: feed.source_b: \"10.0.0.2\" is set but feed.line_b is not: the expected sender belongs to a line");
}

TEST(FeedConfig, PolluxKeysStillValidatedByPolluxWithTheirLineNumbers) {
  // [feed] comes first and spans lines (multi-line value): Pollux must still report line 9.
  const std::string toml = R"([feed]
topic = "md"
streams = 2
file = """
/data/x.itch
"""

[runtime]
threading = "dedicted"
)";
  EXPECT_EQ(ErrorOf(toml), "x.toml:9: runtime.threading: expected dedicated|shared|inline, got \"dedicted\"");
  // The feed table's keys never reach Pollux, but unknown tables still fail there.
  EXPECT_THAT(ErrorOf("[feeds]\nsymbols = 3\n"), StartsWith("x.toml:1: feeds: unknown key"));
  EXPECT_THAT(ErrorOf("[shm]\nlog_sise = 65536\n[feed]\nsymbols = 3\n"),
              StartsWith("x.toml:2: shm.log_sise: unknown key"));
}

TEST(FeedConfig, InlineAndDottedFeedTables) {
  absl::StatusOr<LoadedConfig> c =
      load_config("feed = { symbols = 3, messages = 100 }\n[runtime]\nthreading = \"shared\"\n", "x.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->feed.symbols, 3u);
  EXPECT_EQ(c->pollux.threading, "shared");
  c = load_config("feed.symbols = 5\nfeed.messages = 500\n[runtime]\nthreading = \"inline\"\n", "x.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->feed.symbols, 5u);
  EXPECT_EQ(ErrorOf("feed.symbols = 5\nfeed.sybmols = 5\n"),
            "x.toml:2: feed.sybmols: unknown key (did you mean feed.symbols?)");
}

TEST(FeedConfig, SyntaxErrorNamesLineAndColumn) {
  EXPECT_THAT(ErrorOf("[feed]\nsymbols = = 3\n"), StartsWith("x.toml:2:"));
  EXPECT_THAT(ErrorOf("[feed]\nsymbols = = 3\n"), HasSubstr("TOML syntax error"));
}

TEST(FeedConfig, Overrides) {
  absl::StatusOr<LoadedConfig> c = load_config("[feed]\nsymbols = 3\n", "x.toml",
                                               {"feed.messages=1000", "feed.replay=rate", "runtime.threading=shared",
                                                "shm.log_size=\"1MiB\"", "feed.file=\"/a b\"", "feed.source=file"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->feed.messages, 1000u);
  EXPECT_EQ(c->feed.replay, ReplayMode::kRate);
  EXPECT_EQ(c->feed.source, SourceKind::kFile);
  EXPECT_EQ(c->feed.file, "/a b");
  EXPECT_EQ(c->pollux.threading, "shared");
  EXPECT_THAT(c->pollux.effective_config, HasSubstr("log_size = \"1MiB\""));
  EXPECT_EQ(c->feed.where.at("feed.messages"), "--set");

  EXPECT_EQ(ErrorOf("", {"feed.bogus=1"}), "--set: feed.bogus: unknown key");
  EXPECT_EQ(ErrorOf("", {"feed.streams=0"}), "--set: feed.streams: expected 1..256, got 0");
  EXPECT_THAT(ErrorOf("", {"runtime.threading=fast"}),
              HasSubstr("runtime.threading: expected dedicated|shared|inline"));
  EXPECT_THAT(ErrorOf("", {"nodot"}), StartsWith("--set nodot: expected section.key=value"));
  EXPECT_THAT(ErrorOf("", {"runtime.nosuchkey=1"}), HasSubstr("runtime.nosuchkey: unknown key"));
}

TEST(FeedConfig, PrintedFeedTableParsesBack) {
  absl::StatusOr<LoadedConfig> c = load_config(embedded_config(), kEmbeddedConfigName);
  ASSERT_TRUE(c.ok());
  const std::string printed = c->feed.to_toml();
  absl::StatusOr<LoadedConfig> again = load_config(printed, "printed");
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << printed;
  EXPECT_EQ(again->feed.to_toml(), printed);
}

TEST(FeedConfig, BatchThatDoesNotFitAPolluxMessageNamesTheKey) {
  const std::string name = "feedcfg-" + std::to_string(getpid());
  const std::string toml = "[runtime]\nname = \"" + name +
                           "\"\nthreading = \"shared\"\nidle = \"yield\"\n[pool]\nslot_size = 2048\n\n[feed]\n"
                           "streams = 1\nbatch_bytes = 4000\n";
  absl::StatusOr<LoadedConfig> c = load_config(toml, "x.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<std::unique_ptr<Context>> ctx = Context::from_string(c->pollux_toml, c->pollux_source);
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  absl::StatusOr<std::unique_ptr<FeedPublisher>> pub = FeedPublisher::open(**ctx, c->feed, IdleKind::kYield);
  ASSERT_FALSE(pub.ok());
  EXPECT_THAT(std::string(pub.status().message()),
              StartsWith("x.toml:10: feed.batch_bytes: 4000 does not fit one Pollux message"));
}

}  // namespace
}  // namespace pollux::feed
