// Model parallelism's pieces against the whole model they split, ranks as
// threads with real Gloo groups:
// - tensor parallelism: two TP groups of two ranks (subgroups of a
//   four-rank job) each run a forward and backward of the sharded gpt-tiny
//   on their own batch; every rank compares with the unsharded model on the
//   same weights and batch: the loss, and each gradient against its part of
//   the whole model's gradient, within fp32 tolerance;
// - pipeline parallelism: the schedules' orders, stages chained by hand, and
//   two stages running GPipe and 1F1B over four micro-batches against the
//   whole model on the same batches (the same loss and gradients, and the
//   activations each schedule holds);
// - the memory model (parallel/memory_model.h): parameter counts of every
//   shard it predicts against the shards agent/gpt.h builds, activations
//   against what the tracking allocator measures over a real forward and
//   backward.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <future>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "agent/comm/process_group.h"
#include "agent/gpt.h"
#include "agent/memory.h"
#include "agent/pipeline.h"
#include "parallel/memory_model.h"

namespace firedrill::agent {
namespace {

// ---- tensor parallelism ----

// A small gpt-tiny of `layers` blocks, for the comparisons below.
GptConfig SmallConfig(int64_t layers = 2) {
  GptConfig c;
  c.vocab_size = 64;
  c.seq_len = 16;
  c.d_model = 32;
  c.layers = layers;
  c.heads = 4;
  c.mlp_ratio = 4;
  return c;
}

struct TokenBatch {
  at::Tensor x, y;
};

TokenBatch MakeBatch(const GptConfig& c, uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Tensor tokens =
      at::randint(0, c.vocab_size, {3, c.seq_len + 1}, gen, at::TensorOptions().dtype(at::kLong));
  return {tokens.narrow(1, 0, c.seq_len).contiguous(), tokens.narrow(1, 1, c.seq_len).contiguous()};
}

struct Pass {
  double loss = 0;
  std::map<std::string, at::Tensor> grads;
};

Pass ForwardBackward(Gpt& model, const TokenBatch& b) {
  for (auto& p : model->parameters()) p.mutable_grad() = at::Tensor();
  at::Tensor loss = model->Loss(b.x, b.y, at::Tensor());
  loss.backward();
  Pass out;
  out.loss = loss.item<double>();
  for (const auto& np : model->named_parameters()) out.grads[np.key()] = np.value().grad().clone();
  return out;
}

struct RankOutcome {
  std::string error;
  double whole_loss = 0, shard_loss = 0;
  int checked = 0;       // gradients compared
  std::string mismatch;  // the first gradient that differs
  int64_t tp_collectives = 0;
  // The groups stay up until every rank is done: rank 0's hosts the store
  // the others' rendezvous goes through.
  std::shared_ptr<comm::ProcessGroup> job, tp;
};

RankOutcome RunRank(int rank, int world, std::promise<int>* port_out, std::shared_future<int> port_in,
                    bool checkpointing) {
  RankOutcome out;
  comm::GroupOptions o;
  o.rank = rank;
  o.world_size = world;
  o.timeout = std::chrono::milliseconds(20000);
  StatusOr<std::unique_ptr<comm::ProcessGroup>> pg =
      rank == 0 ? comm::ProcessGroup::HostStore(o, "127.0.0.1")
                : comm::ProcessGroup::JoinStore(o, "127.0.0.1", port_in.get());
  if (!pg.ok()) {
    out.error = pg.status().message();
    if (rank == 0) port_out->set_value(0);
    return out;
  }
  if (rank == 0) port_out->set_value((*pg)->store_port());
  // TP groups {0,1} and {2,3}: the subgroup's rank is the TP rank.
  const std::vector<int> members = rank < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3};
  auto tp = (*pg)->NewSubgroup("tp", members, std::chrono::milliseconds(20000));
  if (!tp.ok()) {
    out.error = tp.status().message();
    return out;
  }
  GptConfig whole_cfg = SmallConfig();
  whole_cfg.activation_checkpointing = checkpointing;
  GptConfig shard_cfg = whole_cfg;
  shard_cfg.tp_size = 2;
  shard_cfg.tp_rank = (*tp)->rank();
  auto whole = BuildGpt(whole_cfg, 7);
  auto shard = BuildGpt(shard_cfg, 7);
  if (!whole.ok() || !shard.ok()) {
    out.error = !whole.ok() ? whole.status().message() : shard.status().message();
    return out;
  }
  comm::ProcessGroup* group = tp->get();
  (*shard)->tp.all_reduce = [group](at::Tensor& t) { return group->AllReduceSum(t, 0); };
  const TokenBatch batch = MakeBatch(whole_cfg, 100 + static_cast<uint64_t>(members[0]));
  try {
    const Pass w = ForwardBackward(*whole, batch);
    const Pass s = ForwardBackward(*shard, batch);
    out.whole_loss = w.loss;
    out.shard_loss = s.loss;
    for (const auto& [name, g] : s.grads) {
      const at::Tensor expect = TpShard(name, w.grads.at(name), shard_cfg.tp_rank, 2);
      ++out.checked;
      if (!g.sizes().equals(expect.sizes()) || !at::allclose(g, expect, 1e-4, 1e-6)) {
        if (out.mismatch.empty())
          out.mismatch = name + ": max diff " + std::to_string((g - expect).abs().max().item<double>());
      }
    }
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  out.tp_collectives = group->seq();
  out.job = std::move(pg).value();
  out.tp = std::move(tp).value();
  return out;
}

void CheckTensorParallel(bool checkpointing) {
  const int world = 4;
  std::promise<int> port;
  std::shared_future<int> port_f = port.get_future().share();
  std::vector<std::future<RankOutcome>> ranks;
  for (int r = 0; r < world; ++r)
    ranks.push_back(
        std::async(std::launch::async, RunRank, r, world, r == 0 ? &port : nullptr, port_f, checkpointing));
  const int layers = static_cast<int>(SmallConfig().layers);
  std::vector<RankOutcome> outcomes;
  for (auto& f : ranks) outcomes.push_back(f.get());
  for (int r = 0; r < world; ++r) {
    const RankOutcome& o = outcomes[r];
    ASSERT_TRUE(o.error.empty()) << "rank " << r << ": " << o.error;
    EXPECT_NEAR(o.shard_loss, o.whole_loss, 1e-5 * std::abs(o.whole_loss)) << "rank " << r;
    // 2 x 12 block parameters + wte, wpe, ln_f weight and bias.
    EXPECT_EQ(o.checked, 2 * 12 + 4) << "rank " << r;
    EXPECT_TRUE(o.mismatch.empty()) << "rank " << r << ": " << o.mismatch;
    // Per block: g after attention and after the MLP forward, f's two
    // backward; recomputing a checkpointed block runs its g's again.
    EXPECT_EQ(o.tp_collectives, layers * (checkpointing ? 6 : 4)) << "rank " << r;
  }
}

TEST(TensorParallel, TwoWayShardsMatchTheWholeModel) { CheckTensorParallel(false); }

TEST(TensorParallel, TwoWayShardsMatchTheWholeModelWithActivationCheckpointing) { CheckTensorParallel(true); }

TEST(TensorParallel, ShardsAreTheirPartOfTheWholeModelsInit) {
  GptConfig c = SmallConfig();
  auto whole = BuildGpt(c, 11);
  ASSERT_TRUE(whole.ok());
  for (int64_t r = 0; r < 2; ++r) {
    GptConfig s = c;
    s.tp_size = 2;
    s.tp_rank = r;
    auto shard = BuildGpt(s, 11);
    ASSERT_TRUE(shard.ok());
    auto all = (*whole)->named_parameters();
    for (const auto& np : (*shard)->named_parameters()) {
      const at::Tensor expect = TpShard(np.key(), all[np.key()], r, 2);
      EXPECT_TRUE(at::equal(np.value(), expect)) << np.key() << " rank " << r;
    }
    EXPECT_EQ((*shard)->MatmulParams() - c.vocab_size * c.d_model,
              ((*whole)->MatmulParams() - c.vocab_size * c.d_model) / 2);
  }
  // Heads must split whole.
  GptConfig bad = c;
  bad.tp_size = 3;
  auto refused = BuildGpt(bad, 1);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("parallel.tp 3 must divide model.heads (4)"), std::string::npos)
      << refused.status().message();
}

// Three stages of a 4-block model, chained by hand: each stage's output is
// the next one's input (detached, with its gradient handed back, as the
// pipeline's send and receive do).
TEST(PipelineStages, ChainedStagesMatchTheWholeModel) {
  GptConfig c = SmallConfig();
  c.layers = 4;
  auto whole = BuildGpt(c, 5);
  ASSERT_TRUE(whole.ok());
  const TokenBatch b = MakeBatch(c, 9);
  const Pass w = ForwardBackward(*whole, b);

  const std::vector<std::pair<int64_t, int64_t>> stages{{0, 1}, {1, 2}, {3, 1}};
  std::vector<Gpt> models;
  for (const auto& [first, n] : stages) {
    GptConfig s = c;
    s.first_block = first;
    s.stage_blocks = n;
    auto m = BuildGpt(s, 5);
    ASSERT_TRUE(m.ok()) << m.status().message();
    models.push_back(*m);
  }
  EXPECT_TRUE(models[0]->first_stage() && !models[0]->last_stage());
  EXPECT_TRUE(!models[2]->first_stage() && models[2]->last_stage());
  std::vector<at::Tensor> inputs, outputs;
  at::Tensor act = b.x;
  for (size_t i = 0; i < models.size(); ++i) {
    at::Tensor in = i == 0 ? act : act.detach().requires_grad_(true);
    inputs.push_back(in);
    act = models[i]->StageForward(in, at::Tensor());
    outputs.push_back(act);
  }
  at::Tensor loss = models.back()->LossFromLogits(act, b.y);
  EXPECT_NEAR(loss.item<double>(), w.loss, 1e-6);
  loss.backward();
  for (size_t i = models.size() - 1; i-- > 0;) outputs[i].backward(inputs[i + 1].grad());

  int checked = 0;
  for (size_t i = 0; i < models.size(); ++i) {
    for (const auto& np : models[i]->named_parameters()) {
      if (np.key() == "wte.weight") continue;  // tied: below
      ++checked;
      EXPECT_TRUE(at::allclose(np.value().grad(), w.grads.at(np.key()), 1e-4, 1e-6)) << np.key();
    }
  }
  EXPECT_EQ(checked, 4 * 12 + 3);  // wpe, ln_f
  // The tied embedding: the first stage's lookup gradient plus the last
  // stage's head gradient is the whole model's (what the embedding group's
  // all-reduce sums).
  const at::Tensor wte =
      models[0]->named_parameters()["wte.weight"].grad() + models[2]->named_parameters()["wte.weight"].grad();
  EXPECT_TRUE(at::allclose(wte, w.grads.at("wte.weight"), 1e-4, 1e-6));
  EXPECT_TRUE(
      at::equal(models[0]->named_parameters()["wte.weight"], models[2]->named_parameters()["wte.weight"]));
}

// ---- pipeline parallelism ----

TEST(PipelineSchedules, EveryMicroBatchForwardThenBackwardWithinTheirBounds) {
  for (PipelineSchedule s : {PipelineSchedule::kGpipe, PipelineSchedule::kOneFOneB}) {
    for (int p : {1, 2, 4}) {
      for (int m : {1, 2, 3, 8}) {
        for (int stage = 0; stage < p; ++stage) {
          const auto ops = StageSchedule(s, stage, p, m);
          ASSERT_EQ(static_cast<int>(ops.size()), 2 * m);
          std::set<int> fwd;
          int in_flight = 0, most = 0;
          for (const auto& op : ops) {
            if (op.forward) {
              EXPECT_TRUE(fwd.insert(op.micro).second);
              most = std::max(most, ++in_flight);
            } else {
              EXPECT_TRUE(fwd.count(op.micro)) << "backward of " << op.micro << " before its forward";
              --in_flight;
            }
          }
          // GPipe holds every micro-batch; 1F1B at most p - stage.
          EXPECT_EQ(most, s == PipelineSchedule::kGpipe ? m : std::min(m, p - stage))
              << PipelineScheduleName(s) << " p " << p << " m " << m << " stage " << stage;
        }
      }
    }
  }
  // Stage 0 of 4 under 1F1B with 6 micro-batches: 3 warm-up forwards.
  const auto ops = StageSchedule(PipelineSchedule::kOneFOneB, 0, 4, 6);
  const std::vector<PipelineOp> expect{{true, 0},  {true, 1}, {true, 2},  {true, 3},  {false, 0}, {true, 4},
                                       {false, 1}, {true, 5}, {false, 2}, {false, 3}, {false, 4}, {false, 5}};
  EXPECT_EQ(ops, expect);
  EXPECT_DOUBLE_EQ(IdealBubbleFraction(4, 6), 3.0 / 9.0);
  EXPECT_FALSE(ParsePipelineSchedule("interleaved").ok());
}

std::vector<MicroBatch> Batches(const GptConfig& c, int m) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(77);
  std::vector<MicroBatch> out;
  for (int i = 0; i < m; ++i) {
    at::Tensor t =
        at::randint(0, c.vocab_size, {2, c.seq_len + 1}, gen, at::TensorOptions().dtype(at::kLong));
    out.push_back(
        {t.narrow(1, 0, c.seq_len).contiguous(), t.narrow(1, 1, c.seq_len).contiguous(), at::Tensor()});
  }
  return out;
}

struct StageOutcome {
  std::string error;
  StageStep step;
  std::map<std::string, at::Tensor> grads;
  std::shared_ptr<comm::ProcessGroup> job, pp;  // kept until both stages are done
};

StageOutcome RunStage(int stage, PipelineSchedule s, std::promise<int>* port_out,
                      std::shared_future<int> port_in) {
  StageOutcome out;
  comm::GroupOptions o;
  o.rank = stage;
  o.world_size = 2;
  o.timeout = std::chrono::milliseconds(20000);
  auto pg = stage == 0 ? comm::ProcessGroup::HostStore(o, "127.0.0.1")
                       : comm::ProcessGroup::JoinStore(o, "127.0.0.1", port_in.get());
  if (stage == 0) port_out->set_value(pg.ok() ? (*pg)->store_port() : 0);
  if (!pg.ok()) {
    out.error = pg.status().message();
    return out;
  }
  auto pp = (*pg)->NewSubgroup("pp", {0, 1}, std::chrono::milliseconds(20000));
  if (!pp.ok()) {
    out.error = pp.status().message();
    return out;
  }
  GptConfig c = SmallConfig(4);
  c.first_block = 2 * stage;
  c.stage_blocks = 2;
  auto model = BuildGpt(c, 3);
  if (!model.ok()) {
    out.error = model.status().message();
    return out;
  }
  auto links = GroupStageLinks(pp->get());
  const int m = 4;
  auto step = RunStageStep(**model, StageSchedule(s, stage, 2, m), stage, 2, Batches(c, m), *links, 0,
                           std::chrono::steady_clock::now());
  if (!step.ok()) {
    out.error = step.status().message();
    return out;
  }
  out.step = *step;
  for (const auto& np : (*model)->named_parameters()) out.grads[np.key()] = np.value().grad().clone();
  out.job = std::move(pg).value();
  out.pp = std::move(pp).value();
  return out;
}

void CheckTwoStages(PipelineSchedule s) {
  std::promise<int> port;
  std::shared_future<int> port_f = port.get_future().share();
  auto f0 = std::async(std::launch::async, RunStage, 0, s, &port, port_f);
  auto f1 = std::async(std::launch::async, RunStage, 1, s, nullptr, port_f);
  const StageOutcome s0 = f0.get(), s1 = f1.get();
  ASSERT_TRUE(s0.error.empty()) << s0.error;
  ASSERT_TRUE(s1.error.empty()) << s1.error;

  // The whole model on the same four micro-batches, each loss / 4.
  const GptConfig c = SmallConfig(4);
  auto whole = BuildGpt(c, 3);
  ASSERT_TRUE(whole.ok());
  double loss = 0;
  for (const auto& b : Batches(c, 4)) {
    at::Tensor l = (*whole)->Loss(b.inputs, b.targets, b.mask) / 4;
    loss += l.item<double>();
    l.backward();
  }
  EXPECT_NEAR(s1.step.loss, loss, 1e-6);
  auto expect = (*whole)->named_parameters();
  int checked = 0;
  for (const StageOutcome* st : {&s0, &s1}) {
    for (const auto& [name, g] : st->grads) {
      if (name == "wte.weight") continue;
      ++checked;
      EXPECT_TRUE(at::allclose(g, expect[name].grad(), 1e-4, 1e-6)) << name;
    }
  }
  EXPECT_EQ(checked, 4 * 12 + 3);
  EXPECT_TRUE(at::allclose(s0.grads.at("wte.weight") + s1.grads.at("wte.weight"), expect["wte.weight"].grad(),
                           1e-4, 1e-6));
  // Every micro-batch's forward and backward on both stages, timed.
  EXPECT_EQ(s0.step.slices.size(), 8u);
  EXPECT_EQ(s1.step.slices.size(), 8u);
  EXPECT_GT(s0.step.compute_ms, 0);
  // Stage 1 waits for stage 0's first activation; stage 0 for the gradients.
  EXPECT_GT(s1.step.recv_wait_ms, 0);
  EXPECT_GT(s0.step.recv_wait_ms, 0);
  EXPECT_EQ(s0.step.max_in_flight, s == PipelineSchedule::kGpipe ? 4 : 2);
  EXPECT_EQ(s1.step.max_in_flight, s == PipelineSchedule::kGpipe ? 4 : 1);
}

TEST(PipelineStages, GpipeOnTwoStagesMatchesTheWholeModel) { CheckTwoStages(PipelineSchedule::kGpipe); }

TEST(PipelineStages, OneFOneBOnTwoStagesMatchesTheWholeModel) { CheckTwoStages(PipelineSchedule::kOneFOneB); }

// ---- the memory model ----

using parallel::GptShape;

GptConfig ConfigOf(const GptShape& g) {
  GptConfig c;
  c.vocab_size = g.vocab;
  c.seq_len = g.seq;
  c.d_model = g.d_model;
  c.layers = g.layers;
  c.heads = g.heads;
  c.mlp_ratio = g.mlp_ratio;
  return c;
}

int64_t Numel(Gpt& m) {
  int64_t n = 0;
  for (const auto& p : m->parameters()) n += p.numel();
  return n;
}

TEST(MemoryModel, ParameterCountsAreTheShardsTheTrainerBuilds) {
  GptShape g;
  g.d_model = 32;
  g.layers = 5;
  g.heads = 4;
  g.seq = 16;
  g.vocab = 64;
  auto whole = BuildGpt(ConfigOf(g), 1);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(parallel::ParamCount(g), Numel(*whole));
  parallel::Workload w;
  for (int tp : {1, 2, 4}) {
    for (int pp : {1, 2, 3}) {
      parallel::Strategy s;
      s.tp = tp;
      s.pp = pp;
      const auto plan = parallel::PlanStrategy(g, w, s, 0);
      ASSERT_EQ(static_cast<int>(plan.stages.size()), pp);
      for (int stage = 0; stage < pp; ++stage) {
        GptConfig c = ConfigOf(g);
        c.tp_size = tp;
        int64_t first = 0, n = 0;
        parallel::StageBlocks(g.layers, stage, pp, &first, &n);
        c.first_block = first;
        c.stage_blocks = n;
        auto shard = BuildGpt(c, 1);
        ASSERT_TRUE(shard.ok()) << shard.status().message();
        EXPECT_EQ(plan.stages[stage].params, Numel(*shard))
            << "tp " << tp << " pp " << pp << " stage " << stage;
      }
    }
  }
}

// One micro-batch's forward and backward, gradients already allocated (as
// from the second step on): the activation peak the trainer reports.
int64_t MeasuredActivations(Gpt& m, const GptShape& g, int64_t b) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(3);
  at::Tensor t = at::randint(0, g.vocab, {b, g.seq + 1}, gen, at::TensorOptions().dtype(at::kLong));
  const at::Tensor x = t.narrow(1, 0, g.seq).contiguous(), y = t.narrow(1, 1, g.seq).contiguous();
  m->Loss(x, y, at::Tensor()).backward();
  for (auto& p : m->parameters()) p.mutable_grad().zero_();
  StepMemoryProbe probe;
  probe.Begin();
  m->Loss(x, y, at::Tensor()).backward();
  return probe.End();
}

TEST(MemoryModel, PredictedActivationsMatchTheMeasuredPeak) {
  InstallTrackingAllocator();
  struct Case {
    int64_t d, layers, heads, seq, vocab, b;
  };
  for (const Case& k : {Case{32, 2, 2, 32, 256, 4}, Case{64, 2, 4, 64, 256, 8}, Case{128, 4, 4, 32, 256, 4},
                        Case{64, 3, 2, 128, 512, 2}}) {
    GptShape g;
    g.d_model = k.d;
    g.layers = k.layers;
    g.heads = k.heads;
    g.seq = k.seq;
    g.vocab = k.vocab;
    auto m = BuildGpt(ConfigOf(g), 2);
    ASSERT_TRUE(m.ok());
    const double measured = static_cast<double>(MeasuredActivations(*m, g, k.b));
    const double predicted =
        static_cast<double>(parallel::BlockActivationBytes(g, k.b, 1, 4, g.layers) +
                            parallel::HeadSavedBytes(g, k.b, 4) + parallel::HeadBackwardBytes(g, k.b, 4));
    RecordProperty("ratio_d" + std::to_string(k.d) + "_s" + std::to_string(k.seq),
                   std::to_string(measured / predicted));
    EXPECT_GT(measured / predicted, 0.9) << "d " << k.d << " s " << k.seq << " b " << k.b << ": measured "
                                         << measured << ", predicted " << predicted;
    EXPECT_LT(measured / predicted, 1.1) << "d " << k.d << " s " << k.seq << " b " << k.b << ": measured "
                                         << measured << ", predicted " << predicted;
  }
}

TEST(MemoryModel, StrategiesTheShapeRulesOutSayWhy) {
  GptShape g;
  g.heads = 2;
  g.layers = 2;
  parallel::Strategy s;
  s.tp = 4;
  auto p = parallel::PlanStrategy(g, parallel::Workload{}, s, 0);
  EXPECT_FALSE(p.fits);
  ASSERT_EQ(p.why_not.size(), 1u);
  EXPECT_NE(p.why_not[0].find("does not divide the 2 heads"), std::string::npos) << p.why_not[0];
  s.tp = 1;
  s.pp = 3;
  p = parallel::PlanStrategy(g, parallel::Workload{}, s, 0);
  EXPECT_FALSE(p.fits);
  // A budget smaller than the weights alone.
  s.pp = 1;
  p = parallel::PlanStrategy(g, parallel::Workload{}, s, 1024);
  EXPECT_FALSE(p.fits);
  // World 8, 2 heads, 2 layers: TP 1-2 x PP 1-2 with DP the rest, ZeRO-1 beside plain DP.
  std::vector<std::string> names;
  for (const auto& c : parallel::CandidateStrategies(8, g)) names.push_back(c.Name());
  EXPECT_EQ(names,
            (std::vector<std::string>{"DP8", "DP8 ZeRO-1", "DP4 x PP2", "DP4 x TP2", "DP2 x TP2 x PP2"}));
}

}  // namespace
}  // namespace firedrill::agent
