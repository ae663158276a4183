#include "faults/straggler.h"

#include <gtest/gtest.h>

#include <vector>

#include "faults/hook_bus.h"
#include "faults/registry.h"

namespace firedrill::faults {
namespace {

// Records sleeps instead of sleeping: simulated time keeps tests instant.
class FakeEnv : public Env {
 public:
  void SleepFor(Nanos d) override { sleeps.push_back(d); }
  std::vector<Nanos> sleeps;
};

ComputeInfo Compute(ComputePhase phase, int64_t step, Nanos elapsed) {
  ComputeInfo c;
  c.at.step = step;
  c.phase = phase;
  c.elapsed = elapsed;
  return c;
}

TEST(Straggler, SleepsTheExtraComputeTime) {
  FakeEnv env;
  Straggler s(3.0, env);
  s.AfterCompute(Compute(ComputePhase::kForward, 0, Nanos(1000)));
  s.AfterCompute(Compute(ComputePhase::kBackward, 0, Nanos(2000)));
  s.AfterCompute(Compute(ComputePhase::kOptimizer, 0, Nanos(500)));
  ASSERT_EQ(env.sleeps.size(), 2u);  // optimizer untouched
  EXPECT_EQ(env.sleeps[0], Nanos(2000));
  EXPECT_EQ(env.sleeps[1], Nanos(4000));
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

TEST(Registry, KnowsStraggler) {
  ASSERT_NE(FindFaultKind("straggler"), nullptr);
  EXPECT_EQ(FindFaultKind("straggler")->scope, Scope::kHost);
  EXPECT_EQ(FindFaultKind("gremlin"), nullptr);
  EXPECT_EQ(FaultKindNames(),
            (std::vector<std::string>{"straggler", "dataloader_starvation", "padding_waste", "tiny_buckets",
                                      "collective_desync", "comm_misconfig", "slow_link"}));
}

TEST(HookBus, CallsFaultOnlyFromItsTriggerStep) {
  FakeEnv env;
  v1::ResolvedFault f;
  f.set_kind("straggler");
  f.set_trigger_step(5);
  f.mutable_straggler()->set_slowdown(2.0);
  auto bus = HookBus::Create({f}, env);
  ASSERT_TRUE(bus.ok()) << bus.status().message();
  EXPECT_FALSE((*bus)->empty());
  for (int64_t step = 0; step < 8; ++step) {
    (*bus)->AfterCompute(Compute(ComputePhase::kForward, step, Nanos(100)));
  }
  ASSERT_EQ(env.sleeps.size(), 3u);  // steps 5, 6, 7
  for (Nanos d : env.sleeps) EXPECT_EQ(d, Nanos(100));
}

TEST(HookBus, EmptyAndUnknownKinds) {
  FakeEnv env;
  auto empty = HookBus::Create({}, env);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE((*empty)->empty());
  (*empty)->AfterCompute(Compute(ComputePhase::kForward, 100, Nanos(100)));
  EXPECT_TRUE(env.sleeps.empty());
  v1::ResolvedFault f;
  f.set_kind("gremlin");
  auto bad = HookBus::Create({f}, env);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "unknown fault kind 'gremlin'");
}

}  // namespace
}  // namespace firedrill::faults
