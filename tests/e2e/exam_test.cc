// A proctored exam end to end through the CLI, on a real controller with
// real sessions: a proctor creates a two-item exam and issues two candidate
// tokens; each candidate starts, opens items (sessions of their own
// variants), investigates and finishes; the proctor reads the signed
// results, rescores one item, exports the audit trails, and checks results
// and trails offline with the public key.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "tests/e2e/harness.h"

namespace firedrill::e2e {
namespace {

using json = nlohmann::json;

struct CliRun {
  int rc;
  std::string out, err;
};

class ExamTest : public ControllerTest {
 protected:
  // `firedrill ARGS` against this controller, as the holder of `token_file`
  // ("" for the owner), with `state` as the CLI's state dir.
  CliRun Cli(const std::string& token_file, const std::string& state, std::vector<std::string> args) {
    std::vector<std::string> argv = {"firedrill", "--controller", ctl_->address(), "--state-dir", state};
    if (!token_file.empty()) {
      argv.push_back("--token-file");
      argv.push_back(token_file);
    }
    argv.insert(argv.end(), args.begin(), args.end());
    std::ostringstream out, err;
    const int rc = cli::RunCli(argv, out, err);
    return {rc, out.str(), err.str()};
  }
  std::string Slurp(const std::string& path) {
    std::ifstream in(path);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }
};

TEST_F(ExamTest, AProctorRunsATwoItemExamForTwoCandidatesAndVerifiesTheResultsOffline) {
  const std::string lee = dir_ + "/lee.token";
  CliRun r = Cli("", dir_, {"token", "issue", "lee", "--role", "proctor", "--out", lee});
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string exam_file = dir_ + "/exam.yaml";
  std::ofstream(exam_file) << "id: ops-e2e\n"
                              "title: Operations, practical (e2e)\n"
                              "time_limit_min: 60\n"
                              "pass_mark: 50\n"
                              "items:\n"
                              "  - scenario: throughput-halved\n"
                              "  - pool: [throughput-halved, allreduce-slowdown]\n"
                              "    points: 50\n";
  r = Cli(lee, dir_, {"exam", "create", exam_file});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("exam 'ops-e2e' created: 2 items, 150 points"), std::string::npos) << r.out;
  for (const std::string who : {"ada", "bob"}) {
    r = Cli(lee, dir_, {"exam", "issue", "ops-e2e", who, "--out", dir_ + "/" + who + ".token"});
    ASSERT_EQ(r.rc, 0) << r.err;
    std::filesystem::create_directories(dir_ + "/" + who);
  }
  const std::string ada = dir_ + "/ada.token", bob = dir_ + "/bob.token";
  const std::string ada_dir = dir_ + "/ada", bob_dir = dir_ + "/bob";

  // A candidate reaches nothing of the catalogue and no proctor call.
  EXPECT_NE(Cli(ada, ada_dir, {"scenarios"}).rc, 0);
  EXPECT_NE(Cli(ada, ada_dir, {"exam", "results", "ops-e2e", "bob"}).rc, 0);

  r = Cli(ada, ada_dir, {"exam", "start"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("candidate ada, sitting 1: open"), std::string::npos) << r.out;
  r = Cli(ada, ada_dir, {"--json", "exam", "open", "1"});
  ASSERT_EQ(r.rc, 0) << r.err;
  const json ada1 = json::parse(r.out);
  const std::string ada_session = ada1["session_id"];
  EXPECT_EQ(ada1["seed"], "0") << "a candidate never sees the seed behind their variant";
  EXPECT_EQ(ada1["scenario_id"], "") << "nor an id that could name the cause";
  ASSERT_EQ(Cli(bob, bob_dir, {"exam", "start"}).rc, 0);
  r = Cli(bob, bob_dir, {"--json", "exam", "open", "1"});
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string bob_session = json::parse(r.out)["session_id"];
  EXPECT_NE(bob_session, ada_session);
  // Reconnecting: the same session.
  r = Cli(ada, ada_dir, {"--json", "exam", "open", "1"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["session_id"], ada_session);
  // Bob cannot see Ada's item: it answers as no session at all.
  r = Cli(bob, bob_dir, {"--session", ada_session, "status"});
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("no session"), std::string::npos) << r.err;

  // Ada investigates her item (its job running) and diagnoses; the score
  // she reads says what she submitted and nothing else.
  cli::DrillClient owner(ctl_->address(), std::chrono::seconds(30));
  owner.SetToken(cli::ReadOwnerToken(dir_));
  ASSERT_TRUE(WaitUntil(
                  owner, ada_session,
                  [](const v1::SessionStatus& s) { return s.session().state() == "running"; }, 300)
                  .ok());
  r = Cli(ada, ada_dir, {"--json", "status"});  // her current session, remembered by `exam open`
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out.find("(seed"), std::string::npos) << "the created event names the seed to others";
  EXPECT_EQ(r.out.find("throughput-halved"), std::string::npos) << r.out;
  r = Cli(ada, ada_dir, {"diagnose", "--cause", "straggler", "--rank", "1"});
  ASSERT_EQ(r.rc, 0) << r.err;
  r = Cli(ada, ada_dir, {"hint"});  // the exam file turns hints on; this one does not
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("hints are off in this exam"), std::string::npos) << r.err;
  r = Cli(ada, ada_dir, {"exam", "open", "2"});
  ASSERT_EQ(r.rc, 0) << r.err;

  r = Cli(ada, ada_dir, {"exam", "finish"});
  EXPECT_NE(r.rc, 0) << "finish asks for --yes";
  for (const auto& [token, state] : {std::pair{ada, ada_dir}, std::pair{bob, bob_dir}}) {
    r = Cli(token, state, {"exam", "finish", "--yes"});
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.out.find(": finished"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("result:"), std::string::npos) << "a candidate reads no score: " << r.out;
  }
  // Nothing more is done in a finished sitting's items, and nobody learns
  // their result from the controller's refusals.
  r = Cli(ada, ada_dir, {"diagnose", "--cause", "slow-link"});
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("sitting has ended"), std::string::npos) << r.err;
  r = Cli(ada, ada_dir, {"exam", "start"});
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("opened by your proctor"), std::string::npos) << r.err;
  r = Cli(ada, ada_dir, {"--json", "--session", ada_session, "score"});
  ASSERT_EQ(r.rc, 0) << r.err;
  const json sealed = json::parse(r.out);
  EXPECT_NE(sealed["note"].get<std::string>().find("the exam's result"), std::string::npos) << r.out;
  EXPECT_EQ(sealed["answer_cause"], "") << r.out;
  EXPECT_EQ(sealed["total"], 0) << r.out;

  // The proctor: results, the public key, offline checks.
  r = Cli(lee, dir_, {"exam", "list"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("ada"), std::string::npos) << r.out;
  const std::string out = dir_ + "/results";
  ASSERT_EQ(Cli(lee, dir_, {"exam", "pubkey", "--out", dir_ + "/exam.pub"}).rc, 0);
  for (const std::string who : {"ada", "bob"}) {
    r = Cli(lee, dir_, {"exam", "results", "ops-e2e", who, "--out", out});
    ASSERT_EQ(r.rc, 0) << r.err;
    const std::string result = out + "/ops-e2e-" + who + "-1.json";
    r = Cli(lee, dir_, {"exam", "verify", result, "--pubkey", dir_ + "/exam.pub"});
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.out.find("signature valid"), std::string::npos) << r.out;
    EXPECT_NE(Slurp(out + "/ops-e2e-" + who + "-1.html").find("<html"), std::string::npos);
    const std::string trail = dir_ + "/" + who + ".audit.jsonl";
    ASSERT_EQ(Cli(lee, dir_, {"exam", "audit", "ops-e2e", who, "--out", trail}).rc, 0);
    r = Cli(lee, dir_, {"exam", "verify-audit", trail, "--result", result, "--pubkey", dir_ + "/exam.pub"});
    EXPECT_EQ(r.rc, 0) << r.err;
  }
  const json res = json::parse(Slurp(out + "/ops-e2e-ada-1.json"))["result"];
  EXPECT_EQ(res["candidate"], "ada");
  EXPECT_EQ(res["ended_by"], "candidate");
  ASSERT_EQ(res["items"].size(), 2u);
  EXPECT_EQ(res["items"][0]["session"], ada_session);
  EXPECT_EQ(res["items"][0]["diagnoses"].size(), 1u);
  EXPECT_EQ(res["items"][0]["state"], "ended");
  EXPECT_FALSE(res["items"][0]["checks"].empty()) << "per-check points and reasons";
  // Ended before a fix, an item keeps its answer sealed, as any session does.
  EXPECT_EQ(res["items"][0]["answer"]["cause"], "");
  // Everything Ada did is in her trail, with its arguments.
  const std::string trail = Slurp(dir_ + "/ada.audit.jsonl");
  for (const char* action :
       {"\"action\":\"StartSitting\"", "\"action\":\"OpenItem\"", "\"action\":\"GetStatus\"",
        "\"action\":\"SubmitDiagnosis\"", "\"action\":\"FinishSitting\"", "\"action\":\"result signed\"",
        "\"cause\":\"straggler\""})
    EXPECT_NE(trail.find(action), std::string::npos) << action;
  // Bob's refused look at Ada's session is in his.
  EXPECT_NE(Slurp(dir_ + "/bob.audit.jsonl").find("NOT_FOUND"), std::string::npos);

  // A proctor of another exam learns nothing of this one: its sessions are
  // no sessions, its results no results.
  const std::string kim = dir_ + "/kim.token";
  ASSERT_EQ(
      Cli("", dir_, {"token", "issue", "kim", "--role", "proctor", "--exam", "other-exam", "--out", kim}).rc,
      0);
  r = Cli(kim, dir_, {"--session", ada_session, "status"});
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("no session"), std::string::npos) << r.err;
  r = Cli(kim, dir_, {"sessions"});
  EXPECT_EQ(r.out.find(ada_session), std::string::npos) << r.out;
  EXPECT_NE(Cli(lee, dir_, {"sessions"}).out.find(ada_session), std::string::npos);
  r = Cli(kim, dir_, {"exam", "results", "ops-e2e", "ada"});
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("no exam 'ops-e2e'"), std::string::npos) << r.err;

  // A rescore re-signs: the new result verifies, its trail records why.
  r = Cli(lee, dir_,
          {"exam", "rescore", "ops-e2e", "bob", "2", "25", "--reason", "partial credit for the probe",
           "--out", out});
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string rescored = out + "/ops-e2e-bob-1-r2.json";
  r = Cli(lee, dir_, {"exam", "verify", rescored, "--pubkey", dir_ + "/exam.pub"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(json::parse(Slurp(rescored))["result"]["items"][1]["points"], 25);
}

}  // namespace
}  // namespace firedrill::e2e
