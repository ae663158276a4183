#include "controller/exam/exam_result.h"

#include <gtest/gtest.h>

#include <string>

namespace firedrill::controller {
namespace {

v1::ExamSpec TwoItems() {
  v1::ExamSpec e;
  e.set_id("infra");
  e.set_title("Distributed training operations");
  e.set_pass_mark(66);
  e.set_time_limit_min(120);
  e.add_items()->set_scenario("epoch-end-hang");
  v1::ExamItem* pool = e.add_items();
  pool->add_pool("thermal-throttle");
  pool->add_pool("slow-local-disk");
  pool->set_points(50);
  return e;
}

v1::ScoreReport Score(int total, const std::string& note) {
  v1::ScoreReport s;
  s.set_final(true);
  s.set_total(total);
  s.set_max_total(100);
  v1::ScoreItem* c = s.add_items();
  c->set_name("cause");
  c->set_points(40);
  c->set_max_points(40);
  c->set_reason("straggler, as the answer key");
  v1::DiagnosisRecord* d = s.add_diagnoses();
  d->set_number(1);
  d->set_unix_ms(1'700'000'100'000);
  d->set_note(note);
  d->add_findings()->set_cause("straggler");
  s.set_fix_applied(true);
  s.mutable_fix()->add_replace_host_ranks(2);
  s.mutable_verification()->set_done(true);
  s.mutable_verification()->set_passed(true);
  s.mutable_verification()->set_detail("0.98x the healthy job");
  return s;
}

std::vector<ItemOutcome> Outcomes(const std::string& note) {
  std::vector<ItemOutcome> out(2);
  out[0].index = 0;
  out[0].scenario_id = "epoch-end-hang";
  out[0].title = "The last batch";
  out[0].session_id = "s-1";
  out[0].score = Score(85, note);
  out[0].state = "scored";
  out[1].index = 1;
  out[1].scenario_id = "thermal-throttle";
  out[1].title = "Slower since Tuesday";
  out[1].session_id = "s-2";
  out[1].score = Score(40, note);
  out[1].state = "frozen at time-up";
  return out;
}

TEST(ExamResult, ItemsAreWeightedAndThePassMarkIsAPercentOfTheExamsPoints) {
  SittingFacts facts{
      "ada", 1, 1'700'000'000'000, 1'700'007'200'000, "time-up", "infra/ada/1", {12, std::string(64, 'a')}};
  const auto r = ExamResult(TwoItems(), facts, Outcomes("rank 2 slow"), {});
  EXPECT_EQ(r["items"][0]["points"], 85);
  EXPECT_EQ(r["items"][1]["points"], 20);  // 40% of a 50-point item
  EXPECT_EQ(r["total"], 105);
  EXPECT_EQ(r["max"], 150);
  EXPECT_TRUE(r["passed"].get<bool>());  // 70% >= 66%
  EXPECT_EQ(r["audit"]["records"], 12);
  EXPECT_EQ(r["items"][0]["checks"][0]["reason"], "straggler, as the answer key");
}

TEST(ExamResult, ARescoreReplacesThePointsAndKeepsWhoAndWhy) {
  SittingFacts facts{"ada", 1, 1, 2, "candidate", "infra/ada/1", {}};
  const auto r = ExamResult(TwoItems(), facts, Outcomes(""),
                            {{1, 10, "proctor:lee", "host replaced by hand", 3},
                             {1, 45, "proctor:lee", "earlier", 2},
                             {0, 500, "proctor:lee", "more than the item is worth", 4}});
  EXPECT_EQ(r["items"][1]["points"], 10);
  EXPECT_EQ(r["items"][1]["scored_points"], 20);
  EXPECT_EQ(r["items"][1]["rescored"][0]["reason"], "earlier");  // in time order: the latest counts
  EXPECT_EQ(r["items"][1]["rescored"][1]["reason"], "host replaced by hand");
  EXPECT_EQ(r["items"][0]["points"], 100);  // clamped to the item's weight
  EXPECT_EQ(r["total"], 110);
  EXPECT_TRUE(r["passed"].get<bool>());  // 73.3%
  EXPECT_NE(ResultMarkdown(r).find("**Rescored** to 10 by proctor:lee"), std::string::npos);
}

TEST(ExamResult, ThePercentShownNeverRoundsUpToThePassMark) {
  SittingFacts facts{"cy", 1, 1, 2, "candidate", "infra/cy/1", {}};
  v1::ExamSpec e = TwoItems();
  e.set_pass_mark(66);
  // 98.94 of 150 cannot happen in integers; 99 of 150 is exactly 66%, 98 is 65.33%.
  auto outcomes = Outcomes("");
  outcomes[0].score->set_total(78);  // 78 of item 0's 100, 20 of item 1's 50: 98 of 150
  auto r = ExamResult(e, facts, outcomes, {});
  EXPECT_EQ(r["total"], 98);
  EXPECT_FALSE(r["passed"].get<bool>());
  EXPECT_DOUBLE_EQ(r["percent"].get<double>(), 65.3);
  outcomes[0].score->set_total(79);
  r = ExamResult(e, facts, outcomes, {});
  EXPECT_TRUE(r["passed"].get<bool>());
  EXPECT_DOUBLE_EQ(r["percent"].get<double>(), 66.0);
}

TEST(ExamResult, AnItemNeverStartedScoresNothing) {
  SittingFacts facts{"bob", 1, 1, 2, "candidate", "infra/bob/1", {}};
  auto outcomes = Outcomes("");
  outcomes.pop_back();
  const auto r = ExamResult(TwoItems(), facts, outcomes, {});
  EXPECT_EQ(r["items"][1]["state"], "not started");
  EXPECT_EQ(r["items"][1]["points"], 0);
  EXPECT_EQ(r["total"], 85);
}

TEST(ExamResult, ReportsEscapeWhatACandidateTyped) {
  SittingFacts facts{"ada", 1, 1, 2, "candidate", "infra/ada/1", {}};
  const auto r = ExamResult(TwoItems(), facts, Outcomes("<script>alert(1)</script> | **bold**"), {});
  const std::string html = ResultHtml(r);
  EXPECT_EQ(html.find("<script>"), std::string::npos);
  EXPECT_NE(html.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
  EXPECT_EQ(html.find("src="), std::string::npos);  // self-contained
  EXPECT_NE(html.find("<svg"), std::string::npos);  // points per item, inline
  EXPECT_NE(html.find("Points per item"), std::string::npos);
  const std::string md = ResultMarkdown(r);
  EXPECT_NE(md.find("\\<script\\>alert(1)\\</script\\> \\| \\*\\*bold\\*\\*"), std::string::npos) << md;
  EXPECT_NE(md.find("**105 of 150 points (70.0%): PASS (pass mark 66%)**"), std::string::npos) << md;
}

}  // namespace
}  // namespace firedrill::controller
