// Faults over seams: each kind's Apply/Recover, the runner's schedule
// (trigger, until, flapping), several faults on one seam, and the seams'
// own bookkeeping.
#include "faults/runner.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "common/subprocess.h"
#include "faults/registry.h"
#include "faults/shaped_link.h"
#include "faults/straggler.h"
#include "faults/targeting.h"
#include "faults/throttled_compute.h"

namespace firedrill::faults {
namespace {

struct TestSeams {
  ComputeSlowdown compute;
  StorageLatency storage;
  LinkModel link;
  FaultEnvironment environment;
  Seams seams{&compute, &storage, &link, &environment};
};

v1::ResolvedFault Straggle(double slowdown, int64_t from, int64_t until = 0) {
  v1::ResolvedFault f;
  f.set_kind("straggler");
  f.set_trigger_step(from);
  f.set_until_step(until);
  f.mutable_straggler()->set_slowdown(slowdown);
  return f;
}

TEST(Straggler, AppliesAndRecoversItsSlowdownIdempotently) {
  TestSeams t;
  Straggler s(0, 3.0);
  ASSERT_TRUE(s.Apply(t.seams).ok());
  ASSERT_TRUE(s.Apply(t.seams).ok());
  EXPECT_DOUBLE_EQ(t.compute.factor(), 3.0) << "applying twice is applying once";
  ASSERT_TRUE(s.Recover(t.seams).ok());
  ASSERT_TRUE(s.Recover(t.seams).ok());
  EXPECT_DOUBLE_EQ(t.compute.factor(), 1.0);
}

TEST(Straggler, ValidatesSlowdown) {
  v1::FaultSpec spec;
  spec.set_kind("straggler");
  spec.mutable_straggler()->set_slowdown(2.5);
  EXPECT_TRUE(ValidateStraggler(spec).ok());
  for (double bad : {0.0, 1.0, 0.5, 25.0}) {
    spec.mutable_straggler()->set_slowdown(bad);
    EXPECT_FALSE(ValidateStraggler(spec).ok()) << bad;
  }
}

TEST(Registry, KnowsTheKindsAndWhichActAtRunTime) {
  ASSERT_NE(FindFaultKind("straggler"), nullptr);
  EXPECT_EQ(FindFaultKind("straggler")->scope, Scope::kHost);
  EXPECT_EQ(FindFaultKind("gremlin"), nullptr);
  EXPECT_EQ(FaultKindNames(),
            (std::vector<std::string>{
                "straggler", "dataloader_starvation", "padding_waste", "tiny_buckets", "collective_desync",
                "fp16_overflow", "lr_rule", "grad_accumulation", "device_memory", "resume_without_state",
                "checkpoint_cadence", "stale_accumulation", "checkpoint_load", "deploy_change",
                "comm_misconfig", "silent_divergence", "corrupt_checkpoint", "rank_crash", "slow_link"}));
  EXPECT_TRUE(FindFaultKind("rank_crash")->once) << "a host going down is an event";
  EXPECT_FALSE(FindFaultKind("resume_without_state")->make) << "the restart path's setting: an overlay";
  EXPECT_FALSE(FindFaultKind("checkpoint_cadence")->make) << "a cadence: an overlay, nothing slowed";
  EXPECT_FALSE(FindFaultKind("stale_accumulation")->make) << "a launch command's setting: an overlay";
  EXPECT_FALSE(FindFaultKind("checkpoint_load")->make) << "the resume's loader: an overlay";
  EXPECT_FALSE(FindFaultKind("deploy_change")->make) << "a deploy's settings: an overlay";
  EXPECT_TRUE(FindFaultKind("corrupt_checkpoint")->once) << "an event: the drill's first run only";
  EXPECT_FALSE(FindFaultKind("straggler")->once) << "a condition of its host: every run there";
  // Each kind acts somewhere: at run time on seams, or through the deploy.
  for (const auto& k : BuiltinFaultKinds()) EXPECT_TRUE(k.make || k.apply_to_job) << k.name;
  EXPECT_FALSE(FindFaultKind("tiny_buckets")->make) << "a config overlay has nothing to do at run time";
}

TEST(ActiveAt, TriggerUntilAndFlapping) {
  v1::ResolvedFault f = Straggle(2, 5);
  EXPECT_FALSE(ActiveAt(f, 4));
  EXPECT_TRUE(ActiveAt(f, 5));
  EXPECT_TRUE(ActiveAt(f, 1000000));
  f.set_until_step(8);
  EXPECT_TRUE(ActiveAt(f, 7));
  EXPECT_FALSE(ActiveAt(f, 8)) << "until_step is exclusive";
  f.set_until_step(0);
  f.set_flap_on_steps(2);
  f.set_flap_off_steps(3);
  std::vector<bool> got;
  for (int64_t s = 5; s < 15; ++s) got.push_back(ActiveAt(f, s));
  EXPECT_EQ(got, (std::vector<bool>{true, true, false, false, false, true, true, false, false, false}));
}

TEST(FaultRunner, AppliesOnScheduleAndRecoversWhenTheWindowCloses) {
  TestSeams t;
  auto r = FaultRunner::Create({Straggle(2.0, 3, 6)});
  ASSERT_TRUE(r.ok()) << r.status().message();
  std::vector<double> factor;
  for (int64_t step = 0; step < 8; ++step) {
    ASSERT_TRUE((*r)->At(step, t.seams).ok());
    factor.push_back(t.compute.factor());
  }
  EXPECT_EQ(factor, (std::vector<double>{1, 1, 1, 2, 2, 2, 1, 1}));
  EXPECT_EQ((*r)->applied(), 0);
}

TEST(FaultRunner, SeveralFaultsShareASeamAndRecoverSeparately) {
  TestSeams t;
  auto r = FaultRunner::Create({Straggle(2.0, 0), Straggle(1.5, 2, 4)});
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE((*r)->At(0, t.seams).ok());
  EXPECT_DOUBLE_EQ(t.compute.factor(), 2.0);
  ASSERT_TRUE((*r)->At(2, t.seams).ok());
  EXPECT_DOUBLE_EQ(t.compute.factor(), 3.0);
  ASSERT_TRUE((*r)->At(4, t.seams).ok());
  EXPECT_DOUBLE_EQ(t.compute.factor(), 2.0) << "the second one's change is gone, the first one's stays";
  (*r)->RecoverAll(t.seams);
  EXPECT_DOUBLE_EQ(t.compute.factor(), 1.0);

  // Two slow reads add up; two degraded stretches of a link add up.
  StorageLatency storage;
  storage.AddReadLatency(0, 0.5);
  storage.AddReadLatency(1, 0.25);
  EXPECT_DOUBLE_EQ(storage.extra_ms(), 0.75);
  storage.Restore(0);
  EXPECT_DOUBLE_EQ(storage.extra_ms(), 0.25);
  LinkModel link;
  EXPECT_EQ(link.DelayFor(1000000), Nanos(0));
  link.Degrade(0, 100, 1.0);  // 100 us + 1 MB at 1 GB/s = 1.1 ms
  EXPECT_EQ(link.DelayFor(1000000), Nanos(1100000));
  link.Degrade(1, 0, 2.0);
  EXPECT_EQ(link.DelayFor(1000000), Nanos(1600000));
}

TEST(ShapedLink, WithoutItsInterfaceTheBandwidthFallsBackToWaiting) {
  // No such interface here (and, in unit tests, maybe no root): tc refuses,
  // so the bytes are waited out as LinkModel does, and the reason is kept.
  ShapedLink link("fd-nosuch0");
  link.Degrade(0, 100, 1.0);
  EXPECT_FALSE(link.fallback().empty());
  EXPECT_EQ(link.DelayFor(1000000), Nanos(1100000));
  link.Restore(0);
  EXPECT_EQ(link.DelayFor(1000000), Nanos(0));
}

TEST(ShapedLink, TheTbfCommandCapsTheRateWithABucketOfAtLeastTwoSegments) {
  const auto cmd = ShapedLink::TbfCommand("eth0", 0.05);  // 50 MB/s
  const std::string line = CommandLine(cmd);
  EXPECT_NE(line.find("tc qdisc replace dev eth0 root tbf rate 400000000bit"), std::string::npos) << line;
  EXPECT_NE(line.find("burst 200000"), std::string::npos) << line << ": 4 ms at the rate";
  EXPECT_NE(CommandLine(ShapedLink::TbfCommand("eth0", 0.001)).find("burst 131072"), std::string::npos)
      << "at least two 64 kB GSO segments";
}

TEST(ThrottledCompute, WithoutAProcessOfItsOwnTheSlowdownIsSleptOut) {
  ThrottledCompute c("");  // ranks as threads of one process: no quota
  EXPECT_DOUBLE_EQ(c.sleep_factor(), 1.0);
  c.Slow(0, 3.0);
  c.Slow(1, 2.0);
  EXPECT_DOUBLE_EQ(c.sleep_factor(), 6.0) << "factors multiply";
  EXPECT_FALSE(c.fallback().empty());
  for (int i = 0; i < 5; ++i) c.OnStep(10.0, 10.0);  // no quota to steer
  EXPECT_DOUBLE_EQ(c.limit_cores(), 0.0);
  c.Restore(0);
  c.Restore(1);
  EXPECT_DOUBLE_EQ(c.sleep_factor(), 1.0);
}

// What a rank shares for a slowed peer's governor (agent/reducer.h): its
// healthy compute's stretch; nothing while slowed; and after it recovers,
// only what it measured since (found by review: its steps from before the
// slowdown were shared after the recovery, and under the sleep fallback its
// slowed steps too, each three times as long).
TEST(ThrottledCompute, ARankSharesItsHealthyStretchOnlyAndAfterARecoveryFromScratch) {
  ThrottledCompute c("");  // the sleep fallback: no cgroup needed
  EXPECT_EQ(c.SharedStretch(), 0.0) << "nothing measured yet";
  c.OnStep(12.0, 10.0);  // the warm-up step: not measured
  EXPECT_EQ(c.SharedStretch(), 0.0);
  for (int i = 0; i < 3; ++i) c.OnStep(15.0, 10.0);
  EXPECT_DOUBLE_EQ(c.SharedStretch(), 1.5);
  c.Slow(0, 3.0);
  EXPECT_EQ(c.SharedStretch(), 0.0) << "a slowed rank shares none";
  for (int i = 0; i < 5; ++i) c.OnStep(45.0, 10.0);  // slept out
  c.Restore(0);
  EXPECT_EQ(c.SharedStretch(), 0.0) << "neither its slowed steps nor the ones before";
  c.OnStep(11.0, 10.0);
  EXPECT_DOUBLE_EQ(c.SharedStretch(), 1.1);
}

TEST(FaultRunner, EveryRunTimeKindActsOnItsSeam) {
  TestSeams t;
  v1::ResolvedFault slow_io;
  slow_io.set_kind("dataloader_starvation");
  slow_io.mutable_dataloader_starvation()->set_sample_latency_ms(0.3);
  v1::ResolvedFault link;
  link.set_kind("slow_link");
  link.mutable_slow_link()->set_latency_us(50);
  link.mutable_slow_link()->set_bandwidth_gbps(0.5);
  v1::ResolvedFault iface;
  iface.set_kind("comm_misconfig");
  iface.mutable_comm_misconfig()->set_socket_ifname("ib0");
  v1::ResolvedFault buckets;
  buckets.set_kind("tiny_buckets");
  auto r = FaultRunner::Create({slow_io, link, iface, buckets});
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_TRUE((*r)->At(0, t.seams).ok());
  EXPECT_EQ((*r)->applied(), 3) << "the config overlay has no run-time part";
  EXPECT_DOUBLE_EQ(t.storage.extra_ms(), 0.3);
  EXPECT_EQ(t.link.DelayFor(0), Nanos(50000));
  EXPECT_EQ(t.environment.Get("GLOO_SOCKET_IFNAME"), "ib0");
  EXPECT_EQ(t.environment.Get("NCCL_SOCKET_IFNAME"), "ib0");
  (*r)->RecoverAll(t.seams);
  EXPECT_DOUBLE_EQ(t.storage.extra_ms(), 0);
  EXPECT_FALSE(t.link.degraded());
  EXPECT_NE(t.environment.Get("GLOO_SOCKET_IFNAME"), "ib0");
}

TEST(FaultRunner, AMissingSeamIsAnErrorThatNamesTheFaultAndStep) {
  Seams none;
  auto r = FaultRunner::Create({Straggle(2.0, 7)});
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE((*r)->At(6, none).ok());
  const Status st = (*r)->At(7, none);
  EXPECT_EQ(st.message(), "applying fault straggler at step 7: straggler acts on the compute seam, which this "
                          "process does not offer");
}

TEST(FaultRunner, EmptyAndUnknownKinds) {
  auto empty = FaultRunner::Create({});
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE((*empty)->empty());
  v1::ResolvedFault f;
  f.set_kind("gremlin");
  auto bad = FaultRunner::Create({f});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "unknown fault kind 'gremlin'");
}

TEST(FaultEnvironment, TheFirstFaultWinsAndTheProcessEnvironmentIsLeftAlone) {
  ::setenv("FD_TEST_IFNAME", "eth0", 1);
  FaultEnvironment env;
  EXPECT_FALSE(env.Get("FD_TEST_IFNAME").has_value()) << "only what faults set";
  ASSERT_TRUE(env.Set(1, "FD_TEST_IFNAME", "ib1").ok());
  ASSERT_TRUE(env.Set(0, "FD_TEST_IFNAME", "ib0").ok());
  ASSERT_TRUE(env.Set(0, "FD_TEST_IFNAME", "ib0").ok());
  EXPECT_EQ(env.Get("FD_TEST_IFNAME"), "ib0");
  env.Restore(0);
  EXPECT_EQ(env.Get("FD_TEST_IFNAME"), "ib1") << "fault 1 still holds it";
  env.Restore(1);
  EXPECT_FALSE(env.Get("FD_TEST_IFNAME").has_value());
  EXPECT_STREQ(std::getenv("FD_TEST_IFNAME"), "eth0") << "no setenv while other threads may read it";
  EXPECT_FALSE(env.Set(0, "A=B", "x").ok());
  ::unsetenv("FD_TEST_IFNAME");
}

TEST(Targeting, CopiesTheWindowAndFlapping) {
  v1::Scenario s;
  s.mutable_job()->set_world_size(2);
  auto* f = s.add_faults();
  f->set_kind("straggler");
  f->mutable_target()->mutable_rank()->set_value(1);
  f->mutable_trigger()->mutable_step()->set_value(10);
  f->mutable_trigger()->mutable_until_step()->set_value(30);
  f->mutable_trigger()->set_flap_on_steps(4);
  f->mutable_trigger()->set_flap_off_steps(6);
  f->mutable_straggler()->set_slowdown(2);
  auto r = ResolveFaults(s, 1, {"a", "b"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ((*r)[0].trigger_step(), 10);
  EXPECT_EQ((*r)[0].until_step(), 30);
  EXPECT_EQ((*r)[0].flap_on_steps(), 4);
  EXPECT_EQ((*r)[0].flap_off_steps(), 6);
}

}  // namespace
}  // namespace firedrill::faults
