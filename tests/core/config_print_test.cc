// to_toml() prints the effective configuration (pollux-config's output): it must parse back
// to the same values, whatever the strings hold. Found by tests/fuzz/config_fuzz.cc's round
// trip; the inputs are also in tests/fuzz/regressions/config/.
#include <gtest/gtest.h>

#include "core/config.h"

namespace pollux::core {
namespace {

TEST(ConfigPrintTest, StringsWithQuotesBackslashesAndControlCharactersRoundTrip) {
  auto c = parse_config(R"([runtime]
shm_dir = "/dev/\"shm\nline\t\u007f end"
device = "eth\\0"
[[streams]]
topic = "a \"quoted\" \\ topic"
id = 3
)",
                        "print.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  // A path may hold any byte but NUL; a topic may not hold control characters.
  ASSERT_EQ(c->runtime.shm_dir, "/dev/\"shm\nline\t\x7f end");
  ASSERT_EQ(c->runtime.device, "eth\\0");
  ASSERT_EQ(c->streams.at(0).topic, "a \"quoted\" \\ topic");

  const std::string printed = c->to_toml();
  auto again = parse_config(printed, "print.toml");
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << printed;
  EXPECT_EQ(again->runtime.shm_dir, c->runtime.shm_dir);
  EXPECT_EQ(again->runtime.device, c->runtime.device);
  ASSERT_EQ(again->streams.size(), 1u);
  EXPECT_EQ(again->streams[0].topic, c->streams[0].topic);
  EXPECT_EQ(again->to_toml(), printed);
}

}  // namespace
}  // namespace pollux::core
