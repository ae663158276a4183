// The flight recorder's cross-rank analysis on hand-made dumps.
#include "analysis/flight_records.h"
#include "cli/flight_recorder.h"

#include <gtest/gtest.h>

#include <sstream>

namespace firedrill::cli {
namespace {

using analysis::AnalyzeFlightRecords;
using analysis::FrAnalysis;

void Add(v1::RankFlightRecord* r, int64_t seq, const std::string& op, int64_t bytes, int64_t step,
         const std::string& state) {
  auto* e = r->add_entries();
  e->set_seq(seq);
  e->set_op(op);
  e->set_bytes(bytes);
  e->set_step(step);
  e->set_state(state);
  e->set_start_unix_ns(1'000'000'000);
  if (state != "started") e->set_end_unix_ns(1'002'000'000);
}

// Four ranks that completed #16; at #17 rank `odd` is in an all-reduce and
// the others in a barrier.
v1::FlightRecorderResponse Desync(int odd) {
  v1::FlightRecorderResponse fr;
  for (int r = 0; r < 4; ++r) {
    auto* x = fr.add_ranks();
    x->set_rank(r);
    x->set_host("node-" + std::to_string(r));
    x->set_answered(true);
    x->set_unix_ns(9'000'000'000);
    Add(x, 16, "allreduce", 405504, 14, "completed");
    if (r == odd) Add(x, 17, "allreduce", 405504, 15, "started");
    else Add(x, 17, "barrier", 0, 14, "started");
  }
  return fr;
}

TEST(FlightRecorderAnalysis, DifferentCollectivesAtOneSequenceNumberIsADesyncNamingTheMinority) {
  for (int odd : {0, 2}) {
    const FrAnalysis a = AnalyzeFlightRecords(Desync(odd));
    EXPECT_TRUE(a.stuck);
    EXPECT_TRUE(a.desync);
    EXPECT_EQ(a.odd_ranks, std::vector<int>{odd});
    EXPECT_NE(a.summary.find("wait in barrier #17"), std::string::npos) << a.summary;
    EXPECT_NE(a.summary.find("rank " + std::to_string(odd) + " waits in allreduce #17"), std::string::npos)
        << a.summary;
    EXPECT_NE(a.summary.find("for 8.0 s"), std::string::npos) << a.summary;
  }
}

TEST(FlightRecorderAnalysis, ARunningJobsRanksAFewCollectivesApartAreInFlightNotADesync) {
  // As `fr` saw a healthy throughput-halved job: ranks 1-3 have just
  // entered all-reduce #1222 while rank 0 finished #1220 a moment ago.
  v1::FlightRecorderResponse fr;
  for (int r = 0; r < 4; ++r) {
    auto* x = fr.add_ranks();
    x->set_rank(r);
    x->set_answered(true);
    x->set_unix_ns(5'000'000'000);
    auto* e = x->add_entries();
    e->set_op("allreduce");
    e->set_bytes(1 << 20);
    e->set_seq(r == 0 ? 1220 : 1222);
    e->set_state(r == 0 ? "completed" : "started");
    e->set_start_unix_ns(4'990'000'000);
    if (r == 0) e->set_end_unix_ns(4'998'000'000);
  }
  FrAnalysis a = AnalyzeFlightRecords(fr);
  EXPECT_FALSE(a.desync) << a.summary;
  EXPECT_FALSE(a.stuck) << a.summary;
  EXPECT_TRUE(a.odd_ranks.empty());
  EXPECT_NE(a.summary.find("in flight"), std::string::npos) << a.summary;
  EXPECT_EQ(a.summary.find("desync:"), std::string::npos) << a.summary;
  // The same picture after the ranks have stayed there for 6 s is one.
  for (auto& x : *fr.mutable_ranks()) x.set_unix_ns(x.unix_ns() + 6'000'000'000);
  a = AnalyzeFlightRecords(fr);
  EXPECT_TRUE(a.desync) << a.summary;
  EXPECT_EQ(a.odd_ranks, std::vector<int>{0});
}

TEST(FlightRecorderAnalysis, AgreeingRanksAreNotADesync) {
  auto fr = Desync(1);
  fr.mutable_ranks(1)->mutable_entries(1)->set_op("barrier");
  fr.mutable_ranks(1)->mutable_entries(1)->set_bytes(0);
  const FrAnalysis a = AnalyzeFlightRecords(fr);
  EXPECT_TRUE(a.stuck);
  EXPECT_FALSE(a.desync);
  EXPECT_TRUE(a.odd_ranks.empty());
  EXPECT_NE(a.summary.find("not a desync"), std::string::npos) << a.summary;
}

TEST(FlightRecorderAnalysis, HealthyAndSilentRanks) {
  v1::FlightRecorderResponse fr;
  for (int r = 0; r < 3; ++r) {
    auto* x = fr.add_ranks();
    x->set_rank(r);
    x->set_answered(r != 2);
    if (r != 2) Add(x, 40, "allreduce", 1024, 39, "completed");
  }
  const FrAnalysis a = AnalyzeFlightRecords(fr);
  EXPECT_FALSE(a.stuck);
  EXPECT_FALSE(a.desync);
  EXPECT_EQ(a.odd_ranks, std::vector<int>{2});
  EXPECT_NE(a.summary.find("no collective is in flight"), std::string::npos) << a.summary;
  EXPECT_NE(a.summary.find("rank 2 did not answer"), std::string::npos) << a.summary;
  std::ostringstream out;
  PrintFlightRecords(fr, a, 8, out);
  EXPECT_NE(out.str().find("rank 2 (): no answer"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("analysis: "), std::string::npos);
}

}  // namespace
}  // namespace firedrill::cli
