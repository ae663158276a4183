// Optimisers and learning-rate rules against PyTorch. The golden
// trajectories were produced by Debian's python3-torch 1.13 with
//   p = tensor([0.5, -1.25, 2.0, 0.125]); grads as in kGrads below;
//   SGD(lr=0.1, momentum=0.9, weight_decay=0.01) /
//   AdamW(lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1),
//   optionally LambdaLR(opt, lambda s: min(1.0, (s + 1) / 3)) stepped after
//   each opt.step().
#include "agent/optim.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

namespace firedrill::agent {
namespace {

const std::vector<std::vector<float>> kGrads = {{0.1f, -0.2f, 0.3f, -0.4f},
                                                {0.05f, 0.5f, -0.25f, 1.5f},
                                                {-0.3f, 0.2f, 0.1f, 0.0f},
                                                {1.0f, -1.0f, 0.5f, -0.5f}};

struct Golden {
  double lr;
  std::vector<float> param;
};

v1::OptimSpec Sgd(double lr, double momentum, double wd) {
  v1::OptimSpec s;
  s.set_kind("sgd");
  s.set_lr(lr);
  s.set_momentum(momentum);
  s.set_weight_decay(wd);
  return s;
}

v1::OptimSpec AdamWSpec() {
  v1::OptimSpec s;
  s.set_kind("adamw");
  s.set_lr(0.01);
  s.set_weight_decay(0.1);  // beta1/beta2/eps left 0: PyTorch's defaults
  return s;
}

// Runs the four golden steps; returns the max relative error.
void ExpectTrajectory(const v1::OptimSpec& spec, int warmup, const std::vector<Golden>& want) {
  auto p = torch::tensor({0.5f, -1.25f, 2.0f, 0.125f}).requires_grad_(true);
  p.mutable_grad() = torch::zeros({4});
  auto opt = Optimizer::Create(spec, {p});
  ASSERT_TRUE(opt.ok()) << opt.status().ToString();
  for (size_t s = 0; s < want.size(); ++s) {
    p.grad().copy_(torch::tensor(kGrads[s]));
    const double lr = ScheduledLr(spec.lr(), warmup, static_cast<int64_t>(s));
    EXPECT_DOUBLE_EQ(lr, want[s].lr) << "step " << s;
    const double sq = (*opt)->Step(lr, /*zero_grad=*/true);
    double want_sq = 0;
    for (float g : kGrads[s]) want_sq += static_cast<double>(g) * g;
    EXPECT_NEAR(sq, want_sq, 1e-6 * want_sq);
    EXPECT_EQ(p.grad().abs().sum().item<float>(), 0.0f) << "zero_grad";
    for (int i = 0; i < 4; ++i) {
      const float got = p.detach()[i].item<float>();
      EXPECT_NEAR(got, want[s].param[i], 1e-6 * std::abs(want[s].param[i]) + 1e-8)
          << spec.kind() << " step " << s << " element " << i;
    }
  }
  EXPECT_EQ((*opt)->steps(), static_cast<int64_t>(want.size()));
}

TEST(OptimTest, SgdMomentumWeightDecayMatchesPyTorch) {
  ExpectTrajectory(Sgd(0.1, 0.9, 0.01), 0,
                   {{0.1, {0.489499986f, -1.22874999f, 1.96800005f, 0.164875001f}},
                    {0.1, {0.474560499f, -1.25839627f, 1.96223199f, 0.050597623f}},
                    {0.1, {0.490640402f, -1.30381954f, 1.94507861f, -0.0523026101f}},
                    {0.1, {0.404621661f, -1.24339664f, 1.87769544f, -0.094860509f}}});
}

TEST(OptimTest, SgdWithWarmupMatchesPyTorchLambdaLR) {
  ExpectTrajectory(Sgd(0.1, 0.9, 0.01), 3,
                   {{0.03333333333333333, {0.496499985f, -1.2429167f, 1.98933339f, 0.138291672f}},
                    {0.06666666666666667, {0.486535639f, -1.26267147f, 1.98547387f, 0.0621244721f}},
                    {0.1, {0.502597272f, -1.30807769f, 1.96827805f, -0.0407633632f}},
                    {0.1, {0.41655013f, -1.24763525f, 1.90083349f, -0.0833216459f}}});
}

TEST(OptimTest, AdamWMatchesPyTorch) {
  ExpectTrajectory(AdamWSpec(), 0,
                   {{0.01, {0.489500016f, -1.23874998f, 1.98800004f, 0.134875f}},
                    {0.01, {0.479688704f, -1.24193347f, 1.98563087f, 0.129275471f}},
                    {0.01, {0.482681274f, -1.24612093f, 1.98177397f, 0.124922f}},
                    {0.01, {0.477530479f, -1.24204826f, 1.97430456f, 0.123287037f}}});
}

TEST(OptimTest, AdamWWithWarmupMatchesPyTorchLambdaLR) {
  ExpectTrajectory(AdamWSpec(), 3,
                   {{0.003333333333333333, {0.496500015f, -1.24625003f, 1.99600005f, 0.128291667f}},
                    {0.006666666666666666, {0.489954472f, -1.24836719f, 1.99441516f, 0.124563023f}},
                    {0.01, {0.49293676f, -1.25254822f, 1.99054945f, 0.120214261f}},
                    {0.01, {0.487775713f, -1.24846911f, 1.98307121f, 0.118584007f}}});
}

// Large tensors take the vectorised path; LibTorch's own optimisers
// implement the same PyTorch maths op by op.
TEST(OptimTest, FusedSgdAgreesWithLibTorchOnLargeTensors) {
  for (double momentum : {0.0, 0.9}) {
    for (double wd : {0.0, 1e-3}) {
      torch::manual_seed(3);
      auto a = torch::randn({1037, 3}).requires_grad_(true);  // odd size: vector body and scalar tail
      auto b = a.detach().clone().requires_grad_(true);
      a.mutable_grad() = torch::zeros_like(a);
      auto opt = Optimizer::Create(Sgd(0.05, momentum, wd), {a});
      ASSERT_TRUE(opt.ok());
      torch::optim::SGD ref({b}, torch::optim::SGDOptions(0.05).momentum(momentum).weight_decay(wd));
      for (int s = 0; s < 5; ++s) {
        auto g = torch::randn({1037, 3});
        a.grad().copy_(g);
        b.mutable_grad() = g.clone();
        const double sq = (*opt)->Step(0.05, false);
        ref.step();
        EXPECT_NEAR(sq, g.pow(2).sum().item<double>(), 1e-4 * sq);
        EXPECT_TRUE(torch::allclose(a.grad(), g)) << "zero_grad=false must leave grads";
      }
      EXPECT_TRUE(torch::allclose(a, b, 1e-6, 1e-7))
          << "momentum " << momentum << " wd " << wd << " max diff " << (a - b).abs().max().item<float>();
    }
  }
}

TEST(OptimTest, AdamWBitwiseLikeLibTorch) {
  torch::manual_seed(4);
  auto a = torch::randn({300}).requires_grad_(true);
  auto b = a.detach().clone().requires_grad_(true);
  a.mutable_grad() = torch::zeros_like(a);
  v1::OptimSpec spec = AdamWSpec();
  auto opt = Optimizer::Create(spec, {a});
  ASSERT_TRUE(opt.ok());
  torch::optim::AdamW ref({b}, torch::optim::AdamWOptions(0.01).weight_decay(0.1));
  for (int s = 0; s < 6; ++s) {
    auto g = torch::randn({300});
    a.grad().copy_(g);
    b.mutable_grad() = g.clone();
    (*opt)->Step(0.01, true);
    ref.step();
  }
  EXPECT_TRUE(torch::equal(a, b)) << (a - b).abs().max().item<float>();
}

TEST(OptimTest, StateRoundTripContinuesIdentically) {
  for (const auto& spec : {Sgd(0.1, 0.9, 0.01), AdamWSpec()}) {
    torch::manual_seed(5);
    auto a = torch::randn({64}).requires_grad_(true);
    a.mutable_grad() = torch::zeros_like(a);
    auto opt = Optimizer::Create(spec, {a});
    ASSERT_TRUE(opt.ok());
    std::vector<at::Tensor> grads;
    for (int s = 0; s < 6; ++s) grads.push_back(torch::randn({64}));
    for (int s = 0; s < 3; ++s) {
      a.grad().copy_(grads[s]);
      (*opt)->Step(0.1, true);
    }
    auto saved_param = a.detach().clone();
    std::vector<std::pair<std::string, at::Tensor>> saved;
    for (const auto& [k, v] : (*opt)->State()) saved.emplace_back(k, v.clone());
    EXPECT_GT((*opt)->state_bytes(), 0);
    for (int s = 3; s < 6; ++s) {
      a.grad().copy_(grads[s]);
      (*opt)->Step(0.1, true);
    }
    auto straight = a.detach().clone();

    auto b = saved_param.clone().requires_grad_(true);
    b.mutable_grad() = torch::zeros_like(b);
    auto resumed = Optimizer::Create(spec, {b});
    ASSERT_TRUE(resumed.ok());
    ASSERT_TRUE((*resumed)->LoadState(saved).ok());
    EXPECT_EQ((*resumed)->steps(), 3);
    for (int s = 3; s < 6; ++s) {
      b.grad().copy_(grads[s]);
      (*resumed)->Step(0.1, true);
    }
    EXPECT_TRUE(torch::equal(b, straight)) << spec.kind();
  }
  auto p = torch::zeros({4}).requires_grad_(true);
  auto opt = Optimizer::Create(Sgd(0.1, 0.9, 0), {p});
  ASSERT_TRUE(opt.ok());
  EXPECT_FALSE((*opt)->LoadState({{"momentum_buffer.0", torch::zeros({5})}}).ok());
  EXPECT_FALSE((*opt)->LoadState({{"momentum_buffer.7", torch::zeros({4})}}).ok());
  EXPECT_FALSE((*opt)->LoadState({{"exp_avg.0", torch::zeros({4})}}).ok());
}

TEST(OptimTest, LearningRateScalingRules) {
  v1::OptimSpec s = Sgd(0.1, 0.9, 0);
  EXPECT_DOUBLE_EQ(ScaledLr(s, 1024), 0.1);  // no rule
  s.set_reference_global_batch(256);
  s.set_lr_scaling("linear");
  EXPECT_DOUBLE_EQ(ScaledLr(s, 1024), 0.4);
  EXPECT_DOUBLE_EQ(ScaledLr(s, 128), 0.05);
  s.set_lr_scaling("sqrt");
  EXPECT_DOUBLE_EQ(ScaledLr(s, 1024), 0.2);
  s.set_lr_scaling("none");
  EXPECT_DOUBLE_EQ(ScaledLr(s, 1024), 0.1);

  EXPECT_DOUBLE_EQ(ScheduledLr(0.4, 0, 0), 0.4);
  EXPECT_DOUBLE_EQ(ScheduledLr(0.4, 4, 0), 0.1);
  EXPECT_DOUBLE_EQ(ScheduledLr(0.4, 4, 3), 0.4);
  EXPECT_DOUBLE_EQ(ScheduledLr(0.4, 4, 100), 0.4);
}

TEST(OptimTest, ValidationNamesTheField) {
  auto msg = [](const v1::OptimSpec& s) { return ValidateOptimSpec(s).message(); };
  EXPECT_TRUE(ValidateOptimSpec(Sgd(0.1, 0.9, 0)).ok());
  EXPECT_TRUE(ValidateOptimSpec(AdamWSpec()).ok());
  v1::OptimSpec s = Sgd(0.1, 0.9, 0);
  s.set_kind("adam");
  EXPECT_NE(msg(s).find("optim.kind"), std::string::npos);
  s = Sgd(0, 0.9, 0);
  EXPECT_NE(msg(s).find("optim.lr"), std::string::npos);
  s = Sgd(0.1, 1.0, 0);
  EXPECT_NE(msg(s).find("optim.momentum"), std::string::npos);
  s = Sgd(0.1, 0.9, 0);
  s.set_lr_scaling("linear");
  EXPECT_NE(msg(s).find("reference_global_batch"), std::string::npos);
  s.set_lr_scaling("cubic");
  EXPECT_NE(msg(s).find("optim.lr_scaling"), std::string::npos);
  s = Sgd(0.1, 0.9, 0);
  s.set_warmup_steps(-1);
  EXPECT_NE(msg(s).find("optim.warmup_steps"), std::string::npos);
}

}  // namespace
}  // namespace firedrill::agent
