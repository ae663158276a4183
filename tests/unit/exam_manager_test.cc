// The exam manager on a real store with a test clock and sessions that are
// bookkeeping only (ExamSessions): the clock's warnings and time-up, the
// variants, attempts and retakes, the signed result and the audit trail.
// tests/e2e/exam_test.cc runs an exam on a real controller.
#include "controller/exam_manager.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>

#include "controller/exam/audit_chain.h"
#include "controller/exam/signing.h"
#include "controller/store.h"
#include "faults/targeting.h"
#include "scenario/loader.h"

namespace firedrill::controller {
namespace {

using json = nlohmann::json;

// Sessions as an exam sees them, without a job: each starts "running", an
// ended one is scored with its diagnosis count as points.
class FakeSessions : public ExamSessions {
 public:
  explicit FakeSessions(std::vector<v1::Scenario> catalogue) : catalogue_(std::move(catalogue)) {}
  std::vector<v1::Scenario> Catalogue() const override { return catalogue_; }
  StatusOr<v1::SessionInfo> StartItem(const std::string& scenario, int64_t seed, const std::string& owner,
                                      bool hints_allowed, int hint_cost) override {
    hints_[scenario + "/" + owner] = {hints_allowed, hint_cost};
    v1::SessionInfo i;
    i.set_session_id("s-" + std::to_string(++n_));
    i.set_scenario_id(scenario);
    i.set_title("drill " + scenario);
    i.set_seed(seed);
    i.set_owner(owner);
    i.set_state("running");
    i.set_max_score(100);
    info_[i.session_id()] = i;
    return i;
  }
  StatusOr<v1::SessionInfo> Info(const std::string& id) override {
    auto it = info_.find(id);
    if (it == info_.end()) return NotFound("no session " + id);
    return it->second;
  }
  StatusOr<v1::SessionInfo> EndItem(const std::string& id, const std::string& reason) override {
    auto& i = info_.at(id);
    i.set_state("ended");
    i.set_end_reason(reason);
    v1::ScoreReport r;
    r.set_session_id(id);
    r.set_final(true);
    r.set_max_total(100);
    r.set_total(points_[id]);
    if (review_.count(id)) {
      r.set_needs_review(true);
      r.set_note(review_[id]);
    }
    scores_[id] = r;
    return i;
  }
  void Announce(const std::string& id, const std::string& kind, const std::string& message) override {
    v1::SessionEvent e;
    e.set_kind(kind);
    e.set_message(message);
    events_[id].push_back(e);
  }
  StatusOr<std::optional<v1::ScoreReport>> FinalScore(const std::string& id) override {
    auto it = scores_.find(id);
    if (it == scores_.end()) return std::optional<v1::ScoreReport>();
    return std::optional<v1::ScoreReport>(it->second);
  }
  std::vector<v1::SessionEvent> Events(const std::string& id) override { return events_[id]; }

  std::vector<v1::Scenario> catalogue_;
  int n_ = 0;
  std::map<std::string, v1::SessionInfo> info_;
  std::map<std::string, v1::ScoreReport> scores_;
  std::map<std::string, int> points_;                  // what ending a session scores
  std::map<std::string, std::string> review_;          // sessions whose score asks for review: the note
  std::map<std::string, std::pair<bool, int>> hints_;  // scenario/owner -> the policy it was started with
  std::map<std::string, std::vector<v1::SessionEvent>> events_;
};

const char* kExam = R"(id: ops-1
title: Operations, practical
time_limit_min: 40
pass_mark: 50
hints: {allowed: true, cost: 7}
retakes: 1
attempts: 2
items:
  - scenario: throughput-halved
  - pool: [throughput-halved, allreduce-slowdown]
    points: 50
)";

class ExamManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "fd-exam-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    auto store = Store::Open(dir_ + "/firedrill.db");
    ASSERT_TRUE(store.ok()) << store.status().message();
    store_ = std::move(store).value();
    auto catalogue = scenario::LoadScenarioDirs({std::string(FIREDRILL_SOURCE_DIR) + "/scenarios"});
    ASSERT_TRUE(catalogue.ok()) << catalogue.status().message();
    sessions_ = std::make_unique<FakeSessions>(*catalogue);
    gate_ = std::make_unique<Gatekeeper>(store_.get());
    ASSERT_TRUE(gate_->Init(dir_ + "/owner.token").ok());
    Reopen();
    proctor_.name = "lee";
    proctor_.roles = kRoleProctor;
    auto e = exams_->Create(proctor_, kExam, "ops-1.yaml");
    ASSERT_TRUE(e.ok()) << e.status().message();
  }
  void TearDown() override {
    exams_.reset();
    std::filesystem::remove_all(dir_);
  }
  void Reopen() {
    ExamManagerOptions o;
    o.key_file = dir_ + "/exam.key";
    o.now_ms = [this] { return now_; };
    exams_ = std::make_unique<ExamManager>(o, store_.get(), gate_.get(), sessions_.get());
    ASSERT_TRUE(exams_->Init(/*clock_thread=*/false).ok());
  }
  Grant Candidate(const std::string& name) {
    Grant g;
    auto token = exams_->IssueCandidate(proctor_, "ops-1", name, &g);
    EXPECT_TRUE(token.ok()) << token.status().message();
    return g;
  }
  v1::SessionInfo Open(const Grant& who, int item, bool new_attempt = false) {
    v1::OpenItemRequest r;
    r.set_item(item);
    r.set_new_attempt(new_attempt);
    auto info = exams_->OpenItem(who, r);
    EXPECT_TRUE(info.ok()) << info.status().message();
    return info.ok() ? *info : v1::SessionInfo();
  }
  json Result(const std::string& candidate, int sitting = 0) {
    v1::GetExamResultRequest r;
    r.set_exam_id("ops-1");
    r.set_candidate(candidate);
    r.set_sitting(sitting);
    auto res = exams_->Result(proctor_, r);
    EXPECT_TRUE(res.ok()) << res.status().message();
    if (!res.ok()) return json();
    auto text = VerifySignedResult(res->signed_json(), exams_->PublicKey().pem(), "result.json");
    EXPECT_TRUE(text.ok()) << text.status().message();
    return text.ok() ? json::parse(*text) : json();
  }
  // The trail verifies and ends at (or goes on after) the result's anchor.
  void CheckTrail(const std::string& candidate, const json& result) {
    v1::ExportAuditRequest r;
    r.set_exam_id("ops-1");
    r.set_candidate(candidate);
    auto a = exams_->ExportAudit(proctor_, r);
    ASSERT_TRUE(a.ok()) << a.status().message();
    std::vector<std::string> hashes;
    auto head = VerifyAuditText(a->text(), "audit.jsonl", &hashes);
    ASSERT_TRUE(head.ok()) << head.status().message();
    const AuditHead anchored{result["audit"]["records"].get<int64_t>(),
                             result["audit"]["head"].get<std::string>()};
    EXPECT_TRUE(CheckAuditAnchor(hashes, anchored, "audit.jsonl").ok());
  }

  std::string dir_;
  int64_t now_ = 1'800'000'000'000;
  std::unique_ptr<Store> store_;
  std::unique_ptr<FakeSessions> sessions_;
  std::unique_ptr<Gatekeeper> gate_;
  std::unique_ptr<ExamManager> exams_;
  Grant proctor_;
};

constexpr int64_t kMin = 60000;

TEST_F(ExamManagerTest, TheClockWarnsAtEachMarkAndTimeUpEndsAndScoresWhatIsOpen) {
  const Grant ada = Candidate("ada");
  const int64_t t0 = now_;
  auto s = exams_->StartSitting(ada);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->remaining_ms(), 40 * kMin);
  const v1::SessionInfo item1 = Open(ada, 1);
  sessions_->points_[item1.session_id()] = 60;  // what it scores as it stands
  sessions_->review_[item1.session_id()] =
      "verified, but not an accepted remediation: an instructor should look";
  EXPECT_EQ(sessions_->hints_["throughput-halved/ada"], std::make_pair(true, 7)) << "the exam's hint price";

  auto warnings = [&] { return sessions_->events_[item1.session_id()].size(); };
  now_ = t0 + 9 * kMin;  // 31 minutes left: nothing due
  exams_->Tick();
  EXPECT_EQ(warnings(), 0u);
  now_ = t0 + 10 * kMin;  // 30 left
  exams_->Tick();
  exams_->Tick();  // posted once
  ASSERT_EQ(warnings(), 1u);
  EXPECT_NE(sessions_->events_[item1.session_id()][0].message().find("30 minutes left"), std::string::npos);
  now_ = t0 + 25 * kMin;
  exams_->Tick();
  // The controller was down from 15 left to 4 left: only the nearer mark.
  now_ = t0 + 36 * kMin;
  exams_->Tick();
  ASSERT_EQ(warnings(), 3u);
  EXPECT_NE(sessions_->events_[item1.session_id()][1].message().find("15 minutes left"), std::string::npos);
  EXPECT_NE(sessions_->events_[item1.session_id()][2].message().find("5 minutes left"), std::string::npos);
  v1::GetSittingRequest none;
  auto mid = exams_->GetSitting(ada, none);
  ASSERT_TRUE(mid.ok());
  EXPECT_EQ(mid->warnings_size(), 3);
  EXPECT_EQ(mid->state(), "open");
  EXPECT_EQ(mid->remaining_ms(), 4 * kMin);

  // A result is signed only once the sitting ends.
  v1::GetExamResultRequest early;
  early.set_exam_id("ops-1");
  early.set_candidate("ada");
  EXPECT_EQ(exams_->Result(proctor_, early).status().code(), StatusCode::kFailedPrecondition);

  EXPECT_TRUE(exams_->MayAct(ada, item1.session_id()).ok());
  now_ = t0 + 40 * kMin;  // time-up: nothing more is done, even before the clock's next pass
  EXPECT_EQ(exams_->MayAct(ada, item1.session_id()).code(), StatusCode::kFailedPrecondition);
  exams_->Tick();
  EXPECT_EQ(sessions_->info_[item1.session_id()].state(), "ended");
  EXPECT_EQ(sessions_->info_[item1.session_id()].end_reason(), "the exam's time ran out");
  auto after = exams_->GetSitting(ada, none);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->state(), "time-up");
  EXPECT_EQ(after->remaining_ms(), 0);
  EXPECT_EQ(after->total(), 0) << "a candidate reads no score";
  ASSERT_EQ(after->items_size(), 2);
  EXPECT_EQ(after->items(0).flags_size(), 0) << "nor what is flagged for review";
  EXPECT_EQ(after->items(0).scored_points(), 0);
  // The proctor's view of the same sitting: points and flags as signed.
  v1::GetSittingRequest of_ada;
  of_ada.set_exam_id("ops-1");
  of_ada.set_candidate("ada");
  auto seen = exams_->GetSitting(proctor_, of_ada);
  ASSERT_TRUE(seen.ok()) << seen.status().message();
  ASSERT_EQ(seen->items_size(), 2);
  EXPECT_EQ(seen->items(0).scored_points(), 60);
  ASSERT_EQ(seen->items(0).flags_size(), 1);
  EXPECT_NE(seen->items(0).flags(0).find("not an accepted remediation"), std::string::npos);
  EXPECT_EQ(seen->items(1).flags_size(), 0);
  auto listed = exams_->List(proctor_);
  ASSERT_TRUE(listed.ok()) << listed.status().message();
  ASSERT_EQ(listed->size(), 1u);
  ASSERT_EQ((*listed)[0].sittings_size(), 1);
  EXPECT_EQ((*listed)[0].sittings(0).items(0).flags_size(), 1) << "the proctor's list carries the flags too";
  v1::OpenItemRequest late;
  late.set_item(2);
  EXPECT_EQ(exams_->OpenItem(ada, late).status().code(), StatusCode::kFailedPrecondition);

  const json r = Result("ada");
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["ended_by"], "time-up");
  EXPECT_EQ(r["items"][0]["state"], "frozen at time-up");
  EXPECT_EQ(r["items"][0]["points"], 60);  // 60% of 100
  EXPECT_EQ(r["items"][1]["state"], "not started");
  EXPECT_EQ(r["items"][1]["points"], 0);
  EXPECT_EQ(r["total"], 60);
  EXPECT_EQ(r["max"], 150);
  EXPECT_EQ(r["passed"], false);  // 60 of 150 is 40%: under the mark
  CheckTrail("ada", r);
}

TEST_F(ExamManagerTest, EachCandidateDrawsTheirOwnVariantAndKeepsItOnReconnecting) {
  // The draws behind a seed: culprit and trigger of each fault.
  const std::vector<std::string> hosts = {"node-0", "node-1", "node-2", "node-3"};
  const v1::Scenario* sc = nullptr;
  for (const auto& s : sessions_->catalogue_)
    if (s.id() == "throughput-halved") sc = &s;
  ASSERT_NE(sc, nullptr);
  std::set<std::string> drills;
  std::set<int64_t> seeds;
  for (int i = 0; i < 8; ++i) {
    const Grant g = Candidate("cand-" + std::to_string(i));
    ASSERT_TRUE(exams_->StartSitting(g).ok());
    const v1::SessionInfo first = Open(g, 1);
    // Reconnecting: the same sitting, the same session, the same variant.
    auto again = exams_->StartSitting(g);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->sitting(), 1);
    EXPECT_EQ(Open(g, 1).session_id(), first.session_id());
    seeds.insert(first.seed());
    auto faults = faults::ResolveFaults(*sc, static_cast<uint64_t>(first.seed()), hosts);
    ASSERT_TRUE(faults.ok()) << faults.status().message();
    std::string drill;
    for (const auto& f : *faults)
      drill += std::to_string(f.rank()) + "@" + std::to_string(f.trigger_step()) + ";";
    drills.insert(drill);
  }
  EXPECT_EQ(seeds.size(), 8u);
  EXPECT_GE(drills.size(), 2u) << "eight candidates, one culprit and trigger: the variants do not vary";

  // Across a restart of the controller: the same variants.
  const Grant c0 = *[&] {
    for (const Grant& g : gate_->List())
      if (g.name == "cand-0") return std::optional<Grant>(g);
    return std::optional<Grant>();
  }();
  const std::string before = Open(c0, 1).session_id();
  Reopen();
  EXPECT_EQ(Open(c0, 1).session_id(), before);
}

TEST_F(ExamManagerTest, AttemptsRetakesRescoresAndTheTrailOfEveryCall) {
  const Grant bob = Candidate("bob");
  v1::OpenItemRequest first;
  first.set_item(1);
  EXPECT_EQ(exams_->OpenItem(bob, first).status().code(), StatusCode::kFailedPrecondition);  // not started
  ASSERT_TRUE(exams_->StartSitting(bob).ok());
  const v1::SessionInfo a1 = Open(bob, 1);
  ASSERT_TRUE(
      exams_
          ->RecordCall(bob, "SubmitDiagnosis", R"({"session_id":")" + a1.session_id() + R"("})", Status::Ok())
          .ok());
  ASSERT_TRUE(
      exams_->RecordCall(bob, "GetStatus", R"({"session_id":"s-999"})", NotFound("no session s-999")).ok());
  // A closed item opens again only as a new attempt, and only as often as
  // the exam allows (2).
  ASSERT_TRUE(sessions_->EndItem(a1.session_id(), "ended by the learner").ok());
  EXPECT_EQ(exams_->OpenItem(bob, first).status().code(), StatusCode::kFailedPrecondition);
  const v1::SessionInfo a2 = Open(bob, 1, /*new_attempt=*/true);
  EXPECT_NE(a2.session_id(), a1.session_id());
  EXPECT_NE(a2.seed(), a1.seed()) << "each attempt is a variant of its own";
  EXPECT_EQ(a2.scenario_id(), a1.scenario_id());
  ASSERT_TRUE(sessions_->EndItem(a2.session_id(), "ended by the learner").ok());
  first.set_new_attempt(true);
  EXPECT_EQ(exams_->OpenItem(bob, first).status().code(), StatusCode::kFailedPrecondition);

  auto done = exams_->Finish(bob);
  ASSERT_TRUE(done.ok()) << done.status().message();
  EXPECT_EQ(done->state(), "finished");
  json r = Result("bob");
  EXPECT_EQ(r["total"], 0);
  EXPECT_EQ(r["passed"], false);
  CheckTrail("bob", r);

  // Rescore: within the weight, with a reason, re-signed, audited.
  v1::RescoreItemRequest rs;
  rs.set_exam_id("ops-1");
  rs.set_candidate("bob");
  rs.set_item(2);
  rs.set_points(51);
  rs.set_reason("the verifier ran beside a backup job");
  EXPECT_EQ(exams_->Rescore(proctor_, rs).status().code(), StatusCode::kInvalidArgument);  // worth 50
  rs.set_points(50);
  rs.set_reason(" ");
  EXPECT_EQ(exams_->Rescore(proctor_, rs).status().code(), StatusCode::kInvalidArgument);
  rs.set_reason("the verifier ran beside a backup job");
  ASSERT_TRUE(exams_->Rescore(proctor_, rs).ok());
  r = Result("bob");
  EXPECT_EQ(r["total"], 50);
  EXPECT_EQ(r["items"][1]["rescored"][0]["by"], "lee");
  CheckTrail("bob", r);

  // The trail holds each call, refused ones too, with its arguments.
  v1::ExportAuditRequest ar;
  ar.set_exam_id("ops-1");
  ar.set_candidate("bob");
  auto trail = exams_->ExportAudit(proctor_, ar);
  ASSERT_TRUE(trail.ok());
  EXPECT_NE(trail->text().find(R"("action":"SubmitDiagnosis")"), std::string::npos);
  EXPECT_NE(trail->text().find("NOT_FOUND: no session s-999"), std::string::npos);
  EXPECT_NE(trail->text().find(R"("action":"RescoreItem")"), std::string::npos);

  // After the sitting, nothing more is done in its items.
  EXPECT_EQ(exams_->MayAct(bob, a2.session_id()).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(exams_->MayAct(proctor_, a2.session_id()).ok()) << "the rule is a candidate's";
  EXPECT_TRUE(exams_->SessionInExam(a2.session_id(), "ops-1"));
  EXPECT_FALSE(exams_->SessionInExam(a2.session_id(), "ops-2"));

  // A candidate learns nothing of the result from the controller: a retake
  // is the proctor's to open, within the exam's retakes, and only after a
  // failed sitting.
  auto refused = exams_->StartSitting(bob);
  ASSERT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("opened by your proctor"), std::string::npos);
  v1::AllowRetakeRequest allow;
  allow.set_exam_id("ops-1");
  allow.set_candidate("bob");
  ASSERT_TRUE(exams_->AllowRetake(proctor_, allow).ok());
  auto retake = exams_->StartSitting(bob);
  ASSERT_TRUE(retake.ok()) << retake.status().message();
  EXPECT_EQ(retake->sitting(), 2);
  const v1::SessionInfo b1 = Open(bob, 1);
  EXPECT_NE(b1.seed(), a1.seed());
  EXPECT_TRUE(exams_->MayAct(bob, b1.session_id()).ok());
  EXPECT_EQ(exams_->MayAct(bob, a1.session_id()).code(), StatusCode::kFailedPrecondition)
      << "an old sitting's item";
  ASSERT_TRUE(exams_->Finish(bob).ok());
  EXPECT_EQ(exams_->StartSitting(bob).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(exams_->AllowRetake(proctor_, allow).status().code(), StatusCode::kFailedPrecondition)
      << "one retake only";
  EXPECT_EQ(Result("bob", 1)["total"], 50);  // the first sitting's result stands

  // A proctor scoped to another exam learns nothing of this one.
  Grant other;
  other.name = "kim";
  other.roles = kRoleProctor;
  other.exam_id = "ops-2";
  v1::GetExamResultRequest rr;
  rr.set_exam_id("ops-1");
  rr.set_candidate("bob");
  auto hidden = exams_->Result(other, rr);
  EXPECT_EQ(hidden.status().code(), StatusCode::kNotFound);
  v1::GetExamResultRequest none;
  none.set_exam_id("no-such-exam");
  none.set_candidate("bob");
  std::string same = hidden.status().message();
  same.replace(same.find("ops-1"), 5, "no-such-exam");
  EXPECT_EQ(exams_->Result(proctor_, none).status().message(), same);
}

}  // namespace
}  // namespace firedrill::controller
