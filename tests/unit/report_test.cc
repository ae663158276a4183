// Reports as documents: the SVG charts, a session's report in Markdown and
// HTML (self-contained; what a sealed score hides stays hidden), and the
// charts in the exam result's and postmortem's pages.
#include "cli/report.h"

#include <gtest/gtest.h>

#include <string>

#include "common/svg_chart.h"

namespace firedrill {
namespace {

size_t Count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = 0; (at = s.find(what, at)) != std::string::npos; at += what.size()) ++n;
  return n;
}

TEST(SvgChart, DrawsEverySeriesAndEscapesItsText) {
  ChartSpec c;
  c.title = "Loss <by> step";
  c.x_label = "step";
  c.series = {{"rank 0 & friends", {{0, 2.3}, {10, 1.9}, {20, 1.2}}}, {"rank 1", {{0, 2.2}, {20, 1.1}}}};
  c.reference = 1.5;
  c.reference_label = "baseline";
  const std::string svg = SvgChart(c);
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_EQ(Count(svg, "<polyline"), 2u);
  EXPECT_NE(svg.find("Loss &lt;by&gt; step"), std::string::npos);
  EXPECT_NE(svg.find("rank 0 &amp; friends"), std::string::npos);
  EXPECT_NE(svg.find("stroke-dasharray"), std::string::npos);  // the reference line
  EXPECT_EQ(svg.find("<script"), std::string::npos);
  EXPECT_EQ(svg.find("href"), std::string::npos);
  EXPECT_EQ(svg.substr(svg.size() - 6), "</svg>");
}

TEST(SvgChart, BarsAndEmptyCharts) {
  ChartSpec c;
  c.bars = true;
  c.series = {{"ratio", {{1, 0.97}, {2, 1.02}, {3, 0.99}}}};
  EXPECT_EQ(Count(SvgChart(c), "<rect x="), 3u + 1u);  // three bars and the legend's swatch
  ChartSpec empty;
  empty.series = {{"nothing", {}}};
  EXPECT_NE(SvgChart(empty).find("no data"), std::string::npos);
}

TEST(SvgChart, ThinningKeepsTheEndsAndTicksCoverTheRange) {
  std::vector<std::pair<double, double>> p;
  for (int i = 0; i < 5000; ++i) p.emplace_back(i, i * 0.5);
  const auto thin = ThinPoints(p, 100);
  ASSERT_EQ(thin.size(), 100u);
  EXPECT_EQ(thin.front().first, 0);
  EXPECT_EQ(thin.back().first, 4999);
  const auto ticks = NiceTicks(0.13, 9.7, 4);
  ASSERT_GE(ticks.size(), 3u);
  EXPECT_GE(ticks.front(), 0.13);
  EXPECT_LE(ticks.back(), 9.7 + 1e-9);
  EXPECT_DOUBLE_EQ(ticks[1] - ticks[0], 2.5);
}

cli::SessionReport Scored() {
  cli::SessionReport r;
  auto& s = r.score;
  s.set_session_id("s-1");
  s.set_scenario_id("throughput-halved");
  s.set_final(true);
  s.set_state("scored");
  s.set_total(90);
  s.set_max_total(100);
  auto* it = s.add_items();
  it->set_name("cause");
  it->set_points(40);
  it->set_max_points(40);
  it->set_reason("right");
  auto* d = s.add_diagnoses();
  d->set_number(1);
  d->set_note("<script>alert(1)</script>");
  d->add_findings()->set_cause("straggler");
  s.set_fix_applied(true);
  s.mutable_fix()->add_replace_host_ranks(3);
  auto* v = s.mutable_verification();
  v->set_done(true);
  v->set_passed(true);
  v->set_throughput_ratio(0.98);
  v->set_throughput_ratio_min(0.85);
  for (double ratio : {0.97, 0.98, 1.01}) v->add_pairs()->set_ratio(ratio);
  s.add_answer_findings()->set_cause("straggler");
  r.status.mutable_session()->set_title("Throughput halved overnight");
  r.status.mutable_baseline()->set_throughput_samples_per_s(1000);
  v1::MetricsResponse main;
  for (int rank = 0; rank < 2; ++rank) {
    auto* rk = main.add_ranks();
    rk->set_rank(rank);
    for (int step = 1; step <= 30; ++step) {
      auto* row = rk->add_rows();
      row->set_step(step);
      row->set_samples_per_s(250);
      row->set_step_ms(64);
      row->set_loss(2.0 - step * 0.01);
    }
  }
  r.main = main;
  r.generated_unix_ms = 1765000000000;
  return r;
}

TEST(SessionReport, HtmlIsSelfContainedWithItsChartsAndEscapesWhatWasTyped) {
  const std::string html = cli::ReportHtml(Scored());
  EXPECT_NE(html.find("<h1>Throughput halved overnight</h1>"), std::string::npos);
  EXPECT_NE(html.find("90 / 100"), std::string::npos);
  EXPECT_EQ(Count(html, "<svg"), 4u);  // throughput, step time, loss, verification pairs
  EXPECT_NE(html.find("floor 0.85"), std::string::npos);
  EXPECT_NE(html.find("healthy baseline 1000"), std::string::npos);
  EXPECT_EQ(html.find("<script>"), std::string::npos);
  EXPECT_NE(html.find("&lt;script&gt;"), std::string::npos);
  EXPECT_EQ(html.find("src="), std::string::npos);
  EXPECT_EQ(html.find("href="), std::string::npos);
  const std::string md = cli::ReportMarkdown(Scored());
  EXPECT_NE(md.find("| cause | 40 | 40 | right |"), std::string::npos) << md;
  EXPECT_NE(md.find("`--replace-host 3`"), std::string::npos) << md;
  EXPECT_NE(md.find("## Answer"), std::string::npos);
}

TEST(SessionReport, ASealedScoreStaysSealed) {
  cli::SessionReport r = Scored();
  v1::ScoreReport sealed;  // what GetScore answers before scoring, or to a candidate
  sealed.set_session_id("s-1");
  sealed.set_state("running");
  *sealed.mutable_diagnoses() = r.score.diagnoses();
  sealed.set_note("not scored yet");
  r.score = sealed;
  for (const std::string& doc : {cli::ReportHtml(r), cli::ReportMarkdown(r)}) {
    EXPECT_NE(doc.find("not scored yet (running)"), std::string::npos) << doc;
    EXPECT_EQ(doc.find("Answer"), std::string::npos);
    EXPECT_EQ(doc.find("Verification"), std::string::npos);
    EXPECT_EQ(doc.find("floor"), std::string::npos);
  }
}

}  // namespace
}  // namespace firedrill
