#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "controller/team/milestones.h"
#include "controller/team/postmortem.h"

namespace firedrill::controller {
namespace {

constexpr int64_t kOnset = 1'700'000'000'000;
constexpr int64_t kS = 1000;

std::vector<TimelineEntry> Drill() {
  return {
      {kOnset - 60 * kS, "ada", "commander", "note", "job looks fine to me", false, false},
      {kOnset + 30 * kS, "bob", "investigator", "tool", "probe allreduce", false, false},
      {kOnset + 60 * kS, "bob", "investigator", "note", "rank 12 is idle, as always", false, false},
      {kOnset + 90 * kS, "bob", "investigator", "note", "Rank 2 steps take twice as long", false, false},
      {kOnset + 200 * kS, "bob", "investigator", "proposal", "straggler on rank 2", false, false},
      {kOnset + 230 * kS, "ada", "commander", "diagnosis", "slow-link on rank 2", false, false},
      {kOnset + 260 * kS, "ada", "commander", "diagnosis", "straggler on rank 2", true, false},
      {kOnset + 300 * kS, "ada", "commander", "fix", "replace the host of rank 2", false, false},
      {kOnset + 360 * kS, "controller", "", "verification", "passed: 0.98x", false, true},
  };
}

IncidentFacts Facts() { return {kOnset, "compute", {2}}; }

TEST(Milestones, EachIsTheFirstEntryThatReachesIt) {
  const auto ms = ComputeMilestones(Drill(), Facts());
  ASSERT_EQ(ms.size(), 5u);
  EXPECT_EQ(ms[0].unix_ms, kOnset);
  EXPECT_EQ(ms[1].unix_ms, kOnset + 90 * kS);  // names rank 2; "rank 12" does not
  EXPECT_EQ(ms[1].entry, 3);
  EXPECT_EQ(ms[2].unix_ms, kOnset + 260 * kS);  // the wrong diagnosis before it identifies nothing
  EXPECT_EQ(ms[3].unix_ms, kOnset + 300 * kS);
  EXPECT_EQ(ms[4].unix_ms, kOnset + 360 * kS);
}

TEST(Milestones, SymptomWordsOfTheFaultsClassDetectAndABareToolRunDoesNot) {
  std::vector<TimelineEntry> t = {
      {kOnset + 10 * kS, "bob", "investigator", "tool", "status", false, false},
      {kOnset + 20 * kS, "cy", "comms", "update", "Throughput is down by half; investigating", false, false},
  };
  EXPECT_EQ(ComputeMilestones(t, Facts())[1].unix_ms, kOnset + 20 * kS);
  t[1].text = "investigating";
  EXPECT_EQ(ComputeMilestones(t, Facts())[1].unix_ms, 0);
}

TEST(Milestones, ASymptomWordInsideAnotherWordNamesNothing) {
  const IncidentFacts numerics{kOnset, "numerics", {}};
  std::vector<TimelineEntry> t = {{kOnset + 10 * kS, "cy", "comms", "update", "Already on it, see the info page", false,
                                   false}};
  EXPECT_EQ(ComputeMilestones(t, numerics)[1].unix_ms, 0);  // "lr" in already, "inf" in info
  t[0].text = "the LR looks high; losses are inf";
  EXPECT_EQ(ComputeMilestones(t, numerics)[1].unix_ms, kOnset + 10 * kS);
  const IncidentFacts input{kOnset, "input pipeline", {}};
  t[0].text = "already looked";
  EXPECT_EQ(ComputeMilestones(t, input)[1].unix_ms, 0);  // "read" in already
  t[0].text = "reads from disk are slow";
  EXPECT_EQ(ComputeMilestones(t, input)[1].unix_ms, kOnset + 10 * kS);
}

TEST(Milestones, AVerificationBeforeTheFixResolvesNothingAndACorrectDiagnosisDetects) {
  std::vector<TimelineEntry> t = {
      {kOnset + 10 * kS, "controller", "", "verification", "passed", false, true},
      {kOnset + 20 * kS, "ada", "commander", "diagnosis", "straggler", true, false},
  };
  const auto ms = ComputeMilestones(t, Facts());
  EXPECT_EQ(ms[1].unix_ms, kOnset + 20 * kS);
  EXPECT_EQ(ms[2].unix_ms, kOnset + 20 * kS);
  EXPECT_EQ(ms[3].unix_ms, 0);
  EXPECT_EQ(ms[4].unix_ms, 0);
}

TEST(Impact, IsTheBaselineLessWhatTheJobDidOverTheIncident) {
  // Healthy 1000/s before the onset, 500/s from it: 300 s at half speed.
  const std::vector<std::pair<int64_t, double>> rate = {{kOnset - 100 * kS, 1000}, {kOnset, 500}};
  const Impact i = MeasureImpact(1000, rate, kOnset, kOnset + 300 * kS, kOnset - 600 * kS, kOnset + 400 * kS);
  EXPECT_DOUBLE_EQ(i.duration_s, 300);
  EXPECT_DOUBLE_EQ(i.mean_rate, 500);
  EXPECT_DOUBLE_EQ(i.lost_units, 150000);
  EXPECT_DOUBLE_EQ(i.lost_percent, 15);  // of 1000 s at 1000/s
  // A hang: no steps at all.
  const Impact hang = MeasureImpact(1000, {}, kOnset, kOnset + 10 * kS, kOnset, kOnset + 100 * kS);
  EXPECT_DOUBLE_EQ(hang.lost_units, 10000);
  EXPECT_DOUBLE_EQ(hang.lost_percent, 10);
}

TEST(Postmortem, HasTheTemplatesSectionsTheMeasuredImpactAndEscapedText) {
  PostmortemInput in;
  in.title = "Slower since Tuesday";
  in.scenario_id = "thermal-throttle";
  in.session_id = "s-1";
  in.participants = {"ada (commander)", "bob (investigator)"};
  in.root_cause = "straggler: one host computes slower than its peers";
  in.trigger = "rank 2's host throttled to 1/1.8 from step 300";
  in.resolution = "replaced the host of rank 2; verification passed at 0.98x";
  in.unit = "samples";
  in.baseline_rate = 1000;
  in.session_start_ms = kOnset - 600 * kS;
  in.session_end_ms = kOnset + 400 * kS;
  in.timeline = Drill();
  in.timeline[0].text = "<b>fine</b> | *really*";
  in.milestones = ComputeMilestones(in.timeline, Facts());
  in.impact =
      MeasureImpact(1000, {{kOnset, 500}}, kOnset, kOnset + 300 * kS, in.session_start_ms, in.session_end_ms);
  const std::string md = PostmortemMarkdown(in);
  for (const char* s : {"## Summary", "## Impact", "## Root cause and trigger", "## Detection",
                        "## Resolution", "## Milestones", "## Timeline", "## What went well",
                        "## What went wrong", "## Where we got lucky", "## Action items"})
    EXPECT_NE(md.find(s), std::string::npos) << s;
  EXPECT_NE(md.find("150000 samples not processed, 15.0%"), std::string::npos) << md;
  EXPECT_NE(md.find("| time to detect | 1 min 30 s |"), std::string::npos) << md;
  EXPECT_NE(md.find("| time to resolve | 6 min 00 s |"), std::string::npos) << md;
  EXPECT_NE(md.find("First named by bob (investigator)"), std::string::npos) << md;
  EXPECT_NE(md.find("\\<b\\>fine\\</b\\> \\| \\*really\\*"), std::string::npos) << md;
  std::string html = PostmortemHtml(in);
  EXPECT_EQ(html.find("<svg"), std::string::npos);  // no rate measured: no chart
  in.rate_points = {{kOnset - 60 * kS, 1000}, {kOnset, 500}, {kOnset + 300 * kS, 990}};
  html = PostmortemHtml(in);
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("healthy baseline"), std::string::npos);
  EXPECT_EQ(html.find("<b>fine"), std::string::npos);
  EXPECT_NE(html.find("&lt;b&gt;fine&lt;/b&gt;"), std::string::npos);
}

}  // namespace
}  // namespace firedrill::controller
