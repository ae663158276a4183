// LossScaler against torch.cuda.amp.GradScaler's documented behaviour
// (torch/cuda/amp/grad_scaler.py and torch._amp_update_scale_, 1.13). The
// real GradScaler cannot be replayed here: in 1.13 it needs CUDA tensors and
// this LibTorch is CPU-only, so the expected values come from the documented
// algorithm and PyTorch's own test (test_cuda.py, test_grad_scaling_update_scale).
#include "agent/loss_scaler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "firedrill/v1/scenario.pb.h"

namespace firedrill::agent {
namespace {

LossScaler Make(const std::string& mode, const std::string& precision = "fp16") {
  v1::LossScaleSpec spec;
  spec.set_mode(mode);
  auto s = LossScaler::FromSpec(spec, precision);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

TEST(LossScaler, DefaultsAreGradScalers) {
  auto s = Make("", "fp16");  // empty mode: dynamic for fp16
  EXPECT_EQ(s.mode(), LossScaler::Mode::kDynamic);
  EXPECT_TRUE(s.enabled());
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.inv_scale(), 1.0 / 65536.0);
  EXPECT_EQ(s.growth_tracker(), 0);
  EXPECT_EQ(s.skipped_total(), 0);
}

TEST(LossScaler, EmptyModeIsNoneForFp32AndBf16) {
  for (const char* p : {"fp32", "bf16", ""}) {
    auto s = Make("", p);
    EXPECT_EQ(s.mode(), LossScaler::Mode::kNone) << p;
    EXPECT_FALSE(s.enabled());
    EXPECT_EQ(s.scale(), 1.0);
    EXPECT_EQ(s.inv_scale(), 1.0);
    // No scaler: an inf step is not skipped (as without GradScaler).
    EXPECT_FALSE(s.ShouldSkipStep(true));
    s.Update(true);
    EXPECT_FALSE(s.last_step_skipped());
    EXPECT_EQ(s.skipped_total(), 0);
    EXPECT_EQ(s.scale(), 1.0);
  }
}

TEST(LossScaler, GrowsAtExactlyTheIntervalth) {
  auto s = Make("dynamic");
  for (int i = 1; i < 2000; ++i) {
    EXPECT_FALSE(s.ShouldSkipStep(false));
    s.Update(false);
    ASSERT_EQ(s.scale(), 65536.0) << "grew early at clean step " << i;
    ASSERT_EQ(s.growth_tracker(), i);
  }
  s.Update(false);  // the 2000th consecutive clean step
  EXPECT_EQ(s.scale(), 131072.0);
  EXPECT_EQ(s.growth_tracker(), 0);
  EXPECT_FALSE(s.last_step_skipped());
  for (int i = 0; i < 1999; ++i) s.Update(false);
  EXPECT_EQ(s.scale(), 131072.0);
  s.Update(false);
  EXPECT_EQ(s.scale(), 262144.0);
}

TEST(LossScaler, InfBacksOffResetsTrackerAndSkips) {
  auto s = Make("dynamic");
  for (int i = 0; i < 1500; ++i) s.Update(false);
  EXPECT_EQ(s.growth_tracker(), 1500);
  EXPECT_TRUE(s.ShouldSkipStep(true));
  s.Update(true);
  EXPECT_EQ(s.scale(), 32768.0);
  EXPECT_EQ(s.growth_tracker(), 0);
  EXPECT_TRUE(s.last_step_skipped());
  EXPECT_EQ(s.skipped_total(), 1);
  // The 1500 earlier clean steps no longer count: growth needs 2000 more.
  for (int i = 0; i < 1999; ++i) s.Update(false);
  EXPECT_EQ(s.scale(), 32768.0);
  EXPECT_FALSE(s.last_step_skipped());
  s.Update(false);
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.skipped_total(), 1);
}

TEST(LossScaler, ConsecutiveInfsHalveEachTime) {
  auto s = Make("dynamic");
  for (int k = 1; k <= 10; ++k) {
    s.Update(true);
    EXPECT_EQ(s.scale(), std::ldexp(1.0, 16 - k));
    EXPECT_EQ(s.skipped_total(), k);
  }
  EXPECT_EQ(s.scale(), 64.0);
}

// GradScaler has no floor: a forward pass that overflows on every step
// halves the fp32 scale past its smallest subnormal (2^-149, 165 steps from
// 2^16) to exactly 0, where it stays; and that state saves and loads.
TEST(LossScaler, BackingOffOnEveryStepReachesZeroAndStaysThere) {
  auto s = Make("dynamic");
  for (int k = 1; k <= 165; ++k) s.Update(true);
  EXPECT_EQ(s.scale(), std::ldexp(1.0, -149));
  s.Update(true);
  EXPECT_EQ(s.scale(), 0.0);
  EXPECT_TRUE(std::isinf(s.inv_scale()));
  for (int k = 0; k < 10; ++k) s.Update(true);
  EXPECT_EQ(s.scale(), 0.0);
  EXPECT_EQ(s.skipped_total(), 176);
  auto t = Make("dynamic");
  LossScaler::State zero;
  zero.scale = 0;
  zero.skipped_total = 176;
  EXPECT_TRUE(t.set_state(zero).ok());
  EXPECT_EQ(t.scale(), 0.0);
  zero.scale = -1;
  EXPECT_FALSE(t.set_state(zero).ok());
}

// PyTorch's test_grad_scaling_update_scale, step for step: growth 2.0,
// backoff 0.25, interval 2, scale 4.0.
TEST(LossScaler, MatchesPyTorchUpdateScaleTest) {
  LossScaler::Options o;
  o.init_scale = 4.0;
  o.growth_factor = 2.0;
  o.backoff_factor = 0.25;
  o.growth_interval = 2;
  auto s = LossScaler::Create(o);
  ASSERT_TRUE(s.ok());
  s->Update(false);  // tracker increments, no growth yet
  EXPECT_EQ(s->growth_tracker(), 1);
  EXPECT_EQ(s->scale(), 4.0);
  s->Update(false);  // interval reached: grows
  EXPECT_EQ(s->growth_tracker(), 0);
  EXPECT_EQ(s->scale(), 8.0);
  s->Update(true);  // inf: backs off, resets
  EXPECT_EQ(s->growth_tracker(), 0);
  EXPECT_EQ(s->scale(), 2.0);
}

TEST(LossScaler, ScaleIsFloat32AndNeverGrowsToInf) {
  LossScaler::Options o;
  o.growth_interval = 1;
  o.init_scale = std::ldexp(1.0, 127);  // the largest power of two in fp32
  auto s = LossScaler::Create(o);
  ASSERT_TRUE(s.ok());
  s->Update(false);  // 2^128 is inf in fp32: GradScaler keeps the old scale
  EXPECT_EQ(s->scale(), std::ldexp(1.0, 127));
  EXPECT_EQ(s->growth_tracker(), 0);
  // A non-power-of-two backoff is rounded to fp32 like the scale tensor.
  o.init_scale = 65536;
  o.backoff_factor = 0.3;
  auto t = LossScaler::Create(o);
  ASSERT_TRUE(t.ok());
  t->Update(true);
  EXPECT_EQ(t->scale(), static_cast<double>(static_cast<float>(65536 * 0.3)));
  EXPECT_NE(t->scale(), 65536 * 0.3);
  EXPECT_EQ(t->inv_scale(), static_cast<double>(static_cast<float>(1.0 / t->scale())));
}

TEST(LossScaler, StaticKeepsScaleButSkipsInf) {
  v1::LossScaleSpec spec;
  spec.set_mode("static");
  auto d = LossScaler::FromSpec(spec, "fp16");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->scale(), 1.0);  // static's default init_scale
  spec.set_init_scale(1024);
  auto s = LossScaler::FromSpec(spec, "fp16");
  ASSERT_TRUE(s.ok());
  for (int i = 0; i < 5000; ++i) s->Update(false);
  EXPECT_EQ(s->scale(), 1024.0);
  EXPECT_TRUE(s->ShouldSkipStep(true));
  s->Update(true);
  EXPECT_EQ(s->scale(), 1024.0);
  EXPECT_TRUE(s->last_step_skipped());
  EXPECT_EQ(s->skipped_total(), 1);
}

TEST(LossScaler, SpecFieldsAndValidation) {
  v1::LossScaleSpec spec;
  spec.set_mode("dynamic");
  spec.set_init_scale(8);
  spec.set_growth_factor(4);
  spec.set_backoff_factor(0.125);
  spec.set_growth_interval(3);
  auto s = LossScaler::FromSpec(spec, "fp32");  // explicit mode wins over precision
  ASSERT_TRUE(s.ok());
  for (int i = 0; i < 3; ++i) s->Update(false);
  EXPECT_EQ(s->scale(), 32.0);
  s->Update(true);
  EXPECT_EQ(s->scale(), 4.0);

  v1::JobSpec job;
  job.set_precision("fp16");
  auto j = LossScaler::FromJob(job);
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->mode(), LossScaler::Mode::kDynamic);

  auto bad = [](auto mutate) {
    v1::LossScaleSpec sp;
    sp.set_mode("dynamic");
    mutate(sp);
    return LossScaler::FromSpec(sp, "fp16").status().code();
  };
  EXPECT_EQ(bad([](auto& sp) { sp.set_mode("adaptive"); }), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad([](auto& sp) { sp.set_growth_factor(1.0); }), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad([](auto& sp) { sp.set_backoff_factor(1.5); }), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad([](auto& sp) { sp.set_growth_interval(-1); }), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad([](auto& sp) { sp.set_init_scale(-2); }), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad([](auto& sp) { sp.set_init_scale(1e300); }), StatusCode::kInvalidArgument);
}

TEST(LossScaler, StateSerialisesExactly) {
  LossScaler::State st;
  st.scale = static_cast<float>(65536 * 0.3);  // not a short decimal
  st.growth_tracker = 1234;
  st.skipped_total = 56;
  const std::string text = st.Serialize();
  auto back = LossScaler::State::Parse(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, st) << text;

  for (const char* bad :
       {"", "scale=1 growth_tracker=0", "scale=x growth_tracker=0 skipped_total=0",
        "scale=1 growth_tracker=-1 skipped_total=0", "scale=1 growth_tracker=0 skipped_total=0 z=1",
        "scale=1 growth_tracker=0 skipped_total"}) {
    EXPECT_FALSE(LossScaler::State::Parse(bad).ok()) << bad;
  }
}

// Checkpoint at some step, restore into a fresh scaler, continue: the two
// trajectories must be identical (the resume-is-bitwise-identical promise).
TEST(LossScaler, StateRoundTripResumesIdentically) {
  auto pattern = [](int step) { return step % 997 == 13 || step % 3001 == 2999; };
  auto a = Make("dynamic");
  for (int i = 0; i < 2600; ++i) a.Update(pattern(i));
  auto parsed = LossScaler::State::Parse(a.state().Serialize());
  ASSERT_TRUE(parsed.ok());
  auto b = Make("dynamic");
  ASSERT_TRUE(b.set_state(*parsed).ok());
  EXPECT_EQ(b.state(), a.state());
  for (int i = 2600; i < 9000; ++i) {
    a.Update(pattern(i));
    b.Update(pattern(i));
    ASSERT_EQ(a.state(), b.state()) << "diverged at step " << i;
  }
  EXPECT_GT(a.skipped_total(), 5);

  LossScaler::State broken = a.state();
  broken.scale = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(b.set_state(broken).ok());
  broken = a.state();
  broken.growth_tracker = 2000;  // cannot exist below the interval
  EXPECT_FALSE(b.set_state(broken).ok());
}

TEST(LossScaler, StaticScaleIsConfigurationNotState) {
  v1::LossScaleSpec spec;
  spec.set_mode("static");
  spec.set_init_scale(128);
  auto s = LossScaler::FromSpec(spec, "fp16");
  ASSERT_TRUE(s.ok());
  LossScaler::State st;
  st.scale = 4096;
  st.skipped_total = 7;
  ASSERT_TRUE(s->set_state(st).ok());
  EXPECT_EQ(s->scale(), 128.0);  // the (possibly fixed) configured scale
  EXPECT_EQ(s->skipped_total(), 7);
}

}  // namespace
}  // namespace firedrill::agent
