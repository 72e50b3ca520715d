// pollux/config.h: an application's own table read by Pollux's configuration machinery (the
// same value checks, error format, suggestions and printing as Pollux's tables), and
// check_config(), which says what a configuration sets up without starting it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "pollux/config.h"
#include "tests/support/config_errors.h"

namespace pollux {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

enum class Mode { kFast, kSafe };

struct App {
  std::uint32_t workers = 2;
  std::uint64_t buffer = 1u << 20;
  double ratio = 0.5;
  std::string name = "app";
  Mode mode = Mode::kSafe;
  bool strict = false;
};

const ConfigTable<App>& Table() {
  static const ConfigTable<App>* const t = [] {
    auto* table = new ConfigTable<App>("app");
    table->integer("workers", &App::workers, 1, 64, "worker threads")
        .size("buffer", &App::buffer, 4096, std::uint64_t{1} << 30, "bytes of the buffer",
              [](std::uint64_t v) { return v % 4096 != 0 ? std::string("expected a multiple of 4096") : ""; })
        .number("ratio", &App::ratio, 0, 1, "share of the work")
        .text("name", &App::name, "a name", "what the application is called",
              [](const std::string& v) { return v.empty() ? std::string("expected 1 or more characters") : ""; })
        .choice("mode", &App::mode, {{"fast", Mode::kFast}, {"safe", Mode::kSafe}}, "how it runs")
        .choice("strictness", &App::strict, {{"lenient", false}, {"strict", true}}, "what it refuses");
    return table;
  }();
  return *t;
}

std::string ErrorOf(std::string_view toml, const std::vector<std::string>& overrides = {}) {
  App app;
  absl::StatusOr<AppConfigFile> f = Table().load(toml, "a.toml", overrides, &app);
  EXPECT_FALSE(f.ok()) << "accepted:\n" << toml;
  return f.ok() ? "" : std::string(f.status().message());
}

void ExpectErrors(std::initializer_list<testing::ConfigErrorCase> cases) {
  testing::expect_config_errors([](std::string_view toml) { return ErrorOf(toml); }, cases);
}

TEST(AppConfig, ReadsEveryTypeAndRecordsWhere) {
  App app;
  absl::StatusOr<AppConfigFile> f = Table().load(
      "[runtime]\nthreading = \"shared\"\n[app]\nworkers = 8\nbuffer = \"64KiB\"\nratio = 1\nname = \"x\"\n"
      "mode = \"fast\"\nstrictness = \"strict\"\n",
      "a.toml", {}, &app);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(app.workers, 8u);
  EXPECT_EQ(app.buffer, 64u << 10);
  EXPECT_DOUBLE_EQ(app.ratio, 1.0);
  EXPECT_EQ(app.name, "x");
  EXPECT_EQ(app.mode, Mode::kFast);
  EXPECT_TRUE(app.strict);
  EXPECT_EQ(f->where.at("app.buffer"), "a.toml:5");
  EXPECT_EQ(f->pollux.threading, "shared");
  // Pollux's part keeps its lines; the table's are blank.
  EXPECT_EQ(f->pollux_toml, "[runtime]\nthreading = \"shared\"\n\n\n\n\n\n\n\n");
}

TEST(AppConfig, ErrorsAreWordedAsPolluxTables) {
  ExpectErrors({
      {"[app]\nworkerz = 3\n", "a.toml:2: app.workerz: unknown key (did you mean app.workers?)"},
      {"[app]\n\nworkers = 0\n", "a.toml:3: app.workers: expected 1..64, got 0"},
      {"[app]\nworkers = \"2\"\n", "a.toml:2: app.workers: expected an integer, got \"2\""},
      {"[app]\nbuffer = \"1MB\"\n", "a.toml:2: app.buffer: expected a size like 16777216 or \"16MiB\", got \"1MB\""},
      {"[app]\nbuffer = 100\n", "a.toml:2: app.buffer: expected 4096..1073741824 bytes, got 100"},
      {"[app]\nbuffer = 5000\n", "a.toml:2: app.buffer: expected a multiple of 4096"},
      {"[app]\nratio = 2.5\n", "a.toml:2: app.ratio: expected 0..1, got 2.5"},
      {"[app]\nname = 3\n", "a.toml:2: app.name: expected a name, got 3"},
      {"[app]\nname = \"\"\n", "a.toml:2: app.name: expected 1 or more characters"},
      {"[app]\nmode = \"quick\"\n", "a.toml:2: app.mode: expected fast|safe, got \"quick\""},
      {"app = 3\n", "a.toml:1: app: expected a table [app], got 3"},
  });
  EXPECT_THAT(ErrorOf("[app]\nworkers = = 3\n"), StartsWith("a.toml:2:"));
  // Pollux's own keys, by Pollux, with their lines as written.
  EXPECT_EQ(ErrorOf("[app]\nworkers = 3\n[runtime]\nthreading = \"dedicted\"\n"),
            "a.toml:4: runtime.threading: expected dedicated|shared|inline, got \"dedicted\"");
}

TEST(AppConfig, OverridesGoThroughTheSameChecks) {
  App app;
  absl::StatusOr<AppConfigFile> f =
      Table().load("[app]\nworkers = 3\n", "a.toml", {"app.workers=5", "app.mode=fast", "runtime.idle=yield"}, &app);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(app.workers, 5u);
  EXPECT_EQ(app.mode, Mode::kFast);
  EXPECT_EQ(f->where.at("app.workers"), "--set");
  EXPECT_EQ(f->pollux.idle, IdleKind::kYield);
  EXPECT_EQ(f->pollux_source, "a.toml + --set");
  EXPECT_EQ(ErrorOf("", {"app.workers=99"}), "--set: app.workers: expected 1..64, got 99");
  EXPECT_EQ(ErrorOf("", {"app.nope=1"}), "--set: app.nope: unknown key (did you mean app.name?)");
  EXPECT_THAT(ErrorOf("", {"nodot"}), StartsWith("--set nodot: expected section.key=value"));
  EXPECT_THAT(ErrorOf("", {"runtime.idle=lazy"}), HasSubstr("runtime.idle: expected"));
}

TEST(AppConfig, PrintsEveryKeyWithHelpAndReadsItBack) {
  App app;
  app.buffer = 2u << 20;
  app.ratio = 0.25;
  app.name = "a \"b\"";
  const std::string printed = Table().to_toml(app);
  EXPECT_THAT(printed, StartsWith("[app]\nworkers = 2  # worker threads\nbuffer = \"2MiB\"  # bytes of the buffer\n"));
  EXPECT_THAT(printed, HasSubstr("name = \"a \\\"b\\\"\"  # what the application is called\n"));
  EXPECT_THAT(printed, HasSubstr("strictness = \"lenient\"  # what it refuses\n"));
  App again;
  absl::StatusOr<AppConfigFile> f = Table().load(printed, "printed", {}, &again);
  ASSERT_TRUE(f.ok()) << f.status() << "\n" << printed;
  EXPECT_EQ(Table().to_toml(again), printed);
}

TEST(CheckConfig, SaysWhatAConfigurationSetsUpWithoutStartingIt) {
  absl::StatusOr<ContextInfo> info = check_config(
      "[runtime]\nthreading = \"inline\"\nidle = \"busy-spin\"\n[shm]\nflow_control = \"backpressure\"\n", "c.toml");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->source, "c.toml");
  EXPECT_EQ(info->threading, "inline");
  EXPECT_EQ(info->transport, "shm");
  EXPECT_EQ(info->idle, IdleKind::kBusySpin);
  EXPECT_EQ(info->flow_control, "backpressure");
  EXPECT_THAT(info->effective_config, HasSubstr("threading = \"inline\""));
  absl::StatusOr<ContextInfo> bad = check_config("[shm]\nlog_size = 3\n", "c.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), StartsWith("c.toml:2: shm.log_size:"));
}

}  // namespace
}  // namespace pollux
