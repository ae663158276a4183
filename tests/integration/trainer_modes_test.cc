// The trainer's modes end to end, ranks as threads: gpt-tiny on the shipped
// corpus (tokens/s, padding), fp16 with GradScaler-style loss scaling (every
// rank skips the same steps), bf16 compute, measured memory, the simulated
// device budget, and checkpoints written during training.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "agent/checkpoint.h"
#include "agent/memory.h"
#include "faults/registry.h"
#include "tests/integration/rank_threads.h"

namespace firedrill::agent {
namespace {

using rank_threads::ExpectAllOk;
using rank_threads::RankResult;
using rank_threads::RunJob;
using rank_threads::SmallJob;

namespace fs = std::filesystem;

v1::JobSpec GptJob(int world) {
  v1::JobSpec job = SmallJob(world);
  auto* m = job.mutable_model();
  m->Clear();
  m->set_kind("gpt-tiny");
  m->set_hidden(32);
  m->set_layers(2);
  m->set_heads(2);
  m->set_seq_len(32);
  job.mutable_data()->set_batch_size(8);
  job.mutable_data()->set_variable_length(true);
  job.mutable_optim()->Clear();
  job.mutable_optim()->set_kind("adamw");
  job.mutable_optim()->set_lr(3e-3);
  return job;
}

TEST(TrainerModes, GptTinyLearnsTheCorpusAndReportsTokensAndPadding) {
  auto job = GptJob(2);
  job.set_steps(60);
  auto res = RunJob(job, {});
  ExpectAllOk(res);
  const auto& reps = res[0].reports;
  ASSERT_EQ(reps.size(), 60u);
  double first = 0, last = 0, pad = 0;
  for (int i = 0; i < 5; ++i) first += reps[i].loss() / 5;
  for (size_t i = reps.size() - 5; i < reps.size(); ++i) last += reps[i].loss() / 5;
  for (const auto& r : reps) {
    EXPECT_GT(r.tokens_per_s(), 0);
    pad += r.padding_fraction() / reps.size();
  }
  // ln(256) = 5.55 at init; byte-level text is far more predictable.
  EXPECT_GT(first, 5.0);
  EXPECT_LT(last, first - 1.0) << "loss must visibly fall";
  EXPECT_GT(pad, 0.1) << "variable lengths padded to the batch maximum";
  EXPECT_LT(pad, 0.9);
  EXPECT_EQ(res[0].params, res[1].params);
}

TEST(TrainerModes, Fp16DynamicScalingSkipsTheSameStepsOnEveryRank) {
  auto job = SmallJob(2);
  job.set_precision("fp16");
  job.mutable_loss_scale()->set_mode("dynamic");
  job.mutable_loss_scale()->set_init_scale(std::ldexp(1.0, 40));  // overflows half at once
  job.mutable_loss_scale()->set_growth_interval(4);
  job.set_steps(40);
  auto res = RunJob(job, {});
  ExpectAllOk(res);
  const auto& a = res[0].reports;
  const auto& b = res[1].reports;
  ASSERT_EQ(a.size(), 40u);
  ASSERT_EQ(b.size(), 40u);
  EXPECT_TRUE(a[0].skipped());
  EXPECT_EQ(a[0].loss_scale(), std::ldexp(1.0, 39)) << "backoff x0.5 after the overflow";
  int skipped = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].skipped(), b[i].skipped()) << "step " << i;
    EXPECT_EQ(a[i].loss_scale(), b[i].loss_scale()) << "step " << i;
    skipped += a[i].skipped();
    if (i > 0 && !a[i].skipped() && !a[i - 1].skipped() && a[i].loss_scale() > a[i - 1].loss_scale()) {
      EXPECT_EQ(a[i].loss_scale(), 2 * a[i - 1].loss_scale()) << "growth x2";
    }
  }
  EXPECT_EQ(a.back().skipped_total(), skipped);
  EXPECT_LT(skipped, 40) << "the scale must come down to where fp16 gradients fit";
  EXPECT_LT(a.back().loss_scale(), std::ldexp(1.0, 40));
  EXPECT_TRUE(std::isfinite(a.back().loss()));
  EXPECT_EQ(res[0].params, res[1].params);
  for (float p : res[0].params) ASSERT_TRUE(std::isfinite(p)) << "a skipped step never reaches the weights";
}

TEST(TrainerModes, StaticLossScaleSkipsEveryOverflowingStep) {
  // A static scale of 2^60 overflows half in every backward: each step is
  // skipped and counted, and the scale stays where it was put.
  auto job = SmallJob(1);
  job.set_precision("fp16");
  job.mutable_loss_scale()->set_mode("static");
  job.mutable_loss_scale()->set_init_scale(std::ldexp(1.0, 60));
  job.set_steps(3);
  auto res = RunJob(job, {});
  ExpectAllOk(res);
  for (const auto& r : res[0].reports) EXPECT_TRUE(r.skipped());
  EXPECT_EQ(res[0].reports.back().skipped_total(), 3);
  EXPECT_EQ(res[0].reports.back().loss_scale(), std::ldexp(1.0, 60)) << "a static scale never moves";
}

TEST(TrainerModes, Bf16TrainsCloseToButNotEqualToFp32) {
  auto job = SmallJob(2);
  job.set_steps(30);
  auto fp32 = RunJob(job, {});
  job.set_precision("bf16");
  auto bf16 = RunJob(job, {});
  ExpectAllOk(fp32);
  ExpectAllOk(bf16);
  EXPECT_NE(fp32[0].params, bf16[0].params) << "bf16 must really round";
  EXPECT_EQ(bf16[0].params, bf16[1].params);
  const double l32 = fp32[0].reports.back().loss(), l16 = bf16[0].reports.back().loss();
  EXPECT_LT(l16, bf16[0].reports.front().loss()) << "bf16 still learns";
  EXPECT_NEAR(l16, l32, 0.2 * l32);
  EXPECT_EQ(bf16[0].reports.back().loss_scale(), 0) << "bf16 needs no loss scaling";
}

TEST(TrainerModes, MemoryIsMeasuredPerStep) {
  auto job = SmallJob(1);  // one rank: the tracker counts the whole process
  job.set_steps(3);
  auto res = RunJob(job, {});
  ExpectAllOk(res);
  // mlp 64 -> 128 -> 128 -> 10, fp32.
  const int64_t params = (64 * 128 + 128 + 128 * 128 + 128 + 128 * 10 + 10) * 4;
  const auto& r = res[0].reports.back();
  EXPECT_EQ(r.mem_params_bytes(), params);
  EXPECT_GE(r.mem_grads_bytes(), params) << "bucket storage holds every gradient";
  EXPECT_GE(r.mem_optim_bytes(), params) << "one momentum buffer per parameter";
  EXPECT_LE(r.mem_optim_bytes(), params + 64) << "and no more than a step counter";
  EXPECT_GT(r.mem_activation_peak_bytes(), 32 * 128 * 4) << "at least one hidden activation of the batch";
  EXPECT_GE(r.mem_peak_bytes(), r.mem_activation_peak_bytes());
}

TEST(TrainerModes, DeviceBudgetOverflowIsACudaStyleOutOfMemoryError) {
  auto job = SmallJob(1);
  job.mutable_model()->set_hidden(1024);
  job.mutable_data()->set_batch_size(256);
  // Parameters and gradient buckets (~8.8 MiB) fit; adding the activations
  // of a 256-row batch (the step peaks at ~11.5 MiB) does not.
  job.mutable_memory()->set_device_budget_mb(10);
  job.set_steps(2);
  auto res = RunJob(job, {});
  SetBudget(0);  // process-global: later tests in this binary run unlimited
  ASSERT_FALSE(res[0].status.ok());
  EXPECT_EQ(res[0].status.code(), StatusCode::kResourceExhausted);
  const std::string& msg = res[0].status.message();
  EXPECT_NE(msg.find("rank 0 step 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("CUDA out of memory. Tried to allocate"), std::string::npos) << msg;
  EXPECT_NE(msg.find("10.00 MiB total capacity"), std::string::npos) << msg;
}

// device_memory's signature against the same job without the fault: the
// same GPT job that peaks above the new devices' memory fails its first
// step there with the allocator's error; recomputing each block's
// activations in backward brings its peak under it, and it trains the same.
TEST(TrainerModes, ActivationCheckpointingFitsAJobTheNewDevicesCannotHold) {
  auto job = GptJob(1);  // one rank: the tracker counts the whole process
  job.mutable_model()->set_layers(4);
  job.mutable_model()->set_seq_len(256);
  job.set_steps(3);
  auto whole = RunJob(job, {});
  ExpectAllOk(whole);
  const int64_t peak = whole[0].reports.back().mem_peak_bytes();
  const double budget_mb = 0.6 * static_cast<double>(peak) / (1 << 20);
  v1::ResolvedFault f;
  f.set_kind("device_memory");
  f.set_all_ranks(true);
  f.mutable_device_memory()->set_budget_mb(budget_mb);
  v1::JobSpec sliced = job;
  faults::ApplyFaultsToJob({f}, &sliced);
  EXPECT_EQ(sliced.memory().device_budget_mb(), budget_mb);
  auto oom = RunJob(sliced, {});
  SetBudget(0);
  ASSERT_FALSE(oom[0].status.ok());
  EXPECT_NE(oom[0].status.message().find("CUDA out of memory. Tried to allocate"), std::string::npos)
      << oom[0].status.message();
  sliced.mutable_model()->set_activation_checkpointing(true);
  auto recomputed = RunJob(sliced, {});
  SetBudget(0);
  ExpectAllOk(recomputed);
  EXPECT_LT(recomputed[0].reports.back().mem_peak_bytes(), 0.6 * peak);
  EXPECT_EQ(recomputed[0].params, whole[0].params) << "the same maths: only when activations exist differs";
}

TEST(TrainerModes, CheckpointsAreWrittenVerifiedAndPruned) {
  const fs::path dir = fs::temp_directory_path() / ("fd-ckpt-modes-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  auto job = SmallJob(2);
  job.set_steps(12);
  job.mutable_checkpoint()->set_every(4);
  job.mutable_checkpoint()->set_keep(2);
  job.mutable_checkpoint()->set_dir(dir.string());
  auto res = RunJob(job, {});
  ExpectAllOk(res);
  auto list = ListCheckpoints(dir.string());
  ASSERT_TRUE(list.ok()) << list.status().message();
  ASSERT_EQ(list->size(), 2u) << "keep 2: step-4 pruned";
  EXPECT_EQ((*list)[0].step, 12);
  EXPECT_EQ((*list)[1].step, 8);
  for (const auto& c : *list) EXPECT_TRUE(c.valid) << c.dir << ": " << c.error;
  for (const auto& r : res[0].reports) {
    if ((r.step() + 1) % 4 == 0) {
      EXPECT_GT(r.checkpoint_ms(), 0) << "step " << r.step();
    } else {
      EXPECT_EQ(r.checkpoint_ms(), 0) << "step " << r.step();
    }
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace firedrill::agent
