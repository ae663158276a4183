// The command line's argument handling and error messages, without a real
// controller: every test either fails before any RPC or points at an address
// where nothing listens (connection refused is immediate).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace firedrill::cli {
namespace {

constexpr const char* kDeadAddress = "127.0.0.1:1";

struct Result {
  int code;
  std::string out;
  std::string err;
};

class CliArgsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "fd-cli-test-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    state_dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(state_dir_, ec);
  }

  // Runs `firedrill --state-dir TMP --controller 127.0.0.1:1 ARGS...`, so no
  // test reads the user's state or reaches a real controller.
  Result Run(std::vector<std::string> args, bool isolate = true) {
    std::vector<std::string> argv = {"firedrill"};
    if (isolate) argv.insert(argv.end(), {"--state-dir", state_dir_, "--controller", kDeadAddress});
    argv.insert(argv.end(), args.begin(), args.end());
    std::ostringstream out, err;
    const int code = RunCli(argv, out, err);
    return {code, out.str(), err.str()};
  }

  std::string state_dir_;
};

// An error is exactly one line: "error: ...\n".
void ExpectOneLineError(const Result& r) {
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "err: [" << r.err << "]";
  EXPECT_FALSE(r.err.empty());
  if (!r.err.empty()) {
    EXPECT_EQ(r.err.back(), '\n') << r.err;
  }
  EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
}

bool Has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST_F(CliArgsTest, HelpExitsZero) {
  const Result r = Run({"--help"}, false);
  EXPECT_EQ(r.code, 0);
  EXPECT_TRUE(Has(r.out, "diagnose")) << r.out;
  EXPECT_TRUE(Has(r.out, "fix")) << r.out;
  EXPECT_TRUE(r.err.empty()) << r.err;
  EXPECT_EQ(Run({"--help"}).code, 0);
}

TEST_F(CliArgsTest, UnknownSubcommandIsUsageError) {
  const Result r = Run({"frobnicate"});
  EXPECT_EQ(r.code, 2);
  ExpectOneLineError(r);
  // CLI11 checks "a subcommand is required" before unexpected arguments, so
  // today the message does not name the unknown word; it does say where to look.
  EXPECT_TRUE(Has(r.err, "firedrill --help")) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST_F(CliArgsTest, NoSubcommandIsUsageError) {
  const Result r = Run({});
  EXPECT_EQ(r.code, 2);
  ExpectOneLineError(r);
}

TEST_F(CliArgsTest, FiredrillAlonePrintsTheHelp) {
  const Result r = Run({}, false);
  EXPECT_EQ(r.code, 0);
  EXPECT_TRUE(Has(r.out, "diagnose")) << r.out;
  EXPECT_TRUE(r.err.empty()) << r.err;
}

TEST_F(CliArgsTest, AMistypedCommandGetsADidYouMean) {
  const Result r = Run({"statsu"});
  EXPECT_EQ(r.code, 2);
  ExpectOneLineError(r);
  EXPECT_TRUE(Has(r.err, "did you mean 'status'?")) << r.err;
}

TEST_F(CliArgsTest, DiagnoseHelpListsTheCausesWithTheirMeaning) {
  const Result r = Run({"diagnose", "--help"}, false);
  EXPECT_EQ(r.code, 0);
  for (const char* c : {"straggler:", "slow-link:", "no-fault:", "data-loader-starvation:"})
    EXPECT_TRUE(Has(r.out, c)) << c << " in " << r.out;
}

TEST_F(CliArgsTest, BadInputIsRefusedBeforeAnyCall) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"start", "throughput-halved", "--seed", "-5"},
           {"--session", "s-1", "diagnose", "--cause", "straggler", "--rank", "1", "--rank", "1"},
           {"--session", "s-1", "diagnose", "--cause", "straggler:1", "--cause", "slow-link", "--rank", "2"},
           {"--session", "s-1", "fix"},
           {"--session", "s-1", "fix", "--replace-host", "1", "--replace-host", "1"}}) {
    const Result r = Run(args);
    EXPECT_EQ(r.code, 1) << args[0];
    ExpectOneLineError(r);
    EXPECT_FALSE(Has(r.err, "no controller answers")) << "refused only at the controller: " << r.err;
  }
}

TEST_F(CliArgsTest, ErrorsAreJsonUnderJson) {
  const Result r = Run({"--json", "--session", "s-1", "status"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err.rfind("{\"error\":{", 0), 0u) << r.err;
  EXPECT_TRUE(Has(r.err, "\"code\":\"UNAVAILABLE\"")) << r.err;
}

TEST(FindingsFromFlagsTest, OneCauseTakesTheRanksSeveralCarryTheirOwn) {
  auto one = FindingsFromFlags({"straggler"}, {2, 3});
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].culprit_ranks_size(), 2);
  auto two = FindingsFromFlags({"padding-waste", "straggler:1,3"}, {});
  ASSERT_TRUE(two.ok()) << two.status().message();
  ASSERT_EQ(two->size(), 2u);
  EXPECT_EQ((*two)[0].culprit_ranks_size(), 0);
  EXPECT_EQ((*two)[1].cause(), "straggler");
  EXPECT_EQ((*two)[1].culprit_ranks(1), 3);
  EXPECT_FALSE(FindingsFromFlags({"straggler:x"}, {}).ok());
  EXPECT_FALSE(FindingsFromFlags({"straggler:"}, {}).ok());
  EXPECT_FALSE(FindingsFromFlags({":2"}, {}).ok());
  EXPECT_FALSE(FindingsFromFlags({"a", "b"}, {1}).ok()) << "--rank with two causes is ambiguous";
}

TEST_F(CliArgsTest, DiagnoseWithoutCauseIsUsageError) {
  const Result r = Run({"diagnose", "--rank", "2"});
  EXPECT_EQ(r.code, 2);
  ExpectOneLineError(r);
  EXPECT_TRUE(Has(r.err, "--cause")) << r.err;
}

TEST_F(CliArgsTest, NonNumericRankIsUsageError) {
  const Result r = Run({"diagnose", "--cause", "straggler", "--rank", "two"});
  EXPECT_EQ(r.code, 2);
  ExpectOneLineError(r);
}

TEST_F(CliArgsTest, StartWithoutScenarioIsUsageError) {
  const Result r = Run({"start"});
  EXPECT_EQ(r.code, 2);
  ExpectOneLineError(r);
}

TEST_F(CliArgsTest, FixSetWithoutEqualsIsRejectedBeforeAnyCall) {
  const Result r = Run({"fix", "--set", "foo"});
  EXPECT_NE(r.code, 0);
  ExpectOneLineError(r);
  EXPECT_TRUE(Has(r.err, "--set expects KEY=VALUE")) << r.err;
  EXPECT_TRUE(Has(r.err, "'foo'")) << r.err;
  // Rejected before looking for a session or the controller.
  EXPECT_FALSE(Has(r.err, "no current session")) << r.err;
  EXPECT_FALSE(Has(r.err, "no controller")) << r.err;
}

TEST_F(CliArgsTest, StatusWithoutCurrentSessionSaysHowToStartOne) {
  for (const char* cmd : {"status", "score", "hint", "end"}) {
    const Result r = Run({cmd});
    EXPECT_EQ(r.code, 1) << cmd;
    ExpectOneLineError(r);
    EXPECT_TRUE(Has(r.err, "no current session")) << r.err;
    EXPECT_TRUE(Has(r.err, "firedrill start")) << r.err;
  }
  const Result d = Run({"diagnose", "--cause", "straggler"});
  EXPECT_EQ(d.code, 1);
  ExpectOneLineError(d);
  EXPECT_TRUE(Has(d.err, "firedrill start")) << d.err;
}

TEST_F(CliArgsTest, DeadControllerSaysSoAndPointsAtUp) {
  const std::vector<std::vector<std::string>> cmds = {
      {"scenarios", "list"},
      {"sessions"},
      {"start", "throughput-halved", "--no-wait"},
      {"--session", "s-1", "status"},
      {"--session", "s-1", "score"},
      {"--session", "s-1", "hint"},
      {"--session", "s-1", "diagnose", "--cause", "straggler", "--rank", "2"},
      {"--session", "s-1", "fix", "--replace-host", "2", "--no-wait"},
      {"--session", "s-1", "fix", "--set", "data.batch_size=32", "--no-wait"},
  };
  for (const auto& cmd : cmds) {
    const Result r = Run(cmd);
    EXPECT_EQ(r.code, 1) << cmd[0];
    ExpectOneLineError(r);
    EXPECT_TRUE(Has(r.err, "no controller answers at 127.0.0.1:1")) << r.err;
    EXPECT_TRUE(Has(r.err, "firedrill up")) << r.err;
  }
}

TEST_F(CliArgsTest, DownWithNothingRunning) {
  const Result r = Run({"down"});
  EXPECT_EQ(r.code, 1);
  ExpectOneLineError(r);
  EXPECT_TRUE(Has(r.err, "no controller is running")) << r.err;
  EXPECT_TRUE(Has(r.err, state_dir_)) << r.err;
}

TEST_F(CliArgsTest, CurrentSessionIsRememberedPerStateDir) {
  CliContext ctx;
  ctx.state_dir = state_dir_;
  EXPECT_FALSE(CurrentSession(ctx).ok());
  RememberSession(ctx, "s-42");
  auto id = CurrentSession(ctx);
  ASSERT_TRUE(id.ok()) << id.status().message();
  EXPECT_EQ(*id, "s-42");
  ctx.session = "s-7";  // --session wins
  EXPECT_EQ(*CurrentSession(ctx), "s-7");
}

// --- ParseSetting -------------------------------------------------------------

TEST(ParseSettingTest, SplitsAtTheFirstEquals) {
  auto s = ParseSetting("data.batch_size=32");
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->key(), "data.batch_size");
  EXPECT_EQ(s->value(), "32");

  s = ParseSetting("k=a=b");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->key(), "k");
  EXPECT_EQ(s->value(), "a=b");

  s = ParseSetting("checkpoint.resume_from=");  // from step 0: the one key whose "none" is empty
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->value(), "");
}

TEST(ParseSettingTest, RejectsMissingKeyValueOrEquals) {
  for (const std::string bad : {"foo", "", "=32", "data.batch_size=", "="}) {
    auto s = ParseSetting(bad);
    ASSERT_FALSE(s.ok()) << "'" << bad << "'";
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(Has(s.status().message(), "KEY=VALUE")) << s.status().message();
    EXPECT_TRUE(Has(s.status().message(), "'" + bad + "'")) << s.status().message();
    EXPECT_FALSE(Has(s.status().message(), "\n"));
  }
}

}  // namespace
}  // namespace firedrill::cli

namespace firedrill::cli {
namespace {

// `up --state-dir X` sticks: later commands without flags find that
// controller and that state dir; a flag or an environment variable wins.
TEST(ContextTest, WhatUpStartedIsFoundAgainWithoutFlags) {
  std::string tmpl = (std::filesystem::temp_directory_path() / "fd-ctx-XXXXXX").string();
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
  setenv("XDG_CONFIG_HOME", tmpl.c_str(), 1);
  unsetenv("FIREDRILL_CONTROLLER");
  unsetenv("FIREDRILL_STATE_DIR");
  SaveContext({"127.0.0.1:50123", "/srv/drills", ""});
  CliContext ctx;
  ctx.controller = "127.0.0.1:50071";
  ctx.state_dir = "/default";
  ResolveContext(&ctx, false, false);
  EXPECT_EQ(ctx.controller, "127.0.0.1:50123");
  EXPECT_EQ(ctx.state_dir, "/srv/drills");
  // --state-dir given: kept; --controller elsewhere: the saved state dir is
  // not that controller's.
  ctx = CliContext{};
  ctx.controller = "10.0.0.9:50071";
  ctx.state_dir = "/default";
  ResolveContext(&ctx, true, false);
  EXPECT_EQ(ctx.controller, "10.0.0.9:50071");
  EXPECT_EQ(ctx.state_dir, "/default");
  setenv("FIREDRILL_STATE_DIR", "/from-env", 1);
  ctx = CliContext{};
  ctx.controller = "127.0.0.1:50071";
  ctx.state_dir = "/from-env";
  ResolveContext(&ctx, false, false);
  EXPECT_EQ(ctx.state_dir, "/from-env");
  unsetenv("FIREDRILL_STATE_DIR");
  unsetenv("XDG_CONFIG_HOME");
  std::filesystem::remove_all(tmpl);
}

// A token is never sent in plaintext off this machine: the call fails before
// anything goes on the wire (10.255.255.1 answers nothing; the refusal is
// immediate, not a timeout).
TEST(ClientTokens, ATokenIsNotSentInPlaintextOffLoopback) {
  EXPECT_TRUE(IsLoopbackAddress("127.0.0.1:50071"));
  EXPECT_TRUE(IsLoopbackAddress("127.3.2.1:1"));
  EXPECT_TRUE(IsLoopbackAddress("localhost:50071"));
  EXPECT_TRUE(IsLoopbackAddress("[::1]:50071"));
  EXPECT_TRUE(IsLoopbackAddress("unix:/tmp/x.sock"));
  EXPECT_FALSE(IsLoopbackAddress("10.255.255.1:50071"));
  EXPECT_FALSE(IsLoopbackAddress("drills.example.org:50071"));
  EXPECT_FALSE(IsLoopbackAddress("127.0.0.1.example.org:50071"));

  DrillClient remote("10.255.255.1:50071", std::chrono::seconds(30));
  remote.SetToken("fdt_0123");
  const auto t0 = std::chrono::steady_clock::now();
  auto r = remote.WhoAmI();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("refusing to send a token in plaintext"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  // Without a token nothing is refused here (the controller refuses it).
  DrillClient local(kDeadAddress, std::chrono::seconds(2));
  local.SetToken("fdt_0123");
  EXPECT_EQ(local.WhoAmI().status().code(), StatusCode::kUnavailable);
}

// The state dir's owner token goes only to the live controller that wrote
// that state dir's controller.addr.
TEST(ClientTokens, TheOwnerTokenGoesOnlyToTheLiveControllerThatWroteIt) {
  std::string tmpl = (std::filesystem::temp_directory_path() / "fd_token_test.XXXXXX").string();
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
  std::ofstream(tmpl + "/owner.token") << "fdt_owner\n";
  std::ofstream(tmpl + "/controller.addr") << "127.0.0.1:50999\n";
  unsetenv("FIREDRILL_TOKEN");
  // No live controller.pid (a crash left controller.addr behind): none.
  auto none = ResolveToken("", tmpl, "127.0.0.1:50999");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, "");
  std::ofstream(tmpl + "/given.token") << "fdt_given\n";
  auto given = ResolveToken(tmpl + "/given.token", tmpl, "127.0.0.1:50999");
  ASSERT_TRUE(given.ok());
  EXPECT_EQ(*given, "fdt_given");
  EXPECT_FALSE(ResolveToken(tmpl + "/missing.token", tmpl, "127.0.0.1:50999").ok());
  std::filesystem::remove_all(tmpl);
}

}  // namespace
}  // namespace firedrill::cli
