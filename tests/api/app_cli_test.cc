// pollux/cli.h: the command-line conventions of every Pollux program, public so an application
// (the examples among them) follows them too. The programs themselves are run against the same
// contract by tests/tools/cli_test.
#include <gtest/gtest.h>

#include <csignal>
#include <string>
#include <vector>

#include "pollux/cli.h"

namespace pollux {
namespace {

TEST(AppCli, UsageExitIsExUsage) { EXPECT_EQ(cli::kUsageExit, 64); }

TEST(AppCli, VersionIsTheProjectVersion) { EXPECT_STREQ(cli::version(), POLLUX_TEST_PROJECT_VERSION); }

TEST(AppCli, HelpAndVersionAreAnsweredOthersGoOn) {
  struct Case {
    const char* arg;
    int rc;
    std::string out;
  };
  const std::string version = cli::version();
  const std::vector<Case> cases = {
      {"--help", 0, "usage: app [--count N]\n"},
      {"-h", 0, "usage: app [--count N]\n"},
      {"--version", 0, "app " + version + "\n"},
      {"--count", -1, ""},
      {"-help", -1, ""},
      {"help", -1, ""},
  };
  for (const Case& c : cases) {
    testing::internal::CaptureStdout();
    const int rc = cli::handle_standard_flag(c.arg, "app", "usage: app [--count N]");  // no final '\n'
    const std::string out = testing::internal::GetCapturedStdout();
    EXPECT_EQ(rc, c.rc) << c.arg;
    EXPECT_EQ(out, c.out) << c.arg;
  }
  // A help text that ends with its own newline gets no second one.
  testing::internal::CaptureStdout();
  EXPECT_EQ(cli::handle_standard_flag("--help", "app", "text\n"), 0);
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "text\n");
}

TEST(AppCli, SuggestionsFromAHelpText) {
  const std::vector<std::string> known =
      cli::flags_in("usage: app [--book-out FILE] [--print-config]\n  --line_a ADDR  line A\n  --x-  not a flag\n");
  EXPECT_EQ(known, (std::vector<std::string>{"--book-out", "--print-config", "--line_a", "--x"}));
  // An abbreviation matches with '_' and '-' alike; a swap of two letters is one edit.
  EXPECT_EQ(cli::unknown_flag_message("--print_c", known),
            "unknown flag '--print_c'; did you mean '--print-config'? (see --help)");
  EXPECT_EQ(cli::unknown_flag_message("--line-a=1.2.3.4", known),
            "unknown flag '--line-a'; did you mean '--line_a'? (see --help)");
  EXPECT_EQ(cli::unknown_flag_message("--boko-out", known),
            "unknown flag '--boko-out'; did you mean '--book-out'? (see --help)");
  EXPECT_EQ(cli::unknown_flag_message("--", known), "unknown flag '--' (see --help)");
  EXPECT_EQ(cli::unknown_flag_message("-", known), "unexpected argument '-' (see --help)");
  EXPECT_EQ(cli::closest("--zzzzzz", known), "");
}

TEST(AppCli, StopSignalsByName) {
  EXPECT_STREQ(cli::signal_name(SIGINT), "SIGINT");
  EXPECT_STREQ(cli::signal_name(SIGTERM), "SIGTERM");
  EXPECT_STREQ(cli::signal_name(SIGHUP), "SIGHUP");
  EXPECT_STREQ(cli::signal_name(SIGUSR1), "a signal");
  EXPECT_STREQ(cli::signal_name(0), "a signal");
}

}  // namespace
}  // namespace pollux
