// Communication probes through the trainer, ranks as threads: they run at a
// step boundary the ranks agree on, measure real Gloo collectives with every
// element checked, leave training bitwise unchanged, and a degraded link on
// one host shows up the way it should: communication slower on every rank,
// compute unchanged, and only the pairs with that host slow.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>

#include "common/stats.h"
#include "tests/integration/rank_threads.h"

namespace firedrill::agent {
namespace {

using rank_threads::ExpectAllOk;
using rank_threads::RankConfig;
using rank_threads::RankResult;
using rank_threads::RunJob;
using rank_threads::SmallJob;

struct Probed {
  std::vector<RankResult> res;
  std::vector<std::vector<v1::ProbeReport>> reports;  // by rank: results
  std::vector<int> started;                           // by rank: "begun" notices
};

// Rank 0 posts each request to every rank's mailbox after the given step.
Probed RunWithProbes(const v1::JobSpec& job, const std::vector<std::pair<int64_t, v1::ProbeSpec>>& at,
                     std::vector<RankConfig> cfg = {}) {
  const int world = job.world_size();
  cfg.resize(world);
  auto reports = std::make_shared<std::vector<std::vector<v1::ProbeReport>>>(world);
  auto started = std::make_shared<std::vector<int>>(world);
  auto mu = std::make_shared<std::mutex>();
  std::vector<std::shared_ptr<ProbeMailbox>> boxes;
  for (int r = 0; r < world; ++r) {
    boxes.push_back(std::make_shared<ProbeMailbox>([reports, started, mu, r](const v1::ProbeReport& rep) {
      std::lock_guard<std::mutex> lock(*mu);
      if (rep.started()) {
        EXPECT_EQ(rep.rows_size() + rep.pairs_size(), 0);
        ++(*started)[r];
      } else {
        (*reports)[r].push_back(rep);
      }
    }));
    cfg[r].probes = boxes[r];
  }
  cfg[0].on_step = [&, boxes](const v1::StepReport& rep, std::atomic<bool>&) {
    for (size_t i = 0; i < at.size(); ++i) {
      if (rep.step() != at[i].first) continue;
      v1::RunProbe req;
      req.set_request_id(static_cast<int64_t>(i) + 1);
      *req.mutable_spec() = at[i].second;
      for (auto& b : boxes) b->Post(req);
    }
  };
  Probed p;
  p.res = RunJob(job, cfg);
  p.reports = *reports;
  p.started = *started;
  return p;
}

v1::ProbeSpec Spec(const std::string& op, int64_t min_bytes, int64_t max_bytes, int iters) {
  v1::ProbeSpec s;
  s.set_op(op);
  s.set_min_bytes(min_bytes);
  s.set_max_bytes(max_bytes);
  s.set_factor(4);
  s.set_iters(iters);
  s.set_warmup_iters(2);
  return s;
}

TEST(Probe, SweepsRunBetweenStepsCheckEveryElementAndLeaveTrainingUnchanged) {
  v1::JobSpec job = SmallJob(4);
  job.set_steps(36);
  const auto plain = RunJob(job, {});
  ExpectAllOk(plain);
  const Probed p = RunWithProbes(job, {{8, Spec("allreduce", 8, 1 << 16, 5)},
                                       {16, Spec("allgather", 64, 1 << 16, 5)},
                                       {24, Spec("reducescatter", 64, 1 << 16, 5)},
                                       {30, Spec("p2p", 1 << 16, 1 << 16, 5)}});
  ExpectAllOk(p.res);
  for (int r = 0; r < 4; ++r) {
    ASSERT_EQ(p.reports[r].size(), 4u) << "rank " << r;
    EXPECT_EQ(p.started[r], 4) << "rank " << r << " says when each probe begins";
    int64_t prev_step = 0;
    for (int i = 0; i < 3; ++i) {
      const auto& rep = p.reports[r][i];
      EXPECT_EQ(rep.error(), "") << "rank " << r;
      EXPECT_EQ(rep.request_id(), i + 1);
      EXPECT_GT(rep.step(), prev_step);
      prev_step = rep.step();
      // 8 B .. 64 KiB by 4: 7 sizes for all-reduce; all-gather and
      // reduce-scatter start at 64 B: 6.
      ASSERT_EQ(rep.rows_size(), i == 0 ? 7 : 6) << "rank " << r << " probe " << i;
      for (const auto& row : rep.rows()) {
        EXPECT_EQ(row.wrong(), 0) << "rank " << r << " probe " << i << " size " << row.bytes();
        EXPECT_GT(row.time_us(), 0);
        EXPECT_EQ(row.count() % (i == 0 ? 1 : 4), 0);
      }
    }
    // Every rank agreed on the boundary: the same step on all.
    EXPECT_EQ(p.reports[r][0].step(), p.reports[0][0].step());
    const auto& p2p = p.reports[r][3];
    EXPECT_EQ(p2p.error(), "");
    int sent = 0, received = 0;
    for (const auto& pair : p2p.pairs()) {
      EXPECT_EQ(pair.wrong(), 0);
      if (pair.src() == r) {
        ++sent;
        EXPECT_GT(pair.bw_gbps(), 0);
      }
      if (pair.dst() == r) ++received;
    }
    EXPECT_EQ(sent, 3);
    EXPECT_EQ(received, 3);
  }
  // Probes run on their own group, between steps: training is bitwise the
  // same with and without them.
  for (int r = 0; r < 4; ++r) {
    ASSERT_EQ(p.res[r].reports.size(), plain[r].reports.size());
    for (size_t i = 0; i < plain[r].reports.size(); ++i)
      EXPECT_EQ(p.res[r].reports[i].loss(), plain[r].reports[i].loss()) << "rank " << r << " step " << i;
    ASSERT_EQ(p.res[r].params.size(), plain[r].params.size());
    EXPECT_EQ(std::memcmp(p.res[r].params.data(), plain[r].params.data(), plain[r].params.size() * sizeof(float)), 0);
  }
}

// `probe checksum` hashes every parameter on every rank at the same step
// boundary. Replicas agree, until one host's memory flips a bit: then that
// one tensor on that one rank differs for the rest of the run, while the
// loss goes on falling (the averaged gradient is the same on every rank, so
// nothing pulls the replica back).
// `probe scaling` in a running job: one rank alone, then two, then four,
// each size's step timed on real autograd and a real all-reduce among its
// ranks; training goes on bitwise as without the probe.
TEST(Probe, ScalingTrainsTheModelOnOneTwoAndFourRanksAndLeavesTrainingUnchanged) {
  v1::JobSpec job = SmallJob(4);
  job.set_steps(8);
  v1::ProbeSpec spec;
  spec.set_op("scaling");
  spec.set_iters(4);
  spec.set_warmup_iters(1);
  const Probed p = RunWithProbes(job, {{3, spec}});
  ExpectAllOk(p.res);
  const auto plain = RunJob(job, {});
  ExpectAllOk(plain);
  for (int r = 0; r < 4; ++r) {
    ASSERT_EQ(p.reports[r].size(), 1u) << "rank " << r;
    const v1::ProbeReport& rep = p.reports[r][0];
    EXPECT_TRUE(rep.error().empty()) << rep.error();
    // Rank r takes part in the sizes above it: 1 (rank 0 only), 2, 4.
    std::vector<int> sizes;
    for (const auto& row : rep.scaling()) {
      sizes.push_back(row.ranks());
      EXPECT_GT(row.step_ms(), 0);
      EXPECT_EQ(row.samples_per_step(), job.data().batch_size());
      if (row.ranks() == 1)
        EXPECT_EQ(row.comm_ms(), 0);
      else
        EXPECT_GT(row.comm_ms(), 0) << "an all-reduce among " << row.ranks();
    }
    const std::vector<int> want = r == 0   ? std::vector<int>{1, 2, 4}
                                  : r == 1 ? std::vector<int>{2, 4}
                                           : std::vector<int>{4};
    EXPECT_EQ(sizes, want) << "rank " << r;
    EXPECT_EQ(
        std::memcmp(p.res[r].params.data(), plain[r].params.data(), p.res[r].params.size() * sizeof(float)),
        0)
        << "rank " << r << ": the probe moved the weights";
  }
}

TEST(Probe, ChecksumsAgreeAcrossReplicasUntilOneHostFlipsABit) {
  v1::JobSpec job = SmallJob(3);
  job.set_steps(30);
  v1::ProbeSpec checksum;
  checksum.set_op("checksum");
  auto hashes = [](const v1::ProbeReport& rep) {
    std::vector<std::string> out;
    for (const auto& c : rep.checksums()) out.push_back(c.sha256());
    return out;
  };
  const Probed healthy = RunWithProbes(job, {{5, checksum}, {25, checksum}});
  ExpectAllOk(healthy.res);
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ(healthy.reports[r].size(), 2u) << "rank " << r;
    for (const auto& rep : healthy.reports[r]) {
      EXPECT_EQ(rep.error(), "");
      ASSERT_EQ(rep.checksums_size(), 6) << "three linear layers: a weight and a bias each";
      EXPECT_EQ(rep.checksums(0).sha256().size(), 64u);
    }
    EXPECT_EQ(hashes(healthy.reports[r][1]), hashes(healthy.reports[0][1])) << "rank " << r;
  }
  EXPECT_NE(hashes(healthy.reports[0][0]), hashes(healthy.reports[0][1])) << "training moved the weights";

  v1::ResolvedFault flip;
  flip.set_kind("silent_divergence");
  flip.set_rank(1);
  flip.set_trigger_step(10);
  flip.mutable_silent_divergence()->set_tensor(0);
  flip.mutable_silent_divergence()->set_element(5);
  flip.mutable_silent_divergence()->set_bit(20);
  std::vector<RankConfig> cfg(3);
  cfg[1].faults = {flip};
  const Probed sdc = RunWithProbes(job, {{5, checksum}, {25, checksum}}, cfg);
  ExpectAllOk(sdc.res);
  for (int r = 0; r < 3; ++r) ASSERT_EQ(sdc.reports[r].size(), 2u) << "rank " << r;
  EXPECT_EQ(hashes(sdc.reports[1][0]), hashes(sdc.reports[0][0])) << "before the flip, the replicas agree";
  EXPECT_EQ(hashes(sdc.reports[2][1]), hashes(sdc.reports[0][1]));
  const auto after0 = hashes(sdc.reports[0][1]), after1 = hashes(sdc.reports[1][1]);
  for (size_t i = 0; i < after0.size(); ++i)
    EXPECT_EQ(after0[i] != after1[i], i == 0) << "tensor " << i << " (" << sdc.reports[1][1].checksums(i).name() << ")";
  // Exactly the flipped element differs at the end, and nothing failed.
  const auto& p0 = sdc.res[0].params;
  const auto& p1 = sdc.res[1].params;
  ASSERT_EQ(p0.size(), p1.size());
  std::vector<size_t> differ;
  for (size_t i = 0; i < p0.size(); ++i)
    if (std::memcmp(&p0[i], &p1[i], sizeof(float)) != 0) differ.push_back(i);
  EXPECT_EQ(differ, std::vector<size_t>{5});
  EXPECT_EQ(std::memcmp(p0.data(), sdc.res[2].params.data(), p0.size() * sizeof(float)), 0);
  for (const auto& st : sdc.res[1].reports) EXPECT_TRUE(std::isfinite(st.loss()));
  EXPECT_LT(sdc.res[1].reports.back().loss(), sdc.res[1].reports.front().loss());

  // From the first step, on rank 0 (as every run after the drill's own
  // starts a host's fault): after the parameter broadcast, so it neither
  // vanishes under rank 0's copy nor spreads with it.
  flip.set_rank(0);
  flip.set_trigger_step(0);
  std::vector<RankConfig> at_start(3);
  at_start[0].faults = {flip};
  const Probed first = RunWithProbes(job, {{5, checksum}}, at_start);
  ExpectAllOk(first.res);
  for (int r = 0; r < 3; ++r) ASSERT_EQ(first.reports[r].size(), 1u) << "rank " << r;
  EXPECT_NE(hashes(first.reports[0][0])[0], hashes(first.reports[1][0])[0]);
  EXPECT_EQ(hashes(first.reports[1][0]), hashes(first.reports[2][0]));
}

TEST(Probe, AJobToldToStopLeavesALongProbeTogether) {
  v1::JobSpec job = SmallJob(3);
  job.set_steps(40);
  std::vector<RankConfig> cfg(3);
  // Rank 2 is told to stop while the others post a probe that would run
  // for minutes: the ranks leave it together at the next size, and the job
  // stops after the same step everywhere.
  cfg[2].on_step = [](const v1::StepReport& rep, std::atomic<bool>& stop) {
    if (rep.step() == 5) stop = true;
  };
  const Probed p = RunWithProbes(job, {{4, Spec("allreduce", 8, 1 << 20, 1000)}}, cfg);
  ExpectAllOk(p.res);
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ(p.reports[r].size(), 1u) << "rank " << r;
    EXPECT_NE(p.reports[r][0].error().find("probe stopped: the job was told to stop"), std::string::npos)
        << p.reports[r][0].error();
    EXPECT_EQ(p.res[r].steps_done, p.res[0].steps_done);
    EXPECT_LT(p.res[r].steps_done, 10);
  }
}

TEST(Probe, ASlowLinkSlowsEveryRanksCommunicationAndP2pPointsAtItsHost) {
  v1::JobSpec job = SmallJob(4);
  job.set_steps(50);
  job.mutable_comm()->set_transport("gloo");
  std::vector<RankConfig> healthy_cfg(4), slow_cfg(4);
  for (auto& c : healthy_cfg) c.shared_memory = false;
  for (auto& c : slow_cfg) c.shared_memory = false;
  v1::ResolvedFault f;
  f.set_kind("slow_link");
  f.set_rank(2);
  f.set_host("node-2");
  f.set_trigger_step(0);
  f.mutable_slow_link()->set_latency_us(200);
  f.mutable_slow_link()->set_bandwidth_gbps(0.005);
  slow_cfg[2].faults = {f};
  const v1::ProbeSpec p2p = Spec("p2p", 1 << 18, 1 << 18, 4);
  const Probed healthy = RunWithProbes(job, {{30, p2p}}, healthy_cfg);
  const Probed slow = RunWithProbes(job, {{30, p2p}}, slow_cfg);
  ExpectAllOk(healthy.res);
  ExpectAllOk(slow.res);
  auto phase = [](const RankResult& r, bool comm) {
    std::vector<double> v;
    for (size_t i = 5; i < r.reports.size(); ++i)
      v.push_back(comm ? r.reports[i].comm_total_ms() : r.reports[i].forward_ms() + r.reports[i].backward_ms());
    return Median(v);
  };
  for (int r = 0; r < 4; ++r) {
    // ~26k parameters: 2 x 3/4 x 105 kB at 0.005 GB/s is 32 ms more per
    // all-reduce, on every rank, against 4-12 ms healthy (4 ranks on 2
    // cores; more when the machine is busy).
    EXPECT_GT(phase(slow.res[r], true), 2.0 * phase(healthy.res[r], true)) << "rank " << r;
    // Compute is the same everywhere (a generous bound on shared cores).
    EXPECT_LT(phase(slow.res[r], false), 2.0 * phase(healthy.res[r], false) + 0.5) << "rank " << r;
  }
  double with_min = 1e9, with_max = 0, without_min = 1e9;
  for (const auto& rep : slow.reports) {
    ASSERT_FALSE(rep.empty());
    ASSERT_EQ(rep[0].error(), "");
    for (const auto& pair : rep[0].pairs()) {
      if (pair.bw_gbps() <= 0) continue;  // the receiver's half
      if (pair.src() == 2 || pair.dst() == 2) {
        with_min = std::min(with_min, pair.bw_gbps());
        with_max = std::max(with_max, pair.bw_gbps());
      } else {
        without_min = std::min(without_min, pair.bw_gbps());
      }
    }
  }
  // Every pair with the slow host, in both directions, is well below every
  // pair without it.
  EXPECT_LT(with_max * 2, without_min) << "with rank 2: " << with_min << ".." << with_max << " GB/s";
}

}  // namespace
}  // namespace firedrill::agent
