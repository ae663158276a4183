// The Prometheus exposition, the families /metrics carries and the HTTP
// side's pure pieces (targets, cookies, status codes).
#include "controller/web_metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>

#include "controller/web/http_server.h"
#include "controller/web/prometheus.h"
#include "controller/web_service.h"

namespace firedrill {
namespace {

using web::Exposition;
using web::MetricType;

TEST(Exposition, WritesHelpTypeAndSamplesInDeclarationOrder) {
  Exposition e;
  e.Add("firedrill_b_seconds", MetricType::kGauge, "B's help", {{"session", "s1"}}, 0.25);
  e.Add("firedrill_a_total", MetricType::kCounter, "A's help", {}, 3);
  e.Sample("firedrill_b_seconds", {{"session", "s2"}}, 1);
  EXPECT_EQ(e.Text(),
            "# HELP firedrill_b_seconds B's help\n"
            "# TYPE firedrill_b_seconds gauge\n"
            "firedrill_b_seconds{session=\"s1\"} 0.25\n"
            "firedrill_b_seconds{session=\"s2\"} 1\n"
            "# HELP firedrill_a_total A's help\n"
            "# TYPE firedrill_a_total counter\n"
            "firedrill_a_total 3\n");
}

TEST(Exposition, EscapesLabelValuesAndHelp) {
  Exposition e;
  e.Add("firedrill_x", MetricType::kGauge, "a \\ b\nc", {{"host", "a\"b\\c\nd"}}, 1);
  const std::string t = e.Text();
  EXPECT_NE(t.find("# HELP firedrill_x a \\\\ b\\nc\n"), std::string::npos) << t;
  EXPECT_NE(t.find("firedrill_x{host=\"a\\\"b\\\\c\\nd\"} 1\n"), std::string::npos) << t;
}

TEST(Exposition, SampleValuesReadBackExactly) {
  EXPECT_EQ(web::FormatSampleValue(0.1), "0.1");
  EXPECT_EQ(web::FormatSampleValue(3), "3");
  EXPECT_EQ(web::FormatSampleValue(-2.5e-7), "-2.5e-07");
  EXPECT_EQ(web::FormatSampleValue(std::nan("")), "NaN");
  EXPECT_EQ(web::FormatSampleValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(web::FormatSampleValue(-std::numeric_limits<double>::infinity()), "-Inf");
  for (double v : {1.0 / 3, 123456789.123456789, 1e-300, 6.02214076e23})
    EXPECT_EQ(std::strtod(web::FormatSampleValue(v).c_str(), nullptr), v) << v;
}

TEST(Exposition, RefusesNamesThatBreakTheConventions) {
  Exposition e;
  EXPECT_THROW(e.Family("step_seconds", MetricType::kGauge, "h"), std::logic_error);       // no prefix
  EXPECT_THROW(e.Family("firedrill_steps", MetricType::kCounter, "h"), std::logic_error);  // no _total
  EXPECT_THROW(e.Family("firedrill_steps_total", MetricType::kGauge, "h"), std::logic_error);
  EXPECT_THROW(e.Family("firedrill_step-ms", MetricType::kGauge, "h"), std::logic_error);
  EXPECT_THROW(e.Family("firedrill_nohelp", MetricType::kGauge, ""), std::logic_error);
  e.Family("firedrill_ok", MetricType::kGauge, "h");
  EXPECT_THROW(e.Family("firedrill_ok", MetricType::kCounter, "h"), std::logic_error);  // two types
  EXPECT_THROW(e.Sample("firedrill_ok", {{"__name", "x"}}, 1), std::logic_error);       // reserved label
  EXPECT_THROW(e.Sample("firedrill_ok", {{"1rank", "x"}}, 1), std::logic_error);
  EXPECT_THROW(e.Sample("firedrill_undeclared", {}, 1), std::logic_error);
  e.Sample("firedrill_ok", {{"rank", "0"}}, 1);
  EXPECT_THROW(e.Sample("firedrill_ok", {{"rank", "0"}}, 2), std::logic_error);  // the same series twice
}

v1::SessionStatus TwoRanks() {
  v1::SessionStatus st;
  st.mutable_session()->set_session_id("s1");
  st.mutable_session()->set_scenario_id("throughput-halved");
  st.mutable_session()->set_state("running");
  st.mutable_session()->set_owner("alice-the-learner");
  st.mutable_session()->set_seed(424242);
  st.set_elapsed_s(12.5);
  st.set_time_budget_s(600);
  st.mutable_run()->set_kind("main");
  st.mutable_run()->set_state("running");
  st.mutable_run()->set_steps_done(40);
  st.mutable_run()->set_steps_total(5000);
  st.mutable_run()->set_throughput_samples_per_s(512);
  st.mutable_baseline()->set_throughput_samples_per_s(1024);
  for (int i = 0; i < 2; ++i) {
    v1::RankStatus* r = st.add_ranks();
    r->set_rank(i);
    r->set_host("node" + std::to_string(i));
    r->set_state("running");
    r->set_step(40);
    r->set_window_steps(i == 0 ? 20 : 0);  // rank 1 has no window yet
    r->set_step_ms(250);
    r->set_data_ms(10);
    r->set_forward_ms(80);
    r->set_backward_ms(120);
    r->set_comm_ms(30);
    r->set_optim_ms(10);
    r->set_samples_per_s(128);
    r->set_loss(2.5);
    r->set_skipped_total(3);
    r->set_slow(true);  // a verdict: never exported
  }
  return st;
}

TEST(SessionMetrics, CarryWhatStatusShowsInBaseUnits) {
  Exposition e;
  controller::AddSessionSamples(TwoRanks(), &e);
  const std::string t = e.Text();
  for (const char* want : {
           "firedrill_session_info{session=\"s1\",scenario=\"throughput-halved\",state=\"running\"} 1\n",
           "firedrill_session_elapsed_seconds{session=\"s1\"} 12.5\n",
           "firedrill_run_info{session=\"s1\",run=\"main\",state=\"running\"} 1\n",
           "firedrill_run_samples_per_second{session=\"s1\"} 512\n",
           "firedrill_baseline_samples_per_second{session=\"s1\"} 1024\n",
           "firedrill_rank_info{session=\"s1\",rank=\"1\",host=\"node1\",state=\"running\"} 1\n",
           "firedrill_rank_step_seconds{session=\"s1\",rank=\"0\"} 0.25\n",
           "firedrill_rank_phase_seconds{session=\"s1\",rank=\"0\",phase=\"backward\"} 0.12\n",
           "firedrill_rank_phase_seconds{session=\"s1\",rank=\"0\",phase=\"comm\"} 0.03\n",
           "firedrill_rank_skipped_steps_total{session=\"s1\",rank=\"0\"} 3\n",
           "firedrill_rank_step{session=\"s1\",rank=\"1\"} 40\n",
       })
    EXPECT_NE(t.find(want), std::string::npos) << want << "\nin\n" << t;
  // No window yet: no means for rank 1.
  EXPECT_EQ(t.find("firedrill_rank_step_seconds{session=\"s1\",rank=\"1\"}"), std::string::npos) << t;
  // Not a learner, not a seed, not a verdict.
  EXPECT_EQ(t.find("alice"), std::string::npos);
  EXPECT_EQ(t.find("424242"), std::string::npos);
  EXPECT_EQ(t.find("slow"), std::string::npos);
  // Loss scale only where loss scaling is on.
  EXPECT_EQ(t.find("firedrill_rank_loss_scale{"), std::string::npos);
}

TEST(SessionMetrics, TwoSessionsShareTheFamilies) {
  Exposition e;
  controller::DeclareSessionFamilies(&e);
  v1::SessionStatus a = TwoRanks(), b = TwoRanks();
  b.mutable_session()->set_session_id("s2");
  controller::AddSessionSamples(a, &e);
  controller::AddSessionSamples(b, &e);
  const std::string t = e.Text();
  size_t helps = 0;
  for (size_t at = 0; (at = t.find("# HELP firedrill_rank_step_seconds ", at)) != std::string::npos; ++at)
    ++helps;
  EXPECT_EQ(helps, 1u);
  EXPECT_NE(t.find("firedrill_rank_step_seconds{session=\"s2\",rank=\"0\"} 0.25"), std::string::npos);
}

TEST(ControllerMetrics, CountsByMethodCodeAndResult) {
  controller::ControllerCounters c;
  c.CountRpc("GetStatus", "OK");
  c.CountRpc("GetStatus", "OK");
  c.CountRpc("ApplyFix", "PERMISSION_DENIED");
  c.CountVerification("passed");
  controller::ControllerSnapshot snap;
  snap.rpcs = c.Rpcs();
  snap.verifications = c.Verifications();
  snap.sessions_by_state = {{"running", 2}, {"scored", 1}};
  snap.agents_accepted = 4;
  snap.version = "0.1.0";
  Exposition e;
  controller::AddControllerSamples(snap, &e);
  const std::string t = e.Text();
  for (const char* want : {
           "firedrill_rpcs_total{method=\"GetStatus\",code=\"OK\"} 2\n",
           "firedrill_rpcs_total{method=\"ApplyFix\",code=\"PERMISSION_DENIED\"} 1\n",
           "firedrill_verifications_total{result=\"passed\"} 1\n",
           "firedrill_verifications_total{result=\"failed\"} 0\n",
           "firedrill_sessions{state=\"running\"} 2\n",
           "firedrill_agent_registrations_total{result=\"accepted\"} 4\n",
           "firedrill_build_info{version=\"0.1.0\"} 1\n",
       })
    EXPECT_NE(t.find(want), std::string::npos) << want << "\nin\n" << t;
}

// Every family the shipped Grafana dashboard queries is one /metrics
// declares: a renamed family fails here, not on someone's screen.
TEST(Dashboard, QueriesOnlyFamiliesTheControllerDeclares) {
  std::ifstream in(std::string(FIREDRILL_SOURCE_DIR) + "/dashboards/firedrill-grafana.json");
  ASSERT_TRUE(in) << "dashboards/firedrill-grafana.json";
  const nlohmann::json d = nlohmann::json::parse(in);
  Exposition e;
  controller::DeclareSessionFamilies(&e);
  controller::AddControllerSamples(controller::ControllerSnapshot(), &e);
  std::set<std::string> declared;
  std::istringstream lines(e.Text());
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("# TYPE ", 0) == 0) declared.insert(line.substr(7, line.find(' ', 7) - 7));
  std::vector<std::string> exprs;
  for (const auto& panel : d.at("panels"))
    for (const auto& t : panel.value("targets", nlohmann::json::array())) exprs.push_back(t.at("expr"));
  for (const auto& v : d.at("templating").at("list"))
    if (v.contains("definition")) exprs.push_back(v.at("definition"));
  EXPECT_GE(exprs.size(), 20u);
  const std::regex family("firedrill_[a-z_]+");
  std::set<std::string> used;
  for (const auto& x : exprs)
    for (auto it = std::sregex_iterator(x.begin(), x.end(), family); it != std::sregex_iterator(); ++it)
      used.insert(it->str());
  for (const auto& name : used)
    EXPECT_EQ(declared.count(name), 1u) << name << " is not a family /metrics declares";
  // And the dashboard shows the per-rank phases and the baseline.
  EXPECT_EQ(used.count("firedrill_rank_phase_seconds"), 1u);
  EXPECT_EQ(used.count("firedrill_baseline_samples_per_second"), 1u);
}

TEST(HttpPieces, TargetsAreDecodedAndMalformedOnesRefused) {
  std::string path, why;
  std::map<std::string, std::string> q;
  ASSERT_TRUE(web::ParseTarget("/api/sessions/a%20b/status?x=1&y=a+b%21&flag", &path, &q, &why));
  EXPECT_EQ(path, "/api/sessions/a b/status");
  EXPECT_EQ(q["x"], "1");
  EXPECT_EQ(q["y"], "a b!");
  EXPECT_EQ(q.count("flag"), 1u);
  EXPECT_FALSE(web::ParseTarget("/bad%2", &path, &q, &why));
  EXPECT_FALSE(web::ParseTarget("/bad%zz", &path, &q, &why));
  EXPECT_FALSE(web::ParseTarget("/nul%00", &path, &q, &why));
  EXPECT_FALSE(web::ParseTarget("http://elsewhere/", &path, &q, &why));
  EXPECT_FALSE(web::ParseTarget("", &path, &q, &why));
}

TEST(HttpPieces, CookiesAreFoundByName) {
  EXPECT_EQ(web::CookieValue("a=1; fd_token=fdt_x; b=2", "fd_token"), "fdt_x");
  EXPECT_EQ(web::CookieValue("fd_token=\"q\"", "fd_token"), "q");
  EXPECT_EQ(web::CookieValue("xfd_token=1", "fd_token"), "");
  EXPECT_EQ(web::CookieValue("", "fd_token"), "");
}

TEST(HttpPieces, StatusCodesMapOntoHttp) {
  EXPECT_EQ(controller::HttpStatusOf(StatusCode::kUnauthenticated), 401);
  EXPECT_EQ(controller::HttpStatusOf(StatusCode::kPermissionDenied), 403);
  EXPECT_EQ(controller::HttpStatusOf(StatusCode::kNotFound), 404);
  EXPECT_EQ(controller::HttpStatusOf(StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(controller::HttpStatusOf(StatusCode::kFailedPrecondition), 409);
  EXPECT_EQ(controller::HttpStatusOf(StatusCode::kInternal), 500);
  const web::HttpResponse r =
      controller::ErrorResponse(Status(StatusCode::kUnauthenticated, "no token"), true);
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(r.content_type, "application/json");
  bool challenge = false;
  for (const auto& [k, v] : r.headers) challenge |= k == "WWW-Authenticate" && v.rfind("Bearer", 0) == 0;
  EXPECT_TRUE(challenge);
  EXPECT_NE(r.body.find("\"code\":\"UNAUTHENTICATED\""), std::string::npos) << r.body;
}

}  // namespace
}  // namespace firedrill
