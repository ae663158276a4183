#include "scenario/loader.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace firedrill::scenario {
namespace {

const std::string kShipped = std::string(FIREDRILL_SOURCE_DIR) + "/scenarios/throughput-halved.yaml";

// A small valid scenario; tests break one line of it at a time, so expected
// line numbers below refer to this text.
const char* kGood = R"(id: t
title: T
briefing: B
job:
  world_size: 4
  model: {kind: mlp, input_dim: 8, hidden: 16, layers: 2, num_classes: 3}
  data: {batch_size: 8, num_workers: 0}
  optim: {kind: sgd, lr: 0.1, momentum: 0.9}
  precision: fp32
  steps: 100
  comm: {backend: gloo, bucket_mb: 25, timeout_s: 30}
faults:
  - kind: straggler
    target: {host_of_rank: {draw: [0, 3]}}
    trigger: {step: {draw: [10, 20]}}
    params: {slowdown: 2.0}
answer:
  cause: straggler
  culprit_ranks: [$faults.0.target.rank]
remediations:
  - actions: [{replace_host: $faults.0.target.rank}]
verify: {warmup_steps: 2, window_steps: 10, throughput_vs_baseline_min: 0.85, rank_step_skew_max: 1.2}
rubric: {cause: 40, culprit: 20, fix: 30, time: 10, time_budget_s: 600, hint_cost: 5}
)";

// kGood with the first occurrence of `from` replaced by `to`.
std::string With(const std::string& from, const std::string& to) {
  std::string s = kGood;
  const auto at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return s.replace(at, from.size(), to);
}

std::string ErrorOf(const std::string& yaml) {
  auto s = ParseScenario(yaml, "t.yaml");
  EXPECT_FALSE(s.ok());
  return s.ok() ? "" : s.status().message();
}

TEST(ScenarioLoader, ShippedStragglerScenarioLoads) {
  auto s = LoadScenarioFile(kShipped);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->id(), "throughput-halved");
  EXPECT_EQ(s->source_file(), kShipped);
  EXPECT_EQ(s->job().world_size(), 4);
  EXPECT_EQ(s->job().model().hidden(), 512);
  EXPECT_EQ(s->job().comm().backend(), "gloo");
  ASSERT_EQ(s->faults_size(), 1);
  const auto& f = s->faults(0);
  EXPECT_EQ(f.kind(), "straggler");
  EXPECT_GT(f.straggler().slowdown(), 1.0);  // the value is tuning, not contract
  EXPECT_EQ(f.target().host_of_rank().draw().lo(), 0);
  EXPECT_EQ(f.target().host_of_rank().draw().hi(), 3);
  EXPECT_EQ(f.trigger().step().draw().lo(), 30);
  EXPECT_EQ(f.trigger().step().draw().hi(), 60);
  ASSERT_EQ(s->answer().culprit_ranks_size(), 1);
  EXPECT_EQ(s->answer().culprit_ranks(0).ref(), "$faults.0.target.rank");
  EXPECT_EQ(s->remediations(0).actions(0).replace_host().ref(), "$faults.0.target.rank");
  EXPECT_GE(s->hints_size(), 2);
  EXPECT_TRUE(std::filesystem::exists(std::string(FIREDRILL_SOURCE_DIR) + "/" + s->runbook()));
  EXPECT_TRUE(ValidateScenario(*s, "x").ok());
}

TEST(ScenarioLoader, ShippedDirectoryLoads) {
  auto all = LoadScenarioDir(std::string(FIREDRILL_SOURCE_DIR) + "/scenarios");
  ASSERT_TRUE(all.ok()) << all.status().message();
  ASSERT_FALSE(all->empty());
  for (std::size_t i = 1; i < all->size(); ++i) EXPECT_LT((*all)[i - 1].id(), (*all)[i].id());
}

TEST(ScenarioLoader, GoodTextParsesWithScalarsAndLiterals) {
  auto s = ParseScenario(With("culprit_ranks: [$faults.0.target.rank]", "culprit_ranks: [2]"), "t.yaml");
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->answer().culprit_ranks(0).rank(), 2);
  EXPECT_EQ(s->source_file(), "t.yaml");
  auto v = ParseScenario(With("{step: {draw: [10, 20]}}", "{step: 15}"), "t.yaml");
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_EQ(v->faults(0).trigger().step().value(), 15);
  // `params` may come before the `kind` that routes it.
  const std::string old_params = "    params: {slowdown: 2.0}\n";
  std::string text = With("  - kind: straggler\n", "  - params: {slowdown: 4}\n    kind: straggler\n");
  text.erase(text.find(old_params), old_params.size());
  auto p = ParseScenario(text, "t.yaml");
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_DOUBLE_EQ(p->faults(0).straggler().slowdown(), 4.0);
}

TEST(ScenarioLoader, UnknownKeyListsKnownKeysAtItsLine) {
  // The key list follows the proto; pin its start, not every field.
  EXPECT_EQ(ErrorOf(With("  precision: fp32", "  precison: fp32"))
                .rfind("t.yaml:9:3: job: unknown key 'precison'; known keys: world_size, model, data, optim, "
                       "precision, steps, ",
                       0),
            0u);
  EXPECT_EQ(ErrorOf(With("id: t", "id: t\nsource_file: x")),
            "t.yaml:2:1: 'source_file' is set by the loader, not in the file");
}

TEST(ScenarioLoader, WrongTypeNamesPathAndPosition) {
  EXPECT_EQ(ErrorOf(With("hidden: 16", "hidden: abc")),
            "t.yaml:6:44: job.model.hidden: expected an integer, got 'abc'");
  EXPECT_EQ(ErrorOf(With("lr: 0.1", "lr: fast")), "t.yaml:8:26: job.optim.lr: expected a number, got 'fast'");
  EXPECT_EQ(ErrorOf(With("steps: 100", "steps: 10x")),
            "t.yaml:10:10: job.steps: expected an integer, got '10x'");
  EXPECT_EQ(ErrorOf(With("  world_size: 4", "  world_size: [4]")),
            "t.yaml:5:15: job.world_size: expected an integer, got a sequence");
  EXPECT_EQ(ErrorOf(With("briefing: B", "briefing: B\nskills: abc")),
            "t.yaml:4:9: skills: expected a sequence ([a, b] or - items), got 'abc'");
  EXPECT_EQ(ErrorOf(With("  comm: {backend: gloo, bucket_mb: 25, timeout_s: 30}", "  comm: gloo")),
            "t.yaml:11:9: job.comm: expected a mapping (key: value), got 'gloo'");
  EXPECT_EQ(ErrorOf(With("{step: {draw: [10, 20]}}", "{step: {draw: [10, x]}}")),
            "t.yaml:15:33: faults[0].trigger.step.draw[1]: expected an integer, got 'x'");
}

TEST(ScenarioLoader, BadDraw) {
  EXPECT_EQ(ErrorOf(With("draw: [10, 20]", "draw: [20, 10]")),
            "t.yaml:15:28: faults[0].trigger.step.draw: lo (20) must be <= hi (10)");
  EXPECT_EQ(ErrorOf(With("draw: [10, 20]", "draw: [10, 20, 30]")),
            "t.yaml:15:28: faults[0].trigger.step.draw: expected [lo, hi] with exactly two integers, got 3 "
            "item(s)");
  EXPECT_EQ(ErrorOf(With("draw: [0, 3]", "draw: [0, 4]")),
            "t.yaml:14:39: faults[0].target.host_of_rank.draw[1]: must be in 0..3, got 4");
  EXPECT_EQ(ErrorOf(With("{step: {draw: [10, 20]}}", "{step: {pick: [10, 20]}}")),
            "t.yaml:15:22: faults[0].trigger.step: unknown key 'pick'; known keys: draw");
}

TEST(ScenarioLoader, FaultWindowsAndFlapping) {
  const std::string from = "{step: {draw: [10, 20]}}";
  auto ok = ParseScenario(With(from, "{step: {draw: [10, 20]}, until_step: 40, flap_on_steps: 3, flap_off_steps: 2}"),
                          "t.yaml");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->faults(0).trigger().until_step().value(), 40);
  EXPECT_EQ(ok->faults(0).trigger().flap_on_steps(), 3);
  const auto npos = std::string::npos;
  EXPECT_NE(ErrorOf(With(from, "{step: {draw: [10, 20]}, until_step: 15}"))
                .find("faults[0].trigger.until_step: must come after trigger.step (every draw of it), got 15 <= 20"),
            npos);
  EXPECT_NE(ErrorOf(With(from, "{step: {draw: [10, 20]}, until_step: 101}")).find("faults[0].trigger.until_step"),
            npos);
  EXPECT_NE(ErrorOf(With(from, "{step: 10, flap_on_steps: 3}"))
                .find("faults[0].trigger: flap_on_steps and flap_off_steps go together, both > 0"),
            npos);
  // A config overlay holds for the whole run.
  auto sc = LoadScenarioFile(FIREDRILL_SOURCE_DIR "/scenarios/ddp-memory-tuning.yaml");
  ASSERT_TRUE(sc.ok()) << sc.status().message();
  ASSERT_EQ(sc->faults(0).kind(), "tiny_buckets");
  sc->mutable_faults(0)->mutable_trigger()->mutable_until_step()->set_value(50);
  EXPECT_NE(ValidateScenario(*sc, "x").message().find("acts through the deployed configuration"), npos);
  // The environment is read when the process group is built: from step 0.
  auto env = LoadScenarioFile(FIREDRILL_SOURCE_DIR "/scenarios/new-node-image.yaml");
  ASSERT_TRUE(env.ok()) << env.status().message();
  ASSERT_EQ(env->faults(0).kind(), "comm_misconfig");
  env->mutable_faults(0)->mutable_trigger()->mutable_step()->set_value(5);
  EXPECT_NE(ValidateScenario(*env, "x").message().find("trigger.step must be 0"), npos);
}

TEST(ScenarioLoader, UnknownFaultKindListsKnownKinds) {
  EXPECT_EQ(ErrorOf(With("kind: straggler", "kind: gremlin")),
            "t.yaml:13:11: faults[0].kind: unknown fault kind 'gremlin'; known kinds: straggler, "
            "dataloader_starvation, padding_waste, "
            "tiny_buckets, collective_desync, fp16_overflow, lr_rule, grad_accumulation, device_memory, "
            "resume_without_state, checkpoint_cadence, stale_accumulation, checkpoint_load, deploy_change, "
            "comm_misconfig, "
            "silent_divergence, corrupt_checkpoint, rank_crash, slow_link");
  std::string no_params = With("    params: {slowdown: 2.0}\n", "");
  EXPECT_EQ(ErrorOf(no_params.replace(no_params.find("kind: straggler"), 15, "kind: gremlin")),
            "t.yaml:13:11: faults[0].kind: unknown fault kind 'gremlin'; known kinds: straggler, "
            "dataloader_starvation, padding_waste, "
            "tiny_buckets, collective_desync, fp16_overflow, lr_rule, grad_accumulation, device_memory, "
            "resume_without_state, checkpoint_cadence, stale_accumulation, checkpoint_load, deploy_change, "
            "comm_misconfig, "
            "silent_divergence, corrupt_checkpoint, rank_crash, slow_link");
}

// kGood as a silent-divergence drill: `verify` and `checkpoint` as given.
std::string Divergence(const std::string& verify, const std::string& checkpoint) {
  std::string sd = With("slowdown: 2.0", "bit: 3");
  sd.replace(sd.find("kind: straggler"), 15, "kind: silent_divergence");
  sd.replace(sd.find("verify: {"), 9, "verify: {" + verify);
  sd.replace(sd.find("  comm:"), 0, checkpoint);
  return sd;
}

TEST(ScenarioLoader, AFaultVerificationCannotMeasureIsRefused) {
  const std::string ck = "  checkpoint: {dir: /tmp/x, every: 5}\n";
  EXPECT_NE(ErrorOf(Divergence("", ck)).find("faults[0].kind: silent_divergence needs verify.params_vs_reference: true"),
            std::string::npos)
      << ErrorOf(Divergence("", ck));
  EXPECT_NE(ErrorOf(Divergence("params_vs_reference: true, ", "")).find("needs job.checkpoint.every > 0"),
            std::string::npos);
  // Pruned to the newest 3 with nothing kept for good: the checkpoints from
  // before the flip are gone by the time anyone looks.
  EXPECT_NE(ErrorOf(Divergence("params_vs_reference: true, ", "  checkpoint: {dir: /tmp/x, every: 5, keep: 3}\n"))
                .find("faults[0].trigger.step: can be 10, before the first checkpoint kept for good"),
            std::string::npos);
  EXPECT_TRUE(ParseScenario(Divergence("params_vs_reference: true, ",
                                       "  checkpoint: {dir: /tmp/x, every: 5, keep: 3, keep_period: 10}\n"),
                            "t.yaml")
                  .ok());
  const std::string ok = Divergence("params_vs_reference: true, ", ck);
  auto parsed = ParseScenario(ok, "t.yaml");
  EXPECT_TRUE(parsed.ok()) << parsed.status().message();
}

// kGood as a corrupt-checkpoint drill, `job_extra` added to its job.
std::string Corrupt(const std::string& job_extra, int checkpoints) {
  std::string sd = With("slowdown: 2.0", "damage: bit_rot, checkpoints: " + std::to_string(checkpoints));
  sd.replace(sd.find("kind: straggler"), 15, "kind: corrupt_checkpoint");
  sd.replace(sd.find("  comm:"), 0, job_extra);
  return sd;
}

TEST(ScenarioLoader, ACorruptCheckpointNeedsARestartToShowAndAGoodOneLeft) {
  const std::string restarts = "  elastic: {max_restarts: 2}\n";
  EXPECT_NE(ErrorOf(Corrupt("", 1)).find("needs job.checkpoint.every > 0"), std::string::npos) << ErrorOf(Corrupt("", 1));
  EXPECT_NE(ErrorOf(Corrupt("  checkpoint: {dir: /tmp/x, every: 4}\n" + restarts, 1)).find("resume_from: latest"),
            std::string::npos);
  EXPECT_NE(ErrorOf(Corrupt("  checkpoint: {dir: /tmp/x, every: 4, resume_from: latest}\n", 1)).find("max_restarts"),
            std::string::npos);
  EXPECT_NE(ErrorOf(Corrupt("  checkpoint: {dir: /tmp/x, every: 4, keep: 2, resume_from: latest}\n" + restarts, 2))
                .find("faults[0].params.checkpoints: damages 2 checkpoints but checkpoint.keep is 2"),
            std::string::npos);
  EXPECT_NE(ErrorOf(Corrupt("  checkpoint: {dir: /tmp/x, every: 5, resume_from: latest}\n" + restarts, 1))
                .find("faults[0].trigger.step: can be 10"),
            std::string::npos);
  EXPECT_NE(ErrorOf(Corrupt("  checkpoint: {dir: /tmp/x, every: 4, resume_from: latest}\n  elastic: {max_restarts: 11}\n", 1))
                .find("elastic.max_restarts: must be at most 10"),
            std::string::npos);
  const auto ok =
      ParseScenario(Corrupt("  checkpoint: {dir: /tmp/x, every: 4, keep: 3, resume_from: latest}\n" + restarts, 1), "t.yaml");
  EXPECT_TRUE(ok.ok()) << ok.status().message();
}

TEST(ScenarioLoader, FaultParamsAreValidatedByTheKind) {
  EXPECT_EQ(ErrorOf(With("    params: {slowdown: 2.0}\n", "")),
            "t.yaml:13:5: faults[0].params: is required for kind 'straggler'");
  EXPECT_EQ(ErrorOf(With("slowdown: 2.0", "slowdown: 0.5")),
            "t.yaml:16:24: faults[0]: params.slowdown must be in (1, 20], got 0.500000");
  EXPECT_EQ(ErrorOf(With("slowdown: 2.0", "slowdwn: 2.0")),
            "t.yaml:16:14: faults[0].params: unknown key 'slowdwn'; known keys: slowdown");
}

TEST(ScenarioLoader, OneofAlternativesAreExclusive) {
  EXPECT_EQ(ErrorOf(With("{host_of_rank: {draw: [0, 3]}}", "{host_of_rank: 1, rank: 2}")),
            "t.yaml:14:31: faults[0].target.rank: 'host_of_rank' and 'rank' are alternatives; give only one");
}

TEST(ScenarioLoader, RankReferences) {
  EXPECT_EQ(
      ErrorOf(With("culprit_ranks: [$faults.0.target.rank]", "culprit_ranks: [$faults.1.target.rank]")),
      "t.yaml:19:19: answer.culprit_ranks[0]: reference '$faults.1.target.rank': the scenario has only 1 "
      "fault(s)");
  EXPECT_EQ(ErrorOf(With("culprit_ranks: [$faults.0.target.rank]", "culprit_ranks: [$faults.0.host]")),
            "t.yaml:19:19: answer.culprit_ranks[0]: reference '$faults.0.host' is not of the form "
            "$faults.<index>.target.rank");
  EXPECT_EQ(ErrorOf(With("[{replace_host: $faults.0.target.rank}]", "[{replace_host: 4}]")),
            "t.yaml:21:30: remediations[0].actions[0].replace_host: must be in 0..3, got 4");
  EXPECT_EQ(ErrorOf(With("[{replace_host: $faults.0.target.rank}]", "[{replace_host: node7}]")),
            "t.yaml:21:30: remediations[0].actions[0].replace_host: expected a rank (an integer >= 0) or a "
            "reference like $faults.0.target.rank, got 'node7'");
}

TEST(ScenarioLoader, SetRemediationIsCheckedLikeAFix) {
  EXPECT_TRUE(ParseScenario(With("[{replace_host: $faults.0.target.rank}]",
                                 "[{set: {key: data.num_workers, value: '4'}}]"),
                            "t.yaml")
                  .ok());
  // A workload key only where may_change opens it.
  EXPECT_NE(ErrorOf(With("[{replace_host: $faults.0.target.rank}]", "[{set: {key: data.batch_size, value: '16'}}]"))
                .find("remediations[0].actions[0].set.key: 'data.batch_size' is a workload setting: list it"),
            std::string::npos);
  EXPECT_TRUE(ParseScenario(With("[{replace_host: $faults.0.target.rank}]",
                                 "[{set: {key: data.batch_size, value: '16'}}]\nmay_change: [data]"),
                            "t.yaml")
                  .ok());
  EXPECT_NE(ErrorOf(With("[{replace_host: $faults.0.target.rank}]",
                         "[{set: {key: data.sample_latency_ms, value: '0'}}]"))
                .find("describes the machine"),
            std::string::npos);
  const std::string err =
      ErrorOf(With("[{replace_host: $faults.0.target.rank}]", "[{set: {key: data.size, value: '16'}}]"));
  EXPECT_EQ(err.rfind("t.yaml:21:21: remediations[0].actions[0].set: unknown setting 'data.size'; known settings: "
                      "checkpoint.",
                      0),
            0u)
      << err;
  EXPECT_NE(err.find(" data.batch_size, "), std::string::npos) << err;
}

TEST(ScenarioLoader, YamlSyntaxErrorHasLine) {
  EXPECT_EQ(
      ErrorOf(With("  data: {batch_size: 8, num_workers: 0}", "  data: {batch_size: 8, num_workers: 0")),
      "t.yaml:8:8: YAML syntax error: end of map flow not found");
  EXPECT_EQ(ErrorOf(With("title: T", "title: T\nid: u")),
            "t.yaml:3:1: id: duplicate key 'id' (first given at line 1)");
  EXPECT_EQ(ErrorOf(""), "t.yaml: the scenario file is empty");
  EXPECT_EQ(ErrorOf("- a\n- b\n"), "t.yaml:1:1: expected a mapping at the top level, got a sequence");
}

TEST(ScenarioLoader, MissingOrBadRequiredFields) {
  EXPECT_EQ(ErrorOf(With("id: t", "id: ''")), "t.yaml:1:5: id: is required");
  EXPECT_EQ(ErrorOf(With("id: t\n", "")), "t.yaml: id: is required");
  EXPECT_EQ(ErrorOf(With("id: t", "id: Straggler_1")),
            "t.yaml:1:5: id: must use only a-z, 0-9 and '-', got 'Straggler_1'");
  EXPECT_EQ(ErrorOf(With("  cause: straggler\n", "")), "t.yaml:18:3: answer.cause: is required");
  EXPECT_EQ(ErrorOf(With("cause: straggler", "cause: gremlins"))
                .rfind("t.yaml:18:10: answer.cause: unknown cause 'gremlins'; known causes: straggler, ", 0),
            0u);
  EXPECT_EQ(ErrorOf(With("kind: mlp, ", "")), "t.yaml:6:10: job.model.kind: must be one of mlp, gpt-tiny, got ''");
  EXPECT_EQ(ErrorOf(With("  world_size: 4", "  world_size: 65")),
            "t.yaml:5:15: job.world_size: must be in 1..64, got 65");
  EXPECT_EQ(ErrorOf(With("window_steps: 10", "window_steps: 0")),
            "t.yaml:22:41: verify.window_steps: must be >= 1, got 0");
}

TEST(ScenarioLoader, ValidateScenarioPrefixesWhere) {
  auto s = ParseScenario(kGood, "t.yaml");
  ASSERT_TRUE(s.ok()) << s.status().message();
  s->mutable_job()->set_world_size(2);  // the draw [0, 3] no longer fits
  Status st = ValidateScenario(*s, "t.yaml");
  EXPECT_EQ(st.message(), "t.yaml: faults[0].target.host_of_rank.draw[1]: must be in 0..1, got 3");
}

TEST(ScenarioLoader, DirectoryRejectsDuplicateIds) {
  const auto dir = std::filesystem::temp_directory_path() / ("fd_scn_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "a.yaml") << kGood;
  std::ofstream(dir / "b.yml") << kGood;
  std::ofstream(dir / "notes.txt") << "ignored";
  auto all = LoadScenarioDir(dir.string());
  ASSERT_FALSE(all.ok());
  EXPECT_EQ(all.status().message(), (dir / "b.yml").string() + ": duplicate scenario id 't', also used by " +
                                        (dir / "a.yaml").string());
  std::filesystem::remove(dir / "b.yml");
  all = LoadScenarioDir(dir.string());
  ASSERT_TRUE(all.ok()) << all.status().message();
  EXPECT_EQ(all->size(), 1u);
  std::filesystem::remove_all(dir);
}

// --- firedrill fix --set ------------------------------------------------------

v1::JobSpec GoodJob() {
  auto s = ParseScenario(kGood, "t.yaml");
  EXPECT_TRUE(s.ok()) << s.status().message();
  return s.ok() ? s->job() : v1::JobSpec();
}

TEST(ApplyJobSetting, SetsLeavesByPath) {
  v1::JobSpec job = GoodJob();
  ASSERT_TRUE(ApplyJobSetting(&job, "data.batch_size", "32").ok());
  EXPECT_EQ(job.data().batch_size(), 32);
  ASSERT_TRUE(ApplyJobSetting(&job, "comm.timeout_s", "120.5").ok());
  EXPECT_DOUBLE_EQ(job.comm().timeout_s(), 120.5);
  ASSERT_TRUE(ApplyJobSetting(&job, "checkpoint.every", "50").ok());
  EXPECT_EQ(job.checkpoint().every(), 50);
  ASSERT_TRUE(ApplyJobSetting(&job, "comm.backend", "gloo").ok());
  EXPECT_EQ(job.comm().backend(), "gloo");
}

TEST(ApplyJobSetting, UnknownKeyListsKnownSettings) {
  v1::JobSpec job = GoodJob();
  Status st = ApplyJobSetting(&job, "data", "1");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message().rfind("unknown setting 'data'; known settings: checkpoint.", 0), 0u) << st.message();
  const auto keys = JobSettingKeys();
  EXPECT_TRUE(std::is_sorted(keys.begin(), keys.end()));
  EXPECT_TRUE(std::adjacent_find(keys.begin(), keys.end()) == keys.end());
  // Every scalar leaf of JobSpec, messages themselves excluded.
  EXPECT_TRUE(std::binary_search(keys.begin(), keys.end(), "data.batch_size"));
  EXPECT_TRUE(std::binary_search(keys.begin(), keys.end(), "loss_scale.mode"));
  EXPECT_FALSE(std::binary_search(keys.begin(), keys.end(), "data"));
}

TEST(ApplyJobSetting, BadValueNamesType) {
  v1::JobSpec job = GoodJob();
  EXPECT_EQ(ApplyJobSetting(&job, "data.batch_size", "32x").message(),
            "setting 'data.batch_size': expected an integer, got '32x'");
  EXPECT_EQ(ApplyJobSetting(&job, "data.batch_size", " 32").message(),
            "setting 'data.batch_size': expected an integer, got ' 32'");
  EXPECT_EQ(ApplyJobSetting(&job, "data.batch_size", "99999999999").message(),
            "setting 'data.batch_size': expected an integer, got '99999999999'");
  EXPECT_EQ(ApplyJobSetting(&job, "optim.lr", "nan").message(),
            "setting 'optim.lr': expected a number, got 'nan'");
  EXPECT_EQ(job.data().batch_size(), 8);
}

TEST(ApplyJobSetting, InvalidResultIsRolledBack) {
  v1::JobSpec job = GoodJob();
  const std::string before = job.SerializeAsString();
  Status st = ApplyJobSetting(&job, "data.batch_size", "0");
  EXPECT_EQ(st.message(), "setting data.batch_size=0 rejected: data.batch_size: must be in 1..4096, got 0");
  EXPECT_EQ(job.SerializeAsString(), before);
  st = ApplyJobSetting(&job, "comm.backend", "nccl");
  EXPECT_EQ(st.message(),
            "setting comm.backend=nccl rejected: comm.backend: must be one of gloo, got 'nccl'");
  EXPECT_EQ(job.comm().backend(), "gloo");
}

TEST(ApplyJobSetting, KeptLayersAndFeatureUnitsAreCheckedBeforeAnyRankStarts) {
  v1::JobSpec job = GoodJob();
  ASSERT_EQ(job.model().kind(), "mlp");
  EXPECT_TRUE(ApplyJobSetting(&job, "model.keep_fp32", "layers.0, head").ok());
  Status st = ApplyJobSetting(&job, "model.keep_fp32", "layer0");
  EXPECT_NE(st.message().find("model.keep_fp32: no layer 'layer0' in this mlp; its layers are layers.0"),
            std::string::npos)
      << st.message();
  EXPECT_EQ(job.model().keep_fp32(), "layers.0, head");
  EXPECT_TRUE(ApplyJobSetting(&job, "data.feature_scale", "30000").ok());
  EXPECT_NE(ApplyJobSetting(&job, "data.feature_scale", "0.5").message().find("data.feature_scale"),
            std::string::npos);
  v1::JobSpec gpt = job;
  gpt.mutable_model()->set_kind("gpt-tiny");
  gpt.mutable_model()->set_keep_fp32("");
  gpt.mutable_data()->set_feature_scale(0);
  gpt.mutable_model()->set_seq_len(32);
  gpt.mutable_model()->set_heads(1);
  ASSERT_TRUE(ValidateJob(gpt, "job").ok()) << ValidateJob(gpt, "job").message();
  EXPECT_NE(ApplyJobSetting(&gpt, "data.normalize", "true").message().find("mlp's synthetic features only"),
            std::string::npos);
  EXPECT_NE(ApplyJobSetting(&gpt, "model.keep_fp32", "head").message().find("runs every layer"),
            std::string::npos);
}

TEST(ValidateJob, PrefixesWhere) {
  v1::JobSpec job = GoodJob();
  job.mutable_optim()->set_momentum(1.0);
  EXPECT_EQ(ValidateJob(job, "job").message(), "job: optim.momentum: must be in [0, 1), got 1");
  EXPECT_TRUE(ValidateJob(GoodJob(), "job").ok());
}

}  // namespace
}  // namespace firedrill::scenario

namespace firedrill::scenario {
namespace {

namespace fs = std::filesystem;

// Every enum-like job key refuses a value it does not know, wherever it
// comes from (a scenario file or `fix --set`): a typo never silently
// selects a default (comm.transport 'glo' once meant shared memory).
TEST(ScenarioLoader, EveryEnumLikeKeyRefusesATypo) {
  auto sc = LoadScenarioFile(FIREDRILL_SOURCE_DIR "/scenarios/throughput-halved.yaml");
  ASSERT_TRUE(sc.ok()) << sc.status().message();
  for (const char* key : {"model.kind", "data.sampler", "data.source", "optim.kind", "optim.lr_scaling", "precision",
                          "loss_scale.mode", "comm.backend", "comm.transport", "comm.accumulation_sync",
                          "checkpoint.load"}) {
    v1::JobSpec job = sc->job();
    const Status st = ApplyJobSetting(&job, key, "glo");
    EXPECT_FALSE(st.ok()) << key;
    EXPECT_NE(st.message().find("must be one of"), std::string::npos) << key << ": " << st.message();
  }
}

TEST(ScenarioLoader, FoldersAddUpAndAnIdUsedTwiceNamesBothFiles) {
  const std::string shipped = FIREDRILL_SOURCE_DIR "/scenarios";
  auto one = LoadScenarioDirs({shipped});
  ASSERT_TRUE(one.ok());
  const fs::path mine = fs::temp_directory_path() / ("fd-mine-" + std::to_string(::getpid()));
  fs::create_directories(mine);
  fs::copy_file(shipped + "/throughput-halved.yaml", mine / "copy.yaml", fs::copy_options::overwrite_existing);
  auto dup = LoadScenarioDirs({shipped, mine.string()});
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.status().message().find("duplicate scenario id 'throughput-halved'"), std::string::npos)
      << dup.status().message();
  EXPECT_NE(dup.status().message().find("copy.yaml"), std::string::npos) << dup.status().message();
  std::string text;
  {
    std::ifstream in(mine / "copy.yaml");
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  const size_t at = text.find("id: throughput-halved");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 21, "id: my-own-drill");
  std::ofstream(mine / "copy.yaml") << text;
  auto both = LoadScenarioDirs({shipped, mine.string()});
  ASSERT_TRUE(both.ok()) << both.status().message();
  EXPECT_EQ(both->size(), one->size() + 1);
  fs::remove_all(mine);
}

TEST(ScenarioLoader, WarnsWhenWhatALearnerReadsNamesTheAnswer) {
  auto sc = LoadScenarioFile(FIREDRILL_SOURCE_DIR "/scenarios/throughput-halved.yaml");
  ASSERT_TRUE(sc.ok());
  EXPECT_TRUE(ScenarioWarnings(*sc).empty());
  v1::Scenario s = *sc;
  s.set_id("straggler-basic");
  s.set_briefing("One host's link is a slow link now.");
  const auto w = ScenarioWarnings(s);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_NE(w[0].find("id names the"), std::string::npos) << w[0];
  EXPECT_NE(w[1].find("briefing names the fault kind 'slow_link'"), std::string::npos) << w[1];
  s.set_briefing("No rank crashed.");  // whole words only: "crashed" is no cause
  s.set_id("throughput-halved");
  EXPECT_TRUE(ScenarioWarnings(s).empty());
}

}  // namespace
}  // namespace firedrill::scenario

namespace firedrill::scenario {
namespace {

std::string ShippedText(const std::string& id) {
  std::ifstream in(std::string(FIREDRILL_SOURCE_DIR) + "/scenarios/" + id + ".yaml");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Replaced(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// What loading `text` says: "loaded", or its error.
std::string msg(const std::string& text) {
  auto s = ParseScenario(text, "t.yaml");
  return s.ok() ? std::string("loaded") : s.status().message();
}

TEST(ScenarioLoader, AResumeWithoutStateNeedsARestartAndACheckpointFromBeforeIt) {
  const std::string good = ShippedText("night-restart");
  auto ok = ParseScenario(good, "night-restart.yaml");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  const std::string crash = "  - kind: rank_crash\n    target: {host_of_rank: {draw: [0, 3]}}\n"
                            "    trigger: {step: {draw: [620, 940]}}\n    params: {event: kernel_panic}\n";
  EXPECT_NE(msg(Replaced(good, crash, "")).find("needs a rank_crash fault"), std::string::npos);
  EXPECT_NE(msg(Replaced(good, "draw: [620, 940]", "draw: [420, 940]")).find("can be 420, before the first checkpoint kept for good (step 500)"),
            std::string::npos);
  EXPECT_NE(msg(Replaced(good, "  params_vs_reference: true\n", "")).find("needs verify.params_vs_reference"),
            std::string::npos);
  EXPECT_NE(msg(Replaced(good, "  elastic: {max_restarts: 3}\n", "")).find("max_restarts >= 1"), std::string::npos);
  EXPECT_NE(msg(Replaced(good, "restore: model}", "restore: \"model,weights\"}")).find("\"weights\" is not a part"),
            std::string::npos);
  EXPECT_NE(msg(Replaced(good, "resume_from: latest}", "resume_from: latest, restore: optim}"))
                .find("job.checkpoint.restore: \"optim\" leaves out model"),
            std::string::npos);
}

TEST(ScenarioLoader, ACheckpointCadenceNeedsAFailureRateAndAHealthyCadenceOfItsOwn) {
  const std::string good = ShippedText("after-the-outage");
  auto ok = ParseScenario(good, "after-the-outage.yaml");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_NE(msg(Replaced(good, "  mtbf_s: 600\n", "")).find("checkpoint_cadence needs verify.mtbf_s"), std::string::npos);
  EXPECT_NE(msg(Replaced(good, "params: {every: 5}", "params: {every: 600}")).find("the fault changes nothing"),
            std::string::npos);
  EXPECT_NE(msg(Replaced(good, "params: {every: 5}", "params: {every: 0}")).find("params.every is 0"),
            std::string::npos);
  EXPECT_NE(msg(Replaced(good, "goodput_vs_best_min: 0.98", "goodput_vs_best_min: 1.5")).find("must be in (0, 1]"),
            std::string::npos);
  EXPECT_NE(msg(Replaced(good, "checkpoint: {every: 600, keep: 2}", "checkpoint: {every: 0}")).find("job.checkpoint.every"),
            std::string::npos);
}

TEST(ScenarioLoader, AStaleAccumulationChangesTheHealthyJobsAndIsJudgedOnTheLoss) {
  const std::string good = ShippedText("rack-failure");
  auto ok = ParseScenario(good, "rack-failure.yaml");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_NE(msg(Replaced(good, "params: {grad_accum_steps: 1}", "params: {grad_accum_steps: 2}"))
                .find("the fault changes nothing"),
            std::string::npos);
  EXPECT_NE(msg(Replaced(good, "  loss_vs_baseline_max: 1.15\n", "")).find("needs verify.loss_vs_baseline_max"),
            std::string::npos);
  EXPECT_NE(msg(Replaced(good, "may_change: [grad_accum_steps, data.batch_size]", "may_change: [data.batch_size]"))
                .find("'grad_accum_steps' is a workload setting"),
            std::string::npos);
}

TEST(ScenarioLoader, APipelineBubbleIsJudgedOnTheMeasuredBubble) {
  const std::string good = ShippedText("launcher-v2");
  auto ok = ParseScenario(good, "launcher-v2.yaml");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_DOUBLE_EQ(ok->verify().pp_bubble_max(), 0.35);
  EXPECT_NE(msg(Replaced(good, "  pp_bubble_max: 0.35\n", ""))
                .find("a pipeline-bubble answer needs verify.pp_bubble_max"),
            std::string::npos);
  EXPECT_NE(msg(Replaced(good, "pp_bubble_max: 0.35", "pp_bubble_max: 1.2"))
                .find("verify.pp_bubble_max: must be in (0, 1)"),
            std::string::npos);
  EXPECT_NE(msg(Replaced(good, "parallel: {pp: 2}", "parallel: {pp: 1}")).find("the job has no pipeline"),
            std::string::npos);
}

// The shipped board-failure drill with the first `from` replaced by `to`.
std::string BoardFailure(const std::string& from, const std::string& to) {
  std::ifstream in(std::string(FIREDRILL_SOURCE_DIR) + "/scenarios/board-failure.yaml");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  const auto at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? s : s.replace(at, from.size(), to);
}

TEST(ScenarioLoader, APerRankLoaderNeedsAShardedCheckpointAndARestartOnFewerHosts) {
  ASSERT_TRUE(ParseScenario(BoardFailure("", ""), "t.yaml").ok());
  EXPECT_NE(ErrorOf(BoardFailure("zero_stage: 1", "zero_stage: 0"))
                .find("faults[1].kind: checkpoint_load needs job.optim.zero_stage: 1"),
            std::string::npos);
  EXPECT_NE(ErrorOf(BoardFailure("min_nodes: 2", "min_nodes: 4"))
                .find("checkpoint_load needs job.elastic.min_nodes between 1 and world_size - 1"),
            std::string::npos);
  EXPECT_NE(ErrorOf(BoardFailure("min_nodes: 2", "min_nodes: 5")).find("elastic.min_nodes"),
            std::string::npos);
  EXPECT_NE(ErrorOf(BoardFailure("stays_down: true", "stays_down: false"))
                .find("checkpoint_load needs a rank_crash fault with params.stays_down: true"),
            std::string::npos);
  EXPECT_NE(ErrorOf(BoardFailure("resume_from: latest", "resume_from: \"\"")).find("resume_from: latest"),
            std::string::npos);
  EXPECT_NE(ErrorOf(BoardFailure("draw: [620, 940]", "draw: [40, 940]"))
                .find("faults[0].trigger.step: can be 40: the host must go down after the first checkpoint"),
            std::string::npos);
  EXPECT_NE(
      ErrorOf(BoardFailure("  - actions: [{set: {key: checkpoint.load, value: resharded}}]",
                           "  - actions: [{replace_host: 0}]\n  - actions: [{set: {key: checkpoint.load, "
                           "value: resharded}}]"))
          .find("the remediations replace no host"),
      std::string::npos);
  // The job goes on with its ranks numbered anew: no culprit rank can be named.
  EXPECT_NE(
      ErrorOf(BoardFailure("cause: checkpoint-layout", "cause: checkpoint-layout\n  culprit_ranks: [0]"))
          .find("faults[0].params.stays_down: lets the job go on with fewer ranks"),
      std::string::npos);
}

}  // namespace
}  // namespace firedrill::scenario
