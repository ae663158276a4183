// ZeRO stage 1 (agent/zero.h) on real training, ranks as threads over Gloo:
// the optimiser's state is partitioned, the weights are those of the
// replicated optimiser.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "tests/integration/rank_threads.h"

namespace firedrill::agent {
namespace {

using rank_threads::ExpectAllOk;
using rank_threads::RankConfig;
using rank_threads::RankResult;
using rank_threads::RunJob;
using rank_threads::SmallJob;

std::vector<RankResult> RunOverGloo(const v1::JobSpec& job) {
  std::vector<RankConfig> cfg(job.world_size());
  for (auto& c : cfg) c.shared_memory = false;  // as the drills' agents run
  return RunJob(job, cfg);
}

v1::JobSpec Zero(v1::JobSpec job) {
  job.mutable_optim()->set_zero_stage(1);
  return job;
}

TEST(Zero, SgdPartitionedTrainsTheReplicatedWeightsBitwiseOnAQuarterOfTheState) {
  v1::JobSpec job = SmallJob(4);
  job.mutable_model()->set_hidden(130);  // 64x130 + 130 + 130x10 + 10: not a multiple of 4
  job.mutable_optim()->set_weight_decay(1e-4);
  job.set_steps(12);
  const auto replicated = RunOverGloo(job);
  const auto zero = RunOverGloo(Zero(job));
  ExpectAllOk(replicated);
  ExpectAllOk(zero);
  for (int r = 0; r < 4; ++r) {
    ASSERT_EQ(zero[r].params.size(), replicated[r].params.size());
    // memcmp, not ==: NaN payloads and -0.0 count too.
    EXPECT_EQ(std::memcmp(zero[r].params.data(), replicated[r].params.data(),
                          zero[r].params.size() * sizeof(float)),
              0)
        << "rank " << r << ": a partitioned SGD step is elementwise the replicated one";
  }
  // Momentum: 4 bytes a parameter on every rank, replicated; a quarter
  // (rounded up) on each rank, partitioned, with the flat copy of the
  // partition's parameters and gradients its optimiser steps (8 bytes a
  // parameter of the partition). The step count is 8 more.
  const int64_t n = static_cast<int64_t>(replicated[0].params.size());
  EXPECT_EQ(replicated[0].reports.back().mem_optim_bytes(), 4 * n + 8);
  int64_t partitioned = 0;
  for (int r = 0; r < 4; ++r) partitioned += zero[r].reports.back().mem_optim_bytes() - 8;
  EXPECT_EQ(partitioned, 12 * n);
  EXPECT_EQ(zero[0].reports.back().mem_optim_bytes(), 12 * ((n + 3) / 4) + 8);
  // The loss the ranks report is the replicated run's; the gradient norm too,
  // summed in another order (ATen's norm per tensor, not the SGD kernel's
  // blocks).
  EXPECT_EQ(zero[0].reports.back().loss(), replicated[0].reports.back().loss());
  EXPECT_NEAR(zero[0].reports.back().grad_norm(), replicated[0].reports.back().grad_norm(),
              1e-6 * replicated[0].reports.back().grad_norm());
}

TEST(Zero, AdamWPartitionedStaysWithTheReplicatedWeights) {
  v1::JobSpec job = SmallJob(2);
  job.mutable_optim()->set_kind("adamw");
  job.mutable_optim()->set_lr(1e-3);
  job.mutable_optim()->set_weight_decay(0.01);
  job.set_steps(12);
  const auto replicated = RunOverGloo(job);
  const auto zero = RunOverGloo(Zero(job));
  ExpectAllOk(replicated);
  ExpectAllOk(zero);
  double worst = 0;
  for (size_t i = 0; i < zero[0].params.size(); ++i)
    worst = std::max(worst, static_cast<double>(std::abs(zero[0].params[i] - replicated[0].params[i])));
  RecordProperty("adamw_max_abs_diff", std::to_string(worst));
  // ATen's vectorised kernels may round a few elements of a slice
  // differently from the same elements of a whole tensor (a fused
  // multiply-add on one path, not the other): within float rounding.
  EXPECT_LT(worst, 1e-6);
  // Both moments: 8 bytes a parameter, half on each rank, beside the
  // partition's flat parameters and gradients (8 more).
  const int64_t n = static_cast<int64_t>(replicated[0].params.size());
  EXPECT_EQ(zero[0].reports.back().mem_optim_bytes() + zero[1].reports.back().mem_optim_bytes(), 16 * n + 16);
  // Every rank holds the same weights after the all-gather.
  EXPECT_EQ(std::memcmp(zero[0].params.data(), zero[1].params.data(), zero[0].params.size() * sizeof(float)),
            0);
}

TEST(Zero, AWorldOfOneStepsTheWholeModel) {
  v1::JobSpec job = Zero(SmallJob(1));
  job.set_steps(5);
  const auto res = RunOverGloo(job);
  ExpectAllOk(res);
  EXPECT_EQ(res[0].reports.back().mem_optim_bytes(), 12 * static_cast<int64_t>(res[0].params.size()) + 8);
}

}  // namespace
}  // namespace firedrill::agent
