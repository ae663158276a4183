// Model parallelism end to end, ranks as threads over Gloo: a DP2 x TP2 x
// PP2 gpt-tiny job on 8 ranks trains the model that plain data parallelism
// trains on 2 (same init, same batches, same global batch): every shard's
// weights after the run are its part of the data-parallel job's, the loss
// is the same step for step, and each rank reports its place in the mesh
// and each group's traffic.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "agent/gpt.h"
#include "parallel/mesh.h"
#include "tests/integration/rank_threads.h"

namespace firedrill::agent {
namespace {

namespace fs = std::filesystem;
using rank_threads::ExpectAllOk;
using rank_threads::RankConfig;
using rank_threads::RankResult;
using rank_threads::RunJob;

v1::JobSpec FourBlockGpt(int world) {
  v1::JobSpec job = rank_threads::SmallJob(world);
  auto* m = job.mutable_model();
  m->Clear();
  m->set_kind("gpt-tiny");
  m->set_hidden(32);
  m->set_layers(4);
  m->set_heads(4);
  m->set_seq_len(32);
  job.mutable_data()->set_batch_size(4);
  job.mutable_data()->set_variable_length(true);  // masks cross the stages too
  job.set_grad_accum_steps(4);
  // SGD: its update is linear in the gradient, so float rounding in the
  // sharded sums stays as small in the weights (AdamW's m/sqrt(v) turns a
  // near-zero gradient's rounding into a whole lr-sized step).
  job.mutable_optim()->Clear();
  job.mutable_optim()->set_kind("sgd");
  job.mutable_optim()->set_lr(0.1);
  job.mutable_optim()->set_momentum(0.9);
  job.mutable_comm()->set_timeout_s(20);
  job.set_steps(12);
  return job;
}

std::map<std::string, at::Tensor> Load(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::map<std::string, at::Tensor> out;
  for (const auto& kv : torch::pickle_load(bytes).toGenericDict())
    out[kv.key().toStringRef()] = kv.value().toTensor();
  return out;
}

std::vector<RankResult> RunExporting(const v1::JobSpec& job, const fs::path& dir) {
  std::vector<RankConfig> cfg(job.world_size());
  for (int r = 0; r < job.world_size(); ++r) {
    cfg[r].shared_memory = false;
    cfg[r].export_path = (dir / ("rank" + std::to_string(r) + ".pt")).string();
  }
  return RunJob(job, cfg);
}

TEST(ModelParallel, ThreeDimensionalJobTrainsTheDataParallelJobsModel) {
  const fs::path dir = fs::temp_directory_path() / ("fd-mp-" + std::to_string(::getpid()));
  fs::create_directories(dir / "dp");
  fs::create_directories(dir / "mp");
  const v1::JobSpec dp_job = FourBlockGpt(2);
  v1::JobSpec mp_job = FourBlockGpt(8);
  mp_job.mutable_parallel()->set_tp(2);
  mp_job.mutable_parallel()->set_pp(2);
  const auto dp = RunExporting(dp_job, dir / "dp");
  const auto mp = RunExporting(mp_job, dir / "mp");
  ExpectAllOk(dp);
  ExpectAllOk(mp);
  auto mesh = parallel::Mesh::Create(8, 2, 2, "");
  ASSERT_TRUE(mesh.ok());

  const auto whole = Load(dir / "dp" / "rank0.pt");
  int compared = 0;
  for (int r = 0; r < 8; ++r) {
    ASSERT_TRUE(mp[r].exported.ok()) << mp[r].exported.message();
    const parallel::Coords c = mesh->CoordsOf(r);
    for (const auto& [name, value] : Load(dir / "mp" / ("rank" + std::to_string(r) + ".pt"))) {
      ASSERT_TRUE(whole.count(name)) << "rank " << r << " holds " << name;
      const at::Tensor expect = TpShard(name, whole.at(name), c.tp, 2);
      ASSERT_TRUE(value.sizes().equals(expect.sizes())) << "rank " << r << " " << name;
      EXPECT_TRUE(at::allclose(value, expect, 1e-3, 2e-5))
          << "rank " << r << " " << name << ": max diff " << (value - expect).abs().max().item<double>();
      ++compared;
    }
    // Data-parallel replicas of a shard are the same bits.
    const int twin = mesh->RankOf({c.tp, 1 - c.dp, c.pp});
    ASSERT_EQ(mp[r].params.size(), mp[twin].params.size());
    EXPECT_EQ(std::memcmp(mp[r].params.data(), mp[twin].params.data(), mp[r].params.size() * sizeof(float)),
              0)
        << "ranks " << r << " and " << twin;
  }
  // Stage 0: wte, wpe and blocks 0-1; stage 1: blocks 2-3, ln_f and the
  // head's copy of wte; on each of 2 x 2 (tp, dp) places.
  EXPECT_EQ(compared, 4 * (2 + 2 * 12) + 4 * (2 * 12 + 3));

  // The same loss, step for step, and it falls.
  ASSERT_EQ(mp[0].reports.size(), dp[0].reports.size());
  for (size_t s = 0; s < dp[0].reports.size(); ++s)
    EXPECT_NEAR(mp[0].reports[s].loss(), dp[0].reports[s].loss(), 1e-4 * dp[0].reports[s].loss())
        << "step " << s;
  EXPECT_LT(mp[0].reports.back().loss(), mp[0].reports.front().loss());
  EXPECT_NEAR(mp[5].reports.back().grad_norm(), dp[0].reports.back().grad_norm(),
              1e-3 * dp[0].reports.back().grad_norm());

  for (int r = 0; r < 8; ++r) {
    const v1::StepReport& rep = mp[r].reports.back();
    const parallel::Coords c = mesh->CoordsOf(r);
    EXPECT_EQ(rep.mesh().tp(), c.tp);
    EXPECT_EQ(rep.mesh().dp(), c.dp);
    EXPECT_EQ(rep.mesh().pp(), c.pp);
    EXPECT_EQ(rep.mesh().tp_size() * rep.mesh().dp_size() * rep.mesh().pp_size(), 8);
    EXPECT_EQ(rep.mesh().order(), "tp-dp-pp");
    EXPECT_EQ(rep.mesh().schedule(), "1f1b");
    EXPECT_EQ(rep.global_batch(), 4 * 4 * 2);
    // Two blocks a stage, four all-reduces a block and micro-batch.
    EXPECT_EQ(rep.tp_allreduces(), 2 * 4 * 4) << "rank " << r;
    EXPECT_GT(rep.tp_comm_ms(), 0);
    // Each stage sends one [4, T, 32] fp32 tensor per micro-batch (T its
    // padded length), forward from stage 0, backward from stage 1.
    EXPECT_GT(rep.pp_send_bytes(), 0);
    EXPECT_EQ(rep.pp_send_bytes() % (4 * 32 * 4), 0);
    EXPECT_GT(rep.pp_bubble_fraction(), 0);
    EXPECT_LT(rep.pp_bubble_fraction(), 1);
    int forwards = 0, backwards = 0;
    for (const auto& sp : rep.spans()) {
      forwards += sp.name() == "forward";
      backwards += sp.name() == "backward";
    }
    EXPECT_EQ(forwards, 4);
    EXPECT_EQ(backwards, 4);
  }
  fs::remove_all(dir);
}

TEST(ModelParallel, RefusesWhatItCannotSplit) {
  v1::JobSpec job = rank_threads::SmallJob(2);  // the mlp
  job.mutable_parallel()->set_tp(2);
  auto res = RunJob(job, {});
  ASSERT_FALSE(res[0].status.ok());
  EXPECT_NE(res[0].status.message().find("splits gpt-tiny's blocks and heads; model.kind is mlp"),
            std::string::npos)
      << res[0].status.message();
  v1::JobSpec gpt = FourBlockGpt(4);
  gpt.mutable_parallel()->set_tp(3);
  res = RunJob(gpt, {});
  ASSERT_FALSE(res[0].status.ok());
  EXPECT_NE(res[0].status.message().find("must divide world_size 4"), std::string::npos)
      << res[0].status.message();
}

}  // namespace
}  // namespace firedrill::agent
