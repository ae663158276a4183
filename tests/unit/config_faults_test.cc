// The faults that come with a bad deploy of the job's settings
// (dataloader_starvation, padding_waste, tiny_buckets): validation, what they
// change in the job, all-ranks targeting, and the loader latency they add.
#include <gtest/gtest.h>

#include <tuple>
#include <utility>
#include <vector>

#include "common/restore_parts.h"
#include "faults/dataloader_starvation.h"
#include "faults/job_setting.h"
#include "faults/rank_crash.h"
#include "faults/registry.h"
#include "faults/runner.h"
#include "faults/targeting.h"

namespace firedrill::faults {
namespace {

v1::FaultSpec Spec(const std::string& kind) {
  v1::FaultSpec f;
  f.set_kind(kind);
  f.mutable_target()->set_all_ranks(true);
  return f;
}

TEST(ConfigFaults, DataLoaderStarvationValidatesAndDeploysTheLoaderSettings) {
  v1::FaultSpec f = Spec("dataloader_starvation");
  const FaultKind* k = FindFaultKind("dataloader_starvation");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->validate(f).message(), "params.sample_latency_ms must be in (0, 1000], got 0.000000");
  f.mutable_dataloader_starvation()->set_sample_latency_ms(0.5);
  f.mutable_dataloader_starvation()->set_num_workers(-1);
  EXPECT_NE(k->validate(f).message().find("params.num_workers"), std::string::npos);
  f.mutable_dataloader_starvation()->set_num_workers(1);
  EXPECT_TRUE(k->validate(f).ok());

  v1::ResolvedFault rf;
  rf.set_kind("dataloader_starvation");
  *rf.mutable_dataloader_starvation() = f.dataloader_starvation();
  v1::JobSpec job;
  job.mutable_data()->set_num_workers(4);
  job.mutable_data()->set_prefetch_depth(8);
  ApplyFaultsToJob({rf}, &job);
  EXPECT_EQ(job.data().num_workers(), 1);
  EXPECT_EQ(job.data().prefetch_depth(), 8) << "0 leaves the job's read-ahead";
}

TEST(ConfigFaults, PaddingWasteAndTinyBucketsChangeOnlyTheirSettings) {
  v1::ResolvedFault pad;
  pad.set_kind("padding_waste");
  pad.mutable_padding_waste()->set_min_seq_len(8);
  v1::ResolvedFault tiny;
  tiny.set_kind("tiny_buckets");
  tiny.mutable_tiny_buckets()->set_bucket_mb(0.02);
  v1::JobSpec job;
  job.set_world_size(4);
  job.mutable_data()->set_sampler("length_bucketed");
  job.mutable_comm()->set_bucket_mb(25);
  v1::JobSpec want = job;
  ApplyFaultsToJob({pad, tiny}, &job);
  EXPECT_TRUE(job.data().variable_length());
  EXPECT_EQ(job.data().sampler(), "random");
  EXPECT_EQ(job.data().min_seq_len(), 8);
  EXPECT_EQ(job.comm().bucket_mb(), 0.02);
  EXPECT_EQ(job.comm().first_bucket_mb(), 0) << "0 = the job's first bucket is left alone";
  // Everything else is untouched.
  want.mutable_data()->set_variable_length(true);
  want.mutable_data()->set_sampler("random");
  want.mutable_data()->set_min_seq_len(8);
  want.mutable_comm()->set_bucket_mb(0.02);
  EXPECT_EQ(job.DebugString(), want.DebugString());

  v1::FaultSpec f = Spec("tiny_buckets");
  f.mutable_tiny_buckets()->set_bucket_mb(5);
  EXPECT_NE(FindFaultKind("tiny_buckets")->validate(f).message().find("params.bucket_mb"), std::string::npos);
  v1::JobSpec untouched = want;
  ApplyFaultsToJob({}, &untouched);
  ApplyFaultsToJob({[] {
                      v1::ResolvedFault s;
                      s.set_kind("straggler");
                      return s;
                    }()},
                   &untouched);
  EXPECT_EQ(untouched.DebugString(), want.DebugString()) << "runtime-only kinds change no settings";
}

TEST(ConfigFaults, Fp16OverflowDeploysFp16WithAStaticScaleAndNothingElse) {
  const FaultKind* k = FindFaultKind("fp16_overflow");
  ASSERT_NE(k, nullptr);
  v1::FaultSpec f = Spec("fp16_overflow");
  f.mutable_fp16_overflow()->set_init_scale(65536);  // GradScaler's own start: not a fault
  EXPECT_NE(k->validate(f).message().find("params.init_scale"), std::string::npos) << k->validate(f).message();
  f.mutable_fp16_overflow()->set_init_scale(1e39);   // beyond fp32
  EXPECT_FALSE(k->validate(f).ok());
  f.mutable_fp16_overflow()->set_init_scale(16777216);
  EXPECT_TRUE(k->validate(f).ok()) << k->validate(f).message();

  v1::ResolvedFault rf;
  rf.set_kind("fp16_overflow");
  *rf.mutable_fp16_overflow() = f.fp16_overflow();
  v1::JobSpec job;
  job.set_world_size(4);
  job.set_precision("fp32");
  job.mutable_loss_scale()->set_growth_interval(100);
  v1::JobSpec want = job;
  ApplyFaultsToJob({rf}, &job);
  want.set_precision("fp16");
  want.mutable_loss_scale()->set_mode("static");
  want.mutable_loss_scale()->set_init_scale(16777216);
  EXPECT_EQ(job.DebugString(), want.DebugString());
}

TEST(ConfigFaults, Fp16OverflowsDynamicVariantDeploysGradScalersDefaults) {
  const FaultKind* k = FindFaultKind("fp16_overflow");
  ASSERT_NE(k, nullptr);
  v1::FaultSpec f = Spec("fp16_overflow");
  f.mutable_fp16_overflow()->set_loss_scale("dynamic");
  EXPECT_TRUE(k->validate(f).ok()) << k->validate(f).message();
  f.mutable_fp16_overflow()->set_init_scale(16777216);
  EXPECT_NE(k->validate(f).message().find("leave it out"), std::string::npos) << k->validate(f).message();
  f.mutable_fp16_overflow()->set_init_scale(0);
  f.mutable_fp16_overflow()->set_loss_scale("sometimes");
  EXPECT_NE(k->validate(f).message().find("params.loss_scale"), std::string::npos)
      << k->validate(f).message();

  v1::ResolvedFault rf;
  rf.set_kind("fp16_overflow");
  rf.mutable_fp16_overflow()->set_loss_scale("dynamic");
  v1::JobSpec job;
  job.set_world_size(4);
  job.set_precision("fp32");
  job.mutable_loss_scale()->set_init_scale(
      1024);  // whatever the job had: the deploy's GradScaler() replaces it
  v1::JobSpec want;
  want.set_world_size(4);
  want.set_precision("fp16");
  want.mutable_loss_scale()->set_mode("dynamic");
  ApplyFaultsToJob({rf}, &job);
  EXPECT_EQ(job.DebugString(), want.DebugString());
}

TEST(ConfigFaults, LrRuleSetsTheRuleTheReferenceAndTheWarmUpAndNothingElse) {
  const FaultKind* k = FindFaultKind("lr_rule");
  ASSERT_NE(k, nullptr);
  v1::FaultSpec f = Spec("lr_rule");
  f.mutable_lr_rule()->set_rule("cubic");
  EXPECT_NE(k->validate(f).message().find("params.rule"), std::string::npos) << k->validate(f).message();
  f.mutable_lr_rule()->set_rule("linear");
  EXPECT_NE(k->validate(f).message().find("params.reference_global_batch"), std::string::npos)
      << "a rule needs the batch the learning rate was tuned at";
  f.mutable_lr_rule()->set_reference_global_batch(8);
  f.mutable_lr_rule()->set_warmup_steps(-1);
  EXPECT_NE(k->validate(f).message().find("params.warmup_steps"), std::string::npos);
  f.mutable_lr_rule()->set_warmup_steps(0);
  EXPECT_TRUE(k->validate(f).ok()) << k->validate(f).message();

  v1::ResolvedFault rf;
  rf.set_kind("lr_rule");
  *rf.mutable_lr_rule() = f.lr_rule();
  v1::JobSpec job;
  job.set_world_size(4);
  job.mutable_optim()->set_kind("adamw");
  job.mutable_optim()->set_lr(0.001);
  job.mutable_optim()->set_lr_scaling("sqrt");
  job.mutable_optim()->set_reference_global_batch(16);
  job.mutable_optim()->set_warmup_steps(20);
  v1::JobSpec want = job;
  ApplyFaultsToJob({rf}, &job);
  want.mutable_optim()->set_lr_scaling("linear");
  want.mutable_optim()->set_reference_global_batch(8);
  want.mutable_optim()->set_warmup_steps(0);
  EXPECT_EQ(job.DebugString(), want.DebugString());
}

TEST(ConfigFaults, GradAccumulationSetsOneLoopSettingPerBugAndNothingElse) {
  const FaultKind* k = FindFaultKind("grad_accumulation");
  ASSERT_NE(k, nullptr);
  v1::FaultSpec f = Spec("grad_accumulation");
  f.mutable_grad_accumulation()->set_bug("no_sync");
  EXPECT_NE(k->validate(f).message().find("params.bug"), std::string::npos) << k->validate(f).message();
  v1::JobSpec job;
  job.set_world_size(4);
  job.set_grad_accum_steps(4);
  job.mutable_comm()->set_accumulation_sync("once");
  job.mutable_optim()->set_kind("sgd");
  for (const std::string bug : {"sync_every_micro_batch", "unscaled_loss"}) {
    f.mutable_grad_accumulation()->set_bug(bug);
    EXPECT_TRUE(k->validate(f).ok()) << k->validate(f).message();
    v1::ResolvedFault rf;
    rf.set_kind("grad_accumulation");
    *rf.mutable_grad_accumulation() = f.grad_accumulation();
    v1::JobSpec got = job, want = job;
    ApplyFaultsToJob({rf}, &got);
    if (bug == "sync_every_micro_batch") {
      want.mutable_comm()->set_accumulation_sync("every_micro_batch");
    } else {
      want.mutable_optim()->set_accumulation_loss("sum");
    }
    EXPECT_EQ(got.DebugString(), want.DebugString()) << bug;
  }
}

TEST(ConfigFaults, StaleAccumulationSetsTheAccumulationStepsAndNothingElse) {
  const FaultKind* k = FindFaultKind("stale_accumulation");
  ASSERT_NE(k, nullptr);
  v1::FaultSpec f = Spec("stale_accumulation");
  EXPECT_NE(k->validate(f).message().find("params.grad_accum_steps is 0"), std::string::npos)
      << k->validate(f).message();
  f.mutable_stale_accumulation()->set_grad_accum_steps(1);
  EXPECT_TRUE(k->validate(f).ok()) << k->validate(f).message();
  f.mutable_trigger()->mutable_step()->set_value(30);
  EXPECT_NE(k->validate(f).message().find("trigger.step must be 0"), std::string::npos);
  f.mutable_trigger()->mutable_step()->set_value(0);
  f.mutable_target()->set_all_ranks(false);
  EXPECT_NE(k->validate(f).message().find("all_ranks"), std::string::npos);
  v1::JobSpec job;
  job.set_world_size(2);
  job.set_grad_accum_steps(2);
  job.mutable_data()->set_batch_size(32);
  job.mutable_optim()->set_kind("sgd");
  job.mutable_optim()->set_lr(0.1);
  v1::ResolvedFault rf;
  rf.set_kind("stale_accumulation");
  rf.mutable_stale_accumulation()->set_grad_accum_steps(1);
  v1::JobSpec got = job, want = job;
  ApplyFaultsToJob({rf}, &got);
  want.set_grad_accum_steps(1);
  EXPECT_EQ(got.DebugString(), want.DebugString());
}

TEST(ConfigFaults, ADeployChangeSetsItsSettingsAndNothingElse) {
  const FaultKind* k = FindFaultKind("deploy_change");
  ASSERT_NE(k, nullptr);
  v1::FaultSpec f = Spec("deploy_change");
  EXPECT_NE(k->validate(f).message().find("params.set is empty"), std::string::npos)
      << k->validate(f).message();
  auto add = [&](const std::string& key, const std::string& value) {
    auto* kv = f.mutable_deploy_change()->add_set();
    kv->set_key(key);
    kv->set_value(value);
  };
  add("data.batch_size", "32");
  add("optim.kind", "adamw");
  add("model.activation_checkpointing", "false");
  EXPECT_TRUE(k->validate(f).ok()) << k->validate(f).message();
  // Each key once, each value one its field takes, a key that exists.
  add("data.batch_size", "16");
  EXPECT_EQ(k->validate(f).message(), "params.set[3].key 'data.batch_size' is set twice");
  f.mutable_deploy_change()->mutable_set(3)->set_key("data.batch");
  EXPECT_NE(k->validate(f).message().find("params.set[3] does not apply: unknown setting 'data.batch'"),
            std::string::npos)
      << k->validate(f).message();
  f.mutable_deploy_change()->mutable_set(3)->set_key("grad_accum_steps");
  f.mutable_deploy_change()->mutable_set(3)->set_value("two");
  EXPECT_EQ(k->validate(f).message(),
            "params.set[3] does not apply: setting 'grad_accum_steps': expected an integer, got 'two'");
  f.mutable_deploy_change()->mutable_set(3)->set_key("model");
  f.mutable_deploy_change()->mutable_set(3)->set_value("x");
  EXPECT_NE(k->validate(f).message().find("a section"), std::string::npos) << k->validate(f).message();
  f.mutable_deploy_change()->mutable_set()->RemoveLast();
  // The whole job's, from its start.
  f.mutable_trigger()->mutable_step()->set_value(30);
  EXPECT_NE(k->validate(f).message().find("trigger.step must be 0"), std::string::npos);
  f.mutable_trigger()->mutable_step()->set_value(0);
  f.mutable_target()->set_all_ranks(false);
  EXPECT_NE(k->validate(f).message().find("all_ranks"), std::string::npos);
  f.mutable_target()->set_all_ranks(true);

  v1::JobSpec job;
  job.set_world_size(4);
  job.mutable_model()->set_kind("gpt-tiny");
  job.mutable_model()->set_activation_checkpointing(true);
  job.mutable_data()->set_batch_size(8);
  job.mutable_optim()->set_kind("sgd");
  v1::ResolvedFault rf;
  rf.set_kind("deploy_change");
  *rf.mutable_deploy_change() = f.deploy_change();
  v1::JobSpec got = job, want = job;
  ApplyFaultsToJob({rf}, &got);
  want.mutable_data()->set_batch_size(32);
  want.mutable_optim()->set_kind("adamw");
  want.mutable_model()->set_activation_checkpointing(false);
  EXPECT_EQ(got.DebugString(), want.DebugString());
}

TEST(ConfigFaults, SettingAJobKeyLeavesTheJobAsItWasWhenItFails) {
  v1::JobSpec job;
  job.mutable_data()->set_batch_size(8);
  const v1::JobSpec before = job;
  EXPECT_TRUE(SetJobKey(&job, "parallel.tp", "2").ok());
  EXPECT_EQ(job.parallel().tp(), 2);
  job = before;
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{{"parallel.nope", "2"},
                                                                                   {"nope.tp", "2"},
                                                                                   {"parallel", "2"},
                                                                                   {"data.batch_size", "8.5"},
                                                                                   {"", "1"}}) {
    EXPECT_FALSE(SetJobKey(&job, key, value).ok()) << key;
    EXPECT_EQ(job.DebugString(), before.DebugString()) << key << ": a failed setting left a change";
  }
}

TEST(ConfigFaults, CheckpointLoadSetsTheLoaderAndNothingElse) {
  const FaultKind* k = FindFaultKind("checkpoint_load");
  ASSERT_NE(k, nullptr);
  v1::FaultSpec f = Spec("checkpoint_load");
  EXPECT_NE(k->validate(f).message().find("params.load must be \"per_rank\""), std::string::npos)
      << k->validate(f).message();
  f.mutable_checkpoint_load()->set_load("resharded");  // loads at any world size: no fault
  EXPECT_FALSE(k->validate(f).ok());
  f.mutable_checkpoint_load()->set_load("per_rank");
  EXPECT_TRUE(k->validate(f).ok()) << k->validate(f).message();
  f.mutable_trigger()->mutable_step()->set_value(30);
  EXPECT_NE(k->validate(f).message().find("trigger.step must be 0"), std::string::npos);
  f.mutable_trigger()->mutable_step()->set_value(0);
  f.mutable_target()->set_all_ranks(false);
  EXPECT_NE(k->validate(f).message().find("all_ranks"), std::string::npos);
  v1::JobSpec job;
  job.set_world_size(4);
  job.mutable_optim()->set_zero_stage(1);
  job.mutable_checkpoint()->set_every(60);
  job.mutable_checkpoint()->set_resume_from("latest");
  v1::ResolvedFault rf;
  rf.set_kind("checkpoint_load");
  rf.mutable_checkpoint_load()->set_load("per_rank");
  v1::JobSpec got = job, want = job;
  ApplyFaultsToJob({rf}, &got);
  want.mutable_checkpoint()->set_load("per_rank");
  EXPECT_EQ(got.DebugString(), want.DebugString());
}

TEST(ConfigFaults, AllRanksTargetReachesEveryRankOnEveryHost) {
  v1::Scenario s;
  s.mutable_job()->set_world_size(3);
  v1::FaultSpec* f = s.add_faults();
  *f = Spec("dataloader_starvation");
  f->mutable_trigger()->mutable_step()->set_value(5);
  f->mutable_dataloader_starvation()->set_sample_latency_ms(0.3);
  auto faults = ResolveFaults(s, 1, {"h0", "h1", "h2"});
  ASSERT_TRUE(faults.ok()) << faults.status().message();
  ASSERT_EQ(faults->size(), 1u);
  EXPECT_TRUE((*faults)[0].all_ranks());
  EXPECT_EQ((*faults)[0].rank(), -1);
  EXPECT_TRUE((*faults)[0].host().empty());
  for (int r = 0; r < 3; ++r) EXPECT_EQ(FaultsFor(*faults, r, "fresh-host-" + std::to_string(r)).size(), 1u);
  v1::RankRef ref;
  ref.set_ref("$faults.0.target.rank");
  EXPECT_FALSE(ResolveRankRef(ref, *faults).ok()) << "an all-ranks fault has no culprit rank";

  auto runner = FaultRunner::Create(*faults);
  ASSERT_TRUE(runner.ok());
  StorageLatency storage;
  Seams seams;
  seams.data = &storage;
  ASSERT_TRUE((*runner)->At(4, seams).ok());
  EXPECT_EQ(storage.extra_ms(), 0) << "before the trigger";
  ASSERT_TRUE((*runner)->At(5, seams).ok());
  EXPECT_EQ(storage.extra_ms(), 0.3);
}

TEST(ConfigFaults, CommMisconfigOverridesTheInterfaceOnItsHostOnly) {
  v1::ResolvedFault f;
  f.set_kind("comm_misconfig");
  f.set_host("node-2");
  f.mutable_comm_misconfig()->set_socket_ifname("ib0");
  for (const auto& [rank, host, want] :
       std::vector<std::tuple<int, std::string, std::string>>{{2, "node-2", "ib0"}, {1, "node-1", ""}}) {
    auto runner = FaultRunner::Create(FaultsFor({f}, rank, host));
    ASSERT_TRUE(runner.ok());
    FaultEnvironment env;
    Seams seams;
    seams.environment = &env;
    ASSERT_TRUE((*runner)->At(0, seams).ok());
    EXPECT_EQ(env.Get("GLOO_SOCKET_IFNAME").value_or(""), want) << host;
  }
  v1::FaultSpec spec;
  spec.set_kind("comm_misconfig");
  spec.mutable_comm_misconfig()->set_socket_ifname("");
  EXPECT_FALSE(FindFaultKind("comm_misconfig")->validate(spec).ok());
  EXPECT_EQ(CauseClass("comm-misconfig"), "communication");
}

TEST(CauseClass, GroupsTheTaxonomy) {
  for (const auto& c : KnownCauses()) {
    if (c != "no-fault") EXPECT_FALSE(CauseClass(c).empty()) << c;
  }
  EXPECT_EQ(CauseClass("no-fault"), "") << "nothing wrong is no kind of problem";
  EXPECT_EQ(CauseClass("data-loader-starvation"), CauseClass("padding-waste"));
  EXPECT_EQ(CauseClass("small-buckets"), CauseClass("slow-link"));
  EXPECT_NE(CauseClass("straggler"), CauseClass("slow-link"));
  EXPECT_EQ(CauseClass("gremlin"), "");
}

}  // namespace
}  // namespace firedrill::faults

namespace firedrill::faults {
namespace {

TEST(ConfigFaults, RestorePartsParseAndSpellOneWay) {
  auto all = ParseRestoreParts("");
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(all->All());
  EXPECT_EQ(all->ToString(), "all");
  auto same = ParseRestoreParts(" model, optim ,rng,data");
  ASSERT_TRUE(same.ok()) << same.status().message();
  EXPECT_EQ(same->ToString(), "all") << "every part is all: one spelling";
  auto weights = ParseRestoreParts("model");
  ASSERT_TRUE(weights.ok());
  EXPECT_EQ(weights->ToString(), "model");
  EXPECT_EQ(weights->Missing(), "optimiser state and loss scale, RNG, data position");
  auto two = ParseRestoreParts("data,model,optim");
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->ToString(), "model,optim,data");
  EXPECT_EQ(two->Missing(), "RNG");
  EXPECT_EQ(ParseRestoreParts("model,momentum").status().message(),
            "\"momentum\" is not a part of a checkpoint: use \"all\" or a comma-separated list of model, optim, rng, data");
  EXPECT_NE(ParseRestoreParts("optim,rng").status().message().find("leaves out model"), std::string::npos);
}

TEST(ConfigFaults, ResumeWithoutStateDeploysTheRestoreSettingAndRankCrashIsAnEvent) {
  v1::FaultSpec f = Spec("resume_without_state");
  const FaultKind* k = FindFaultKind("resume_without_state");
  ASSERT_NE(k, nullptr);
  f.mutable_resume_without_state()->set_restore("all");
  EXPECT_NE(k->validate(f).message().find("restores everything"), std::string::npos);
  f.mutable_resume_without_state()->set_restore("weights");
  EXPECT_NE(k->validate(f).message().find("params.restore: \"weights\" is not a part"), std::string::npos);
  f.mutable_resume_without_state()->set_restore("model,optim");
  EXPECT_TRUE(k->validate(f).ok());
  v1::ResolvedFault rf;
  rf.set_kind("resume_without_state");
  *rf.mutable_resume_without_state() = f.resume_without_state();
  v1::JobSpec job;
  job.mutable_checkpoint()->set_every(50);
  ApplyFaultsToJob({rf}, &job);
  EXPECT_EQ(job.checkpoint().restore(), "model,optim");
  EXPECT_EQ(job.checkpoint().every(), 50);

  const FaultKind* crash = FindFaultKind("rank_crash");
  ASSERT_NE(crash, nullptr);
  v1::FaultSpec c;
  c.set_kind("rank_crash");
  c.mutable_trigger()->mutable_step()->set_value(0);
  EXPECT_NE(crash->validate(c).message().find("trigger.step must be >= 1"), std::string::npos);
  c.mutable_trigger()->mutable_step()->set_value(300);
  EXPECT_TRUE(crash->validate(c).ok()) << "no params: a power loss";
  c.mutable_rank_crash()->set_event("meteor");
  EXPECT_NE(crash->validate(c).message().find("params.event must be"), std::string::npos);
  EXPECT_EQ(RankCrashReason(v1::RankCrashParams()), "the host went down (power loss)");
}

}  // namespace
}  // namespace firedrill::faults
