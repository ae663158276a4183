// `firedrill trace`: the Chrome trace built from ranks' step reports, and
// the --steps range.
#include "cli/trace.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <map>

namespace firedrill::cli {
namespace {

v1::TraceResponse TwoRanks() {
  v1::TraceResponse t;
  t.set_session_id("s-1");
  t.set_run("main");
  for (int r = 0; r < 2; ++r) {
    auto* rt = t.add_ranks();
    rt->set_rank(r);
    rt->set_host("node-" + std::to_string(r));
    auto* s = rt->add_steps();
    s->set_step(7);
    s->set_start_unix_ns(1'000'000'000 + r * 500'000);  // rank 1 starts 0.5 ms later
    s->set_step_ms(10);
    auto* f = s->add_spans();
    f->set_name("forward");
    f->set_start_ms(1);
    f->set_dur_ms(3);
    f->set_micro(0);
    auto* a = s->add_spans();
    a->set_name("allreduce");
    a->set_start_ms(5);
    a->set_dur_ms(2);
    a->set_micro(-1);
    a->set_seq(42);
    a->set_bytes(4096);
    a->set_bucket(1);
  }
  return t;
}

TEST(Trace, OneProcessPerRankWithStepComputeAndCommTracks) {
  const auto j = nlohmann::json::parse(ChromeTraceJson(TwoRanks()));
  ASSERT_TRUE(j.contains("traceEvents"));
  int names = 0, slices = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") {
      ++names;
      EXPECT_EQ(e["args"]["name"], "rank " + std::to_string(e["pid"].get<int>()) + " (node-" +
                                       std::to_string(e["pid"].get<int>()) + ")");
    }
    if (e["ph"] != "X") continue;
    ++slices;
    const int pid = e["pid"];
    const double base = pid * 500.0;  // microseconds since the earliest step
    if (e["tid"] == 0) {
      EXPECT_EQ(e["name"], "step 7");
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), base);
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 10000.0);
    } else if (e["tid"] == 1) {
      EXPECT_EQ(e["name"], "forward");
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), base + 1000.0);
      EXPECT_EQ(e["args"]["micro_batch"], 0);
    } else {
      EXPECT_EQ(e["tid"], 2);
      EXPECT_EQ(e["name"], "allreduce bucket 1 (seq 42)");
      EXPECT_EQ(e["args"]["bytes"], 4096);
      EXPECT_EQ(e["args"]["seq"], 42);
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 2000.0);
    }
  }
  EXPECT_EQ(names, 2);
  EXPECT_EQ(slices, 6);
}

// Every event against the Trace Event Format (the JSON Object Format that
// chrome://tracing and Perfetto read): the fields each phase needs, with the
// types the viewers expect. Metadata events carry what their name says:
// process_name/thread_name a string `name`, *_sort_index an integer
// `sort_index` (a string there is ignored, and the ranks come out unsorted).
TEST(Trace, EveryEventFollowsTheTraceEventFormat) {
  const auto j = nlohmann::json::parse(ChromeTraceJson(TwoRanks()));
  ASSERT_TRUE(j.is_object());
  ASSERT_TRUE(j["traceEvents"].is_array());
  EXPECT_TRUE(j["displayTimeUnit"] == "ms" || j["displayTimeUnit"] == "ns");
  std::map<int, int> sort_index;
  for (const auto& e : j["traceEvents"]) {
    SCOPED_TRACE(e.dump());
    ASSERT_TRUE(e["name"].is_string());
    ASSERT_TRUE(e["ph"].is_string());
    ASSERT_TRUE(e["pid"].is_number_integer());
    const std::string ph = e["ph"];
    if (ph == "M") {
      const std::string name = e["name"];
      ASSERT_TRUE(name == "process_name" || name == "thread_name" || name == "process_sort_index" ||
                  name == "thread_sort_index" || name == "process_labels")
          << name;
      ASSERT_TRUE(e["args"].is_object());
      if (name.rfind("_name") == name.size() - 5) EXPECT_TRUE(e["args"]["name"].is_string());
      if (name.rfind("_sort_index") == name.size() - 11) {
        ASSERT_TRUE(e["args"]["sort_index"].is_number_integer());
        if (name == "process_sort_index") sort_index[e["pid"]] = e["args"]["sort_index"];
      }
      if (name.rfind("thread_", 0) == 0) EXPECT_TRUE(e["tid"].is_number_integer());
    } else {
      ASSERT_EQ(ph, "X") << "only complete events are written";
      EXPECT_TRUE(e["tid"].is_number_integer());
      ASSERT_TRUE(e["ts"].is_number());
      ASSERT_TRUE(e["dur"].is_number());
      EXPECT_GE(e["dur"].get<double>(), 0);
      EXPECT_GE(e["ts"].get<double>(), 0);
      if (e.contains("args")) EXPECT_TRUE(e["args"].is_object());
    }
  }
  // Ranks sort in rank order.
  ASSERT_EQ(sort_index.size(), 2u);
  EXPECT_EQ(sort_index[0], 0);
  EXPECT_EQ(sort_index[1], 1);
}

// A pipeline: each rank says its stage, stages sort in stage order, and
// forward and backward slices name their micro-batch as the schedule
// diagrams do; tensor-parallel all-reduces sit inside them.
TEST(Trace, PipelineStagesReadTopToBottomWithNamedMicroBatches) {
  v1::TraceResponse t = TwoRanks();
  for (int r = 0; r < 2; ++r) {
    auto* s = t.mutable_ranks(r)->mutable_steps(0);
    auto* m = s->mutable_mesh();
    m->set_pp(1 - r);  // rank 0 is the last stage
    m->set_pp_size(2);
    m->set_tp_size(2);
    m->set_dp_size(1);
    s->mutable_spans(0)->set_micro(3);
    auto* b = s->add_spans();
    b->set_name("backward");
    b->set_start_ms(6);
    b->set_dur_ms(2);
    b->set_micro(3);
    auto* tp = s->add_spans();
    tp->set_name("tp allreduce");
    tp->set_start_ms(2);
    tp->set_dur_ms(0.5);
    tp->set_micro(-1);
  }
  const nlohmann::json j = nlohmann::json::parse(ChromeTraceJson(t));
  std::map<int, int> sort_index;
  std::map<int, std::string> names;
  int f3 = 0, b3 = 0, tps = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["name"] == "process_sort_index")
      sort_index[e["pid"].get<int>()] = e["args"]["sort_index"].get<int>();
    if (e["name"] == "process_name") names[e["pid"].get<int>()] = e["args"]["name"].get<std::string>();
    f3 += e["name"] == "F3";
    b3 += e["name"] == "B3";
    tps += e["name"] == "tp allreduce";
  }
  EXPECT_LT(sort_index[1], sort_index[0]) << "stage 0 (rank 1) above stage 1 (rank 0)";
  EXPECT_NE(names[0].find("stage 1"), std::string::npos) << names[0];
  EXPECT_NE(names[1].find("stage 0, tp 0 dp 0"), std::string::npos) << names[1];
  EXPECT_EQ(f3, 2);
  EXPECT_EQ(b3, 2);
  EXPECT_EQ(tps, 2);
}

TEST(Trace, StepRangeParsing) {
  v1::GetTraceRequest r;
  EXPECT_TRUE(ParseStepRange("", &r).ok());
  EXPECT_EQ(r.from_step(), 0);
  EXPECT_EQ(r.to_step(), 0) << "empty = the last steps";
  EXPECT_TRUE(ParseStepRange("100:120", &r).ok());
  EXPECT_EQ(r.from_step(), 100);
  EXPECT_EQ(r.to_step(), 120);
  EXPECT_TRUE(ParseStepRange("50:", &r).ok());
  EXPECT_EQ(r.from_step(), 50);
  EXPECT_EQ(r.to_step(), 0);
  for (const char* bad : {"10", "a:b", "20:10", "5:5", "-1:3"}) {
    const Status st = ParseStepRange(bad, &r);
    EXPECT_FALSE(st.ok()) << bad;
    EXPECT_NE(st.message().find(bad), std::string::npos) << st.message();
  }
}

}  // namespace
}  // namespace firedrill::cli
