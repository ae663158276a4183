// A team incident drill end to end through the API: three people (a
// commander, an investigator, a scribe who also writes the status updates)
// work one broken job with three clients. Roles are enforced; the shared
// timeline streams to each of them; the milestones and the postmortem's
// impact are checked against what was recorded and measured.
#include <gtest/gtest.h>

#include <mutex>
#include <thread>

#include "controller/team/milestones.h"
#include "tests/e2e/harness.h"

namespace firedrill::e2e {
namespace {

class TeamTest : public ControllerTest {
 protected:
  cli::DrillClient As(const std::string& name, const std::string& roles, const std::string& session) {
    v1::IssueTokenRequest r;
    r.set_name(name);
    r.add_roles(roles);
    r.set_session_id(session);
    auto t = c().IssueToken(r);
    EXPECT_TRUE(t.ok()) << t.status().message();
    cli::DrillClient client(ctl_->address(), std::chrono::seconds(60));
    client.SetToken(t.ok() ? t->token() : "");
    return client;
  }
};

TEST_F(TeamTest, ThreePeopleRunOneDrillTogetherAndGetAMeasuredPostmortem) {
  auto info = StartRunning(c(), "throughput-halved", 2207);
  ASSERT_TRUE(info.ok()) << info.status().message();
  const std::string id = info->session_id();
  cli::DrillClient ada = As("ada", "commander", id);
  cli::DrillClient ivan = As("ivan", "investigator", id);
  cli::DrillClient sam = As("sam", "scribe+comms", id);

  // Sam follows the timeline from the start; Ada watches the status stream.
  std::mutex mu;
  std::vector<v1::TimelineItem> streamed;
  Status stream_end;
  std::thread follower([&] {
    Status st = sam.WatchTimeline(id, /*follow=*/true, 0, [&](const v1::TimelineItem& t) {
      std::lock_guard<std::mutex> lock(mu);
      streamed.push_back(t);
      return true;
    });
    std::lock_guard<std::mutex> lock(mu);
    stream_end = st;
  });
  int frames = 0;
  ASSERT_TRUE(ada.WatchStatus(id, 500,
                              [&](const v1::SessionStatus& s) {
                                EXPECT_EQ(s.session().session_id(), id);
                                return ++frames < 2;
                              })
                  .ok());
  EXPECT_EQ(frames, 2);

  // Roles: only the commander fixes; a scribe does not diagnose; updates
  // are comms' and the commander's.
  v1::ApplyFixRequest early;
  early.set_session_id(id);
  early.set_no_change(true);
  EXPECT_EQ(ivan.ApplyFix(early).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(sam.ApplyFix(early).status().code(), StatusCode::kPermissionDenied);
  v1::SubmitDiagnosisRequest by_scribe;
  by_scribe.set_session_id(id);
  by_scribe.set_cause("straggler");
  EXPECT_EQ(sam.SubmitDiagnosis(by_scribe).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(ivan.PostTimeline(id, "update", "all good").status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(sam.PostTimeline(id, "proposal", "straggler").status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(sam.PostTimeline(id, "verdict", "x").status().code(), StatusCode::kInvalidArgument);

  // The work: Ivan finds the slow rank in the telemetry and proposes it;
  // Sam writes it down and tells the stakeholders; Ivan diagnoses; Ada fixes.
  ASSERT_TRUE(
      sam.PostTimeline(id, "update", "we are looking into the training job; next update in 15 minutes").ok());
  const int culprit = WatchForStraggler(ivan, id, 120);
  ASSERT_GE(culprit, 0);
  v1::GetTraceRequest tr;
  tr.set_session_id(id);
  ASSERT_TRUE(ivan.GetTrace(tr).ok());
  ASSERT_TRUE(ivan.PostTimeline(id, "proposal", "straggler on rank " + std::to_string(culprit)).ok());
  ASSERT_TRUE(
      sam.PostTimeline(id, "note", "rank " + std::to_string(culprit) + " is slow in every window").ok());
  v1::SubmitDiagnosisRequest d;
  d.set_session_id(id);
  d.set_cause("straggler");
  d.add_culprit_ranks(culprit);
  ASSERT_TRUE(ivan.SubmitDiagnosis(d).ok());
  v1::ApplyFixRequest fix;
  fix.set_session_id(id);
  fix.add_replace_host_ranks(culprit);
  auto score = FixAndScore(ada, fix);
  ASSERT_TRUE(score.ok()) << score.status().message();
  ASSERT_TRUE(score->verification().passed()) << score->verification().detail();
  follower.join();
  ASSERT_TRUE(stream_end.ok()) << stream_end.message();

  // The stream carried the whole timeline, in order, with who and role.
  std::vector<v1::TimelineItem> all;
  ASSERT_TRUE(ada.WatchTimeline(id, false, 0,
                                [&](const v1::TimelineItem& t) {
                                  all.push_back(t);
                                  return true;
                                })
                  .ok());
  ASSERT_EQ(streamed.size(), all.size());
  std::map<std::string, const v1::TimelineItem*> first;  // by kind
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i].seq(), static_cast<int64_t>(i) + 1);
    EXPECT_EQ(streamed[i].SerializeAsString(), all[i].SerializeAsString());
    first.emplace(all[i].kind(), &all[i]);
  }
  for (const auto& [kind, who, role] :
       std::vector<std::tuple<std::string, std::string, std::string>>{{"update", "sam", "comms"},
                                                                      {"proposal", "ivan", "investigator"},
                                                                      {"tool", "ivan", "investigator"},
                                                                      {"note", "sam", "scribe"},
                                                                      {"diagnosis", "ivan", "investigator"},
                                                                      {"fix", "ada", "commander"}}) {
    ASSERT_TRUE(first.count(kind)) << kind;
    EXPECT_EQ(first[kind]->who(), who) << kind;
    EXPECT_EQ(first[kind]->role(), role) << kind;
  }
  ASSERT_TRUE(first.count("event"));
  EXPECT_EQ(first["event"]->who(), "controller");

  // The postmortem: milestones at the recorded times, impact as measured.
  auto pm = sam.GetPostmortem(id);
  ASSERT_TRUE(pm.ok()) << pm.status().message();
  ASSERT_EQ(pm->milestones_size(), 5);
  const auto at = [&](int i) { return pm->milestones(i).unix_ms(); };
  const int64_t onset = at(0);
  ASSERT_GT(onset, 0) << "started: the fault's onset, measured";
  // Detected: the first entry after the onset that names the symptom (the
  // proposal names the rank) or a diagnosis; here Ivan's proposal.
  EXPECT_EQ(at(1), first["proposal"]->unix_ms());
  EXPECT_EQ(pm->milestones(1).by(), "ivan");
  EXPECT_EQ(at(2), first["diagnosis"]->unix_ms()) << "identified: the diagnosis that matched";
  EXPECT_EQ(at(3), first["fix"]->unix_ms()) << "mitigated: the fix";
  const v1::TimelineItem* scored = nullptr;
  for (const auto& t : all)
    if (t.kind() == "event" && t.text().rfind("scored:", 0) == 0) scored = &t;
  ASSERT_NE(scored, nullptr);
  EXPECT_EQ(at(4), scored->unix_ms()) << "resolved: the verification that passed";
  for (int i = 1; i < 5; ++i) {
    EXPECT_GE(at(i), at(i - 1)) << pm->milestones(i).name();
    EXPECT_NEAR(pm->milestones(i).since_onset_s(), (at(i) - onset) / 1000.0, 1e-6);
  }

  // Impact, recomputed here from the job's own step reports and baseline.
  auto st = ada.GetStatus(id);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(pm->unit(), "samples");
  EXPECT_DOUBLE_EQ(pm->baseline_rate(), st->baseline().throughput_samples_per_s());
  v1::GetMetricsRequest mreq;
  mreq.set_session_id(id);
  mreq.set_run("main");
  mreq.set_max_points(10000);
  auto main_run = ada.GetMetrics(mreq);
  ASSERT_TRUE(main_run.ok());
  // The job's rate: the ranks' samples/s summed step by step, at the time
  // the step's last rank ended it.
  std::map<int64_t, std::pair<int64_t, double>> by_step;
  for (const auto& r : main_run->ranks())
    for (const auto& row : r.rows()) {
      by_step[row.step()].first = std::max(by_step[row.step()].first, row.end_unix_ms());
      by_step[row.step()].second += row.samples_per_s();
    }
  std::vector<std::pair<int64_t, double>> points;
  for (const auto& [step, p] : by_step) points.push_back(p);
  ASSERT_GT(points.size(), 5u);
  // While the fault held, the job (all its ranks) ran at a fraction of its
  // baseline: the straggler about halves it; one rank's rate would read as
  // a quarter of that.
  const double kept = 1.0 - pm->lost_units() / (pm->baseline_rate() * pm->impact_duration_s());
  EXPECT_GT(kept, 0.25);
  EXPECT_LT(kept, 0.9);
  // From the onset to the mitigation, over the session (created to its
  // last timeline entry).
  const controller::Impact want = controller::MeasureImpact(pm->baseline_rate(), points, onset, at(3),
                                                            info->created_unix_ms(), all.back().unix_ms());
  EXPECT_NEAR(pm->impact_duration_s(), (at(3) - onset) / 1000.0, 1e-9);
  EXPECT_NEAR(pm->lost_units(), want.lost_units, 1e-6 * std::max(1.0, want.lost_units));
  EXPECT_NEAR(pm->lost_percent(), want.lost_percent, 1e-6);
  EXPECT_GT(pm->lost_units(), 0) << "a straggler halved the job: samples were lost";
  EXPECT_LT(pm->lost_percent(), 100);
  for (const char* section : {"## Summary", "## Impact", "## Root cause and trigger", "What went well",
                              "Action items", "straggler"})
    EXPECT_NE(pm->markdown().find(section), std::string::npos) << section;
  EXPECT_NE(pm->html().find("<html"), std::string::npos);
}

}  // namespace
}  // namespace firedrill::e2e
