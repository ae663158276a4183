// The controller's side of probes: defaults and limits of a request, the
// nccl-tests bus-bandwidth factors, and merging the ranks' reports.
#include "controller/probe_merge.h"

#include <gtest/gtest.h>

#include <map>

namespace firedrill::controller {
namespace {

v1::ProbeSpec Op(const std::string& op) {
  v1::ProbeSpec s;
  s.set_op(op);
  return s;
}

TEST(ProbeSpec, DefaultsAreAllReducePerfsUsualSweep) {
  auto s = NormalizeProbeSpec(Op("allreduce"));
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->min_bytes(), 8);
  EXPECT_EQ(s->max_bytes(), 16 << 20);
  EXPECT_EQ(s->factor(), 2);
  EXPECT_EQ(s->iters(), 20);
  EXPECT_EQ(s->warmup_iters(), 5);
  auto p = NormalizeProbeSpec(Op("p2p"));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->max_bytes(), 4 << 20);
  EXPECT_EQ(p->min_bytes(), p->max_bytes());
}

TEST(ProbeSpec, BadRequestsNameTheFlag) {
  EXPECT_EQ(NormalizeProbeSpec(Op("alltoall")).status().message(),
            "probe: unknown op 'alltoall'; known: allreduce, allgather, reducescatter, p2p, checksum, "
            "resume, activations, scaling");
  v1::ProbeSpec s = Op("allreduce");
  s.set_min_bytes(1 << 20);
  s.set_max_bytes(1 << 10);
  EXPECT_NE(NormalizeProbeSpec(s).status().message().find("--min must be between 4 B and --max (1024)"),
            std::string::npos);
  s = Op("allgather");
  s.set_max_bytes(int64_t{1} << 30);
  EXPECT_NE(NormalizeProbeSpec(s).status().message().find("--max must be between 4 B and 256 MiB"),
            std::string::npos);
  s = Op("allreduce");
  s.set_iters(5000);
  EXPECT_NE(NormalizeProbeSpec(s).status().message().find("--iters"), std::string::npos);
}

v1::ProbeReport Report(int rank, std::vector<std::pair<double, int64_t>> rows) {
  v1::ProbeReport r;
  r.set_rank(rank);
  r.set_step(42);
  int64_t bytes = 1 << 20;
  for (auto [us, wrong] : rows) {
    auto* row = r.add_rows();
    row->set_bytes(bytes);
    row->set_count(bytes / 4);
    row->set_type("float");
    row->set_redop("sum");
    row->set_root(-1);
    row->set_time_us(us);
    row->set_wrong(wrong);
    bytes *= 2;
  }
  return r;
}

TEST(ProbeMerge, AveragesTimeOverRanksAndSumsWrongElements) {
  auto spec = NormalizeProbeSpec(Op("allreduce"));
  auto m = MergeProbeReports(*spec, 4,
                             {Report(0, {{900, 0}, {2000, 0}}), Report(1, {{1100, 0}, {2000, 1}}),
                              Report(2, {{1000, 0}, {2000, 0}}), Report(3, {{1000, 0}, {2000, 2}})});
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->rows_size(), 2);
  EXPECT_DOUBLE_EQ(m->rows(0).time_us(), 1000);
  // 1 MiB in 1 ms: 1.048576 GB/s algbw, x 1.5 for a 4-rank all-reduce.
  EXPECT_NEAR(m->rows(0).algbw_gbps(), 1.048576, 1e-9);
  EXPECT_NEAR(m->rows(0).busbw_gbps(), 1.572864, 1e-9);
  EXPECT_EQ(m->rows(1).wrong(), 3);
  EXPECT_NEAR(m->avg_busbw_gbps(), (m->rows(0).busbw_gbps() + m->rows(1).busbw_gbps()) / 2, 1e-12);
  EXPECT_EQ(m->step(), 42);
}

TEST(ProbeMerge, RanksThatDisagreeOnTheSweepAreAnError) {
  auto spec = NormalizeProbeSpec(Op("allreduce"));
  auto m = MergeProbeReports(*spec, 2, {Report(0, {{1, 0}, {2, 0}}), Report(1, {{1, 0}})});
  EXPECT_FALSE(m.ok());
}

TEST(ProbeMerge, PairsTakeTheSendersTimeAndTheReceiversCount) {
  auto spec = NormalizeProbeSpec(Op("p2p"));
  v1::ProbeReport a, b;
  auto* s = a.add_pairs();  // rank 0 sent to 1
  s->set_src(0);
  s->set_dst(1);
  s->set_time_us(100);
  s->set_bw_gbps(2.5);
  auto* r = b.add_pairs();  // rank 1 received from 0
  r->set_src(0);
  r->set_dst(1);
  r->set_wrong(7);
  auto m = MergeProbeReports(*spec, 2, {a, b});
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->pairs_size(), 1);
  EXPECT_DOUBLE_EQ(m->pairs(0).bw_gbps(), 2.5);
  EXPECT_DOUBLE_EQ(m->pairs(0).time_us(), 100);
  EXPECT_EQ(m->pairs(0).wrong(), 7);
}

// Three ranks' hashes of two tensors; rank 2 holds a different "b".
std::vector<v1::ProbeReport> Hashes() {
  std::vector<v1::ProbeReport> out;
  for (int r : {2, 0, 1}) {  // in any order
    v1::ProbeReport rep;
    rep.set_rank(r);
    rep.set_step(40);
    for (const char* name : {"a", "b"}) {
      auto* c = rep.add_checksums();
      c->set_name(name);
      c->set_numel(name[0] == 'a' ? 6 : 3);
      c->set_sha256(std::string(name) + (r == 2 && name[0] == 'b' ? "-other" : "-same"));
    }
    out.push_back(rep);
  }
  return out;
}

TEST(ProbeChecksum, TakesNoSizesAndListsEveryTensorsHashByRank) {
  auto spec = NormalizeProbeSpec(Op("checksum"));
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  v1::ProbeSpec sized = Op("checksum");
  sized.set_max_bytes(1024);
  EXPECT_NE(NormalizeProbeSpec(sized).status().message().find("takes no sizes"), std::string::npos);

  auto m = MergeProbeReports(*spec, 3, Hashes());
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->step(), 40);
  ASSERT_EQ(m->checksums_size(), 2);
  EXPECT_EQ(m->checksums(0).name(), "a");
  EXPECT_EQ(m->checksums(0).numel(), 6);
  EXPECT_EQ(m->checksums(0).distinct(), 1);
  ASSERT_EQ(m->checksums(1).sha256_size(), 3);
  EXPECT_EQ(m->checksums(1).sha256(2), "b-other");
  EXPECT_EQ(m->checksums(1).sha256(0), "b-same");
  EXPECT_EQ(m->checksums(1).distinct(), 2);
}

TEST(ProbeActivations, TakesNoSizesAndMergesEachPointOverRanks) {
  auto spec = NormalizeProbeSpec(Op("activations"));
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  v1::ProbeSpec sized = Op("activations");
  sized.set_iters(3);
  EXPECT_NE(NormalizeProbeSpec(sized).status().message().find("takes no sizes"), std::string::npos);
  std::vector<v1::ProbeReport> reports(2);
  for (int r = 0; r < 2; ++r) {
    reports[r].set_rank(r);
    reports[r].set_step(12);
    auto* in = reports[r].add_activations();
    in->set_name("input");
    in->set_dtype("float32");
    in->set_numel(100);
    in->set_abs_max(r == 0 ? 10 : 20);
    in->set_abs_min(r == 0 ? 0.5 : 0.25);
    auto* out = reports[r].add_activations();
    out->set_name("layers.0.linear");
    out->set_dtype("float16");
    out->set_numel(200);
    out->set_abs_max(60000);
    out->set_inf(r == 1 ? 3 : 0);
  }
  auto m = MergeProbeReports(*spec, 2, reports);
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->activations_size(), 2);
  EXPECT_EQ(m->activations(0).name(), "input");
  EXPECT_EQ(m->activations(0).numel(), 200);
  EXPECT_EQ(m->activations(0).abs_max(), 20);
  EXPECT_EQ(m->activations(0).abs_min(), 0.25);
  EXPECT_EQ(m->activations(0).ranks_nonfinite(), 0);
  EXPECT_EQ(m->activations(1).dtype(), "float16");
  EXPECT_EQ(m->activations(1).inf(), 3);
  EXPECT_EQ(m->activations(1).ranks_nonfinite(), 1);
  reports[1].mutable_activations(1)->set_name("layers.1.linear");
  EXPECT_NE(MergeProbeReports(*spec, 2, reports).status().message().find("rank 1 ran other points"),
            std::string::npos);
}

TEST(ProbeScaling, TheSlowestParticipantSetsEachSizesRateAgainstOneRanks) {
  auto spec = NormalizeProbeSpec(Op("scaling"));
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->iters(), 10);
  EXPECT_EQ(spec->warmup_iters(), 2);
  v1::ProbeSpec sized = Op("scaling");
  sized.set_max_bytes(1024);
  EXPECT_NE(NormalizeProbeSpec(sized).status().message().find("takes no sizes"), std::string::npos);
  // World 4: 1 rank at 10 ms, 2 at 12 and 13, 4 at 20-25 ms; 8 samples a rank.
  std::vector<v1::ProbeReport> reports(4);
  const std::map<int, std::vector<double>> ms = {{1, {10}}, {2, {12, 13}}, {4, {20, 25, 21, 22}}};
  for (int r = 0; r < 4; ++r) {
    reports[r].set_rank(r);
    for (const auto& [n, times] : ms) {
      if (r >= n) continue;
      auto* row = reports[r].add_scaling();
      row->set_ranks(n);
      row->set_step_ms(times[r]);
      row->set_comm_ms(n > 1 ? times[r] - 9 : 0);
      row->set_samples_per_step(8);
      row->set_mfu(0.1 * 10 / times[r]);
    }
  }
  auto m = MergeProbeReports(*spec, 4, reports);
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->scaling_size(), 3);
  EXPECT_EQ(m->scaling(0).ranks(), 1);
  EXPECT_DOUBLE_EQ(m->scaling(0).samples_per_s(), 800);
  EXPECT_DOUBLE_EQ(m->scaling(0).efficiency(), 1);
  EXPECT_DOUBLE_EQ(m->scaling(1).step_ms(), 13) << "the slowest of the two";
  EXPECT_DOUBLE_EQ(m->scaling(1).samples_per_s(), 2 * 8 * 1000.0 / 13);
  EXPECT_NEAR(m->scaling(1).efficiency(), 10.0 / 13, 1e-12);
  EXPECT_DOUBLE_EQ(m->scaling(2).step_ms(), 25);
  EXPECT_DOUBLE_EQ(m->scaling(2).comm_ms(), 16);
  EXPECT_NEAR(m->scaling(2).efficiency(), 10.0 / 25, 1e-12);
  // A size with a participant missing is an error, not a rate.
  reports[3].clear_scaling();
  EXPECT_NE(
      MergeProbeReports(*spec, 4, reports).status().message().find("3 rank(s) reported the 4-rank step"),
      std::string::npos);
  // A size nobody reported, or one that is not run on this world, too.
  std::vector<v1::ProbeReport> only_one(4);
  for (int r = 0; r < 4; ++r) only_one[r].set_rank(r);
  auto* row = only_one[0].add_scaling();
  row->set_ranks(1);
  row->set_step_ms(10);
  row->set_samples_per_step(8);
  EXPECT_NE(MergeProbeReports(*spec, 4, only_one).status().message().find("no rank reported the 2-rank step"),
            std::string::npos);
  EXPECT_TRUE(MergeProbeReports(*spec, 1, {only_one[0]}).ok()) << "world 1: the one-rank step is all";
  std::vector<v1::ProbeReport> two(2);
  for (int r = 0; r < 2; ++r) {
    two[r].set_rank(r);
    for (int n : {1, 2, 3}) {
      if (r >= n) continue;
      auto* sized_row = two[r].add_scaling();
      sized_row->set_ranks(n);
      sized_row->set_step_ms(10 + n);
      sized_row->set_samples_per_step(8);
    }
  }
  EXPECT_NE(MergeProbeReports(*spec, 2, two)
                .status()
                .message()
                .find("a 3-rank step is not one of the sizes run on 2"),
            std::string::npos);
}

TEST(ProbeChecksum, RanksWithDifferentModelsOrAMissingRankAreErrors) {
  auto spec = NormalizeProbeSpec(Op("checksum"));
  ASSERT_TRUE(spec.ok());
  auto reports = Hashes();
  reports[0].mutable_checksums(1)->set_name("c");  // rank 2
  EXPECT_NE(MergeProbeReports(*spec, 3, reports).status().message().find("rank 2 holds other parameters"),
            std::string::npos);
  reports = Hashes();
  reports.pop_back();  // rank 1
  EXPECT_NE(MergeProbeReports(*spec, 3, reports).status().message().find("rank 1 did not report"),
            std::string::npos);
}

}  // namespace
}  // namespace firedrill::controller

namespace firedrill::controller {
namespace {

TEST(ProbeResume, TakesACheckpointAndAStepCountButNoSizes) {
  v1::ProbeSpec s;
  s.set_op("resume");
  auto spec = NormalizeProbeSpec(s);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->from_step(), 0) << "0: the newest checkpoint that verifies, chosen where the checkpoints are";
  s.set_iters(5);
  EXPECT_NE(NormalizeProbeSpec(s).status().message().find("takes no sizes or iterations"), std::string::npos);
  s.set_iters(0);
  s.set_resume_steps(500);
  EXPECT_NE(NormalizeProbeSpec(s).status().message().find("--steps must be between 1 and 200"), std::string::npos);
  v1::ProbeSpec sweep;
  sweep.set_op("allreduce");
  sweep.set_from_step(100);
  EXPECT_EQ(NormalizeProbeSpec(sweep).status().message(), "probe allreduce: --from and --steps are probe resume's");
}

// DP2 x TP2 x PP2 (tp-dp-pp: ranks 0,1 / 2,3 are stage 0's TP pairs of the
// two replicas, 4..7 stage 1's): rows per shard, hashes of its replicas only.
TEST(ProbeChecksum, AModelParallelJobComparesEachShardsReplicas) {
  auto spec = NormalizeProbeSpec(Op("checksum"));
  ASSERT_TRUE(spec.ok());
  std::vector<v1::ProbeReport> reports(8);
  for (int r = 0; r < 8; ++r) {
    const int tp = r % 2, pp = r / 4;
    reports[r].set_rank(r);
    reports[r].set_step(7);
    auto* c = reports[r].add_checksums();
    c->set_name(pp == 0 ? "h.0.mlp.c_fc.weight" : "h.1.mlp.c_fc.weight");
    c->set_numel(64);
    // Shards differ by place; rank 6 (stage 1, tp 0, replica 1) drifted.
    c->set_sha256("s" + std::to_string(pp) + "t" + std::to_string(tp) + (r == 6 ? "-drift" : ""));
  }
  v1::ParallelSpec par;
  par.set_tp(2);
  par.set_pp(2);
  auto m = MergeProbeReports(*spec, 8, reports, par);
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->checksums_size(), 4);
  EXPECT_EQ(m->checksums(0).name(), "[stage 0 tp 0] h.0.mlp.c_fc.weight");
  EXPECT_EQ(m->checksums(3).name(), "[stage 1 tp 1] h.1.mlp.c_fc.weight");
  // Stage 0, tp 0: ranks 0 and 2 hold it, the same bits.
  EXPECT_EQ(m->checksums(0).distinct(), 1);
  EXPECT_EQ(m->checksums(0).sha256(0), "s0t0");
  EXPECT_EQ(m->checksums(0).sha256(2), "s0t0");
  EXPECT_EQ(m->checksums(0).sha256(1), "");
  // Stage 1, tp 0: ranks 4 and 6, which differ.
  EXPECT_EQ(m->checksums(2).name(), "[stage 1 tp 0] h.1.mlp.c_fc.weight");
  EXPECT_EQ(m->checksums(2).distinct(), 2);
  EXPECT_EQ(m->checksums(2).sha256(6), "s1t0-drift");
  EXPECT_EQ(m->checksums(3).distinct(), 1);
  // Without the mesh the same reports are ranks holding other parameters.
  EXPECT_FALSE(MergeProbeReports(*spec, 8, reports).ok());
}

}  // namespace
}  // namespace firedrill::controller
