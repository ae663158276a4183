// gpt-tiny: it learns the shipped text, it cannot peek at the future,
// padding is invisible to the loss, checkpointing changes nothing, and both
// models answer through TrainModel.
#include "agent/gpt.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <numeric>
#include <set>

#include "agent/data.h"
#include "agent/model.h"

namespace firedrill::agent {
namespace {

GptConfig SmallConfig() {
  GptConfig c;
  c.vocab_size = 256;
  c.seq_len = 64;
  c.d_model = 64;
  c.layers = 2;
  c.heads = 2;
  return c;
}

Gpt MustBuild(const GptConfig& c, uint64_t seed) {
  auto g = BuildGpt(c, seed);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return std::move(g).value();
}

v1::ModelSpec GptSpec() {
  v1::ModelSpec s;
  s.set_kind("gpt-tiny");
  s.set_hidden(64);
  s.set_layers(2);
  s.set_heads(2);
  s.set_seq_len(64);
  return s;
}

double Mean(const std::vector<double>& v, size_t from, size_t n) {
  return std::accumulate(v.begin() + from, v.begin() + from + n, 0.0) / static_cast<double>(n);
}

TEST(Gpt, LossFallsOnShippedText) {
  at::set_num_threads(1);
  auto model = CreateModel(GptSpec(), 1);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  DataOptions o;
  o.kind = DataKind::kTokens;
  o.batch_size = 16;
  o.seq_len = 64;
  DataLoader loader(o, 0);
  torch::optim::AdamW opt((*model)->parameters(), torch::optim::AdamWOptions(3e-3).weight_decay(0.0));

  const int steps = 200;
  std::vector<double> losses;
  const auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s) {
    auto batch = loader.Next();
    ASSERT_TRUE(batch.ok()) << batch.status().ToString();
    auto loss = (*model)->Loss(*batch);
    ASSERT_TRUE(loss.ok()) << loss.status().ToString();
    opt.zero_grad();
    loss->backward();
    opt.step();
    losses.push_back(loss->item<double>());
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double first = Mean(losses, 0, 20), last = Mean(losses, steps - 20, 20);
  std::printf("gpt-tiny %d steps in %.2f s (%.1f ms/step): loss %.3f -> %.3f\n", steps, secs,
              1000 * secs / steps, first, last);
  EXPECT_NEAR(losses[0], std::log(256.0), 0.5);  // starts near uniform over bytes
  EXPECT_LT(last, 0.8 * first);
}

TEST(Gpt, CausalMaskPreventsPeeking) {
  Gpt g = MustBuild(SmallConfig(), 3);
  torch::NoGradGuard no_grad;
  at::Tensor in = at::randint(0, 256, {2, 16}, at::kLong);
  at::Tensor changed = in.clone();
  changed.select(1, 10).fill_(0);
  changed.select(1, 10).add_(in.select(1, 10).add(1).remainder(256));  // a different token at position 10
  const at::Tensor a = g->Logits(in, {}), b = g->Logits(changed, {});
  EXPECT_TRUE(at::allclose(a.narrow(1, 0, 10), b.narrow(1, 0, 10), 0, 0))
      << "positions before 10 saw token 10";
  EXPECT_FALSE(at::allclose(a.narrow(1, 10, 6), b.narrow(1, 10, 6))) << "position 10 onwards must see it";
}

TEST(Gpt, PaddingDoesNotAffectTheLoss) {
  Gpt g = MustBuild(SmallConfig(), 4);
  torch::NoGradGuard no_grad;
  std::vector<std::vector<int32_t>> windows = {{72, 101, 108, 108, 111, 32, 119, 111, 114, 108, 100},
                                               {65, 32, 102, 111, 120},
                                               {84, 104, 101, 32, 101, 110}};
  Batch b = PadSequences(windows);
  const at::Tensor loss = g->Loss(b.x, b.y, b.mask);

  // Whatever sits in the padded positions, the loss is the same...
  at::Tensor noisy = b.x.clone();
  noisy.masked_scatter_(b.mask.logical_not(), at::randint(1, 256, {b.x.numel()}, at::kLong));
  EXPECT_TRUE(at::allclose(loss, g->Loss(noisy, b.y, b.mask), 0, 1e-6));

  // ...and equals the token-weighted mean of each sequence's loss unpadded.
  double sum = 0;
  for (const auto& w : windows) {
    Batch one = PadSequences({w});
    sum += g->Loss(one.x, one.y, {}).item<double>() * static_cast<double>(one.tokens);
  }
  EXPECT_NEAR(loss.item<double>(), sum / static_cast<double>(b.tokens), 1e-5);
}

TEST(Gpt, ActivationCheckpointingGivesTheSameGradients) {
  GptConfig c = SmallConfig();
  c.seq_len = 32;
  Gpt plain = MustBuild(c, 5);
  c.activation_checkpointing = true;
  Gpt ckpt = MustBuild(c, 5);
  Batch b = PadSequences({{1, 2, 3, 4, 5, 6, 7, 8, 9}, {10, 11, 12, 13}});
  const at::Tensor la = plain->Loss(b.x, b.y, b.mask), lb = ckpt->Loss(b.x, b.y, b.mask);
  // The checkpointed graph really holds one recomputing node per block.
  auto count_nodes = [](const at::Tensor& loss, const std::string& needle) {
    int found = 0;
    std::vector<torch::autograd::Node*> todo{loss.grad_fn().get()};
    std::set<torch::autograd::Node*> seen;
    while (!todo.empty()) {
      auto* n = todo.back();
      todo.pop_back();
      if (n == nullptr || !seen.insert(n).second) continue;
      if (n->name().find(needle) != std::string::npos) ++found;
      for (const auto& e : n->next_edges()) todo.push_back(e.function.get());
    }
    return found;
  };
  EXPECT_EQ(count_nodes(lb, "CheckpointedBlock"), 2);
  EXPECT_EQ(count_nodes(la, "CheckpointedBlock"), 0);
  EXPECT_GT(count_nodes(la, "Softmax"), count_nodes(lb, "Softmax"));  // block internals not kept
  la.backward();
  lb.backward();
  EXPECT_TRUE(at::allclose(la, lb, 0, 1e-6));
  const auto pa = plain->named_parameters(), pb = ckpt->named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    ASSERT_TRUE(pb[i].value().grad().defined()) << pb[i].key();
    EXPECT_TRUE(at::allclose(pa[i].value().grad(), pb[i].value().grad(), 1e-5, 1e-7)) << pa[i].key();
  }
}

TEST(Gpt, InitIsSeededAndLeavesTheGlobalRngAlone) {
  torch::manual_seed(123);
  const at::Tensor expected = torch::rand({4});
  torch::manual_seed(123);
  Gpt a = MustBuild(SmallConfig(), 9);
  EXPECT_TRUE(at::equal(torch::rand({4}), expected)) << "building the model drew from the global RNG";

  Gpt b = MustBuild(SmallConfig(), 9), c = MustBuild(SmallConfig(), 10);
  const auto pa = a->parameters(), pb = b->parameters(), pc = c->parameters();
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(at::equal(pa[i], pb[i]));
  EXPECT_FALSE(at::equal(pa[0], pc[0]));
}

TEST(Gpt, ShapeNamesAndFlops) {
  GptConfig c = SmallConfig();
  Gpt g = MustBuild(c, 1);
  const int64_t d = 64, v = 256, t = 64, l = 2;
  const int64_t per_block =
      2 * d + (3 * d * d + 3 * d) + (d * d + d) + 2 * d + (4 * d * d + 4 * d) + (4 * d * d + d);
  int64_t n = 0;
  for (const auto& p : g->parameters()) n += p.numel();
  EXPECT_EQ(n, v * d + t * d + l * per_block + 2 * d);  // tied head: no extra V x d
  EXPECT_TRUE(g->named_parameters().contains("h.1.attn.c_attn.weight"));
  EXPECT_TRUE(g->named_parameters().contains("ln_f.bias"));
  EXPECT_FALSE(g->named_parameters().contains("lm_head.weight"));
  EXPECT_EQ(g->MatmulParams(), l * 12 * d * d + v * d);
  EXPECT_DOUBLE_EQ(g->TrainFlopsPerToken(t), 6.0 * (l * 12 * d * d + v * d) + 12.0 * l * d * t);

  c.tie_embeddings = false;
  EXPECT_TRUE(MustBuild(c, 1)->named_parameters().contains("lm_head.weight"));
  c.heads = 3;
  EXPECT_EQ(BuildGpt(c, 1).status().code(), StatusCode::kInvalidArgument);
}

// The first batch of 8 rows of 16 inputs, 4 classes.
Batch ClassificationBatch() {
  DataOptions o;
  o.batch_size = 8;
  o.input_dim = 16;
  o.num_classes = 4;
  SampleSource src(o);
  return src.Make(0);
}

TEST(TrainModel, MlpThroughTheInterfaceMatchesBuildModel) {
  v1::ModelSpec spec;
  spec.set_kind("mlp");
  spec.set_input_dim(16);
  spec.set_hidden(32);
  spec.set_layers(2);
  spec.set_num_classes(4);
  auto seq = BuildModel(spec, 11);
  auto model = CreateModel(spec, 11);
  ASSERT_TRUE(seq.ok() && model.ok());
  EXPECT_EQ((*model)->kind(), "mlp");
  const auto ps = (*seq)->parameters(), pm = (*model)->parameters();
  ASSERT_EQ(ps.size(), pm.size());
  for (size_t i = 0; i < ps.size(); ++i) EXPECT_TRUE(at::equal(ps[i], pm[i]));

  Batch b = ClassificationBatch();
  auto loss = (*model)->Loss(b);
  ASSERT_TRUE(loss.ok());
  EXPECT_TRUE(at::equal(*loss, torch::nn::functional::cross_entropy((*seq)->forward(b.x), b.y)));
  EXPECT_DOUBLE_EQ((*model)->TrainFlopsPerToken(0), 6.0 * (16 * 32 + 32 * 32 + 32 * 4));

  // The wrong kind of batch is a Status, not an exception.
  auto gpt = CreateModel(GptSpec(), 1);
  ASSERT_TRUE(gpt.ok());
  EXPECT_EQ((*gpt)->Loss(b).status().code(), StatusCode::kInvalidArgument);
  Batch too_long = PadSequences({std::vector<int32_t>(100, 7)});
  EXPECT_EQ((*gpt)->Loss(too_long).status().code(), StatusCode::kInternal);

  spec.set_kind("rnn");
  EXPECT_EQ(CreateModel(spec, 1).status().code(), StatusCode::kInvalidArgument);
}

// model.norm: layer puts a LayerNorm after each hidden Linear, before the
// ReLU, as nn::Sequential would run it; the rest of the weights are drawn
// as without it.
TEST(TrainModel, MlpWithLayerNormMatchesItsSequentialAndKeepsTheLinearWeights) {
  v1::ModelSpec spec;
  spec.set_kind("mlp");
  spec.set_input_dim(16);
  spec.set_hidden(32);
  spec.set_layers(3);
  spec.set_num_classes(4);
  auto plain = CreateModel(spec, 5);
  spec.set_norm("layer");
  auto seq = BuildModel(spec, 5);
  auto model = CreateModel(spec, 5);
  ASSERT_TRUE(plain.ok() && seq.ok() && model.ok());
  const auto ps = (*seq)->parameters(), pm = (*model)->parameters(), pp = (*plain)->parameters();
  ASSERT_EQ(pm.size(), pp.size() + 2 * 3);  // a weight and a bias per hidden layer
  for (size_t i = 0; i < ps.size(); ++i) EXPECT_TRUE(at::equal(ps[i], pm[i]));
  const auto named = (*seq)->named_parameters();
  EXPECT_TRUE(at::equal(named["1.weight"], at::ones({32})));  // Linear, LayerNorm, ReLU, ...
  EXPECT_TRUE(at::equal(named["3.weight"], pp[2]));

  Batch b = ClassificationBatch();
  auto loss = (*model)->Loss(b);
  ASSERT_TRUE(loss.ok());
  EXPECT_TRUE(at::allclose(*loss, torch::nn::functional::cross_entropy((*seq)->forward(b.x), b.y)));
  EXPECT_FALSE(at::allclose(*loss, *(*plain)->Loss(b)));

  spec.set_norm("batch");
  EXPECT_NE(CreateModel(spec, 1).status().message().find("model.norm must be \"none\" or \"layer\""),
            std::string::npos);
  v1::ModelSpec gpt = GptSpec();
  gpt.set_norm("none");
  EXPECT_NE(CreateModel(gpt, 1).status().message().find("gpt-tiny is pre-LN"), std::string::npos);
  gpt.set_norm("layer");
  EXPECT_TRUE(CreateModel(gpt, 1).ok());
}

}  // namespace
}  // namespace firedrill::agent
