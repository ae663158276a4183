#include "controller/run_metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace firedrill::controller {
namespace {

v1::StepReport Step(int rank, int64_t step, double step_ms, double comm_ms) {
  v1::StepReport s;
  s.set_rank(rank);
  s.set_step(step);
  s.set_step_ms(step_ms);
  s.set_comm_ms(comm_ms);
  return s;
}

// --- Median -------------------------------------------------------------------

TEST(MedianTest, OddEvenEmpty) {
  EXPECT_DOUBLE_EQ(Median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(Median({7}), 7);
  EXPECT_DOUBLE_EQ(Median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(Median({10, 0}), 5);
  EXPECT_DOUBLE_EQ(Median({5, 5, 1, 9, 9, 1}), 5);
  EXPECT_DOUBLE_EQ(Median({}), 0);
}

// --- FillRankWindow -----------------------------------------------------------

std::vector<v1::StepReport> FiveSteps() {
  std::vector<v1::StepReport> v;
  for (int i = 0; i < 5; ++i) {
    v1::StepReport s = Step(0, 100 + i, 10.0 * (i + 1), 1.0 * (i + 1));  // step_ms 10..50, comm 1..5
    s.set_data_ms(2.0 * i);
    s.set_forward_ms(3.0);
    s.set_backward_ms(4.0 + i);
    s.set_optim_ms(0.5);
    s.set_samples_per_s(100.0 * (i + 1));
    s.set_loss(5.0 - i);
    v.push_back(s);
  }
  return v;
}

TEST(FillRankWindowTest, AveragesOnlyTheLastN) {
  v1::RankStatus r;
  FillRankWindow(FiveSteps(), 2, &r);  // steps 103 and 104
  EXPECT_EQ(r.window_steps(), 2);
  EXPECT_EQ(r.step(), 104);
  EXPECT_DOUBLE_EQ(r.loss(), 1.0);  // the last, not an average
  EXPECT_DOUBLE_EQ(r.step_ms(), 45);
  EXPECT_DOUBLE_EQ(r.comm_ms(), 4.5);
  EXPECT_DOUBLE_EQ(r.data_ms(), 7);
  EXPECT_DOUBLE_EQ(r.forward_ms(), 3);
  EXPECT_DOUBLE_EQ(r.backward_ms(), 7.5);
  EXPECT_DOUBLE_EQ(r.optim_ms(), 0.5);
  EXPECT_DOUBLE_EQ(r.samples_per_s(), 450);
}

// Rates and times are window means; optimiser state, counters and memory
// are the last step's values (a mean of a running counter or a peak would
// describe no step at all).
TEST(FillRankWindowTest, TelemetryMeansAndLatestValues) {
  std::vector<v1::StepReport> v = FiveSteps();
  for (int i = 0; i < 5; ++i) {
    v1::StepReport& s = v[i];
    s.set_tokens_per_s(1000.0 * (i + 1));    // 1000..5000
    s.set_padding_fraction(0.1 * i);         // 0..0.4
    s.set_comm_total_ms(6.0 + i);            // 6..10
    s.set_allreduces(i < 4 ? 3 : 12);        // the last step synchronised every micro-batch
    s.set_allreduce_bytes(1000 * s.allreduces());
    s.set_checkpoint_ms(i == 4 ? 80.0 : 0);  // one checkpoint write in the window
    s.set_loss_scale(65536.0 / (1 << i));
    s.set_skipped_total(i);
    s.set_grad_norm(1.0 + i);
    s.set_lr(0.001 * (i + 1));
    s.set_global_batch(64 * (i + 1));
    s.set_mem_peak_bytes(1000 + i);
    s.set_mem_activation_peak_bytes(2000 + i);
    s.set_mem_params_bytes(3000 + i);
    s.set_mem_grads_bytes(4000 + i);
    s.set_mem_optim_bytes(5000 + i);
  }
  v1::RankStatus r;
  FillRankWindow(v, 2, &r);  // steps 103 and 104
  EXPECT_DOUBLE_EQ(r.tokens_per_s(), 4500);
  EXPECT_NEAR(r.padding_fraction(), 0.35, 1e-12);
  EXPECT_DOUBLE_EQ(r.comm_total_ms(), 9.5);
  EXPECT_DOUBLE_EQ(r.allreduces_per_step(), 7.5);
  EXPECT_DOUBLE_EQ(r.allreduce_bytes_per_step(), 7500);
  EXPECT_DOUBLE_EQ(r.checkpoint_ms(), 40);
  EXPECT_DOUBLE_EQ(r.loss_scale(), 4096);
  EXPECT_EQ(r.skipped_total(), 4);
  EXPECT_DOUBLE_EQ(r.grad_norm(), 5);
  EXPECT_DOUBLE_EQ(r.lr(), 0.005);
  EXPECT_EQ(r.global_batch(), 320);
  EXPECT_EQ(r.mem_peak_bytes(), 1004);
  EXPECT_EQ(r.mem_activation_peak_bytes(), 2004);
  EXPECT_EQ(r.mem_params_bytes(), 3004);
  EXPECT_EQ(r.mem_grads_bytes(), 4004);
  EXPECT_EQ(r.mem_optim_bytes(), 5004);
}

TEST(FillRankWindowTest, WindowLargerThanHistoryUsesAll) {
  v1::RankStatus r;
  FillRankWindow(FiveSteps(), 50, &r);
  EXPECT_EQ(r.window_steps(), 5);
  EXPECT_DOUBLE_EQ(r.step_ms(), 30);
  EXPECT_DOUBLE_EQ(r.samples_per_s(), 300);
}

TEST(FillRankWindowTest, NonPositiveWindowMeansOneAndEmptyLeavesStatusAlone) {
  v1::RankStatus r;
  FillRankWindow(FiveSteps(), 0, &r);
  EXPECT_EQ(r.window_steps(), 1);
  EXPECT_DOUBLE_EQ(r.step_ms(), 50);

  v1::RankStatus untouched;
  untouched.set_step_ms(123);
  FillRankWindow({}, 10, &untouched);
  EXPECT_DOUBLE_EQ(untouched.step_ms(), 123);
  EXPECT_EQ(untouched.window_steps(), 0);
}

// --- MarkSlowRanks ------------------------------------------------------------

v1::RankStatus Rank(int rank, double step_ms, double comm_ms, int window = 10) {
  v1::RankStatus r;
  r.set_rank(rank);
  r.set_step_ms(step_ms);
  r.set_comm_ms(comm_ms);
  r.set_window_steps(window);
  return r;
}

TEST(MarkSlowRanksTest, FlagsOnlyTheRankWhoseBusyTimeIsAtLeastRatioTimesMedian) {
  // Synchronous DP: equal step times, the straggler waits least in comm.
  // busy = 10, 10, 10, 25 -> median 10.
  std::vector<v1::RankStatus> ranks = {Rank(0, 30, 20), Rank(1, 30, 20), Rank(2, 30, 5), Rank(3, 30, 20)};
  std::swap(ranks[2], ranks[3]);  // order must not matter
  MarkSlowRanks(1.5, &ranks);
  for (const auto& r : ranks) {
    if (r.rank() == 2) {
      EXPECT_TRUE(r.slow());
      EXPECT_DOUBLE_EQ(r.busy_vs_median(), 2.5);
    } else {
      EXPECT_FALSE(r.slow()) << "rank " << r.rank();
      EXPECT_DOUBLE_EQ(r.busy_vs_median(), 1.0);
    }
  }
}

TEST(MarkSlowRanksTest, ExactlyTheRatioIsSlowJustBelowIsNot) {
  // busy = 10, 10, 10, 15 -> median 10, rank 3 at exactly 1.5x.
  std::vector<v1::RankStatus> ranks = {Rank(0, 20, 10), Rank(1, 20, 10), Rank(2, 20, 10), Rank(3, 20, 5)};
  MarkSlowRanks(1.5, &ranks);
  EXPECT_TRUE(ranks[3].slow());
  ranks[3].set_comm_ms(5.5);  // busy 14.5 -> 1.45x
  MarkSlowRanks(1.5, &ranks);
  EXPECT_FALSE(ranks[3].slow());
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(ranks[i].slow());
}

TEST(MarkSlowRanksTest, RanksWithoutDataAreIgnored) {
  // Rank 3 has no window: it neither counts toward the median nor gets flagged.
  std::vector<v1::RankStatus> ranks = {Rank(0, 20, 10), Rank(1, 20, 10), Rank(2, 40, 10), Rank(3, 0, 0, 0)};
  MarkSlowRanks(1.5, &ranks);  // busy 10, 10, 30 -> median 10
  EXPECT_FALSE(ranks[0].slow());
  EXPECT_TRUE(ranks[2].slow());
  EXPECT_DOUBLE_EQ(ranks[2].busy_vs_median(), 3.0);
  EXPECT_FALSE(ranks[3].slow());
  EXPECT_DOUBLE_EQ(ranks[3].busy_vs_median(), 0);
}

TEST(MarkSlowRanksTest, CheckpointWritesAreNotBusyTime) {
  // Rank 0 writes the manifest: 3 ms more of checkpoint per step, the same
  // compute. busy = 10 everywhere.
  std::vector<v1::RankStatus> ranks = {Rank(0, 23, 10), Rank(1, 20, 10), Rank(2, 20, 10), Rank(3, 20, 10)};
  ranks[0].set_checkpoint_ms(3);
  MarkSlowRanks(1.2, &ranks);
  EXPECT_DOUBLE_EQ(ranks[0].busy_vs_median(), 1.0);
  EXPECT_FALSE(ranks[0].slow());
}

// --- MeasureWindow ------------------------------------------------------------

// Three ranks, steps 0..9. Inside the window (steps 2..6): rank 0 and 1 take
// 100 ms per step, rank 2 takes 120 ms. Busy: 50, 60, 100 ms. Outside the
// window every step is absurdly slow so that leaking it in would show.
std::vector<std::vector<v1::StepReport>> Reports() {
  const double step_ms[3] = {100, 100, 120};
  const double comm_ms[3] = {50, 40, 20};
  std::vector<std::vector<v1::StepReport>> per_rank(3);
  for (int r = 0; r < 3; ++r) {
    for (int s = 0; s < 10; ++s) {
      const bool in = s >= 2 && s <= 6;
      per_rank[r].push_back(Step(r, s, in ? step_ms[r] : 10000, in ? comm_ms[r] : 0));
    }
  }
  return per_rank;
}

TEST(MeasureWindowTest, ThroughputFollowsTheSlowestRankAndSkewIsMaxOverMedianBusy) {
  const WindowStats w = MeasureWindow(Reports(), 2, 5, 96);
  EXPECT_EQ(w.steps, 5);
  // 96 samples * 1000 / 120 ms, the slowest rank's median step
  EXPECT_DOUBLE_EQ(w.throughput_samples_per_s, 96.0 * 1000 / 120);
  EXPECT_DOUBLE_EQ(w.throughput_samples_per_s, 800);
  EXPECT_DOUBLE_EQ(w.median_step_ms, 100);  // 10 x 100 ms, 5 x 120 ms
  EXPECT_DOUBLE_EQ(w.rank_step_skew, 100.0 / 60.0);
}

TEST(MeasureWindowTest, SkewUsesEachRanksMedianBusyTime) {
  auto per_rank = Reports();
  per_rank[1][3].set_comm_ms(-400);  // one odd 500 ms-busy step on rank 1
  const WindowStats w = MeasureWindow(per_rank, 2, 5, 96);
  EXPECT_DOUBLE_EQ(w.rank_step_skew, 100.0 / 60.0);  // rank 1's median busy is still 60
}

// Four ranks whose batches differ in work (a batch of long sequences costs
// three times one of short ones; ranks 1 and 3 drew long ones on 15 of 20
// steps, ranks 0 and 2 on 5), all sharing cores alike: busy time per CPU ms
// is 2 on every rank. `slowed` (if >= 0) is throttled: its busy time is three times
// its CPU time on every step.
std::vector<std::vector<v1::StepReport>> VariableWork(int slowed, int steps = 20) {
  std::vector<std::vector<v1::StepReport>> per_rank(4);
  for (int r = 0; r < 4; ++r) {
    for (int s = 0; s < steps; ++s) {
      const bool long_batch = (r % 2 == 1) == (s % 4 != 0);
      const double cpu_ms = long_batch ? 30 : 10;
      const double stretch = r == slowed ? 6 : 2;
      v1::StepReport st = Step(r, s, cpu_ms * stretch + 5, 5);
      st.set_thread_cpu_ns(static_cast<int64_t>(cpu_ms * 1e6));
      per_rank[r].push_back(st);
    }
  }
  return per_rank;
}

TEST(MeasureWindowTest, SkewComparesEachRanksBusyTimePerCpuMsWhereThreadTimesAreReported) {
  WindowStats w = MeasureWindow(VariableWork(-1), 0, 20, 64);
  EXPECT_TRUE(w.rank_skew_of_stretch);
  EXPECT_DOUBLE_EQ(w.rank_step_skew, 1.0);  // busy time's p25 would read 20, 50, 20, 50: x1.43
  w = MeasureWindow(VariableWork(2), 0, 20, 64);
  EXPECT_TRUE(w.rank_skew_of_stretch);
  EXPECT_DOUBLE_EQ(w.rank_step_skew, 3.0);

  // A quota throttles in bursts: the slowed rank's steps run whole within a
  // period's quota on 3 steps of 5 (stretch 2, as its peers') and wait out
  // the rest of a period on the other 2 (stretch 12). Step by step its
  // median stretch would be its peers'; over blocks of steps it is not.
  auto per_rank = VariableWork(-1);
  for (int s = 0; s < 20; ++s) {
    v1::StepReport& st = per_rank[2][s];
    if (s % 5 >= 3) st.set_step_ms(static_cast<double>(st.thread_cpu_ns()) / 1e6 * 12 + 5);
  }
  w = MeasureWindow(per_rank, 0, 20, 64);
  EXPECT_TRUE(w.rank_skew_of_stretch);
  EXPECT_GT(w.rank_step_skew, 2.5);

  // One healthy rank stalled 10x on one step (the OS, a page fault): one
  // block of the median's tail. A checkpoint write on one rank is left out.
  per_rank = VariableWork(-1);
  per_rank[0][7].set_step_ms(per_rank[0][7].step_ms() * 10);
  per_rank[1][2].set_checkpoint_ms(400);
  per_rank[1][2].set_step_ms(per_rank[1][2].step_ms() + 400);
  w = MeasureWindow(per_rank, 0, 20, 64);
  EXPECT_TRUE(w.rank_skew_of_stretch);
  EXPECT_DOUBLE_EQ(w.rank_step_skew, 1.0);

  // A rank without thread times on most of its steps: busy time for all
  // (p25 20, 50, 60, 50: the slowed rank's 60 over the median 50; stretch
  // reads 3).
  per_rank = VariableWork(2);
  for (int s = 0; s < 11; ++s) per_rank[1][s].clear_thread_cpu_ns();
  w = MeasureWindow(per_rank, 0, 20, 64);
  EXPECT_FALSE(w.rank_skew_of_stretch);
  EXPECT_DOUBLE_EQ(w.rank_step_skew, 1.2);
}

TEST(MeasureWindowTest, AMissingStepOnOneRankReducesSteps) {
  auto per_rank = Reports();
  per_rank[1].erase(per_rank[1].begin() + 4);  // rank 1 never reported step 4
  const WindowStats w = MeasureWindow(per_rank, 2, 5, 96);
  EXPECT_EQ(w.steps, 4);
  EXPECT_DOUBLE_EQ(w.throughput_samples_per_s, 800);  // rank 2 is still the slowest
  EXPECT_DOUBLE_EQ(w.rank_step_skew, 100.0 / 60.0);
}

TEST(MeasureWindowTest, WindowPastTheDataOrEmptyInputMeasuresNothing) {
  WindowStats w = MeasureWindow(Reports(), 20, 5, 96);
  EXPECT_EQ(w.steps, 0);
  EXPECT_DOUBLE_EQ(w.throughput_samples_per_s, 0);
  EXPECT_DOUBLE_EQ(w.rank_step_skew, 0);

  w = MeasureWindow({}, 0, 5, 96);
  EXPECT_EQ(w.steps, 0);
  EXPECT_DOUBLE_EQ(w.throughput_samples_per_s, 0);

  w = MeasureWindow(Reports(), 2, 0, 96);
  EXPECT_EQ(w.steps, 0);

  // One rank with no data in the window: no step was measured on every rank.
  auto per_rank = Reports();
  per_rank[2].clear();
  w = MeasureWindow(per_rank, 2, 5, 96);
  EXPECT_EQ(w.steps, 0);
}

TEST(MeasureWindowTest, WindowRunningPastTheLastStepCountsWhatExists) {
  // Steps 8..12 requested; only 8 and 9 exist (10000 ms each on every rank).
  const WindowStats w = MeasureWindow(Reports(), 8, 5, 10);
  EXPECT_EQ(w.steps, 2);
  EXPECT_DOUBLE_EQ(w.throughput_samples_per_s, 10.0 * 1000 / 10000);
}

// --- Verify -------------------------------------------------------------------

v1::VerifySpec Spec() {
  v1::VerifySpec s;
  s.set_warmup_steps(2);
  s.set_window_steps(5);
  s.set_throughput_vs_baseline_min(0.9);
  s.set_rank_step_skew_max(1.3);
  return s;
}

WindowStats Window(int64_t steps, double tput, double skew) {
  WindowStats w;
  w.steps = steps;
  w.throughput_samples_per_s = tput;
  w.tokens_per_s = tput * 100;
  w.median_step_ms = 100;
  w.rank_step_skew = skew;
  return w;
}

// `n` pairs: a healthy window at `healthy` and a fixed one at `fixed`.
std::vector<MeasuredPair> Pairs(int n, double healthy, const WindowStats& fixed) {
  std::vector<MeasuredPair> out;
  for (int i = 0; i < n; ++i) out.push_back({Window(5, healthy, 1.0), fixed});
  return out;
}

// The detail string has three '; '-separated parts: throughput, skew, steps.
std::vector<std::string> Parts(const std::string& detail) {
  std::vector<std::string> out;
  size_t from = 0;
  for (size_t at; (at = detail.find("; ", from)) != std::string::npos; from = at + 2)
    out.push_back(detail.substr(from, at - from));
  out.push_back(detail.substr(from));
  return out;
}
bool HasFail(const std::string& s) { return s.find("FAIL") != std::string::npos; }

TEST(VerifyTest, PassesWhenEveryThresholdHolds) {
  const v1::Verification v = Verify(Pairs(3, 1000, Window(5, 950, 1.1)), Spec());
  EXPECT_TRUE(v.done());
  EXPECT_TRUE(v.passed());
  EXPECT_DOUBLE_EQ(v.throughput_ratio(), 0.95);
  EXPECT_DOUBLE_EQ(v.throughput_samples_per_s(), 950);
  EXPECT_DOUBLE_EQ(v.baseline_samples_per_s(), 1000);
  EXPECT_DOUBLE_EQ(v.throughput_ratio_min(), 0.9);
  EXPECT_DOUBLE_EQ(v.rank_step_skew(), 1.1);
  EXPECT_DOUBLE_EQ(v.rank_step_skew_max(), 1.3);
  EXPECT_EQ(v.pairs_size(), 3);
  EXPECT_EQ(v.unit(), "samples");
  EXPECT_FALSE(HasFail(v.detail())) << v.detail();
  EXPECT_NE(v.detail().find("0.95x the healthy job's 1000"), std::string::npos) << v.detail();
  EXPECT_NE(v.detail().find("5/5 steps"), std::string::npos) << v.detail();
}

TEST(VerifyTest, ExactlyAtTheThresholdsPasses) {
  const v1::Verification v = Verify(Pairs(3, 1000, Window(5, 900, 1.3)), Spec());
  EXPECT_TRUE(v.passed()) << v.detail();
}

TEST(VerifyTest, TheMedianPairDecidesSoOneDisturbedPairDoesNot) {
  // A healthy window that the machine slowed (pair 1) and a fixed one it
  // slowed (pair 2): the median ratio is the undisturbed pair's.
  std::vector<MeasuredPair> p = {{Window(5, 600, 1.0), Window(5, 980, 1.1)},
                                 {Window(5, 1000, 1.0), Window(5, 500, 1.1)},
                                 {Window(5, 1000, 1.0), Window(5, 970, 1.1)}};
  const v1::Verification v = Verify(p, Spec());
  EXPECT_TRUE(v.passed()) << v.detail();
  EXPECT_DOUBLE_EQ(v.throughput_ratio(), 0.97);
  EXPECT_NE(v.detail().find("1.63, 0.50, 0.97"), std::string::npos) << v.detail();
  // An unfixed job is slow in every pair, whatever the machine does.
  p = {{Window(5, 600, 1.0), Window(5, 300, 1.1)},
       {Window(5, 1000, 1.0), Window(5, 450, 1.1)},
       {Window(5, 900, 1.0), Window(5, 420, 1.1)}};
  EXPECT_FALSE(Verify(p, Spec()).passed());
}

TEST(VerifyTest, TokensAreCountedWhereTheSpecSaysSo) {
  v1::VerifySpec spec = Spec();
  spec.set_throughput_unit("tokens");
  WindowStats fixed = Window(5, 1000, 1.0);
  fixed.tokens_per_s = 50000;  // same samples, half the real tokens (more padding)
  const v1::Verification v = Verify(Pairs(3, 1000, fixed), spec);
  EXPECT_EQ(v.unit(), "tokens");
  EXPECT_DOUBLE_EQ(v.throughput_ratio(), 0.5);
  EXPECT_FALSE(v.passed());
  EXPECT_NE(v.detail().find("tokens/s"), std::string::npos) << v.detail();
}

TEST(VerifyTest, LowThroughputFailsAndSaysWhere) {
  const v1::Verification v = Verify(Pairs(3, 1000, Window(5, 800, 1.1)), Spec());
  EXPECT_TRUE(v.done());
  EXPECT_FALSE(v.passed());
  const auto p = Parts(v.detail());
  ASSERT_EQ(p.size(), 3u) << v.detail();
  EXPECT_TRUE(HasFail(p[0])) << v.detail();
  EXPECT_NE(p[0].find("0.80x"), std::string::npos) << v.detail();
  EXPECT_NE(p[0].find("need >= 0.90"), std::string::npos) << v.detail();
  EXPECT_FALSE(HasFail(p[1])) << v.detail();
  EXPECT_FALSE(HasFail(p[2])) << v.detail();
}

TEST(VerifyTest, HighSkewFailsAndSaysWhere) {
  const v1::Verification v = Verify(Pairs(3, 1000, Window(5, 1000, 1.5)), Spec());
  EXPECT_FALSE(v.passed());
  const auto p = Parts(v.detail());
  ASSERT_EQ(p.size(), 3u) << v.detail();
  EXPECT_FALSE(HasFail(p[0])) << v.detail();
  EXPECT_TRUE(HasFail(p[1])) << v.detail();
  EXPECT_NE(p[1].find("1.50"), std::string::npos) << v.detail();
  EXPECT_NE(p[1].find("need <= 1.30"), std::string::npos) << v.detail();
  EXPECT_FALSE(HasFail(p[2])) << v.detail();
}

TEST(VerifyTest, TooFewStepsFailsAndSaysWhere) {
  const v1::Verification v = Verify(Pairs(3, 1000, Window(4, 1000, 1.0)), Spec());
  EXPECT_FALSE(v.passed());
  const auto p = Parts(v.detail());
  ASSERT_EQ(p.size(), 3u) << v.detail();
  EXPECT_FALSE(HasFail(p[0])) << v.detail();
  EXPECT_FALSE(HasFail(p[1])) << v.detail();
  EXPECT_TRUE(HasFail(p[2])) << v.detail();
  EXPECT_NE(p[2].find("4/5 steps"), std::string::npos) << v.detail();
}

TEST(VerifyTest, NoSkewDataNoHealthyThroughputOrNoPairsFails) {
  // A skew of 0 means nothing was measured, not a perfectly balanced job.
  v1::Verification v = Verify(Pairs(3, 1000, Window(5, 1000, 0)), Spec());
  EXPECT_FALSE(v.passed());
  EXPECT_TRUE(HasFail(Parts(v.detail())[1])) << v.detail();

  v = Verify(Pairs(3, 0, Window(5, 1000, 1.0)), Spec());
  EXPECT_FALSE(v.passed());
  EXPECT_DOUBLE_EQ(v.throughput_ratio(), 0);
  EXPECT_TRUE(HasFail(Parts(v.detail())[0])) << v.detail();

  EXPECT_FALSE(Verify({}, Spec()).passed());
}

TEST(VerifyTest, EveryFailureAtOnce) {
  const v1::Verification v = Verify(Pairs(3, 1000, Window(1, 100, 3.0)), Spec());
  EXPECT_FALSE(v.passed());
  for (const auto& part : Parts(v.detail())) EXPECT_TRUE(HasFail(part)) << v.detail();
}

}  // namespace
}  // namespace firedrill::controller

namespace firedrill::controller {
namespace {

TEST(FaultOnset, IsTheStartOfTheFirstStepAtOrPastTheEarliestTrigger) {
  google::protobuf::RepeatedPtrField<v1::ResolvedFault> faults;
  faults.Add()->set_trigger_step(42);
  faults.Add()->set_trigger_step(37);
  v1::StepReport s;
  s.set_start_unix_ns(1'700'000'000'123'456'789);
  s.set_step(36);
  EXPECT_EQ(FaultOnsetUnixMs(faults, s), 0);
  s.set_step(37);
  EXPECT_EQ(FaultOnsetUnixMs(faults, s), 1'700'000'000'123);
  s.set_start_unix_ns(0);  // an agent that does not stamp steps
  EXPECT_EQ(FaultOnsetUnixMs(faults, s), 0);
  EXPECT_EQ(FaultOnsetUnixMs({}, s), 0);
}

}  // namespace
}  // namespace firedrill::controller

// --- Numerics drills: the loss and the skipped steps -------------------------

namespace firedrill::controller {
namespace {

std::vector<std::vector<v1::StepReport>> LossReports(double loss, bool skipped, double bad_loss_at_step5) {
  std::vector<std::vector<v1::StepReport>> per_rank(2);
  for (int r = 0; r < 2; ++r)
    for (int s = 0; s < 10; ++s) {
      v1::StepReport st = Step(r, s, 100, 10);
      st.set_loss(s == 5 && r == 1 ? bad_loss_at_step5 : loss + r);
      st.set_skipped(skipped && s % 2 == 0);
      per_rank[r].push_back(st);
    }
  return per_rank;
}

TEST(MeasureWindowTest, MeanLossAndSkippedShareOverTheWindowOnly) {
  WindowStats w = MeasureWindow(LossReports(2.0, true, 3.0), 2, 6, 64);  // steps 2..7
  // Rank 0: 2.0 x 6; rank 1: 3.0 x 6 (step 5's 3.0 is its own value).
  EXPECT_DOUBLE_EQ(w.mean_loss, 2.5);
  EXPECT_DOUBLE_EQ(w.skipped_fraction, 0.5);  // steps 2, 4, 6 of 2..7
  w = MeasureWindow(LossReports(2.0, false, NAN), 2, 6, 64);
  EXPECT_TRUE(std::isnan(w.mean_loss));  // one NaN step is a NaN window
  EXPECT_DOUBLE_EQ(w.skipped_fraction, 0.0);
}

v1::VerifySpec LossSpec() {
  v1::VerifySpec s = Spec();
  s.set_throughput_vs_baseline_min(0.3);
  s.set_loss_vs_baseline_max(1.10);
  s.set_skipped_steps_max(0.05);
  return s;
}

std::vector<MeasuredPair> LossPairs(double healthy_loss, double fixed_loss, double fixed_skipped) {
  std::vector<MeasuredPair> out;
  for (int i = 0; i < 3; ++i) {
    MeasuredPair p{Window(5, 1000, 1.0), Window(5, 800, 1.0)};
    p.healthy.mean_loss = healthy_loss;
    p.fixed.mean_loss = fixed_loss;
    p.fixed.skipped_fraction = fixed_skipped;
    out.push_back(p);
  }
  return out;
}

// Verification stops once the remaining pairs cannot change the verdict:
// of three, two that agree on every criterion decide it.
TEST(VerdictDecidedTest, TwoOfThreeThatAgreeDecideAndTwoThatDisagreeDoNot) {
  const v1::VerifySpec spec = Spec();
  const MeasuredPair good{Window(5, 1000, 1.0), Window(5, 950, 1.1)};
  const MeasuredPair slow{Window(5, 1000, 1.0), Window(5, 500, 1.1)};
  const MeasuredPair skewed{Window(5, 1000, 1.0), Window(5, 950, 2.0)};
  EXPECT_FALSE(VerdictDecided({good}, 3, spec)) << "one of three decides nothing";
  EXPECT_TRUE(VerdictDecided({good, good}, 3, spec)) << "passed twice: a third cannot fail it";
  EXPECT_TRUE(VerdictDecided({slow, slow}, 3, spec)) << "failed twice";
  EXPECT_FALSE(VerdictDecided({good, slow}, 3, spec)) << "one each: the third decides";
  // Each criterion on its own: one pair too slow and another too skewed
  // fail different criteria, so neither fails by a majority yet.
  EXPECT_FALSE(VerdictDecided({slow, skewed}, 3, spec));
  EXPECT_FALSE(VerdictDecided({slow, skewed, skewed}, 5, spec)) << "two skew fails of five: not yet a majority";
  EXPECT_TRUE(VerdictDecided({skewed, skewed, skewed}, 5, spec));
  // A pair without skew data reads 0, which fails as surely as too much:
  // two passes with one such pair among them decide nothing yet.
  const MeasuredPair unmeasured{Window(5, 1000, 1.0), Window(5, 950, 0.0)};
  EXPECT_FALSE(VerdictDecided({unmeasured, good}, 3, spec)) << "a third at skew 0 would fail it";
  EXPECT_FALSE(Verify({unmeasured, good, unmeasured}, spec).passed());
  EXPECT_FALSE(VerdictDecided({good, good, good}, 4, spec)) << "an even count's median averages two";
  EXPECT_TRUE(VerdictDecided({good, good, good, good}, 4, spec));
  // The verdict on the pairs measured is the one the rest could not change.
  EXPECT_TRUE(Verify({good, good}, spec).passed());
  EXPECT_FALSE(Verify({slow, slow}, spec).passed());
}

TEST(VerdictDecidedTest, TheLossCountsLikeEveryOtherCriterion) {
  const v1::VerifySpec spec = LossSpec();
  std::vector<MeasuredPair> learns = LossPairs(0.80, 0.84, 0.0), flat = LossPairs(0.80, 2.0, 0.0);
  EXPECT_TRUE(VerdictDecided({learns[0], learns[1]}, 3, spec));
  EXPECT_TRUE(VerdictDecided({flat[0], flat[1]}, 3, spec));
  EXPECT_FALSE(VerdictDecided({learns[0], flat[0]}, 3, spec));
  EXPECT_FALSE(Verify({flat[0], flat[1]}, spec).passed());
}

TEST(VerifyLossTest, AFixedJobThatLearnsLikeTheHealthyOnePasses) {
  const v1::Verification v = Verify(LossPairs(0.80, 0.84, 0.0), LossSpec());
  EXPECT_TRUE(v.passed()) << v.detail();
  EXPECT_NEAR(v.loss_ratio(), 1.05, 1e-12);
  EXPECT_DOUBLE_EQ(v.loss_ratio_max(), 1.10);
  EXPECT_NE(v.detail().find("= 1.05x the healthy job's 0.8"), std::string::npos) << v.detail();
  EXPECT_NE(v.detail().find("skipped 0.0% (need <= 5.0%) ok"), std::string::npos) << v.detail();
  EXPECT_EQ(v.pairs(0).fixed_loss(), 0.84);
  EXPECT_EQ(v.pairs(0).healthy_loss(), 0.80);
}

TEST(VerifyLossTest, AFlatLossFailsThoughThroughputIsFine) {
  // Every step skipped: the job runs fast and learns nothing.
  v1::Verification v = Verify(LossPairs(0.80, 2.30, 1.0), LossSpec());
  EXPECT_FALSE(v.passed());
  EXPECT_GT(v.throughput_ratio(), 0.3);
  EXPECT_NE(v.detail().find("need <= 1.10 FAIL"), std::string::npos) << v.detail();
  EXPECT_NE(v.detail().find("skipped 100.0% (need <= 5.0%) FAIL"), std::string::npos) << v.detail();
  // Learning, but skipping too many steps still fails.
  v = Verify(LossPairs(0.80, 0.82, 0.20), LossSpec());
  EXPECT_FALSE(v.passed()) << v.detail();
}

TEST(VerifyLossTest, ANonFiniteLossFailsAndIsNeverARatio) {
  const v1::Verification v = Verify(LossPairs(0.80, NAN, 0.0), LossSpec());
  EXPECT_FALSE(v.passed());
  EXPECT_TRUE(std::isinf(v.loss_ratio()));
  EXPECT_TRUE(std::isinf(LossRatio(Window(5, 1, 1), [] {
    WindowStats w = Window(5, 1, 1);
    w.mean_loss = INFINITY;
    return w;
  }())));
  // A healthy job without a loss gives nothing to compare with: no pass.
  EXPECT_TRUE(std::isinf(LossRatio(Window(5, 1, 1), Window(5, 1, 1))));
}

// Pipeline drills: a loaded machine fills the bubble's idle time with other
// work, so the healthy job slows more than one with the bubble left in, and
// throughput alone passed an unfixed pipeline (launcher-v2 under the
// grading bench's burner: 0.86 against a 0.85 floor). The measured bubble
// is judged beside it.
std::vector<MeasuredPair> BubblePairs(double fixed_ratio, std::vector<double> bubbles) {
  std::vector<MeasuredPair> out;
  for (double b : bubbles) {
    MeasuredPair p{Window(5, 1000, 1.0), Window(5, 1000 * fixed_ratio, 1.0)};
    p.healthy.pp_bubble_fraction = 0.2;
    p.fixed.pp_bubble_fraction = b;
    out.push_back(p);
  }
  return out;
}

TEST(VerifyBubbleTest, AnUnfixedPipelineFailsOnItsBubbleWhateverItsThroughput) {
  v1::VerifySpec spec = Spec();
  spec.set_throughput_vs_baseline_min(0.85);
  spec.set_pp_bubble_max(0.35);
  v1::Verification v = Verify(BubblePairs(0.86, {0.49, 0.51, 0.48}), spec);
  EXPECT_FALSE(v.passed()) << v.detail();
  EXPECT_NEAR(v.pp_bubble(), 0.49, 1e-12);
  EXPECT_DOUBLE_EQ(v.pp_bubble_max(), 0.35);
  EXPECT_NE(v.detail().find(
                "pipeline bubble 0.49 of the pipeline's span (pairs: 0.49, 0.51, 0.48), need <= 0.35 FAIL"),
            std::string::npos)
      << v.detail();
  EXPECT_DOUBLE_EQ(v.pairs(1).fixed_bubble(), 0.51);
  // The median decides: one disturbed pair does not.
  v = Verify(BubblePairs(1.0, {0.22, 0.60, 0.24}), spec);
  EXPECT_TRUE(v.passed()) << v.detail();
  EXPECT_NE(v.detail().find("need <= 0.35 ok"), std::string::npos) << v.detail();
  // And the throughput is still judged.
  EXPECT_FALSE(Verify(BubblePairs(0.70, {0.2, 0.2, 0.2}), spec).passed());
  // Without the ceiling the bubble is not judged (nor shown).
  spec.clear_pp_bubble_max();
  v = Verify(BubblePairs(0.86, {0.49, 0.51, 0.48}), spec);
  EXPECT_TRUE(v.passed()) << v.detail();
  EXPECT_EQ(v.detail().find("bubble"), std::string::npos) << v.detail();
  EXPECT_DOUBLE_EQ(v.pp_bubble_max(), 0);
}

TEST(VerdictDecidedTest, TheBubbleCountsLikeEveryOtherCriterion) {
  v1::VerifySpec spec = Spec();
  spec.set_pp_bubble_max(0.35);
  const auto good = BubblePairs(1.0, {0.2, 0.2}), idle = BubblePairs(1.0, {0.5, 0.5});
  EXPECT_TRUE(VerdictDecided(good, 3, spec));
  EXPECT_TRUE(VerdictDecided(idle, 3, spec));
  EXPECT_FALSE(VerdictDecided({good[0], idle[0]}, 3, spec));
  EXPECT_FALSE(Verify(idle, spec).passed());
}

TEST(VerifyLossTest, DrillsThatDoNotJudgeTheLossAreUnchanged) {
  const v1::Verification v = Verify(LossPairs(0.80, NAN, 1.0), Spec());
  EXPECT_EQ(v.loss_ratio(), 0);
  EXPECT_EQ(v.detail().find("loss"), std::string::npos) << v.detail();
}

// --- History: the whole run for `firedrill metrics` ---------------------------

TEST(HistoryTest, KeepsEveryStepThenThinsEvenlyWhenFull) {
  History h;
  for (int s = 0; s < 8; ++s) {
    v1::StepReport st = Step(0, s, 10, 1);
    st.set_loss(100 - s);
    AppendHistory(st, 8, &h);
  }
  // The 8th row filled it: every other row went, the stride doubled.
  EXPECT_EQ(h.stride, 2);
  ASSERT_EQ(h.rows.size(), 4u);
  EXPECT_EQ(h.rows[1].step(), 2);
  EXPECT_EQ(h.rows[1].loss(), 98);
  for (int s = 8; s < 40; ++s) AppendHistory(Step(0, s, 10, 1), 8, &h);
  EXPECT_LT(h.rows.size(), 8u);
  EXPECT_EQ(h.rows.front().step(), 0);
  for (size_t i = 1; i < h.rows.size(); ++i) EXPECT_EQ(h.rows[i].step() - h.rows[i - 1].step(), h.stride);
  EXPECT_GE(h.rows.back().step() + h.stride, 39);  // it reaches the newest step
}

TEST(HistoryTest, ARowCarriesTheTrainingSignals) {
  v1::StepReport s = Step(1, 7, 12.5, 2);
  s.set_loss(2.3);
  s.set_grad_norm(INFINITY);
  s.set_loss_scale(16777216);
  s.set_skipped(true);
  s.set_skipped_total(8);
  s.set_lr(0.05);
  s.set_samples_per_s(5120);
  s.set_global_batch(256);
  const v1::MetricsRow r = MetricsRowOf(s);
  EXPECT_EQ(r.step(), 7);
  EXPECT_EQ(r.loss(), 2.3);
  EXPECT_TRUE(std::isinf(r.grad_norm()));
  EXPECT_EQ(r.loss_scale(), 16777216);
  EXPECT_TRUE(r.skipped());
  EXPECT_EQ(r.skipped_total(), 8);
  EXPECT_EQ(r.lr(), 0.05);
  EXPECT_EQ(r.samples_per_s(), 5120);
  EXPECT_EQ(r.step_ms(), 12.5);
  EXPECT_EQ(r.global_batch(), 256);
}

}  // namespace
}  // namespace firedrill::controller

namespace firedrill::controller {
namespace {

TEST(MeasureWindowTest, ByTheClockEveryStepCountsWhereTheMedianLeavesAStallOut) {
  // Four ranks, steps 0..19 of 10 ms, every fifth one 110 ms (a checkpoint
  // write): the median step says 10 ms, the clock 30 ms a step.
  std::vector<std::vector<v1::StepReport>> per_rank(4);
  for (int r = 0; r < 4; ++r)
    for (int s = 0; s < 20; ++s) per_rank[r].push_back(Step(r, s, s % 5 == 4 ? 110 : 10, 1));
  const WindowStats w = MeasureWindow(per_rank, 0, 20, 256);
  EXPECT_DOUBLE_EQ(w.throughput_samples_per_s, 256.0 * 1000 / 10);
  EXPECT_DOUBLE_EQ(w.clock_samples_per_s, 256.0 * 1000 * 20 / (16 * 10 + 4 * 110));
  // The slowest rank's window sets it.
  per_rank[2][0].set_step_ms(610);
  EXPECT_DOUBLE_EQ(MeasureWindow(per_rank, 0, 20, 256).clock_samples_per_s, 256.0 * 1000 * 20 / 1200);
}

v1::VerifySpec CadenceSpec() {
  v1::VerifySpec spec;
  spec.set_mtbf_s(600);
  spec.set_goodput_vs_best_min(0.98);
  return spec;
}

TEST(JudgeCadenceTest, WritesTooOftenOrTooRarelyFailAndYoungsIntervalPasses) {
  CadenceInputs in;
  in.step_ms = 15;
  in.write_ms = 80;
  in.writes = 200;
  // Young: sqrt(2 x 0.08 s x 600 s) = 9.80 s = 653 steps; there the job
  // keeps 9.80/9.88 - 9.88/1200 = 98.37% of its time.
  in.every = 10;  // a write of 80 ms every 150 ms of training
  CadenceVerdict v = JudgeCadence(in, CadenceSpec());
  EXPECT_FALSE(v.passed);
  EXPECT_NEAR(v.goodput, 0.15 / 0.23 - 0.23 / 1200, 1e-9);
  const double young = std::sqrt(2 * 0.08 * 600);
  EXPECT_NEAR(v.best, young / (young + 0.08) - (young + 0.08) / 1200, 1e-12);
  EXPECT_NEAR(v.best, 0.9837, 1e-4);
  EXPECT_EQ(v.best_every, 653);
  EXPECT_NE(v.detail.find("about every 653 steps"), std::string::npos) << v.detail;
  EXPECT_NE(v.detail.find("FAIL"), std::string::npos) << v.detail;
  in.every = 653;
  v = JudgeCadence(in, CadenceSpec());
  EXPECT_TRUE(v.passed) << v.detail;
  EXPECT_NEAR(v.goodput, v.best, 1e-4);
  // The curve is flat near the best: a third or three times it is fine...
  for (int every : {220, 1950}) {
    in.every = every;
    EXPECT_TRUE(JudgeCadence(in, CadenceSpec()).passed) << every << ": " << JudgeCadence(in, CadenceSpec()).detail;
  }
  // ...a write every 100 steps (5% of the time) or every 10000 (150 s,
  // half of which a failure every 600 s loses: 12.5%) is not.
  for (int every : {100, 10000}) {
    in.every = every;
    EXPECT_FALSE(JudgeCadence(in, CadenceSpec()).passed) << every << ": " << JudgeCadence(in, CadenceSpec()).detail;
  }
  in.every = 0;
  v = JudgeCadence(in, CadenceSpec());
  EXPECT_FALSE(v.passed);
  EXPECT_NE(v.detail.find("no checkpoints"), std::string::npos) << v.detail;
}

TEST(JudgeCadenceTest, NoMeasuredWriteIsNoVerdictToPass) {
  CadenceInputs in;
  in.step_ms = 15;
  in.every = 650;
  CadenceVerdict v = JudgeCadence(in, CadenceSpec());
  EXPECT_FALSE(v.passed);
  EXPECT_NE(v.detail.find("no checkpoint write of this job could be measured"), std::string::npos) << v.detail;
}

}  // namespace
}  // namespace firedrill::controller
