#include "faults/targeting.h"

#include <gtest/gtest.h>

#include <set>
#include <utility>

namespace firedrill::faults {
namespace {

const std::vector<std::string> kHosts = {"host-a", "host-b", "host-c", "host-d"};

v1::Scenario StragglerScenario() {
  v1::Scenario s;
  s.mutable_job()->set_world_size(4);
  v1::FaultSpec* f = s.add_faults();
  f->set_kind("straggler");
  f->mutable_target()->mutable_host_of_rank()->mutable_draw()->set_lo(0);
  f->mutable_target()->mutable_host_of_rank()->mutable_draw()->set_hi(3);
  f->mutable_trigger()->mutable_step()->mutable_draw()->set_lo(30);
  f->mutable_trigger()->mutable_step()->mutable_draw()->set_hi(60);
  f->mutable_straggler()->set_slowdown(3.0);
  return s;
}

TEST(ResolveInt, ValueOrDraw) {
  v1::IntOrDraw v;
  v.set_value(7);
  EXPECT_EQ(ResolveInt(v, 1, "x"), 7);
  v.mutable_draw()->set_lo(2);
  v.mutable_draw()->set_hi(2);
  EXPECT_EQ(ResolveInt(v, 1, "x"), 2);
}

TEST(ResolveFaults, DeterministicPerSeedAndInRange) {
  const v1::Scenario s = StragglerScenario();
  std::set<std::pair<int, int64_t>> distinct;
  std::set<int> ranks;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    auto a = ResolveFaults(s, seed, kHosts);
    auto b = ResolveFaults(s, seed, kHosts);
    ASSERT_TRUE(a.ok()) << a.status().message();
    ASSERT_TRUE(b.ok());
    ASSERT_EQ(a->size(), 1u);
    const v1::ResolvedFault& f = (*a)[0];
    EXPECT_EQ(f.rank(), (*b)[0].rank());
    EXPECT_EQ(f.trigger_step(), (*b)[0].trigger_step());
    EXPECT_GE(f.rank(), 0);
    EXPECT_LE(f.rank(), 3);
    EXPECT_GE(f.trigger_step(), 30);
    EXPECT_LE(f.trigger_step(), 60);
    EXPECT_EQ(f.kind(), "straggler");
    EXPECT_DOUBLE_EQ(f.straggler().slowdown(), 3.0);  // params copied through
    distinct.emplace(f.rank(), f.trigger_step());
    ranks.insert(f.rank());
  }
  EXPECT_EQ(ranks.size(), 4u);  // every rank gets hit by some seed
  EXPECT_GT(distinct.size(), 50u);
}

TEST(ResolveFaults, HostOfRankBindsToTheHost) {
  v1::Scenario s = StragglerScenario();
  s.mutable_faults(0)->mutable_target()->mutable_host_of_rank()->set_value(2);
  auto r = ResolveFaults(s, 5, kHosts);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ((*r)[0].rank(), 2);
  EXPECT_EQ((*r)[0].host(), "host-c");
}

TEST(ResolveFaults, RankOutsideWorldIsAnError) {
  v1::Scenario s = StragglerScenario();
  s.mutable_faults(0)->mutable_target()->mutable_host_of_rank()->set_value(4);
  auto r = ResolveFaults(s, 5, kHosts);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "faults.0.target: rank 4 is outside 0..3");
  s.mutable_faults(0)->set_kind("gremlin");
  EXPECT_EQ(ResolveFaults(s, 5, kHosts).status().message(), "faults.0.kind: unknown fault kind 'gremlin'");
}

TEST(ResolveRankRef, GoodAndBadRefs) {
  std::vector<v1::ResolvedFault> faults(2);
  faults[1].set_rank(3);
  v1::RankRef ref;
  ref.set_rank(1);
  EXPECT_EQ(*ResolveRankRef(ref, faults), 1);
  ref.set_ref("$faults.1.target.rank");
  EXPECT_EQ(*ResolveRankRef(ref, faults), 3);
  ref.set_ref("$faults.2.target.rank");
  EXPECT_EQ(ResolveRankRef(ref, faults).status().message(),
            "reference '$faults.2.target.rank': the scenario has only 2 fault(s)");
  for (const char* bad : {"$faults..target.rank", "$faults.x.target.rank", "faults.0.target.rank",
                          "$faults.0.target.host", "$faults.-1.target.rank"}) {
    ref.set_ref(bad);
    auto r = ResolveRankRef(ref, faults);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().message(),
              std::string("reference '") + bad + "' is not of the form $faults.<index>.target.rank");
  }
  // An index too large for any integer type is an error, not an exception.
  ref.set_ref("$faults.99999999999999999999999.target.rank");
  EXPECT_FALSE(ResolveRankRef(ref, faults).ok());
}

TEST(FaultsFor, HostScopedFaultsFollowTheHost) {
  auto r = ResolveFaults(StragglerScenario(), 11, kHosts);
  ASSERT_TRUE(r.ok());
  const v1::ResolvedFault f = (*r)[0];
  const std::string host = f.host();
  // The rank that started on the bad host carries the fault...
  EXPECT_EQ(FaultsFor(*r, f.rank(), host).size(), 1u);
  // ...and loses it once rescheduled to a fresh host.
  EXPECT_TRUE(FaultsFor(*r, f.rank(), "host-spare").empty());
  // Another rank moved onto the bad host picks it up.
  EXPECT_EQ(FaultsFor(*r, (f.rank() + 1) % 4, host).size(), 1u);
}

TEST(FaultsFor, RankScopedFaultsFollowTheRank) {
  v1::ResolvedFault f;
  f.set_kind("straggler");
  f.set_rank(1);  // no host: rank-scoped
  const std::vector<v1::ResolvedFault> all = {f};
  EXPECT_EQ(FaultsFor(all, 1, "anywhere").size(), 1u);
  EXPECT_TRUE(FaultsFor(all, 0, "anywhere").empty());
}

}  // namespace
}  // namespace firedrill::faults
