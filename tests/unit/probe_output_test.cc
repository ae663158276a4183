// `firedrill probe` output: sizes as nccl-tests takes them, the sweep table
// and the p2p matrix with its analysis, and the autopilot's reading of them.
#include <gtest/gtest.h>

#include <sstream>
#include <vector>

#include "cli/autopilot.h"
#include "cli/probe.h"

namespace firedrill::cli {
namespace {

TEST(ProbeOutput, SizesTakeNcclTestsSuffixes) {
  EXPECT_EQ(*ParseSize("8"), 8);
  EXPECT_EQ(*ParseSize("64K"), 64 << 10);
  EXPECT_EQ(*ParseSize("16M"), 16 << 20);
  EXPECT_EQ(*ParseSize("1g"), int64_t{1} << 30);
  EXPECT_EQ(ParseSize("12MB").status().message(), "bad size '12MB'; use e.g. 8, 64K, 16M, 1G");
  EXPECT_FALSE(ParseSize("").ok());
  EXPECT_FALSE(ParseSize("M").ok());
  EXPECT_FALSE(ParseSize("3T").ok());
}

v1::RunProbeResponse Sweep() {
  v1::RunProbeResponse r;
  r.mutable_spec()->set_op("allreduce");
  r.mutable_spec()->set_min_bytes(8);
  r.mutable_spec()->set_max_bytes(16);
  r.mutable_spec()->set_factor(2);
  r.mutable_spec()->set_iters(20);
  r.mutable_spec()->set_warmup_iters(5);
  r.set_world_size(2);
  r.set_step(17);
  r.set_transport("gloo");
  r.add_hosts("node-a");
  r.add_hosts("node-b");
  for (int64_t b : {8, 16}) {
    auto* row = r.add_rows();
    row->set_bytes(b);
    row->set_count(b / 4);
    row->set_type("float");
    row->set_redop("sum");
    row->set_root(-1);
    row->set_time_us(45.678);
    row->set_algbw_gbps(0.0001);
    row->set_busbw_gbps(0.0001);
  }
  r.set_avg_busbw_gbps(0.0001);
  return r;
}

TEST(ProbeOutput, SweepPrintsLikeAllReducePerf) {
  std::ostringstream out;
  PrintProbe(Sweep(), out);
  const std::string s = out.str();
  EXPECT_NE(s.find("# nThread 1 nGpus 1 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5 iters: 20"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("#  Rank  1 Group  0 on     node-b device cpu (gloo over TCP)"), std::string::npos) << s;
  EXPECT_NE(s.find("#       size         count      type   redop    root     time   algbw   busbw #wrong"),
            std::string::npos);
  EXPECT_NE(s.find("           8             2     float     sum      -1    45.68    0.00    0.00      0\n"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 0.0001"), std::string::npos) << s;
  EXPECT_NE(s.find("in-place"), std::string::npos);
}

v1::RunProbeResponse Matrix(int world, int slow, double fast_bw, double slow_bw) {
  v1::RunProbeResponse r;
  r.mutable_spec()->set_op("p2p");
  r.mutable_spec()->set_max_bytes(1 << 20);
  r.set_world_size(world);
  for (int i = 0; i < world; ++i) r.add_hosts("node-" + std::to_string(i));
  for (int s = 0; s < world; ++s)
    for (int d = 0; d < world; ++d) {
      if (s == d) continue;
      auto* p = r.add_pairs();
      p->set_src(s);
      p->set_dst(d);
      p->set_bw_gbps(s == slow || d == slow ? slow_bw + 0.01 * (s + d) : fast_bw + 0.01 * (s + d));
    }
  return r;
}

TEST(ProbeOutput, P2pFindsTheOneSlowRankWhenHalfThePairsInvolveIt) {
  const P2pAnalysis a = AnalyzeP2p(Matrix(4, 2, 1.5, 0.2));
  EXPECT_EQ(a.slow_ranks, std::vector<int>{2});
  EXPECT_TRUE(a.slow_src == 2 || a.slow_dst == 2);
  EXPECT_GT(a.upper_quartile_gbps, 1.0);
  const P2pAnalysis uniform = AnalyzeP2p(Matrix(4, -1, 1.5, 0.2));
  EXPECT_TRUE(uniform.slow_ranks.empty());
  std::ostringstream out;
  PrintProbe(Matrix(4, 2, 1.5, 0.2), out);
  EXPECT_NE(out.str().find("   D\\D       0       1       2       3\n"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("     2    0.22    0.23       -    0.25\n"), std::string::npos) << out.str();
}

TEST(ProbeOutput, AutopilotBlamesTheHostWhosePairsAreSlow) {
  AutopilotFinding before;
  before.found = true;
  before.cause = "slow-link";
  before.needs_probes = true;
  v1::RunProbeResponse ar = Sweep();
  auto f = ReasonProbes(before, ar, Matrix(4, 3, 1.5, 0.2));
  EXPECT_TRUE(f.found);
  EXPECT_EQ(f.ranks, std::vector<int>{3});
  ASSERT_EQ(f.fix.replace_host_ranks_size(), 1);
  EXPECT_EQ(f.fix.replace_host_ranks(0), 3);
  EXPECT_NE(f.evidence.find("node-3"), std::string::npos);
  // A uniformly slow fabric is no one host's fault.
  EXPECT_FALSE(ReasonProbes(before, ar, Matrix(4, -1, 0.2, 0.2)).found);
}

// Each point in forward order with its magnitudes; a point with no finite
// element shows no magnitude (not 0); no word of a verdict.
TEST(ProbeOutput, ActivationsShowEachPointAndNoMagnitudeWhereNothingIsFinite) {
  v1::RunProbeResponse r;
  r.mutable_spec()->set_op("activations");
  r.set_world_size(2);
  r.set_step(12);
  auto add = [&](const char* name, const char* dtype, double lo, double hi, int64_t inf, int64_t nan) {
    auto* a = r.add_activations();
    a->set_name(name);
    a->set_dtype(dtype);
    a->set_numel(100);
    a->set_abs_min(lo);
    a->set_abs_max(hi);
    a->set_inf(inf);
    a->set_nan(nan);
    a->set_ranks_nonfinite(inf + nan > 0 ? 2 : 0);
  };
  add("input", "float32", 0.11, 125000, 0, 0);
  add("layers.0.linear", "float16", 0, 0, 40, 60);
  std::ostringstream out;
  PrintProbe(r, out);
  const std::string text = out.str();
  EXPECT_NE(text.find("last batch (step 12)"), std::string::npos) << text;
  std::istringstream lines(text);
  std::string input, layer;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("input ", 0) == 0) input = line;
    if (line.rfind("layers.0.linear ", 0) == 0) layer = line;
  }
  auto columns = [](const std::string& line) {
    std::istringstream in(line);
    std::vector<std::string> cols;
    for (std::string c; in >> c;) cols.push_back(c);
    return cols;
  };
  // POINT DTYPE NUMEL "ABS MIN" "ABS MAX" INF NAN RANKS
  const auto in = columns(input), lay = columns(layer);
  ASSERT_EQ(in.size(), 8u) << text;
  ASSERT_EQ(lay.size(), 8u) << text;
  EXPECT_EQ(in[3], "1.10e-01");
  EXPECT_EQ(in[4], "1.25e+05");
  EXPECT_EQ(lay[3], "-");
  EXPECT_EQ(lay[4], "-");
  EXPECT_EQ(lay[5], "40");
  EXPECT_EQ(lay[6], "60");
  EXPECT_EQ(text.find("overflow"), std::string::npos) << "evidence, not a verdict: " << text;
}

TEST(ProbeOutput, ChecksumsShowEachRanksShortHashAndHowManyDiffer) {
  v1::RunProbeResponse r;
  r.mutable_spec()->set_op("checksum");
  r.set_world_size(2);
  r.set_step(40);
  r.add_hosts("node-0");
  r.add_hosts("node-1");
  r.set_transport("gloo");
  for (const char* name : {"0.weight", "0.bias"}) {
    auto* c = r.add_checksums();
    c->set_name(name);
    c->set_numel(name[2] == 'w' ? 8192 : 128);
    c->add_sha256("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
    c->add_sha256(name[2] == 'w' ? "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
                                 : "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
    c->set_distinct(name[2] == 'w' ? 2 : 1);
  }
  std::ostringstream out;
  PrintProbe(r, out);
  const std::string text = out.str();
  EXPECT_NE(text.find("SHA-256 of every parameter tensor"), std::string::npos) << text;
  EXPECT_NE(text.find("after step 40"), std::string::npos) << text;
  EXPECT_NE(text.find("TENSOR"), std::string::npos) << text;
  EXPECT_NE(text.find("RANK 1"), std::string::npos) << text;
  EXPECT_NE(text.find("01234567  fedcba98  2"), std::string::npos) << text;
  EXPECT_EQ(text.find("0123456789"), std::string::npos) << "hashes are shortened: " << text;
  EXPECT_NE(text.find("# 1 of 2 tensors hash the same on every rank"), std::string::npos) << text;
}

}  // namespace
}  // namespace firedrill::cli
