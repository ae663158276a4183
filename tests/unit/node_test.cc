// `firedrill node`: counter deltas and per-step means from step reports.
#include "cli/node.h"

#include <gtest/gtest.h>

#include <sstream>

namespace firedrill::cli {
namespace {

// Step `i` of a rank: cumulative cgroup counters grow by `periods` and
// `throttled` per step, 3 ms throttled per step when throttled.
v1::StepReport Step(int64_t i, int64_t quota_us, int64_t periods, int64_t throttled) {
  v1::StepReport s;
  s.set_step(i);
  s.set_step_ms(100);
  s.set_comm_ms(5);
  s.set_thread_cpu_ns(60'000'000);
  s.set_thread_wait_ns(i % 2 ? 10'000'000 : 20'000'000);
  auto* c = s.mutable_cpu();
  c->set_available(true);
  c->set_quota_us(quota_us);
  c->set_period_us(100000);
  c->set_nr_periods(1000 + i * periods);
  c->set_nr_throttled(500 + i * throttled);
  c->set_throttled_ns(7'000'000'000 + i * (throttled ? 3'000'000 : 0));
  return s;
}

v1::TraceResponse Trace() {
  v1::TraceResponse t;
  t.set_run("main");
  auto* healthy = t.add_ranks();
  healthy->set_rank(0);
  healthy->set_host("h0");
  auto* throttled = t.add_ranks();
  throttled->set_rank(1);
  throttled->set_host("h1");
  for (int64_t i = 40; i < 45; ++i) {
    *healthy->add_steps() = Step(i, -1, 0, 0);
    *throttled->add_steps() = Step(i, 25000, 10, 9);
  }
  t.add_ranks()->set_rank(2);  // nothing reported yet
  return t;
}

TEST(Node, CountersAreDeltasOverTheWindowAndTimesAreMeansPerStep) {
  const auto views = NodeViews(Trace(), -1);
  ASSERT_EQ(views.size(), 3u);
  const NodeView& h = views[0];
  const NodeView& t = views[1];
  EXPECT_EQ(h.quota_us, -1);
  EXPECT_EQ(h.throttled_periods, 0);
  EXPECT_EQ(t.quota_us, 25000);
  EXPECT_EQ(t.periods, 40) << "4 steps after the first one's end, 10 periods each";
  EXPECT_EQ(t.throttled_periods, 36);
  EXPECT_DOUBLE_EQ(t.throttled_ms_per_step, 3.0) << "not the counters since the cgroup was made";
  EXPECT_DOUBLE_EQ(t.cpu_ms, 60);
  EXPECT_DOUBLE_EQ(t.wait_ms, 16) << "(20+10+20+10+20)/5";
  EXPECT_DOUBLE_EQ(t.off_cpu_ms, 24);
  EXPECT_DOUBLE_EQ(t.comm_wait_ms, 5);
  EXPECT_EQ(views[2].steps, 0);
  ASSERT_EQ(NodeViews(Trace(), 1).size(), 1u);
  EXPECT_TRUE(NodeViews(Trace(), 7).empty());
}

// The quota takes hold inside the window: the thread reads its new
// cgroup's counters (from zero) from then on; nothing is subtracted across.
TEST(Node, AThreadThatMovedCgroupInTheWindowCountsEachCgroupsOwnSteps) {
  v1::TraceResponse t;
  auto* r = t.add_ranks();
  for (int64_t i = 0; i < 4; ++i) {
    auto s = i < 2 ? Step(i, -1, 0, 0) : Step(i - 2, 25000, 10, 9);  // steps 2, 3: a fresh cgroup
    s.set_step(i);
    if (i < 2) {
      s.mutable_cpu()->set_nr_periods(0);  // the root: no quota, no periods
      s.mutable_cpu()->set_nr_throttled(0);
      s.mutable_cpu()->set_throttled_ns(0);
    } else {
      s.mutable_cpu()->set_nr_periods(10 * (i - 1));  // 10, 20
      s.mutable_cpu()->set_nr_throttled(9 * (i - 1));
      s.mutable_cpu()->set_throttled_ns(3'000'000 * (i - 1));
    }
    *r->add_steps() = s;
  }
  const NodeView v = NodeViews(t, -1)[0];
  EXPECT_EQ(v.periods, 20);
  EXPECT_EQ(v.throttled_periods, 18);
  EXPECT_DOUBLE_EQ(v.throttled_ms_per_step, 2.0) << "6 ms over 3 step intervals";
  // And back: the thread leaves the quota's cgroup for one with fewer periods.
  *r->add_steps() = Step(4, -1, 0, 0);
  r->mutable_steps(4)->mutable_cpu()->set_nr_periods(0);
  EXPECT_EQ(NodeViews(t, -1)[0].periods, 20) << "a counter that went down counts nothing";
}

TEST(Node, PrintsEveryRankTheSameWay) {
  const auto tr = Trace();
  std::ostringstream out;
  PrintNode(tr, NodeViews(tr, -1), out);
  const std::string s = out.str();
  EXPECT_NE(s.find("0.25 CPU (quota 25000 us per 100000 us period)"), std::string::npos) << s;
  EXPECT_NE(s.find(": none\n"), std::string::npos) << s;
  EXPECT_EQ(s.find("10000 us"), std::string::npos) << "no period without a quota: it would mark a rank once slowed";
  EXPECT_NE(s.find(": 36 of 40"), std::string::npos) << s;
  EXPECT_NE(s.find(": 0 of 0"), std::string::npos) << s;
  EXPECT_NE(s.find("none reported yet"), std::string::npos) << s;
  EXPECT_EQ(s.find("SLOW"), std::string::npos);
  EXPECT_NE(NodeJson(tr, NodeViews(tr, 1)).find("\"throttled_periods\":36"), std::string::npos);
}

}  // namespace
}  // namespace firedrill::cli
