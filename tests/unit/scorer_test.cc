#include "controller/scorer.h"

#include <gtest/gtest.h>

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

v1::SessionRecord MakeRecord() {
  v1::SessionRecord r;
  r.mutable_info()->set_session_id("s-1");
  v1::ResolvedFault* f = r.add_faults();
  f->set_kind("straggler");
  f->set_rank(2);
  f->set_host("host-2");
  r.set_answer_cause("straggler");
  r.add_answer_culprit_ranks(2);
  return r;
}

void SetVerification(v1::SessionRecord* r, bool done, bool passed, const std::string& detail) {
  r->mutable_verification()->set_done(done);
  r->mutable_verification()->set_passed(passed);
  r->mutable_verification()->set_detail(detail);
}

v1::SubmitDiagnosisRequest Diagnosis(const std::string& cause, std::initializer_list<int> ranks) {
  v1::SubmitDiagnosisRequest d;
  d.set_session_id("s-1");
  d.set_cause(cause);
  for (int r : ranks) d.add_culprit_ranks(r);
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
    in.diagnosis = Diagnosis("straggler", {2});
    in.fix_applied = true;
    in.fix_matches_remediation = true;
    in.elapsed_s = 0;
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
  EXPECT_EQ(r.total(), 110);
  EXPECT_EQ(r.max_total(), 110);
  EXPECT_EQ(r.total(), r.max_total());
  for (const auto& it : r.items()) {
    EXPECT_FALSE(it.reason().empty()) << it.name();
    EXPECT_LE(it.points(), it.max_points()) << it.name();
  }
  EXPECT_NE(ItemNamed(r, "fix").reason().find("throughput ok"), std::string::npos);
  EXPECT_EQ(ItemNamed(r, "fix").reason().find("not one of the expected"), std::string::npos);
}

TEST_F(ScorerTest, WrongRankGetsNoCulpritPointsAndNamesTheRanks) {
  in.diagnosis = Diagnosis("straggler", {1, 3});
  const v1::ScoreReport r = Score(in);
  EXPECT_EQ(ItemNamed(r, "cause").points(), 40);
  const v1::ScoreItem& c = ItemNamed(r, "culprit");
  EXPECT_EQ(c.points(), 0);
  EXPECT_EQ(c.max_points(), 20);
  EXPECT_NE(c.reason().find("1,3"), std::string::npos) << c.reason();
  EXPECT_NE(c.reason().find("wrong"), std::string::npos) << c.reason();
  EXPECT_EQ(r.total(), 90);
}

TEST_F(ScorerTest, ExtraOrMissingRanksAreWrongToo) {
  in.diagnosis = Diagnosis("straggler", {2, 3});
  EXPECT_EQ(ItemNamed(Score(in), "culprit").points(), 0);
  in.diagnosis = Diagnosis("straggler", {});
  const v1::ScoreItem c = ItemNamed(Score(in), "culprit");
  EXPECT_EQ(c.points(), 0);
  EXPECT_NE(c.reason().find("none"), std::string::npos) << c.reason();
  // Order and repetition do not matter.
  in.diagnosis = Diagnosis("straggler", {2, 2});
  EXPECT_EQ(ItemNamed(Score(in), "culprit").points(), 20);
}

TEST_F(ScorerTest, WrongCauseGetsNoCausePoints) {
  in.diagnosis = Diagnosis("slow_link", {2});
  const v1::ScoreReport r = Score(in);
  const v1::ScoreItem& c = ItemNamed(r, "cause");
  EXPECT_EQ(c.points(), 0);
  EXPECT_NE(c.reason().find("slow_link"), std::string::npos) << c.reason();
  EXPECT_EQ(ItemNamed(r, "culprit").points(), 20);
}

TEST_F(ScorerTest, WrongCauseOfTheRightClassEarnsThePartialPoints) {
  scenario.mutable_rubric()->set_cause_class(15);
  record.set_answer_cause("data-loader-starvation");
  in.diagnosis = Diagnosis("padding-waste", {});  // also an input-pipeline cause
  const v1::ScoreReport r = Score(in);
  const v1::ScoreItem& c = ItemNamed(r, "cause");
  EXPECT_EQ(c.points(), 15);
  EXPECT_NE(c.reason().find("input pipeline"), std::string::npos) << c.reason();

  in.diagnosis = Diagnosis("small-buckets", {});  // communication: another class
  EXPECT_EQ(ItemNamed(Score(in), "cause").points(), 0);

  scenario.mutable_rubric()->set_cause_class(0);  // rubric without partial credit
  in.diagnosis = Diagnosis("padding-waste", {});
  EXPECT_EQ(ItemNamed(Score(in), "cause").points(), 0);
}

TEST_F(ScorerTest, NoDiagnosis) {
  in.diagnosis.reset();
  const v1::ScoreReport r = Score(in);
  for (const char* name : {"cause", "culprit"}) {
    const v1::ScoreItem& it = ItemNamed(r, name);
    EXPECT_EQ(it.points(), 0) << name;
    EXPECT_NE(it.reason().find("no diagnosis"), std::string::npos) << it.reason();
  }
  EXPECT_EQ(r.total(), 30 + 20);  // the verified fix still counts
}

TEST_F(ScorerTest, FailedVerificationEarnsNoFixAndNoTimePoints) {
  SetVerification(&record, true, false, "throughput 500 samples/s = 0.50x baseline FAIL");
  const v1::ScoreReport r = Score(in);
  const v1::ScoreItem& fix = ItemNamed(r, "fix");
  EXPECT_EQ(fix.points(), 0);
  EXPECT_EQ(fix.max_points(), 30);
  EXPECT_NE(fix.reason().find("verification failed"), std::string::npos) << fix.reason();
  EXPECT_NE(fix.reason().find("0.50x baseline FAIL"), std::string::npos) << fix.reason();
  EXPECT_EQ(ItemNamed(r, "time").points(), 0);
  EXPECT_EQ(r.total(), 60);
  EXPECT_TRUE(r.final());  // verification is done, even though it failed
}

TEST_F(ScorerTest, NoFixAppliedEarnsNothingForFixOrTime) {
  in.fix_applied = false;
  const v1::ScoreReport r = Score(in);
  EXPECT_EQ(ItemNamed(r, "fix").points(), 0);
  EXPECT_NE(ItemNamed(r, "fix").reason().find("no fix"), std::string::npos);
  EXPECT_EQ(ItemNamed(r, "time").points(), 0);
}

TEST_F(ScorerTest, VerifiedFixOutsideTheRemediationsStillCountsButSaysSo) {
  in.fix_matches_remediation = false;
  const v1::ScoreItem fix = ItemNamed(Score(in), "fix");
  EXPECT_EQ(fix.points(), 30);
  EXPECT_NE(fix.reason().find("not one of the expected remediations"), std::string::npos) << fix.reason();
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
  in.diagnosis.reset();
  in.fix_applied = false;
  record.set_hints_used(2);
  const v1::ScoreReport r = Score(in);
  EXPECT_EQ(ItemNamed(r, "hints").points(), -10);
  EXPECT_EQ(r.total(), 0);
}

TEST_F(ScorerTest, AnswerIsRevealedOnlyOnceFinal) {
  SetVerification(&record, false, false, "");
  v1::ScoreReport r = Score(in);
  EXPECT_FALSE(r.final());
  EXPECT_TRUE(r.answer_cause().empty());
  EXPECT_EQ(r.answer_culprit_ranks_size(), 0);
  EXPECT_TRUE(r.runbook().empty());
  EXPECT_EQ(ItemNamed(r, "fix").points(), 0);
  EXPECT_NE(ItemNamed(r, "fix").reason().find("has not finished"), std::string::npos);
  EXPECT_EQ(ItemNamed(r, "time").points(), 0);
  // The cause item's reason must not leak the right answer when it is wrong.
  in.diagnosis = Diagnosis("slow_link", {1});
  r = Score(in);
  for (const auto& it : r.items()) EXPECT_EQ(it.reason().find("straggler"), std::string::npos) << it.reason();

  SetVerification(&record, true, true, "ok");
  r = Score(in);
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
  EXPECT_TRUE(MatchesRemediation(s, rec, Fix({0, 2})));  // extra actions are allowed
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
  // Either remediation is accepted.
  EXPECT_TRUE(MatchesRemediation(s, rec, Fix({2}, {{"comm.timeout_s", "60"}})));
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

}  // namespace
}  // namespace firedrill::controller
