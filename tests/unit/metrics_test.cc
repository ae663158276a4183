// `firedrill metrics`: series names, the job's value per step, the terminal
// plot, JSON and CSV, on responses built here (the controller's side is
// in run_metrics_test and the e2e drills).
#include "cli/metrics.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

namespace firedrill::cli {
namespace {

// Two ranks, `n` steps: the loss falls from 2.3 on rank 0 and sits 0.1
// above it on rank 1; the grad norm is inf on the steps in `bad`.
v1::MetricsResponse Response(int n, double scale, std::vector<int64_t> bad = {}) {
  v1::MetricsResponse m;
  m.set_session_id("s-1");
  m.set_run("main");
  m.set_stride(1);
  for (int r = 0; r < 2; ++r) {
    v1::RankMetrics* rm = m.add_ranks();
    rm->set_rank(r);
    rm->set_host("node-" + std::to_string(r));
    for (int s = 0; s < n; ++s) {
      v1::MetricsRow* row = rm->add_rows();
      row->set_step(s);
      row->set_loss(2.3 - 0.01 * s + 0.1 * r);
      const bool inf = std::find(bad.begin(), bad.end(), s) != bad.end();
      row->set_grad_norm(inf ? INFINITY : 1.0);
      row->set_loss_scale(scale);
      row->set_skipped(inf);
      row->set_skipped_total(s);
      row->set_lr(0.05);
      row->set_samples_per_s(1000 + r);
      row->set_step_ms(10);
      row->set_global_batch(128);
    }
  }
  return m;
}

TEST(MetricsSeries, DefaultsTyposAndRepeats) {
  auto all = ParseSeries("");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(*all, (std::vector<std::string>{"loss", "grad_norm", "loss_scale", "skipped", "lr", "throughput"}));
  auto two = ParseSeries("lr,loss,lr,");
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(*two, (std::vector<std::string>{"lr", "loss"}));
  auto typo = ParseSeries("loss,gradnorm");
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("unknown series 'gradnorm'"), std::string::npos);
  EXPECT_NE(typo.status().message().find("did you mean 'grad_norm'"), std::string::npos) << typo.status().message();
  EXPECT_FALSE(ParseSeries(",").ok());
}

TEST(MetricsSeries, PerRankSignalsAreMeansAndJobWideOnesRankZeros) {
  v1::MetricsResponse m = Response(5, 65536, {3});
  m.mutable_ranks(1)->mutable_rows(0)->set_loss_scale(1);  // never differs in a real job; shows whose is read
  const SeriesPoints loss = JobSeries(m, "loss");
  ASSERT_EQ(loss.values.size(), 5u);
  EXPECT_NEAR(loss.values[0], 2.35, 1e-12);
  EXPECT_EQ(JobSeries(m, "loss_scale").values[0], 65536);
  const SeriesPoints norm = JobSeries(m, "grad_norm");
  EXPECT_TRUE(std::isinf(norm.values[3])) << "one rank's inf is the step's";
  EXPECT_EQ(norm.values[2], 1.0);
  EXPECT_EQ(JobSeries(m, "skipped").values[4], 4);
  EXPECT_EQ(JobSeries(m, "throughput").values[0], 1000.5);
}

TEST(MetricsPlot, ALineFallsFromTopLeftToBottomRightAndMarksInf) {
  SeriesPoints p;
  for (int s = 0; s < 10; ++s) {
    p.steps.push_back(s);
    p.values.push_back(s == 4 ? NAN : 10.0 - s);
  }
  const std::string chart = Plot(p, 10, 5, false);
  std::istringstream in(chart);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 7u) << chart;  // 5 rows, the axis, the step labels
  const std::string top = lines[0].substr(lines[0].find('|') + 1);
  const std::string bottom = lines[4].substr(lines[4].find('|') + 1);
  EXPECT_EQ(top[0], '*') << chart;
  EXPECT_EQ(top[4], 'x') << chart;
  EXPECT_EQ(bottom[9], '*') << chart;
  EXPECT_NE(lines[0].find("10 |"), std::string::npos) << chart;
  EXPECT_NE(lines[4].find(" 1 |"), std::string::npos) << chart;
  EXPECT_NE(lines[6].find("step 0"), std::string::npos) << chart;
  EXPECT_NE(lines[6].find("9"), std::string::npos) << chart;
}

TEST(MetricsPlot, AFlatLineSitsInTheMiddleAndLogAxesCountPowersOfTwo) {
  SeriesPoints p;
  for (int s = 0; s < 4; ++s) {
    p.steps.push_back(s);
    p.values.push_back(16777216);
  }
  const std::string chart = Plot(p, 60, 8, true);
  EXPECT_NE(chart.find("2^24 |****"), std::string::npos) << chart;
  EXPECT_EQ(Plot(SeriesPoints{}, 60, 8, false), "  (no steps)\n");
}

TEST(MetricsPrint, EverySeriesIsDrawnTheSameWayForEveryJob) {
  std::ostringstream fp32, fp16;
  PrintMetrics(Response(30, 0), *ParseSeries(""), -1, fp32);
  PrintMetrics(Response(30, 16777216, {0, 1, 2}), *ParseSeries(""), -1, fp16);
  for (const std::string& text : {fp32.str(), fp16.str()}) {
    for (const char* series : {"\nloss:", "\ngrad_norm:", "\nloss_scale:", "\nskipped:", "\nlr:", "\nthroughput:"})
      EXPECT_NE(text.find(series), std::string::npos) << series << " in\n" << text;
    EXPECT_NE(text.find("metrics of the main run: steps 0..29, 2 ranks"), std::string::npos) << text;
    EXPECT_NE(text.find("last step, by rank:  0: 2.01  1: 2.11"), std::string::npos) << text;
  }
  EXPECT_NE(fp32.str().find("0 at every step: loss scaling is off"), std::string::npos) << fp32.str();
  EXPECT_NE(fp16.str().find("3 of 30 steps not finite"), std::string::npos) << fp16.str();
  EXPECT_NE(fp16.str().find("(x: a step with an inf/NaN value)"), std::string::npos) << fp16.str();
  std::ostringstream one;
  PrintMetrics(Response(30, 0), {"loss"}, 1, one);
  EXPECT_NE(one.str().find("rank 1"), std::string::npos) << one.str();
  EXPECT_NE(one.str().find("first 2.4 (step 0)"), std::string::npos) << one.str();
}

TEST(MetricsFormats, JsonHasNullsForInfAndCsvOneLinePerRankAndStep) {
  const v1::MetricsResponse m = Response(3, 1024, {1});
  const auto j = nlohmann::json::parse(MetricsJson(m, {"loss", "grad_norm"}, -1));
  EXPECT_EQ(j["run"], "main");
  ASSERT_EQ(j["ranks"].size(), 2u);
  EXPECT_EQ(j["ranks"][0]["steps"], nlohmann::json({0, 1, 2}));
  EXPECT_TRUE(j["ranks"][0]["grad_norm"][1].is_null());
  EXPECT_NEAR(j["ranks"][1]["loss"][0].get<double>(), 2.4, 1e-12);
  EXPECT_EQ(nlohmann::json::parse(MetricsJson(m, {"loss"}, 1))["ranks"].size(), 1u);

  const std::string csv = MetricsCsv(m, {"loss", "grad_norm"}, -1);
  std::istringstream in(csv);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 7u) << csv;
  EXPECT_EQ(lines[0], "step,rank,loss,grad_norm");
  EXPECT_EQ(lines[1], "0,0,2.3,1");
  EXPECT_EQ(lines[2], "0,1,2.4,1");  // step order across ranks
  EXPECT_EQ(lines[3], "1,0,2.29,inf");
}

TEST(MetricsPrint, TheBaselineShowsWhatItMeasuredNotItsSettings) {
  v1::MetricsResponse m = Response(10, 0);
  m.set_run("baseline");
  for (const char* w : {"lr", "loss_scale", "global_batch"}) m.add_withheld(w);
  std::ostringstream out;
  PrintMetrics(m, *ParseSeries(""), -1, out);
  EXPECT_NE(out.str().find("\nloss:"), std::string::npos) << out.str();
  EXPECT_EQ(out.str().find("\nlr:"), std::string::npos) << out.str();
  EXPECT_EQ(out.str().find("\nloss_scale:"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("not its settings; left out: lr loss_scale global_batch"), std::string::npos) << out.str();
  const auto j = nlohmann::json::parse(MetricsJson(m, *ParseSeries(""), -1));
  EXPECT_EQ(j["series"], nlohmann::json({"loss", "grad_norm", "skipped", "throughput"}));
  EXPECT_EQ(MetricsCsv(m, {"loss", "lr"}, 0).substr(0, 15), "step,rank,loss\n");
}

}  // namespace
}  // namespace firedrill::cli
