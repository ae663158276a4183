// The ways to learn the answer or to score without fixing, played as an
// attacker would with only the public API (the CLI's calls) and the
// machine's file system: each must fail. Each test names the attack.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <set>
#include <string>

#include "firedrill/v1/agent.grpc.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "tests/e2e/harness.h"

namespace firedrill::e2e {
namespace {

namespace fs = std::filesystem;

const v1::ScoreItem* Item(const v1::ScoreReport& r, const std::string& name) {
  for (const auto& it : r.items())
    if (it.name() == name) return &it;
  return nullptr;
}

class AttackerTest : public ControllerTest {
 protected:
  StatusOr<v1::SubmitDiagnosisResponse> Diagnose(const std::string& id, const std::string& cause,
                                                  std::initializer_list<int> ranks) {
    v1::SubmitDiagnosisRequest d;
    d.set_session_id(id);
    d.set_cause(cause);
    for (int r : ranks) d.add_culprit_ranks(r);
    return c().SubmitDiagnosis(d);
  }
};

// The oracle: submit a guess, ask for the score, repeat. Before scoring the
// score repeats what was submitted and says nothing else, and every guess
// after the first is priced.
TEST_F(AttackerTest, TheScoreBeforeScoringIsNoOracleAndGuessesArePriced) {
  auto info = StartRunning(c(), "throughput-halved", 1101);
  ASSERT_TRUE(info.ok()) << info.status().message();
  const std::string id = info->session_id();
  const std::vector<std::pair<std::string, int>> guesses = {
      {"slow-link", 0}, {"slow-link", 1}, {"straggler", 0}, {"straggler", 1}, {"data-loader-starvation", 2}};
  std::set<std::string> seen;
  for (const auto& [cause, rank] : guesses) {
    auto d = Diagnose(id, cause, {rank});
    ASSERT_TRUE(d.ok()) << d.status().message();
    auto score = c().GetScore(id);
    ASSERT_TRUE(score.ok()) << score.status().message();
    EXPECT_FALSE(score->final());
    EXPECT_EQ(score->note(), "not scored yet");
    EXPECT_EQ(score->items_size(), 0);
    EXPECT_EQ(score->total(), 0);
    EXPECT_FALSE(score->verification().done());
    EXPECT_EQ(score->answer_findings_size(), 0);
    EXPECT_TRUE(score->answer_cause().empty());
    // The same bytes for a right and a wrong guess, apart from the guess.
    v1::ScoreReport blank = *score;
    blank.clear_diagnoses();
    seen.insert(blank.SerializeAsString());
    // Nor does the status (events included) say anything about it.
    auto st = c().GetStatus(id);
    ASSERT_TRUE(st.ok());
    for (const auto& e : st->events()) {
      EXPECT_EQ(e.message().find("right"), std::string::npos) << e.message();
      EXPECT_EQ(e.message().find("wrong"), std::string::npos) << e.message();
    }
  }
  EXPECT_EQ(seen.size(), 1u) << "the sealed score differed between guesses";
  // A bogus cause gets the taxonomy, not the answer.
  auto bogus = Diagnose(id, "gremlins", {});
  ASSERT_FALSE(bogus.ok());
  EXPECT_EQ(bogus.status().message().find("straggler is"), std::string::npos);

  // Find the culprit honestly and fix it: every diagnosis after the first is
  // a priced revision (the refused bogus one is not a diagnosis).
  const int culprit = WatchForStraggler(c(), id, 90);
  ASSERT_GE(culprit, 0);
  ASSERT_TRUE(Diagnose(id, "straggler", {culprit}).ok());
  v1::ApplyFixRequest fix;
  fix.set_session_id(id);
  fix.add_replace_host_ranks(culprit);
  auto score = FixAndScore(c(), fix);
  ASSERT_TRUE(score.ok()) << score.status().message();
  ASSERT_TRUE(score->final());
  EXPECT_EQ(Item(*score, "cause")->points(), 40);
  EXPECT_EQ(Item(*score, "revisions")->points(), -25);  // six diagnoses, five revisions x 5
  EXPECT_EQ(score->diagnoses_size(), 6);
  // No revision after the fix.
  EXPECT_FALSE(Diagnose(id, "slow-link", {}).ok());
  EXPECT_TRUE(score->verification().passed()) << score->verification().detail();
  EXPECT_EQ(Item(*score, "culprit")->points(), 20);
  ASSERT_EQ(score->answer_culprit_ranks_size(), 1);
  EXPECT_EQ(score->answer_culprit_ranks(0), culprit);

  // Crashing the controller does not buy a fresh attempt, and nothing
  // acknowledged is lost: another controller on the same state has the
  // session, scored, with the same score.
  const int total = score->total();
  ctl_->Kill9();
  ctl_ = std::make_unique<ControllerProcess>(dir_);
  ASSERT_TRUE(ctl_->ok());
  auto sessions = c().ListSessions();
  ASSERT_TRUE(sessions.ok());
  ASSERT_EQ(sessions->sessions_size(), 1);
  EXPECT_EQ(sessions->sessions(0).session_id(), id);
  EXPECT_EQ(sessions->sessions(0).state(), "scored");
  EXPECT_EQ(sessions->sessions(0).total_score(), total);
  auto again = c().GetScore(id);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->total(), total);
  EXPECT_FALSE(Diagnose(id, "straggler", {culprit}).ok()) << "a scored session takes no diagnosis";
}

// Changing the workload: a smaller dataset makes the epoch-end hang go away,
// and would be measured against a different job.
TEST_F(AttackerTest, AWorkloadChangeIsRefusedAndDoesNotUseUpTheFix) {
  auto info = StartRunning(c(), "epoch-end-hang", 1102);
  ASSERT_TRUE(info.ok()) << info.status().message();
  const std::string id = info->session_id();
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"data.dataset_size", "960"}, {"data.batch_size", "8"}, {"world_size", "2"}, {"model.hidden", "64"}}) {
    v1::ApplyFixRequest fix;
    fix.set_session_id(id);
    auto* s = fix.add_settings();
    s->set_key(key);
    s->set_value(value);
    auto r = c().ApplyFix(fix);
    ASSERT_FALSE(r.ok()) << key;
    EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status().message();
    EXPECT_NE(r.status().message().find("workload setting"), std::string::npos) << r.status().message();
  }
  auto st = c().GetStatus(id);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->session().state(), "running");
}

// The shotgun: replace every host without naming a culprit. The straggler's
// host is among them, so the job is healthy again, but that is not a
// diagnosis and three of the four were healthy hosts.
TEST_F(AttackerTest, ReplacingEveryHostWithoutADiagnosisEarnsNothing) {
  auto info = StartRunning(c(), "throughput-halved", 1103);
  ASSERT_TRUE(info.ok()) << info.status().message();
  ASSERT_GE(WatchForStraggler(c(), info->session_id(), 90), 0);  // the fault has started
  v1::ApplyFixRequest fix;
  fix.set_session_id(info->session_id());
  for (int r = 0; r < 4; ++r) fix.add_replace_host_ranks(r);
  auto score = FixAndScore(c(), fix);
  ASSERT_TRUE(score.ok()) << score.status().message();
  ASSERT_TRUE(score->final());
  EXPECT_LE(Item(*score, "fix")->points(), 15) << Item(*score, "fix")->reason();
  EXPECT_EQ(Item(*score, "collateral")->points(), -30);
  EXPECT_EQ(score->collateral_size(), 3);
  EXPECT_EQ(Item(*score, "time")->points(), 0);
  EXPECT_EQ(score->total(), 0);
}

// A fix sent before the incident of the briefing (a host that will go down
// and leave damaged checkpoints) fixes nothing: moving every rank to a new
// host first does not dodge it, verification meets it all the same.
TEST_F(AttackerTest, AFixBeforeTheIncidentFixesNothing) {
  auto info = StartRunning(c(), "restart-loop", 1105);
  ASSERT_TRUE(info.ok()) << info.status().message();
  v1::ApplyFixRequest fix;
  fix.set_session_id(info->session_id());
  for (int r = 0; r < 4; ++r) fix.add_replace_host_ranks(r);
  auto* s = fix.add_settings();
  s->set_key("checkpoint.resume_from");
  s->set_value("latest");
  auto score = FixAndScore(c(), fix);
  ASSERT_TRUE(score.ok()) << score.status().message();
  ASSERT_TRUE(score->final());
  EXPECT_EQ(Item(*score, "fix")->points(), 0) << Item(*score, "fix")->reason();
  EXPECT_EQ(score->total(), 0);
}

// The answers on disk: the state dir and the database are the controller
// owner's alone, and so is the agents' socket.
TEST_F(AttackerTest, TheStateIsReadableByItsOwnerOnly) {
  auto info = StartRunning(c(), "quiet-night-page", 1104);
  ASSERT_TRUE(info.ok()) << info.status().message();
  auto mode = [](const std::string& p) {
    struct stat st {};
    EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
    return st.st_mode & 0777;
  };
  EXPECT_EQ(mode(dir_), 0700u);
  for (const char* f : {"/firedrill.db", "/firedrill.db-wal", "/controller.lock", "/agent.sock"})
    EXPECT_EQ(mode(dir_ + f), 0600u) << f;
  EXPECT_EQ(mode(dir_ + "/logs"), 0700u);
  for (const auto& e : fs::directory_iterator(dir_ + "/logs")) EXPECT_EQ(mode(e.path()), 0600u) << e.path();
}

// The learner's port: only Drill (and reflection for it), no AgentLink to
// register a fake agent on or to read a rank's faults from.
TEST_F(AttackerTest, TheLearnerPortServesOnlyTheDrillService) {
  auto channel = grpc::CreateChannel(ctl_->address(), grpc::InsecureChannelCredentials());
  {
    auto stub = grpc::reflection::v1alpha::ServerReflection::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    auto stream = stub->ServerReflectionInfo(&ctx);
    grpc::reflection::v1alpha::ServerReflectionRequest req;
    req.set_list_services("");
    ASSERT_TRUE(stream->Write(req));
    grpc::reflection::v1alpha::ServerReflectionResponse resp;
    ASSERT_TRUE(stream->Read(&resp));
    stream->WritesDone();
    std::set<std::string> services;
    for (const auto& s : resp.list_services_response().service()) services.insert(s.name());
    EXPECT_EQ(services, (std::set<std::string>{"firedrill.v1.Drill", "grpc.reflection.v1alpha.ServerReflection"}));
  }
  auto agent = v1::AgentLink::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto stream = agent->Connect(&ctx);
  v1::AgentMessage hello;
  hello.mutable_hello()->set_agent_id("mallory");
  stream->Write(hello);
  stream->WritesDone();
  v1::ControllerMessage msg;
  EXPECT_FALSE(stream->Read(&msg));
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::UNIMPLEMENTED);
}

// The agents' socket: a process that can reach it (the owner's) still needs
// the join token of an agent the controller launched.
TEST_F(AttackerTest, AnAgentWithoutItsJoinTokenIsRefused) {
  auto channel = grpc::CreateChannel("unix:" + dir_ + "/agent.sock", grpc::InsecureChannelCredentials());
  auto agent = v1::AgentLink::NewStub(channel);
  for (const std::string& token : {std::string(), std::string("0123456789abcdef0123456789abcdef")}) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    auto stream = agent->Connect(&ctx);
    v1::AgentMessage hello;
    hello.mutable_hello()->set_agent_id("mallory");
    hello.mutable_hello()->set_host("node-9");
    hello.mutable_hello()->set_join_token(token);
    stream->Write(hello);
    v1::ControllerMessage msg;
    EXPECT_FALSE(stream->Read(&msg));
    const grpc::Status st = stream->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
  }
}

}  // namespace
}  // namespace firedrill::e2e
