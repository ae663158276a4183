// fp16 storage and rounding, and bf16 compute semantics (agent/precision.h).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "agent/loss_scaler.h"
#include "agent/model.h"
#include "agent/precision.h"
#include "firedrill/v1/scenario.pb.h"

namespace firedrill::agent {
namespace {

const Precision kFp32(Precision::Kind::kFp32);
const Precision kBf16(Precision::Kind::kBf16);
const Precision kFp16(Precision::Kind::kFp16);

constexpr double kHalfEps = 1.0 / 2048;                       // 2^-11: half's relative rounding error
constexpr float kHalfMinSubnormal = 5.9604644775390625e-08f;  // 2^-24

float At(const at::Tensor& t, int64_t i) { return t.reshape({-1})[i].item<float>(); }

// x (fp32, positive) stored in half and through one fp16 op (ReLU, which
// passes positive values and their gradients unchanged): what a gradient
// flowing back through an fp16 activation becomes.
at::Tensor ThroughHalf(const at::Tensor& x) { return Relu(MakeSeam(kFp16), kFp16.Boundary(x)); }

TEST(Precision, FromJobNames) {
  v1::JobSpec job;
  for (auto [name, kind] : {std::pair{"", Precision::Kind::kFp32},
                            {"fp32", Precision::Kind::kFp32},
                            {"bf16", Precision::Kind::kBf16},
                            {"fp16", Precision::Kind::kFp16}}) {
    job.set_precision(name);
    auto p = Precision::FromJob(job);
    ASSERT_TRUE(p.ok()) << name;
    EXPECT_EQ(p->kind(), kind);
  }
  job.set_precision("fp8");
  EXPECT_EQ(Precision::FromJob(job).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(kFp16.needs_loss_scaling());
  EXPECT_FALSE(kBf16.needs_loss_scaling());
  EXPECT_FALSE(kFp32.needs_loss_scaling());
  EXPECT_EQ(kBf16.compute_dtype(), at::kBFloat16);
  EXPECT_EQ(kFp16.compute_dtype(), at::kFloat);
  EXPECT_EQ(kFp16.storage_dtype(), at::kHalf);
}

TEST(Fp16, ForwardOverflowsAboveHalfMax) {
  auto x = torch::tensor({70000.f, 65504.f, 65519.f, 65520.f, -70000.f, 1.f});
  auto y = kFp16.Boundary(x);
  EXPECT_EQ(y.scalar_type(), at::kHalf) << "stored in 2 bytes";
  EXPECT_TRUE(std::isinf(At(y, 0)) && At(y, 0) > 0);
  EXPECT_EQ(At(y, 1), 65504.f);       // half's largest finite value
  EXPECT_EQ(At(y, 2), 65504.f);       // rounds down
  EXPECT_TRUE(std::isinf(At(y, 3)));  // halfway to 65536 rounds to even: inf
  EXPECT_TRUE(std::isinf(At(y, 4)) && At(y, 4) < 0);
  EXPECT_EQ(At(y, 5), 1.f);
}

TEST(Fp16, TinyGradientsFlushToZeroInBackward) {
  auto x = torch::ones({4}, torch::requires_grad());
  auto y = ThroughHalf(x);
  auto g = torch::tensor({1e-8f, 1e-4f, 3e-8f, 2e-8f});
  y.backward(g);
  const auto gx = x.grad();
  EXPECT_EQ(At(gx, 0), 0.f) << "1e-8 is below half's subnormals";
  EXPECT_NEAR(At(gx, 1), 1e-4, 1e-4 * kHalfEps);
  EXPECT_NE(At(gx, 1), 1e-4f) << "and is rounded, not passed through";
  EXPECT_EQ(At(gx, 2), kHalfMinSubnormal) << "3e-8 rounds up to 2^-24";
  EXPECT_EQ(At(gx, 3), 0.f) << "2e-8 < 2^-25 rounds to 0";
}

TEST(Fp16, BackwardOverflowsToo) {
  auto x = torch::ones({2}, torch::requires_grad());
  ThroughHalf(x).backward(torch::tensor({1e5f, 1.f}));
  EXPECT_TRUE(std::isinf(At(x.grad(), 0)));
  EXPECT_EQ(At(x.grad(), 1), 1.f);
}

TEST(Fp16, LossScalingRescuesATinyGradient) {
  auto scaler = LossScaler::Create({});  // GradScaler defaults
  ASSERT_TRUE(scaler.ok());
  auto w = torch::ones({1}, torch::requires_grad());
  auto x = torch::full({1}, 1e-8f);
  // loss = sum(Weight(w) * x): d loss / dw = 1e-8, which fp16 flushes.
  auto loss = (kFp16.Weight(w) * x).sum();
  (loss * scaler->scale()).backward();
  const float scaled = At(w.grad(), 0);
  EXPECT_NEAR(scaled, 1e-8 * 65536, 1e-8 * 65536 * kHalfEps) << "survives half thanks to the scale";
  EXPECT_FALSE(UnscaleAndCheck(w.grad(), scaler->inv_scale()));
  EXPECT_NEAR(At(w.grad(), 0), 1e-8, 1e-8 * kHalfEps);

  // Without the scale the same gradient is lost.
  auto w2 = torch::ones({1}, torch::requires_grad());
  (kFp16.Weight(w2) * x).sum().backward();
  EXPECT_EQ(At(w2.grad(), 0), 0.f);
}

TEST(Fp16, TooLargeScaleOverflowsAndTheStepIsSkipped) {
  auto scaler = LossScaler::Create({});
  ASSERT_TRUE(scaler.ok());
  auto w = torch::ones({2}, torch::requires_grad());
  auto x = torch::tensor({2.f, 1e-3f});
  ((kFp16.Weight(w) * x).sum() * scaler->scale()).backward();  // 2 * 65536 > 65504
  const bool found_inf = UnscaleAndCheck(w.grad(), scaler->inv_scale());
  EXPECT_TRUE(found_inf);
  EXPECT_TRUE(scaler->ShouldSkipStep(found_inf));
  scaler->Update(found_inf);
  EXPECT_EQ(scaler->scale(), 32768.0);
  EXPECT_EQ(scaler->skipped_total(), 1);
}

TEST(Fp16, LinearRoundsWeightsAndGradientsThroughHalf) {
  auto w = torch::full({1, 1}, 1.f + std::ldexp(1.f, -12), torch::requires_grad());  // not a half
  auto b = torch::zeros({1}, torch::requires_grad());
  auto x = torch::full({3, 1}, 0.1f);
  auto y = Linear(kFp16, x, w, b);
  EXPECT_EQ(y.scalar_type(), at::kHalf);
  const float x_half = torch::full({1}, 0.1f).to(at::kHalf).to(at::kFloat).item<float>();
  EXPECT_EQ(At(y, 0), x_half) << "w rounded to 1, x to the nearest half";
  y.sum().backward();
  EXPECT_EQ(w.grad().scalar_type(), at::kFloat) << "fp32 master gradient";
  EXPECT_TRUE(w.grad().equal(w.grad().to(at::kHalf).to(at::kFloat))) << "holding an fp16 value";
  EXPECT_EQ(b.grad().item<float>(), 3.f);
  // A weight too large for half is inf in forward.
  auto big = torch::full({1, 1}, 70000.f);
  EXPECT_TRUE(std::isinf(At(Linear(kFp16, torch::ones({1, 1}), big, at::Tensor()), 0)));
}

// Every seam op in fp16 and bf16, forward and backward, against the same op
// in fp32 on the same (2-byte) values: the output and each gradient differ
// only by the 2-byte dtype's rounding, activations and their gradients are
// 2-byte tensors, and LayerNorm's fp32 parameters get fp32 gradients.
TEST(LowPrecision, EverySeamOpMatchesFp32OnTheSameValues) {
  for (const auto& [prec, eps] : {std::pair{kFp16, kHalfEps}, {kBf16, 1.0 / 256}}) {
    SCOPED_TRACE(prec.name());
    const ComputeSeam seam = MakeSeam(prec);
    const at::ScalarType low = prec.storage_dtype();
    torch::manual_seed(3);
    auto rounded = [&](std::vector<int64_t> shape) { return torch::randn(shape).to(low).to(at::kFloat); };
    struct Case {
      SeamOp op;
      std::vector<at::Tensor> in;  // fp32 holding 2-byte values
      double arg;
    };
    const std::vector<Case> cases = {
        {SeamOp::kLinear, {rounded({6, 5}), rounded({4, 5}), rounded({4})}, 0.0},
        {SeamOp::kLinear, {rounded({2, 3, 5}), rounded({4, 5})}, 0.0},
        {SeamOp::kRelu, {rounded({6, 5})}, 0.0},
        {SeamOp::kGelu, {rounded({6, 5})}, 0.0},
        {SeamOp::kLayerNorm, {rounded({6, 5}), torch::rand({5}) + 0.5, torch::randn({5})}, 1e-5},
        {SeamOp::kSoftmax, {rounded({2, 3, 7})}, 0.0},
        {SeamOp::kScores, {rounded({2, 3, 4}), rounded({2, 3, 4})}, 0.5},
        {SeamOp::kMatmul, {rounded({2, 3, 3}), rounded({2, 3, 4})}, 0.0},
    };
    for (const auto& c : cases) {
      SCOPED_TRACE(static_cast<int>(c.op));
      const bool ln = c.op == SeamOp::kLayerNorm;
      std::vector<at::Tensor> ref_in, low_in, low_leaf;
      for (size_t i = 0; i < c.in.size(); ++i) {
        ref_in.push_back(c.in[i].clone().requires_grad_(true));
        low_leaf.push_back(c.in[i].clone().requires_grad_(true));
        // Activations enter in 2 bytes; LayerNorm's parameters in fp32.
        low_in.push_back(ln && i > 0 ? low_leaf[i] : low_leaf[i].to(low));
      }
      const at::Tensor ref = RunOp(c.op, ref_in, c.arg);
      const at::Tensor out = seam.op(c.op, low_in, c.arg);
      EXPECT_EQ(out.scalar_type(), low);
      EXPECT_TRUE(out.to(at::kFloat).allclose(ref.detach(), 4 * eps, 1e-3)) << c.in[0].sizes();
      const at::Tensor g = torch::randn(ref.sizes());
      ref.backward(g);
      out.backward(g.to(low));
      for (size_t i = 0; i < c.in.size(); ++i) {
        const at::Tensor got = low_leaf[i].grad(), want = ref_in[i].grad();
        ASSERT_TRUE(got.defined()) << "input " << i;
        EXPECT_EQ(got.scalar_type(), at::kFloat) << "the cast's backward hands fp32 back";
        EXPECT_TRUE(got.allclose(want, 8 * eps, 8 * eps))
            << "input " << i << ": " << (got - want).abs().max();
        if (!(ln && i > 0)) {
          EXPECT_TRUE(got.equal(got.to(low).to(at::kFloat))) << "input " << i << " went back in 2 bytes";
        }
      }
    }
  }
}

TEST(Bf16, ComputeRunsInBf16WithFp32MasterGrads) {
  const float v = 1.f + std::ldexp(1.f, -9);  // exact in fp32, not in bf16 (8-bit significand)
  auto x = torch::full({2, 1}, v);
  auto w = torch::ones({1, 1}, torch::requires_grad());
  auto b = torch::zeros({1}, torch::requires_grad());
  auto y = Linear(kBf16, x, w, b);
  EXPECT_EQ(y.scalar_type(), at::kBFloat16);
  EXPECT_EQ(y.to(at::kFloat)[0][0].item<float>(), 1.f) << "1 + 2^-9 rounded away in bf16";
  EXPECT_EQ(Linear(kFp32, x, w.detach(), b.detach())[0][0].item<float>(), v);

  kBf16.Output(y).sum().backward();
  EXPECT_EQ(w.grad().scalar_type(), at::kFloat);
  EXPECT_EQ(b.grad().scalar_type(), at::kFloat);
  EXPECT_EQ(w.grad().item<float>(), 2.f);  // the bf16 x (1.0) summed over 2 rows
  EXPECT_EQ(b.grad().item<float>(), 2.f);
}

TEST(Bf16, MlpMatchesFp32WithinBf16Error) {
  torch::manual_seed(0);
  auto w1 = torch::randn({64, 32}, torch::requires_grad());
  auto w2 = torch::randn({8, 64}, torch::requires_grad());
  auto x = torch::randn({16, 32});
  auto run = [&](const Precision& p) {
    auto h = torch::relu(Linear(p, p.Input(x), w1, at::Tensor()));
    return p.Output(Linear(p, h, w2, at::Tensor()));
  };
  auto ref = run(kFp32).detach();
  auto out = run(kBf16);
  EXPECT_EQ(out.scalar_type(), at::kFloat);
  EXPECT_FALSE(out.detach().equal(ref)) << "bf16 must actually round";
  const double rel = ((out.detach() - ref).norm() / ref.norm()).item<double>();
  EXPECT_LT(rel, 0.05);
  out.pow(2).mean().backward();
  EXPECT_EQ(w1.grad().scalar_type(), at::kFloat);
  EXPECT_TRUE(w1.grad().isfinite().all().item<bool>());
}

TEST(Fp32, IsANoOp) {
  auto x = torch::randn({4, 3}, torch::requires_grad());
  EXPECT_TRUE(kFp32.Boundary(x).is_same(x));
  EXPECT_TRUE(kFp32.Weight(x).is_same(x));
  EXPECT_TRUE(kFp32.Input(x).is_same(x));
  EXPECT_TRUE(kFp32.Output(x).is_same(x));
  // bf16 stores activations in 2 bytes too.
  EXPECT_EQ(kBf16.Boundary(x).scalar_type(), at::kBFloat16);
  auto w = torch::randn({2, 3});
  EXPECT_TRUE(Linear(kFp32, x, w, at::Tensor()).equal(torch::nn::functional::linear(x, w)));
  // Integer inputs (token ids) are never cast.
  auto ids = torch::arange(5);
  EXPECT_TRUE(kFp16.Input(ids).is_same(ids));
  EXPECT_TRUE(kBf16.Input(ids).is_same(ids));
}

TEST(UnscaleAndCheck, UnscalesInPlaceAndFindsInfNan) {
  auto g = torch::tensor({65536.f, -131072.f, 0.f, 32.f});
  EXPECT_FALSE(UnscaleAndCheck(g, 1.0 / 65536));
  EXPECT_TRUE(g.equal(torch::tensor({1.f, -2.f, 0.f, 1.f / 2048})));

  auto n = torch::tensor({1.f, NAN, 4.f});
  EXPECT_TRUE(UnscaleAndCheck(n, 0.5));
  EXPECT_EQ(At(n, 2), 2.f) << "still unscaled, like PyTorch";
  auto i = torch::tensor({-INFINITY, 1.f});
  EXPECT_TRUE(UnscaleAndCheck(i, 1.0));

  // Large buffer, inf in the last element (the vector tail).
  auto big = torch::ones({1000003});
  big[1000002] = INFINITY;
  EXPECT_TRUE(UnscaleAndCheck(big, 0.25));
  EXPECT_EQ(At(big, 0), 0.25f);

  // Non-contiguous and per-tensor forms share the semantics.
  auto m = torch::full({4, 4}, 8.f);
  auto t = m.t();
  EXPECT_FALSE(UnscaleAndCheck(t, 0.5));
  EXPECT_TRUE(m.equal(torch::full({4, 4}, 4.f)));
  std::vector<at::Tensor> grads{torch::full({3}, 2.f), at::Tensor(), torch::tensor({1.f, INFINITY})};
  EXPECT_TRUE(UnscaleAndCheck(grads, 0.5));
  EXPECT_EQ(At(grads[0], 1), 1.f);
  std::vector<at::Tensor> clean{torch::full({3}, 2.f)};
  EXPECT_FALSE(UnscaleAndCheck(clean, 0.5));
}

// model.keep_fp32 on an mlp without norms, in fp16, on inputs past 65504:
// each kept layer reads its input in fp32, and hands fp32 on to a kept
// layer after it (autocast(enabled=False) around both); the first layer
// not kept casts to 2 bytes. Only keeping every layer the large values
// reach keeps the loss finite.
TEST(LowPrecision, KeptLayersHandFp32ToTheKeptLayerAfterThem) {
  v1::ModelSpec spec;
  spec.set_kind("mlp");
  spec.set_input_dim(16);
  spec.set_hidden(32);
  spec.set_layers(2);
  spec.set_num_classes(4);
  Batch batch;
  batch.x = at::full({8, 16}, 1.0e5);
  batch.y = at::zeros({8}, at::kLong);
  auto loss_with = [&](const std::string& keep) {
    v1::ModelSpec s = spec;
    s.set_keep_fp32(keep);
    auto model = CreateModel(s, 7);
    EXPECT_TRUE(model.ok()) << model.status().message();
    (*model)->seam() = MakeSeam(kFp16);
    auto loss = (*model)->Loss(batch);
    EXPECT_TRUE(loss.ok()) << loss.status().message();
    return loss->item<double>();
  };
  EXPECT_FALSE(std::isfinite(loss_with("")));
  EXPECT_FALSE(std::isfinite(loss_with("layers.0"))) << "layers.1 gets the 1e5-sized output";
  EXPECT_TRUE(std::isfinite(loss_with("layers.0,layers.1,head")));
  v1::ModelSpec missing = spec;
  missing.set_keep_fp32("layers.2");
  EXPECT_FALSE(CreateModel(missing, 7).ok());
}

}  // namespace
}  // namespace firedrill::agent
