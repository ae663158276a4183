// The job-key table: every key a fix can name has a class, and the classes
// are the ones the scoring rules rely on.
#include "scenario/job_keys.h"

#include <gtest/gtest.h>

namespace firedrill::scenario {
namespace {

TEST(JobKeys, EveryKeyIsInTheTable) {
  const auto keys = JobSettingKeys();
  ASSERT_GT(keys.size(), 40u);
  for (const auto& k : keys) EXPECT_TRUE(InJobKeyTable(k)) << k << " has no class: add it to controller/job_keys.cc";
}

TEST(JobKeys, TheWorkloadIsWhatIsTrainedAndTheRestIsHowItRuns) {
  for (const char* k : {"world_size", "model.hidden", "model.kind", "data.batch_size", "data.dataset_size",
                        "data.seed", "data.variable_length", "optim.lr", "optim.warmup_steps", "precision",
                        "loss_scale.mode", "grad_accum_steps", "steps"})
    EXPECT_EQ(ClassOfJobKey(k), JobKeyClass::kWorkload) << k;
  for (const char* k : {"data.num_workers", "data.prefetch_depth", "data.sampler", "data.drop_last",
                        "comm.bucket_mb", "comm.timeout_s", "comm.socket_ifname", "comm.transport",
                        "checkpoint.every", "checkpoint.load", "threads_per_rank", "model.activation_checkpointing"})
    EXPECT_EQ(ClassOfJobKey(k), JobKeyClass::kOperational) << k;
  for (const char* k : {"data.sample_latency_ms", "memory.device_budget_mb"})
    EXPECT_EQ(ClassOfJobKey(k), JobKeyClass::kEnvironment) << k;
  EXPECT_EQ(ClassOfJobKey("no.such.key"), JobKeyClass::kEnvironment);
}

TEST(JobKeys, AllowedByKeyOrPrefixOnDotBoundaries) {
  EXPECT_TRUE(KeyAllowed("loss_scale.mode", {"loss_scale"}));
  EXPECT_TRUE(KeyAllowed("precision", {"precision"}));
  EXPECT_FALSE(KeyAllowed("precision", {"prec"}));
  EXPECT_FALSE(KeyAllowed("data.batch_size", {"data.batch"}));
  EXPECT_FALSE(KeyAllowed("data.batch_size", {}));
}

}  // namespace
}  // namespace firedrill::scenario
