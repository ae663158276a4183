#include "controller/scorer.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace firedrill::controller {
namespace {

// rubric: cause 40, culprit 20, fix 30, time 20 (600 s budget), hints 5 each.
v1::Scenario MakeScenario() {
  v1::Scenario s;
  s.set_id("throughput-halved");
  s.set_runbook("runbooks/straggler.md");
  s.mutable_answer()->set_cause("straggler");
  s.mutable_answer()->add_culprit_ranks()->set_ref("$faults.0.target.rank");
  // Remediation 0: replace the straggler's host.
  s.add_remediations()->add_actions()->mutable_replace_host()->set_ref("$faults.0.target.rank");
  // Remediation 1: two settings together.
  auto* r1 = s.add_remediations();
  auto* set_a = r1->add_actions()->mutable_set();
  set_a->set_key("comm.timeout_s");
  set_a->set_value("120");
  auto* set_b = r1->add_actions()->mutable_set();
  set_b->set_key("data.num_workers");
  set_b->set_value("4");
  v1::Rubric* b = s.mutable_rubric();
  b->set_cause(40);
  b->set_culprit(20);
  b->set_fix(30);
  b->set_time(20);
  b->set_time_budget_s(600);
  b->set_hint_cost(5);
  return s;
}

v1::Finding F(const std::string& cause, std::initializer_list<int> ranks) {
  v1::Finding f;
  f.set_cause(cause);
  for (int r : ranks) f.add_culprit_ranks(r);
  return f;
}

v1::SessionRecord MakeRecord() {
  v1::SessionRecord r;
  r.mutable_info()->set_session_id("s-1");
  r.mutable_info()->set_scenario_id("throughput-halved");
  r.mutable_info()->set_state("scored");
  r.mutable_info()->set_max_score(110);
  v1::ResolvedFault* f = r.add_faults();
  f->set_kind("straggler");
  f->set_rank(2);
  f->set_host("host-2");
  *r.add_answer_findings() = F("straggler", {2});
  return r;
}

void SetVerification(v1::SessionRecord* r, bool done, bool passed, const std::string& detail) {
  r->mutable_verification()->set_done(done);
  r->mutable_verification()->set_passed(passed);
  r->mutable_verification()->set_detail(detail);
}

v1::DiagnosisRecord Diagnosis(int number, std::initializer_list<v1::Finding> findings) {
  v1::DiagnosisRecord d;
  d.set_number(number);
  for (const auto& f : findings) *d.add_findings() = f;
  return d;
}

const v1::ScoreItem& ItemNamed(const v1::ScoreReport& r, const std::string& name) {
  for (const auto& it : r.items()) {
    if (it.name() == name) return it;
  }
  ADD_FAILURE() << "no score item named " << name << " in " << r.DebugString();
  static const v1::ScoreItem kNone;
  return kNone;
}

class ScorerTest : public ::testing::Test {
 protected:
  ScorerTest() : scenario(MakeScenario()), record(MakeRecord()) {
    SetVerification(&record, true, true, "throughput ok; skew ok");
    in.scenario = &scenario;
    in.record = &record;
    Diagnose({F("straggler", {2})});
    record.set_fix_applied(true);
    record.mutable_fix()->add_replace_host_ranks(2);
    record.set_fix_matches(true);
    in.elapsed_s = 0;
  }
  // One diagnosis, in force at the fix.
  void Diagnose(std::initializer_list<v1::Finding> findings) {
    in.diagnoses = {Diagnosis(1, findings)};
    record.set_diagnosis_at_fix(1);
    record.set_diagnoses_at_fix(1);
  }
  v1::Scenario scenario;
  v1::SessionRecord record;
  ScoreInputs in;
};

TEST_F(ScorerTest, RightCauseCulpritVerifiedFixFastIsFullMarks) {
  const v1::ScoreReport r = Score(in);
  EXPECT_EQ(r.session_id(), "s-1");
  EXPECT_EQ(r.scenario_id(), "throughput-halved");
  EXPECT_EQ(ItemNamed(r, "cause").points(), 40);
  EXPECT_EQ(ItemNamed(r, "culprit").points(), 20);
  EXPECT_EQ(ItemNamed(r, "fix").points(), 30);
  EXPECT_EQ(ItemNamed(r, "time").points(), 20);
  EXPECT_EQ(ItemNamed(r, "hints").points(), 0);
  EXPECT_EQ(ItemNamed(r, "revisions").points(), 0);
  EXPECT_EQ(ItemNamed(r, "collateral").points(), 0);
  EXPECT_EQ(r.total(), 110);
  EXPECT_EQ(r.max_total(), 110);
  EXPECT_FALSE(r.needs_review());
  for (const auto& it : r.items()) {
    EXPECT_FALSE(it.reason().empty()) << it.name();
    EXPECT_LE(it.points(), it.max_points()) << it.name();
  }
  EXPECT_NE(ItemNamed(r, "fix").reason().find("throughput ok"), std::string::npos);
  ASSERT_EQ(r.diagnoses_size(), 1);
  EXPECT_TRUE(r.fix_applied());
}

TEST_F(ScorerTest, WrongRankGetsNoCulpritPointsAndNamesTheRanks) {
  Diagnose({F("straggler", {1, 3})});
  const v1::ScoreReport r = Score(in);
  EXPECT_EQ(ItemNamed(r, "cause").points(), 40);
  const v1::ScoreItem& c = ItemNamed(r, "culprit");
  EXPECT_EQ(c.points(), 0);
  EXPECT_EQ(c.max_points(), 20);
  EXPECT_NE(c.reason().find("1,3"), std::string::npos) << c.reason();
  EXPECT_NE(c.reason().find("wrong"), std::string::npos) << c.reason();
}

TEST_F(ScorerTest, ExtraOrMissingRanksAreWrongToo) {
  Diagnose({F("straggler", {2, 3})});
  EXPECT_EQ(ItemNamed(Score(in), "culprit").points(), 0);
  Diagnose({F("straggler", {})});
  const v1::ScoreItem c = ItemNamed(Score(in), "culprit");
  EXPECT_EQ(c.points(), 0);
  EXPECT_NE(c.reason().find("none"), std::string::npos) << c.reason();
}

TEST_F(ScorerTest, WrongCauseGetsNoCausePointsButTheRankStillCounts) {
  Diagnose({F("slow-link", {2})});
  const v1::ScoreReport r = Score(in);
  const v1::ScoreItem& c = ItemNamed(r, "cause");
  EXPECT_EQ(c.points(), 0);
  EXPECT_NE(c.reason().find("slow-link"), std::string::npos) << c.reason();
  EXPECT_EQ(ItemNamed(r, "culprit").points(), 20);
}

TEST_F(ScorerTest, WrongCauseOfTheRightClassEarnsThePartialPoints) {
  scenario.mutable_rubric()->set_cause_class(15);
  record.clear_answer_findings();
  *record.add_answer_findings() = F("data-loader-starvation", {});
  Diagnose({F("padding-waste", {})});  // also an input-pipeline cause
  const v1::ScoreReport r = Score(in);
  const v1::ScoreItem& c = ItemNamed(r, "cause");
  EXPECT_EQ(c.points(), 15);
  EXPECT_NE(c.reason().find("input pipeline"), std::string::npos) << c.reason();
  // A job-wide answer: naming no rank with a finding of its class is right.
  EXPECT_EQ(ItemNamed(r, "culprit").points(), 20);

  Diagnose({F("small-buckets", {})});  // communication: another class
  EXPECT_EQ(ItemNamed(Score(in), "cause").points(), 0);
  // ...and naming no rank for the wrong kind of problem earns nothing.
  EXPECT_EQ(ItemNamed(Score(in), "culprit").points(), 0);

  scenario.mutable_rubric()->set_cause_class(0);  // rubric without partial credit
  Diagnose({F("padding-waste", {})});
  EXPECT_EQ(ItemNamed(Score(in), "cause").points(), 0);
  // ...and a same-class guess beside the right cause is an extra finding.
  scenario.mutable_rubric()->set_cause_class(15);
  record.clear_answer_findings();
  *record.add_answer_findings() = F("data-loader-starvation", {});
  *record.add_answer_findings() = F("straggler", {1});
  Diagnose({F("straggler", {1}), F("padding-waste", {})});
  // (1 + 15/40) / 2 of 40: the straggler in full, the input-pipeline half at class credit.
  EXPECT_EQ(ItemNamed(Score(in), "cause").points(), 28);
  scenario.mutable_rubric()->set_cause_class(0);
  EXPECT_EQ(ItemNamed(Score(in), "cause").points(), 0) << "right half 20, the extra finding takes 20 back";
}

TEST_F(ScorerTest, AnEndedSessionWithoutAFixKeepsItsAnswerSealed) {
  record.set_fix_applied(false);
  record.clear_fix();
  record.mutable_info()->set_state("ended");
  const v1::ScoreReport r = Score(in);
  EXPECT_TRUE(r.final());
  EXPECT_EQ(ItemNamed(r, "cause").points(), 40);  // what was submitted is scored
  EXPECT_EQ(r.answer_findings_size(), 0);
  EXPECT_TRUE(r.answer_cause().empty());
  EXPECT_TRUE(r.runbook().empty());
  EXPECT_NE(r.note().find("stays sealed"), std::string::npos) << r.note();
  record.mutable_info()->set_state("scored");  // scored after a fix: revealed
  EXPECT_EQ(Score(in).answer_cause(), "straggler");
}

TEST_F(ScorerTest, NoDiagnosis) {
  in.diagnoses.clear();
  record.set_diagnosis_at_fix(0);
  record.set_diagnoses_at_fix(0);
  const v1::ScoreReport r = Score(in);
  for (const char* name : {"cause", "culprit"}) {
    const v1::ScoreItem& it = ItemNamed(r, name);
    EXPECT_EQ(it.points(), 0) << name;
    EXPECT_NE(it.reason().find("no diagnosis"), std::string::npos) << it.reason();
  }
  EXPECT_EQ(r.total(), 30 + 20);  // the verified fix still counts
}

TEST_F(ScorerTest, TheDiagnosisInForceAtTheFixCountsAndRevisionsCost) {
  // Wrong, then right, then (after the fix, impossible through the API, but
  // the scorer must not care) wrong again.
  in.diagnoses = {Diagnosis(1, {F("slow-link", {1})}), Diagnosis(2, {F("padding-waste", {})}),
                  Diagnosis(3, {F("straggler", {2})}), Diagnosis(4, {F("no-fault", {})})};
  record.set_diagnosis_at_fix(3);
  record.set_diagnoses_at_fix(3);
  const v1::ScoreReport r = Score(in);
  EXPECT_EQ(ItemNamed(r, "cause").points(), 40);
  EXPECT_EQ(ItemNamed(r, "culprit").points(), 20);
  const v1::ScoreItem& rev = ItemNamed(r, "revisions");
  EXPECT_EQ(rev.points(), -10);  // two revisions after the first, 5 each
  EXPECT_NE(rev.reason().find("2 revision(s)"), std::string::npos) << rev.reason();
  EXPECT_EQ(r.diagnoses_size(), 4);  // all kept and shown
  scenario.mutable_rubric()->set_revision_cost(7);
  EXPECT_EQ(ItemNamed(Score(in), "revisions").points(), -14);
  scenario.mutable_rubric()->set_revision_cost(0);  // set to zero: free
  EXPECT_EQ(ItemNamed(Score(in), "revisions").points(), 0);
}

TEST_F(ScorerTest, EndedWithoutAFixTheLatestDiagnosisCounts) {
  record.set_fix_applied(false);
  record.clear_fix();
  record.set_diagnosis_at_fix(0);
  record.set_diagnoses_at_fix(0);
  in.diagnoses = {Diagnosis(1, {F("slow-link", {})}), Diagnosis(2, {F("straggler", {2})})};
  const v1::ScoreReport r = Score(in);
  EXPECT_EQ(ItemNamed(r, "cause").points(), 40);
  EXPECT_EQ(ItemNamed(r, "fix").points(), 0);
  EXPECT_EQ(ItemNamed(r, "revisions").points(), -5);
}

TEST_F(ScorerTest, FailedVerificationEarnsNoFixAndNoTimePoints) {
  SetVerification(&record, true, false, "throughput 500 samples/s = 0.50x FAIL");
  const v1::ScoreReport r = Score(in);
  const v1::ScoreItem& fix = ItemNamed(r, "fix");
  EXPECT_EQ(fix.points(), 0);
  EXPECT_EQ(fix.max_points(), 30);
  EXPECT_NE(fix.reason().find("verification failed"), std::string::npos) << fix.reason();
  EXPECT_NE(fix.reason().find("0.50x FAIL"), std::string::npos) << fix.reason();
  EXPECT_EQ(ItemNamed(r, "time").points(), 0);
  EXPECT_EQ(r.total(), 60);
  EXPECT_TRUE(r.final());
}

TEST_F(ScorerTest, NoFixAppliedEarnsNothingForFixOrTime) {
  record.set_fix_applied(false);
  const v1::ScoreReport r = Score(in);
  EXPECT_EQ(ItemNamed(r, "fix").points(), 0);
  EXPECT_NE(ItemNamed(r, "fix").reason().find("no fix"), std::string::npos);
  EXPECT_EQ(ItemNamed(r, "time").points(), 0);
}

TEST_F(ScorerTest, AVerifiedFixOutsideTheRemediationsEarnsHalfAndIsFlaggedForReview) {
  record.set_fix_matches(false);
  const v1::ScoreReport r = Score(in);
  const v1::ScoreItem fix = ItemNamed(r, "fix");
  EXPECT_EQ(fix.points(), 15);
  EXPECT_NE(fix.reason().find("not an accepted remediation"), std::string::npos) << fix.reason();
  EXPECT_TRUE(r.needs_review());
  EXPECT_NE(r.note().find("an instructor should look"), std::string::npos) << r.note();
  EXPECT_EQ(ItemNamed(r, "time").points(), 0);
}

TEST_F(ScorerTest, ReplacingHostsThatAreNotCulpritsIsCollateral) {
  // The shotgun: every host replaced, no diagnosis. The fix is verified
  // (the straggler's host went too) but matches no remediation.
  in.diagnoses.clear();
  record.set_diagnosis_at_fix(0);
  record.set_diagnoses_at_fix(0);
  record.mutable_fix()->clear_replace_host_ranks();
  for (int r : {0, 1, 2, 3}) record.mutable_fix()->add_replace_host_ranks(r);
  record.set_fix_matches(MatchesRemediation(scenario, record, record.fix()));
  EXPECT_FALSE(record.fix_matches());
  const v1::ScoreReport r = Score(in);
  const v1::ScoreItem& c = ItemNamed(r, "collateral");
  EXPECT_EQ(c.points(), -30);
  ASSERT_EQ(r.collateral_size(), 3);
  EXPECT_NE(r.collateral(0).find("rank 0"), std::string::npos) << r.collateral(0);
  EXPECT_EQ(r.total(), 0);  // 15 for the fix, -30 collateral: nothing
  scenario.mutable_rubric()->set_collateral_cost(4);
  EXPECT_EQ(ItemNamed(Score(in), "collateral").points(), -12);
}

TEST_F(ScorerTest, AMachineOfTwoRanksIsReplacedOnceAndNeverWithItsCulprit) {
  // Ranks 0-1 and 2-3 share machines; the culprits (the fixture's) decide
  // which machine is the culprit's. Naming both ranks of the other machine
  // is one replacement, one collateral action; naming the culprit's
  // host-mate is none.
  const std::set<int> culprits(record.answer_findings(0).culprit_ranks().begin(),
                               record.answer_findings(0).culprit_ranks().end());
  ASSERT_FALSE(culprits.empty());
  const int culprit_host = *culprits.begin() / 2;
  const int other = culprit_host == 0 ? 2 : 0;
  record.mutable_fix()->clear_replace_host_ranks();
  record.mutable_fix()->add_replace_host_ranks(other);
  record.mutable_fix()->add_replace_host_ranks(other + 1);
  EXPECT_EQ(CollateralActions(record, record.fix(), 1).size(), 2u) << "one rank per machine: two machines";
  const auto c = CollateralActions(record, record.fix(), 2);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_NE(c[0].find("which holds no culprit"), std::string::npos) << c[0];
  record.mutable_fix()->clear_replace_host_ranks();
  record.mutable_fix()->add_replace_host_ranks(culprit_host * 2 + 1 - *culprits.begin() % 2);
  EXPECT_TRUE(CollateralActions(record, record.fix(), 2).empty()) << "the culprit's own machine";
}

TEST_F(ScorerTest, RestartingFromScratchIsCollateral) {
  auto* set = record.mutable_fix()->add_settings();
  set->set_key("checkpoint.resume_from");
  set->set_value("");
  EXPECT_TRUE(CollateralActions(record, record.fix()).empty()) << "a job without checkpoints has none to lose";
  record.mutable_job()->mutable_checkpoint()->set_every(20);
  const auto c = CollateralActions(record, record.fix());
  ASSERT_EQ(c.size(), 1u);
  EXPECT_NE(c[0].find("restarted the job from scratch"), std::string::npos) << c[0];
  set->set_value("/ck/step-500");  // a roll-back to a checkpoint is no collateral
  EXPECT_TRUE(CollateralActions(record, record.fix()).empty());
}

TEST_F(ScorerTest, ResumingOlderThanTheNewestValidCheckpointIsCollateral) {
  record.mutable_job()->mutable_checkpoint()->set_every(50);
  auto* set = record.mutable_fix()->add_settings();
  set->set_key("checkpoint.resume_from");
  set->set_value("/ck/step-550");
  EXPECT_TRUE(CollateralActions(record, record.fix()).empty()) << "no newest valid recorded: the drill does not score it";
  record.set_newest_valid_checkpoint_at_fix(550);
  EXPECT_TRUE(CollateralActions(record, record.fix()).empty()) << "the newest valid one";
  set->set_value("/ck/step-500/");
  const auto c = CollateralActions(record, record.fix());
  ASSERT_EQ(c.size(), 1u);
  EXPECT_NE(c[0].find("resumed from step-500, 50 steps older than the newest checkpoint that verified (step-550)"),
            std::string::npos)
      << c[0];
  EXPECT_EQ(CheckpointStepOf("/a/b/step-0012"), 12);
  EXPECT_EQ(CheckpointStepOf("/a/b/step-"), -1);
  EXPECT_EQ(CheckpointStepOf("latest"), -1);
}

TEST_F(ScorerTest, AnyValueMatchesEveryValueOfItsKeyOnly) {
  v1::Scenario sc;
  auto* rem = sc.add_remediations();
  auto* want = rem->add_actions()->mutable_set();
  want->set_key("checkpoint.resume_from");
  want->set_any_value(true);
  v1::ApplyFixRequest fix;
  auto* got = fix.add_settings();
  got->set_key("checkpoint.resume_from");
  for (const std::string v : {"/ck/step-50", "latest", ""}) {
    got->set_value(v);
    EXPECT_TRUE(MatchesRemediation(sc, record, fix)) << v;
  }
  got->set_key("checkpoint.every");
  EXPECT_FALSE(MatchesRemediation(sc, record, fix));
}

TEST_F(ScorerTest, TwoFindingsShareThePointsAndAnExtraOneCosts) {
  record.clear_answer_findings();
  *record.add_answer_findings() = F("straggler", {2});
  *record.add_answer_findings() = F("padding-waste", {});
  Diagnose({F("padding-waste", {}), F("straggler", {2})});  // order does not matter
  v1::ScoreReport r = Score(in);
  EXPECT_EQ(ItemNamed(r, "cause").points(), 40);
  EXPECT_EQ(ItemNamed(r, "culprit").points(), 20);
  ASSERT_EQ(r.answer_findings_size(), 2);

  Diagnose({F("straggler", {2})});  // half the answer
  r = Score(in);
  EXPECT_EQ(ItemNamed(r, "cause").points(), 20);
  // The culprit item is earned where the answer sits on ranks: here it is
  // all the straggler's.
  EXPECT_EQ(ItemNamed(r, "culprit").points(), 20);
  EXPECT_NE(ItemNamed(r, "cause").reason().find("'padding-waste' was not named"), std::string::npos);
  Diagnose({F("padding-waste", {})});  // the other half: the job-wide cause
  r = Score(in);
  EXPECT_EQ(ItemNamed(r, "cause").points(), 20);
  EXPECT_EQ(ItemNamed(r, "culprit").points(), 0);
  EXPECT_NE(ItemNamed(r, "cause").reason().find("'straggler' was not named"), std::string::npos);

  // Naming every cause does not pay: each one that is not a cause here
  // takes back a finding's share.
  Diagnose({F("straggler", {2}), F("padding-waste", {}), F("slow-link", {}), F("small-buckets", {})});
  r = Score(in);
  EXPECT_EQ(ItemNamed(r, "cause").points(), 0);
  EXPECT_NE(ItemNamed(r, "cause").reason().find("not a cause here"), std::string::npos);
}

TEST_F(ScorerTest, NoFaultIsRightOnlyAlone) {
  record.clear_answer_findings();
  *record.add_answer_findings() = F("no-fault", {});
  record.clear_faults();
  Diagnose({F("no-fault", {})});
  v1::ScoreReport r = Score(in);
  EXPECT_EQ(ItemNamed(r, "cause").points(), 40);
  EXPECT_EQ(ItemNamed(r, "culprit").points(), 20);
  Diagnose({F("straggler", {})});  // seeing a fault that is not there
  r = Score(in);
  EXPECT_EQ(ItemNamed(r, "cause").points(), 0);
  EXPECT_EQ(ItemNamed(r, "culprit").points(), 0);
  Diagnose({F("straggler", {1})});
  EXPECT_EQ(ItemNamed(Score(in), "culprit").points(), 0);
}

TEST_F(ScorerTest, TimePointsScaleLinearlyAndAreZeroPastTheBudget) {
  const struct {
    double elapsed;
    int points;
  } cases[] = {{0, 20}, {150, 15}, {300, 10}, {450, 5}, {600, 0}, {601, 0}, {5000, 0}};
  for (const auto& c : cases) {
    in.elapsed_s = c.elapsed;
    const v1::ScoreItem t = ItemNamed(Score(in), "time");
    EXPECT_EQ(t.points(), c.points) << "elapsed " << c.elapsed;
    EXPECT_EQ(t.max_points(), 20);
    EXPECT_NE(t.reason().find("600 s budget"), std::string::npos) << t.reason();
  }
}

TEST_F(ScorerTest, HintsSubtractTheirCost) {
  record.set_hints_used(3);
  const v1::ScoreReport r = Score(in);
  const v1::ScoreItem& h = ItemNamed(r, "hints");
  EXPECT_EQ(h.points(), -15);
  EXPECT_EQ(h.max_points(), 0);
  EXPECT_NE(h.reason().find("3 hint(s)"), std::string::npos) << h.reason();
  EXPECT_EQ(r.total(), 110 - 15);
  EXPECT_EQ(r.max_total(), 110);
}

TEST_F(ScorerTest, TotalNeverGoesBelowZero) {
  in.diagnoses.clear();
  record.set_fix_applied(false);
  record.set_hints_used(2);
  const v1::ScoreReport r = Score(in);
  EXPECT_EQ(ItemNamed(r, "hints").points(), -10);
  EXPECT_EQ(r.total(), 0);
}

TEST_F(ScorerTest, BeforeScoringOnlyWhatWasSubmittedIsShown) {
  in.diagnoses = {Diagnosis(1, {F("slow-link", {1})})};  // wrong
  record.mutable_info()->set_state("running");
  const v1::ScoreReport r = Unscored(record, in.diagnoses);
  EXPECT_FALSE(r.final());
  EXPECT_EQ(r.note(), "not scored yet");
  EXPECT_EQ(r.items_size(), 0);
  EXPECT_EQ(r.total(), 0);
  EXPECT_FALSE(r.verification().done());
  EXPECT_TRUE(r.answer_cause().empty());
  EXPECT_EQ(r.answer_findings_size(), 0);
  EXPECT_TRUE(r.runbook().empty());
  ASSERT_EQ(r.diagnoses_size(), 1);
  EXPECT_EQ(r.diagnoses(0).findings(0).cause(), "slow-link");
  // Nothing in it says "right", "wrong" or names the answer.
  const std::string text = r.DebugString();
  for (const char* tell : {"right", "wrong", "straggler", "is not"})
    EXPECT_EQ(text.find(tell), std::string::npos) << tell << " in " << text;
}

TEST_F(ScorerTest, TheFinalScoreRevealsTheAnswer) {
  const v1::ScoreReport r = Score(in);
  EXPECT_TRUE(r.final());
  EXPECT_EQ(r.answer_cause(), "straggler");
  ASSERT_EQ(r.answer_culprit_ranks_size(), 1);
  EXPECT_EQ(r.answer_culprit_ranks(0), 2);
  EXPECT_EQ(r.runbook(), "runbooks/straggler.md");
  EXPECT_TRUE(r.verification().done());
}

// --- MatchesRemediation -------------------------------------------------------

v1::ApplyFixRequest Fix(std::initializer_list<int> replace,
                        std::initializer_list<std::pair<const char*, const char*>> settings = {}) {
  v1::ApplyFixRequest f;
  for (int r : replace) f.add_replace_host_ranks(r);
  for (const auto& [k, v] : settings) {
    auto* s = f.add_settings();
    s->set_key(k);
    s->set_value(v);
  }
  return f;
}

TEST(MatchesRemediationTest, ReplaceHostResolvesTheFaultReference) {
  const v1::Scenario s = MakeScenario();
  const v1::SessionRecord rec = MakeRecord();  // faults[0] targets rank 2
  EXPECT_TRUE(MatchesRemediation(s, rec, Fix({2})));
  EXPECT_FALSE(MatchesRemediation(s, rec, Fix({0, 2})));  // nothing beyond: no other host
  EXPECT_FALSE(MatchesRemediation(s, rec, Fix({1})));
  EXPECT_FALSE(MatchesRemediation(s, rec, Fix({})));

  v1::SessionRecord other = rec;
  other.mutable_faults(0)->set_rank(1);  // another seed drew rank 1
  EXPECT_TRUE(MatchesRemediation(s, other, Fix({1})));
  EXPECT_FALSE(MatchesRemediation(s, other, Fix({2})));
}

TEST(MatchesRemediationTest, LiteralRankAndUnresolvableReference) {
  v1::Scenario s = MakeScenario();
  s.clear_remediations();
  s.add_remediations()->add_actions()->mutable_replace_host()->set_rank(3);
  const v1::SessionRecord rec = MakeRecord();
  EXPECT_TRUE(MatchesRemediation(s, rec, Fix({3})));
  EXPECT_FALSE(MatchesRemediation(s, rec, Fix({2})));

  s.clear_remediations();
  s.add_remediations()->add_actions()->mutable_replace_host()->set_ref("$faults.5.target.rank");
  EXPECT_FALSE(MatchesRemediation(s, rec, Fix({0, 1, 2, 3})));
}

TEST(MatchesRemediationTest, SettingsMustAllMatchKeyAndValue) {
  const v1::Scenario s = MakeScenario();
  const v1::SessionRecord rec = MakeRecord();
  EXPECT_TRUE(MatchesRemediation(s, rec, Fix({}, {{"comm.timeout_s", "120"}, {"data.num_workers", "4"}})));
  EXPECT_TRUE(MatchesRemediation(s, rec, Fix({}, {{"data.num_workers", "4"}, {"comm.timeout_s", "120"}})));
  EXPECT_FALSE(MatchesRemediation(s, rec, Fix({}, {{"comm.timeout_s", "120"}})));  // half of it
  EXPECT_FALSE(MatchesRemediation(s, rec, Fix({}, {{"comm.timeout_s", "60"}, {"data.num_workers", "4"}})));
  // Either remediation is accepted, but nothing beyond the one it matches.
  EXPECT_FALSE(MatchesRemediation(s, rec, Fix({2}, {{"comm.timeout_s", "60"}})));
  EXPECT_FALSE(MatchesRemediation(
      s, rec, Fix({}, {{"comm.timeout_s", "120"}, {"data.num_workers", "4"}, {"comm.bucket_mb", "25"}})));
}

TEST(MatchesRemediationTest, MayAlsoSetAllowsNamedExtrasOnly) {
  v1::Scenario s = MakeScenario();
  s.mutable_remediations(0)->add_may_also_set("comm.timeout_s");
  const v1::SessionRecord rec = MakeRecord();
  EXPECT_TRUE(MatchesRemediation(s, rec, Fix({2}, {{"comm.timeout_s", "60"}})));
  EXPECT_FALSE(MatchesRemediation(s, rec, Fix({2}, {{"comm.timeout_s", "60"}, {"comm.bucket_mb", "50"}})));
}

TEST(MatchesRemediationTest, NoChangeMatchesOnlyAnExplicitNoChange) {
  v1::Scenario s = MakeScenario();
  s.clear_remediations();
  s.add_remediations()->add_actions()->set_no_change(true);
  const v1::SessionRecord rec = MakeRecord();
  v1::ApplyFixRequest none = Fix({});
  EXPECT_FALSE(MatchesRemediation(s, rec, none));
  none.set_no_change(true);
  EXPECT_TRUE(MatchesRemediation(s, rec, none));
  EXPECT_FALSE(MatchesRemediation(s, rec, Fix({1})));
  // And an explicit no-change matches no other remediation.
  EXPECT_FALSE(MatchesRemediation(MakeScenario(), rec, none));
}

TEST(MatchesRemediationTest, EmptyRemediationMatchesNothing) {
  v1::Scenario s = MakeScenario();
  s.clear_remediations();
  s.add_remediations();
  EXPECT_FALSE(MatchesRemediation(s, MakeRecord(), Fix({})));
}

TEST(MatchesRemediationTest, AtLeastAcceptsAnyNumberFromTheBound) {
  v1::Scenario s = MakeScenario();
  s.clear_remediations();
  auto* set = s.add_remediations()->add_actions()->mutable_set();
  set->set_key("data.num_workers");
  set->set_at_least(4);
  const v1::SessionRecord rec = MakeRecord();
  EXPECT_TRUE(MatchesRemediation(s, rec, Fix({}, {{"data.num_workers", "4"}})));
  EXPECT_TRUE(MatchesRemediation(s, rec, Fix({}, {{"data.num_workers", "16"}})));
  EXPECT_FALSE(MatchesRemediation(s, rec, Fix({}, {{"data.num_workers", "2"}})));
  EXPECT_FALSE(MatchesRemediation(s, rec, Fix({}, {{"data.num_workers", "many"}})));
  EXPECT_FALSE(MatchesRemediation(s, rec, Fix({}, {{"data.prefetch_depth", "16"}})));
}

TEST(MatchesRemediationTest, AtMostBoundsTheRangeFromAbove) {
  v1::Scenario s = MakeScenario();
  s.clear_remediations();
  auto* set = s.add_remediations()->add_actions()->mutable_set();
  set->set_key("loss_scale.init_scale");
  set->set_at_least(1);
  set->set_at_most(8192);
  const v1::SessionRecord rec = MakeRecord();
  EXPECT_TRUE(MatchesRemediation(s, rec, Fix({}, {{"loss_scale.init_scale", "1024"}})));
  EXPECT_TRUE(MatchesRemediation(s, rec, Fix({}, {{"loss_scale.init_scale", "8192"}})));
  EXPECT_FALSE(MatchesRemediation(s, rec, Fix({}, {{"loss_scale.init_scale", "16384"}})));
  EXPECT_FALSE(MatchesRemediation(s, rec, Fix({}, {{"loss_scale.init_scale", "0.5"}})));
}

}  // namespace
}  // namespace firedrill::controller
